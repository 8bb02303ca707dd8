//! Between the wire form of a request's group/version and the stored form: Secret
//! `stringData` folding, per-type defaults, and events.k8s.io/v1 Events, which share the
//! storage of core v1 Events with renamed fields (`regarding` is `involvedObject`, `note` is
//! `message`, ...).

use base64::Engine;
use serde_json::{Value, json};

use crate::resources::ResourceInfo;

/// events.k8s.io/v1 field name → core/v1 field name.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: &mut Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    for (from, to) in pairs {
        if let Some(v) = map.remove(from) {
            map.insert(to.to_string(), v);
        }
    }
}

fn is_events_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io"
}

/// The stored form of an incoming object, with the server's defaults.
pub fn to_storage(info: &ResourceInfo, mut obj: Value) -> Value {
    if is_events_v1(info) {
        rename(&mut obj, EVENT_RENAMES.iter().copied());
        obj["apiVersion"] = json!("v1");
    } else {
        obj["apiVersion"] = json!(info.api_version());
    }
    obj["kind"] = json!(info.kind);
    if info.custom {
        return obj;
    }
    match info.resource.as_str() {
        "secrets" => {
            if let Some(Value::Object(string_data)) =
                obj.as_object_mut().and_then(|m| m.remove("stringData"))
            {
                let engine = base64::engine::general_purpose::STANDARD;
                if !obj["data"].is_object() {
                    obj["data"] = json!({});
                }
                for (k, v) in string_data {
                    obj["data"][k] = json!(engine.encode(v.as_str().unwrap_or("")));
                }
            }
            if obj["type"].as_str().unwrap_or("").is_empty() {
                obj["type"] = json!("Opaque");
            }
        }
        "namespaces" => {
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if !name.is_empty() {
                if !obj["metadata"]["labels"].is_object() {
                    obj["metadata"]["labels"] = json!({});
                }
                obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            }
            if !obj["spec"]["finalizers"].is_array() {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
        "events" => {
            for field in ["source"] {
                if obj[field].is_null() {
                    obj[field] = json!({});
                }
            }
            for field in ["firstTimestamp", "lastTimestamp"] {
                if obj.get(field).is_none() {
                    obj[field] = Value::Null;
                }
            }
        }
        "customresourcedefinitions" => {
            if obj["spec"]["conversion"].is_null() {
                obj["spec"]["conversion"] = json!({"strategy": "None"});
            }
            let kind = obj["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if obj["spec"]["names"]["singular"]
                .as_str()
                .unwrap_or("")
                .is_empty()
                && !kind.is_empty()
            {
                obj["spec"]["names"]["singular"] = json!(kind.to_lowercase());
            }
            if obj["spec"]["names"]["listKind"]
                .as_str()
                .unwrap_or("")
                .is_empty()
                && !kind.is_empty()
            {
                obj["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
            }
        }
        _ => {}
    }
    obj
}

/// The wire form of a stored object for the request's group/version.
pub fn present(info: &ResourceInfo, stored: &Value) -> Value {
    let mut obj = stored.clone();
    if is_events_v1(info) {
        rename(&mut obj, EVENT_RENAMES.iter().map(|(a, b)| (*b, *a)));
    }
    obj["apiVersion"] = json!(info.api_version());
    obj["kind"] = json!(info.kind);
    obj
}

/// As a list item: built-in types drop kind/apiVersion in lists; custom resources, being
/// unstructured, keep them.
pub fn present_item(info: &ResourceInfo, stored: &Value) -> Value {
    let mut obj = present(info, stored);
    if !info.custom
        && let Some(map) = obj.as_object_mut()
    {
        map.remove("kind");
        map.remove("apiVersion");
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;
    use crate::store::Store;

    fn info(group: &str, resource: &str) -> ResourceInfo {
        let store = Store::new(10);
        let st = store.lock();
        resources::resolve(&*st, group, "v1", resource).unwrap()
    }

    #[test]
    fn events_v1_round_trips_through_core_storage() {
        let v1 = info("events.k8s.io", "events");
        let wire = json!({"metadata": {"name": "e"}, "note": "hi", "regarding": {"name": "csr"}, "eventTime": "x"});
        let stored = to_storage(&v1, wire);
        assert_eq!(stored["message"], "hi");
        assert_eq!(stored["involvedObject"]["name"], "csr");
        assert_eq!(stored["apiVersion"], "v1");
        let back = present(&v1, &stored);
        assert_eq!(back["note"], "hi");
        assert_eq!(back["deprecatedSource"], json!({}));
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
    }

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let s = info("", "secrets");
        let stored = to_storage(
            &s,
            json!({"metadata": {"name": "s"}, "stringData": {"a": "1"}}),
        );
        assert_eq!(stored["data"]["a"], "MQ==");
        assert!(stored.get("stringData").is_none());
        assert_eq!(stored["type"], "Opaque");
    }
}
