//! `kubeflavor controller`: run the controller until SIGTERM or ctrl-c.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::cli::discovery_flags::parse_duration;
use crate::connect::Cluster;
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
    #[command(flatten)]
    pub authz: AuthzArgs,
}

/// The authorization webhook that cuts revoked nodes off (P7). Every replica serves it,
/// leader or not, from its own in-memory index; see `kubeflavor install --authz-config`
/// for the API server's side.
#[derive(Debug, Args)]
pub struct AuthzArgs {
    /// Serve the authorization webhook (POST /authorize, SubjectAccessReview v1) here,
    /// e.g. 0.0.0.0:8443. Without it, no webhook is served.
    #[arg(long, value_name = "ADDR", requires_all = ["authz_tls_cert_file", "authz_tls_key_file", "authz_client_ca_file"])]
    pub authz_address: Option<SocketAddr>,
    /// The webhook's serving certificate (PEM; read again when it changes).
    #[arg(long, value_name = "FILE")]
    pub authz_tls_cert_file: Option<std::path::PathBuf>,
    /// The key of --authz-tls-cert-file (PEM).
    #[arg(long, value_name = "FILE")]
    pub authz_tls_key_file: Option<std::path::PathBuf>,
    /// Only clients with a certificate signed by this CA are answered (the API server's
    /// client certificate from its webhook kubeconfig); every other handshake fails.
    #[arg(long, value_name = "FILE")]
    pub authz_client_ca_file: Option<std::path::PathBuf>,
    /// Also require this common name in the client certificate (e.g.
    /// kube-apiserver-authz-client), for a CA that signs other clients too.
    #[arg(long, value_name = "CN")]
    pub authz_client_cn: Option<String>,
    /// Connections past their TLS handshake the webhook holds at once (only the API
    /// server's complete one).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub authz_max_connections: usize,
    /// Seconds a webhook connection may stay idle, and a review's body may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub authz_idle_timeout: u64,
    /// A TLS handshake with the webhook must end within this (the API server's takes a
    /// few milliseconds; anyone may connect, so a pending handshake is short-lived).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub authz_handshake_timeout: Duration,
    /// Pending TLS handshakes at once; when full, the oldest is closed for the newest, so
    /// a flood of connections cannot keep the API server's from completing.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub authz_max_handshakes: u32,
    /// Pending TLS handshakes at once from one source address (its newest connection
    /// closes its own oldest past this).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub authz_max_handshakes_per_source: u32,
    /// Answer 503 (the API server then applies its failurePolicy) rather than from an
    /// index not confirmed current for this long: both watches listed since their last
    /// failure and the API server answering a probe each second.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub authz_max_staleness: Duration,
}

impl AuthzArgs {
    /// The webhook's options, when one is asked for.
    pub fn options(&self) -> Option<crate::authz::Options> {
        let address = self.authz_address?;
        let idle = Duration::from_secs(self.authz_idle_timeout.max(1));
        Some(crate::authz::Options {
            address,
            cert: self.authz_tls_cert_file.clone()?,
            key: self.authz_tls_key_file.clone()?,
            client_ca: self.authz_client_ca_file.clone()?,
            client_cn: self.authz_client_cn.clone(),
            connections: crate::serve::ConnectionLimits {
                max_connections: self.authz_max_connections.max(1),
                idle_timeout: idle,
                request_timeout: idle,
                handshake_timeout: self.authz_handshake_timeout,
                max_handshakes: self.authz_max_handshakes as usize,
                max_handshakes_per_source: self.authz_max_handshakes_per_source as usize,
            },
            max_staleness: self.authz_max_staleness,
        })
    }
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
    let rt = Runtime::new(cluster.client.clone(), opts);
    let Some(authz) = args.authz.options() else {
        return controller::run(rt, termination())
            .await
            .map_err(|e| CliError::failed(e, "see the log lines above"));
    };
    let index = std::sync::Arc::new(crate::authz::index::CutOffIndex::default());
    let webhook = crate::authz::bind(authz, index, rt.authz_metrics.clone())
        .await
        .map_err(|e| CliError::failed(e, "check the --authz-* flags"))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = async move {
        let mut rx = stop_rx;
        let _ = rx.wait_for(|s| *s).await;
    };
    let served = crate::authz::run(cluster.client.clone(), webhook, stopped);
    let controlled = async {
        let result = controller::run(rt, termination()).await;
        let _ = stop_tx.send(true);
        result
    };
    let ((), result) = tokio::join!(served, controlled);
    result.map_err(|e| CliError::failed(e, "see the log lines above"))
}
