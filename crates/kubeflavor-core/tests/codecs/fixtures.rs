//! Inputs the discovery and kubeconfig suites share.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use kubeflavor_core::crypto::pki::{KeyAlgorithm, generate_shared_ca_set};

/// The server cluster-info names in [`CLUSTER_INFO`].
pub const SERVER: &str = "https://127.0.0.1:6443";

/// The `kubeconfig` value of kube-public/cluster-info exactly as a v1.36 API server returns
/// it (kubeadm's shape: one cluster with an empty name, `contexts: null`, `users: null`),
/// with the CA data left as the placeholder `CA_DATA`.
pub const CLUSTER_INFO: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: CA_DATA\n    server: https://127.0.0.1:6443\ncontexts: null\ncurrent-context: \"\"\npreferences: {}\nusers: null\n";

/// A fresh cluster CA certificate (PEM).
pub fn ca_pem() -> Vec<u8> {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, Timestamp::now()).unwrap();
    files
        .into_iter()
        .find(|f| f.rel_path == "ca.crt")
        .unwrap()
        .contents()
        .to_vec()
}

/// [`CLUSTER_INFO`] with `ca_pem` as the CA data.
pub fn cluster_info_kubeconfig(ca_pem: &[u8]) -> String {
    CLUSTER_INFO.replace("CA_DATA", &STANDARD.encode(ca_pem))
}
