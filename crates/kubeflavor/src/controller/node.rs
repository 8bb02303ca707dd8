//! The node loop: keeps every bound Node at its binding's desired labels and taints.
//!
//! Keyed by FlavorBinding (name = node name). Triggers: the binding itself, its Node
//! (metadata-only watch: labels and resourceVersion, not the whole object, to keep memory
//! small with thousands of Nodes) and its Flavor. Stages: dereference (stores, then one GET
//! of the Node for its taints) -> build (core, pure) -> apply (merge patch with the Node's
//! resourceVersion, only when it differs) -> status (only when it differs).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::metrics::Metrics;
use super::policy;
use super::{Context, Error, Step, Stop};
use crate::crd::{CONDITION_REVOKED, Flavor, FlavorBinding};

type Events<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// A metadata-only reflector of all Nodes and its stream of touched Nodes.
pub fn node_metadata_store(
    client: Client,
) -> (
    Store<PartialObjectMeta<Node>>,
    Events<PartialObjectMeta<Node>>,
) {
    let (reader, writer) = reflector::store();
    // Api<PartialObjectMeta<Node>> lists and watches with the metadata-only Accept header.
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects()
        .boxed();
    (reader, stream)
}

/// A reflector of all Flavors and its stream of touched Flavors.
pub fn flavor_store(client: Client) -> (Store<Flavor>, Events<Flavor>) {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<Flavor>::all(client), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .boxed();
    (reader, stream)
}

/// Runs the node loop until `until` resolves.
pub async fn run(
    ctx: Arc<Context>,
    node_events: Events<PartialObjectMeta<Node>>,
    flavor_events: Events<Flavor>,
    until: Stop,
) {
    let bindings: Api<FlavorBinding> = Api::all(ctx.client.clone());
    let controller = Controller::new(bindings, watcher::Config::default())
        .with_config(Config::default().concurrency(ctx.opts.concurrency));
    let store = controller.store();
    let ready_store = store.clone();
    let fut = controller
        // The binding is named after its Node.
        .watches_stream(node_events, |node| {
            Some(ObjectRef::<FlavorBinding>::new(&node.name_any()))
        })
        .watches_stream(flavor_events, move |flavor| {
            let name = flavor.name_any();
            store
                .state()
                .into_iter()
                .filter(|b| b.spec.flavor == name)
                .map(|b| ObjectRef::from_obj(&*b))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(until.clone())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "node loop");
            }
        });
    super::with_grace(fut, until, ready_store).await;
}

pub fn error_policy(_b: Arc<FlavorBinding>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error("node", err.metric_label());
    if matches!(err, Error::Halted(_)) {
        return Action::await_change();
    }
    if err.is_conflict() {
        // The Node changed between our read and our patch (kubelet heartbeat, an admin):
        // read it again and recompute.
        return Action::requeue(Duration::from_millis(50));
    }
    tracing::warn!(error = %err, "node reconcile failed, retrying");
    Action::requeue(Duration::from_secs(1))
}

fn forget(ctx: &Context, name: &str) {
    ctx.verified.lock().expect("verified lock").remove(name);
    ctx.written_status
        .lock()
        .expect("written_status lock")
        .remove(name);
    let mut flavored = ctx.flavored.lock().expect("flavored lock");
    flavored.remove(name);
    ctx.metrics.flavored_nodes.set(flavored.len() as i64);
}

pub async fn reconcile(binding: Arc<FlavorBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = binding.name_any();
    // Dereference: the Node (metadata store) and the Flavor (store).
    let Some(meta) = ctx.nodes.get(&ObjectRef::new(&name)) else {
        // Not registered yet, or deleted: its re-creation triggers us again (P2).
        forget(&ctx, &name);
        return Ok(Action::await_change());
    };
    let flavor = ctx.flavors.get(&ObjectRef::new(&binding.spec.flavor));
    let key = (
        meta.resource_version().unwrap_or_default(),
        binding.resource_version().unwrap_or_default(),
        flavor
            .as_ref()
            .and_then(|f| f.resource_version())
            .unwrap_or_default(),
    );
    if ctx.verified.lock().expect("verified lock").get(&name) == Some(&key) {
        return Ok(Action::await_change());
    }
    let _timer = Metrics::measure(&ctx.metrics.flavoring_duration);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    // Taints live in spec, which the metadata watch does not carry.
    let Some(node) = nodes.get_opt(&name).await.map_err(|source| Error::Read {
        what: format!("Node {name}"),
        source,
    })?
    else {
        forget(&ctx, &name);
        return Ok(Action::await_change());
    };

    // Build (pure). The store's copy of the binding may lag the status this term wrote
    // last; that status (plus the administrator's Revoked condition from the store) is
    // the freshest record of what kubeflavor applied.
    let mut effective = (*binding).clone();
    if let Some(written) = ctx
        .written_status
        .lock()
        .expect("written_status lock")
        .get(&name)
    {
        let mut status = written.clone();
        status.conditions.retain(|c| c.type_ != CONDITION_REVOKED);
        status.conditions.extend(
            binding
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .filter(|c| c.type_ == CONDITION_REVOKED)
                .cloned(),
        );
        effective.status = Some(status);
    }
    let plan = policy::plan_node(&effective, flavor.as_deref(), &node);

    // Apply: only when the Node differs; the patch carries the Node's resourceVersion.
    let mut node_rv = node.resource_version().unwrap_or_default();
    if let Some(patch) = &plan.patch {
        ctx.may_write(Step::NodePatched)?;
        let patched = nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|source| Error::PatchNode {
                node: name.clone(),
                source,
            })?;
        node_rv = patched.resource_version().unwrap_or_default();
        ctx.metrics.node_patches.inc();
        tracing::info!(node = %name, flavor = %binding.spec.flavor, "node flavored");
        ctx.step(&name, Step::NodePatched)?;
    }

    // Status: only when it differs.
    let mut binding_rv = key.1.clone();
    // The binding in the store may lag our own last status write (a re-run triggered by
    // the Node patch): a status equal to what this term last wrote is not written again.
    let already_written = ctx
        .written_status
        .lock()
        .expect("written_status lock")
        .get(&name)
        == Some(&plan.status);
    if effective.status.as_ref() != Some(&plan.status) && !already_written {
        ctx.may_write(Step::StatusWritten)?;
        let bindings: Api<FlavorBinding> = Api::all(ctx.client.clone());
        let body = serde_json::json!({ "status": plan.status });
        let written = bindings
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::BindingStatus {
                node: name.clone(),
                source,
            })?;
        binding_rv = written.resource_version().unwrap_or_default();
        ctx.written_status
            .lock()
            .expect("written_status lock")
            .insert(name.clone(), plan.status.clone());
        ctx.step(&name, Step::StatusWritten)?;
    }

    {
        let mut flavored = ctx.flavored.lock().expect("flavored lock");
        if plan.flavored {
            flavored.insert(name.clone());
        } else {
            flavored.remove(&name);
        }
        ctx.metrics.flavored_nodes.set(flavored.len() as i64);
    }
    ctx.verified
        .lock()
        .expect("verified lock")
        .insert(name, (node_rv, binding_rv, key.2));
    Ok(Action::await_change())
}
