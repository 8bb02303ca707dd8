//! `certs generate -> upload -> download` on a second PKI directory gives identical files,
//! re-runs are idempotent, and the Secret goes away with its proxy token (P5 certificate
//! hand-off, P6 nothing lost).
//! Runs on testkube, or on a real cluster with KUBEFLAVOR_E2E_KUBECONFIG.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::watcher;
use kubeflavor::certs::CertsError;
use kubeflavor::cmd::certs::exit_code;

use crate::helpers::{Env, download_to, generate, proxy_token_ref, snapshot, upload};
use crate::support::within;

#[tokio::test]
async fn round_trip_gives_identical_files_and_modes() {
    let env = Env::start_serial().await;
    for key_type in ["rsa-2048", "ecdsa-p256"] {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("source");
        let target = tmp.path().join("target");
        generate(&source, key_type);
        let (key, out) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
            .await
            .unwrap();
        assert!(
            out.contains("[upload-certs] Using certificate key:\n"),
            "{out}"
        );
        assert_eq!(key.len(), 64);
        let report = download_to(&env, &key, &target, &[]).await.unwrap();
        assert!(report.contains("8 of 8 files written"), "{report}");
        let (a, b) = (snapshot(&source), snapshot(&target));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        assert_eq!(a, b, "{key_type}: files, bytes and modes differ");
        assert_eq!(b["ca.key"].0, 0o600);
        assert_eq!(b["sa.pub"].0, 0o644);
        assert_eq!(b["etcd/"].0, 0o755);
        // A second download leaves every file alone.
        let again = download_to(&env, &key, &target, &[]).await.unwrap();
        assert!(again.contains("0 of 8 files written"), "{again}");
    }
}

#[tokio::test]
async fn re_upload_replaces_the_secret_and_retires_the_old_proxy_token() {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    generate(&source, "ecdsa-p256");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let (first_key, _) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap();
    let first_owner = proxy_token_ref(&env).await.name;
    let (second_key, _) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap();
    assert_ne!(first_key, second_key);
    let owners = secrets
        .get("kubeadm-certs")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap();
    assert_eq!(owners.len(), 1);
    assert_ne!(owners[0].name, first_owner);
    assert!(
        secrets.get_opt(&first_owner).await.unwrap().is_none(),
        "old proxy token kept"
    );
    // The old key no longer opens the Secret; the new one does.
    let target = tmp.path().join("target");
    let err = download_to(&env, &first_key, &target, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, CertsError::WrongKey), "{err}");
    download_to(&env, &second_key, &target, &[]).await.unwrap();
    assert_eq!(snapshot(&source), snapshot(&target));
}

#[tokio::test]
async fn upload_with_a_given_key_and_finishing_a_half_done_upload() {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    generate(&source, "ecdsa-p256");
    let key = "0123456789ABCDEF".repeat(4);
    // What a crash after the first writes leaves: the RBAC objects granting someone else,
    // and a stale Secret without an owner. The next run must set everything right.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let stale: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubeadm-certs", "namespace": "kube-system"},
        "type": "Opaque",
        "data": {"ca.crt": ""}
    }))
    .unwrap();
    let _ = secrets.delete("kubeadm-certs", &Default::default()).await;
    secrets.create(&Default::default(), &stale).await.unwrap();
    let (printed, _) = upload(
        &env,
        &[
            "--pki-dir",
            source.to_str().unwrap(),
            "--certificate-key",
            &key,
            "--readable-by",
            "kubeadm",
        ],
    )
    .await
    .unwrap();
    assert_eq!(printed, key.to_ascii_lowercase());
    let (_, _) = upload(
        &env,
        &[
            "--pki-dir",
            source.to_str().unwrap(),
            "--certificate-key",
            &key,
        ],
    )
    .await
    .unwrap();
    let binding: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(env.client.clone(), "kube-system");
    let subjects = binding
        .get("kubeadm:kubeadm-certs")
        .await
        .unwrap()
        .subjects
        .unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(
        subjects[0].name,
        "system:bootstrappers:kubeflavor:control-plane"
    );
    let target = tmp.path().join("target");
    download_to(&env, &key, &target, &[]).await.unwrap();
    assert_eq!(snapshot(&source), snapshot(&target));
}

#[tokio::test]
async fn garbage_collection_deletes_the_secret_with_its_proxy_token() {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    generate(&source, "ecdsa-p256");
    let (key, _) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let owner = proxy_token_ref(&env).await.name;

    let cfg = watcher::Config::default().fields("metadata.name=kubeadm-certs");
    let mut events = watcher(secrets.clone(), cfg).boxed();
    // The initial listing, so the deletion cannot be missed.
    while let Some(ev) = events.try_next().await.unwrap() {
        if matches!(ev, watcher::Event::InitDone) {
            break;
        }
    }
    secrets.delete(&owner, &Default::default()).await.unwrap();
    let gone = within("garbage collection of kubeadm-certs", async {
        while let Some(ev) = events.try_next().await.unwrap() {
            if let watcher::Event::Delete(s) = ev
                && s.metadata.name.as_deref() == Some("kubeadm-certs")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert!(gone);
    let err = download_to(&env, &key, &tmp.path().join("t"), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, CertsError::SecretGone), "{err}");
    assert_eq!(exit_code(&err).code(), 25);
    assert!(!tmp.path().join("t").exists());
}

/// A Secret as kubeadm writes it (sealed by Python's independent AES-GCM, no key check, no
/// manifest: the committed core vectors) downloads with kubeflavor when accepted explicitly.
#[tokio::test]
async fn a_secret_written_by_kubeadm_downloads() {
    use sha2::{Digest, Sha256};
    let vectors: serde_json::Value = serde_json::from_str(include_str!(
        "../../../kubeflavor-core/tests/data/copycerts_vectors.json"
    ))
    .unwrap();
    let env = Env::start_serial().await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let _ = secrets.delete("kubeadm-certs", &Default::default()).await;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubeadm-certs", "namespace": "kube-system"},
        "type": "Opaque",
        "data": vectors["secret_data_b64"],
    }))
    .unwrap();
    secrets.create(&Default::default(), &secret).await.unwrap();
    let key = vectors["key"].as_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("pki");

    // Not accepted unless asked for: without the key check and manifest, whole
    // certificate/key pairs could have been swapped unnoticed. Exit 31, nothing written.
    let refused = download_to(&env, key, &target, &[]).await.unwrap_err();
    assert!(
        matches!(refused, CertsError::NotFromKubeflavor(_)),
        "{refused}"
    );
    assert_eq!(exit_code(&refused).code(), 31);
    assert!(
        refused.to_string().contains("--accept-kubeadm-secret"),
        "{refused}"
    );
    assert!(!target.exists());

    // Without kubeflavor's key check a wrong key cannot be told from tampering: exit 30.
    let err = download_to(&env, &"1".repeat(64), &target, &["--accept-kubeadm-secret"])
        .await
        .unwrap_err();
    assert!(matches!(err, CertsError::WrongKeyOrTampered(_)), "{err}");
    assert_eq!(exit_code(&err).code(), 30);
    assert!(!target.exists());

    download_to(&env, key, &target, &["--accept-kubeadm-secret"])
        .await
        .unwrap();
    let files = snapshot(&target);
    for (entry, digest) in vectors["plaintext_sha256"].as_object().unwrap() {
        let rel = entry.replacen("etcd-", "etcd/", 1);
        let (mode, bytes) = &files[&rel];
        assert_eq!(
            hex::encode(Sha256::digest(bytes)),
            digest.as_str().unwrap(),
            "{rel}"
        );
        let want = if rel.ends_with(".key") { 0o600 } else { 0o644 };
        assert_eq!(*mode, want, "{rel}");
    }
}

/// P6 (nothing lost): an upload that fails half-way (the API server errs while replacing
/// the Secret) leaves a state the next run finishes: the old upload still works until then,
/// the re-run replaces it. Fault injection exists on testkube only.
#[tokio::test]
async fn an_upload_failing_half_way_is_finished_by_the_next_run() {
    let env = Env::start_serial().await;
    let Some(tk) = env.testkube_or_skip("needs testkube's fault injection") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    generate(&source, "ecdsa-p256");
    let (old_key, _) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap();

    // The proxy token gets created, then replacing kube-system/kubeadm-certs fails.
    tk.faults().fail_next(1, "update", "secrets", 500);
    let err = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap_err();
    assert_eq!(exit_code(&err).code(), 1, "{err}");
    assert!(err.to_string().contains("kubeadm-certs"), "{err}");
    // The previous upload is intact.
    let first = tmp.path().join("first");
    download_to(&env, &old_key, &first, &[]).await.unwrap();

    let (new_key, _) = upload(&env, &["--pki-dir", source.to_str().unwrap()])
        .await
        .unwrap();
    let second = tmp.path().join("second");
    download_to(&env, &new_key, &second, &[]).await.unwrap();
    assert_eq!(snapshot(&source), snapshot(&second));
    let stale = download_to(&env, &old_key, &tmp.path().join("x"), &[])
        .await
        .unwrap_err();
    assert!(matches!(stale, CertsError::WrongKey), "{stale}");
}
