//! P7 (revocation that cuts off): what kubeflavor's authorization webhook answers the API
//! server about a request.
//!
//! Kubernetes cannot revoke a client certificate (kubernetes#18982), so a revoked node's
//! kubelet keeps its identity `system:node:X` until the certificate expires. The API server
//! asks authorization webhooks before its Node and RBAC authorizers; a webhook that answers
//! "denied" for every request of a revoked node cuts it off at once. For every other
//! request the answer is "no opinion", so Node and RBAC decide exactly as without the
//! webhook: the webhook can only take rights away, never grant any.
//!
//! A name stays cut off while any of three marks stands, so no single deletion brings a
//! revoked node back:
//! - its FlavorBinding's Revoked condition is True (`kubeflavor node revoke`);
//! - its Node carries the NoExecute taint `kubeflavor.io/revoked` (the controller sets it on
//!   revocation and keeps it when the revoked binding is deleted; NodeRestriction forbids a
//!   kubelet to change its own taints, and a cut-off kubelet cannot delete its Node);
//! - its name is listed in the revocation list `kube-system/kubeflavor-revoked-nodes`
//!   (`crate::node::revocation_list`), which `node revoke` writes first and only `node forget`
//!   empties: it survives the deletion of both the binding and the Node.
//!
//! Un-revoking is therefore a deliberate act of an administrator: `kubeflavor node forget`.

/// The group every kubelet identity is in (Node authorizer's `NodeIdentity`).
pub const NODES_GROUP: &str = "system:nodes";
/// The user name prefix of a kubelet identity.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// Why a node name is cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CutOff {
    /// Its FlavorBinding is revoked.
    BindingRevoked,
    /// Its Node still carries `kubeflavor.io/revoked` (the binding is gone or not revoked).
    NodeMarkedRevoked,
    /// Its name is in the revocation list (binding and Node may both be gone).
    Listed,
}

/// Whether a Node taint is the revocation mark: `kubeflavor.io/revoked` with effect
/// NoExecute, as the controller sets it (any value). The webhook cuts such a Node's name
/// off, and its serving CSRs are denied, with or without a binding.
pub fn is_revocation_mark(key: &str, effect: &str) -> bool {
    key == crate::flavor::REVOKED_TAINT && effect == "NoExecute"
}

/// The webhook's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `{"allowed": false, "denied": true, "reason": ...}`: the API server refuses the
    /// request with 403 and this reason, whatever Node and RBAC would say.
    Denied(String),
    /// `{"allowed": false}`: the next authorizers decide.
    NoOpinion,
}

impl Answer {
    /// The answer as a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            Answer::Denied(_) => "denied_revoked",
            Answer::NoOpinion => "no_opinion",
        }
    }
}

/// The node name of a kubelet identity: `system:node:<name>` in `system:nodes`, as the
/// Node authorizer reads it. Other users, and a `system:node:` name outside the group, are
/// not nodes to it and not to this webhook.
pub fn node_name<'a>(user: &'a str, groups: &[String]) -> Option<&'a str> {
    let name = user.strip_prefix(NODE_USER_PREFIX)?;
    (!name.is_empty() && groups.iter().any(|g| g == NODES_GROUP)).then_some(name)
}

/// The reason the API server shows a refused node (in its 403 and audit log).
pub fn reason(node: &str, why: CutOff) -> String {
    match why {
        CutOff::BindingRevoked => format!(
            "kubeflavor: node {node} is revoked (FlavorBinding {node} has Revoked=True); its certificate authenticates it but authorizes nothing"
        ),
        CutOff::NodeMarkedRevoked => format!(
            "kubeflavor: node {node} was revoked (its Node carries the taint kubeflavor.io/revoked); its certificate authenticates it but authorizes nothing"
        ),
        CutOff::Listed => format!(
            "kubeflavor: node {node} was revoked (listed in kube-system/kubeflavor-revoked-nodes); its certificate authenticates it but authorizes nothing"
        ),
    }
}

/// The answer for a request of `user` in `groups`; `cut_off` says whether (and why) a node
/// name is cut off, from what the replica knows of bindings and Nodes.
pub fn decide(user: &str, groups: &[String], cut_off: impl Fn(&str) -> Option<CutOff>) -> Answer {
    match node_name(user, groups).and_then(|node| cut_off(node).map(|why| (node, why))) {
        Some((node, why)) => Answer::Denied(reason(node, why)),
        None => Answer::NoOpinion,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn only_kubeflavors_noexecute_revoked_taint_marks_a_node() {
        assert!(is_revocation_mark("kubeflavor.io/revoked", "NoExecute"));
        assert!(!is_revocation_mark("kubeflavor.io/revoked", "NoSchedule"));
        assert!(!is_revocation_mark("kubeflavor.io/unverified", "NoExecute"));
        assert!(!is_revocation_mark("example.com/revoked", "NoExecute"));
    }

    fn nodes() -> Vec<String> {
        vec![NODES_GROUP.into(), "system:authenticated".into()]
    }

    fn revoked(names: &[(&str, CutOff)]) -> impl Fn(&str) -> Option<CutOff> {
        let map: HashMap<String, CutOff> = names.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        move |n| map.get(n).copied()
    }

    #[test]
    fn revoked_node_is_denied_with_a_reason_naming_the_revocation() {
        let answer = decide(
            "system:node:w1",
            &nodes(),
            revoked(&[("w1", CutOff::BindingRevoked)]),
        );
        let Answer::Denied(reason) = answer else {
            panic!("a revoked node must be denied, got {answer:?}")
        };
        assert!(reason.contains("node w1 is revoked"), "{reason}");
        assert!(reason.contains("Revoked=True"), "{reason}");
    }

    #[test]
    fn node_whose_revoked_binding_was_deleted_stays_denied_while_its_node_is_marked() {
        let answer = decide(
            "system:node:w1",
            &nodes(),
            revoked(&[("w1", CutOff::NodeMarkedRevoked)]),
        );
        assert!(
            matches!(&answer, Answer::Denied(r) if r.contains("kubeflavor.io/revoked")),
            "{answer:?}"
        );
    }

    #[test]
    fn a_listed_name_stays_denied_with_neither_binding_nor_node() {
        let answer = decide(
            "system:node:w1",
            &nodes(),
            revoked(&[("w1", CutOff::Listed)]),
        );
        assert!(
            matches!(&answer, Answer::Denied(r) if r.contains("kubeflavor-revoked-nodes")),
            "{answer:?}"
        );
    }

    #[test]
    fn node_not_revoked_gets_no_opinion() {
        let answer = decide(
            "system:node:w2",
            &nodes(),
            revoked(&[("w1", CutOff::BindingRevoked)]),
        );
        assert_eq!(answer, Answer::NoOpinion);
    }

    #[test]
    fn only_kubelet_identities_are_nodes() {
        let cut = revoked(&[("w1", CutOff::BindingRevoked)]);
        // Not in system:nodes: the Node authorizer does not treat it as a node either.
        assert_eq!(
            decide("system:node:w1", &["system:authenticated".into()], &cut),
            Answer::NoOpinion
        );
        assert_eq!(decide("w1", &nodes(), &cut), Answer::NoOpinion);
        assert_eq!(decide("system:node:", &nodes(), &cut), Answer::NoOpinion);
        assert_eq!(
            decide("system:serviceaccount:kube-system:w1", &nodes(), &cut),
            Answer::NoOpinion
        );
        assert_eq!(node_name("system:node:w1", &nodes()), Some("w1"));
    }

    #[test]
    fn answer_kinds_are_the_metric_labels() {
        assert_eq!(Answer::NoOpinion.kind(), "no_opinion");
        assert_eq!(Answer::Denied(String::new()).kind(), "denied_revoked");
    }

    proptest! {
        /// P7: a kubelet identity is denied exactly when its name is cut off, and the
        /// reason names it; every other request gets no opinion (the webhook never allows).
        #[test]
        fn denied_exactly_when_cut_off(
            name in "[a-z0-9][a-z0-9.-]{0,20}",
            other in "[a-z0-9][a-z0-9.-]{0,20}",
            in_group in any::<bool>(),
            marked in proptest::option::of(prop_oneof![Just(CutOff::BindingRevoked), Just(CutOff::NodeMarkedRevoked), Just(CutOff::Listed)]),
        ) {
            let groups = if in_group { nodes() } else { vec!["system:authenticated".into()] };
            let cut = |n: &str| if n == name { marked } else { None };
            let answer = decide(&format!("system:node:{name}"), &groups, cut);
            match (in_group, marked) {
                (true, Some(why)) => prop_assert_eq!(answer, Answer::Denied(reason(&name, why))),
                _ => prop_assert_eq!(answer, Answer::NoOpinion),
            }
            if other != name {
                prop_assert_eq!(decide(&format!("system:node:{other}"), &nodes(), cut), Answer::NoOpinion);
            }
            prop_assert_eq!(decide(&name, &nodes(), cut), Answer::NoOpinion);
        }
    }
}
