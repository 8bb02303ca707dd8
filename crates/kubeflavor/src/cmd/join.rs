//! `kubeflavor join`: parse the command line once, run [`crate::join`], map every failure to
//! its own exit code (documented in `--help`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kubeflavor_core::crypto::copycerts::Provenance;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::BootstrapToken;

use crate::certs::download::DownloadOptions;
use crate::cli::discovery_flags::{parse_duration, parse_pins, parse_token};
use crate::cli::secret::{self, SecretText, read_key};
use crate::error::CliError;
use crate::exit::ExitCode;
use crate::join::{
    self, CaCheck, DiscoveryError, JoinError, JoinOptions, Report, TlsBootstrapError,
};

/// What `join` writes and prints, and its exit codes, shown in its `--help`.
pub const JOIN_EXIT_CODES: &str = "\
Files, in --kubelet-dir (default /etc/kubernetes), each written atomically:
  bootstrap-kubelet.conf  the bootstrap kubeconfig, with the token (mode 0600)
  kubelet-config.yaml     a KubeletConfiguration (kubelet.config.k8s.io/v1beta1, mode 0644):
                          rotateCertificates: true, registerWithTaints
                          kubeflavor.io/unverified:NoSchedule until the controller
                          flavors the node, and pki/ca.crt as the CA of the clients the
                          kubelet accepts (the API server's, for logs and exec)
  pki/ca.crt              the cluster CA discovery authenticated (mode 0644), unless it
                          is there already (--control-plane downloads it); without
                          --control-plane, one that holds any other certificate stops
                          the join (exit 16)
  kubelet.conf            with --tls-bootstrap: the node's client certificate (mode 0600)
  pki/...                 with --control-plane --certificate-key-file: the CA set of
                          'kubeflavor certs upload' (keys 0600)
An existing bootstrap-kubelet.conf or kubelet.conf (a dangling symlink included) stops the
join before any network traffic, as kubeadm's preflight does; so does a kubelet-config.yaml
with other content. A failed join removes every file and directory it created (the
downloaded CA keys included) and leaves what was there before untouched.

The CA: with --discovery-token-ca-cert-hash, only the certificates of cluster-info's CA
bundle that match a given pin are trusted (for the CA-verified read and the certificate
download) and written (bootstrap-kubelet.conf, kubelet.conf, pki/ca.crt): anyone who signs
a cluster-info with a leaked token can put a CA of their own next to the pinned one.
Without a pin (--discovery-token-unsafe-skip-ca-verification) every CA in the signed bundle
is trusted, as kubeadm does; join names each by its pin in a warning.

Secrets: --token-file FILE and --certificate-key-file FILE ('-' for stdin, one of them at
most), or KUBEFLAVOR_JOIN_TOKEN and KUBEFLAVOR_CERTIFICATE_KEY, keep the token and the key
off the command line, where every user of the node can read them (/proc/<pid>/cmdline).
--token and --certificate-key (kubeadm's flags) still work. Discovery reads at most 1 MiB
of cluster-info (a real one is a few KiB).

Printed: the kubelet flags to start the kubelet with, none of them deprecated in kubelet
v1.36 (rotation and the taint are config-file fields, so they are in kubelet-config.yaml):
  kubelet --config=<dir>/kubelet-config.yaml --bootstrap-kubeconfig=<dir>/bootstrap-kubelet.conf
          --kubeconfig=<dir>/kubelet.conf --hostname-override=<node name>
With --config the kubelet takes KubeletConfiguration defaults for every other field
(anonymous authentication off, Webhook authorization). Where the kubelet already has a
config file (kubeadm's /var/lib/kubelet/config.yaml), add these fields to that file and
keep its --config instead.

Exit codes:
  0   joined
  1   any other failure (among them a cluster-info answer over 1 MiB, or a secret file
      that cannot be read)
  2   usage: bad flags, endpoint or node name, no token, two secrets from stdin
  5   the API server could not be reached before --timeout
  6   cluster-info is not readable anonymously, or the token may not create CSRs
  10  the token is malformed (not <6 a-z0-9>.<16 a-z0-9>)
  11  a --discovery-token-ca-cert-hash is malformed (not sha256:<64 hex>)
  12  no --discovery-token-ca-cert-hash and no --discovery-token-unsafe-skip-ca-verification
  13  this may be an attack: the cluster CA does not match the pin, the cluster failed the
      CA-verified re-read, or cluster-info's signature for the token's id does not verify
      with its secret (a wrong secret gives the same signature failure as a cluster-info
      changed by someone without the token; a mistyped secret under the right id is rare,
      tampering is what matters, so it is reported as that: check the token first)
  14  the token is invalid or expired (cluster-info carries no signature for its id, or
      the API server refused it)
  15  the cluster refused this node (its certificate signing request was denied)
  16  the kubelet directory is not writable, or this node already has a kubelet.conf or
      bootstrap-kubelet.conf (or a kubelet-config.yaml with other content)
  20-31  with --control-plane: the certificate download failed, as 'kubeflavor certs
      --help' lists (e.g. 21 wrong certificate key)

The token secret is never printed. A failed join leaves no file behind.";

#[derive(Args, Debug, Clone)]
#[command(after_long_help = JOIN_EXIT_CODES)]
pub struct JoinArgs {
    /// The API server to discover the cluster from, as host:port (e.g. 192.0.2.10:6443).
    pub endpoint: String,

    /// The bootstrap token, <id>.<secret> (from 'kubeflavor token create'). Shows in the
    /// process list: prefer --token-file or KUBEFLAVOR_JOIN_TOKEN.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<SecretText>,

    /// Read the bootstrap token from this file (`-`: stdin). The KUBEFLAVOR_JOIN_TOKEN
    /// environment variable is read when neither flag is given.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

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

    /// Where to write bootstrap-kubelet.conf and kubelet-config.yaml (and kubelet.conf
    /// with --tls-bootstrap).
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

    /// Join as a control-plane node. With a certificate key (--certificate-key-file,
    /// KUBEFLAVOR_CERTIFICATE_KEY or --certificate-key), download the cluster's CA material
    /// (uploaded by 'kubeflavor certs upload') into <kubelet-dir>/pki.
    #[arg(long)]
    pub control_plane: bool,

    /// With --control-plane: the key printed by 'kubeflavor certs upload' (64 hex
    /// characters). Shows in the process list: prefer --certificate-key-file or
    /// KUBEFLAVOR_CERTIFICATE_KEY.
    #[arg(long, value_name = "KEY")]
    pub certificate_key: Option<SecretText>,

    /// With --control-plane: read the key from this file (`-`: stdin). The
    /// KUBEFLAVOR_CERTIFICATE_KEY environment variable is read when neither flag is given.
    #[arg(long, value_name = "FILE", conflicts_with = "certificate_key")]
    pub certificate_key_file: Option<PathBuf>,

    /// With --control-plane: also accept certificates uploaded by kubeadm (no kubeflavor
    /// key check).
    #[arg(long)]
    pub accept_kubeadm_secret: bool,
}

/// Turns the flags into validated options. Each bad input has its own exit code.
pub fn options(args: &JoinArgs) -> Result<JoinOptions, CliError> {
    let endpoint =
        join::parse_endpoint(&args.endpoint).map_err(|m| CliError::bare(ExitCode::Usage, m))?;
    secret::one_stdin(&[
        ("--token-file", args.token_file.as_deref()),
        (
            "--certificate-key-file",
            args.certificate_key_file.as_deref(),
        ),
    ])
    .map_err(|e| CliError::bare(ExitCode::Usage, e.to_string()))?;
    let token = token(args)?;
    let ca_check = ca_check(args)?;
    let node_name = node_name(args)?;
    let control_plane = download_options(args)?;
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

/// The token from --token, --token-file or KUBEFLAVOR_JOIN_TOKEN; one is required.
fn token(args: &JoinArgs) -> Result<BootstrapToken, CliError> {
    let token = secret::SecretFlags {
        value: args.token.as_ref(),
        file: args.token_file.as_deref(),
        file_flag: "--token-file",
        env: secret::TOKEN_ENV,
    }
    .read()
    .map_err(|e| CliError::bare(ExitCode::Error, e.to_string()))?
    .ok_or_else(|| {
        CliError::new(
            ExitCode::Usage,
            "no bootstrap token given",
            format_args!(
                "pass --token-file with a file holding the token from 'kubeflavor token create', --token, or set {}",
                secret::TOKEN_ENV
            ),
        )
    })?;
    parse_token(
        token.expose(),
        "copy the whole token from 'kubeflavor token create', e.g. abcdef.0123456789abcdef",
    )
}

/// The CA pins; none at all only with the explicit unsafe flag.
fn ca_check(args: &JoinArgs) -> Result<CaCheck, CliError> {
    let pins = parse_pins(
        &args.ca_cert_hashes,
        "copy it from 'kubeflavor token create --print-join-command': sha256:<64 hex characters>",
    )?;
    match (pins.is_empty(), args.unsafe_skip_ca_verification) {
        (false, _) => Ok(CaCheck::Pinned(pins)),
        (true, true) => Ok(CaCheck::UnsafeSkip),
        (true, false) => Err(CliError::new(
            ExitCode::JoinPinRequired,
            "refusing to join without a CA pin: without one, anyone holding the token can impersonate the cluster",
            "pass --discovery-token-ca-cert-hash sha256:<hex> from 'kubeflavor token create --print-join-command', or accept the risk with --discovery-token-unsafe-skip-ca-verification",
        )),
    }
}

/// `--node-name`, else this machine's host name.
fn node_name(args: &JoinArgs) -> Result<NodeName, CliError> {
    match &args.node_name {
        Some(n) => n.parse().map_err(|e| {
            CliError::new(
                ExitCode::Usage,
                format_args!("--node-name {n:?} is not a valid node name: {e}"),
                "use a DNS-1123 subdomain, e.g. worker-1",
            )
        }),
        None => join::default_node_name().map_err(|m| CliError::bare(ExitCode::Usage, m)),
    }
}

/// The download `join --control-plane --certificate-key` performs, into kubeadm's
/// `<kubelet-dir>/pki`. The key is parsed before anything happens (exit 20 on a typo).
fn download_options(args: &JoinArgs) -> Result<Option<DownloadOptions>, CliError> {
    if !args.control_plane {
        return Ok(None);
    }
    let key = read_key(
        args.certificate_key.as_ref(),
        args.certificate_key_file.as_deref(),
    )?;
    Ok(key.map(|key| DownloadOptions {
        pki_dir: args.kubelet_dir.join("pki"),
        key,
        force: false,
        provenance: Provenance::accepting_kubeadm(args.accept_kubeadm_secret),
    }))
}

/// `kubeflavor join ...`: progress to `out`, warnings to stderr.
pub async fn run(args: &JoinArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let opts = options(args)?;
    let mut report = WriterReport { out };
    run_with(&opts, &mut report).await.map(|_| ())
}

/// Progress lines on the command's output; a failed write (closed pipe) must not abort a
/// join half-way, so it is ignored.
pub(crate) struct WriterReport<'a> {
    pub(crate) out: &'a mut dyn Write,
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
    report.info(&format!(
        "* With {} it registers with the taint kubeflavor.io/unverified:NoSchedule until the controller flavors it.",
        outcome.kubelet_config.display()
    ));
    Ok(outcome)
}

/// One exit code per failure a user can act on.
pub fn exit_code(err: &JoinError) -> ExitCode {
    match err {
        JoinError::Certs(e) => crate::cmd::certs::exit_code(e),
        JoinError::KubeletDir(_)
        | JoinError::AlreadyJoined(_)
        | JoinError::BootstrapPending(_)
        | JoinError::KubeletConfigExists(_)
        | JoinError::ForeignCaFile(_) => ExitCode::JoinKubeletDir,
        JoinError::Discovery(d) => match d {
            DiscoveryError::Unreachable { .. } => ExitCode::Unreachable,
            DiscoveryError::ClusterInfoForbidden { .. } => ExitCode::Forbidden,
            DiscoveryError::NoSignature { .. } => ExitCode::JoinTokenInvalid,
            // A signature for the token's id that does not verify: a wrong secret or a
            // cluster-info changed by someone without the token (see JOIN_EXIT_CODES).
            DiscoveryError::BadSignature { .. }
            | DiscoveryError::PinMismatch { .. }
            | DiscoveryError::VerifiedFetchFailed { .. }
            | DiscoveryError::ClusterInfoChanged => ExitCode::JoinCaMismatch,
            DiscoveryError::NoClusterInfo { .. }
            | DiscoveryError::BadKubeconfig(_)
            | DiscoveryError::ClusterInfoTooLarge { .. }
            | DiscoveryError::Client { .. } => ExitCode::Error,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_token_and_pin_have_their_own_exit_codes_and_never_echo_the_secret() {
        let args = |token: &str, pin: &str| JoinArgs {
            endpoint: "192.0.2.10:6443".into(),
            token: Some(SecretText::new(token)),
            token_file: None,
            ca_cert_hashes: vec![pin.into()],
            unsafe_skip_ca_verification: false,
            node_name: Some("worker-1".into()),
            kubelet_dir: "/tmp/unused".into(),
            tls_bootstrap: false,
            timeout: Duration::from_secs(1),
            discovery_retry_interval: Duration::from_secs(1),
            control_plane: false,
            certificate_key: None,
            certificate_key_file: None,
            accept_kubeadm_secret: false,
        };
        let good_pin = format!("sha256:{}", "a".repeat(64));
        let err = options(&args("abcdef.0123456789ABCDEF", &good_pin)).unwrap_err();
        assert_eq!(err.code, ExitCode::JoinMalformedToken);
        assert!(!err.message.contains("0123456789ABCDEF"), "{}", err.message);
        let err = options(&args("abcdef.0123456789abcdef", "sha256:abc")).unwrap_err();
        assert_eq!(err.code, ExitCode::JoinMalformedPin);
        let mut no_pin = args("abcdef.0123456789abcdef", &good_pin);
        no_pin.ca_cert_hashes.clear();
        assert_eq!(
            options(&no_pin).unwrap_err().code,
            ExitCode::JoinPinRequired
        );
        no_pin.unsafe_skip_ca_verification = true;
        assert!(matches!(
            options(&no_pin).unwrap().ca_check,
            CaCheck::UnsafeSkip
        ));

        // The token from a file, without its newline; none at all is a usage error
        // (KUBEFLAVOR_JOIN_TOKEN is not set in the test environment).
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "abcdef.0123456789abcdef\n").unwrap();
        let mut from_file = args("unused", &good_pin);
        from_file.token = None;
        from_file.token_file = Some(token_file.clone());
        assert_eq!(options(&from_file).unwrap().token.id().as_str(), "abcdef");
        from_file.token_file = None;
        if std::env::var_os(secret::TOKEN_ENV).is_none() {
            let err = options(&from_file).unwrap_err();
            assert_eq!(err.code, ExitCode::Usage);
            assert!(err.message.contains("--token-file"), "{}", err.message);
        }
        // Two secrets cannot both come from stdin.
        from_file.token_file = Some("-".into());
        from_file.certificate_key_file = Some("-".into());
        assert_eq!(options(&from_file).unwrap_err().code, ExitCode::Usage);
    }
}
