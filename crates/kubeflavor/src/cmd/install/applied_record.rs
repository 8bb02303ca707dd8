//! Kubelets keep off kubeflavor's applied record: a ValidatingAdmissionPolicy (and its
//! binding) refusing any Node create or update of a `system:nodes` identity that sets,
//! changes or removes the `kubeflavor.io/applied` annotation
//! (`kubeflavor_core::node::applied_record` holds its rules). NodeRestriction leaves a kubelet
//! its own Node's annotations; this record is what release removes, so a kubelet that
//! could rewrite it could keep a trusted label past its binding's end.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec, Variable,
};
use kubeflavor_core::admission::kubelet_topology;
use kubeflavor_core::node::applied_record::{
    self, APPLIED_ANNOTATION, POLICY_NAME, RESOURCES, VALIDATION,
};

use super::{Document, object_meta};

/// The labels' component (shared with the policy tainting kubelet-created Nodes).
const COMPONENT: &str = "unverified-nodes";

/// The policy and its binding.
pub fn documents() -> [Document; 2] {
    [policy(), binding()]
}

fn policy() -> Document {
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(POLICY_NAME, None, COMPONENT),
        spec: Some(ValidatingAdmissionPolicySpec {
            match_conditions: Some(vec![MatchCondition {
                name: "requested-by-a-kubelet".into(),
                expression: applied_record::applies_to(),
            }]),
            variables: Some(
                applied_record::variables()
                    .into_iter()
                    .chain(kubelet_topology::variables())
                    .map(|(name, expression)| Variable {
                        name: name.into(),
                        expression,
                    })
                    .collect(),
            ),
            validations: Some(super::admission::validations([
                (VALIDATION.into(), applied_record::refusal()),
                (
                    kubelet_topology::VALIDATION.into(),
                    kubelet_topology::refusal(),
                ),
            ])),
            ..super::admission::matching(&[""], &["v1"], &["CREATE", "UPDATE"], &RESOURCES)
        }),
        status: None,
    };
    Document::new(
        &format!(
            "Kubelets keep off kubeflavor's record: the controller writes the annotation \
             {APPLIED_ANNOTATION} (the label keys and taints it put on the Node) in the same \
             patch as what it records, and releasing a Node removes what the record names. \
             NodeRestriction leaves a kubelet its own Node's annotations, so this policy refuses \
             any kubelet request (group system:nodes) that sets, changes or removes it. It also \
             refuses a kubelet that sets, changes or removes topology.kubernetes.io/zone or \
             region, which NodeRestriction would let it set: whoever runs a node must not decide \
             where zone-placed workloads run."
        ),
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: a kubelet request the policy cannot evaluate is refused; the kubelet retries.",
    )
    .note(
        "spec.matchConstraints",
        "Creates and updates of Nodes, and of nodes/status: the API server keeps the metadata \
         of an update sent through the status subresource.",
    )
    .note(
        "spec.matchConditions",
        "Kubelets only: the controller writes the record, an admin may remove it (the Node \
         then leaves kubeflavor's judgment until it is flavored again).",
    )
    .note(
        "spec.validations",
        "The record after the request equals the record before (absent stays absent), and so do \
         the zone and region labels (a kubelet may not bring them at registration either): a \
         kubelet's own updates (heartbeats, labels it may set) pass unchanged.",
    )
}

fn binding() -> Document {
    super::admission::deny_binding(
        POLICY_NAME,
        COMPONENT,
        None,
        "Makes the API server enforce the policy above on every kubelet's Node write.",
    )
}
