//! Between the Flavor object and kubeflavor-core's validated `FlavorRules`. The object is
//! what the API stores; the rules are what the CLI and the controller act on. Every read
//! goes through [`rules_from_flavor`], so a Flavor that slipped past the API server's
//! validation (an old CRD, a test double without CEL) is still refused.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;
use kubeflavor_core::flavor::{
    self as core, FlavorError, FlavorName, FlavorNameError, FlavorRules,
};

use super::{
    Flavor, FlavorSpec, FlavorTaint, InputLabelKey, InputLabelRules, TaintEffect, TokenDefaults,
    TokenLimits,
};

/// Why a stored Flavor cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("{0}")]
    Name(#[from] FlavorNameError),
    #[error("{0}")]
    Spec(#[from] FlavorError),
}

/// The plain spec core validates, from the object's spec.
pub fn core_spec(spec: &FlavorSpec) -> core::FlavorSpec {
    core::FlavorSpec {
        labels: spec.labels.clone(),
        taints: spec
            .taints
            .iter()
            .map(|t| core::TaintSpec {
                key: t.key.clone(),
                value: (!t.value.is_empty()).then(|| t.value.clone()),
                effect: effect_str(t.effect).to_string(),
            })
            .collect(),
        trust_level: spec.trust_level.map(i64::from),
        token_ttl: spec.token_defaults.as_ref().and_then(|d| d.ttl.clone()),
        max_nodes: spec
            .token_defaults
            .as_ref()
            .and_then(|d| d.max_nodes)
            .map(i64::from),
        token_limits: spec.token_limits.as_ref().map(|l| core::TokenLimitsSpec {
            max_ttl: l.max_ttl.clone(),
            max_nodes: l.max_nodes.map(i64::from),
            allow_never_expiring: l.allow_never_expiring,
        }),
        serving_addresses: spec.serving_addresses.clone(),
        input_labels: spec.input_labels.as_ref().map(input_labels_spec),
        allowed_sites: spec.allowed_sites.clone(),
    }
}

/// `inputLabels` (of a Flavor or a Roster) as the plain spec core validates.
pub fn input_labels_spec(
    rules: &InputLabelRules,
) -> kubeflavor_core::flavor::input_labels::InputLabelsSpec {
    kubeflavor_core::flavor::input_labels::InputLabelsSpec {
        max_labels: rules.max_labels.map(i64::from),
        keys: rules
            .keys
            .iter()
            .map(|k| kubeflavor_core::flavor::input_labels::InputKeySpec {
                key: k.key.clone(),
                values: k.values.clone(),
                pattern: k.pattern.clone(),
            })
            .collect(),
    }
}

/// Validate a stored Flavor: its name and every rule.
pub fn rules_from_flavor(flavor: &Flavor) -> Result<(FlavorName, FlavorRules), RulesError> {
    let name: FlavorName = flavor.metadata.name.clone().unwrap_or_default().parse()?;
    let rules = FlavorRules::from_spec(&core_spec(&flavor.spec))?;
    Ok((name, rules))
}

/// The Flavor object for validated rules.
pub fn flavor_from_rules(name: &FlavorName, rules: &FlavorRules) -> Flavor {
    let labels: BTreeMap<String, String> = rules
        .labels()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let taints = rules
        .taints()
        .iter()
        .map(|t| FlavorTaint {
            key: t.key.to_string(),
            value: t.value.to_string(),
            effect: effect_from_core(t.effect),
        })
        .collect();
    let token_defaults =
        (rules.token_ttl().is_some() || rules.max_nodes().is_some()).then(|| TokenDefaults {
            ttl: rules.token_ttl().map(|t| t.to_string()),
            max_nodes: rules.max_nodes().map(|n| n.get()),
        });
    let limits = rules.token_limits();
    let token_limits = (limits != Default::default()).then(|| TokenLimits {
        max_ttl: limits
            .max_ttl_secs
            .map(|s| core::TokenTtl::Seconds(s).to_string()),
        max_nodes: limits.max_nodes.map(|n| n.get()),
        allow_never_expiring: limits.allow_never_expiring,
    });
    Flavor {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: FlavorSpec {
            labels,
            taints,
            trust_level: rules.trust_level().map(|t| t.get()),
            token_defaults,
            token_limits,
            serving_addresses: rules
                .serving_addresses()
                .iter()
                .map(ToString::to_string)
                .collect(),
            input_labels: rules.input_labels().to_spec().map(|spec| InputLabelRules {
                max_labels: spec.max_labels.and_then(|n| u32::try_from(n).ok()),
                keys: spec
                    .keys
                    .into_iter()
                    .map(|k| InputLabelKey {
                        key: k.key,
                        values: k.values,
                        pattern: k.pattern,
                    })
                    .collect(),
            }),
            allowed_sites: rules.allowed_sites().to_vec(),
        },
        status: None,
    }
}

pub fn effect_str(effect: TaintEffect) -> &'static str {
    match effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

fn effect_from_core(effect: core::TaintEffect) -> TaintEffect {
    match effect {
        core::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
        core::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
        core::TaintEffect::NoExecute => TaintEffect::NoExecute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flavor(name: &str, spec: FlavorSpec) -> Flavor {
        Flavor {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    #[test]
    fn rules_round_trip_through_the_object() {
        let spec = FlavorSpec {
            labels: [(
                "kubeflavor.node-restriction.kubernetes.io/tier".to_string(),
                "gold".to_string(),
            )]
            .into(),
            taints: vec![FlavorTaint {
                key: "example.com/edge".into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            }],
            trust_level: Some(70),
            token_defaults: Some(TokenDefaults {
                ttl: Some("1h30m".into()),
                max_nodes: Some(3),
            }),
            token_limits: Some(TokenLimits {
                max_ttl: Some("168h".into()),
                max_nodes: Some(10),
                allow_never_expiring: Some(true),
            }),
            serving_addresses: vec!["10.20.0.0/16".into()],
            input_labels: Some(InputLabelRules {
                max_labels: Some(1),
                keys: vec![
                    InputLabelKey {
                        key: "segment".into(),
                        values: None,
                        pattern: Some("seg-[0-9]{1,4}".into()),
                    },
                    InputLabelKey {
                        key: "site".into(),
                        values: Some(vec!["berlin".into(), "paris".into()]),
                        pattern: None,
                    },
                ],
            }),
            allowed_sites: vec!["lyon".into()],
        };
        let original = flavor("sweet", spec);
        let (name, rules) = rules_from_flavor(&original).unwrap();
        assert_eq!(flavor_from_rules(&name, &rules), original);
    }

    #[test]
    fn kubelet_writable_label_in_a_stored_flavor_is_refused() {
        let spec = FlavorSpec {
            labels: [("example.com/tier".into(), "gold".into())].into(),
            ..Default::default()
        };
        let err = rules_from_flavor(&flavor("sweet", spec))
            .unwrap_err()
            .to_string();
        assert!(err.contains("NodeRestriction"), "{err}");
    }

    #[test]
    fn bad_name_is_refused() {
        assert!(matches!(
            rules_from_flavor(&flavor("Sweet", FlavorSpec::default())),
            Err(RulesError::Name(_))
        ));
    }
}
