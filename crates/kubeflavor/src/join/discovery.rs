//! `[discovery]`: learn the cluster's API server and CA from `kube-public/cluster-info`
//! without trusting the network, exactly as `kubeadm join` does (spec section 2).
//!
//! 1. Anonymous GET of cluster-info WITHOUT verifying the server certificate (the node does
//!    not know the CA yet), retried until the bootstrapsigner has added
//!    `jws-kubeconfig-<token id>` or the timeout passes.
//! 2. Verify that detached JWS with the token secret: only someone holding the token (the
//!    cluster) could have signed this kubeconfig.
//! 3. Check the pin (`--discovery-token-ca-cert-hash`) against the CA certificates the
//!    kubeconfig names: the JWS alone proves nothing to a node whose token leaked.
//! 4. Fetch cluster-info again over TLS verified by that CA and require the very same
//!    `kubeconfig` bytes.

use std::collections::BTreeMap;
use std::time::Duration;

use kubeflavor_core::pin::CaPin;
use kubeflavor_core::token::{BootstrapToken, TokenId};
use tokio::time::Instant;

use super::Report;
use super::fetch::{fetch_cluster_info, insecure_client, poll_for_signature, verified_client};

pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO_NAME: &str = "cluster-info";
pub const KUBECONFIG_KEY: &str = "kubeconfig";
pub const JWS_KEY_PREFIX: &str = "jws-kubeconfig-";

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
    /// `certificate-authority-data` exactly as published (a PEM bundle).
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
        "the token is invalid or expired: cluster-info carries no signature for token id {token_id} after {timeout} (create a new token on the control plane, e.g. 'kubeflavor token create --print-join-command')"
    )]
    NoSignature { token_id: TokenId, timeout: String },
    #[error(
        "the token is invalid: cluster-info's signature for token id {token_id} does not verify with this token's secret, so this API server cannot be trusted (check the token; create a new one if it was mistyped)"
    )]
    BadSignature { token_id: TokenId },
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

    let kubeconfig_text = verify_signature(&first, &cfg.token, &endpoint)?;
    let cluster = parse_cluster_info(&kubeconfig_text)?;

    match &cfg.ca_check {
        CaCheck::UnsafeSkip => {
            report.info(&format!(
                "[discovery] Cluster info signature and contents are valid and no TLS pinning was specified, will use API Server {endpoint:?}"
            ));
            Ok(DiscoveredCluster {
                pinned: false,
                ..cluster
            })
        }
        CaCheck::Pinned(pins) => {
            check_pins(pins, &cluster.ca_certs_der)?;
            report.info(&format!(
                "[discovery] Requesting info from {endpoint:?} again to validate TLS against the pinned public key"
            ));
            let secure = verified_client(&cfg.endpoint, &cluster.ca_certs_der)?;
            let second = poll_for_signature(
                || fetch_cluster_info(secure.clone()),
                &token_id,
                deadline,
                cfg.retry_interval,
                report,
            )
            .await
            .map_err(|f| DiscoveryError::VerifiedFetchFailed {
                endpoint: endpoint.clone(),
                cause: f.describe(),
            })?;
            require_same_kubeconfig(&kubeconfig_text, &second)?;
            report.info(&format!(
                "[discovery] Cluster info signature and contents are valid and TLS certificate validates against pinned roots, will use API Server {endpoint:?}"
            ));
            Ok(DiscoveredCluster {
                pinned: true,
                ..cluster
            })
        }
    }
}

/// The detached JWS over `kubeconfig` must verify with the token (spec section 2).
/// Returns the signed kubeconfig text.
pub fn verify_signature(
    data: &BTreeMap<String, String>,
    token: &BootstrapToken,
    endpoint: &str,
) -> Result<String, DiscoveryError> {
    let kubeconfig = match data.get(KUBECONFIG_KEY) {
        Some(k) if !k.is_empty() => k,
        _ => {
            return Err(DiscoveryError::NoClusterInfo {
                endpoint: endpoint.to_string(),
                detail: format!(" (it has no {KUBECONFIG_KEY:?} key)"),
            });
        }
    };
    let token_id = token.id();
    let jws = data
        .get(&format!("{JWS_KEY_PREFIX}{}", token_id.as_str()))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| DiscoveryError::NoSignature {
            token_id: token_id.clone(),
            timeout: "0s".into(),
        })?;
    kubeflavor_core::jws::verify(
        token_id.as_str(),
        token.secret().expose(),
        kubeconfig.as_bytes(),
        jws,
    )
    .map_err(|_| DiscoveryError::BadSignature {
        token_id: token_id.clone(),
    })?;
    Ok(kubeconfig.clone())
}

/// The one cluster of the signed kubeconfig: its server and CA certificates.
pub fn parse_cluster_info(kubeconfig_text: &str) -> Result<DiscoveredCluster, DiscoveryError> {
    let info = kubeflavor_core::kubeconfig::ClusterInfo::from_kubeconfig(kubeconfig_text)
        .map_err(|e| DiscoveryError::BadKubeconfig(e.to_string()))?;
    Ok(DiscoveredCluster {
        server: info.server,
        ca_pem: info.ca_pem,
        ca_certs_der: info.ca_certs_der,
        pinned: false,
    })
}

/// Passes when at least one CA certificate has a pinned public key (kubeadm's
/// `pubKeyPins.CheckAny`): during a CA rotation cluster-info carries old and new CA.
pub fn check_pins(pins: &[CaPin], ca_certs_der: &[Vec<u8>]) -> Result<(), DiscoveryError> {
    if pins.iter().any(|pin| pin.matches_any(ca_certs_der)) {
        return Ok(());
    }
    let expected = pins
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" or ");
    let found: Vec<String> = ca_certs_der
        .iter()
        .map(|der| {
            CaPin::from_cert_der(der)
                .map(|p| p.to_string())
                .unwrap_or_else(|_| "an unparsable certificate".into())
        })
        .collect();
    let found = if found.is_empty() {
        "no CA certificate at all".to_string()
    } else {
        found.join(", ")
    };
    Err(DiscoveryError::PinMismatch { expected, found })
}

/// The verified read must return the very bytes the signature covered: otherwise the first,
/// unverified answer came from someone else.
pub fn require_same_kubeconfig(
    first: &str,
    second: &BTreeMap<String, String>,
) -> Result<(), DiscoveryError> {
    match second.get(KUBECONFIG_KEY) {
        Some(k) if k.as_bytes() == first.as_bytes() => Ok(()),
        _ => Err(DiscoveryError::ClusterInfoChanged),
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://192.0.2.10:6443\n";

    fn token() -> BootstrapToken {
        "abcdef.0123456789abcdef".parse().unwrap()
    }

    fn signed_data(secret: &str) -> BTreeMap<String, String> {
        let jws = kubeflavor_core::jws::sign("abcdef", secret, KUBECONFIG.as_bytes());
        BTreeMap::from([
            (KUBECONFIG_KEY.to_string(), KUBECONFIG.to_string()),
            (format!("{JWS_KEY_PREFIX}abcdef"), jws),
        ])
    }

    #[test]
    fn signature_by_the_token_verifies() {
        let text = verify_signature(&signed_data("0123456789abcdef"), &token(), "e").unwrap();
        assert_eq!(text, KUBECONFIG);
    }

    #[test]
    fn signature_by_another_secret_is_an_invalid_token() {
        let err = verify_signature(&signed_data("fedcba9876543210"), &token(), "e").unwrap_err();
        assert!(matches!(err, DiscoveryError::BadSignature { .. }), "{err}");
        assert!(err.to_string().contains("the token is invalid"), "{err}");
    }

    #[test]
    fn tampered_kubeconfig_fails_the_signature() {
        let mut data = signed_data("0123456789abcdef");
        data.insert(
            KUBECONFIG_KEY.into(),
            KUBECONFIG.replace("192.0.2.10", "192.0.2.66"),
        );
        assert!(matches!(
            verify_signature(&data, &token(), "e"),
            Err(DiscoveryError::BadSignature { .. })
        ));
    }

    #[test]
    fn missing_signature_or_kubeconfig_is_reported_as_such() {
        let mut data = signed_data("0123456789abcdef");
        data.remove("jws-kubeconfig-abcdef");
        let err = verify_signature(&data, &token(), "e").unwrap_err();
        assert!(
            err.to_string().contains("the token is invalid or expired"),
            "{err}"
        );
        let mut data = signed_data("0123456789abcdef");
        data.remove(KUBECONFIG_KEY);
        assert!(matches!(
            verify_signature(&data, &token(), "e"),
            Err(DiscoveryError::NoClusterInfo { .. })
        ));
    }

    #[test]
    fn verified_read_must_return_the_same_bytes() {
        let same = BTreeMap::from([(KUBECONFIG_KEY.to_string(), KUBECONFIG.to_string())]);
        require_same_kubeconfig(KUBECONFIG, &same).unwrap();
        let trailing_space =
            BTreeMap::from([(KUBECONFIG_KEY.to_string(), format!("{KUBECONFIG} "))]);
        assert!(matches!(
            require_same_kubeconfig(KUBECONFIG, &trailing_space),
            Err(DiscoveryError::ClusterInfoChanged)
        ));
        assert!(matches!(
            require_same_kubeconfig(KUBECONFIG, &BTreeMap::new()),
            Err(DiscoveryError::ClusterInfoChanged)
        ));
    }

    fn two_cas() -> (Vec<u8>, Vec<u8>) {
        let files = kubeflavor_core::pki::generate_shared_ca_set(
            kubeflavor_core::pki::KeyAlgorithm::EcdsaP256,
            jiff::Timestamp::now(),
        )
        .unwrap();
        let der = |name: &str| {
            let f = files.iter().find(|f| f.rel_path == name).unwrap();
            kubeflavor_core::keys::parse_certificates_pem(f.contents())
                .unwrap()
                .remove(0)
        };
        (der("ca.crt"), der("front-proxy-ca.crt"))
    }

    #[test]
    fn reads_cluster_info_as_kubeadm_publishes_it() {
        // Capture 27's shape: an unnamed cluster, null contexts and users.
        let (ca, _) = two_cas();
        let pem = kubeflavor_core::keys::encode_pem("CERTIFICATE", &ca);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {}\n    server: https://127.0.0.1:6443\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem.as_bytes())
        );
        let cluster = parse_cluster_info(&text).unwrap();
        assert_eq!(cluster.server, "https://127.0.0.1:6443");
        assert_eq!(cluster.ca_certs_der, vec![ca]);
        assert_eq!(cluster.ca_pem, pem.as_bytes());
        let broken = text.replace(
            "certificate-authority-data: ",
            "certificate-authority-data: Zm9v",
        );
        assert!(matches!(
            parse_cluster_info(&broken),
            Err(DiscoveryError::BadKubeconfig(_))
        ));
    }

    #[test]
    fn pin_of_the_cluster_ca_passes() {
        let (ca, _) = two_cas();
        let pin = CaPin::from_cert_der(&ca).unwrap();
        check_pins(&[pin], std::slice::from_ref(&ca)).unwrap();
    }

    #[test]
    fn ca_not_matching_the_pin_is_refused_as_a_possible_attack() {
        let (ca, other) = two_cas();
        let pin = CaPin::from_cert_der(&other).unwrap();
        let err = check_pins(&[pin], std::slice::from_ref(&ca)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("the cluster CA does not match the pin; this may be an attack"),
            "{text}"
        );
        assert!(text.contains(&pin.to_string()), "{text}");
        assert!(
            text.contains(&CaPin::from_cert_der(&ca).unwrap().to_string()),
            "{text}"
        );
        assert!(check_pins(&[pin], &Vec::<Vec<u8>>::new()).is_err());
    }

    #[test]
    fn any_pinned_ca_in_the_bundle_passes_as_during_a_rotation() {
        let (ca, other) = two_cas();
        let pin_new = CaPin::from_cert_der(&other).unwrap();
        let unrelated: CaPin = format!("sha256:{}", "0".repeat(64)).parse().unwrap();
        check_pins(&[unrelated, pin_new], &[ca, other]).unwrap();
    }
}
