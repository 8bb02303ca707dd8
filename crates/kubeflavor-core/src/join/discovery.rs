//! kubeadm's token discovery decision (cmd/kubeadm/app/discovery/token) as one pure
//! function: given the data of `kube-public/cluster-info` read anonymously, the token, and
//! the CA pins, either trust the cluster's server and CA or say exactly why not.
//!
//! The binary does the I/O around it: it retries while [`DiscoveryError::is_retryable`]
//! (the bootstrapsigner adds a token's signature within seconds of the token's creation),
//! then re-fetches cluster-info over TLS verified by the returned CA and calls
//! [`check_refetch_identical`].

use std::collections::BTreeMap;

use crate::crypto::pin::CaPin;
use crate::join::jws::{self, JwsError};
use crate::join::kubeconfig::{ClusterInfo, KubeconfigError};

/// Where kubeadm publishes the cluster's address and CA for joining nodes.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO_NAME: &str = "cluster-info";
/// The ConfigMap data key holding the kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// The prefix of the ConfigMap keys holding each token's signature of that kubeconfig.
pub const JWS_KEY_PREFIX: &str = "jws-kubeconfig-";

/// How the CA is authenticated.
#[derive(Debug, Clone, Copy)]
pub enum CaVerification<'a> {
    /// Trust the CA only if one of its certificates matches one of these pins.
    Pins(&'a [CaPin]),
    /// `--discovery-token-unsafe-skip-ca-verification`: the JWS alone vouches for the CA,
    /// which only proves the kubeconfig came from someone holding the token.
    UnsafeSkip,
}

/// Why discovery did not (yet) trust cluster-info.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "cluster-info has no '{KUBECONFIG_KEY}' entry; the cluster was not set up by kubeadm or the ConfigMap was damaged"
    )]
    NoKubeconfig,
    #[error(
        "cluster-info holds no signature for token id '{token_id}': the token is unknown, \
         expired, or not allowed for signing (usage-bootstrap-signing); ask for a new token"
    )]
    NoSignature { token_id: String },
    #[error(transparent)]
    Signature(#[from] JwsError),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error(
        "no CA pin given; pass --discovery-token-ca-cert-hash sha256:<hash> (or, knowingly, \
         --discovery-token-unsafe-skip-ca-verification)"
    )]
    NoPins,
    #[error(
        "the cluster CA does not match the pin: expected {expected}, the cluster presents \
         {found}; this may be an attack (someone between you and the API server) or a wrong \
         pin: check the join command you were given"
    )]
    PinMismatch { expected: String, found: String },
    #[error(
        "cluster-info read over the verified TLS connection differs from the signed copy; \
         someone may be tampering with the connection"
    )]
    ChangedOnRefetch,
}

impl DiscoveryError {
    /// Whether waiting and reading cluster-info again can help (kubeadm retries every 5 s).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::NoSignature { .. })
    }
}

/// Verifies cluster-info for token `token_id.token_secret`: the token's signature over the
/// kubeconfig bytes, the kubeconfig's shape, and the CA against the pins.
///
/// The returned CA bundle holds ONLY the pinned certificates (each certificate matching one
/// of the pins, in the bundle's order), re-encoded from DER so no text around them comes
/// along. A token that leaked lets anyone sign a cluster-info; one whose bundle holds the
/// real, pinned CA next to the signer's own must not get the signer's CA trusted for the
/// CA-verified read, nor written into the kubelet's files. Several pins (a CA rotation,
/// one `--discovery-token-ca-cert-hash` per CA) keep several certificates.
///
/// Without pins ([`CaVerification::UnsafeSkip`]) nothing can choose among the certificates:
/// the whole signed bundle is returned, as kubeadm trusts it. Whoever holds the token could
/// have signed any CA anyway; that is what "unsafe" means.
pub fn verify_cluster_info(
    data: &BTreeMap<String, String>,
    token_id: &str,
    token_secret: &str,
    ca: CaVerification<'_>,
) -> Result<ClusterInfo, DiscoveryError> {
    let kubeconfig = data
        .get(KUBECONFIG_KEY)
        .ok_or(DiscoveryError::NoKubeconfig)?;
    let signature =
        data.get(&jws::configmap_key(token_id))
            .ok_or_else(|| DiscoveryError::NoSignature {
                token_id: token_id.to_string(),
            })?;
    jws::verify(token_id, token_secret, kubeconfig.as_bytes(), signature)?;
    let mut info = ClusterInfo::from_kubeconfig(kubeconfig)?;
    match ca {
        CaVerification::UnsafeSkip => {}
        CaVerification::Pins([]) => return Err(DiscoveryError::NoPins),
        CaVerification::Pins(pins) => {
            let pinned: Vec<Vec<u8>> = info
                .ca_certs_der
                .iter()
                .filter(|der| CaPin::from_cert_der(der).is_ok_and(|pin| pins.contains(&pin)))
                .cloned()
                .collect();
            if pinned.is_empty() {
                let list = |pins: &mut dyn Iterator<Item = CaPin>| {
                    pins.map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                };
                let found = info
                    .ca_certs_der
                    .iter()
                    .filter_map(|c| CaPin::from_cert_der(c).ok());
                return Err(DiscoveryError::PinMismatch {
                    expected: list(&mut pins.iter().copied()),
                    found: list(&mut { found }),
                });
            }
            info.ca_certs_der = pinned;
        }
    }
    info.ca_pem = info
        .ca_certs_der
        .iter()
        .flat_map(|der| {
            crate::crypto::keys::encode_pem("CERTIFICATE", der)
                .as_bytes()
                .to_vec()
        })
        .collect();
    Ok(info)
}

/// kubeadm's last discovery step: the kubeconfig read again over TLS verified by the
/// discovered CA must be byte-identical to the signed one.
pub fn check_refetch_identical(signed: &str, refetched: &str) -> Result<(), DiscoveryError> {
    if signed.as_bytes() == refetched.as_bytes() {
        Ok(())
    } else {
        Err(DiscoveryError::ChangedOnRefetch)
    }
}
