//! The CSR loop: gather facts -> decide (core) -> apply, for kubelet client CSRs.
//!
//! Core decides everything: approve (with the writes that come first), deny (with the
//! token's fate) or ignore. This module only reads the facts and writes the answer.
//!
//! `facts` reads and hands core its facts; `approve` and `deny` make the writes that come
//! before the decision; the decision itself, the one condition core gives, is written here
//! ([`conclude`]).
//!
//! Apply order for an approval (P3 (binding), P6 (nothing lost)): reserve a use on the token Secret (PUT with the
//! resourceVersion read), create the FlavorBinding, approve. Each step is visible in API
//! state, and the next reconcile re-reads it: a name already in `bound-nodes` is not
//! reserved twice, an existing binding to the same token is not created twice. So a crash
//! between two steps is finished by the next run, and a lost race (409) is decided again.
//!
//! Denials (P1 (hidden flavor), P4 (rejection that ends)): one generic reason/message on
//! the CSR; the cause goes to the trail. When core says the token must go, the Secret is
//! deleted BEFORE the denial is written so a crash in between still ends with the token
//! gone (the retry then finds it missing).

pub mod approve;
pub mod deny;
pub mod facts;
pub mod serving;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use kubeflavor_cluster::token_secrets;
use kubeflavor_core::approval::client::{
    BindingStep, CsrCondition, Decision, decide as core_decide,
};
use kubeflavor_core::csr::client::{CsrError, KubeletClientCsr};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::TokenId;

use super::cache;
use super::metrics::Metrics;
use super::{Context, Error, KUBELET_CLIENT_SIGNER, Step, Stop};

/// Runs the CSR loop until `until` resolves.
pub async fn run(ctx: Arc<Context>, until: Stop) {
    let csrs: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    // Server-side filter: only kubelet client CSRs reach this controller.
    let wc = watcher::Config::default().fields(&format!("spec.signerName={KUBELET_CLIENT_SIGNER}"));
    let secrets = token_secrets::api(&ctx.client);
    let token_events = watcher(
        secrets,
        watcher::Config::default().fields(&token_secrets::type_selector()),
    )
    .default_backoff()
    .touched_objects();
    // The cache keeps pending CSRs only, slim (no request, no certificate): routing is all
    // it serves; every decision reads the CSR itself.
    let (store, writer) = reflector::store();
    let csr_events = watcher(csrs, wc)
        .default_backoff()
        .modify(cache::slim_csr)
        .filter_map(|event| std::future::ready(event.map(cache::pending_only).transpose()))
        .reflect(writer)
        .applied_objects();
    let controller = Controller::for_stream(csr_events, store.clone())
        // Unbounded here: the fair limit is `Context::csr_turns` (see `Turns`).
        .with_config(Config::default().concurrency(0));
    let ready_store = store.clone();
    // A token Secret that changes (created late in a cache, a use released, deleted) may
    // change the fate of CSRs still pending from that token: decide them again.
    let own = ctx.clone();
    let controller = controller.watches_stream(token_events, move |secret: Secret| {
        let own_write = own.own_token_writes.seen(&secret);
        pending_csrs_of_token(&store, &secret)
            .into_iter()
            .filter(|csr| own_write.as_deref() != Some(csr.name.as_str()))
            .collect::<Vec<_>>()
    });
    let fut = controller
        .graceful_shutdown_on(until.clone())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "csr loop");
            }
        });
    super::with_grace(fut, until, ready_store).await;
}

/// Token Secret versions this controller wrote while deciding a CSR: the watch event of
/// such a write must not send that same CSR round again (its reconcile carries on from the
/// write). Other pending CSRs of the token are still decided again.
#[derive(Default)]
pub struct OwnTokenWrites(std::sync::Mutex<std::collections::HashMap<String, (String, String)>>);

impl OwnTokenWrites {
    /// Most entries kept: an entry leaves when the watch brings its Secret again, and a
    /// watch that restarted from a list may never bring it.
    const LIMIT: usize = 4096;

    /// Remembers that deciding `csr` wrote `secret` (as returned by the API server).
    fn wrote(&self, secret: &Secret, csr: &str) {
        let (Some(name), Some(rv)) = (&secret.metadata.name, &secret.metadata.resource_version)
        else {
            return;
        };
        let mut own = self.0.lock().expect("own writes lock");
        if own.len() >= Self::LIMIT {
            own.clear();
        }
        own.insert(name.clone(), (rv.clone(), csr.to_string()));
    }

    /// The CSR whose decision wrote this version of `secret`, if it is one of ours; the
    /// Secret's entry is dropped either way (a later version is someone else's news).
    fn seen(&self, secret: &Secret) -> Option<String> {
        let name = secret.metadata.name.as_deref()?;
        let (rv, csr) = self.0.lock().expect("own writes lock").remove(name)?;
        (secret.metadata.resource_version.as_deref() == Some(rv.as_str())).then_some(csr)
    }
}

/// The pending CSRs filed with the token of `secret`, a bootstrap token Secret.
fn pending_csrs_of_token(
    store: &Store<CertificateSigningRequest>,
    secret: &Secret,
) -> Vec<ObjectRef<CertificateSigningRequest>> {
    let Some(user) = secret
        .metadata
        .name
        .as_deref()
        .and_then(token_secrets::id_of)
        .map(|id| format!("{}{id}", facts::BOOTSTRAP_USER_PREFIX))
    else {
        return Vec::new();
    };
    store
        .state()
        .into_iter()
        .filter(|csr| csr.spec.username.as_ref() == Some(&user) && !facts::is_decided(csr))
        .map(|csr| ObjectRef::from_obj(&*csr))
        .collect()
}

pub fn error_policy(
    _csr: Arc<CertificateSigningRequest>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    if err.is_conflict() {
        // Someone wrote first (another CSR of the same token, a renewal, a second
        // replica in a split second): re-read and decide again at once.
        tracing::debug!(error = %err, "conflict, deciding again");
        ctx.metrics.conflict("csr", err.metric_label());
        return Action::requeue(Duration::from_millis(50));
    }
    ctx.metrics.error("csr", err.metric_label());
    if matches!(err, Error::Halted(_)) {
        return Action::await_change();
    }
    tracing::warn!(error = %err, "CSR reconcile failed, retrying");
    Action::requeue(Duration::from_secs(1))
}

pub async fn reconcile(
    cached: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if facts::is_decided(&cached) {
        return Ok(Action::await_change());
    }
    let _turn = ctx.csr_turns.take(&ctx.metrics, "csr").await;
    if ctx.may_write(Step::Reserved).is_err() {
        // The term ended while this reconcile waited: the next leader decides.
        return Ok(Action::await_change());
    }
    // Boxed: while it waits for its turn, a reconcile holds a few words, not room for
    // every API call below.
    Box::pin(decide(&cached, &ctx)).await
}

/// Reads the CSR and its facts, lets core decide, and writes the decision.
///
/// A CSR's spec cannot change once created, so the request and requester come from the
/// cache (which keeps them for pending CSRs) and the facts are read at the same time as
/// the CSR itself: one round trip, not two, before a decision. The CSR as read says
/// whether it is still pending and carries the resourceVersion the decision is written
/// with; a CSR re-created under the name (another uid) is decided again from its own spec.
async fn decide(cached: &CertificateSigningRequest, ctx: &Context) -> Result<Action, Error> {
    let name = cached.metadata.name.clone().unwrap_or_default();
    let view = facts::CsrView::from_object(&mut cached.clone());
    let parsed = view.validate();
    if !served(&ctx.opts, &view, &parsed) {
        return Ok(Action::await_change());
    }
    let _timer = Metrics::measure(&ctx.metrics.decision_duration);
    let reading = std::time::Instant::now();
    let (read, facts) = tokio::join!(read_pending(ctx, &name), facts::gather(ctx, view, parsed));
    ctx.metrics
        .stage("csr", "read", reading.elapsed().as_secs_f64());
    let Some(csr) = read? else {
        return Ok(Action::await_change());
    };
    if csr.metadata.uid != cached.metadata.uid {
        // Re-created under the same name since the cache saw it: decide again once the
        // cache has the new one.
        return Err(Error::Changed {
            csr: name,
            node: String::new(),
        });
    }
    let facts = facts?;
    let now = jiff::Timestamp::now();
    let decision = core_decide(&facts.core_facts(&ctx.opts, now));
    match &decision {
        Decision::Ignore(why) => {
            tracing::debug!(csr = %name, why = why.as_str(), "not kubeflavor's to decide");
            ctx.metrics.decision("ignored", why.as_str());
            return Ok(Action::await_change());
        }
        Decision::Approve { node, binding } => {
            approve::prepare(ctx, &facts, node, binding, now).await?;
        }
        Decision::Deny { cause, token_fate } => {
            deny::prepare(ctx, &csr, &facts, *cause, *token_fate).await?;
        }
    }
    conclude(ctx, &csr, &decision).await?;
    Ok(Action::await_change())
}

/// The CSR as the API server has it now, if it is still pending. The cache may lag our
/// own approval (a re-run queued while it was written): reading the CSR itself means a
/// decided CSR is never decided twice, and the /approval PUT carries a current
/// resourceVersion.
async fn read_pending(
    ctx: &Context,
    name: &str,
) -> Result<Option<CertificateSigningRequest>, Error> {
    let csr = facts::read_csr(ctx, name).await?;
    Ok(csr.filter(|csr| !facts::is_decided(csr)))
}

/// Whether this controller serves the node name the CSR asks for, or else the node that
/// asks (`Options::scope`). A CSR that names no node is served by unscoped controllers only.
fn served(
    opts: &super::Options,
    view: &facts::CsrView,
    parsed: &Result<KubeletClientCsr, CsrError>,
) -> bool {
    if opts.scope.is_none() {
        return true;
    }
    let asked = match parsed {
        Ok(csr) => Some(csr.node_name.to_string()),
        // Routing only: an invalid CSR goes to the controller of the name it asks for,
        // which denies it.
        Err(_) => kubeflavor_core::csr::client::requested_node_name(&view.request),
    };
    let node = asked.or_else(|| {
        view.username
            .strip_prefix(facts::NODE_USER_PREFIX)
            .map(str::to_owned)
    });
    match node {
        Some(name) => opts.serves(&name),
        // A request too large or too broken to name a node: routed by the CSR's own name.
        None => opts.serves(&view.name),
    }
}

/// Writes core's decision on the CSR: the one condition [`Decision::condition`] gives, the
/// same for every approval or every denial (P1 (hidden flavor)).
async fn conclude(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    decision: &Decision,
) -> Result<(), Error> {
    let Some(condition) = decision.condition() else {
        return Ok(());
    };
    let name = csr.metadata.name.clone().unwrap_or_default();
    let step = match decision {
        Decision::Approve { .. } => Step::Approved,
        _ => Step::Denied,
    };
    write_condition(ctx, csr, condition, step, || {
        record_decision(ctx, &name, decision)
    })
    .await
}

/// Writes `condition` on the CSR, as write `step`, then calls `written`. PUT `/approval`
/// with the whole object as read: its resourceVersion guards the write, and Approved and
/// Denied are permanent. Every CSR condition kubeflavor writes, for client and serving
/// CSRs alike, is written here.
async fn write_condition(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    condition: CsrCondition,
    step: Step,
    written: impl FnOnce(),
) -> Result<(), Error> {
    let name = csr.metadata.name.clone().unwrap_or_default();
    let mut updated = csr.clone();
    let status = updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: condition.type_.into(),
            status: "True".into(),
            reason: Some(condition.reason.into()),
            message: Some(condition.message.into()),
            ..CertificateSigningRequestCondition::default()
        });
    let write = async {
        Api::<CertificateSigningRequest>::all(ctx.client.clone())
            .replace_subresource("approval", &name, &PostParams::default(), &updated)
            .await
            .map_err(|source| Error::Decide {
                csr: name.clone(),
                source,
            })?;
        written();
        Ok(())
    };
    ctx.write(&name, step, write).await
}

/// The decision just written, in the metrics and the log.
fn record_decision(ctx: &Context, csr: &str, decision: &Decision) {
    match decision {
        Decision::Approve { node, binding } => {
            ctx.metrics.decision("approved", "ok");
            let (token, flavor, reserved, input_labels) = match binding {
                BindingStep::Create {
                    token,
                    flavor,
                    reserve_use,
                    input_labels,
                    ..
                } => (
                    Some(token),
                    Some(flavor),
                    *reserve_use,
                    input_labels.summary(),
                ),
                BindingStep::Existing { token, flavor } => {
                    (token.as_ref(), flavor.as_ref(), false, String::new())
                }
            };
            let flavor = flavor.map_or("", FlavorName::as_str);
            let token = token.map_or("", TokenId::as_str);
            tracing::info!(csr = %csr, node = %node, flavor, token, reserved, input_labels, "approved");
        }
        Decision::Deny { cause, .. } => ctx.metrics.decision("denied", cause.as_str()),
        Decision::Ignore(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, rv: &str) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": rv},
            "type": "bootstrap.kubernetes.io/token",
        }))
        .expect("a Secret")
    }

    #[test]
    fn only_the_csr_whose_write_it_was_skips_that_version() {
        let own = OwnTokenWrites::default();
        own.wrote(&secret("bootstrap-token-abcdef", "7"), "csr-1");
        assert_eq!(
            own.seen(&secret("bootstrap-token-abcdef", "7")).as_deref(),
            Some("csr-1"),
            "the version csr-1 wrote"
        );
        assert_eq!(
            own.seen(&secret("bootstrap-token-abcdef", "7")),
            None,
            "seen once: a later event of the Secret is news again"
        );
        own.wrote(&secret("bootstrap-token-abcdef", "8"), "csr-1");
        assert_eq!(
            own.seen(&secret("bootstrap-token-abcdef", "9")),
            None,
            "someone else's version"
        );
        assert_eq!(
            own.seen(&secret("bootstrap-token-abcdef", "8")),
            None,
            "the entry went with the first event seen after the write"
        );
        own.wrote(&secret("bootstrap-token-abcdef", "10"), "csr-1");
        assert_eq!(
            own.seen(&secret("bootstrap-token-zzzzzz", "10")),
            None,
            "another token"
        );
    }
}
