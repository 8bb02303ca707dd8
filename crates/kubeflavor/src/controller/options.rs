//! What the operator chose on the command line, and the names the controller writes under.

use std::net::SocketAddr;
use std::time::Duration;

/// The signer of kubelet client certificates.
pub use kubeflavor_core::csr::client::KUBELET_CLIENT_SIGNER;
/// Where bootstrap token Secrets live: kube-apiserver's bootstrap token authenticator
/// reads them from kube-system only.
pub use kubeflavor_core::token::secret::TOKEN_SECRET_NAMESPACE as TOKEN_NAMESPACE;
/// Who writes the controller's Events (`reportingController`); a policy `install` ships
/// refuses such Events from anyone else (kubeflavor_core::admission::trail).
pub const REPORTING_CONTROLLER: &str = kubeflavor_core::admission::trail::CONTROLLER_REPORTER;

/// The Lease the replicas compete for.
pub const LEASE_NAME: &str = "kubeflavor-controller";

/// The field manager of the controller's patches, so a Node's `managedFields` show which
/// labels and taints the controller set (and not the kubelet or an admin).
pub const FIELD_MANAGER: &str = "kubeflavor-controller";

/// Patch parameters naming the controller as the field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// What the operator chose on the command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// The controller's own namespace: its Lease and its Events live there.
    pub namespace: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Compete for the Lease; off means "I am the only replica".
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Deny kubelet client CSRs from tokens that are not kubeflavor's.
    pub strict: bool,
    /// Approve `system:node:<name>` renewals for bound, unrevoked nodes; deny the rest.
    pub manage_renewals: bool,
    /// Denials of one token after which its Secret is deleted (P4, rejection that ends).
    pub denial_limit: u32,
    /// Decide kubelet serving CSRs (`kubernetes.io/kubelet-serving`) of the nodes
    /// kubeflavor bound (`--approve-serving`).
    pub approve_serving: bool,
    /// With `approve_serving`: deny serving CSRs of nodes kubeflavor never bound, instead
    /// of leaving them to other approvers (`--deny-unbound-serving`).
    pub deny_unbound_serving: bool,
    /// Where /metrics, /healthz and /readyz are served; None to serve nothing.
    pub ops_addr: Option<SocketAddr>,
    /// Parallel reconciles per loop (the rest wait their turn, first come first served).
    pub concurrency: u16,
    /// The Lease the replicas compete for (in `namespace`).
    pub lease_name: String,
    /// Serve only node and flavor names that end in this suffix; `None` serves all.
    /// Several controllers then share one cluster without touching each other's work
    /// (the end-to-end suites run one controller per test on one real cluster). Every
    /// controller of a cluster must agree on how names are split between them.
    pub scope: Option<String>,
}

impl Options {
    /// The switches that change core's CSR decisions.
    pub fn policy(&self) -> kubeflavor_core::approval::client::PolicyOptions {
        kubeflavor_core::approval::client::PolicyOptions {
            strict: self.strict,
            manage_renewals: self.manage_renewals,
            denial_limit: std::num::NonZeroU32::new(self.denial_limit),
        }
    }

    /// The switches that change core's serving-CSR decisions.
    pub fn serving_policy(&self) -> kubeflavor_core::approval::serving::ServingOptions {
        kubeflavor_core::approval::serving::ServingOptions {
            deny_unbound: self.deny_unbound_serving,
        }
    }

    pub fn new(namespace: &str, identity: &str) -> Self {
        Options {
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            strict: false,
            manage_renewals: false,
            denial_limit: 5,
            approve_serving: false,
            deny_unbound_serving: false,
            ops_addr: None,
            concurrency: 16,
            lease_name: LEASE_NAME.to_string(),
            scope: None,
        }
    }

    /// Whether a node or flavor name is this controller's to serve (see `scope`).
    pub fn serves(&self, name: &str) -> bool {
        self.scope
            .as_deref()
            .is_none_or(|suffix| name.ends_with(suffix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_controller_serves_only_its_names() {
        let mut opts = Options::new("ns", "me");
        assert!(opts.serves("anything"), "unscoped: every name");
        opts.scope = Some("-abc123".into());
        assert!(opts.serves("node-1-abc123"));
        assert!(!opts.serves("node-1-zzz999"));
        assert!(!opts.serves("abc123-node"));
    }
}
