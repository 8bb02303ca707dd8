//! A Node as the node loop sees it: watched slim ([`NodeView`]), and fingerprinted by what
//! the loop cares about (its labels, taints and applied record), so a kubelet's status
//! update needs no reconcile.

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeflavor_core::flavor::FLAVOR_LABEL;
use kubeflavor_core::node::applied_record::APPLIED_ANNOTATION;

use crate::controller::fleet::{self, Fingerprint};

/// A Node as the node loop watches it: its metadata and taints. Everything else a Node
/// carries (its status: conditions, addresses, images) is skipped while it is read.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct NodeView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeViewSpec,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct NodeViewSpec {
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
}

impl kube::Resource for NodeView {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl NodeView {
    /// The Node carries kubeflavor's flavor label or its applied record, which only
    /// kubeflavor sets (NodeRestriction keeps kubelets off the label, an admission policy
    /// off the record): kubeflavor judged it, so without a binding it must be released.
    pub(super) fn flavor_labeled(&self) -> bool {
        judged(&self.metadata)
    }

    pub(super) fn fingerprint(&self) -> Fingerprint {
        with_record(
            &self.metadata,
            fleet::node_fingerprint(
                self.metadata.labels.as_ref(),
                self.spec.taints.as_deref().unwrap_or_default(),
            ),
        )
    }
}

/// See [`NodeView::flavor_labeled`].
fn judged(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(FLAVOR_LABEL))
        || record_of(meta).is_some()
}

/// The Node's applied record annotation.
fn record_of(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(APPLIED_ANNOTATION)
        .map(String::as_str)
}

/// A Node fingerprint that also moves with the applied record (an admin who removes or
/// edits it gets it rewritten).
fn with_record(meta: &ObjectMeta, labels_and_taints: Fingerprint) -> Fingerprint {
    match record_of(meta) {
        None => labels_and_taints,
        Some(record) => fleet::combined(
            labels_and_taints,
            fleet::version_fingerprint(record),
            APPLIED_ANNOTATION,
        ),
    }
}

/// The fingerprint of a Node read or written whole (see [`NodeView::fingerprint`]).
pub(super) fn node_fingerprint(node: &Node) -> Fingerprint {
    with_record(
        &node.metadata,
        fleet::node_fingerprint(
            node.metadata.labels.as_ref(),
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(
        labels: serde_json::Value,
        taints: serde_json::Value,
        status: &str,
    ) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "resourceVersion": status,
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
            "spec": {"taints": taints, "podCIDR": "10.244.0.0/24"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": status}],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
            },
        })
    }

    /// The fingerprint of a watched Node (NodeView) and of a Node read or patched whole.
    fn both(json: &serde_json::Value) -> (Fingerprint, Fingerprint) {
        let view: NodeView = serde_json::from_value(json.clone()).expect("a NodeView");
        let whole: Node = serde_json::from_value(json.clone()).expect("a Node");
        (view.fingerprint(), node_fingerprint(&whole))
    }

    #[test]
    fn a_node_fingerprint_moves_with_labels_and_taints_only() {
        let labels =
            serde_json::json!({"kubeflavor.node-restriction.kubernetes.io/flavor": "sweet"});
        let taints =
            serde_json::json!([{"key": "kubeflavor.io/unverified", "effect": "NoSchedule"}]);
        let base = both(&node(
            labels.clone(),
            taints.clone(),
            "2026-01-01T00:00:00Z",
        ));
        assert_eq!(
            base.0, base.1,
            "the watch and a GET see the same Node alike"
        );
        // A kubelet's status update: new resourceVersion, heartbeat, same labels and taints.
        let heartbeat = both(&node(
            labels.clone(),
            taints.clone(),
            "2026-01-01T00:05:00Z",
        ));
        assert_eq!(heartbeat, base, "a status update needs no reconcile");
        let relabeled = both(&node(
            serde_json::json!({}),
            taints.clone(),
            "2026-01-01T00:00:00Z",
        ));
        assert_ne!(relabeled.0, base.0, "a label removed");
        assert_eq!(relabeled.0, relabeled.1);
        let untainted = both(&node(labels, serde_json::json!([]), "2026-01-01T00:00:00Z"));
        assert_ne!(untainted.0, base.0, "a taint removed");
        assert_eq!(untainted.0, untainted.1);
    }
}
