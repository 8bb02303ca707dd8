//! Building and opening the whole kubeadm-certs Secret data.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::entries::{EtcdMode, PkiEntry, PkiEntryKind};
use super::usable::{Unusable, check_usable};
use super::{
    KEY_CHECK_ENTRY, KEY_CHECK_PLAINTEXT, MANIFEST_ENTRY, MAX_SECRET_BYTES, MAX_SECRET_ENTRIES,
    NONCE_LEN, OpenError, open, seal_with_nonce,
};
use crate::crypto::certkey::CertificateKey;
use crate::crypto::keys::{
    KeyError, PemKind, PrivateKey, PublicKey, classify_pem, parse_certificates_pem,
};
use crate::crypto::pki::PkiFile;
use crate::crypto::random::{RandomnessError, os_fill};

const UPLOAD_AGAIN: &str = "run 'kubeflavor certs upload' again on a healthy control-plane node";

/// Why the kubeadm-certs Secret could not be built or opened. Each variant names the entry
/// and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyCertsError {
    #[error(
        "certificate key is wrong (the key check entry did not decrypt); use the key printed \
         by 'kubeflavor certs upload'"
    )]
    WrongKey,
    #[error(
        "entry {entry} did not decrypt: the certificate key is wrong, or the Secret was changed \
         (this Secret has no kubeflavor key check, so the two cannot be told apart); use the key \
         printed when the certificates were uploaded"
    )]
    WrongKeyOrTampered { entry: String },
    #[error(
        "entry {entry} did not decrypt although the certificate key is right ({reason}): the \
         Secret was changed after the upload; {UPLOAD_AGAIN}"
    )]
    Tampered { entry: String, reason: OpenError },
    #[error("entry {entry} is missing from the kubeadm-certs Secret; {UPLOAD_AGAIN}")]
    MissingEntry { entry: String },
    #[error(
        "entry {entry} should hold {expected} but holds {found}: entries were swapped or \
         replaced; {UPLOAD_AGAIN}"
    )]
    SwappedEntry {
        entry: PkiEntry,
        expected: PkiEntryKind,
        found: String,
    },
    #[error(
        "entry {entry} does not hold the file uploaded under that name (its digest differs \
         from the upload manifest): entries were swapped or replaced; {UPLOAD_AGAIN}"
    )]
    NotAsUploaded { entry: PkiEntry },
    #[error(
        "private key {key} does not belong to {partner}: entries were swapped, or the PKI \
         directory that was uploaded was inconsistent; {UPLOAD_AGAIN}"
    )]
    KeyDoesNotMatch { key: PkiEntry, partner: PkiEntry },
    #[error("entry {entry} is not usable: {reason}; {UPLOAD_AGAIN}")]
    Unreadable { entry: PkiEntry, reason: KeyError },
    #[error(
        "entry {entry} cannot serve as {}: {reason}; fix the file on the control-plane node it came from, then {UPLOAD_AGAIN}",
        .entry.purpose()
    )]
    Unusable { entry: PkiEntry, reason: Unusable },
    #[error(
        "the Secret has no kubeflavor key check: it was written by kubeadm, or the key check \
         was removed; accept kubeadm-written Secrets explicitly to open it with weaker checks, \
         or {UPLOAD_AGAIN}"
    )]
    NotFromKubeflavor,
    #[error("the upload manifest is not valid ({0}); {UPLOAD_AGAIN}")]
    BadManifest(String),
    #[error("{entry} is not part of the {mode:?} etcd set; pass only the files of one set")]
    NotInSet { entry: PkiEntry, mode: EtcdMode },
    #[error(
        "the Secret has {0} data entries; at most {MAX_SECRET_ENTRIES} are opened (kubeadm writes at most 9): entries were added; {UPLOAD_AGAIN}"
    )]
    TooManyEntries(usize),
    #[error(
        "the Secret's data is {0} bytes; at most {MAX_SECRET_BYTES} are opened: entries were added or enlarged; {UPLOAD_AGAIN}"
    )]
    TooLarge(usize),
    #[error(transparent)]
    Randomness(#[from] RandomnessError),
}

/// The files recovered from a Secret.
#[derive(Debug)]
pub struct OpenedCerts {
    /// Decrypted, checked files, with their paths relative to the PKI dir and kubeadm's modes.
    pub files: Vec<PkiFile>,
    /// Entries stored empty (the file did not exist where the upload ran; kubeadm skips them).
    pub absent: Vec<PkiEntry>,
    /// The etcd set the Secret carries.
    pub etcd: EtcdMode,
    /// Whether kubeflavor's key check and manifest were present (a kubeflavor upload) or not
    /// (a kubeadm upload, checked by kind and key/certificate matching only).
    pub manifest_verified: bool,
    /// Data keys that are neither kubeadm's nor kubeflavor's. They decrypted (kubeadm would
    /// fail otherwise) and were left out.
    pub ignored: Vec<String>,
}

/// Seals the files of one etcd set into Secret data, with nonces from the OS CSPRNG.
///
/// `files` lists the files that exist; every other entry of the set is stored empty, as
/// kubeadm does for a missing file.
pub fn seal_secret_data(
    key: &CertificateKey,
    etcd: EtcdMode,
    files: &[(PkiEntry, &[u8])],
) -> Result<BTreeMap<String, Vec<u8>>, CopyCertsError> {
    let mut failure = None;
    let data = seal_secret_data_with(key, etcd, files, |nonce| {
        if let Err(e) = os_fill(nonce) {
            failure = Some(e);
        }
    })?;
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(data),
    }
}

/// As [`seal_secret_data`], drawing each nonce from `fill`. Tests only: a repeated nonce
/// under one key breaks AES-GCM.
pub fn seal_secret_data_with(
    key: &CertificateKey,
    etcd: EtcdMode,
    files: &[(PkiEntry, &[u8])],
    mut fill: impl FnMut(&mut [u8]),
) -> Result<BTreeMap<String, Vec<u8>>, CopyCertsError> {
    let set = PkiEntry::set(etcd);
    if let Some((entry, _)) = files.iter().find(|(e, _)| !set.contains(e)) {
        return Err(CopyCertsError::NotInSet {
            entry: *entry,
            mode: etcd,
        });
    }
    let mut seal = |plaintext: &[u8]| {
        let mut nonce = [0u8; NONCE_LEN];
        fill(&mut nonce);
        seal_with_nonce(key, plaintext, nonce)
    };
    let mut data = BTreeMap::new();
    let mut manifest = BTreeMap::new();
    for entry in set {
        let contents = files.iter().find(|(e, _)| e == entry).map(|(_, c)| *c);
        let (value, digest) = match contents {
            Some(c) if !c.is_empty() => (seal(c), hex::encode(Sha256::digest(c))),
            _ => (Vec::new(), String::new()),
        };
        data.insert(entry.data_key().to_string(), value);
        manifest.insert(entry.data_key().to_string(), digest);
    }
    let manifest = serde_json::to_vec(&Manifest {
        version: 1,
        entries: manifest,
    })
    .map_err(|e| CopyCertsError::BadManifest(e.to_string()))?;
    data.insert(MANIFEST_ENTRY.to_string(), seal(&manifest));
    data.insert(KEY_CHECK_ENTRY.to_string(), seal(KEY_CHECK_PLAINTEXT));
    Ok(data)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    version: u32,
    /// Data key -> lowercase hex SHA-256 of the plaintext, or "" for an empty entry.
    entries: BTreeMap<String, String>,
}

/// Which writers' Secrets a download accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Only Secrets carrying kubeflavor's key check and manifest. Someone able to edit the
    /// Secret could otherwise delete both and exchange whole certificate/key pairs (ca <->
    /// front-proxy-ca), which the kubeadm-level checks cannot see.
    KubeflavorOnly,
    /// Also Secrets written by `kubeadm init phase upload-certs`, checked by entry kind and
    /// key/certificate matching only.
    KubeflavorOrKubeadm,
}

impl Provenance {
    /// Kubeflavor's Secrets only, or kubeadm's too when the user accepted them
    /// (`--accept-kubeadm-secret`).
    pub fn accepting_kubeadm(accept: bool) -> Self {
        match accept {
            true => Provenance::KubeflavorOrKubeadm,
            false => Provenance::KubeflavorOnly,
        }
    }
}

/// Opens and checks a whole Secret, accepting kubeadm-written ones too
/// ([`Provenance::KubeflavorOrKubeadm`]). See [`open_all_with`].
pub fn open_all(
    key: &CertificateKey,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<OpenedCerts, CopyCertsError> {
    open_all_with(key, data, Provenance::KubeflavorOrKubeadm)
}

/// Opens and checks a whole Secret: its size first ([`MAX_SECRET_ENTRIES`],
/// [`MAX_SECRET_BYTES`]), then the key, then every non-empty entry, then what each entry
/// holds. Nothing is returned unless everything passed, so the caller can write all files
/// or none.
pub fn open_all_with(
    key: &CertificateKey,
    data: &BTreeMap<String, Vec<u8>>,
    provenance: Provenance,
) -> Result<OpenedCerts, CopyCertsError> {
    check_size(data)?;
    let opener = Opener::checked(key, data, provenance)?;
    let manifest = read_manifest(&opener, data)?;
    let etcd = etcd_mode(data);
    let set = PkiEntry::set(etcd);
    let (plaintexts, absent) = open_set(&opener, set, data)?;
    let ignored = open_unknown(&opener, set, data)?;
    if let Some(manifest) = &manifest {
        check_manifest(manifest, set, &plaintexts)?;
    }
    check_contents(&plaintexts)?;
    let files = plaintexts
        .into_iter()
        .map(|(entry, contents)| PkiFile::new(entry.rel_path(), entry.mode(), contents))
        .collect();
    Ok(OpenedCerts {
        files,
        absent,
        etcd,
        manifest_verified: manifest.is_some(),
        ignored,
    })
}

/// Refuses a Secret above the entry-count or byte bounds, before anything is decrypted.
fn check_size(data: &BTreeMap<String, Vec<u8>>) -> Result<(), CopyCertsError> {
    if data.len() > MAX_SECRET_ENTRIES {
        return Err(CopyCertsError::TooManyEntries(data.len()));
    }
    let bytes: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_SECRET_BYTES {
        return Err(CopyCertsError::TooLarge(bytes));
    }
    Ok(())
}

/// Decrypts entries with a key already checked against the Secret's key check, when it
/// has one.
struct Opener<'a> {
    key: &'a CertificateKey,
    /// The Secret carries kubeflavor's key check: then a failing entry is tampered with
    /// (the key is right); without it, the key or the entry is wrong, nobody can tell which.
    has_key_check: bool,
}

impl<'a> Opener<'a> {
    /// Checks the key against the key-check entry, which a Secret must carry unless
    /// `provenance` accepts kubeadm's.
    fn checked(
        key: &'a CertificateKey,
        data: &BTreeMap<String, Vec<u8>>,
        provenance: Provenance,
    ) -> Result<Self, CopyCertsError> {
        let has_key_check = data.get(KEY_CHECK_ENTRY).is_some_and(|v| !v.is_empty());
        if !has_key_check && provenance == Provenance::KubeflavorOnly {
            return Err(CopyCertsError::NotFromKubeflavor);
        }
        if has_key_check {
            check_key(key, &data[KEY_CHECK_ENTRY])?;
        }
        Ok(Opener { key, has_key_check })
    }

    fn open_entry(&self, name: &str, value: &[u8]) -> Result<Zeroizing<Vec<u8>>, CopyCertsError> {
        open(self.key, value).map_err(|reason| match self.has_key_check {
            true => CopyCertsError::Tampered {
                entry: name.to_string(),
                reason,
            },
            false => CopyCertsError::WrongKeyOrTampered {
                entry: name.to_string(),
            },
        })
    }
}

/// The key opens the key-check entry to its known plaintext, or it is the wrong key.
fn check_key(key: &CertificateKey, key_check: &[u8]) -> Result<(), CopyCertsError> {
    match open(key, key_check) {
        Ok(p) if p[..] == *KEY_CHECK_PLAINTEXT => Ok(()),
        Ok(_) => Err(CopyCertsError::Tampered {
            entry: KEY_CHECK_ENTRY.into(),
            reason: OpenError::Authentication,
        }),
        // Too short to be a ciphertext at all: changed, not a wrong key.
        Err(reason @ OpenError::TooShort { .. }) => Err(CopyCertsError::Tampered {
            entry: KEY_CHECK_ENTRY.into(),
            reason,
        }),
        Err(OpenError::Authentication) => Err(CopyCertsError::WrongKey),
    }
}

/// The manifest, when the Secret has one. A key check without its manifest means someone
/// removed the manifest.
fn read_manifest(
    opener: &Opener<'_>,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Option<Manifest>, CopyCertsError> {
    match data.get(MANIFEST_ENTRY).filter(|v| !v.is_empty()) {
        Some(value) => {
            let plain = opener.open_entry(MANIFEST_ENTRY, value)?;
            let manifest: Manifest = serde_json::from_slice(&plain)
                .map_err(|e| CopyCertsError::BadManifest(e.to_string()))?;
            Ok(Some(manifest))
        }
        None if opener.has_key_check => Err(CopyCertsError::MissingEntry {
            entry: MANIFEST_ENTRY.into(),
        }),
        None => Ok(None),
    }
}

/// External etcd when any of its entries is present, as kubeadm decides.
fn etcd_mode(data: &BTreeMap<String, Vec<u8>>) -> EtcdMode {
    let external = [
        PkiEntry::ExternalEtcdCaCert,
        PkiEntry::ExternalEtcdCert,
        PkiEntry::ExternalEtcdKey,
    ]
    .iter()
    .any(|e| data.contains_key(e.data_key()));
    match external {
        true => EtcdMode::External,
        false => EtcdMode::Local,
    }
}

/// Decrypts every entry of the set; an empty value is a file absent on disk, a missing
/// key is an error.
#[allow(clippy::type_complexity)]
fn open_set(
    opener: &Opener<'_>,
    set: &[PkiEntry],
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<(BTreeMap<PkiEntry, Zeroizing<Vec<u8>>>, Vec<PkiEntry>), CopyCertsError> {
    let mut plaintexts = BTreeMap::new();
    let mut absent = Vec::new();
    for entry in set {
        let Some(value) = data.get(entry.data_key()) else {
            return Err(CopyCertsError::MissingEntry {
                entry: entry.data_key().into(),
            });
        };
        if value.is_empty() {
            absent.push(*entry);
        } else {
            plaintexts.insert(*entry, opener.open_entry(entry.data_key(), value)?);
        }
    }
    Ok((plaintexts, absent))
}

/// The entries outside the set, which kubeflavor does not use. Each non-empty one must
/// still decrypt, as kubeadm decrypts every value.
fn open_unknown(
    opener: &Opener<'_>,
    set: &[PkiEntry],
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<String>, CopyCertsError> {
    let mut ignored = Vec::new();
    for (name, value) in data {
        let known = name == KEY_CHECK_ENTRY
            || name == MANIFEST_ENTRY
            || set.iter().any(|e| e.data_key() == name);
        if !known {
            if !value.is_empty() {
                opener.open_entry(name, value)?;
            }
            ignored.push(name.clone());
        }
    }
    Ok(ignored)
}

/// Opens a whole Secret as [`open_all_with`] does, then checks that every file can serve
/// what it is used for at `now` ([`check_usable`]): what a
/// download writes, and what an upload stores, must be usable CA material, not merely
/// well-formed.
pub fn open_for_use(
    key: &CertificateKey,
    data: &BTreeMap<String, Vec<u8>>,
    provenance: Provenance,
    now: jiff::Timestamp,
) -> Result<OpenedCerts, CopyCertsError> {
    let opened = open_all_with(key, data, provenance)?;
    check_all_usable(&opened, now)?;
    Ok(opened)
}

/// Every entry must hold exactly the bytes uploaded under its name: this is what binds
/// entries to names (kubeadm's format does not).
fn check_manifest(
    manifest: &Manifest,
    set: &[PkiEntry],
    plaintexts: &BTreeMap<PkiEntry, Zeroizing<Vec<u8>>>,
) -> Result<(), CopyCertsError> {
    if manifest.version != 1 {
        return Err(CopyCertsError::BadManifest(format!(
            "unknown version {}",
            manifest.version
        )));
    }
    for entry in set {
        let Some(expected) = manifest.entries.get(entry.data_key()) else {
            return Err(CopyCertsError::BadManifest(format!(
                "it does not list {entry}"
            )));
        };
        let actual = plaintexts
            .get(entry)
            .map(|p| hex::encode(Sha256::digest(p)))
            .unwrap_or_default();
        if *expected != actual {
            return Err(CopyCertsError::NotAsUploaded { entry: *entry });
        }
    }
    Ok(())
}

/// Each entry holds what its name says, each certificate parses, each private key belongs
/// to its certificate or public key (P6, nothing lost: nothing unusable gets written).
fn check_contents(
    plaintexts: &BTreeMap<PkiEntry, Zeroizing<Vec<u8>>>,
) -> Result<(), CopyCertsError> {
    let unreadable = |entry, reason| CopyCertsError::Unreadable { entry, reason };
    for (entry, contents) in plaintexts {
        let found = classify_pem(contents).map_err(|e| unreadable(*entry, e.into()))?;
        let ok = matches!(
            (entry.kind(), &found),
            (PkiEntryKind::Certificate, PemKind::Certificate)
                | (PkiEntryKind::PrivateKey, PemKind::PrivateKey(_))
                | (PkiEntryKind::PublicKey, PemKind::PublicKey)
        );
        if !ok {
            return Err(CopyCertsError::SwappedEntry {
                entry: *entry,
                expected: entry.kind(),
                found: found.to_string(),
            });
        }
        if entry.kind() == PkiEntryKind::Certificate {
            parse_certificates_pem(contents).map_err(|e| unreadable(*entry, e))?;
        }
    }
    for (entry, contents) in plaintexts {
        let Some(partner) = entry.partner() else {
            continue;
        };
        let key = PrivateKey::from_pem(contents).map_err(|e| unreadable(*entry, e))?;
        // A key whose partner is absent (an external CA keeps ca.key elsewhere, for example)
        // cannot be matched; kubeadm accepts that, and so does kubeflavor.
        let Some(partner_contents) = plaintexts.get(&partner) else {
            continue;
        };
        let matches = match partner.kind() {
            PkiEntryKind::PublicKey => {
                let public =
                    PublicKey::from_pem(partner_contents).map_err(|e| unreadable(partner, e))?;
                key.matches_public_key(&public)
            }
            _ => {
                let certs =
                    parse_certificates_pem(partner_contents).map_err(|e| unreadable(partner, e))?;
                key.matches_certificate(&certs[0])
                    .map_err(|e| unreadable(partner, e))?
            }
        };
        if !matches {
            return Err(CopyCertsError::KeyDoesNotMatch {
                key: *entry,
                partner,
            });
        }
    }
    Ok(())
}
/// Checks every opened file (see [`check_usable`]); the first unusable one is the error.
fn check_all_usable(opened: &OpenedCerts, now: jiff::Timestamp) -> Result<(), CopyCertsError> {
    for file in &opened.files {
        let Some(entry) = PkiEntry::set(opened.etcd)
            .iter()
            .copied()
            .find(|e| e.rel_path() == file.rel_path)
        else {
            continue;
        };
        check_usable(entry, file.contents(), now)
            .map_err(|reason| CopyCertsError::Unusable { entry, reason })?;
    }
    Ok(())
}
