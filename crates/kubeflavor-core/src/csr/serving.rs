//! Kubelet serving CSRs (`kubernetes.io/kubelet-serving`): parse the PEM request and
//! validate it as Kubernetes' `ValidateKubeletServingCSR` (pkg/apis/certificates/v1,
//! helpers.go) does, plus what that check leaves out:
//!
//! - Kubernetes: organization exactly `system:nodes`; at least one DNS or IP SAN; no email
//!   or URI SAN; usages exactly {digital signature, key encipherment, server auth} or
//!   {digital signature, server auth}; a common name `system:node:<name>`.
//! - kubeflavor, stricter: exactly one common name, a valid node name in it; a readable
//!   request whose signature verifies with its own key (proof of possession, as for client
//!   CSRs); SANs of DNS and IP type only (Go ignores other types, a signer might not); no
//!   requested extension but the SAN list (the kubelet asks for none); `key encipherment`
//!   only for an RSA key (it means nothing for an ECDSA key, and the kubelet since
//!   v1.27 leaves it out for those); and a key kubeflavor accepts ([`ServingKey`]: RSA of
//!   2048 to 8192 bits, ECDSA P-256 or P-384; the kubelet makes ECDSA P-256 keys).
//!
//! What the names and addresses may be is the policy's question
//! ([`crate::approval::serving`]): this module only reads them out.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use x509_parser::cri_attributes::ParsedCriAttribute;
use x509_parser::der_parser::oid::Oid;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{SubjectPublicKeyInfo, X509CertificationRequest};
use x509_parser::public_key::PublicKey;

use crate::csr::client::{
    CsrError, OID_EXTENSION_REQUEST, OID_SUBJECT_ALT_NAME, USAGE_DIGITAL_SIGNATURE,
    USAGE_KEY_ENCIPHERMENT, check_organization, node_name_of, request_block, signed_request,
};
use crate::names::NodeName;

/// `spec.signerName` of a kubelet serving CSR.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The usage that makes a certificate a TLS server's.
pub const USAGE_SERVER_AUTH: &str = "server auth";
/// The most subject alternative names a serving CSR may ask for. A kubelet asks for its
/// hostname and node addresses (a handful); this bounds what every decision walks.
pub const MAX_SERVING_SANS: usize = 64;
/// The smallest and largest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;
pub const MAX_RSA_BITS: usize = 8192;

const OID_RSA: &str = "1.2.840.113549.1.1.1";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";

/// The key of a serving CSR, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingKey {
    Rsa { bits: usize },
    EcdsaP256,
    EcdsaP384,
}

impl ServingKey {
    pub fn is_rsa(self) -> bool {
        matches!(self, ServingKey::Rsa { .. })
    }
}

/// A CSR that passed every kubelet-serving rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletServingCsr {
    /// The `<name>` of the common name `system:node:<name>`.
    pub node_name: NodeName,
    /// The DNS SANs, in request order.
    pub dns_names: Vec<String>,
    /// The IP SANs, in request order.
    pub ip_addresses: Vec<IpAddr>,
    pub key: ServingKey,
}

/// The first kubelet-serving rule a CSR breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServingCsrError {
    #[error("signerName is {0:?}, not {KUBELET_SERVING_SIGNER}")]
    WrongSigner(String),
    /// A rule shared with kubelet client CSRs (readability, signature, subject).
    #[error("{0}")]
    Request(CsrError),
    #[error("the request asks for no DNS name and no IP address; a serving CSR names at least one")]
    NoSubjectAltNames,
    #[error(
        "the request asks for a {0} subject alternative name; a serving CSR has DNS names and IP addresses only"
    )]
    SanType(&'static str),
    #[error(
        "the request asks for {0} subject alternative names; at most {MAX_SERVING_SANS} are read"
    )]
    TooManySans(usize),
    #[error("an IP address SAN is {0} bytes long, neither 4 nor 16")]
    IpLength(usize),
    #[error(
        "the request asks for extension {0}; a serving CSR asks for subject alternative names only"
    )]
    OtherExtension(String),
    #[error(
        "usages are {0:?}; a kubelet serving CSR asks for exactly [digital signature, server auth], or with an RSA key [digital signature, key encipherment, server auth]"
    )]
    Usages(Vec<String>),
    #[error(
        "the key is {0}; a serving CSR's key is RSA ({MIN_RSA_BITS} to {MAX_RSA_BITS} bits) or ECDSA P-256 or P-384"
    )]
    Key(String),
}

impl ServingCsrError {
    /// Whether the request could not even be read.
    pub fn is_malformed(&self) -> bool {
        match self {
            ServingCsrError::Request(e) => e.is_malformed(),
            ServingCsrError::IpLength(_) => true,
            _ => false,
        }
    }

    /// Whether the key type or size is what was refused.
    pub fn is_key(&self) -> bool {
        matches!(self, ServingCsrError::Key(_))
    }
}

impl From<CsrError> for ServingCsrError {
    fn from(e: CsrError) -> Self {
        ServingCsrError::Request(e)
    }
}

/// Validates a CSR object's fields as a kubelet serving CSR: `signer_name` and `usages`
/// from its spec, `request_pem` the decoded `spec.request`.
pub fn validate_kubelet_serving_csr(
    signer_name: &str,
    request_pem: &[u8],
    usages: &[String],
) -> Result<KubeletServingCsr, ServingCsrError> {
    if signer_name != KUBELET_SERVING_SIGNER {
        return Err(ServingCsrError::WrongSigner(signer_name.to_owned()));
    }
    let pem = request_block(request_pem)?;
    let req = signed_request(&pem)?;
    let info = &req.certification_request_info;
    check_organization(&info.subject)?;
    let (dns_names, ip_addresses) = subject_alt_names(&req)?;
    if dns_names.is_empty() && ip_addresses.is_empty() {
        return Err(ServingCsrError::NoSubjectAltNames);
    }
    let node_name = node_name_of(&info.subject)?;
    let key = serving_key(&info.subject_pki)?;
    if !usages_are_kubelet_serving(usages, key) {
        return Err(ServingCsrError::Usages(usages.to_vec()));
    }
    Ok(KubeletServingCsr {
        node_name,
        dns_names,
        ip_addresses,
        key,
    })
}

fn usages_are_kubelet_serving(usages: &[String], key: ServingKey) -> bool {
    let set: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let plain = BTreeSet::from([USAGE_DIGITAL_SIGNATURE, USAGE_SERVER_AUTH]);
    let with_rsa = BTreeSet::from([
        USAGE_DIGITAL_SIGNATURE,
        USAGE_KEY_ENCIPHERMENT,
        USAGE_SERVER_AUTH,
    ]);
    set == plain || (key.is_rsa() && set == with_rsa)
}

/// The DNS and IP SANs of the request; any other SAN type, any other requested extension,
/// an unreadable SAN list or more than [`MAX_SERVING_SANS`] names are refused.
fn subject_alt_names(
    req: &X509CertificationRequest,
) -> Result<(Vec<String>, Vec<IpAddr>), ServingCsrError> {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for attr in req.certification_request_info.iter_attributes() {
        if attr.oid.to_id_string() != OID_EXTENSION_REQUEST {
            continue;
        }
        let ParsedCriAttribute::ExtensionRequest(requested) = attr.parsed_attribute() else {
            return Err(
                CsrError::NotPkcs10("unreadable extension request attribute".into()).into(),
            );
        };
        for ext in &requested.extensions {
            let oid = ext.oid.to_id_string();
            if oid != OID_SUBJECT_ALT_NAME {
                return Err(ServingCsrError::OtherExtension(oid));
            }
            let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() else {
                return Err(
                    CsrError::NotPkcs10("unreadable subject alternative names".into()).into(),
                );
            };
            if dns.len() + ips.len() + san.general_names.len() > MAX_SERVING_SANS {
                return Err(ServingCsrError::TooManySans(
                    dns.len() + ips.len() + san.general_names.len(),
                ));
            }
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                    GeneralName::IPAddress(bytes) => ips.push(ip_of(bytes)?),
                    GeneralName::RFC822Name(_) => return Err(ServingCsrError::SanType("email")),
                    GeneralName::URI(_) => return Err(ServingCsrError::SanType("URI")),
                    _ => return Err(ServingCsrError::SanType("non-DNS, non-IP")),
                }
            }
        }
    }
    Ok((dns, ips))
}

fn ip_of(bytes: &[u8]) -> Result<IpAddr, ServingCsrError> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::V4(Ipv4Addr::from(v4)));
    }
    if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        return Ok(IpAddr::V6(Ipv6Addr::from(v6)));
    }
    Err(ServingCsrError::IpLength(bytes.len()))
}

/// The key's type and size, if kubeflavor accepts it for a serving certificate.
pub fn serving_key(spki: &SubjectPublicKeyInfo) -> Result<ServingKey, ServingCsrError> {
    let algorithm = spki.algorithm.algorithm.to_id_string();
    match algorithm.as_str() {
        OID_RSA => {
            let Ok(PublicKey::RSA(rsa)) = spki.parsed() else {
                return Err(ServingCsrError::Key("an unreadable RSA key".into()));
            };
            let bits = modulus_bits(rsa.modulus);
            if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
                return Err(ServingCsrError::Key(format!("RSA of {bits} bits")));
            }
            Ok(ServingKey::Rsa { bits })
        }
        OID_EC_PUBLIC_KEY => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| Oid::try_from(p).ok())
                .map(|o| o.to_id_string());
            match curve.as_deref() {
                Some(OID_P256) => Ok(ServingKey::EcdsaP256),
                Some(OID_P384) => Ok(ServingKey::EcdsaP384),
                Some(other) => Err(ServingCsrError::Key(format!("ECDSA on curve {other}"))),
                None => Err(ServingCsrError::Key("ECDSA without a named curve".into())),
            }
        }
        other => Err(ServingCsrError::Key(format!("of algorithm {other}"))),
    }
}

/// The bit length of a big-endian modulus (leading zero bytes and bits not counted).
fn modulus_bits(modulus: &[u8]) -> usize {
    let digits = modulus
        .iter()
        .position(|b| *b != 0)
        .map_or(&[][..], |i| &modulus[i..]);
    match digits.first() {
        None => 0,
        Some(first) => digits.len() * 8 - first.leading_zeros() as usize,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};
    use x509_parser::prelude::FromDer;

    /// How a test serving CSR deviates from what a kubelet sends.
    #[derive(Clone)]
    pub(crate) struct ServingShape {
        pub cn: Option<String>,
        pub orgs: Vec<&'static str>,
        pub dns: Vec<String>,
        pub ips: Vec<IpAddr>,
        pub extra_sans: Vec<SanType>,
        pub key: &'static rcgen::SignatureAlgorithm,
    }

    impl ServingShape {
        /// What a kubelet named `node` at `ip` sends.
        pub(crate) fn kubelet(node: &str, ip: &str) -> Self {
            ServingShape {
                cn: None,
                orgs: vec![crate::csr::client::NODES_GROUP],
                dns: vec![node.to_owned()],
                ips: vec![ip.parse().unwrap()],
                extra_sans: Vec::new(),
                key: &rcgen::PKCS_ECDSA_P256_SHA256,
            }
        }
    }

    /// A PEM serving CSR for `system:node:<node>` of the given shape.
    pub(crate) fn make_serving_csr(node: &str, shape: ServingShape) -> String {
        let key = KeyPair::generate_for(shape.key).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        for o in shape.orgs {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        let cn = shape.cn.unwrap_or_else(|| format!("system:node:{node}"));
        params.distinguished_name.push(DnType::CommonName, cn);
        for d in shape.dns {
            params
                .subject_alt_names
                .push(SanType::DnsName(d.try_into().unwrap()));
        }
        for ip in shape.ips {
            params.subject_alt_names.push(SanType::IpAddress(ip));
        }
        params.subject_alt_names.extend(shape.extra_sans);
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    pub(crate) fn serving_usages() -> Vec<String> {
        vec![USAGE_DIGITAL_SIGNATURE.into(), USAGE_SERVER_AUTH.into()]
    }

    fn check(pem: &str, usages: &[String]) -> Result<KubeletServingCsr, ServingCsrError> {
        validate_kubelet_serving_csr(KUBELET_SERVING_SIGNER, pem.as_bytes(), usages)
    }

    #[test]
    fn a_kubelet_serving_csr_yields_its_name_names_and_addresses() {
        let pem = make_serving_csr("worker-1", ServingShape::kubelet("worker-1", "10.0.0.7"));
        let csr = check(&pem, &serving_usages()).unwrap();
        assert_eq!(csr.node_name.as_str(), "worker-1");
        assert_eq!(csr.dns_names, ["worker-1"]);
        assert_eq!(csr.ip_addresses, [ip("10.0.0.7")]);
        assert_eq!(csr.key, ServingKey::EcdsaP256);
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_serving_signer_only() {
        let pem = make_serving_csr("n", ServingShape::kubelet("n", "10.0.0.1"));
        assert_eq!(
            validate_kubelet_serving_csr(
                crate::csr::client::KUBELET_CLIENT_SIGNER,
                pem.as_bytes(),
                &serving_usages()
            ),
            Err(ServingCsrError::WrongSigner(
                crate::csr::client::KUBELET_CLIENT_SIGNER.into()
            ))
        );
    }

    #[test]
    fn usages_follow_kubernetes_and_key_encipherment_needs_rsa() {
        let ec = make_serving_csr("n", ServingShape::kubelet("n", "10.0.0.1"));
        let with_ke: Vec<String> = ["digital signature", "key encipherment", "server auth"]
            .map(String::from)
            .into();
        assert!(matches!(
            check(&ec, &with_ke),
            Err(ServingCsrError::Usages(_))
        ));
        let rsa = make_serving_csr(
            "n",
            ServingShape {
                key: &rcgen::PKCS_RSA_SHA256,
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert_eq!(
            check(&rsa, &with_ke).unwrap().key,
            ServingKey::Rsa { bits: 2048 }
        );
        assert!(check(&rsa, &serving_usages()).is_ok());
        for bad in [
            vec!["digital signature", "client auth"],
            vec!["digital signature", "server auth", "client auth"],
            vec!["server auth"],
            vec!["digital signature"],
            vec![],
        ] {
            let usages: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(
                matches!(check(&ec, &usages), Err(ServingCsrError::Usages(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_weak_or_unknown_key_is_refused() {
        let pem = make_serving_csr(
            "n",
            ServingShape {
                key: &rcgen::PKCS_ED25519,
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        let err = check(&pem, &serving_usages()).unwrap_err();
        assert!(err.is_key(), "{err}");
        // x509-parser cannot verify a P-521 signature, so the key rule is asked directly.
        for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P521_SHA512] {
            let key = KeyPair::generate_for(alg).unwrap();
            let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
            let (_, spki) = SubjectPublicKeyInfo::from_der(&spki).unwrap();
            assert!(serving_key(&spki).unwrap_err().is_key());
        }
        let p384 = make_serving_csr(
            "n",
            ServingShape {
                key: &rcgen::PKCS_ECDSA_P384_SHA384,
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert_eq!(
            check(&p384, &serving_usages()).unwrap().key,
            ServingKey::EcdsaP384
        );
    }

    #[test]
    fn rsa_sizes_outside_the_range_are_refused() {
        // The bit count of the modulus decides, leading zero bytes and bits aside.
        assert_eq!(modulus_bits(&[0x00, 0x80, 0, 0]), 24);
        assert_eq!(modulus_bits(&[0x01, 0xff]), 9);
        assert_eq!(modulus_bits(&[]), 0);
        let mut m1024 = vec![0x00];
        m1024.extend(std::iter::repeat_n(0xff, 128));
        assert_eq!(modulus_bits(&m1024), 1024);
        assert!(!(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&modulus_bits(&m1024)));
    }

    #[test]
    fn names_and_addresses_are_required_and_email_uri_other_types_refused() {
        let none = make_serving_csr(
            "n",
            ServingShape {
                dns: vec![],
                ips: vec![],
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert_eq!(
            check(&none, &serving_usages()),
            Err(ServingCsrError::NoSubjectAltNames)
        );
        let cases = [
            (SanType::Rfc822Name("a@b.c".try_into().unwrap()), "email"),
            (SanType::URI("https://x".try_into().unwrap()), "URI"),
        ];
        for (san, kind) in cases {
            let pem = make_serving_csr(
                "n",
                ServingShape {
                    extra_sans: vec![san],
                    ..ServingShape::kubelet("n", "10.0.0.1")
                },
            );
            assert_eq!(
                check(&pem, &serving_usages()),
                Err(ServingCsrError::SanType(kind))
            );
        }
        let other = make_serving_csr(
            "n",
            ServingShape {
                extra_sans: vec![SanType::OtherName((
                    vec![1, 3, 6, 1, 4, 1, 311, 20, 2, 3],
                    rcgen::OtherNameValue::Utf8String("x".into()),
                ))],
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert_eq!(
            check(&other, &serving_usages()),
            Err(ServingCsrError::SanType("non-DNS, non-IP"))
        );
    }

    #[test]
    fn subject_rules_are_the_client_csrs() {
        let orgs = make_serving_csr(
            "n",
            ServingShape {
                orgs: vec!["system:masters"],
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert!(matches!(
            check(&orgs, &serving_usages()),
            Err(ServingCsrError::Request(CsrError::Organization(_)))
        ));
        let cn = make_serving_csr(
            "n",
            ServingShape {
                cn: Some("system:admin".into()),
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert!(matches!(
            check(&cn, &serving_usages()),
            Err(ServingCsrError::Request(CsrError::CommonNamePrefix(_)))
        ));
        let garbage = check("not a pem", &serving_usages()).unwrap_err();
        assert!(garbage.is_malformed());
    }

    #[test]
    fn a_tampered_request_fails_its_signature() {
        let pem = make_serving_csr("worker-1", ServingShape::kubelet("worker-1", "10.0.0.7"));
        let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents;
        // Change the node name in the signed bytes: the signature no longer verifies.
        let at = der
            .windows(8)
            .position(|w| w == b"worker-1")
            .expect("the CN is in the DER");
        let mut tampered = der.clone();
        tampered[at + 7] = b'2';
        let pem = crate::crypto::pem::encode("CERTIFICATE REQUEST", &tampered);
        assert_eq!(
            check(&pem, &serving_usages()),
            Err(ServingCsrError::Request(CsrError::BadSignature))
        );
    }

    #[test]
    fn another_requested_extension_is_refused() {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec!["n".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, crate::csr::client::NODES_GROUP);
        params
            .distinguished_name
            .push(DnType::CommonName, "system:node:n");
        params
            .custom_extensions
            .push(rcgen::CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 99999, 1],
                vec![0x05, 0x00],
            ));
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        assert_eq!(
            check(&pem, &serving_usages()),
            Err(ServingCsrError::OtherExtension(
                "1.3.6.1.4.1.99999.1".into()
            ))
        );
    }

    #[test]
    fn too_many_names_are_refused() {
        let pem = make_serving_csr(
            "n",
            ServingShape {
                dns: (0..=MAX_SERVING_SANS).map(|i| format!("n{i}")).collect(),
                ..ServingShape::kubelet("n", "10.0.0.1")
            },
        );
        assert!(matches!(
            check(&pem, &serving_usages()),
            Err(ServingCsrError::TooManySans(_))
        ));
    }

    proptest! {
        #[test]
        fn garbage_is_refused_not_panicked_on(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert!(check(&String::from_utf8_lossy(&bytes), &serving_usages()).is_err());
        }

        #[test]
        fn every_address_asked_is_read_back(a in any::<[u8; 4]>(), b in any::<[u8; 16]>()) {
            let v4 = IpAddr::V4(Ipv4Addr::from(a));
            let v6 = IpAddr::V6(Ipv6Addr::from(b));
            let pem = make_serving_csr("n", ServingShape {
                ips: vec![v4, v6],
                ..ServingShape::kubelet("n", "10.0.0.1")
            });
            prop_assert_eq!(check(&pem, &serving_usages()).unwrap().ip_addresses, vec![v4, v6]);
        }
    }
}
