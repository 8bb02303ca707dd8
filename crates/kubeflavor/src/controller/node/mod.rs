//! The node loop: keeps every bound Node at its binding's desired labels and taints.
//!
//! Keyed by node name (a FlavorBinding is named after its Node). Triggers: the binding
//! itself, its Node and its Flavor. What the loop knows of each name between reconciles
//! is a few dozen bytes in the [`Fleet`] index (a Node's labels and taints as a
//! fingerprint, the binding's flavor and version), so memory stays flat per node; names to
//! look at wait in a [`WorkQueue`], first come first served, `Options::concurrency` at a
//! time. Stages: dereference (index, then one GET of the binding and the Node) -> build
//! (core, pure) -> apply (merge patch with the Node's resourceVersion, only when it
//! differs) -> status (only when it differs).

mod plan;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::Patch;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding, FlavorBindingStatus};
use kubeflavor_cluster::ops::trail::Regarding;
use kubeflavor_cluster::{bindings, flavors, nodes, token_secrets};
use kubeflavor_core::approval::client::APPROVED_CONDITION;
use kubeflavor_core::approval::client::token_is_used_up;
use kubeflavor_core::flavor::{FLAVOR_LABEL, UNVERIFIED_TAINT};
use kubeflavor_core::node::applied_record::APPLIED_ANNOTATION;
use kubeflavor_core::node::state::{BindingCsr, node_is_the_holders};
use tokio::sync::Notify;

use super::cache;
use super::csr::facts;
use super::fleet::{self, Fingerprint};
use super::metrics::Metrics;
use super::queue::WorkQueue;
use super::{Context, Error, Options, Step, Stop};

type Events<K> = BoxStream<'static, Result<K, watcher::Error>>;
type WatchEvents<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// A Node as the node loop watches it: its metadata and taints. Everything else a Node
/// carries (its status: conditions, addresses, images) is skipped while it is read.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct NodeView {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeViewSpec,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct NodeViewSpec {
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
}

impl kube::Resource for NodeView {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl NodeView {
    /// The Node carries kubeflavor's flavor label or its applied record, which only
    /// kubeflavor sets (NodeRestriction keeps kubelets off the label, an admission policy
    /// off the record): kubeflavor judged it, so without a binding it must be released.
    fn flavor_labeled(&self) -> bool {
        judged(&self.metadata)
    }

    fn fingerprint(&self) -> Fingerprint {
        with_record(
            &self.metadata,
            fleet::node_fingerprint(
                self.metadata.labels.as_ref(),
                self.spec.taints.as_deref().unwrap_or_default(),
            ),
        )
    }
}

/// See [`NodeView::flavor_labeled`].
fn judged(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(FLAVOR_LABEL))
        || record_of(meta).is_some()
}

/// The Node's applied record annotation.
fn record_of(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(APPLIED_ANNOTATION)
        .map(String::as_str)
}

/// A Node fingerprint that also moves with the applied record (an admin who removes or
/// edits it gets it rewritten).
fn with_record(meta: &ObjectMeta, labels_and_taints: Fingerprint) -> Fingerprint {
    match record_of(meta) {
        None => labels_and_taints,
        Some(record) => fleet::combined(
            labels_and_taints,
            fleet::version_fingerprint(record),
            APPLIED_ANNOTATION,
        ),
    }
}

/// The fingerprint of a Node read or written whole (see [`NodeView::fingerprint`]).
fn node_fingerprint(node: &Node) -> Fingerprint {
    with_record(
        &node.metadata,
        fleet::node_fingerprint(
            node.metadata.labels.as_ref(),
            node.spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default(),
        ),
    )
}

/// The watch of all Nodes (the ones this controller serves).
pub fn node_events(client: Client, opts: &Options) -> WatchEvents<NodeView> {
    let opts = opts.clone();
    watcher(Api::<NodeView>::all(client), watcher::Config::default())
        .default_backoff()
        .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
        .boxed()
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

/// The watch of all FlavorBindings (the ones this controller serves).
pub fn binding_events(client: Client, opts: &Options) -> WatchEvents<FlavorBinding> {
    let opts = opts.clone();
    watcher(
        Api::<FlavorBinding>::all(client),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
    .boxed()
}

/// How long a burst of binding changes may settle before the counts are written: one
/// status write per Flavor per burst, not one per join.
const COUNT_SETTLE: Duration = Duration::from_secs(1);

/// Keeps every Flavor's `status.boundNodes` at the number of FlavorBindings naming it,
/// until `until` resolves.
pub async fn keep_bound_counts(ctx: Arc<Context>, changed: Arc<Notify>, until: Stop) {
    let work = async {
        ctx.fleet.wait_synced().await;
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

/// Writes each Flavor's `status.boundNodes` that differs from the bindings counted; a
/// failed write notifies `changed` so it is tried again. Fails once this context may
/// write no more.
async fn write_bound_counts(ctx: &Context, changed: &Notify) -> Result<(), Error> {
    let flavors = ctx.flavors.state();
    let updates = plan::bound_node_updates(
        flavors.iter().map(|f| {
            (
                f.metadata.name.as_deref().unwrap_or_default(),
                f.status.as_ref().and_then(|s| s.bound_nodes),
            )
        }),
        |flavor| ctx.fleet.bound_count(flavor),
    );
    for (name, count) in updates {
        ctx.begin_write(Step::StatusWritten)?;
        match flavors::write_bound_nodes(&ctx.client, &name, &super::patch_params(), count).await {
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

/// The watches of one term, as the node loop consumes them.
pub struct Feeds {
    pub nodes: WatchEvents<NodeView>,
    pub bindings: WatchEvents<FlavorBinding>,
    pub flavors: Events<Flavor>,
    /// Notified when a binding appears or goes (the bound-node counts).
    pub counts_changed: Arc<Notify>,
}

/// Runs the node loop until `until` resolves: the watches feed the index and the queue,
/// `Options::concurrency` workers take names from the queue.
pub async fn run(ctx: Arc<Context>, feeds: Feeds, until: Stop) {
    let queue = WorkQueue::new();
    let feed = feed(&ctx, feeds, &queue);
    let workers =
        futures::future::join_all((0..ctx.opts.concurrency.max(1)).map(|_| work(&ctx, &queue)));
    let fed = async {
        tokio::select! {
            _ = feed => {}
            _ = until => {}
        }
        // The workers end as soon as the queue is closed and their reconcile returns; a
        // reconcile of an ended term writes nothing more (`Context::may_write`).
        queue.close();
    };
    tokio::join!(fed, workers);
}

/// Applies every watch event to the index, and queues the names that need a look.
async fn feed(ctx: &Context, feeds: Feeds, queue: &WorkQueue) {
    enum Fed {
        Node(Result<watcher::Event<NodeView>, watcher::Error>),
        Binding(Result<watcher::Event<FlavorBinding>, watcher::Error>),
        Flavor(Result<Flavor, watcher::Error>),
    }
    let routes = FlavorRoutes::default();
    let counts_changed = feeds.counts_changed;
    let mut events = futures::stream::select_all([
        feeds.nodes.map(Fed::Node).boxed(),
        feeds.bindings.map(Fed::Binding).boxed(),
        feeds.flavors.map(Fed::Flavor).boxed(),
    ]);
    let fleet = &ctx.fleet;
    while let Some(event) = events.next().await {
        match event {
            Fed::Node(Ok(e)) => match e {
                watcher::Event::Init => fleet.relisting(fleet::Side::Nodes),
                watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
                    if fleet.node(&n.name_any(), Some(n.fingerprint()), n.flavor_labeled()) {
                        queue.add(&n.name_any());
                    }
                }
                watcher::Event::Delete(n) => {
                    if fleet.node(&n.name_any(), None, false) {
                        queue.add(&n.name_any());
                    }
                }
                watcher::Event::InitDone => relisted(fleet, fleet::Side::Nodes, queue),
            },
            Fed::Binding(Ok(e)) => {
                match e {
                    watcher::Event::Init => fleet.relisting(fleet::Side::Bindings),
                    watcher::Event::InitApply(b) | watcher::Event::Apply(b) => {
                        let version = fleet::version_fingerprint(
                            b.metadata.resource_version.as_deref().unwrap_or_default(),
                        );
                        if fleet.binding(&b.name_any(), Some((&b.spec.flavor, version))) {
                            queue.add(&b.name_any());
                        }
                    }
                    watcher::Event::Delete(b) => {
                        fleet.binding(&b.name_any(), None);
                        queue.add(&b.name_any());
                    }
                    watcher::Event::InitDone => relisted(fleet, fleet::Side::Bindings, queue),
                }
                counts_changed.notify_one();
            }
            Fed::Flavor(Ok(flavor)) => {
                for name in routes.bindings_to_redo(ctx, &flavor) {
                    queue.add(&name);
                }
            }
            Fed::Node(Err(e)) | Fed::Binding(Err(e)) | Fed::Flavor(Err(e)) => {
                tracing::debug!(error = %e, "node loop watch");
            }
        }
    }
}

/// A watch of `side` listed everything: what went while it was down is looked at, and the
/// side counts as synced.
fn relisted(fleet: &fleet::Fleet, side: fleet::Side, queue: &WorkQueue) {
    for name in fleet.relisted(side) {
        queue.add(&name);
    }
    fleet.synced(side);
}

/// One worker: takes names from the queue until it is closed.
async fn work(ctx: &Context, queue: &WorkQueue) {
    while let Some((name, waited)) = queue.next().await {
        ctx.metrics.stage("node", "queue", waited.as_secs_f64());
        // Boxed: a worker holds one reconcile at a time; its size does not grow the queue.
        let result = Box::pin(reconcile(&name, ctx)).await;
        if let Err(err) = result
            && let Some(delay) = error_policy(&err, ctx)
        {
            queue.add_after(&name, delay);
        }
        queue.done(&name);
    }
}

/// Routes Flavor events to the names bound to the Flavor.
#[derive(Default)]
struct FlavorRoutes {
    /// Per Flavor name, the version (see `flavor_version`) last routed.
    seen: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl FlavorRoutes {
    /// The names to reconcile after an event of `flavor`. Only a new spec (generation),
    /// a new Flavor under the name (uid) or a deleted one changes what its Nodes must
    /// carry; the bound-node count this controller writes into the status must not re-run
    /// every binding of the Flavor.
    fn bindings_to_redo(&self, ctx: &Context, flavor: &Flavor) -> Vec<String> {
        let name = flavor.name_any();
        let now = ctx
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
        ctx.fleet.bound_to(&name)
    }
}

/// When to look at a name again after a failed reconcile; `None` for never (until it
/// changes).
fn error_policy(err: &Error, ctx: &Context) -> Option<Duration> {
    if err.is_conflict() {
        // The Node changed between our read and our patch (kubelet heartbeat, an admin,
        // kube-controller-manager's edits of a new Node): read it again and recompute.
        ctx.metrics.conflict("node", err.metric_label());
        return Some(Duration::from_millis(50));
    }
    ctx.metrics.error("node", err.metric_label());
    if matches!(err, Error::Halted(_)) {
        return None;
    }
    tracing::warn!(error = %err, "node reconcile failed, retrying");
    Some(Duration::from_secs(1))
}

fn forget(ctx: &Context, name: &str) {
    ctx.fleet.forget(name);
    ctx.metrics.flavored_nodes.set(ctx.fleet.flavored());
}

/// Where the CSR that created the binding stands.
async fn binding_csr(ctx: &Context, binding: &FlavorBinding) -> Result<BindingCsr, Error> {
    let csr = facts::read_csr(ctx, &binding.spec.csr_name).await?;
    Ok(match csr {
        None => BindingCsr::Gone,
        Some(csr) if approved(&csr) => BindingCsr::Approved,
        Some(_) => BindingCsr::NotApproved,
    })
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    kubeflavor_cluster::csrs::has_condition(csr, APPROVED_CONDITION.type_)
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

/// Looks at one name: skipped when the index says a reconcile found this same Node,
/// binding and Flavor needing nothing; otherwise the binding and the Node are read and
/// brought to what the Flavor says.
pub async fn reconcile(name: &str, ctx: &Context) -> Result<(), Error> {
    let known = ctx.fleet.get(name);
    let Some((flavor_name, binding_version)) = known.binding else {
        // No binding (any more): not kubeflavor's Node, unless it carries the flavor label
        // or the applied record kubeflavor wrote (it judged the Node: it stays released).
        forget(ctx, name);
        if known.node.is_some() && known.flavor_labeled && ctx.may_write(Step::NodePatched).is_ok()
        {
            return release(name, ctx).await;
        }
        return Ok(());
    };
    let Some(node) = known.node else {
        // Not registered yet, or deleted: its re-creation triggers us again (P2, trusted labels).
        forget(ctx, name);
        return Ok(());
    };
    let flavor = ctx.flavors.get(&ObjectRef::new(&flavor_name));
    let seen = fleet::combined(node, binding_version, &flavor_version(flavor.as_deref()));
    if known.done.contains(&seen) {
        return Ok(());
    }
    if ctx.may_write(Step::NodePatched).is_err() {
        // The term ended while this name waited: the next leader flavors it.
        return Ok(());
    }
    flavor_node(name.to_string(), &flavor_name, flavor, ctx).await
}

/// Releases a Node that carries kubeflavor's flavor label or applied record while no
/// FlavorBinding names it (its binding was deleted, also while no controller ran): it
/// loses what the record says kubeflavor gave it and gets the unverified taint back
/// (core's `released_node_state`); a released Node whose unverified taint an admin
/// removes gets it back. The index may lag, so the binding and the Node are read first; a
/// binding that exists wins.
async fn release(name: &str, ctx: &Context) -> Result<(), Error> {
    // Right after a start, Nodes can be listed before their bindings are.
    ctx.fleet.wait_synced().await;
    if ctx.fleet.get(name).binding.is_some() {
        return Ok(());
    }
    let (binding, node) = tokio::try_join!(
        bindings::get_metadata(&ctx.client, name),
        nodes::get(&ctx.client, name),
    )?;
    let (None, Some(node)) = (binding, node) else {
        return Ok(());
    };
    let flavor = node
        .labels()
        .get(FLAVOR_LABEL)
        .and_then(|f| ctx.flavors.get(&ObjectRef::new(f)));
    let Some(patch) = plan::plan_release(&node, flavor.as_deref()) else {
        return Ok(());
    };
    let released = async {
        Api::<Node>::all(ctx.client.clone())
            .patch(name, &super::patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::PatchNode {
                node: name.to_string(),
                source,
            })?;
        ctx.metrics.node_patches.inc();
        Ok(())
    };
    ctx.write(name, Step::NodePatched, released).await?;
    let note = match node.labels().get(FLAVOR_LABEL) {
        Some(flavor) => format!(
            "released Node {name}: no FlavorBinding names it, so it lost the flavor {flavor:?} kubeflavor gave it (what its {APPLIED_ANNOTATION} record names) and is tainted {UNVERIFIED_TAINT}:NoSchedule again"
        ),
        None => format!(
            "released Node {name}: no FlavorBinding names it and it had lost {UNVERIFIED_TAINT}:NoSchedule (or a label or taint its {APPLIED_ANNOTATION} record names came back); tainted unverified again"
        ),
    };
    tracing::warn!(node = %name, "{note}");
    let regarding = Regarding {
        api_version: "v1",
        kind: "Node",
        name,
        uid: node.metadata.uid.as_deref(),
    };
    ctx.record(regarding, ("Warning", "Release", "NodeReleased"), &note)
        .await;
    Ok(())
}

/// Reads the binding and the Node, and brings the Node and the binding's status to what
/// the Flavor says. `flavor` is the cached Flavor named `cached_flavor`.
async fn flavor_node(
    name: String,
    cached_flavor: &str,
    flavor: Option<Arc<Flavor>>,
    ctx: &Context,
) -> Result<(), Error> {
    let _timer = Metrics::measure(&ctx.metrics.flavoring_duration);
    let reading = std::time::Instant::now();
    let read = read_binding_and_node(ctx, &name).await;
    ctx.metrics
        .stage("node", "read", reading.elapsed().as_secs_f64());
    let Some((binding, node)) = read? else {
        // Deleted meanwhile: the watch event that follows ends the story.
        forget(ctx, &name);
        return Ok(());
    };
    if !is_the_holders(ctx, &binding).await? {
        return Ok(());
    }
    let flavor = if binding.spec.flavor == cached_flavor {
        flavor
    } else {
        ctx.flavors.get(&ObjectRef::new(&binding.spec.flavor))
    };
    let plan = plan::plan_node(&binding, flavor.as_deref(), &node);
    let node_after = patch_node(ctx, &binding, &node, plan.patch.as_ref()).await?;
    // Before the status says "flavored": a crash in between leaves the binding unflavored,
    // so the next run looks at the token again.
    if plan.flavored && !binding.holder_facts().flavored_before {
        retire_used_up_token(ctx, &binding).await?;
    }
    let binding_rv = write_status(ctx, &binding, &plan.status).await?;
    let read_rv = binding.resource_version().unwrap_or_default();
    let flavor = flavor_version(flavor.as_deref());
    let done = |binding_rv: &str| {
        fleet::combined(node_after, fleet::version_fingerprint(binding_rv), &flavor)
    };
    remember(
        ctx,
        &name,
        plan.flavored,
        [
            done(&binding_rv),
            // The binding watch may still bring the version read above while the status
            // write travels back: that version, with this status written, is also done.
            done(&read_rv),
        ],
    );
    Ok(())
}

/// Deletes the binding's token once it is used up (core's `token_is_used_up`: every use
/// bound, every bound name with a Node), looked at when a binding flavors its Node the
/// first time. The join line then authenticates nobody: a copy found later cannot even
/// file a CSR. A token some of whose names have not joined yet stays (the last of them to
/// be flavored retires it); one left behind still expires, and the binding's key check
/// keeps its nodes from being re-keyed either way.
async fn retire_used_up_token(ctx: &Context, binding: &FlavorBinding) -> Result<(), Error> {
    let Some(uid) = binding.spec.token_uid.clone() else {
        return Ok(());
    };
    let name = token_secrets::name_of(&binding.spec.token_id);
    let secret = token_secrets::get(&ctx.client, &binding.spec.token_id)
        .await
        .map_err(|source| Error::Read {
            what: format!("Secret {}/{name}", super::TOKEN_NAMESPACE),
            source,
        })?;
    let Some(secret) = secret else {
        return Ok(());
    };
    let this_token = secret.metadata.uid.as_deref() == Some(uid.as_str());
    let used_up = token_secrets::kubeflavor_meta(&secret).is_some_and(|meta| {
        token_is_used_up(&meta, |n| {
            n.as_str() == binding.spec.node || ctx.fleet.get(n.as_str()).node.is_some()
        })
    });
    if !this_token || !used_up {
        return Ok(());
    }
    let rv = secret.metadata.resource_version.clone();
    let retired = async {
        token_secrets::delete_instance(&ctx.client, &name, Some(uid), rv)
            .await
            .map_err(|source| Error::RetireToken {
                token: name.clone(),
                source,
            })
    };
    match ctx.write(&name, Step::TokenRetired, retired).await {
        Ok(()) => {
            tracing::info!(token = %binding.spec.token_id, node = %binding.spec.node, "token used up: every use is bound and every node joined; deleted");
            Ok(())
        }
        // Gone or changed meanwhile (a reservation, a denial count): the next look decides.
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}

/// The binding and the Node of `name`, read together; `None` when either is gone. The
/// caches keep neither the binding's status nor the Node's labels and taints, and a fresh
/// binding is the only safe base for the status write (a cache may lag the status written
/// a moment ago).
async fn read_binding_and_node(
    ctx: &Context,
    name: &str,
) -> Result<Option<(FlavorBinding, Node)>, Error> {
    let (binding, node) = bindings::with_node(&ctx.client, name).await?;
    Ok(binding.zip(node))
}

/// P3 (binding): whether the Node of the binding's name is the token holder's to act on
/// (core's `node_is_the_holders`). The binding's CSR is read only when core needs it (a
/// binding that never flavored its Node).
async fn is_the_holders(ctx: &Context, binding: &FlavorBinding) -> Result<bool, Error> {
    let facts = binding.holder_facts();
    if let Some(answer) = node_is_the_holders(facts, None) {
        return Ok(answer);
    }
    let reading = std::time::Instant::now();
    let csr = binding_csr(ctx, binding).await;
    ctx.metrics
        .stage("node", "read", reading.elapsed().as_secs_f64());
    let csr = csr?;
    if node_is_the_holders(facts, Some(csr)) == Some(true) {
        return Ok(true);
    }
    // Not (yet) the token holder's Node: leave it alone. The holder's own registration
    // comes after the approval and triggers this loop again.
    tracing::debug!(node = %binding.spec.node, csr = ?csr, "the Node predates its binding's approval; not flavoring it");
    Ok(false)
}

/// Applies the planned patch, if any (it carries the Node's resourceVersion), and returns
/// the Node's fingerprint after it.
async fn patch_node(
    ctx: &Context,
    binding: &FlavorBinding,
    node: &Node,
    patch: Option<&serde_json::Value>,
) -> Result<Fingerprint, Error> {
    let Some(patch) = patch else {
        return Ok(node_fingerprint(node));
    };
    let name = node.name_any();
    let patched = async {
        let patched = Api::<Node>::all(ctx.client.clone())
            .patch(&name, &super::patch_params(), &Patch::Merge(patch))
            .await
            .map_err(|source| Error::PatchNode {
                node: name.clone(),
                source,
            })?;
        ctx.metrics.node_patches.inc();
        tracing::info!(node = %name, flavor = %binding.spec.flavor, "node flavored");
        Ok(node_fingerprint(&patched))
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
        bindings::write_status(&ctx.client, &name, &read_rv, status)
            .await
            .map_err(|source| Error::BindingStatus {
                node: name.clone(),
                source,
            })
    };
    ctx.write(&name, Step::StatusWritten, written).await
}

/// Records what the reconcile left: whether the Node carries its flavor (the
/// `flavored_nodes` gauge), and the states that need nothing more.
fn remember(ctx: &Context, name: &str, flavored: bool, done: [Fingerprint; 2]) {
    ctx.fleet.remember(name, flavored, done);
    ctx.metrics.flavored_nodes.set(ctx.fleet.flavored());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(
        labels: serde_json::Value,
        taints: serde_json::Value,
        status: &str,
    ) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "resourceVersion": status,
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
            "spec": {"taints": taints, "podCIDR": "10.244.0.0/24"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": status}],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
            },
        })
    }

    /// The fingerprint of a watched Node (NodeView) and of a Node read or patched whole.
    fn both(json: &serde_json::Value) -> (Fingerprint, Fingerprint) {
        let view: NodeView = serde_json::from_value(json.clone()).expect("a NodeView");
        let whole: Node = serde_json::from_value(json.clone()).expect("a Node");
        (view.fingerprint(), node_fingerprint(&whole))
    }

    #[test]
    fn a_node_fingerprint_moves_with_labels_and_taints_only() {
        let labels =
            serde_json::json!({"kubeflavor.node-restriction.kubernetes.io/flavor": "sweet"});
        let taints =
            serde_json::json!([{"key": "kubeflavor.io/unverified", "effect": "NoSchedule"}]);
        let base = both(&node(
            labels.clone(),
            taints.clone(),
            "2026-01-01T00:00:00Z",
        ));
        assert_eq!(
            base.0, base.1,
            "the watch and a GET see the same Node alike"
        );
        // A kubelet's status update: new resourceVersion, heartbeat, same labels and taints.
        let heartbeat = both(&node(
            labels.clone(),
            taints.clone(),
            "2026-01-01T00:05:00Z",
        ));
        assert_eq!(heartbeat, base, "a status update needs no reconcile");
        let relabeled = both(&node(
            serde_json::json!({}),
            taints.clone(),
            "2026-01-01T00:00:00Z",
        ));
        assert_ne!(relabeled.0, base.0, "a label removed");
        assert_eq!(relabeled.0, relabeled.1);
        let untainted = both(&node(labels, serde_json::json!([]), "2026-01-01T00:00:00Z"));
        assert_ne!(untainted.0, base.0, "a taint removed");
        assert_eq!(untainted.0, untainted.1);
    }
}
