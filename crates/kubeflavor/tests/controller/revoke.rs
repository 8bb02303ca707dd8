//! P7, durable: `kubeflavor node revoke` cuts a node off by itself, with no controller
//! running: the revocation list and its admission policy refuse the kubelet's writes, pods
//! on the node and a Node under its name; the node's pods are deleted, so a ServiceAccount
//! token its kubelet minted for one of them stops authenticating; its join token is spent,
//! so its join line files no CSR for a new name; the trail records it (`NodeRevoked`, by
//! the CLI). Deleting the binding and the Node does not un-revoke; `node forget` does. A
//! revocation the leader cannot finish shows on its /metrics.

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::harness::*;

fn pod_on(node: &str, name: &str, sa: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": sa,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            // The projected token volume a kubelet mints tokens for (a real API server's
            // ServiceAccount admission adds one like it to every pod; testkube does not).
            "volumes": [{"name": "token", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            ]}}],
        },
    }))
    .unwrap()
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
    let pp = PostParams::default();
    let admin_pods = Api::<Pod>::namespaced(h.admin.clone(), ns);
    let admin_sas = Api::<ServiceAccount>::namespaced(h.admin.clone(), ns);
    let sa_obj: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap();
    admin_sas.create(&pp, &sa_obj).await.unwrap();
    let created = admin_pods
        .create(&pp, &pod_on(&node, &pod, &sa))
        .await
        .unwrap();
    let pod_uid = created.metadata.uid.clone().unwrap();

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
            "a Pod created on the revoked node",
            admin_pods
                .create(&pp, &pod_on(&node, &h.name("rv-p2"), &sa))
                .await,
        );
        assert_eq!(code, 422, "{message}");
        assert!(
            message.contains("no Pod may be created on a revoked node"),
            "{message}"
        );
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

    let _ = admin_sas.delete(&sa, &DeleteParams::default()).await;
}

/// A revocation that did not run to the end (here: only the binding's condition, as an
/// older CLI wrote it) is finished by the leader: the name is listed, its join token
/// spent; and a pod that appears on the node (where admission does not refuse it) is
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_finishes_a_revocation_it_finds_and_keeps_pods_off() {
    let h = Harness::start().await;
    let f = h.gold_flavor("rvl").await;
    // Two uses, one left: the controller does not delete it as exhausted (P4), so its
    // deletion below is the revocation's.
    let t = h.token(&f, 2, None).await;
    let node = h.name("rvl");
    let csr = format!("{node}-csr");
    let ctl = h.start_controller(h.options("ctl"));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.register_node(&csr, &node, &[], &[]).await;

    kubeflavor_cluster::bindings::revoke(
        &h.admin,
        &node,
        &kubeflavor_core::node::state::Revocation::ByAdmin,
    )
    .await
    .unwrap();
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

    let pp = PostParams::default();
    let pods = Api::<Pod>::namespaced(h.admin.clone(), "default");
    let pod = h.name("rvl-p");
    match pods.create(&pp, &pod_on(&node, &pod, "default")).await {
        Ok(created) => {
            // Admission refuses such a pod; should one get through (the policy deleted),
            // the leader deletes it.
            let uid = created.metadata.uid.unwrap();
            within(
                "the leader to delete the pod bound to the revoked node",
                kube::runtime::wait::await_condition(
                    pods.clone(),
                    &pod,
                    kube::runtime::wait::conditions::is_deleted(&uid),
                ),
            )
            .await
            .unwrap();
        }
        Err(kube::Error::Api(s)) if s.code == 422 => {}
        Err(e) => panic!("{e:?}"),
    }
    ctl.stop().await;
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
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
    let f = h.gold_flavor("rvm").await;
    let t = h.token(&f, 2, None).await;
    let node = h.name("rvm");
    let csr = format!("{node}-csr");
    let ctl = h.start_controller(h.options("ctl"));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.register_node(&csr, &node, &[], &[]).await;
    let failures = r#"kubeflavor_revocation_step_failures_total{step="token"}"#;
    assert_eq!(sample(&ctl.metrics.render(), failures), Some(0.0));

    // Every deletion of a Secret fails: the token step cannot spend the join token.
    tk.faults().fail_next(usize::MAX, "delete", "secrets", 500);
    kubeflavor_cluster::bindings::revoke(
        &h.admin,
        &node,
        &kubeflavor_core::node::state::Revocation::ByAdmin,
    )
    .await
    .unwrap();
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
