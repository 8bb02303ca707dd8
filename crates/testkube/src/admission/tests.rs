use serde_json::Value;

use crate::types::{ApiError, RequestAttributes, UserInfo};

pub(super) fn attrs(
    user: UserInfo,
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    ns: &str,
    name: &str,
) -> RequestAttributes {
    RequestAttributes {
        user,
        verb: verb.into(),
        is_resource_request: true,
        path: String::new(),
        api_group: group.into(),
        api_version: "v1".into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
        field_selector: String::new(),
    }
}

pub(super) fn assert_admission_forbidden(
    result: Result<(), ApiError>,
    message: &str,
    details: Value,
) {
    let err = result.expect_err("must be forbidden");
    assert_eq!((err.code, err.reason.as_deref()), (403, Some("Forbidden")));
    assert_eq!(err.message, message);
    assert_eq!(err.details, Some(details));
    assert!(!err.nosniff, "admission 403s carry no nosniff header");
}

mod csr;
mod mutating_policy;
mod node_restriction;
mod service_account;
mod validating_policy;
