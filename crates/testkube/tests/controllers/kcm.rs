//! The kube-controller-manager duties as testkube runs them: cluster-info at start, the
//! bootstrap signer, the token cleaner, the kubelet client CSR signer, and each of them
//! (and the garbage collector) switched off. Tests wait on watches, never on sleeps.

use std::collections::BTreeMap;

use crate::support::{admin, client_from, kubelet_csr, within};
use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use hmac::{Hmac, KeyInit, Mac};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use sha2::Sha256;
use testkube::TestCluster;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Creates a bootstrap token Secret `id` (secret `0123456789abcdef`) and returns it.
async fn create_token(secrets: &Api<Secret>, id: &str, expiration: Option<String>) -> Secret {
    secrets
        .create(
            &PostParams::default(),
            &token_secret(id, "0123456789abcdef", expiration),
        )
        .await
        .unwrap()
}

fn token_secret(id: &str, secret: &str, expiration: Option<String>) -> Secret {
    let mut data = BTreeMap::from([
        ("token-id".to_string(), id.to_string()),
        ("token-secret".to_string(), secret.to_string()),
        (
            "usage-bootstrap-authentication".to_string(),
            "true".to_string(),
        ),
        ("usage-bootstrap-signing".to_string(), "true".to_string()),
    ]);
    if let Some(e) = expiration {
        data.insert("expiration".into(), e);
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": data,
    }))
    .unwrap()
}

/// The detached JWS bootstrapsigner writes into cluster-info
/// (`b64url(header)..b64url(sig)`, HMAC-SHA256 keyed by the token secret over
/// `b64url(header).b64url(kubeconfig)`), computed here from that definition, not from
/// testkube.
fn expected_jws(kubeconfig: &str, id: &str, secret: &str) -> String {
    let header = B64URL.encode(format!("{{\"alg\":\"HS256\",\"kid\":\"{id}\"}}"));
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{header}.{}", B64URL.encode(kubeconfig)).as_bytes());
    format!("{header}..{}", B64URL.encode(mac.finalize().into_bytes()))
}

/// Wait until cluster-info satisfies `pred`, watching it from its current version.
async fn wait_cluster_info(cms: &Api<ConfigMap>, pred: impl Fn(&ConfigMap) -> bool) -> ConfigMap {
    let current = cms.get("cluster-info").await.unwrap();
    if pred(&current) {
        return current;
    }
    let rv = current.metadata.resource_version.unwrap();
    let params = WatchParams::default().fields("metadata.name=cluster-info");
    let mut stream = cms.watch(&params, &rv).await.unwrap().boxed();
    within("cluster-info to change", async {
        while let Some(e) = stream.try_next().await.unwrap() {
            if let WatchEvent::Modified(cm) = e
                && pred(&cm)
            {
                return cm;
            }
        }
        panic!("watch ended");
    })
    .await
}

fn has_key(cm: &ConfigMap, key: &str) -> bool {
    cm.data.as_ref().is_some_and(|d| d.contains_key(key))
}

#[tokio::test]
async fn cluster_info_is_readable_anonymously_and_signed_for_each_signing_token() {
    let cluster = TestCluster::start().await.unwrap();
    let anonymous: Api<ConfigMap> = Api::namespaced(
        client_from(&cluster.anonymous_kubeconfig()).await,
        "kube-public",
    );
    let info = anonymous.get("cluster-info").await.unwrap();
    let kubeconfig = info.data.as_ref().unwrap()["kubeconfig"].clone();
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(cluster.ca_pem());
    assert_eq!(
        kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {ca_b64}\n    server: {}\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n",
            cluster.server_url()
        )
    );

    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "kube-public");
    create_token(&secrets, "abcdef", None).await;
    let signed = wait_cluster_info(&cms, |cm| has_key(cm, "jws-kubeconfig-abcdef")).await;
    assert_eq!(
        signed.data.unwrap()["jws-kubeconfig-abcdef"],
        expected_jws(&kubeconfig, "abcdef", "0123456789abcdef")
    );

    secrets
        .delete("bootstrap-token-abcdef", &DeleteParams::default())
        .await
        .unwrap();
    wait_cluster_info(&cms, |cm| !has_key(cm, "jws-kubeconfig-abcdef")).await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn expired_tokens_are_deleted_and_their_signature_goes_with_them() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "kube-public");
    let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
    create_token(
        &secrets,
        "jgr3j6",
        Some(soon.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
    )
    .await;
    let old = create_token(&secrets, "j4q87l", Some("2000-01-01T00:00:00Z".into())).await;
    wait_cluster_info(&cms, |cm| has_key(cm, "jws-kubeconfig-jgr3j6")).await;
    let mut stream = secrets
        .watch(
            &WatchParams::default(),
            &old.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let mut deleted = Vec::new();
    within("both tokens deleted", async {
        while deleted.len() < 2 {
            if let Some(WatchEvent::Deleted(s)) = stream.try_next().await.unwrap() {
                deleted.push(s.metadata.name.unwrap());
            }
        }
    })
    .await;
    assert!(
        deleted.contains(&"bootstrap-token-jgr3j6".to_string())
            && deleted.contains(&"bootstrap-token-j4q87l".to_string())
    );
    wait_cluster_info(&cms, |cm| !has_key(cm, "jws-kubeconfig-jgr3j6")).await;
    cluster.shutdown().await;
}

async fn approve(csrs: &Api<CertificateSigningRequest>, name: &str) -> CertificateSigningRequest {
    let patch = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "approved"}]}});
    csrs.patch_approval(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap()
}

#[tokio::test]
async fn approved_kubelet_csrs_are_signed_by_the_cluster_ca() {
    // An admin-filed kubelet CSR would be auto-approved (system:masters passes the
    // approver's SubjectAccessReview); here the admin approves it, then the signer runs.
    let cluster = TestCluster::builder()
        .csr_approver(false)
        .start()
        .await
        .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin(&cluster).await);
    csrs.create(
        &PostParams::default(),
        &kubelet_csr("csr-worker-1", "worker-1"),
    )
    .await
    .unwrap();
    let approved = approve(&csrs, "csr-worker-1").await;
    assert!(
        approved.status.as_ref().unwrap().certificate.is_none(),
        "the API answers before the signer runs"
    );
    let params = WatchParams::default().fields("metadata.name=csr-worker-1");
    let mut stream = csrs
        .watch(&params, &approved.metadata.resource_version.unwrap())
        .await
        .unwrap()
        .boxed();
    let issued = within("the certificate", async {
        loop {
            if let Some(WatchEvent::Modified(csr)) = stream.try_next().await.unwrap()
                && let Some(cert) = csr.status.and_then(|s| s.certificate)
            {
                return cert.0;
            }
        }
    })
    .await;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&issued).unwrap();
    let cert = pem.parse_x509().unwrap();
    let cn: Vec<&str> = cert
        .subject()
        .iter_common_name()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cn, vec!["system:node:worker-1"]);
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(cluster.ca_pem().as_bytes()).unwrap();
    assert_eq!(cert.issuer(), ca_pem.parse_x509().unwrap().subject());
    cluster.shutdown().await;
}

fn owned_by(name: &str, owner: &Secret) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "kube-system", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Secret", "name": owner.metadata.name, "uid": owner.metadata.uid}]}}))
    .unwrap()
}

/// The controller loop handles changes in order, and within one round runs the CSR
/// approver and signer, then the token cleaner, the bootstrap signer and the collector
/// (the approver off: tests/csr_approver.rs). So once a
/// later duty's write is visible, an enabled earlier duty would already have acted.
#[tokio::test]
async fn each_duty_can_be_switched_off() {
    let cluster = TestCluster::builder()
        .csr_signer(false)
        .token_cleaner(false)
        .garbage_collector(false)
        .start()
        .await
        .unwrap();
    let client = admin(&cluster).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    csrs.create(&PostParams::default(), &kubelet_csr("csr-off", "worker-2"))
        .await
        .unwrap();
    approve(&csrs, "csr-off").await;
    create_token(&secrets, "old000", Some("2000-01-01T00:00:00Z".into())).await;
    let owner = create_token(&secrets, "owner0", None).await;
    secrets
        .create(&PostParams::default(), &owned_by("dependent", &owner))
        .await
        .unwrap();
    secrets
        .delete("bootstrap-token-owner0", &DeleteParams::default())
        .await
        .unwrap();
    create_token(&secrets, "sync00", None).await;
    wait_cluster_info(&cms, |cm| has_key(cm, "jws-kubeconfig-sync00")).await;
    assert!(
        csrs.get("csr-off")
            .await
            .unwrap()
            .status
            .unwrap()
            .certificate
            .is_none(),
        "signer off"
    );
    assert!(
        secrets
            .get_opt("bootstrap-token-old000")
            .await
            .unwrap()
            .is_some(),
        "token cleaner off"
    );
    assert!(
        secrets.get_opt("dependent").await.unwrap().is_some(),
        "garbage collector off"
    );

    // And the bootstrap signer off, synchronised on the collector.
    let cluster = TestCluster::builder()
        .bootstrap_signer(false)
        .start()
        .await
        .unwrap();
    let client = admin(&cluster).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    create_token(&secrets, "abcdef", None).await;
    let owner = create_token(&secrets, "owner1", None).await;
    let dep = secrets
        .create(&PostParams::default(), &owned_by("dependent", &owner))
        .await
        .unwrap();
    let mut stream = secrets
        .watch(
            &WatchParams::default(),
            &dep.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    secrets
        .delete("bootstrap-token-owner1", &DeleteParams::default())
        .await
        .unwrap();
    within("dependent collected", async {
        loop {
            if let Some(WatchEvent::Deleted(s)) = stream.try_next().await.unwrap()
                && s.metadata.name.as_deref() == Some("dependent")
            {
                return;
            }
        }
    })
    .await;
    assert!(
        !has_key(
            &cms.get("cluster-info").await.unwrap(),
            "jws-kubeconfig-abcdef"
        ),
        "bootstrap signer off"
    );
    cluster.shutdown().await;
}
