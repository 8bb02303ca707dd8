//! The custom resources of kubeflavor, generated from these Rust types:
//! - `Flavor` (`flavors.kubeflavor.io`): what a flavor means for a node (labels the kubelet
//!   cannot write, taints, a trust level) and the defaults of its tokens.
//! - `FlavorBinding` (`flavorbindings.kubeflavor.io`, named after the node): which token a
//!   node joined with, written by the controller before it approves the node's CSR (P3,
//!   binding).
//!
//! - `Roster` (`rosters.kubeflavor.io`, [`roster`]): which node administrators get a join
//!   token, and of which flavor, by their verified identity; and `AdministratorLedger`
//!   (`administratorledgers.kubeflavor.io`): the tokens one administrator may still hold,
//!   how a rule's `maxLiveTokens` is counted.
//!
//! - `Site` (`sites.kubeflavor.io`) and `NodeReport` (`nodereports.kubeflavor.io`, named
//!   after its node), [`network`]: the owner's sites by address range, and each node's
//!   report of its network beside what kubeflavor observed of it (P9).
//!
//! All are cluster-scoped, `v1alpha1`, with printer columns and (but Site) a status
//! subresource. The
//! schema rules (including the CEL rules of [`schema`]) make the API server refuse what
//! the CLI refuses, so `kubectl apply` of a bad Flavor fails too.

mod binding;
mod convert;
pub mod network;
pub mod roster;
pub mod schema;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use binding::{NewBinding, whole_seconds};
pub use convert::{RulesError, core_spec, effect_str, flavor_from_rules, rules_from_flavor};

/// The API group of kubeflavor's resources.
pub const GROUP: &str = "kubeflavor.io";
/// The only version so far.
pub const VERSION: &str = "v1alpha1";

/// What nodes of this flavor carry, and how its tokens are minted.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "Flavor",
    plural = "flavors",
    singular = "flavor",
    shortname = "flv",
    category = "kubeflavor",
    status = "FlavorStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A flavor: the labels, taints and trust level kubeflavor's controller puts on every node that joined with one of the flavor's tokens.",
    printcolumn = r#"{"name":"Trust","type":"integer","jsonPath":".spec.trustLevel"}"#,
    printcolumn = r#"{"name":"TTL","type":"string","jsonPath":".spec.tokenDefaults.ttl"}"#,
    printcolumn = r#"{"name":"Max Nodes","type":"integer","jsonPath":".spec.tokenDefaults.maxNodes"}"#,
    printcolumn = r#"{"name":"TTL Limit","type":"string","jsonPath":".spec.tokenLimits.maxTTL","priority":1}"#,
    printcolumn = r#"{"name":"Nodes Limit","type":"integer","jsonPath":".spec.tokenLimits.maxNodes","priority":1}"#,
    printcolumn = r#"{"name":"Never Expiring","type":"boolean","jsonPath":".spec.tokenLimits.allowNeverExpiring","priority":1}"#,
    printcolumn = r#"{"name":"Bound","type":"integer","jsonPath":".status.boundNodes"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FlavorSpec {
    /// Labels put on every node of this flavor. Each key must be one a kubelet cannot
    /// write (NodeRestriction): under `<x>.node-restriction.kubernetes.io/`, or a
    /// `kubernetes.io`/`k8s.io` key outside the kubelet's own set such as
    /// `node-role.kubernetes.io/edge`. kubeflavor adds
    /// `kubeflavor.node-restriction.kubernetes.io/flavor=<name>` (and `.../trust-level`) itself.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::flavor_labels")]
    pub labels: BTreeMap<String, String>,

    /// Taints put on every node of this flavor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::flavor_taints")]
    pub taints: Vec<FlavorTaint>,

    /// 0..=100, published as the label `kubeflavor.node-restriction.kubernetes.io/trust-level`
    /// so that nodeAffinity `Gt`/`Lt` can select "at least level N".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::trust_level")]
    pub trust_level: Option<u8>,

    /// Defaults for `kubeflavor token create --flavor <this>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_defaults: Option<TokenDefaults>,

    /// The most a token of this flavor may be minted with, through the join-token API and
    /// by `token create` (unless `--override-flavor-limits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_limits: Option<TokenLimits>,

    /// IP ranges (e.g. `10.20.0.0/16`) a node of this flavor may name in its kubelet
    /// serving certificate, when the controller approves serving CSRs. The kubelet reports
    /// its own addresses, so they prove nothing alone: these ranges are the owner's word.
    /// Empty: no IP address is approved (a CSR naming one is denied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::serving_addresses")]
    pub serving_addresses: Vec<String>,

    /// Which input labels a portal may attach to this flavor's tokens (what the node's
    /// administrator says: a site, a network segment, a customer). The controller puts
    /// them on the Node as `input.kubeflavor.node-restriction.kubernetes.io/<key>`, which
    /// the kubelet cannot write. Absent: tokens of this flavor carry no input labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_labels: Option<InputLabelRules>,

    /// The Sites a node of this flavor must be observed on to take workloads: a node
    /// observed elsewhere (or not observed yet) is tainted
    /// `kubeflavor.io/site-not-allowed:NoSchedule`. List `unknown` to allow addresses no
    /// Site holds. Empty: any site, observed or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::allowed_sites")]
    pub allowed_sites: Vec<String>,
}

/// The input labels a Flavor's tokens may carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputLabelRules {
    /// How many input labels one token may carry (default: as many as there are keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_input_labels")]
    pub max_labels: Option<u32>,
    /// The keys a token may carry, each with the values it allows.
    #[serde(default)]
    #[schemars(schema_with = "schema::input_label_keys")]
    pub keys: Vec<InputLabelKey>,
}

/// One input label key and the values it allows: a list, or a pattern the whole value
/// must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = schema::input_label_key_rules()))]
pub struct InputLabelKey {
    /// The key, without a prefix (e.g. `site`).
    #[schemars(schema_with = "schema::label_name")]
    pub key: String,
    /// The values allowed, e.g. `[berlin, paris]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::input_label_values")]
    pub values: Option<Vec<String>>,
    /// A regular expression (RE2 syntax) the whole value must match, e.g. `seg-[0-9]{1,4}`;
    /// a value must also be a label value (at most 63 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::input_label_pattern")]
    pub pattern: Option<String>,
}

/// A taint as the Node API spells it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct FlavorTaint {
    #[schemars(schema_with = "schema::qualified_name")]
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(schema_with = "schema::label_value")]
    pub value: String,
    pub effect: TaintEffect,
}

/// The three taint effects of the Node API.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// Defaults used when `token create` is not given `--ttl` / `--max-nodes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenDefaults {
    /// How long a token stays valid, e.g. `24h`, `90m`, `1h30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::duration")]
    pub ttl: Option<String>,
    /// How many distinct node names one token may bind (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_nodes")]
    pub max_nodes: Option<u32>,
}

/// The most a token of the flavor may be minted with. A limit left out is the flavor's
/// default (`tokenDefaults.ttl`, else 24h; `tokenDefaults.maxNodes`, else 1), and a token
/// that never expires is refused unless `allowNeverExpiring` is true.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenLimits {
    /// The longest TTL a token may be minted with, e.g. `168h` (a positive duration).
    #[serde(rename = "maxTTL", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_ttl")]
    pub max_ttl: Option<String>,
    /// The largest `maxNodes` a token may be minted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_nodes")]
    pub max_nodes: Option<u32>,
    /// Whether a token that never expires (TTL 0) may be minted (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_never_expiring: Option<bool>,
}

/// Written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorStatus {
    /// How many FlavorBindings name this flavor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_nodes: Option<i64>,
    /// The `metadata.generation` the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The record that a node name is bound to one token (and so to one flavor). Named after
/// the node. Created by the controller BEFORE it approves the node's CSR, so every approved
/// kubeflavor node has one (P3, binding).
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "FlavorBinding",
    plural = "flavorbindings",
    singular = "flavorbinding",
    shortname = "flvb",
    category = "kubeflavor",
    status = "FlavorBindingStatus",
    derive = "PartialEq",
    doc = "The binding of a node name to the bootstrap token it joined with, and so to that token's flavor. Named after the node.",
    printcolumn = r#"{"name":"Flavor","type":"string","jsonPath":".spec.flavor"}"#,
    printcolumn = r#"{"name":"Token","type":"string","jsonPath":".spec.tokenId"}"#,
    printcolumn = r#"{"name":"Flavored","type":"string","jsonPath":".status.conditions[?(@.type==\"Flavored\")].status"}"#,
    printcolumn = r#"{"name":"Revoked","type":"string","jsonPath":".status.conditions[?(@.type==\"Revoked\")].status"}"#,
    printcolumn = r#"{"name":"Issued To","type":"string","jsonPath":".spec.issuedTo","priority":1}"#,
    printcolumn = r#"{"name":"Identity","type":"string","jsonPath":".spec.identity.subject","priority":1}"#,
    printcolumn = r#"{"name":"CSR","type":"string","jsonPath":".spec.csrName","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = schema::binding_spec_rules()))]
pub struct FlavorBindingSpec {
    /// The node name (equal to `metadata.name`).
    #[schemars(schema_with = "schema::node_name")]
    pub node: String,
    /// The Flavor the token carried.
    #[schemars(schema_with = "schema::flavor_name")]
    pub flavor: String,
    /// The bootstrap token id (the 6 characters before the dot).
    #[schemars(schema_with = "schema::token_id")]
    pub token_id: String,
    /// The uid of the token Secret: ids can be minted again once a token is gone, and a
    /// new token of an old id must not inherit its names. Absent on bindings written by
    /// kubeflavor before 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_uid: Option<String>,
    /// The CertificateSigningRequest approved for this node.
    pub csr_name: String,
    /// SHA-256 over the DER SubjectPublicKeyInfo of the CSR's key, lowercase hex.
    #[schemars(schema_with = "schema::sha256_hex")]
    pub public_key_sha256: String,
    /// When the binding was made.
    #[schemars(schema_with = "schema::date_time")]
    pub bound_at: Timestamp,
    /// On whose behalf the token was minted (`token create --issued-to`), copied from the
    /// token Secret when the binding is made. Absent when the token recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::issued_to")]
    pub issued_to: Option<String>,
    /// The Kubernetes user name that minted the token, copied from the token Secret when
    /// the binding is made. Absent when the token recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_by: Option<String>,
    /// The caller on whose request `issuedBy` minted the token, as `issuedBy` recorded it
    /// (the join-token API's authenticated portal), copied from the token Secret when the
    /// binding is made. Absent for tokens minted directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// The node administrator the token was minted for, as their identity provider's
    /// verified ID token named them (issuer and subject), copied from the token Secret
    /// when the binding is made. Absent for tokens minted for a portal's caller or by an
    /// admin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<BindingIdentity>,
    /// What the node's administrator said through the portal (keys without their prefix),
    /// copied from the token when the binding is made, as the Flavor allowed it then. The
    /// controller keeps them on the Node under
    /// `input.kubeflavor.node-restriction.kubernetes.io/`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::binding_input_labels")]
    pub input_labels: BTreeMap<String, String>,
}

/// A verified identity: the issuer (`iss`) and subject (`sub`) of an ID token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BindingIdentity {
    pub issuer: String,
    pub subject: String,
}

/// Written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorBindingStatus {
    /// `Flavored` (the Node carries the flavor's labels and taints) and `Revoked`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The labels kubeflavor last put on the Node (so it can remove them later).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub applied_labels: BTreeMap<String, String>,
    /// The taints kubeflavor last put on the Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_taints: Vec<FlavorTaint>,
    /// The `metadata.generation` the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The label of a FlavorBinding naming its token id (for lookups by id).
pub const BINDING_TOKEN_ID_LABEL: &str = "kubeflavor.io/token-id";
/// The label of a FlavorBinding naming the identity its token was minted for
/// (`kubeflavor_core::token::meta::IDENTITY_LABEL`: a hash of issuer and subject), so the
/// join-token API counts an administrator's nodes with a label selector.
pub use kubeflavor_core::token::meta::IDENTITY_LABEL as BINDING_IDENTITY_LABEL;

/// The condition types of a FlavorBinding.
pub const CONDITION_FLAVORED: &str = "Flavored";
pub const CONDITION_REVOKED: &str = "Revoked";
/// A revocation spent the node's join token (deleted its Secret).
pub const CONDITION_TOKEN_SPENT: &str = "TokenSpent";
/// A revocation deleted the pods bound to the node.
pub const CONDITION_PODS_REMOVED: &str = "PodsRemoved";

/// A condition shaped like `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(schema_with = "schema::condition_status")]
    pub status: String,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[schemars(schema_with = "schema::date_time")]
    pub last_transition_time: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// The condition `type_` (status True when `ok`), keeping the transition time of the
    /// one in `previous` while its status holds, so an unchanged status compares equal and
    /// is not written again.
    pub fn after(
        type_: &str,
        ok: bool,
        reason: &str,
        message: &str,
        previous: &[Condition],
    ) -> Condition {
        let status = if ok { "True" } else { "False" };
        let old = previous.iter().find(|c| c.type_ == type_);
        let last_transition_time = match old {
            Some(c) if c.status == status => c.last_transition_time,
            _ => whole_seconds(jiff::Timestamp::now()),
        };
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time,
            observed_generation: None,
        }
    }
}

/// Every CRD, Flavor first, with the rules that apply to the whole object.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        flavor_crd(),
        flavor_binding_crd(),
        roster::Roster::crd(),
        roster::AdministratorLedger::crd(),
        network::site_crd(),
        network::node_report_crd(),
    ]
}

/// `flavors.kubeflavor.io`, plus the object-level rule on the name (it becomes a label value).
pub fn flavor_crd() -> CustomResourceDefinition {
    let mut crd = Flavor::crd();
    schema::add_root_rules(&mut crd, schema::flavor_root_rules());
    crd
}

/// `flavorbindings.kubeflavor.io`, plus the object-level rule "named after its node".
pub fn flavor_binding_crd() -> CustomResourceDefinition {
    let mut crd = FlavorBinding::crd();
    schema::add_root_rules(&mut crd, schema::binding_root_rules());
    crd
}

#[cfg(test)]
mod tests;
