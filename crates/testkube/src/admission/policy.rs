//! What ValidatingAdmissionPolicy and MutatingAdmissionPolicy share, after
//! k8s.io/apiserver/pkg/admission/plugin/policy/generic and .../matching: which requests a
//! policy's `matchConstraints.resourceRules` match, the `request` variable, objects as CEL
//! sees unstructured content, and one boolean expression's outcome.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map as CelMap};
use cel::{Context, Value as Cel};
use serde_json::{Value, json};

use crate::crd_validation::cel_rules::{compile, execute};
use crate::types::{Operation, RequestAttributes};

pub(super) fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
    }
}

/// Whether a list of strings (absent: none) holds `value` or `*`.
pub(super) fn lists(v: &Value, value: &str) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().any(|s| s == "*" || s == value))
}

/// `matchConstraints.resourceRules`: one rule matching group, version, resource (with
/// `resource/subresource` for subresources, `*/*` for all) and operation.
pub(super) fn matches_resources(policy: &Value, attrs: &RequestAttributes, op: &str) -> bool {
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let rules = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    rules.iter().any(|r| {
        lists(&r["apiGroups"], &attrs.api_group)
            && lists(&r["apiVersions"], &attrs.api_version)
            && lists(&r["operations"], op)
            && (lists(&r["resources"], &resource)
                || (!attrs.subresource.is_empty() && lists(&r["resources"], "*/*")))
    })
}

/// A JSON value as CEL sees unstructured content: objects are maps with string keys,
/// whole numbers ints.
pub(crate) fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let map: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, x)| (Key::String(Arc::new(k.clone())), to_cel(x)))
                .collect();
            Cel::Map(CelMap { map: Arc::new(map) })
        }
    }
}

/// The `request` variable: the fields of admission.k8s.io/v1 AdmissionRequest a policy
/// reads.
pub(super) fn request(attrs: &RequestAttributes, op: &str, name: &str) -> Value {
    let mut user = json!({"username": attrs.user.name, "groups": attrs.user.groups});
    if !attrs.user.uid.is_empty() {
        user["uid"] = json!(attrs.user.uid);
    }
    json!({
        "operation": op,
        "name": name,
        "namespace": attrs.namespace,
        "resource": {"group": attrs.api_group, "version": attrs.api_version, "resource": attrs.resource},
        "subResource": attrs.subresource,
        "userInfo": user,
    })
}

/// What one expression made of the request: true, false, or an error's text.
pub(super) fn evaluate(expression: &str, ctx: &Context) -> Result<bool, String> {
    let program = compile(expression)?;
    match execute(&program, ctx)? {
        Cel::Bool(b) => Ok(b),
        other => Err(format!("expected a bool, got {other:?}")),
    }
}
