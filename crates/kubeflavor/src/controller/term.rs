//! Leadership: competing for the Lease, and one term of the loops for each term won.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;

use super::leader::{LeaderElector, LeaseConfig};
use super::runtime::{Runtime, Stop, stop_when};
use super::{Context, census, csr, metrics, node, revoked};

/// Competes for the Lease until `stopping` resolves, and runs the loops for each
/// leadership term won. Not ready from the moment the last term ended.
pub async fn lead(rt: &Runtime, stopping: Stop, shut_rx: watch::Receiver<bool>) {
    let (lead_tx, lead_rx) = watch::channel(false);
    let mut cfg = LeaseConfig::new(&rt.opts.namespace, &rt.opts.lease_name, &rt.opts.identity);
    cfg.lease_duration = rt.opts.lease_duration;
    cfg.renew_deadline = rt.opts.renew_deadline;
    cfg.retry_period = rt.opts.retry_period;
    let election = LeaderElector::new(rt.client.clone(), cfg).run(lead_tx, stopping.clone());
    let terms = async {
        loop {
            let mut rx = lead_rx.clone();
            tokio::select! {
                _ = stopping.clone() => break,
                r = rx.wait_for(|v| *v) => if r.is_err() { break },
            }
            term(rt, stop_when(lead_rx.clone(), false), stopping.clone()).await;
            if *shut_rx.borrow() {
                break;
            }
        }
        rt.health.set_stopping();
    };
    tokio::join!(election, terms);
}

/// One leadership term, until leadership is `lost` or the controller is `stopping`.
async fn term(rt: &Runtime, lost: Stop, stopping: Stop) {
    rt.health.set_leading(true);
    rt.metrics.leader.set(1);
    let until = futures::future::select(lost, stopping)
        .map(|_| ())
        .boxed()
        .shared();
    run_loops(rt, until).await;
    tracing::debug!(identity = %rt.opts.identity, "leadership term ended");
    rt.metrics.leader.set(0);
    rt.health.set_synced(false);
    rt.health.set_leading(false);
}

/// The term's context and the node loop's feeds, with the leader's census registered.
fn term_context(rt: &Runtime) -> (Arc<Context>, node::Feeds, Arc<tokio::sync::Notify>) {
    let counts_changed = Arc::new(tokio::sync::Notify::new());
    let scope = &rt.opts;
    let (flavors, flavor_events) =
        node::flavor_store(rt.client.clone(), scope, counts_changed.clone());
    let ctx = Arc::new(Context::new(rt, flavors));
    let feeds = node::Feeds {
        nodes: node::node_events(rt.client.clone(), scope),
        bindings: census::note_revocations(
            ctx.clone(),
            node::binding_events(rt.client.clone(), scope),
        ),
        flavors: flavor_events,
        sites: node::site_store(rt.client.clone(), scope),
        reports: node::report_events(rt.client.clone(), scope),
        counts_changed: counts_changed.clone(),
    };
    let fleet_census: Arc<dyn metrics::FleetCensus> = ctx.clone();
    rt.metrics.set_census(Some(Arc::downgrade(&fleet_census)));
    (ctx, feeds, counts_changed)
}

/// Marks the replica synced once the fleet index and the Flavor store have listed.
async fn mark_synced(ctx: Arc<Context>, until: Stop) {
    let ready = async {
        ctx.fleet.wait_synced().await;
        let _ = ctx.flavors.wait_until_ready().await;
        ctx.health.set_synced(true);
    };
    tokio::select! {
        _ = ready => {}
        _ = until => {}
    }
}

/// One leadership term: both loops (and the bound-node counts) until `until` resolves.
pub async fn run_loops(rt: &Runtime, until: Stop) {
    let (ctx, feeds, counts_changed) = term_context(rt);
    let node_loop = node::run(ctx.clone(), feeds, until.clone());
    let counts = node::keep_bound_counts(ctx.clone(), counts_changed, until.clone());
    let synced = mark_synced(ctx.clone(), until.clone());
    let csr_loop = csr::run::<csr::client::ClientCsrs>(ctx.clone(), until.clone());
    let serving_until = until.clone();
    let csr_loop = async {
        let serving_loop = async {
            if rt.opts.approve_serving {
                csr::run::<csr::serving::ServingCsrs>(ctx.clone(), serving_until).await;
                tracing::debug!("serving csr loop ended");
            }
        };
        tokio::join!(csr_loop, serving_loop);
        tracing::debug!("csr loop ended");
    };
    let node_loop = async {
        node_loop.await;
        tracing::debug!("node loop ended");
    };
    let revoked_until = until.clone();
    let revoked_loop = async {
        Box::pin(revoked::run(ctx.clone(), revoked_until)).await;
        tracing::debug!("revoked loop ended");
    };
    let term_end = halt_at_term_end(&ctx, until.clone());
    // Work of an ended term that still waits (a request into a partition may hang for
    // minutes) is dropped after a grace period, so a next term can start.
    let work = async {
        tokio::join!(csr_loop, node_loop, revoked_loop, counts, synced);
    };
    let drained = async {
        until.await;
        tokio::time::sleep(TERM_GRACE).await;
    };
    let bounded = async {
        tokio::select! {
            _ = work => {}
            _ = drained => tracing::warn!("work of the ended term did not stop in time; dropping it"),
        }
    };
    tokio::join!(bounded, term_end);
    rt.metrics.set_census(None);
}

/// How long the work of an ended term may take to stop before it is dropped.
const TERM_GRACE: Duration = Duration::from_secs(15);

/// Once the term ends (leadership lost, shutdown), reconciles still running or waiting for
/// a turn write nothing more: only the leader writes, and the next one finishes whatever
/// was half done (P6, nothing lost). The replica says at once that it no longer leads.
async fn halt_at_term_end(ctx: &Context, until: Stop) {
    until.await;
    ctx.halted.store(true, std::sync::atomic::Ordering::SeqCst);
    ctx.metrics.leader.set(0);
    ctx.health.set_leading(false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Error, Step};

    #[tokio::test]
    async fn a_term_that_ended_writes_nothing_more() {
        let ctx = Context::offline();
        let (tx, rx) = watch::channel(false);
        let term = halt_at_term_end(&ctx, stop_when(rx, true));
        let sent = std::sync::atomic::AtomicUsize::new(0);
        let send = || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, Error>(())
        };
        let check = async {
            assert!(ctx.may_write(Step::Reserved).is_ok(), "the term is on");
            ctx.write("csr-1", Step::Reserved, send())
                .await
                .expect("a write inside the term");
            tx.send(true).expect("term receiver");
        };
        tokio::join!(term, check);
        assert!(matches!(
            ctx.may_write(Step::Bound),
            Err(Error::Halted(Step::Bound))
        ));
        let refused = ctx.write("csr-1", Step::Bound, send()).await;
        assert!(matches!(refused, Err(Error::Halted(Step::Bound))));
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the write after the term was never sent"
        );
        assert_eq!(
            ctx.metrics.writes.get(),
            1,
            "only the write inside the term counts"
        );
        let last = ctx.metrics.last_write.get();
        assert!(last > 0.0, "the write inside the term is timestamped");
    }
}
