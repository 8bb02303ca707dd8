//! `[discovery]`: learn the cluster's API server and CA from `kube-public/cluster-info`
//! without trusting the network, exactly as `kubeadm join` does
//! (`cmd/kubeadm/app/discovery/token`: a JWS of the token over the kubeconfig, and the CA
//! pinned by its public key hash).
//!
//! 1. Anonymous GET of cluster-info WITHOUT verifying the server certificate (the node does
//!    not know the CA yet), retried until the bootstrapsigner has added
//!    `jws-kubeconfig-<token id>` or the timeout passes.
//! 2. Verify that detached JWS with the token secret: only someone holding the token (the
//!    cluster) could have signed this kubeconfig.
//! 3. Check the pin (`--discovery-token-ca-cert-hash`) against the CA certificates the
//!    kubeconfig names: the JWS alone proves nothing to a node whose token leaked. From
//!    here on only the pinned certificates exist: whoever signed with a leaked token may
//!    have put its own CA next to the real one.
//! 4. Fetch cluster-info again over TLS verified by those certificates and require the very
//!    same `kubeconfig` bytes.
//!
//! The first read is unauthenticated, so what it may cost is bounded: a cluster-info
//! answer larger than [`MAX_CLUSTER_INFO_BYTES`](super::fetch::MAX_CLUSTER_INFO_BYTES) is
//! refused as it streams in.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::token::{BootstrapToken, TokenId};
use tokio::time::Instant;

use super::Report;
use super::fetch::{
    LastProblem, MAX_CLUSTER_INFO, PollFailure, error_chain, fetch_cluster_info, human_duration,
    poll_for_signature,
};

pub use super::fetch::{CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE, JWS_KEY_PREFIX, KUBECONFIG_KEY};

/// How the cluster CA is authenticated.
#[derive(Clone, Debug)]
pub enum CaCheck {
    /// At least one CA certificate in cluster-info must have one of these public keys.
    Pinned(Vec<CaPin>),
    /// `--discovery-token-unsafe-skip-ca-verification`: trust whatever CA the (token
    /// signed) cluster-info names. Anyone who knows the token can impersonate the cluster.
    UnsafeSkip,
}

/// What discovery needs.
pub struct DiscoveryConfig {
    /// `https://host:port` built from the join endpoint.
    pub endpoint: http::Uri,
    pub token: BootstrapToken,
    pub ca_check: CaCheck,
    /// Discovery gives up after this long (kubeadm: 5 minutes).
    pub timeout: Duration,
    /// Wait between two reads of cluster-info (kubeadm: 5 seconds).
    pub retry_interval: Duration,
}

/// The cluster as discovery authenticated it.
#[derive(Clone, Debug)]
pub struct DiscoveredCluster {
    /// The API server URL cluster-info names (not necessarily the join endpoint: behind a
    /// load balancer they differ, and the kubelet must use this one).
    pub server: String,
    /// The CA certificates to trust, as a PEM bundle: with pins, only the certificates of
    /// `certificate-authority-data` that match a pin; without, all of them. This is what
    /// bootstrap-kubelet.conf, kubelet.conf and pki/ca.crt hold.
    pub ca_pem: Vec<u8>,
    /// The same certificates as DER, to verify TLS with.
    pub ca_certs_der: Vec<Vec<u8>>,
    /// Whether the CA was checked against a pin.
    pub pinned: bool,
}

/// Why discovery failed. Each variant is one thing a user can fix; `join` maps each to its
/// own exit code.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "could not reach the API server at {endpoint} within {timeout}: {cause} (check the address and port, and that this machine can reach it)"
    )]
    Unreachable {
        endpoint: String,
        timeout: String,
        cause: String,
    },
    #[error(
        "the cluster-info ConfigMap is not readable anonymously at {endpoint}: {message} (the cluster must let system:anonymous get kube-public/cluster-info, as kubeadm init sets up)"
    )]
    ClusterInfoForbidden { endpoint: String, message: String },
    #[error(
        "the API server at {endpoint} has no usable kube-public/cluster-info ConfigMap{detail} (this cluster is not set up for token bootstrapping; ask its administrator)"
    )]
    NoClusterInfo { endpoint: String, detail: String },
    #[error(
        "the token is invalid or expired: cluster-info carries no signature for token id {token_id}{waited} (create a new token on the control plane, e.g. 'kubeflavor token create --print-join-command')"
    )]
    NoSignature {
        token_id: TokenId,
        /// ` after 5m` when discovery waited for it.
        waited: String,
    },
    #[error("cannot set up the HTTPS client for {endpoint}: {cause}")]
    Client { endpoint: String, cause: String },
    /// A signature for the token's id exists but does not verify with its secret: the
    /// secret part of the token is wrong, or someone without the token changed
    /// cluster-info. Nothing tells the two apart; the second is the one that matters.
    #[error(
        "cluster-info's signature for token id {token_id} does not verify with this token's secret: either the token's secret is wrong, or cluster-info was changed by someone who does not hold the token; this may be an attack (compare the token with the one you were given; if it is exactly that, do not join through this endpoint and tell the cluster's administrator)"
    )]
    BadSignature { token_id: TokenId },
    #[error(
        "the cluster-info answer is larger than {limit} (a real one is a few KiB), so it was not read further; the endpoint {endpoint} is not a Kubernetes API server serving kubeadm's cluster-info, or someone is in the way (check the endpoint)"
    )]
    ClusterInfoTooLarge { endpoint: String, limit: String },
    #[error(
        "cluster-info's kubeconfig is not usable: {0} (the cluster's kube-public/cluster-info is damaged; ask its administrator)"
    )]
    BadKubeconfig(String),
    #[error(
        "the cluster CA does not match the pin; this may be an attack (expected {expected}, the cluster presented {found}; check --discovery-token-ca-cert-hash against 'kubeflavor token create --print-join-command' on the control plane)"
    )]
    PinMismatch { expected: String, found: String },
    #[error(
        "the API server at {endpoint} did not prove it holds the pinned cluster CA: {cause}; this may be an attack (the server's certificate must be signed by the CA in cluster-info)"
    )]
    VerifiedFetchFailed { endpoint: String, cause: String },
    #[error(
        "cluster-info changed between the unverified and the CA-verified read; this may be an attack (retry; if it persists, do not join this cluster)"
    )]
    ClusterInfoChanged,
}

/// Runs the whole discovery. Progress lines go to `report`; the token secret never does.
pub async fn discover(
    cfg: &DiscoveryConfig,
    report: &mut dyn Report,
) -> Result<DiscoveredCluster, DiscoveryError> {
    let endpoint = cfg.endpoint.to_string();
    let deadline = Instant::now() + cfg.timeout;
    let token_id = cfg.token.id().clone();

    report.info(&format!(
        "[discovery] Created cluster-info discovery client, requesting info from {endpoint:?}"
    ));
    report.info(&format!(
        "[discovery] Waiting for the cluster-info ConfigMap to receive a JWS signature for token ID {:?}",
        token_id.as_str()
    ));
    let insecure = insecure_client(&cfg.endpoint)?;
    let first = poll_for_signature(
        || fetch_cluster_info(insecure.clone()),
        &token_id,
        deadline,
        cfg.retry_interval,
        report,
    )
    .await
    .map_err(|f| f.into_error(&endpoint, &token_id, cfg.timeout))?;

    let (kubeconfig_text, cluster) = authenticate(&first, &cfg.token, &cfg.ca_check, &endpoint)?;
    match &cfg.ca_check {
        CaCheck::UnsafeSkip => warn_unpinned(&cluster, &endpoint, report),
        CaCheck::Pinned(_) => {
            reread_verified(cfg, &cluster, &kubeconfig_text, deadline, report).await?;
        }
    }
    Ok(cluster)
}

/// Nothing chose these CAs but whoever signed with the token: name each by its pin, so the
/// administrator can check them and pin them next time.
fn warn_unpinned(cluster: &DiscoveredCluster, endpoint: &str, report: &mut dyn Report) {
    let pins: Vec<String> = cluster
        .ca_certs_der
        .iter()
        .filter_map(|der| CaPin::from_cert_der(der).ok())
        .map(|pin| pin.to_string())
        .collect();
    report.warn(&format!(
        "WARNING: without a pin, trusting the CA certificates cluster-info names: {} (check them with the cluster's administrator; pass them as --discovery-token-ca-cert-hash next time)",
        pins.join(", ")
    ));
    report.info(&format!(
        "[discovery] Cluster info signature and contents are valid and no TLS pinning was specified, will use API Server {endpoint:?}"
    ));
}

/// Reads cluster-info again over TLS verified by the pinned CA: the server must hold that
/// CA, and serve the same kubeconfig the token signed.
async fn reread_verified(
    cfg: &DiscoveryConfig,
    cluster: &DiscoveredCluster,
    kubeconfig_text: &str,
    deadline: Instant,
    report: &mut dyn Report,
) -> Result<(), DiscoveryError> {
    let endpoint = cfg.endpoint.to_string();
    report.info(&format!(
        "[discovery] Requesting info from {endpoint:?} again to validate TLS against the pinned public key"
    ));
    let secure = verified_client(&cfg.endpoint, &cluster.ca_certs_der)?;
    let second = poll_for_signature(
        || fetch_cluster_info(secure.clone()),
        cfg.token.id(),
        deadline,
        cfg.retry_interval,
        report,
    )
    .await
    .map_err(|f| f.into_verified_error(&endpoint))?;
    require_same_kubeconfig(kubeconfig_text, &second)?;
    report.info(&format!(
        "[discovery] Cluster info signature and contents are valid and TLS certificate validates against pinned roots, will use API Server {endpoint:?}"
    ));
    Ok(())
}

/// kubeadm's checks of one read of cluster-info, made by core's
/// [`verify_cluster_info`](kubeflavor_core::join::discovery::verify_cluster_info): the token's
/// detached JWS over the kubeconfig bytes, the kubeconfig's shape, and (with pins) at least
/// one CA certificate carrying a pinned key (kubeadm's `CheckAny`: during a CA rotation
/// cluster-info carries old and new CA). Returns the signed kubeconfig text and the cluster,
/// whose CA certificates are the pinned ones only.
pub fn authenticate(
    data: &BTreeMap<String, String>,
    token: &BootstrapToken,
    ca_check: &CaCheck,
    endpoint: &str,
) -> Result<(String, DiscoveredCluster), DiscoveryError> {
    use kubeflavor_core::join::discovery::{
        CaVerification, DiscoveryError as Core, verify_cluster_info,
    };
    let ca = match ca_check {
        CaCheck::Pinned(pins) => CaVerification::Pins(pins),
        CaCheck::UnsafeSkip => CaVerification::UnsafeSkip,
    };
    let info = verify_cluster_info(data, token.id().as_str(), token.secret().expose(), ca)
        .map_err(|e| match e {
            Core::NoKubeconfig => DiscoveryError::NoClusterInfo {
                endpoint: endpoint.to_string(),
                detail: format!(" (it has no {KUBECONFIG_KEY:?} key)"),
            },
            Core::NoSignature { .. } => DiscoveryError::NoSignature {
                token_id: token.id().clone(),
                waited: String::new(),
            },
            Core::Signature(_) => DiscoveryError::BadSignature {
                token_id: token.id().clone(),
            },
            Core::Kubeconfig(e) => DiscoveryError::BadKubeconfig(e.to_string()),
            // An empty pin list: nothing can match, so nothing is trusted.
            Core::NoPins => DiscoveryError::PinMismatch {
                expected: "no pin at all".into(),
                found: "(not checked)".into(),
            },
            Core::PinMismatch { expected, found } => {
                DiscoveryError::PinMismatch { expected, found }
            }
            Core::ChangedOnRefetch => DiscoveryError::ClusterInfoChanged,
        })?;
    let text = data.get(KUBECONFIG_KEY).cloned().unwrap_or_default();
    let cluster = DiscoveredCluster {
        server: info.server,
        ca_pem: info.ca_pem,
        ca_certs_der: info.ca_certs_der,
        pinned: matches!(ca_check, CaCheck::Pinned(_)),
    };
    Ok((text, cluster))
}

/// The verified read must return the very bytes the signature covered: otherwise the first,
/// unverified answer came from someone else.
pub fn require_same_kubeconfig(
    first: &str,
    second: &BTreeMap<String, String>,
) -> Result<(), DiscoveryError> {
    let refetched = second
        .get(KUBECONFIG_KEY)
        .map(String::as_str)
        .unwrap_or_default();
    kubeflavor_core::join::discovery::check_refetch_identical(first, refetched)
        .map_err(|_| DiscoveryError::ClusterInfoChanged)
}

/// The errors of a poll that ended without a signature.
impl PollFailure {
    pub(super) fn into_error(
        self,
        endpoint: &str,
        token_id: &TokenId,
        timeout: Duration,
    ) -> DiscoveryError {
        let timeout = human_duration(timeout);
        match self {
            PollFailure::Forbidden(message) => DiscoveryError::ClusterInfoForbidden {
                endpoint: endpoint.to_string(),
                message,
            },
            PollFailure::TooLarge => too_large(endpoint),
            PollFailure::TimedOut(LastProblem::Unreachable(cause)) => DiscoveryError::Unreachable {
                endpoint: endpoint.to_string(),
                timeout,
                cause,
            },
            PollFailure::TimedOut(LastProblem::NoClusterInfo) => DiscoveryError::NoClusterInfo {
                endpoint: endpoint.to_string(),
                detail: String::new(),
            },
            PollFailure::TimedOut(LastProblem::NoSignature) => DiscoveryError::NoSignature {
                token_id: token_id.clone(),
                waited: format!(" after {timeout}"),
            },
        }
    }

    /// The error of the CA-verified read: the server could not show it holds the pinned
    /// CA, except for an oversized answer, which is that whatever the server.
    pub(super) fn into_verified_error(self, endpoint: &str) -> DiscoveryError {
        match self {
            PollFailure::TooLarge => too_large(endpoint),
            other => DiscoveryError::VerifiedFetchFailed {
                endpoint: endpoint.to_string(),
                cause: other.describe(),
            },
        }
    }
}

fn too_large(endpoint: &str) -> DiscoveryError {
    DiscoveryError::ClusterInfoTooLarge {
        endpoint: endpoint.to_string(),
        limit: MAX_CLUSTER_INFO.to_string(),
    }
}

/// Anonymous, and the ONLY client in kubeflavor that accepts any server certificate: the
/// node cannot know the CA before this read, and the JWS plus the pin check authenticate
/// what it returns.
pub(super) fn insecure_client(endpoint: &http::Uri) -> Result<Client, DiscoveryError> {
    let mut config = kube::Config::new(endpoint.clone());
    config.accept_invalid_certs = true;
    Client::try_from(config).map_err(|e| DiscoveryError::Client {
        endpoint: endpoint.to_string(),
        cause: error_chain(&e),
    })
}

pub(super) fn verified_client(
    endpoint: &http::Uri,
    ca_certs_der: &[Vec<u8>],
) -> Result<Client, DiscoveryError> {
    let mut config = kube::Config::new(endpoint.clone());
    config.root_cert = Some(ca_certs_der.to_vec());
    Client::try_from(config).map_err(|e| DiscoveryError::VerifiedFetchFailed {
        endpoint: endpoint.to_string(),
        cause: error_chain(&e),
    })
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    fn token() -> BootstrapToken {
        "abcdef.0123456789abcdef".parse().unwrap()
    }

    /// Two unrelated CA certificates (DER): the cluster CA and, say, the front-proxy CA.
    fn two_cas() -> (Vec<u8>, Vec<u8>) {
        let files = kubeflavor_core::crypto::pki::generate_shared_ca_set(
            kubeflavor_core::crypto::pki::KeyAlgorithm::EcdsaP256,
            jiff::Timestamp::now(),
        )
        .unwrap();
        let der = |name: &str| {
            let f = files.iter().find(|f| f.rel_path == name).unwrap();
            kubeflavor_core::crypto::keys::parse_certificates_pem(f.contents())
                .unwrap()
                .remove(0)
        };
        (der("ca.crt"), der("front-proxy-ca.crt"))
    }

    /// cluster-info as kubeadm publishes it and the API server serves it (an unnamed
    /// cluster, null lists)
    /// with these CA certificates, signed by the token with `secret`.
    fn cluster_info(cas: &[&[u8]], secret: &str) -> BTreeMap<String, String> {
        let pem: String = cas
            .iter()
            .map(|der| kubeflavor_core::crypto::keys::encode_pem("CERTIFICATE", der).to_string())
            .collect();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {}\n    server: https://192.0.2.10:6443\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n",
            STANDARD.encode(pem)
        );
        let jws = kubeflavor_core::join::jws::sign("abcdef", secret, kubeconfig.as_bytes());
        BTreeMap::from([
            (KUBECONFIG_KEY.to_string(), kubeconfig),
            (format!("{JWS_KEY_PREFIX}abcdef"), jws),
        ])
    }

    fn pinned(der: &[u8]) -> CaCheck {
        CaCheck::Pinned(vec![CaPin::from_cert_der(der).unwrap()])
    }

    #[test]
    fn signed_cluster_info_with_the_pinned_ca_is_trusted() {
        let (ca, _) = two_cas();
        let data = cluster_info(&[&ca], "0123456789abcdef");
        let (text, cluster) = authenticate(&data, &token(), &pinned(&ca), "e").unwrap();
        assert_eq!(text, data[KUBECONFIG_KEY]);
        assert_eq!(cluster.server, "https://192.0.2.10:6443");
        assert_eq!(cluster.ca_certs_der, vec![ca]);
        assert!(cluster.pinned);
    }

    #[test]
    fn signature_by_another_secret_is_a_wrong_secret_or_an_attack() {
        let (ca, _) = two_cas();
        let data = cluster_info(&[&ca], "fedcba9876543210");
        let err = authenticate(&data, &token(), &pinned(&ca), "e").unwrap_err();
        assert!(matches!(err, DiscoveryError::BadSignature { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("either the token's secret is wrong"),
            "{text}"
        );
        assert!(text.contains("this may be an attack"), "{text}");
        assert!(!text.contains("0123456789abcdef"), "{text}");
    }

    #[test]
    fn tampered_kubeconfig_fails_the_signature_even_without_a_pin() {
        let (ca, _) = two_cas();
        let mut data = cluster_info(&[&ca], "0123456789abcdef");
        let evil = data[KUBECONFIG_KEY].replace("192.0.2.10", "192.0.2.66");
        data.insert(KUBECONFIG_KEY.into(), evil);
        assert!(matches!(
            authenticate(&data, &token(), &CaCheck::UnsafeSkip, "e"),
            Err(DiscoveryError::BadSignature { .. })
        ));
    }

    #[test]
    fn missing_signature_or_kubeconfig_is_reported_as_such() {
        let (ca, _) = two_cas();
        let mut data = cluster_info(&[&ca], "0123456789abcdef");
        data.remove("jws-kubeconfig-abcdef");
        let err = authenticate(&data, &token(), &pinned(&ca), "e").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the token is invalid or expired"),
            "{err}"
        );
        let mut data = cluster_info(&[&ca], "0123456789abcdef");
        data.remove(KUBECONFIG_KEY);
        assert!(matches!(
            authenticate(&data, &token(), &pinned(&ca), "e"),
            Err(DiscoveryError::NoClusterInfo { .. })
        ));
    }

    #[test]
    fn ca_not_matching_the_pin_is_refused_as_a_possible_attack() {
        let (ca, other) = two_cas();
        let data = cluster_info(&[&ca], "0123456789abcdef");
        let err = authenticate(&data, &token(), &pinned(&other), "e").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("the cluster CA does not match the pin; this may be an attack"),
            "{text}"
        );
        assert!(
            text.contains(&CaPin::from_cert_der(&other).unwrap().to_string()),
            "{text}"
        );
        assert!(
            text.contains(&CaPin::from_cert_der(&ca).unwrap().to_string()),
            "{text}"
        );
        let nothing_pinned = CaCheck::Pinned(Vec::new());
        assert!(matches!(
            authenticate(&data, &token(), &nothing_pinned, "e"),
            Err(DiscoveryError::PinMismatch { .. })
        ));
    }

    #[test]
    fn any_pinned_ca_in_the_bundle_passes_and_only_it_is_kept() {
        let (ca, other) = two_cas();
        let data = cluster_info(&[&ca, &other], "0123456789abcdef");
        let unrelated: CaPin = format!("sha256:{}", "0".repeat(64)).parse().unwrap();
        let pins = CaCheck::Pinned(vec![unrelated, CaPin::from_cert_der(&other).unwrap()]);
        let (_, cluster) = authenticate(&data, &token(), &pins, "e").unwrap();
        assert_eq!(cluster.ca_certs_der, std::slice::from_ref(&other));
        assert_eq!(
            kubeflavor_core::crypto::keys::parse_certificates_pem(&cluster.ca_pem).unwrap(),
            [other]
        );
    }

    #[test]
    fn unusable_ca_data_is_a_damaged_cluster_info() {
        let (ca, _) = two_cas();
        let data = cluster_info(&[&ca], "0123456789abcdef");
        let broken = data[KUBECONFIG_KEY].replace(
            "certificate-authority-data: ",
            "certificate-authority-data: Zm9v",
        );
        let jws = kubeflavor_core::join::jws::sign("abcdef", "0123456789abcdef", broken.as_bytes());
        let data = BTreeMap::from([
            (KUBECONFIG_KEY.to_string(), broken),
            (format!("{JWS_KEY_PREFIX}abcdef"), jws),
        ]);
        assert!(matches!(
            authenticate(&data, &token(), &CaCheck::UnsafeSkip, "e"),
            Err(DiscoveryError::BadKubeconfig(_))
        ));
    }

    #[test]
    fn verified_read_must_return_the_same_bytes() {
        let text = "apiVersion: v1\n";
        let same = BTreeMap::from([(KUBECONFIG_KEY.to_string(), text.to_string())]);
        require_same_kubeconfig(text, &same).unwrap();
        let trailing_space = BTreeMap::from([(KUBECONFIG_KEY.to_string(), format!("{text} "))]);
        assert!(matches!(
            require_same_kubeconfig(text, &trailing_space),
            Err(DiscoveryError::ClusterInfoChanged)
        ));
        assert!(matches!(
            require_same_kubeconfig(text, &BTreeMap::new()),
            Err(DiscoveryError::ClusterInfoChanged)
        ));
    }
}
