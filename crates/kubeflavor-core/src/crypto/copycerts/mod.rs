//! kubeadm's copy-certs codec (`kubeadm init phase upload-certs`,
//! cmd/kubeadm/app/phases/copycerts) and kubeflavor's hardening of it for P5 (certificate
//! hand-off).
//!
//! Wire format (must stay byte-compatible with kubeadm's `app/util/crypto`): each file is
//! sealed with AES-256-GCM under the certificate key, a fresh 12-byte random nonce, no AAD,
//! stored as `nonce || ciphertext || tag` in Secret `kube-system/kubeadm-certs`.
//!
//! kubeadm's entries are not bound to their names, and a wrong key surfaces as
//! `cipher: message authentication failed`. kubeflavor adds two entries, each itself a valid
//! ciphertext under the same key so kubeadm (which decrypts every non-empty value) still
//! reads the Secret:
//! - `kubeflavor-key-check`: a fixed constant; opened first, it turns a wrong key into a
//!   plain "wrong certificate key" error.
//! - `kubeflavor-manifest`: the SHA-256 of every entry's plaintext by name (empty for a
//!   missing file); it detects swapped, replaced, emptied and deleted entries.
//!
//! Secrets written by kubeadm have neither; they are still opened, with the weaker checks
//! (kind of each entry, each key against its certificate).
//!
//! What is written or uploaded must also be able to serve its use on a control plane
//! ([`open_for_use`], [`check_usable`]): a CA file that is one valid CA certificate and
//! nothing more, key files with nothing appended.

mod entries;
mod open;
mod usable;

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use zeroize::Zeroizing;

use crate::crypto::certkey::CertificateKey;
use crate::crypto::random::{RandomnessError, os_fill};

pub use entries::{EtcdMode, PkiEntry, PkiEntryKind};
pub use open::{
    CopyCertsError, OpenedCerts, Provenance, open_all, open_all_with, open_for_use,
    seal_secret_data, seal_secret_data_with,
};
pub use usable::{Unusable, check_usable};

/// Name of the Secret (namespace [`SECRET_NAMESPACE`]).
pub const SECRET_NAME: &str = "kubeadm-certs";
/// Namespace of the Secret.
pub const SECRET_NAMESPACE: &str = "kube-system";
/// Description kubeadm gives the token whose Secret owns (and so expires) kubeadm-certs.
pub const OWNER_TOKEN_DESCRIPTION: &str = "Proxy for managing TTL for the kubeadm-certs secret";
/// Name of the Role and RoleBinding that let join tokens read the Secret.
pub const RBAC_NAME: &str = "kubeadm:kubeadm-certs";

/// Data key of the key-check entry.
pub const KEY_CHECK_ENTRY: &str = "kubeflavor-key-check";
/// Data key of the manifest entry.
pub const MANIFEST_ENTRY: &str = "kubeflavor-manifest";
/// The plaintext of the key-check entry. Public knowledge by design: it proves the key, and
/// AES-GCM is not weakened by a known plaintext.
pub const KEY_CHECK_PLAINTEXT: &[u8] = b"kubeflavor certificate key check v1";

/// The most data entries a kubeadm-certs Secret may have to be opened. kubeadm writes at
/// most 9 (the external-etcd set) and kubeflavor adds 2; 32 leaves room for entries a newer
/// kubeadm may add (each unknown entry is decrypted, as kubeadm does) while bounding the work
/// one edited Secret can cause. Checked before any entry is decrypted.
pub const MAX_SECRET_ENTRIES: usize = 32;

/// The most bytes (keys and values together) of a kubeadm-certs Secret's data that are
/// opened: an API server refuses Secrets above 1 MiB, and the whole kubeadm set is about
/// 20 KiB. Checked before any entry is decrypted.
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// AES-GCM nonce length in kubeadm's format.
pub const NONCE_LEN: usize = 12;
/// AES-GCM tag length.
pub const TAG_LEN: usize = 16;

/// Why one sealed value could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the value is {len} bytes, shorter than a nonce and a tag ({min} bytes)")]
    TooShort { len: usize, min: usize },
    #[error("the value did not decrypt: wrong certificate key, or the value was changed")]
    Authentication,
}

/// Seals `plaintext` under `key` with a fresh nonce from the OS CSPRNG.
pub fn seal(key: &CertificateKey, plaintext: &[u8]) -> Result<Vec<u8>, RandomnessError> {
    let mut nonce = [0u8; NONCE_LEN];
    os_fill(&mut nonce)?;
    Ok(seal_with_nonce(key, plaintext, nonce))
}

/// Seals with the given nonce. A nonce must never repeat under one key: only tests and the
/// committed vectors pass fixed nonces; everything else goes through [`seal`].
pub fn seal_with_nonce(key: &CertificateKey, plaintext: &[u8], nonce: [u8; NONCE_LEN]) -> Vec<u8> {
    let cipher = Aes256Gcm::new(key.as_bytes().into());
    let sealed = cipher
        .encrypt(&Nonce::from(nonce), plaintext)
        .expect("AES-GCM encryption only fails for plaintexts above 64 GiB");
    let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

/// Opens a `nonce || ciphertext || tag` value. The plaintext (a CA key, typically) is
/// zeroized when dropped.
pub fn open(key: &CertificateKey, sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, OpenError> {
    let min = NONCE_LEN + TAG_LEN;
    if sealed.len() < min {
        return Err(OpenError::TooShort {
            len: sealed.len(),
            min,
        });
    }
    let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| OpenError::Authentication)?;
    let cipher = Aes256Gcm::new(key.as_bytes().into());
    // Decrypt in place inside a zeroizing buffer so no plaintext copy outlives this call.
    let mut buffer = Zeroizing::new(ciphertext.to_vec());
    aes_gcm::aead::AeadInOut::decrypt_in_place(&cipher, &Nonce::from(nonce), b"", &mut *buffer)
        .map_err(|_| OpenError::Authentication)?;
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: u8) -> CertificateKey {
        CertificateKey::from_bytes([b; 32])
    }

    #[test]
    fn a_secret_with_too_many_entries_is_refused_before_decrypting() {
        // Every value is garbage: a decryption attempt would fail with another error.
        let data: std::collections::BTreeMap<String, Vec<u8>> = (0..=MAX_SECRET_ENTRIES)
            .map(|i| (format!("entry-{i}"), vec![1u8; 40]))
            .collect();
        assert_eq!(
            open_all(&key(1), &data).unwrap_err(),
            CopyCertsError::TooManyEntries(MAX_SECRET_ENTRIES + 1)
        );
    }

    #[test]
    fn a_secret_above_the_byte_bound_is_refused_before_decrypting() {
        let data = std::collections::BTreeMap::from([(
            KEY_CHECK_ENTRY.to_owned(),
            vec![1u8; MAX_SECRET_BYTES],
        )]);
        assert_eq!(
            open_all(&key(1), &data).unwrap_err(),
            CopyCertsError::TooLarge(MAX_SECRET_BYTES + KEY_CHECK_ENTRY.len())
        );
    }

    #[test]
    fn layout_is_nonce_then_ciphertext_then_tag() {
        let sealed = seal_with_nonce(&key(1), b"hello", [9; NONCE_LEN]);
        assert_eq!(sealed.len(), NONCE_LEN + 5 + TAG_LEN);
        assert_eq!(&sealed[..NONCE_LEN], &[9; NONCE_LEN]);
        assert_eq!(&open(&key(1), &sealed).unwrap()[..], b"hello");
    }

    #[test]
    fn fresh_nonce_every_time() {
        let a = seal(&key(1), b"same").unwrap();
        let b = seal(&key(1), b"same").unwrap();
        assert_ne!(a[..NONCE_LEN], b[..NONCE_LEN]);
    }

    #[test]
    fn short_and_foreign_values_are_refused() {
        assert_eq!(
            open(&key(1), &[0; 27]),
            Err(OpenError::TooShort { len: 27, min: 28 })
        );
        let sealed = seal(&key(1), b"secret").unwrap();
        assert_eq!(open(&key(2), &sealed), Err(OpenError::Authentication));
    }

    proptest! {
        #[test]
        fn seal_then_open_round_trips(k in any::<[u8; 32]>(), msg in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let key = CertificateKey::from_bytes(k);
            let sealed = seal(&key, &msg).unwrap();
            prop_assert_eq!(&open(&key, &sealed).unwrap()[..], &msg[..]);
        }

        #[test]
        fn any_single_bit_flip_fails(msg in proptest::collection::vec(any::<u8>(), 0..256),
                                     index in any::<proptest::sample::Index>(), bit in 0u8..8) {
            let key = key(7);
            let mut sealed = seal(&key, &msg).unwrap();
            let i = index.index(sealed.len());
            sealed[i] ^= 1 << bit;
            prop_assert_eq!(open(&key, &sealed), Err(OpenError::Authentication));
        }

        #[test]
        fn truncation_or_extension_fails(msg in proptest::collection::vec(any::<u8>(), 0..64), extra in 1usize..20) {
            let key = key(7);
            let sealed = seal(&key, &msg).unwrap();
            prop_assert!(open(&key, &sealed[..sealed.len() - 1]).is_err());
            let mut longer = sealed.clone();
            longer.extend(std::iter::repeat_n(0u8, extra));
            prop_assert!(open(&key, &longer).is_err());
        }
    }
}
