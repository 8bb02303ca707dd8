//! What the watch caches keep of each object.
//!
//! The caches only route events to reconciles and skip work already done: every decision
//! reads its facts fresh from the API server (see `facts`). So each cached object is cut
//! down, before it enters a store, to the fields the routing and the skip checks read.
//! With thousands of nodes this is most of the controller's memory: a kubelet CSR carries
//! its PEM request and issued certificate, and on a real cluster every object carries
//! managedFields and a Node also its annotations.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;

use super::facts::is_decided;
use crate::crd::FlavorBinding;

/// Keeps only an object's name, namespace and resourceVersion.
fn slim_meta(meta: &mut ObjectMeta) {
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        resource_version: meta.resource_version.take(),
        ..ObjectMeta::default()
    };
}

/// Makes a watch of CSRs a watch of the pending ones: a CSR that got its Approved or
/// Denied condition (both permanent) leaves the cache as if deleted, and a relist does not
/// bring it back. So the cache holds the CSRs in flight, not every CSR of the cluster.
pub fn pending_only(
    event: Event<CertificateSigningRequest>,
) -> Option<Event<CertificateSigningRequest>> {
    match event {
        Event::Apply(csr) if is_decided(&csr) => Some(Event::Delete(csr)),
        Event::InitApply(csr) if is_decided(&csr) => None,
        other => Some(other),
    }
}

/// Drops the objects whose names this controller does not serve (`Options::scope`) from
/// a watch, as if they did not exist. Errors pass through.
pub fn served<K: kube::Resource>(
    event: Result<Event<K>, kube::runtime::watcher::Error>,
    opts: &super::Options,
) -> Option<Result<Event<K>, kube::runtime::watcher::Error>> {
    let name_served = |o: &K| opts.serves(o.meta().name.as_deref().unwrap_or_default());
    match &event {
        Ok(Event::Apply(o) | Event::InitApply(o) | Event::Delete(o)) if !name_served(o) => None,
        _ => Some(event),
    }
}

/// Keeps a CSR's name, resourceVersion, signer, requester and the type and status of
/// its conditions: what the CSR loop reads from its cache (which requester, decided yet).
pub fn slim_csr(csr: &mut CertificateSigningRequest) {
    slim_meta(&mut csr.metadata);
    let spec = &mut csr.spec;
    spec.request = ByteString(Vec::new());
    spec.extra = None;
    spec.groups = None;
    spec.usages = None;
    spec.uid = None;
    if let Some(status) = csr.status.as_mut() {
        status.certificate = None;
        for c in status.conditions.iter_mut().flatten() {
            c.message = None;
            c.reason = None;
            c.last_transition_time = None;
            c.last_update_time = None;
        }
    }
}

/// Keeps a binding's name, resourceVersion and flavor: the node loop routes Flavor events
/// by `spec.flavor` and reads the binding itself before it writes.
pub fn slim_binding(binding: &mut FlavorBinding) {
    slim_meta(&mut binding.metadata);
    let spec = &mut binding.spec;
    spec.csr_name = String::new();
    spec.public_key_sha256 = String::new();
    spec.token_id = String::new();
    binding.status = None;
}

/// Keeps a Node's name and resourceVersion: the node loop only needs to know that the
/// Node exists and whether it changed since it was last found flavored.
pub fn slim_node(node: &mut PartialObjectMeta<Node>) {
    slim_meta(&mut node.metadata);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(conditions: serde_json::Value) -> CertificateSigningRequest {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "node-csr-1", "resourceVersion": "9",
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
                "annotations": {"a": "b"},
            },
            "spec": {
                "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                "request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K",
                "usages": ["client auth"],
                "username": "system:bootstrap:abcdef",
                "groups": ["system:bootstrappers"],
            },
            "status": {"conditions": conditions, "certificate": "Y2VydA=="},
        }))
        .unwrap()
    }

    #[test]
    fn a_slim_csr_keeps_what_routing_reads_and_drops_the_bulk() {
        let approved = serde_json::json!([{
            "type": "Approved", "status": "True", "reason": "KubeflavorApproved",
            "message": "m", "lastUpdateTime": "2026-01-01T00:00:00Z",
        }]);
        for (conditions, decided) in [
            (serde_json::json!([]), false),
            (approved, true),
            (
                serde_json::json!([{"type": "Denied", "status": "True", "reason": "r"}]),
                true,
            ),
            (
                serde_json::json!([{"type": "Failed", "status": "True", "reason": "r"}]),
                false,
            ),
        ] {
            let full = csr(conditions);
            let mut slim = full.clone();
            slim_csr(&mut slim);
            assert_eq!(is_decided(&slim), decided);
            assert_eq!(is_decided(&slim), is_decided(&full));
            assert_eq!(slim.metadata.name, full.metadata.name);
            assert_eq!(
                slim.metadata.resource_version,
                full.metadata.resource_version
            );
            assert_eq!(slim.spec.username, full.spec.username);
            assert_eq!(slim.spec.signer_name, full.spec.signer_name);
            assert!(slim.spec.request.0.is_empty());
            assert!(slim.metadata.managed_fields.is_none());
            assert!(slim.status.as_ref().unwrap().certificate.is_none());
            let slim_len = serde_json::to_vec(&slim).unwrap().len();
            let full_len = serde_json::to_vec(&full).unwrap().len();
            assert!(slim_len < full_len, "{slim_len} >= {full_len}");
        }
    }

    #[test]
    fn a_slim_node_keeps_its_identity_and_version() {
        let mut node: PartialObjectMeta<Node> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "7",
                "labels": {"kubernetes.io/hostname": "n1"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
        }))
        .unwrap();
        slim_node(&mut node);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert!(node.metadata.labels.is_none());
        assert!(node.metadata.annotations.is_none());
        assert!(node.metadata.managed_fields.is_none());
    }

    #[test]
    fn decided_csrs_leave_the_cache_and_pending_ones_stay() {
        let pending = || csr(serde_json::json!([]));
        let decided = || csr(serde_json::json!([{"type": "Denied", "status": "True"}]));
        assert!(matches!(
            pending_only(Event::Apply(pending())),
            Some(Event::Apply(_))
        ));
        assert!(matches!(
            pending_only(Event::InitApply(pending())),
            Some(Event::InitApply(_))
        ));
        assert!(matches!(
            pending_only(Event::Apply(decided())),
            Some(Event::Delete(_))
        ));
        assert!(pending_only(Event::InitApply(decided())).is_none());
        assert!(matches!(
            pending_only(Event::Delete(pending())),
            Some(Event::Delete(_))
        ));
        assert!(matches!(pending_only(Event::Init), Some(Event::Init)));
        assert!(matches!(
            pending_only(Event::InitDone),
            Some(Event::InitDone)
        ));
    }

    #[test]
    fn a_slim_binding_keeps_what_routing_reads() {
        let full: FlavorBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "FlavorBinding",
            "metadata": {"name": "n1", "resourceVersion": "5", "uid": "u",
                         "labels": {"kubeflavor.io/token-id": "abcdef"}},
            "spec": {"node": "n1", "flavor": "sweet", "tokenId": "abcdef", "csrName": "csr-1",
                     "publicKeySha256": "00", "boundAt": "2026-01-01T00:00:00Z"},
            "status": {"conditions": []},
        }))
        .unwrap();
        let mut slim = full.clone();
        slim_binding(&mut slim);
        assert_eq!(slim.spec.flavor, full.spec.flavor);
        assert!(slim.spec.public_key_sha256.is_empty());
        assert_eq!(slim.metadata.name, full.metadata.name);
        assert_eq!(
            slim.metadata.resource_version,
            full.metadata.resource_version
        );
        assert!(slim.status.is_none());
        assert!(slim.metadata.labels.is_none());
    }
}
