//! The CSR policy: `decide(&CsrFacts) -> Decision`, a plain function over plain facts the
//! controller gathers for one CSR. The decision is complete: which node, which token and
//! flavor, which writes come before an approval, what a denial does to the token. The
//! controller only turns it into API objects.
//!
//! - P1 (hidden flavor): the condition written on a CSR ([`Decision::condition`]) is one of
//!   two constants, whatever the flavor or the cause; the cause goes only to the admin
//!   trail ([`DenyCause::as_str`], [`DenyCause::description`]).
//! - P3 (binding): a node name binds to one token; a name bound to another token, or the
//!   name of an existing Node with no binding to this token, is denied (no takeover); a
//!   token binds at most `max_nodes` distinct names; a retry of the same token for the same
//!   name uses nothing twice.
//! - P4 (rejection that ends): a denial's [`TokenFate`] ([`token_fate`]) deletes the token
//!   when the kubelet must stop retrying.

use std::fmt;
use std::num::NonZeroU32;

use jiff::Timestamp;

use crate::csr::client::{CsrError, KUBELET_CLIENT_SIGNER, KubeletClientCsr, NODE_USER_PREFIX};
use crate::flavor::input_labels::{InputLabelRules, InputLabels};
use crate::flavor::token_limits::EffectiveLimits;
use crate::flavor::{FlavorName, TokenTtl};
use crate::names::NodeName;
use crate::token::meta::{Custody, FlavorTokenMeta};
use crate::token::record::{AuthRejection, Expiration, TokenRecord, TokenRecordError};
use crate::token::secret::{CONTROL_PLANE_GROUP, NODE_GROUP};
use crate::token::{BOOTSTRAP_USER_PREFIX, TokenId};

/// Reason of every approval kubeflavor writes (P1, hidden flavor: the same for every flavor).
const APPROVAL_REASON: &str = "KubeflavorApproved";
/// Message of every approval kubeflavor writes (P1, hidden flavor).
const APPROVAL_MESSAGE: &str = "Approved by kubeflavor.";
/// Reason of every denial kubeflavor writes (P1, hidden flavor: the same for every flavor and
/// cause).
const DENIAL_REASON: &str = "KubeflavorDenied";
/// Message of every denial kubeflavor writes (P1, hidden flavor). The exact cause is in the admin
/// trail.
const DENIAL_MESSAGE: &str = "Denied by kubeflavor. Ask the cluster administrator.";

/// Switches of the controller that change decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyOptions {
    /// Deny kubelet client CSRs of bootstrap tokens that are not kubeflavor's, instead of
    /// leaving them to kube-controller-manager.
    pub strict: bool,
    /// Decide renewal CSRs (requester `system:node:<name>`).
    pub manage_renewals: bool,
    /// Denials of one kubeflavor token after which its Secret is deleted (P4 (rejection
    /// that ends)); `None`: no limit.
    pub denial_limit: Option<NonZeroU32>,
}

/// The FlavorBinding of the CSR's node name, as far as the policy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingFacts {
    /// `None` when the stored id is not a valid token id (the CRD's schema refuses those):
    /// such a binding belongs to no token.
    pub token_id: Option<TokenId>,
    /// The flavor the binding gave the name; `None` when it is not a valid flavor name (the
    /// schema refuses those too).
    pub flavor: Option<FlavorName>,
    /// The uid of the token Secret the name was bound to; `None` on bindings written
    /// before bindings recorded it.
    pub token_uid: Option<String>,
    /// When the binding was made (second precision).
    pub bound_at: Timestamp,
    pub revoked: bool,
    /// The CSR that created the binding: until it is approved, no Node of the name can be
    /// the token holder's.
    pub csr_name: String,
    /// Lowercase hex SHA-256 of the key the binding's CSR asked a certificate for. Any
    /// other bootstrap CSR for the name must carry the same key (P3: a join line found
    /// later cannot re-key a node).
    pub public_key_sha256: String,
}

/// What the controller found for the token named by the requester `system:bootstrap:<id>`.
// One lookup per CSR decision, held for that decision alone: its size costs nothing, and
// boxing the record would add an allocation to every decision.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenLookup {
    /// No Secret `kube-system/bootstrap-token-<id>` (deleted, expired and cleaned, never
    /// existed).
    Missing,
    /// The Secret exists but kubeflavor's metadata on it is malformed.
    Unreadable(TokenRecordError),
    Found(TokenRecord),
}

/// Which token Secret a token id names right now: ids are short and can be minted again
/// once a token is gone, so a binding belongs to a Secret, not to an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInstance {
    /// `metadata.uid` of the token Secret.
    pub uid: String,
    /// `metadata.creationTimestamp` (second precision).
    pub created: Option<Timestamp>,
}

/// Whether `binding` belongs to the token Secret `instance` of id `id`, not merely to a
/// token that once had the same id (P3, binding: a recycled id must never inherit names).
fn binding_is_this_token(
    binding: &BindingFacts,
    id: &TokenId,
    instance: Option<&TokenInstance>,
) -> bool {
    if binding.token_id.as_ref() != Some(id) {
        return false;
    }
    match (&binding.token_uid, instance) {
        (Some(uid), Some(token)) => *uid == token.uid,
        // A binding that predates recorded uids: only a token at least as old as the
        // binding can be the one it was made for (a re-minted id is newer).
        (None, Some(token)) => token.created.is_some_and(|c| c <= binding.bound_at),
        (_, None) => false,
    }
}

/// Everything `decide` looks at, gathered by the controller for one CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrFacts {
    /// `metadata.name` (admin trail; not used by the rules).
    pub csr_name: String,
    pub signer_name: String,
    /// `spec.username`, filled in by the API server from the requester's credentials.
    pub requester_username: String,
    /// `spec.groups`, filled in by the API server. Kubeflavor-ness comes from here, so a
    /// CSR is still recognised after its token Secret is gone.
    pub requester_groups: Vec<String>,
    /// The request validated as a kubelet client CSR.
    pub csr: Result<KubeletClientCsr, CsrError>,
    /// The CSR already has an Approved or Denied condition.
    pub already_decided: bool,
    pub token: TokenLookup,
    /// The token Secret's identity, when it was found.
    pub token_instance: Option<TokenInstance>,
    /// The token's Flavor object exists.
    pub flavor_exists: bool,
    /// The input labels the token's Flavor allows (its `spec.inputLabels`; none when the
    /// Flavor does not exist). The token's own are checked against them again before a
    /// binding is made: the Flavor, not whoever wrote the token Secret, has the last word.
    pub flavor_input_labels: InputLabelRules,
    /// The token limits the token's Flavor puts in force (its `tokenLimits`, the rest from
    /// its defaults; the stingiest limits, 24h and 1 node, when the Flavor cannot be read).
    /// The token is judged against them again before a binding is made: whoever wrote the
    /// token Secret (a stolen join-token API identity included) cannot give it more than
    /// the Flavor allows, unless an admin recorded an override on it.
    pub flavor_token_limits: EffectiveLimits,
    /// The FlavorBinding named after the CSR's node name, if any.
    pub binding: Option<BindingFacts>,
    /// A Node named after the CSR's node name exists.
    pub node_exists: bool,
    pub options: PolicyOptions,
    pub now: Timestamp,
}

/// Why a CSR is denied. Goes to the admin trail only, never on the CSR (P1, hidden flavor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DenyCause {
    MalformedCsr,
    NotKubeletClientShape,
    TokenMissing,
    TokenUnreadable,
    TokenExpired,
    TokenNotForAuthentication,
    FlavorMissing,
    TokenExhausted,
    NameBoundToOtherToken,
    NodeExistsWithoutBinding,
    BindingRevoked,
    RekeyAttempt,
    RenewalRequesterMismatch,
    NotKubeflavorToken,
    InputLabelsNotAllowed,
    TokenOverLimits,
}

impl DenyCause {
    /// Every cause, for metrics registration and exhaustive tests.
    pub const ALL: [DenyCause; 16] = [
        DenyCause::MalformedCsr,
        DenyCause::NotKubeletClientShape,
        DenyCause::TokenMissing,
        DenyCause::TokenUnreadable,
        DenyCause::TokenExpired,
        DenyCause::TokenNotForAuthentication,
        DenyCause::FlavorMissing,
        DenyCause::TokenExhausted,
        DenyCause::NameBoundToOtherToken,
        DenyCause::NodeExistsWithoutBinding,
        DenyCause::BindingRevoked,
        DenyCause::RekeyAttempt,
        DenyCause::RenewalRequesterMismatch,
        DenyCause::NotKubeflavorToken,
        DenyCause::InputLabelsNotAllowed,
        DenyCause::TokenOverLimits,
    ];

    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyCause::MalformedCsr => "malformed_csr",
            DenyCause::NotKubeletClientShape => "not_kubelet_client_shape",
            DenyCause::TokenMissing => "token_missing",
            DenyCause::TokenUnreadable => "token_unreadable",
            DenyCause::TokenExpired => "token_expired",
            DenyCause::TokenNotForAuthentication => "token_not_for_authentication",
            DenyCause::FlavorMissing => "flavor_missing",
            DenyCause::TokenExhausted => "token_exhausted",
            DenyCause::NameBoundToOtherToken => "name_bound_to_other_token",
            DenyCause::NodeExistsWithoutBinding => "node_exists_without_binding",
            DenyCause::BindingRevoked => "binding_revoked",
            DenyCause::RekeyAttempt => "rekey_attempt",
            DenyCause::RenewalRequesterMismatch => "renewal_requester_mismatch",
            DenyCause::NotKubeflavorToken => "not_kubeflavor_token",
            DenyCause::InputLabelsNotAllowed => "input_labels_not_allowed",
            DenyCause::TokenOverLimits => "token_over_limits",
        }
    }

    /// A sentence for the admin trail (Event, log).
    pub fn description(self) -> &'static str {
        match self {
            DenyCause::MalformedCsr => {
                "the CSR's request is not a readable, correctly signed PKCS#10 PEM block"
            }
            DenyCause::NotKubeletClientShape => {
                "the CSR is not a kubelet client CSR (organization, common name, SANs or usages are wrong)"
            }
            DenyCause::TokenMissing => {
                "the requester's bootstrap token Secret no longer exists or is being deleted"
            }
            DenyCause::TokenUnreadable => {
                "kubeflavor's labels or annotations on the token Secret are malformed"
            }
            DenyCause::TokenExpired => "the requester's bootstrap token has expired",
            DenyCause::TokenNotForAuthentication => {
                "the token Secret would not authenticate (usage, groups, type or id are wrong)"
            }
            DenyCause::FlavorMissing => {
                "the token has no flavor, or its Flavor object does not exist"
            }
            DenyCause::TokenExhausted => {
                "the token has already bound its maximum number of node names"
            }
            DenyCause::NameBoundToOtherToken => {
                "the node name is bound to a different token (name takeover attempt)"
            }
            DenyCause::NodeExistsWithoutBinding => {
                "a Node of that name exists without a binding to this token (name takeover attempt)"
            }
            DenyCause::BindingRevoked => "the node's binding is revoked or being deleted",
            DenyCause::RekeyAttempt => {
                "the node name is bound to this token with another key (attempted re-key of a joined node: a copy of its join line in other hands?)"
            }
            DenyCause::RenewalRequesterMismatch => {
                "a node asked for a certificate for another node's name"
            }
            DenyCause::NotKubeflavorToken => {
                "strict mode: the bootstrap token is not a kubeflavor token"
            }
            DenyCause::InputLabelsNotAllowed => {
                "the token's input labels are not ones its Flavor allows (spec.inputLabels changed since it was minted, or the token Secret was edited)"
            }
            DenyCause::TokenOverLimits => {
                "the token lives longer (expiration minus creation) or binds more nodes than its Flavor's tokenLimits allow, and no admin recorded an override (kubeflavor.io/limits-override); mint it again within the limits, or with token create --override-flavor-limits"
            }
        }
    }

    /// Whether this denial is about a readable kubeflavor token the requester holds, so
    /// that it is counted on the token (`kubeflavor.io/denials`) and may lead to its
    /// deletion. Not for a missing or unreadable token Secret, renewals (the requester is a
    /// node, not a token) or tokens that are not kubeflavor's.
    pub fn counts_against_token(self) -> bool {
        !matches!(
            self,
            DenyCause::TokenMissing
                | DenyCause::TokenUnreadable
                | DenyCause::RenewalRequesterMismatch
                | DenyCause::NotKubeflavorToken
        )
    }
}

impl fmt::Display for DenyCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a CSR is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IgnoreReason {
    /// Approved or Denied already; both are permanent.
    AlreadyDecided,
    /// Not `kubernetes.io/kube-apiserver-client-kubelet`.
    OtherSigner,
    /// A bootstrap token that is not kubeflavor's (left to kube-controller-manager).
    NotKubeflavorToken,
    /// A renewal, and `manage_renewals` is off.
    RenewalsNotManaged,
    /// Neither a bootstrap token nor a node identity asked.
    OtherRequester,
}

impl IgnoreReason {
    pub fn as_str(self) -> &'static str {
        match self {
            IgnoreReason::AlreadyDecided => "already_decided",
            IgnoreReason::OtherSigner => "other_signer",
            IgnoreReason::NotKubeflavorToken => "not_kubeflavor_token",
            IgnoreReason::RenewalsNotManaged => "renewals_not_managed",
            IgnoreReason::OtherRequester => "other_requester",
        }
    }
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do with a CSR, in full: the shell only turns it into API writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Approve the CSR for `node`, after the writes `binding` calls for: an approved
    /// kubeflavor CSR always has its binding first (P3 (binding), P6 (nothing lost)).
    Approve {
        node: NodeName,
        binding: BindingStep,
    },
    /// Deny the CSR. `token_fate` is what happens to the requester's token Secret first
    /// (P4 (rejection that ends)); `cause` goes to the admin trail only (P1 (hidden flavor)).
    Deny {
        cause: DenyCause,
        token_fate: TokenFate,
    },
    /// Not kubeflavor's to decide: write nothing.
    Ignore(IgnoreReason),
}

/// The binding writes that come before an approval, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingStep {
    /// The name is new to the token: reserve a use on the token Secret when `reserve_use`
    /// (it is false when the name is in the token's bound names already, because a crash
    /// came between the reservation and the binding), then create the FlavorBinding of the
    /// name to `token` with `flavor`, recording the token's `custody` (on whose behalf it
    /// was minted, and by whom) for the admins and its `input_labels` (what the node's
    /// administrator said, allowed by the Flavor) for the Node.
    Create {
        token: TokenId,
        flavor: FlavorName,
        reserve_use: bool,
        custody: Custody,
        input_labels: InputLabels,
    },
    /// Nothing to write first: the name is bound to this token already (a retry), or a
    /// node renews its certificate; the binding stays as it is, custody included. The
    /// binding's token and flavor are for the admin trail; `None` for a node kubeflavor
    /// never bound.
    Existing {
        token: Option<TokenId>,
        flavor: Option<FlavorName>,
    },
}

/// What a denial does to the requester's token Secret (P4 (rejection that ends)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFate {
    /// Nothing: not a readable kubeflavor token, or a cause that is not the token's.
    Keep,
    /// Raise the token's denial count by one.
    Count,
    /// Delete the token Secret, so the kubelet's retries end.
    Delete,
}

/// A CSR condition as written to `.../approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsrCondition {
    /// `Approved` or `Denied`.
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: &'static str,
}

/// The condition of every approval (P1 (hidden flavor)).
pub const APPROVED_CONDITION: CsrCondition = CsrCondition {
    type_: "Approved",
    reason: APPROVAL_REASON,
    message: APPROVAL_MESSAGE,
};
/// The condition of every denial (P1 (hidden flavor)).
pub const DENIED_CONDITION: CsrCondition = CsrCondition {
    type_: "Denied",
    reason: DENIAL_REASON,
    message: DENIAL_MESSAGE,
};

impl Decision {
    /// The condition to write on the CSR; `None` for `Ignore`. It depends on nothing but
    /// approve-or-deny (P1 (hidden flavor)): a bootstrap identity can read every CSR.
    pub fn condition(&self) -> Option<CsrCondition> {
        match self {
            Decision::Approve { .. } => Some(APPROVED_CONDITION),
            Decision::Deny { .. } => Some(DENIED_CONDITION),
            Decision::Ignore(_) => None,
        }
    }
}

/// Who filed a CSR, from its `spec.username` and `spec.groups`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requester {
    /// `system:bootstrap:<id>`; `kubeflavor` when the groups hold [`NODE_GROUP`] or
    /// [`CONTROL_PLANE_GROUP`] (a control-plane node's kubelet bootstraps too, by the same
    /// binding rules).
    Bootstrap {
        token_id: TokenId,
        kubeflavor: bool,
    },
    /// `system:node:<name>`: a kubelet renewing its certificate.
    Node {
        name: NodeName,
    },
    Other,
}

fn classify_requester(username: &str, groups: &[String]) -> Requester {
    if let Some(Ok(token_id)) = username
        .strip_prefix(BOOTSTRAP_USER_PREFIX)
        .map(str::parse::<TokenId>)
    {
        return Requester::Bootstrap {
            token_id,
            kubeflavor: groups
                .iter()
                .any(|g| g == NODE_GROUP || g == CONTROL_PLANE_GROUP),
        };
    }
    if let Some(Ok(name)) = username
        .strip_prefix(NODE_USER_PREFIX)
        .map(str::parse::<NodeName>)
    {
        return Requester::Node { name };
    }
    Requester::Other
}

fn shape_cause(e: &CsrError) -> DenyCause {
    if e.is_malformed() {
        DenyCause::MalformedCsr
    } else {
        DenyCause::NotKubeletClientShape
    }
}

/// The policy. Pure: same facts, same decision.
pub fn decide(f: &CsrFacts) -> Decision {
    match judge(f) {
        Ok(decision) => decision,
        Err(cause) => Decision::Deny {
            cause,
            token_fate: held_token_fate(f, cause),
        },
    }
}

/// The decision, or the cause of a denial.
fn judge(f: &CsrFacts) -> Result<Decision, DenyCause> {
    if f.already_decided {
        return Ok(Decision::Ignore(IgnoreReason::AlreadyDecided));
    }
    if f.signer_name != KUBELET_CLIENT_SIGNER {
        return Ok(Decision::Ignore(IgnoreReason::OtherSigner));
    }
    match classify_requester(&f.requester_username, &f.requester_groups) {
        Requester::Bootstrap {
            kubeflavor: false, ..
        } if f.options.strict => Err(DenyCause::NotKubeflavorToken),
        Requester::Bootstrap {
            kubeflavor: false, ..
        } => Ok(Decision::Ignore(IgnoreReason::NotKubeflavorToken)),
        Requester::Bootstrap {
            token_id,
            kubeflavor: true,
        } => decide_bootstrap(f, &token_id),
        Requester::Node { .. } if !f.options.manage_renewals => {
            Ok(Decision::Ignore(IgnoreReason::RenewalsNotManaged))
        }
        Requester::Node { name } => decide_renewal(f, &name),
        Requester::Other => Ok(Decision::Ignore(IgnoreReason::OtherRequester)),
    }
}

fn decide_bootstrap(f: &CsrFacts, token_id: &TokenId) -> Result<Decision, DenyCause> {
    let csr = f.csr.as_ref().map_err(shape_cause)?;
    let meta = usable_token(f, token_id)?;
    let node = csr.node_name.clone();
    // P3 (binding): the binding, not the token's list, is the source of truth for the name.
    if let Some(binding) = &f.binding {
        binding_admits(f, binding, token_id)?;
        // A retry of the same token for the same name: the use was reserved and the
        // binding written before the first approval, so nothing is spent again.
        let binding = BindingStep::Existing {
            token: binding.token_id.clone(),
            flavor: binding.flavor.clone(),
        };
        return Ok(Decision::Approve { node, binding });
    }
    // P3 (binding): no takeover of a Node that joined some other way (or whose binding
    // is gone).
    if f.node_exists {
        return Err(DenyCause::NodeExistsWithoutBinding);
    }
    // A name already in the token's list had its use reserved, and a crash came before
    // the binding was written (P6 (nothing lost)): finish without a second use.
    let reserve_use = !meta.bound_nodes.contains(&node);
    if reserve_use && !meta.has_room() {
        return Err(DenyCause::TokenExhausted);
    }
    if !f.flavor_input_labels.allows(&meta.input_labels) {
        return Err(DenyCause::InputLabelsNotAllowed);
    }
    if meta.limits_override.is_none() && !within_flavor_limits(f) {
        return Err(DenyCause::TokenOverLimits);
    }
    let binding = BindingStep::Create {
        token: token_id.clone(),
        flavor: meta.flavor.clone(),
        reserve_use,
        custody: meta.custody.clone(),
        input_labels: meta.input_labels.clone(),
    };
    Ok(Decision::Approve { node, binding })
}

/// The requester's token, if it would authenticate now and names an existing Flavor.
fn usable_token<'f>(f: &'f CsrFacts, token_id: &TokenId) -> Result<&'f FlavorTokenMeta, DenyCause> {
    let record = match &f.token {
        TokenLookup::Missing => return Err(DenyCause::TokenMissing),
        TokenLookup::Unreadable(_) => return Err(DenyCause::TokenUnreadable),
        TokenLookup::Found(r) if r.id != *token_id => return Err(DenyCause::TokenMissing),
        TokenLookup::Found(r) => r,
    };
    match record.authentication_at(f.now) {
        Ok(_) => {}
        Err(AuthRejection::BeingDeleted) => return Err(DenyCause::TokenMissing),
        Err(e) if e.is_expiry() => return Err(DenyCause::TokenExpired),
        Err(_) => return Err(DenyCause::TokenNotForAuthentication),
    }
    let meta = record.kubeflavor.as_ref().ok_or(DenyCause::FlavorMissing)?;
    if !f.flavor_exists {
        return Err(DenyCause::FlavorMissing);
    }
    Ok(meta)
}

/// How much longer than its Flavor's maximum TTL a token's expiration may be after its
/// Secret's creation: the minter computes the expiration from its own clock before the
/// API server stamps the creation with its own, so a token minted at the maximum by a
/// client whose clock runs ahead would otherwise be refused.
pub const CLOCK_SKEW_ALLOWANCE_SECS: u64 = 300;

/// Whether the requester's token keeps to its Flavor's token limits: its lifetime
/// (expiration minus the Secret's creation, less [`CLOCK_SKEW_ALLOWANCE_SECS`]) and its
/// max nodes, as `token create` and the join-token API check them when minting. A token
/// whose creation time is unknown is judged as if it lived forever.
fn within_flavor_limits(f: &CsrFacts) -> bool {
    let TokenLookup::Found(record) = &f.token else {
        return false;
    };
    let Some(meta) = &record.kubeflavor else {
        return false;
    };
    let created = f.token_instance.as_ref().and_then(|t| t.created);
    let ttl = match (&record.expiration, created) {
        (Expiration::At(at), Some(created)) => {
            let lived = at.as_second().saturating_sub(created.as_second());
            let lived = u64::try_from(lived).unwrap_or(0);
            TokenTtl::Seconds(lived.saturating_sub(CLOCK_SKEW_ALLOWANCE_SECS).max(1))
        }
        _ => TokenTtl::Never,
    };
    f.flavor_token_limits.check(ttl, meta.max_nodes).is_empty()
}

/// Whether the name's existing binding lets the requesting token have the name
/// (P3 (binding)).
fn binding_admits(
    f: &CsrFacts,
    binding: &BindingFacts,
    token_id: &TokenId,
) -> Result<(), DenyCause> {
    if !binding_is_this_token(binding, token_id, f.token_instance.as_ref()) {
        return Err(DenyCause::NameBoundToOtherToken);
    }
    if binding.revoked {
        return Err(DenyCause::BindingRevoked);
    }
    if binding.csr_name == f.csr_name {
        // The binding's own CSR is not approved yet, so a Node of the name cannot be the
        // token holder's: it joined some other way meanwhile (no takeover).
        if f.node_exists {
            return Err(DenyCause::NodeExistsWithoutBinding);
        }
        return Ok(());
    }
    // Another CSR of the same token for the bound name: a retry of the kubelet that holds
    // the bound key, or someone else holding a copy of the join line asking for a
    // certificate of their own for a node that joined. Only the key tells them apart, and
    // only the binding's own CSR may bring a new one: whether it is approved already or
    // about to be (its approval can be in flight while this CSR is decided), a second key
    // would give a second holder the node's identity.
    if !same_key(binding, f) {
        return Err(DenyCause::RekeyAttempt);
    }
    Ok(())
}

/// Whether the CSR asks for a certificate for the key the binding recorded.
fn same_key(binding: &BindingFacts, f: &CsrFacts) -> bool {
    f.csr
        .as_ref()
        .is_ok_and(|csr| csr.public_key_sha256_hex() == binding.public_key_sha256)
}

/// A node renewing its own client certificate. Nodes kubeflavor never bound (control-plane
/// nodes, nodes joined with kubeadm's tokens) renew as kube-controller-manager's
/// selfnodeclient approval would let them: with `--manage-renewals` kubeflavor takes that
/// approver's place, and a node cut off from renewals drops out of the cluster when its
/// certificate expires. Only a revoked binding stops renewals.
fn decide_renewal(f: &CsrFacts, requester: &NodeName) -> Result<Decision, DenyCause> {
    let csr = f.csr.as_ref().map_err(shape_cause)?;
    if csr.node_name != *requester {
        return Err(DenyCause::RenewalRequesterMismatch);
    }
    if f.binding.as_ref().is_some_and(|b| b.revoked) {
        return Err(DenyCause::BindingRevoked);
    }
    let binding = BindingStep::Existing {
        token: f.binding.as_ref().and_then(|b| b.token_id.clone()),
        flavor: f.binding.as_ref().and_then(|b| b.flavor.clone()),
    };
    Ok(Decision::Approve {
        node: csr.node_name.clone(),
        binding,
    })
}

/// Whether a kubeflavor token has no further use: every use is bound to a name
/// (`max_nodes` reached) and every bound name has a Node (`has_node`), so each holder has
/// its certificate and the bootstrap token can do nothing more for them. What it could
/// still do is authenticate whoever finds a copy of its join line (to file CSRs, which
/// are denied, and to read what bootstrap identities read): deleting it ends that (P3
/// (binding), P4 (rejection that ends)).
pub fn token_is_used_up(meta: &FlavorTokenMeta, has_node: impl Fn(&NodeName) -> bool) -> bool {
    !meta.has_room() && meta.bound_nodes.iter().all(has_node)
}

/// The fate of the token Secret the facts hold, for a denial for `cause`.
fn held_token_fate(f: &CsrFacts, cause: DenyCause) -> TokenFate {
    match &f.token {
        TokenLookup::Found(TokenRecord {
            kubeflavor: Some(meta),
            ..
        }) => token_fate(cause, meta.denials, f.options.denial_limit),
        _ => TokenFate::Keep,
    }
}

/// P4 (rejection that ends): what one more denial for `cause` does to a kubeflavor token
/// that was denied `denials_before` times already, so the kubelet's retry loop ends.
/// `limit` is the configured number of denials after which any token goes (`None`: no
/// limit). Exhausted tokens and name takeover attempts go at once. Causes that are not
/// about a kubeflavor token ([`DenyCause::counts_against_token`]) leave it alone: kubeadm's
/// own tokens are not kubeflavor's to remove. The controller asks again with the current
/// count when the Secret changed under it, so a burst of denials ends the token at the
/// limit.
pub fn token_fate(cause: DenyCause, denials_before: u32, limit: Option<NonZeroU32>) -> TokenFate {
    if !cause.counts_against_token() {
        return TokenFate::Keep;
    }
    let misused = matches!(
        cause,
        DenyCause::TokenExhausted
            | DenyCause::NameBoundToOtherToken
            | DenyCause::NodeExistsWithoutBinding
    );
    let denials_after = denials_before.saturating_add(1);
    if misused || limit.is_some_and(|l| denials_after >= l.get()) {
        TokenFate::Delete
    } else {
        TokenFate::Count
    }
}
