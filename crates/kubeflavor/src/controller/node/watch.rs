//! The node loop's feeds: the watches of Nodes, FlavorBindings and Flavors of one term,
//! applied to the fleet index as they come, with the names that need a look queued.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflavor_cluster::crd::network::{NodeReport, Site};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding};
use tokio::sync::Notify;

use super::reconcile::flavor_version;
use super::view::NodeView;
use crate::controller::queue::WorkQueue;
use crate::controller::{Context, Options, cache, fleet};

type Events<K> = BoxStream<'static, Result<K, watcher::Error>>;
type WatchEvents<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

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

/// A reflector of the Sites (the ones this controller serves) and its watch events, each
/// passed on once the store holds it (an initial list only at its end: `InitDone`).
pub fn site_store(client: Client, opts: &Options) -> (Store<Site>, WatchEvents<Site>) {
    let (reader, writer) = reflector::store();
    let opts = opts.clone();
    let stream = watcher(Api::<Site>::all(client), watcher::Config::default())
        .default_backoff()
        .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
        .reflect(writer)
        .boxed();
    (reader, stream)
}

/// The watch of all NodeReports (of the nodes this controller serves).
pub fn report_events(client: Client, opts: &Options) -> WatchEvents<NodeReport> {
    let opts = opts.clone();
    watcher(Api::<NodeReport>::all(client), watcher::Config::default())
        .default_backoff()
        .filter_map(move |e| std::future::ready(cache::served(e, &opts)))
        .boxed()
}

/// The watches of one term, as the node loop consumes them.
pub struct Feeds {
    pub nodes: WatchEvents<NodeView>,
    pub bindings: WatchEvents<FlavorBinding>,
    pub flavors: Events<Flavor>,
    pub sites: (Store<Site>, WatchEvents<Site>),
    pub reports: WatchEvents<NodeReport>,
    /// Notified when a binding appears or goes (the bound-node counts).
    pub counts_changed: Arc<Notify>,
}

/// Applies every watch event to the index, and queues the names that need a look.
pub(super) async fn feed(ctx: &Context, feeds: Feeds, queue: &WorkQueue) {
    enum Fed {
        Node(Result<watcher::Event<NodeView>, watcher::Error>),
        Binding(Result<watcher::Event<FlavorBinding>, watcher::Error>),
        Flavor(Result<Flavor, watcher::Error>),
        Site(Result<watcher::Event<Site>, watcher::Error>),
        Report(Result<watcher::Event<NodeReport>, watcher::Error>),
    }
    let routes = FlavorRoutes::default();
    let counts_changed = feeds.counts_changed;
    let (site_store, sites) = feeds.sites;
    let mut events = futures::stream::select_all([
        feeds.nodes.map(Fed::Node).boxed(),
        feeds.bindings.map(Fed::Binding).boxed(),
        feeds.flavors.map(Fed::Flavor).boxed(),
        sites.map(Fed::Site).boxed(),
        feeds.reports.map(Fed::Report).boxed(),
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
            Fed::Site(Ok(
                watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_),
            )) => {
                for name in ctx.network.sites_changed(&site_store) {
                    queue.add(&name);
                }
            }
            Fed::Site(Ok(_)) => {}
            Fed::Report(Ok(e)) => match e {
                watcher::Event::InitApply(r) | watcher::Event::Apply(r) => {
                    if ctx.network.report(&r) {
                        queue.add(&r.name_any());
                    }
                }
                watcher::Event::Delete(r) => {
                    ctx.network.report_gone(&r.name_any());
                    queue.add(&r.name_any());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            },
            Fed::Node(Err(e))
            | Fed::Binding(Err(e))
            | Fed::Flavor(Err(e))
            | Fed::Site(Err(e))
            | Fed::Report(Err(e)) => {
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
