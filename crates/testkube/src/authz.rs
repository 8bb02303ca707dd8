//! Authorization, as `--authorization-mode=Node,RBAC` does it: `system:masters` may do
//! anything; the Node authorizer; RBAC from the stored Role/ClusterRole objects and their
//! bindings (the default bootstrap policy is seeded into the store at start, as the real
//! server does). (Being written; the signatures are fixed.)

use serde_json::Value;

use crate::types::{ApiError, ObjectReader, RequestAttributes, ResourceKey};

/// Allow the request, or answer the exact 403 the real server gives.
pub fn authorize(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> Result<(), ApiError> {
    let _ = (attrs, reader);
    Ok(())
}

/// The objects a fresh real cluster (kube-apiserver's bootstrap policy plus what `kubeadm
/// init` adds for discovery) starts with: namespaces, default ClusterRoles and
/// ClusterRoleBindings, the kube-public Role/RoleBinding that lets anonymous read
/// cluster-info. The store seeds these at start; they are then ordinary objects.
pub fn default_objects() -> Vec<(ResourceKey, Value)> {
    Vec::new()
}
