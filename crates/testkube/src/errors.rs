//! `metav1.Status` errors with the real server's codes, reasons, messages and `details`
//! quirks: `details.kind` is sometimes the resource, sometimes the Kind; some errors are not
//! JSON Status at all; some client mistakes are a 500.

use serde_json::{Value, json};

use crate::resources::ResourceInfo;
use crate::types::ApiError;

/// `details` for errors that name the resource: `kind` is the plural resource (`secrets`),
/// `group` only for non-core groups.
fn resource_details(info: &ResourceInfo, name: &str) -> Value {
    Value::Object(details_of(&info.group, &info.resource, name))
}

/// The `details` of [`resource_details`] from the group and plural resource alone.
pub fn details_of(group: &str, resource: &str, name: &str) -> serde_json::Map<String, Value> {
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(resource));
    details
}

/// `details` for 422s and failed delete preconditions: `kind` is the Kind.
fn kind_details(info: &ResourceInfo, name: &str) -> serde_json::Map<String, Value> {
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !info.group.is_empty() {
        details.insert("group".into(), json!(info.group));
    }
    details.insert("kind".into(), json!(info.kind));
    details
}

pub fn not_found(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", info.qualified_resource()),
    )
    .with_details(resource_details(info, name))
}

/// The namespace an object is created in does not exist (NamespaceLifecycle admission).
pub fn namespace_not_found(namespace: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("namespaces \"{namespace}\" not found"),
    )
    .with_details(json!({"name": namespace, "kind": "namespaces"}))
}

pub fn already_exists(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::new(
        409,
        "AlreadyExists",
        format!("{} \"{name}\" already exists", info.qualified_resource()),
    )
    .with_details(resource_details(info, name))
}

pub fn conflict_stale(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please \
             apply your changes to the latest version and try again",
            info.qualified_resource()
        ),
    )
    .with_details(resource_details(info, name))
}

/// The stale-resourceVersion Conflict for a resource named by its plural only (injected
/// faults, where no ResourceInfo is at hand).
pub fn conflict_stale_plain(resource: &str, name: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; \
             please apply your changes to the latest version and try again"
        ),
    )
    .with_details(json!({"name": name, "kind": resource}))
}

/// A DELETE whose body preconditions do not match (a 409): the message and `details`
/// name the Kind, not the resource.
pub fn precondition_failed(info: &ResourceInfo, name: &str, what: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": {what}",
            info.qualified_kind()
        ),
    )
    .with_details(Value::Object(kind_details(info, name)))
}

pub fn forbidden(info: &ResourceInfo, name: &str, message: &str) -> ApiError {
    let subject = if name.is_empty() {
        info.qualified_resource()
    } else {
        format!("{} \"{name}\"", info.qualified_resource())
    };
    ApiError::new(
        403,
        "Forbidden",
        format!("{subject} is forbidden: {message}"),
    )
    .with_details(resource_details(info, name))
}

pub fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "BadRequest", message)
}

/// A 500 without a `reason` field, as the real server answers some client mistakes
/// (resourceVersion set on create, a non-numeric resourceVersion).
pub fn internal_without_reason(message: impl Into<String>) -> ApiError {
    ApiError::new(500, "", message)
}

pub fn internal_error(message: &str) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("Internal error occurred: {message}"),
    )
    .with_details(json!({"causes": [{"message": message}]}))
}

pub fn unsupported_media_type() -> ApiError {
    ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
        .with_details(json!({}))
}

pub fn method_not_allowed(method: &str) -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource ({method})"),
    )
    .with_details(json!({}))
}

pub fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, \
         application/vnd.kubernetes.protobuf",
    )
}

/// The text/plain 404 of the Go mux, for paths no handler serves (a group or CRD resource
/// that does not exist yet).
pub fn page_not_found() -> ApiError {
    let mut err = ApiError::new(404, "NotFound", "404 page not found");
    err.plain_text = Some("404 page not found\n".into());
    err.nosniff = true;
    err
}

pub fn too_many_requests(message: &str, retry_after_seconds: u32) -> ApiError {
    let mut err = ApiError::new(429, "TooManyRequests", message)
        .with_details(json!({"retryAfterSeconds": retry_after_seconds}));
    err.headers
        .push(("Retry-After".into(), retry_after_seconds.to_string()));
    err
}

pub fn expired(message: impl Into<String>) -> ApiError {
    ApiError::new(410, "Expired", message)
}

/// One entry of a 422's `details.causes`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl FieldError {
    /// `Invalid value: "<value>": <detail>`.
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        let quoted = serde_json::to_string(value).unwrap_or_default();
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {quoted}: {detail}"),
        }
    }

    /// `Invalid value: <detail>` with no value shown (CEL-style messages).
    pub fn invalid_bare(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {detail}"),
        }
    }

    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            reason: "FieldValueRequired",
            field: field.into(),
            message,
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }
}

/// A 422 Invalid as `StatusError` renders it: `<Kind[.group]> "<name>" is invalid: ...`,
/// causes in order, `details.kind` the Kind.
pub fn invalid(kind: &str, group: &str, name: &str, causes: &[FieldError]) -> ApiError {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    // The message joins the causes as an aggregate does: each distinct text once.
    let mut parts: Vec<String> = Vec::new();
    for c in causes {
        let part = format!("{}: {}", c.field, c.message);
        if !parts.contains(&part) {
            parts.push(part);
        }
    }
    let joined = if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(kind));
    details.insert(
        "causes".into(),
        Value::Array(
            causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect(),
        ),
    );
    ApiError::new(
        422,
        "Invalid",
        format!("{qualified} \"{name}\" is invalid: {joined}"),
    )
    .with_details(Value::Object(details))
}

/// 422 for an object of a resource type.
pub fn invalid_object(info: &ResourceInfo, name: &str, causes: &[FieldError]) -> ApiError {
    invalid(&info.kind, &info.group, name, causes)
}

/// 422 about request options (ListOptions, PatchOptions), group meta.k8s.io.
pub fn invalid_options(kind: &str, causes: &[FieldError]) -> ApiError {
    invalid(kind, "meta.k8s.io", "", causes)
}

/// The Status JSON body for an error.
pub fn status_body(err: &ApiError) -> Value {
    let mut status = serde_json::Map::new();
    status.insert("kind".into(), json!("Status"));
    status.insert("apiVersion".into(), json!("v1"));
    status.insert("metadata".into(), json!({}));
    status.insert("status".into(), json!("Failure"));
    status.insert("message".into(), json!(err.message));
    if let Some(reason) = &err.reason {
        status.insert("reason".into(), json!(reason));
    }
    if let Some(details) = &err.details {
        status.insert("details".into(), details.clone());
    }
    status.insert("code".into(), json!(err.code));
    Value::Object(status)
}

/// The Status of a successful DELETE (`status: Success`, `details` with name, plural kind,
/// group for non-core types, and uid).
pub fn delete_success(info: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut details = resource_details(info, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// A 404 for an object named by group, resource and name (when no `ResourceInfo` is at
/// hand: a pod a TokenRequest is bound to).
pub fn not_found_resource(group: &str, resource: &str, name: &str) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    ApiError::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
        .with_details(Value::Object(details_of(group, resource, name)))
}
