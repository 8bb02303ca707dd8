//! Nodes report their own network only: RBAC lets every node create and patch
//! `nodereports.kubeflavor.io` (never read them: one node's report is none of another's
//! business), and a ValidatingAdmissionPolicy (and its binding) refuses a node's write of
//! a report not named after it (`kubeflavor_core::admission::node_report`).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
};
use kubeflavor_cluster::crd::GROUP;
use kubeflavor_core::admission::node_report::{self, NODES_GROUP, POLICY_NAME, VALIDATION};

use super::{Document, object_meta, rbac};

const COMPONENT: &str = "node-reports";
/// The ClusterRole (and its binding) letting nodes write reports.
pub const REPORTER_ROLE: &str = "kubeflavor:node-reporter";

/// The nodes' role and binding, the policy and its binding.
pub fn documents() -> Vec<Document> {
    vec![role(), role_binding(), policy(), binding()]
}

fn role() -> Document {
    rbac::cluster_role(
        REPORTER_ROLE,
        "What a node's reporter (`kubeflavor node report`, with the node's own credentials) \
         may do with NodeReports.",
        vec![rbac::rule(
            &[GROUP],
            &["nodereports"],
            &["create", "patch"],
            &[],
            "create, patch: write its own report (the policy below refuses another node's). No get, list or watch (another node's report is none of its business), no status (what kubeflavor observed), no delete.",
        )],
    )
}

fn role_binding() -> Document {
    rbac::cluster_role_binding(
        REPORTER_ROLE,
        "Every node's identity (group system:nodes) gets the reporter's role; the policy \
         below keeps each node to its own report.",
        REPORTER_ROLE,
        vec![rbac::group_subject(NODES_GROUP)],
    )
}

fn policy() -> Document {
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(POLICY_NAME, None, COMPONENT),
        spec: Some(ValidatingAdmissionPolicySpec {
            match_conditions: Some(vec![MatchCondition {
                name: "requested-by-a-node".into(),
                expression: node_report::applies_to(),
            }]),
            validations: Some(super::admission::validations([(
                VALIDATION.into(),
                node_report::refusal(),
            )])),
            ..super::admission::matching(
                &[GROUP],
                &["*"],
                &["CREATE", "UPDATE", "DELETE"],
                &["nodereports", "nodereports/status"],
            )
        }),
        status: None,
    };
    Document::new(
        "A node writes only its own NodeReport. RBAC lets every node write reports but cannot \
         say which; this policy refuses a node identity's write of a report not named after \
         it.",
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: a rule that cannot be evaluated refuses the request.",
    )
    .note(
        "spec.matchConditions",
        "Writes by a node's identity (group system:nodes) only; kubeflavor's own writes of \
         the status are RBAC's to allow.",
    )
}

fn binding() -> Document {
    super::admission::deny_binding(
        POLICY_NAME,
        COMPONENT,
        None,
        "Makes the API server enforce the policy above on every matching request.",
    )
}
