//! The three kubeconfigs of a join: the cluster-info one read at discovery, and the two
//! join writes for the kubelet, named as kubeadm names them
//! (cmd/kubeadm/app/util/kubeconfig: `CreateWithToken` / `CreateWithCerts`):
//! - bootstrap-kubelet.conf: cluster `kubernetes`, user `tls-bootstrap-token-user`, context
//!   `tls-bootstrap-token-user@kubernetes`, the bootstrap token;
//! - kubelet.conf: cluster `kubernetes`, user `system:node:<name>`, context
//!   `system:node:<name>@kubernetes`, the client certificate and key embedded.
//!
//! Both embed the CA as `certificate-authority-data`, exactly the bytes cluster-info
//! published.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::BootstrapToken;
use serde::Deserialize;
use serde_json::json;
use zeroize::Zeroizing;

const CLUSTER_NAME: &str = "kubernetes";
const BOOTSTRAP_USER: &str = "tls-bootstrap-token-user";

/// The server and CA of cluster-info's kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub server: String,
    /// `certificate-authority-data` decoded: a PEM bundle.
    pub ca_pem: Vec<u8>,
    /// Each CA certificate of the bundle, DER.
    pub ca_certs_der: Vec<Vec<u8>>,
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Option<Vec<NamedCluster>>,
}

#[derive(Deserialize)]
struct NamedCluster {
    cluster: Option<Cluster>,
}

#[derive(Deserialize)]
struct Cluster {
    server: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<String>,
    #[serde(flatten)]
    _other: BTreeMap<String, serde_json::Value>,
}

/// Reads cluster-info's kubeconfig: exactly one cluster (its name is usually empty) with a
/// server and at least one CA certificate (kubeadm refuses anything else too).
pub fn parse_cluster_info(text: &str) -> Result<ClusterInfo, String> {
    let config: Kubeconfig =
        serde_saphyr::from_str(text).map_err(|e| format!("it is not a kubeconfig: {e}"))?;
    let clusters = config.clusters.unwrap_or_default();
    let [named] = clusters.as_slice() else {
        return Err(format!(
            "expected exactly one cluster, found {}",
            clusters.len()
        ));
    };
    let cluster = named.cluster.as_ref().ok_or("its cluster entry is empty")?;
    let server = cluster
        .server
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or("its cluster has no server")?;
    let ca_b64 = cluster
        .certificate_authority_data
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or("its cluster has no certificate-authority-data")?;
    let ca_pem = STANDARD
        .decode(ca_b64.trim())
        .map_err(|e| format!("certificate-authority-data is not base64: {e}"))?;
    let ca_certs_der = kubeflavor_core::keys::parse_certificates_pem(&ca_pem)
        .map_err(|e| format!("certificate-authority-data is not a PEM certificate bundle: {e}"))?;
    if ca_certs_der.is_empty() {
        return Err("certificate-authority-data holds no certificate".into());
    }
    Ok(ClusterInfo {
        server,
        ca_pem,
        ca_certs_der,
    })
}

/// bootstrap-kubelet.conf: what the kubelet authenticates with until it has its own
/// certificate. Holds the token: zeroized, written 0600.
pub fn bootstrap_kubelet_conf(
    server: &str,
    ca_pem: &[u8],
    token: &BootstrapToken,
) -> Zeroizing<String> {
    let context = format!("{BOOTSTRAP_USER}@{CLUSTER_NAME}");
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {
            "certificate-authority-data": STANDARD.encode(ca_pem),
            "server": server,
        }}],
        "contexts": [{"name": context, "context": {"cluster": CLUSTER_NAME, "user": BOOTSTRAP_USER}}],
        "current-context": context,
        "preferences": {},
        "users": [{"name": BOOTSTRAP_USER, "user": {"token": token.expose().as_str()}}],
    });
    render(doc)
}

/// kubelet.conf: the node's own identity, `system:node:<name>`.
pub fn kubelet_conf(
    server: &str,
    ca_pem: &[u8],
    node_name: &NodeName,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Zeroizing<String> {
    let user = format!("system:node:{node_name}");
    let context = format!("{user}@{CLUSTER_NAME}");
    let key_b64 = Zeroizing::new(STANDARD.encode(key_pem));
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {
            "certificate-authority-data": STANDARD.encode(ca_pem),
            "server": server,
        }}],
        "contexts": [{"name": context, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": context,
        "preferences": {},
        "users": [{"name": user, "user": {
            "client-certificate-data": STANDARD.encode(cert_pem),
            "client-key-data": key_b64.as_str(),
        }}],
    });
    render(doc)
}

/// Serializes and wipes the intermediate JSON tree (it holds the secret too).
fn render(mut doc: serde_json::Value) -> Zeroizing<String> {
    let text =
        serde_saphyr::to_string(&doc).expect("a JSON tree of strings always serializes as YAML");
    wipe(&mut doc);
    Zeroizing::new(text)
}

fn wipe(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => zeroize::Zeroize::zeroize(s),
        serde_json::Value::Array(a) => a.iter_mut().for_each(wipe),
        serde_json::Value::Object(o) => o.values_mut().for_each(wipe),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use kubeflavor_core::pin::CaPin;

    use super::*;

    fn ca_pem() -> String {
        let files = kubeflavor_core::pki::generate_shared_ca_set(
            kubeflavor_core::pki::KeyAlgorithm::EcdsaP256,
            jiff::Timestamp::now(),
        )
        .unwrap();
        let ca = files.iter().find(|f| f.rel_path == "ca.crt").unwrap();
        String::from_utf8(ca.contents().to_vec()).unwrap()
    }

    /// cluster-info as kubeadm publishes it (capture 27): an unnamed cluster, null lists.
    fn cluster_info_text(ca: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {}\n    server: https://127.0.0.1:6443\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n",
            STANDARD.encode(ca)
        )
    }

    #[test]
    fn reads_kubeadm_cluster_info() {
        let ca = ca_pem();
        let info = parse_cluster_info(&cluster_info_text(&ca)).unwrap();
        assert_eq!(info.server, "https://127.0.0.1:6443");
        assert_eq!(info.ca_pem, ca.as_bytes());
        assert_eq!(info.ca_certs_der.len(), 1);
        CaPin::from_cert_der(&info.ca_certs_der[0]).unwrap();
    }

    #[test]
    fn refuses_cluster_info_without_exactly_one_usable_cluster() {
        let ca = ca_pem();
        let two = cluster_info_text(&ca).replace(
            "contexts: null",
            "- name: other\n  cluster:\n    server: https://192.0.2.1:6443\ncontexts: null",
        );
        assert!(
            parse_cluster_info(&two)
                .unwrap_err()
                .contains("exactly one cluster")
        );
        let no_ca = "clusters:\n- name: \"\"\n  cluster:\n    server: https://127.0.0.1:6443\n";
        assert!(
            parse_cluster_info(no_ca)
                .unwrap_err()
                .contains("certificate-authority-data")
        );
        let garbage_ca = cluster_info_text(&ca).replace(
            "certificate-authority-data: ",
            "certificate-authority-data: Zm9v",
        );
        assert!(parse_cluster_info(&garbage_ca).is_err());
    }

    #[test]
    fn written_kubeconfigs_load_in_kube_with_kubeadm_names() {
        let ca = ca_pem();
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let text = bootstrap_kubelet_conf("https://127.0.0.1:6443", ca.as_bytes(), &token);
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(
            kc.current_context.as_deref(),
            Some("tls-bootstrap-token-user@kubernetes")
        );
        assert_eq!(kc.clusters[0].name, "kubernetes");
        assert_eq!(kc.auth_infos[0].name, "tls-bootstrap-token-user");
        let again = parse_cluster_info(&text).unwrap();
        assert_eq!(again.ca_pem, ca.as_bytes());

        let node: NodeName = "worker-1".parse().unwrap();
        let text = kubelet_conf(
            "https://127.0.0.1:6443",
            ca.as_bytes(),
            &node,
            ca.as_bytes(),
            b"KEY PEM",
        );
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(
            kc.current_context.as_deref(),
            Some("system:node:worker-1@kubernetes")
        );
        assert_eq!(kc.auth_infos[0].name, "system:node:worker-1");
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_certificate_data.as_deref(),
            Some(STANDARD.encode(ca.as_bytes()).as_str())
        );
    }
}
