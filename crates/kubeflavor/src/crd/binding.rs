//! From a stored FlavorBinding to the facts kubeflavor-core's policy and node-state
//! functions take. The controller reads bindings only through these.

use kubeflavor_core::node_state::BindingState;
use kubeflavor_core::policy::BindingFacts;
use kubeflavor_core::token::TokenId;

use super::{CONDITION_REVOKED, FlavorBinding, effect_str};

impl FlavorBinding {
    /// The binding's Revoked condition is True.
    pub fn is_revoked(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == CONDITION_REVOKED && c.status == "True")
        })
    }

    /// What the CSR policy needs to know about this binding. A token id or flavor name the
    /// CRD schema would refuse reads as `None`: such a binding belongs to no token.
    pub fn policy_facts(&self) -> BindingFacts {
        BindingFacts {
            token_id: self.spec.token_id.parse::<TokenId>().ok(),
            flavor: self.spec.flavor.parse().ok(),
            token_uid: self.spec.token_uid.clone(),
            bound_at: self.spec.bound_at,
            revoked: self.is_revoked(),
            csr_name: self.spec.csr_name.clone(),
            public_key_sha256: self.spec.public_key_sha256.clone(),
        }
    }

    /// What kubeflavor last applied to the Node, and whether the binding is revoked.
    pub fn node_state(&self) -> BindingState {
        let status = self.status.clone().unwrap_or_default();
        BindingState {
            revoked: self.is_revoked(),
            applied_labels: status.applied_labels.keys().cloned().collect(),
            applied_taints: status
                .applied_taints
                .iter()
                .map(|t| (t.key.clone(), effect_str(t.effect).to_string()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        Condition, FlavorBindingSpec, FlavorBindingStatus, FlavorTaint, TaintEffect,
    };
    use super::*;

    fn binding(status: Option<FlavorBindingStatus>) -> FlavorBinding {
        let mut b = FlavorBinding::new(
            "node-1",
            FlavorBindingSpec {
                node: "node-1".into(),
                flavor: "sweet".into(),
                token_id: "abcdef".into(),
                token_uid: Some("uid-1".into()),
                csr_name: "csr-1".into(),
                public_key_sha256: "ab".repeat(32),
                bound_at: "2026-11-30T04:00:00Z".parse().unwrap(),
                issued_to: None,
                issued_by: None,
            },
        );
        b.status = status;
        b
    }

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "Test".into(),
            message: String::new(),
            last_transition_time: "2026-11-30T04:00:00Z".parse().unwrap(),
            observed_generation: None,
        }
    }

    #[test]
    fn revoked_only_when_the_condition_is_true() {
        assert!(!binding(None).is_revoked());
        let status = |s: &str| FlavorBindingStatus {
            conditions: vec![condition("Revoked", s)],
            ..Default::default()
        };
        assert!(!binding(Some(status("False"))).is_revoked());
        assert!(binding(Some(status("True"))).is_revoked());
        let flavored = FlavorBindingStatus {
            conditions: vec![condition("Flavored", "True")],
            ..Default::default()
        };
        assert!(!binding(Some(flavored)).is_revoked());
    }

    #[test]
    fn facts_and_state_carry_the_binding() {
        let status = FlavorBindingStatus {
            conditions: vec![condition("Revoked", "True")],
            applied_labels: [(
                "kubeflavor.node-restriction.kubernetes.io/flavor".to_string(),
                "sweet".to_string(),
            )]
            .into(),
            applied_taints: vec![FlavorTaint {
                key: "example.com/a".into(),
                value: "x".into(),
                effect: TaintEffect::NoExecute,
            }],
            observed_generation: Some(1),
        };
        let b = binding(Some(status));
        let facts = b.policy_facts();
        assert_eq!(facts.token_id.unwrap().as_str(), "abcdef");
        assert_eq!(facts.flavor.unwrap().as_str(), "sweet");
        assert!(facts.revoked);
        assert_eq!(facts.csr_name, "csr-1");
        let state = b.node_state();
        assert!(state.revoked);
        assert!(
            state
                .applied_labels
                .contains("kubeflavor.node-restriction.kubernetes.io/flavor")
        );
        assert_eq!(
            state.applied_taints,
            [("example.com/a".to_string(), "NoExecute".to_string())]
        );
    }

    #[test]
    fn malformed_token_id_belongs_to_no_token() {
        let mut b = binding(None);
        b.spec.token_id = "ABC".into();
        assert!(b.policy_facts().token_id.is_none());
    }
}
