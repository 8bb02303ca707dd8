//! The ServiceAccount admission plugin on a Pod's create: a pod runs as `default` unless
//! it names another ServiceAccount, which must exist; unless the pod (or its
//! ServiceAccount) says `automountServiceAccountToken: false`, each container mounts the
//! projected API access volume `kube-api-access-<5>` (a bound token, the cluster CA of
//! `kube-root-ca.crt`, the namespace), whose token a kubelet mints for the pod and whose
//! ConfigMap the Node authorizer relates to the pod's node.

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::kubelet::refused;
use crate::support::Env;

const NAMESPACE: &str = "default";
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn pod_object(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "registry.k8s.io/pause:3.10"}]);
    spec["initContainers"] = json!([{"name": "i", "image": "registry.k8s.io/pause:3.10"}]);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("a Pod")
}

/// The stored pod's volumes and the mounts of its init container and container, as JSON.
fn volumes_and_mounts(pod: &Pod) -> (Vec<Value>, Vec<Value>) {
    let spec = serde_json::to_value(pod.spec.as_ref().expect("a spec")).unwrap();
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let mut mounts = list(&spec["initContainers"][0]["volumeMounts"]);
    mounts.extend(list(&spec["containers"][0]["volumeMounts"]));
    (list(&spec["volumes"]), mounts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_its_account_and_the_api_access_volume_unless_it_opts_out() {
    let env = Env::start().await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), NAMESPACE);
    let sas = Api::<ServiceAccount>::namespaced(env.client.clone(), NAMESPACE);
    let pp = PostParams::default();
    let quiet = env.name("fid-sa-quiet");
    let sa: ServiceAccount = serde_json::from_value(
        json!({"metadata": {"name": quiet}, "automountServiceAccountToken": false}),
    )
    .unwrap();
    sas.create(&pp, &sa).await.expect("the admin creates it");

    // No ServiceAccount named: `default`, and the volume in both containers.
    let plain = env.name("fid-sa-plain");
    let stored = pods
        .create(&pp, &pod_object(&plain, json!({})))
        .await
        .expect("the admin creates the pod");
    let spec = stored.spec.as_ref().unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let (volumes, mounts) = volumes_and_mounts(&stored);
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    let name = volumes[0]["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5,
        "{name}"
    );
    let projected = &volumes[0]["projected"];
    assert_eq!(projected["defaultMode"], 420);
    let sources = projected["sources"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        sources.get(..3).unwrap_or(&sources),
        [
            json!({"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}),
            json!({"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
            json!({"downwardAPI": {"items": [
                {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            ]}}),
        ]
    );
    // The real control plane's binaries come from a fork that adds its service CA (its
    // README lists the fork's traces); upstream adds nothing more.
    assert!(
        sources[3..]
            .iter()
            .all(|s| s["configMap"]["name"] == "openshift-service-ca.crt"),
        "{sources:?}"
    );
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_PATH});
    assert_eq!(mounts, [mount.clone(), mount]);

    // Opted out, by the pod or by its ServiceAccount: nothing; the pod's word wins.
    let cases = [
        (
            "the pod opts out",
            json!({"automountServiceAccountToken": false}),
            false,
        ),
        (
            "its ServiceAccount opts out",
            json!({"serviceAccountName": quiet}),
            false,
        ),
        (
            "the pod opts in over its ServiceAccount",
            json!({"serviceAccountName": quiet, "automountServiceAccountToken": true}),
            true,
        ),
    ];
    for (i, (what, spec, mounted)) in cases.into_iter().enumerate() {
        let name = env.name(&format!("fid-sa-{i}"));
        let stored = pods
            .create(&pp, &pod_object(&name, spec))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (volumes, mounts) = volumes_and_mounts(&stored);
        assert_eq!(
            (volumes.len(), mounts.len()),
            if mounted { (1, 2) } else { (0, 0) },
            "{what}: {volumes:?} {mounts:?}"
        );
        let _ = pods
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await;
    }

    // A ServiceAccount that does not exist: refused.
    let ghost = env.name("fid-sa-ghost");
    let (code, message) = refused(
        "a pod of a missing ServiceAccount",
        pods.create(
            &pp,
            &pod_object(&env.name("fid-sa-g"), json!({"serviceAccountName": ghost})),
        )
        .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains(&format!(
            "error looking up service account {NAMESPACE}/{ghost}: serviceaccount \"{ghost}\" not found"
        )),
        "{message}"
    );

    let _ = pods
        .delete(&plain, &DeleteParams::default().grace_period(0))
        .await;
    let _ = sas.delete(&quiet, &DeleteParams::default()).await;
}
