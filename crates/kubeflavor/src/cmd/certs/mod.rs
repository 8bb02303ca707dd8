//! `kubeflavor certs ...`: the command line of the certificate hand-off (P5, certificate
//! hand-off; P6, nothing lost). The work
//! is in `crate::certs`; this module parses flags, connects, and prints.

mod bootstrap;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use jiff::{SignedDuration, Timestamp};
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts::Provenance;
use kubeflavor_core::crypto::pki::{self, KeyAlgorithm};

use crate::certs::download::DownloadOptions;
use crate::certs::objects::ReadableBy;
use crate::certs::pki_files::{self, WriteReport};
use crate::certs::upload::{self, UploadOptions, Uploaded};
use crate::certs::{self, CertsError, DEFAULT_PKI_DIR, ExternalEtcd, inspect};
use crate::cli::GlobalArgs;
use crate::cli::discovery_flags::parse_duration;
use crate::cli::secret::{
    self, KEY_ENV, SecretFlags, SecretText, TOKEN_ENV, read_key, secret_input_error,
};
use crate::error::CliError;
use crate::exit::ExitCode;

/// The exit codes of `certs`, shown in its `--help`.
pub const CERTS_EXIT_CODES: &str = "\
Secrets stay off the command line: --certificate-key-file FILE (or - for stdin), or the
KUBEFLAVOR_CERTIFICATE_KEY environment variable, instead of --certificate-key; for
download --server also --token-file FILE (or -) or KUBEFLAVOR_JOIN_TOKEN instead of --token.
A value on the command line shows in the process list (/proc/<pid>/cmdline) of the machine.

Exit codes:
  0   done
  1   any other failure (a secret file that cannot be read included)
  2   usage: bad flags, two sources for one secret
  4   refused input (e.g. a --ttl that is not positive)
  5   the API server could not be reached (download --server: before --timeout)
  6   the API server refused the caller (403 or 401)
  10-14  download --server: as 'kubeflavor join --help' says (token, pin, discovery)
  20  the certificate key is malformed (not 64 hexadecimal characters)
  21  the certificate key is wrong (the Secret was not encrypted with it)
  22  an entry of kubeadm-certs was changed after the upload
  23  entries were swapped or replaced, do not match each other, or cannot serve their
      use (a ca.crt that is no CA, expired or not yet valid, with a second certificate;
      a key file with another PEM block appended)
  24  an entry of kubeadm-certs is missing
  25  kube-system/kubeadm-certs is missing or expired
  26  a PKI file cannot be read, or is a symbolic link inside --pki-dir
  27  the PKI files are not a consistent, usable set (upload refuses what download would)
  28  the target cannot be written, or holds a symbolic link inside --pki-dir
  29  existing files differ from the downloaded ones (--force replaces them)
  30  a Secret written by kubeadm (no kubeflavor key check) did not decrypt: wrong key or
      tampered entry
  31  a Secret without kubeflavor's key check (--accept-kubeadm-secret accepts it)

Every failure is one line on stderr: error: <what> (<what to do>).";

#[derive(Debug, Subcommand)]
#[command(after_long_help = CERTS_EXIT_CODES)]
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
    /// Encrypt with this key (64 hex characters) instead of a fresh one. Shows in the
    /// process list: prefer --certificate-key-file or KUBEFLAVOR_CERTIFICATE_KEY.
    #[arg(long, value_name = "KEY")]
    pub certificate_key: Option<SecretText>,
    /// Read the key to encrypt with from this file (`-`: stdin). The
    /// KUBEFLAVOR_CERTIFICATE_KEY environment variable is read when neither flag is given.
    #[arg(long, value_name = "FILE", conflicts_with = "certificate_key")]
    pub certificate_key_file: Option<PathBuf>,
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
    /// The key printed by `kubeflavor certs upload` (64 hex characters). Shows in the
    /// process list: prefer --certificate-key-file or KUBEFLAVOR_CERTIFICATE_KEY.
    #[arg(long, value_name = "KEY")]
    pub certificate_key: Option<SecretText>,
    /// Read the key from this file (`-`: stdin). The KUBEFLAVOR_CERTIFICATE_KEY environment
    /// variable is read when neither flag is given.
    #[arg(long, value_name = "FILE", conflicts_with = "certificate_key")]
    pub certificate_key_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// Read the Secret as a bootstrap token identity on this API server (host:port),
    /// discovering and pinning its CA as `kubeadm join` does, instead of a kubeconfig.
    #[arg(
        long,
        value_name = "HOST:PORT",
        requires = "discovery_token_ca_cert_hash"
    )]
    pub server: Option<String>,
    /// Bootstrap token (from `kubeflavor token create --control-plane`). Shows in the
    /// process list: prefer --token-file or KUBEFLAVOR_JOIN_TOKEN.
    #[arg(long, value_name = "TOKEN", requires = "server")]
    pub token: Option<SecretText>,
    /// Read the bootstrap token from this file (`-`: stdin). The KUBEFLAVOR_JOIN_TOKEN
    /// environment variable is read when neither flag is given.
    #[arg(
        long,
        value_name = "FILE",
        requires = "server",
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,
    /// Pin of the cluster CA, `sha256:<hex>` (repeatable).
    #[arg(long, value_name = "sha256:HEX", requires = "server")]
    pub discovery_token_ca_cert_hash: Vec<String>,
    /// Give up discovery after this long (e.g. 30s, 5m, 1m30s).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

impl BootstrapArgs {
    /// The token, from --token, --token-file or KUBEFLAVOR_JOIN_TOKEN.
    pub fn token(&self) -> Result<Option<SecretText>, CliError> {
        SecretFlags {
            value: self.token.as_ref(),
            file: self.token_file.as_deref(),
            file_flag: "--token-file",
            env: TOKEN_ENV,
        }
        .read()
        .map_err(secret_input_error)
    }
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
        self.optional()?.ok_or_else(|| {
            CertsError::MalformedKey(format!(
                "no certificate key given (pass --certificate-key-file with a file holding the key 'kubeflavor certs upload' printed, or set {KEY_ENV})"
            ))
        })
    }

    fn optional(&self) -> Result<Option<CertificateKey>, CertsError> {
        read_key(
            self.certificate_key.as_ref(),
            self.certificate_key_file.as_deref(),
        )
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
    let key = read_key(
        args.certificate_key.as_ref(),
        args.certificate_key_file.as_deref(),
    )?;
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
    // How to hand the key over without it showing in a process list on either machine.
    writeln!(
        out,
        "[upload-certs] Give the key to the joining node in a file only root can read: 'kubeflavor join --control-plane --certificate-key-file FILE' (or 'certs download --certificate-key-file FILE', '-' for stdin, or {KEY_ENV}); on a command line every user of the node sees it"
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
        provenance: Provenance::accepting_kubeadm(args.accept_kubeadm_secret),
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
    let downloaded = certs::download::download(client, opts, now).await?;
    if let Some(never) = downloaded.never_expires {
        writeln!(out, "[download-certs] {}", never.warning()).map_err(output_error)?;
    }
    print_report(out, "[download-certs]", &opts.pki_dir, &downloaded.written)?;
    Ok(downloaded.written)
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
            let cluster = super::connect(global).await?;
            upload(&args, &cluster.client, now, out).await?;
            Ok(())
        }
        CertsCommand::Download(args) => {
            secret::one_stdin(&[
                (
                    "--certificate-key-file",
                    args.key.certificate_key_file.as_deref(),
                ),
                ("--token-file", args.bootstrap.token_file.as_deref()),
            ])
            .map_err(secret_input_error)?;
            // Parse the key before any network traffic: a typo fails fast (exit 20).
            let key = args.key.required()?;
            let client = match &args.bootstrap.server {
                Some(server) => bootstrap::bootstrap_client(server, &args.bootstrap, out).await?,
                None => super::connect(global).await?.client,
            };
            let opts = DownloadOptions {
                pki_dir: args.pki_dir.clone(),
                key,
                force: args.force,
                provenance: Provenance::accepting_kubeadm(args.accept_kubeadm_secret),
            };
            download_with(&opts, &client, now, out).await?;
            Ok(())
        }
        CertsCommand::Inspect(args) => {
            let key = args.key.optional()?;
            let cluster = super::connect(global).await?;
            inspect_with(&args, key.as_ref(), &cluster.client, now, out).await?;
            Ok(())
        }
    }
}

/// The process exit status of a certs failure: kubeflavor's general codes for cluster
/// problems, and one code per failure of the hand-off (P5, certificate hand-off; P6,
/// nothing lost).
pub fn exit_code(err: &CertsError) -> ExitCode {
    match err {
        CertsError::Other(_) => ExitCode::Error,
        CertsError::Refused(_) => ExitCode::Refused,
        CertsError::Cluster(_) => ExitCode::Unreachable,
        CertsError::Forbidden(_) => ExitCode::Forbidden,
        CertsError::MalformedKey(_) => ExitCode::CertificateKeyMalformed,
        CertsError::WrongKey => ExitCode::CertificateKeyWrong,
        CertsError::Tampered(_) => ExitCode::CertsTampered,
        CertsError::Swapped(_) => ExitCode::CertsSwapped,
        CertsError::MissingEntry(_) => ExitCode::CertsEntryMissing,
        CertsError::SecretGone => ExitCode::CertsSecretGone,
        CertsError::PkiUnreadable(_) => ExitCode::PkiUnreadable,
        CertsError::PkiInvalid(_) => ExitCode::PkiInconsistent,
        CertsError::Unwritable(_) => ExitCode::PkiUnwritable,
        CertsError::Conflict(_) => ExitCode::PkiConflict,
        CertsError::WrongKeyOrTampered(_) => ExitCode::CertsWrongKeyOrTampered,
        CertsError::NotFromKubeflavor(_) => ExitCode::CertsNotFromKubeflavor,
    }
}

impl From<CertsError> for CliError {
    fn from(e: CertsError) -> Self {
        CliError::bare(exit_code(&e), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn every_variant() -> Vec<CertsError> {
        let s = || String::from("x");
        vec![
            CertsError::MalformedKey(s()),
            CertsError::WrongKey,
            CertsError::WrongKeyOrTampered(s()),
            CertsError::NotFromKubeflavor(s()),
            CertsError::Tampered(s()),
            CertsError::Swapped(s()),
            CertsError::MissingEntry(s()),
            CertsError::SecretGone,
            CertsError::PkiUnreadable(s()),
            CertsError::PkiInvalid(s()),
            CertsError::Unwritable(s()),
            CertsError::Conflict(s()),
            CertsError::Refused(s()),
            CertsError::Forbidden(s()),
            CertsError::Cluster(s()),
            CertsError::Other(s()),
        ]
    }

    #[test]
    fn every_failure_has_its_own_nonzero_exit_code() {
        let codes: Vec<u8> = every_variant()
            .iter()
            .map(|e| exit_code(e).code())
            .collect();
        let mut unique = codes.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), codes.len(), "{codes:?}");
        assert!(!codes.contains(&0));
        // 2 is clap's usage error.
        assert!(!codes.contains(&2));
    }

    #[test]
    fn a_malformed_key_exits_20() {
        let not_hex = certs::parse_certificate_key(&"g".repeat(64)).unwrap_err();
        assert_eq!(exit_code(&not_hex).code(), 20);
    }

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
