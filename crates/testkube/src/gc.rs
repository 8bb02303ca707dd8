//! Garbage collection and namespace cleanup, as kube-controller-manager's garbagecollector
//! and namespace controllers do them: dependents whose owners are all gone are deleted
//! (also when the owner uid never existed); foreground deletion deletes
//! the dependents before the owner; a terminating namespace is emptied and then removed.

use std::collections::HashSet;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::store::{StoreState, format_time, meta_str};
use crate::types::ResourceKey;

fn owner_uids(obj: &Value) -> Vec<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

fn slot(key: &ResourceKey, obj: &Value) -> (ResourceKey, String, String) {
    (
        key.clone(),
        meta_str(obj, "namespace").to_string(),
        meta_str(obj, "name").to_string(),
    )
}

/// Delete (or, with finalizers, mark deleted) one object the way the collector does.
fn collect_one(st: &mut StoreState, key: &ResourceKey, ns: &str, name: &str, now: Timestamp) {
    let Some(obj) = st.get_object(key, ns, name).cloned() else {
        return;
    };
    let finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if !finalizers {
        st.remove(key, ns, name);
        return;
    }
    if obj["metadata"]["deletionTimestamp"].is_null() {
        let mut marked = obj;
        marked["metadata"]["deletionTimestamp"] = json!(format_time(now));
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        st.replace(key, marked);
    }
}

/// With `propagationPolicy: Orphan`, dependents lose their reference to the owner.
pub fn orphan_dependents(st: &mut StoreState, owner_uid: &str) {
    let dependents: Vec<(ResourceKey, Value)> = st
        .all_objects()
        .filter(|(_, o)| owner_uids(o).iter().any(|u| u == owner_uid))
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect();
    for (key, mut obj) in dependents {
        if let Some(refs) = obj["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r["uid"] != owner_uid);
        }
        st.replace(&key, obj);
    }
}

/// One pass of the collector; returns whether anything changed (run until it does not).
pub fn collect(st: &mut StoreState, now: Timestamp) -> bool {
    let mut doomed = Vec::new();
    let mut trimmed = Vec::new();
    let mut foreground_done = Vec::new();
    let mut namespaces_done = Vec::new();
    let mut namespace_contents = Vec::new();

    let terminating: Vec<String> = st
        .list_objects(&ResourceKey::new("", "namespaces"), None)
        .into_iter()
        .filter(|n| !n["metadata"]["deletionTimestamp"].is_null())
        .map(|n| meta_str(n, "name").to_string())
        .collect();

    // Owners being deleted in the foreground, and every uid some object refers to.
    let foreground: HashSet<&str> = st
        .all_objects()
        .filter(|(_, o)| {
            !o["metadata"]["deletionTimestamp"].is_null() && has_finalizer(o, "foregroundDeletion")
        })
        .map(|(_, o)| meta_str(o, "uid"))
        .collect();
    let referenced: HashSet<String> = st.all_objects().flat_map(|(_, o)| owner_uids(o)).collect();

    for (key, obj) in st.all_objects() {
        let owners = owner_uids(obj);
        if !owners.is_empty() {
            let live: Vec<&String> = owners.iter().filter(|u| st.uid_exists(u)).collect();
            let owner_in_foreground = live.iter().any(|u| foreground.contains(u.as_str()));
            if live.is_empty() || owner_in_foreground {
                doomed.push(slot(key, obj));
            } else if live.len() < owners.len() {
                let mut kept = obj.clone();
                if let Some(refs) = kept["metadata"]["ownerReferences"].as_array_mut() {
                    refs.retain(|r| r["uid"].as_str().is_some_and(|u| st.uid_exists(u)));
                }
                trimmed.push((key.clone(), kept));
            }
        }
        let deleting = !obj["metadata"]["deletionTimestamp"].is_null();
        if deleting
            && has_finalizer(obj, "foregroundDeletion")
            && !referenced.contains(meta_str(obj, "uid"))
        {
            foreground_done.push((key.clone(), obj.clone()));
        }
        let ns = meta_str(obj, "namespace");
        if !ns.is_empty() && terminating.iter().any(|t| t == ns) {
            namespace_contents.push(slot(key, obj));
        }
    }
    for ns in &terminating {
        if !namespace_contents.iter().any(|(_, n, _)| n == ns) {
            namespaces_done.push(ns.clone());
        }
    }

    let changed = !(doomed.is_empty()
        && trimmed.is_empty()
        && foreground_done.is_empty()
        && namespace_contents.is_empty()
        && namespaces_done.is_empty());
    for (key, ns, name) in doomed.into_iter().chain(namespace_contents) {
        collect_one(st, &key, &ns, &name, now);
    }
    for (key, obj) in trimmed {
        st.replace(&key, obj);
    }
    for (key, mut obj) in foreground_done {
        if let Some(f) = obj["metadata"]["finalizers"].as_array_mut() {
            f.retain(|x| x != "foregroundDeletion");
        }
        let (ns, name) = (
            meta_str(&obj, "namespace").to_string(),
            meta_str(&obj, "name").to_string(),
        );
        if obj["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty())
        {
            st.remove(&key, &ns, &name);
        } else {
            st.replace(&key, obj);
        }
    }
    for ns in namespaces_done {
        st.remove(&ResourceKey::new("", "namespaces"), "", &ns);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn secret(name: &str, owner_uid: Option<&str>) -> Value {
        let mut s = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": name, "namespace": "default"}});
        if let Some(uid) = owner_uid {
            s["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "Secret", "name": "owner", "uid": uid}]);
        }
        s
    }

    fn run_to_fixpoint(st: &mut StoreState) {
        for _ in 0..10 {
            if !collect(st, Timestamp::now()) {
                return;
            }
        }
        panic!("collector did not settle");
    }

    #[test]
    fn dependents_of_a_deleted_owner_and_dangling_refs_are_collected() {
        let store = Store::new(1000);
        let mut st = store.lock();
        let key = ResourceKey::new("", "secrets");
        let owner = st.insert(&key, secret("owner", None), Timestamp::now());
        let uid = meta_str(&owner, "uid").to_string();
        st.insert(&key, secret("dep", Some(&uid)), Timestamp::now());
        st.insert(
            &key,
            secret("dangling", Some("00000000-0000-4000-8000-000000000000")),
            Timestamp::now(),
        );
        st.insert(&key, secret("free", None), Timestamp::now());
        run_to_fixpoint(&mut st);
        assert!(
            st.get_object(&key, "default", "dep").is_some(),
            "owner still exists"
        );
        assert!(st.get_object(&key, "default", "dangling").is_none());
        st.remove(&key, "default", "owner");
        run_to_fixpoint(&mut st);
        assert!(st.get_object(&key, "default", "dep").is_none());
        assert!(st.get_object(&key, "default", "free").is_some());
    }

    #[test]
    fn foreground_deletion_removes_dependents_then_the_owner() {
        let store = Store::new(1000);
        let mut st = store.lock();
        let key = ResourceKey::new("", "secrets");
        let mut owner = st.insert(&key, secret("owner", None), Timestamp::now());
        let uid = meta_str(&owner, "uid").to_string();
        st.insert(&key, secret("dep", Some(&uid)), Timestamp::now());
        owner["metadata"]["deletionTimestamp"] = json!(format_time(Timestamp::now()));
        owner["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
        st.replace(&key, owner);
        run_to_fixpoint(&mut st);
        assert!(st.get_object(&key, "default", "dep").is_none());
        assert!(st.get_object(&key, "default", "owner").is_none());
    }
}
