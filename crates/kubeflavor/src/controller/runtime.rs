//! The controller's process: the operations endpoint, the watch of other approvers and
//! the leader election, with the leadership terms it wins (`term`); and the helpers that
//! stop a loop when its term or the process ends.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::Client;
use kubeflavor_cluster::ops::http::{self, Health};
use tokio::sync::watch;

use super::metrics::Metrics;
use super::{Options, StepHook, approvers, term, unverified};
use crate::authz::metrics::AuthzMetrics;

/// Resolves when a loop must stop (its term ended, or the controller is stopping).
pub type Stop = Shared<BoxFuture<'static, ()>>;

/// Resolves once the value on `rx` is `want`.
pub fn stop_when(rx: watch::Receiver<bool>, want: bool) -> Stop {
    async move {
        let mut rx = rx;
        let _ = rx.wait_for(|v| *v == want).await;
    }
    .boxed()
    .shared()
}

/// Drives a kube-runtime controller future until it ends, or until `until` resolves and
/// then for at most a grace period. kube-runtime's applier waits for its store to become
/// ready before it starts, and never notices a graceful shutdown requested before that:
/// a term that ends before the first list completes would otherwise hang.
pub async fn with_grace<K: kube::Resource + Clone + Send + Sync + 'static>(
    fut: impl std::future::Future<Output = ()>,
    until: Stop,
    store: kube::runtime::reflector::Store<K>,
) where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    const GRACE: Duration = Duration::from_secs(10);
    let deadline = async {
        until.await;
        if store.wait_until_ready().now_or_never().is_some() {
            tokio::time::sleep(GRACE).await;
        }
    };
    tokio::select! {
        _ = fut => {}
        _ = deadline => tracing::warn!("a loop did not stop in time; dropping it"),
    }
}

/// Everything `run` needs besides the options: the client and, in tests, a step hook.
pub struct Runtime {
    pub client: Client,
    pub opts: Options,
    pub metrics: Metrics,
    /// The authorization webhook's families, on this runtime's /metrics whether the
    /// webhook runs in this process or not (a dashboard shows none rather than no data).
    pub authz_metrics: AuthzMetrics,
    pub health: Arc<Health>,
    pub hook: Option<StepHook>,
}

impl Runtime {
    pub fn new(client: Client, opts: Options) -> Self {
        let authz_metrics = AuthzMetrics::default();
        Runtime {
            client,
            opts,
            metrics: Metrics::with_families(|r| authz_metrics.register(r)),
            authz_metrics,
            health: Arc::new(Health::default()),
            hook: None,
        }
    }
}

/// Runs the controller until `shutdown` resolves: the operations endpoint, the leader
/// election and, while leading, the CSR and node loops.
pub async fn run(
    rt: Runtime,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (shut_tx, shut_rx) = watch::channel(false);
    let stopping = stop_when(shut_rx.clone(), true);
    let approvers = watch_approvers(&rt, stopping.clone()).await?;
    unverified::check(&rt.client, &rt.metrics).await;
    // Nothing is spawned detached: aborting the task that runs this future stops every
    // part of the controller at once, which is what a crash looks like to the cluster.
    let forward = async move {
        shutdown.await;
        let _ = shut_tx.send(true);
    };
    let listener = bind_ops(&rt.opts).await?;
    let ops = serve_ops(&rt, listener, stopping.clone());
    let work = async {
        if rt.opts.leader_elect {
            term::lead(&rt, stopping.clone(), shut_rx).await;
            return;
        }
        rt.health.set_leading(true);
        rt.metrics.leader.set(1);
        term::run_loops(&rt, stopping.clone()).await;
        rt.health.set_stopping();
    };
    tokio::join!(forward, ops, work, approvers);
    tracing::info!(identity = %rt.opts.identity, "controller stopped");
    Ok(())
}

/// Who else approves kubelet CSRs: read from RBAC at start (refusing to run where that
/// defeats kubeflavor or the options), then kept current for the controller's whole life
/// by the task returned, until `stopping`.
async fn watch_approvers(
    rt: &Runtime,
    stopping: Stop,
) -> anyhow::Result<impl std::future::Future<Output = ()> + use<>> {
    let rbac_changed = Arc::new(tokio::sync::Notify::new());
    let (rbac, mut rbac_feed) = approvers::watch_rbac(rt.client.clone(), rbac_changed.clone());
    let baseline = tokio::select! {
        checked = approvers::check_with(&rt.client, &rt.opts, &rt.metrics, &rbac) => checked?,
        _ = &mut rbac_feed => anyhow::bail!("the watches of ClusterRoles and ClusterRoleBindings ended"),
    };
    let keeper = approvers::Keeper {
        client: rt.client.clone(),
        opts: rt.opts.clone(),
        metrics: rt.metrics.clone(),
        health: rt.health.clone(),
        view: rbac,
        changed: rbac_changed,
    };
    Ok(async move {
        tokio::select! {
            _ = rbac_feed => {}
            _ = keeper.run(baseline) => {}
            _ = stopping => {}
        }
    })
}

/// Serves /metrics and the probes on `listener`, if there is one, until `stopping`.
async fn serve_ops(rt: &Runtime, listener: Option<tokio::net::TcpListener>, stopping: Stop) {
    let Some(listener) = listener else { return };
    let served = http::serve(
        listener,
        rt.health.clone(),
        Arc::new(rt.metrics.clone()),
        stopping,
    );
    if let Err(e) = served.await {
        tracing::warn!(error = %e, "operations endpoint failed");
    }
}

/// Binds the address for /metrics and the probes, if one was asked for.
async fn bind_ops(opts: &Options) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = opts.ops_addr else {
        return Ok(None);
    };
    let listener = http::bind(addr).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {addr} for /metrics and probes: {e} (choose another --http-address)"
        )
    })?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics /healthz /readyz");
    Ok(Some(listener))
}
