//! `kubeflavor join`: the node side of enrollment, kubeadm-compatible.
//!
//! Phases, named as kubeadm names them and printed the same way:
//! - `[preflight]`: the kubelet directory is usable and this node has not joined already
//!   (before any network traffic, so a bad directory never costs a token use);
//! - `[discovery]` ([`discovery`]): an authenticated view of the cluster from
//!   `kube-public/cluster-info`;
//! - `[kubelet-start]`: bootstrap-kubelet.conf and a KubeletConfiguration for the kubelet,
//!   and the flags to start it with;
//! - `[tls-bootstrap]` ([`tls_bootstrap`], with `--tls-bootstrap`): the kubelet's CSR done
//!   here, ending in kubelet.conf.
//!
//! Every file is written atomically ([`files`]), the kubeconfigs with mode 0600, the
//! kubelet configuration (no secret in it) with 0644; a failure after bootstrap-kubelet.conf
//! was written removes what this run wrote, so a failed join leaves nothing.

pub mod discovery;
pub mod fetch;
pub mod files;
pub mod tls_bootstrap;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubeflavor_core::kubeconfig::Kubeconfig;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::BootstrapToken;

pub use discovery::{CaCheck, DiscoveredCluster, DiscoveryError};
pub use files::WriteError;
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
/// untrusted until the controller flavors it and removes the taint (issue 4 item 5).
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

/// Runs the join. On error, no file this run created is left behind.
pub async fn run(opts: &JoinOptions, report: &mut dyn Report) -> Result<JoinOutcome, JoinError> {
    let bootstrap_path = opts.kubelet_dir.join(BOOTSTRAP_KUBELET_CONF);
    let config_path = opts.kubelet_dir.join(KUBELET_CONFIG);
    let kubelet_path = opts.kubelet_dir.join(KUBELET_CONF);

    report.info("[preflight] Running pre-flight checks");
    files::ensure_writable_dir(&opts.kubelet_dir).map_err(JoinError::KubeletDir)?;
    if kubelet_path.exists() {
        return Err(JoinError::AlreadyJoined(kubelet_path));
    }
    if let CaCheck::UnsafeSkip = opts.ca_check {
        report.warn(
            "WARNING: --discovery-token-unsafe-skip-ca-verification: the cluster CA is NOT verified. \
             Anyone who knows this token can impersonate the cluster to this node. \
             Use --discovery-token-ca-cert-hash instead.",
        );
    }

    let cluster = discovery::discover(
        &discovery::DiscoveryConfig {
            endpoint: opts.endpoint.clone(),
            token: opts.token.clone(),
            ca_check: opts.ca_check.clone(),
            timeout: opts.timeout,
            retry_interval: opts.retry_interval,
        },
        report,
    )
    .await?;

    if let Some(download) = &opts.control_plane {
        crate::certs::download::for_join(&cluster, &opts.token, download, report).await?;
    }

    let bootstrap_conf = bootstrap_kubeconfig(&cluster, &opts.token)?;
    report.info(&format!(
        "[kubelet-start] Writing the bootstrap kubeconfig to {:?}",
        bootstrap_path.display()
    ));
    files::write_secret_file(&bootstrap_path, bootstrap_conf.as_bytes())
        .map_err(JoinError::KubeletDir)?;
    // The cluster CA for the kubelet's client authentication, unless it is there already
    // (`--control-plane` just downloaded it with the rest of the PKI).
    let ca_path = opts.kubelet_dir.join(CLUSTER_CA);
    let mut written = Written::default();
    written.files.push(bootstrap_path.clone());
    if !ca_path.exists() {
        report.info(&format!(
            "[kubelet-start] Writing the cluster CA to {:?}",
            ca_path.display()
        ));
        let pki_dir = parent(&ca_path);
        if !pki_dir.exists() {
            if let Err(e) = std::fs::create_dir(pki_dir) {
                written.roll_back(report);
                return Err(JoinError::KubeletDir(files::WriteError::at(pki_dir, e)));
            }
            written.dir = Some(pki_dir.to_path_buf());
        }
        if let Err(e) = files::write_file(&ca_path, &cluster.ca_pem, files::PUBLIC_FILE_MODE) {
            written.roll_back(report);
            return Err(JoinError::KubeletDir(e));
        }
        written.files.push(ca_path.clone());
    }
    report.info(&format!(
        "[kubelet-start] Writing the kubelet configuration to {:?}",
        config_path.display()
    ));
    if let Err(e) = files::write_file(
        &config_path,
        kubelet_config(&ca_path).as_bytes(),
        files::PUBLIC_FILE_MODE,
    ) {
        written.roll_back(report);
        return Err(JoinError::KubeletDir(e));
    }
    written.files.push(config_path.clone());

    let mut outcome = JoinOutcome {
        kubelet_flags: kubelet_flags(&opts.kubelet_dir, &opts.node_name),
        cluster,
        bootstrap_kubeconfig: bootstrap_path.clone(),
        kubelet_config: config_path.clone(),
        kubelet_kubeconfig: None,
        csr_name: None,
    };

    if opts.tls_bootstrap {
        let result = tls_bootstrap_phase(
            opts,
            &outcome.cluster,
            &bootstrap_conf,
            &kubelet_path,
            report,
        )
        .await;
        match result {
            Ok(csr_name) => {
                outcome.kubelet_kubeconfig = Some(kubelet_path);
                outcome.csr_name = Some(csr_name);
            }
            Err(e) => {
                // A refused or failed bootstrap leaves no credentials behind (the token in
                // bootstrap-kubelet.conf is the one the cluster just refused, or soon will),
                // and no configuration pointing at them.
                written.roll_back(report);
                return Err(e);
            }
        }
    }

    report.info("[kubelet-start] Start the kubelet with these flags (the node registers untrusted until kubeflavor flavors it):");
    report.info(&format!("  kubelet {}", outcome.kubelet_flags.join(" ")));
    Ok(outcome)
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// What this run wrote, to roll back when a later step fails.
#[derive(Default)]
struct Written {
    files: Vec<PathBuf>,
    /// A directory this run created (removed once empty).
    dir: Option<PathBuf>,
}

impl Written {
    /// Removes the files, then the directory; what cannot be removed is reported, not
    /// fatal (the join has already failed for a better reason).
    fn roll_back(&self, report: &mut dyn Report) {
        for path in &self.files {
            if let Err(cleanup) = files::remove_if_present(path) {
                report.warn(&format!("could not remove {}: {cleanup}", path.display()));
            }
        }
        if let Some(dir) = &self.dir
            && let Err(e) = std::fs::remove_dir(dir)
        {
            report.warn(&format!("could not remove {}: {e}", dir.display()));
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

/// The flags that make the kubelet use what join wrote. Only flags upstream's kubelet
/// keeps as flags (its `KubeletFlags`, none deprecated as of v1.36); what is a
/// KubeletConfiguration field (certificate rotation, the registration taint) is in the
/// file `--config` names, [`kubelet_config`].
pub fn kubelet_flags(kubelet_dir: &Path, node_name: &NodeName) -> Vec<String> {
    vec![
        format!("--config={}", kubelet_dir.join(KUBELET_CONFIG).display()),
        format!(
            "--bootstrap-kubeconfig={}",
            kubelet_dir.join(BOOTSTRAP_KUBELET_CONF).display()
        ),
        format!("--kubeconfig={}", kubelet_dir.join(KUBELET_CONF).display()),
        format!("--hostname-override={node_name}"),
    ]
}

/// The KubeletConfiguration join writes to [`KUBELET_CONFIG`]: client certificate rotation
/// (renewals are CSRs kubeflavor's controller decides on), registration with the
/// `kubeflavor.io/unverified:NoSchedule` taint, and the cluster CA (`client_ca`) as the CA
/// of clients the kubelet's own API accepts (the API server's, for logs and exec; with a
/// config file the kubelet refuses anonymous requests). Everything else keeps the kubelet's
/// KubeletConfiguration defaults. No secret: written with mode 0644.
pub fn kubelet_config(client_ca: &Path) -> String {
    format!(
        "\
# Written by `kubeflavor join`; the kubelet reads it through --config.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Renew the node's client certificate with CSRs (kubeflavor's controller decides on them).
rotateCertificates: true
# Register the Node untrusted; the controller removes the taint when it flavors the node.
registerWithTaints:
  - key: {key}
    effect: NoSchedule
# Accept the API server's client certificate (kubectl logs, exec), issued by the cluster CA.
authentication:
  x509:
    clientCAFile: {ca}
",
        key = kubeflavor_core::flavor::UNVERIFIED_TAINT,
        ca = serde_json::to_string(&client_ca.display().to_string()).expect("a string serializes"),
    )
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

fn bootstrap_kubeconfig(
    cluster: &DiscoveredCluster,
    token: &BootstrapToken,
) -> Result<zeroize::Zeroizing<String>, JoinError> {
    Kubeconfig::bootstrap_kubelet(&cluster.server, &cluster.ca_pem, &token.expose())
        .to_yaml()
        .map_err(|e| JoinError::Kubeconfig(e.to_string()))
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

    #[test]
    fn kubelet_flags_use_what_join_wrote() {
        let flags = kubelet_flags(Path::new("/etc/kubernetes"), &"worker-1".parse().unwrap());
        assert_eq!(
            flags,
            [
                "--config=/etc/kubernetes/kubelet-config.yaml",
                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf",
                "--hostname-override=worker-1",
            ]
        );
    }

    /// Rotation and the untrusted registration moved from flags to the config file: the
    /// file must say so in the kubelet's own schema.
    #[test]
    fn kubelet_config_rotates_certificates_and_registers_untrusted() {
        let ca = Path::new("/etc/kubernetes/pki/ca.crt");
        let config: serde_json::Value = serde_saphyr::from_str(&kubelet_config(ca)).unwrap();
        assert_eq!(
            config,
            serde_json::json!({
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "rotateCertificates": true,
                "registerWithTaints": [
                    {"key": "kubeflavor.io/unverified", "effect": "NoSchedule"},
                ],
                "authentication": {"x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}},
            })
        );
        // The same taint as the flag notation kubeflavor documents elsewhere.
        assert_eq!(UNVERIFIED_TAINT, "kubeflavor.io/unverified=:NoSchedule");
    }

    /// Flags a v1.36 kubelet warns about, from upstream kubernetes/kubernetes
    /// cmd/kubelet/app/options/options.go (read at commit 6785e9ed401a, a version with
    /// --config-dir): every flag `AddKubeletConfigFlags` registers is marked deprecated
    /// ("This parameter should be set via the config file specified by the Kubelet's
    /// --config flag") except v, vmodule, log-flush-frequency and provider-id; the
    /// remaining ones are `KubeletFlags` with an explicit `fs.MarkDeprecated`.
    const UPSTREAM_DEPRECATED_KUBELET_FLAGS: &[&str] = &[
        // AddKubeletConfigFlags: KubeletConfiguration fields.
        "enable-server",
        "fail-swap-on",
        "pod-manifest-path",
        "sync-frequency",
        "file-check-frequency",
        "http-check-frequency",
        "manifest-url",
        "manifest-url-header",
        "address",
        "port",
        "read-only-port",
        "container-runtime-endpoint",
        "image-service-endpoint",
        "anonymous-auth",
        "authentication-token-webhook",
        "authentication-token-webhook-cache-ttl",
        "client-ca-file",
        "authorization-mode",
        "authorization-webhook-cache-authorized-ttl",
        "authorization-webhook-cache-unauthorized-ttl",
        "tls-cert-file",
        "tls-private-key-file",
        "rotate-server-certificates",
        "tls-cipher-suites",
        "tls-min-version",
        "rotate-certificates",
        "registry-qps",
        "registry-burst",
        "event-qps",
        "event-burst",
        "enable-debugging-handlers",
        "contention-profiling",
        "healthz-port",
        "healthz-bind-address",
        "oom-score-adj",
        "cluster-domain",
        "volume-plugin-dir",
        "cluster-dns",
        "streaming-connection-idle-timeout",
        "node-status-update-frequency",
        "minimum-image-ttl-duration",
        "image-gc-high-threshold",
        "image-gc-low-threshold",
        "volume-stats-agg-period",
        "feature-gates",
        "kubelet-cgroups",
        "system-cgroups",
        "cgroups-per-qos",
        "cgroup-driver",
        "cgroup-root",
        "cpu-manager-policy",
        "cpu-manager-policy-options",
        "cpu-manager-reconcile-period",
        "qos-reserved",
        "topology-manager-policy",
        "runtime-request-timeout",
        "hairpin-mode",
        "max-pods",
        "pod-cidr",
        "pod-max-pids",
        "resolv-conf",
        "runonce",
        "cpu-cfs-quota",
        "cpu-cfs-quota-period",
        "enable-controller-attach-detach",
        "make-iptables-util-chains",
        "iptables-masquerade-bit",
        "iptables-drop-bit",
        "container-log-max-size",
        "container-log-max-files",
        "allowed-unsafe-sysctls",
        "node-status-max-images",
        "kernel-memcg-notification",
        "local-storage-capacity-isolation",
        "max-open-files",
        "kube-api-content-type",
        "kube-api-qps",
        "kube-api-burst",
        "serialize-image-pulls",
        "eviction-hard",
        "eviction-soft",
        "eviction-soft-grace-period",
        "eviction-pressure-transition-period",
        "eviction-max-pod-grace-period",
        "eviction-minimum-reclaim",
        "pods-per-core",
        "protect-kernel-defaults",
        "reserved-cpus",
        "topology-manager-scope",
        "topology-manager-policy-options",
        "system-reserved",
        "kube-reserved",
        "enforce-node-allocatable",
        "system-reserved-cgroup",
        "kube-reserved-cgroup",
        "logging-format",
        "memory-manager-policy",
        "reserved-memory",
        "register-node",
        "register-with-taints",
        // KubeletFlags.AddFlags: explicit fs.MarkDeprecated.
        "minimum-container-ttl-duration",
        "maximum-dead-containers-per-container",
        "maximum-dead-containers",
        "register-schedulable",
        "keep-terminated-pod-volumes",
        "experimental-mounter-path",
        "cloud-config",
        "experimental-allocatable-ignore-eviction",
    ];

    /// The undeprecated `KubeletFlags` of the same file (flags whose value is per node or
    /// fixed for the node's life, which upstream keeps off the shared config file).
    const UPSTREAM_KUBELET_FLAGS: &[&str] = &[
        "config",
        "config-dir",
        "kubeconfig",
        "bootstrap-kubeconfig",
        "hostname-override",
        "node-ip",
        "cert-dir",
        "cloud-provider",
        "root-dir",
        "seccomp-default",
        "node-labels",
        "lock-file",
        "exit-on-lock-contention",
    ];

    #[test]
    fn no_printed_kubelet_flag_is_deprecated_upstream() {
        let flags = kubelet_flags(Path::new("/etc/kubernetes"), &"worker-1".parse().unwrap());
        for flag in &flags {
            let name = flag
                .strip_prefix("--")
                .and_then(|f| f.split('=').next())
                .unwrap_or_else(|| panic!("{flag:?} is not a long flag"));
            assert!(
                !UPSTREAM_DEPRECATED_KUBELET_FLAGS.contains(&name),
                "--{name} is deprecated in the kubelet: put it in the --config file"
            );
            assert!(
                UPSTREAM_KUBELET_FLAGS.contains(&name),
                "--{name} is not one of the kubelet's undeprecated KubeletFlags"
            );
        }
    }
}
