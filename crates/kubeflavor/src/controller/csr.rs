//! The CSR loop: gather facts -> decide (core) -> apply, for kubelet client CSRs.
//!
//! Core decides everything: approve (with the writes that come first), deny (with the
//! token's fate) or ignore. This module only reads the facts and writes the answer.
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

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use kubeflavor_core::csr::{CsrError, KubeletClientCsr};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::policy::{
    APPROVED_CONDITION, BindingStep, CsrCondition, DENIED_CONDITION, Decision, DenyCause, TokenFate,
};
use kubeflavor_core::token::TokenId;
use kubeflavor_core::token_meta::Custody;

use super::cache;
use super::facts::{self, CsrFactsRead};
use super::metrics::Metrics;
use super::policy;
use super::trail::{self, Regarding};
use super::{Context, Error, KUBELET_CLIENT_SIGNER, Step, Stop, TOKEN_NAMESPACE};
use crate::cluster::token_secrets;
use crate::crd::FlavorBinding;

/// Runs the CSR loop until `until` resolves.
pub async fn run(ctx: Arc<Context>, until: Stop) {
    let csrs: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    // Server-side filter: only kubelet client CSRs reach this controller.
    let wc = watcher::Config::default().fields(&format!("spec.signerName={KUBELET_CLIENT_SIGNER}"));
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), TOKEN_NAMESPACE);
    let token_events = watcher(
        secrets,
        watcher::Config::default().fields("type=bootstrap.kubernetes.io/token"),
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
    let parsed = policy::validate(&view);
    if !served(&ctx.opts, &view, &parsed) {
        return Ok(Action::await_change());
    }
    let _timer = Metrics::measure(&ctx.metrics.decision_duration);
    let reading = std::time::Instant::now();
    let (read, facts) = tokio::join!(
        read_pending(ctx, &name),
        facts::gather(ctx, view, parsed, policy::token_flavor),
    );
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
    match policy::decide(&facts, &ctx.opts, now) {
        Decision::Ignore(why) => {
            tracing::debug!(csr = %name, why = why.as_str(), "not kubeflavor's to decide");
            ctx.metrics.decision("ignored", why.as_str());
        }
        Decision::Approve { node, binding } => {
            approve(ctx, &csr, &facts, &node, binding, now).await?;
        }
        Decision::Deny { cause, token_fate } => {
            deny(ctx, &csr, &facts, cause, token_fate).await?;
        }
    }
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
    let csr = Api::<CertificateSigningRequest>::all(ctx.client.clone())
        .get_opt(name)
        .await
        .map_err(|source| Error::Read {
            what: format!("CertificateSigningRequest {name}"),
            source,
        })?;
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
        Err(_) => kubeflavor_core::csr::requested_node_name(&view.request),
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

/// Approves the CSR for `node` (P3 (binding), P6 (nothing lost)). First the writes core
/// asked for, each visible in API state so the next run finishes a half-done approval:
/// reserve a use on the token, create the binding. Then a last look at what the approval
/// rests on, and the Approved condition.
async fn approve(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    facts: &CsrFactsRead,
    node: &NodeName,
    binding: BindingStep,
    now: jiff::Timestamp,
) -> Result<(), Error> {
    let name = facts.csr.name.as_str();
    let mut last_look = LastLook::new(facts, node);
    let (token, flavor, reserved) = match &binding {
        BindingStep::Create {
            token,
            flavor,
            reserve_use,
            custody,
        } => {
            if *reserve_use {
                reserve(ctx, facts, node, token).await?;
            }
            let created = bind(ctx, facts, node, token, flavor, custody, now);
            last_look.binding_version = ctx.write(name, Step::Bound, created).await?;
            (Some(token), Some(flavor), *reserve_use)
        }
        BindingStep::Existing { token, flavor } => (token.as_ref(), flavor.as_ref(), false),
    };
    let looking = std::time::Instant::now();
    let looked = last_look.check(ctx).await;
    ctx.metrics
        .stage("csr", "read", looking.elapsed().as_secs_f64());
    looked?;
    let approval = async {
        write_condition(ctx, csr, APPROVED_CONDITION).await?;
        ctx.metrics.decision("approved", "ok");
        let flavor = flavor.map_or("", FlavorName::as_str);
        let token = token.map_or("", TokenId::as_str);
        tracing::info!(csr = %name, node = %node, flavor, token, reserved, "approved");
        Ok(())
    };
    ctx.write(name, Step::Approved, approval).await
}

/// Reserves a use of `token` for `node`: the token Secret with the name added to its bound
/// names, PUT with the resourceVersion it was read at, so a concurrent reservation of the
/// same token makes this a 409 and the CSR is decided again with the new count.
async fn reserve(
    ctx: &Context,
    facts: &CsrFactsRead,
    node: &NodeName,
    token: &TokenId,
) -> Result<(), Error> {
    // Core reserves only on the readable kubeflavor token the facts hold.
    let updated = facts
        .token_secret
        .as_ref()
        .and_then(|s| policy::with_reservation(s, node))
        .ok_or_else(|| Error::Changed {
            csr: facts.csr.name.clone(),
            node: node.to_string(),
        })?;
    let secret_name = updated.metadata.name.clone().unwrap_or_default();
    let put = async {
        Api::<Secret>::namespaced(ctx.client.clone(), TOKEN_NAMESPACE)
            .replace(&secret_name, &PostParams::default(), &updated)
            .await
            .map(|written| ctx.own_token_writes.wrote(&written, &facts.csr.name))
            .map_err(|source| Error::Reserve {
                token: token.to_string(),
                node: node.to_string(),
                source,
            })
    };
    ctx.write(&facts.csr.name, Step::Reserved, put).await
}

/// Creates the FlavorBinding of `node` and returns its resourceVersion. AlreadyExists:
/// someone bound the name since we read. It counts as a conflict: the CSR is decided again
/// with that binding in the facts (same token: idempotent approval; another token: denial).
async fn bind(
    ctx: &Context,
    facts: &CsrFactsRead,
    node: &NodeName,
    token: &TokenId,
    flavor: &FlavorName,
    custody: &Custody,
    now: jiff::Timestamp,
) -> Result<Option<String>, Error> {
    let binding = policy::new_binding(facts, node, token, flavor, custody, now);
    let created = Api::<FlavorBinding>::all(ctx.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .map_err(|source| Error::Bind {
            node: node.to_string(),
            source,
        })?;
    Ok(created.metadata.resource_version)
}

/// What an approval rests on, read once more right before the approval is written: the
/// facts were read before the reservation and the binding, and under load a CSR can wait
/// a while between the two. If the binding changed since (revoked, re-made, another
/// token's) or the Node of the name appeared or went, the CSR goes back to be decided
/// again from fresh facts: core decides, this only notices the change (P3 (binding), and
/// "a revoked binding never leads to an approval"). What happens after this read happens
/// to a joined node: a revocation then removes the flavor and taints the Node, as for any
/// joined node.
struct LastLook<'a> {
    node: &'a str,
    csr: &'a str,
    /// The binding's resourceVersion as read, or as this reconcile created it.
    binding_version: Option<String>,
    node_exists: bool,
}

impl<'a> LastLook<'a> {
    fn new(facts: &'a CsrFactsRead, node: &'a NodeName) -> Self {
        LastLook {
            node: node.as_str(),
            csr: &facts.csr.name,
            binding_version: facts
                .binding
                .as_ref()
                .and_then(|b| b.metadata.resource_version.clone()),
            node_exists: facts.node_exists,
        }
    }

    async fn check(&self, ctx: &Context) -> Result<(), Error> {
        let read = |what: String| move |source| Error::Read { what, source };
        let bindings = Api::<FlavorBinding>::all(ctx.client.clone());
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(ctx.client.clone());
        let (binding, node) = tokio::try_join!(
            async {
                bindings
                    .get_metadata_opt(self.node)
                    .await
                    .map_err(read(format!("FlavorBinding {}", self.node)))
            },
            async {
                nodes
                    .get_metadata_opt(self.node)
                    .await
                    .map_err(read(format!("Node {}", self.node)))
            },
        )?;
        let binding_version = binding.and_then(|b| b.metadata.resource_version);
        if binding_version != self.binding_version || node.is_some() != self.node_exists {
            return Err(Error::Changed {
                csr: self.csr.to_string(),
                node: self.node.to_string(),
            });
        }
        Ok(())
    }
}

/// Denies the CSR (P1 (hidden flavor), P4 (rejection that ends)). The token's fate is
/// settled first, the CSR's Denied condition last: a decided CSR is never looked at again,
/// so whatever must follow a denial has to happen before it. A crash in between leaves the
/// CSR pending, and the next run denies it again, counting that denial a second time: the
/// limit errs towards ending the token, and no denial goes uncounted.
async fn deny(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    facts: &CsrFactsRead,
    cause: DenyCause,
    fate: TokenFate,
) -> Result<(), Error> {
    let deleted = settle_token(ctx, facts, cause, fate).await?;
    // The cause goes to the trail before the CSR is decided (a crash before the condition
    // only records it twice).
    ctx.may_write(Step::Denied)?;
    record_denial(ctx, csr, facts, cause, deleted).await;
    let denial = async {
        write_condition(ctx, csr, DENIED_CONDITION).await?;
        ctx.metrics.decision("denied", cause.as_str());
        Ok(())
    };
    ctx.write(&facts.csr.name, Step::Denied, denial).await
}

/// The denial's admin trail: a log line and an Event carry the exact cause, which never
/// goes on the CSR (P1 (hidden flavor)).
async fn record_denial(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    facts: &CsrFactsRead,
    cause: DenyCause,
    deleted: bool,
) {
    let name = facts.csr.name.as_str();
    let description = policy::describe(cause, facts);
    let token_id = facts.csr.bootstrap_token_id().unwrap_or("-");
    let node = facts.parsed.as_ref().map_or("-", |p| p.node_name.as_str());
    let cause = cause.as_str();
    tracing::info!(csr = %name, node, token = token_id, cause, token_deleted = deleted, "denied: {description}");
    let deleted = if deleted {
        "; the token Secret was deleted"
    } else {
        ""
    };
    let regarding = Regarding {
        api_version: "certificates.k8s.io/v1",
        kind: "CertificateSigningRequest",
        name,
        uid: csr.metadata.uid.as_deref(),
    };
    let note = format!(
        "denied CSR {name} for node {node} (token {token_id}): {cause}: {description}{deleted}"
    );
    trail::record(ctx, regarding, "Warning", "Deny", "CSRDenied", &note).await;
}

/// How often settling a token is tried again after losing a resourceVersion race.
const SETTLE_ATTEMPTS: usize = 16;

/// Carries out a denial's fate for the token (P4 (rejection that ends)): delete it, or
/// raise its denial count with a resourceVersion precondition. The Secret the decision read
/// may be stale by now: other CSRs of the same token (a kubelet files a new CSR on every
/// retry, and CSRs are decided concurrently) were denied or reserved a use in between. A
/// 409 then means "read the current Secret and let core judge its fate again": the count
/// is raised from the current value, and the limit is judged on it, so a burst of denials
/// ends the token at the limit and no count is lost. A token deleted or re-created under
/// the same name (other uid) meanwhile is left alone. Returns whether the token was
/// deleted.
async fn settle_token(
    ctx: &Context,
    facts: &CsrFactsRead,
    cause: DenyCause,
    fate: TokenFate,
) -> Result<bool, Error> {
    let Some(mut secret) = facts.token_secret.clone() else {
        return Ok(false);
    };
    let mut fate = fate;
    for _ in 0..SETTLE_ATTEMPTS {
        let Some(write) = TokenWrite::of(&secret, fate) else {
            return Ok(false);
        };
        let deleted = matches!(write, TokenWrite::Delete { .. });
        match ctx
            .write(&facts.csr.name, write.step(), write.send(ctx))
            .await
        {
            Ok(()) => return Ok(deleted),
            Err(e) if e.is_not_found() => return Ok(false),
            // A delete's uid precondition failing is a 409 too: a new token of that name.
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(e),
        }
        let Some(fresh) = reread(ctx, &secret).await? else {
            return Ok(false);
        };
        tracing::debug!(token = ?fresh.metadata.name, "token changed since it was read; settling the denial on the current copy");
        fate = policy::current_token_fate(&fresh, cause, &ctx.opts);
        secret = fresh;
    }
    Err(Error::Changed {
        csr: facts.csr.name.clone(),
        node: "-".to_string(),
    })
}

/// The write that carries out a token fate.
enum TokenWrite {
    /// Delete the Secret, with a uid precondition: never a token re-created under the
    /// same name.
    Delete { name: String, uid: Option<String> },
    /// PUT the Secret with its denial count raised (resourceVersion precondition).
    Count(Box<Secret>),
}

impl TokenWrite {
    fn of(secret: &Secret, fate: TokenFate) -> Option<TokenWrite> {
        match fate {
            TokenFate::Keep => None,
            TokenFate::Delete => Some(TokenWrite::Delete {
                name: secret.metadata.name.clone().unwrap_or_default(),
                uid: secret.metadata.uid.clone(),
            }),
            TokenFate::Count => policy::with_denial(secret).map(|s| TokenWrite::Count(Box::new(s))),
        }
    }

    fn step(&self) -> Step {
        match self {
            TokenWrite::Delete { .. } => Step::TokenDeleted,
            TokenWrite::Count(_) => Step::DenialCounted,
        }
    }

    async fn send(&self, ctx: &Context) -> Result<(), Error> {
        let secrets = Api::<Secret>::namespaced(ctx.client.clone(), TOKEN_NAMESPACE);
        let (name, written) = match self {
            TokenWrite::Delete { name, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                (name.clone(), secrets.delete(name, &dp).await.map(|_| ()))
            }
            TokenWrite::Count(secret) => {
                let name = secret.metadata.name.clone().unwrap_or_default();
                let put = secrets.replace(&name, &PostParams::default(), secret).await;
                (name, put.map(|_| ()))
            }
        };
        written.map_err(|source| Error::TokenAfterDenial {
            token: name,
            source,
        })?;
        if let TokenWrite::Delete { .. } = self {
            ctx.metrics.tokens_deleted.inc();
        }
        Ok(())
    }
}

/// The token Secret as it is now, if it is still the one that was read (same uid).
async fn reread(ctx: &Context, secret: &Secret) -> Result<Option<Secret>, Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let fresh = Api::<Secret>::namespaced(ctx.client.clone(), TOKEN_NAMESPACE)
        .get_opt(&name)
        .await
        .map_err(|source| Error::TokenAfterDenial {
            token: name.clone(),
            source,
        })?;
    Ok(fresh.filter(|s| s.metadata.uid == secret.metadata.uid))
}

/// PUT `/approval` with the whole object and one condition: core's, the same for every
/// approval or every denial (P1 (hidden flavor)). The resourceVersion of the object read
/// guards it; Approved and Denied are permanent.
async fn write_condition(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    condition: CsrCondition,
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
    Api::<CertificateSigningRequest>::all(ctx.client.clone())
        .replace_subresource("approval", &name, &PostParams::default(), &updated)
        .await
        .map(|_| ())
        .map_err(|source| Error::Decide { csr: name, source })
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
