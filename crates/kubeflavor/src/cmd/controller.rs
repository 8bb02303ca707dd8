//! `kubeflavor controller`: run the controller until SIGTERM or ctrl-c.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::cluster::Cluster;
use crate::controller::{self, Options, Runtime};
use crate::error::{CliError, Result};

#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Compete with other replicas for the Lease `kubeflavor-controller`; only the holder
    /// writes. Without it, this process assumes it is the only replica.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Lease and of the admin-only Events (default: $POD_NAMESPACE, else
    /// kube-system).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "POD_NAMESPACE",
        default_value = "kube-system"
    )]
    pub lease_namespace: String,
    /// This replica's name in the Lease (default: $POD_NAME, else the host name plus a
    /// random suffix).
    #[arg(long, value_name = "NAME")]
    pub identity: Option<String>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub http_address: SocketAddr,
    /// Also deny kubelet client CSRs of bootstrap tokens that are not kubeflavor's (by
    /// default they are left to kube-controller-manager).
    #[arg(long)]
    pub strict: bool,
    /// Approve `system:node:<name>` renewal CSRs of bound, unrevoked nodes and deny the
    /// rest. Remove kubeadm's selfnodeclient auto-approval binding first, or
    /// kube-controller-manager approves renewals before kubeflavor sees them.
    #[arg(long)]
    pub manage_renewals: bool,
    /// Also decide kubelet serving CSRs (kubernetes.io/kubelet-serving, filed by kubelets
    /// with serverTLSBootstrap: true): approve those of system:node:<name> when <name> has
    /// an unrevoked FlavorBinding for that name, the CSR names only <name> as DNS name and
    /// only addresses inside the Flavor's spec.servingAddresses, with a key and usages a
    /// kubelet uses; deny the rest of those nodes' serving CSRs. Nodes kubeflavor never
    /// bound are left to other approvers (see --deny-unbound-serving). Off by default;
    /// `install --sole-approver` turns it on (and grants 'approve' on that signer).
    #[arg(long)]
    pub approve_serving: bool,
    /// With --approve-serving: also deny serving CSRs of nodes kubeflavor never bound
    /// (control-plane nodes, kubeadm joins) instead of leaving them to other approvers.
    #[arg(long, requires = "approve_serving")]
    pub deny_unbound_serving: bool,
    /// Denials of one token after which its Secret is deleted so the kubelet stops
    /// retrying (0: only exhausted or misused tokens are deleted).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub denial_limit: u32,
    /// Seconds a Lease is valid without renewal (a standby takes over after that).
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    pub lease_duration: u64,
    /// Parallel reconciles per loop.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub concurrency: u16,
}

fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        return pod;
    }
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kubeflavor".into());
    // Six random characters, so two replicas on one host never share an identity.
    let suffix = kubeflavor_core::token::BootstrapToken::generate()
        .map(|t| t.id().to_string())
        .unwrap_or_else(|_| std::process::id().to_string());
    format!("{host}-{suffix}")
}

pub fn options(args: &ControllerArgs) -> Options {
    let mut o = Options::new(
        &args.lease_namespace,
        &args.identity.clone().unwrap_or_else(default_identity),
    );
    o.leader_elect = args.leader_elect;
    o.strict = args.strict;
    o.manage_renewals = args.manage_renewals;
    o.approve_serving = args.approve_serving;
    o.deny_unbound_serving = args.deny_unbound_serving;
    o.denial_limit = args.denial_limit;
    o.ops_addr = Some(args.http_address);
    o.concurrency = args.concurrency.max(1);
    let lease = Duration::from_secs(args.lease_duration.max(2));
    o.lease_duration = lease;
    // client-go's proportions: renew deadline 2/3 of the lease, retry every 2/15.
    o.renew_deadline = lease * 2 / 3;
    o.retry_period = (lease * 2 / 15).max(Duration::from_millis(500));
    o
}

/// Resolves on SIGTERM (what Kubernetes sends) or ctrl-c.
pub async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("termination requested: finishing in-flight work");
}

pub async fn run(cluster: &Cluster, args: &ControllerArgs) -> Result<()> {
    let opts = options(args);
    tracing::info!(identity = %opts.identity, namespace = %opts.namespace, leader_elect = opts.leader_elect, strict = opts.strict, manage_renewals = opts.manage_renewals, approve_serving = opts.approve_serving, "starting the kubeflavor controller");
    controller::run(Runtime::new(cluster.client.clone(), opts), termination())
        .await
        .map_err(|e| CliError::failed(e, "see the log lines above"))
}
