//! Each Flavor's `status.boundNodes`, kept at the number of FlavorBindings naming it.

use std::sync::Arc;
use std::time::Duration;

use kubeflavor_cluster::flavors;
use tokio::sync::Notify;

use super::plan;
use crate::controller::{Context, Error, Step, Stop, patch_params};

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
        match flavors::write_bound_nodes(&ctx.client, &name, &patch_params(), count).await {
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
