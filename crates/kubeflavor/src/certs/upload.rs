//! `kubeflavor certs upload`: encrypt the shared CA set and store it as kubeadm does, in
//! `kube-system/kubeadm-certs`, owned by a short-lived token so that it disappears when the
//! token expires (P5, certificate hand-off), and readable only by control-plane join tokens by
//! default.
//!
//! Order of the writes, so that a crash anywhere leaves a state the next run finishes (P6,
//! nothing lost):
//! RBAC first (harmless without the Secret), then a fresh proxy token (an orphan simply
//! expires), then create-or-replace of the Secret pointing at it, then deletion of the
//! proxy token the previous upload used (it would expire anyway).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::{Api, Client};
use kubeflavor_cluster::token_secrets;
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts::{self, CopyCertsError, EtcdMode, PkiEntry, Provenance};
use kubeflavor_core::token::BootstrapToken;
use zeroize::Zeroizing;

use super::objects::{self, NAMESPACE, ReadableBy, SECRET_NAME};
use super::{CertsError, ExternalEtcd, pki_files};

/// kubeadm's `DefaultCertTokenDuration`.
pub const DEFAULT_TTL: SignedDuration = SignedDuration::from_hours(2);

/// How many fresh token ids to try when the generated one is already taken.
const TOKEN_ID_ATTEMPTS: usize = 5;

pub struct UploadOptions {
    pub pki_dir: PathBuf,
    pub external_etcd: Option<ExternalEtcd>,
    /// `--certificate-key`; a fresh key when absent.
    pub key: Option<CertificateKey>,
    pub ttl: SignedDuration,
    pub readable_by: ReadableBy,
}

/// What an upload did; the key is here because printing it once is the command's job.
pub struct Uploaded {
    pub key: CertificateKey,
    pub proxy_token_id: String,
    pub expiration: Timestamp,
    /// Data keys stored, with the plaintext size (0 for a file absent on disk).
    pub entries: Vec<(String, usize)>,
    pub readable_by: ReadableBy,
}

/// One source file of the Secret, read from disk.
pub struct Source {
    pub entry: PkiEntry,
    pub path: PathBuf,
    /// `None`: absent on disk, stored as an empty value as kubeadm does.
    pub contents: Option<Zeroizing<Vec<u8>>>,
}

type Read = (PathBuf, Option<Zeroizing<Vec<u8>>>);

fn explicit(path: &Path) -> Result<Read, CertsError> {
    Ok((path.to_path_buf(), pki_files::read_optional(path)?))
}

/// Reads every file the Secret carries: kubeadm's local-etcd set, or its external-etcd set.
pub fn read_sources(
    pki_dir: &Path,
    external_etcd: Option<&ExternalEtcd>,
) -> Result<(EtcdMode, Vec<Source>), CertsError> {
    let mode = if external_etcd.is_some() {
        EtcdMode::External
    } else {
        EtcdMode::Local
    };
    let mut sources = Vec::new();
    for &entry in PkiEntry::set(mode) {
        // The external etcd files are named one by one on the command line: read where
        // they are. The rest is the PKI directory's, links inside it refused.
        let (path, contents) = match (external_etcd, entry) {
            (Some(ext), PkiEntry::ExternalEtcdCaCert) => explicit(&ext.ca)?,
            (Some(ext), PkiEntry::ExternalEtcdCert) => explicit(&ext.cert)?,
            (Some(ext), PkiEntry::ExternalEtcdKey) => explicit(&ext.key)?,
            _ => (
                pki_dir.join(entry.rel_path()),
                pki_files::read_optional_below(pki_dir, entry.rel_path())?,
            ),
        };
        sources.push(Source {
            entry,
            path,
            contents,
        });
    }
    if sources.iter().all(|s| s.contents.is_none()) {
        return Err(CertsError::PkiUnreadable(format!(
            "no certificate or key found in {} (point --pki-dir at kubeadm's PKI directory, usually /etc/kubernetes/pki)",
            pki_dir.display()
        )));
    }
    Ok((mode, sources))
}

/// Encrypts every source (with the key-check and manifest entries), then opens the result
/// again: that proves the data decrypts, and runs the same checks a download runs (each
/// certificate parses, each key matches its certificate or public key, each file can serve
/// what it is used for at `now`) before anything leaves the machine. A broken set would
/// otherwise only fail on the joining node.
pub fn seal_sources(
    key: &CertificateKey,
    mode: EtcdMode,
    sources: &[Source],
    now: Timestamp,
) -> Result<BTreeMap<String, Vec<u8>>, CertsError> {
    let present: Vec<(PkiEntry, &[u8])> = sources
        .iter()
        .filter_map(|s| s.contents.as_ref().map(|c| (s.entry, c.as_slice())))
        .collect();
    let data = copycerts::seal_secret_data(key, mode, &present)
        .map_err(|e| CertsError::Other(e.to_string()))?;
    let path_of = |entry: PkiEntry| {
        sources.iter().find(|s| s.entry == entry).map_or_else(
            || entry.data_key().to_owned(),
            |s| s.path.display().to_string(),
        )
    };
    let invalid = |what: String| {
        CertsError::PkiInvalid(format!(
            "{what}; nothing was uploaded (fix the PKI directory, or restore the file from a backup)"
        ))
    };
    match copycerts::open_for_use(key, &data, Provenance::KubeflavorOrKubeadm, now) {
        Ok(_) => Ok(data),
        Err(CopyCertsError::Unusable { entry, reason }) => Err(invalid(format!(
            "{} cannot serve as {}: {reason}",
            path_of(entry),
            entry.purpose()
        ))),
        Err(CopyCertsError::SwappedEntry {
            entry,
            expected,
            found,
        }) => Err(invalid(format!(
            "{} should hold {expected} but holds {found}",
            path_of(entry)
        ))),
        Err(CopyCertsError::KeyDoesNotMatch { key, partner }) => Err(invalid(format!(
            "the private key {} does not belong to {}",
            path_of(key),
            path_of(partner)
        ))),
        Err(CopyCertsError::Unreadable { entry, reason }) => Err(invalid(format!(
            "{} is not usable: {reason}",
            path_of(entry)
        ))),
        Err(e) => Err(CertsError::Other(e.to_string())),
    }
}

/// Runs the upload against the cluster. `progress` receives kubeadm-style lines; nothing
/// passed to it, or to tracing, ever contains the key.
pub async fn upload(
    client: &Client,
    opts: UploadOptions,
    now: Timestamp,
    progress: &mut dyn FnMut(&str),
) -> Result<Uploaded, CertsError> {
    let expiration = expiration_of(opts.ttl, now)?;
    let (mode, sources) = read_sources(&opts.pki_dir, opts.external_etcd.as_ref())?;
    for s in sources.iter().filter(|s| s.contents.is_none()) {
        progress(&format!(
            "[upload-certs] {} not found, storing an empty value for {}",
            s.path.display(),
            s.entry.data_key()
        ));
    }
    let key = match opts.key {
        Some(k) => k,
        None => CertificateKey::generate().map_err(|e| CertsError::Other(e.to_string()))?,
    };
    let data = seal_sources(&key, mode, &sources, now)?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    progress(&format!(
        "[upload-certs] Creating the Role and RoleBinding {:?} for the group {:?}",
        objects::RBAC_NAME,
        opts.readable_by.group()
    ));
    grant_read(client, opts.readable_by).await?;
    let owner = create_proxy_token(client, expiration).await?;
    let owner_ref = objects::owner_reference(&owner).ok_or_else(|| {
        CertsError::Other("the API server returned the token Secret without a uid".to_owned())
    })?;
    let previous_owners = previous_owners(&secrets, &owner_ref.name).await?;
    progress(&format!(
        "[upload-certs] Storing the certificates in Secret {SECRET_NAME:?} in the {NAMESPACE:?} Namespace"
    ));
    objects::create_or_replace(&secrets, &objects::certs_secret(data, owner_ref))
        .await
        .map_err(|e| objects::api_error("storing kube-system/kubeadm-certs", e))?;
    delete_superseded(client, previous_owners).await;

    Ok(Uploaded {
        key,
        proxy_token_id: owner_id(&owner),
        expiration,
        entries: entry_sizes(&sources),
        readable_by: opts.readable_by,
    })
}

/// When the Secret expires: `ttl` from `now`, in whole seconds rounded down so the Secret
/// never outlives the TTL asked for. A TTL that is not positive is refused.
fn expiration_of(ttl: SignedDuration, now: Timestamp) -> Result<Timestamp, CertsError> {
    if ttl <= SignedDuration::ZERO {
        return Err(CertsError::Refused(format!(
            "--ttl must be positive, got {ttl:#} (the Secret must expire; kubeadm uses 2h)"
        )));
    }
    now.checked_add(ttl)
        .and_then(|t| {
            t.round(
                jiff::TimestampRound::new()
                    .smallest(jiff::Unit::Second)
                    .mode(jiff::RoundMode::Trunc),
            )
        })
        .map_err(|e| CertsError::Refused(format!("--ttl {ttl:#} is too long: {e}")))
}

/// The Role that may read the Secret, and its binding to `readable_by`'s group.
async fn grant_read(client: &Client, readable_by: ReadableBy) -> Result<(), CertsError> {
    let roles: Api<Role> = Api::namespaced(client.clone(), NAMESPACE);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), NAMESPACE);
    objects::create_or_replace(&roles, &objects::reader_role())
        .await
        .map_err(|e| {
            objects::api_error("creating the Role kube-system/kubeadm:kubeadm-certs", e)
        })?;
    objects::create_or_replace(&bindings, &objects::reader_binding(readable_by))
        .await
        .map_err(|e| {
            objects::api_error(
                "creating the RoleBinding kube-system/kubeadm:kubeadm-certs",
                e,
            )
        })?;
    Ok(())
}

/// The proxy tokens the current Secret (if any) names as owners, other than `new_owner`.
async fn previous_owners(
    secrets: &Api<Secret>,
    new_owner: &str,
) -> Result<Vec<String>, CertsError> {
    Ok(secrets
        .get_opt(SECRET_NAME)
        .await
        .map_err(|e| objects::api_error("reading kube-system/kubeadm-certs", e))?
        .and_then(|s| s.metadata.owner_references)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.kind == "Secret" && r.name != new_owner)
        .map(|r| r.name)
        .collect())
}

/// Deletes the proxy tokens a previous upload used. Best effort: a superseded proxy token
/// expires on its own anyway.
async fn delete_superseded(client: &Client, names: Vec<String>) {
    for name in names {
        match objects::delete_if_proxy_token(client, &name).await {
            Ok(true) => tracing::debug!(token = %name, "deleted the superseded proxy token"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(token = %name, error = %e, "could not delete the superseded proxy token; it expires on its own")
            }
        }
    }
}

/// The proxy token's id, from its Secret's name.
fn owner_id(owner: &Secret) -> String {
    owner
        .metadata
        .name
        .as_deref()
        .and_then(token_secrets::id_of)
        .unwrap_or_default()
        .to_owned()
}

/// The data keys stored, with each file's plaintext size (0 for a file absent on disk).
fn entry_sizes(sources: &[Source]) -> Vec<(String, usize)> {
    sources
        .iter()
        .map(|s| {
            (
                s.entry.data_key().to_owned(),
                s.contents.as_ref().map_or(0, |c| c.len()),
            )
        })
        .collect()
}

/// Creates a fresh TTL-proxy token, drawing a new id if one is already taken.
async fn create_proxy_token(client: &Client, expiration: Timestamp) -> Result<Secret, CertsError> {
    let draw = async || -> Result<Option<(BootstrapToken, Secret)>, CertsError> {
        let token = BootstrapToken::generate().map_err(|e| CertsError::Other(e.to_string()))?;
        let secret = objects::proxy_token_secret(&token, expiration);
        Ok(Some((token, secret)))
    };
    let created = token_secrets::create_with_fresh_id(client, TOKEN_ID_ATTEMPTS, draw, |e| {
        objects::api_error(
            "creating the proxy token that limits the Secret's lifetime",
            e,
        )
    })
    .await?;
    created.map(|c| c.stored).ok_or_else(|| {
        CertsError::Other(format!(
            "could not create a proxy token after {TOKEN_ID_ATTEMPTS} attempts: every id was taken (retry)"
        ))
    })
}
