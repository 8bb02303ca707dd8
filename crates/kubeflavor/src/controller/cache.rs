//! What the watches keep and pass on.
//!
//! The caches only route events to reconciles and skip work already done: every decision
//! reads its facts fresh from the API server (see `facts`). The CSR cache holds the pending
//! CSRs only, each cut down to the fields routing reads: a kubelet CSR carries its PEM
//! request and issued certificate, and on a real cluster managedFields. (What the node
//! loop keeps of each node name is in `fleet`.)

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;

use super::csr::facts::is_decided;

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

/// Keeps a CSR's name, uid, resourceVersion, its spec but the requester's uid and extra
/// attributes, and the type and status of its conditions: what the CSR loop reads from its
/// cache (which requester, decided yet; the spec a decision validates, which cannot change
/// once the CSR exists). Only pending CSRs stay in the cache; a decided one drops its
/// request at once.
pub fn slim_csr(csr: &mut CertificateSigningRequest) {
    let uid = csr.metadata.uid.take();
    slim_meta(&mut csr.metadata);
    csr.metadata.uid = uid;
    let decided = is_decided(csr);
    let spec = &mut csr.spec;
    if decided {
        spec.request = ByteString(Vec::new());
    }
    spec.extra = None;
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
            assert_eq!(slim.spec.groups, full.spec.groups);
            assert_eq!(slim.spec.usages, full.spec.usages);
            // A pending CSR keeps its request (its decision validates it); a decided one
            // leaves the cache and drops it.
            assert_eq!(slim.spec.request.0.is_empty(), decided);
            assert!(slim.metadata.managed_fields.is_none());
            assert!(slim.status.as_ref().unwrap().certificate.is_none());
            let slim_len = serde_json::to_vec(&slim).unwrap().len();
            let full_len = serde_json::to_vec(&full).unwrap().len();
            assert!(slim_len < full_len, "{slim_len} >= {full_len}");
        }
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
}
