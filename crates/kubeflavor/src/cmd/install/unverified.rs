//! Untrusted until judged, enforced by the API server: a MutatingAdmissionPolicy (and its
//! binding) that puts `kubeflavor.io/unverified:NoSchedule` on every Node a kubelet creates,
//! whatever the kubelet asked (`kubeflavor_core::admission::unverified` holds its rules). The
//! controller removes the taint when it flavors the Node.
//!
//! The API is `admissionregistration.k8s.io/v1`, served from Kubernetes v1.36 (KEP-3962
//! went GA there; v1beta1 from v1.34 behind a feature gate is not used). Where the API
//! server lacks it, `install --apply` leaves both objects out and says what is lost.

use kubeflavor_cluster::unverified_policy::{API_VERSION, without_policy};
use kubeflavor_core::admission::unverified::{
    self, EFFECT, NODES_GROUP, OPERATION, POLICY_NAME, RESOURCE,
};
use kubeflavor_core::flavor::UNVERIFIED_TAINT;
use serde_json::json;

use super::{Document, object_meta};

pub use kubeflavor_cluster::unverified_policy::SINCE;
/// The labels' component.
const COMPONENT: &str = "unverified-nodes";

/// The policy and its binding.
pub fn documents() -> [Document; 2] {
    [policy(), binding()]
}

/// The MutatingAdmissionPolicy. Long as a declarative object literal: its fields and the
/// note on each, in the order they print.
fn policy() -> Document {
    let conditions: Vec<_> = unverified::match_conditions()
        .into_iter()
        .map(|c| json!({"name": c.name, "expression": c.expression}))
        .collect();
    let policy = json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": object_meta(POLICY_NAME, None, COMPONENT),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": [OPERATION],
                "resources": [RESOURCE],
            }]},
            "matchConditions": conditions,
            "mutations": [{
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": unverified::json_patch()},
            }],
        },
    });
    Document::new(
        &format!(
            "Untrusted until judged, enforced by the API server: every Node a kubelet creates \
             (any identity in {NODES_GROUP}) is stored tainted {UNVERIFIED_TAINT}:{EFFECT}, \
             whatever the kubelet asked; nothing else of it changes. The controller removes the \
             taint when it flavors the Node. Needs Kubernetes {SINCE} or later ({API_VERSION}); {}.",
            without_policy()
        ),
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: when the policy cannot be evaluated the Node is not created, and the kubelet \
         retries its registration; a node never joins untainted. Ignore would let a kubelet \
         register schedulable whenever the policy fails (an expression error, a cost limit), \
         the very case this policy exists for.",
    )
    .note(
        "spec.reinvocationPolicy",
        "IfNeeded: should a later mutating webhook or policy drop the taint, the API server runs \
         this one again. Its patch is idempotent (a tainted Node is skipped), so a rerun is safe.",
    )
    .note(
        "spec.matchConstraints",
        "Creates of Nodes only. The controller's update that removes the taint from a flavored \
         Node is not matched, so the taint does not come back; a Node its kubelet deletes and \
         creates again is a create, and is tainted again.",
    )
    .note(
        "spec.matchConditions",
        "Kubelets only (by group, which every node identity carries): a Node an admin creates is \
         left as it is. A Node already carrying the taint (same key and effect, any value) is left \
         as it is: the API server refuses a Node with the same taint twice.",
    )
    .note(
        "spec.mutations",
        "A JSON patch, not an apply configuration: spec.taints is an atomic list, which apply \
         configurations may not change (they would replace the kubelet's taints). The patch \
         appends, so the kubelet's taints keep their order, or creates the list.",
    )
}

fn binding() -> Document {
    let binding = json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": object_meta(POLICY_NAME, None, COMPONENT),
        "spec": {"policyName": POLICY_NAME},
    });
    Document::new(
        "Makes the API server enforce the policy above, on every Node create it matches.",
        &binding,
    )
}
