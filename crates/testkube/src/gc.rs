//! Garbage collection and namespace cleanup, as kube-controller-manager's garbagecollector
//! and namespace controllers do them: dependents whose owners are all gone are deleted
//! (also when the owner uid never existed); foreground deletion deletes
//! the dependents before the owner; a terminating namespace is emptied and then removed.
//!
//! Like the real collector, which works from a dependency graph its informers keep
//! (garbagecollector/graph_builder.go) and never scans the store, the collector here works
//! from an index the store keeps on every write ([`GcIndex`](crate::store::gc_index::GcIndex)): which objects name each uid
//! as an owner, which objects a write gave reason to look at, and which namespaces are
//! terminating. A pass looks at those objects alone, so a delete costs the same in a store
//! of ten objects or of a million.

use jiff::Timestamp;
use serde_json::json;

use crate::store::gc_index::{Slot, in_foreground, owner_uids, slot};
use crate::store::{StoreState, format_time, meta_str};
use crate::types::ResourceKey;

/// Delete (or, with finalizers, mark deleted) one object the way the collector does;
/// whether anything changed.
fn collect_one(st: &mut StoreState, (key, ns, name): &Slot, now: Timestamp) -> bool {
    let Some(obj) = st.get_object(key, ns, name) else {
        return false;
    };
    let finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if !finalizers {
        st.remove(key, ns, name);
        return true;
    }
    if !obj["metadata"]["deletionTimestamp"].is_null() {
        return false;
    }
    let mut marked = obj.clone();
    marked["metadata"]["deletionTimestamp"] = json!(format_time(now));
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    st.replace(key, marked);
    true
}

/// With `propagationPolicy: Orphan`, dependents lose their reference to the owner.
pub fn orphan_dependents(st: &mut StoreState, owner_uid: &str) {
    let dependents = st.gc.dependents.get(owner_uid).cloned().unwrap_or_default();
    for (key, ns, name) in dependents {
        let Some(mut obj) = st.get_object(&key, &ns, &name).cloned() else {
            continue;
        };
        if let Some(refs) = obj["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r["uid"] != owner_uid);
        }
        st.replace(&key, obj);
    }
}

/// The contents of terminating namespaces go; an empty one is removed.
fn empty_namespaces(st: &mut StoreState, now: Timestamp) -> bool {
    let mut changed = false;
    let keys = st.resource_keys();
    for ns in st.gc.terminating.clone() {
        let contents: Vec<Slot> = keys
            .iter()
            .flat_map(|k| {
                st.list_objects(k, Some(&ns))
                    .into_iter()
                    .map(|o| slot(k, o))
            })
            .collect();
        st.gc.examined += contents.len() as u64;
        if contents.is_empty() {
            st.remove(&ResourceKey::new("", "namespaces"), "", &ns);
            changed = true;
        }
        for s in &contents {
            changed |= collect_one(st, s, now);
        }
    }
    changed
}

/// Looks at one object the index named: collected when every owner is gone or one is being
/// deleted in the foreground, references to gone owners trimmed otherwise; an owner in
/// foreground deletion with no dependents left loses that finalizer.
fn look_at(st: &mut StoreState, at: &Slot, now: Timestamp) -> bool {
    st.gc.examined += 1;
    let Some(obj) = st.get_object(&at.0, &at.1, &at.2).cloned() else {
        return false;
    };
    let owners = owner_uids(&obj);
    if !owners.is_empty() {
        let live: Vec<&String> = owners.iter().filter(|u| st.uid_exists(u)).collect();
        let owner_in_foreground = live
            .iter()
            .any(|u| st.object_by_uid(u).is_some_and(|(_, o)| in_foreground(o)));
        if live.is_empty() || owner_in_foreground {
            return collect_one(st, at, now);
        }
        if live.len() < owners.len() {
            let mut kept = obj.clone();
            if let Some(refs) = kept["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str().is_some_and(|u| st.uid_exists(u)));
            }
            st.replace(&at.0, kept);
            return true;
        }
    }
    if !in_foreground(&obj) {
        return false;
    }
    if let Some(dependents) = st.gc.dependents.get(meta_str(&obj, "uid")) {
        // They go first (the next pass collects them); their removal brings this owner
        // back here.
        let dependents = dependents.clone();
        st.gc.pending.extend(dependents);
        return false;
    }
    let mut done = obj;
    if let Some(f) = done["metadata"]["finalizers"].as_array_mut() {
        f.retain(|x| x != "foregroundDeletion");
    }
    if done["metadata"]["finalizers"]
        .as_array()
        .is_none_or(|f| f.is_empty())
    {
        st.remove(&at.0, &at.1, &at.2);
    } else {
        st.replace(&at.0, done);
    }
    true
}

/// One pass of the collector over what the index names; whether there is more to do (run
/// until there is not).
pub fn collect(st: &mut StoreState, now: Timestamp) -> bool {
    let mut changed = empty_namespaces(st, now);
    for uid in std::mem::take(&mut st.gc.pending_owners) {
        let owner = st.object_by_uid(&uid).map(|(k, o)| slot(k, o));
        if let Some(owner) = owner {
            st.gc.pending.insert(owner);
        }
    }
    for at in std::mem::take(&mut st.gc.pending) {
        changed |= look_at(st, &at, now);
    }
    changed || !st.gc.pending.is_empty() || !st.gc.pending_owners.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use serde_json::Value;

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
    /// The cost of a pass is what the writes touched, not the size of the store: deleting
    /// an owner among thousands of unrelated objects looks at its one dependent (and
    /// nothing when an object without dependents goes).
    #[test]
    fn a_delete_looks_only_at_what_it_touched() {
        for unrelated in [10, 10_000] {
            let store = Store::new(1000);
            let mut st = store.lock();
            let key = ResourceKey::new("", "secrets");
            for i in 0..unrelated {
                st.insert(&key, secret(&format!("other-{i}"), None), Timestamp::now());
            }
            let owner = st.insert(&key, secret("owner", None), Timestamp::now());
            let uid = meta_str(&owner, "uid").to_string();
            st.insert(&key, secret("dep", Some(&uid)), Timestamp::now());
            run_to_fixpoint(&mut st);
            let before = st.gc.examined();
            st.remove(&key, "default", "owner");
            run_to_fixpoint(&mut st);
            assert!(st.get_object(&key, "default", "dep").is_none());
            assert_eq!(
                st.gc.examined() - before,
                1,
                "{unrelated} unrelated objects"
            );
            let before = st.gc.examined();
            st.remove(&key, "default", "other-0");
            assert!(!st.gc.has_work());
            run_to_fixpoint(&mut st);
            assert_eq!(st.gc.examined(), before);
        }
    }

    #[test]
    fn orphaning_keeps_the_dependents_and_drops_the_reference() {
        let store = Store::new(1000);
        let mut st = store.lock();
        let key = ResourceKey::new("", "secrets");
        let owner = st.insert(&key, secret("owner", None), Timestamp::now());
        let uid = meta_str(&owner, "uid").to_string();
        st.insert(&key, secret("dep", Some(&uid)), Timestamp::now());
        orphan_dependents(&mut st, &uid);
        st.remove(&key, "default", "owner");
        run_to_fixpoint(&mut st);
        let dep = st
            .get_object(&key, "default", "dep")
            .expect("orphaned, not collected");
        assert_eq!(dep["metadata"]["ownerReferences"], json!([]));
    }

    #[test]
    fn a_terminating_namespace_is_emptied_then_removed() {
        let store = Store::new(1000);
        let mut st = store.lock();
        let ns_key = ResourceKey::new("", "namespaces");
        let key = ResourceKey::new("", "secrets");
        let mut ns = st.insert(
            &ns_key,
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "default"}}),
            Timestamp::now(),
        );
        st.insert(&key, secret("inside", None), Timestamp::now());
        ns["metadata"]["deletionTimestamp"] = json!(format_time(Timestamp::now()));
        st.replace(&ns_key, ns);
        run_to_fixpoint(&mut st);
        assert!(st.get_object(&key, "default", "inside").is_none());
        assert!(st.get_object(&ns_key, "", "default").is_none());
        assert!(!st.gc.has_work());
    }
}
