//! P7, durable: `kubeflavor node revoke` cuts a node off by itself, with no controller
//! running: the revocation list and its admission policy refuse the kubelet's writes, pods
//! created on the node or bound to it and a Node under its name; the node's pods are
//! deleted, so a ServiceAccount token its kubelet minted for one of them stops
//! authenticating and the Node authorizer no longer lets it read their Secrets and
//! ConfigMaps; its join token is spent, so its join line files no CSR for a new name; the
//! trail records it (`NodeRevoked`, by the CLI). Deleting the binding and the Node does not
//! un-revoke; `node forget` does. A revocation the leader cannot finish shows on its
//! /metrics.

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kubeflavor_core::token::BootstrapToken;
use serde_json::{Value, json};

use crate::harness::*;

/// A Pod bound to `node` (as the scheduler's binding would; pending without one) running
/// as `sa`, with `volumes`. The API server's ServiceAccount admission adds the projected
/// API access volume, whose token the kubelet mints.
fn pod_on(node: Option<&str>, name: &str, sa: &str, volumes: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": sa,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": volumes,
        },
    }))
    .unwrap()
}

/// A Pod as a DaemonSet's controller makes it for `node`: owned by the DaemonSet,
/// tolerating every taint (the revoked and unverified ones included).
fn daemon_pod_on(node: &str, name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
            "uid": "5e0c2a9e-1d2f-4b6a-9c3d-7e8f9a0b1c2d", "controller": true,
            "blockOwnerDeletion": true,
        }]},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }))
    .unwrap()
}

/// POSTs a Binding of `pod` (in `default`) to `node` through `pods/<pod>/binding`, as
/// the scheduler binds a pending pod.
async fn bind(client: &Client, pod: &str, node: &str) -> Result<Value, kube::Error> {
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let request = http::Request::post(format!("/api/v1/namespaces/default/pods/{pod}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    client.request::<Value>(request).await
}

/// Whether `client` may read `name` of `api`: `Ok(true)` read, `Ok(false)` refused
/// (403), other errors as they are. A missing object the client may read counts as read
/// (testkube publishes no `kube-root-ca.crt`).
async fn may_read<K>(api: &Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get(name).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            assert!(
                s.message.contains("no relationship found between node"),
                "the Node authorizer's refusal: {}",
                s.message
            );
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Waits until `client` may (`readable`) or may not read `name` of `api`: the Node
/// authorizer's graph follows pods through an informer, a moment behind the API.
async fn until_readable<K>(what: &str, api: &Api<K>, name: &str, readable: bool)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    // The same bounded wait the API server's other caches get (cache_lag), then a
    // check: a graph that never catches up fails here.
    let answer = kubeflavor_cluster::cache_lag::until_settled(
        crate::support::WAIT,
        || may_read(api, name),
        |answer| matches!(answer, Ok(r) if *r == readable),
    )
    .await;
    assert_eq!(answer.expect(what), readable, "{what}");
}

fn node_object(name: &str) -> Node {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        .unwrap()
}

/// Whether the API server authenticates `token` (a TokenReview, as an admin).
async fn authenticates(admin: &Client, token: &str) -> bool {
    let review: TokenReview = serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
    let answer = Api::<TokenReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("token review");
    answer.status.and_then(|s| s.authenticated).unwrap_or(false)
}

/// The code and message of a refused request.
fn refusal<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

async fn listed(admin: &Client, node: &str) -> bool {
    Api::<ConfigMap>::namespaced(admin.clone(), "kube-system")
        .get_opt("kubeflavor-revoked-nodes")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .is_some_and(|d| d.contains_key(node))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_revoke_alone_cuts_the_node_off_for_good_until_forgotten() {
    let h = Harness::start().await;
    let f = h.gold_flavor("rv");
    let f = f.await;
    // A token for two names: after revocation its join line must join neither a new one.
    let t = h.token(&f, 2, None).await;
    let node = h.name("rv");
    let boot = h.bootstrap_client(&t).await;
    let ctl = h.start_controller(h.options("ctl"));
    let csr = format!("{node}-csr");
    h.submit_csr(&boot, &csr, &node).await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.register_node(&csr, &node, &[], &[]).await;
    let kubelet = h.node_client(&csr).await;
    // No controller from here on: the revocation must not need one.
    ctl.stop().await;

    let ns = "default";
    let (sa, pod) = (h.name("rv-sa"), h.name("rv-p"));
    let (secret, config) = (h.name("rv-s"), h.name("rv-cm"));
    let pp = PostParams::default();
    let admin_pods = Api::<Pod>::namespaced(h.admin.clone(), ns);
    let admin_sas = Api::<ServiceAccount>::namespaced(h.admin.clone(), ns);
    let admin_secrets = Api::<Secret>::namespaced(h.admin.clone(), ns);
    let admin_configs = Api::<ConfigMap>::namespaced(h.admin.clone(), ns);
    let sa_obj: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap();
    admin_sas.create(&pp, &sa_obj).await.unwrap();
    let secret_obj: Secret =
        serde_json::from_value(json!({"metadata": {"name": secret}, "stringData": {"k": "v"}}))
            .unwrap();
    admin_secrets.create(&pp, &secret_obj).await.unwrap();
    let config_obj: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": config}, "data": {"k": "v"}})).unwrap();
    admin_configs.create(&pp, &config_obj).await.unwrap();
    let volumes = json!([
        {"name": "s", "secret": {"secretName": secret}},
        {"name": "c", "configMap": {"name": config}},
    ]);
    let created = admin_pods
        .create(&pp, &pod_on(Some(&node), &pod, &sa, volumes))
        .await
        .unwrap();
    let pod_uid = created.metadata.uid.clone().unwrap();
    // Its kubelet reads what the pod mounts: the Node authorizer relates them to the node
    // through the pod. (The webhook is not asked about this node: the real control plane
    // asks it only about nodes named authz-*, and testkube has none configured here. That
    // is what the webhook's NoOpinion fallback leaves when it cannot answer: Node and RBAC
    // decide.)
    let kubelet_secrets = Api::<Secret>::namespaced(kubelet.clone(), ns);
    let kubelet_configs = Api::<ConfigMap>::namespaced(kubelet.clone(), ns);
    until_readable(
        "the kubelet to read its pod's Secret",
        &kubelet_secrets,
        &secret,
        true,
    )
    .await;
    until_readable(
        "the kubelet to read its pod's ConfigMap",
        &kubelet_configs,
        &config,
        true,
    )
    .await;

    // The kubelet mints a token for its pod's ServiceAccount, as it does for every pod.
    let minted = {
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [],
                "expirationSeconds": 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid},
            },
        });
        let answer: serde_json::Value = Api::<ServiceAccount>::namespaced(kubelet.clone(), ns)
            .create_subresource("token", &sa, &pp, &request)
            .await
            .expect("the kubelet mints a token for its own pod");
        let token = answer["status"]["token"].as_str().unwrap().to_string();
        assert!(
            authenticates(&h.admin, &token).await,
            "the pod's token works before revocation"
        );
        token
    };

    // Revoke, with no controller running.
    let out = h.env.kf(&["node", "revoke", &node]).await;
    let text = out.expect_ok();
    eprintln!("node revoke {node}:\n{text}");
    for step in [
        "[list] node",
        "[binding] FlavorBinding",
        "[taint] Node",
        "[pods] 1 pod(s) deleted",
        "[token] token",
    ] {
        assert!(text.contains(step), "{step} missing:\n{text}");
    }
    assert!(text.contains("spent"), "{text}");
    assert!(listed(&h.admin, &node).await);
    // The trail says who revoked it and what each step did, with the CLI as its reporter.
    let event = trail_event(
        &h,
        kubeflavor::cmd::revoke_steps::REPORTING,
        &node,
        &[&format!("node {node} revoked by")],
    )
    .await;
    assert_eq!(event.reason.as_deref(), Some("NodeRevoked"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let regarding = event.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("FlavorBinding"));
    let note = event.note.as_deref().unwrap_or_default();
    for step in [
        "(RevokedByAdmin)",
        "[list] node",
        "[pods] 1 pod(s) deleted",
        "[token] token",
    ] {
        assert!(note.contains(step), "{step} missing from the trail: {note}");
    }

    // Its pod is gone, and with it the token minted for it.
    assert!(
        admin_pods.get_opt(&pod).await.unwrap().is_none(),
        "the pod is deleted at once"
    );
    {
        let token = &minted;
        // kube-apiserver caches a successful token authentication for 10 s
        // (TokenSuccessCacheTTL, pkg/kubeapiserver/options/authentication.go; measured
        // 10.0 s), so a token used a moment ago is accepted that long after its pod is
        // gone. There is nothing to watch, so the review is repeated every 250 ms.
        let started = std::time::Instant::now();
        within("the pod's token to stop authenticating", async {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
            loop {
                tick.tick().await;
                if !authenticates(&h.admin, token).await {
                    break;
                }
            }
        })
        .await;
        eprintln!(
            "a token minted for the pod before revocation refused {:?} after the pod's deletion",
            started.elapsed()
        );
    }
    // Nor may its kubelet read what the pod mounted, the ConfigMap the ServiceAccount
    // admission mounted (the cluster CA) included: nothing relates them to the node now.
    until_readable(
        "the pod's Secret to be refused",
        &kubelet_secrets,
        &secret,
        false,
    )
    .await;
    until_readable(
        "the pod's ConfigMap to be refused",
        &kubelet_configs,
        &config,
        false,
    )
    .await;
    until_readable(
        "the pod's kube-root-ca.crt to be refused",
        &kubelet_configs,
        "kube-root-ca.crt",
        false,
    )
    .await;
    // Its Node carries both taints, set by the command itself.
    let n = h.nodes().get(&node).await.unwrap();
    assert!(has_taint(&n, "kubeflavor.io/revoked") && has_taint(&n, "kubeflavor.io/unverified"));
    // Its join token is spent: the join line files no CSR for a new name.
    assert!(
        h.token_secret(&t).await.is_none(),
        "the token Secret is deleted"
    );
    let new_name = h.name("rv-new");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let filed = csr_object(
        &format!("{new_name}-csr"),
        &format!("system:node:{new_name}"),
        &["system:nodes"],
        &key,
    );
    let boot_csrs =
        Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(boot.clone());
    within("the spent token to stop authenticating", async {
        loop {
            match boot_csrs.create(&pp, &filed).await {
                Err(kube::Error::Api(s)) if s.code == 401 => break,
                Err(e) => panic!("expected 401 for a spent token, got {e:?}"),
                // The API server's token cache may still hold the Secret for a moment; the
                // CSR it let through is deleted and the check repeats.
                Ok(_) => {
                    let _ = h
                        .csrs()
                        .delete(&format!("{new_name}-csr"), &DeleteParams::default())
                        .await;
                    tokio::task::yield_now().await;
                }
            }
        }
    })
    .await;
    // `node get` and the binding say so.
    let out = h.env.kf(&["node", "get", &node]).await;
    let text = out.expect_ok();
    assert!(
        standing_line(text, "Token:").starts_with("spent (TokenSecretDeleted"),
        "{text}"
    );
    assert!(
        standing_line(text, "Pods:").starts_with("removed (PodsDeleted: 1 pod(s) deleted"),
        "{text}"
    );
    assert!(standing_line(text, "Listed:").starts_with("yes"), "{text}");

    {
        // The kubelet may write nothing; no Pod may be created on the node.
        let (code, message) = refusal(
            "the revoked kubelet deletes its own Node",
            Api::<Node>::all(kubelet.clone())
                .delete(&node, &DeleteParams::default())
                .await,
        );
        assert!(code == 422 || code == 403, "{code} {message}");
        let (code, message) = refusal(
            "a Pod created on the revoked node, as a DaemonSet's controller makes it",
            admin_pods
                .create(&pp, &daemon_pod_on(&node, &h.name("rv-ds")))
                .await,
        );
        assert_eq!(code, 422, "{message}");
        assert!(
            message.contains("no Pod may be created on a revoked node"),
            "{message}"
        );
        // A pending pod may be created, but not bound there, as the scheduler would.
        let pending = h.name("rv-pending");
        admin_pods
            .create(&pp, &pod_on(None, &pending, &sa, json!([])))
            .await
            .expect("a pending pod");
        let (code, message) = refusal(
            "a pod bound to the revoked node",
            bind(&h.admin, &pending, &node).await,
        );
        assert_eq!(code, 422, "{message}");
        assert!(
            message.contains("no Pod may be bound to a revoked node"),
            "{message}"
        );
        let stored = admin_pods.get(&pending).await.unwrap();
        let bound_to = stored.spec.and_then(|s| s.node_name);
        assert_eq!(bound_to, None, "the pod stays pending");
        admin_pods
            .delete(&pending, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }

    // Deleting the binding and the Node does not un-revoke: the kubelet cannot create its
    // Node again, and the name stays listed.
    h.bindings()
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    h.nodes()
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    assert!(listed(&h.admin, &node).await, "still listed");
    {
        let (code, message) = refusal(
            "the revoked kubelet re-creates its Node",
            Api::<Node>::all(kubelet.clone())
                .create(&pp, &node_object(&node))
                .await,
        );
        assert_eq!(code, 422, "{message}");
        assert!(message.contains("kubeflavor-revoked-nodes"), "{message}");
    }
    let out = h.env.kf(&["node", "revoke", &node]).await;
    let text = out.expect_ok();
    assert!(
        text.contains("[list] node") && text.contains("already in"),
        "a re-run is idempotent:\n{text}"
    );

    // `node forget` un-revokes: the kubelet registers again, as a node nobody judged.
    let out = h.env.kf(&["node", "forget", &node]).await;
    let text = out.expect_ok();
    assert!(
        text.contains(&format!(
            "node {node} removed from kube-system/kubeflavor-revoked-nodes"
        )),
        "{text}"
    );
    assert!(!listed(&h.admin, &node).await);
    let back = within("the forgotten kubelet to register again", async {
        loop {
            match Api::<Node>::all(kubelet.clone())
                .create(&pp, &node_object(&node))
                .await
            {
                Ok(n) => break n,
                // The policy's parameter is read from the API server's cache: a moment.
                Err(kube::Error::Api(s)) if s.code == 422 => tokio::task::yield_now().await,
                Err(e) => panic!("the forgotten kubelet registers again: {e:?}"),
            }
        }
    })
    .await;
    assert!(has_taint(&back, "kubeflavor.io/unverified") || h.testkube().is_some());
    let out = h.env.kf(&["node", "forget", &node]).await;
    out.expect_ok();
    let out = h.env.kf(&["node", "forget", &node]).await;
    assert_eq!(out.code, kubeflavor::exit::ExitCode::NotFound, "{out:?}");

    let dp = DeleteParams::default();
    let _ = admin_sas.delete(&sa, &dp).await;
    let _ = admin_secrets.delete(&secret, &dp).await;
    let _ = admin_configs.delete(&config, &dp).await;
}

/// A revocation that did not run to the end (here: only the binding's condition, as an
/// older CLI wrote it) is finished by the leader: the name is listed, its join token
/// spent, and the pods that landed on the node before it was listed are deleted. A pod
/// created there afterwards is refused by admission; where the policy is missing (its
/// binding deleted: testkube only, the real cluster's is shared), the leader deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_finishes_a_revocation_it_finds_and_keeps_pods_off() {
    let h = Harness::start().await;
    let (t, node, ctl) = joined_with_a_use_left(&h, "rvl").await;

    // A pod lands on the node while nothing is revoked: admission lets it through.
    let pp = PostParams::default();
    let pods = Api::<Pod>::namespaced(h.admin.clone(), "default");
    let early = h.name("rvl-early");
    let landed = pods
        .create(&pp, &pod_on(Some(&node), &early, "default", json!([])))
        .await
        .expect("a pod on a node not revoked");

    revoke_binding(&h, &node).await;
    within(
        "the leader to list the name",
        kube::runtime::wait::await_condition(
            Api::<ConfigMap>::namespaced(h.admin.clone(), "kube-system"),
            "kubeflavor-revoked-nodes",
            |cm: Option<&ConfigMap>| {
                cm.and_then(|c| c.data.as_ref())
                    .is_some_and(|d| d.contains_key(&node))
            },
        ),
    )
    .await
    .unwrap();
    h.token_gone(&t).await;
    leader_deletes(
        "the pod that landed before the name was listed",
        &pods,
        &early,
        &landed,
    )
    .await;

    // From now on admission refuses a pod there.
    let (code, message) = refusal(
        "a pod created on the listed node",
        pods.create(
            &pp,
            &pod_on(Some(&node), &h.name("rvl-p"), "default", json!([])),
        )
        .await,
    );
    assert_eq!(code, 422, "{message}");

    // Without the policy, the leader deletes such a pod as it appears.
    if h.testkube().is_some() {
        use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
        Api::<ValidatingAdmissionPolicyBinding>::all(h.admin.clone())
            .delete(
                kubeflavor_core::node::revocation_list::POLICY_NAME,
                &DeleteParams::default(),
            )
            .await
            .expect("the policy's binding deleted");
        let late = h.name("rvl-late");
        let created = pods
            .create(&pp, &pod_on(Some(&node), &late, "default", json!([])))
            .await
            .expect("without the policy nothing refuses the pod");
        leader_deletes("the pod bound to the revoked node", &pods, &late, &created).await;
    } else {
        crate::support::skip("the policy-less case deletes the shared policy's binding");
    }
    ctl.stop().await;
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
}

/// A node joined under a running controller with a token of two uses: one is left, so the
/// controller does not delete the token as exhausted (P4) and its deletion is the
/// revocation's. Returns the token, the node's name and the controller.
async fn joined_with_a_use_left(
    h: &Harness,
    base: &str,
) -> (BootstrapToken, String, ControllerHandle) {
    let f = h.gold_flavor(base).await;
    let t = h.token(&f, 2, None).await;
    let node = h.name(base);
    let csr = format!("{node}-csr");
    let ctl = h.start_controller(h.options("ctl"));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.register_node(&csr, &node, &[], &[]).await;
    (t, node, ctl)
}

/// Marks `node`'s binding revoked by an admin, as `node revoke`'s binding step does, and
/// nothing else: what the leader finds to finish.
async fn revoke_binding(h: &Harness, node: &str) {
    kubeflavor_cluster::bindings::revoke(
        &h.admin,
        node,
        &kubeflavor_core::node::state::Revocation::ByAdmin,
    )
    .await
    .unwrap();
}

/// Waits until the pod `name` (as `created`) is gone: the leader deleted `what`.
async fn leader_deletes(what: &str, pods: &Api<Pod>, name: &str, created: &Pod) {
    let uid = created
        .metadata
        .uid
        .clone()
        .expect("a stored pod has a uid");
    within(
        &format!("the leader to delete {what}"),
        kube::runtime::wait::await_condition(
            pods.clone(),
            name,
            kube::runtime::wait::conditions::is_deleted(&uid),
        ),
    )
    .await
    .unwrap();
}

/// The value of the sample `series` (a metric name with its labels, as /metrics writes it).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Waits until the controller's /metrics shows `what`. A scrape announces no change, so
/// it is read again after a yield, within the usual bound.
async fn metrics_until(ctl: &ControllerHandle, what: &str, shows: impl Fn(&str) -> bool) {
    within(&format!("/metrics to show {what}"), async {
        while !shows(&ctl.metrics.render()) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A revocation the leader cannot finish is visible: the failing step is counted and the
/// name stays among the unfinished revocations (what `KubeflavorRevocationUnfinished`
/// fires on) until a later change lets the leader finish it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_the_leader_cannot_finish_is_on_metrics_until_it_does() {
    let h = Harness::start().await;
    let Some(tk) = h.env.testkube_or_skip("needs testkube's fault injection") else {
        return;
    };
    let (t, node, ctl) = joined_with_a_use_left(&h, "rvm").await;
    let failures = r#"kubeflavor_revocation_step_failures_total{step="token"}"#;
    assert_eq!(sample(&ctl.metrics.render(), failures), Some(0.0));

    // Every deletion of a Secret fails: the token step cannot spend the join token.
    tk.faults().fail_next(usize::MAX, "delete", "secrets", 500);
    revoke_binding(&h, &node).await;
    tk.faults().fired(1).await;
    metrics_until(
        &ctl,
        "the token step failed, the revocation unfinished",
        |text| {
            sample(text, failures).is_some_and(|n| n >= 1.0)
                && sample(text, "kubeflavor_unfinished_revocations") == Some(1.0)
                && sample(text, "kubeflavor_revocation_list_names").is_some_and(|n| n >= 1.0)
        },
    )
    .await;
    assert!(
        h.token_secret(&t).await.is_some(),
        "the token is not spent yet"
    );

    // The fault ends; the next change of a binding (here an annotation) lets the leader
    // finish.
    tk.faults().clear();
    let touch = json!({"metadata": {"annotations": {"example.com/touched": "yes"}}});
    h.bindings()
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&touch),
        )
        .await
        .unwrap();
    h.token_gone(&t).await;
    metrics_until(&ctl, "no unfinished revocation", |text| {
        sample(text, "kubeflavor_unfinished_revocations") == Some(0.0)
    })
    .await;
    ctl.stop().await;
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
}
