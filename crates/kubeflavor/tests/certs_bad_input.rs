//! Every P5/P6 bad input of issue 6: a clear error, its own non-zero exit code, and nothing
//! written (neither files nor objects). Runs on testkube, or on a real cluster with
//! KUBEFLAVOR_E2E_KUBECONFIG.

mod certs_support;

use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use kubeflavor::certs::CertsError;

use certs_support::{Env, download_to, generate, proxy_token_ref, snapshot, upload};

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
    assert_eq!(err.exit_code(), code, "{text}");
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
    // A symlink loop cannot be read by anyone, root included.
    std::fs::remove_file(s.source.join("sa.key")).unwrap();
    std::os::unix::fs::symlink("sa.key", s.source.join("sa.key")).unwrap();
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
