//! A ValidatingAdmissionPolicy with parameters (paramKind v1 ConfigMap, a binding's
//! paramRef with `parameterNotFoundAction`), matching subresources (`pods/binding`,
//! `serviceaccounts/token`, `nodes/status`) and seeing the Binding as `object` of a
//! pods/binding: the shape of the revocation-list policy (`install` ships it), here
//! limited by a match condition to this run's objects and users so that it cannot touch
//! anything else on a shared cluster. `request.subResource` (like `name` and `namespace`)
//! is absent, not "", when empty: guard it with `has()`.

use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeflavor_cluster::cache_lag::until_settled;
use serde_json::{Value, json};

use crate::kubelet::{kubelet, register};
use crate::support::Env;

const NAMESPACE: &str = "default";

fn policy(name: &str, run: &str) -> ValidatingAdmissionPolicy {
    let rule = |resources: &[&str], operations: &[&str]| json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": resources, "operations": operations});
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [
                rule(&["pods", "pods/binding"], &["CREATE"]),
                rule(&["nodes", "nodes/status"], &["CREATE", "UPDATE"]),
                rule(&["serviceaccounts/token"], &["CREATE"]),
            ]},
            "matchConditions": [{"name": "this-run", "expression":
                format!("request.name.contains('{run}') || request.userInfo.username.contains('{run}')")}],
            "validations": [
                {"expression": "!request.userInfo.username.startsWith('system:node:') || !has(params.data) || !(request.userInfo.username.substring(12) in params.data)",
                 "message": "the node is revoked"},
                {"expression": "!has(request.subResource) || request.subResource != 'binding' || !has(params.data) || !(object.target.name in params.data)",
                 "message": "pods may not be bound to a revoked node"},
                {"expression": "request.resource.resource != 'pods' || has(request.subResource) || !has(object.spec.nodeName) || !has(params.data) || !(object.spec.nodeName in params.data)",
                 "message": "pods may not be created on a revoked node"},
            ],
        },
    }))
    .expect("a policy")
}

fn binding(name: &str, list: &str, not_found: &str) -> ValidatingAdmissionPolicyBinding {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "paramRef": {"name": list, "namespace": NAMESPACE, "parameterNotFoundAction": not_found},
        },
    }))
    .expect("a binding")
}

fn pod_object(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("a Pod")
}

/// POSTs a Binding of `pod` to `node` through pods/<pod>/binding as `client`.
async fn bind(client: &kube::Client, pod: &str, node: &str) -> Result<Value, kube::Error> {
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let request = http::Request::post(format!("/api/v1/namespaces/{NAMESPACE}/pods/{pod}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("JSON"))
        .expect("a request");
    client.request::<Value>(request).await
}

/// The code of an API error, 200 for success.
fn code<T>(r: &Result<T, kube::Error>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{e}"),
    }
}

fn message<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => s.message.clone(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_with_a_config_map_parameter_refuses_listed_nodes_and_their_pods() {
    let env = Env::start().await;
    // The install's revocation-list binding first: kube-apiserver v1.36 stops the
    // informer of a built-in paramKind for good once no binding names that kind
    // (kubernetes/kubernetes#130887), so deleting this test's binding on a cluster with no
    // other ConfigMap-parameter binding would leave the install's policy unenforced for
    // the rest of the server's life.
    env.install().await;
    let name = env.name("fid-revoked");
    let (node, other) = (env.name("fid-listed"), env.name("fid-unlisted"));
    let kubelet = kubelet(&env, &node).await;
    register(&kubelet, &node, &[]).await;
    let config_maps = Api::<ConfigMap>::namespaced(env.client.clone(), NAMESPACE);
    let policies = Api::<ValidatingAdmissionPolicy>::all(env.client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone());
    let list: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": {node.clone(): "{\"reason\":\"RevokedByAdmin\"}"},
    }))
    .expect("a ConfigMap");
    let pp = PostParams::default();
    config_maps.create(&pp, &list).await.expect("the list");
    policies
        .create(&pp, &policy(&name, &env.run_id))
        .await
        .expect("the policy");
    bindings
        .create(&pp, &binding(&name, &name, "Allow"))
        .await
        .expect("the binding");

    let body = async {
        let own = Api::<Node>::all(kubelet.clone());
        let label =
            |v: &str| Patch::Merge(json!({"metadata": {"labels": {"example.com/fidelity": v}}}));
        let params = PatchParams::default();
        // A real server loads a new policy through an informer: wait until it refuses.
        let label_a = label("a");
        let refused = until_settled(
            Duration::from_secs(20),
            || own.patch(&node, &params, &label_a),
            |r| code(r) == 422,
        )
        .await;
        let text = message(refused);
        assert!(
            text.contains(&format!(
                "ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: the node is revoked"
            )),
            "{text}"
        );
        let status = message(own.patch_status(&node, &params, &label("b")).await);
        assert!(
            status.contains("the node is revoked"),
            "nodes/status: {status}"
        );

        // pods/binding sees the Binding: to the listed node refused, elsewhere allowed.
        let pods = Api::<Pod>::namespaced(env.client.clone(), NAMESPACE);
        let pending = env.name("fid-pending");
        pods.create(&pp, &pod_object(&pending, None))
            .await
            .expect("a pending pod");
        let text = message(bind(&env.client, &pending, &node).await);
        assert!(
            text.contains("pods may not be bound to a revoked node"),
            "{text}"
        );
        let bound = bind(&env.client, &pending, &other)
            .await
            .expect("binding to an unlisted node");
        assert_eq!(bound["status"], "Success", "{bound}");
        let stored = pods.get(&pending).await.expect("the pod");
        assert_eq!(
            stored.spec.and_then(|s| s.node_name).as_deref(),
            Some(other.as_str())
        );
        let conditions = stored.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
            "{conditions:?}"
        );
        let again = bind(&env.client, &pending, &other).await;
        assert_eq!(code(&again), 409, "{again:?}");

        // A pod created on the listed node.
        let text = message(
            pods.create(&pp, &pod_object(&env.name("fid-direct"), Some(&node)))
                .await,
        );
        assert!(
            text.contains("pods may not be created on a revoked node"),
            "{text}"
        );

        // The list gone: Allow lets the kubelet write again; Deny refuses every write.
        config_maps
            .delete(&name, &DeleteParams::default())
            .await
            .expect("delete the list");
        let label_c = label("c");
        let allowed = until_settled(
            Duration::from_secs(20),
            || own.patch(&node, &params, &label_c),
            |r| code(r) == 200,
        )
        .await;
        assert_eq!(code(&allowed), 200, "{allowed:?}");
        bindings
            .patch(
                &name,
                &params,
                &Patch::Merge(json!({"spec": {"paramRef": {"parameterNotFoundAction": "Deny"}}})),
            )
            .await
            .expect("the binding denies without its list");
        let label_d = label("d");
        let denied = until_settled(
            Duration::from_secs(20),
            || own.patch(&node, &params, &label_d),
            |r| matches!(r, Err(kube::Error::Api(s)) if s.message.contains("no params found")),
        )
        .await;
        assert_eq!(code(&denied), 422, "{denied:?}");
        let text = message(denied);
        assert!(
            text.ends_with(&format!("is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")),
            "{text}"
        );
    };
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    let dp = DeleteParams::default();
    let _ = bindings.delete(&name, &dp).await;
    let _ = policies.delete(&name, &dp).await;
    let _ = config_maps.delete(&name, &dp).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
