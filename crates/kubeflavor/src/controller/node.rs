//! The node loop: keeps every bound Node at its binding's desired labels and taints.
//!
//! Keyed by FlavorBinding (name = node name). Triggers: the binding itself, its Node
//! (metadata-only watch, cached as name and resourceVersion alone to keep memory small with
//! thousands of Nodes, see `cache`) and its Flavor. Stages: dereference (stores, then one
//! GET of the Node for its labels and taints) -> build (core, pure) -> apply (merge patch with the
//! Node's resourceVersion, only when it differs) -> status (only when it differs).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use kubeflavor_core::node_state::{BindingCsr, node_is_the_holders};
use kubeflavor_core::policy::APPROVED_CONDITION;
use tokio::sync::Notify;

use super::metrics::Metrics;
use super::{Context, Error, Options, Step, Stop};
use super::{cache, facts, policy};
use crate::crd::{Flavor, FlavorBinding, FlavorBindingStatus};

type Events<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// A metadata-only reflector of all Nodes and its stream of touched Nodes.
pub fn node_metadata_store(
    client: Client,
    opts: &Options,
) -> (
    Store<PartialObjectMeta<Node>>,
    Events<PartialObjectMeta<Node>>,
) {
    let (reader, writer) = reflector::store();
    // Api<PartialObjectMeta<Node>> lists and watches with the metadata-only Accept header.
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    let opts = opts.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
        .modify(cache::slim_node)
        .reflect(writer)
        .touched_objects()
        .boxed();
    (reader, stream)
}

/// A reflector of all Flavors and its stream of touched Flavors; `changed` is notified
/// on every change (the bound-node counts may have to be written).
pub fn flavor_store(
    client: Client,
    opts: &Options,
    changed: Arc<Notify>,
) -> (Store<Flavor>, Events<Flavor>) {
    let (reader, writer) = reflector::store();
    let opts = opts.clone();
    let stream = watcher(Api::<Flavor>::all(client), watcher::Config::default())
        .default_backoff()
        .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
        .reflect(writer)
        .inspect(move |_| changed.notify_one())
        .touched_objects()
        .boxed();
    (reader, stream)
}

/// A reflector of all FlavorBindings (slim, see `cache`) and its stream of applied
/// bindings; `changed` is notified when one appears or goes.
pub fn binding_store(
    client: Client,
    opts: &Options,
    changed: Arc<Notify>,
) -> (Store<FlavorBinding>, Events<FlavorBinding>) {
    let (reader, writer) = reflector::store();
    let opts = opts.clone();
    let stream = watcher(
        Api::<FlavorBinding>::all(client),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
    .modify(cache::slim_binding)
    .reflect(writer)
    .inspect(move |event| {
        if matches!(
            event,
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
        ) {
            changed.notify_one();
        }
    })
    .applied_objects()
    .boxed();
    (reader, stream)
}

/// How long a burst of binding changes may settle before the counts are written: one
/// status write per Flavor per burst, not one per join.
const COUNT_SETTLE: Duration = Duration::from_secs(1);

/// Keeps every Flavor's `status.boundNodes` at the number of FlavorBindings naming it,
/// until `until` resolves.
pub async fn keep_bound_counts(ctx: Arc<Context>, changed: Arc<Notify>, until: Stop) {
    let work = async {
        let _ = ctx.bindings.wait_until_ready().await;
        let _ = ctx.flavors.wait_until_ready().await;
        loop {
            changed.notified().await;
            tokio::time::sleep(COUNT_SETTLE).await;
            if write_bound_counts(&ctx, &changed).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = until => {}
    }
}

/// Writes each Flavor's `status.boundNodes` that differs from the cached bindings; a
/// failed write notifies `changed` so it is tried again. Fails once this context may
/// write no more.
async fn write_bound_counts(ctx: &Context, changed: &Notify) -> Result<(), Error> {
    let flavors = ctx.flavors.state();
    let bindings = ctx.bindings.state();
    let updates = policy::bound_node_updates(
        flavors.iter().map(|f| {
            (
                f.metadata.name.as_deref().unwrap_or_default(),
                f.status.as_ref().and_then(|s| s.bound_nodes),
            )
        }),
        bindings.iter().map(|b| b.spec.flavor.as_str()),
    );
    let api: Api<Flavor> = Api::all(ctx.client.clone());
    for (name, count) in updates {
        ctx.begin_write(Step::StatusWritten)?;
        let body = serde_json::json!({ "status": { "boundNodes": count } });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => tracing::debug!(flavor = %name, count, "bound nodes counted"),
            // Deleted meanwhile: nothing to count.
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => {
                ctx.metrics.error("flavor", "bound_count");
                tracing::warn!(flavor = %name, error = %e, "could not write the bound-node count; retrying");
                changed.notify_one();
            }
        }
    }
    Ok(())
}

/// Runs the node loop until `until` resolves.
pub async fn run(
    ctx: Arc<Context>,
    binding_events: Events<FlavorBinding>,
    node_events: Events<PartialObjectMeta<Node>>,
    flavor_events: Events<Flavor>,
    until: Stop,
) {
    let store = ctx.bindings.clone();
    let routes = FlavorRoutes {
        flavors: ctx.flavors.clone(),
        bindings: store.clone(),
        seen: Default::default(),
    };
    let controller = Controller::for_stream(binding_events, store.clone())
        // Unbounded here: the fair limit is `Context::node_turns` (see `Turns`).
        .with_config(Config::default().concurrency(0));
    let fut = controller
        // The binding is named after its Node.
        .watches_stream(node_events, |node| {
            Some(ObjectRef::<FlavorBinding>::new(&node.name_any()))
        })
        .watches_stream(flavor_events, move |flavor| {
            routes.bindings_to_redo(&flavor)
        })
        .graceful_shutdown_on(until.clone())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "node loop");
            }
        });
    super::with_grace(fut, until, store).await;
}

/// Routes Flavor events to the bindings of the Flavor.
struct FlavorRoutes {
    flavors: Store<Flavor>,
    bindings: Store<FlavorBinding>,
    /// Per Flavor name, the version (see `flavor_version`) last routed.
    seen: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl FlavorRoutes {
    /// The bindings to reconcile after an event of `flavor`. Only a new spec (generation),
    /// a new Flavor under the name (uid) or a deleted one changes what its Nodes must
    /// carry; the bound-node count this controller writes into the status must not re-run
    /// every binding of the Flavor.
    fn bindings_to_redo(&self, flavor: &Flavor) -> Vec<ObjectRef<FlavorBinding>> {
        let name = flavor.name_any();
        let now = self
            .flavors
            .get(&ObjectRef::from_obj(flavor))
            .map(|f| flavor_version(Some(&f)));
        let mut seen = self.seen.lock().expect("seen specs lock");
        let unchanged = now.is_some() && seen.get(&name) == now.as_ref();
        match now {
            Some(v) => seen.insert(name.clone(), v),
            None => seen.remove(&name),
        };
        if unchanged {
            return Vec::new();
        }
        self.bindings
            .state()
            .into_iter()
            .filter(|b| b.spec.flavor == name)
            .map(|b| ObjectRef::from_obj(&*b))
            .collect()
    }
}

pub fn error_policy(_b: Arc<FlavorBinding>, err: &Error, ctx: Arc<Context>) -> Action {
    if err.is_conflict() {
        // The Node changed between our read and our patch (kubelet heartbeat, an admin,
        // kube-controller-manager's edits of a new Node): read it again and recompute.
        ctx.metrics.conflict("node", err.metric_label());
        return Action::requeue(Duration::from_millis(50));
    }
    ctx.metrics.error("node", err.metric_label());
    if matches!(err, Error::Halted(_)) {
        return Action::await_change();
    }
    tracing::warn!(error = %err, "node reconcile failed, retrying");
    Action::requeue(Duration::from_secs(1))
}

fn forget(ctx: &Context, name: &str) {
    ctx.verified.lock().expect("verified lock").remove(name);
    let mut flavored = ctx.flavored.lock().expect("flavored lock");
    flavored.remove(name);
    ctx.metrics.flavored_nodes.set(flavored.len() as i64);
}

/// The Node and binding resourceVersions and the Flavor's version a reconcile found in
/// the desired state, folded into one number: unchanged means nothing to read or write.
fn fingerprint(node_rv: &str, binding_rv: &str, flavor: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (node_rv, binding_rv, flavor).hash(&mut h);
    h.finish()
}

/// Whether the binding has flavored its Node before (its status says so).
fn was_flavored(binding: &FlavorBinding) -> bool {
    binding.status.as_ref().is_some_and(|s| {
        !s.applied_labels.is_empty()
            || !s.applied_taints.is_empty()
            || s.conditions
                .iter()
                .any(|c| c.type_ == crate::crd::CONDITION_FLAVORED && c.status == "True")
    })
}

/// Where the CSR that created the binding stands.
async fn binding_csr(ctx: &Context, binding: &FlavorBinding) -> Result<BindingCsr, Error> {
    let name = &binding.spec.csr_name;
    let csr = Api::<CertificateSigningRequest>::all(ctx.client.clone())
        .get_opt(name)
        .await
        .map_err(|source| Error::Read {
            what: format!("CertificateSigningRequest {name}"),
            source,
        })?;
    Ok(match csr {
        None => BindingCsr::Gone,
        Some(csr) if approved(&csr) => BindingCsr::Approved,
        Some(_) => BindingCsr::NotApproved,
    })
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    facts::has_condition(csr, APPROVED_CONDITION.type_)
}

/// What of a Flavor its Nodes depend on: which object (uid) and which spec (generation).
/// Its resourceVersion would also move with the status this controller writes.
fn flavor_version(flavor: Option<&Flavor>) -> String {
    match flavor {
        Some(f) => format!(
            "{}/{}",
            f.metadata.uid.as_deref().unwrap_or_default(),
            f.metadata.generation.unwrap_or_default()
        ),
        None => String::new(),
    }
}

pub async fn reconcile(cached: Arc<FlavorBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = cached.name_any();
    // Dereference: the Node (metadata store) and the Flavor (store).
    let Some(meta) = ctx.nodes.get(&ObjectRef::new(&name)) else {
        // Not registered yet, or deleted: its re-creation triggers us again (P2, trusted labels).
        forget(&ctx, &name);
        return Ok(Action::await_change());
    };
    let flavor = ctx.flavors.get(&ObjectRef::new(&cached.spec.flavor));
    let seen = fingerprint(
        &meta.resource_version().unwrap_or_default(),
        &cached.resource_version().unwrap_or_default(),
        &flavor_version(flavor.as_deref()),
    );
    if ctx
        .verified
        .lock()
        .expect("verified lock")
        .get(&name)
        .is_some_and(|done| done.contains(&seen))
    {
        return Ok(Action::await_change());
    }
    let _turn = ctx.node_turns.take().await;
    if ctx.may_write(Step::NodePatched).is_err() {
        // The term ended while this reconcile waited: the next leader flavors it.
        return Ok(Action::await_change());
    }
    // Boxed: while it waits for its turn, a reconcile holds a few words, not room for
    // every API call below.
    Box::pin(flavor_node(name, &cached.spec.flavor, flavor, &ctx)).await
}

/// Reads the binding and the Node, and brings the Node and the binding's status to what
/// the Flavor says. `flavor` is the cached Flavor named `cached_flavor`.
async fn flavor_node(
    name: String,
    cached_flavor: &str,
    flavor: Option<Arc<Flavor>>,
    ctx: &Context,
) -> Result<Action, Error> {
    let _timer = Metrics::measure(&ctx.metrics.flavoring_duration);
    let Some((binding, node)) = read_binding_and_node(ctx, &name).await? else {
        // Deleted meanwhile: the watch event that follows ends the story.
        forget(ctx, &name);
        return Ok(Action::await_change());
    };
    if !is_the_holders(ctx, &binding).await? {
        return Ok(Action::await_change());
    }
    let flavor = if binding.spec.flavor == cached_flavor {
        flavor
    } else {
        ctx.flavors.get(&ObjectRef::new(&binding.spec.flavor))
    };
    let plan = policy::plan_node(&binding, flavor.as_deref(), &node);
    let node_rv = patch_node(ctx, &binding, &node, plan.patch.as_ref()).await?;
    let binding_rv = write_status(ctx, &binding, &plan.status).await?;
    let read_rv = binding.resource_version().unwrap_or_default();
    remember(
        ctx,
        name,
        plan.flavored,
        &flavor_version(flavor.as_deref()),
        [
            (node_rv.as_str(), binding_rv.as_str()),
            // The binding cache may still hold the version read above while the status write
            // travels back on the watch: that version, with this status written, is also done.
            (node_rv.as_str(), read_rv.as_str()),
        ],
    );
    Ok(Action::await_change())
}

/// The binding and the Node of `name`, read together; `None` when either is gone. The
/// caches keep neither the binding's status nor the Node's labels and taints, and a fresh
/// binding is the only safe base for the status write (a cache may lag the status written
/// a moment ago).
async fn read_binding_and_node(
    ctx: &Context,
    name: &str,
) -> Result<Option<(FlavorBinding, Node)>, Error> {
    let read = |what: String| move |source| Error::Read { what, source };
    let bindings: Api<FlavorBinding> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let (binding, node) = tokio::try_join!(
        async {
            bindings
                .get_opt(name)
                .await
                .map_err(read(format!("FlavorBinding {name}")))
        },
        async {
            nodes
                .get_opt(name)
                .await
                .map_err(read(format!("Node {name}")))
        },
    )?;
    Ok(binding.zip(node))
}

/// P3 (binding): whether the Node of the binding's name is the token holder's to flavor
/// (core's `node_is_the_holders`). A revoked binding always acts on its Node.
async fn is_the_holders(ctx: &Context, binding: &FlavorBinding) -> Result<bool, Error> {
    if binding.is_revoked() || was_flavored(binding) {
        return Ok(true);
    }
    let csr = binding_csr(ctx, binding).await?;
    if node_is_the_holders(false, csr) {
        return Ok(true);
    }
    // Not (yet) the token holder's Node: leave it alone. The holder's own registration
    // comes after the approval and triggers this loop again.
    tracing::debug!(node = %binding.spec.node, csr = ?csr, "the Node predates its binding's approval; not flavoring it");
    Ok(false)
}

/// Applies the planned patch, if any (it carries the Node's resourceVersion), and returns
/// the Node's resourceVersion after it.
async fn patch_node(
    ctx: &Context,
    binding: &FlavorBinding,
    node: &Node,
    patch: Option<&serde_json::Value>,
) -> Result<String, Error> {
    let Some(patch) = patch else {
        return Ok(node.resource_version().unwrap_or_default());
    };
    let name = node.name_any();
    let patched = async {
        let patched = Api::<Node>::all(ctx.client.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|source| Error::PatchNode {
                node: name.clone(),
                source,
            })?;
        ctx.metrics.node_patches.inc();
        tracing::info!(node = %name, flavor = %binding.spec.flavor, "node flavored");
        Ok(patched.resource_version().unwrap_or_default())
    };
    ctx.write(&name, Step::NodePatched, patched).await
}

/// Writes the binding's status when it differs (guarded by the resourceVersion read), and
/// returns the binding's resourceVersion after it.
async fn write_status(
    ctx: &Context,
    binding: &FlavorBinding,
    status: &FlavorBindingStatus,
) -> Result<String, Error> {
    let read_rv = binding.resource_version().unwrap_or_default();
    if binding.status.as_ref() == Some(status) {
        return Ok(read_rv);
    }
    let name = binding.name_any();
    let written = async {
        let body = serde_json::json!({
            "metadata": {"resourceVersion": read_rv},
            "status": status,
        });
        let written = Api::<FlavorBinding>::all(ctx.client.clone())
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::BindingStatus {
                node: name.clone(),
                source,
            })?;
        Ok(written.resource_version().unwrap_or_default())
    };
    ctx.write(&name, Step::StatusWritten, written).await
}

/// Records what the reconcile left: whether the Node carries its flavor (the
/// `flavored_nodes` gauge), and the (Node, binding) resourceVersions with the Flavor's
/// version that need nothing more.
fn remember(ctx: &Context, name: String, flavored: bool, flavor: &str, done: [(&str, &str); 2]) {
    {
        let mut nodes = ctx.flavored.lock().expect("flavored lock");
        if flavored {
            nodes.insert(name.clone());
        } else {
            nodes.remove(&name);
        }
        ctx.metrics.flavored_nodes.set(nodes.len() as i64);
    }
    let done = done.map(|(node_rv, binding_rv)| fingerprint(node_rv, binding_rv, flavor));
    ctx.verified
        .lock()
        .expect("verified lock")
        .insert(name, done);
}
