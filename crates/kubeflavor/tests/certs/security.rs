//! P5 (certificate hand-off) on the wire: the key never reaches the cluster or the logs,
//! and only control-plane join tokens may read the ciphertext. Runs on testkube, or on a
//! real cluster with KUBEFLAVOR_E2E_KUBECONFIG.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::helpers::{
    Env, create_token, every_object, find_leaks, generate, proxy_token_ref, upload,
};

async fn generate_and_upload(env: &Env, dir: &std::path::Path, extra: &[&str]) -> String {
    generate(dir, "ecdsa-p256");
    let args = [&["--pki-dir", dir.to_str().unwrap()], extra].concat();
    upload(env, &args).await.unwrap().0
}

// current_thread (the default): every task logs through the thread's subscriber.
/// A client authenticating with a fresh bootstrap token whose extra group is `group`.
/// `client` may not read Secret kube-system/`name`: the API server answers 403.
async fn assert_cannot_read(client: &kube::Client, name: &str, who: &str) {
    let err = Api::<Secret>::namespaced(client.clone(), "kube-system")
        .get(name)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{who} reading {name}: {err}"
    );
}

async fn client_in_group(env: &Env, group: &str) -> kube::Client {
    env.token_client(&create_token(env, group).await).await
}

#[tokio::test]
async fn no_object_and_no_log_line_contains_the_key() {
    let (logs, _guard) = crate::helpers::capture_logs();
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let key = generate_and_upload(&env, &tmp.path().join("pki"), &[]).await;
    let objects = every_object(&env.client).await;
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
            crate::helpers::key_forms(&key)
                .iter()
                .any(|f| l.contains(f.as_str()))
        })
        .collect();
    assert!(leaks.is_empty(), "{leaks:?}");
}

#[tokio::test]
async fn the_scan_would_find_a_leaked_key() {
    // Guards the test above: a key stored on the server is found.
    let env = Env::start_serial().await;
    let key = "ab".repeat(32);
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("kf-leak-{}", std::process::id()), "namespace": "default"},
        "data": {"oops": key.to_ascii_uppercase()}
    }))
    .unwrap();
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.client.clone(), "default");
    let created = api.create(&Default::default(), &cm).await.unwrap();
    let leaks = find_leaks(&every_object(&env.client).await, &key);
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
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let _key = generate_and_upload(&env, &tmp.path().join("pki"), &[]).await;
    let node = client_in_group(&env, "system:bootstrappers:kubeflavor:node").await;
    let kubeadm = client_in_group(&env, "system:bootstrappers:kubeadm:default-node-token").await;
    let cp = client_in_group(&env, "system:bootstrappers:kubeflavor:control-plane").await;
    for (who, client) in [
        ("kubeflavor node token", &node),
        ("kubeadm worker token", &kubeadm),
    ] {
        assert_cannot_read(client, "kubeadm-certs", who).await;
    }
    let got = Api::<Secret>::namespaced(cp.clone(), "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap();
    assert!(got.data.unwrap().contains_key("ca.key"));
    // And it may read nothing else.
    assert_cannot_read(&cp, "kubeadm-certs-other", "the control-plane token").await;
}

#[tokio::test]
async fn readable_by_kubeadm_binds_kubeadms_default_token_group() {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let _key =
        generate_and_upload(&env, &tmp.path().join("pki"), &["--readable-by", "kubeadm"]).await;
    let kubeadm = client_in_group(&env, "system:bootstrappers:kubeadm:default-node-token").await;
    let cp = client_in_group(&env, "system:bootstrappers:kubeflavor:control-plane").await;
    Api::<Secret>::namespaced(kubeadm, "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap();
    assert_cannot_read(&cp, "kubeadm-certs", "the control-plane token").await;
}

#[tokio::test]
async fn the_proxy_token_cannot_authenticate_and_the_secret_expires() {
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let _key = generate_and_upload(&env, &tmp.path().join("pki"), &["--ttl", "30m"]).await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let owner = proxy_token_ref(&env).await;
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

/// Whether Python's `cryptography` (an independent AES-GCM, standing in for kubeadm's Go
/// code) is available; `.ci/run` installs it.
fn python_cryptography() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import cryptography"])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_stored_entry_opens_with_an_independent_aes_gcm() {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    use std::io::Write as _;
    if !python_cryptography() {
        crate::helpers::skip("python3 with the cryptography package is not installed");
        return;
    }
    let env = Env::start_serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    let key = generate_and_upload(&env, &pki, &[]).await;
    let secret = Api::<Secret>::namespaced(env.client.clone(), "kube-system")
        .get("kubeadm-certs")
        .await
        .unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, serde_json::Value> = secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, b64.encode(&v.0).into()))
        .collect();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kubeflavor-core/tests/copycerts_vectors.py"
    );
    let mut child = std::process::Command::new("python3")
        .args([script, "open-secret", &key])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&data).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "an entry did not decrypt in Python");
    let opened: std::collections::BTreeMap<String, String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    // Every non-empty value opened, kubeflavor's two extra entries included, and each file
    // entry decrypts to exactly the file that was uploaded.
    assert_eq!(opened.len(), data.len());
    for (entry, rel) in [
        ("ca.crt", "ca.crt"),
        ("ca.key", "ca.key"),
        ("front-proxy-ca.crt", "front-proxy-ca.crt"),
        ("front-proxy-ca.key", "front-proxy-ca.key"),
        ("sa.pub", "sa.pub"),
        ("sa.key", "sa.key"),
        ("etcd-ca.crt", "etcd/ca.crt"),
        ("etcd-ca.key", "etcd/ca.key"),
    ] {
        let file = std::fs::read(pki.join(rel)).unwrap();
        assert_eq!(opened[entry], hex::encode(Sha256::digest(&file)), "{entry}");
    }
}
