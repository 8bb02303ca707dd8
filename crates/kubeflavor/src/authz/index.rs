//! What every replica knows, in memory, of which node names are cut off: the names whose
//! FlavorBinding is revoked and the names whose Node carries `kubeflavor.io/revoked`, fed
//! by two watches. The webhook answers from here alone, never with an API call per request.
//!
//! A watch that restarts lists everything again; the names it lists are gathered aside and
//! replace the previous set only once the list is complete, so a relist never opens a
//! window in which a revoked name is forgotten.

use std::collections::HashSet;
use std::sync::RwLock;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher as watch_stream;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use kubeflavor_core::node_cutoff::{self, CutOff};
use tokio::sync::watch;

use super::freshness::{self, Freshness};
use crate::crd::FlavorBinding;

/// One of the two marks of a cut-off name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// FlavorBindings with Revoked=True.
    Binding,
    /// Nodes tainted `kubeflavor.io/revoked`.
    Node,
}

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
            Event::InitDone => {
                if let Some(gathered) = self.relisting.take() {
                    self.live = gathered;
                }
                let first = !self.synced;
                self.synced = true;
                return first;
            }
        }
        false
    }
}

/// The cut-off names, shared by every request of the webhook.
#[derive(Debug)]
pub struct CutOffIndex {
    bindings: RwLock<Names>,
    nodes: RwLock<Names>,
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
        read(&self.nodes)
            .live
            .contains(node)
            .then_some(CutOff::NodeMarkedRevoked)
    }

    /// Both watches have listed everything once: the index may be trusted.
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
        self.applied.send_modify(|n| *n += 1);
        if first_sync {
            let both = read(&self.bindings).synced && read(&self.nodes).synced;
            if both {
                tracing::info!(
                    revoked_bindings = self.len(Mark::Binding),
                    revoked_nodes = self.len(Mark::Node),
                    "authorization webhook index synced"
                );
                self.synced.send_replace(true);
            }
        }
    }

    /// Feeds the index from watches of FlavorBindings and Nodes until the future is
    /// dropped, and keeps its freshness clock: at the first failure of a watch or of the
    /// API server's probe, both watches start again and list everything (the names known
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

    /// Applies both watches' events; returns at the first error of either.
    async fn watch(&self, client: Client) -> String {
        let bindings = watch_stream(
            Api::<FlavorBinding>::all(client.clone()),
            watcher::Config::default(),
        )
        .map(|e| (Mark::Binding, e.map(|e| map_event(e, binding_mark))));
        let nodes = watch_stream(Api::<Node>::all(client), watcher::Config::default())
            .map(|e| (Mark::Node, e.map(|e| map_event(e, node_mark))));
        let mut events = std::pin::pin!(futures::stream::select(bindings, nodes));
        while let Some((mark, event)) = events.next().await {
            match event {
                Ok(event) => self.apply(mark, event),
                Err(e) => return format!("watching {mark:?} marks failed: {e}"),
            }
        }
        "the watches ended".into()
    }
}

fn binding_mark(b: &FlavorBinding) -> (String, bool) {
    (b.name_any(), b.is_revoked())
}

fn node_mark(n: &Node) -> (String, bool) {
    (n.name_any(), node_is_marked(n))
}

/// The Node carries kubeflavor's revoked taint (any value; NoExecute, as the controller
/// sets it).
pub fn node_is_marked(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| node_cutoff::is_revocation_mark(&t.key, &t.effect))
        })
}

fn map_event<K>(ev: Event<K>, mark: fn(&K) -> (String, bool)) -> Event<(String, bool)> {
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
        index
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
        assert!(index.is_synced());
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
