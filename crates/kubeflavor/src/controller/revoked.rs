//! The leader's revoked loop: finishes every revocation, whoever started it, and keeps pods
//! off revoked nodes.
//!
//! `node revoke` does every step itself (`crate::revocation`), so a revocation never waits
//! for a leader; this loop is for the revocations that did not run to the end (a command
//! killed half way, a binding revoked by an older CLI or by hand, a name an admin listed by
//! editing the ConfigMap): for every name in the revocation list or with a revoked binding
//! it runs the same idempotent steps once per term. And a Pod that appears bound to such a
//! name (the admission policy refuses them; this is belt and braces, for an API server that
//! lacks the policy) is deleted at once.
//!
//! What it sees and does is on /metrics: the names listed and the revocations it has not
//! finished (the leader's census, [`Progress`]), each step that failed, by step, and the
//! pods it deleted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher as watch_stream};
use kube::{Api, ResourceExt};
use kubeflavor_cluster::crd::{CONDITION_REVOKED, FlavorBinding};
use kubeflavor_core::node::revocation_list;
use kubeflavor_core::node::state::Revocation;

use super::{Context, Stop};

/// What this term's revoked loop last saw, for the leader's census.
#[derive(Debug, Default)]
pub struct Progress {
    listed: AtomicUsize,
    unfinished: AtomicUsize,
}

impl Progress {
    /// Names on the revocation list.
    pub fn listed(&self) -> usize {
        self.listed.load(Ordering::Relaxed)
    }

    /// Names listed or with a revoked binding whose revocation this term has not finished.
    pub fn unfinished(&self) -> usize {
        self.unfinished.load(Ordering::Relaxed)
    }
}

/// What the loop learned from one watch event.
enum Seen {
    /// The names in the revocation list (the whole set).
    Listed(HashSet<String>),
    /// A binding and, when revoked, why.
    Binding(String, Option<Revocation>),
    BindingGone(String),
    /// A pod bound to a node (namespace, name, uid, node).
    Pod(String, String, Option<String>, String),
}

/// Why a binding is revoked, from its Revoked condition.
fn revocation_of(b: &FlavorBinding) -> Option<Revocation> {
    if !b.is_revoked() {
        return None;
    }
    let reason = b
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_REVOKED))
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    match (reason.as_str(), b.spec.token_id.parse()) {
        ("TokenRevoked", Ok(id)) => Some(Revocation::TokenRevoked(id)),
        _ => Some(Revocation::ByAdmin),
    }
}

/// Runs until `until` resolves (the end of the leader's term).
pub async fn run(ctx: Arc<Context>, until: Stop) {
    let client = ctx.client.clone();
    let list_config =
        watcher::Config::default().fields(&format!("metadata.name={}", revocation_list::NAME));
    let listed = watch_stream(
        Api::<ConfigMap>::namespaced(client.clone(), revocation_list::NAMESPACE),
        list_config,
    )
    .default_backoff()
    .applied_objects()
    .filter_map(|r| async move {
        r.ok()
            .map(|cm: ConfigMap| Seen::Listed(cm.data.unwrap_or_default().into_keys().collect()))
    })
    .boxed();
    let bindings = watch_stream(
        Api::<FlavorBinding>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|e| async move {
        match e.ok()? {
            Event::Apply(b) | Event::InitApply(b) => {
                Some(Seen::Binding(b.name_any(), revocation_of(&b)))
            }
            Event::Delete(b) => Some(Seen::BindingGone(b.name_any())),
            Event::Init | Event::InitDone => None,
        }
    })
    .boxed();
    let pods = watch_stream(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields("spec.nodeName!="),
    )
    .default_backoff()
    .applied_objects()
    .filter_map(|r| async move {
        let p: Pod = r.ok()?;
        if p.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let node = p.spec.as_ref()?.node_name.clone()?;
        Some(Seen::Pod(
            p.namespace().unwrap_or_default(),
            p.name_any(),
            p.uid(),
            node,
        ))
    })
    .boxed();
    let mut events = futures::stream::select_all([listed, bindings, pods]);

    let mut list: HashSet<String> = HashSet::new();
    let mut revoked: HashMap<String, Revocation> = HashMap::new();
    // Names whose revocation this term finished.
    let mut finished: HashSet<String> = HashSet::new();
    let work = async {
        while let Some(seen) = events.next().await {
            if ctx.halted.load(Ordering::SeqCst) {
                return;
            }
            match seen {
                Seen::Listed(names) => list = names,
                Seen::Binding(name, Some(why)) => {
                    revoked.insert(name, why);
                }
                Seen::Binding(name, None) | Seen::BindingGone(name) => {
                    revoked.remove(&name);
                }
                Seen::Pod(ns, name, uid, node) => {
                    if ctx.opts.serves(&node)
                        && (list.contains(&node) || revoked.contains_key(&node))
                    {
                        delete_pod(&ctx, &ns, &name, uid, &node).await;
                    }
                    continue;
                }
            }
            finished.retain(|n| list.contains(n) || revoked.contains_key(n));
            let due: Vec<(String, Revocation)> = list
                .iter()
                .chain(revoked.keys())
                .filter(|n| ctx.opts.serves(n) && !finished.contains(*n))
                .map(|n| {
                    (
                        n.clone(),
                        revoked.get(n).cloned().unwrap_or(Revocation::ByAdmin),
                    )
                })
                .collect::<HashMap<_, _>>()
                .into_iter()
                .collect();
            for (name, why) in due {
                if ctx.halted.load(Ordering::SeqCst) {
                    return;
                }
                if finish(&ctx, &name, &why).await {
                    finished.insert(name);
                }
            }
            let unfinished: HashSet<&String> = list
                .iter()
                .chain(revoked.keys())
                .filter(|n| ctx.opts.serves(n) && !finished.contains(*n))
                .collect();
            ctx.revocations
                .unfinished
                .store(unfinished.len(), Ordering::Relaxed);
            ctx.revocations.listed.store(list.len(), Ordering::Relaxed);
        }
    };
    tokio::select! {
        _ = work => {}
        _ = until => {}
    }
}

/// Runs every step of `name`'s revocation; true when all are done.
async fn finish(ctx: &Context, name: &str, why: &Revocation) -> bool {
    let by = format!("kubeflavor controller ({})", ctx.opts.identity);
    ctx.metrics.write_started();
    let mut wrote = Vec::new();
    let result = crate::revocation::revoke(&ctx.client, name, why, &by, &mut |step, outcome| {
        if let crate::revocation::Outcome::Done(text) = outcome {
            wrote.push(format!("[{}] {text}", step.name()));
        }
    })
    .await;
    match result {
        Ok(_) => {
            if !wrote.is_empty() {
                tracing::info!(node = name, steps = %wrote.join("; "), "finished a revocation");
            }
            true
        }
        Err(e) => {
            ctx.metrics.revocation_failed(e.step);
            tracing::warn!(node = name, error = %e, "could not finish a revocation; retrying on the next change");
            false
        }
    }
}

/// Deletes a pod bound to a revoked node at once (uid precondition: never a pod re-created
/// under the same name since).
async fn delete_pod(ctx: &Context, ns: &str, name: &str, uid: Option<String>, node: &str) {
    ctx.metrics.write_started();
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    match Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .delete(name, &dp)
        .await
    {
        Ok(_) => {
            ctx.metrics.revoked_pods_deleted.inc();
            tracing::info!(node, pod = %format!("{ns}/{name}"), "deleted a pod bound to a revoked node")
        }
        Err(e) if kubeflavor_cluster::status::is_not_found(&e) => {}
        Err(e) => {
            tracing::warn!(node, pod = %format!("{ns}/{name}"), error = %e, "could not delete a pod bound to a revoked node")
        }
    }
}
