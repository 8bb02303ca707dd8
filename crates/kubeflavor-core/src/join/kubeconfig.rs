//! A minimal kubeconfig model: what kubeadm's discovery reads from `cluster-info` and what
//! `kubeflavor join` writes (`bootstrap-kubelet.conf`, `kubelet.conf`).
//!
//! Names follow kubeadm (cmd/kubeadm/app/util/kubeconfig and discovery/token): the cluster
//! is `kubernetes`; the bootstrap user is `tls-bootstrap-token-user`; the node user is
//! `system:node:<name>`; contexts are `<user>@<cluster>`. Credentials (token, client key)
//! are zeroized and never shown by Debug.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zeroize::Zeroizing;

use crate::crypto::keys::{KeyError, parse_certificates_pem};

/// kubeadm's cluster name in the kubeconfigs it writes.
pub const CLUSTER_NAME: &str = "kubernetes";
/// kubeadm's user name for the bootstrap token in bootstrap-kubelet.conf.
pub const BOOTSTRAP_USER: &str = "tls-bootstrap-token-user";

/// A string holding a credential: zeroized on drop, `****` in Debug.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SensitiveString(Zeroizing<String>);

impl SensitiveString {
    pub fn new(s: impl Into<String>) -> Self {
        Self(Zeroizing::new(s.into()))
    }

    /// The credential itself, for the one place that must use it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SensitiveString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

impl Serialize for SensitiveString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SensitiveString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::new)
    }
}

/// `clusters: null` (as in cluster-info) reads as an empty list.
fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

fn null_as_default<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A kubeconfig (`apiVersion: v1`, `kind: Config`). Unknown fields are ignored on read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion", default = "api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub clusters: Vec<NamedCluster>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub contexts: Vec<NamedContext>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub current_context: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub users: Vec<NamedUser>,
}

fn api_version() -> String {
    "v1".into()
}

fn kind() -> String {
    "Config".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedCluster {
    #[serde(default)]
    pub name: String,
    pub cluster: Cluster,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Cluster {
    #[serde(default)]
    pub server: String,
    /// Base64 of a PEM bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls_verify: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedContext {
    pub name: String,
    pub context: Context,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    pub cluster: String,
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedUser {
    pub name: String,
    pub user: AuthInfo,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AuthInfo {
    /// Base64 of a PEM certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_data: Option<String>,
    /// Base64 of a PEM private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_data: Option<SensitiveString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SensitiveString>,
}

/// The most bytes of a kubeconfig that are parsed. kubeadm's kubeconfigs are a few KiB (an
/// admin.conf with an RSA client key about 6 KiB, cluster-info under 2 KiB); 1 MiB is an
/// API server's own ConfigMap limit and far above any real file. Larger texts are refused
/// before parsing. Parsing itself is bounded too: serde_json stops at 128 levels of
/// nesting, and serde-saphyr's default budget limits YAML depth, nodes and alias expansion.
pub const MAX_KUBECONFIG_BYTES: usize = 1024 * 1024;

/// Why a kubeconfig could not be read or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    #[error(
        "the kubeconfig is {0} bytes; at most {MAX_KUBECONFIG_BYTES} are read (a real one is a few KiB)"
    )]
    TooLarge(usize),
    #[error("the kubeconfig is not valid YAML or JSON: {0}")]
    Syntax(String),
    #[error("the kubeconfig could not be rendered as YAML: {0}")]
    Render(String),
    #[error(
        "cluster-info must hold exactly one cluster, it holds {0}; the cluster's kube-public/cluster-info ConfigMap is not what kubeadm writes"
    )]
    ClusterCount(usize),
    #[error("cluster-info's cluster has no server URL")]
    NoServer,
    #[error("cluster-info's server '{0}' is not an https:// URL")]
    NotHttps(String),
    #[error("cluster-info's cluster has no certificate-authority-data")]
    NoCertificateAuthority,
    #[error("cluster-info's certificate-authority-data is not valid base64")]
    CertificateAuthorityBase64,
    #[error("cluster-info's certificate-authority-data is not a PEM certificate bundle: {0}")]
    CertificateAuthorityPem(KeyError),
}

impl Kubeconfig {
    /// Parses a kubeconfig in YAML or JSON (JSON is YAML, but is read with serde_json when
    /// it looks like JSON, for its exact error messages). A text above
    /// [`MAX_KUBECONFIG_BYTES`] is refused before parsing.
    pub fn parse(text: &str) -> Result<Self, KubeconfigError> {
        if text.len() > MAX_KUBECONFIG_BYTES {
            return Err(KubeconfigError::TooLarge(text.len()));
        }
        // The text may hold a token or a client key: errors carry no source snippet, and
        // quoted values (serde's `invalid type: string "..."`) are blanked.
        if text.trim_start().starts_with('{') {
            return serde_json::from_str(text)
                .map_err(|e| KubeconfigError::Syntax(redact_quoted(&e.to_string())));
        }
        serde_saphyr::from_str(text).map_err(|e| {
            let options =
                serde_saphyr::render_options! { snippets: serde_saphyr::SnippetMode::Off };
            let message = e.without_snippet().render_with_options(options);
            KubeconfigError::Syntax(redact_quoted(&message))
        })
    }

    /// Renders as YAML. Zeroizing, since the text may hold credentials.
    pub fn to_yaml(&self) -> Result<Zeroizing<String>, KubeconfigError> {
        serde_saphyr::to_string(self)
            .map(Zeroizing::new)
            .map_err(|e| KubeconfigError::Render(e.to_string()))
    }

    /// A kubeconfig with one cluster, one user and one context `<user>@<cluster>`, as
    /// kubeadm's `kubeconfigutil.CreateBasic` builds it.
    fn basic(server: &str, ca_pem: &[u8], user: &str, auth: AuthInfo) -> Self {
        let context = format!("{user}@{CLUSTER_NAME}");
        Self {
            api_version: api_version(),
            kind: kind(),
            clusters: vec![NamedCluster {
                name: CLUSTER_NAME.into(),
                cluster: Cluster {
                    server: server.into(),
                    certificate_authority_data: Some(STANDARD.encode(ca_pem)),
                    ..Cluster::default()
                },
            }],
            contexts: vec![NamedContext {
                name: context.clone(),
                context: Context {
                    cluster: CLUSTER_NAME.into(),
                    user: user.into(),
                    namespace: None,
                },
            }],
            current_context: context,
            users: vec![NamedUser {
                name: user.into(),
                user: auth,
            }],
        }
    }

    /// `bootstrap-kubelet.conf`: the bootstrap token for the kubelet's TLS bootstrap.
    pub fn bootstrap_kubelet(server: &str, ca_pem: &[u8], token: &str) -> Self {
        let auth = AuthInfo {
            token: Some(SensitiveString::new(token)),
            ..AuthInfo::default()
        };
        Self::basic(server, ca_pem, BOOTSTRAP_USER, auth)
    }

    /// `kubelet.conf` with the node's client certificate and key embedded (user
    /// `system:node:<name>`, as `kubeadm init` writes it).
    pub fn kubelet(
        server: &str,
        ca_pem: &[u8],
        node_name: &str,
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Self {
        let auth = AuthInfo {
            client_certificate_data: Some(STANDARD.encode(cert_pem)),
            client_key_data: Some(SensitiveString::new(STANDARD.encode(key_pem))),
            ..AuthInfo::default()
        };
        Self::basic(server, ca_pem, &format!("system:node:{node_name}"), auth)
    }
}

/// Replaces the contents of every double-quoted span with `...`.
fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    for c in message.chars() {
        if c == '"' {
            if inside {
                out.push_str("...");
            }
            inside = !inside;
            out.push(c);
        } else if !inside {
            out.push(c);
        }
    }
    out
}

/// What discovery takes from `cluster-info`: the API server and the CA certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The `server` URL.
    pub server: String,
    /// The CA bundle as published (PEM), for writing into kubeconfigs.
    pub ca_pem: Vec<u8>,
    /// Each CA certificate as DER, for pin checks and TLS roots.
    pub ca_certs_der: Vec<Vec<u8>>,
}

impl ClusterInfo {
    /// Reads the `kubeconfig` value of `kube-public/cluster-info`: exactly one cluster (its
    /// name may be empty), an https server, and a non-empty PEM CA bundle.
    pub fn from_kubeconfig(text: &str) -> Result<Self, KubeconfigError> {
        let config = Kubeconfig::parse(text)?;
        let [named] = config.clusters.as_slice() else {
            return Err(KubeconfigError::ClusterCount(config.clusters.len()));
        };
        let cluster = &named.cluster;
        if cluster.server.is_empty() {
            return Err(KubeconfigError::NoServer);
        }
        if !cluster.server.starts_with("https://") {
            return Err(KubeconfigError::NotHttps(cluster.server.clone()));
        }
        let data = cluster
            .certificate_authority_data
            .as_deref()
            .filter(|d| !d.is_empty())
            .ok_or(KubeconfigError::NoCertificateAuthority)?;
        let ca_pem = STANDARD
            .decode(data.trim())
            .map_err(|_| KubeconfigError::CertificateAuthorityBase64)?;
        let ca_certs_der =
            parse_certificates_pem(&ca_pem).map_err(KubeconfigError::CertificateAuthorityPem)?;
        Ok(Self {
            server: cluster.server.clone(),
            ca_pem,
            ca_certs_der,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_kubeconfig_is_refused_before_parsing() {
        // Valid YAML once padded with a comment: refused for its size alone.
        let mut text = String::from("apiVersion: v1\nkind: Config\n#");
        text.push_str(&"x".repeat(MAX_KUBECONFIG_BYTES));
        assert_eq!(
            Kubeconfig::parse(&text),
            Err(KubeconfigError::TooLarge(text.len()))
        );
        assert_eq!(
            ClusterInfo::from_kubeconfig(&text),
            Err(KubeconfigError::TooLarge(text.len()))
        );
        text.truncate(MAX_KUBECONFIG_BYTES);
        assert!(Kubeconfig::parse(&text).is_ok());
    }
}
