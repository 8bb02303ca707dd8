//! A kubelet's identity (`system:node:<name>` in `system:nodes`) on either cluster: the
//! admin files a kubelet client CSR for it, approves it, and the cluster's signer issues
//! the certificate, as for a kubelet that joined.

use std::collections::BTreeMap;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::runtime::wait::await_condition;

use crate::support::{Env, client_from, within};

/// A client authenticated as the kubelet of `node`.
pub async fn kubelet(env: &Env, node: &str) -> kube::Client {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    let csr_name = format!("{node}-client");
    let csr = kubeflavor::join::tls_bootstrap::kubelet_csr_object(Some(&csr_name), &pem);
    let csrs: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    csrs.create(&PostParams::default(), &csr)
        .await
        .expect("the admin files the CSR");
    let approval = serde_json::json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "FidelityTest", "message": "a test's kubelet",
    }]}});
    csrs.patch_approval(&csr_name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .expect("the admin approves the CSR");
    let issued = |c: Option<&CertificateSigningRequest>| {
        c.and_then(|c| c.status.as_ref())
            .and_then(|s| s.certificate.as_ref())
            .is_some()
    };
    let csr = within(
        "the kubelet's certificate",
        await_condition(csrs, &csr_name, issued),
    )
    .await
    .expect("watch works")
    .expect("CSR exists");
    let cert = String::from_utf8(csr.status.unwrap().certificate.unwrap().0).expect("PEM");
    let admin = Kubeconfig::read_from(&env.kubeconfig).expect("admin kubeconfig");
    let cluster = admin.clusters[0].cluster.clone().expect("cluster");
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => format!("certificate-authority-data: {data}"),
        (None, Some(file)) => format!("certificate-authority: {file}"),
        (None, None) => "insecure-skip-tls-verify: true".to_string(),
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    {ca}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        cluster.server.expect("server"),
        b64(&cert),
        b64(&key.serialize_pem()),
    );
    client_from(&yaml).await
}

/// The kubelet registers its Node with these taints (key, effect).
pub async fn register(kubelet: &kube::Client, node: &str, taints: &[(&str, &str)]) -> Node {
    let obj: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": node, "labels": BTreeMap::<String, String>::new()},
        "spec": {"taints": taints.iter().map(|(k, e)| serde_json::json!({"key": k, "effect": e})).collect::<Vec<_>>()},
    }))
    .expect("a Node");
    Api::<Node>::all(kubelet.clone())
        .create(&PostParams::default(), &obj)
        .await
        .expect("the kubelet registers its Node")
}

/// The Node's taints as (key, effect) among `keys` (a real cluster adds taints of its own,
/// such as node.kubernetes.io/not-ready, and removes them again).
pub fn taints(node: &Node, keys: &[&str]) -> Vec<(String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| keys.contains(&t.key.as_str()))
        .map(|t| (t.key, t.effect))
        .collect()
}

/// The code and message of a refused request (panics on success or a transport error).
#[track_caller]
pub fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message.clone()),
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}
