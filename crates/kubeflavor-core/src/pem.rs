//! Minimal PEM (RFC 7468) reading and writing, zeroizing every decoded body.
//!
//! x509-parser has a PEM reader, but its decoded bodies are plain `Vec`s; private keys pass
//! through here, so this module owns the buffers and wipes them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

/// One decoded PEM block.
pub(crate) struct Block {
    pub(crate) label: String,
    pub(crate) der: Zeroizing<Vec<u8>>,
}

/// Why a text could not be read as PEM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    #[error("no PEM block found (expected a line like '-----BEGIN CERTIFICATE-----')")]
    NoBlock,
    #[error("PEM block '{0}' has no matching '-----END {0}-----' line")]
    Unterminated(String),
    #[error(
        "PEM block '{0}' has headers (for example Proc-Type): encrypted PEM is not supported; \
         decrypt the key first (openssl pkey -in KEY -out KEY.plain)"
    )]
    Headers(String),
    #[error("PEM block '{0}' is not valid base64")]
    Base64(String),
}

const BEGIN: &str = "-----BEGIN ";
const END: &str = "-----END ";
const DASHES: &str = "-----";

/// Decodes every PEM block of `text`, in order. Text outside blocks is ignored, as openssl
/// and Go's `encoding/pem` do (certificate bundles often carry comments).
pub(crate) fn decode_all(text: &[u8]) -> Result<Vec<Block>, PemError> {
    let text = String::from_utf8_lossy(text);
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        let Some(label) = line
            .strip_prefix(BEGIN)
            .and_then(|rest| rest.strip_suffix(DASHES))
        else {
            continue;
        };
        let end_line = format!("{END}{label}{DASHES}");
        let mut body = Zeroizing::new(String::new());
        let mut terminated = false;
        for line in lines.by_ref() {
            let line = line.trim();
            if line == end_line {
                terminated = true;
                break;
            }
            if line.contains(':') {
                return Err(PemError::Headers(label.to_string()));
            }
            body.push_str(line);
        }
        if !terminated {
            return Err(PemError::Unterminated(label.to_string()));
        }
        let mut der = Zeroizing::new(Vec::new());
        STANDARD
            .decode_vec(body.as_bytes(), &mut der)
            .map_err(|_| PemError::Base64(label.to_string()))?;
        blocks.push(Block {
            label: label.to_string(),
            der,
        });
    }
    if blocks.is_empty() {
        return Err(PemError::NoBlock);
    }
    Ok(blocks)
}

/// Encodes one block the way Go's `encoding/pem` does (64-column lines, trailing newline),
/// which is what kubeadm writes.
pub(crate) fn encode(label: &str, der: &[u8]) -> Zeroizing<String> {
    let b64 = Zeroizing::new(STANDARD.encode(der));
    let mut out = Zeroizing::new(String::with_capacity(b64.len() + b64.len() / 64 + 64));
    out.push_str(BEGIN);
    out.push_str(label);
    out.push_str(DASHES);
    out.push('\n');
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(END);
    out.push_str(label);
    out.push_str(DASHES);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode_round_trips_and_wraps_at_64_columns() {
        let der: Vec<u8> = (0..=255u8).collect();
        let text = encode("TEST DATA", &der);
        assert!(text.lines().all(|l| l.len() <= 64));
        let blocks = decode_all(text.as_bytes()).unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].label, "TEST DATA");
        assert_eq!(&blocks[0].der[..], &der[..]);
    }

    #[test]
    fn bundles_with_comments_yield_every_block() {
        let text = format!(
            "# first\n{}junk between\n{}",
            &*encode("CERTIFICATE", b"one"),
            &*encode("CERTIFICATE", b"two")
        );
        let blocks = decode_all(text.as_bytes()).unwrap();
        let bodies: Vec<&[u8]> = blocks.iter().map(|b| &b.der[..]).collect();
        assert_eq!(bodies, vec![&b"one"[..], &b"two"[..]]);
    }

    #[test]
    fn malformed_pem_is_refused_with_the_reason() {
        assert_eq!(decode_all(b"hello").err(), Some(PemError::NoBlock));
        assert_eq!(
            decode_all(b"-----BEGIN X-----\nAAAA\n").err(),
            Some(PemError::Unterminated("X".into()))
        );
        assert_eq!(
            decode_all(b"-----BEGIN X-----\n!!!!\n-----END X-----\n").err(),
            Some(PemError::Base64("X".into()))
        );
        let encrypted = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        assert!(matches!(
            decode_all(encrypted.as_bytes()),
            Err(PemError::Headers(_))
        ));
    }
}
