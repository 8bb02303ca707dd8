//! Objects as the API server hands them, for the tests of this crate and of its users
//! (the `testing` feature).

use k8s_openapi::api::core::v1::Secret;

/// A kubeflavor token Secret of flavor `sweet` (max nodes 3) whose bound names are
/// `bound`, as read at resourceVersion 42.
pub fn flavored_secret(bound: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "bootstrap-token-abcdef", "namespace": "kube-system", "resourceVersion": "42",
            "labels": {"kubeflavor.io/flavor": "sweet"},
            "annotations": {"kubeflavor.io/max-nodes": "3", "kubeflavor.io/bound-nodes": bound},
        },
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {},
    }))
    .expect("a token Secret")
}
