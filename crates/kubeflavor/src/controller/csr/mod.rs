//! The CSR loops: gather facts -> decide (core) -> apply, one loop per signer.
//!
//! Every signer kubeflavor decides runs through the same loop ([`run`]): a watch filtered
//! by signer on the server, a cache of pending CSRs only, a fair turn to talk to the API
//! server, the CSR and the facts read fresh from the API server, core's decision, the
//! writes that come before it, and the one generic condition core gives, written under
//! the leadership write bracket. What differs between signers is one [`Signer`] entry
//! each, as upstream's sarapprove (kubernetes/pkg/controller/certificates/approver/
//! sarapprove.go) lists its recognizers: `client` for kubelet client CSRs, `serving` for
//! kubelet serving CSRs (`--approve-serving`).
//!
//! `facts` reads and hands core the facts of a client CSR; `approve` and `deny` make a
//! client approval's and denial's writes before the decision; the decision itself, for
//! every signer, is written here ([`write_condition`]).

pub mod approve;
pub mod client;
pub mod deny;
pub mod facts;
pub mod serving;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kubeflavor_core::approval::client::CsrCondition;

use super::cache;
use super::metrics::Metrics;
use super::{Context, Error, Options, Step, Stop};

pub use self::client::OwnTokenWrites;

/// Where a decision leaves the CSR.
pub enum Outcome<'a> {
    /// Not kubeflavor's to decide, and why (a metric label): nothing is written.
    Ignore(&'a str),
    Approve,
    Deny,
}

/// One signer's entry: which CSRs, how they are routed and read, what core decides, the
/// writes before the condition, and how a decision shows in metrics and logs. The loop
/// around it is the same for every signer ([`run`]).
pub trait Signer: Send + Sync + 'static {
    /// The signer name: the watch's server-side filter.
    const SIGNER: &'static str;
    /// This loop as a metric label of its queue and read stages. (Its reconcile errors
    /// and conflicts count under `csr`, see [`error_policy`].)
    const LOOP: &'static str;
    /// The loop's name in the log.
    const LOG: &'static str;
    /// What the log says of a CSR core ignores.
    const IGNORED: &'static str;
    /// The decisions family this signer counts in, by outcome and cause.
    const DECISIONS: fn(&Metrics, &str, &str);

    /// The CSR as the decision starts from it (after its turn).
    type Subject: Send;
    /// What was read for a decision besides the CSR itself.
    type Facts: Send + Sync;
    /// Core's answer.
    type Decision: Send + Sync;

    /// Before the CSR's turn, from the cached object: whether this controller may serve it
    /// (`Options::scope`). It runs for every pending CSR at once, so it stays cheap; the
    /// default leaves routing to [`Signer::subject`].
    fn admits(_cached: &CertificateSigningRequest, _opts: &Options) -> bool {
        true
    }

    /// After the CSR's turn: the CSR as the decision sees it, or `None` when this
    /// controller does not serve it.
    fn subject(cached: &CertificateSigningRequest, opts: &Options) -> Option<Self::Subject>;

    /// Reads what a decision rests on (GETs, never a cache).
    fn read(
        ctx: &Context,
        subject: Self::Subject,
    ) -> impl Future<Output = Result<Self::Facts, Error>> + Send;

    /// Core's decision on the facts.
    fn decide(facts: &Self::Facts, opts: &Options, now: jiff::Timestamp) -> Self::Decision;

    /// Where the decision leaves the CSR.
    fn outcome(decision: &Self::Decision) -> Outcome<'_>;

    /// The condition core gives for the decision, if any.
    fn condition(decision: &Self::Decision) -> Option<CsrCondition>;

    /// The writes and reads that come before the condition of an approval or a denial.
    /// `Ok` means: write the condition.
    fn prepare(
        ctx: &Context,
        csr: &CertificateSigningRequest,
        facts: &Self::Facts,
        decision: &Self::Decision,
        now: jiff::Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The decision just written on CSR `csr`, in the metrics and the log.
    fn record(ctx: &Context, csr: &str, decision: &Self::Decision);

    /// More triggers of the loop than its own CSRs (the client loop's token Secrets).
    fn more_triggers(
        controller: Controller<CertificateSigningRequest>,
        _store: Store<CertificateSigningRequest>,
        _ctx: &Arc<Context>,
    ) -> Controller<CertificateSigningRequest> {
        controller
    }
}

/// Runs the loop of signer `S` until `until` resolves.
pub async fn run<S: Signer>(ctx: Arc<Context>, until: Stop) {
    let csrs: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    // Server-side filter: only this signer's CSRs reach this loop.
    let wc = watcher::Config::default().fields(&format!("spec.signerName={}", S::SIGNER));
    // The cache keeps pending CSRs only, slim (no managedFields, no certificate): routing
    // is all it serves; every decision reads the CSR itself.
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
    let controller = S::more_triggers(controller, store.clone(), &ctx);
    let fut = controller
        .graceful_shutdown_on(until.clone())
        .run(reconcile::<S>, error_policy, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "{}", S::LOG);
            }
        });
    super::with_grace(fut, until, store).await;
}

/// Every signer's loop counts its errors and conflicts under `csr`.
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
    if matches!(err, Error::Halted(_)) {
        // Not a failure: this controller's term ended (or a test's step hook stopped it)
        // and it writes no more; the next leader decides.
        return Action::await_change();
    }
    ctx.metrics.error("csr", err.metric_label());
    tracing::warn!(error = %err, "CSR reconcile failed, retrying");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile<S: Signer>(
    cached: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if facts::is_decided(&cached) || !S::admits(&cached, &ctx.opts) {
        return Ok(Action::await_change());
    }
    let _turn = ctx.csr_turns.take(&ctx.metrics, S::LOOP).await;
    if ctx.may_write(Step::Approved).is_err() {
        // The term ended while this reconcile waited: the next leader decides.
        return Ok(Action::await_change());
    }
    // Boxed: while it waits for its turn, a reconcile holds a few words, not room for
    // every API call below.
    Box::pin(decide::<S>(&cached, &ctx)).await
}

/// Reads the CSR and its facts, lets core decide, and writes the decision.
///
/// A CSR's spec cannot change once created, so the request and requester come from the
/// cache (which keeps them for pending CSRs) and the facts are read at the same time as
/// the CSR itself: one round trip, not two, before a decision. The CSR as read says
/// whether it is still pending and carries the resourceVersion the decision is written
/// with; a CSR re-created under the name (another uid) is decided again from its own spec.
async fn decide<S: Signer>(
    cached: &CertificateSigningRequest,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = cached.metadata.name.clone().unwrap_or_default();
    let Some(subject) = S::subject(cached, &ctx.opts) else {
        return Ok(Action::await_change());
    };
    let _timer = Metrics::measure(&ctx.metrics.decision_duration);
    let reading = std::time::Instant::now();
    let (read, facts) = tokio::join!(read_pending(ctx, &name), S::read(ctx, subject));
    ctx.metrics
        .stage(S::LOOP, "read", reading.elapsed().as_secs_f64());
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
    let decision = S::decide(&facts, &ctx.opts, now);
    let step = match S::outcome(&decision) {
        Outcome::Ignore(why) => {
            tracing::debug!(csr = %name, why, "{}", S::IGNORED);
            (S::DECISIONS)(&ctx.metrics, "ignored", why);
            return Ok(Action::await_change());
        }
        Outcome::Approve => Step::Approved,
        Outcome::Deny => Step::Denied,
    };
    S::prepare(ctx, &csr, &facts, &decision, now).await?;
    let Some(condition) = S::condition(&decision) else {
        return Ok(Action::await_change());
    };
    write_condition(ctx, &csr, condition, step, || {
        S::record(ctx, &name, &decision)
    })
    .await?;
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
