//! The controller's process: the operations endpoint, the watch of other approvers and
//! the leader election, with the leadership terms it wins (`term`).

use std::sync::Arc;

use kubeflavor_cluster::ops::http;
use tokio::sync::watch;

use super::runtime::{Runtime, Stop, stop_when};
use super::{Options, approvers, term, unverified};

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
