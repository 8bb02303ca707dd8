//! One look at a node name: dereference (the index, then one GET of the binding and the
//! Node) -> build (core, pure, in `plan`) -> apply (a merge patch with the Node's
//! resourceVersion, only when it differs) -> status (only when it differs). A Node that
//! kubeflavor judged and no binding names is released.

use std::sync::Arc;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kubeflavor_cluster::crd::network::NodeReport;
use kubeflavor_cluster::crd::{Flavor, FlavorBinding, FlavorBindingStatus};
use kubeflavor_cluster::ops::trail::Regarding;
use kubeflavor_cluster::{bindings, node_reports, nodes, token_secrets};
use kubeflavor_core::approval::client::APPROVED_CONDITION;
use kubeflavor_core::approval::client::token_is_used_up;
use kubeflavor_core::flavor::{FLAVOR_LABEL, UNVERIFIED_TAINT};
use kubeflavor_core::node::applied_record::APPLIED_ANNOTATION;
use kubeflavor_core::node::state::{BindingCsr, node_is_the_holders};

use super::plan;
use super::view::node_fingerprint;
use crate::controller::csr::facts;
use crate::controller::fleet::{self, Fingerprint};
use crate::controller::metrics::Metrics;
use crate::controller::network;
use crate::controller::{Context, Error, Step, TOKEN_NAMESPACE, patch_params};

fn forget(ctx: &Context, name: &str) {
    ctx.fleet.forget(name);
    ctx.metrics.flavored_nodes.set(ctx.fleet.flavored());
}

/// Where the CSR that created the binding stands.
async fn binding_csr(ctx: &Context, binding: &FlavorBinding) -> Result<BindingCsr, Error> {
    let csr = facts::read_csr(ctx, &binding.spec.csr_name).await?;
    Ok(match csr {
        None => BindingCsr::Gone,
        Some(csr) if approved(&csr) => BindingCsr::Approved,
        Some(_) => BindingCsr::NotApproved,
    })
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    kubeflavor_cluster::csrs::has_condition(csr, APPROVED_CONDITION.type_)
}

/// What of a Flavor its Nodes depend on: which object (uid) and which spec (generation).
/// Its resourceVersion would also move with the status this controller writes.
pub(super) fn flavor_version(flavor: Option<&Flavor>) -> String {
    match flavor {
        Some(f) => format!(
            "{}/{}",
            f.metadata.uid.as_deref().unwrap_or_default(),
            f.metadata.generation.unwrap_or_default()
        ),
        None => String::new(),
    }
}

/// What besides the binding and the Node a node's state depends on: its Flavor, and its
/// report and the site map.
fn depends_on(ctx: &Context, name: &str, flavor: Option<&Flavor>) -> String {
    format!("{}|{}", flavor_version(flavor), ctx.network.version(name))
}

/// Looks at one name: skipped when the index says a reconcile found this same Node,
/// binding and Flavor needing nothing; otherwise the binding and the Node are read and
/// brought to what the Flavor says.
pub async fn reconcile(name: &str, ctx: &Context) -> Result<(), Error> {
    let known = ctx.fleet.get(name);
    let Some((flavor_name, binding_version)) = known.binding else {
        // No binding (any more): not kubeflavor's Node, unless it carries the flavor label
        // or the applied record kubeflavor wrote (it judged the Node: it stays released).
        forget(ctx, name);
        if known.node.is_some() && known.flavor_labeled && ctx.may_write(Step::NodePatched).is_ok()
        {
            return release(name, ctx).await;
        }
        return Ok(());
    };
    let Some(node) = known.node else {
        // Not registered yet, or deleted: its re-creation triggers us again (P2, trusted labels).
        forget(ctx, name);
        return Ok(());
    };
    let flavor = ctx.flavors.get(&ObjectRef::new(&flavor_name));
    let seen = fleet::combined(
        node,
        binding_version,
        &depends_on(ctx, name, flavor.as_deref()),
    );
    if known.done.contains(&seen) {
        return Ok(());
    }
    if ctx.may_write(Step::NodePatched).is_err() {
        // The term ended while this name waited: the next leader flavors it.
        return Ok(());
    }
    flavor_node(name.to_string(), &flavor_name, flavor, ctx).await
}

/// Releases a Node that carries kubeflavor's flavor label or applied record while no
/// FlavorBinding names it (its binding was deleted, also while no controller ran): it
/// loses what the record says kubeflavor gave it and gets the unverified taint back
/// (core's `released_node_state`); a released Node whose unverified taint an admin
/// removes gets it back. The index may lag, so the binding and the Node are read first; a
/// binding that exists wins.
async fn release(name: &str, ctx: &Context) -> Result<(), Error> {
    // Right after a start, Nodes can be listed before their bindings are.
    ctx.fleet.wait_synced().await;
    if ctx.fleet.get(name).binding.is_some() {
        return Ok(());
    }
    let (binding, node) = tokio::try_join!(
        bindings::get_metadata(&ctx.client, name),
        nodes::get(&ctx.client, name),
    )?;
    let (None, Some(node)) = (binding, node) else {
        return Ok(());
    };
    let flavor = node
        .labels()
        .get(FLAVOR_LABEL)
        .and_then(|f| ctx.flavors.get(&ObjectRef::new(f)));
    let Some(patch) = plan::plan_release(&node, flavor.as_deref()) else {
        return Ok(());
    };
    let released = send_patch(ctx, name, &patch);
    ctx.write(name, Step::NodePatched, released).await?;
    let note = match node.labels().get(FLAVOR_LABEL) {
        Some(flavor) => format!(
            "released Node {name}: no FlavorBinding names it, so it lost the flavor {flavor:?} kubeflavor gave it (what its {APPLIED_ANNOTATION} record names) and is tainted {UNVERIFIED_TAINT}:NoSchedule again"
        ),
        None => format!(
            "released Node {name}: no FlavorBinding names it and it had lost {UNVERIFIED_TAINT}:NoSchedule (or a label or taint its {APPLIED_ANNOTATION} record names came back); tainted unverified again"
        ),
    };
    tracing::warn!(node = %name, "{note}");
    let regarding = Regarding {
        api_version: "v1",
        kind: "Node",
        name,
        uid: node.metadata.uid.as_deref(),
    };
    ctx.record(regarding, ("Warning", "Release", "NodeReleased"), &note)
        .await;
    Ok(())
}

/// Reads the binding and the Node, and brings the Node and the binding's status to what
/// the Flavor says. `flavor` is the cached Flavor named `cached_flavor`.
async fn flavor_node(
    name: String,
    cached_flavor: &str,
    flavor: Option<Arc<Flavor>>,
    ctx: &Context,
) -> Result<(), Error> {
    let _timer = Metrics::measure(&ctx.metrics.flavoring_duration);
    let reading = std::time::Instant::now();
    // What the network placement depends on, as known before the reads.
    let network_version = ctx.network.version(&name);
    let read = read_binding_node_and_report(ctx, &name).await;
    ctx.metrics
        .stage("node", "read", reading.elapsed().as_secs_f64());
    let Some((binding, node, report)) = read? else {
        // Deleted meanwhile: the watch event that follows ends the story.
        forget(ctx, &name);
        return Ok(());
    };
    if !is_the_holders(ctx, &binding).await? {
        return Ok(());
    }
    let flavor = if binding.spec.flavor == cached_flavor {
        flavor
    } else {
        ctx.flavors.get(&ObjectRef::new(&binding.spec.flavor))
    };
    let placement = ctx.network.placement(report.as_ref());
    let plan = plan::plan_node(&binding, flavor.as_deref(), &node, placement.clone());
    // The token's Secret is read while the Node is patched (one round trip less per
    // join); whether it is used up is decided after the patch, and its deletion is bound
    // to the version read, so a Secret that changed meanwhile stays.
    let retiring = plan.flavored && !binding.holder_facts().flavored_before;
    let (node_after, token) = tokio::try_join!(
        patch_node(ctx, &binding, &node, plan.patch.as_ref()),
        async {
            if retiring {
                read_token(ctx, &binding).await
            } else {
                Ok(None)
            }
        },
    )?;
    // Before the status says "flavored": a crash in between leaves the binding unflavored,
    // so the next run looks at the token again.
    if let Some(secret) = token {
        retire_used_up_token(ctx, &binding, secret).await?;
    }
    let binding_rv = write_status(ctx, &binding, &plan.status).await?;
    if let Some(report) = &report {
        network::after_reconcile(ctx, report, &placement, node.metadata.uid.as_deref()).await?;
    }
    let read_rv = binding.resource_version().unwrap_or_default();
    let flavor = format!("{}|{network_version}", flavor_version(flavor.as_deref()));
    let done = |binding_rv: &str| {
        fleet::combined(node_after, fleet::version_fingerprint(binding_rv), &flavor)
    };
    remember(
        ctx,
        &name,
        plan.flavored,
        [
            done(&binding_rv),
            // The binding watch may still bring the version read above while the status
            // write travels back: that version, with this status written, is also done.
            done(&read_rv),
        ],
    );
    Ok(())
}

/// The Secret of the binding's token, when the binding records which token it was (a
/// binding without the token's uid retires nothing).
async fn read_token(ctx: &Context, binding: &FlavorBinding) -> Result<Option<Secret>, Error> {
    if binding.spec.token_uid.is_none() {
        return Ok(None);
    }
    token_secrets::get(&ctx.client, &binding.spec.token_id)
        .await
        .map_err(|source| Error::Read {
            what: format!(
                "Secret {}/{}",
                TOKEN_NAMESPACE,
                token_secrets::name_of(&binding.spec.token_id)
            ),
            source,
        })
}

/// Deletes the binding's token (`secret`, as read) once it is used up (core's
/// `token_is_used_up`: every use bound, every bound name with a Node), looked at when a
/// binding flavors its Node the first time. The join line then authenticates nobody: a
/// copy found later cannot even file a CSR. A token some of whose names have not joined
/// yet stays (the last of them to be flavored retires it); one left behind still expires,
/// and the binding's key check keeps its nodes from being re-keyed either way.
async fn retire_used_up_token(
    ctx: &Context,
    binding: &FlavorBinding,
    secret: Secret,
) -> Result<(), Error> {
    let Some(uid) = binding.spec.token_uid.clone() else {
        return Ok(());
    };
    let name = token_secrets::name_of(&binding.spec.token_id);
    let this_token = secret.metadata.uid.as_deref() == Some(uid.as_str());
    let used_up = token_secrets::kubeflavor_meta(&secret).is_some_and(|meta| {
        token_is_used_up(&meta, |n| {
            n.as_str() == binding.spec.node || ctx.fleet.get(n.as_str()).node.is_some()
        })
    });
    if !this_token || !used_up {
        return Ok(());
    }
    let rv = secret.metadata.resource_version.clone();
    let retired = async {
        token_secrets::delete_instance(&ctx.client, &name, Some(uid), rv)
            .await
            .map_err(|source| Error::RetireToken {
                token: name.clone(),
                source,
            })
    };
    match ctx.write(&name, Step::TokenRetired, retired).await {
        Ok(()) => {
            tracing::info!(token = %binding.spec.token_id, node = %binding.spec.node, "token used up: every use is bound and every node joined; deleted");
            Ok(())
        }
        // Gone or changed meanwhile (a reservation, a denial count): the next look decides.
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}

/// The binding and the Node of `name`, and its NodeReport when the index knows one, read
/// together; `None` when the binding or the Node is gone. The caches keep neither the
/// binding's status nor the Node's labels and taints, and a fresh binding is the only safe
/// base for the status write (a cache may lag the status written a moment ago); only the
/// index of reports is kept, not the reports.
async fn read_binding_node_and_report(
    ctx: &Context,
    name: &str,
) -> Result<Option<(FlavorBinding, Node, Option<NodeReport>)>, Error> {
    let report = async {
        if ctx.network.has_report(name) {
            node_reports::get(&ctx.client, name).await
        } else {
            Ok(None)
        }
    };
    let ((binding, node), report) =
        tokio::try_join!(bindings::with_node(&ctx.client, name), report)?;
    Ok(binding.zip(node).map(|(b, n)| (b, n, report)))
}

/// P3 (binding): whether the Node of the binding's name is the token holder's to act on
/// (core's `node_is_the_holders`). The binding's CSR is read only when core needs it (a
/// binding that never flavored its Node).
async fn is_the_holders(ctx: &Context, binding: &FlavorBinding) -> Result<bool, Error> {
    let facts = binding.holder_facts();
    if let Some(answer) = node_is_the_holders(facts, None) {
        return Ok(answer);
    }
    let reading = std::time::Instant::now();
    let csr = binding_csr(ctx, binding).await;
    ctx.metrics
        .stage("node", "read", reading.elapsed().as_secs_f64());
    let csr = csr?;
    if node_is_the_holders(facts, Some(csr)) == Some(true) {
        return Ok(true);
    }
    // Not (yet) the token holder's Node: leave it alone. The holder's own registration
    // comes after the approval and triggers this loop again.
    tracing::debug!(node = %binding.spec.node, csr = ?csr, "the Node predates its binding's approval; not flavoring it");
    Ok(false)
}

/// Applies the planned patch, if any (it carries the Node's resourceVersion), and returns
/// the Node's fingerprint after it.
async fn patch_node(
    ctx: &Context,
    binding: &FlavorBinding,
    node: &Node,
    patch: Option<&serde_json::Value>,
) -> Result<Fingerprint, Error> {
    let Some(patch) = patch else {
        return Ok(node_fingerprint(node));
    };
    let name = node.name_any();
    let patched = async {
        let patched = send_patch(ctx, &name, patch).await?;
        tracing::info!(node = %name, flavor = %binding.spec.flavor, "node flavored");
        Ok(node_fingerprint(&patched))
    };
    ctx.write(&name, Step::NodePatched, patched).await
}

/// Merge-patches the Node `name` as the controller (its field manager), counted in the
/// `node_patches` metric.
async fn send_patch(ctx: &Context, name: &str, patch: &serde_json::Value) -> Result<Node, Error> {
    let patched = nodes::merge_patch(&ctx.client, name, &patch_params(), patch)
        .await
        .map_err(|source| Error::PatchNode {
            node: name.to_string(),
            source,
        })?;
    ctx.metrics.node_patches.inc();
    Ok(patched)
}

/// Writes the binding's status when it differs (guarded by the resourceVersion read), and
/// returns the binding's resourceVersion after it.
async fn write_status(
    ctx: &Context,
    binding: &FlavorBinding,
    status: &FlavorBindingStatus,
) -> Result<String, Error> {
    let read_rv = binding.resource_version().unwrap_or_default();
    if binding.status.as_ref() == Some(status) {
        return Ok(read_rv);
    }
    let name = binding.name_any();
    let written = async {
        bindings::write_status(&ctx.client, &name, &read_rv, status)
            .await
            .map_err(|source| Error::BindingStatus {
                node: name.clone(),
                source,
            })
    };
    ctx.write(&name, Step::StatusWritten, written).await
}

/// Records what the reconcile left: whether the Node carries its flavor (the
/// `flavored_nodes` gauge), and the states that need nothing more.
fn remember(ctx: &Context, name: &str, flavored: bool, done: [Fingerprint; 2]) {
    ctx.fleet.remember(name, flavored, done);
    ctx.metrics.flavored_nodes.set(ctx.fleet.flavored());
}
