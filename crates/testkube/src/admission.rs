//! Admission and type-specific rules: NodeRestriction for node identities, and the CSR
//! rules (requester identity filled in on create, conditions only through `/approval`,
//! Approved and Denied exclusive and permanent, `approve`/`sign` on the signer); and, after
//! the object's own validation, ValidatingAdmissionPolicies.

pub(crate) mod csr;
mod node_restriction;
mod validating_policy;
pub(crate) use validating_policy::to_cel;

use serde_json::Value;

use crate::authz::node::node_identity;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes};

/// Check (and, where the real server mutates, change) an object on its way into the store.
///
/// `old` is the stored object for updates and deletes; `new` the incoming object for creates
/// and updates (after a patch has been applied), which admission may modify in place.
pub fn admit(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    // Mutating admission (NodeRestriction) sees the object as the client sent it.
    if let Some(node) = node_identity(&attrs.user) {
        node_restriction::admit(node, attrs, op, old, new.as_deref())?;
    }
    if attrs.api_group == "certificates.k8s.io" && attrs.resource == "certificatesigningrequests" {
        csr::admit(attrs, op, old, new, reader)?;
    }
    Ok(())
}

/// Validating admission that runs after the object passed its own validation, as
/// upstream's `createValidation`/`updateValidation`: the ValidatingAdmissionPolicies.
pub use validating_policy::admit as validate;

#[cfg(test)]
mod tests;
