//! The kubeadm-certs Secret as a whole: what kubeflavor writes, and every way a download can
//! go wrong (P5 certificate hand-off, P6 nothing lost), each with its own error.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use jiff::Timestamp;
use kubeflavor_core::crypto::certkey::{CertificateKey, CertificateKeyError};
use kubeflavor_core::crypto::copycerts::{
    CopyCertsError, EtcdMode, KEY_CHECK_ENTRY, MANIFEST_ENTRY, PkiEntry, PkiEntryKind, Provenance,
    open, open_all, open_all_with, seal_secret_data,
};
use kubeflavor_core::crypto::pki::{KeyAlgorithm, PkiFile, generate_shared_ca_set};
use proptest::prelude::*;
use proptest::sample::Index;

fn pki() -> &'static [PkiFile] {
    static PKI: OnceLock<Vec<PkiFile>> = OnceLock::new();
    PKI.get_or_init(|| generate_shared_ca_set(KeyAlgorithm::EcdsaP256, Timestamp::now()).unwrap())
}

fn entry_of(file: &PkiFile) -> PkiEntry {
    PkiEntry::from_data_key(&file.rel_path.replace('/', "-")).unwrap()
}

fn key() -> CertificateKey {
    CertificateKey::from_bytes([0x42; 32])
}

/// A Secret written by kubeflavor over the generated PKI.
fn uploaded() -> BTreeMap<String, Vec<u8>> {
    let files: Vec<(PkiEntry, &[u8])> = pki().iter().map(|f| (entry_of(f), f.contents())).collect();
    seal_secret_data(&key(), EtcdMode::Local, &files).unwrap()
}

/// The same Secret as kubeadm would have written it: no kubeflavor entries.
fn as_kubeadm(mut data: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    data.remove(KEY_CHECK_ENTRY);
    data.remove(MANIFEST_ENTRY);
    data
}

fn swap(data: &mut BTreeMap<String, Vec<u8>>, a: &str, b: &str) {
    let va = data.remove(a).unwrap();
    let vb = data.insert(b.to_string(), va).unwrap();
    data.insert(a.to_string(), vb);
}

#[test]
fn download_returns_exactly_the_uploaded_files_with_kubeadm_modes() {
    let opened = open_all(&key(), &uploaded()).unwrap();
    assert!(opened.manifest_verified);
    assert_eq!(opened.etcd, EtcdMode::Local);
    let mut got: Vec<_> = opened
        .files
        .iter()
        .map(|f| (f.rel_path.clone(), f.mode, f.contents().to_vec()))
        .collect();
    let mut want: Vec<_> = pki()
        .iter()
        .map(|f| (f.rel_path.clone(), f.mode, f.contents().to_vec()))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn every_non_empty_entry_decrypts_under_the_key_as_kubeadm_requires() {
    let data = uploaded();
    assert!(data.contains_key(KEY_CHECK_ENTRY) && data.contains_key(MANIFEST_ENTRY));
    for (name, value) in &data {
        assert!(!value.is_empty(), "{name}");
        assert!(open(&key(), value).is_ok(), "{name} does not decrypt");
    }
}

#[test]
fn the_secret_carries_neither_the_key_nor_any_plaintext() {
    let data = uploaded();
    let hex = key().expose_hex();
    for (name, value) in &data {
        let text = String::from_utf8_lossy(value);
        assert!(!text.contains(hex.as_str()), "{name}");
        assert!(
            !text.contains("PRIVATE KEY") && !text.contains("CERTIFICATE"),
            "{name}"
        );
        assert!(!value.windows(32).any(|w| w == [0x42; 32]), "{name}");
    }
}

#[test]
fn missing_files_are_stored_as_empty_values() {
    let files: Vec<(PkiEntry, &[u8])> = pki()
        .iter()
        .filter(|f| !f.rel_path.starts_with("front-proxy"))
        .map(|f| (entry_of(f), f.contents()))
        .collect();
    let data = seal_secret_data(&key(), EtcdMode::Local, &files).unwrap();
    assert!(data["front-proxy-ca.crt"].is_empty() && data["front-proxy-ca.key"].is_empty());
    let opened = open_all(&key(), &data).unwrap();
    assert_eq!(
        opened.absent,
        vec![PkiEntry::FrontProxyCaCert, PkiEntry::FrontProxyCaKey]
    );
    assert_eq!(opened.files.len(), 6);
}

#[test]
fn external_etcd_set_round_trips() {
    let by_entry = |e: PkiEntry| pki().iter().find(|f| entry_of(f) == e).unwrap().contents();
    let files = [
        (PkiEntry::CaCert, by_entry(PkiEntry::CaCert)),
        (PkiEntry::CaKey, by_entry(PkiEntry::CaKey)),
        (PkiEntry::ExternalEtcdCaCert, by_entry(PkiEntry::EtcdCaCert)),
        (PkiEntry::ExternalEtcdCert, by_entry(PkiEntry::EtcdCaCert)),
        (PkiEntry::ExternalEtcdKey, by_entry(PkiEntry::EtcdCaKey)),
    ];
    let data = seal_secret_data(&key(), EtcdMode::External, &files).unwrap();
    assert!(!data.contains_key("etcd-ca.crt"));
    let opened = open_all(&key(), &data).unwrap();
    assert_eq!(opened.etcd, EtcdMode::External);
    let paths: Vec<&str> = opened.files.iter().map(|f| f.rel_path.as_str()).collect();
    assert!(paths.contains(&"apiserver-etcd-client.key"), "{paths:?}");
    assert_eq!(
        seal_secret_data(
            &key(),
            EtcdMode::Local,
            &[(PkiEntry::ExternalEtcdKey, b"x")]
        )
        .unwrap_err(),
        CopyCertsError::NotInSet {
            entry: PkiEntry::ExternalEtcdKey,
            mode: EtcdMode::Local
        }
    );
}

#[test]
fn wrong_key_is_reported_plainly_thanks_to_the_key_check() {
    let err = open_all(&CertificateKey::from_bytes([0x43; 32]), &uploaded()).unwrap_err();
    assert_eq!(err, CopyCertsError::WrongKey);
    assert!(
        err.to_string().starts_with("certificate key is wrong"),
        "{err}"
    );
    assert!(err.to_string().contains("kubeflavor certs upload"), "{err}");
}

#[test]
fn wrong_key_on_a_kubeadm_secret_cannot_be_told_from_tampering() {
    let err = open_all(
        &CertificateKey::from_bytes([0x43; 32]),
        &as_kubeadm(uploaded()),
    )
    .unwrap_err();
    assert!(
        matches!(err, CopyCertsError::WrongKeyOrTampered { .. }),
        "{err:?}"
    );
}

#[test]
fn malformed_keys_are_refused_before_anything_is_read() {
    assert_eq!(
        "abcd".parse::<CertificateKey>(),
        Err(CertificateKeyError::WrongLength { got: 4 })
    );
    assert_eq!(
        format!("{}q", "0".repeat(63)).parse::<CertificateKey>(),
        Err(CertificateKeyError::NotHex { position: 63 })
    );
}

#[test]
fn tampered_ciphertext_names_the_entry() {
    let mut data = uploaded();
    let value = data.get_mut("ca.key").unwrap();
    let last = value.len() - 1;
    value[last] ^= 1;
    let err = open_all(&key(), &data).unwrap_err();
    assert!(
        matches!(&err, CopyCertsError::Tampered { entry, .. } if entry == "ca.key"),
        "{err:?}"
    );
}

#[test]
fn swapped_entries_are_caught_by_the_manifest() {
    let mut data = uploaded();
    swap(&mut data, "ca.key", "front-proxy-ca.key");
    let err = open_all(&key(), &data).unwrap_err();
    assert!(
        matches!(err, CopyCertsError::NotAsUploaded { .. }),
        "{err:?}"
    );

    // A whole cert/key pair swapped is consistent in itself: only the manifest sees it.
    let mut data = uploaded();
    swap(&mut data, "ca.key", "front-proxy-ca.key");
    swap(&mut data, "ca.crt", "front-proxy-ca.crt");
    assert!(matches!(
        open_all(&key(), &data),
        Err(CopyCertsError::NotAsUploaded { .. })
    ));
}

#[test]
fn swapped_entries_in_a_kubeadm_secret_are_caught_by_kind_and_key_matching() {
    let mut data = as_kubeadm(uploaded());
    swap(&mut data, "ca.key", "front-proxy-ca.key");
    let err = open_all(&key(), &data).unwrap_err();
    assert!(
        matches!(
            err,
            CopyCertsError::KeyDoesNotMatch {
                key: PkiEntry::CaKey,
                partner: PkiEntry::CaCert
            } | CopyCertsError::KeyDoesNotMatch {
                key: PkiEntry::FrontProxyCaKey,
                ..
            }
        ),
        "{err:?}"
    );

    let mut data = as_kubeadm(uploaded());
    swap(&mut data, "ca.crt", "ca.key");
    let err = open_all(&key(), &data).unwrap_err();
    assert!(
        matches!(
            err,
            CopyCertsError::SwappedEntry {
                entry: PkiEntry::CaCert,
                expected: PkiEntryKind::Certificate,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("holds a private key"), "{err}");
}

#[test]
fn strict_downloads_refuse_a_secret_stripped_of_the_kubeflavor_checks() {
    // Both kubeflavor entries removed and two whole pairs exchanged: consistent for kubeadm.
    let mut data = as_kubeadm(uploaded());
    swap(&mut data, "ca.key", "front-proxy-ca.key");
    swap(&mut data, "ca.crt", "front-proxy-ca.crt");
    assert!(
        open_all(&key(), &data).is_ok(),
        "the kubeadm-level checks cannot see this"
    );
    assert_eq!(
        open_all_with(&key(), &data, Provenance::KubeflavorOnly).unwrap_err(),
        CopyCertsError::NotFromKubeflavor
    );
    assert!(open_all_with(&key(), &uploaded(), Provenance::KubeflavorOnly).is_ok());
}

#[test]
fn a_truncated_key_check_is_tampering_not_a_wrong_key() {
    let mut data = uploaded();
    data.insert(KEY_CHECK_ENTRY.into(), vec![0; 5]);
    assert!(
        matches!(open_all(&key(), &data), Err(CopyCertsError::Tampered { entry, .. }) if entry == KEY_CHECK_ENTRY)
    );
}

#[test]
fn missing_entries_are_named() {
    let mut data = uploaded();
    data.remove("sa.pub");
    let err = open_all(&key(), &data).unwrap_err();
    assert_eq!(
        err,
        CopyCertsError::MissingEntry {
            entry: "sa.pub".into()
        }
    );

    let mut data = uploaded();
    data.remove(MANIFEST_ENTRY);
    let err = open_all(&key(), &data).unwrap_err();
    assert_eq!(
        err,
        CopyCertsError::MissingEntry {
            entry: MANIFEST_ENTRY.into()
        }
    );

    let mut data = as_kubeadm(uploaded());
    data.remove("etcd-ca.key");
    assert!(matches!(
        open_all(&key(), &data),
        Err(CopyCertsError::MissingEntry { .. })
    ));
}

#[test]
fn an_emptied_entry_is_not_taken_for_a_missing_file() {
    let mut data = uploaded();
    data.insert("ca.key".into(), Vec::new());
    assert_eq!(
        open_all(&key(), &data).unwrap_err(),
        CopyCertsError::NotAsUploaded {
            entry: PkiEntry::CaKey
        }
    );
}

#[test]
fn unknown_entries_must_decrypt_like_kubeadm_demands_and_are_then_ignored() {
    let mut data = uploaded();
    data.insert(
        "extra.txt".into(),
        kubeflavor_core::crypto::copycerts::seal(&key(), b"note").unwrap(),
    );
    let opened = open_all(&key(), &data).unwrap();
    assert_eq!(opened.ignored, vec!["extra.txt".to_string()]);

    data.insert(
        "extra.txt".into(),
        b"not a ciphertext at all, too long to be short".to_vec(),
    );
    assert!(
        matches!(open_all(&key(), &data), Err(CopyCertsError::Tampered { entry, .. }) if entry == "extra.txt")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// P6 (nothing lost): whatever single bit of whatever entry changes, nothing is handed
    /// out.
    #[test]
    fn any_bit_flip_in_any_entry_fails_the_download(entry in any::<Index>(), byte in any::<Index>(), bit in 0u8..8) {
        let mut data = uploaded();
        let name = data.keys().nth(entry.index(data.len())).unwrap().clone();
        let value = data.get_mut(&name).unwrap();
        let i = byte.index(value.len());
        value[i] ^= 1 << bit;
        prop_assert!(open_all(&key(), &data).is_err());
    }

    /// Entries are bound to their names: exchanging any two values is refused.
    #[test]
    fn exchanging_any_two_entries_fails_the_download(a in any::<Index>(), b in any::<Index>()) {
        let mut data = uploaded();
        let names: Vec<String> = data.keys().cloned().collect();
        let (a, b) = (&names[a.index(names.len())], &names[b.index(names.len())]);
        prop_assume!(a != b);
        swap(&mut data, a, b);
        prop_assert!(open_all(&key(), &data).is_err());
    }
}

#[test]
fn each_failure_has_a_distinct_message() {
    let mut messages = vec![
        open_all(&CertificateKey::from_bytes([1; 32]), &uploaded())
            .unwrap_err()
            .to_string(),
        open_all(
            &CertificateKey::from_bytes([1; 32]),
            &as_kubeadm(uploaded()),
        )
        .unwrap_err()
        .to_string(),
    ];
    let mut tampered = uploaded();
    tampered.get_mut("sa.key").unwrap()[20] ^= 4;
    messages.push(open_all(&key(), &tampered).unwrap_err().to_string());
    let mut swapped = uploaded();
    swap(&mut swapped, "sa.key", "ca.key");
    messages.push(open_all(&key(), &swapped).unwrap_err().to_string());
    let mut missing = uploaded();
    missing.remove("ca.crt");
    messages.push(open_all(&key(), &missing).unwrap_err().to_string());
    messages.push("ab".parse::<CertificateKey>().unwrap_err().to_string());
    messages.push(
        "zz".repeat(32)
            .parse::<CertificateKey>()
            .unwrap_err()
            .to_string(),
    );
    let count = messages.len();
    messages.sort();
    messages.dedup_by(|a, b| a.split(':').next() == b.split(':').next());
    assert_eq!(messages.len(), count, "{messages:#?}");
}
