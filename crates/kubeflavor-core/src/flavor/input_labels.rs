//! Input labels: what a node's administrator told the operator's portal about the node
//! (which site, which network segment, which customer), carried by the join token and put
//! on the Node by the controller.
//!
//! - A Flavor says which input labels a portal may attach to its tokens
//!   ([`InputLabelRules`]): the keys, for each the values allowed (a list, or a pattern
//!   matched against the whole value) and how many labels at most. Anything else is refused
//!   with one answer per key, the same for a key the flavor does not know and a value it
//!   does not allow ([`InputLabelRules::admit`]), so a caller cannot probe the allowlist.
//! - On the Node they live under [`INPUT_LABEL_PREFIX`], a key NodeRestriction denies the
//!   kubelet (the `node-restriction.kubernetes.io` domain) and distinct from the flavor's
//!   trust labels: a workload can tell "the administrator says" from "the owner trusts".
//! - They ride on the token Secret as one annotation ([`INPUT_LABELS_ANNOTATION`]), which a
//!   token holder cannot read, so tokens with and without input labels look the same to
//!   their holders (P1, hidden flavor).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::flavor::labels::{LabelValue, is_qualified_name_part};

/// The label key prefix of every input label on a Node:
/// `input.kubeflavor.node-restriction.kubernetes.io/<key>`.
pub const INPUT_LABEL_PREFIX: &str = "input.kubeflavor.node-restriction.kubernetes.io/";
/// Token Secret annotation holding a token's input labels, a JSON object of key to value.
pub const INPUT_LABELS_ANNOTATION: &str = "kubeflavor.io/input-labels";
/// The most keys a Flavor's allowlist may name.
pub const MAX_INPUT_KEYS: usize = 16;
/// The most values a key's list may hold.
pub const MAX_INPUT_VALUES: usize = 64;
/// The longest pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 128;
/// The most memory a compiled pattern may take: patterns are the owner's, but the
/// join-token API runs them on every request.
const PATTERN_SIZE_LIMIT: usize = 64 * 1024;

/// The key of an input label, without the prefix: a label name (1-63 characters of
/// `[A-Za-z0-9-_.]`, starting and ending with a letter or digit).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InputKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "input label key {0:?} is invalid: it must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit, without a prefix (e.g. site)"
)]
pub struct InputKeyError(pub String);

impl InputKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The Node label key: [`INPUT_LABEL_PREFIX`] and the key.
    pub fn node_label(&self) -> String {
        format!("{INPUT_LABEL_PREFIX}{}", self.0)
    }
}

impl FromStr for InputKey {
    type Err = InputKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_qualified_name_part(s) {
            Ok(InputKey(s.to_owned()))
        } else {
            Err(InputKeyError(s.to_owned()))
        }
    }
}

impl TryFrom<String> for InputKey {
    type Error = InputKeyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<InputKey> for String {
    fn from(k: InputKey) -> String {
        k.0
    }
}

impl fmt::Display for InputKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A token's input labels, each key once, each value a non-empty label value. Checked
/// against a Flavor's rules by [`InputLabelRules::admit`]; the type alone says only that
/// they are well-formed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InputLabels(BTreeMap<InputKey, LabelValue>);

/// Why a token Secret's input-labels annotation cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "annotation {INPUT_LABELS_ANNOTATION} is not a JSON object of input label keys to non-empty label values: {0} (fix or remove it)"
)]
pub struct InputLabelsAnnotationError(pub String);

impl InputLabels {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&InputKey, &LabelValue)> {
        self.0.iter()
    }

    /// The labels as the Node carries them (keys under [`INPUT_LABEL_PREFIX`]).
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.node_label(), v.to_string()))
            .collect()
    }

    /// The labels as plain key to value (a binding's `spec.inputLabels`, a mint answer).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Reads plain key to value pairs (a binding's `spec.inputLabels`) without asking any
    /// Flavor: only the syntax is checked.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, InputLabelsAnnotationError> {
        map.iter()
            .map(|(k, v)| {
                let key: InputKey = k
                    .parse()
                    .map_err(|e: InputKeyError| InputLabelsAnnotationError(e.to_string()))?;
                let value = non_empty_value(v).ok_or_else(|| {
                    InputLabelsAnnotationError(format!("the value of {k:?} is not a label value"))
                })?;
                Ok((key, value))
            })
            .collect::<Result<_, _>>()
            .map(InputLabels)
    }

    /// The token Secret annotation's value: a JSON object, keys sorted.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(&self.to_map()).expect("a map of strings serialises")
    }

    /// Reads the token Secret annotation written by [`InputLabels::to_annotation`].
    pub fn from_annotation(text: &str) -> Result<Self, InputLabelsAnnotationError> {
        let map: BTreeMap<String, String> =
            serde_json::from_str(text).map_err(|e| InputLabelsAnnotationError(e.to_string()))?;
        Self::from_map(&map)
    }

    /// A short form for tables and the admin trail: `key=value,key=value`, or `<none>`.
    pub fn summary(&self) -> String {
        if self.0.is_empty() {
            return "<none>".into();
        }
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn non_empty_value(v: &str) -> Option<LabelValue> {
    v.parse()
        .ok()
        .filter(|v: &LabelValue| !v.as_str().is_empty())
}

/// A pattern a value must match whole (RE2 syntax, as Kubernetes' CEL `matches` reads
/// it), e.g. `seg-[0-9]{1,4}`. Bounded: at most [`MAX_PATTERN_LEN`] bytes, a compiled size
/// limit, and a value must still be a label value of at most 63 characters.
#[derive(Debug, Clone)]
pub struct InputPattern {
    source: String,
    whole: regex::Regex,
}

impl PartialEq for InputPattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for InputPattern {}

impl InputPattern {
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `value` matches the pattern from its first character to its last.
    pub fn matches(&self, value: &str) -> bool {
        self.whole.is_match(value)
    }
}

impl FromStr for InputPattern {
    type Err = InputRulesError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || s.len() > MAX_PATTERN_LEN {
            return Err(InputRulesError::PatternLength {
                pattern: s.to_owned(),
            });
        }
        let whole = regex::RegexBuilder::new(&format!("^(?:{s})$"))
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| InputRulesError::Pattern {
                pattern: s.to_owned(),
                problem: e.to_string(),
            })?;
        Ok(InputPattern {
            source: s.to_owned(),
            whole,
        })
    }
}

/// The values a key allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedValues {
    /// Exactly these.
    OneOf(BTreeSet<LabelValue>),
    /// Any label value the pattern matches whole.
    Pattern(InputPattern),
}

impl AllowedValues {
    fn allows(&self, value: &LabelValue) -> bool {
        match self {
            AllowedValues::OneOf(values) => values.contains(value),
            AllowedValues::Pattern(p) => p.matches(value.as_str()),
        }
    }
}

/// A Flavor's `spec.inputLabels` as plain data, the way it arrives from the CLI or the
/// Flavor object; [`InputLabelRules::from_spec`] validates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputLabelsSpec {
    /// How many input labels a token may carry; `None`: as many as there are keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_labels: Option<i64>,
    #[serde(default)]
    pub keys: Vec<InputKeySpec>,
}

/// One allowed key: exactly one of `values` and `pattern`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputKeySpec {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

/// Why a Flavor's input-label rules are refused. Each names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputRulesError {
    #[error("inputLabels.keys: {0}")]
    Key(InputKeyError),
    #[error("inputLabels.keys names {0:?} twice; name each key once")]
    DuplicateKey(String),
    #[error(
        "inputLabels.keys lists {0} keys; at most {MAX_INPUT_KEYS} are allowed (fewer, broader keys)"
    )]
    TooManyKeys(usize),
    #[error(
        "inputLabels key {0:?} needs exactly one of values (a list) and pattern (a regular expression)"
    )]
    ValuesOrPattern(String),
    #[error(
        "inputLabels key {key:?} lists {count} values; give 1 to {MAX_INPUT_VALUES} (or a pattern)"
    )]
    ValueCount { key: String, count: usize },
    #[error(
        "inputLabels key {key:?}: value {value:?} is not a label value (1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit)"
    )]
    Value { key: String, value: String },
    #[error("inputLabels pattern {pattern:?} must be 1 to {MAX_PATTERN_LEN} bytes long")]
    PatternLength { pattern: String },
    #[error("inputLabels pattern {pattern:?} is not a valid regular expression: {problem}")]
    Pattern { pattern: String, problem: String },
    #[error(
        "inputLabels.maxLabels {0} is out of range; use a whole number from 1 to {MAX_INPUT_KEYS}"
    )]
    MaxLabels(i64),
}

/// Which input labels a Flavor's tokens may carry. The default allows none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputLabelRules {
    keys: BTreeMap<InputKey, AllowedValues>,
    max_labels: Option<usize>,
}

/// Why a set of input labels is refused for a Flavor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputLabelRefusal {
    /// These keys (as sent) are not allowed, with these values: either the flavor names
    /// no such key or it does not allow the value. One answer for both, so a caller cannot
    /// learn the allowlist by probing.
    #[error(
        "input labels not allowed for this flavor: {} (the key is not one the flavor takes, or the value is not one it allows for the key; ask the cluster owner)",
        .0.join(", ")
    )]
    NotAllowed(Vec<String>),
    #[error("{count} input labels; this flavor takes at most {max}")]
    TooMany { count: usize, max: usize },
}

impl InputLabelRules {
    /// Validates a Flavor's `spec.inputLabels`, reporting the first problem found.
    pub fn from_spec(spec: &InputLabelsSpec) -> Result<Self, InputRulesError> {
        if spec.keys.len() > MAX_INPUT_KEYS {
            return Err(InputRulesError::TooManyKeys(spec.keys.len()));
        }
        let mut keys = BTreeMap::new();
        for k in &spec.keys {
            let key: InputKey = k.key.parse().map_err(InputRulesError::Key)?;
            let allowed = allowed_values(k)?;
            if keys.insert(key, allowed).is_some() {
                return Err(InputRulesError::DuplicateKey(k.key.clone()));
            }
        }
        let max_labels = spec
            .max_labels
            .map(|n| {
                usize::try_from(n)
                    .ok()
                    .filter(|n| (1..=MAX_INPUT_KEYS).contains(n))
                    .ok_or(InputRulesError::MaxLabels(n))
            })
            .transpose()?;
        Ok(InputLabelRules { keys, max_labels })
    }

    /// The spec form of these rules.
    pub fn to_spec(&self) -> Option<InputLabelsSpec> {
        if self.keys.is_empty() && self.max_labels.is_none() {
            return None;
        }
        let keys = self
            .keys
            .iter()
            .map(|(key, allowed)| match allowed {
                AllowedValues::OneOf(values) => InputKeySpec {
                    key: key.to_string(),
                    values: Some(values.iter().map(ToString::to_string).collect()),
                    pattern: None,
                },
                AllowedValues::Pattern(p) => InputKeySpec {
                    key: key.to_string(),
                    values: None,
                    pattern: Some(p.as_str().to_owned()),
                },
            })
            .collect();
        Some(InputLabelsSpec {
            max_labels: self.max_labels.map(|n| n as i64),
            keys,
        })
    }

    /// The keys this flavor takes, and what each allows.
    pub fn keys(&self) -> &BTreeMap<InputKey, AllowedValues> {
        &self.keys
    }

    /// How many input labels one token may carry.
    pub fn max_labels(&self) -> usize {
        self.max_labels.unwrap_or(self.keys.len())
    }

    /// The input labels a mint request asked for, if this flavor allows every one of them
    /// and not too many; else every key refused (as sent), or the count.
    pub fn admit(
        &self,
        asked: &BTreeMap<String, String>,
    ) -> Result<InputLabels, InputLabelRefusal> {
        let mut admitted = BTreeMap::new();
        let mut refused = Vec::new();
        for (k, v) in asked {
            match self.allowed_pair(k, v) {
                Some((key, value)) => {
                    admitted.insert(key, value);
                }
                None => refused.push(k.clone()),
            }
        }
        if !refused.is_empty() {
            return Err(InputLabelRefusal::NotAllowed(refused));
        }
        if admitted.len() > self.max_labels() {
            return Err(InputLabelRefusal::TooMany {
                count: admitted.len(),
                max: self.max_labels(),
            });
        }
        Ok(InputLabels(admitted))
    }

    /// Whether labels read back (from a token Secret) are still allowed by these rules.
    pub fn allows(&self, labels: &InputLabels) -> bool {
        self.admit(&labels.to_map()).is_ok()
    }

    fn allowed_pair(&self, key: &str, value: &str) -> Option<(InputKey, LabelValue)> {
        let key: InputKey = key.parse().ok()?;
        let value = non_empty_value(value)?;
        self.keys
            .get(&key)
            .is_some_and(|allowed| allowed.allows(&value))
            .then_some((key, value))
    }
}

fn allowed_values(k: &InputKeySpec) -> Result<AllowedValues, InputRulesError> {
    match (&k.values, &k.pattern) {
        (Some(values), None) => {
            if values.is_empty() || values.len() > MAX_INPUT_VALUES {
                return Err(InputRulesError::ValueCount {
                    key: k.key.clone(),
                    count: values.len(),
                });
            }
            values
                .iter()
                .map(|v| {
                    non_empty_value(v).ok_or_else(|| InputRulesError::Value {
                        key: k.key.clone(),
                        value: v.clone(),
                    })
                })
                .collect::<Result<_, _>>()
                .map(AllowedValues::OneOf)
        }
        (None, Some(pattern)) => pattern.parse().map(AllowedValues::Pattern),
        _ => Err(InputRulesError::ValuesOrPattern(k.key.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rules() -> InputLabelRules {
        InputLabelRules::from_spec(&InputLabelsSpec {
            max_labels: Some(2),
            keys: vec![
                InputKeySpec {
                    key: "site".into(),
                    values: Some(vec!["berlin".into(), "paris".into()]),
                    pattern: None,
                },
                InputKeySpec {
                    key: "segment".into(),
                    values: None,
                    pattern: Some("seg-[0-9]{1,4}".into()),
                },
                InputKeySpec {
                    key: "customer".into(),
                    values: None,
                    pattern: Some("[a-z][a-z0-9-]{0,30}".into()),
                },
            ],
        })
        .expect("valid rules")
    }

    fn asked(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn allowed_labels_are_admitted_with_the_node_prefix() {
        let labels = rules()
            .admit(&asked(&[("site", "paris"), ("segment", "seg-12")]))
            .expect("allowed");
        assert_eq!(
            labels.node_labels(),
            BTreeMap::from([
                (format!("{INPUT_LABEL_PREFIX}segment"), "seg-12".to_string()),
                (format!("{INPUT_LABEL_PREFIX}site"), "paris".to_string()),
            ])
        );
        assert_eq!(labels.summary(), "segment=seg-12,site=paris");
        assert!(rules().allows(&labels));
        assert_eq!(
            rules().admit(&BTreeMap::new()),
            Ok(InputLabels::default()),
            "no labels are always allowed"
        );
    }

    /// The answer names the key, and is the same whether the flavor does not know the key
    /// or does not allow the value: a caller cannot probe which keys exist.
    #[test]
    fn an_unknown_key_and_a_disallowed_value_get_the_same_answer() {
        let unknown = rules().admit(&asked(&[("rack", "paris")])).unwrap_err();
        let disallowed = rules().admit(&asked(&[("site", "rome")])).unwrap_err();
        assert_eq!(unknown, InputLabelRefusal::NotAllowed(vec!["rack".into()]));
        assert_eq!(
            disallowed,
            InputLabelRefusal::NotAllowed(vec!["site".into()])
        );
        let strip = |e: InputLabelRefusal, key: &str| e.to_string().replace(key, "KEY");
        assert_eq!(strip(unknown, "rack"), strip(disallowed, "site"));
    }

    #[test]
    fn patterns_match_the_whole_value() {
        let r = rules();
        for bad in ["seg-", "seg-12345", "xseg-1", "seg-1x", "seg-1\nseg-2"] {
            assert!(
                r.admit(&asked(&[("segment", bad)])).is_err(),
                "{bad:?} must not match"
            );
        }
        assert!(r.admit(&asked(&[("segment", "seg-9999")])).is_ok());
    }

    #[test]
    fn values_must_be_non_empty_label_values_whatever_the_pattern() {
        let r = InputLabelRules::from_spec(&InputLabelsSpec {
            max_labels: None,
            keys: vec![InputKeySpec {
                key: "free".into(),
                values: None,
                pattern: Some(".*".into()),
            }],
        })
        .unwrap();
        for bad in ["", "has space", "-edge", &"x".repeat(64), "ü"] {
            assert!(
                r.admit(&asked(&[("free", bad)])).is_err(),
                "{bad:?} must be refused"
            );
        }
        assert!(r.admit(&asked(&[("free", &"x".repeat(63))])).is_ok());
    }

    #[test]
    fn no_more_than_max_labels() {
        let three = asked(&[
            ("site", "paris"),
            ("segment", "seg-1"),
            ("customer", "acme"),
        ]);
        assert_eq!(
            rules().admit(&three),
            Err(InputLabelRefusal::TooMany { count: 3, max: 2 })
        );
        let mut spec = rules().to_spec().unwrap();
        spec.max_labels = None;
        let all = InputLabelRules::from_spec(&spec).unwrap();
        assert_eq!(all.max_labels(), 3, "unset: as many as there are keys");
        assert!(all.admit(&three).is_ok());
    }

    #[test]
    fn a_flavor_without_rules_allows_no_input_label() {
        let none = InputLabelRules::default();
        assert_eq!(
            none.admit(&asked(&[("site", "paris")])),
            Err(InputLabelRefusal::NotAllowed(vec!["site".into()]))
        );
        assert_eq!(none.to_spec(), None);
    }

    #[test]
    fn bad_rules_are_refused_with_their_field() {
        let spec = |keys: Vec<InputKeySpec>, max: Option<i64>| InputLabelsSpec {
            max_labels: max,
            keys,
        };
        let key = |k: &str, values: Option<Vec<&str>>, pattern: Option<&str>| InputKeySpec {
            key: k.into(),
            values: values.map(|v| v.into_iter().map(String::from).collect()),
            pattern: pattern.map(String::from),
        };
        let cases = [
            (
                spec(vec![key("a/b", Some(vec!["x"]), None)], None),
                "invalid",
            ),
            (spec(vec![key("a", None, None)], None), "exactly one"),
            (
                spec(vec![key("a", Some(vec!["x"]), Some("x"))], None),
                "exactly one",
            ),
            (spec(vec![key("a", Some(vec![]), None)], None), "values"),
            (
                spec(vec![key("a", Some(vec!["no space"]), None)], None),
                "not a label value",
            ),
            (
                spec(vec![key("a", None, Some("(unclosed"))], None),
                "regular expression",
            ),
            (
                spec(vec![key("a", None, Some(&"x".repeat(129)))], None),
                "1 to 128 bytes",
            ),
            (
                spec(
                    vec![
                        key("a", Some(vec!["x"]), None),
                        key("a", Some(vec!["y"]), None),
                    ],
                    None,
                ),
                "twice",
            ),
            (
                spec(vec![key("a", Some(vec!["x"]), None)], Some(0)),
                "maxLabels",
            ),
            (
                spec(vec![key("a", Some(vec!["x"]), None)], Some(17)),
                "maxLabels",
            ),
            (
                spec(
                    (0..17)
                        .map(|i| key(&format!("k{i}"), Some(vec!["x"]), None))
                        .collect(),
                    None,
                ),
                "at most 16",
            ),
        ];
        for (spec, expected) in cases {
            let e = InputLabelRules::from_spec(&spec).expect_err("refused");
            assert!(
                e.to_string().contains(expected),
                "{e} should say {expected:?}"
            );
        }
        // A pattern whose compiled form is too large is refused, not run.
        let huge = key("a", None, Some("[a-z]{1,1000}[0-9]{1,1000}"));
        assert!(InputLabelRules::from_spec(&spec(vec![huge], None)).is_err());
    }

    #[test]
    fn the_annotation_round_trips_and_refuses_what_admit_would() {
        let labels = rules()
            .admit(&asked(&[("site", "berlin"), ("customer", "acme")]))
            .unwrap();
        let text = labels.to_annotation();
        assert_eq!(text, r#"{"customer":"acme","site":"berlin"}"#);
        assert_eq!(InputLabels::from_annotation(&text), Ok(labels));
        for bad in [
            r#"{"site":""}"#,
            r#"{"a/b":"x"}"#,
            r#"["x"]"#,
            r#"{"site":1}"#,
            "{",
        ] {
            assert!(InputLabels::from_annotation(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// Whatever a caller sends, what is admitted is allowed by the rules, carries only
        /// keys the flavor names, lands only under the input prefix, and round-trips
        /// through the token annotation.
        #[test]
        fn admitted_labels_are_only_what_the_rules_allow(
            pairs in proptest::collection::btree_map("[a-z\\-./]{0,8}", "[a-z0-9\\-]{0,8}", 0..5),
        ) {
            let r = rules();
            if let Ok(labels) = r.admit(&pairs) {
                prop_assert!(labels.len() <= r.max_labels());
                for (k, v) in labels.iter() {
                    prop_assert!(r.keys().get(k).is_some_and(|a| a.allows(v)));
                }
                for key in labels.node_labels().keys() {
                    prop_assert!(key.starts_with(INPUT_LABEL_PREFIX));
                    prop_assert!(crate::flavor::labels::check_flavor_label_key(key).is_ok(),
                        "{} must be a key the kubelet cannot write", key);
                }
                prop_assert_eq!(InputLabels::from_annotation(&labels.to_annotation()), Ok(labels));
            } else {
                prop_assert!(!pairs.is_empty());
            }
        }
    }
}
