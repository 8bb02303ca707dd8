//! The wire format of a public key (the base64 of a key line), read field by field and to
//! the last byte:
//!
//! - `ssh-ed25519` (RFC 8709 §4): string type, string key (32 bytes).
//! - `ecdsa-sha2-*` (RFC 5656 §3.1): string type, string curve, string Q (SEC1 point).
//! - `ssh-rsa` (RFC 4253 §6.6): string type, mpint e, mpint n.
//! - `sk-ssh-ed25519@openssh.com`, `sk-ecdsa-sha2-nistp256@openssh.com` (OpenSSH
//!   PROTOCOL.u2f): the Ed25519 or ECDSA fields, then string application.
//!
//! Strings are a big-endian u32 length and that many bytes (RFC 4251 §5).

use super::{KeyType, MAX_RSA_BITS, MIN_RSA_BITS, SshKeyError};

/// Checks that `blob` is exactly one public key of `key_type`; its size in bits.
pub(super) fn check(key_type: KeyType, blob: &[u8]) -> Result<u32, SshKeyError> {
    let mut r = Reader {
        key_type,
        rest: blob,
    };
    let inner = r.string("the key type")?;
    if inner != key_type.as_str().as_bytes() {
        return Err(SshKeyError::TypeMismatch {
            key_type,
            inner: super::excerpt(&String::from_utf8_lossy(inner)),
        });
    }
    let bits = match key_type {
        KeyType::Ed25519 => ed25519(&mut r)?,
        KeyType::EcdsaP256 => ecdsa(&mut r, "nistp256", 32, 256)?,
        KeyType::EcdsaP384 => ecdsa(&mut r, "nistp384", 48, 384)?,
        KeyType::EcdsaP521 => ecdsa(&mut r, "nistp521", 66, 521)?,
        KeyType::Rsa => rsa(&mut r)?,
        KeyType::SkEd25519 => {
            let bits = ed25519(&mut r)?;
            application(&mut r)?;
            bits
        }
        KeyType::SkEcdsaP256 => {
            let bits = ecdsa(&mut r, "nistp256", 32, 256)?;
            application(&mut r)?;
            bits
        }
    };
    if !r.rest.is_empty() {
        return Err(SshKeyError::TrailingBytes {
            key_type,
            bytes: r.rest.len(),
        });
    }
    Ok(bits)
}

fn ed25519(r: &mut Reader<'_>) -> Result<u32, SshKeyError> {
    let key = r.string("the Ed25519 public key")?;
    if key.len() != 32 {
        return Err(SshKeyError::Ed25519Length {
            key_type: r.key_type,
            bytes: key.len(),
        });
    }
    Ok(256)
}

/// The curve named as `curve` and an uncompressed point (0x04, x, y) whose coordinates are
/// `coordinate_bytes` each; the curve's size, `bits`, is the key's. Compressed points are valid SEC1 but OpenSSH refuses them.
fn ecdsa(
    r: &mut Reader<'_>,
    curve: &'static str,
    coordinate_bytes: usize,
    bits: u32,
) -> Result<u32, SshKeyError> {
    let found = r.string("the curve name")?;
    if found != curve.as_bytes() {
        return Err(SshKeyError::CurveMismatch {
            key_type: r.key_type,
            found: super::excerpt(&String::from_utf8_lossy(found)),
            expected: curve,
        });
    }
    let point = r.string("the curve point")?;
    let expected = 1 + 2 * coordinate_bytes;
    if point.len() != expected || point[0] != 0x04 {
        return Err(SshKeyError::EcPoint {
            key_type: r.key_type,
            expected,
        });
    }
    Ok(bits)
}

fn rsa(r: &mut Reader<'_>) -> Result<u32, SshKeyError> {
    let e = r.positive_mpint("the public exponent")?;
    let n = r.positive_mpint("the modulus")?;
    let e_last = e[e.len() - 1];
    if e_last % 2 == 0 || (e.len() == 1 && e_last < 3) {
        return Err(SshKeyError::RsaExponent);
    }
    if n[n.len() - 1] % 2 == 0 {
        return Err(SshKeyError::RsaModulusEven);
    }
    let bits = bit_length(n);
    if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
        return Err(SshKeyError::RsaSize { bits });
    }
    Ok(bits)
}

/// The bit length of a big-endian magnitude whose first byte is not zero.
fn bit_length(magnitude: &[u8]) -> u32 {
    let top_bits = 8 - magnitude[0].leading_zeros() as usize;
    u32::try_from((magnitude.len() - 1) * 8 + top_bits).unwrap_or(u32::MAX)
}

/// The FIDO application (relying party) the key was made for; OpenSSH makes and accepts
/// only `ssh:` ones, so anything else is a key made for some web site.
fn application(r: &mut Reader<'_>) -> Result<(), SshKeyError> {
    let application = r.string("the application")?;
    if !application.starts_with(b"ssh:") {
        return Err(SshKeyError::SkApplication {
            key_type: r.key_type,
        });
    }
    Ok(())
}

struct Reader<'a> {
    key_type: KeyType,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn string(&mut self, field: &'static str) -> Result<&'a [u8], SshKeyError> {
        let truncated = SshKeyError::Truncated {
            key_type: self.key_type,
            field,
        };
        let Some((len, rest)) = self.rest.split_first_chunk::<4>() else {
            return Err(truncated);
        };
        let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| truncated.clone())?;
        if len > rest.len() {
            return Err(truncated);
        }
        let (value, rest) = rest.split_at(len);
        self.rest = rest;
        Ok(value)
    }

    /// A positive mpint (RFC 4251 §5): its magnitude, without the 0x00 that keeps a set
    /// top bit from reading as a sign. Zero, negative numbers and a leading 0x00 that is
    /// not needed are refused, so each number has one encoding.
    fn positive_mpint(&mut self, field: &'static str) -> Result<&'a [u8], SshKeyError> {
        let bytes = self.string(field)?;
        let malformed = SshKeyError::Mpint {
            key_type: self.key_type,
            field,
        };
        match bytes {
            [] => Err(malformed),
            [first, ..] if first & 0x80 != 0 => Err(malformed),
            [0, rest @ ..] => match rest.first() {
                Some(second) if second & 0x80 != 0 => Ok(rest),
                _ => Err(malformed),
            },
            _ => Ok(bytes),
        }
    }
}
