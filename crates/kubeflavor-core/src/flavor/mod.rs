//! What a flavor means for a node: `FlavorRules` (labels, taints, trust level, token
//! defaults), validated once so the controller and the CLI never see an unchecked value.
//!
//! Every flavor label key must be one NodeRestriction forbids a kubelet to write (P2, trusted
//! labels); see [`crate::flavor::labels::check_flavor_label_key`].

pub mod cidr;
pub mod input_labels;
pub mod labels;
pub mod taint;
pub mod token_limits;
pub mod ttl;

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::flavor::cidr::{Cidr, CidrError};
use crate::flavor::input_labels::{
    INPUT_LABEL_PREFIX, InputLabelRules, InputLabelsSpec, InputRulesError,
};
use crate::flavor::labels::{
    LabelKey, LabelKeyError, LabelValue, LabelValueError, check_flavor_label_key, check_label_value,
};
pub use crate::flavor::taint::{Taint, TaintEffect, TaintError};
use crate::flavor::token_limits::{DEFAULT_MAX_NODES, EffectiveLimits, LimitExceeded, TokenLimits};
pub use crate::flavor::ttl::{DEFAULT_TOKEN_TTL, MAX_TOKEN_TTL_SECS, TokenTtl, TtlError};
use crate::names::{DNS1123_LABEL_MAX_LEN, Dns1123Error, check_dns1123_subdomain_max};

/// Node label carrying the flavor's name on every flavored node.
pub const FLAVOR_LABEL: &str = "kubeflavor.node-restriction.kubernetes.io/flavor";
/// Node label carrying the flavor's trust level (a decimal integer 0..=100), so that
/// nodeAffinity `Gt`/`Lt` can select "at least level N".
pub const TRUST_LEVEL_LABEL: &str = "kubeflavor.node-restriction.kubernetes.io/trust-level";
/// Taint a cluster can make kubelets register with; kubeflavor removes it once the node
/// carries its flavor.
pub const UNVERIFIED_TAINT: &str = "kubeflavor.io/unverified";
/// NoExecute taint kubeflavor puts on a node whose binding is revoked.
pub const REVOKED_TAINT: &str = "kubeflavor.io/revoked";
/// The highest trust level.
pub const MAX_TRUST_LEVEL: u8 = 100;

/// The name of a Flavor object. It is also published as a label value, so it is a DNS-1123
/// subdomain of at most 63 characters.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FlavorName(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid flavor name {name:?}: {problem} (flavor names are lowercase DNS-1123 names of at most 63 characters, e.g. sweet or edge-partner-a)"
)]
pub struct FlavorNameError {
    pub name: String,
    pub problem: Dns1123Error,
}

impl FlavorName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for FlavorName {
    type Err = FlavorNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_dns1123_subdomain_max(s, DNS1123_LABEL_MAX_LEN).map_err(|problem| {
            FlavorNameError {
                name: s.to_owned(),
                problem,
            }
        })?;
        Ok(FlavorName(s.to_owned()))
    }
}

impl TryFrom<String> for FlavorName {
    type Error = FlavorNameError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<FlavorName> for String {
    fn from(n: FlavorName) -> String {
        n.0
    }
}

impl fmt::Display for FlavorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for FlavorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FlavorName({:?})", self.0)
    }
}

/// A trust level, 0..=100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "u8")]
pub struct TrustLevel(u8);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trust level {0} is out of range; use an integer from 0 to 100")]
pub struct TrustLevelError(pub i64);

impl TrustLevel {
    pub fn get(self) -> u8 {
        self.0
    }
}

impl TryFrom<i64> for TrustLevel {
    type Error = TrustLevelError;
    fn try_from(n: i64) -> Result<Self, Self::Error> {
        match u8::try_from(n) {
            Ok(v) if v <= MAX_TRUST_LEVEL => Ok(TrustLevel(v)),
            _ => Err(TrustLevelError(n)),
        }
    }
}

impl From<TrustLevel> for u8 {
    fn from(t: TrustLevel) -> u8 {
        t.0
    }
}

impl fmt::Display for TrustLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A flavor's spec as plain strings and integers, the way it arrives from the CLI flags or
/// a Flavor object; [`FlavorRules::from_spec`] validates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorSpec {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_level: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ttl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_limits: Option<TokenLimitsSpec>,
    /// IP ranges a node of this flavor may name in its serving certificate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serving_addresses: Vec<String>,
    /// Which input labels a portal may attach to the flavor's tokens; see
    /// [`crate::flavor::input_labels`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_labels: Option<InputLabelsSpec>,
    /// The sites (see [`crate::network`]) a node of this flavor must be observed on to
    /// take workloads; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_sites: Vec<String>,
}

/// What a portal (or `token create` without an override) may ask for, as a Flavor's
/// `spec.tokenLimits` spells it; see [`crate::flavor::token_limits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenLimitsSpec {
    /// The longest TTL, e.g. `168h`.
    #[serde(default, rename = "maxTTL", skip_serializing_if = "Option::is_none")]
    pub max_ttl: Option<String>,
    /// The largest `maxNodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<i64>,
    /// Whether a token that never expires (TTL 0) may be minted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_never_expiring: Option<bool>,
}

/// One taint of a [`FlavorSpec`], as in a Node's `spec.taints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

/// Why a flavor spec is refused. Each message names the field, the problem and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlavorError {
    #[error("flavor label: {0}")]
    LabelKey(LabelKeyError),
    #[error("flavor label {key:?}: {problem}")]
    LabelValue {
        key: String,
        problem: LabelValueError,
    },
    #[error("flavor taint: {0}")]
    Taint(TaintError),
    #[error(
        "flavor taint {key:?} is managed by kubeflavor itself (it marks unverified or revoked nodes); remove it from the flavor"
    )]
    ReservedTaint { key: String },
    #[error(
        "flavor taints repeat key {key:?} with effect {effect}; Kubernetes allows one taint per key and effect, keep one"
    )]
    DuplicateTaint { key: String, effect: TaintEffect },
    #[error("flavor {0}")]
    TrustLevel(TrustLevelError),
    #[error("flavor token TTL: {0}")]
    TokenTtl(TtlError),
    #[error("flavor max nodes {0} is out of range; use a whole number of at least 1")]
    MaxNodes(i64),
    #[error("flavor tokenLimits.maxTTL: {0}")]
    LimitTtl(TtlError),
    #[error(
        "flavor tokenLimits.maxTTL is 0; it must be a positive duration such as 168h (to allow tokens that never expire, set tokenLimits.allowNeverExpiring: true)"
    )]
    LimitTtlNever,
    #[error("flavor tokenLimits.maxNodes {0} is out of range; use a whole number of at least 1")]
    LimitMaxNodes(i64),
    #[error(
        "flavor tokenDefaults break the flavor's own tokenLimits: {0} (lower the default or raise the limit)"
    )]
    DefaultBeyondLimit(LimitExceeded),
    #[error("flavor servingAddresses: {0}")]
    ServingAddress(CidrError),
    #[error(
        "flavor servingAddresses lists {0} ranges; at most {MAX_SERVING_ADDRESSES} are allowed (merge neighbouring ranges)"
    )]
    TooManyServingAddresses(usize),
    #[error(
        "flavor allowedSites: {0:?} is not a site name (1-63 of [A-Za-z0-9-_.], starting and ending alphanumeric)"
    )]
    AllowedSite(String),
    #[error("flavor allowedSites lists {0} sites; at most {max} are allowed", max = crate::network::MAX_SITES)]
    TooManyAllowedSites(usize),
    #[error("flavor {0}")]
    InputLabels(InputRulesError),
}

/// The most ranges a Flavor's `spec.servingAddresses` may list.
pub const MAX_SERVING_ADDRESSES: usize = 16;

/// A validated flavor: every label key is one a kubelet cannot write (P2, trusted labels),
/// no label collides with kubeflavor's own, taints are well-formed and unique per key and
/// effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlavorRules {
    labels: BTreeMap<LabelKey, LabelValue>,
    taints: Vec<Taint>,
    trust_level: Option<TrustLevel>,
    token_ttl: Option<TokenTtl>,
    max_nodes: Option<NonZeroU32>,
    token_limits: TokenLimits,
    serving_addresses: Vec<Cidr>,
    input_labels: InputLabelRules,
    allowed_sites: Vec<String>,
}

/// Checks a max-nodes value given as a signed integer (CLI flag, CRD field, annotation).
pub fn parse_max_nodes(n: i64) -> Result<NonZeroU32, FlavorError> {
    u32::try_from(n)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or(FlavorError::MaxNodes(n))
}

/// Whether `key` is a label kubeflavor sets itself on a flavored node (the flavor's name,
/// its trust level, and the input labels), which no flavor may carry.
pub fn is_reserved_label_key(key: &str) -> bool {
    key == FLAVOR_LABEL
        || key == TRUST_LEVEL_LABEL
        || key.starts_with(INPUT_LABEL_PREFIX)
        || crate::network::is_placement_label(key)
}

/// The flavor's labels: valid keys and values, none of kubeflavor's own.
fn parse_labels(
    spec: &BTreeMap<String, String>,
) -> Result<BTreeMap<LabelKey, LabelValue>, FlavorError> {
    let mut labels = BTreeMap::new();
    for (k, v) in spec {
        check_flavor_label_key(k).map_err(FlavorError::LabelKey)?;
        if is_reserved_label_key(k) {
            return Err(FlavorError::LabelKey(LabelKeyError::Reserved {
                key: k.clone(),
            }));
        }
        let key: LabelKey = k.parse().map_err(FlavorError::LabelKey)?;
        let value: LabelValue = v.parse().map_err(|problem| FlavorError::LabelValue {
            key: k.clone(),
            problem,
        })?;
        labels.insert(key, value);
    }
    Ok(labels)
}

/// The flavor's taints: valid, none of kubeflavor's own, no key and effect twice.
fn parse_taints(spec: &[TaintSpec]) -> Result<Vec<Taint>, FlavorError> {
    let mut taints: Vec<Taint> = Vec::new();
    for t in spec {
        let effect: TaintEffect = t.effect.parse().map_err(FlavorError::Taint)?;
        let taint = Taint::new(&t.key, t.value.as_deref().unwrap_or(""), effect)
            .map_err(FlavorError::Taint)?;
        if t.key == UNVERIFIED_TAINT
            || t.key == REVOKED_TAINT
            || t.key == crate::network::SITE_NOT_ALLOWED_TAINT
        {
            return Err(FlavorError::ReservedTaint { key: t.key.clone() });
        }
        if taints
            .iter()
            .any(|o| o.key == taint.key && o.effect == taint.effect)
        {
            return Err(FlavorError::DuplicateTaint {
                key: t.key.clone(),
                effect,
            });
        }
        taints.push(taint);
    }
    Ok(taints)
}

/// The ranges a serving certificate's addresses must lie in: at most
/// [`MAX_SERVING_ADDRESSES`] CIDRs.
fn parse_serving_addresses(spec: &[String]) -> Result<Vec<Cidr>, FlavorError> {
    if spec.len() > MAX_SERVING_ADDRESSES {
        return Err(FlavorError::TooManyServingAddresses(spec.len()));
    }
    spec.iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(FlavorError::ServingAddress)
}

/// The sites a flavor's nodes must be observed on: site names (or `unknown`), few.
fn parse_allowed_sites(spec: &[String]) -> Result<Vec<String>, FlavorError> {
    if spec.len() > crate::network::MAX_SITES {
        return Err(FlavorError::TooManyAllowedSites(spec.len()));
    }
    for site in spec {
        if site.is_empty() || check_label_value(site).is_err() {
            return Err(FlavorError::AllowedSite(site.clone()));
        }
    }
    let mut sites = spec.to_vec();
    sites.sort();
    sites.dedup();
    Ok(sites)
}

impl FlavorRules {
    /// Validates a flavor spec, reporting the first problem found.
    pub fn from_spec(spec: &FlavorSpec) -> Result<Self, FlavorError> {
        let labels = parse_labels(&spec.labels)?;
        let taints = parse_taints(&spec.taints)?;
        let trust_level = spec
            .trust_level
            .map(TrustLevel::try_from)
            .transpose()
            .map_err(FlavorError::TrustLevel)?;
        let token_ttl = spec
            .token_ttl
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(FlavorError::TokenTtl)?;
        let max_nodes = spec.max_nodes.map(parse_max_nodes).transpose()?;
        let token_limits = parse_token_limits(spec.token_limits.as_ref())?;
        let serving_addresses = parse_serving_addresses(&spec.serving_addresses)?;
        let input_labels = spec
            .input_labels
            .as_ref()
            .map(InputLabelRules::from_spec)
            .transpose()
            .map_err(FlavorError::InputLabels)?
            .unwrap_or_default();
        let allowed_sites = parse_allowed_sites(&spec.allowed_sites)?;
        Ok(FlavorRules {
            labels,
            taints,
            trust_level,
            token_ttl,
            max_nodes,
            token_limits,
            serving_addresses,
            input_labels,
            allowed_sites,
        })
    }

    /// The spec form of these rules (for writing a Flavor object).
    pub fn to_spec(&self) -> FlavorSpec {
        FlavorSpec {
            labels: self
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: self
                .taints
                .iter()
                .map(|t| TaintSpec {
                    key: t.key.to_string(),
                    value: (!t.value.as_str().is_empty()).then(|| t.value.to_string()),
                    effect: t.effect.to_string(),
                })
                .collect(),
            trust_level: self.trust_level.map(|t| i64::from(t.get())),
            token_ttl: self.token_ttl.map(|t| t.to_string()),
            max_nodes: self.max_nodes.map(|n| i64::from(n.get())),
            token_limits: (self.token_limits != TokenLimits::default()).then(|| TokenLimitsSpec {
                max_ttl: self
                    .token_limits
                    .max_ttl_secs
                    .map(|s| TokenTtl::Seconds(s).to_string()),
                max_nodes: self.token_limits.max_nodes.map(|n| i64::from(n.get())),
                allow_never_expiring: self.token_limits.allow_never_expiring,
            }),
            serving_addresses: self.serving_addresses.iter().map(Cidr::to_string).collect(),
            input_labels: self.input_labels.to_spec(),
            allowed_sites: self.allowed_sites.clone(),
        }
    }

    /// The sites a node of this flavor must be observed on to take workloads (empty: any);
    /// see [`crate::network::Placement::allowed_by`].
    pub fn allowed_sites(&self) -> &[String] {
        &self.allowed_sites
    }

    /// Which input labels the flavor's tokens may carry (none unless the flavor says so).
    pub fn input_labels(&self) -> &InputLabelRules {
        &self.input_labels
    }

    /// The IP ranges a node of this flavor may name in its serving certificate (empty:
    /// none); see [`crate::approval::serving`].
    pub fn serving_addresses(&self) -> &[Cidr] {
        &self.serving_addresses
    }

    /// Extra labels the flavor puts on its nodes (not including [`FLAVOR_LABEL`] and
    /// [`TRUST_LEVEL_LABEL`], which kubeflavor adds itself).
    pub fn labels(&self) -> &BTreeMap<LabelKey, LabelValue> {
        &self.labels
    }

    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }

    pub fn trust_level(&self) -> Option<TrustLevel> {
        self.trust_level
    }

    /// The default TTL of tokens minted for this flavor, if the flavor sets one.
    pub fn token_ttl(&self) -> Option<TokenTtl> {
        self.token_ttl
    }

    /// The default number of node names a token of this flavor may bind, if set.
    pub fn max_nodes(&self) -> Option<NonZeroU32> {
        self.max_nodes
    }

    /// The TTL and max nodes a token of this flavor is minted with when asked for `ttl`
    /// and `max_nodes`: what is asked, else the flavor's defaults, else kubeadm's (24h, one
    /// node). The one place these defaults are filled in, for `token create` and the
    /// join-token API alike; whether the flavor's limits allow the result is
    /// [`EffectiveLimits::check`]'s answer.
    pub fn granted(
        &self,
        ttl: Option<TokenTtl>,
        max_nodes: Option<NonZeroU32>,
    ) -> (TokenTtl, NonZeroU32) {
        (
            ttl.or(self.token_ttl)
                .unwrap_or(crate::flavor::ttl::DEFAULT_TOKEN_TTL),
            max_nodes.or(self.max_nodes).unwrap_or(DEFAULT_MAX_NODES),
        )
    }

    /// The token limits the flavor states.
    pub fn token_limits(&self) -> TokenLimits {
        self.token_limits
    }

    /// The token limits in force: those stated, the rest from the defaults.
    pub fn effective_token_limits(&self) -> EffectiveLimits {
        self.token_limits.effective(self.token_ttl, self.max_nodes)
    }

    /// Refuses a flavor whose own defaults break its limits (a default TTL of 0 without
    /// `allowNeverExpiring`, a default above a stated maximum): `flavor create` and
    /// `flavor apply` write no such flavor. A stored one is still read (its nodes keep
    /// their labels); minting its defaults is refused by the limits check.
    pub fn check_defaults_within_limits(&self) -> Result<(), FlavorError> {
        let (ttl, max_nodes) = self.granted(None, None);
        match self.effective_token_limits().check(ttl, max_nodes).first() {
            Some(exceeded) => Err(FlavorError::DefaultBeyondLimit(*exceeded)),
            None => Ok(()),
        }
    }
}

fn parse_token_limits(spec: Option<&TokenLimitsSpec>) -> Result<TokenLimits, FlavorError> {
    let Some(spec) = spec else {
        return Ok(TokenLimits::default());
    };
    let max_ttl_secs = match spec.max_ttl.as_deref().map(str::parse::<TokenTtl>) {
        None => None,
        Some(Err(e)) => return Err(FlavorError::LimitTtl(e)),
        Some(Ok(TokenTtl::Never)) => return Err(FlavorError::LimitTtlNever),
        Some(Ok(TokenTtl::Seconds(secs))) => Some(secs),
    };
    let max_nodes = spec
        .max_nodes
        .map(|n| parse_max_nodes(n).map_err(|_| FlavorError::LimitMaxNodes(n)))
        .transpose()?;
    Ok(TokenLimits {
        max_ttl_secs,
        max_nodes,
        allow_never_expiring: spec.allow_never_expiring,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec_with_label(k: &str, v: &str) -> FlavorSpec {
        FlavorSpec {
            labels: [(k.to_owned(), v.to_owned())].into(),
            ..FlavorSpec::default()
        }
    }

    #[test]
    fn flavor_refuses_a_label_the_kubelet_could_write() {
        let err = FlavorRules::from_spec(&spec_with_label("example.com/tier", "gold")).unwrap_err();
        assert!(matches!(
            err,
            FlavorError::LabelKey(LabelKeyError::KubeletWritable { .. })
        ));
        assert!(err.to_string().contains("node-restriction.kubernetes.io"));
    }

    #[test]
    fn flavor_refuses_kubeflavors_own_labels_and_taints() {
        let input = format!("{INPUT_LABEL_PREFIX}site");
        for reserved in [FLAVOR_LABEL, TRUST_LEVEL_LABEL, input.as_str()] {
            assert!(matches!(
                FlavorRules::from_spec(&spec_with_label(reserved, "x")),
                Err(FlavorError::LabelKey(LabelKeyError::Reserved { .. }))
            ));
        }
        for reserved in [
            UNVERIFIED_TAINT,
            REVOKED_TAINT,
            crate::network::SITE_NOT_ALLOWED_TAINT,
        ] {
            let spec = FlavorSpec {
                taints: vec![TaintSpec {
                    key: reserved.into(),
                    value: None,
                    effect: "NoSchedule".into(),
                }],
                ..FlavorSpec::default()
            };
            assert!(matches!(
                FlavorRules::from_spec(&spec),
                Err(FlavorError::ReservedTaint { .. })
            ));
        }
    }

    #[test]
    fn flavor_refuses_out_of_range_numbers_and_duplicate_taints() {
        let with = |f: fn(&mut FlavorSpec)| {
            let mut s = FlavorSpec::default();
            f(&mut s);
            FlavorRules::from_spec(&s)
        };
        assert!(matches!(
            with(|s| s.trust_level = Some(101)),
            Err(FlavorError::TrustLevel(_))
        ));
        assert!(matches!(
            with(|s| s.trust_level = Some(-1)),
            Err(FlavorError::TrustLevel(_))
        ));
        assert!(with(|s| s.trust_level = Some(100)).is_ok());
        assert!(matches!(
            with(|s| s.max_nodes = Some(0)),
            Err(FlavorError::MaxNodes(0))
        ));
        assert!(matches!(
            with(|s| s.token_ttl = Some("-5m".into())),
            Err(FlavorError::TokenTtl(TtlError::Negative(_)))
        ));
        assert!(matches!(
            with(
                |s| s.labels = [("node-role.kubernetes.io/edge".into(), "bad value".into())].into()
            ),
            Err(FlavorError::LabelValue { .. })
        ));
        let dup = |s: &mut FlavorSpec| {
            let t = TaintSpec {
                key: "edge".into(),
                value: Some("a".into()),
                effect: "NoSchedule".into(),
            };
            s.taints = vec![
                t.clone(),
                TaintSpec {
                    value: Some("b".into()),
                    ..t
                },
            ];
        };
        assert!(matches!(with(dup), Err(FlavorError::DuplicateTaint { .. })));
    }

    #[test]
    fn serving_addresses_are_ip_ranges_and_few() {
        let with = |addrs: Vec<String>| {
            FlavorRules::from_spec(&FlavorSpec {
                serving_addresses: addrs,
                ..FlavorSpec::default()
            })
        };
        assert!(matches!(
            with(vec!["10.0.0.0".into()]),
            Err(FlavorError::ServingAddress(_))
        ));
        assert!(matches!(
            with(vec!["10.0.0.0/8".into(); MAX_SERVING_ADDRESSES + 1]),
            Err(FlavorError::TooManyServingAddresses(_))
        ));
        let rules = with(vec!["10.0.0.0/8".into(); MAX_SERVING_ADDRESSES]).unwrap();
        assert_eq!(rules.serving_addresses().len(), MAX_SERVING_ADDRESSES);
        assert!(with(vec![]).unwrap().serving_addresses().is_empty());
    }

    #[test]
    fn flavor_spec_round_trips_through_rules() {
        let spec = FlavorSpec {
            labels: [
                (
                    "kubeflavor.node-restriction.kubernetes.io/tier".into(),
                    "gold".into(),
                ),
                ("node-role.kubernetes.io/edge".into(), "".into()),
            ]
            .into(),
            taints: vec![TaintSpec {
                key: "edge".into(),
                value: Some("partner".into()),
                effect: "NoSchedule".into(),
            }],
            trust_level: Some(70),
            token_ttl: Some("1h30m".into()),
            max_nodes: Some(3),
            token_limits: Some(TokenLimitsSpec {
                max_ttl: Some("168h".into()),
                max_nodes: Some(10),
                allow_never_expiring: Some(false),
            }),
            allowed_sites: vec!["lyon".into(), "paris".into()],
            serving_addresses: vec!["10.20.0.0/16".into(), "2001:db8::/48".into()],
            input_labels: Some(crate::flavor::input_labels::InputLabelsSpec {
                max_labels: Some(2),
                keys: vec![
                    crate::flavor::input_labels::InputKeySpec {
                        key: "segment".into(),
                        values: None,
                        pattern: Some("seg-[0-9]{1,4}".into()),
                    },
                    crate::flavor::input_labels::InputKeySpec {
                        key: "site".into(),
                        values: Some(vec!["berlin".into(), "paris".into()]),
                        pattern: None,
                    },
                ],
            }),
        };
        let rules = FlavorRules::from_spec(&spec).unwrap();
        assert_eq!(rules.to_spec(), spec);
        assert_eq!(rules.trust_level().map(TrustLevel::get), Some(70));
        assert_eq!(rules.max_nodes().map(NonZeroU32::get), Some(3));
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["trustLevel"], 70);
        assert_eq!(json["tokenTtl"], "1h30m");
        assert_eq!(json["tokenLimits"]["maxTTL"], "168h");
        assert_eq!(
            rules.token_limits().max_ttl_secs,
            Some(168 * 3600),
            "the limits are read"
        );
    }

    #[test]
    fn flavor_refuses_bad_token_limits() {
        let with = |limits: TokenLimitsSpec| {
            FlavorRules::from_spec(&FlavorSpec {
                token_limits: Some(limits),
                ..FlavorSpec::default()
            })
        };
        let ttl = |t: &str| TokenLimitsSpec {
            max_ttl: Some(t.into()),
            ..TokenLimitsSpec::default()
        };
        assert_eq!(with(ttl("0")), Err(FlavorError::LimitTtlNever));
        assert_eq!(with(ttl("0h0m")), Err(FlavorError::LimitTtlNever));
        assert!(matches!(with(ttl("7d")), Err(FlavorError::LimitTtl(_))));
        assert!(
            FlavorError::LimitTtlNever
                .to_string()
                .contains("allowNeverExpiring")
        );
        for n in [0, -1, i64::from(u32::MAX) + 1] {
            assert_eq!(
                with(TokenLimitsSpec {
                    max_nodes: Some(n),
                    ..TokenLimitsSpec::default()
                }),
                Err(FlavorError::LimitMaxNodes(n))
            );
        }
        // Empty limits are no limits stated.
        assert_eq!(
            with(TokenLimitsSpec::default()).unwrap().token_limits(),
            TokenLimits::default()
        );
    }

    #[test]
    fn defaults_must_fit_the_flavors_own_limits() {
        let rules = |spec: FlavorSpec| FlavorRules::from_spec(&spec).unwrap();
        let fits = |spec: FlavorSpec| rules(spec).check_defaults_within_limits();
        assert_eq!(fits(FlavorSpec::default()), Ok(()));
        let never = FlavorSpec {
            token_ttl: Some("0".into()),
            ..FlavorSpec::default()
        };
        assert_eq!(
            fits(never.clone()),
            Err(FlavorError::DefaultBeyondLimit(
                LimitExceeded::NeverExpiring
            ))
        );
        assert_eq!(
            fits(FlavorSpec {
                token_limits: Some(TokenLimitsSpec {
                    allow_never_expiring: Some(true),
                    ..TokenLimitsSpec::default()
                }),
                ..never
            }),
            Ok(())
        );
        let above = FlavorSpec {
            token_ttl: Some("48h".into()),
            max_nodes: Some(4),
            token_limits: Some(TokenLimitsSpec {
                max_ttl: Some("24h".into()),
                ..TokenLimitsSpec::default()
            }),
            ..FlavorSpec::default()
        };
        let err = fits(above).unwrap_err().to_string();
        assert!(err.contains("tokenLimits.maxTTL is 24h"), "{err}");
        // Unstated limits follow the defaults: a default of 4 nodes fits.
        assert_eq!(
            fits(FlavorSpec {
                max_nodes: Some(4),
                ..FlavorSpec::default()
            }),
            Ok(())
        );
    }

    #[test]
    fn flavor_names_must_fit_a_label_value() {
        assert!("sweet".parse::<FlavorName>().is_ok());
        assert!("a".repeat(63).parse::<FlavorName>().is_ok());
        assert!("a".repeat(64).parse::<FlavorName>().is_err());
        assert!("Sweet".parse::<FlavorName>().is_err());
    }

    proptest! {
        #[test]
        fn trust_level_accepts_exactly_0_to_100(n in -1000i64..1000) {
            prop_assert_eq!(TrustLevel::try_from(n).is_ok(), (0..=100).contains(&n));
        }

        /// P2 (trusted labels): whatever labels a spec asks for, every key of an accepted
        /// flavor is one the kubelet cannot write.
        #[test]
        fn accepted_flavors_never_carry_kubelet_writable_labels(
            keys in proptest::collection::vec(
                "(example\\.com|[a-z]{1,5}\\.node-restriction\\.kubernetes\\.io|node-role\\.kubernetes\\.io|kubernetes\\.io|node\\.kubernetes\\.io|k8s\\.io)/[a-z]{1,8}",
                0..6,
            )
        ) {
            let spec = FlavorSpec {
                labels: keys.into_iter().map(|k| (k, "v".to_owned())).collect(),
                ..FlavorSpec::default()
            };
            if let Ok(rules) = FlavorRules::from_spec(&spec) {
                for k in rules.labels().keys() {
                    prop_assert!(!crate::flavor::labels::kubelet_may_set(k.as_str()), "{}", k);
                }
            }
        }
    }
}
