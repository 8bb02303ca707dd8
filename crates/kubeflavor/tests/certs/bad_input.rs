//! Every bad input of the `certs` commands (P5 certificate hand-off, P6 nothing lost): a
//! clear error, its own non-zero exit code, and nothing written (neither files nor
//! objects). Runs on testkube, or on a real cluster with KUBEFLAVOR_E2E_KUBECONFIG.

use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use kubeflavor::certs::CertsError;
use kubeflavor::cmd::certs::exit_code;

use crate::helpers::{Env, download_to, generate, proxy_token_ref, snapshot, upload};

struct Setup {
    env: Env,
    key: String,
    _tmp: tempfile::TempDir,
    source: PathBuf,
    target: PathBuf,
}

/// A cluster with a fresh upload, and a target directory holding one unrelated file (so
/// "nothing written" compares a non-empty directory).
async fn setup() -> Setup {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let target = tmp.path().join("target");
    generate(&source, "ecdsa-p256");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("unrelated"), b"keep me").unwrap();
    let (key, _) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap();
    Setup {
        env,
        key,
        _tmp: tmp,
        source,
        target,
    }
}

/// Runs a download that must fail, checks that the target did not change, returns the error.
async fn failing_download(s: &Setup, key: &str) -> CertsError {
    let before = snapshot(&s.target);
    let err = download_to(&s.env, key, &s.target, &[])
        .await
        .expect_err("the download must fail");
    assert_eq!(snapshot(&s.target), before, "{err}: something was written");
    err
}

/// Changes the Secret's data as an attacker with write access (or a bit flip) would.
async fn edit_secret(
    env: &Env,
    edit: impl FnOnce(&mut std::collections::BTreeMap<String, ByteString>),
) {
    let api: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let mut secret = api.get("kubeadm-certs").await.unwrap();
    edit(secret.data.as_mut().unwrap());
    api.replace("kubeadm-certs", &PostParams::default(), &secret)
        .await
        .unwrap();
}

/// The resourceVersion of kube-system/kubeadm-certs: unchanged means not rewritten.
async fn secret_version(env: &Env) -> Option<String> {
    Api::<Secret>::namespaced(env.client.clone(), "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap()
        .metadata
        .resource_version
}

fn assert_one_clear_line(err: &CertsError, code: u8, says: &str) {
    let text = err.to_string();
    assert_eq!(exit_code(err).code(), code, "{text}");
    assert!(!text.contains('\n'), "{text}");
    assert!(text.contains(says), "{text:?} should say {says:?}");
}

#[tokio::test]
async fn wrong_key_says_so_plainly() {
    let s = setup().await;
    let wrong = "f".repeat(64);
    let err = failing_download(&s, &wrong).await;
    assert!(matches!(err, CertsError::WrongKey), "{err}");
    assert_one_clear_line(&err, 21, "wrong certificate key");
    assert!(!err.to_string().contains("message authentication failed"));
}

#[tokio::test]
async fn malformed_keys_are_refused_before_any_request() {
    let s = setup().await;
    let short = failing_download(&s, "abcd").await;
    assert_one_clear_line(&short, 20, "got 4 characters");
    let long = failing_download(&s, &"a".repeat(66)).await;
    assert_one_clear_line(&long, 20, "got 66 characters");
    let not_hex = failing_download(&s, &format!("{}zz", "a".repeat(62))).await;
    assert_one_clear_line(&not_hex, 20, "not a hexadecimal digit");
    let _ = &s.key;
}

#[tokio::test]
async fn a_tampered_entry_is_named() {
    let s = setup().await;
    edit_secret(&s.env, |d| {
        let v = d.get_mut("ca.key").unwrap();
        let last = v.0.len() - 1;
        v.0[last] ^= 1;
    })
    .await;
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::Tampered(_)), "{err}");
    assert_one_clear_line(&err, 22, "ca.key");
}

#[tokio::test]
async fn swapped_entries_are_detected() {
    let s = setup().await;
    // Two certificates of the same kind: only the manifest can tell them apart.
    edit_secret(&s.env, |d| {
        let a = d.remove("ca.crt").unwrap();
        let b = d.remove("front-proxy-ca.crt").unwrap();
        d.insert("ca.crt".into(), b);
        d.insert("front-proxy-ca.crt".into(), a);
    })
    .await;
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::Swapped(_)), "{err}");
    assert_one_clear_line(&err, 23, "swapped");
}

#[tokio::test]
async fn a_missing_entry_is_named() {
    let s = setup().await;
    edit_secret(&s.env, |d| {
        d.remove("sa.key");
    })
    .await;
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::MissingEntry(_)), "{err}");
    assert_one_clear_line(&err, 24, "sa.key");
}

#[tokio::test]
async fn a_missing_secret_says_run_upload_again() {
    let s = setup().await;
    Api::<Secret>::namespaced(s.env.client.clone(), "kube-system")
        .delete("kubeadm-certs", &Default::default())
        .await
        .unwrap();
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::SecretGone), "{err}");
    assert_one_clear_line(&err, 25, "run 'kubeflavor certs upload' again");
}

#[tokio::test]
async fn an_expired_secret_says_run_upload_again() {
    let s = setup().await;
    let secrets: Api<Secret> = Api::namespaced(s.env.client.clone(), "kube-system");
    let owner = proxy_token_ref(&s.env).await.name;
    // Expire the proxy token. tokencleaner and garbage collection may remove both at any
    // moment after this; the download must refuse in every intermediate state.
    let mut token = secrets.get(&owner).await.unwrap();
    token.data.as_mut().unwrap().insert(
        "expiration".into(),
        ByteString(b"2000-01-01T00:00:00Z".to_vec()),
    );
    match secrets
        .replace(&owner, &PostParams::default(), &token)
        .await
    {
        Ok(_) => {}
        // Already cleaned up: that is the expired state too.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => panic!("{e}"),
    }
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::SecretGone), "{err}");
    assert_one_clear_line(&err, 25, "missing or expired");
}

#[tokio::test]
async fn an_unreadable_pki_file_uploads_nothing() {
    let s = setup().await;
    let before = secret_version(&s.env).await;
    // A directory where the file must be cannot be read as one by anyone, root included.
    std::fs::remove_file(s.source.join("sa.key")).unwrap();
    std::fs::create_dir(s.source.join("sa.key")).unwrap();
    let err = upload(&s.env, &["--pki-dir", s.source.to_str().unwrap()])
        .await
        .unwrap_err();
    assert!(matches!(err, CertsError::PkiUnreadable(_)), "{err}");
    assert_one_clear_line(&err, 26, "sa.key");
    let after = secret_version(&s.env).await;
    assert_eq!(before, after, "the Secret was rewritten");
}

#[tokio::test]
async fn an_inconsistent_pki_uploads_nothing() {
    let s = setup().await;
    let before = secret_version(&s.env).await;
    // ca.key from another CA set.
    let other = s._tmp.path().join("other");
    generate(&other, "ecdsa-p256");
    std::fs::copy(other.join("ca.key"), s.source.join("ca.key")).unwrap();
    let err = upload(&s.env, &["--pki-dir", s.source.to_str().unwrap()])
        .await
        .unwrap_err();
    assert!(matches!(err, CertsError::PkiInvalid(_)), "{err}");
    assert_one_clear_line(&err, 27, "does not belong to");
    let after = secret_version(&s.env).await;
    assert_eq!(before, after, "the Secret was rewritten");
}

#[tokio::test]
async fn an_unwritable_target_writes_nothing() {
    let s = setup().await;
    // A regular file where a directory must be: unwritable for every user, root included.
    let blocked: &Path = &s.target.join("unrelated").join("pki");
    let before = snapshot(&s.target);
    let err = download_to(&s.env, &s.key, blocked, &[]).await.unwrap_err();
    assert!(matches!(err, CertsError::Unwritable(_)), "{err}");
    assert_one_clear_line(&err, 28, "nothing was written");
    assert_eq!(snapshot(&s.target), before);
}

#[tokio::test]
async fn different_existing_files_are_kept_without_force() {
    let s = setup().await;
    std::fs::write(s.target.join("ca.crt"), b"an older certificate").unwrap();
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::Conflict(_)), "{err}");
    assert_one_clear_line(&err, 29, "--force");
    // With --force everything is written, the unrelated file untouched.
    download_to(&s.env, &s.key, &s.target, &["--force"])
        .await
        .unwrap();
    let mut got = snapshot(&s.target);
    assert_eq!(got.remove("unrelated").unwrap().1, b"keep me");
    assert_eq!(got, snapshot(&s.source));
}

#[tokio::test]
async fn a_secret_that_never_expires_is_refused() {
    let s = setup().await;
    let before = secret_version(&s.env).await;
    for ttl in ["0s", "-5m"] {
        let flag = format!("--ttl={ttl}");
        let err = upload(&s.env, &["--pki-dir", s.source.to_str().unwrap(), &flag])
            .await
            .unwrap_err();
        assert!(matches!(err, CertsError::Refused(_)), "{err}");
        assert_one_clear_line(&err, 4, "must be positive");
    }
    let after = secret_version(&s.env).await;
    assert_eq!(before, after, "the Secret was rewritten");
}

/// A certificate with `key_pem`'s key (PKCS#8, as rcgen writes it), changed by `tweak`: a
/// consistent pair, so only a check of what the file is for can refuse it.
fn reissued(tweak: impl FnOnce(&mut rcgen::CertificateParams)) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    tweak(&mut params);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Replaces the whole Secret with a consistent kubeflavor upload of `source`'s files with
/// `changes` applied (what someone who knows the key, or a broken control plane, can
/// upload).
async fn reupload(s: &Setup, changes: &[(&str, &[u8])]) {
    use kubeflavor_core::crypto::copycerts::{EtcdMode, PkiEntry, seal_secret_data};
    let mut files: Vec<(PkiEntry, Vec<u8>)> = PkiEntry::set(EtcdMode::Local)
        .iter()
        .map(|e| (*e, std::fs::read(s.source.join(e.rel_path())).unwrap()))
        .collect();
    for (rel, contents) in changes {
        let slot = files
            .iter_mut()
            .find(|(e, _)| e.rel_path() == *rel)
            .unwrap();
        slot.1 = contents.to_vec();
    }
    let borrowed: Vec<(PkiEntry, &[u8])> = files.iter().map(|(e, c)| (*e, c.as_slice())).collect();
    let key = s.key.parse().unwrap();
    let data = seal_secret_data(&key, EtcdMode::Local, &borrowed).unwrap();
    edit_secret(&s.env, |d| {
        *d = data.into_iter().map(|(k, v)| (k, ByteString(v))).collect();
    })
    .await;
}

/// kubeflavor's own checks pass (the key decrypts everything, the manifest matches, each
/// key belongs to its certificate), but what a control plane would use the files for does
/// not: a ca.crt that is no CA, one with a second certificate the API server would trust
/// too, an expired CA, a key with a PEM block appended. Refused, nothing written.
#[tokio::test]
async fn a_download_of_unusable_ca_material_writes_nothing() {
    let s = setup().await;
    let (not_ca, not_ca_key) = reissued(|p| p.is_ca = rcgen::IsCa::ExplicitNoCa);
    let (expired, expired_key) = reissued(|p| {
        p.not_before = rcgen::date_time_ymd(1999, 1, 1);
        p.not_after = rcgen::date_time_ymd(2000, 1, 1);
    });
    let (other, _) = reissued(|_| {});
    let ca = std::fs::read_to_string(s.source.join("ca.crt")).unwrap();
    let ca_key = std::fs::read_to_string(s.source.join("ca.key")).unwrap();
    let cases: [(Vec<(&str, String)>, &str); 4] = [
        (
            vec![("ca.crt", not_ca), ("ca.key", not_ca_key)],
            "ca.crt cannot serve as the cluster CA certificate: it is not a CA certificate",
        ),
        (
            vec![("ca.crt", format!("{ca}{other}"))],
            "it holds 2 certificates",
        ),
        (
            vec![("ca.crt", expired), ("ca.key", expired_key)],
            "it expired at 2000-01-01T00:00:00Z",
        ),
        (
            vec![("ca.key", format!("{ca_key}{other}"))],
            "ca.key cannot serve as a private key: it holds a PEM block 'CERTIFICATE' besides the key",
        ),
    ];
    for (changes, says) in cases {
        let changes: Vec<(&str, &[u8])> = changes.iter().map(|(p, c)| (*p, c.as_bytes())).collect();
        reupload(&s, &changes).await;
        let err = failing_download(&s, &s.key).await;
        assert!(matches!(err, CertsError::Swapped(_)), "{err}");
        assert_one_clear_line(&err, 23, says);
    }
}

/// The same files are refused where they come from: `certs upload` stores nothing.
#[tokio::test]
async fn an_upload_of_unusable_ca_material_stores_nothing() {
    let s = setup().await;
    let before = secret_version(&s.env).await;
    let original = std::fs::read_to_string(s.source.join("ca.crt")).unwrap();
    let (other, _) = reissued(|_| {});
    let (not_ca, not_ca_key) = reissued(|p| p.is_ca = rcgen::IsCa::NoCa);
    let ca_key = std::fs::read_to_string(s.source.join("front-proxy-ca.key")).unwrap();
    let cases: [(Vec<(&str, String)>, &str); 3] = [
        (
            vec![("ca.crt", format!("{original}{other}"))],
            "ca.crt cannot serve as the cluster CA certificate: it holds 2 certificates",
        ),
        (
            vec![("ca.crt", not_ca), ("ca.key", not_ca_key)],
            "it has no basicConstraints extension",
        ),
        (
            vec![("front-proxy-ca.key", format!("{ca_key}{ca_key}"))],
            "front-proxy-ca.key cannot serve as a private key",
        ),
    ];
    for (i, (changes, says)) in cases.into_iter().enumerate() {
        let dir = s._tmp.path().join(format!("bad-{i}"));
        for e in kubeflavor_core::crypto::copycerts::PkiEntry::set(
            kubeflavor_core::crypto::copycerts::EtcdMode::Local,
        ) {
            let to = dir.join(e.rel_path());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(s.source.join(e.rel_path()), &to).unwrap();
        }
        for (rel, contents) in &changes {
            std::fs::write(dir.join(rel), contents).unwrap();
        }
        let err = upload(&s.env, &["--pki-dir", dir.to_str().unwrap()])
            .await
            .unwrap_err();
        assert!(matches!(err, CertsError::PkiInvalid(_)), "{err}");
        assert_one_clear_line(&err, 27, says);
        assert!(err.to_string().contains("nothing was uploaded"), "{err}");
    }
    assert_eq!(
        before,
        secret_version(&s.env).await,
        "the Secret was rewritten"
    );
}

/// A directory inside the PKI directory that is a symbolic link (`etcd -> /elsewhere`) is
/// not followed: a download would put the etcd CA key wherever the link points, an upload
/// would send whatever is there. Both refuse, naming the link.
#[tokio::test]
async fn a_symlink_inside_the_pki_dir_is_refused_both_ways() {
    let s = setup().await;
    let elsewhere = s._tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, s.target.join("etcd")).unwrap();
    let err = failing_download(&s, &s.key).await;
    assert!(matches!(err, CertsError::Unwritable(_)), "{err}");
    assert_one_clear_line(&err, 28, "etcd is a symbolic link");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());

    let before = secret_version(&s.env).await;
    std::fs::rename(s.source.join("etcd"), elsewhere.join("etcd")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("etcd"), s.source.join("etcd")).unwrap();
    let err = upload(&s.env, &["--pki-dir", s.source.to_str().unwrap()])
        .await
        .unwrap_err();
    assert!(matches!(err, CertsError::PkiUnreadable(_)), "{err}");
    assert_one_clear_line(&err, 26, "etcd is a symbolic link");
    assert_eq!(
        before,
        secret_version(&s.env).await,
        "the Secret was rewritten"
    );
}

/// A kubeadm-certs Secret without an owner token never expires (nothing deletes it), which
/// the README promises it does. The download still works (the material is the cluster's)
/// but says so, with what to do.
#[tokio::test]
async fn a_secret_that_never_expires_is_downloaded_with_a_warning() {
    let s = setup().await;
    let api: Api<Secret> = Api::namespaced(s.env.client.clone(), "kube-system");
    let mut secret = api.get("kubeadm-certs").await.unwrap();
    secret.metadata.owner_references = None;
    api.replace("kubeadm-certs", &PostParams::default(), &secret)
        .await
        .unwrap();
    let out = download_to(&s.env, &s.key, &s.target, &[]).await.unwrap();
    let warning = out
        .lines()
        .find(|l| l.contains("Warning"))
        .unwrap_or_else(|| panic!("no warning: {out}"));
    assert!(
        warning.contains("has no owner token, so it never expires"),
        "{warning}"
    );
    assert!(
        warning.contains("kubectl -n kube-system delete secret kubeadm-certs"),
        "{warning}"
    );
}
