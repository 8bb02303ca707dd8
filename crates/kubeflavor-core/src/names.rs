//! Kubernetes object names that kubeflavor's decisions rest on.
//!
//! A node name is compared byte for byte with CSR common names, binding names and Node
//! names, so it is parsed once here and carried as [`NodeName`] everywhere else.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Longest DNS-1123 subdomain Kubernetes accepts (`IsDNS1123Subdomain`).
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
/// Longest DNS-1123 label Kubernetes accepts (`IsDNS1123Label`).
pub const DNS1123_LABEL_MAX_LEN: usize = 63;

/// Why a string is not a DNS-1123 subdomain, as Kubernetes validates object names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Dns1123Error {
    #[error("must not be empty")]
    Empty,
    #[error("is {len} characters long; at most {max} are allowed")]
    TooLong { len: usize, max: usize },
    #[error(
        "character {ch:?} at position {position} is not allowed; use lowercase letters, digits, '-' and '.'"
    )]
    BadCharacter { ch: char, position: usize },
    #[error("each dot-separated part must start and end with a lowercase letter or digit")]
    BadPartEdge,
}

/// Checks the DNS-1123 subdomain rule (lowercase alphanumerics, `-` and `.`, each
/// dot-separated part starting and ending with an alphanumeric, at most 253 characters).
pub fn check_dns1123_subdomain(s: &str) -> Result<(), Dns1123Error> {
    check_dns1123_subdomain_max(s, DNS1123_SUBDOMAIN_MAX_LEN)
}

/// [`check_dns1123_subdomain`] with a tighter length limit (e.g. 63 for a name that is
/// also published as a label value).
pub fn check_dns1123_subdomain_max(s: &str, max: usize) -> Result<(), Dns1123Error> {
    if s.is_empty() {
        return Err(Dns1123Error::Empty);
    }
    if s.len() > max {
        return Err(Dns1123Error::TooLong { len: s.len(), max });
    }
    for (position, ch) in s.chars().enumerate() {
        if !(ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-' || ch == '.') {
            return Err(Dns1123Error::BadCharacter { ch, position });
        }
    }
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    for part in s.split('.') {
        let bytes = part.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(&first), Some(&last)) if edge_ok(first) && edge_ok(last) => {}
            _ => return Err(Dns1123Error::BadPartEdge),
        }
    }
    Ok(())
}

/// A Node name: a DNS-1123 subdomain of at most 253 characters.
///
/// It is also the name of the node's FlavorBinding and the suffix of the kubelet's CSR
/// common name `system:node:<name>`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeName(String);

/// A string that is not a valid node name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid node name {name:?}: {problem} (node names are DNS-1123 subdomains, e.g. worker-1)"
)]
pub struct NodeNameError {
    pub name: String,
    pub problem: Dns1123Error,
}

impl NodeName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for NodeName {
    type Err = NodeNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_dns1123_subdomain(s).map_err(|problem| NodeNameError {
            name: s.to_owned(),
            problem,
        })?;
        Ok(NodeName(s.to_owned()))
    }
}

impl TryFrom<String> for NodeName {
    type Error = NodeNameError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<NodeName> for String {
    fn from(n: NodeName) -> String {
        n.0
    }
}

impl AsRef<str> for NodeName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeName({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_typical_node_names() {
        for ok in [
            "worker-1",
            "a",
            "ip-10-0-0-1.ec2.internal",
            &"a".repeat(253),
        ] {
            assert!(ok.parse::<NodeName>().is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_each_way_a_name_can_be_wrong() {
        assert_eq!(check_dns1123_subdomain(""), Err(Dns1123Error::Empty));
        assert_eq!(
            check_dns1123_subdomain(&"a".repeat(254)),
            Err(Dns1123Error::TooLong { len: 254, max: 253 })
        );
        assert_eq!(
            check_dns1123_subdomain("Worker"),
            Err(Dns1123Error::BadCharacter {
                ch: 'W',
                position: 0
            })
        );
        assert_eq!(
            check_dns1123_subdomain("a_b"),
            Err(Dns1123Error::BadCharacter {
                ch: '_',
                position: 1
            })
        );
        for bad in ["-a", "a-", "a..b", ".a", "a.", "a.-b"] {
            assert_eq!(
                check_dns1123_subdomain(bad),
                Err(Dns1123Error::BadPartEdge),
                "{bad}"
            );
        }
        let err = "system:node:x".parse::<NodeName>().unwrap_err();
        assert!(
            err.to_string().contains("character ':' at position 6"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn node_names_round_trip_through_serde(s in "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\\.[a-z0-9]{1,10}){0,3}") {
            let n: NodeName = s.parse().unwrap();
            let json = serde_json::to_string(&n).unwrap();
            let back: NodeName = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, n);
        }

        #[test]
        fn anything_with_an_uppercase_letter_is_refused(s in "[a-z]{0,5}[A-Z][a-z]{0,5}") {
            prop_assert!(s.parse::<NodeName>().is_err());
        }
    }
}
