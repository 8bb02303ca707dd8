//! A node writes only its own NodeReport (P9): RBAC lets every node (group `system:nodes`)
//! create and patch `nodereports` but cannot say which; `install` ships this rule as a
//! ValidatingAdmissionPolicy matching the NodeReport writes of `system:nodes` identities:
//! the report must be named after the node that writes it (`system:node:<name>`).
//!
//! The node may write only the report's spec (its claims): RBAC gives it no
//! `nodereports/status`, where the join-token API records what it observed and the
//! controller its reading, and the API server drops status from writes of the main
//! resource.

/// The ValidatingAdmissionPolicy (and its binding).
pub const POLICY_NAME: &str = "kubeflavor-node-reports";

/// The prefix of a node's user name.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group every node's identity carries.
pub const NODES_GROUP: &str = "system:nodes";

/// The match condition: a node's identity writes.
pub fn applies_to() -> String {
    format!("'{NODES_GROUP}' in request.userInfo.groups")
}

/// The validation: the report (the one written, or on a delete the one removed) is named
/// after the writer.
pub const VALIDATION: &str = "request.userInfo.username == 'system:node:' + (request.operation == 'DELETE' ? oldObject.metadata.name : object.metadata.name)";

/// What the API server answers a node writing another node's report.
pub fn refusal() -> String {
    "a node may write only its own NodeReport, named after it (system:node:<name> writes <name>)"
        .into()
}

/// The rule the policy stands for, as a plain function: may the identity `user` (with
/// `groups`) write the report named `report`?
pub fn allows(user: &str, groups: &[&str], report: &str) -> bool {
    !groups.contains(&NODES_GROUP)
        || (!report.is_empty() && user.strip_prefix(NODE_USER_PREFIX) == Some(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_writes_its_own_report_and_no_other() {
        let nodes = [NODES_GROUP, "system:authenticated"];
        assert!(allows("system:node:worker-1", &nodes, "worker-1"));
        assert!(!allows("system:node:worker-1", &nodes, "worker-2"));
        assert!(!allows("system:node:worker-1", &nodes, "worker-10"));
        assert!(!allows("system:node:", &nodes, ""));
        // Not a node (the controller, an admin): the policy does not apply; RBAC decides.
        assert!(allows(
            "system:serviceaccount:kube-system:kubeflavor",
            &[],
            "worker-2"
        ));
        // A user named like a node but without the group is not a node: RBAC decides.
        assert!(allows("system:node:worker-1", &[], "worker-2"));
    }
}
