//! Downloading the control-plane CA material: fetch `kube-system/kubeadm-certs`,
//! check the key before anything else, decrypt and verify every entry, then write all the
//! files or none (P5, certificate hand-off; P6, nothing lost).

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use kubeflavor_cluster::token_secrets;
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts::{self, CopyCertsError, Provenance};

use super::CertsError;
use super::objects::{self, NAMESPACE, SECRET_NAME};
use super::pki_files::{self, WriteReport};

#[derive(Debug)]
pub struct DownloadOptions {
    pub pki_dir: PathBuf,
    pub key: CertificateKey,
    /// `--force`: replace existing files whose content differs.
    pub force: bool,
    /// Whether a Secret without kubeflavor's key check and manifest (as kubeadm writes it)
    /// is accepted (`--accept-kubeadm-secret`). Off by default: whoever can edit the Secret
    /// could strip both and swap whole certificate/key pairs unnoticed.
    pub provenance: Provenance,
}

/// What a download did.
#[derive(Debug)]
pub struct Downloaded {
    pub written: WriteReport,
    /// Why the Secret never expires, when it does not: the README promises that it does
    /// (P5, certificate hand-off), so the download says so. It still proceeds: the material is the
    /// cluster's, and refusing would not remove it from the cluster.
    pub never_expires: Option<NeverExpires>,
}

/// Why a kubeadm-certs Secret is never deleted by garbage collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeverExpires {
    /// No ownerReference to a token Secret (created by hand, or its owner was removed).
    NoOwner,
    /// Its owner token has no expiration.
    OwnerHasNoExpiration,
}

impl NeverExpires {
    /// The warning line, with what to do.
    pub fn warning(self) -> String {
        let why = match self {
            NeverExpires::NoOwner => "has no owner token, so it never expires",
            NeverExpires::OwnerHasNoExpiration => {
                "is owned by a token without an expiration, so it never expires"
            }
        };
        format!(
            "Warning: {NAMESPACE}/{SECRET_NAME} {why} and the encrypted CA keys stay in the cluster (delete it once the control-plane nodes have joined: kubectl -n kube-system delete secret kubeadm-certs; 'kubeflavor certs upload' stores one that expires)"
        )
    }
}

/// Fetches the Secret and makes sure it has not outlived its proxy token. A bootstrap
/// identity may not read token Secrets (403): then only the Secret's presence counts, which
/// is what garbage collection guarantees shortly after the token expires. Also says when
/// the Secret never expires at all.
pub async fn fetch_secret(
    client: &Client,
    now: Timestamp,
) -> Result<(Secret, Option<NeverExpires>), CertsError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    // A token minted a moment ago may not authenticate yet (see `kubeflavor_cluster::cache_lag`).
    let first_read = kubeflavor_cluster::cache_lag::retry_unauthorized(
        kubeflavor_cluster::cache_lag::TOKEN_PROPAGATION,
        || secrets.get_opt(SECRET_NAME),
    );
    let secret = match first_read.await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(CertsError::SecretGone),
        Err(e) => return Err(objects::api_error("reading kube-system/kubeadm-certs", e)),
    };
    if secret.metadata.deletion_timestamp.is_some() {
        return Err(CertsError::SecretGone);
    }
    let owners: Vec<_> = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.kind == "Secret")
        .collect();
    let mut never_expires = owners.is_empty().then_some(NeverExpires::NoOwner);
    for owner in owners {
        match token_secrets::get_named(client, &owner.name).await {
            Ok(Some(token)) if token.metadata.uid.as_deref() == Some(owner.uid.as_str()) => {
                match kubeflavor_cluster::token_secrets::expiration(&token) {
                    Ok(Some(exp)) if exp <= now => return Err(CertsError::SecretGone),
                    Ok(Some(_)) => {}
                    Ok(None) => never_expires = Some(NeverExpires::OwnerHasNoExpiration),
                    // An expiration that does not parse counts as expired, as
                    // the bootstrap token authenticator and tokencleaner treat it.
                    Err(_) => return Err(CertsError::SecretGone),
                }
            }
            // The owner is gone (or was replaced by a namesake): GC is about to delete it.
            Ok(_) => return Err(CertsError::SecretGone),
            Err(kube::Error::Api(s)) if s.code == 403 => {}
            Err(e) => return Err(objects::api_error("reading the Secret's owner token", e)),
        }
    }
    Ok((secret, never_expires))
}

/// The Secret's data as plain bytes.
pub fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// Maps the core's decryption errors to the user-facing ones, one exit code each.
pub fn open_error(e: CopyCertsError) -> CertsError {
    match e {
        CopyCertsError::WrongKey => CertsError::WrongKey,
        // A Secret kubeadm wrote has no key check: the core says so in its message.
        CopyCertsError::WrongKeyOrTampered { .. } => CertsError::WrongKeyOrTampered(e.to_string()),
        CopyCertsError::MissingEntry { .. } => CertsError::MissingEntry(e.to_string()),
        CopyCertsError::Tampered { .. }
        | CopyCertsError::BadManifest(_)
        | CopyCertsError::TooManyEntries(_)
        | CopyCertsError::TooLarge(_) => CertsError::Tampered(e.to_string()),
        CopyCertsError::SwappedEntry { .. }
        | CopyCertsError::NotAsUploaded { .. }
        | CopyCertsError::KeyDoesNotMatch { .. }
        | CopyCertsError::Unreadable { .. }
        | CopyCertsError::Unusable { .. } => CertsError::Swapped(e.to_string()),
        CopyCertsError::NotFromKubeflavor => CertsError::NotFromKubeflavor(e.to_string()),
        CopyCertsError::NotInSet { .. } | CopyCertsError::Randomness(_) => {
            CertsError::Other(e.to_string())
        }
    }
}

/// Decrypts and verifies everything (each file usable for what it is used for at `now`),
/// then writes the files (all or none).
pub fn decrypt_and_write(
    data: &BTreeMap<String, Vec<u8>>,
    opts: &DownloadOptions,
    now: Timestamp,
) -> Result<WriteReport, CertsError> {
    let opened =
        copycerts::open_for_use(&opts.key, data, opts.provenance, now).map_err(open_error)?;
    Ok(pki_files::write_all(
        &opts.pki_dir,
        &opened.files,
        opts.force,
    )?)
}

/// The whole download with an already-authenticated client (admin or bootstrap identity).
pub async fn download(
    client: &Client,
    opts: &DownloadOptions,
    now: Timestamp,
) -> Result<Downloaded, CertsError> {
    let (secret, never_expires) = fetch_secret(client, now).await?;
    let written = decrypt_and_write(&secret_data(&secret), opts, now)?;
    Ok(Downloaded {
        written,
        never_expires,
    })
}

/// A client that authenticates as a bootstrap token against `server`, trusting only the
/// CA certificates an authenticated discovery found (`DER`).
pub fn bootstrap_client(
    server: &str,
    ca_certs_der: &[Vec<u8>],
    token: &kubeflavor_core::token::BootstrapToken,
) -> Result<Client, CertsError> {
    let url: http::Uri = server.parse().map_err(|e| {
        CertsError::Refused(format!(
            "the API server address {server:?} is not a URL: {e} (check cluster-info's kubeconfig)"
        ))
    })?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(ca_certs_der.to_vec());
    config.auth_info.token = Some(token.expose().to_string().into());
    Client::try_from(config).map_err(|e| {
        CertsError::Other(format!(
            "cannot build a client for {server}: {e} (check the discovered CA)"
        ))
    })
}

/// The lines that tell the user what a write did, one per file, then a summary.
pub fn report_lines(phase: &str, dir: &std::path::Path, report: &WriteReport) -> Vec<String> {
    let mut lines = Vec::new();
    for (path, outcome) in &report.files {
        let verb = match outcome {
            pki_files::FileOutcome::Created => "Wrote",
            pki_files::FileOutcome::Replaced => "Replaced",
            pki_files::FileOutcome::Unchanged => "Kept identical",
        };
        lines.push(format!("{phase} {verb} {}", dir.join(path).display()));
    }
    for (path, have, want) in &report.mode_warnings {
        lines.push(format!(
            "{phase} Warning: {} has mode {have:04o}, kubeadm uses {want:04o} (left alone; chmod {want:o} it)",
            dir.join(path).display()
        ));
    }
    lines.push(format!(
        "{phase} {} of {} files written to {}",
        report.written(),
        report.files.len(),
        dir.display()
    ));
    lines
}
