//! What a flavor means for a node: `FlavorRules` (labels, taints, trust level, token
//! defaults), validated once so the controller and the CLI never see an unchecked value.
//!
//! Every flavor label key must be one a kubelet cannot write (P2, spec section 5); see
//! [`crate::labels::check_flavor_label_key`].

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::labels::{
    LabelKey, LabelKeyError, LabelValue, LabelValueError, check_flavor_label_key, check_label_key,
};
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
/// `max_nodes` when neither the token nor its flavor sets one (DESIGN P3).
pub const DEFAULT_MAX_NODES: NonZeroU32 = NonZeroU32::MIN;
/// Token TTL when neither the command line nor the flavor sets one (kubeadm's default).
pub const DEFAULT_TOKEN_TTL: TokenTtl = TokenTtl::Seconds(24 * 3600);
/// The highest trust level.
pub const MAX_TRUST_LEVEL: u8 = 100;
/// The longest token TTL accepted (ten years): beyond it a typo is likelier than intent.
pub const MAX_TOKEN_TTL_SECS: u64 = 10 * 366 * 24 * 3600;

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

/// How long a token lives. Follows `kubeadm token create --ttl`: Go-style durations of
/// hours, minutes and seconds (`24h`, `90m`, `1h30m`, `45s`), and `0` meaning the token
/// never expires (its Secret has no `expiration` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TokenTtl {
    Never,
    /// A positive number of seconds, at most [`MAX_TOKEN_TTL_SECS`].
    Seconds(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    #[error("TTL must not be empty; use a duration such as 24h, 90m or 1h30m, or 0 for never")]
    Empty,
    #[error(
        "TTL {0:?} is negative; a token cannot expire in the past: use a positive duration such as 24h, or 0 for never"
    )]
    Negative(String),
    #[error(
        "TTL {0:?} does not parse; use numbers followed by h, m or s (e.g. 24h, 90m, 1h30m), or 0 for never"
    )]
    Syntax(String),
    #[error(
        "TTL {0:?} is longer than ten years; use a shorter TTL, or 0 for a token that never expires"
    )]
    TooLong(String),
}

impl TokenTtl {
    /// The expiration of a token minted at `now`, truncated to whole seconds because the
    /// Secret's `expiration` is RFC 3339 without fractions. `None` = never expires.
    pub fn expiration(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            TokenTtl::Never => None,
            TokenTtl::Seconds(secs) => {
                let secs = i64::try_from(secs).expect("bounded by MAX_TOKEN_TTL_SECS");
                let at = now
                    .checked_add(SignedDuration::from_secs(secs))
                    .expect("now + at most ten years is a valid timestamp");
                Some(Timestamp::from_second(at.as_second()).expect("in range"))
            }
        }
    }
}

impl FromStr for TokenTtl {
    type Err = TtlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.is_empty() {
            return Err(TtlError::Empty);
        }
        if t.starts_with('-') {
            return Err(TtlError::Negative(s.to_owned()));
        }
        let body = t.strip_prefix('+').unwrap_or(t);
        if body.bytes().all(|b| b == b'0') {
            return Ok(TokenTtl::Never);
        }
        let syntax = || TtlError::Syntax(s.to_owned());
        let too_long = || TtlError::TooLong(s.to_owned());
        let mut total: u64 = 0;
        let mut rest = body;
        // Units must appear at most once each and in decreasing order, as Go prints them.
        let mut last_unit_rank = u8::MAX;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(syntax());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| too_long())?;
            rest = &rest[digits..];
            let (unit_secs, rank) = match rest.as_bytes().first() {
                Some(b'h') => (3600, 2),
                Some(b'm') if !rest.starts_with("ms") => (60, 1),
                Some(b's') => (1, 0),
                _ => return Err(syntax()),
            };
            if rank >= last_unit_rank {
                return Err(syntax());
            }
            last_unit_rank = rank;
            rest = &rest[1..];
            total = n
                .checked_mul(unit_secs)
                .and_then(|v| v.checked_add(total))
                .ok_or_else(too_long)?;
        }
        if total > MAX_TOKEN_TTL_SECS {
            return Err(too_long());
        }
        Ok(if total == 0 {
            TokenTtl::Never
        } else {
            TokenTtl::Seconds(total)
        })
    }
}

impl fmt::Display for TokenTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TokenTtl::Never => f.write_str("0"),
            TokenTtl::Seconds(secs) => {
                let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
                if h > 0 {
                    write!(f, "{h}h")?;
                }
                if m > 0 {
                    write!(f, "{m}m")?;
                }
                if s > 0 {
                    write!(f, "{s}s")?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for TokenTtl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TokenTtl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A taint effect, spelled as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaintEffect {
    type Err = TaintError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "NoSchedule" => Ok(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
            "NoExecute" => Ok(TaintEffect::NoExecute),
            other => Err(TaintError::Effect(other.to_owned())),
        }
    }
}

/// A Node taint (key, optional value, effect), validated like the API server does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Taint {
    pub key: LabelKey,
    /// Empty when the taint has no value.
    pub value: LabelValue,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaintError {
    #[error(
        "taint {0:?} has no effect; write it as key=value:Effect or key:Effect with Effect one of NoSchedule, PreferNoSchedule, NoExecute"
    )]
    MissingEffect(String),
    #[error("taint effect {0:?} is unknown; use NoSchedule, PreferNoSchedule or NoExecute")]
    Effect(String),
    #[error("taint key is invalid: {0}")]
    Key(LabelKeyError),
    #[error("taint value is invalid: {0}")]
    Value(LabelValueError),
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: TaintEffect) -> Result<Self, TaintError> {
        check_label_key(key).map_err(TaintError::Key)?;
        Ok(Taint {
            key: key.parse().map_err(TaintError::Key)?,
            value: value.parse().map_err(TaintError::Value)?,
            effect,
        })
    }
}

/// The `kubectl taint` form: `key=value:Effect` or `key:Effect`.
impl FromStr for Taint {
    type Err = TaintError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kv, effect) = s
            .rsplit_once(':')
            .ok_or_else(|| TaintError::MissingEffect(s.to_owned()))?;
        let effect: TaintEffect = effect.parse()?;
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        Taint::new(key, value, effect)
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.as_str().is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
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
}

/// A validated flavor: every label key is one a kubelet cannot write (P2), no label
/// collides with kubeflavor's own, taints are well-formed and unique per key and effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlavorRules {
    labels: BTreeMap<LabelKey, LabelValue>,
    taints: Vec<Taint>,
    trust_level: Option<TrustLevel>,
    token_ttl: Option<TokenTtl>,
    max_nodes: Option<NonZeroU32>,
}

/// Checks a max-nodes value given as a signed integer (CLI flag, CRD field, annotation).
pub fn parse_max_nodes(n: i64) -> Result<NonZeroU32, FlavorError> {
    u32::try_from(n)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or(FlavorError::MaxNodes(n))
}

impl FlavorRules {
    /// Validates a flavor spec, reporting the first problem found.
    pub fn from_spec(spec: &FlavorSpec) -> Result<Self, FlavorError> {
        let mut labels = BTreeMap::new();
        for (k, v) in &spec.labels {
            check_flavor_label_key(k).map_err(FlavorError::LabelKey)?;
            if k == FLAVOR_LABEL || k == TRUST_LEVEL_LABEL {
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
        let mut taints: Vec<Taint> = Vec::new();
        for t in &spec.taints {
            let effect: TaintEffect = t.effect.parse().map_err(FlavorError::Taint)?;
            let taint = Taint::new(&t.key, t.value.as_deref().unwrap_or(""), effect)
                .map_err(FlavorError::Taint)?;
            if t.key == UNVERIFIED_TAINT || t.key == REVOKED_TAINT {
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
        Ok(FlavorRules {
            labels,
            taints,
            trust_level,
            token_ttl,
            max_nodes,
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
        }
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
    fn ttl_parses_go_style_durations() {
        let p = |s: &str| s.parse::<TokenTtl>();
        assert_eq!(p("24h"), Ok(TokenTtl::Seconds(86_400)));
        assert_eq!(p("90m"), Ok(TokenTtl::Seconds(5_400)));
        assert_eq!(p("1h30m"), Ok(TokenTtl::Seconds(5_400)));
        assert_eq!(p("1h0m30s"), Ok(TokenTtl::Seconds(3_630)));
        assert_eq!(p("45s"), Ok(TokenTtl::Seconds(45)));
        assert_eq!(p("0"), Ok(TokenTtl::Never));
        assert_eq!(p("0s"), Ok(TokenTtl::Never));
    }

    #[test]
    fn ttl_refuses_negative_malformed_and_huge_values() {
        let p = |s: &str| s.parse::<TokenTtl>();
        assert!(matches!(p("-1h"), Err(TtlError::Negative(_))));
        assert!(p("-1h").unwrap_err().to_string().contains("negative"));
        for bad in [
            "1d", "h", "1", "1h 30m", "30m1h", "1h1h", "1.5h", "10ms", "abc",
        ] {
            assert!(matches!(p(bad), Err(TtlError::Syntax(_))), "{bad}");
        }
        assert_eq!(p(""), Err(TtlError::Empty));
        assert!(matches!(p("100000h"), Err(TtlError::TooLong(_))));
        assert!(matches!(
            p("99999999999999999999h"),
            Err(TtlError::TooLong(_))
        ));
    }

    #[test]
    fn ttl_expiration_is_whole_seconds_in_the_future() {
        let now: Timestamp = "2026-11-30T04:00:00.75Z".parse().unwrap();
        let ttl: TokenTtl = "24h".parse().unwrap();
        assert_eq!(
            ttl.expiration(now),
            Some("2026-12-01T04:00:00Z".parse().unwrap())
        );
        assert_eq!(TokenTtl::Never.expiration(now), None);
    }

    #[test]
    fn taints_parse_in_kubectl_form() {
        let t: Taint = "dedicated=edge:NoSchedule".parse().unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_str(), t.effect),
            ("dedicated", "edge", TaintEffect::NoSchedule)
        );
        let t: Taint = "example.com/edge:NoExecute".parse().unwrap();
        assert_eq!(t.value.as_str(), "");
        assert_eq!(t.to_string(), "example.com/edge:NoExecute");
        assert!(matches!(
            "a=b".parse::<Taint>(),
            Err(TaintError::MissingEffect(_))
        ));
        assert!(matches!(
            "a=b:Never".parse::<Taint>(),
            Err(TaintError::Effect(_))
        ));
        assert!(matches!(
            "a b=c:NoSchedule".parse::<Taint>(),
            Err(TaintError::Key(_))
        ));
        assert!(matches!(
            "a=b c:NoSchedule".parse::<Taint>(),
            Err(TaintError::Value(_))
        ));
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
        for reserved in [FLAVOR_LABEL, TRUST_LEVEL_LABEL] {
            assert!(matches!(
                FlavorRules::from_spec(&spec_with_label(reserved, "x")),
                Err(FlavorError::LabelKey(LabelKeyError::Reserved { .. }))
            ));
        }
        for reserved in [UNVERIFIED_TAINT, REVOKED_TAINT] {
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
        };
        let rules = FlavorRules::from_spec(&spec).unwrap();
        assert_eq!(rules.to_spec(), spec);
        assert_eq!(rules.trust_level().map(TrustLevel::get), Some(70));
        assert_eq!(rules.max_nodes().map(NonZeroU32::get), Some(3));
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["trustLevel"], 70);
        assert_eq!(json["tokenTtl"], "1h30m");
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
        fn ttl_display_parses_back(secs in 1u64..=MAX_TOKEN_TTL_SECS) {
            let ttl = TokenTtl::Seconds(secs);
            prop_assert_eq!(ttl.to_string().parse::<TokenTtl>(), Ok(ttl));
        }

        #[test]
        fn trust_level_accepts_exactly_0_to_100(n in -1000i64..1000) {
            prop_assert_eq!(TrustLevel::try_from(n).is_ok(), (0..=100).contains(&n));
        }

        /// P2: whatever labels a spec asks for, every key of an accepted flavor is one the
        /// kubelet cannot write.
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
                    prop_assert!(!crate::labels::kubelet_may_set(k.as_str()), "{}", k);
                }
            }
        }
    }
}
