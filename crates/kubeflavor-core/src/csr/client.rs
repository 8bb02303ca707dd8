//! Kubelet client CSRs: parse the PEM request and validate it exactly as Kubernetes'
//! `ValidateKubeletClientCSR` (pkg/apis/certificates/v1) does, yielding the node name and
//! the SHA-256 of the public key the certificate will carry.
//!
//! The name comes from the request's common name, never from anything the requester can
//! choose separately, so the policy compares one value everywhere (P3, binding).

use std::collections::BTreeSet;
use std::fmt;

use sha2::{Digest, Sha256};
use x509_parser::cri_attributes::ParsedCriAttribute;
use x509_parser::prelude::{
    FromDer, X509CertificationRequest, X509CertificationRequestInfo, X509Name,
};

use crate::names::{NodeName, NodeNameError};

/// `spec.signerName` of a kubelet client CSR.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Common-name prefix of a node identity: `system:node:<name>`.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The one organization a kubelet client certificate carries.
pub const NODES_GROUP: &str = "system:nodes";
/// PEM label of a certificate request.
pub const CSR_PEM_LABEL: &str = "CERTIFICATE REQUEST";
/// `spec.usages` values of a kubelet client CSR.
pub const USAGE_DIGITAL_SIGNATURE: &str = "digital signature";
pub const USAGE_KEY_ENCIPHERMENT: &str = "key encipherment";
pub const USAGE_CLIENT_AUTH: &str = "client auth";

/// The most bytes of a CSR's `spec.request` (the decoded PEM) that is parsed at all. A
/// kubelet's request is under 2 KiB (an ECDSA P-256 one about 500 bytes of PEM, an RSA-4096
/// one about 1.7 KiB); 64 KiB leaves room for any legitimate key and attribute set, while an
/// API server accepts CSR objects up to its ~1.5 MB object limit, and every pending CSR is
/// parsed on every controller pass. Larger requests are refused before any parsing.
pub const MAX_CSR_REQUEST_BYTES: usize = 64 * 1024;

/// The most subject alternative names a kubelet client CSR may ask for: none. Any SAN
/// extension, even an empty or unreadable one, is refused ([`CsrError::SubjectAltNames`]),
/// so no SAN list is ever walked.
pub const MAX_CSR_SUBJECT_ALT_NAMES: usize = 0;

pub(crate) const OID_EXTENSION_REQUEST: &str = "1.2.840.113549.1.9.14";
pub(crate) const OID_SUBJECT_ALT_NAME: &str = "2.5.29.17";

/// A CSR that passed every kubelet-client rule.
#[derive(Clone, PartialEq, Eq)]
pub struct KubeletClientCsr {
    /// The `<name>` of the common name `system:node:<name>`.
    pub node_name: NodeName,
    /// SHA-256 over the DER SubjectPublicKeyInfo of the requested key.
    pub public_key_sha256: [u8; 32],
}

impl KubeletClientCsr {
    /// The key fingerprint as lowercase hex (the FlavorBinding's public-key SHA-256).
    pub fn public_key_sha256_hex(&self) -> String {
        hex::encode(self.public_key_sha256)
    }
}

impl fmt::Debug for KubeletClientCsr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeletClientCsr")
            .field("node_name", &self.node_name)
            .field("public_key_sha256", &self.public_key_sha256_hex())
            .finish()
    }
}

/// The first kubelet-client rule a CSR breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    #[error("signerName is {0:?}, not {KUBELET_CLIENT_SIGNER}")]
    WrongSigner(String),
    #[error(
        "spec.request is {0} bytes; at most {MAX_CSR_REQUEST_BYTES} are read (a kubelet's request is under 2 KiB)"
    )]
    TooLarge(usize),
    #[error("spec.request is not a PEM block")]
    NotPem,
    #[error("spec.request holds a PEM {0:?} block, not {CSR_PEM_LABEL:?}")]
    WrongPemType(String),
    #[error("spec.request is not a DER PKCS#10 certification request: {0}")]
    NotPkcs10(String),
    #[error("the request's signature does not verify with its own public key")]
    BadSignature,
    #[error("the request's subject has a field that is not a string")]
    SubjectEncoding,
    #[error("subject organization is {0:?}; a kubelet client CSR has exactly [\"system:nodes\"]")]
    Organization(Vec<String>),
    #[error("subject has {0} common names; a kubelet client CSR has exactly one")]
    CommonNameCount(usize),
    #[error("common name {0:?} does not start with system:node:")]
    CommonNamePrefix(String),
    #[error("common name names an invalid node: {0}")]
    NodeName(NodeNameError),
    #[error("the request asks for subject alternative names; a kubelet client CSR has none")]
    SubjectAltNames,
    #[error(
        "usages are {0:?}; a kubelet client CSR asks for exactly [digital signature, key encipherment, client auth] or [digital signature, client auth]"
    )]
    Usages(Vec<String>),
}

impl CsrError {
    /// Whether the request could not even be read (as opposed to a readable request of the
    /// wrong shape).
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            CsrError::TooLarge(_)
                | CsrError::NotPem
                | CsrError::WrongPemType(_)
                | CsrError::NotPkcs10(_)
                | CsrError::BadSignature
                | CsrError::SubjectEncoding
        )
    }
}

fn usages_are_kubelet_client(usages: &[String]) -> bool {
    let set: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let with_rsa = BTreeSet::from([
        USAGE_DIGITAL_SIGNATURE,
        USAGE_KEY_ENCIPHERMENT,
        USAGE_CLIENT_AUTH,
    ]);
    let without_rsa = BTreeSet::from([USAGE_DIGITAL_SIGNATURE, USAGE_CLIENT_AUTH]);
    set == with_rsa || set == without_rsa
}

/// Validates a CSR object's fields as a kubelet client CSR: `signer_name` and `usages` from
/// its spec, `request_pem` the decoded `spec.request`. A request above
/// [`MAX_CSR_REQUEST_BYTES`] is refused before it is parsed.
///
/// Parsing is x509-parser's (asn1-rs underneath): it reads DER iteratively where it can and
/// bounds the recursion of nested unknown contents at asn1-rs's `MAX_RECURSION` (50), so
/// deep nesting ends in an error, not a stack overflow.
pub fn validate_kubelet_client_csr(
    signer_name: &str,
    request_pem: &[u8],
    usages: &[String],
) -> Result<KubeletClientCsr, CsrError> {
    if signer_name != KUBELET_CLIENT_SIGNER {
        return Err(CsrError::WrongSigner(signer_name.to_owned()));
    }
    let pem = request_block(request_pem)?;
    let req = signed_request(&pem)?;
    let info = &req.certification_request_info;
    check_organization(&info.subject)?;
    refuse_subject_alt_names(info)?;
    let node_name = node_name_of(&info.subject)?;
    if !usages_are_kubelet_client(usages) {
        return Err(CsrError::Usages(usages.to_vec()));
    }
    Ok(KubeletClientCsr {
        node_name,
        public_key_sha256: Sha256::digest(info.subject_pki.raw).into(),
    })
}

/// The PKCS#10 request of `pem`, once its signature verifies with its own key: proof of
/// possession, without which the key fingerprint a binding records would mean nothing.
/// (x509-parser's `verify` is enabled through rcgen's aws_lc_rs feature in this workspace.)
pub(crate) fn signed_request(
    pem: &crate::crypto::pem::Block,
) -> Result<X509CertificationRequest<'_>, CsrError> {
    let (_, req) = X509CertificationRequest::from_der(&pem.der)
        .map_err(|e| CsrError::NotPkcs10(e.to_string()))?;
    req.verify_signature().map_err(|_| CsrError::BadSignature)?;
    Ok(req)
}

/// The one `CERTIFICATE REQUEST` PEM block of `request_pem`, which is refused unread above
/// [`MAX_CSR_REQUEST_BYTES`].
pub(crate) fn request_block(request_pem: &[u8]) -> Result<crate::crypto::pem::Block, CsrError> {
    if request_pem.len() > MAX_CSR_REQUEST_BYTES {
        return Err(CsrError::TooLarge(request_pem.len()));
    }
    let pem = crate::crypto::pem::decode_first(request_pem).map_err(|_| CsrError::NotPem)?;
    if pem.label != CSR_PEM_LABEL {
        return Err(CsrError::WrongPemType(pem.label));
    }
    Ok(pem)
}

/// The subject's organizations are exactly [`NODES_GROUP`].
pub(crate) fn check_organization(subject: &X509Name) -> Result<(), CsrError> {
    let organizations = subject
        .iter_organization()
        .map(|a| a.as_str().map(str::to_owned))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| CsrError::SubjectEncoding)?;
    if organizations != [NODES_GROUP] {
        return Err(CsrError::Organization(organizations));
    }
    Ok(())
}

/// Any SAN extension at all, even an empty or unparsable one, is refused: the kubelet never
/// asks for one and a signer might honour a type Go's check ignores.
fn refuse_subject_alt_names(info: &X509CertificationRequestInfo) -> Result<(), CsrError> {
    for attr in info.iter_attributes() {
        if attr.oid.to_id_string() != OID_EXTENSION_REQUEST {
            continue;
        }
        let ParsedCriAttribute::ExtensionRequest(requested) = attr.parsed_attribute() else {
            return Err(CsrError::NotPkcs10(
                "unreadable extension request attribute".into(),
            ));
        };
        if requested
            .extensions
            .iter()
            .any(|e| e.oid.to_id_string() == OID_SUBJECT_ALT_NAME)
        {
            return Err(CsrError::SubjectAltNames);
        }
    }
    Ok(())
}

/// The node name of the subject's one common name, `system:node:<name>`.
pub(crate) fn node_name_of(subject: &X509Name) -> Result<NodeName, CsrError> {
    let common_names = subject
        .iter_common_name()
        .map(|a| a.as_str())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| CsrError::SubjectEncoding)?;
    // Go keeps the last CN when there are several; refusing the ambiguity is safer.
    let [cn] = common_names[..] else {
        return Err(CsrError::CommonNameCount(common_names.len()));
    };
    let name = cn
        .strip_prefix(NODE_USER_PREFIX)
        .ok_or_else(|| CsrError::CommonNamePrefix(cn.to_owned()))?;
    name.parse().map_err(CsrError::NodeName)
}

/// The node name a CSR asks for (`system:node:<name>` in its last subject CN), read
/// without any check: for routing a CSR to the controller that serves its name, never
/// for a decision ([`validate_kubelet_client_csr`] decides). `None` for a request above
/// [`MAX_CSR_REQUEST_BYTES`], without parsing it.
pub fn requested_node_name(request_pem: &[u8]) -> Option<String> {
    if request_pem.len() > MAX_CSR_REQUEST_BYTES {
        return None;
    }
    let pem = crate::crypto::pem::decode_first(request_pem).ok()?;
    let (_, req) = X509CertificationRequest::from_der(&pem.der).ok()?;
    let cn = req
        .certification_request_info
        .subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .last()?;
    cn.strip_prefix(NODE_USER_PREFIX).map(str::to_owned)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    /// How a test CSR deviates from what a kubelet sends.
    #[derive(Default, Clone)]
    pub(crate) struct Shape {
        pub cn: Option<String>,
        pub orgs: Option<Vec<&'static str>>,
        pub extra_cn: bool,
        pub san: Option<SanType>,
        pub rsa: bool,
    }

    /// A PEM CSR for `system:node:<node>` with the given deviations, and its key.
    pub(crate) fn make_csr(node: &str, shape: Shape) -> (String, KeyPair) {
        let key = if shape.rsa {
            KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap()
        } else {
            KeyPair::generate().unwrap()
        };
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        // rcgen keeps one value per attribute type: a second O goes in under its raw OID.
        let org_types = [
            DnType::OrganizationName,
            DnType::CustomDnType(vec![2, 5, 4, 10]),
        ];
        let orgs = shape.orgs.unwrap_or(vec![NODES_GROUP]);
        assert!(
            orgs.len() <= org_types.len(),
            "test helper supports two organizations"
        );
        for (ty, o) in org_types.into_iter().zip(orgs) {
            params.distinguished_name.push(ty, o);
        }
        let cn = shape.cn.unwrap_or_else(|| format!("system:node:{node}"));
        params.distinguished_name.push(DnType::CommonName, cn);
        if shape.extra_cn {
            // rcgen keeps one value per type; a second CN needs a custom OID entry.
            params
                .distinguished_name
                .push(DnType::CustomDnType(vec![2, 5, 4, 3]), "system:node:other");
        }
        if let Some(san) = shape.san {
            params.subject_alt_names.push(san);
        }
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        (pem, key)
    }

    pub(crate) fn kubelet_usages() -> Vec<String> {
        vec![
            USAGE_DIGITAL_SIGNATURE.into(),
            USAGE_KEY_ENCIPHERMENT.into(),
            USAGE_CLIENT_AUTH.into(),
        ]
    }

    fn check(pem: &str, usages: &[String]) -> Result<KubeletClientCsr, CsrError> {
        validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, pem.as_bytes(), usages)
    }

    #[test]
    fn a_kubelet_csr_yields_its_node_name_and_key_fingerprint() {
        let (pem, key) = make_csr("worker-1", Shape::default());
        let csr = check(&pem, &kubelet_usages()).unwrap();
        assert_eq!(csr.node_name.as_str(), "worker-1");
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let expected: [u8; 32] = Sha256::digest(&spki).into();
        assert_eq!(csr.public_key_sha256, expected);
        assert_eq!(csr.public_key_sha256_hex().len(), 64);
    }

    #[test]
    fn an_openssl_kubelet_csr_without_key_encipherment_is_accepted() {
        // A CSR openssl made for system:node:worker-1, one a real API server accepted,
        // with usages without key encipherment (the other usage set Kubernetes allows
        // for a kubelet client CSR).
        let pem = "-----BEGIN CERTIFICATE REQUEST-----\nMIHwMIGYAgEAMDYxFTATBgNVBAoMDHN5c3RlbTpub2RlczEdMBsGA1UEAwwUc3lz\ndGVtOm5vZGU6d29ya2VyLTEwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQ8st3V\nChzLb9enoE+FqfOIsoKVM6uhA6oEOz4kl1wRY/VDrd2TUH1P9YQeSE4Tl1WOGVvL\n8qBMg1qtJD4yr0YKoAAwCgYIKoZIzj0EAwIDRwAwRAIgXtQrzm64HSGiQHj/czlq\nSggnu7eTsQa7sPmqXC6ATvoCID/bEAt4wnxTTANpV/T3jRkMslmGEY6I1UbxACJD\nRB2v\n-----END CERTIFICATE REQUEST-----\n";
        let usages = vec![USAGE_DIGITAL_SIGNATURE.into(), USAGE_CLIENT_AUTH.into()];
        let csr = check(pem, &usages).unwrap();
        assert_eq!(csr.node_name.as_str(), "worker-1");
    }

    #[test]
    fn the_requested_node_name_is_read_from_any_shape() {
        let masters = Shape {
            orgs: Some(vec!["system:masters"]),
            ..Shape::default()
        };
        let (pem, _) = make_csr("worker-3", masters);
        assert!(check(&pem, &kubelet_usages()).is_err());
        assert_eq!(
            requested_node_name(pem.as_bytes()).as_deref(),
            Some("worker-3")
        );
        let other = Shape {
            cn: Some("admin".into()),
            ..Shape::default()
        };
        let (pem, _) = make_csr("x", other);
        assert_eq!(requested_node_name(pem.as_bytes()), None);
        assert_eq!(requested_node_name(b"not a csr"), None);
    }

    #[test]
    fn an_rsa_kubelet_csr_is_accepted() {
        let (pem, _) = make_csr(
            "worker-2",
            Shape {
                rsa: true,
                ..Shape::default()
            },
        );
        assert!(check(&pem, &kubelet_usages()).is_ok());
    }

    #[test]
    fn wrong_signer_is_refused_first() {
        let (pem, _) = make_csr("worker-1", Shape::default());
        assert_eq!(
            validate_kubelet_client_csr("kubernetes.io/kubelet-serving", pem.as_bytes(), &[]),
            Err(CsrError::WrongSigner(
                "kubernetes.io/kubelet-serving".into()
            ))
        );
    }

    #[test]
    fn unreadable_requests_are_malformed() {
        let e = check("not a pem", &kubelet_usages()).unwrap_err();
        assert_eq!(e, CsrError::NotPem);
        assert!(e.is_malformed());
        let cert_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = check(cert_pem, &kubelet_usages()).unwrap_err();
        assert_eq!(e, CsrError::WrongPemType("CERTIFICATE".into()));
        let junk = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
        let e = check(junk, &kubelet_usages()).unwrap_err();
        assert!(matches!(e, CsrError::NotPkcs10(_)) && e.is_malformed());
    }

    #[test]
    fn an_oversized_request_is_refused_before_parsing() {
        // A valid CSR followed by padding: refused for its size alone, so nothing was read.
        let (pem, _) = make_csr("worker-1", Shape::default());
        let mut big = pem.clone().into_bytes();
        big.resize(MAX_CSR_REQUEST_BYTES + 1, b'\n');
        let e = validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, &big, &kubelet_usages())
            .unwrap_err();
        assert_eq!(e, CsrError::TooLarge(MAX_CSR_REQUEST_BYTES + 1));
        assert!(e.is_malformed());
        assert_eq!(requested_node_name(&big), None);
        // At the limit it is still read.
        big.truncate(MAX_CSR_REQUEST_BYTES);
        assert!(
            validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, &big, &kubelet_usages()).is_ok()
        );
        assert_eq!(requested_node_name(&big).as_deref(), Some("worker-1"));
    }

    #[test]
    fn no_subject_alt_name_is_accepted() {
        assert_eq!(MAX_CSR_SUBJECT_ALT_NAMES, 0);
        let (pem, _) = make_csr(
            "worker-1",
            Shape {
                san: Some(SanType::DnsName("worker-1".try_into().unwrap())),
                ..Shape::default()
            },
        );
        assert_eq!(
            check(&pem, &kubelet_usages()),
            Err(CsrError::SubjectAltNames)
        );
    }

    #[test]
    fn a_tampered_request_fails_its_signature() {
        let (pem, _) = make_csr("worker-1", Shape::default());
        let block = crate::crypto::pem::decode_first(pem.as_bytes()).unwrap();
        let mut der = block.der.to_vec();
        // Flip a bit inside the common name "system:node:worker-1" ('1' -> '0').
        let pos = der
            .windows(8)
            .position(|w| w == b"worker-1")
            .expect("CN in DER")
            + 7;
        der[pos] ^= 1;
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&der);
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n"
        );
        assert_eq!(
            check(&tampered, &kubelet_usages()),
            Err(CsrError::BadSignature)
        );
    }

    #[test]
    fn wrong_shapes_name_the_first_problem() {
        let u = kubelet_usages();
        let (pem, _) = make_csr(
            "w",
            Shape {
                orgs: Some(vec!["system:masters"]),
                ..Shape::default()
            },
        );
        assert_eq!(
            check(&pem, &u),
            Err(CsrError::Organization(vec!["system:masters".into()]))
        );
        let (pem, _) = make_csr(
            "w",
            Shape {
                orgs: Some(vec![]),
                ..Shape::default()
            },
        );
        assert_eq!(check(&pem, &u), Err(CsrError::Organization(vec![])));
        let (pem, _) = make_csr(
            "w",
            Shape {
                cn: Some("system:admin".into()),
                ..Shape::default()
            },
        );
        assert_eq!(
            check(&pem, &u),
            Err(CsrError::CommonNamePrefix("system:admin".into()))
        );
        let (pem, _) = make_csr(
            "w",
            Shape {
                cn: Some("system:node:Bad_Name".into()),
                ..Shape::default()
            },
        );
        assert!(matches!(check(&pem, &u), Err(CsrError::NodeName(_))));
        let (pem, _) = make_csr(
            "w",
            Shape {
                extra_cn: true,
                ..Shape::default()
            },
        );
        assert_eq!(check(&pem, &u), Err(CsrError::CommonNameCount(2)));
        for san in [
            SanType::DnsName("w.example.com".try_into().unwrap()),
            SanType::IpAddress("10.0.0.1".parse().unwrap()),
            SanType::Rfc822Name("a@example.com".try_into().unwrap()),
            SanType::URI("spiffe://x/y".try_into().unwrap()),
        ] {
            let (pem, _) = make_csr(
                "w",
                Shape {
                    san: Some(san),
                    ..Shape::default()
                },
            );
            let e = check(&pem, &u).unwrap_err();
            assert_eq!(e, CsrError::SubjectAltNames);
            assert!(!e.is_malformed());
        }
    }

    #[test]
    fn usages_must_be_one_of_the_two_kubelet_sets() {
        let (pem, _) = make_csr("w", Shape::default());
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        for ok in [
            s(&["digital signature", "client auth"]),
            s(&["client auth", "digital signature", "key encipherment"]),
            s(&["digital signature", "client auth", "client auth"]),
        ] {
            assert!(check(&pem, &ok).is_ok(), "{ok:?}");
        }
        for bad in [
            s(&[]),
            s(&["client auth"]),
            s(&["digital signature", "client auth", "server auth"]),
            s(&["digital signature", "key encipherment", "server auth"]),
            s(&["digital signature", "client auth", "cert sign"]),
        ] {
            assert_eq!(check(&pem, &bad), Err(CsrError::Usages(bad.clone())));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Whatever node name a valid CSR carries, the validator returns exactly it.
        #[test]
        fn node_name_is_the_common_name_suffix(name in "[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?") {
            let (pem, _) = make_csr(&name, Shape::default());
            let csr = check(&pem, &kubelet_usages()).unwrap();
            prop_assert_eq!(csr.node_name.as_str(), name.as_str());
        }

        /// Arbitrary bytes, bare or wrapped as a CSR PEM block, are refused without a panic.
        #[test]
        fn garbage_is_refused_not_panicked_on(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let wrapped = format!("-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n");
            prop_assert!(check(&wrapped, &kubelet_usages()).is_err());
            prop_assert!(validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, &bytes, &kubelet_usages()).is_err());
        }

        /// Any organization list other than exactly ["system:nodes"] is refused.
        #[test]
        fn any_other_organization_is_refused(
            orgs in proptest::collection::vec(prop_oneof![Just("system:nodes"), Just("system:masters"), Just("x")], 0..=2)
        ) {
            prop_assume!(orgs != ["system:nodes"]);
            let (pem, _) = make_csr("w", Shape { orgs: Some(orgs), ..Shape::default() });
            let refused = matches!(check(&pem, &kubelet_usages()), Err(CsrError::Organization(_)));
            prop_assert!(refused);
        }
    }
}
