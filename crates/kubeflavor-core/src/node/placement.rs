//! Where kubeflavor's own pods run: the controller (which also serves the authorization
//! webhook) and the join-token API hold credentials that approve kubelet certificates,
//! read kube-system Secrets and mint join tokens. Root on the node running them takes those
//! credentials, so they run only on nodes the owner trusts, never on a node a third party
//! administers (a worker that joined with a token, an unverified or revoked node).
//!
//! The choice is a required node affinity on a label a kubelet cannot set on its own Node
//! (NodeRestriction refuses a kubelet's writes of `node-role.kubernetes.io/*` and of
//! `*.node-restriction.kubernetes.io/*` labels), plus the tolerations that placement needs
//! and no other: never `kubeflavor.io/unverified` nor `kubeflavor.io/revoked`.

use crate::flavor::taint::TaintEffect;
use crate::flavor::{REVOKED_TAINT, TRUST_LEVEL_LABEL, TrustLevel, UNVERIFIED_TAINT};

/// The label kubeadm puts on control-plane Nodes (empty value). NodeRestriction keeps a
/// kubelet from setting any `node-role.kubernetes.io/` label on its Node.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// The taint kubeadm puts on control-plane Nodes, with effect NoSchedule.
pub const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane";

/// Where kubeflavor's pods may be scheduled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Placement {
    /// Control-plane Nodes only (the default): the owner administers them.
    #[default]
    ControlPlane,
    /// Nodes whose kubeflavor trust-level label is at least this level (`install
    /// --run-on-trust-level N`): nodes of Flavors the owner rates that high.
    TrustLevel(TrustLevel),
}

/// A node selector requirement, as `nodeAffinity` spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRequirement {
    pub key: &'static str,
    /// `Exists` or `Gt`.
    pub operator: &'static str,
    pub values: Vec<String>,
}

/// A toleration of every value of the taint `key` with `effect` (operator Exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    pub key: &'static str,
    pub effect: TaintEffect,
}

impl Placement {
    /// The one requirement a Node must meet (required during scheduling).
    pub fn requirement(self) -> NodeRequirement {
        match self {
            Placement::ControlPlane => NodeRequirement {
                key: CONTROL_PLANE_LABEL,
                operator: "Exists",
                values: Vec::new(),
            },
            // Level 0 is every flavored node: the label present. The API server refuses
            // "Gt -1" (requirement values must be label values, and "-1" is not one).
            Placement::TrustLevel(level) if level.get() == 0 => NodeRequirement {
                key: TRUST_LEVEL_LABEL,
                operator: "Exists",
                values: Vec::new(),
            },
            // Gt is strict, so "at least N" is "greater than N - 1".
            Placement::TrustLevel(level) => NodeRequirement {
                key: TRUST_LEVEL_LABEL,
                operator: "Gt",
                values: vec![(level.get() - 1).to_string()],
            },
        }
    }

    /// The taints the pods must tolerate to run there: the control-plane taint for the
    /// control plane; none on flavored nodes (a Flavor's own taints keep kubeflavor off
    /// its nodes like any other pod).
    pub fn tolerations(self) -> Vec<Toleration> {
        match self {
            Placement::ControlPlane => vec![Toleration {
                key: CONTROL_PLANE_TAINT,
                effect: TaintEffect::NoSchedule,
            }],
            Placement::TrustLevel(_) => Vec::new(),
        }
    }

    /// Where the pods run and why, for install's notes.
    pub fn describe(self) -> String {
        let why = "root on the node running them takes credentials that approve kubelet \
                   certificates, read kube-system Secrets and mint join tokens, so they never run \
                   on a node a third party administers, and never tolerate the taints \
                   kubeflavor.io/unverified and kubeflavor.io/revoked.";
        match self {
            Placement::ControlPlane => format!(
                "Runs only on control-plane Nodes (required affinity on the label \
                 {CONTROL_PLANE_LABEL}, which NodeRestriction keeps kubelets from setting, and the \
                 toleration of its NoSchedule taint): {why} To run on nodes of a Flavor you trust \
                 instead, install --run-on-trust-level N."
            ),
            Placement::TrustLevel(level) => format!(
                "Runs only on Nodes whose {TRUST_LEVEL_LABEL} label is {level} or more (install \
                 --run-on-trust-level {level}; only the controller sets that label, for Flavors \
                 you rate that high): {why} Their Flavors' own taints are not tolerated."
            ),
        }
    }
}

/// Whether a toleration list admits a pod onto a node with a taint of `key` and `effect`:
/// the rule of kube-scheduler's TaintToleration filter for Exists tolerations.
pub fn tolerated(tolerations: &[Toleration], key: &str, effect: TaintEffect) -> bool {
    tolerations
        .iter()
        .any(|t| t.key == key && t.effect == effect)
}

/// The taints kubeflavor's pods must never tolerate: those of nodes it does not trust.
pub const NEVER_TOLERATED: [(&str, TaintEffect); 3] = [
    (UNVERIFIED_TAINT, TaintEffect::NoSchedule),
    (REVOKED_TAINT, TaintEffect::NoExecute),
    (REVOKED_TAINT, TaintEffect::NoSchedule),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn level(n: i64) -> Placement {
        Placement::TrustLevel(TrustLevel::try_from(n).unwrap())
    }

    #[test]
    fn control_plane_by_default_with_its_toleration_only() {
        let p = Placement::default();
        assert_eq!(
            p.requirement(),
            NodeRequirement {
                key: "node-role.kubernetes.io/control-plane",
                operator: "Exists",
                values: vec![],
            }
        );
        assert_eq!(
            p.tolerations(),
            vec![Toleration {
                key: "node-role.kubernetes.io/control-plane",
                effect: TaintEffect::NoSchedule,
            }]
        );
    }

    #[test]
    fn a_trust_level_is_at_least_that_level() {
        let r = level(0).requirement();
        assert_eq!((r.key, r.operator), (TRUST_LEVEL_LABEL, "Exists"));
        assert!(r.values.is_empty());
        for (n, gt) in [(1, "0"), (50, "49"), (100, "99")] {
            let r = level(n).requirement();
            assert_eq!(r.key, TRUST_LEVEL_LABEL);
            assert_eq!(r.operator, "Gt");
            assert_eq!(r.values, vec![gt.to_string()]);
            assert!(level(n).tolerations().is_empty());
        }
    }

    #[test]
    fn untrusted_nodes_taints_are_never_tolerated() {
        for p in [Placement::ControlPlane, level(0), level(100)] {
            for (key, effect) in NEVER_TOLERATED {
                assert!(!tolerated(&p.tolerations(), key, effect), "{p:?} {key}");
            }
        }
    }

    #[test]
    fn the_notes_say_where_and_why() {
        let text = Placement::ControlPlane.describe();
        assert!(text.contains(CONTROL_PLANE_LABEL), "{text}");
        assert!(text.contains("NodeRestriction"), "{text}");
        let text = level(3).describe();
        assert!(text.contains("label is 3 or more"), "{text}");
        assert!(text.contains("never tolerate"), "{text}");
    }
}
