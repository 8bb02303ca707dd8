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
//!
//! `watch` feeds the index and the queue, `reconcile` looks at one name (`view` is the
//! Node as watched, `plan` turns the facts into core's answer and back into a patch),
//! `counts` keeps each Flavor's bound-node count.

mod counts;
mod plan;
mod reconcile;
mod view;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use super::queue::WorkQueue;
use super::{Context, Error, Stop};

pub use self::counts::keep_bound_counts;
pub use self::reconcile::reconcile;
pub use self::view::{NodeView, NodeViewSpec};
pub use self::watch::{
    Feeds, binding_events, flavor_store, node_events, report_events, site_store,
};

/// Runs the node loop until `until` resolves: the watches feed the index and the queue,
/// `Options::concurrency` workers take names from the queue.
pub async fn run(ctx: Arc<Context>, feeds: Feeds, until: Stop) {
    let queue = WorkQueue::new();
    let feed = watch::feed(&ctx, feeds, &queue);
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

/// When to look at a name again after a failed reconcile; `None` for never (until it
/// changes).
fn error_policy(err: &Error, ctx: &Context) -> Option<Duration> {
    if err.is_conflict() {
        // The Node changed between our read and our patch (kubelet heartbeat, an admin,
        // kube-controller-manager's edits of a new Node): read it again and recompute.
        ctx.metrics.conflict("node", err.metric_label());
        return Some(Duration::from_millis(50));
    }
    if matches!(err, Error::Halted(_)) {
        // Not a failure: this controller's term ended (or a test's step hook stopped it)
        // and it writes no more; the next leader looks at the name.
        return None;
    }
    ctx.metrics.error("node", err.metric_label());
    tracing::warn!(error = %err, "node reconcile failed, retrying");
    Some(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

    use super::*;
    use crate::controller::Step;

    /// The error series counted above zero (every stage's series is there from the start).
    fn errors(ctx: &Context) -> Vec<String> {
        ctx.metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("kubeflavor_reconcile_errors_total{") && !l.ends_with(" 0"))
            .map(str::to_string)
            .collect()
    }

    /// A controller whose term ended refuses its in-flight writes with `Halted`: both
    /// loops stop looking at the name and count no error, so a leader handing over (a
    /// rolling update) does not set off the reconcile-errors alert; a real failure
    /// still counts.
    #[tokio::test]
    async fn a_term_that_ended_is_not_a_reconcile_error() {
        let ctx = Arc::new(Context::offline());
        assert_eq!(error_policy(&Error::Halted(Step::NodePatched), &ctx), None);
        let csr = Arc::new(CertificateSigningRequest::default());
        let action = crate::controller::csr::error_policy(
            csr.clone(),
            &Error::Halted(Step::Approved),
            ctx.clone(),
        );
        assert_eq!(action, kube::runtime::controller::Action::await_change());
        assert_eq!(errors(&ctx), Vec::<String>::new());

        let failed = Error::Changed {
            csr: "csr-1".into(),
            node: "n1".into(),
        };
        let _ = crate::controller::csr::error_policy(csr, &failed, ctx.clone());
        assert_eq!(
            errors(&ctx).len(),
            0,
            "a changed fact is a conflict, not an error"
        );
        let _ = error_policy(
            &Error::Read {
                what: "Node n1".into(),
                source: kube::Error::LinesCodecMaxLineLengthExceeded,
            },
            &ctx,
        );
        assert_eq!(
            errors(&ctx).len(),
            1,
            "a failed read counts: {:?}",
            errors(&ctx)
        );
    }
}
