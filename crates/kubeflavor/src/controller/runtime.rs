//! What the controller's parts share (`Runtime`: the client, options, metrics and health),
//! and the helpers that stop a loop when its term or the process ends. The process that
//! runs them is `process`.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::Client;
use kubeflavor_cluster::ops::http::Health;
use tokio::sync::watch;

use super::metrics::Metrics;
use super::{Options, StepHook};
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
