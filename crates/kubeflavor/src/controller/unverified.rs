//! At start: does the API server taint every kubelet-created Node (the MutatingAdmissionPolicy
//! `install` ships)? The controller runs either way, but says so when it does not, in its log
//! and in the gauge `kubeflavor_unverified_policy_enforced`: without the policy a Node is
//! tainted only when its kubelet asks, so it may take pods before the controller judges it.

use kube::Client;
use kubeflavor_cluster::unverified_policy::{Presence, presence, without_policy};

use super::metrics::Metrics;

/// Checks once and reports; never fails the controller.
pub async fn check(client: &Client, metrics: &Metrics) {
    let answer = presence(client).await;
    metrics
        .unverified_policy_enforced
        .set(i64::from(matches!(answer, Ok(Presence::Enforced))));
    let lost = without_policy();
    match answer {
        Ok(Presence::Enforced) => tracing::info!(
            "the API server taints every kubelet-created Node kubeflavor.io/unverified:NoSchedule (MutatingAdmissionPolicy installed)"
        ),
        Ok(Presence::NotServed) => tracing::warn!(
            "this API server does not serve MutatingAdmissionPolicy admissionregistration.k8s.io/v1 (Kubernetes v1.36 and later): {lost}"
        ),
        Ok(Presence::NotInstalled { policy, binding }) => tracing::warn!(
            policy_present = policy,
            binding_present = binding,
            "the MutatingAdmissionPolicy kubeflavor-unverified-nodes or its binding is not installed (run kubeflavor install --apply): {lost}"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "cannot tell whether the API server taints kubelet-created Nodes (MutatingAdmissionPolicy kubeflavor-unverified-nodes): {lost}"
        ),
    }
}
