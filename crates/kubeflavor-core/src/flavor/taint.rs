//! Node taints in the `kubectl taint` form `key=value:Effect`, validated like the API
//! server validates `spec.taints`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::flavor::labels::{
    LabelKey, LabelKeyError, LabelValue, LabelValueError, check_label_key,
};

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn taints_round_trip_through_the_kubectl_form(
            key in "([a-z0-9]{1,8}\\.)?[a-z]{1,8}(/[A-Za-z0-9]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?)?",
            value in "([A-Za-z0-9]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?)?",
            effect in prop_oneof![Just(TaintEffect::NoSchedule), Just(TaintEffect::PreferNoSchedule), Just(TaintEffect::NoExecute)],
        ) {
            let t = Taint::new(&key, &value, effect).unwrap();
            prop_assert_eq!(t.to_string().parse::<Taint>(), Ok(t));
        }

        #[test]
        fn parsing_never_accepts_an_invalid_key_or_value(s in "[ -~]{0,30}") {
            if let Ok(t) = s.parse::<Taint>() {
                prop_assert!(crate::flavor::labels::check_label_key(t.key.as_str()).is_ok());
                prop_assert!(crate::flavor::labels::check_label_value(t.value.as_str()).is_ok());
            }
        }
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
}
