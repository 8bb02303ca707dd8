//! The MutatingAdmissionPolicy that taints every kubelet-created Node
//! (`kubeflavor_core::admission::unverified`): whether the API server serves its API, and
//! whether the policy and its binding are installed. `install --apply` and the controller
//! ask; neither writes here (install applies the objects with the rest of its set).

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kubeflavor_core::admission::unverified::{EFFECT, POLICY_NAME};
use kubeflavor_core::flavor::UNVERIFIED_TAINT;

/// The group and version serving the policy (v1.36 and later).
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";
/// The first Kubernetes version serving [`API_VERSION`] for the policy (KEP-3962 GA).
pub const SINCE: &str = "v1.36";
const GROUP: &str = "admissionregistration.k8s.io";
const VERSION: &str = "v1";
const POLICIES: &str = "mutatingadmissionpolicies";
const BINDINGS: &str = "mutatingadmissionpolicybindings";

/// What the cluster has of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// The API server does not serve MutatingAdmissionPolicy v1.
    NotServed,
    /// Served, but the policy or its binding is missing.
    NotInstalled { policy: bool, binding: bool },
    /// Both are there: the API server taints every kubelet-created Node.
    Enforced,
}

/// Whether discovery lists MutatingAdmissionPolicy under admissionregistration.k8s.io/v1
/// (a 404 for the group version means not served).
pub async fn served(client: &Client) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(API_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == POLICIES)),
        Err(e) if crate::status::is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

fn api(client: &Client, plural: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &ar)
}

/// Whether the API is served and kubeflavor's policy and binding exist.
pub async fn presence(client: &Client) -> Result<Presence, kube::Error> {
    if !served(client).await? {
        return Ok(Presence::NotServed);
    }
    let policy = api(client, POLICIES, "MutatingAdmissionPolicy")
        .get_opt(POLICY_NAME)
        .await?
        .is_some();
    let binding = api(client, BINDINGS, "MutatingAdmissionPolicyBinding")
        .get_opt(POLICY_NAME)
        .await?
        .is_some();
    Ok(if policy && binding {
        Presence::Enforced
    } else {
        Presence::NotInstalled { policy, binding }
    })
}

/// What a cluster without the policy loses, as install and the controller say it.
pub fn without_policy() -> String {
    format!(
        "without it a Node is tainted {UNVERIFIED_TAINT}:{EFFECT} only when its kubelet asks \
         (registerWithTaints, as kubeflavor join writes it): a kubelet that leaves it out registers \
         schedulable, and pods with their Secrets and ServiceAccount tokens can land on it before \
         kubeflavor judged it"
    )
}
