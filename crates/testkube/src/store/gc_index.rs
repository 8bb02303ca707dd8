//! The index the store keeps on every write for the garbage collector (`crate::gc`): which
//! objects name each uid as an owner, which objects a write gave reason to look at, and
//! which namespaces are terminating. It lives with the store, which updates it under its
//! lock, as kube-controller-manager's dependency graph is fed by its informers; the
//! collector reads and drains it.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::types::{ResourceKey, meta_str};

/// Where an object is stored: its type, namespace and name.
pub type Slot = (ResourceKey, String, String);

pub(crate) fn owner_uids(obj: &Value) -> BTreeSet<String> {
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

/// Being deleted in the foreground: its dependents go first.
pub(crate) fn in_foreground(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null() && has_finalizer(obj, "foregroundDeletion")
}

pub(crate) fn slot(key: &ResourceKey, obj: &Value) -> Slot {
    (
        key.clone(),
        meta_str(obj, "namespace").to_string(),
        meta_str(obj, "name").to_string(),
    )
}

fn is_namespaces(key: &ResourceKey) -> bool {
    key.group.is_empty() && key.resource == "namespaces"
}

/// What the collector must know, kept by the store as objects are written (see the module
/// documentation).
#[derive(Debug, Default)]
pub(crate) struct GcIndex {
    /// For each uid, the objects whose ownerReferences name it (the owner may not exist).
    pub(crate) dependents: HashMap<String, BTreeSet<Slot>>,
    /// Objects to look at: their owners changed, an owner is gone, or they are being
    /// deleted in the foreground.
    pub(crate) pending: BTreeSet<Slot>,
    /// uids of owners that lost a dependent (a foreground deletion may be done).
    pub(crate) pending_owners: BTreeSet<String>,
    /// Namespaces with a deletionTimestamp.
    pub(crate) terminating: BTreeSet<String>,
    /// Objects looked at by every pass so far (the cost the tests measure).
    pub(crate) examined: u64,
}

impl GcIndex {
    /// Records one write: `old` is the object before it (none for a create), `new` after
    /// it (none for a delete).
    pub fn observe(&mut self, key: &ResourceKey, old: Option<&Value>, new: Option<&Value>) {
        let Some(any) = new.or(old) else { return };
        let at = slot(key, any);
        let before = old.map(owner_uids).unwrap_or_default();
        let after = new.map(owner_uids).unwrap_or_default();
        for uid in before.difference(&after) {
            if let Some(set) = self.dependents.get_mut(uid) {
                set.remove(&at);
                if set.is_empty() {
                    self.dependents.remove(uid);
                }
            }
            self.pending_owners.insert(uid.clone());
        }
        for uid in after.difference(&before) {
            self.dependents
                .entry(uid.clone())
                .or_default()
                .insert(at.clone());
        }
        match new {
            Some(obj) => {
                if (!after.is_empty() && after != before) || in_foreground(obj) {
                    self.pending.insert(at.clone());
                }
                if is_namespaces(key) && !obj["metadata"]["deletionTimestamp"].is_null() {
                    self.terminating.insert(at.2.clone());
                }
            }
            None => {
                // An owner is gone: its dependents are garbage unless another owner lives.
                if let Some(dependents) = self.dependents.get(meta_str(any, "uid")) {
                    self.pending.extend(dependents.iter().cloned());
                }
                self.pending.remove(&at);
                if is_namespaces(key) {
                    self.terminating.remove(&at.2);
                }
            }
        }
    }

    /// Whether a pass has anything to do.
    pub fn has_work(&self) -> bool {
        !(self.pending.is_empty() && self.pending_owners.is_empty() && self.terminating.is_empty())
    }

    /// Objects looked at by the passes so far.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn examined(&self) -> u64 {
        self.examined
    }
}
