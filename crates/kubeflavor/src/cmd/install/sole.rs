//! `install --sole-approver`: a ValidatingAdmissionPolicy (and its binding) refusing any
//! RBAC write that would let kube-controller-manager auto-approve a bootstrap token's
//! kubelet client CSRs (`kubeflavor_core::admission::sole_approver` holds its rules). Deleting
//! kubeadm's `kubeadm:node-autoapprove-bootstrap` once is not enough: `kubeadm upgrade
//! apply` re-creates it, and kube-controller-manager approves within milliseconds, before
//! the controller sees the CSR.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
};
use kubeflavor_core::admission::sole_approver::{
    self, BINDING_RESOURCES, NODECLIENT_ROLE, POLICY_NAME, RBAC_GROUP, ROLE_RESOURCES,
};

use super::{Document, object_meta};

const COMPONENT: &str = "sole-approver";

/// The policy and its binding.
pub fn documents() -> [Document; 2] {
    [policy(), binding()]
}

/// The policy's spec (also what tests evaluate).
pub fn policy_spec() -> ValidatingAdmissionPolicySpec {
    let resources: Vec<&str> = BINDING_RESOURCES
        .iter()
        .chain(ROLE_RESOURCES.iter())
        .copied()
        .collect();
    ValidatingAdmissionPolicySpec {
        validations: Some(super::admission::validations(
            sole_approver::rules()
                .into_iter()
                .map(|r| (r.expression, r.message)),
        )),
        ..super::admission::matching(&[RBAC_GROUP], &["*"], &["CREATE", "UPDATE"], &resources)
    }
}

fn policy() -> Document {
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(POLICY_NAME, None, COMPONENT),
        spec: Some(policy_spec()),
        status: None,
    };
    Document::new(
        &format!(
            "kubeflavor stays the sole approver of bootstrap tokens' node certificates: refuses any \
             binding that grants a bootstrap identity (groups system:bootstrappers, \
             system:bootstrappers:*, system:authenticated, system:unauthenticated; users \
             system:bootstrap:*) a ClusterRole off a short list of roles that cannot approve, and \
             any role not named system:*, or on that list, granting create on \
             certificatesigningrequests/nodeclient. \
             So kubeadm's kubeadm:node-autoapprove-bootstrap ({NODECLIENT_ROLE}) cannot come back: \
             run kubeadm upgrade apply <version> --skip-phases bootstrap-token, as that phase \
             re-creates it and is refused here."
        ),
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: an RBAC write the policy cannot evaluate is refused (admins retry).",
    )
    .note(
        "spec.matchConstraints",
        "Creates and updates of ClusterRoleBindings, RoleBindings, ClusterRoles and Roles.",
    )
    .note(
        "spec.validations",
        "First the bindings: a RoleBinding of a Role passes (a namespaced Role grants nothing on \
         CSRs, which are cluster-scoped). Then the roles: system:* roles are the API server's \
         own, reconciled at each start, except those bootstrap tokens may be granted, which \
         must never grant it.",
    )
}

fn binding() -> Document {
    super::admission::deny_binding(
        POLICY_NAME,
        COMPONENT,
        None,
        "Makes the API server enforce the policy above on every RBAC write.",
    )
}

#[cfg(test)]
#[path = "sole_tests.rs"]
mod tests;
