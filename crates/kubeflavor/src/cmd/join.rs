//! `kubeflavor join`: parse the command line once, run [`crate::join`], map every failure to
//! its own exit code (documented in `--help`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::pin::CaPin;
use kubeflavor_core::token::BootstrapToken;

use crate::error::CliError;
use crate::exit::ExitCode;
use crate::join::{
    self, CaCheck, DiscoveryError, JoinError, JoinOptions, Report, TlsBootstrapError,
};

/// The exit codes of `join`, shown in its `--help`.
pub const JOIN_EXIT_CODES: &str = "\
Exit codes:
  0   joined
  1   any other failure
  2   usage: bad flags, endpoint or node name
  5   the API server could not be reached before --timeout
  6   cluster-info is not readable anonymously
  10  the token is malformed (not <6 a-z0-9>.<16 a-z0-9>)
  11  a --discovery-token-ca-cert-hash is malformed (not sha256:<64 hex>)
  12  no --discovery-token-ca-cert-hash and no --discovery-token-unsafe-skip-ca-verification
  13  the cluster CA does not match the pin, or the cluster failed the CA-verified re-read:
      this may be an attack
  14  the token is invalid or expired (cluster-info carries no valid signature for it,
      or the API server refused it)
  15  the cluster refused this node (its certificate signing request was denied)
  16  the kubelet directory is not writable, or this node already has a kubelet.conf

The token secret is never printed. Every file is written atomically with mode 0600; a
failed join leaves no file behind.";

#[derive(Args, Debug, Clone)]
#[command(after_long_help = JOIN_EXIT_CODES)]
pub struct JoinArgs {
    /// The API server to discover the cluster from, as host:port (e.g. 192.0.2.10:6443).
    pub endpoint: String,

    /// The bootstrap token, <id>.<secret> (from 'kubeflavor token create').
    #[arg(long, env = "KUBEFLAVOR_JOIN_TOKEN", hide_env_values = true)]
    pub token: String,

    /// Pin of the cluster CA's public key, sha256:<hex> (repeatable: any match passes).
    #[arg(long = "discovery-token-ca-cert-hash", value_name = "sha256:HEX")]
    pub ca_cert_hashes: Vec<String>,

    /// Trust the CA named by cluster-info without a pin. UNSAFE: anyone holding the token
    /// can then impersonate the cluster to this node.
    #[arg(long = "discovery-token-unsafe-skip-ca-verification")]
    pub unsafe_skip_ca_verification: bool,

    /// The node's name (default: this machine's host name, lowercased).
    #[arg(long)]
    pub node_name: Option<String>,

    /// Where to write bootstrap-kubelet.conf (and kubelet.conf with --tls-bootstrap).
    #[arg(long, default_value = "/etc/kubernetes")]
    pub kubelet_dir: PathBuf,

    /// Do the kubelet's TLS bootstrap here: create a key and CSR, wait until it is issued,
    /// and write kubelet.conf.
    #[arg(long)]
    pub tls_bootstrap: bool,

    /// Give up discovery (and, separately, the wait for the certificate) after this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,

    /// How long to wait between two reads of cluster-info.
    #[arg(long, default_value = "5s", value_parser = parse_duration, hide = true)]
    pub discovery_retry_interval: Duration,

    /// Join as a control-plane node. With --certificate-key, download the cluster's CA
    /// material (uploaded by 'kubeflavor certs upload') into <kubelet-dir>/pki.
    #[arg(long)]
    pub control_plane: bool,

    /// With --control-plane: the key printed by 'kubeflavor certs upload' (64 hex
    /// characters). Also read from the KUBEFLAVOR_CERTIFICATE_KEY environment variable.
    #[arg(long, value_name = "KEY", env = crate::cmd::certs::KEY_ENV, hide_env_values = true)]
    pub certificate_key: Option<crate::cmd::certs::SecretText>,

    /// With --control-plane: also accept certificates uploaded by kubeadm (no kubeflavor
    /// key check).
    #[arg(long)]
    pub accept_kubeadm_secret: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 30s, 5m, 1m30s"))?;
    if d.is_negative() || d.is_zero() {
        return Err(format!("{s:?} must be a positive duration, e.g. 5m"));
    }
    Duration::try_from(d).map_err(|e| format!("{s:?}: {e}"))
}

/// Turns the flags into validated options. Each bad input has its own exit code.
pub fn options(args: &JoinArgs) -> Result<JoinOptions, CliError> {
    let endpoint =
        join::parse_endpoint(&args.endpoint).map_err(|m| CliError::bare(ExitCode::Usage, m))?;
    // The token is parsed here rather than by clap: clap would echo the bad value, secret
    // included, in its error message.
    let token: BootstrapToken = args.token.parse().map_err(|e| {
        CliError::new(
            ExitCode::JoinMalformedToken,
            format_args!("--token is not a bootstrap token: {e}"),
            "copy the whole token from 'kubeflavor token create', e.g. abcdef.0123456789abcdef",
        )
    })?;
    let pins = args
        .ca_cert_hashes
        .iter()
        .map(|h| {
            h.parse::<CaPin>().map_err(|e| {
                CliError::new(
                    ExitCode::JoinMalformedPin,
                    format_args!("--discovery-token-ca-cert-hash {h:?} is not a CA pin: {e}"),
                    "copy it from 'kubeflavor token create --print-join-command': sha256:<64 hex characters>",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ca_check = match (pins.is_empty(), args.unsafe_skip_ca_verification) {
        (false, _) => CaCheck::Pinned(pins),
        (true, true) => CaCheck::UnsafeSkip,
        (true, false) => {
            return Err(CliError::new(
                ExitCode::JoinPinRequired,
                "refusing to join without a CA pin: without one, anyone holding the token can impersonate the cluster",
                "pass --discovery-token-ca-cert-hash sha256:<hex> from 'kubeflavor token create --print-join-command', or accept the risk with --discovery-token-unsafe-skip-ca-verification",
            ));
        }
    };
    let node_name: NodeName = match &args.node_name {
        Some(n) => n.parse().map_err(|e| {
            CliError::new(
                ExitCode::Usage,
                format_args!("--node-name {n:?} is not a valid node name: {e}"),
                "use a DNS-1123 subdomain, e.g. worker-1",
            )
        })?,
        None => join::default_node_name().map_err(|m| CliError::bare(ExitCode::Usage, m))?,
    };
    let control_plane = crate::cmd::certs::join_download_options(args)?;
    Ok(JoinOptions {
        endpoint,
        token,
        ca_check,
        node_name,
        kubelet_dir: args.kubelet_dir.clone(),
        tls_bootstrap: args.tls_bootstrap,
        timeout: args.timeout,
        retry_interval: args.discovery_retry_interval,
        control_plane,
    })
}

/// `kubeflavor join ...`: progress to `out`, warnings to stderr.
pub async fn run(args: &JoinArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let opts = options(args)?;
    let mut report = WriterReport { out };
    run_with(&opts, &mut report).await.map(|_| ())
}

/// Progress lines on the command's output; a failed write (closed pipe) must not abort a
/// join half-way, so it is ignored.
struct WriterReport<'a> {
    out: &'a mut dyn Write,
}

impl Report for WriterReport<'_> {
    fn info(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
        let _ = self.out.flush();
    }
    fn warn(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// The join with a chosen progress sink; errors already mapped to exit codes.
pub async fn run_with(
    opts: &JoinOptions,
    report: &mut dyn Report,
) -> Result<join::JoinOutcome, CliError> {
    let outcome = join::run(opts, report).await.map_err(to_cli_error)?;
    report.info("");
    report.info("This node has joined the cluster's trust bootstrap:");
    match &outcome.kubelet_kubeconfig {
        Some(path) => report.info(&format!(
            "* Its client certificate (certificate signing request {}) is in {}.",
            outcome.csr_name.as_deref().unwrap_or("?"),
            path.display()
        )),
        None => report.info(&format!(
            "* The kubelet can bootstrap with {}; kubeflavor's controller decides whether it gets a certificate.",
            outcome.bootstrap_kubeconfig.display()
        )),
    }
    report.info("* It registers with the taint kubeflavor.io/unverified:NoSchedule until the controller flavors it.");
    Ok(outcome)
}

/// One exit code per failure a user can act on.
pub fn exit_code(err: &JoinError) -> ExitCode {
    match err {
        JoinError::Certs(e) => e.exit(),
        JoinError::KubeletDir(_) | JoinError::AlreadyJoined(_) => ExitCode::JoinKubeletDir,
        JoinError::Discovery(d) => match d {
            DiscoveryError::Unreachable { .. } => ExitCode::Unreachable,
            DiscoveryError::ClusterInfoForbidden { .. } => ExitCode::Forbidden,
            DiscoveryError::NoSignature { .. } | DiscoveryError::BadSignature { .. } => {
                ExitCode::JoinTokenInvalid
            }
            DiscoveryError::PinMismatch { .. }
            | DiscoveryError::VerifiedFetchFailed { .. }
            | DiscoveryError::ClusterInfoChanged => ExitCode::JoinCaMismatch,
            DiscoveryError::NoClusterInfo { .. } | DiscoveryError::BadKubeconfig(_) => {
                ExitCode::Error
            }
        },
        JoinError::TlsBootstrap(t) => match t {
            TlsBootstrapError::Denied { .. } | TlsBootstrapError::TokenWithdrawn { .. } => {
                ExitCode::JoinNodeRefused
            }
            TlsBootstrapError::TokenRejected(_) => ExitCode::JoinTokenInvalid,
            TlsBootstrapError::Forbidden(_) => ExitCode::Forbidden,
            _ => ExitCode::Error,
        },
        JoinError::Kubeconfig(_) => ExitCode::Error,
    }
}

fn to_cli_error(err: JoinError) -> CliError {
    CliError::bare(exit_code(&err), err.to_string())
}
