//! Custom resources against their CRD version's structural schema, as apiextensions-apiserver
//! does it: unknown fields pruned and defaults applied when a body is decoded, then on
//! create/update the OpenAPI v3 keywords (kube-openapi's validator, with its message texts)
//! and the `x-kubernetes-validations` CEL rules, all reported in one 422.
//!
//! On update, errors under a value that did not change are dropped (CRD validation
//! ratcheting, on by default since v1.30), except those of transition rules (`oldSelf`).

pub(crate) mod cel_functions;
pub(crate) mod cel_rules;
mod formats;
mod schema;

use serde_json::Value;

use crate::errors::FieldError;

pub use schema::prune_and_default;

/// Errors of the schema and of the CEL rules for `new` (`old` on update). CEL rules are
/// skipped when `earlier` (metadata errors) or the schema found a "blocking" error, as the
/// real server does, leaving one cause saying so.
pub fn errors(
    schema: &Value,
    new: &Value,
    old: Option<&Value>,
    earlier: &[FieldError],
) -> Vec<FieldError> {
    let mut errs = schema::validate(schema, new, old);
    schema::list_errors(schema, "", new, &mut errs);
    let blocking = earlier.iter().chain(&errs).any(|e| {
        matches!(
            e.reason,
            "FieldValueNotSupported"
                | "FieldValueRequired"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
                | "FieldValueTypeInvalid"
        )
    });
    if blocking {
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: "<nil>".into(),
            message: "Invalid value: \"null\": some validation rules were not checked because the \
                      object was invalid; correct the existing errors to complete validation"
                .into(),
        });
    } else {
        errs.extend(cel_rules::validate(schema, new, old));
    }
    errs
}

fn cause(reason: &'static str, field: &str, message: String) -> FieldError {
    FieldError {
        reason,
        field: field.to_string(),
        message,
    }
}

/// Go's `%v` of a float64: the shortest representation, in exponent form when the decimal
/// exponent is below -4 or at least 6 (`1e+06`, `1.5e-07`).
pub fn go_float(f: f64) -> String {
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return format!("{f}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// A JSON number as Go holds it after decoding into unstructured: int64 when it fits, else
/// float64.
pub fn go_number(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(0.0)),
    }
}

/// A value as `field.Error` prints its bad value: strings quoted, numbers and booleans
/// plain, null as `"null"`, maps and lists as Go's `%#v`.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".into(),
        Value::String(s) => quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        _ => go_sharp_v(v),
    }
}

pub(crate) fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::String(s) => quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        Value::Array(a) => format!(
            "[]interface {{}}{{{}}}",
            a.iter().map(go_sharp_v).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "map[string]interface {{}}{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}:{}", quote(k), go_sharp_v(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests;
