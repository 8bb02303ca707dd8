//! Strategic merge patch, after k8s.io/apimachinery/pkg/util/strategicpatch (`mergeMap`,
//! `mergeSliceHandler`, `removeDirectives`, with the server's options `MergeParallelList`
//! and `IgnoreUnmatchedNulls`):
//!
//! - maps merge key by key; a `null` deletes the key;
//! - a map holding `$patch: replace` replaces the map it patches (the marker removed), one
//!   holding `$patch: delete` empties it; another `$patch` value is an error;
//! - `$retainKeys: [..]` drops the original's keys not listed (a patch key outside the list
//!   is the 422 upstream gives);
//! - a value that does not merge (a new key, another JSON type, a scalar) is taken from the
//!   patch with its directives removed (a map holding `$patch` is dropped whole);
//! - a list whose Go field has no `patchStrategy:"merge"` is atomic: the patch's list
//!   replaces it as sent, directives and all (the decoder then drops `$patch` as an unknown
//!   field, with its warning). `Node.spec.taints` is such a list, so
//!   `{"taints":[{"key":..,"$patch":"delete"}]}` replaces every taint by that one;
//! - a list with `patchStrategy:"merge"` merges: elements of maps by their merge key
//!   (`$patch: delete` elements remove the original's element with that key, `$patch:
//!   replace` replaces the list), scalars as a set; `$deleteFromPrimitiveList/<field>`
//!   removes scalars.
//!
//! The merge strategies known here are those of the Go types testkube serves
//! ([`list_strategy`]); `$setElementOrder/<field>` is accepted and ignored (merged lists
//! keep the original's order, new elements appended).

use serde_json::{Map, Value};

use crate::errors::{bad_request, internal_without_reason};
use crate::types::ApiError;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// How a list field merges: `None` atomic; `Some(None)` a set of scalars;
/// `Some(Some(key))` a list of maps by that key.
type ListStrategy = Option<Option<&'static str>>;

/// The `patchStrategy:"merge"` lists of the types testkube serves (k8s.io/api core/v1 and
/// meta/v1 struct tags), by kind and field path.
fn list_strategy(kind: &str, path: &[&str]) -> ListStrategy {
    match (kind, path) {
        (_, ["metadata", "finalizers"]) => Some(None),
        (_, ["metadata", "ownerReferences"]) => Some(Some("uid")),
        ("Node", ["spec", "podCIDRs"]) => Some(None),
        ("Node", ["status", "conditions" | "addresses"]) => Some(Some("type")),
        ("Namespace" | "Pod", ["status", "conditions"]) => Some(Some("type")),
        (
            "Pod",
            [
                "spec",
                "volumes"
                | "containers"
                | "initContainers"
                | "ephemeralContainers"
                | "imagePullSecrets",
            ],
        ) => Some(Some("name")),
        _ => None,
    }
}

/// Applies a strategic merge patch (an object) to `original` of kind `kind`.
pub fn apply(kind: &str, original: &mut Value, patch: Map<String, Value>) -> Result<(), ApiError> {
    let Value::Object(map) = original else {
        *original = Value::Object(Map::new());
        return apply(kind, original, patch);
    };
    let merged = merge_map(kind, &mut Vec::new(), std::mem::take(map), patch)?;
    *original = Value::Object(merged);
    Ok(())
}

fn merge_map(
    kind: &str,
    path: &mut Vec<String>,
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(internal_without_reason(format!(
                "Unexpected patch type {}: {}",
                directive,
                Value::Object(patch.clone())
            ))),
        };
    }
    if let Some(retain) = patch.remove(RETAIN_KEYS) {
        let Some(keys) = retain.as_array() else {
            return Err(bad_request(
                "invalid patch format of retainKeys: should be a list",
            ));
        };
        let keep: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        if let Some(k) = patch
            .keys()
            .find(|k| !k.starts_with('$') && !keep.contains(&k.as_str()))
        {
            return Err(ApiError::new(
                422,
                "",
                format!("patch content doesn't match retainKeys list: {k}"),
            ));
        }
        original.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, patch_value) in patch {
        if key.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            delete_from_primitive_list(&mut original, field, &patch_value)?;
            continue;
        }
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        path.push(key.clone());
        let merged = match (original.remove(&key), patch_value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                Some(Value::Object(merge_map(kind, path, o, p)?))
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                let fields: Vec<&str> = path.iter().map(String::as_str).collect();
                match list_strategy(kind, &fields) {
                    None => Some(Value::Array(p)),
                    Some(merge_key) => Some(Value::Array(merge_list(kind, path, o, p, merge_key)?)),
                }
            }
            (_, mut p) => {
                discard_nulls(&mut p);
                remove_directives(p)
            }
        };
        path.pop();
        if let Some(v) = merged {
            original.insert(key, v);
        }
    }
    Ok(original)
}

fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    field: &str,
    values: &Value,
) -> Result<(), ApiError> {
    let Some(values) = values.as_array() else {
        return Err(bad_request(
            "invalid patch format of primitive list: should be a list",
        ));
    };
    if let Some(Value::Array(items)) = original.get_mut(field) {
        if items.iter().any(Value::is_object) {
            return Err(internal_without_reason(
                "cannot merge lists without merge key for struct",
            ));
        }
        items.retain(|item| !values.contains(item));
    }
    Ok(())
}

fn merge_list(
    kind: &str,
    path: &mut Vec<String>,
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: Option<&'static str>,
) -> Result<Vec<Value>, ApiError> {
    let Some(merge_key) = merge_key else {
        for item in patch {
            if !original.contains(&item) {
                original.push(item);
            }
        }
        return Ok(original);
    };
    let key_of = |v: &Value| v.get(merge_key).cloned();
    // `mergeSliceWithSpecialElements`: `$patch` elements first.
    let mut plain = Vec::new();
    let mut replace = false;
    for item in patch {
        let Value::Object(item) = item else {
            return Err(internal_without_reason(format!(
                "cannot merge lists without merge key for {kind}"
            )));
        };
        match item.get(DIRECTIVE) {
            None => plain.push(item),
            Some(directive) => match directive.as_str() {
                Some("delete") => {
                    let Some(k) = item.get(merge_key).cloned() else {
                        return Err(internal_without_reason(format!(
                            "map: {} does not contain declared merge key: {merge_key}",
                            Value::Object(item.clone())
                        )));
                    };
                    original.retain(|o| key_of(o).as_ref() != Some(&k));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(internal_without_reason(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => {
                    return Err(internal_without_reason(format!(
                        "Unexpected patch type {directive}: {}",
                        Value::Object(item.clone())
                    )));
                }
            },
        }
    }
    if replace {
        return Ok(plain.into_iter().map(Value::Object).collect());
    }
    for mut item in plain {
        let Some(k) = item.get(merge_key).cloned() else {
            return Err(internal_without_reason(format!(
                "map: {} does not contain declared merge key: {merge_key}",
                Value::Object(item.clone())
            )));
        };
        match original.iter_mut().find(|o| key_of(o).as_ref() == Some(&k)) {
            Some(Value::Object(existing)) => {
                let merged = merge_map(kind, path, std::mem::take(existing), item)?;
                *existing = merged;
            }
            _ => {
                discard_nulls_map(&mut item);
                if let Some(v) = remove_directives(Value::Object(item)) {
                    original.push(v);
                }
            }
        }
    }
    Ok(original)
}

fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => discard_nulls_map(m),
        Value::Array(items) => items.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

fn discard_nulls_map(m: &mut Map<String, Value>) {
    m.retain(|_, v| !v.is_null());
    m.values_mut().for_each(discard_nulls);
}

/// `removeDirectives`: `None` when the value itself is a directive (not kept).
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) if m.contains_key(DIRECTIVE) => None,
        Value::Object(m) => Some(Value::Object(
            m.into_iter()
                .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn smp(kind: &str, original: Value, patch: Value) -> Result<Value, ApiError> {
        let mut out = original;
        apply(kind, &mut out, patch.as_object().unwrap().clone())?;
        Ok(out)
    }

    #[test]
    fn taints_are_atomic_so_a_delete_directive_replaces_the_list() {
        let node = json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]}});
        let out = smp(
            "Node",
            node,
            json!({"spec": {"taints": [{"key": "a", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["taints"],
            json!([{"key": "a", "$patch": "delete"}])
        );
    }

    #[test]
    fn map_directives() {
        let node = json!({"spec": {"taints": [{"key": "a"}], "unschedulable": true}});
        let replaced = smp(
            "Node",
            node.clone(),
            json!({"spec": {"$patch": "replace", "taints": []}}),
        )
        .unwrap();
        assert_eq!(replaced["spec"], json!({"taints": []}));
        let deleted = smp("Node", node.clone(), json!({"spec": {"$patch": "delete"}})).unwrap();
        assert_eq!(deleted["spec"], json!({}));
        // A directive map where a list was is dropped with the key.
        let gone = smp(
            "Node",
            node.clone(),
            json!({"spec": {"taints": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert_eq!(gone["spec"], json!({"unschedulable": true}));
        assert_eq!(
            smp("Node", node, json!({"spec": {"$patch": "nonsense"}}))
                .unwrap_err()
                .code,
            500
        );
    }

    #[test]
    fn merge_lists_by_key() {
        let node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "DiskPressure", "status": "False"}]}});
        let out = smp(
            "Node",
            node,
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DiskPressure", "$patch": "delete"},
                {"type": "PIDPressure", "status": "False"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "PIDPressure", "status": "False"}])
        );
        let meta = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = smp(
            "Secret",
            meta.clone(),
            json!({"metadata": {"finalizers": ["c"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = smp(
            "Secret",
            meta,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn nulls_delete_and_new_values_lose_directives() {
        let out = smp(
            "ConfigMap",
            json!({"data": {"a": "1", "b": "2"}}),
            json!({"data": {"a": null}, "x": {"y": {"$patch": "delete"}, "z": 1}}),
        )
        .unwrap();
        assert_eq!(out, json!({"data": {"b": "2"}, "x": {"z": 1}}));
    }

    #[test]
    fn retain_keys() {
        let out = smp(
            "Pod",
            json!({"spec": {"a": 1, "b": 2}}),
            json!({"spec": {"$retainKeys": ["b"], "b": 3}}),
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"b": 3}));
        assert_eq!(
            smp(
                "Pod",
                json!({"spec": {}}),
                json!({"spec": {"$retainKeys": ["b"], "c": 3}})
            )
            .unwrap_err()
            .code,
            422
        );
    }
}
