//! Bootstrap tokens: `TokenId`, `TokenSecret`, `BootstrapToken`, and their generation with
//! kubeadm's algorithm (cluster-bootstrap's `GenerateBootstrapToken`: one CSPRNG byte per
//! character of `[0-9a-z]`, bytes >= 252 discarded so each character is uniform).
//!
//! The secret half is the bearer credential of a joining node: it is zeroized on drop,
//! compared in constant time, never printed by `Debug`, never echoed in parse errors, and
//! only leaves this type through the explicit [`TokenSecret::expose`] /
//! [`BootstrapToken::expose`], used where printing it is the command's job.

pub mod meta;
pub mod record;
pub mod secret;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::crypto::random::os_fill;

/// The 36 characters of a bootstrap token, in kubeadm's order
/// (`validBootstrapTokenChars` in cluster-bootstrap).
pub const TOKEN_ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
/// Length of the public half of a token.
pub const TOKEN_ID_LEN: usize = 6;
/// Length of the secret half of a token.
pub const TOKEN_SECRET_LEN: usize = 16;
/// Random bytes at or above this value are discarded: 252 = 7 * 36 is the largest multiple
/// of 36 that fits in a byte, so `b % 36` over the bytes below it is exactly uniform.
pub const REJECT_BYTES_FROM: u8 = 252;

/// Which half of a token a parse error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenPart {
    Id,
    Secret,
}

impl fmt::Display for TokenPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenPart::Id => "token id",
            TokenPart::Secret => "token secret",
        })
    }
}

/// Why a string is not a bootstrap token (or token id, or token secret).
///
/// No variant carries characters of the secret: an error message may end up in a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenParseError {
    #[error(
        "a bootstrap token has the form <id>.<secret> (6 and 16 characters of a-z0-9, e.g. abcdef.0123456789abcdef) but no '.' was found"
    )]
    MissingDot,
    #[error(
        "a bootstrap token has exactly one '.' between its 6-character id and its 16-character secret; found {dots}"
    )]
    TooManyDots { dots: usize },
    #[error("the {part} must be {expected} characters of a-z0-9; got {got}")]
    WrongLength {
        part: TokenPart,
        expected: usize,
        got: usize,
    },
    #[error(
        "the {part} may contain only lowercase letters a-z and digits 0-9; the character at position {position} is not one of them"
    )]
    BadCharacter { part: TokenPart, position: usize },
}

fn check_part(s: &str, part: TokenPart, expected: usize) -> Result<(), TokenParseError> {
    // Counted in characters so that a multi-byte character reads as one wrong character.
    let got = s.chars().count();
    if got != expected {
        return Err(TokenParseError::WrongLength {
            part,
            expected,
            got,
        });
    }
    match s
        .chars()
        .position(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
    {
        Some(position) => Err(TokenParseError::BadCharacter { part, position }),
        None => Ok(()),
    }
}

/// The public half of a bootstrap token: 6 characters of `[a-z0-9]`. It names the token
/// Secret (`bootstrap-token-<id>`) and the bootstrap user (`system:bootstrap:<id>`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TokenId(String);

impl TokenId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The user name the API server gives this token: `system:bootstrap:<id>`.
    pub fn bootstrap_username(&self) -> String {
        format!("{BOOTSTRAP_USER_PREFIX}{}", self.0)
    }
}

/// Prefix of the user name of a bootstrap token identity.
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";

impl FromStr for TokenId {
    type Err = TokenParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_part(s, TokenPart::Id, TOKEN_ID_LEN)?;
        Ok(TokenId(s.to_owned()))
    }
}

impl TryFrom<String> for TokenId {
    type Error = TokenParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<TokenId> for String {
    fn from(id: TokenId) -> String {
        id.0
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenId({:?})", self.0)
    }
}

/// The secret half of a bootstrap token: 16 characters of `[a-z0-9]`.
///
/// Zeroized on drop; `Debug` prints `TokenSecret(****)`; equality is constant time; there
/// is no `Display`: use [`TokenSecret::expose`] where printing is intended.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct TokenSecret([u8; TOKEN_SECRET_LEN]);

impl TokenSecret {
    /// The secret as text. Call only where the secret must leave the process (printing a
    /// freshly minted token, writing the Secret's data, presenting it as a bearer token).
    pub fn expose(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a TokenSecret holds only ASCII [a-z0-9]")
    }
}

impl FromStr for TokenSecret {
    type Err = TokenParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        check_part(s, TokenPart::Secret, TOKEN_SECRET_LEN)?;
        let mut bytes = [0u8; TOKEN_SECRET_LEN];
        bytes.copy_from_slice(s.as_bytes());
        Ok(TokenSecret(bytes))
    }
}

impl ConstantTimeEq for TokenSecret {
    fn ct_eq(&self, other: &Self) -> subtle::Choice {
        self.0.ct_eq(&other.0)
    }
}

impl PartialEq for TokenSecret {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other).into()
    }
}

impl Eq for TokenSecret {}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(****)")
    }
}

/// A whole bootstrap token `<id>.<secret>`, as handed to `kubeadm join --token`.
///
/// `Debug` shows the id only; there is no `Display`: use [`BootstrapToken::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: TokenId,
    secret: TokenSecret,
}

pub use crate::crypto::random::RandomnessError;

impl BootstrapToken {
    pub fn new(id: TokenId, secret: TokenSecret) -> Self {
        BootstrapToken { id, secret }
    }

    pub fn id(&self) -> &TokenId {
        &self.id
    }

    pub fn secret(&self) -> &TokenSecret {
        &self.secret
    }

    /// The token string `<id>.<secret>`, zeroized when dropped. Call only where the token
    /// must leave the process (`token generate`, `token create`, the join command line).
    pub fn expose(&self) -> Zeroizing<String> {
        let mut s = Zeroizing::new(String::with_capacity(TOKEN_ID_LEN + 1 + TOKEN_SECRET_LEN));
        s.push_str(self.id.as_str());
        s.push('.');
        s.push_str(self.secret.expose());
        s
    }

    /// A fresh token from the OS CSPRNG, with kubeadm's algorithm.
    pub fn generate() -> Result<Self, RandomnessError> {
        let mut failure = None;
        let token = Self::generate_with(|buf| {
            if let Err(e) = os_fill(buf) {
                failure.get_or_insert(e);
                // Any byte below 252 ends the rejection loop; the token is discarded below.
                buf.fill(0);
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(token),
        }
    }

    /// kubeadm's algorithm over an injected byte source: one byte per character, bytes
    /// `>= 252` discarded, character `TOKEN_ALPHABET[b % 36]`. The id takes the first 6
    /// accepted bytes, the secret the next 16. `fill` is called as often as needed with a
    /// buffer to fill completely.
    pub fn generate_with(mut fill: impl FnMut(&mut [u8])) -> Self {
        let mut chars = Zeroizing::new([0u8; TOKEN_ID_LEN + TOKEN_SECRET_LEN]);
        let mut pool = Zeroizing::new([0u8; 32]);
        let mut next = pool.len();
        for slot in chars.iter_mut() {
            loop {
                if next == pool.len() {
                    fill(&mut pool[..]);
                    next = 0;
                }
                let b = pool[next];
                next += 1;
                if b < REJECT_BYTES_FROM {
                    *slot = TOKEN_ALPHABET[usize::from(b) % TOKEN_ALPHABET.len()];
                    break;
                }
            }
        }
        let id = TokenId(
            std::str::from_utf8(&chars[..TOKEN_ID_LEN])
                .expect("alphabet is ASCII")
                .to_owned(),
        );
        let mut secret = [0u8; TOKEN_SECRET_LEN];
        secret.copy_from_slice(&chars[TOKEN_ID_LEN..]);
        BootstrapToken {
            id,
            secret: TokenSecret(secret),
        }
    }
}

impl FromStr for BootstrapToken {
    type Err = TokenParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let dots = s.matches('.').count();
        let (id, secret) = match dots {
            0 => return Err(TokenParseError::MissingDot),
            1 => s.split_once('.').expect("one dot"),
            dots => return Err(TokenParseError::TooManyDots { dots }),
        };
        Ok(BootstrapToken {
            id: id.parse()?,
            secret: secret.parse()?,
        })
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &self.secret)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A byte source that replays `bytes` and panics if asked for more.
    fn replay(bytes: Vec<u8>) -> impl FnMut(&mut [u8]) {
        let mut pos = 0;
        move |buf: &mut [u8]| {
            for b in buf.iter_mut() {
                *b = *bytes.get(pos).unwrap_or(&0);
                pos += 1;
            }
        }
    }

    #[test]
    fn parses_a_valid_token() {
        let t: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        assert_eq!(t.id().as_str(), "abcdef");
        assert_eq!(t.secret().expose(), "0123456789abcdef");
        assert_eq!(&*t.expose(), "abcdef.0123456789abcdef");
        assert_eq!(t.id().bootstrap_username(), "system:bootstrap:abcdef");
    }

    #[test]
    fn parse_errors_name_the_problem() {
        let e = |s: &str| s.parse::<BootstrapToken>().unwrap_err();
        assert_eq!(e("abcdef0123456789abcdef"), TokenParseError::MissingDot);
        assert_eq!(
            e("abc.def.0123456789abcdef"),
            TokenParseError::TooManyDots { dots: 2 }
        );
        assert_eq!(
            e("abcde.0123456789abcdef"),
            TokenParseError::WrongLength {
                part: TokenPart::Id,
                expected: 6,
                got: 5
            }
        );
        assert_eq!(
            e("abcdef.0123456789abcde"),
            TokenParseError::WrongLength {
                part: TokenPart::Secret,
                expected: 16,
                got: 15
            }
        );
        assert_eq!(
            e("abcDef.0123456789abcdef"),
            TokenParseError::BadCharacter {
                part: TokenPart::Id,
                position: 3
            }
        );
        assert_eq!(
            e("abcdef.0123456789abcdeé"),
            TokenParseError::BadCharacter {
                part: TokenPart::Secret,
                position: 15
            }
        );
        assert!(e("").to_string().contains("no '.' was found"));
    }

    #[test]
    fn secret_never_appears_in_debug_or_errors() {
        let t: BootstrapToken = "abcdef.s3cr3tv4lu3zzzzz".parse().unwrap();
        let debug = format!("{t:?} {:?}", t.secret());
        assert!(!debug.contains("s3cr3t"), "{debug}");
        assert!(debug.contains("TokenSecret(****)"));
        assert!(debug.contains("abcdef"));
        let err = "abcdef.s3cr3tv4lu3zzzzZ"
            .parse::<BootstrapToken>()
            .unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }

    #[test]
    fn secrets_compare_by_value() {
        let a: TokenSecret = "0123456789abcdef".parse().unwrap();
        let b: TokenSecret = "0123456789abcdef".parse().unwrap();
        let c: TokenSecret = "0123456789abcdeg".parse().unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    /// Guards the rejection step of kubeadm's algorithm: bytes 252..=255 must be skipped,
    /// not folded with `% 36` (which would map them to '0'..'3' and bias those four).
    #[test]
    fn bytes_from_252_up_are_rejected_not_folded() {
        // Every character slot is preceded by the four rejectable bytes; `% 36` without
        // rejection would consume them and produce "0123" patterns instead.
        let mut stream = Vec::new();
        for i in 0..22u8 {
            stream.extend_from_slice(&[252, 253, 254, 255]);
            stream.push(i + 10); // 'a' + i
        }
        let t = BootstrapToken::generate_with(replay(stream));
        assert_eq!(&*t.expose(), "abcdef.ghijklmnopqrstuv");
    }

    #[test]
    fn accepted_bytes_map_through_modulo_36() {
        // 0, 35, 36, 71, 251 exercise both ends of each of the 7 full cycles.
        let stream: Vec<u8> = [0u8, 35, 36, 71, 216, 251]
            .into_iter()
            .chain(std::iter::repeat_n(1u8, 16))
            .collect();
        let t = BootstrapToken::generate_with(replay(stream));
        assert_eq!(&*t.expose(), "0z0z0z.1111111111111111");
    }

    #[test]
    fn generator_refills_its_pool_across_calls() {
        // 200 rejected bytes force several refills of the internal pool before any
        // character is accepted.
        let stream: Vec<u8> = std::iter::repeat_n(255u8, 200)
            .chain(std::iter::repeat_n(7u8, 22))
            .collect();
        let t = BootstrapToken::generate_with(replay(stream));
        assert_eq!(&*t.expose(), "777777.7777777777777777");
    }

    #[test]
    fn os_generated_tokens_parse_back() {
        for _ in 0..100 {
            let t = BootstrapToken::generate().unwrap();
            let back: BootstrapToken = t.expose().parse().unwrap();
            assert_eq!(back, t);
        }
    }

    proptest! {
        #[test]
        fn any_byte_stream_yields_a_valid_token(bytes in proptest::collection::vec(any::<u8>(), 64..256)) {
            let mut cycle = bytes.into_iter().cycle();
            // Guarantee termination even for a stream of only rejectable bytes.
            let mut n = 0u32;
            let t = BootstrapToken::generate_with(|buf| for b in buf.iter_mut() {
                n += 1;
                *b = if n > 10_000 { 0 } else { cycle.next().unwrap() };
            });
            let s = t.expose();
            prop_assert!(s.parse::<BootstrapToken>().is_ok());
        }

        #[test]
        fn every_valid_token_string_round_trips(s in "[a-z0-9]{6}\\.[a-z0-9]{16}") {
            let t: BootstrapToken = s.parse().unwrap();
            prop_assert_eq!(&*t.expose(), &s);
        }

        #[test]
        fn strings_off_the_grammar_are_refused(s in "\\PC{0,30}") {
            let valid = s.len() == 23
                && s.as_bytes()[6] == b'.'
                && s.bytes().enumerate().all(|(i, b)| i == 6 || b.is_ascii_lowercase() || b.is_ascii_digit());
            prop_assert_eq!(s.parse::<BootstrapToken>().is_ok(), valid);
        }
    }
}
