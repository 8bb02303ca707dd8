//! OpenSSH public keys a node's administrator gives the join-token API, to be installed on
//! the machine (cloud-init's `ssh_authorized_keys`). Each one becomes a line of the default
//! user's `~/.ssh/authorized_keys`, so a key is accepted only as a plain key: one line
//! `<type> <base64> [comment]`, no options (an options prefix such as `command=` or
//! `from=` changes what the key may do), no second line, and a blob that parses fully as
//! the public key its type names (RFC 4253, RFC 5656, RFC 8709, OpenSSH PROTOCOL.u2f).
//!
//! The line is taken as given, never trimmed: whitespace before or after it, or more than
//! one space between its fields, is refused, like [`crate::token::meta::IssuedTo`]. What is
//! written to the machine is the line rebuilt from the parsed parts ([`SshPublicKey`]'s
//! `Display`), never the text received.

mod blob;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use sha2::{Digest, Sha256};

use crate::invisible::{is_invisible, shown};

/// The most keys one request may install.
pub const MAX_SSH_KEYS: usize = 10;
/// The longest accepted line, in bytes: a 16384-bit RSA key with a full comment is under
/// 4 KiB.
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// The largest accepted key blob (decoded), in bytes: a 16384-bit RSA key is about 2 KiB.
pub const MAX_BLOB_BYTES: usize = 4 * 1024;
/// The longest comment, in characters.
pub const MAX_COMMENT_CHARS: usize = 256;
/// The smallest RSA modulus accepted, in bits (below it, RSA is breakable or close to it).
pub const MIN_RSA_BITS: u32 = 2048;
/// The largest RSA modulus accepted, in bits: OpenSSH's own limit (`SSHBUF_MAX_BIGNUM`).
pub const MAX_RSA_BITS: u32 = 16384;

/// The accepted key types, as written in a key line.
const ACCEPTED_TYPES: &str = "ssh-ed25519, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, \
                              ecdsa-sha2-nistp521, ssh-rsa, sk-ssh-ed25519@openssh.com, \
                              sk-ecdsa-sha2-nistp256@openssh.com";

/// The shape every message repeats.
const LINE_SHAPE: &str = "'<type> <base64> [comment]'";

/// The algorithm of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    Ed25519,
    EcdsaP256,
    EcdsaP384,
    EcdsaP521,
    Rsa,
    /// Ed25519 held by a FIDO security key.
    SkEd25519,
    /// ECDSA P-256 held by a FIDO security key.
    SkEcdsaP256,
}

impl KeyType {
    pub const ALL: [KeyType; 7] = [
        KeyType::Ed25519,
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::EcdsaP521,
        KeyType::Rsa,
        KeyType::SkEd25519,
        KeyType::SkEcdsaP256,
    ];

    /// The name in a key line and inside the blob.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::Ed25519 => "ssh-ed25519",
            KeyType::EcdsaP256 => "ecdsa-sha2-nistp256",
            KeyType::EcdsaP384 => "ecdsa-sha2-nistp384",
            KeyType::EcdsaP521 => "ecdsa-sha2-nistp521",
            KeyType::Rsa => "ssh-rsa",
            KeyType::SkEd25519 => "sk-ssh-ed25519@openssh.com",
            KeyType::SkEcdsaP256 => "sk-ecdsa-sha2-nistp256@openssh.com",
        }
    }

    fn from_name(name: &str) -> Option<KeyType> {
        KeyType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which rule a key line breaks. Messages quote at most a short, escaped part of the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshKeyError {
    #[error("the SSH key is empty; give one OpenSSH public key line {LINE_SHAPE}")]
    Empty,
    #[error(
        "the SSH key line is {bytes} bytes long; at most {MAX_LINE_BYTES} are accepted \
         (give the public key, not the private key or a whole file)"
    )]
    LineTooLong { bytes: usize },
    #[error(
        "the SSH key holds a line break; give exactly one key per entry, as one line \
         {LINE_SHAPE} (a second line would be a second authorized key)"
    )]
    LineBreak,
    #[error(
        "the SSH key starts or ends with whitespace, or separates its fields by other than \
         one space; write it as {LINE_SHAPE} with single spaces and nothing around it"
    )]
    Spacing,
    #[error(
        "the SSH key starts with '{found}', an authorized_keys option; only plain keys \
         {LINE_SHAPE} are accepted (remove the options before the key type)"
    )]
    Options { found: String },
    #[error(
        "ssh-dss (DSA) keys are not accepted: OpenSSH has disabled DSA, a key type limited \
         to 1024 bits; use an ssh-ed25519 key (ssh-keygen -t ed25519)"
    )]
    Dsa,
    #[error("SSH key type '{found}' is not accepted; use one of: {ACCEPTED_TYPES}")]
    UnsupportedType { found: String },
    #[error("the {key_type} key has no base64 key data; write it as {LINE_SHAPE}")]
    MissingBlob { key_type: KeyType },
    #[error(
        "the {key_type} key's data is {bytes} bytes of base64; at most {MAX_BLOB_BYTES} \
         bytes of key are accepted (give the public key, not the private key)"
    )]
    BlobTooLarge { key_type: KeyType, bytes: usize },
    #[error(
        "the {key_type} key's data is not canonical padded base64 (standard alphabet); \
         copy the key line again from the .pub file"
    )]
    Base64 { key_type: KeyType },
    #[error(
        "the {key_type} key's data ends early (reading {field}); the key is truncated, \
         copy the whole line from the .pub file"
    )]
    Truncated {
        key_type: KeyType,
        field: &'static str,
    },
    #[error(
        "the {key_type} key's data has {bytes} bytes after the key; copy the key line again \
         from the .pub file"
    )]
    TrailingBytes { key_type: KeyType, bytes: usize },
    #[error(
        "the key's data is of type '{inner}', but the line says {key_type}; write the type \
         the .pub file gives"
    )]
    TypeMismatch { key_type: KeyType, inner: String },
    #[error(
        "the {key_type} key's public key is {bytes} bytes; an Ed25519 public key is 32 bytes \
         (copy the key line again from the .pub file)"
    )]
    Ed25519Length { key_type: KeyType, bytes: usize },
    #[error(
        "the {key_type} key names curve '{found}'; it must name '{expected}' (write the type \
         the .pub file gives)"
    )]
    CurveMismatch {
        key_type: KeyType,
        found: String,
        expected: &'static str,
    },
    #[error(
        "the {key_type} key's point is not an uncompressed point of {expected} bytes \
         (0x04, x, y); copy the key line again from the .pub file"
    )]
    EcPoint { key_type: KeyType, expected: usize },
    #[error(
        "the {key_type} key's {field} is not a well-formed positive mpint (RFC 4251: no \
         needless leading zero byte, no sign bit); copy the key line again from the .pub file"
    )]
    Mpint {
        key_type: KeyType,
        field: &'static str,
    },
    #[error(
        "the ssh-rsa key's public exponent is even or below 3; it is not an RSA key, \
         generate a new key (ssh-keygen -t ed25519)"
    )]
    RsaExponent,
    #[error(
        "the ssh-rsa key's modulus is even; it is not an RSA key, generate a new key \
         (ssh-keygen -t ed25519)"
    )]
    RsaModulusEven,
    #[error(
        "ssh-rsa key of {bits} bits; use {MIN_RSA_BITS} to {MAX_RSA_BITS} bits, or an \
         ssh-ed25519 key (ssh-keygen -t ed25519)"
    )]
    RsaSize { bits: u32 },
    #[error(
        "the {key_type} key's application is not an 'ssh:' application string; register \
         the security key for SSH (ssh-keygen -t ed25519-sk) and give its .pub line"
    )]
    SkApplication { key_type: KeyType },
    #[error(
        "the SSH key's comment is {chars} characters long; at most {MAX_COMMENT_CHARS} are \
         accepted (shorten it)"
    )]
    CommentTooLong { chars: usize },
    #[error(
        "the SSH key's comment holds a control character (U+{code_point:04X}); it must be \
         printable text (remove tabs and other control characters)"
    )]
    CommentControl { code_point: u32 },
    #[error(
        "the SSH key's comment holds U+{code_point:04X}, a character that is invisible or \
         changes how the text around it is shown; it must be visible text (remove it)"
    )]
    CommentInvisible { code_point: u32 },
    #[error(
        "the SSH key's comment holds U+{code_point:04X}, {why}; YAML readers such as \
         cloud-init's refuse the document that would carry it, so the machine would never \
         join (remove it)"
    )]
    CommentNotText { code_point: u32, why: &'static str },
}

/// Which rule a list of keys breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshKeyListError {
    #[error("{count} SSH keys given; at most {MAX_SSH_KEYS} are accepted (give fewer keys)")]
    TooMany { count: usize },
    #[error("SSH key {index}: {source}")]
    Invalid {
        index: usize,
        #[source]
        source: SshKeyError,
    },
    #[error(
        "SSH key {index} is the same key as SSH key {first} ({fingerprint}); give each key once"
    )]
    Duplicate {
        index: usize,
        first: usize,
        fingerprint: String,
    },
}

/// A plain OpenSSH public key, parsed once from its authorized_keys line: its type, its
/// blob (checked to be a well-formed key of that type) and an optional comment.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SshPublicKey {
    key_type: KeyType,
    bits: u32,
    blob: Vec<u8>,
    comment: Option<String>,
}

impl SshPublicKey {
    pub fn key_type(&self) -> KeyType {
        self.key_type
    }

    /// The key's size as `ssh-keygen -l` prints it: the RSA modulus' bit length, the
    /// curve's size for the others.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The wire-format public key (what the base64 encodes).
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    pub fn comment(&self) -> Option<&str> {
        self.comment.as_deref()
    }

    /// `SHA256:` and the unpadded base64 of SHA-256 over the blob: what
    /// `ssh-keygen -l -E sha256` and sshd's logs print for the key.
    pub fn fingerprint(&self) -> String {
        format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(Sha256::digest(&self.blob))
        )
    }

    /// Whether `other` is the same key, whatever either comment says.
    pub fn same_key(&self, other: &SshPublicKey) -> bool {
        self.key_type == other.key_type && self.blob == other.blob
    }
    /// The `ssh-ed25519` key of the 32-byte public key `public` (as a key pair made
    /// elsewhere holds it), with `comment` checked as a parsed one is.
    pub fn ed25519(public: &[u8; 32], comment: Option<&str>) -> Result<Self, SshKeyError> {
        let mut blob = Vec::with_capacity(51);
        for part in [KeyType::Ed25519.as_str().as_bytes(), &public[..]] {
            blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
            blob.extend_from_slice(part);
        }
        let bits = blob::check(KeyType::Ed25519, &blob)?;
        Ok(SshPublicKey {
            key_type: KeyType::Ed25519,
            bits,
            blob,
            comment: comment.map(check_comment).transpose()?,
        })
    }
}

impl fmt::Debug for SshPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshPublicKey")
            .field("key_type", &self.key_type)
            .field("bits", &self.bits)
            .field("fingerprint", &self.fingerprint())
            .field("comment", &self.comment)
            .finish()
    }
}

/// The canonical line, rebuilt from the parsed parts.
impl fmt::Display for SshPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key_type, STANDARD.encode(&self.blob))?;
        if let Some(comment) = &self.comment {
            write!(f, " {comment}")?;
        }
        Ok(())
    }
}

impl FromStr for SshPublicKey {
    type Err = SshKeyError;

    fn from_str(line: &str) -> Result<Self, SshKeyError> {
        if line.len() > MAX_LINE_BYTES {
            return Err(SshKeyError::LineTooLong { bytes: line.len() });
        }
        if line.contains(['\n', '\r']) {
            return Err(SshKeyError::LineBreak);
        }
        if line.is_empty() {
            return Err(SshKeyError::Empty);
        }
        if line.starts_with(char::is_whitespace) || line.ends_with(char::is_whitespace) {
            return Err(SshKeyError::Spacing);
        }
        let (type_name, rest) = next_field(line)?;
        let key_type = key_type(type_name)?;
        let Some(rest) = rest else {
            return Err(SshKeyError::MissingBlob { key_type });
        };
        let (encoded, comment) = next_field(rest)?;
        let blob = decode(key_type, encoded)?;
        let bits = blob::check(key_type, &blob)?;
        let comment = comment.map(check_comment).transpose()?;
        Ok(SshPublicKey {
            key_type,
            bits,
            blob,
            comment,
        })
    }
}

/// The field up to the first whitespace, and what follows the single space after it.
fn next_field(s: &str) -> Result<(&str, Option<&str>), SshKeyError> {
    let Some(end) = s.find(char::is_whitespace) else {
        return Ok((s, None));
    };
    let (field, rest) = s.split_at(end);
    match rest.strip_prefix(' ') {
        Some(rest) if !rest.starts_with(char::is_whitespace) => Ok((field, Some(rest))),
        _ => Err(SshKeyError::Spacing),
    }
}

/// The authorized_keys options OpenSSH knows without a value (sshd(8), AUTHORIZED_KEYS
/// FILE FORMAT); the others are written `name=...`.
const FLAG_OPTIONS: [&str; 14] = [
    "agent-forwarding",
    "cert-authority",
    "no-agent-forwarding",
    "no-port-forwarding",
    "no-pty",
    "no-touch-required",
    "no-user-rc",
    "no-x11-forwarding",
    "port-forwarding",
    "pty",
    "restrict",
    "user-rc",
    "verify-required",
    "x11-forwarding",
];

fn key_type(name: &str) -> Result<KeyType, SshKeyError> {
    if let Some(key_type) = KeyType::from_name(name) {
        return Ok(key_type);
    }
    let found = excerpt(name);
    if name == "ssh-dss" {
        Err(SshKeyError::Dsa)
    } else if name.contains(['=', ',', '"'])
        || FLAG_OPTIONS.contains(&name.to_ascii_lowercase().as_str())
    {
        Err(SshKeyError::Options { found })
    } else {
        Err(SshKeyError::UnsupportedType { found })
    }
}

/// At most 40 characters of `s`, invisible ones escaped: enough to recognise, short in a
/// message.
fn excerpt(s: &str) -> String {
    let head: String = s.chars().take(40).collect();
    let mut out = shown(&head).into_owned();
    if head.len() < s.len() {
        out.push_str("...");
    }
    out
}

/// The blob, if `encoded` is canonical padded standard base64 of at most
/// [`MAX_BLOB_BYTES`]. Canonical: encoding the blob again gives `encoded` back, so one
/// key has one spelling (a duplicate cannot hide behind other padding bits).
fn decode(key_type: KeyType, encoded: &str) -> Result<Vec<u8>, SshKeyError> {
    if encoded.len() > MAX_BLOB_BYTES.div_ceil(3) * 4 {
        return Err(SshKeyError::BlobTooLarge {
            key_type,
            bytes: encoded.len(),
        });
    }
    let blob = STANDARD
        .decode(encoded)
        .map_err(|_| SshKeyError::Base64 { key_type })?;
    if blob.is_empty() || STANDARD.encode(&blob) != encoded {
        return Err(SshKeyError::Base64 { key_type });
    }
    Ok(blob)
}

/// The comment as given (the single separating space is not part of it): visible text of
/// at most [`MAX_COMMENT_CHARS`] characters; spaces inside are kept.
fn check_comment(comment: &str) -> Result<String, SshKeyError> {
    let chars = comment.chars().count();
    if chars > MAX_COMMENT_CHARS {
        return Err(SshKeyError::CommentTooLong { chars });
    }
    if let Some(c) = comment.chars().find(|c| c.is_control()) {
        return Err(SshKeyError::CommentControl {
            code_point: u32::from(c),
        });
    }
    if let Some(c) = comment.chars().find(|&c| is_invisible(c)) {
        return Err(SshKeyError::CommentInvisible {
            code_point: u32::from(c),
        });
    }
    if let Some(c) = comment.chars().find(|&c| is_noncharacter(c)) {
        return Err(SshKeyError::CommentNotText {
            code_point: u32::from(c),
            why: "a Unicode noncharacter (U+FDD0..U+FDEF, U+xFFFE, U+xFFFF)",
        });
    }
    if let Some(c) = comment.chars().find(|&c| !yaml11_printable(c)) {
        return Err(SshKeyError::CommentNotText {
            code_point: u32::from(c),
            why: "outside YAML 1.1's printable characters",
        });
    }
    Ok(comment.to_owned())
}

/// Unicode noncharacters: U+FDD0..U+FDEF and the last two code points of every plane
/// (U+xFFFE, U+xFFFF). Never text; YAML 1.1 readers refuse U+FFFE and U+FFFF.
pub fn is_noncharacter(c: char) -> bool {
    let cp = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&cp) || cp & 0xFFFE == 0xFFFE
}

/// YAML 1.1's printable set (spec 5.1, c-printable), as PyYAML's Reader checks every
/// character of a stream before parsing (cloud-init reads user data with PyYAML):
/// tab, LF, CR, U+0020..U+007E, U+0085, U+00A0..U+D7FF, U+E000..U+FFFD and
/// U+10000..U+10FFFF.
pub fn yaml11_printable(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\r'
            | '\u{20}'..='\u{7E}'
            | '\u{85}'
            | '\u{A0}'..='\u{D7FF}'
            | '\u{E000}'..='\u{FFFD}'
            | '\u{10000}'..='\u{10FFFF}'
    )
}

/// Parses the keys of one request: at most [`MAX_SSH_KEYS`], each valid, none given twice.
/// Errors name the index (from 0) of the offending entry.
pub fn parse_keys<S: AsRef<str>>(lines: &[S]) -> Result<Vec<SshPublicKey>, SshKeyListError> {
    if lines.len() > MAX_SSH_KEYS {
        return Err(SshKeyListError::TooMany { count: lines.len() });
    }
    let keys = lines
        .iter()
        .enumerate()
        .map(|(index, line)| {
            line.as_ref()
                .parse()
                .map_err(|source| SshKeyListError::Invalid { index, source })
        })
        .collect::<Result<Vec<SshPublicKey>, _>>()?;
    check_keys(&keys)?;
    Ok(keys)
}

/// Checks a list of parsed keys: at most [`MAX_SSH_KEYS`], no key twice (same type and
/// blob, whatever the comments say; the later one is reported).
pub fn check_keys(keys: &[SshPublicKey]) -> Result<(), SshKeyListError> {
    if keys.len() > MAX_SSH_KEYS {
        return Err(SshKeyListError::TooMany { count: keys.len() });
    }
    for (index, key) in keys.iter().enumerate() {
        if let Some(first) = keys[..index].iter().position(|k| k.same_key(key)) {
            return Err(SshKeyListError::Duplicate {
                index,
                first,
                fingerprint: key.fingerprint(),
            });
        }
    }
    Ok(())
}
