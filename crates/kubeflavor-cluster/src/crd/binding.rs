//! A FlavorBinding and kubeflavor-core's view of it, both ways: the facts core's policy and
//! node-state functions take from a stored binding, and the binding (and its status) that
//! core's answers call for. The controller reads and builds bindings only through these;
//! `crate::bindings` moves them to and from the API server.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeflavor_core::approval::client::BindingFacts;
use kubeflavor_core::approval::serving::ServingBinding;
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::flavor::input_labels::InputLabels;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::node::state::{BindingState, HolderFacts, NodeChange, NodeFacts, Revocation};
use kubeflavor_core::token::TokenId;
use kubeflavor_core::token::meta::Custody;

use super::{
    BINDING_IDENTITY_LABEL, BINDING_TOKEN_ID_LABEL, BindingIdentity, CONDITION_FLAVORED,
    CONDITION_REVOKED, Condition, FlavorBinding, FlavorBindingSpec, FlavorBindingStatus,
    FlavorTaint, effect_str,
};

/// What an approval records in a new binding: the token, its Secret and flavor, the CSR and
/// its key, and the token's custody.
pub struct NewBinding<'a> {
    pub node: &'a NodeName,
    pub token: &'a TokenId,
    /// The uid of the token Secret the CSR was decided on.
    pub token_uid: Option<String>,
    pub flavor: &'a FlavorName,
    pub csr_name: &'a str,
    /// The SHA-256 of the CSR's public key, hex.
    pub public_key_sha256: String,
    pub custody: &'a Custody,
    /// The token's input labels, as the Flavor allowed them.
    pub input_labels: &'a InputLabels,
}

/// The token id, and the identity the token was minted for when it names one.
fn binding_labels(token: &TokenId, custody: &Custody) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> =
        [(BINDING_TOKEN_ID_LABEL.to_string(), token.to_string())].into();
    if let Some(identity) = &custody.identity {
        labels.insert(BINDING_IDENTITY_LABEL.to_string(), identity.key());
    }
    labels
}

impl FlavorBinding {
    /// The binding an approval creates first (named after the node, labelled with its token
    /// id: `token create` looks bindings up by id, so it never mints an id a binding still
    /// names).
    pub fn for_approval(new: NewBinding<'_>, now: jiff::Timestamp) -> FlavorBinding {
        FlavorBinding {
            metadata: ObjectMeta {
                name: Some(new.node.to_string()),
                labels: Some(binding_labels(new.token, new.custody)),
                ..ObjectMeta::default()
            },
            spec: FlavorBindingSpec {
                node: new.node.to_string(),
                flavor: new.flavor.to_string(),
                token_id: new.token.to_string(),
                token_uid: new.token_uid,
                csr_name: new.csr_name.to_string(),
                public_key_sha256: new.public_key_sha256,
                bound_at: whole_seconds(now),
                issued_to: new.custody.issued_to.as_ref().map(|t| t.to_string()),
                issued_by: new.custody.issued_by.clone(),
                requested_by: new.custody.requested_by.clone(),
                identity: new.custody.identity.as_ref().map(|i| BindingIdentity {
                    issuer: i.issuer.clone(),
                    subject: i.subject.clone(),
                }),
                input_labels: new.input_labels.to_map(),
            },
            status: None,
        }
    }

    fn has_condition(&self, type_: &str) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
    }

    /// The binding's Revoked condition is True.
    pub fn is_revoked(&self) -> bool {
        self.has_condition(CONDITION_REVOKED)
    }

    /// The binding's Flavored condition is True: its Node carries the flavor.
    pub fn is_flavored(&self) -> bool {
        self.has_condition(CONDITION_FLAVORED)
    }

    /// What core's `node_is_the_holders` needs before the binding's CSR is read: revoked,
    /// and whether the status records a flavor applied to the Node.
    pub fn holder_facts(&self) -> HolderFacts {
        let applied = self
            .status
            .as_ref()
            .is_some_and(|s| !s.applied_labels.is_empty() || !s.applied_taints.is_empty());
        HolderFacts {
            revoked: self.is_revoked(),
            flavored_before: applied || self.is_flavored(),
        }
    }

    /// The status with the Revoked condition `why` set (any earlier Revoked condition
    /// replaced), or `None` when the binding is revoked already.
    pub fn revoked_status(&self, why: &Revocation) -> Option<FlavorBindingStatus> {
        if self.is_revoked() {
            return None;
        }
        let mut status = self.status.clone().unwrap_or_default();
        status.conditions.retain(|c| c.type_ != CONDITION_REVOKED);
        status.conditions.push(Condition {
            observed_generation: self.metadata.generation,
            ..condition(CONDITION_REVOKED, true, why.reason(), &why.message(), None)
        });
        Some(status)
    }

    /// The status with condition `type_` True (`reason`, `message`), or `None` when it is
    /// True already: the record of a revocation step (TokenSpent, PodsRemoved).
    pub fn with_condition(
        &self,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Option<FlavorBindingStatus> {
        let prev = self.status.as_ref();
        if prev.is_some_and(|p| {
            p.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        }) {
            return None;
        }
        let mut status = self.status.clone().unwrap_or_default();
        status.conditions.retain(|c| c.type_ != type_);
        status.conditions.push(Condition {
            observed_generation: self.metadata.generation,
            ..condition(type_, true, reason, message, None)
        });
        Some(status)
    }

    /// The status once `change` (core's answer) made the Node `after`: what kubeflavor
    /// applied (with the values it has), the Flavored condition core chose, and the
    /// administrator's conditions (Revoked, and the revocation's TokenSpent and PodsRemoved)
    /// carried over unchanged.
    pub fn status_after(&self, change: &NodeChange, after: &NodeFacts) -> FlavorBindingStatus {
        let prev = self.status.as_ref();
        let applied_labels: BTreeMap<String, String> = change
            .applied_labels
            .iter()
            .filter_map(|k| after.labels.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        let applied_taints: Vec<FlavorTaint> = change
            .applied_taints
            .iter()
            .filter_map(|(k, e)| {
                let t = after
                    .taints
                    .iter()
                    .find(|t| &t.key == k && &t.effect == e)?;
                Some(FlavorTaint {
                    key: k.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: serde_json::from_value(serde_json::json!(e)).ok()?,
                })
            })
            .collect();
        let outcome = change.outcome;
        let flavored = condition(
            CONDITION_FLAVORED,
            outcome.is_flavored(),
            outcome.reason(),
            outcome.message(),
            prev,
        );
        let revoked = prev
            .into_iter()
            .flat_map(|p| p.conditions.iter())
            .filter(|c| c.type_ != CONDITION_FLAVORED)
            .cloned();
        FlavorBindingStatus {
            conditions: std::iter::once(flavored).chain(revoked).collect(),
            applied_labels,
            applied_taints,
            observed_generation: self.metadata.generation,
        }
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

    /// What the serving-certificate policy needs to know about this binding: its node, and
    /// whether it is revoked or being deleted (either way it vouches for nothing more).
    pub fn serving_facts(&self) -> ServingBinding {
        ServingBinding {
            node: self.spec.node.clone(),
            revoked: self.is_revoked() || self.metadata.deletion_timestamp.is_some(),
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
            input_labels: self.input_labels(),
            // Where the node is on the network is not the binding's to say: the node loop
            // adds it from the node's report and the Sites.
            placement: Default::default(),
        }
    }

    /// The input labels the binding recorded; none when they do not read (the CRD's schema
    /// keeps such values off a binding).
    pub fn input_labels(&self) -> InputLabels {
        InputLabels::from_map(&self.spec.input_labels).unwrap_or_else(|e| {
            tracing::warn!(binding = %self.spec.node, error = %e, "binding's input labels do not read; none are put on the Node");
            InputLabels::default()
        })
    }
}

/// metav1.Time has second precision on the wire.
pub fn whole_seconds(t: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// A binding condition of `type_` (see [`Condition::after`]).
fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    prev: Option<&FlavorBindingStatus>,
) -> Condition {
    let previous = prev.map_or(&[][..], |p| &p.conditions[..]);
    Condition::after(type_, ok, reason, message, previous)
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
                requested_by: None,
                identity: None,
                input_labels: Default::default(),
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
