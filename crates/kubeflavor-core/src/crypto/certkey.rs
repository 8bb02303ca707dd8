//! The copy-certs certificate key (`kubeadm certs certificate-key`): 32 random bytes, printed
//! as 64 lowercase hex characters. It encrypts the cluster's CA keys and is never stored on
//! the cluster (P5, certificate hand-off), so it is zeroized on drop and no Debug/Display
//! prints it.

use std::fmt;
use std::str::FromStr;

use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::crypto::random::{RandomnessError, os_fill};

/// Length of a certificate key in bytes (AES-256).
pub const CERTIFICATE_KEY_LEN: usize = 32;

/// An AES-256 key for the kubeadm-certs Secret.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct CertificateKey([u8; CERTIFICATE_KEY_LEN]);

/// Why a text is not a certificate key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateKeyError {
    #[error(
        "a certificate key is 64 hexadecimal characters (32 bytes), got {got} characters; \
         use the key printed by 'kubeflavor certs upload' or 'kubeflavor certs key'"
    )]
    WrongLength { got: usize },
    #[error(
        "certificate key character {position} is not a hexadecimal digit (0-9, a-f); \
         use the key printed by 'kubeflavor certs upload' or 'kubeflavor certs key'"
    )]
    NotHex { position: usize },
}

impl CertificateKey {
    /// A fresh key from the OS CSPRNG.
    pub fn generate() -> Result<Self, RandomnessError> {
        let mut bytes = Zeroizing::new([0u8; CERTIFICATE_KEY_LEN]);
        os_fill(&mut bytes[..])?;
        Ok(Self(*bytes))
    }

    /// A key from injected randomness (tests, deterministic vectors).
    pub fn generate_with(fill: impl FnOnce(&mut [u8])) -> Self {
        let mut bytes = Zeroizing::new([0u8; CERTIFICATE_KEY_LEN]);
        fill(&mut bytes[..]);
        Self(*bytes)
    }

    /// A key from its 32 raw bytes.
    pub fn from_bytes(bytes: [u8; CERTIFICATE_KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// The key as 64 lowercase hex characters, the form `kubeadm certs certificate-key`
    /// prints. Only for the one place whose job is to show it to the operator.
    pub fn expose_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex::encode(self.0))
    }

    pub(crate) fn as_bytes(&self) -> &[u8; CERTIFICATE_KEY_LEN] {
        &self.0
    }
}

impl FromStr for CertificateKey {
    type Err = CertificateKeyError;

    /// Parses 64 hex characters of either case, as kubeadm's `hex.DecodeString` does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(position) = s.chars().position(|c| !c.is_ascii_hexdigit()) {
            return Err(CertificateKeyError::NotHex { position });
        }
        if s.len() != 2 * CERTIFICATE_KEY_LEN {
            return Err(CertificateKeyError::WrongLength { got: s.len() });
        }
        let mut bytes = Zeroizing::new([0u8; CERTIFICATE_KEY_LEN]);
        hex::decode_to_slice(s, &mut bytes[..])
            .map_err(|_| CertificateKeyError::WrongLength { got: s.len() })?;
        Ok(Self(*bytes))
    }
}

impl PartialEq for CertificateKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for CertificateKey {}

impl fmt::Debug for CertificateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CertificateKey(****)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn debug_never_shows_the_key() {
        let key = CertificateKey::from_bytes([0xab; 32]);
        let shown = format!("{key:?} {:#?}", key);
        assert!(!shown.contains("ab"), "{shown}");
        assert!(!shown.contains("171"), "{shown}");
    }

    #[test]
    fn generated_keys_differ_and_print_as_64_lowercase_hex() {
        let a = CertificateKey::generate().unwrap();
        let b = CertificateKey::generate().unwrap();
        assert_ne!(a, b);
        let hex = a.expose_hex();
        assert_eq!(hex.len(), 64);
        assert!(
            hex.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
    }

    #[test]
    fn generate_with_uses_the_injected_bytes() {
        let key = CertificateKey::generate_with(|b| b.fill(0x5a));
        assert_eq!(*key.expose_hex(), "5a".repeat(32));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            "abc".parse::<CertificateKey>(),
            Err(CertificateKeyError::WrongLength { got: 3 })
        );
        assert_eq!(
            "a".repeat(66).parse::<CertificateKey>(),
            Err(CertificateKeyError::WrongLength { got: 66 })
        );
        let mut s = "a".repeat(64);
        s.replace_range(10..11, "x");
        assert_eq!(
            s.parse::<CertificateKey>(),
            Err(CertificateKeyError::NotHex { position: 10 })
        );
        // A pasted trailing newline is reported, not silently accepted.
        assert_eq!(
            format!("{}\n", "a".repeat(64)).parse::<CertificateKey>(),
            Err(CertificateKeyError::NotHex { position: 64 })
        );
    }

    #[test]
    fn error_messages_do_not_echo_the_input() {
        let err = format!("{}z", "0123456789".repeat(6))
            .parse::<CertificateKey>()
            .unwrap_err();
        assert!(!err.to_string().contains("0123456789"));
    }

    proptest! {
        #[test]
        fn hex_round_trips_in_either_case(bytes in any::<[u8; 32]>(), upper in any::<bool>()) {
            let key = CertificateKey::from_bytes(bytes);
            let hex = key.expose_hex();
            let text = if upper { hex.to_uppercase() } else { hex.to_string() };
            prop_assert_eq!(text.parse::<CertificateKey>().unwrap(), key);
        }
    }
}
