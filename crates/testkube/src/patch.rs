//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch
//! and server-side apply.
//!
//! A strategic merge patch follows upstream's directives and list strategies
//! ([`strategic`]); a custom resource refuses it (415) as the real server does.
//!
//! Deliberate simplification, documented in the README:
//! - Server-side apply merges the applied configuration into the live object like a merge
//!   patch. There is no field ownership: conflicts are never reported (409) and fields a
//!   manager stops applying are not removed.

use serde_json::Value;

use crate::errors::{FieldError, bad_request, invalid_options, unsupported_media_type};
use crate::types::ApiError;

mod strategic;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    /// The patch type of a Content-Type, ignoring parameters such as `charset`; anything
    /// else is a bare 415 `Unsupported Media Type` with empty `details`.
    pub fn from_content_type(content_type: Option<&str>) -> Result<PatchType, ApiError> {
        let media = content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            _ => Err(unsupported_media_type()),
        }
    }
}

/// The 422 (kind PatchOptions, not a 400) for a server-side apply without `?fieldManager=`.
pub fn field_manager_required() -> ApiError {
    invalid_options(
        "PatchOptions",
        &[FieldError::required(
            "fieldManager",
            "is required for apply patch",
        )],
    )
}

/// Parse an apply body: YAML (JSON is valid YAML).
pub fn parse_apply(body: &[u8]) -> Result<Value, ApiError> {
    let text =
        std::str::from_utf8(body).map_err(|e| bad_request(format!("error decoding YAML: {e}")))?;
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| bad_request(format!("error decoding YAML: {e}")))?;
    if !value.is_object() {
        return Err(bad_request(
            "error decoding YAML: the applied configuration must be an object",
        ));
    }
    Ok(value)
}

/// The 422 the real server gives when a JSON patch cannot be applied
/// (`NewGenericServerResponse(422, ...)`).
fn patch_apply_error(message: String) -> ApiError {
    ApiError::new(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
    )
    .with_details(
        serde_json::json!({"causes": [{"reason": "UnexpectedServerResponse", "message": message}]}),
    )
}

/// The 415 for a strategic merge patch of a custom resource (the CRD handler lists the
/// patch types it takes).
pub fn strategic_unsupported() -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )
    .with_details(serde_json::json!({}))
}

/// Apply a non-apply patch to `current`, an object of kind `kind` (whose Go type decides
/// how a strategic merge patch merges its lists).
pub fn apply_patch(
    patch_type: PatchType,
    kind: &str,
    current: &Value,
    body: &[u8],
) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match patch_type {
        PatchType::Json => {
            let ops: json_patch::Patch =
                serde_json::from_slice(body).map_err(|e| bad_request(e.to_string()))?;
            json_patch::patch(&mut doc, &ops).map_err(|e| patch_apply_error(e.to_string()))?;
        }
        PatchType::Merge | PatchType::Strategic => {
            let patch: Value =
                serde_json::from_slice(body).map_err(|e| bad_request(e.to_string()))?;
            let Value::Object(patch) = patch else {
                return Err(bad_request(
                    "json: cannot unmarshal non-object into a patch",
                ));
            };
            if patch_type == PatchType::Strategic {
                strategic::apply(kind, &mut doc, patch)?;
            } else {
                json_patch::merge(&mut doc, &Value::Object(patch));
            }
        }
        PatchType::Apply => {
            let applied = parse_apply(body)?;
            json_patch::merge(&mut doc, &applied);
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type(Some("application/merge-patch+json; charset=utf-8"))
                .unwrap(),
            PatchType::Merge
        );
        assert_eq!(
            PatchType::from_content_type(Some("application/json"))
                .unwrap_err()
                .code,
            415
        );
        assert_eq!(PatchType::from_content_type(None).unwrap_err().code, 415);
    }

    #[test]
    fn merge_patch_removes_nulls_and_replaces_lists() {
        let cur = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [1, 2]}});
        let out = apply_patch(
            PatchType::Merge,
            "Node",
            &cur,
            br#"{"metadata":{"labels":{"a":null,"c":"3"}},"spec":{"taints":[3]}}"#,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"taints": [3]}})
        );
    }

    #[test]
    fn json_patch_test_failure_is_422() {
        let cur = json!({"metadata": {"resourceVersion": "5"}});
        let body = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"4"}]"#;
        assert_eq!(
            apply_patch(PatchType::Json, "Secret", &cur, body)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn apply_reads_yaml() {
        let cur = json!({"metadata": {"name": "n"}});
        let out = apply_patch(
            PatchType::Apply,
            "Node",
            &cur,
            b"metadata:\n  labels:\n    a: \"1\"\n",
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"]["a"], "1");
    }
}
