//! The serving-CSR loop (`--approve-serving`): kubelet serving CSRs
//! (`kubernetes.io/kubelet-serving`) of nodes kubeflavor bound, decided by core's
//! [`decide_serving`]. The same machinery as the client-CSR loop: a watch filtered by
//! signer on the server, a cache of pending CSRs only, facts read fresh from the API server
//! (the CSR, the requester's FlavorBinding and its Flavor), the leadership write bracket,
//! one generic condition on the CSR (P1 (hidden flavor)) and the exact cause of a denial
//! in the admin trail only (Event and log).
//!
//! An approval rests on the binding as read; right before the Approved condition is
//! written the binding's resourceVersion is read once more, so a revocation that landed in
//! between sends the CSR back to be decided again (and denied).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};

use kubeflavor_cluster::crd::{Flavor, FlavorBinding, rules_from_flavor};
use kubeflavor_cluster::ops::trail::Regarding;
use kubeflavor_cluster::{bindings, flavors, nodes};
use kubeflavor_core::approval::serving::{
    ServingDecision, ServingDenyCause, ServingFacts, decide_serving, requesting_node,
};
use kubeflavor_core::csr::serving::{KUBELET_SERVING_SIGNER, validate_kubelet_serving_csr};
use kubeflavor_core::names::NodeName;
use kubeflavor_core::node::cutoff;

use super::facts::{self, CsrView};
use super::{error_policy, read_pending, write_condition};
use crate::controller::metrics::Metrics;
use crate::controller::{Context, Error, Step, Stop, cache};

/// Metric label of this loop (errors, queue and read stages).
const LOOP: &str = "serving";

/// Runs the serving-CSR loop until `until` resolves.
pub async fn run(ctx: Arc<Context>, until: Stop) {
    let csrs: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    // Server-side filter: only kubelet serving CSRs reach this loop.
    let wc =
        watcher::Config::default().fields(&format!("spec.signerName={KUBELET_SERVING_SIGNER}"));
    let (store, writer) = reflector::store();
    let events = watcher(csrs, wc)
        .default_backoff()
        .modify(cache::slim_csr)
        .filter_map(|event| std::future::ready(event.map(cache::pending_only).transpose()))
        .reflect(writer)
        .applied_objects();
    let fut = Controller::for_stream(events, store.clone())
        .with_config(Config::default().concurrency(0))
        .graceful_shutdown_on(until.clone())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "serving csr loop");
            }
        });
    crate::controller::with_grace(fut, until, store).await;
}

async fn reconcile(
    cached: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if facts::is_decided(&cached) {
        return Ok(Action::await_change());
    }
    let view = CsrView::from_object(&mut cached.as_ref().clone());
    // Routed by the requester (the one name the API server vouches for); a requester that
    // is no node is no scoped controller's, and core ignores it anyway.
    let requester = requesting_node(&view.username);
    let served = match &requester {
        Some(node) => ctx.opts.serves(node.as_str()),
        None => ctx.opts.scope.is_none(),
    };
    if !served {
        return Ok(Action::await_change());
    }
    let _turn = ctx.csr_turns.take(&ctx.metrics, LOOP).await;
    if ctx.may_write(Step::Approved).is_err() {
        return Ok(Action::await_change());
    }
    Box::pin(decide(&cached, view, requester, &ctx)).await
}

/// What was read for one serving CSR besides the CSR itself.
struct Read {
    binding: Option<FlavorBinding>,
    flavor: Option<Flavor>,
    /// Without a binding: the requester's Node carries `kubeflavor.io/revoked`.
    node_marked_revoked: bool,
}

async fn decide(
    cached: &CertificateSigningRequest,
    view: CsrView,
    requester: Option<NodeName>,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = view.name.clone();
    let _timer = Metrics::measure(&ctx.metrics.decision_duration);
    let reading = std::time::Instant::now();
    let (csr, read) = tokio::join!(
        read_pending(ctx, &name),
        read_binding_and_flavor(ctx, requester.as_ref())
    );
    ctx.metrics
        .stage(LOOP, "read", reading.elapsed().as_secs_f64());
    let Some(csr) = csr? else {
        return Ok(Action::await_change());
    };
    if csr.metadata.uid != cached.metadata.uid {
        return Err(Error::Changed {
            csr: name,
            node: String::new(),
        });
    }
    let read = read?;
    let facts = serving_facts(&view, &read, ctx);
    let decision = decide_serving(&facts);
    let step = match &decision {
        ServingDecision::Ignore(why) => {
            tracing::debug!(csr = %name, why = why.as_str(), "serving CSR not kubeflavor's to decide");
            ctx.metrics.serving_decision("ignored", why.as_str());
            return Ok(Action::await_change());
        }
        ServingDecision::Approve { node } => {
            last_look(ctx, &name, node, read.binding.as_ref()).await?;
            Step::Approved
        }
        ServingDecision::Deny(cause) => {
            ctx.may_write(Step::Denied)?;
            record_denial(ctx, &csr, &view, &facts, *cause).await;
            Step::Denied
        }
    };
    let Some(condition) = decision.condition() else {
        return Ok(Action::await_change());
    };
    write_condition(ctx, &csr, condition, step, || {
        record_decision(ctx, &name, &decision)
    })
    .await?;
    Ok(Action::await_change())
}

/// What core's `decide_serving` looks at, from the CSR and what was read for it.
fn serving_facts(view: &CsrView, read: &Read, ctx: &Context) -> ServingFacts {
    ServingFacts {
        signer_name: view.signer_name.clone(),
        requester_username: view.username.clone(),
        already_decided: view.decided,
        csr: validate_kubelet_serving_csr(&view.signer_name, &view.request, &view.usages),
        binding: read.binding.as_ref().map(FlavorBinding::serving_facts),
        node_marked_revoked: read.node_marked_revoked,
        flavor_addresses: read
            .flavor
            .as_ref()
            .and_then(|f| rules_from_flavor(f).ok())
            .map(|(_, rules)| rules.serving_addresses().to_vec()),
        options: ctx.opts.serving_policy(),
    }
}

/// The requester's FlavorBinding and the Flavor it names (GETs: an approval must not rest
/// on a cache that has not seen a revocation yet).
async fn read_binding_and_flavor(ctx: &Context, node: Option<&NodeName>) -> Result<Read, Error> {
    let Some(node) = node else {
        return Ok(Read {
            binding: None,
            flavor: None,
            node_marked_revoked: false,
        });
    };
    let binding = bindings::get(&ctx.client, node.as_str()).await?;
    let flavor = match &binding {
        Some(b) => flavors::get(&ctx.client, &b.spec.flavor).await?,
        None => None,
    };
    // With a binding, its Revoked condition speaks (the controller taints the Node from
    // it); without one, the Node's revoked taint is the revocation that stands.
    let node_marked_revoked = match &binding {
        Some(_) => false,
        None => nodes::get(&ctx.client, node.as_str())
            .await?
            .and_then(|n| n.spec?.taints)
            .is_some_and(|ts| {
                ts.iter()
                    .any(|t| cutoff::is_revocation_mark(&t.key, &t.effect))
            }),
    };
    Ok(Read {
        binding,
        flavor,
        node_marked_revoked,
    })
}

/// The binding an approval rests on, read once more right before the approval: changed
/// since (revoked, re-made, deleted) sends the CSR back to be decided again.
async fn last_look(
    ctx: &Context,
    csr: &str,
    node: &NodeName,
    binding: Option<&FlavorBinding>,
) -> Result<(), Error> {
    let now = bindings::get_metadata(&ctx.client, node.as_str()).await?;
    let was = binding.and_then(|b| b.metadata.resource_version.clone());
    if now.and_then(|b| b.metadata.resource_version) != was {
        return Err(Error::Changed {
            csr: csr.to_string(),
            node: node.to_string(),
        });
    }
    Ok(())
}

/// The denial's admin trail: a log line and an Event with the exact cause, which never
/// goes on the CSR (P1 (hidden flavor)).
async fn record_denial(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    view: &CsrView,
    facts: &ServingFacts,
    cause: ServingDenyCause,
) {
    let name = view.name.as_str();
    let asked = match &facts.csr {
        Ok(c) => format!(
            "node {}, DNS names {:?}, IP addresses {:?}",
            c.node_name,
            c.dns_names,
            c.ip_addresses
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        ),
        Err(e) => format!("request refused: {e}"),
    };
    let description = cause.description();
    let requester = view.username.as_str();
    let cause = cause.as_str();
    tracing::info!(csr = %name, requester, cause, "serving CSR denied: {description} ({asked})");
    let regarding = Regarding {
        api_version: "certificates.k8s.io/v1",
        kind: "CertificateSigningRequest",
        name,
        uid: csr.metadata.uid.as_deref(),
    };
    let note =
        format!("denied serving CSR {name} of {requester}: {cause}: {description} ({asked})");
    ctx.record(regarding, ("Warning", "Deny", "ServingCSRDenied"), &note)
        .await;
}

/// The decision just written, in the metrics and the log.
fn record_decision(ctx: &Context, csr: &str, decision: &ServingDecision) {
    match decision {
        ServingDecision::Approve { node } => {
            ctx.metrics.serving_decision("approved", "ok");
            tracing::info!(csr = %csr, node = %node, "serving CSR approved");
        }
        ServingDecision::Deny(cause) => ctx.metrics.serving_decision("denied", cause.as_str()),
        ServingDecision::Ignore(_) => {}
    }
}
