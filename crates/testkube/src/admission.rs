//! Admission and type-specific rules: ServiceAccount for pods, NodeRestriction for node
//! identities, then the MutatingAdmissionPolicies; the CSR
//! rules (requester identity filled in on create, conditions only through `/approval`,
//! Approved and Denied exclusive and permanent, `approve`/`sign` on the signer); and, after
//! the object's own validation, ValidatingAdmissionPolicies.

pub(crate) mod csr;
mod mutating_policy;
mod node_restriction;
mod policy;
pub(crate) mod service_account;
mod validating_policy;
pub(crate) use policy::to_val;

use serde_json::Value;

use crate::authz::node::node_identity;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes};

/// Check (and, where the real server mutates, change) an object on its way into the store.
///
/// `old` is the stored object for updates and deletes; `new` the incoming object for creates
/// and updates (after a patch has been applied), which admission may modify in place.
/// [`mutate`] and then the type's own rules.
pub fn admit(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    mut new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    mutate(attrs, op, old, new.as_deref_mut(), reader)?;
    admit_type(attrs, op, old, new, reader)
}

/// The mutating admission plugins, in upstream's order: ServiceAccount, NodeRestriction,
/// then the MutatingAdmissionPolicies. On an update they see the object as the client sent
/// it (a patch already applied), before the registry's strategy resets what the subresource may
/// not change (`PrepareForUpdate`): upstream runs them as transformers of the updated
/// object, ahead of `BeforeUpdate`, so a kubelet's taint change sent through
/// `nodes/status` is refused although the status strategy would have dropped it.
pub fn mutate(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    mut new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    service_account::admit(attrs, op, new.as_deref_mut(), reader)?;
    // NodeRestriction sees the object as the client sent it (and ServiceAccount left it).
    if let Some(node) = node_identity(&attrs.user) {
        node_restriction::admit(node, attrs, op, old, new.as_deref(), reader)?;
    }
    // Then the MutatingAdmissionPolicies, on the object as the plugins above left it.
    if matches!(op, Operation::Create | Operation::Update) {
        mutating_policy::admit(attrs, op, old, new, reader)?;
    }
    Ok(())
}

/// The rules of particular types that run after the strategy (the CSR rules).
pub fn admit_type(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    if attrs.api_group == "certificates.k8s.io" && attrs.resource == "certificatesigningrequests" {
        csr::admit(attrs, op, old, new, reader)?;
    }
    Ok(())
}

/// Why a MutatingAdmissionPolicy is invalid: (field, expression, detail) of each
/// expression that does not compile.
pub use mutating_policy::validate_policy as mutating_policy_errors;

/// Validating admission that runs after the object passed its own validation, as
/// upstream's `createValidation`/`updateValidation`: the ValidatingAdmissionPolicies.
pub use validating_policy::admit as validate;
pub use validating_policy::verdict as validating_policy_verdict;

#[cfg(test)]
mod tests;
