//! What every replica knows, in memory, of which node names are cut off: the names whose
//! FlavorBinding is revoked, the names whose Node carries `kubeflavor.io/revoked`, and the
//! names in the revocation list (`kube-system/kubeflavor-revoked-nodes`), fed by three
//! watches. The webhook answers from here alone, never with an API call per request.
//!
//! A watch that restarts lists everything again; the names it lists are gathered aside and
//! replace the previous set only once the list is complete, so a relist never opens a
//! window in which a revoked name is forgotten.

use std::collections::HashSet;
use std::sync::RwLock;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::runtime::watcher as watch_stream;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_core::node::cutoff::{self, CutOff};
use kubeflavor_core::node::revocation_list;
use tokio::sync::watch;

pub use super::freshness::Mark;
use super::freshness::{self, Freshness};

#[derive(Debug, Default)]
struct Names {
    live: HashSet<String>,
    /// Names gathered by a list in progress.
    relisting: Option<HashSet<String>>,
    synced: bool,
}

impl Names {
    fn apply(&mut self, event: Event<(String, bool)>) -> bool {
        match event {
            Event::Apply((name, true)) => {
                self.live.insert(name);
            }
            Event::Apply((name, false)) | Event::Delete((name, _)) => {
                self.live.remove(&name);
            }
            Event::Init => self.relisting = Some(HashSet::new()),
            Event::InitApply((name, marked)) => {
                let gathered = self.relisting.get_or_insert_with(HashSet::new);
                if marked {
                    gathered.insert(name);
                }
            }
            Event::InitDone => return self.init_done(),
        }
        false
    }

    fn init_done(&mut self) -> bool {
        if let Some(gathered) = self.relisting.take() {
            self.live = gathered;
        }
        let first = !self.synced;
        self.synced = true;
        first
    }

    /// The revocation list is one object whose keys are the names: each event carries the
    /// whole set, which replaces the last (a deleted list lists nothing).
    fn apply_set(&mut self, event: Event<HashSet<String>>) -> bool {
        match event {
            Event::Apply(names) => self.live = names,
            Event::Delete(_) => self.live.clear(),
            Event::Init => self.relisting = Some(HashSet::new()),
            Event::InitApply(names) => self.relisting = Some(names),
            Event::InitDone => return self.init_done(),
        }
        false
    }
}

/// The cut-off names, shared by every request of the webhook.
#[derive(Debug)]
pub struct CutOffIndex {
    bindings: RwLock<Names>,
    nodes: RwLock<Names>,
    listed: RwLock<Names>,
    synced: watch::Sender<bool>,
    /// Bumped on every event applied, for [`CutOffIndex::until`].
    applied: watch::Sender<u64>,
    /// The last moment the index was confirmed current.
    pub freshness: Freshness,
}

impl Default for CutOffIndex {
    fn default() -> Self {
        CutOffIndex {
            bindings: Default::default(),
            nodes: Default::default(),
            listed: Default::default(),
            synced: watch::Sender::new(false),
            applied: watch::Sender::new(0),
            freshness: Freshness::default(),
        }
    }
}

fn read(lock: &RwLock<Names>) -> std::sync::RwLockReadGuard<'_, Names> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

impl CutOffIndex {
    /// Whether, and why, `node` is cut off. The binding's mark is named first.
    pub fn cut_off(&self, node: &str) -> Option<CutOff> {
        if read(&self.bindings).live.contains(node) {
            return Some(CutOff::BindingRevoked);
        }
        if read(&self.nodes).live.contains(node) {
            return Some(CutOff::NodeMarkedRevoked);
        }
        read(&self.listed)
            .live
            .contains(node)
            .then_some(CutOff::Listed)
    }

    /// Every watch has listed everything once: the index may be trusted.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once [`CutOffIndex::is_synced`].
    pub async fn synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Resolves once `holds` is true of the index (checked after every event applied).
    pub async fn until(&self, holds: impl Fn(&CutOffIndex) -> bool) {
        let mut rx = self.applied.subscribe();
        while !holds(self) {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// How many names carry each mark (for logs and the benchmark).
    pub fn len(&self, mark: Mark) -> usize {
        read(self.lock(mark)).live.len()
    }

    fn lock(&self, mark: Mark) -> &RwLock<Names> {
        match mark {
            Mark::Binding => &self.bindings,
            Mark::Node => &self.nodes,
            Mark::Listed => &self.listed,
        }
    }

    /// Applies one watch event, mapped to (name, marked).
    pub fn apply(&self, mark: Mark, event: Event<(String, bool)>) {
        if matches!(event, Event::InitDone) {
            self.freshness.listed(mark, tokio::time::Instant::now());
        }
        let first_sync = {
            let mut names = self.lock(mark).write().unwrap_or_else(|p| p.into_inner());
            names.apply(event)
        };
        self.after_event(first_sync);
    }

    /// Applies one event of the revocation list's watch, mapped to its names.
    pub fn apply_list(&self, event: Event<HashSet<String>>) {
        if matches!(event, Event::InitDone) {
            self.freshness
                .listed(Mark::Listed, tokio::time::Instant::now());
        }
        let first_sync = {
            let mut names = self.listed.write().unwrap_or_else(|p| p.into_inner());
            names.apply_set(event)
        };
        self.after_event(first_sync);
    }

    fn after_event(&self, first_sync: bool) {
        self.applied.send_modify(|n| *n += 1);
        if first_sync {
            let all = read(&self.bindings).synced
                && read(&self.nodes).synced
                && read(&self.listed).synced;
            if all {
                tracing::info!(
                    revoked_bindings = self.len(Mark::Binding),
                    revoked_nodes = self.len(Mark::Node),
                    listed = self.len(Mark::Listed),
                    "authorization webhook index synced"
                );
                self.synced.send_replace(true);
            }
        }
    }

    /// Feeds the index from watches of FlavorBindings, Nodes and the revocation list until
    /// the future is dropped, and keeps its freshness clock: at the first failure of a
    /// watch or of the API server's probe, the watches start again and list everything (the names known
    /// stay until the new list is complete).
    pub async fn feed(&self, client: Client) {
        loop {
            self.freshness.watches_down();
            let why = tokio::select! {
                why = self.watch(client.clone()) => why,
                why = freshness::probe(&client, &self.freshness) => why,
            };
            tracing::warn!(%why, "the authorization webhook's index may not be current; watching again (answers are refused once it is older than --authz-max-staleness)");
            tokio::time::sleep(freshness::PROBE_EVERY).await;
        }
    }

    /// Applies the three watches' events; returns at the first error of any.
    async fn watch(&self, client: Client) -> String {
        let bindings = watch_stream(
            Api::<FlavorBinding>::all(client.clone()),
            watcher::Config::default(),
        )
        .map(|e| {
            (
                Mark::Binding,
                e.map(|e| Fed::Marks(map_event(e, binding_mark))),
            )
        });
        let nodes = watch_stream(Api::<Node>::all(client.clone()), watcher::Config::default())
            .map(|e| (Mark::Node, e.map(|e| Fed::Marks(map_event(e, node_mark)))));
        let list_config =
            watcher::Config::default().fields(&format!("metadata.name={}", revocation_list::NAME));
        let listed = watch_stream(
            Api::<ConfigMap>::namespaced(client, revocation_list::NAMESPACE),
            list_config,
        )
        .map(|e| {
            (
                Mark::Listed,
                e.map(|e| Fed::List(map_event(e, listed_names))),
            )
        });
        let mut events = std::pin::pin!(futures::stream::select(
            futures::stream::select(bindings, nodes),
            listed
        ));
        while let Some((mark, event)) = events.next().await {
            match event {
                Ok(Fed::Marks(event)) => self.apply(mark, event),
                Ok(Fed::List(event)) => self.apply_list(event),
                Err(e) => return format!("watching {mark:?} marks failed: {e}"),
            }
        }
        "the watches ended".into()
    }
}

/// One watch's event, mapped to what the index keeps.
enum Fed {
    Marks(Event<(String, bool)>),
    List(Event<HashSet<String>>),
}

fn binding_mark(b: &FlavorBinding) -> (String, bool) {
    (b.name_any(), b.is_revoked())
}

fn node_mark(n: &Node) -> (String, bool) {
    (n.name_any(), node_is_marked(n))
}

/// The names of the revocation list.
fn listed_names(cm: &ConfigMap) -> HashSet<String> {
    cm.data
        .as_ref()
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default()
}

/// The Node carries kubeflavor's revoked taint (any value; NoExecute, as the controller
/// sets it).
pub fn node_is_marked(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| cutoff::is_revocation_mark(&t.key, &t.effect))
        })
}

fn map_event<K, T>(ev: Event<K>, mark: fn(&K) -> T) -> Event<T> {
    match ev {
        Event::Apply(k) => Event::Apply(mark(&k)),
        Event::Delete(k) => Event::Delete(mark(&k)),
        Event::Init => Event::Init,
        Event::InitApply(k) => Event::InitApply(mark(&k)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_core::flavor::REVOKED_TAINT;

    fn named(name: &str, marked: bool) -> (String, bool) {
        (name.to_string(), marked)
    }

    fn synced_index() -> CutOffIndex {
        let index = CutOffIndex::default();
        for mark in [Mark::Binding, Mark::Node] {
            index.apply(mark, Event::Init);
            index.apply(mark, Event::InitDone);
        }
        index.apply_list(Event::Init);
        index.apply_list(Event::InitDone);
        index
    }

    fn set(names: &[&str]) -> HashSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_listed_name_stays_cut_off_when_binding_and_node_are_gone() {
        let index = synced_index();
        index.apply(Mark::Binding, Event::Apply(named("w1", true)));
        index.apply(Mark::Node, Event::Apply(named("w1", true)));
        index.apply_list(Event::Apply(set(&["w1"])));
        index.apply(Mark::Binding, Event::Delete(named("w1", true)));
        index.apply(Mark::Node, Event::Delete(named("w1", true)));
        assert_eq!(index.cut_off("w1"), Some(CutOff::Listed));
        // `node forget` removes the name: the list's next version no longer has it.
        index.apply_list(Event::Apply(set(&["w2"])));
        assert_eq!(index.cut_off("w1"), None);
        assert_eq!(index.cut_off("w2"), Some(CutOff::Listed));
    }

    #[test]
    fn revoked_binding_cuts_off_until_unrevoked_or_deleted() {
        let index = synced_index();
        index.apply(Mark::Binding, Event::Apply(named("w1", true)));
        assert_eq!(index.cut_off("w1"), Some(CutOff::BindingRevoked));
        assert_eq!(index.cut_off("w2"), None);
        index.apply(Mark::Binding, Event::Delete(named("w1", true)));
        assert_eq!(index.cut_off("w1"), None);
    }

    #[test]
    fn deleted_revoked_binding_leaves_the_node_cut_off_while_its_node_is_marked() {
        let index = synced_index();
        index.apply(Mark::Binding, Event::Apply(named("w1", true)));
        index.apply(Mark::Node, Event::Apply(named("w1", true)));
        index.apply(Mark::Binding, Event::Delete(named("w1", true)));
        assert_eq!(index.cut_off("w1"), Some(CutOff::NodeMarkedRevoked));
        // The admin deletes the Node (or removes the taint): back to no opinion.
        index.apply(Mark::Node, Event::Delete(named("w1", true)));
        assert_eq!(index.cut_off("w1"), None);
    }

    #[test]
    fn a_relist_replaces_the_names_only_once_complete() {
        let index = synced_index();
        index.apply(Mark::Binding, Event::Apply(named("gone", true)));
        index.apply(Mark::Binding, Event::Init);
        index.apply(Mark::Binding, Event::InitApply(named("new", true)));
        index.apply(Mark::Binding, Event::InitApply(named("fine", false)));
        assert_eq!(
            index.cut_off("gone"),
            Some(CutOff::BindingRevoked),
            "known names hold during the relist"
        );
        index.apply(Mark::Binding, Event::InitDone);
        assert_eq!(index.cut_off("gone"), None);
        assert_eq!(index.cut_off("new"), Some(CutOff::BindingRevoked));
        assert_eq!(index.cut_off("fine"), None);
    }

    #[test]
    fn synced_only_once_both_watches_listed() {
        let index = CutOffIndex::default();
        index.apply(Mark::Binding, Event::Init);
        index.apply(Mark::Binding, Event::InitDone);
        assert!(!index.is_synced());
        index.apply(Mark::Node, Event::Init);
        index.apply(Mark::Node, Event::InitDone);
        assert!(!index.is_synced(), "the list is not listed yet");
        index.apply_list(Event::Init);
        index.apply_list(Event::InitApply(set(&["w1"])));
        index.apply_list(Event::InitDone);
        assert!(index.is_synced());
        assert_eq!(index.cut_off("w1"), Some(CutOff::Listed));
    }

    #[test]
    fn only_the_noexecute_revoked_taint_marks_a_node() {
        let node = |key: &str, effect: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "w1"},
                "spec": {"taints": [{"key": key, "effect": effect}]},
            }))
            .unwrap()
        };
        assert!(node_is_marked(&node(REVOKED_TAINT, "NoExecute")));
        assert!(!node_is_marked(&node(REVOKED_TAINT, "NoSchedule")));
        assert!(!node_is_marked(&node(
            "kubeflavor.io/unverified",
            "NoExecute"
        )));
    }
}
