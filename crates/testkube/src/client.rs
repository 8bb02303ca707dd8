//! Ready kube-rs clients for a [`TestCluster`], as one of the identities a cluster knows.
//! Every test builds its clients here, so they all trust the cluster CA and speak to it the
//! same way a client given the kubeconfig would.

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::TestCluster;

/// Who a client is, as the API server authenticates it.
#[derive(Clone, Copy, Debug)]
pub enum Identity<'a> {
    /// The cluster administrator: client certificate CN `kubernetes-admin`, O
    /// `system:masters`.
    Admin,
    /// No credentials: `system:anonymous`.
    Anonymous,
    /// A bearer token: a bootstrap token (`<id>.<secret>`) or one registered with
    /// [`TestCluster::register_static_token`].
    Token(&'a str),
    /// A client certificate and its key (PEM), e.g. from
    /// [`TestCluster::issue_client_cert`] or a CSR the cluster signed.
    ClientCert {
        /// The certificate (PEM).
        cert_pem: &'a str,
        /// Its private key (PEM).
        key_pem: &'a str,
    },
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig does not parse, or names no usable cluster or user.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    /// kube-rs refused the configuration (e.g. a TLS setting).
    #[error("client: {0}")]
    Client(#[from] kube::Error),
}

/// A kube-rs client for the current context of a kubeconfig (YAML text): the one way the
/// tests turn a kubeconfig, of testkube or of a real cluster, into a client.
pub async fn client_from_kubeconfig(yaml: &str) -> Result<kube::Client, ClientError> {
    let kubeconfig = Kubeconfig::from_yaml(yaml)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

impl TestCluster {
    /// A kubeconfig (YAML text) whose user is `who`.
    pub fn kubeconfig_as(&self, who: Identity<'_>) -> String {
        match who {
            Identity::Admin => self.admin_kubeconfig(),
            Identity::Anonymous => self.anonymous_kubeconfig(),
            Identity::Token(token) => self.kubeconfig_for_token(token),
            Identity::ClientCert { cert_pem, key_pem } => {
                self.kubeconfig_for_client_cert(cert_pem, key_pem)
            }
        }
    }

    /// A client as the cluster administrator.
    pub async fn client(&self) -> Result<kube::Client, ClientError> {
        self.client_as(Identity::Admin).await
    }

    /// A client as `who`.
    pub async fn client_as(&self, who: Identity<'_>) -> Result<kube::Client, ClientError> {
        client_from_kubeconfig(&self.kubeconfig_as(who)).await
    }
}
