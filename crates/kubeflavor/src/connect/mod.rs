//! The command line's door to a cluster: which kubeconfig and context to use (resolved in
//! kubectl's order), the kube-rs client built from it, and errors that name the server and
//! the kubeconfig with the exit code a script reads. The reads and writes of each kind
//! live in the kubeflavor-cluster crate.

mod errors;
mod resolve;

/// The field manager of every write the CLI makes with server-side apply (`flavor apply`,
/// `install --apply`); the controller's is `controller::FIELD_MANAGER`.
pub const FIELD_MANAGER: &str = "kubeflavor";

use std::fmt;

use kube::Client;

pub use resolve::{ConfigSource, resolve};

use crate::error::{CliError, Result};

/// The flags every command that talks to a cluster takes.
#[derive(Clone, Debug, Default)]
pub struct ClusterArgs {
    /// `--kubeconfig`: this file only, as kubectl does.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// `--context`: a context of the kubeconfig instead of its current-context.
    pub context: Option<String>,
}

/// A client plus where its configuration came from, so errors can say "cannot reach the
/// cluster at <server> (kubeconfig <path>, context <name>)".
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    pub origin: Origin,
    /// The CA certificates (DER) the kubeconfig trusts for this server; empty when unknown.
    /// `token create --print-join-command` falls back to them without cluster-info.
    pub ca_certs_der: Vec<Vec<u8>>,
}

/// What a user needs to know to find the configuration a command used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub server: String,
    /// The kubeconfig file(s) used, or "in-cluster service account".
    pub kubeconfig: String,
    /// The context used; empty for the in-cluster configuration.
    pub context: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.context.is_empty() {
            write!(f, "{}", self.kubeconfig)
        } else {
            write!(
                f,
                "kubeconfig {}, context {}",
                self.kubeconfig, self.context
            )
        }
    }
}

impl Cluster {
    /// Resolve the configuration like kubectl and build a client. Nothing is sent yet: the
    /// first request is the first contact with the server.
    pub async fn connect(args: &ClusterArgs) -> Result<Cluster> {
        Ok(Cluster::connect_with_config(args).await?.0)
    }

    /// [`Cluster::connect`], with the configuration it was built from (a node's reporter
    /// reads its client certificate there).
    pub async fn connect_with_config(args: &ClusterArgs) -> Result<(Cluster, kube::Config)> {
        install_crypto_provider();
        let (config, origin) = resolve::load(args).await?;
        let kept = config.clone();
        let ca_certs_der = config.root_cert.clone().unwrap_or_default();
        let client = Client::try_from(config).map_err(|err| {
            CliError::failed(
                format!(
                    "cannot build a client for {} ({origin}): {err}",
                    origin.server
                ),
                "check the kubeconfig's certificate and key data",
            )
        })?;
        let cluster = Cluster {
            client,
            origin,
            ca_certs_der,
        };
        Ok((cluster, kept))
    }

    /// Turn a kube-rs error into the line the user sees (see [`errors`]).
    pub fn error(&self, doing: &str, err: kube::Error) -> CliError {
        errors::to_cli_error(&self.origin, doing, err)
    }
}

/// rustls needs one process-wide crypto provider; kubeflavor uses aws-lc-rs everywhere.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed (by an earlier call or by kube itself).
    let _ = provider().install_default();
}

/// aws-lc-rs with TLS 1.3's AES-128-GCM-SHA256 preferred, as Go's crypto/tls (and so
/// kube-apiserver and kubectl) prefers it: rustls's default puts AES-256-GCM-SHA384 first,
/// whose SHA-384 key schedule has no hardware help on common x86 parts and was a visible
/// share of each new connection's cost (every minted join line is a new connection). The
/// set of suites is unchanged; only the order.
fn provider() -> rustls::crypto::CryptoProvider {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    provider
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_prefers_aes_128_gcm_sha256_and_keeps_every_default_suite() {
        let suites = |p: &rustls::crypto::CryptoProvider| -> Vec<rustls::CipherSuite> {
            p.cipher_suites.iter().map(|s| s.suite()).collect()
        };
        let ours = suites(&provider());
        let mut default = suites(&rustls::crypto::aws_lc_rs::default_provider());
        assert_eq!(ours[0], rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        let mut sorted = ours.clone();
        sorted.sort_by_key(|s| u16::from(*s));
        default.sort_by_key(|s| u16::from(*s));
        assert_eq!(sorted, default);
    }
}
