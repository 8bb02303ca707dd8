//! The CA pin of `kubeadm join --discovery-token-ca-cert-hash`
//! (cmd/kubeadm/app/util/pubkeypin): `sha256:` + lowercase hex of SHA-256 over the
//! certificate's DER SubjectPublicKeyInfo.
//!
//! The hash covers the public key, not the whole certificate, so a CA re-issued with the same
//! key keeps its pin (that is kubeadm's choice, and join commands in the wild depend on it).

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

/// A pinned CA public key: SHA-256 of its DER SubjectPublicKeyInfo.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CaPin([u8; 32]);

/// Why a pin or a certificate could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error(
        "CA pin '{0}' has no format prefix; write it as sha256:<64 hex characters> \
         (as printed by 'kubeflavor token create --print-join-command')"
    )]
    MissingFormat(String),
    #[error("CA pin has {0} ':' separators; write it as sha256:<64 hex characters>")]
    TooManySeparators(usize),
    #[error("CA pin format '{0}' is not supported; only sha256 pins exist")]
    UnsupportedFormat(String),
    #[error(
        "CA pin hash must be 64 hexadecimal characters (a SHA-256), got {0}; \
         check that the whole pin was copied"
    )]
    WrongLength(usize),
    #[error("CA pin hash character {position} is not a hexadecimal digit")]
    NotHex { position: usize },
    #[error("the CA certificate could not be parsed as DER X.509: {0}")]
    Certificate(String),
}

impl CaPin {
    /// The pin of a DER SubjectPublicKeyInfo.
    pub fn from_spki_der(spki_der: &[u8]) -> Self {
        Self(Sha256::digest(spki_der).into())
    }

    /// The pin of a DER certificate: the hash of its SubjectPublicKeyInfo only.
    pub fn from_cert_der(cert_der: &[u8]) -> Result<Self, PinError> {
        let (_, cert) = X509Certificate::from_der(cert_der)
            .map_err(|e| PinError::Certificate(e.to_string()))?;
        Ok(Self::from_spki_der(cert.public_key().raw))
    }

    /// Whether any of the DER certificates carries the pinned key. Certificates that do not
    /// parse never match.
    pub fn matches_any<C: AsRef<[u8]>>(&self, certs_der: &[C]) -> bool {
        certs_der
            .iter()
            .any(|der| Self::from_cert_der(der.as_ref()).is_ok_and(|pin| pin == *self))
    }

    /// The 32 hash bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for CaPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for CaPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CaPin({self})")
    }
}

impl FromStr for CaPin {
    type Err = PinError;

    /// Parses `sha256:<hex>` as kubeadm does: exactly one `:`, the format case-insensitive,
    /// 64 hex digits of either case.
    fn from_str(s: &str) -> Result<Self, PinError> {
        let separators = s.matches(':').count();
        let (format, hash) = match separators {
            0 => return Err(PinError::MissingFormat(s.to_string())),
            1 => s.split_once(':').unwrap_or_default(),
            n => return Err(PinError::TooManySeparators(n)),
        };
        if !format.eq_ignore_ascii_case("sha256") {
            return Err(PinError::UnsupportedFormat(format.to_string()));
        }
        if let Some(position) = hash.chars().position(|c| !c.is_ascii_hexdigit()) {
            return Err(PinError::NotHex { position });
        }
        if hash.len() != 64 {
            return Err(PinError::WrongLength(hash.len()));
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hash, &mut bytes).map_err(|_| PinError::WrongLength(hash.len()))?;
        Ok(Self(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn self_signed(cn: &str) -> (Vec<u8>, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        (params.self_signed(&key).unwrap().der().to_vec(), key)
    }

    #[test]
    fn pin_covers_the_public_key_not_the_whole_certificate() {
        let (cert, key) = self_signed("kubernetes");
        let pin = CaPin::from_cert_der(&cert).unwrap();
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        assert_eq!(pin, CaPin::from_spki_der(&spki));
        assert_ne!(
            pin,
            CaPin::from_spki_der(&cert),
            "hashing the certificate is wrong"
        );
        // The same key in another certificate keeps the pin (kubeadm's behaviour).
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "renewed");
        let renewed = params.self_signed(&key).unwrap().der().to_vec();
        assert_ne!(renewed, cert);
        assert_eq!(CaPin::from_cert_der(&renewed).unwrap(), pin);
    }

    #[test]
    fn matches_any_finds_the_pinned_ca_in_a_bundle() {
        let (a, _) = self_signed("a");
        let (b, _) = self_signed("b");
        let pin_b = CaPin::from_cert_der(&b).unwrap();
        assert!(pin_b.matches_any(&[a.clone(), b]));
        assert!(!pin_b.matches_any(&[a]));
        assert!(!pin_b.matches_any(&[b"not a certificate".to_vec()]));
        assert!(!pin_b.matches_any::<Vec<u8>>(&[]));
    }

    #[test]
    fn parse_accepts_either_case_and_prints_lowercase() {
        let hex = "AB".repeat(32);
        let pin: CaPin = format!("SHA256:{hex}").parse().unwrap();
        assert_eq!(pin.to_string(), format!("sha256:{}", "ab".repeat(32)));
    }

    #[test]
    fn parse_errors_name_the_problem() {
        let h = "a".repeat(64);
        assert!(matches!(
            h.parse::<CaPin>(),
            Err(PinError::MissingFormat(_))
        ));
        assert_eq!(
            format!("sha256:{h}:x").parse::<CaPin>(),
            Err(PinError::TooManySeparators(2))
        );
        assert_eq!(
            format!("md5:{h}").parse::<CaPin>(),
            Err(PinError::UnsupportedFormat("md5".into()))
        );
        assert_eq!("sha256:abc".parse::<CaPin>(), Err(PinError::WrongLength(3)));
        assert_eq!(
            format!("sha256:{}", "a".repeat(65)).parse::<CaPin>(),
            Err(PinError::WrongLength(65))
        );
        assert_eq!(
            format!("sha256:{}g", "a".repeat(63)).parse::<CaPin>(),
            Err(PinError::NotHex { position: 63 })
        );
        assert!(CaPin::from_cert_der(b"junk").is_err());
    }

    proptest! {
        #[test]
        fn print_then_parse_round_trips(bytes in any::<[u8; 32]>()) {
            let pin = CaPin(bytes);
            prop_assert_eq!(pin.to_string().parse::<CaPin>(), Ok(pin));
        }

        #[test]
        fn parse_then_print_is_the_lowercase_input(hex in "[0-9a-fA-F]{64}") {
            let pin: CaPin = format!("sha256:{hex}").parse().unwrap();
            prop_assert_eq!(pin.to_string(), format!("sha256:{}", hex.to_lowercase()));
        }

        #[test]
        fn parse_never_panics(s in ".{0,80}") {
            let _ = s.parse::<CaPin>();
        }
    }
}
