//! The CSR loop: gather facts -> decide (core) -> apply, for kubelet client CSRs.
//!
//! Apply order for an approval (P3, P6): reserve a use on the token Secret (PUT with the
//! resourceVersion read), create the FlavorBinding, approve. Each step is visible in API
//! state, and the next reconcile re-reads it: a name already in `bound-nodes` is not
//! reserved twice, an existing binding to the same token is not created twice. So a crash
//! between two steps is finished by the next run, and a lost race (409) is decided again.
//!
//! Denials (P1, P4): one generic reason/message on the CSR; the cause goes to the trail.
//! When core says the token must go, the Secret is deleted BEFORE the denial is written so
//! a crash in between still ends with the token gone (the retry then finds it missing).

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
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};

use super::cache;
use super::facts::{self, CsrFactsRead};
use super::metrics::Metrics;
use super::policy::{self, TokenFate, Verdict};
use super::trail::{self, Regarding};
use super::{Context, Error, KUBELET_CLIENT_SIGNER, Step, Stop, TOKEN_NAMESPACE};
use crate::crd::FlavorBinding;
use kubeflavor_core::policy::DenyCause;

/// Runs the CSR loop until `until` resolves.
pub async fn run(ctx: Arc<Context>, until: Stop) {
    let csrs: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    // Server-side filter: only kubelet client CSRs reach this controller (spec section 4).
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
    let controller = controller.watches_stream(token_events, move |secret: Secret| {
        let Some(user) = secret
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix("bootstrap-token-"))
            .map(|id| format!("{}{id}", facts::BOOTSTRAP_USER_PREFIX))
        else {
            return Vec::new();
        };
        store
            .state()
            .into_iter()
            .filter(|csr| csr.spec.username.as_ref() == Some(&user) && !facts::is_decided(csr))
            .map(|csr| ObjectRef::from_obj(&*csr))
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
    let _turn = ctx.csr_turns.take().await;
    if ctx.may_write(Step::Reserved).is_err() {
        // The term ended while this reconcile waited: the next leader decides.
        return Ok(Action::await_change());
    }
    // Boxed: while it waits for its turn, a reconcile holds a few words, not room for
    // every API call below.
    Box::pin(decide(
        cached.metadata.name.clone().unwrap_or_default(),
        &ctx,
    ))
    .await
}

/// Reads the CSR and its facts, decides, and writes the decision.
async fn decide(name: String, ctx: &Context) -> Result<Action, Error> {
    // The cache may lag our own approval (a re-run queued while it was written): read the
    // CSR itself, so a decided CSR is never decided twice and the /approval PUT carries a
    // current resourceVersion.
    let csr = match Api::<CertificateSigningRequest>::all(ctx.client.clone())
        .get_opt(&name)
        .await
        .map_err(|source| Error::Read {
            what: format!("CertificateSigningRequest {name}"),
            source,
        })? {
        Some(csr) => csr,
        None => return Ok(Action::await_change()),
    };
    if facts::is_decided(&csr) {
        return Ok(Action::await_change());
    }
    let _timer = Metrics::measure(&ctx.metrics.decision_duration);
    let view = facts::CsrView::from_object(&csr);
    if !served(&ctx.opts, &view) {
        return Ok(Action::await_change());
    }
    let parsed = policy::validate(&view);
    let node = parsed
        .as_ref()
        .ok()
        .map(|p| p.node_name.as_str().to_string());
    let facts = facts::gather(ctx, view, node.as_deref(), policy::token_flavor).await?;
    let verdict = policy::decide(&facts, &ctx.opts, jiff::Timestamp::now());
    match verdict {
        Verdict::Ignore { why } => {
            tracing::debug!(csr = %name, why, "not kubeflavor's to decide");
            ctx.metrics.decision("ignored", why);
        }
        Verdict::Approve {
            node,
            flavor,
            token_id,
            reserve,
            binding,
        } => {
            let last_look = LastLook {
                node: node.as_str(),
                csr: &name,
                binding_version: facts
                    .binding
                    .as_ref()
                    .and_then(|b| b.metadata.resource_version.clone()),
                node_exists: facts.node_exists,
            };
            let approval = Approval {
                node: node.as_str(),
                flavor: &flavor,
                token_id: &token_id,
                reserve,
                binding,
                last_look,
            };
            approve(ctx, &csr, approval).await?;
        }
        Verdict::Deny {
            cause,
            description,
            token,
        } => {
            let deny = Denial {
                node: node.as_deref(),
                cause,
                description: &description,
                token,
            };
            deny_csr(ctx, &csr, &facts, deny).await?;
        }
    }
    Ok(Action::await_change())
}

/// Whether this controller serves the node name the CSR asks for, or else the node that
/// asks (`Options::scope`). A CSR that names no node is served by unscoped controllers only.
fn served(opts: &super::Options, view: &facts::CsrView) -> bool {
    if opts.scope.is_none() {
        return true;
    }
    kubeflavor_core::csr::requested_node_name(&view.request)
        .or_else(|| {
            view.username
                .strip_prefix(facts::NODE_USER_PREFIX)
                .map(str::to_owned)
        })
        .is_some_and(|name| opts.serves(&name))
}

/// The writes of one approval, in order: reserve a use, bind, last look, approve.
struct Approval<'a> {
    node: &'a str,
    flavor: &'a str,
    token_id: &'a str,
    reserve: Option<Secret>,
    binding: Option<Box<FlavorBinding>>,
    last_look: LastLook<'a>,
}

async fn approve(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    approval: Approval<'_>,
) -> Result<(), Error> {
    let Approval {
        node,
        flavor,
        token_id,
        reserve,
        binding,
        mut last_look,
    } = approval;
    let name = csr.metadata.name.clone().unwrap_or_default();
    let reserved = reserve.is_some();
    if let Some(updated) = reserve {
        ctx.may_write(Step::Reserved)?;
        let secret_name = updated.metadata.name.clone().unwrap_or_default();
        // The resourceVersion of the read is in `updated`: a concurrent reservation of the
        // same token makes this a 409 and the CSR is decided again with the new count.
        Api::<Secret>::namespaced(ctx.client.clone(), TOKEN_NAMESPACE)
            .replace(&secret_name, &PostParams::default(), &updated)
            .await
            .map_err(|source| Error::Reserve {
                token: token_id.to_string(),
                node: node.to_string(),
                source,
            })?;
        ctx.step(&name, Step::Reserved)?;
    }
    if let Some(binding) = binding {
        ctx.may_write(Step::Bound)?;
        // AlreadyExists: someone bound the name since we read. It counts as a conflict:
        // the CSR is decided again with that binding in the facts (same token: idempotent
        // approval; another token: denial).
        let created = Api::<FlavorBinding>::all(ctx.client.clone())
            .create(&PostParams::default(), &*binding)
            .await
            .map_err(|source| Error::Bind {
                node: node.to_string(),
                source,
            })?;
        last_look.binding_version = created.metadata.resource_version;
        ctx.step(&name, Step::Bound)?;
    }
    ctx.may_write(Step::Approved)?;
    last_look.check(ctx).await?;
    write_condition(
        ctx,
        csr,
        "Approved",
        policy::APPROVED_REASON,
        policy::APPROVED_MESSAGE,
    )
    .await?;
    ctx.metrics.decision("approved", "ok");
    tracing::info!(csr = %name, node, flavor, token = token_id, reserved, "approved");
    ctx.step(&name, Step::Approved)?;
    Ok(())
}

/// What an approval rests on, read once more right before the approval is written: the
/// facts were read before the reservation and the binding, and under load a CSR can wait
/// a while between the two. If the binding changed since (revoked, re-made, another
/// token's) or the Node of the name appeared or went, the CSR goes back to be decided
/// again from fresh facts: core decides, this only notices the change (P3, and "a revoked
/// binding never leads to an approval"). What happens after this read happens to a joined
/// node: a revocation then removes the flavor and taints the Node, as for any joined node.
struct LastLook<'a> {
    node: &'a str,
    csr: &'a str,
    /// The binding's resourceVersion as read, or as this reconcile created it.
    binding_version: Option<String>,
    node_exists: bool,
}

impl LastLook<'_> {
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

/// The writes of one denial.
struct Denial<'a> {
    node: Option<&'a str>,
    cause: DenyCause,
    description: &'a str,
    token: TokenFate,
}

/// Denies the CSR (P1, P4). The token's fate is settled first, the CSR's Denied condition
/// last: a decided CSR is never looked at again, so whatever must follow a denial has to
/// happen before it. A crash in between leaves the CSR pending, and the next run denies it
/// again, counting that denial a second time: the limit errs towards ending the token,
/// and no denial goes uncounted.
async fn deny_csr(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    facts: &CsrFactsRead,
    d: Denial<'_>,
) -> Result<(), Error> {
    let name = &facts.csr.name;
    let cause = d.cause.as_str();
    let deleted = settle_token(ctx, name, d.cause, d.token).await?;
    // The cause goes to the trail before the CSR is decided (a crash before the condition
    // only records it twice).
    ctx.may_write(Step::Denied)?;
    let token_id = facts.csr.bootstrap_token_id().unwrap_or("-");
    let node = d.node.unwrap_or("-");
    tracing::info!(csr = %name, node, token = token_id, cause, token_deleted = deleted, "denied: {}", d.description);
    trail::record(
        ctx,
        Regarding {
            api_version: "certificates.k8s.io/v1",
            kind: "CertificateSigningRequest",
            name,
            uid: csr.metadata.uid.as_deref(),
        },
        "Warning",
        "Deny",
        "CSRDenied",
        &format!(
            "denied CSR {name} for node {node} (token {token_id}): {cause}: {}{}",
            d.description,
            if deleted {
                "; the token Secret was deleted"
            } else {
                ""
            }
        ),
    )
    .await;
    ctx.may_write(Step::Denied)?;
    write_condition(
        ctx,
        csr,
        "Denied",
        policy::DENIED_REASON,
        policy::DENIED_MESSAGE,
    )
    .await?;
    ctx.metrics.decision("denied", cause);
    ctx.step(name, Step::Denied)?;
    Ok(())
}

/// How often settling a token is tried again after losing a resourceVersion race.
const SETTLE_ATTEMPTS: usize = 16;

/// Carries out a denial's fate for the token (P4): delete it, or raise its denial count
/// with a resourceVersion precondition. The Secret the decision read may be stale by now:
/// other CSRs of the same token (a kubelet files a new CSR on every retry, and CSRs are
/// decided concurrently) were denied or reserved a use in between. A 409 then means
/// "read the current Secret and decide its fate again": the count is raised from the
/// current value, and the limit is judged on it, so a burst of denials ends the token at
/// the limit and no count is lost. A token deleted or re-created under the same name
/// (other uid) meanwhile is left alone. Returns whether the token was deleted.
async fn settle_token(
    ctx: &Context,
    csr: &str,
    cause: DenyCause,
    fate: TokenFate,
) -> Result<bool, Error> {
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), TOKEN_NAMESPACE);
    let mut fate = fate;
    for _ in 0..SETTLE_ATTEMPTS {
        let (secret, step) = match &fate {
            TokenFate::Keep => return Ok(false),
            TokenFate::Delete(s) => (s, Step::TokenDeleted),
            TokenFate::Count(s) => (s, Step::DenialCounted),
        };
        let secret_name = secret.metadata.name.clone().unwrap_or_default();
        let uid = secret.metadata.uid.clone();
        let failed = |source| Error::TokenAfterDenial {
            token: secret_name.clone(),
            source,
        };
        ctx.may_write(step)?;
        let written = match &fate {
            TokenFate::Delete(_) => {
                // The uid precondition: never delete a token re-created under the same name.
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                secrets.delete(&secret_name, &dp).await.map(|_| ())
            }
            _ => secrets
                .replace(&secret_name, &PostParams::default(), secret)
                .await
                .map(|_| ()),
        };
        match written {
            Ok(()) => {
                if step == Step::TokenDeleted {
                    ctx.metrics.tokens_deleted.inc();
                }
                ctx.step(csr, step)?;
                return Ok(step == Step::TokenDeleted);
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(false),
            // A delete's uid precondition failing is a 409 too: a new token of that name.
            Err(kube::Error::Api(s)) if s.is_conflict() => {}
            Err(source) => return Err(failed(source)),
        }
        let fresh = secrets.get_opt(&secret_name).await.map_err(failed)?;
        let Some(fresh) = fresh.filter(|s| s.metadata.uid == uid) else {
            return Ok(false);
        };
        tracing::debug!(token = %secret_name, "token changed since it was read; settling the denial on the current copy");
        fate = policy::token_fate(Some(&fresh), cause, ctx.opts.denial_limit);
    }
    Err(Error::Changed {
        csr: csr.to_string(),
        node: "-".to_string(),
    })
}

/// PUT `/approval` with the whole object and one condition (spec section 4). The
/// resourceVersion of the object read guards it; Approved and Denied are permanent.
async fn write_condition(
    ctx: &Context,
    csr: &CertificateSigningRequest,
    type_: &str,
    reason: &str,
    message: &str,
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
            type_: type_.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..CertificateSigningRequestCondition::default()
        });
    Api::<CertificateSigningRequest>::all(ctx.client.clone())
        .replace_subresource("approval", &name, &PostParams::default(), &updated)
        .await
        .map(|_| ())
        .map_err(|source| Error::Decide { csr: name, source })
}
