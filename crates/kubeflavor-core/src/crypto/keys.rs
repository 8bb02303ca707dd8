//! Reading keys and certificates in every PEM form a PKI directory holds, and checking that a
//! private key belongs to a certificate or a public key.
//!
//! kubeadm writes PKCS#1 (`RSA PRIVATE KEY`) and SEC1 (`EC PRIVATE KEY`); PKIs made with
//! openssl or other tools often hold PKCS#8 (`PRIVATE KEY`); `sa.pub` is PKIX `PUBLIC KEY`.
//! kubeadm's upload-certs stores each form unchanged. The private key is loaded into aws-lc
//! (through rcgen), which validates it and derives its public key; matching then compares
//! public keys.

use std::fmt;

use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;
use zeroize::{Zeroize, Zeroizing};

pub use crate::crypto::pem::PemError;
use crate::crypto::pem::{self, Block};

pub(crate) const LABEL_CERTIFICATE: &str = "CERTIFICATE";
pub(crate) const LABEL_PKCS1: &str = "RSA PRIVATE KEY";
pub(crate) const LABEL_SEC1: &str = "EC PRIVATE KEY";
pub(crate) const LABEL_PKCS8: &str = "PRIVATE KEY";
pub(crate) const LABEL_PUBLIC_KEY: &str = "PUBLIC KEY";
const EXPECTED_PRIVATE_KEY: &str = "a private key (RSA PRIVATE KEY, EC PRIVATE KEY or PRIVATE KEY)";

/// The encoding of a private key PEM block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivateKeyForm {
    /// `RSA PRIVATE KEY` (RFC 8017), what kubeadm writes for RSA keys.
    Pkcs1,
    /// `EC PRIVATE KEY` (RFC 5915), what kubeadm writes for ECDSA keys.
    Sec1,
    /// `PRIVATE KEY` (RFC 5208), common in PKIs made with openssl.
    Pkcs8,
}

impl PrivateKeyForm {
    /// The PEM label of this form.
    pub fn pem_label(self) -> &'static str {
        match self {
            Self::Pkcs1 => LABEL_PKCS1,
            Self::Sec1 => LABEL_SEC1,
            Self::Pkcs8 => LABEL_PKCS8,
        }
    }
}

/// What a PEM file holds, judged by its first block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemKind {
    Certificate,
    PrivateKey(PrivateKeyForm),
    PublicKey,
    Other(String),
}

impl fmt::Display for PemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Certificate => f.write_str("a certificate"),
            Self::PrivateKey(_) => f.write_str("a private key"),
            Self::PublicKey => f.write_str("a public key"),
            Self::Other(label) => write!(f, "a PEM block '{label}'"),
        }
    }
}

/// Why key or certificate material could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("expected {expected}, found a PEM block '{found}'")]
    UnexpectedBlock {
        expected: &'static str,
        found: String,
    },
    #[error(
        "the private key could not be loaded (not a valid RSA or ECDSA P-256/P-384 key, \
         or an unsupported size)"
    )]
    InvalidPrivateKey,
    #[error("the public key is not a valid DER SubjectPublicKeyInfo")]
    InvalidPublicKey,
    #[error("certificate {index} of the PEM file is not valid X.509: {reason}")]
    InvalidCertificate { index: usize, reason: String },
}

/// A private key read from PEM. The key material itself is not kept: the struct remembers
/// the form and the public key, which is all that matching needs.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey {
    form: PrivateKeyForm,
    public: PublicKey,
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateKey")
            .field("form", &self.form)
            .field("public", &self.public)
            .finish()
    }
}

/// A public key as a DER SubjectPublicKeyInfo.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    spki_der: Vec<u8>,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PublicKey({})",
            crate::crypto::pin::CaPin::from_spki_der(&self.spki_der)
        )
    }
}

/// An rcgen key pair whose PKCS#8 copy is wiped when it goes away.
pub(crate) struct KeyPairGuard(pub(crate) rcgen::KeyPair);

impl Drop for KeyPairGuard {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Classifies a PEM file by its first block (text before it, such as comments, is skipped).
pub fn classify_pem(text: &[u8]) -> Result<PemKind, PemError> {
    let blocks = pem::decode_all(text)?;
    Ok(kind_of_label(&blocks[0].label))
}

pub(crate) fn kind_of_label(label: &str) -> PemKind {
    match label {
        LABEL_CERTIFICATE => PemKind::Certificate,
        LABEL_PKCS1 => PemKind::PrivateKey(PrivateKeyForm::Pkcs1),
        LABEL_SEC1 => PemKind::PrivateKey(PrivateKeyForm::Sec1),
        LABEL_PKCS8 => PemKind::PrivateKey(PrivateKeyForm::Pkcs8),
        LABEL_PUBLIC_KEY => PemKind::PublicKey,
        other => PemKind::Other(other.to_string()),
    }
}

impl PrivateKey {
    /// Reads the first private key block of a PEM file in any of the three forms. An
    /// `EC PARAMETERS` block before it (as `openssl ecparam -genkey` writes) is skipped.
    pub fn from_pem(text: &[u8]) -> Result<Self, KeyError> {
        let blocks = pem::decode_all(text)?;
        let block = blocks
            .iter()
            .find(|b| b.label != "EC PARAMETERS")
            .ok_or(PemError::NoBlock)?;
        let PemKind::PrivateKey(form) = kind_of_label(&block.label) else {
            return Err(KeyError::UnexpectedBlock {
                expected: EXPECTED_PRIVATE_KEY,
                found: block.label.clone(),
            });
        };
        Self::from_der(form, block)
    }

    fn from_der(form: PrivateKeyForm, block: &Block) -> Result<Self, KeyError> {
        let pair =
            rcgen::KeyPair::try_from(&block.der[..]).map_err(|_| KeyError::InvalidPrivateKey)?;
        let pair = KeyPairGuard(pair);
        let spki_der = rcgen::PublicKeyData::subject_public_key_info(&pair.0);
        Ok(Self {
            form,
            public: PublicKey { spki_der },
        })
    }

    /// The PEM form the key was read from (kubeflavor writes back the form the source had).
    pub fn form(&self) -> PrivateKeyForm {
        self.form
    }

    /// The public half.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// Whether this key belongs to the DER certificate.
    pub fn matches_certificate(&self, cert_der: &[u8]) -> Result<bool, KeyError> {
        let (_, cert) =
            X509Certificate::from_der(cert_der).map_err(|e| KeyError::InvalidCertificate {
                index: 0,
                reason: e.to_string(),
            })?;
        let cert_key = PublicKey {
            spki_der: cert.public_key().raw.to_vec(),
        };
        Ok(self.public.same_key(&cert_key))
    }

    /// Whether this key belongs to `public` (sa.key and sa.pub).
    pub fn matches_public_key(&self, public: &PublicKey) -> bool {
        self.public.same_key(public)
    }
}

impl PublicKey {
    /// Reads a PKIX `PUBLIC KEY` PEM block.
    pub fn from_pem(text: &[u8]) -> Result<Self, KeyError> {
        let blocks = pem::decode_all(text)?;
        let block = &blocks[0];
        if block.label != LABEL_PUBLIC_KEY {
            return Err(KeyError::UnexpectedBlock {
                expected: "a public key (PUBLIC KEY)",
                found: block.label.clone(),
            });
        }
        Self::from_spki_der(&block.der)
    }

    /// Wraps a DER SubjectPublicKeyInfo after checking that it parses.
    pub fn from_spki_der(der: &[u8]) -> Result<Self, KeyError> {
        match SubjectPublicKeyInfo::from_der(der) {
            Ok(([], _)) => Ok(Self {
                spki_der: der.to_vec(),
            }),
            _ => Err(KeyError::InvalidPublicKey),
        }
    }

    /// The DER SubjectPublicKeyInfo.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// Whether both are the same key: same algorithm (and curve), same key bits. Encodings of
    /// the AlgorithmIdentifier differ between tools (RSA's NULL parameters are sometimes
    /// omitted), so the DER bytes are not compared whole.
    pub fn same_key(&self, other: &PublicKey) -> bool {
        fn identity(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
            let (_, spki) = SubjectPublicKeyInfo::from_der(der).ok()?;
            let alg = spki.algorithm.algorithm.as_bytes().to_vec();
            let params = match &spki.algorithm.parameters {
                // The curve matters for EC keys; for RSA the parameters are NULL or absent.
                Some(p) if p.tag() != x509_parser::der_parser::asn1_rs::Tag::Null => {
                    p.data.to_vec()
                }
                _ => Vec::new(),
            };
            Some((alg, params, spki.subject_public_key.data.to_vec()))
        }
        match (identity(&self.spki_der), identity(&other.spki_der)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// The key as a PKIX `PUBLIC KEY` PEM block.
    pub fn to_pem(&self) -> String {
        pem::encode(LABEL_PUBLIC_KEY, &self.spki_der).to_string()
    }
}

/// Reads every `CERTIFICATE` block of a PEM file (a CA bundle may hold several) as DER,
/// checking that each parses as X.509.
pub fn parse_certificates_pem(text: &[u8]) -> Result<Vec<Vec<u8>>, KeyError> {
    let blocks = pem::decode_all(text)?;
    let mut certs = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.iter().enumerate() {
        if block.label != LABEL_CERTIFICATE {
            return Err(KeyError::UnexpectedBlock {
                expected: "a certificate (CERTIFICATE)",
                found: block.label.clone(),
            });
        }
        X509Certificate::from_der(&block.der).map_err(|e| KeyError::InvalidCertificate {
            index,
            reason: e.to_string(),
        })?;
        certs.push(block.der.to_vec());
    }
    Ok(certs)
}

/// A serving certificate chain: every `CERTIFICATE` block of a PEM file as DER, in order,
/// other blocks skipped, the way Go's `tls.X509KeyPair` reads a certificate file. Unlike
/// [`parse_certificates_pem`] nothing but unreadable PEM is refused; the TLS stack checks
/// the certificates.
pub fn tls_certificate_chain(text: &[u8]) -> Result<Vec<Vec<u8>>, PemError> {
    Ok(pem::decode_all(text)?
        .into_iter()
        .filter(|b| b.label == LABEL_CERTIFICATE)
        .map(|b| b.der.to_vec())
        .collect())
}

/// A serving key: the first private key block of a PEM file, in any of the three forms,
/// other blocks before it skipped, the way Go's `tls.X509KeyPair` reads a key file. The DER
/// comes back zeroizing, to be handed to the TLS stack.
pub fn tls_private_key(text: &[u8]) -> Result<(PrivateKeyForm, Zeroizing<Vec<u8>>), KeyError> {
    let blocks = pem::decode_all(text)?;
    let found = blocks[0].label.clone();
    blocks
        .into_iter()
        .find_map(|b| match kind_of_label(&b.label) {
            PemKind::PrivateKey(form) => Some((form, b.der)),
            _ => None,
        })
        .ok_or(KeyError::UnexpectedBlock {
            expected: EXPECTED_PRIVATE_KEY,
            found,
        })
}

/// What `certs inspect` shows about a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateSummary {
    /// RFC 4514-style subject, e.g. `CN=kubernetes`.
    pub subject: String,
    pub issuer: String,
    pub not_before: jiff::Timestamp,
    pub not_after: jiff::Timestamp,
    pub is_ca: bool,
    /// The kubeadm pin of its public key.
    pub pin: crate::crypto::pin::CaPin,
}

impl CertificateSummary {
    /// Summarises a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Self, KeyError> {
        let invalid = |reason: String| KeyError::InvalidCertificate { index: 0, reason };
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| invalid(e.to_string()))?;
        let time = |t: x509_parser::time::ASN1Time| {
            jiff::Timestamp::from_second(t.timestamp()).map_err(|e| invalid(e.to_string()))
        };
        Ok(Self {
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            not_before: time(cert.validity().not_before)?,
            not_after: time(cert.validity().not_after)?,
            is_ca: cert.is_ca(),
            pin: crate::crypto::pin::CaPin::from_spki_der(cert.public_key().raw),
        })
    }
}

/// Encodes DER as a PEM block with `label` (private keys come back zeroizing).
pub fn encode_pem(label: &str, der: &[u8]) -> Zeroizing<String> {
    pem::encode(label, der)
}
