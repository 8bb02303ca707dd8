//! Label keys and values, and the NodeRestriction rule that decides which Node labels a
//! kubelet can write on its own Node (plugin/pkg/admission/noderestriction).
//!
//! P2 (trusted labels) rests on [`kubelet_may_set`]: a flavor label the kubelet could write
//! would be a claim by the node, not a fact assigned by the cluster owner.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::names::{Dns1123Error, check_dns1123_subdomain};

/// Longest name part of a qualified name, and longest label value.
pub const LABEL_NAME_MAX_LEN: usize = 63;

/// The label namespace NodeRestriction reserves for labels only trusted writers may set.
pub const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// Labels a kubelet may set on its own Node even though they are under `kubernetes.io`
/// (`kubeletLabels` in k8s.io/kubelet/pkg/apis/well_known_labels.go).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// Label namespaces (and their subdomains) a kubelet may write (`kubeletLabelNamespaces`).
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// Why a string is not a valid label key (Kubernetes qualified name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelKeyError {
    #[error("label key must not be empty")]
    Empty,
    #[error("label key {key:?} has more than one '/'; the form is [prefix/]name")]
    TooManySlashes { key: String },
    #[error(
        "label key {key:?}: the prefix before '/' {problem} (prefixes are DNS-1123 subdomains such as example.com)"
    )]
    BadPrefix { key: String, problem: Dns1123Error },
    #[error(
        "label key {key:?}: the name part must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
    )]
    BadName { key: String },
    #[error(
        "label key {key:?} can be changed by the node itself: the NodeRestriction admission plugin lets a kubelet set any label outside node-restriction.kubernetes.io and the kubernetes.io/k8s.io namespaces (and a few kubernetes.io ones such as {example}), so it cannot carry a trusted flavor; use a key under a *.node-restriction.kubernetes.io/ prefix, e.g. {suggestion:?}"
    )]
    KubeletWritable {
        key: String,
        example: &'static str,
        suggestion: String,
    },
    #[error(
        "label key {key:?} is set by kubeflavor itself (the flavor's name and trust level, and the input labels under input.kubeflavor.node-restriction.kubernetes.io/); remove it from the flavor's labels"
    )]
    Reserved { key: String },
}

/// Why a string is not a valid label value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "label value {value:?} is invalid: it must be empty or at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit"
)]
pub struct LabelValueError {
    pub value: String,
}

/// The name part of a qualified name (a label key without its prefix), which is also the
/// syntax of a non-empty label value: 1-63 characters of `[A-Za-z0-9-_.]`, starting and
/// ending with a letter or digit.
pub(crate) fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.len() <= LABEL_NAME_MAX_LEN
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// Checks the Kubernetes qualified-name rule for label keys: `[prefix/]name`, prefix a
/// DNS-1123 subdomain, name 1-63 characters.
pub fn check_label_key(key: &str) -> Result<(), LabelKeyError> {
    if key.is_empty() {
        return Err(LabelKeyError::Empty);
    }
    let (prefix, name) = match key.split_once('/') {
        None => (None, key),
        Some((_, rest)) if rest.contains('/') => {
            return Err(LabelKeyError::TooManySlashes {
                key: key.to_owned(),
            });
        }
        Some((prefix, name)) => (Some(prefix), name),
    };
    if let Some(prefix) = prefix {
        check_dns1123_subdomain(prefix).map_err(|problem| LabelKeyError::BadPrefix {
            key: key.to_owned(),
            problem,
        })?;
    }
    if !is_qualified_name_part(name) {
        return Err(LabelKeyError::BadName {
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// Checks a label value: empty, or 1-63 characters of `[A-Za-z0-9-_.]` with alphanumeric
/// ends.
pub fn check_label_value(value: &str) -> Result<(), LabelValueError> {
    if value.is_empty() || is_qualified_name_part(value) {
        Ok(())
    } else {
        Err(LabelValueError {
            value: value.to_owned(),
        })
    }
}

/// The prefix of a label key (the part before `/`), `""` when there is none.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn is_or_under(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

/// Whether a kubelet (`system:node:<name>`) may add, change or remove this label on its own
/// Node, as the NodeRestriction admission plugin decides on update (`getForbiddenLabels` in
/// plugin/pkg/admission/noderestriction).
pub fn kubelet_may_set(key: &str) -> bool {
    let ns = label_namespace(key);
    if is_or_under(ns, NODE_RESTRICTION_NAMESPACE) {
        return false;
    }
    let kubernetes_label = is_or_under(ns, "kubernetes.io") || is_or_under(ns, "k8s.io");
    if !kubernetes_label {
        return true;
    }
    KUBELET_LABELS.contains(&key) || KUBELET_LABEL_NAMESPACES.iter().any(|d| is_or_under(ns, d))
}

/// Checks that `key` is a valid label key that a kubelet can NOT write on its own Node, so
/// it can carry a flavor (P2, trusted labels). The error explains NodeRestriction and
/// suggests a key under `kubeflavor.node-restriction.kubernetes.io/`.
pub fn check_flavor_label_key(key: &str) -> Result<(), LabelKeyError> {
    check_label_key(key)?;
    if kubelet_may_set(key) {
        let name = key.rsplit('/').next().unwrap_or(key);
        return Err(LabelKeyError::KubeletWritable {
            key: key.to_owned(),
            example: "kubernetes.io/hostname",
            suggestion: format!("kubeflavor.{NODE_RESTRICTION_NAMESPACE}/{name}"),
        });
    }
    Ok(())
}

/// A validated label key.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LabelKey(String);

impl LabelKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for LabelKey {
    type Err = LabelKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_label_key(s)?;
        Ok(LabelKey(s.to_owned()))
    }
}

impl TryFrom<String> for LabelKey {
    type Error = LabelKeyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<LabelKey> for String {
    fn from(k: LabelKey) -> String {
        k.0
    }
}

impl fmt::Display for LabelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LabelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// A validated label value (possibly empty).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LabelValue(String);

impl LabelValue {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for LabelValue {
    type Err = LabelValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_label_value(s)?;
        Ok(LabelValue(s.to_owned()))
    }
}

impl TryFrom<String> for LabelValue {
    type Error = LabelValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<LabelValue> for String {
    fn from(v: LabelValue) -> String {
        v.0
    }
}

impl fmt::Display for LabelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LabelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kubelet_may_not_set_node_restriction_labels() {
        // A real API server refuses both the bare namespace and a subdomain of it.
        assert!(!kubelet_may_set(
            "kubeflavor.node-restriction.kubernetes.io/flavor"
        ));
        assert!(!kubelet_may_set("node-restriction.kubernetes.io/flavor"));
    }

    #[test]
    fn kubelet_may_set_labels_outside_kubernetes_namespaces() {
        // A real API server accepts example.com/flavor from the node itself.
        assert!(kubelet_may_set("example.com/flavor"));
        assert!(kubelet_may_set("flavor"));
        // Look-alikes of the restricted namespace are ordinary domains.
        assert!(kubelet_may_set(
            "evilnode-restriction.kubernetes.io.example.com/x"
        ));
        assert!(kubelet_may_set("kubernetes.io.example.com/x"));
    }

    #[test]
    fn kubelet_may_set_only_its_allowed_kubernetes_labels() {
        for allowed in KUBELET_LABELS {
            assert!(kubelet_may_set(allowed), "{allowed}");
        }
        assert!(kubelet_may_set("kubelet.kubernetes.io/anything"));
        assert!(kubelet_may_set("node.kubernetes.io/anything"));
        assert!(kubelet_may_set("x.node.kubernetes.io/anything"));
        for forbidden in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/flavor",
            "k8s.io/flavor",
            "example.k8s.io/flavor",
            "topology.kubernetes.io/rack",
        ] {
            assert!(!kubelet_may_set(forbidden), "{forbidden}");
        }
    }

    #[test]
    fn flavor_label_key_error_explains_node_restriction_and_suggests_a_prefix() {
        let err = check_flavor_label_key("example.com/tier").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("NodeRestriction"), "{msg}");
        assert!(
            msg.contains("kubeflavor.node-restriction.kubernetes.io/tier"),
            "{msg}"
        );
        assert!(check_flavor_label_key("kubeflavor.node-restriction.kubernetes.io/tier").is_ok());
        assert!(check_flavor_label_key("node-role.kubernetes.io/edge").is_ok());
        assert!(matches!(
            check_flavor_label_key("Bad Key"),
            Err(LabelKeyError::BadName { .. })
        ));
    }

    #[test]
    fn label_key_syntax() {
        for ok in ["a", "a/b", "example.com/A_b.c-d", &"x".repeat(63)] {
            assert_eq!(check_label_key(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_label_key(""), Err(LabelKeyError::Empty));
        assert!(matches!(
            check_label_key("a/b/c"),
            Err(LabelKeyError::TooManySlashes { .. })
        ));
        assert!(matches!(
            check_label_key("Example.com/b"),
            Err(LabelKeyError::BadPrefix { .. })
        ));
        assert!(matches!(
            check_label_key("/b"),
            Err(LabelKeyError::BadPrefix { .. })
        ));
        for bad in ["a/", "-a", "a_", &"x".repeat(64)] {
            assert!(
                matches!(check_label_key(bad), Err(LabelKeyError::BadName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn label_value_syntax() {
        for ok in ["", "sweet", "a.b-c_d", "7", &"v".repeat(63)] {
            assert_eq!(check_label_value(ok), Ok(()), "{ok}");
        }
        for bad in [" ", "-a", "a-", "a b", &"v".repeat(64), "é"] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// P2 (trusted labels): no key under a node-restriction namespace is ever
        /// kubelet-writable.
        #[test]
        fn node_restriction_keys_are_never_kubelet_writable(
            sub in "([a-z0-9]{1,10}\\.){0,2}",
            name in "[a-z0-9]{1,20}",
        ) {
            let key = format!("{sub}node-restriction.kubernetes.io/{name}");
            prop_assert!(!kubelet_may_set(&key));
            prop_assert!(check_flavor_label_key(&key).is_ok());
        }

        /// Any key outside the kubernetes.io / k8s.io namespaces is writable by the node, so
        /// it is refused as a flavor label.
        #[test]
        fn keys_outside_kubernetes_namespaces_are_refused_for_flavors(
            domain in "[a-z]{1,10}\\.(com|org|net)",
            name in "[a-z0-9]{1,20}",
        ) {
            let key = format!("{domain}/{name}");
            prop_assert!(kubelet_may_set(&key));
            let refused = matches!(check_flavor_label_key(&key), Err(LabelKeyError::KubeletWritable { .. }));
            prop_assert!(refused);
        }

        #[test]
        fn parse_accepts_exactly_what_check_accepts(s in "[a-zA-Z0-9./_-]{0,70}") {
            prop_assert_eq!(s.parse::<LabelKey>().is_ok(), check_label_key(&s).is_ok());
            prop_assert_eq!(s.parse::<LabelValue>().is_ok(), check_label_value(&s).is_ok());
        }
    }
}
