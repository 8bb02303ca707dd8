//! The fleet as /metrics shows it while this replica leads: bindings per flavor, the
//! Flavors' trust levels, revoked bindings, how long a bound Node has gone without its
//! flavor, the names listed and the revocations not finished. Read from the node loop's
//! index (`fleet`), the Flavor store and the revoked loop's progress when /metrics is read,
//! so it costs nothing between scrapes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::runtime::watcher;
use kubeflavor_cluster::crd::FlavorBinding;

use super::Context;
use super::metrics::FleetCensus;

impl FleetCensus for Context {
    fn bound_per_flavor(&self) -> Vec<(String, i64)> {
        self.fleet.bound_per_flavor()
    }

    fn revoked(&self) -> usize {
        self.fleet.revoked()
    }

    fn listed(&self) -> usize {
        self.revocations.listed()
    }

    fn unfinished_revocations(&self) -> usize {
        self.revocations.unfinished()
    }

    fn trust_levels(&self) -> Vec<(String, Option<u8>)> {
        self.flavors
            .state()
            .iter()
            .map(|f| (f.name_any(), f.spec.trust_level))
            .collect()
    }

    fn oldest_unflavored(&self) -> Option<Duration> {
        self.fleet.oldest_unflavored()
    }

    fn nodes_per_site(&self) -> Vec<(String, i64)> {
        self.network.nodes_per_site().into_iter().collect()
    }

    fn contradicting_claims(&self) -> usize {
        self.network.contradicting()
    }
}

type BindingEvents = BoxStream<'static, Result<watcher::Event<FlavorBinding>, watcher::Error>>;

/// The node loop's binding events, passed on unchanged after each binding's revocation is
/// noted in the index: a revoked binding's Node loses its flavor on purpose, and must not
/// count as a Node left unflavored.
pub fn note_revocations(ctx: Arc<Context>, events: BindingEvents) -> BindingEvents {
    events
        .inspect(move |event| match event {
            Ok(watcher::Event::Init) => ctx.fleet.revocations_relisting(),
            Ok(watcher::Event::InitApply(b) | watcher::Event::Apply(b)) => {
                ctx.fleet.revocation(&b.name_any(), b.is_revoked())
            }
            Ok(watcher::Event::Delete(b)) => ctx.fleet.forget_revocation(&b.name_any()),
            Ok(watcher::Event::InitDone) => ctx.fleet.revocations_relisted(),
            Err(_) => {}
        })
        .boxed()
}
