//! Release is complete whatever happened to the Flavor (P7): a Node
//! without a live, unrevoked binding carries no trusted label kubeflavor ever set (the
//! Node's applied record says what; it is never recomputed from the Flavor's current
//! spec) and carries `kubeflavor.io/unverified:NoSchedule`: with the controller down
//! while the Flavor is edited or deleted and the binding deleted, with a Flavor deleted
//! while its bindings stay, for a Flavor and its bindings deleted together, and for a
//! revoked Node whose revoked taint an admin removes. A kubelet cannot touch the record.

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding};

use crate::harness::*;

const APPLIED: &str = "kubeflavor.io/applied";
const UNVERIFIED: &str = "kubeflavor.io/unverified";
/// A second trusted label the tests' Flavors move to.
const OTHER_KEY: &str = "other.node-restriction.kubernetes.io/class";

/// Joins `node` with a token of `flavor` and waits until it carries the flavor (its
/// record included); returns the CSR name (the node's identity).
async fn flavored_node(h: &Harness, flavor: &str, node: &str) -> String {
    let t = h.token(flavor, 1, None).await;
    let csr = h.name(&format!("csr-{node}"));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.register_node(&csr, node, &[], &[(UNVERIFIED, "NoSchedule")])
        .await;
    h.node_until(node, "flavored, with its record", |n| {
        label(n, TIER_KEY).is_some() && !has_taint(n, UNVERIFIED) && record(n).is_some()
    })
    .await;
    csr
}

fn record(n: &Node) -> Option<&str> {
    n.annotations().get(APPLIED).map(String::as_str)
}

/// Released: no label of kubeflavor's (whichever Flavor spec gave it), unverified again.
fn released(n: &Node) -> bool {
    [TIER_KEY, OTHER_KEY, FLAVOR_KEY]
        .iter()
        .all(|k| label(n, k).is_none())
        && !n
            .labels()
            .keys()
            .any(|k| k.starts_with("kubeflavor.node-restriction.kubernetes.io/"))
        && unverified(n)
}

fn unverified(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == UNVERIFIED && t.effect == "NoSchedule")
        })
}

fn flavors(h: &Harness) -> Api<Flavor> {
    Api::all(h.admin.clone())
}

async fn set_flavor_labels(h: &Harness, flavor: &str, labels: serde_json::Value) {
    let patch = serde_json::json!({"spec": {"labels": labels}});
    flavors(h)
        .patch(flavor, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("flavor edited");
}

async fn delete_binding(h: &Harness, node: &str) {
    h.bindings()
        .delete(node, &DeleteParams::default())
        .await
        .expect("binding deleted");
}

/// With no controller running, one Flavor moves to other labels and the other is deleted,
/// then both bindings are deleted; the controller started afterwards releases both Nodes
/// from their records (the old labels go, though no Flavor names them any more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_with_the_controller_down_removes_what_was_set_not_what_the_flavor_says_now() {
    let h = Harness::start().await;
    let (edited, deleted) = (h.name("rel-edited"), h.name("rel-deleted"));
    h.flavor(
        &edited,
        &[(TIER_KEY, "gold")],
        &[("dedicated", "p", "NoSchedule")],
    )
    .await;
    h.flavor(&deleted, &[(TIER_KEY, "silver")], &[]).await;
    let (a, b) = (h.name("node-rel-a"), h.name("node-rel-b"));
    let ctl = h.start_controller(h.options("ctl"));
    flavored_node(&h, &edited, &a).await;
    flavored_node(&h, &deleted, &b).await;
    ctl.stop().await;

    // Controller down: the Flavor edited first, then the binding deleted.
    set_flavor_labels(
        &h,
        &edited,
        serde_json::json!({TIER_KEY: null, OTHER_KEY: "x"}),
    )
    .await;
    delete_binding(&h, &a).await;
    // Controller down: the Flavor deleted first, then the binding.
    flavors(&h)
        .delete(&deleted, &DeleteParams::default())
        .await
        .expect("flavor deleted");
    delete_binding(&h, &b).await;

    let ctl = h.start_controller(h.options("ctl-next"));
    let node = h.node_until(&a, "released from its record", released).await;
    assert!(
        !node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == "dedicated")),
        "the Flavor's old taint goes too: {node:?}"
    );
    h.node_until(&b, "released from its record", released).await;
    ctl.stop().await;
}

/// Controller running: a Flavor deleted while its bindings stay releases their Nodes
/// (bindings kept, Flavored=False FlavorMissing) and re-creating it flavors them again;
/// then the Flavor and its three bindings deleted together (`kubectl delete -f`) leave
/// every Node released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flavor_and_its_bindings_deleted_together_leave_every_node_released() {
    let h = Harness::start().await;
    let f = h.gold_flavor("rel-together").await;
    let ctl = h.start_controller(h.options("ctl"));
    let nodes: Vec<String> = (0..3).map(|i| h.name(&format!("node-tog-{i}"))).collect();
    for n in &nodes {
        flavored_node(&h, &f, n).await;
    }

    // The Flavor alone deleted: handled, not refused.
    flavors(&h)
        .delete(&f, &DeleteParams::default())
        .await
        .expect("a Flavor bindings name can be deleted");
    for n in &nodes {
        h.node_until(n, "released while its Flavor is gone", released)
            .await;
        h.binding_until(n, "Flavored=False FlavorMissing", |b| {
            b.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Flavored" && c.status == "False" && c.reason == "FlavorMissing"
                })
            })
        })
        .await;
    }
    h.gold_flavor("rel-together").await;
    for n in &nodes {
        h.node_until(n, "flavored again", |n| {
            label(n, TIER_KEY) == Some("gold") && !has_taint(n, UNVERIFIED)
        })
        .await;
    }

    // `kubectl delete -f` of the Flavor and its three bindings.
    let all = async {
        let flavor = async {
            flavors(&h)
                .delete(&f, &DeleteParams::default())
                .await
                .expect("flavor deleted");
        };
        let bindings = futures::future::join_all(nodes.iter().map(|n| delete_binding(&h, n)));
        tokio::join!(flavor, bindings);
    };
    all.await;
    for n in &nodes {
        h.node_until(n, "released", released).await;
    }
    let remaining: Vec<FlavorBinding> = futures::future::join_all(
        nodes
            .iter()
            .map(|n| async { h.bindings().get_opt(n).await.unwrap() }),
    )
    .await
    .into_iter()
    .flatten()
    .collect();
    assert!(remaining.is_empty(), "{remaining:?}");
    ctl.stop().await;
}

/// A revoked Node is unverified too; an admin who removes its revoked taint gets it back
/// while the binding is revoked; once no binding is left, the Node stays unverified, and
/// an admin who removes that taint gets it back as well (kubeflavor judged the Node: it is
/// never left schedulable unjudged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_node_whose_taint_is_removed_by_hand_is_never_left_schedulable() {
    let h = Harness::start().await;
    let f = h.gold_flavor("rel-revoked").await;
    let node = h.name("node-rel-rev");
    let ctl = h.start_controller(h.options("ctl"));
    flavored_node(&h, &f, &node).await;
    h.env.kf(&["node", "revoke", &node]).await.expect_ok();
    let revoked = h
        .node_until(
            &node,
            "revoked, unverified and stripped of its flavor",
            |n| {
                has_taint(n, "kubeflavor.io/revoked")
                    && unverified(n)
                    && label(n, TIER_KEY).is_none()
            },
        )
        .await;
    // (`node revoke` taints the Node itself; the controller removes the flavor's labels.)
    assert!(has_taint(&revoked, "kubeflavor.io/revoked"));

    // As `kubectl edit` would: read, drop the taints, write with the version read, and
    // read again on a conflict (the controller or kube-controller-manager wrote meanwhile).
    let untaint = |keep_unverified: bool| {
        let h = &h;
        let node = node.clone();
        async move {
            loop {
                let n = h.nodes().get(&node).await.expect("node");
                let taints: Vec<_> = n
                    .spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|t| {
                        t.key != "kubeflavor.io/revoked" && (keep_unverified || t.key != UNVERIFIED)
                    })
                    .collect();
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": n.metadata.resource_version},
                    "spec": {"taints": taints},
                });
                match h
                    .nodes()
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => return,
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => panic!("admin edits the taints: {e}"),
                }
            }
        }
    };
    // The revoked taint (and the unverified one) removed by hand: both come back.
    untaint(false).await;
    h.node_until(&node, "revoked taint back", |n| {
        has_taint(n, "kubeflavor.io/revoked") && unverified(n)
    })
    .await;

    h.delete_revoked_binding(&node).await;
    // No binding left: the revoked taint removed by hand stays off, unverified stays on.
    untaint(true).await;
    h.node_until(&node, "unverified with no binding", |n| {
        !has_taint(n, "kubeflavor.io/revoked") && released(n)
    })
    .await;
    // And unverified removed by hand as well: back.
    untaint(false).await;
    h.node_until(&node, "unverified again", released).await;
    ctl.stop().await;
}

/// A kubelet whose client CSR the controller approved, before its Node exists: the node's
/// name, the CSR's, the controller, and the kubelet's own view of Nodes.
async fn approved_kubelet(
    h: &Harness,
    base: &str,
) -> (String, String, ControllerHandle, Api<Node>) {
    let f = h.gold_flavor(base).await;
    let node = h.name(&format!("node-{base}"));
    let ctl = h.start_controller(h.options("ctl"));
    let t = h.token(&f, 1, None).await;
    let csr = h.name(&format!("csr-{base}"));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    let kubelet: Api<Node> = Api::all(h.node_client(&csr).await);
    (node, csr, ctl, kubelet)
}

/// A kubelet's ordinary write (an annotation of its own) passes; the Node after it.
async fn own_write_passes(h: &Harness, kubelet: &Api<Node>, node: &str) -> Node {
    let own = serde_json::json!({"metadata": {"annotations": {"example.com/kubelet": "yes"}}});
    kubelet
        .patch(node, &PatchParams::default(), &Patch::Merge(&own))
        .await
        .expect("a kubelet's own annotation");
    h.nodes().get(node).await.unwrap()
}

/// The kubelet's zone is not trusted: a kubelet may not register its Node with
/// `topology.kubernetes.io/zone` or `region` (NodeRestriction would let it), nor add, change
/// or remove them later; an admin (or a cloud controller manager) may set them, and the
/// kubelet's ordinary writes still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_does_not_decide_its_zone() {
    let h = Harness::start().await;
    let (node, csr, ctl, kubelet) = approved_kubelet(&h, "zone-kubelet").await;
    let zone = "topology.kubernetes.io/zone";
    for key in kubeflavor_core::admission::kubelet_topology::TOPOLOGY_LABELS {
        let chosen: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": node, "labels": {key: "where-i-say"}},
        }))
        .unwrap();
        let err = kubelet
            .create(&PostParams::default(), &chosen)
            .await
            .expect_err("a kubelet may not register with a zone of its own");
        assert!(refused(&err), "{key}: {err}");
    }
    h.register_node(&csr, &node, &[], &[(UNVERIFIED, "NoSchedule")])
        .await;
    let add = serde_json::json!({"metadata": {"labels": {zone: "where-i-say"}}});
    let err = kubelet
        .patch(&node, &PatchParams::default(), &Patch::Merge(&add))
        .await
        .expect_err("a kubelet may not add a zone");
    assert!(refused(&err), "{err}");
    // The owner's (an admin's) zone: kept, and the kubelet may neither change nor drop it.
    h.nodes()
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {zone: "observed-site"}}})),
        )
        .await
        .expect("an admin sets the zone");
    for (what, patch) in [
        (
            "change",
            serde_json::json!({"metadata": {"labels": {zone: "where-i-say"}}}),
        ),
        (
            "remove",
            serde_json::json!({"metadata": {"labels": {zone: null}}}),
        ),
    ] {
        let err = kubelet
            .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err(what);
        assert!(refused(&err), "{what}: {err}");
    }
    let n = own_write_passes(&h, &kubelet, &node).await;
    assert_eq!(label(&n, zone), Some("observed-site"));
    ctl.stop().await;
}

/// The record is kubeflavor's: a kubelet may not create its Node with it, nor remove or
/// change it (through `nodes` or `nodes/status`); its ordinary writes still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cannot_set_change_or_remove_the_record() {
    let h = Harness::start().await;
    let (node, csr, ctl, kubelet) = approved_kubelet(&h, "rel-kubelet").await;

    // Create with a record of its own choosing: refused.
    let forged: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": node, "annotations": {APPLIED: "{\"labels\":[],\"taints\":[]}"}},
        "spec": {"taints": [{"key": UNVERIFIED, "effect": "NoSchedule"}]},
    }))
    .unwrap();
    let err = kubelet
        .create(&PostParams::default(), &forged)
        .await
        .expect_err("a kubelet may not create its Node with the record");
    assert!(refused(&err), "{err}");

    h.register_node(&csr, &node, &[], &[(UNVERIFIED, "NoSchedule")])
        .await;
    let flavored = h
        .node_until(&node, "flavored, with its record", |n| {
            label(n, TIER_KEY).is_some() && record(n).is_some()
        })
        .await;
    let kept = record(&flavored).unwrap().to_string();

    let attempts = [
        (
            "remove",
            serde_json::json!({"metadata": {"annotations": {APPLIED: null}}}),
        ),
        (
            "change",
            serde_json::json!({"metadata": {"annotations": {APPLIED: "{}"}}}),
        ),
    ];
    for (what, patch) in &attempts {
        let err = kubelet
            .patch(&node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect_err(what);
        assert!(refused(&err), "{what}: {err}");
        // Through the status subresource: the Node status strategy resets only the spec
        // and keeps an update's metadata, so the policy refuses it there too (measured on
        // v1.36: 422 from the policy).
        let err = kubelet
            .patch_status(&node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect_err(what);
        assert!(refused(&err), "{what} through nodes/status: {err}");
    }
    // Its ordinary writes pass: an annotation of its own.
    let n = own_write_passes(&h, &kubelet, &node).await;
    assert_eq!(record(&n), Some(kept.as_str()), "the record is unchanged");
    ctl.stop().await;
}

/// Refused by admission (the policy: 422 Invalid) or authorization (403).
fn refused(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 422 || s.code == 403)
}
