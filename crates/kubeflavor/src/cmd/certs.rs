//! `kubeflavor certs ...`: the command line of the certificate hand-off (issue 6). The work
//! is in `crate::certs`; this file parses flags, connects, and prints.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kubeflavor_core::certkey::CertificateKey;
use kubeflavor_core::copycerts::Provenance;
use kubeflavor_core::flavor::TokenTtl;
use kubeflavor_core::pki::{self, KeyAlgorithm};
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token_secret::{
    AuthGroup, CONTROL_PLANE_GROUP, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE, TokenSecretData,
    format_expiration, secret_name,
};
use zeroize::Zeroize;

use crate::certs::download::DownloadOptions;
use crate::certs::objects::ReadableBy;
use crate::certs::pki_files::{self, WriteReport};
use crate::certs::upload::{self, UploadOptions, Uploaded};
use crate::certs::{self, CertsError, DEFAULT_PKI_DIR, ExternalEtcd, inspect};
use crate::cli::{GlobalArgs, TokenOutput};
use crate::cluster::{Cluster, ClusterArgs};
use crate::error::CliError;

/// A secret flag value as typed (`--certificate-key`, `--token`): zeroized on drop and never
/// shown by Debug (the parsed arguments are Debug). Validated where it is used, so a
/// malformed value gets its own exit code rather than clap's usage error (which would also
/// echo the value).
#[derive(Clone)]
pub struct SecretText(zeroize::Zeroizing<String>);

impl std::str::FromStr for SecretText {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SecretText(zeroize::Zeroizing::new(s.to_owned())))
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(****)")
    }
}

impl SecretText {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value as a certificate key.
    pub fn certificate_key(&self) -> Result<CertificateKey, CertsError> {
        certs::parse_certificate_key(&self.0)
    }
}

/// Environment variable that may carry the certificate key instead of the command line
/// (where every user of the machine can read it in the process list).
pub const KEY_ENV: &str = "KUBEFLAVOR_CERTIFICATE_KEY";

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Print a new certificate key (64 hex characters), like `kubeadm certs certificate-key`.
    Key,
    /// Create the shared CA set kubeadm keeps in /etc/kubernetes/pki (ca, front-proxy-ca,
    /// etcd/ca, sa key pair) with kubeadm's names and modes. Never overwrites a file.
    Generate(GenerateArgs),
    /// Encrypt the shared CA set and store it in kube-system/kubeadm-certs for 2 hours,
    /// readable only by control-plane join tokens; print the key once.
    Upload(UploadArgs),
    /// Fetch kube-system/kubeadm-certs, check the key, decrypt and verify everything, and
    /// write all files or none with kubeadm's modes.
    Download(DownloadArgs),
    /// Show what kube-system/kubeadm-certs holds, until when, and who may read it; with the
    /// key, the certificates' subjects and expiry dates.
    Inspect(InspectArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KeyType {
    #[value(name = "rsa-2048")]
    Rsa2048,
    #[value(name = "ecdsa-p256")]
    EcdsaP256,
}

impl From<KeyType> for KeyAlgorithm {
    fn from(k: KeyType) -> Self {
        match k {
            KeyType::Rsa2048 => KeyAlgorithm::Rsa2048,
            KeyType::EcdsaP256 => KeyAlgorithm::EcdsaP256,
        }
    }
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Directory to create the files in.
    #[arg(long, value_name = "DIR")]
    pub pki_dir: PathBuf,
    /// Key algorithm of the CAs and of the service-account key pair.
    #[arg(long, value_enum, default_value = "rsa-2048")]
    pub key_type: KeyType,
}

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// kubeadm's PKI directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PKI_DIR)]
    pub pki_dir: PathBuf,
    /// Encrypt with this key (64 hex characters) instead of a fresh one. Also read from
    /// the KUBEFLAVOR_CERTIFICATE_KEY environment variable.
    #[arg(long, value_name = "KEY", env = KEY_ENV, hide_env_values = true)]
    pub certificate_key: Option<SecretText>,
    /// External etcd: its CA certificate (instead of etcd/ca.* from the PKI directory).
    #[arg(long, value_name = "FILE", requires_all = ["external_etcd_cert", "external_etcd_key"])]
    pub external_etcd_ca: Option<PathBuf>,
    /// External etcd: the API server's client certificate.
    #[arg(long, value_name = "FILE", requires_all = ["external_etcd_ca", "external_etcd_key"])]
    pub external_etcd_cert: Option<PathBuf>,
    /// External etcd: the API server's client key.
    #[arg(long, value_name = "FILE", requires_all = ["external_etcd_ca", "external_etcd_cert"])]
    pub external_etcd_key: Option<PathBuf>,
    /// Lifetime of the Secret (its owner token expires then, and garbage collection
    /// deletes the Secret): e.g. 2h, 90m, 1h30m.
    #[arg(long, value_name = "DURATION", default_value = "2h", value_parser = parse_ttl)]
    pub ttl: SignedDuration,
    /// Which join tokens may read the Secret: control-plane (tokens from
    /// `kubeflavor token create --control-plane`) or kubeadm (every default kubeadm token,
    /// workers included, for `kubeadm join --control-plane`).
    #[arg(long, value_enum, default_value = "control-plane")]
    pub readable_by: ReadableBy,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The key printed by `kubeflavor certs upload` (64 hex characters). Also read from
    /// the KUBEFLAVOR_CERTIFICATE_KEY environment variable.
    #[arg(long, value_name = "KEY", env = KEY_ENV, hide_env_values = true)]
    pub certificate_key: Option<SecretText>,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// Read the Secret as a bootstrap token identity on this API server (host:port),
    /// discovering and pinning its CA as `kubeadm join` does, instead of a kubeconfig.
    #[arg(long, value_name = "HOST:PORT", requires_all = ["token", "discovery_token_ca_cert_hash"])]
    pub server: Option<String>,
    /// Bootstrap token (from `kubeflavor token create --control-plane`).
    #[arg(long, value_name = "TOKEN", requires = "server")]
    pub token: Option<SecretText>,
    /// Pin of the cluster CA, `sha256:<hex>` (repeatable).
    #[arg(long, value_name = "sha256:HEX", requires = "server")]
    pub discovery_token_ca_cert_hash: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DownloadArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    /// Where to write the files.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_PKI_DIR)]
    pub pki_dir: PathBuf,
    /// Replace existing files whose content differs (identical files are always kept).
    #[arg(long)]
    pub force: bool,
    /// Also accept a Secret uploaded by kubeadm (no kubeflavor key check): its entries are
    /// then checked only by kind and key/certificate matching.
    #[arg(long)]
    pub accept_kubeadm_secret: bool,
    #[command(flatten)]
    pub bootstrap: BootstrapArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: InspectFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InspectFormat {
    Text,
    Json,
}

fn parse_ttl(s: &str) -> Result<SignedDuration, String> {
    s.parse::<SignedDuration>()
        .map_err(|e| format!("{e} (write a duration such as 2h, 90m or 1h30m)"))
}

impl KeyArgs {
    fn required(&self) -> Result<CertificateKey, CertsError> {
        match &self.certificate_key {
            Some(k) => k.certificate_key(),
            None => Err(CertsError::MalformedKey(format!(
                "no certificate key given (pass --certificate-key with the key 'kubeflavor certs upload' printed, or set {KEY_ENV})"
            ))),
        }
    }

    fn optional(&self) -> Result<Option<CertificateKey>, CertsError> {
        self.certificate_key
            .as_ref()
            .map(SecretText::certificate_key)
            .transpose()
    }
}

/// `certs key`.
pub fn key(out: &mut dyn Write) -> Result<(), CertsError> {
    let key = CertificateKey::generate().map_err(|e| CertsError::Other(e.to_string()))?;
    writeln!(out, "{}", key.expose_hex().as_str()).map_err(output_error)
}

/// `certs generate`.
pub fn generate(
    args: &GenerateArgs,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<(), CertsError> {
    let files = pki::generate_shared_ca_set(args.key_type.into(), now)
        .map_err(|e| CertsError::Other(format!("cannot generate the CA set: {e}")))?;
    // Fresh keys never equal existing files, so any existing file is a conflict: generate
    // never overwrites, and writes nothing at all if it would have to.
    let report = pki_files::write_all(&args.pki_dir, &files, false)?;
    print_report(out, "[certs]", &args.pki_dir, &report)
}

/// `certs upload`, given a client.
pub async fn upload(
    args: &UploadArgs,
    client: &kube::Client,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<Uploaded, CertsError> {
    let key = args
        .certificate_key
        .as_ref()
        .map(SecretText::certificate_key)
        .transpose()?;
    let external_etcd = match (
        &args.external_etcd_ca,
        &args.external_etcd_cert,
        &args.external_etcd_key,
    ) {
        (Some(ca), Some(cert), Some(key)) => Some(ExternalEtcd {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    let opts = UploadOptions {
        pki_dir: args.pki_dir.clone(),
        external_etcd,
        key,
        ttl: args.ttl,
        readable_by: args.readable_by,
    };
    let mut lines = Vec::new();
    let result = upload::upload(client, opts, now, &mut |l: &str| lines.push(l.to_owned())).await;
    for l in &lines {
        writeln!(out, "{l}").map_err(output_error)?;
    }
    let up = result?;
    writeln!(
        out,
        "[upload-certs] The Secret expires at {} with its proxy token {}; readable by group {:?}",
        up.expiration,
        up.proxy_token_id,
        up.readable_by.group()
    )
    .map_err(output_error)?;
    // kubeadm's exact two lines: scripts take the key from the last line.
    writeln!(out, "[upload-certs] Using certificate key:").map_err(output_error)?;
    writeln!(out, "{}", up.key.expose_hex().as_str()).map_err(output_error)?;
    Ok(up)
}

/// `certs download`, given a client (admin or bootstrap identity).
pub async fn download(
    args: &DownloadArgs,
    client: &kube::Client,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<WriteReport, CertsError> {
    let opts = DownloadOptions {
        pki_dir: args.pki_dir.clone(),
        key: args.key.required()?,
        force: args.force,
        provenance: provenance(args.accept_kubeadm_secret),
    };
    download_with(&opts, client, now, out).await
}

/// The download step shared by `certs download` and `join --control-plane`.
pub async fn download_with(
    opts: &DownloadOptions,
    client: &kube::Client,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<WriteReport, CertsError> {
    writeln!(
        out,
        "[download-certs] Downloading the certificates in Secret \"kubeadm-certs\" in the \"kube-system\" Namespace"
    )
    .map_err(output_error)?;
    let report = certs::download::download(client, opts, now).await?;
    print_report(out, "[download-certs]", &opts.pki_dir, &report)?;
    Ok(report)
}

/// `certs inspect`, given a client.
pub async fn inspect(
    args: &InspectArgs,
    client: &kube::Client,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<(), CertsError> {
    let key = args.key.optional()?;
    inspect_with(args, key.as_ref(), client, now, out).await
}

async fn inspect_with(
    args: &InspectArgs,
    key: Option<&CertificateKey>,
    client: &kube::Client,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<(), CertsError> {
    let i = inspect::inspect(client, key, now).await?;
    match args.output {
        InspectFormat::Text => write!(out, "{}", inspect::render(&i)),
        InspectFormat::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&i).map_err(|e| CertsError::Other(e.to_string()))?
        ),
    }
    .map_err(output_error)
}

fn provenance(accept_kubeadm_secret: bool) -> Provenance {
    if accept_kubeadm_secret {
        Provenance::KubeflavorOrKubeadm
    } else {
        Provenance::KubeflavorOnly
    }
}

fn output_error(e: std::io::Error) -> CertsError {
    CertsError::Other(format!("cannot write the output: {e}"))
}

fn print_report(
    out: &mut dyn Write,
    phase: &str,
    dir: &std::path::Path,
    report: &WriteReport,
) -> Result<(), CertsError> {
    for line in crate::certs::download::report_lines(phase, dir, report) {
        writeln!(out, "{line}").map_err(output_error)?;
    }
    Ok(())
}

/// Runs one `certs` command: connects (admin kubeconfig, or a bootstrap identity for
/// `download --server`) only for the commands that talk to a cluster.
pub async fn execute(
    command: CertsCommand,
    global: &GlobalArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let now = Timestamp::now();
    match command {
        CertsCommand::Key => Ok(key(out)?),
        CertsCommand::Generate(args) => Ok(generate(&args, now, out)?),
        CertsCommand::Upload(args) => {
            let cluster = connect(global).await?;
            upload(&args, &cluster.client, now, out).await?;
            Ok(())
        }
        CertsCommand::Download(args) => {
            // Parse the key before any network traffic: a typo fails fast (exit 20).
            let key = args.key.required()?;
            let client = match &args.bootstrap.server {
                Some(server) => bootstrap_client(server, &args.bootstrap, out).await?,
                None => connect(global).await?.client,
            };
            let opts = DownloadOptions {
                pki_dir: args.pki_dir.clone(),
                key,
                force: args.force,
                provenance: provenance(args.accept_kubeadm_secret),
            };
            download_with(&opts, &client, now, out).await?;
            Ok(())
        }
        CertsCommand::Inspect(args) => {
            let key = args.key.optional()?;
            let cluster = connect(global).await?;
            inspect_with(&args, key.as_ref(), &cluster.client, now, out).await?;
            Ok(())
        }
    }
}

async fn connect(global: &GlobalArgs) -> Result<Cluster, CliError> {
    Cluster::connect(&ClusterArgs {
        kubeconfig: global.kubeconfig.clone(),
        context: global.context.clone(),
    })
    .await
}

/// Default lifetime of a control-plane join token: the lifetime of the kubeadm-certs
/// Secret it exists to read (`certs upload --ttl`).
pub const CONTROL_PLANE_TOKEN_TTL: TokenTtl = TokenTtl::Seconds(2 * 3600);
const CONTROL_PLANE_TOKEN_DESCRIPTION: &str = "kubeflavor control-plane join token";
const CREATE_ATTEMPTS: usize = 5;

/// What `token create --control-plane -o json|yaml` prints (it holds the token).
#[derive(serde::Serialize)]
struct ControlPlaneToken<'a> {
    token: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expiration: Option<String>,
    usages: [&'static str; 2],
    groups: [&'static str; 1],
}

/// `token create --control-plane`: a bootstrap token in the one group allowed to read
/// kube-system/kubeadm-certs (P5), with kubeadm's usages so `join --control-plane` can run
/// discovery with it. It carries no flavor: it is not a node token.
pub async fn create_control_plane_token(
    cluster: &Cluster,
    args: &crate::cli::TokenCreateArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    // Resolved before the token exists, as for node tokens: no token nobody will see.
    let join_target = match args.print_join_command {
        true => Some(crate::cmd::join::join_target(cluster).await?),
        false => None,
    };
    let expiration = args
        .ttl
        .unwrap_or(CONTROL_PLANE_TOKEN_TTL)
        .expiration(Timestamp::now());
    let group: AuthGroup = CONTROL_PLANE_GROUP
        .parse()
        .map_err(|e| CliError::failed(e, "report this bug"))?;
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), TOKEN_SECRET_NAMESPACE);
    for _ in 0..CREATE_ATTEMPTS {
        let token = BootstrapToken::generate().map_err(|e| CliError::failed(e, "retry"))?;
        let data = TokenSecretData {
            token: token.clone(),
            expiration,
            usage_authentication: true,
            usage_signing: true,
            extra_groups: vec![group.clone()],
            description: Some(CONTROL_PLANE_TOKEN_DESCRIPTION.to_owned()),
        };
        let mut string_data = data.to_string_data();
        let mut secret = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name(token.id())),
                namespace: Some(TOKEN_SECRET_NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            type_: Some(TOKEN_SECRET_TYPE.to_owned()),
            data: Some(
                string_data
                    .iter()
                    .map(|(k, v)| (k.clone(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        };
        string_data.values_mut().for_each(Zeroize::zeroize);
        let result = secrets.create(&PostParams::default(), &secret).await;
        secret
            .data
            .iter_mut()
            .flat_map(|d| d.values_mut())
            .for_each(|v| v.0.zeroize());
        match result {
            Ok(_) => {
                if let Some(target) = &join_target {
                    // kubeadm's control-plane join line; the key comes from `certs upload`.
                    let line = crate::cmd::join::join_command_line(target, &token);
                    writeln!(
                        out,
                        "{} --control-plane --certificate-key <key printed by 'kubeflavor certs upload'>",
                        line.trim_end()
                    )?;
                    return Ok(());
                }
                let exposed = token.expose();
                let view = ControlPlaneToken {
                    token: exposed.as_str(),
                    id: token.id().as_str(),
                    expiration: expiration.map(format_expiration),
                    usages: ["authentication", "signing"],
                    groups: [CONTROL_PLANE_GROUP],
                };
                let text = match args.output {
                    TokenOutput::Token => exposed.to_string(),
                    TokenOutput::Json => serde_json::to_string_pretty(&view)
                        .map_err(|e| CliError::failed(e, "report this bug"))?,
                    TokenOutput::Yaml => serde_saphyr::to_string(&view)
                        .map_err(|e| CliError::failed(e, "report this bug"))?,
                };
                writeln!(out, "{}", text.trim_end())?;
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(id = %token.id(), "token id already taken, generating another");
            }
            Err(err) => return Err(cluster.error("create the token Secret in kube-system", err)),
        }
    }
    Err(CliError::failed(
        format!("{CREATE_ATTEMPTS} freshly generated token ids were all taken"),
        "check the system's random number generator",
    ))
}

/// The download `join --control-plane --certificate-key` performs, into kubeadm's
/// `<kubelet-dir>/pki`. The key is parsed before anything happens (exit 20 on a typo).
pub fn join_download_options(
    args: &crate::cmd::join::JoinArgs,
) -> Result<Option<DownloadOptions>, CliError> {
    match (&args.certificate_key, args.control_plane) {
        (Some(key), true) => Ok(Some(DownloadOptions {
            pki_dir: args.kubelet_dir.join("pki"),
            key: key.certificate_key()?,
            force: false,
            provenance: provenance(args.accept_kubeadm_secret),
        })),
        _ => Ok(None),
    }
}

/// Progress lines of discovery on the command's output.
struct LineReport<'a> {
    out: &'a mut dyn Write,
}

impl crate::join::Report for LineReport<'_> {
    fn info(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
    }
    fn warn(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// `certs download --server --token --discovery-token-ca-cert-hash`: authenticate the
/// cluster exactly as `join` does (token-signed cluster-info, CA pin, CA-verified re-read),
/// then read the Secret as the bootstrap token. Bad input exits with join's codes.
async fn bootstrap_client(
    server: &str,
    args: &BootstrapArgs,
    out: &mut dyn Write,
) -> Result<kube::Client, CliError> {
    use crate::cmd::join::exit_code;
    use crate::exit::ExitCode;
    use crate::join::{self, CaCheck, JoinError, discovery};
    use kubeflavor_core::pin::CaPin;

    let endpoint = join::parse_endpoint(server).map_err(|m| CliError::bare(ExitCode::Usage, m))?;
    // Parsed here, not by clap: clap would echo the secret in its error.
    let token: BootstrapToken = args
        .token
        .as_ref()
        .map(SecretText::expose)
        .unwrap_or_default()
        .parse()
        .map_err(|e| {
            CliError::new(
                ExitCode::JoinMalformedToken,
                format_args!("--token is not a bootstrap token: {e}"),
                "use a token from 'kubeflavor token create --control-plane'",
            )
        })?;
    let pins = args
        .discovery_token_ca_cert_hash
        .iter()
        .map(|h| {
            h.parse::<CaPin>().map_err(|e| {
                CliError::new(
                    ExitCode::JoinMalformedPin,
                    format_args!("--discovery-token-ca-cert-hash {h:?} is not a CA pin: {e}"),
                    "sha256:<64 hex characters>, as 'kubeflavor token create --print-join-command' prints it",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = discovery::DiscoveryConfig {
        endpoint,
        token: token.clone(),
        ca_check: CaCheck::Pinned(pins),
        timeout: std::time::Duration::from_secs(300),
        retry_interval: std::time::Duration::from_secs(5),
    };
    let cluster = discovery::discover(&config, &mut LineReport { out })
        .await
        .map_err(|e| {
            let e = JoinError::Discovery(e);
            CliError::bare(exit_code(&e), e.to_string())
        })?;
    Ok(certs::download::bootstrap_client(
        &cluster.server,
        &cluster.ca_certs_der,
        &token,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[command(subcommand)]
        c: CertsCommand,
    }

    #[test]
    fn parsed_arguments_never_show_the_key_or_token() {
        let key = "0123456789abcdef".repeat(4);
        let token = "abcdef.0123456789abcdef";
        let t = T::try_parse_from([
            "certs",
            "download",
            "--certificate-key",
            &key,
            "--server",
            "127.0.0.1:6443",
            "--token",
            token,
            "--discovery-token-ca-cert-hash",
            "sha256:00",
        ])
        .unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains(&key), "{shown}");
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
    }

    #[test]
    fn ttl_accepts_kubeadm_style_durations() {
        assert_eq!(parse_ttl("2h").unwrap(), SignedDuration::from_hours(2));
        assert_eq!(parse_ttl("1h30m").unwrap(), SignedDuration::from_mins(90));
        assert!(parse_ttl("two hours").unwrap_err().contains("such as 2h"));
    }
}
