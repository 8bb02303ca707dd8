//! The "dereference" stage: read everything a CSR decision depends on.
//!
//! A decision that approves must never rest on a stale cache: a watch cache that has not
//! yet seen a Node or a FlavorBinding would let a token take over an existing name (P3,
//! binding).
//! So the facts of a pending CSR are read straight from the API server (GETs), and the
//! writes that follow are guarded by resourceVersion / AlreadyExists, so a fact that
//! changes between read and write makes the write fail and the CSR is decided again.
//!
//! What was read is then handed to core as its [`CsrFacts`]; core decides.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Secret;

use kubeflavor_cluster::crd::{Flavor, FlavorBinding, NewBinding, rules_from_flavor};
use kubeflavor_cluster::{bindings, csrs, flavors, nodes, token_secrets};
use kubeflavor_core::approval::client::{
    APPROVED_CONDITION, CsrFacts, DENIED_CONDITION, DenyCause, TokenLookup,
};
use kubeflavor_core::csr::client::{CsrError, KubeletClientCsr, validate_kubelet_client_csr};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::flavor::input_labels::InputLabels;
use kubeflavor_core::flavor::token_limits::TokenLimits;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::TokenId;
use kubeflavor_core::token::meta::Custody;

use super::super::{Context, Error, Options, TOKEN_NAMESPACE};

/// Node identities (renewals) are `system:node:<name>`.
pub use kubeflavor_core::csr::client::NODE_USER_PREFIX;
/// Bootstrap token identities are `system:bootstrap:<token-id>`.
pub use kubeflavor_core::token::BOOTSTRAP_USER_PREFIX;

/// The CSR fields a decision reads, copied out of the object.
#[derive(Clone, Debug)]
pub struct CsrView {
    pub name: String,
    pub signer_name: String,
    pub usages: Vec<String>,
    pub username: String,
    pub groups: Vec<String>,
    /// The PEM bytes of `spec.request` (base64 is undone by k8s-openapi's ByteString).
    pub request: Vec<u8>,
    /// Already Approved or Denied: both are permanent, nothing left to decide.
    pub decided: bool,
}

/// Already Approved or Denied: both are permanent, nothing left to decide.
pub fn is_decided(csr: &CertificateSigningRequest) -> bool {
    csrs::has_condition(csr, APPROVED_CONDITION.type_)
        || csrs::has_condition(csr, DENIED_CONDITION.type_)
}

impl CsrView {
    /// The request bytes are moved out of `csr`, not copied, so even a CSR at the API
    /// server's own size limit is held once. The object still serves for the /approval
    /// PUT: that subresource keeps the stored spec whatever the body says.
    pub fn from_object(csr: &mut CertificateSigningRequest) -> Self {
        let decided = is_decided(csr);
        CsrView {
            name: csr.metadata.name.clone().unwrap_or_default(),
            signer_name: csr.spec.signer_name.clone(),
            usages: csr.spec.usages.clone().unwrap_or_default(),
            username: csr.spec.username.clone().unwrap_or_default(),
            groups: csr.spec.groups.clone().unwrap_or_default(),
            request: std::mem::take(&mut csr.spec.request.0),
            decided,
        }
    }

    /// The token id of a bootstrap requester.
    pub fn bootstrap_token_id(&self) -> Option<&str> {
        self.username.strip_prefix(BOOTSTRAP_USER_PREFIX)
    }

    /// The CSR validated as a kubelet client CSR by core, as Kubernetes' own
    /// `ValidateKubeletClientCSR` does. Done once per decision: the facts carry the result.
    pub fn validate(&self) -> Result<KubeletClientCsr, CsrError> {
        validate_kubelet_client_csr(&self.signer_name, &self.request, &self.usages)
    }
}

/// Everything read for one pending CSR.
#[derive(Clone, Debug)]
pub struct CsrFactsRead {
    pub csr: CsrView,
    /// The request validated as a kubelet client CSR (once per decision).
    pub parsed: Result<KubeletClientCsr, CsrError>,
    /// The token Secret of a bootstrap requester, as read (its resourceVersion guards the
    /// reservation write).
    pub token_secret: Option<Secret>,
    /// The Flavor the token names, if it exists.
    pub flavor: Option<Flavor>,
    /// The FlavorBinding named after the node name in the CSR's CN.
    pub binding: Option<FlavorBinding>,
    /// Whether a Node of that name exists.
    pub node_exists: bool,
}

fn read_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Read { what, source }
}

/// Reads, for the CSR seen as `view` and validated as `parsed`, the token Secret, its
/// Flavor, and the binding and Node of the node name the valid CSR asks for.
pub async fn gather(
    ctx: &Context,
    view: CsrView,
    parsed: Result<KubeletClientCsr, CsrError>,
) -> Result<CsrFactsRead, Error> {
    let node_name = parsed.as_ref().ok().map(|p| p.node_name.as_str());
    // The token (then its Flavor) and the name's binding and Node are independent reads:
    // issue them together so a decision waits for one round trip, not four.
    let ((token_secret, flavor), binding, node_exists) = tokio::try_join!(
        read_token_and_flavor(ctx, view.bootstrap_token_id()),
        read_binding(ctx, node_name),
        node_exists(ctx, node_name),
    )?;
    Ok(CsrFactsRead {
        csr: view,
        parsed,
        token_secret,
        flavor,
        binding,
        node_exists,
    })
}

/// The token Secret of a bootstrap requester (token id `id`), and the Flavor it names.
async fn read_token_and_flavor(
    ctx: &Context,
    id: Option<&str>,
) -> Result<(Option<Secret>, Option<Flavor>), Error> {
    let token_secret = match id {
        Some(id) => token_secrets::get(&ctx.client, id)
            .await
            .map_err(read_err(format!(
                "Secret {TOKEN_NAMESPACE}/{}",
                token_secrets::name_of(id)
            )))?,
        None => None,
    };
    let flavor = match token_secret.as_ref().and_then(token_secrets::flavor_of) {
        Some(name) => flavors::get(&ctx.client, name).await?,
        None => None,
    };
    Ok((token_secret, flavor))
}

/// The CSR `name` as the API server has it now, if it exists.
pub async fn read_csr(
    ctx: &Context,
    name: &str,
) -> Result<Option<CertificateSigningRequest>, Error> {
    Ok(csrs::get(&ctx.client, name).await?)
}

/// The FlavorBinding of the node name, if the CSR names one.
async fn read_binding(ctx: &Context, node: Option<&str>) -> Result<Option<FlavorBinding>, Error> {
    let Some(node) = node else { return Ok(None) };
    Ok(bindings::get(&ctx.client, node).await?)
}

/// Whether a Node of the node name exists (a metadata-only read).
async fn node_exists(ctx: &Context, node: Option<&str>) -> Result<bool, Error> {
    let Some(node) = node else { return Ok(false) };
    Ok(nodes::get_metadata(&ctx.client, node).await?.is_some())
}

impl CsrFactsRead {
    /// Core's facts for this CSR.
    pub fn core_facts(&self, opts: &Options, now: jiff::Timestamp) -> CsrFacts {
        let token = match &self.token_secret {
            None => TokenLookup::Missing,
            Some(s) => match token_secrets::record(s) {
                Ok(r) => TokenLookup::Found(r),
                Err(e) => TokenLookup::Unreadable(e),
            },
        };
        let flavor_rules = self
            .flavor
            .as_ref()
            .and_then(|f| rules_from_flavor(f).ok())
            .map(|(_, rules)| rules);
        CsrFacts {
            csr_name: self.csr.name.clone(),
            signer_name: self.csr.signer_name.clone(),
            requester_username: self.csr.username.clone(),
            requester_groups: self.csr.groups.clone(),
            csr: self.parsed.clone(),
            already_decided: self.csr.decided,
            token,
            token_instance: self
                .token_secret
                .as_ref()
                .and_then(token_secrets::instance_of),
            flavor_exists: self.flavor.is_some(),
            flavor_input_labels: flavor_rules
                .as_ref()
                .map(|rules| rules.input_labels().clone())
                .unwrap_or_default(),
            // An unreadable Flavor gives the stingiest limits (24h, 1 node), never none.
            flavor_token_limits: flavor_rules
                .as_ref()
                .map(|rules| rules.effective_token_limits())
                .unwrap_or_else(|| TokenLimits::default().effective(None, None)),
            binding: self.binding.as_ref().map(FlavorBinding::policy_facts),
            node_exists: self.node_exists,
            options: opts.policy(),
            now,
        }
    }

    /// The binding of `node` to `token` with `flavor` (core's `BindingStep::Create`) that an
    /// approval of this CSR creates first, recording the token's `custody` and
    /// `input_labels`.
    pub fn new_binding(
        &self,
        node: &NodeName,
        token: &TokenId,
        flavor: &FlavorName,
        custody: &Custody,
        input_labels: &InputLabels,
        now: jiff::Timestamp,
    ) -> FlavorBinding {
        let new = NewBinding {
            node,
            token,
            token_uid: self
                .token_secret
                .as_ref()
                .and_then(|s| s.metadata.uid.clone()),
            flavor,
            csr_name: &self.csr.name,
            public_key_sha256: self
                .parsed
                .as_ref()
                .map(KubeletClientCsr::public_key_sha256_hex)
                .unwrap_or_default(),
            custody,
            input_labels,
        };
        FlavorBinding::for_approval(new, now)
    }

    /// Core's description of the cause plus the particulars, for the admin trail only.
    pub fn describe(&self, cause: DenyCause) -> String {
        let node = self
            .parsed
            .as_ref()
            .map(|c| c.node_name.to_string())
            .unwrap_or_else(|e| format!("? ({e})"));
        format!(
            "{} (requester {}, node {node})",
            cause.description(),
            self.csr.username
        )
    }
}
