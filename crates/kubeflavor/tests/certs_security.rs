//! P5 on the wire: the key never reaches the cluster or the logs, and only control-plane
//! join tokens may read the ciphertext. Runs on testkube, or on a real cluster with
//! KUBEFLAVOR_E2E_KUBECONFIG.

mod certs_support;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use certs_support::{Env, create_token, every_object, find_leaks, generate, upload};

async fn generate_and_upload(env: &Env, dir: &std::path::Path, extra: &[&str]) -> String {
    generate(dir, "ecdsa-p256");
    let args = [&["--pki-dir", dir.to_str().unwrap()], extra].concat();
    upload(env, &args).await.unwrap().0
}

// current_thread (the default): every task logs through the thread's subscriber.
#[tokio::test]
async fn no_object_and_no_log_line_contains_the_key() {
    let (logs, _guard) = certs_support::capture_logs();
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let key = generate_and_upload(&env, &tmp.path().join("pki"), &[]).await;
    let objects = every_object(&env.admin).await;
    // The scan must have seen the Secret itself, or it proves nothing.
    assert!(
        objects
            .iter()
            .any(|(n, _)| n == "secrets/kube-system/kubeadm-certs")
    );
    assert!(objects.iter().any(|(n, _)| n.starts_with("configmaps/")));
    assert_eq!(find_leaks(&objects, &key), Vec::<String>::new());
    // The key also stays out of every log line (kube-rs, hyper and testkube included).
    let text = logs.text();
    assert!(
        !text.is_empty(),
        "no log captured: the capture is not working"
    );
    let leaks: Vec<&str> = text
        .lines()
        .filter(|l| {
            certs_support::key_forms(&key)
                .iter()
                .any(|f| l.contains(f.as_str()))
        })
        .collect();
    assert!(leaks.is_empty(), "{leaks:?}");
}

#[tokio::test]
async fn the_scan_would_find_a_leaked_key() {
    // Guards the test above: a key stored on the server is found.
    let env = Env::start().await;
    let key = "ab".repeat(32);
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("kf-leak-{}", std::process::id()), "namespace": "default"},
        "data": {"oops": key.to_ascii_uppercase()}
    }))
    .unwrap();
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.admin.clone(), "default");
    let created = api.create(&Default::default(), &cm).await.unwrap();
    let leaks = find_leaks(&every_object(&env.admin).await, &key);
    api.delete(
        created.metadata.name.as_deref().unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
}

#[tokio::test]
async fn only_control_plane_tokens_may_read_the_secret_by_default() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let _key = generate_and_upload(&env, &tmp.path().join("pki"), &[]).await;
    let node = env
        .token_client(&create_token(&env.admin, "system:bootstrappers:kubeflavor:node").await)
        .await;
    let kubeadm = env
        .token_client(
            &create_token(
                &env.admin,
                "system:bootstrappers:kubeadm:default-node-token",
            )
            .await,
        )
        .await;
    let cp = env
        .token_client(
            &create_token(&env.admin, "system:bootstrappers:kubeflavor:control-plane").await,
        )
        .await;
    for (who, client) in [
        ("kubeflavor node token", &node),
        ("kubeadm worker token", &kubeadm),
    ] {
        let err = Api::<Secret>::namespaced(client.clone(), "kube-system")
            .get("kubeadm-certs")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{who}: {err}"
        );
    }
    let got = Api::<Secret>::namespaced(cp.clone(), "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap();
    assert!(got.data.unwrap().contains_key("ca.key"));
    // And it may read nothing else.
    let err = Api::<Secret>::namespaced(cp.clone(), "kube-system")
        .get("kubeadm-certs-other")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
}

#[tokio::test]
async fn readable_by_kubeadm_binds_kubeadms_default_token_group() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let _key =
        generate_and_upload(&env, &tmp.path().join("pki"), &["--readable-by", "kubeadm"]).await;
    let kubeadm = env
        .token_client(
            &create_token(
                &env.admin,
                "system:bootstrappers:kubeadm:default-node-token",
            )
            .await,
        )
        .await;
    let cp = env
        .token_client(
            &create_token(&env.admin, "system:bootstrappers:kubeflavor:control-plane").await,
        )
        .await;
    Api::<Secret>::namespaced(kubeadm, "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap();
    let err = Api::<Secret>::namespaced(cp, "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
}

#[tokio::test]
async fn the_proxy_token_cannot_authenticate_and_the_secret_expires() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let _key = generate_and_upload(&env, &tmp.path().join("pki"), &["--ttl", "30m"]).await;
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), "kube-system");
    let owner = secrets
        .get("kubeadm-certs")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap()
        .remove(0);
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    let token = secrets.get(&owner.name).await.unwrap();
    let data = token.data.unwrap();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["description", "expiration", "token-id", "token-secret"]
    );
    let exp: jiff::Timestamp = String::from_utf8(data["expiration"].0.clone())
        .unwrap()
        .parse()
        .unwrap();
    let ttl = exp.duration_since(jiff::Timestamp::now());
    assert!(
        ttl > jiff::SignedDuration::from_mins(28) && ttl <= jiff::SignedDuration::from_mins(30),
        "{ttl:?}"
    );
    // Presented as a bearer token it is refused: it has no authentication usage.
    let secret = String::from_utf8(data["token-secret"].0.clone()).unwrap();
    let id = String::from_utf8(data["token-id"].0.clone()).unwrap();
    let proxy = env.token_client(&format!("{id}.{secret}")).await;
    let err = Api::<Secret>::namespaced(proxy, "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "{err}"
    );
}
