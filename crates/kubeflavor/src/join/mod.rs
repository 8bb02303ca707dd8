//! `kubeflavor join`: the node side of enrollment, kubeadm-compatible.
//!
//! Phases, named as kubeadm names them and printed the same way:
//! - `[preflight]`: the kubelet directory is usable and this node has not joined already
//!   (before any network traffic, so a bad directory never costs a token use);
//! - `[discovery]` ([`discovery`]): an authenticated view of the cluster from
//!   `kube-public/cluster-info`;
//! - `[download-certs]` (with `--control-plane` and a certificate key): the control-plane CA
//!   material `certs upload` stored, read as the bootstrap token;
//! - `[kubelet-start]`: bootstrap-kubelet.conf, the cluster CA and a KubeletConfiguration
//!   for the kubelet, and the flags to start it with ([`kubelet`]);
//! - `[tls-bootstrap]` ([`tls_bootstrap`], with `--tls-bootstrap`): the kubelet's CSR done
//!   here, ending in kubelet.conf.
//!
//! Every file is written atomically ([`files`]), the kubeconfigs with mode 0600, the
//! kubelet configuration (no secret in it) with 0644. A failure at any step removes every
//! file and directory this run created (the control-plane CA keys `--control-plane`
//! downloaded above all), and touches nothing that was there before, so a failed join
//! leaves the node as it found it.

pub mod discovery;
mod download_certs;
pub mod fetch;
pub mod files;
pub mod kubelet;
mod kubelet_start;
mod preflight;
pub mod tls_bootstrap;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubeflavor_core::join::kubeconfig::Kubeconfig;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::BootstrapToken;

pub use discovery::{CaCheck, DiscoveredCluster, DiscoveryError};
pub use files::WriteError;
pub use kubelet::{kubelet_config, kubelet_flags};
pub use tls_bootstrap::TlsBootstrapError;

/// The file the kubelet bootstraps with (`--bootstrap-kubeconfig`).
pub const BOOTSTRAP_KUBELET_CONF: &str = "bootstrap-kubelet.conf";
/// The file with the node's own client certificate (`--kubeconfig`).
pub const KUBELET_CONF: &str = "kubelet.conf";
/// The kubelet configuration join writes (`--config`), next to bootstrap-kubelet.conf.
/// Certificate rotation and the registration taint are KubeletConfiguration fields: their
/// flags (`--rotate-certificates`, `--register-with-taints`) are deprecated upstream.
pub const KUBELET_CONFIG: &str = "kubelet-config.yaml";
/// The cluster CA as discovery authenticated it, where kubeadm keeps it (`pki/ca.crt`):
/// the kubelet trusts it for the API server's client certificate (`kubectl logs`, `exec`).
pub const CLUSTER_CA: &str = "pki/ca.crt";
/// The taint a kubeflavor node registers with, in kubectl's `key=value:Effect` notation:
/// untrusted until the controller flavors it and removes the taint.
pub const UNVERIFIED_TAINT: &str = "kubeflavor.io/unverified=:NoSchedule";

/// Default retry interval of discovery, as kubeadm's.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// Where progress goes. kubeadm prints its phase lines on stdout; warnings go to stderr so
/// they are not lost when stdout is piped.
pub trait Report {
    fn info(&mut self, line: &str);
    fn warn(&mut self, line: &str);
}

/// Progress collected in memory (tests, and the walkthrough's indented narration).
#[derive(Default, Debug, Clone)]
pub struct RecordedReport {
    pub lines: Vec<String>,
}

impl Report for RecordedReport {
    fn info(&mut self, line: &str) {
        self.lines.push(line.to_string());
    }
    fn warn(&mut self, line: &str) {
        self.lines.push(line.to_string());
    }
}

/// Everything `join` needs, parsed and validated. (Debug is safe: the token shows its id only.)
#[derive(Debug)]
pub struct JoinOptions {
    /// `https://host:port` of an API server.
    pub endpoint: http::Uri,
    pub token: BootstrapToken,
    pub ca_check: CaCheck,
    pub node_name: NodeName,
    pub kubelet_dir: PathBuf,
    pub tls_bootstrap: bool,
    /// Discovery, and separately the wait for the certificate, give up after this long.
    pub timeout: Duration,
    pub retry_interval: Duration,
    /// `--control-plane --certificate-key`: download the control-plane CA material right
    /// after discovery, before any kubelet file is written (kubeadm's download-certs).
    pub control_plane: Option<crate::certs::download::DownloadOptions>,
}

/// What a successful join produced.
#[derive(Debug)]
pub struct JoinOutcome {
    pub cluster: DiscoveredCluster,
    pub bootstrap_kubeconfig: PathBuf,
    /// The KubeletConfiguration the printed `--config` names.
    pub kubelet_config: PathBuf,
    /// With `--tls-bootstrap`: kubelet.conf and the CSR it came from.
    pub kubelet_kubeconfig: Option<PathBuf>,
    pub csr_name: Option<String>,
    /// The flags to start the kubelet with.
    pub kubelet_flags: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "the kubelet directory is not usable: {0} (pass a writable --kubelet-dir, or run as root)"
    )]
    KubeletDir(WriteError),
    #[error(
        "{} already exists: this node has joined a cluster before (remove it first, e.g. with 'kubeadm reset', to join again)",
        .0.display()
    )]
    AlreadyJoined(PathBuf),
    /// kubeadm's preflight refuses it too (FileAvailable): a kubelet may be bootstrapping
    /// with it, and it holds someone's token.
    #[error(
        "{} already exists: this node is joining a cluster, or has joined one (remove it first, e.g. with 'kubeadm reset', to join again)",
        .0.display()
    )]
    BootstrapPending(PathBuf),
    #[error(
        "{} already exists with other content (move it away, or merge kubeflavor's fields into the kubelet's own configuration file; 'kubeflavor join --help' lists them)",
        .0.display()
    )]
    KubeletConfigExists(PathBuf),
    /// The kubelet would trust the CA file for client authentication: it must hold the
    /// cluster's pinned CA and nothing else.
    #[error(
        "{} already exists and holds a certificate other than the cluster CA this join authenticated (remove it, e.g. with 'kubeadm reset', or check where it came from)",
        .0.display()
    )]
    ForeignCaFile(PathBuf),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    TlsBootstrap(#[from] TlsBootstrapError),
    #[error("cannot build the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error(transparent)]
    Certs(#[from] crate::certs::CertsError),
}

/// Parses the join endpoint as kubeadm takes it, `host:port` (an `https://` prefix is
/// tolerated), into the URL discovery connects to.
pub fn parse_endpoint(endpoint: &str) -> Result<http::Uri, String> {
    let hostport = endpoint
        .strip_prefix("https://")
        .unwrap_or(endpoint)
        .trim_end_matches('/');
    let fix = "give the API server endpoint as host:port, e.g. 192.0.2.10:6443";
    if hostport.is_empty()
        || hostport.contains('/')
        || hostport.contains('@')
        || hostport.contains("://")
    {
        return Err(format!(
            "{endpoint:?} is not an API server endpoint ({fix})"
        ));
    }
    let uri: http::Uri = format!("https://{hostport}")
        .parse()
        .map_err(|e| format!("{endpoint:?} is not an API server endpoint: {e} ({fix})"))?;
    match uri.port_u16() {
        Some(p) if p != 0 => Ok(uri),
        _ => Err(format!("{endpoint:?} has no port ({fix})")),
    }
}

/// Runs the join. On error, no file or directory this run created is left behind, and
/// nothing that was there before has changed.
pub async fn run(opts: &JoinOptions, report: &mut dyn Report) -> Result<JoinOutcome, JoinError> {
    report.info("[preflight] Running pre-flight checks");
    let mut written = Written {
        dirs: files::ensure_writable_dir(&opts.kubelet_dir).map_err(JoinError::KubeletDir)?,
        files: Vec::new(),
    };
    let result = join_steps(opts, report, &mut written).await;
    if result.is_err() {
        // A refused or failed join leaves no credentials behind (the token in
        // bootstrap-kubelet.conf is the one the cluster just refused, or soon will; the CA
        // keys of --control-plane belong on a control plane only), and no configuration
        // pointing at them.
        written.roll_back(report);
    }
    result
}

/// Everything after the kubelet directory exists, phase by phase; every file and directory
/// a phase creates goes into `written` the moment it exists.
async fn join_steps(
    opts: &JoinOptions,
    report: &mut dyn Report,
    written: &mut Written,
) -> Result<JoinOutcome, JoinError> {
    let paths = Paths::in_dir(&opts.kubelet_dir);
    let config = kubelet_config(&paths.ca);
    let write_config = preflight::check(opts, &paths, &config, report)?;
    let cluster = discovery::discover(&opts.discovery_config(), report).await?;
    if let Some(download) = &opts.control_plane {
        download_certs::phase(&cluster, &opts.token, download, report, written).await?;
    }
    let bootstrap_conf =
        kubelet_start::write_bootstrap_kubeconfig(&cluster, &opts.token, &paths, report, written)?;
    kubelet_start::write_cluster_ca(
        &cluster,
        &paths.ca,
        opts.control_plane.is_some(),
        report,
        written,
    )?;
    if write_config {
        kubelet_start::write_kubelet_config(&paths.config, &config, report, written)?;
    }
    let mut outcome = JoinOutcome {
        kubelet_flags: kubelet_flags(&opts.kubelet_dir, &opts.node_name),
        cluster,
        bootstrap_kubeconfig: paths.bootstrap,
        kubelet_config: paths.config,
        kubelet_kubeconfig: None,
        csr_name: None,
    };
    if opts.tls_bootstrap {
        let csr_name = tls_bootstrap_phase(
            opts,
            &outcome.cluster,
            &bootstrap_conf,
            &paths.kubelet,
            report,
        )
        .await?;
        outcome.kubelet_kubeconfig = Some(paths.kubelet);
        outcome.csr_name = Some(csr_name);
    }
    report.info("[kubelet-start] Start the kubelet with these flags (the node registers untrusted until kubeflavor flavors it):");
    report.info(&format!("  kubelet {}", outcome.kubelet_flags.join(" ")));
    Ok(outcome)
}

impl JoinOptions {
    /// What `[discovery]` needs of the options.
    fn discovery_config(&self) -> discovery::DiscoveryConfig {
        discovery::DiscoveryConfig {
            endpoint: self.endpoint.clone(),
            token: self.token.clone(),
            ca_check: self.ca_check.clone(),
            timeout: self.timeout,
            retry_interval: self.retry_interval,
        }
    }
}

/// The files join reads and writes in the kubelet directory.
struct Paths {
    bootstrap: PathBuf,
    config: PathBuf,
    kubelet: PathBuf,
    ca: PathBuf,
}

impl Paths {
    fn in_dir(kubelet_dir: &Path) -> Self {
        Paths {
            bootstrap: kubelet_dir.join(BOOTSTRAP_KUBELET_CONF),
            config: kubelet_dir.join(KUBELET_CONFIG),
            kubelet: kubelet_dir.join(KUBELET_CONF),
            ca: kubelet_dir.join(CLUSTER_CA),
        }
    }
}

/// What this run created, to remove when a later step fails. Only what it created: a file
/// that was there before (an identical PKI file the download kept, an identical kubelet
/// configuration) is never listed.
#[derive(Default)]
struct Written {
    files: Vec<PathBuf>,
    /// Directories this run created, parents first (removed deepest first, once empty).
    dirs: Vec<PathBuf>,
}

impl Written {
    /// A file this run created.
    fn file(&mut self, path: &Path) {
        self.files.push(path.to_path_buf());
    }

    /// The files and directories a `--control-plane` download created.
    fn add_download(&mut self, pki_dir: &Path, report: &crate::certs::pki_files::WriteReport) {
        self.dirs.extend(report.created_dirs.iter().cloned());
        self.files.extend(
            report
                .files
                .iter()
                .filter(|(_, outcome)| *outcome == crate::certs::pki_files::FileOutcome::Created)
                .map(|(rel, _)| pki_dir.join(rel)),
        );
    }

    /// Removes the files, then the directories; what cannot be removed is reported, not
    /// fatal (the join has already failed for a better reason).
    fn roll_back(&self, report: &mut dyn Report) {
        for path in &self.files {
            if let Err(cleanup) = files::remove_if_present(path) {
                report.warn(&format!("could not remove {}: {cleanup}", path.display()));
            }
        }
        for dir in self.dirs.iter().rev() {
            if let Err(e) = std::fs::remove_dir(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                report.warn(&format!("could not remove {}: {e}", dir.display()));
            }
        }
    }
}

async fn tls_bootstrap_phase(
    opts: &JoinOptions,
    cluster: &DiscoveredCluster,
    bootstrap_conf: &str,
    kubelet_path: &Path,
    report: &mut dyn Report,
) -> Result<String, JoinError> {
    report.info(
        "[tls-bootstrap] Requesting a client certificate for this node, as the kubelet would",
    );
    let client = client_from_kubeconfig(bootstrap_conf)
        .await
        .map_err(|e| JoinError::TlsBootstrap(TlsBootstrapError::Client(e)))?;
    let issued =
        tls_bootstrap::request_client_certificate(client, &opts.node_name, opts.timeout, report)
            .await?;
    let kubelet_conf = kubelet_kubeconfig(cluster, &opts.node_name, &issued)?;
    report.info(&format!(
        "[tls-bootstrap] Writing the node's kubeconfig to {:?}",
        kubelet_path.display()
    ));
    files::write_secret_file(kubelet_path, kubelet_conf.as_bytes())
        .map_err(JoinError::KubeletDir)?;
    Ok(issued.csr_name)
}

/// A kube client from kubeconfig text (what the kubelet would load from the file).
pub async fn client_from_kubeconfig(text: &str) -> Result<kube::Client, String> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

fn kubelet_kubeconfig(
    cluster: &DiscoveredCluster,
    node_name: &NodeName,
    issued: &tls_bootstrap::IssuedCertificate,
) -> Result<zeroize::Zeroizing<String>, JoinError> {
    Kubeconfig::kubelet(
        &cluster.server,
        &cluster.ca_pem,
        node_name.as_str(),
        issued.cert_pem.as_bytes(),
        &issued.key_pem,
    )
    .to_yaml()
    .map_err(|e| JoinError::Kubeconfig(e.to_string()))
}

/// The node name the kubelet would use without `--hostname-override`: the host name,
/// lowercased (as kubeadm's `GetHostname`).
pub fn default_node_name() -> Result<NodeName, String> {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map_err(|e| format!("cannot read this machine's host name: {e} (pass --node-name)"))?;
    let name = raw.trim().to_lowercase();
    name.parse().map_err(|e| {
        format!(
            "this machine's host name {name:?} is not a valid node name: {e} (pass --node-name)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::kubelet_start::bootstrap_kubeconfig;
    use super::*;

    #[test]
    fn endpoint_is_host_and_port() {
        assert_eq!(
            parse_endpoint("10.0.0.1:6443").unwrap().to_string(),
            "https://10.0.0.1:6443/"
        );
        assert_eq!(
            parse_endpoint("https://cp.example.com:6443")
                .unwrap()
                .to_string(),
            "https://cp.example.com:6443/"
        );
        assert_eq!(
            parse_endpoint("[2001:db8::1]:6443").unwrap().port_u16(),
            Some(6443)
        );
    }

    #[test]
    fn endpoint_without_port_or_with_a_path_is_refused() {
        for bad in [
            "10.0.0.1",
            "",
            "http://10.0.0.1:6443",
            "10.0.0.1:6443/api",
            "user@10.0.0.1:6443",
            "10.0.0.1:0",
        ] {
            let err = parse_endpoint(bad).unwrap_err();
            assert!(err.contains("host:port"), "{bad}: {err}");
        }
    }

    /// What join writes must load in kube-rs as the bootstrap identity would use it.
    #[tokio::test]
    async fn bootstrap_kubeconfig_loads_with_kubeadms_names() {
        let cluster = DiscoveredCluster {
            server: "https://127.0.0.1:6443".into(),
            ca_pem: Vec::new(),
            ca_certs_der: Vec::new(),
            pinned: true,
        };
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let text = bootstrap_kubeconfig(&cluster, &token).unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(
            kc.current_context.as_deref(),
            Some("tls-bootstrap-token-user@kubernetes")
        );
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(kc.auth_infos[0].name, "tls-bootstrap-token-user");
        assert!(user.token.is_some());
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://127.0.0.1:6443")
        );
    }
}
