//! Where testkube must answer as the real API server does where attacks on
//! kubeflavor look: a kubelet's taint changes by strategic merge patch directives and through `nodes/status`
//! (NodeRestriction), a kubelet's TokenRequest for the ServiceAccount of a pod bound to
//! it (Node authorizer, NodeRestriction, bound-token validation), the scheduler's
//! `pods/binding`, ValidatingAdmissionPolicies with parameters and subresource rules, and
//! the ServiceAccount admission plugin's API access volume.
//! Every case runs unchanged on testkube and on the cluster of `KUBEFLAVOR_E2E_KUBECONFIG`.
//!
//! `cargo test -p kubeflavor --test fidelity [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod kubelet;
mod node_patch;
mod policy_params;
mod service_account;
mod token_request;
