//! Helpers shared by testkube's integration test binaries (api, auth, controllers): kube-rs
//! clients, and waiting on watches with a generous safety timeout.

#![allow(dead_code)]

pub mod raw;

use std::time::Duration;

use testkube::TestCluster;

/// Safety net for waits on events; never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A client from a kubeconfig (YAML text), e.g. `cluster.kubeconfig_for_token(..)`.
pub async fn client_from(kubeconfig_yaml: &str) -> kube::Client {
    testkube::client_from_kubeconfig(kubeconfig_yaml)
        .await
        .expect("a usable kubeconfig")
}

/// A client as the cluster administrator.
pub async fn admin(cluster: &TestCluster) -> kube::Client {
    cluster.client().await.expect("admin client")
}

/// A raw watch of `api` from now on, with `params`: a list gives the current
/// resourceVersion, the watch starts there.
pub async fn watch_from_now<K>(
    api: &kube::Api<K>,
    params: &kube::api::WatchParams,
) -> futures::stream::BoxStream<'static, kube::Result<kube::api::WatchEvent<K>>>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    use futures::StreamExt;
    let rv = api
        .list(&kube::api::ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    api.watch(params, &rv).await.expect("watch").boxed()
}

/// Wait for a future with the safety timeout, failing the test with `what` if it expires.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A kubelet's key and its client CSR for `system:node:<node>` (PEM, base64 as in
/// `spec.request`).
pub struct KubeletKey {
    pub key_pem: String,
    pub request_b64: String,
}

pub fn kubelet_key(node: &str) -> KubeletKey {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    KubeletKey {
        key_pem: key.serialize_pem(),
        request_b64: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem),
    }
}

/// A kubelet client CSR object named `name` for `system:node:<node>`, as a kubelet files it.
pub fn kubelet_csr(
    name: &str,
    node: &str,
) -> k8s_openapi::api::certificates::v1::CertificateSigningRequest {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
            "request": kubelet_key(node).request_b64,
        },
    }))
    .unwrap()
}
