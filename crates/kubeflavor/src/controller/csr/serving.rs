//! The serving CSRs' entry of the CSR loop (`--approve-serving`, [`ServingCsrs`]): kubelet
//! serving CSRs (`kubernetes.io/kubelet-serving`) of nodes kubeflavor bound, decided by
//! core's [`decide_serving`], on the loop every signer shares: a watch filtered by
//! signer on the server, a cache of pending CSRs only, facts read fresh from the API server
//! (the CSR, the requester's FlavorBinding and its Flavor), the leadership write bracket,
//! one generic condition on the CSR (P1 (hidden flavor)) and the exact cause of a denial
//! in the admin trail only (Event and log).
//!
//! An approval rests on the binding as read; right before the Approved condition is
//! written the binding's resourceVersion is read once more, so a revocation that landed in
//! between sends the CSR back to be decided again (and denied).

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use kubeflavor_cluster::crd::{Flavor, FlavorBinding, rules_from_flavor};
use kubeflavor_cluster::ops::trail::Regarding;
use kubeflavor_cluster::{bindings, flavors, nodes};
use kubeflavor_core::approval::client::CsrCondition;
use kubeflavor_core::approval::serving::{
    ServingDecision, ServingDenyCause, ServingFacts, decide_serving, requesting_node,
};
use kubeflavor_core::csr::serving::{KUBELET_SERVING_SIGNER, validate_kubelet_serving_csr};
use kubeflavor_core::names::NodeName;
use kubeflavor_core::node::cutoff;

use super::facts::CsrView;
use super::{Outcome, Signer};
use crate::controller::metrics::Metrics;
use crate::controller::{Context, Error, Options, Step};

/// Kubelet serving CSRs of the nodes kubeflavor bound.
pub struct ServingCsrs;

/// What was read for one serving CSR, and core's facts from it.
pub struct ServingRead {
    view: CsrView,
    read: Read,
    facts: ServingFacts,
}

impl Signer for ServingCsrs {
    const SIGNER: &'static str = KUBELET_SERVING_SIGNER;
    const LOOP: &'static str = "serving";
    const LOG: &'static str = "serving csr loop";
    const IGNORED: &'static str = "serving CSR not kubeflavor's to decide";
    const DECISIONS: fn(&Metrics, &str, &str) = Metrics::serving_decision;

    type Subject = (CsrView, Option<NodeName>);
    type Facts = ServingRead;
    type Decision = ServingDecision;

    /// Routed before its turn, by the requester.
    fn admits(cached: &CertificateSigningRequest, opts: &Options) -> bool {
        served_requester(cached.spec.username.as_deref().unwrap_or_default(), opts).is_some()
    }

    fn subject(cached: &CertificateSigningRequest, opts: &Options) -> Option<Self::Subject> {
        let view = CsrView::from_object(&mut cached.clone());
        let requester = served_requester(&view.username, opts)?;
        Some((view, requester))
    }

    async fn read(ctx: &Context, (view, requester): Self::Subject) -> Result<ServingRead, Error> {
        let read = read_binding_and_flavor(ctx, requester.as_ref()).await?;
        let facts = serving_facts(&view, &read, ctx);
        Ok(ServingRead { view, read, facts })
    }

    fn decide(read: &ServingRead, _: &Options, _: jiff::Timestamp) -> ServingDecision {
        decide_serving(&read.facts)
    }

    fn outcome(decision: &ServingDecision) -> Outcome<'_> {
        match decision {
            ServingDecision::Ignore(why) => Outcome::Ignore(why.as_str()),
            ServingDecision::Approve { .. } => Outcome::Approve,
            ServingDecision::Deny(_) => Outcome::Deny,
        }
    }

    fn condition(decision: &ServingDecision) -> Option<CsrCondition> {
        decision.condition()
    }

    async fn prepare(
        ctx: &Context,
        csr: &CertificateSigningRequest,
        read: &ServingRead,
        decision: &ServingDecision,
        _: jiff::Timestamp,
    ) -> Result<(), Error> {
        match decision {
            ServingDecision::Ignore(_) => Ok(()),
            ServingDecision::Approve { node } => {
                last_look(ctx, &read.view.name, node, read.read.binding.as_ref()).await
            }
            ServingDecision::Deny(cause) => {
                ctx.may_write(Step::Denied)?;
                record_denial(ctx, csr, &read.view, &read.facts, *cause).await;
                Ok(())
            }
        }
    }

    fn record(ctx: &Context, csr: &str, decision: &ServingDecision) {
        record_decision(ctx, csr, decision)
    }
}

/// Routes a serving CSR by its requester (the one name the API server vouches for):
/// `Some(requester)` when this controller serves it. A requester that is no node is no
/// scoped controller's, and core ignores it anyway.
fn served_requester(username: &str, opts: &Options) -> Option<Option<NodeName>> {
    let requester = requesting_node(username);
    let served = match &requester {
        Some(node) => opts.serves(node.as_str()),
        None => opts.scope.is_none(),
    };
    served.then_some(requester)
}

/// What was read for one serving CSR besides the CSR itself.
struct Read {
    binding: Option<FlavorBinding>,
    flavor: Option<Flavor>,
    /// Without a binding: the requester's Node carries `kubeflavor.io/revoked`.
    node_marked_revoked: bool,
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
