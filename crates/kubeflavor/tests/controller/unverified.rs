//! Untrusted until judged, enforced by the API server: the MutatingAdmissionPolicy `install`
//! ships taints every Node a kubelet creates `kubeflavor.io/unverified:NoSchedule`, whatever
//! the kubelet asked; the controller removes it when it flavors the Node, and it stays off;
//! a Node an admin creates is untouched. The harness installs the policy as `install
//! --apply` does; each case asserts on what the API server answered to the kubelet's
//! create, so each fails without the policy.

use crate::harness::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};

const UNVERIFIED: &str = "kubeflavor.io/unverified";

/// The Node's taints as (key, effect), of the keys in `keys`, in the Node's order (a real
/// API server adds taints of its own, such as node.kubernetes.io/not-ready).
fn taints_of(node: &Node, keys: &[&str]) -> Vec<(String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| keys.contains(&t.key.as_str()))
        .map(|t| (t.key, t.effect))
        .collect()
}

fn unverified_count(node: &Node) -> usize {
    taints_of(node, &[UNVERIFIED]).len()
}

/// A node approved with a `gold` token and a controller running: (harness, controller,
/// node, its CSR). The Node is not registered yet.
async fn approved_node() -> (Harness, ControllerHandle, String, String) {
    let h = Harness::start().await;
    let (gold, node, csr) = (h.name("gold"), h.name("node-u"), h.name("csr-u"));
    h.flavor(&gold, &[(TIER_KEY, "gold")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-u"));
    let token = h.token(&gold, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&token).await, &csr, &node)
        .await;
    assert_eq!(
        condition_type(&h.decided(&csr).await).as_deref(),
        Some("Approved")
    );
    policy_in_effect(&h, &csr, &node).await;
    (h, ctl, node, csr)
}

/// Waits until the API server applies the policy `install --apply` just created (a real
/// API server loads policies through an informer, so the first Nodes after an install may
/// come too early): a dry-run create of the Node as its kubelet comes back tainted. Fails
/// when it never does, as without the policy.
async fn policy_in_effect(h: &Harness, csr: &str, node: &str) {
    let nodes = kube::Api::<Node>::all(h.node_client(csr).await);
    let bare: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": node}})).expect("a Node");
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answer = kubeflavor_cluster::cache_lag::until_settled(
        std::time::Duration::from_secs(10),
        || nodes.create(&params, &bare),
        |answer| answer.as_ref().is_ok_and(|n| unverified_count(n) == 1),
    )
    .await;
    let answer = answer.expect("the kubelet may create its Node (dry run)");
    assert_eq!(
        unverified_count(&answer),
        1,
        "the API server does not taint the Node its kubelet creates: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_registering_without_the_taint_gets_it() {
    let (h, ctl, node, csr) = approved_node().await;
    // The kubelet asks for a taint of its own, and not kubeflavor's.
    let created = h
        .register_node(&csr, &node, &[], &[("example.com/own", "NoExecute")])
        .await;
    assert_eq!(
        taints_of(&created, &["example.com/own", UNVERIFIED]),
        [
            ("example.com/own".to_string(), "NoExecute".to_string()),
            (UNVERIFIED.to_string(), "NoSchedule".to_string())
        ],
        "the API server appends the taint after the kubelet's own"
    );
    // The controller found the policy in place at start.
    assert!(
        ctl.metrics
            .render()
            .contains("kubeflavor_unverified_policy_enforced 1"),
        "{}",
        ctl.metrics.render()
    );
    // Nothing else of the Node changed: the labels are the kubelet's (none).
    assert_eq!(
        created.metadata.labels.clone().unwrap_or_default().len(),
        0,
        "{created:?}"
    );
    ctl.stop().await;
}

/// A kubelet that asks for the taint itself (kubeflavor join) gets it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_asking_for_the_taint_gets_it_once() {
    let (h, ctl, node, csr) = approved_node().await;
    let created = h
        .register_node(&csr, &node, &[], &[(UNVERIFIED, "NoSchedule")])
        .await;
    assert_eq!(unverified_count(&created), 1, "{created:?}");
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flavored_node_loses_it_and_keeps_it_off() {
    let (h, ctl, node, csr) = approved_node().await;
    let created = h.register_node(&csr, &node, &[], &[]).await;
    assert_eq!(unverified_count(&created), 1, "tainted at registration");
    h.node_until(&node, "flavored and untainted", |n| {
        label(n, TIER_KEY) == Some("gold") && !has_taint(n, UNVERIFIED)
    })
    .await;
    // No flapping: from the flavored Node on, through a further pass of the controller (an
    // admin drops the flavor labels, the controller puts them back), no version of the Node
    // carries the taint again.
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let mut versions = watcher(h.nodes(), config).applied_objects().boxed();
    // The watch's first answer is the Node as it is now; every later version follows it.
    let now = within("the Node's watch", versions.next())
        .await
        .expect("a first answer")
        .expect("watch works");
    assert!(!has_taint(&now, UNVERIFIED), "{now:?}");
    let patch = serde_json::json!({"metadata": {"labels": {TIER_KEY: null, FLAVOR_KEY: null}}});
    h.nodes()
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("admin patch");
    let mut saw_label_dropped = false;
    within("the controller to restore the label", async {
        while let Some(version) = versions.next().await {
            let version = version.expect("watch works");
            assert!(
                !has_taint(&version, UNVERIFIED),
                "the taint came back: {version:?}"
            );
            let gold = label(&version, TIER_KEY) == Some("gold");
            saw_label_dropped |= !gold;
            if saw_label_dropped && gold {
                return;
            }
        }
        panic!("watch ended");
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_recreated_by_its_kubelet_gets_it_back() {
    let (h, ctl, node, csr) = approved_node().await;
    h.register_node(&csr, &node, &[], &[]).await;
    h.node_until(&node, "flavored and untainted", |n| {
        label(n, TIER_KEY) == Some("gold") && !has_taint(n, UNVERIFIED)
    })
    .await;
    h.delete_node(&node).await;
    let recreated = h.register_node(&csr, &node, &[], &[]).await;
    assert_eq!(unverified_count(&recreated), 1, "{recreated:?}");
    // And the controller judges it again.
    h.node_until(&node, "flavored again", |n| {
        label(n, TIER_KEY) == Some("gold") && !has_taint(n, UNVERIFIED)
    })
    .await;
    ctl.stop().await;
}

/// An admin's Node is left as sent, while a kubelet's, created the same way, is tainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_created_by_an_admin_is_untouched() {
    let (h, ctl, node, csr) = approved_node().await;
    let by_admin = h.name("admin-node");
    create_node(&h.admin, &by_admin).await;
    let stored = h.nodes().get(&by_admin).await.expect("admin's node");
    assert_eq!(unverified_count(&stored), 0, "{stored:?}");
    let by_kubelet = h.register_node(&csr, &node, &[], &[]).await;
    assert_eq!(unverified_count(&by_kubelet), 1, "{by_kubelet:?}");
    h.nodes()
        .delete(&by_admin, &Default::default())
        .await
        .expect("admin's node deleted");
    ctl.stop().await;
}

/// Without the policy's binding the controller still runs, and says the Nodes are not
/// tainted by the API server (testkube only: on a shared cluster the policy serves every
/// test running beside this one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_warns_when_the_policy_is_not_installed() {
    let h = Harness::start().await;
    if h.env
        .testkube_or_skip("removes the cluster-wide policy binding")
        .is_none()
    {
        return;
    }
    let bindings = kube::Api::<kube::api::DynamicObject>::all_with(
        h.admin.clone(),
        &kube::api::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "MutatingAdmissionPolicyBinding".into(),
            plural: "mutatingadmissionpolicybindings".into(),
        },
    );
    bindings
        .delete(
            kubeflavor_core::admission::unverified::POLICY_NAME,
            &Default::default(),
        )
        .await
        .expect("binding deleted");
    let gold = h.name("gold");
    h.flavor(&gold, &[(TIER_KEY, "gold")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-u"));
    let (node, csr) = (h.name("node-u"), h.name("csr-u"));
    let token = h.token(&gold, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&token).await, &csr, &node)
        .await;
    h.decided(&csr).await;
    assert!(
        ctl.metrics
            .render()
            .contains("kubeflavor_unverified_policy_enforced 0"),
        "{}",
        ctl.metrics.render()
    );
    let created = h.register_node(&csr, &node, &[], &[]).await;
    assert_eq!(unverified_count(&created), 0, "{created:?}");
    ctl.stop().await;
}
