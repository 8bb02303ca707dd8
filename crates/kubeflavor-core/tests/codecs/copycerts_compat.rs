//! Compatibility with kubeadm's copy-certs format, proven against an independent AES-GCM
//! implementation (Python's `cryptography`, see copycerts_vectors.py):
//! - the committed vectors (made by the script) open with kubeflavor, and kubeflavor seals
//!   the same plaintext with the same nonce to the same bytes;
//! - when python3 with `cryptography` is present (CI installs it), the script opens what
//!   kubeflavor seals, single values and every entry of a whole Secret.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts::{
    self, EtcdMode, PkiEntry, open, open_all, seal, seal_secret_data, seal_with_nonce,
};
use kubeflavor_core::crypto::keys::PrivateKey;
use kubeflavor_core::crypto::pki::{KeyAlgorithm, generate_shared_ca_set};
use sha2::{Digest, Sha256};

fn vectors() -> serde_json::Value {
    let text = include_str!("../data/copycerts_vectors.json");
    serde_json::from_str(text).unwrap()
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/copycerts_vectors.py")
}

fn python_with_cryptography() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import cryptography"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIPPED the python half: python3 with the 'cryptography' module is not available \
             (pip install cryptography; .ci/run installs it)"
        );
    }
    ok
}

fn run_script(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new("python3")
        .arg(script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn hex_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn committed_single_vectors_open_and_reseal_byte_identically() {
    let v = vectors();
    let key: CertificateKey = v["key"].as_str().unwrap().parse().unwrap();
    let singles = v["singles"].as_array().unwrap();
    assert!(!singles.is_empty());
    for single in singles {
        let sealed = STANDARD
            .decode(single["sealed_b64"].as_str().unwrap())
            .unwrap();
        let plaintext = STANDARD
            .decode(single["plaintext_b64"].as_str().unwrap())
            .unwrap();
        let nonce: [u8; 12] = hex::decode(single["nonce"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(&open(&key, &sealed).unwrap()[..], &plaintext[..]);
        assert_eq!(seal_with_nonce(&key, &plaintext, nonce), sealed);
    }
}

#[test]
fn committed_kubeadm_secret_opens_with_every_key_form() {
    let v = vectors();
    let key: CertificateKey = v["key"].as_str().unwrap().parse().unwrap();
    let data: BTreeMap<String, Vec<u8>> = v["secret_data_b64"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, b64)| (k.clone(), STANDARD.decode(b64.as_str().unwrap()).unwrap()))
        .collect();
    let opened = open_all(&key, &data).unwrap();
    // A kubeadm-written Secret: no kubeflavor key check or manifest, kind and pair checks only.
    assert!(!opened.manifest_verified);
    assert_eq!(opened.etcd, EtcdMode::Local);
    assert!(opened.absent.is_empty() && opened.ignored.is_empty());
    assert_eq!(opened.files.len(), 8);
    let digests = v["plaintext_sha256"].as_object().unwrap();
    for file in &opened.files {
        let data_key = file.rel_path.replace('/', "-");
        assert_eq!(
            digests[&data_key].as_str().unwrap(),
            hex_digest(file.contents()),
            "{data_key}"
        );
    }
    // The script wrote PKCS#1, SEC1 and PKCS#8 keys; all were read and matched.
    let forms: Vec<_> = opened
        .files
        .iter()
        .filter(|f| f.rel_path.ends_with(".key"))
        .map(|f| PrivateKey::from_pem(f.contents()).unwrap().form())
        .collect();
    use kubeflavor_core::crypto::keys::PrivateKeyForm::*;
    for form in [Pkcs1, Sec1, Pkcs8] {
        assert!(forms.contains(&form), "{form:?} missing from {forms:?}");
    }
}

#[test]
fn python_opens_single_values_kubeflavor_seals() {
    if !python_with_cryptography() {
        return;
    }
    let key = CertificateKey::generate().unwrap();
    for plaintext in [
        &b""[..],
        b"-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n",
        &[0xffu8; 5000][..],
    ] {
        let sealed = seal(&key, plaintext).unwrap();
        let opened = run_script(&["open", &key.expose_hex()], &sealed);
        assert_eq!(opened, plaintext);
    }
}

#[test]
fn python_opens_every_entry_of_a_kubeflavor_secret() {
    if !python_with_cryptography() {
        return;
    }
    let key = CertificateKey::generate().unwrap();
    let pki = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, Timestamp::now()).unwrap();
    let files: Vec<(PkiEntry, &[u8])> = pki
        .iter()
        .filter(|f| f.rel_path != "front-proxy-ca.key") // one missing file: an empty entry
        .map(|f| {
            let entry = PkiEntry::from_data_key(&f.rel_path.replace('/', "-")).unwrap();
            (entry, f.contents())
        })
        .collect();
    let data = seal_secret_data(&key, EtcdMode::Local, &files).unwrap();
    let json: BTreeMap<&str, String> = data
        .iter()
        .map(|(k, v)| (k.as_str(), STANDARD.encode(v)))
        .collect();
    let out = run_script(
        &["open-secret", &key.expose_hex()],
        &serde_json::to_vec(&json).unwrap(),
    );
    let opened: BTreeMap<String, String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let (name, digest) = l.split_once(' ').unwrap();
            (name.to_string(), digest.to_string())
        })
        .collect();
    // Python decrypted every non-empty value, kubeflavor's two extra entries included.
    let non_empty: Vec<&String> = data
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(opened.keys().collect::<Vec<_>>(), non_empty);
    assert!(
        opened.contains_key(copycerts::KEY_CHECK_ENTRY)
            && opened.contains_key(copycerts::MANIFEST_ENTRY)
    );
    assert_eq!(
        opened[copycerts::KEY_CHECK_ENTRY],
        hex_digest(copycerts::KEY_CHECK_PLAINTEXT)
    );
    for (entry, contents) in &files {
        assert_eq!(opened[entry.data_key()], hex_digest(contents));
    }
    assert!(data["front-proxy-ca.key"].is_empty());
}

#[test]
fn python_reads_the_pkcs1_and_sec1_keys_kubeflavor_writes() {
    if !python_with_cryptography() {
        return;
    }
    for algorithm in [KeyAlgorithm::Rsa2048, KeyAlgorithm::EcdsaP256] {
        let pki = generate_shared_ca_set(algorithm, Timestamp::now()).unwrap();
        let key_file = pki.iter().find(|f| f.rel_path == "ca.key").unwrap();
        let ours = PrivateKey::from_pem(key_file.contents()).unwrap();
        let theirs = String::from_utf8(run_script(&["key-pin"], key_file.contents())).unwrap();
        assert_eq!(
            theirs.trim(),
            hex_digest(ours.public_key().spki_der()),
            "{algorithm}"
        );
    }
}
