//! PEM reading (the `pem` crate, which kube-client and rcgen also read PEM with) and
//! writing, with kubeflavor's error texts.
//!
//! Private keys pass through here, and the `pem` crate wipes nothing. Each decoded body is
//! moved, without a copy, into a `Zeroizing` buffer that wipes it on drop. While decoding,
//! the crate also copies a block's base64 text (whitespace stripped) and frees that copy
//! unwiped: it is the text the caller passed in, no secret the caller did not hold, but it
//! outlives the caller's own wiping. Encoding stays here because the crate's encoder leaves
//! such copies behind too; ours writes into `Zeroizing` buffers only.

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

const BEGIN: &[u8] = b"-----BEGIN ";
const END: &str = "-----END ";
const DASHES: &str = "-----";

/// Decodes every PEM block of `text`, in order. Text outside blocks is ignored, as openssl
/// and Go's `encoding/pem` do (certificate bundles often carry comments).
pub(crate) fn decode_all(text: &[u8]) -> Result<Vec<Block>, PemError> {
    let blocks = pieces(text)
        .map(decode_block)
        .collect::<Result<Vec<_>, _>>()?;
    if blocks.is_empty() {
        return Err(PemError::NoBlock);
    }
    Ok(blocks)
}

/// Decodes the first PEM block of `text` and ignores what follows it, as Go's `pem.Decode`
/// (and so the API server's reading of a CSR) does.
pub(crate) fn decode_first(text: &[u8]) -> Result<Block, PemError> {
    pieces(text)
        .next()
        .map_or(Err(PemError::NoBlock), decode_block)
}

/// `text` cut before every line that starts with `-----BEGIN ` (after blanks), text before
/// the first one dropped: one piece per block, so that an error can name the block it is in
/// (the crate's errors do not) and a block without its END line is an error rather than
/// silently skipped. The crate alone would also take a `-----BEGIN ` in the middle of a line
/// for a block; Go's `pem.Decode` does not, and neither does kubeflavor.
fn pieces(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let starts_a_line = |i: usize| {
        let blanks = text[..i]
            .iter()
            .rev()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        matches!(text[..i - blanks].last(), None | Some(b'\n' | b'\r'))
    };
    let mut starts = text
        .windows(BEGIN.len())
        .enumerate()
        .filter(move |&(i, w)| w == BEGIN && starts_a_line(i))
        .map(|(i, _)| i)
        .peekable();
    std::iter::from_fn(move || {
        let start = starts.next()?;
        let end = starts.peek().copied().unwrap_or(text.len());
        Some(&text[start..end])
    })
}

/// Decodes one piece: a `-----BEGIN ` line, the block, then anything up to the next block.
fn decode_block(piece: &[u8]) -> Result<Block, PemError> {
    let parsed = ::pem::parse(piece).map_err(|e| {
        let label = label_of(piece);
        match e {
            ::pem::PemError::MalformedFraming
            | ::pem::PemError::MissingEndTag
            | ::pem::PemError::MismatchedTags(..) => PemError::Unterminated(label),
            // The crate sees headers only above a blank line; without one they fail as base64.
            _ if body(piece).contains(&b':') => PemError::Headers(label),
            _ => PemError::Base64(label),
        }
    })?;
    if parsed.headers().iter().next().is_some() {
        return Err(PemError::Headers(parsed.tag().to_owned()));
    }
    let label = parsed.tag().to_owned();
    Ok(Block {
        label,
        der: Zeroizing::new(parsed.into_contents()),
    })
}

/// A piece up to its END line: the block's headers and base64 text.
fn body(piece: &[u8]) -> &[u8] {
    let end = piece
        .windows(END.len())
        .position(|w| w == END.as_bytes())
        .unwrap_or(piece.len());
    &piece[..end]
}

/// The label on a piece's BEGIN line, for an error about a block the crate could not read.
fn label_of(piece: &[u8]) -> String {
    let line = piece[BEGIN.len()..]
        .split(|&b| b == b'\n' || b == b'\r')
        .next()
        .unwrap_or_default();
    let line = line.trim_ascii_end();
    let label = line.strip_suffix(DASHES.as_bytes()).unwrap_or(line);
    String::from_utf8_lossy(label).into_owned()
}

/// Encodes one block the way Go's `encoding/pem` does (64-column lines, trailing newline),
/// which is what kubeadm writes.
pub(crate) fn encode(label: &str, der: &[u8]) -> Zeroizing<String> {
    let b64 = Zeroizing::new(STANDARD.encode(der));
    let mut out = Zeroizing::new(String::with_capacity(b64.len() + b64.len() / 64 + 64));
    out.push_str("-----BEGIN ");
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
        let no_blank_line = encrypted.replace("\n\n", "\n");
        assert_eq!(
            decode_all(no_blank_line.as_bytes()).err(),
            Some(PemError::Headers("RSA PRIVATE KEY".into()))
        );
    }

    #[test]
    fn a_block_cut_short_is_refused_even_after_good_ones() {
        let text = format!(
            "{}-----BEGIN CERTIFICATE-----\nAAAA\n",
            &*encode("A", b"one")
        );
        assert_eq!(
            decode_all(text.as_bytes()).err(),
            Some(PemError::Unterminated("CERTIFICATE".into()))
        );
        let mismatched = "-----BEGIN A-----\nAAAA\n-----END B-----\n";
        assert_eq!(
            decode_all(mismatched.as_bytes()).err(),
            Some(PemError::Unterminated("A".into()))
        );
    }

    #[test]
    fn a_begin_line_must_start_a_line() {
        let cert = encode("CERTIFICATE", b"one");
        let glued = format!("foo{}", &*cert);
        assert_eq!(decode_all(glued.as_bytes()).err(), Some(PemError::NoBlock));
        let indented = format!("# bundle\n  {}", &*cert);
        assert_eq!(decode_all(indented.as_bytes()).unwrap().len(), 1);
    }

    #[test]
    fn only_the_first_block_is_read_by_decode_first() {
        let text = format!("{}-----BEGIN B-----\n!!!!\n", &*encode("A", b"one"));
        let first = decode_first(text.as_bytes()).unwrap();
        assert_eq!((first.label.as_str(), &first.der[..]), ("A", &b"one"[..]));
        assert_eq!(decode_first(b"no block").err(), Some(PemError::NoBlock));
    }
}
