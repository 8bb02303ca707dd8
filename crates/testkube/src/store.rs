//! The object store: JSON objects by resource, namespace and name, one global monotonically
//! increasing resourceVersion (like an etcd revision), and a bounded event history that
//! watches resume from.
//!
//! The whole store sits behind one mutex. Request handlers run their synchronous part
//! (authorization, admission, validation, the write) under it, so a request sees and
//! changes one consistent state; nothing holds it across an await.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::store::gc_index::GcIndex;
use crate::types::{ObjectReader, ResourceKey};

pub(crate) mod gc_index;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as watchers and the controllers receive it.
#[derive(Debug)]
pub struct StoredEvent {
    pub rv: u64,
    pub key: ResourceKey,
    pub event_type: EventType,
    /// The object after the change (for DELETED: as it was, with the delete revision).
    pub object: Value,
    /// The object before the change (MODIFIED and DELETED).
    pub old: Option<Value>,
    /// The object serialized once for every watch of the same group/version, keyed by
    /// apiVersion: fan-out to many watches then costs one serialization per event.
    pub rendered: std::sync::OnceLock<(String, bytes::Bytes)>,
}

pub type EventSender = mpsc::UnboundedSender<Arc<StoredEvent>>;
pub type EventReceiver = mpsc::UnboundedReceiver<Arc<StoredEvent>>;

type ObjKey = (String, String);

/// The store state; handlers get it locked through [`Store::lock`].
pub struct StoreState {
    rv: u64,
    objects: HashMap<ResourceKey, BTreeMap<ObjKey, Value>>,
    uids: HashMap<String, (ResourceKey, String, String)>,
    history: VecDeque<Arc<StoredEvent>>,
    history_limit: usize,
    /// Per type, the revision of its newest event dropped from the history: a watch of
    /// the type from a resourceVersion below it cannot be served (410 Expired). A type
    /// whose events are all still held (a quiet one) never expires its watches, as the
    /// real server's watch cache, one per type, keeps a quiet type's few events
    /// (`getAllEventsSinceLocked`: too old only below the type's oldest held event).
    history_floors: HashMap<ResourceKey, u64>,
    watchers: HashMap<ResourceKey, Vec<EventSender>>,
    all_watchers: Vec<EventSender>,
    /// What the garbage collector must look at, kept as objects change (see [`GcIndex`]).
    pub(crate) gc: GcIndex,
}

pub struct Store {
    state: Mutex<StoreState>,
}

impl Store {
    pub fn new(history_limit: usize) -> Store {
        Store {
            state: Mutex::new(StoreState {
                rv: 0,
                objects: HashMap::new(),
                uids: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                history_floors: HashMap::new(),
                watchers: HashMap::new(),
                all_watchers: Vec::new(),
                gc: GcIndex::default(),
            }),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, StoreState> {
        // A panic in one request must not take the test cluster down with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub use crate::types::{meta_str, name_of, namespace_of};

/// Kubernetes Time: RFC 3339 with second precision.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A name for `generateName` (and the other names the server makes up, such as a pod's
/// API access volume): `prefix` and five characters of the real server's alphabet, no
/// vowels (apiserver/pkg/storage/names).
pub fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = [0u8; 5];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    let suffix: String = bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// A random (version 4) UUID, as the real server assigns uids.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn metadata_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

impl StoreState {
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn get_object(&self, key: &ResourceKey, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(key)?
            .get(&(namespace.to_string(), name.to_string()))
    }

    /// Objects of a type, in one namespace or all, ordered by namespace then name.
    pub fn list_objects(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<&Value> {
        let Some(map) = self.objects.get(key) else {
            return Vec::new();
        };
        match namespace {
            Some(ns) => map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v)
                .collect(),
            None => map.values().collect(),
        }
    }

    /// Objects of a type after `after` (namespace, name), in one namespace or all, in
    /// (namespace, name) order: a page of a list starts where the previous one ended
    /// without walking the objects before it.
    pub fn list_objects_after<'a>(
        &'a self,
        key: &ResourceKey,
        namespace: Option<&'a str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        use std::ops::Bound;
        let start = match (after, namespace) {
            (Some((ns, name)), _) => Bound::Excluded((ns.to_string(), name.to_string())),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.objects
            .get(key)
            .into_iter()
            .flat_map(move |map| map.range((start.clone(), Bound::Unbounded)))
            .take_while(move |((n, _), _)| namespace.is_none_or(|ns| n == ns))
            .map(|(_, v)| v)
    }

    /// The objects of a namespaced type named `name` across namespaces, one per namespace
    /// at most.
    pub fn objects_named(&self, key: &ResourceKey, name: &str) -> Vec<&Value> {
        self.objects
            .get(key)
            .into_iter()
            .flat_map(|map| map.iter())
            .filter(|((_, n), _)| n == name)
            .map(|(_, v)| v)
            .collect()
    }

    /// The types that have (or had) objects: a namespace's contents are looked up type by
    /// type, each a range of its ordered map.
    pub fn resource_keys(&self) -> Vec<ResourceKey> {
        self.objects.keys().cloned().collect()
    }

    pub fn uid_exists(&self, uid: &str) -> bool {
        self.uids.contains_key(uid)
    }

    /// The object with this uid, if it exists.
    pub fn object_by_uid(&self, uid: &str) -> Option<(&ResourceKey, &Value)> {
        let (key, ns, name) = self.uids.get(uid)?;
        Some((key, self.get_object(key, ns, name)?))
    }

    /// Store a new object: assigns the next resourceVersion and, unless present, a uid and
    /// creationTimestamp. The caller checked that it does not exist.
    pub fn insert(&mut self, key: &ResourceKey, mut obj: Value, now: Timestamp) -> Value {
        self.rv += 1;
        let rv = self.rv;
        let meta = metadata_mut(&mut obj);
        if meta
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            meta.insert("uid".into(), json!(new_uid()));
        }
        if meta.get("creationTimestamp").is_none_or(Value::is_null) {
            meta.insert("creationTimestamp".into(), json!(format_time(now)));
        }
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        let ns = namespace_of(&obj).to_string();
        let name = name_of(&obj).to_string();
        let uid = meta_str(&obj, "uid").to_string();
        self.uids
            .insert(uid, (key.clone(), ns.clone(), name.clone()));
        self.gc.observe(key, None, Some(&obj));
        self.objects
            .entry(key.clone())
            .or_default()
            .insert((ns, name), obj.clone());
        self.emit(key, EventType::Added, obj.clone(), None);
        obj
    }

    /// Replace a stored object with a new version (next resourceVersion).
    pub fn replace(&mut self, key: &ResourceKey, mut obj: Value) -> Value {
        self.rv += 1;
        metadata_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let slot = (namespace_of(&obj).to_string(), name_of(&obj).to_string());
        let old = self
            .objects
            .entry(key.clone())
            .or_default()
            .insert(slot, obj.clone());
        self.gc.observe(key, old.as_ref(), Some(&obj));
        self.emit(key, EventType::Modified, obj.clone(), old);
        obj
    }

    /// Remove an object; the DELETED event carries it with the delete revision.
    pub fn remove(&mut self, key: &ResourceKey, namespace: &str, name: &str) -> Option<Value> {
        let old = self
            .objects
            .get_mut(key)?
            .remove(&(namespace.to_string(), name.to_string()))?;
        self.rv += 1;
        let mut gone = old.clone();
        metadata_mut(&mut gone).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.uids.remove(meta_str(&old, "uid"));
        self.gc.observe(key, Some(&old), None);
        self.emit(key, EventType::Deleted, gone.clone(), Some(old));
        Some(gone)
    }

    fn emit(
        &mut self,
        key: &ResourceKey,
        event_type: EventType,
        object: Value,
        old: Option<Value>,
    ) {
        let event = Arc::new(StoredEvent {
            rv: self.rv,
            key: key.clone(),
            event_type,
            object,
            old,
            rendered: std::sync::OnceLock::new(),
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(evicted) = self.history.pop_front() {
                match self.history_floors.get_mut(&evicted.key) {
                    Some(floor) => *floor = evicted.rv,
                    None => {
                        self.history_floors.insert(evicted.key.clone(), evicted.rv);
                    }
                }
            }
        }
        if let Some(list) = self.watchers.get_mut(key) {
            list.retain(|w| w.send(event.clone()).is_ok());
        }
        self.all_watchers.retain(|w| w.send(event.clone()).is_ok());
    }

    /// Register a watch on one type. With `since`, the events of the type after that
    /// resourceVersion come first; `Err(oldest)` when one of them has left the history.
    pub fn subscribe(
        &mut self,
        key: &ResourceKey,
        since: Option<u64>,
    ) -> Result<(Vec<Arc<StoredEvent>>, EventReceiver), u64> {
        let floor = self.history_floors.get(key).copied().unwrap_or(0);
        let backlog = match since {
            Some(rv) if rv < floor => return Err(floor + 1),
            // The history is in revision order: start at the first event after `rv`, as
            // the watch cache does, instead of walking the whole window.
            Some(rv) => self
                .history
                .range(self.history.partition_point(|e| e.rv <= rv)..)
                .filter(|e| &e.key == key)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        self.watchers.entry(key.clone()).or_default().push(tx);
        Ok((backlog, rx))
    }

    /// Every event of every type (the controllers' feed).
    pub fn subscribe_all(&mut self) -> EventReceiver {
        let (tx, rx) = mpsc::unbounded_channel();
        self.all_watchers.push(tx);
        rx
    }

    /// Number of open watch registrations (for tests and the benchmark).
    pub fn watcher_count(&self) -> usize {
        self.watchers
            .values()
            .map(|l| l.iter().filter(|w| !w.is_closed()).count())
            .sum()
    }
}

impl ObjectReader for StoreState {
    fn get(&self, key: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.get_object(key, namespace.unwrap_or(""), name)
    }

    fn list(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<&Value> {
        self.list_objects(key, namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str) -> Value {
        json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": name, "namespace": "default"}})
    }

    #[test]
    fn resource_versions_increase_across_types_and_deletes() {
        let store = Store::new(100);
        let mut st = store.lock();
        let key = ResourceKey::new("", "secrets");
        let a = st.insert(&key, secret("a"), Timestamp::now());
        let b = st.insert(
            &ResourceKey::new("", "configmaps"),
            secret("b"),
            Timestamp::now(),
        );
        let gone = st.remove(&key, "default", "a").unwrap();
        let rvs: Vec<u64> = [&a, &b, &gone]
            .iter()
            .map(|o| meta_str(o, "resourceVersion").parse().unwrap())
            .collect();
        assert_eq!(rvs, vec![1, 2, 3]);
        assert_ne!(meta_str(&a, "uid"), meta_str(&b, "uid"));
    }

    #[test]
    fn subscribe_replays_only_newer_events_of_the_type() {
        let store = Store::new(100);
        let mut st = store.lock();
        let key = ResourceKey::new("", "secrets");
        st.insert(&key, secret("a"), Timestamp::now());
        st.insert(
            &ResourceKey::new("", "configmaps"),
            secret("x"),
            Timestamp::now(),
        );
        st.insert(&key, secret("b"), Timestamp::now());
        let (backlog, _rx) = st.subscribe(&key, Some(1)).unwrap();
        let names: Vec<&str> = backlog.iter().map(|e| name_of(&e.object)).collect();
        assert_eq!(names, vec!["b"]);
    }

    #[test]
    fn subscribe_below_the_history_window_is_expired() {
        let store = Store::new(2);
        let mut st = store.lock();
        let key = ResourceKey::new("", "secrets");
        for n in ["a", "b", "c", "d"] {
            st.insert(&key, secret(n), Timestamp::now());
        }
        assert_eq!(st.subscribe(&key, Some(1)).err(), Some(3));
        assert!(st.subscribe(&key, Some(2)).is_ok());
    }

    #[test]
    fn a_quiet_type_keeps_its_watches_while_a_busy_one_fills_the_history() {
        let store = Store::new(2);
        let mut st = store.lock();
        let quiet = ResourceKey::new("", "configmaps");
        let busy = ResourceKey::new("", "secrets");
        st.insert(&quiet, secret("q"), Timestamp::now());
        for n in ["a", "b", "c", "d"] {
            st.insert(&busy, secret(n), Timestamp::now());
        }
        // Revision 1 (q) and 2, 3 (a, b) have left the window. Nothing of the quiet type
        // happened after 1, so a watch of it from 1 misses nothing.
        let (backlog, _rx) = st.subscribe(&quiet, Some(1)).unwrap();
        assert!(backlog.is_empty());
        // From 0 it would miss q itself.
        assert_eq!(st.subscribe(&quiet, Some(0)).err(), Some(2));
        // The busy type lost b (revision 3): from 2 is too old, from 3 is whole.
        assert_eq!(st.subscribe(&busy, Some(2)).err(), Some(4));
        let (backlog, _rx) = st.subscribe(&busy, Some(3)).unwrap();
        let names: Vec<&str> = backlog.iter().map(|e| name_of(&e.object)).collect();
        assert_eq!(names, vec!["c", "d"]);
    }
}
