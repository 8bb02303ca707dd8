//! What the node loop knows of every name, in a few dozen bytes per name.
//!
//! The node loop needs, per node name: whether its Node exists and what of it could need
//! flavoring (a fingerprint of its labels and taints), whether a FlavorBinding names it and
//! with which flavor and version, and what a reconcile last found needing nothing. Cached
//! as Kubernetes objects in reflector stores, that costs ~2.5 KiB per node (an `ObjectMeta`
//! is several hundred bytes even when empty); here it is one small hash map entry, so
//! memory stays flat per node as the fleet grows. Every decision still reads the binding
//! and the Node from the API server (see `node`): this index only routes events and skips
//! work already done.
//!
//! Relists: a watch that restarts from a list marks every name it lists; at the list's end
//! the names it did not list lost their Node or binding while the watch was down.

use std::collections::HashMap;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Taint;

/// A fingerprint, never 0 (0 stands for "none").
pub type Fingerprint = u64;

fn finish(h: std::collections::hash_map::DefaultHasher) -> Fingerprint {
    h.finish().max(1)
}

/// What of a Node the node loop acts on: its labels and its taints. A kubelet's status
/// updates leave it unchanged, so they cost no API request.
pub fn node_fingerprint(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    taints: &[Taint],
) -> Fingerprint {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    labels.map(|l| l.iter().collect::<Vec<_>>()).hash(&mut h);
    for t in taints {
        (
            &t.key,
            &t.value,
            &t.effect,
            t.time_added.as_ref().map(|x| x.0.as_second()),
        )
            .hash(&mut h);
    }
    finish(h)
}

/// A resourceVersion (or any other opaque version string) as a fingerprint.
pub fn version_fingerprint(version: &str) -> Fingerprint {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    version.hash(&mut h);
    finish(h)
}

/// The state a reconcile found needing nothing: the Node, the binding and the Flavor as
/// they were then.
pub fn combined(node: Fingerprint, binding: Fingerprint, flavor: &str) -> Fingerprint {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (node, binding, flavor).hash(&mut h);
    finish(h)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bound {
    /// Index into `State::flavors`.
    flavor: u32,
    /// Never 0 (a fingerprint).
    version: Fingerprint,
}

/// One name's state: 48 bytes, its name 16 more (and the name's own allocation).
#[derive(Debug, Default)]
struct Entry {
    /// The Node's fingerprint; 0 when there is no Node of the name.
    node: Fingerprint,
    /// The binding's version; 0 when no binding names the node.
    binding_version: Fingerprint,
    /// What reconciles last found needing nothing (0: nothing).
    done: [Fingerprint; 2],
    /// The binding's flavor, an index into `State::flavors` (with a binding only).
    binding_flavor: u32,
    /// Since when (seconds after the index was made, plus one) the name has had a binding
    /// and a Node that does not carry its flavor; 0 while it has not.
    unflavored_since: u32,
    /// The relist each side was last seen in. A relist ends by dropping the sides it did
    /// not mark, so a kept side's mark is at most one completed relist old, plus the
    /// relists that failed before their end since: the marks wrapping around could only
    /// mistake a side after 65,536 failed relists in a row.
    node_mark: u16,
    binding_mark: u16,
    /// Whether the Node carries its flavor (the `flavored_nodes` gauge).
    flavored: bool,
    /// Whether the Node carries kubeflavor's flavor label: without a binding, such a Node
    /// must be released (see `node::release`).
    flavor_labeled: bool,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.node == 0 && self.binding_version == 0
    }

    fn binding(&self) -> Option<Bound> {
        (self.binding_version != 0).then_some(Bound {
            flavor: self.binding_flavor,
            version: self.binding_version,
        })
    }

    /// Sets the binding; returns the one before.
    fn set_binding(&mut self, now: Option<Bound>) -> Option<Bound> {
        let before = self.binding();
        (self.binding_flavor, self.binding_version) = now.map_or((0, 0), |b| (b.flavor, b.version));
        before
    }
}

/// How many tables hold the names.
const SHARDS: usize = 16;

/// The entries by name, in `SHARDS` hash tables. A hash table that grows allocates its
/// next size while it still holds the last: one table of 100,000 names briefly holds
/// twice its entries' worth of memory, at the controller's peak. In shards, one shard
/// grows at a time, so the index's peak is its size and a sixteenth.
#[derive(Default)]
struct Names {
    shards: [HashMap<Box<str>, Entry>; SHARDS],
}

impl Names {
    /// The shard of `name` (FNV-1a; each shard's table has its own keyed hasher, so a
    /// name chosen to crowd one shard costs no more than it would in one table).
    fn shard(name: &str) -> usize {
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        (h % SHARDS as u64) as usize
    }

    fn get(&self, name: &str) -> Option<&Entry> {
        self.shards[Self::shard(name)].get(name)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Entry> {
        self.shards[Self::shard(name)].get_mut(name)
    }

    fn entry(&mut self, name: &str) -> &mut Entry {
        let shard = &mut self.shards[Self::shard(name)];
        if !shard.contains_key(name) {
            shard.insert(name.into(), Entry::default());
        }
        shard.get_mut(name).expect("just inserted")
    }

    fn remove(&mut self, name: &str) -> Option<Entry> {
        self.shards[Self::shard(name)].remove(name)
    }

    fn iter(&self) -> impl Iterator<Item = (&Box<str>, &Entry)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }
}

#[derive(Default)]
struct State {
    names: Names,
    /// Flavor names, interned: each binding keeps an index.
    flavors: Vec<Box<str>>,
    flavor_ids: HashMap<Box<str>, u32>,
    /// Bindings per flavor index.
    bound: Vec<i64>,
    flavored: i64,
    node_mark: u16,
    binding_mark: u16,
    /// Names whose binding is revoked: their Nodes lose the flavor on purpose. Few, so a
    /// set of its own rather than a field of every entry.
    revoked: HashSet<Box<str>>,
    /// The revoked names a binding relist has listed so far.
    relisted_revoked: Option<HashSet<Box<str>>>,
    /// When the index was made: `Entry::unflavored_since` counts from here.
    started: Option<Instant>,
}

impl State {
    fn flavor_id(&mut self, flavor: &str) -> u32 {
        if let Some(id) = self.flavor_ids.get(flavor) {
            return *id;
        }
        let id = u32::try_from(self.flavors.len()).expect("fewer than 2^32 flavor names");
        self.flavors.push(flavor.into());
        self.flavor_ids.insert(flavor.into(), id);
        self.bound.push(0);
        id
    }

    fn entry(&mut self, name: &str) -> &mut Entry {
        self.names.entry(name)
    }

    /// Drops the entry of `name` once it has neither Node nor binding.
    fn tidy(&mut self, name: &str) {
        if self.names.get(name).is_some_and(Entry::is_empty)
            && let Some(e) = self.names.remove(name)
            && e.flavored
        {
            self.flavored -= 1;
        }
    }

    fn set_binding(&mut self, name: &str, now: Option<Bound>) -> bool {
        let before = self.entry(name).set_binding(now);
        if let Some(b) = before {
            self.bound[b.flavor as usize] -= 1;
        }
        if let Some(b) = now {
            self.bound[b.flavor as usize] += 1;
        }
        self.note_unflavored(name);
        self.tidy(name);
        before != now
    }

    /// Seconds since the index was made, plus one (0 stands for "not unflavored").
    fn clock(&mut self) -> u32 {
        let started = *self.started.get_or_insert_with(Instant::now);
        u32::try_from(started.elapsed().as_secs())
            .unwrap_or(u32::MAX - 1)
            .saturating_add(1)
    }

    /// Starts or stops the clock of a bound, registered Node that does not carry its
    /// flavor (the `oldest_unflavored_node_age_seconds` gauge).
    fn note_unflavored(&mut self, name: &str) {
        let now = self.clock();
        let Some(e) = self.names.get_mut(name) else {
            return;
        };
        let unflavored = e.binding_version != 0 && e.node != 0 && !e.flavored;
        e.unflavored_since = match (unflavored, e.unflavored_since) {
            (false, _) => 0,
            (true, 0) => now,
            (true, since) => since,
        };
    }

    /// True when the name needs a look: a bound Node changed, or a Node that carries the
    /// flavor label without a binding did.
    fn set_node(&mut self, name: &str, fingerprint: Fingerprint, flavor_labeled: bool) -> bool {
        let e = self.entry(name);
        let changed = e.node != fingerprint;
        e.node = fingerprint;
        e.flavor_labeled = flavor_labeled && fingerprint != 0;
        let look = e.binding_version != 0 || e.flavor_labeled;
        self.note_unflavored(name);
        self.tidy(name);
        changed && look
    }
}

/// What a reconcile needs to know of a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    /// The Node's fingerprint, when it exists.
    pub node: Option<Fingerprint>,
    /// The binding's flavor and version, when one names the node.
    pub binding: Option<(String, Fingerprint)>,
    pub done: [Fingerprint; 2],
    /// The Node carries kubeflavor's flavor label.
    pub flavor_labeled: bool,
}

/// The watches that feed the index.
#[derive(Clone, Copy, Debug)]
pub enum Side {
    Nodes,
    Bindings,
}

/// The index. Methods that take watch events return whether the name needs a reconcile.
pub struct Fleet {
    state: Mutex<State>,
    /// Which watches have listed once (bit 0: Nodes, bit 1: bindings).
    synced: tokio::sync::watch::Sender<u8>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            state: Mutex::default(),
            synced: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Fleet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The watch of `side` has listed everything once.
    pub fn synced(&self, side: Side) {
        let bit = match side {
            Side::Nodes => 1,
            Side::Bindings => 2,
        };
        self.synced.send_modify(|s| *s |= bit);
    }

    /// Waits until both watches have listed everything once.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s == 3).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("fleet lock")
    }

    /// A Node's state from a watch event; `None` when it was deleted; `flavor_labeled`:
    /// it carries kubeflavor's flavor label. True when the node loop must look at the name:
    /// a bound Node appeared, went or changed, or a Node with the flavor label and no
    /// binding did.
    pub fn node(&self, name: &str, fingerprint: Option<Fingerprint>, flavor_labeled: bool) -> bool {
        let mut st = self.lock();
        let mark = st.node_mark;
        let changed = st.set_node(name, fingerprint.unwrap_or(0), flavor_labeled);
        if fingerprint.is_some()
            && let Some(e) = st.names.get_mut(name)
        {
            e.node_mark = mark;
        }
        changed
    }

    /// A binding's flavor and resourceVersion from a watch event; `None` when it was
    /// deleted. True when the binding is new, gone or changed.
    pub fn binding(&self, name: &str, now: Option<(&str, Fingerprint)>) -> bool {
        let mut st = self.lock();
        let bound = now.map(|(flavor, version)| Bound {
            flavor: st.flavor_id(flavor),
            version: version.max(1),
        });
        let mark = st.binding_mark;
        let changed = st.set_binding(name, bound);
        if bound.is_some()
            && let Some(e) = st.names.get_mut(name)
        {
            e.binding_mark = mark;
        }
        changed
    }

    /// A relist of `side` starts: from now on, the names it lists are marked.
    pub fn relisting(&self, side: Side) {
        let mut st = self.lock();
        let mark = match side {
            Side::Nodes => &mut st.node_mark,
            Side::Bindings => &mut st.binding_mark,
        };
        *mark = mark.wrapping_add(1);
    }

    /// A relist of `side` ended: the names it did not list lost their Node (binding) while
    /// the watch was down. Returns those the node loop must look at: for Nodes the bound
    /// ones, for bindings all of them.
    pub fn relisted(&self, side: Side) -> Vec<String> {
        let mut st = self.lock();
        let (node_mark, binding_mark) = (st.node_mark, st.binding_mark);
        let gone: Vec<String> = st
            .names
            .iter()
            .filter(|(_, e)| match side {
                Side::Nodes => e.node != 0 && e.node_mark != node_mark,
                Side::Bindings => e.binding_version != 0 && e.binding_mark != binding_mark,
            })
            .map(|(n, _)| n.to_string())
            .collect();
        let mut look = Vec::new();
        for n in gone {
            let bound = match side {
                Side::Nodes => st.set_node(&n, 0, false),
                Side::Bindings => {
                    st.set_binding(&n, None);
                    true
                }
            };
            if bound {
                look.push(n);
            }
        }
        look
    }

    pub fn get(&self, name: &str) -> Known {
        let st = self.lock();
        let Some(e) = st.names.get(name) else {
            return Known {
                node: None,
                binding: None,
                done: [0; 2],
                flavor_labeled: false,
            };
        };
        Known {
            node: (e.node != 0).then_some(e.node),
            binding: e
                .binding()
                .map(|b| (st.flavors[b.flavor as usize].to_string(), b.version)),
            done: e.done,
            flavor_labeled: e.flavor_labeled,
        }
    }

    /// Records what a reconcile left: whether the Node carries its flavor, and the states
    /// that need nothing more.
    pub fn remember(&self, name: &str, flavored: bool, done: [Fingerprint; 2]) {
        let mut st = self.lock();
        let Some(e) = st.names.get_mut(name) else {
            return;
        };
        e.done = done;
        let was = std::mem::replace(&mut e.flavored, flavored);
        st.flavored += i64::from(flavored) - i64::from(was);
        st.note_unflavored(name);
    }

    /// Forgets what reconciles found for `name` (its Node or binding is gone).
    pub fn forget(&self, name: &str) {
        self.remember(name, false, [0; 2]);
    }

    /// Bound Nodes that carry their flavor.
    pub fn flavored(&self) -> i64 {
        self.lock().flavored
    }

    /// The names bound to `flavor`.
    pub fn bound_to(&self, flavor: &str) -> Vec<String> {
        let st = self.lock();
        let Some(id) = st.flavor_ids.get(flavor).copied() else {
            return Vec::new();
        };
        st.names
            .iter()
            .filter(|(_, e)| e.binding().is_some_and(|b| b.flavor == id))
            .map(|(n, _)| n.to_string())
            .collect()
    }

    /// The number of bindings naming `flavor`.
    pub fn bound_count(&self, flavor: &str) -> i64 {
        let st = self.lock();
        st.flavor_ids
            .get(flavor)
            .map_or(0, |id| st.bound[*id as usize])
    }

    /// Whether the binding of `name` is revoked, from a watch event of the bindings (see
    /// `census::note_revocations`). A revoked binding's Node loses its flavor on purpose,
    /// so it does not count as unflavored.
    pub fn revocation(&self, name: &str, revoked: bool) {
        let mut st = self.lock();
        if let Some(listed) = st.relisted_revoked.as_mut()
            && revoked
        {
            listed.insert(name.into());
        }
        if revoked {
            st.revoked.insert(name.into());
        } else {
            st.revoked.remove(name);
        }
    }

    /// A binding is gone: it is revoked no more.
    pub fn forget_revocation(&self, name: &str) {
        self.lock().revoked.remove(name);
    }

    /// A relist of the bindings starts.
    pub fn revocations_relisting(&self) {
        self.lock().relisted_revoked = Some(HashSet::new());
    }

    /// A relist of the bindings ended: the revoked names are those it listed (and later
    /// events brought).
    pub fn revocations_relisted(&self) {
        let mut st = self.lock();
        if let Some(listed) = st.relisted_revoked.take() {
            st.revoked = listed;
        }
    }

    /// The number of revoked bindings.
    pub fn revoked(&self) -> usize {
        self.lock().revoked.len()
    }

    /// Bindings per flavor, for every flavor a binding named during this index's life
    /// (0 once none does).
    pub fn bound_per_flavor(&self) -> Vec<(String, i64)> {
        let st = self.lock();
        st.flavors
            .iter()
            .zip(&st.bound)
            .map(|(f, n)| (f.to_string(), *n))
            .collect()
    }

    /// How long the bound, registered, unrevoked Node that has gone longest without its
    /// flavor has been so; `None` when every such Node carries its flavor. One pass over
    /// the names, made when /metrics is read.
    pub fn oldest_unflavored(&self) -> Option<Duration> {
        let mut st = self.lock();
        let now = st.clock();
        let oldest = st
            .names
            .iter()
            .filter(|(n, e)| e.unflavored_since != 0 && !st.revoked.contains(&***n))
            .map(|(_, e)| e.unflavored_since)
            .min()?;
        Some(Duration::from_secs(u64::from(now - oldest)))
    }

    /// Names known (with a Node, a binding or both).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_and_its_node_make_one_entry_counted_per_flavor() {
        let f = Fleet::new();
        assert!(f.binding("n1", Some(("sweet", 7))), "a new binding");
        assert!(!f.binding("n1", Some(("sweet", 7))), "the same again");
        assert!(f.node("n1", Some(11), false), "the bound Node appears");
        assert!(
            !f.node("n1", Some(11), false),
            "a status update: same fingerprint"
        );
        assert!(f.node("n1", Some(12), false), "its labels changed");
        assert!(
            !f.node("other", Some(5), false),
            "an unbound Node is none of ours"
        );
        assert!(
            f.node("left", Some(5), true),
            "an unbound Node with the flavor label must be released"
        );
        assert!(f.get("left").flavor_labeled);
        assert!(
            !f.node("left", Some(6), false),
            "released: none of ours any more"
        );
        assert_eq!(f.bound_count("sweet"), 1);
        assert_eq!(f.bound_to("sweet"), vec!["n1".to_string()]);
        assert!(
            f.binding("n1", Some(("sour", 8))),
            "re-bound to another flavor"
        );
        assert_eq!(f.bound_count("sweet"), 0);
        assert_eq!(f.bound_count("sour"), 1);
        let k = f.get("n1");
        assert_eq!(k.node, Some(12));
        assert_eq!(k.binding, Some(("sour".to_string(), 8)));
    }

    #[test]
    fn names_without_node_or_binding_are_dropped() {
        let f = Fleet::new();
        f.binding("n1", Some(("sweet", 1)));
        f.node("n1", Some(2), false);
        f.remember("n1", true, [3, 4]);
        assert_eq!(f.flavored(), 1);
        assert!(f.node("n1", None, false), "the bound Node went");
        assert!(f.binding("n1", None), "the binding went");
        assert_eq!(f.len(), 0);
        assert_eq!(f.flavored(), 0, "a dropped name is not flavored");
        assert_eq!(f.get("n1").done, [0; 2]);
    }

    #[test]
    fn a_relist_finds_what_went_while_the_watch_was_down() {
        let f = Fleet::new();
        for n in ["a", "b", "c"] {
            f.binding(n, Some(("sweet", 1)));
            f.node(n, Some(1), false);
        }
        f.relisting(Side::Bindings);
        f.binding("a", Some(("sweet", 1)));
        f.binding("c", Some(("sweet", 1)));
        assert_eq!(f.relisted(Side::Bindings), vec!["b".to_string()]);
        assert_eq!(f.bound_count("sweet"), 2);
        f.relisting(Side::Nodes);
        f.node("a", Some(1), false);
        assert_eq!(
            f.relisted(Side::Nodes),
            vec!["c".to_string()],
            "b is unbound now"
        );
        assert_eq!(f.get("c").node, None);
        assert_eq!(f.get("a").node, Some(1));
        assert_eq!(f.len(), 2, "b has neither any more");
    }

    #[test]
    fn a_relist_over_many_names_in_every_shard_finds_exactly_those_gone() {
        let f = Fleet::new();
        let names: Vec<String> = (0..2000).map(|i| format!("node-{i}")).collect();
        for n in &names {
            f.binding(n, Some(("sweet", 3)));
            f.node(n, Some(9), false);
        }
        let st = f.lock();
        assert!(
            st.names.shards.iter().all(|s| s.len() > 50),
            "names spread over every shard"
        );
        drop(st);
        assert_eq!(f.len(), 2000);
        assert_eq!(f.bound_to("sweet").len(), 2000);
        // The relist marks wrap around; a relist still finds exactly the Nodes it did not
        // list.
        f.lock().node_mark = u16::MAX - 1;
        for round in 0..3 {
            f.relisting(Side::Nodes);
            for n in &names {
                f.node(n, Some(9), false);
            }
            assert!(f.relisted(Side::Nodes).is_empty(), "round {round}");
        }
        f.relisting(Side::Nodes);
        for n in names.iter().step_by(2) {
            f.node(n, Some(9), false);
        }
        let mut gone = f.relisted(Side::Nodes);
        gone.sort();
        let mut want: Vec<String> = names.iter().skip(1).step_by(2).cloned().collect();
        want.sort();
        assert_eq!(gone, want);
        assert_eq!(f.get("node-1").node, None);
        assert_eq!(f.get("node-0").node, Some(9));
        assert_eq!(f.get("node-1").binding, Some(("sweet".to_string(), 3)));
    }

    #[test]
    fn an_entry_stays_small() {
        // The controller's memory per node is mostly this (see `Names`): growing it grows
        // every fleet's footprint.
        assert!(std::mem::size_of::<Entry>() <= 48);
        assert!(std::mem::size_of::<(Box<str>, Entry)>() <= 64);
    }

    #[test]
    fn a_bound_node_counts_as_unflavored_until_it_carries_its_flavor_unless_revoked() {
        let f = Fleet::new();
        f.binding("n1", Some(("sweet", 1)));
        assert_eq!(
            f.oldest_unflavored(),
            None,
            "no Node yet: nothing to flavor"
        );
        f.node("n1", Some(2), false);
        assert!(f.oldest_unflavored().is_some(), "registered, not flavored");
        f.remember("n1", true, [3, 4]);
        assert_eq!(f.oldest_unflavored(), None, "flavored");
        f.remember("n1", false, [5, 6]);
        assert!(f.oldest_unflavored().is_some(), "lost its flavor");
        f.revocation("n1", true);
        assert_eq!(
            f.oldest_unflavored(),
            None,
            "revoked: unflavored on purpose"
        );
        assert_eq!(f.revoked(), 1);
        f.revocations_relisting();
        f.revocation("n1", false);
        f.revocations_relisted();
        assert_eq!(f.revoked(), 0, "a relist that lists it unrevoked");
        assert!(f.oldest_unflavored().is_some());
        f.binding("n1", None);
        assert_eq!(f.oldest_unflavored(), None, "no binding: not kubeflavor's");
        assert_eq!(f.bound_per_flavor(), vec![("sweet".to_string(), 0)]);
    }

    #[test]
    fn fingerprints_see_labels_and_taints_only() {
        let labels: std::collections::BTreeMap<String, String> =
            [("a".to_string(), "1".to_string())].into();
        let taint = Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let base = node_fingerprint(Some(&labels), std::slice::from_ref(&taint));
        assert_eq!(
            base,
            node_fingerprint(Some(&labels.clone()), std::slice::from_ref(&taint))
        );
        assert_ne!(base, node_fingerprint(Some(&labels), &[]));
        assert_ne!(base, node_fingerprint(None, std::slice::from_ref(&taint)));
        let mut other = taint.clone();
        other.effect = "NoExecute".into();
        assert_ne!(base, node_fingerprint(Some(&labels), &[other]));
        assert_ne!(version_fingerprint("1"), version_fingerprint("2"));
        assert_ne!(combined(1, 2, "x"), combined(1, 2, "y"));
        assert_ne!(0, version_fingerprint(""));
    }
}
