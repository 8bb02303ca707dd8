//! Pruning, defaulting and the OpenAPI v3 keywords of a structural schema. The checks, their
//! order and their messages follow k8s.io/kube-openapi's `validate.SchemaValidator` as
//! apiextensions-apiserver turns its results into field errors (`kubeOpenAPIResultToFieldErrors`):
//! per node the type, then the string keywords (only the first failing one), format, number
//! bounds, items and item counts, enum, then the object keywords. Go iterates properties in
//! random order; here they come alphabetically.

use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use super::{cause, go_float, go_number, go_value, quote};
use crate::errors::FieldError;

/// The formats apiextensions keeps (`StripUnsupportedFormatsPostProcess`); others, such as
/// `int32`, are ignored by the real server too.
const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "date-time",
];

fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

/// Drop fields the schema does not know (kept: `apiVersion`, `kind`, `metadata` of the
/// object and of embedded resources, and anything under `x-kubernetes-preserve-unknown-fields`),
/// then apply `default`s to absent properties. Returns the pruned paths, sorted.
pub fn prune_and_default(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    prune(schema, obj, "", true, &mut pruned);
    apply_defaults(schema, obj, true);
    pruned.sort();
    pruned
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn keeps_type_meta(schema: &Value, root: bool) -> bool {
    root || is_true(&schema["x-kubernetes-embedded-resource"])
}

fn prune(schema: &Value, v: &mut Value, path: &str, root: bool, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let preserve = is_true(&schema["x-kubernetes-preserve-unknown-fields"]);
            let type_meta = keeps_type_meta(schema, root);
            let props = schema["properties"].as_object();
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let p = child_path(path, &k);
                if type_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let sub = props.and_then(|m| m.get(&k)).or(additional);
                match (sub, map.get_mut(&k)) {
                    (Some(sub), Some(child)) => prune(sub, child, &p, false, out),
                    (None, _) if preserve => {}
                    (None, _) => {
                        map.remove(&k);
                        out.push(p);
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(sub, item, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

fn apply_defaults(schema: &Value, v: &mut Value, root: bool) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, sub) in props {
                    if root && k == "metadata" {
                        continue;
                    }
                    if let (Some(d), false) = (sub.get("default"), map.contains_key(k)) {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        apply_defaults(sub, child, false);
                    }
                }
            } else if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(sub, child, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for item in items {
                    apply_defaults(sub, item, false);
                }
            }
        }
        _ => {}
    }
}

/// The schema errors of an object (`old`: the stored object on update, for ratcheting).
pub fn validate(schema: &Value, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    node(schema, "", new, old, true, &mut errs);
    errs
}

/// kube-openapi names fields by a dotted path (`.key` at the root for required and map
/// entries); apiextensions trims the leading dot, and an empty path is Go's nil path.
fn field(path: &str) -> String {
    let f = path.trim_start_matches('.');
    if f.is_empty() {
        "<nil>".into()
    } else {
        f.into()
    }
}

fn invalid(path: &str, value: String, detail: String) -> FieldError {
    cause(
        "FieldValueInvalid",
        &field(path),
        format!("Invalid value: {value}: {detail}"),
    )
}

fn type_invalid(path: &str, type_name: &str, value: &str) -> FieldError {
    cause(
        "FieldValueTypeInvalid",
        &field(path),
        format!(
            "Invalid value: {q}: {path} in body must be of type {type_name}: {q}",
            q = quote(value)
        ),
    )
}

/// The JSON type kube-openapi infers for a decoded value.
fn data_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The items of a list that correlate with items of the old list: by key for
/// `x-kubernetes-list-type: map`, none otherwise.
pub fn correlated_item<'a>(
    schema: &Value,
    item: &Value,
    old: Option<&'a Value>,
) -> Option<&'a Value> {
    if schema["x-kubernetes-list-type"] != "map" {
        return None;
    }
    let keys = schema["x-kubernetes-list-map-keys"].as_array()?;
    old?.as_array()?.iter().find(|o| {
        keys.iter()
            .filter_map(Value::as_str)
            .all(|k| o.get(k) == item.get(k))
    })
}

fn node(
    schema: &Value,
    path: &str,
    v: &Value,
    old: Option<&Value>,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    // Ratcheting: an unchanged value keeps whatever errors it already had.
    if old == Some(v) {
        return;
    }
    let int_or_string = is_true(&schema["x-kubernetes-int-or-string"]);
    let types: Vec<&str> = if int_or_string {
        vec!["integer", "string"]
    } else {
        schema["type"]
            .as_str()
            .filter(|t| !t.is_empty())
            .into_iter()
            .collect()
    };
    let format = schema["format"]
        .as_str()
        .filter(|f| SUPPORTED_FORMATS.contains(f))
        .unwrap_or("");
    let enum_values = schema["enum"].as_array().filter(|e| !e.is_empty());
    if v.is_null() {
        if !types.is_empty() && !is_true(&schema["nullable"]) {
            errs.push(type_invalid(path, &types.join(","), "null"));
        }
        if let Some(values) = enum_values.filter(|e| !e.contains(&Value::Null)) {
            errs.push(not_supported(path, v, values));
        }
        return;
    }
    if !types.is_empty() || !format.is_empty() {
        check_type(path, v, &types, format, errs);
    }
    match v {
        Value::String(s) => {
            if let Some(e) = string_error(schema, path, s) {
                errs.push(e);
            }
            if !format.is_empty() && !super::formats::format_ok(format, s) {
                errs.push(type_invalid(path, format, s));
            }
        }
        Value::Number(n) => number_errors(schema, path, n, errs),
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    let old_item = correlated_item(schema, item, old);
                    node(sub, &format!("{path}[{i}]"), item, old_item, false, errs);
                }
            }
            let size = items.len() as i64;
            if let Some(min) = schema["minItems"].as_i64().filter(|m| size < *m) {
                errs.push(invalid(
                    path,
                    size.to_string(),
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema["maxItems"].as_i64().filter(|m| size > *m) {
                errs.push(too_many(path, size, max));
            }
        }
        _ => {}
    }
    if let Some(values) = enum_values.filter(|e| !e.iter().any(|x| json_equal(x, v))) {
        errs.push(not_supported(path, v, values));
    }
    if let Value::Object(map) = v {
        object_errors(schema, path, map, old, root, errs);
    }
}

fn check_type(path: &str, v: &Value, types: &[&str], format: &str, errs: &mut Vec<FieldError>) {
    let data = data_type(v);
    let is_float_int = data == "number"
        && v.as_f64().is_some_and(|f| f.fract() == 0.0)
        && types.contains(&"integer");
    let is_int_float = data == "integer" && types.contains(&"number");
    let ok = types.contains(&data) || is_float_int || is_int_float;
    let string_or_list = matches!(v, Value::String(_) | Value::Array(_));
    let data_format = match data {
        "integer" => "int64",
        "number" => "float64",
        _ => "",
    };
    if !(string_or_list || format.is_empty() || ok || data_format == format) {
        errs.push(type_invalid(path, format, data_format));
        return;
    }
    let numeric = types.contains(&"number") || types.contains(&"integer");
    if !numeric && !format.is_empty() && string_or_list {
        return;
    }
    if !ok {
        errs.push(type_invalid(path, &types.join(","), data));
    }
}

/// maxLength, minLength, pattern: kube-openapi stops at the first failure.
fn string_error(schema: &Value, path: &str, s: &str) -> Option<FieldError> {
    let len = s.chars().count() as i64;
    if let Some(max) = schema["maxLength"].as_i64().filter(|m| len > *m) {
        let unit = if max == 1 { "byte" } else { "bytes" };
        return Some(cause(
            "FieldValueTooLong",
            &field(path),
            format!("Too long: may not be more than {max} {unit}"),
        ));
    }
    if let Some(min) = schema["minLength"].as_i64().filter(|m| len < *m) {
        return Some(invalid(
            path,
            quote(s),
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    let pattern = schema["pattern"].as_str()?;
    let matched = match cached_regex(pattern) {
        Ok(re) => re.is_match(s),
        Err(e) => {
            let detail =
                format!("{path} in body should match '{pattern}, but pattern is invalid: {e}'");
            return Some(invalid(path, quote(s), detail));
        }
    };
    (!matched).then(|| {
        invalid(
            path,
            quote(s),
            format!("{path} in body should match '{pattern}'"),
        )
    })
}

/// Compiled patterns and CEL regexes, kept for the life of the process (CRDs are few).
pub fn cached_regex(pattern: &str) -> Result<Regex, regex::Error> {
    static CACHE: OnceLock<Mutex<std::collections::HashMap<String, Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(re.clone());
    }
    let re = Regex::new(pattern)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pattern.to_string(), re.clone());
    Ok(re)
}

/// multipleOf, minimum, maximum: an integer is compared with bounds truncated to integers
/// (kube-openapi's `*NativeType` checks), a float with the float bounds.
fn number_errors(schema: &Value, path: &str, n: &serde_json::Number, errs: &mut Vec<FieldError>) {
    let shown = go_number(n);
    let int = n.as_i64();
    let x = n.as_f64().unwrap_or(0.0);
    let bound = |b: f64| match int {
        Some(_) => (b as i64).to_string(),
        None => go_float(b),
    };
    if let Some(m) = schema["multipleOf"].as_f64() {
        let ok = match int {
            Some(i) if m as i64 != 0 => i % (m as i64) == 0,
            _ => {
                let q = if m < 1.0 { (1.0 / m) * x } else { x / m };
                q.fract() == 0.0
            }
        };
        if !ok {
            errs.push(invalid(
                path,
                shown.clone(),
                format!("{path} in body should be a multiple of {}", bound(m)),
            ));
        }
    }
    let cmp = |b: f64| match int {
        Some(i) => (i as f64).partial_cmp(&((b as i64) as f64)),
        None => x.partial_cmp(&b),
    };
    if let Some(min) = schema["minimum"].as_f64() {
        let exclusive = is_true(&schema["exclusiveMinimum"]);
        let c = cmp(min);
        let bad = if exclusive {
            c != Some(std::cmp::Ordering::Greater)
        } else {
            c == Some(std::cmp::Ordering::Less)
        };
        if bad {
            let op = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(invalid(
                path,
                shown.clone(),
                format!("{path} in body should be {op} {}", bound(min)),
            ));
        }
    }
    if let Some(max) = schema["maximum"].as_f64() {
        let exclusive = is_true(&schema["exclusiveMaximum"]);
        let c = cmp(max);
        let bad = if exclusive {
            c != Some(std::cmp::Ordering::Less)
        } else {
            c == Some(std::cmp::Ordering::Greater)
        };
        if bad {
            let op = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(invalid(
                path,
                shown,
                format!("{path} in body should be {op} {}", bound(max)),
            ));
        }
    }
}

fn too_many(path: &str, actual: i64, max: i64) -> FieldError {
    cause(
        "FieldValueTooMany",
        &field(path),
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

fn not_supported(path: &str, v: &Value, values: &[Value]) -> FieldError {
    let supported: Vec<String> = values
        .iter()
        .map(|x| match x {
            Value::String(s) => quote(s),
            other => quote(&other.to_string()),
        })
        .collect();
    cause(
        "FieldValueNotSupported",
        &field(path),
        format!(
            "Unsupported value: {}: supported values: {}",
            go_value(v),
            supported.join(", ")
        ),
    )
}

/// Equality as Go's after decoding: numbers by value (1 and 1.0 are equal).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn object_errors(
    schema: &Value,
    path: &str,
    map: &Map<String, Value>,
    old: Option<&Value>,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    let count = map.len() as i64;
    if let Some(min) = schema["minProperties"].as_i64().filter(|m| count < *m) {
        errs.push(invalid(
            path,
            count.to_string(),
            format!("{path} in body should have at least {min} properties"),
        ));
        return;
    }
    if let Some(max) = schema["maxProperties"].as_i64().filter(|m| count > *m) {
        errs.push(too_many(path, count, max));
        return;
    }
    let props = schema["properties"].as_object();
    if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        for (k, child) in map
            .iter()
            .filter(|(k, _)| !props.is_some_and(|p| p.contains_key(*k)))
        {
            let old_child = old.and_then(|o| o.get(k));
            node(sub, &format!("{path}.{k}"), child, old_child, false, errs);
        }
    }
    for (k, sub) in props.into_iter().flatten() {
        // Object metadata is validated as ObjectMeta, not by the CRD schema.
        if root && k == "metadata" {
            continue;
        }
        if let Some(child) = map.get(k) {
            let old_child = old.and_then(|o| o.get(k));
            node(sub, &child_path(path, k), child, old_child, false, errs);
        }
    }
    for k in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(k) {
            errs.push(cause(
                "FieldValueRequired",
                &field(&format!("{path}.{k}")),
                "Required value".into(),
            ));
        }
    }
}

/// `x-kubernetes-list-type: set` and `map` lists must not repeat an item or a key
/// (apiextensions' `ValidateListSetsAndMaps`): each later repeat is a Duplicate.
pub fn list_errors(schema: &Value, path: &str, v: &Value, errs: &mut Vec<FieldError>) {
    match v {
        Value::Array(items) => {
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let identity = |item: &Value| -> Option<Value> {
                match schema["x-kubernetes-list-type"].as_str() {
                    Some("set") => Some(item.clone()),
                    Some("map") if !keys.is_empty() => Some(Value::Object(
                        keys.iter()
                            .filter_map(|k| Some((k.to_string(), item.get(*k)?.clone())))
                            .collect(),
                    )),
                    _ => None,
                }
            };
            let mut seen: Vec<Value> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Some(id) = identity(item) else { break };
                if seen.iter().any(|s| json_equal(s, &id)) {
                    let shown = if id.is_object() {
                        super::go_sharp_v(&id)
                    } else {
                        go_value(&id)
                    };
                    errs.push(cause(
                        "FieldValueDuplicate",
                        &format!("{path}[{i}]"),
                        format!("Duplicate value: {shown}"),
                    ));
                } else {
                    seen.push(id);
                }
            }
            if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    list_errors(sub, &format!("{path}[{i}]"), item, errs);
                }
            }
        }
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, sub) in props {
                    if let Some(child) = map.get(k) {
                        list_errors(sub, &child_path(path, k), child, errs);
                    }
                }
            } else if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, child) in map {
                    list_errors(sub, &format!("{path}[{k}]"), child, errs);
                }
            }
        }
        _ => {}
    }
}
