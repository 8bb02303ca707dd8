//! Sealed values: what the portal hands the browser (its session, a sign-in in progress, a
//! download) is encrypted and authenticated with AES-256-GCM under a key only the join-token
//! API holds, so the browser can neither read nor change it, and one kind of value never
//! opens as another (the kind is the associated data).
//!
//! Keys rotate without signing anyone out: the key file lists keys newest first; values are
//! sealed with the first and opened with whichever sealed them (named by a short id in the
//! value). An owner adds a key on top, and removes the old one a session lifetime later.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Key length in bytes (AES-256).
pub const KEY_BYTES: usize = 32;
/// The most keys a key file may list.
pub const MAX_KEYS: usize = 8;
const NONCE_BYTES: usize = 12;
const KEY_ID_BYTES: usize = 4;

/// The kinds of sealed value; each opens only as itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Session,
    SignIn,
    Download,
}

impl Purpose {
    fn associated_data(self) -> &'static [u8] {
        match self {
            Purpose::Session => b"kubeflavor.io/portal-session/v1",
            Purpose::SignIn => b"kubeflavor.io/portal-sign-in/v1",
            Purpose::Download => b"kubeflavor.io/portal-download/v1",
        }
    }
}

/// One key and its id (the first bytes of its SHA-256).
struct Key {
    id: [u8; KEY_ID_BYTES],
    bytes: Zeroizing<[u8; KEY_BYTES]>,
}

/// The portal's keys, newest first.
pub struct SealingKeys {
    keys: Vec<Key>,
}

impl std::fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealingKeys({} keys)", self.keys.len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    #[error(
        "the portal's session key file holds no key; put one key per line, 32 random bytes in base64 (e.g. the output of 'head -c 32 /dev/urandom | base64')"
    )]
    Empty,
    #[error(
        "line {line} of the portal's session key file is not 32 bytes in base64; each line is one key, newest first (make one with 'head -c 32 /dev/urandom | base64')"
    )]
    BadKey { line: usize },
    #[error(
        "the portal's session key file lists {0} keys; at most {MAX_KEYS} (remove keys older than a session lifetime)"
    )]
    TooMany(usize),
    #[error("line {line} of the portal's session key file repeats an earlier key; list each once")]
    Repeated { line: usize },
}

impl SealingKeys {
    /// Keys from a key file's text: one base64 key per line, newest first; blank lines and
    /// lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<SealingKeys, KeyFileError> {
        let mut keys: Vec<Key> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let decoded = Zeroizing::new(
                base64::engine::general_purpose::STANDARD
                    .decode(line)
                    .or_else(|_| URL_SAFE_NO_PAD.decode(line.trim_end_matches('=')))
                    .map_err(|_| KeyFileError::BadKey { line: i + 1 })?,
            );
            let bytes: [u8; KEY_BYTES] = decoded
                .as_slice()
                .try_into()
                .map_err(|_| KeyFileError::BadKey { line: i + 1 })?;
            let key = Key::new(bytes);
            if keys
                .iter()
                .any(|k| k.id == key.id && *k.bytes == *key.bytes)
            {
                return Err(KeyFileError::Repeated { line: i + 1 });
            }
            keys.push(key);
        }
        match keys.len() {
            0 => Err(KeyFileError::Empty),
            n if n > MAX_KEYS => Err(KeyFileError::TooMany(n)),
            _ => Ok(SealingKeys { keys }),
        }
    }

    /// A fresh random key, as a key file's line.
    pub fn new_key_line() -> Result<Zeroizing<String>, getrandom::Error> {
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        getrandom::fill(&mut *bytes)?;
        Ok(Zeroizing::new(
            base64::engine::general_purpose::STANDARD.encode(*bytes),
        ))
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Never: parsing refuses an empty file.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `plaintext` sealed with the newest key, as URL-safe base64 (cookie and form safe).
    pub fn seal(&self, purpose: Purpose, plaintext: &[u8]) -> Result<String, getrandom::Error> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce)?;
        Ok(self.seal_with_nonce(purpose, plaintext, nonce))
    }

    fn seal_with_nonce(
        &self,
        purpose: Purpose,
        plaintext: &[u8],
        nonce: [u8; NONCE_BYTES],
    ) -> String {
        let key = &self.keys[0];
        let cipher = Aes256Gcm::new((&*key.bytes).into());
        let sealed = cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: purpose.associated_data(),
                },
            )
            .expect("AES-GCM encryption only fails for plaintexts above 64 GiB");
        let mut out = Vec::with_capacity(KEY_ID_BYTES + NONCE_BYTES + sealed.len());
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The plaintext of a value [`SealingKeys::seal`] made for `purpose` with any of these
    /// keys; `None` for anything else (changed, another kind, a removed key, not ours).
    pub fn open(&self, purpose: Purpose, sealed: &str) -> Option<Zeroizing<Vec<u8>>> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        if bytes.len() < KEY_ID_BYTES + NONCE_BYTES + 16 {
            return None;
        }
        let (id, rest) = bytes.split_at(KEY_ID_BYTES);
        let (nonce, ciphertext) = rest.split_at(NONCE_BYTES);
        let nonce: [u8; NONCE_BYTES] = nonce.try_into().ok()?;
        self.keys.iter().filter(|k| k.id == id).find_map(|key| {
            Aes256Gcm::new((&*key.bytes).into())
                .decrypt(
                    &Nonce::from(nonce),
                    Payload {
                        msg: ciphertext,
                        aad: purpose.associated_data(),
                    },
                )
                .ok()
                .map(Zeroizing::new)
        })
    }
}

impl Key {
    fn new(bytes: [u8; KEY_BYTES]) -> Key {
        let digest = Sha256::digest(bytes);
        let mut id = [0u8; KEY_ID_BYTES];
        id.copy_from_slice(&digest[..KEY_ID_BYTES]);
        Key {
            id,
            bytes: Zeroizing::new(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(b: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([b; KEY_BYTES])
    }

    #[test]
    fn a_value_opens_only_as_its_own_kind_and_unchanged() {
        let keys = SealingKeys::parse(&line(1)).unwrap();
        let sealed = keys.seal(Purpose::Session, b"alice").unwrap();
        assert_eq!(&**keys.open(Purpose::Session, &sealed).unwrap(), b"alice");
        assert!(keys.open(Purpose::Download, &sealed).is_none());
        assert!(keys.open(Purpose::SignIn, &sealed).is_none());
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(
            keys.open(Purpose::Session, &URL_SAFE_NO_PAD.encode(&bytes))
                .is_none()
        );
        assert!(keys.open(Purpose::Session, "").is_none());
        assert!(keys.open(Purpose::Session, "not base64!").is_none());
    }

    #[test]
    fn rotation_keeps_old_values_until_their_key_is_removed() {
        let old = SealingKeys::parse(&line(1)).unwrap();
        let sealed_old = old.seal(Purpose::Session, b"before").unwrap();
        let rotated = SealingKeys::parse(&format!("{}\n{}\n", line(2), line(1))).unwrap();
        assert_eq!(
            &**rotated.open(Purpose::Session, &sealed_old).unwrap(),
            b"before"
        );
        let sealed_new = rotated.seal(Purpose::Session, b"after").unwrap();
        // New values are sealed with the newest key: the old key alone cannot open them.
        assert!(old.open(Purpose::Session, &sealed_new).is_none());
        let retired = SealingKeys::parse(&line(2)).unwrap();
        assert!(retired.open(Purpose::Session, &sealed_old).is_none());
        assert_eq!(
            &**retired.open(Purpose::Session, &sealed_new).unwrap(),
            b"after"
        );
    }

    #[test]
    fn key_files_name_the_line_at_fault() {
        assert_eq!(
            SealingKeys::parse("# none\n\n").unwrap_err(),
            KeyFileError::Empty
        );
        assert_eq!(
            SealingKeys::parse(&format!("{}\nc2hvcnQ=\n", line(1))).unwrap_err(),
            KeyFileError::BadKey { line: 2 }
        );
        assert_eq!(
            SealingKeys::parse(&format!("{}\n{}\n", line(1), line(1))).unwrap_err(),
            KeyFileError::Repeated { line: 2 }
        );
        let many: String = (0..9).map(|b| line(b) + "\n").collect();
        assert_eq!(
            SealingKeys::parse(&many).unwrap_err(),
            KeyFileError::TooMany(9)
        );
        let fresh = SealingKeys::new_key_line().unwrap();
        assert_eq!(SealingKeys::parse(&fresh).unwrap().len(), 1);
    }

    proptest! {
        #[test]
        fn any_changed_byte_is_refused(plaintext in proptest::collection::vec(any::<u8>(), 0..64), at in any::<usize>(), flip in 1u8..) {
            let keys = SealingKeys::parse(&line(7)).unwrap();
            let sealed = keys.seal_with_nonce(Purpose::Session, &plaintext, [3; NONCE_BYTES]);
            let mut bytes = URL_SAFE_NO_PAD.decode(&sealed).unwrap();
            let i = at % bytes.len();
            bytes[i] ^= flip;
            prop_assert!(keys.open(Purpose::Session, &URL_SAFE_NO_PAD.encode(&bytes)).is_none());
        }
    }
}
