//! The kubelet client CSRs' entry of the CSR loop ([`ClientCsrs`]).
//!
//! Core decides everything: approve (with the writes that come first), deny (with the
//! token's fate) or ignore. This entry only reads the facts (`facts`) and makes the writes
//! before the condition (`approve`, `deny`).
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

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use kubeflavor_cluster::token_secrets;
use kubeflavor_core::approval::client::{
    BindingStep, CsrCondition, Decision, decide as core_decide,
};
use kubeflavor_core::csr::client::{CsrError, KubeletClientCsr};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::TokenId;

use super::facts::{self, CsrFactsRead, CsrView};
use super::{Outcome, Signer, approve, deny};
use crate::controller::metrics::Metrics;
use crate::controller::{Context, Error, KUBELET_CLIENT_SIGNER, Options};

/// Kubelet client CSRs (`kubernetes.io/kube-apiserver-client-kubelet`), decided by core's
/// [`core_decide`].
pub struct ClientCsrs;

impl Signer for ClientCsrs {
    const SIGNER: &'static str = KUBELET_CLIENT_SIGNER;
    const LOOP: &'static str = "csr";
    const LOG: &'static str = "csr loop";
    const IGNORED: &'static str = "not kubeflavor's to decide";
    const DECISIONS: fn(&Metrics, &str, &str) = Metrics::decision;

    type Subject = (CsrView, Result<KubeletClientCsr, CsrError>);
    type Facts = CsrFactsRead;
    type Decision = Decision;

    /// Routed after its turn: the node name a client CSR asks for is in its request.
    fn subject(cached: &CertificateSigningRequest, opts: &Options) -> Option<Self::Subject> {
        let view = CsrView::from_object(&mut cached.clone());
        let parsed = view.validate();
        served(opts, &view, &parsed).then_some((view, parsed))
    }

    async fn read(ctx: &Context, (view, parsed): Self::Subject) -> Result<CsrFactsRead, Error> {
        facts::gather(ctx, view, parsed).await
    }

    fn decide(facts: &CsrFactsRead, opts: &Options, now: jiff::Timestamp) -> Decision {
        core_decide(&facts.core_facts(opts, now))
    }

    fn outcome(decision: &Decision) -> Outcome<'_> {
        match decision {
            Decision::Ignore(why) => Outcome::Ignore(why.as_str()),
            Decision::Approve { .. } => Outcome::Approve,
            Decision::Deny { .. } => Outcome::Deny,
        }
    }

    fn condition(decision: &Decision) -> Option<CsrCondition> {
        decision.condition()
    }

    async fn prepare(
        ctx: &Context,
        csr: &CertificateSigningRequest,
        facts: &CsrFactsRead,
        decision: &Decision,
        now: jiff::Timestamp,
    ) -> Result<(), Error> {
        match decision {
            Decision::Ignore(_) => Ok(()),
            Decision::Approve { node, binding } => {
                approve::prepare(ctx, facts, node, binding, now).await
            }
            Decision::Deny { cause, token_fate } => {
                deny::prepare(ctx, csr, facts, *cause, *token_fate).await
            }
        }
    }

    fn record(ctx: &Context, csr: &str, decision: &Decision) {
        record_decision(ctx, csr, decision)
    }

    /// A token Secret that changes (created late in a cache, a use released, deleted) may
    /// change the fate of CSRs still pending from that token: decide them again.
    fn more_triggers(
        controller: Controller<CertificateSigningRequest>,
        store: Store<CertificateSigningRequest>,
        ctx: &Arc<Context>,
    ) -> Controller<CertificateSigningRequest> {
        let secrets = token_secrets::api(&ctx.client);
        let token_events = watcher(
            secrets,
            watcher::Config::default().fields(&token_secrets::type_selector()),
        )
        .default_backoff()
        .touched_objects();
        let own = ctx.clone();
        controller.watches_stream(token_events, move |secret: Secret| {
            let own_write = own.own_token_writes.seen(&secret);
            pending_csrs_of_token(&store, &secret)
                .into_iter()
                .filter(|csr| own_write.as_deref() != Some(csr.name.as_str()))
                .collect::<Vec<_>>()
        })
    }
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
    pub(super) fn wrote(&self, secret: &Secret, csr: &str) {
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

/// Whether this controller serves the node name the CSR asks for, or else the node that
/// asks (`Options::scope`). A CSR that names no node is served by unscoped controllers only.
fn served(
    opts: &Options,
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
