//! `kubeflavor certs`: kubeadm-compatible hand-off of control-plane CA material (P5,
//! certificate hand-off; P6, nothing lost).
//!
//! The codec (key, AES-GCM, Secret layout, key check, key/certificate matching) is in
//! `kubeflavor_core::{certkey, copycerts, pki, keys}`; this module does the I/O around it:
//! the PKI directory on disk ([`pki_files`]) and the Kubernetes objects ([`objects`]).

pub mod download;
pub mod inspect;
pub mod objects;
pub mod pki_files;
pub mod upload;

use std::path::PathBuf;

/// Where kubeadm keeps the cluster's PKI.
pub const DEFAULT_PKI_DIR: &str = "/etc/kubernetes/pki";

/// How a certs command failed. Each variant is one thing the user can fix, and the
/// command line gives each its own exit status so scripts can tell them apart.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("{0}")]
    MalformedKey(String),
    #[error(
        "wrong certificate key: the kubeadm-certs Secret was not encrypted with it (use the key printed by 'kubeflavor certs upload'; if it is lost, run 'kubeflavor certs upload' again)"
    )]
    WrongKey,
    /// Only for Secrets without kubeflavor's key check (written by kubeadm).
    #[error("{0}")]
    WrongKeyOrTampered(String),
    /// A Secret without kubeflavor's key check, not explicitly accepted.
    #[error("{0} (pass --accept-kubeadm-secret if it was uploaded by kubeadm)")]
    NotFromKubeflavor(String),
    /// An entry was changed after the upload (the key itself is right).
    #[error("{0}")]
    Tampered(String),
    /// Entries were swapped or replaced, or hold something unusable.
    #[error("{0}")]
    Swapped(String),
    #[error("{0}")]
    MissingEntry(String),
    #[error("the kubeadm-certs Secret is missing or expired; run 'kubeflavor certs upload' again")]
    SecretGone,
    #[error("{0}")]
    PkiUnreadable(String),
    #[error("{0}")]
    PkiInvalid(String),
    #[error("{0}")]
    Unwritable(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Refused(String),
    /// The API server refused the caller (403/401); the message names who may read what.
    #[error("{0}")]
    Forbidden(String),
    /// The API server could not be reached or failed.
    #[error("{0}")]
    Cluster(String),
    #[error("{0}")]
    Other(String),
}

impl From<pki_files::ReadError> for CertsError {
    fn from(e: pki_files::ReadError) -> Self {
        CertsError::PkiUnreadable(e.to_string())
    }
}

impl From<pki_files::WriteError> for CertsError {
    fn from(e: pki_files::WriteError) -> Self {
        match e {
            pki_files::WriteError::Conflict { .. } => CertsError::Conflict(e.to_string()),
            pki_files::WriteError::ReadExisting { .. } => CertsError::PkiUnreadable(e.to_string()),
            _ => CertsError::Unwritable(e.to_string()),
        }
    }
}

/// Parses a `--certificate-key` value at the edge. Surrounding whitespace (a pasted
/// newline) is ignored; anything else wrong is reported by the core parser.
pub fn parse_certificate_key(
    text: &str,
) -> Result<kubeflavor_core::crypto::certkey::CertificateKey, CertsError> {
    text.trim()
        .parse()
        .map_err(|e: kubeflavor_core::crypto::certkey::CertificateKeyError| {
            CertsError::MalformedKey(e.to_string())
        })
}

/// The files of an external etcd, when the cluster uses one (`--external-etcd-*`).
#[derive(Clone, Debug, Default)]
pub struct ExternalEtcd {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_secret_says_run_upload_again() {
        assert_eq!(
            CertsError::SecretGone.to_string(),
            "the kubeadm-certs Secret is missing or expired; run 'kubeflavor certs upload' again"
        );
    }

    #[test]
    fn a_pasted_newline_is_tolerated_but_not_a_bad_key() {
        let hex = "Ab".repeat(32);
        assert!(parse_certificate_key(&format!("{hex}\n")).is_ok());
        let short = parse_certificate_key("abcd").unwrap_err();
        assert!(matches!(short, CertsError::MalformedKey(_)));
        assert!(short.to_string().contains("got 4 characters"), "{short}");
        let not_hex = parse_certificate_key(&"g".repeat(64)).unwrap_err();
        assert!(matches!(not_hex, CertsError::MalformedKey(_)), "{not_hex}");
    }
}
