//! The kubelet's part of TLS bootstrap, for `kubeflavor join --tls-bootstrap`: an ECDSA P-256
//! key and a CSR shaped exactly like the kubelet's.
//!
//! Like the kubelet's `certutil.MakeCSR`, the PEM carries only the subject
//! (`O=system:nodes, CN=system:node:<name>`) and the public key: no SANs and no requested
//! extensions. The usages are requested through the CertificateSigningRequest object's
//! `spec.usages` ([`KUBELET_CLIENT_USAGES`]), which is what the signer reads.

use std::fmt;

use rcgen::{CertificateParams, DnType};
use zeroize::Zeroizing;

use crate::crypto::keys::PrivateKeyForm;
use crate::crypto::pki::{KeyAlgorithm, PkiError, generate_key, private_key_pem};
use crate::names::check_dns1123_subdomain;

pub use crate::csr::client::{KUBELET_CLIENT_SIGNER, NODE_USER_PREFIX, NODES_GROUP};
use crate::csr::client::{USAGE_CLIENT_AUTH, USAGE_DIGITAL_SIGNATURE, USAGE_KEY_ENCIPHERMENT};

/// `spec.usages` of the CSR: what the kubelet itself sends (one of the two sets the
/// kube-controller-manager approver accepts: with or without key encipherment).
pub const KUBELET_CLIENT_USAGES: [&str; 3] = [
    USAGE_DIGITAL_SIGNATURE,
    USAGE_KEY_ENCIPHERMENT,
    USAGE_CLIENT_AUTH,
];

/// A kubelet client key and its CSR. The key PEM is zeroized and never shown by Debug.
pub struct KubeletCsr {
    csr_pem: String,
    key_pem: Zeroizing<Vec<u8>>,
}

impl KubeletCsr {
    /// The `CERTIFICATE REQUEST` PEM for `spec.request` (base64 on the wire).
    pub fn csr_pem(&self) -> &str {
        &self.csr_pem
    }

    /// The `EC PRIVATE KEY` PEM, as the kubelet writes it, for kubelet.conf.
    pub fn key_pem(&self) -> &[u8] {
        &self.key_pem
    }
}

impl fmt::Debug for KubeletCsr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeletCsr")
            .field("csr_pem", &self.csr_pem)
            .field("key_pem", &"****")
            .finish()
    }
}

/// Why a kubelet CSR could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeletCsrError {
    #[error(
        "node name '{0}' is not a valid Kubernetes node name (lowercase letters, digits, '-' \
         and '.', starting and ending with a letter or digit, at most 253 characters)"
    )]
    InvalidNodeName(String),
    #[error(transparent)]
    Key(#[from] PkiError),
    #[error("the CSR could not be built: {0}")]
    Csr(String),
}

/// Generates a fresh ECDSA P-256 key and the CSR for node `node_name`.
pub fn generate_kubelet_csr(node_name: &str) -> Result<KubeletCsr, KubeletCsrError> {
    if check_dns1123_subdomain(node_name).is_err() {
        return Err(KubeletCsrError::InvalidNodeName(node_name.to_string()));
    }
    let key = generate_key(KeyAlgorithm::EcdsaP256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, NODES_GROUP);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{NODE_USER_PREFIX}{node_name}"));
    let csr = params
        .serialize_request(&key.0)
        .map_err(|e| KubeletCsrError::Csr(e.to_string()))?;
    let csr_pem = csr.pem().map_err(|e| KubeletCsrError::Csr(e.to_string()))?;
    Ok(KubeletCsr {
        csr_pem,
        key_pem: private_key_pem(&key, PrivateKeyForm::Sec1)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::keys::PrivateKey;
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::prelude::FromDer;

    fn parse_csr_der(pem: &str) -> Vec<u8> {
        let blocks = crate::crypto::pem::decode_all(pem.as_bytes()).unwrap();
        assert_eq!(blocks[0].label, "CERTIFICATE REQUEST");
        blocks[0].der.to_vec()
    }

    #[test]
    fn csr_has_the_kubelet_client_shape() {
        let csr = generate_kubelet_csr("worker-1").unwrap();
        let der = parse_csr_der(csr.csr_pem());
        let (rest, req) = X509CertificationRequest::from_der(&der).unwrap();
        assert!(rest.is_empty());
        req.verify_signature().unwrap();
        let info = &req.certification_request_info;
        let orgs: Vec<&str> = info
            .subject
            .iter_organization()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert_eq!(orgs, vec!["system:nodes"]);
        let cns: Vec<&str> = info
            .subject
            .iter_common_name()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert_eq!(cns, vec!["system:node:worker-1"]);
        // No SANs of any kind, and no other requested extension (the approver refuses SANs).
        assert!(
            req.requested_extensions()
                .is_none_or(|mut e| e.next().is_none())
        );
        // P-256 public key.
        let spki = &info.subject_pki;
        assert_eq!(spki.algorithm.algorithm.to_id_string(), "1.2.840.10045.2.1");
        assert_eq!(
            spki.algorithm
                .parameters
                .as_ref()
                .unwrap()
                .as_oid()
                .unwrap()
                .to_id_string(),
            "1.2.840.10045.3.1.7"
        );
    }

    #[test]
    fn key_is_sec1_and_belongs_to_the_csr() {
        let csr = generate_kubelet_csr("worker-1").unwrap();
        assert!(
            std::str::from_utf8(csr.key_pem())
                .unwrap()
                .starts_with("-----BEGIN EC PRIVATE KEY-----\n")
        );
        let key = PrivateKey::from_pem(csr.key_pem()).unwrap();
        let der = parse_csr_der(csr.csr_pem());
        let (_, req) = X509CertificationRequest::from_der(&der).unwrap();
        let csr_key = crate::crypto::keys::PublicKey::from_spki_der(
            req.certification_request_info.subject_pki.raw,
        )
        .unwrap();
        assert!(key.matches_public_key(&csr_key));
    }

    #[test]
    fn each_csr_has_a_fresh_key() {
        let a = generate_kubelet_csr("n").unwrap();
        let b = generate_kubelet_csr("n").unwrap();
        assert_ne!(a.key_pem(), b.key_pem());
    }

    #[test]
    fn debug_hides_the_private_key() {
        let csr = generate_kubelet_csr("worker-1").unwrap();
        let shown = format!("{csr:?}");
        assert!(!shown.contains("EC PRIVATE KEY"), "{shown}");
    }

    #[test]
    fn invalid_node_names_are_refused() {
        for bad in ["", "Worker", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(
                matches!(
                    generate_kubelet_csr(bad),
                    Err(KubeletCsrError::InvalidNodeName(_))
                ),
                "{bad}"
            );
        }
        assert!(generate_kubelet_csr("node-1.example.com").is_ok());
    }
}
