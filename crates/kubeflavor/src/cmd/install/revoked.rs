//! Revocation that holds without kubeflavor (P7): the revocation list (an empty ConfigMap
//! `kube-system/kubeflavor-revoked-nodes`, which `node revoke` fills) and the
//! ValidatingAdmissionPolicy, parameterised by it, through which the API server itself
//! refuses a listed node's kubelet, pods created on or bound to it, and a Node created
//! under its name (`kubeflavor_core::node::revocation_list` holds the rules). Every install mode
//! ships them: the webhook's `NoOpinion` fallback must give a revoked node nothing.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ParamKind, ParamRef, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
    Variable,
};
use kubeflavor_core::node::revocation_list::{self, NAME, NAMESPACE, POLICY_NAME};

use super::{Document, object_meta};

/// The labels' component.
const COMPONENT: &str = "revoked-nodes";

/// The list, the policy and its binding, in apply order.
pub fn documents() -> [Document; 3] {
    [list(), policy(), binding()]
}

fn list() -> Document {
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: object_meta(NAME, Some(NAMESPACE), COMPONENT),
        ..Default::default()
    };
    Document::new(
        &format!(
            "The revocation list: each data key is a revoked node name, its value \
             {{\"at\",\"by\",\"reason\"}}. Written by 'kubeflavor node revoke' (and the controller), \
             emptied of a name only by 'kubeflavor node forget'. Installed empty; re-applying the \
             install keeps its entries (they belong to another field manager). Only admins and \
             the controller may write it: it lives in {NAMESPACE}."
        ),
        &cm,
    )
}

fn policy() -> Document {
    let spec = ValidatingAdmissionPolicySpec {
        param_kind: Some(ParamKind {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
        }),
        match_conditions: Some(
            revocation_list::match_conditions()
                .into_iter()
                .map(|c| MatchCondition {
                    name: c.name.into(),
                    expression: c.expression,
                })
                .collect(),
        ),
        variables: Some(
            revocation_list::variables()
                .into_iter()
                .map(|v| Variable {
                    name: v.name.into(),
                    expression: v.expression,
                })
                .collect(),
        ),
        validations: Some(super::admission::validations(
            revocation_list::rules()
                .into_iter()
                .map(|r| (r.expression, r.message)),
        )),
        ..super::admission::matching(&["*"], &["*"], &["CREATE", "UPDATE", "DELETE"], &["*/*"])
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(POLICY_NAME, None, COMPONENT),
        spec: Some(spec),
        status: None,
    };
    Document::new(
        &format!(
            "Revocation enforced by the API server, without kubeflavor: for every name listed in \
             {NAMESPACE}/{NAME}, refuses every write of its kubelet (system:node:NAME in \
             system:nodes), a Pod created with spec.nodeName NAME, a scheduler binding to NAME, and \
             a Node created as NAME. With the authorization webhook unreachable (its NoOpinion \
             fallback) the node can still read only what Node and RBAC relate to its pods, and \
             the revocation deleted them."
        ),
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: a rule that cannot be evaluated refuses the request. The match condition keeps \
         the policy to kubelets' requests and writes of Pods and Nodes.",
    )
    .note(
        "spec.paramKind",
        "The list is the parameter: adding a name takes effect on the next request, with no \
         policy change.",
    )
    .note(
        "spec.matchConstraints",
        "Every write (create, update, delete) of every resource and subresource: a revoked \
         kubelet's status updates, leases, events, TokenRequests, CSRs, pod deletions.",
    )
    .note(
        "spec.validations",
        "One rule per foothold, each with the message the API server answers (HTTP 422, \
         reason Invalid). Reads are not admission's: the webhook refuses them, and what Node \
         and RBAC would allow a node to read follows its pods, which the revocation deletes.",
    )
}

fn binding() -> Document {
    let param_ref = ParamRef {
        name: Some(NAME.into()),
        namespace: Some(NAMESPACE.into()),
        parameter_not_found_action: Some("Allow".into()),
        ..Default::default()
    };
    super::admission::deny_binding(
        POLICY_NAME,
        COMPONENT,
        Some(param_ref),
        "Makes the API server enforce the policy above with the revocation list as its parameter.",
    )
    .note(
        "spec.paramRef.parameterNotFoundAction",
        "Allow: without the list (deleted by an admin) nothing is listed, and the cluster's \
         other requests go on; 'kubeflavor node revoke' creates it again when it lists a name.",
    )
}
