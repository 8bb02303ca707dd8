//! `kubeflavor certs inspect`: what `kube-system/kubeadm-certs` holds, until when, and who
//! may read it; with the key, which certificates it carries.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::{Api, Client};
use kubeflavor_cluster::token_secrets;
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts;
use kubeflavor_core::crypto::keys::CertificateSummary;
use serde::Serialize;

use super::objects::{self, NAMESPACE, RBAC_NAME, SECRET_NAME};
use super::{CertsError, download};

/// AES-GCM adds a 12-byte nonce and a 16-byte tag to every sealed value.
const SEAL_OVERHEAD: usize = 12 + 16;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// Size of the stored (encrypted) value.
    pub stored_bytes: usize,
    /// Size of the file it decrypts to (0 for an empty value: a file absent at upload).
    pub plaintext_bytes: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Owner {
    pub token_id: String,
    /// `None` when the token Secret could not be read or has no expiration.
    pub expires: Option<String>,
    /// "valid", "expired", "missing", "unreadable" or "no expiration".
    pub state: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CertificateInfo {
    pub entry: String,
    pub subject: String,
    pub not_after: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Inspection {
    pub entries: Vec<Entry>,
    pub owners: Vec<Owner>,
    /// RoleBinding subjects, e.g. `Group:system:bootstrappers:kubeflavor:control-plane`.
    pub readable_by: Vec<String>,
    /// Present only when a key was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificates: Option<Vec<CertificateInfo>>,
}

pub async fn inspect(
    client: &Client,
    key: Option<&CertificateKey>,
    now: Timestamp,
) -> Result<Inspection, CertsError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), NAMESPACE);
    let secret = secrets
        .get_opt(SECRET_NAME)
        .await
        .map_err(|e| objects::api_error("reading kube-system/kubeadm-certs", e))?
        .ok_or(CertsError::SecretGone)?;
    let data = download::secret_data(&secret);
    let entries = data
        .iter()
        .map(|(name, v)| Entry {
            name: name.clone(),
            stored_bytes: v.len(),
            plaintext_bytes: v.len().saturating_sub(SEAL_OVERHEAD),
        })
        .collect();
    let mut owners = Vec::new();
    for r in secret.metadata.owner_references.iter().flatten() {
        owners.push(owner(client, &r.name, now).await);
    }
    let readable_by = match bindings.get_opt(RBAC_NAME).await {
        Ok(Some(b)) => objects::binding_subjects(&b),
        Ok(None) => Vec::new(),
        Err(e) => {
            return Err(objects::api_error(
                "reading the RoleBinding kube-system/kubeadm:kubeadm-certs",
                e,
            ));
        }
    };
    let certificates = match key {
        Some(k) => Some(certificate_infos(k, &data)?),
        None => None,
    };
    Ok(Inspection {
        entries,
        owners,
        readable_by,
        certificates,
    })
}

/// One owner token of the Secret, and whether it still keeps the Secret alive at `now`.
async fn owner(client: &Client, name: &str, now: Timestamp) -> Owner {
    let (expires, state) = match token_secrets::get_named(client, name).await {
        Ok(Some(t)) => match kubeflavor_cluster::token_secrets::expiration(&t) {
            Ok(Some(exp)) => {
                let state = if exp <= now { "expired" } else { "valid" };
                (Some(exp.to_string()), state)
            }
            Ok(None) => (None, "no expiration"),
            Err(raw) => (Some(raw), "expired"),
        },
        Ok(None) => (None, "missing"),
        Err(_) => (None, "unreadable"),
    };
    Owner {
        token_id: token_secrets::id_of(name).unwrap_or(name).to_owned(),
        expires,
        state: state.to_owned(),
    }
}

/// Decrypts (checking the key first) and describes every certificate entry.
pub fn certificate_infos(
    key: &CertificateKey,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<CertificateInfo>, CertsError> {
    let opened = copycerts::open_all(key, data).map_err(download::open_error)?;
    let mut out = Vec::new();
    for f in &opened.files {
        if !f.rel_path.ends_with(".crt") {
            continue;
        }
        let ders = kubeflavor_core::crypto::keys::parse_certificates_pem(f.contents())
            .map_err(|e| CertsError::Swapped(format!("{}: {e}", f.rel_path)))?;
        for der in ders {
            let summary = CertificateSummary::from_der(&der)
                .map_err(|e| CertsError::Swapped(format!("{}: {e}", f.rel_path)))?;
            out.push(CertificateInfo {
                entry: f.rel_path.clone(),
                subject: summary.subject,
                not_after: summary.not_after.to_string(),
            });
        }
    }
    Ok(out)
}

/// Renders an inspection as the human-readable text `certs inspect` prints.
pub fn render(i: &Inspection) -> String {
    let mut out = String::new();
    out.push_str(&format!("Secret {NAMESPACE}/{SECRET_NAME}\n"));
    let w = i
        .entries
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    out.push_str(&format!(
        "{:<w$}  {:>6}  {:>9}\n",
        "ENTRY", "STORED", "PLAINTEXT"
    ));
    for e in &i.entries {
        out.push_str(&format!(
            "{:<w$}  {:>6}  {:>9}\n",
            e.name, e.stored_bytes, e.plaintext_bytes
        ));
    }
    if i.owners.is_empty() {
        out.push_str("Owner token: none (this Secret never expires; run 'kubeflavor certs upload' to replace it)\n");
    }
    for o in &i.owners {
        out.push_str(&format!(
            "Owner token: {} ({}{})\n",
            o.token_id,
            o.state,
            o.expires
                .as_deref()
                .map(|e| format!(", expires {e}"))
                .unwrap_or_default()
        ));
    }
    if i.readable_by.is_empty() {
        out.push_str(
            "Readable by: no RoleBinding kube-system/kubeadm:kubeadm-certs (only admins)\n",
        );
    } else {
        out.push_str(&format!("Readable by: {}\n", i.readable_by.join(", ")));
    }
    if let Some(certs) = &i.certificates {
        for c in certs {
            out.push_str(&format!(
                "Certificate {}: subject {}, expires {}\n",
                c.entry, c.subject, c.not_after
            ));
        }
    }
    out
}
