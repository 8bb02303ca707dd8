//! What the real server does around a write of particular types, synchronously: the
//! apiextensions controller establishing a new CRD (its resource is served at once; the
//! real server needs under 0.4 s), and dropping the custom resources of a
//! deleted CRD.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::resources::{ResourceInfo, crd_key};
use crate::store::{StoreState, format_time, meta_str};
use crate::types::ResourceKey;

fn is_crd(info: &ResourceInfo) -> bool {
    !info.custom && info.key() == crd_key()
}

/// The storage version of a CRD (the one marked `storage: true`).
fn storage_version(crd: &Value) -> Option<String> {
    let versions = crd["spec"]["versions"].as_array()?;
    versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .or(versions.first())?["name"]
        .as_str()
        .map(String::from)
}

pub fn before_create(info: &ResourceInfo, obj: &mut Value) {
    if is_crd(info) {
        let stored: Vec<String> = storage_version(obj).into_iter().collect();
        obj["status"]["storedVersions"] = json!(stored);
    }
}

pub fn after_create(st: &mut StoreState, info: &ResourceInfo, stored: &Value, now: Timestamp) {
    if !is_crd(info) {
        return;
    }
    let mut established = stored.clone();
    let t = format_time(now);
    established["status"]["conditions"] = json!([
        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": t, "reason": "NoConflicts",
         "message": "no conflicts found"},
        {"type": "Established", "status": "True", "lastTransitionTime": t, "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted"},
    ]);
    established["status"]["acceptedNames"] = stored["spec"]["names"].clone();
    st.replace(&crd_key(), established);
}

pub fn after_delete(st: &mut StoreState, info: &ResourceInfo, old: &Value) {
    if !is_crd(info) {
        return;
    }
    let group = old["spec"]["group"].as_str().unwrap_or("");
    let plural = old["spec"]["names"]["plural"].as_str().unwrap_or("");
    let key = ResourceKey::new(group, plural);
    let victims: Vec<(String, String)> = st
        .list_objects(&key, None)
        .into_iter()
        .map(|o| {
            (
                meta_str(o, "namespace").to_string(),
                meta_str(o, "name").to_string(),
            )
        })
        .collect();
    for (ns, name) in victims {
        st.remove(&key, &ns, &name);
    }
}
