//! Command-line values that wrap kubeflavor-core's checks, so clap refuses bad input before
//! any cluster is contacted.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use kubeflavor_core::flavor::labels::{
    LabelKey, LabelKeyError, LabelValue, check_flavor_label_key,
};
use kubeflavor_core::flavor::{
    TrustLevel, TrustLevelError, is_reserved_label_key, parse_max_nodes,
};

/// A `KEY=VALUE` flag whose parts are checked later, against a Flavor (`token create
/// --node-label`, `flavor create --input-label`): only the shape is checked here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

#[derive(Debug, thiserror::Error)]
#[error("written KEY=VALUE (e.g. site=berlin); no '=' in {0:?}")]
pub struct KeyValueError(String);

impl FromStr for KeyValue {
    type Err = KeyValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, value) = s.split_once('=').ok_or_else(|| KeyValueError(s.into()))?;
        Ok(KeyValue {
            key: key.into(),
            value: value.into(),
        })
    }
}

/// `--label key=value` of a flavor: a key the kubelet cannot write (P2, trusted labels) and a valid
/// value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlavorLabel {
    pub key: LabelKey,
    pub value: LabelValue,
}

#[derive(Debug, thiserror::Error)]
pub enum FlavorLabelError {
    #[error("a label is written key=value (the value may be empty: key=); no '=' in {0:?}")]
    MissingEquals(String),
    #[error("{0}")]
    Key(#[from] LabelKeyError),
    #[error("{0}")]
    Value(#[from] kubeflavor_core::flavor::labels::LabelValueError),
}

impl FromStr for FlavorLabel {
    type Err = FlavorLabelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, value) = s
            .split_once('=')
            .ok_or_else(|| FlavorLabelError::MissingEquals(s.into()))?;
        check_flavor_label_key(key)?;
        if is_reserved_label_key(key) {
            return Err(LabelKeyError::Reserved { key: key.into() }.into());
        }
        Ok(FlavorLabel {
            key: key.parse()?,
            value: value.parse()?,
        })
    }
}

impl fmt::Display for FlavorLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// `--max-nodes N`: at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxNodes(pub NonZeroU32);

#[derive(Debug, thiserror::Error)]
pub enum MaxNodesError {
    #[error("max nodes {0:?} is not a whole number; use a number of at least 1")]
    NotANumber(String),
    #[error(
        "max nodes {0} is out of range: a token must be able to bind at least 1 node name (and at most {max})",
        max = u32::MAX
    )]
    Range(i64),
}

impl FromStr for MaxNodes {
    type Err = MaxNodesError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n: i64 = s
            .trim()
            .parse()
            .map_err(|_| MaxNodesError::NotANumber(s.into()))?;
        parse_max_nodes(n)
            .map(MaxNodes)
            .map_err(|_| MaxNodesError::Range(n))
    }
}

/// `--trust-level N`: 0..=100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustLevelArg(pub TrustLevel);

#[derive(Debug, thiserror::Error)]
pub enum TrustLevelArgError {
    #[error("trust level {0:?} is not a whole number; use an integer from 0 to 100")]
    NotANumber(String),
    #[error("{0}")]
    Range(#[from] TrustLevelError),
}

impl FromStr for TrustLevelArg {
    type Err = TrustLevelArgError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n: i64 = s
            .trim()
            .parse()
            .map_err(|_| TrustLevelArgError::NotANumber(s.into()))?;
        Ok(TrustLevelArg(TrustLevel::try_from(n)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_core::flavor::FLAVOR_LABEL;

    #[test]
    fn kubelet_writable_label_is_refused_with_advice() {
        let err = "example.com/tier=gold"
            .parse::<FlavorLabel>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("NodeRestriction"), "{err}");
        assert!(err.contains("node-restriction.kubernetes.io/"), "{err}");
    }

    #[test]
    fn node_restriction_and_node_role_labels_are_accepted() {
        let l: FlavorLabel = "kubeflavor.node-restriction.kubernetes.io/tier=gold"
            .parse()
            .unwrap();
        assert_eq!(
            l.to_string(),
            "kubeflavor.node-restriction.kubernetes.io/tier=gold"
        );
        let l: FlavorLabel = "node-role.kubernetes.io/edge=".parse().unwrap();
        assert_eq!(l.value.as_str(), "");
    }

    #[test]
    fn reserved_labels_are_refused() {
        let err = format!("{FLAVOR_LABEL}=sweet")
            .parse::<FlavorLabel>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("set by kubeflavor itself"), "{err}");
    }

    #[test]
    fn label_without_equals_says_the_form() {
        let err = "node-role.kubernetes.io/edge"
            .parse::<FlavorLabel>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("key=value"), "{err}");
    }

    #[test]
    fn max_nodes_zero_and_junk_are_refused() {
        assert!("0".parse::<MaxNodes>().is_err());
        assert!("-1".parse::<MaxNodes>().is_err());
        assert!(
            "many"
                .parse::<MaxNodes>()
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        assert_eq!("3".parse::<MaxNodes>().unwrap().0.get(), 3);
    }

    #[test]
    fn trust_level_bounds() {
        assert!("101".parse::<TrustLevelArg>().is_err());
        assert!("-1".parse::<TrustLevelArg>().is_err());
        assert_eq!("100".parse::<TrustLevelArg>().unwrap().0.get(), 100);
        assert_eq!("0".parse::<TrustLevelArg>().unwrap().0.get(), 0);
    }
}
