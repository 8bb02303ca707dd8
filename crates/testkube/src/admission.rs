//! Admission and type-specific rules: NodeRestriction for node identities, the CSR rules
//! (requester identity filled in on create, conditions only through `/approval`, Approved
//! and Denied exclusive and permanent, `approve` on the signer). (Being written; the
//! signature is fixed.)

use serde_json::Value;

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
    let _ = (attrs, op, old, new, reader);
    Ok(())
}
