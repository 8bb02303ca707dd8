use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE};
use proptest::prelude::*;

use super::*;

// Fixture keys and their fingerprints, made by OpenSSH 9.2's ssh-keygen
// (`ssh-keygen -t <type> -C fixture-<type>`, then `ssh-keygen -l -E sha256 -f <file>.pub`).
// Public keys only; their private halves were never kept.
const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID+0lgOSrsnOWjEuQ1dz93pw8CBgeAOVFgwIhwItULwX fixture-ed25519";
const ED25519_FP: &str = "SHA256:+X+gf/TLZ2hJ7BIdqLBp3hpslTFwxpepGEQyQTqqhgE";
const ECDSA_P256: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBD29e5DCjIoY8lj3UG7bstFu/yFtVkC3ZD8bTd3a39VsSZ1/cUZ+B6DyKzYj+VkUPoPzrqhpVXqAWRY7HbTfiQk= fixture-ecdsa256";
const ECDSA_P256_FP: &str = "SHA256:Od2faash503QXov6naBRmpa5SUhAbVzBoeUgEHlaswE";
const ECDSA_P384: &str = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBKDt1kAmkBh7ftpjMin2/39OI1HknA8RFt1jB2QzoIhfOHaGTqikoNgqcar2dJuVih9lyGU5uLhwILybmFn4jP40ADLIowFseYETkw04w3graHeu1y+VDEHPRz1sSlEk7w== fixture-ecdsa384";
const ECDSA_P384_FP: &str = "SHA256:TlQIrT9CmkrH6xDSGA+SmDbWcOClKe5Ex8oaE3gazvE";
const ECDSA_P521: &str = "ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBAGJfUnjPkwZKqRZ7IBCa1n4jjO/xjqdeJdzICw5HuhmR47t+aGdAYhZ/Dv/VK6VpVt0eyf1F8fSwt7ADK+x6uH6kgHs4pQ8rI3jIpQ6DWzfzl/auLQbOnmSaWkM4Np3AJ1trCDg1OApJsSlsgLqP6C0fTE4H3R1qkjXI77TYzcBcnE0bw== fixture-ecdsa521";
const ECDSA_P521_FP: &str = "SHA256:oW7miHYT4nc+xvDsQvk8tHDvXfmpRl2RiUlSvmcvOiw";
const RSA_2048: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDPHea8kGvAxTQV4RdwD9uO4PIHzdkQ+Yt/8rhCIl1GvdWPII63cWTN5tgGAC5/D76OhJnaXsuqi2G4ZOhgRzDqYAF6ztmM56fvSjQighiC9ZO2BCL1kZno28D9+DXem2MMYKfl3A0LiirlslFnX8UVg6gQHnDn8yC2IGDQocko8WxHlco+yV6fL3F0LUJeZjZ1441cVVUhfeX3cUiP0B8/6YcpfRygDEcr6x3VYZe8CKqdoaXM8iPdggso7yTiuyAZewt7aMH4iO2i50F7w1gRi/sq+bdpz1ONQHEysLI5GOuS8juN7Kml9Bz77Va1XBHu43gj4u8AJ7ous9orVcCv fixture-rsa2048";
const RSA_2048_FP: &str = "SHA256:7CE6j3oJyptfaB83Goha20wZGOyZDYIJu8kjeGuqU/g";
const RSA_1024: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDiEkue4Fjz//3APQQ0L448fYmpZMnMJ7v0iltgJFhVdeI1b0p9PJTVPe5ryFtBreBCctk0vUjkDzZiweS4QhxG+Rema9taKlDLDI8hr6zA8ap23hy2GGfQuWo0n9gMWR6Qq3f7p28bVZSDTgOX9He6J067qVpDSr2m/OEGdTMKEQ== fixture-rsa1024";
const DSA: &str = "ssh-dss AAAAB3NzaC1kc3MAAACBAIaOU9/4RVowfSQfdDVY/Qoe664xkj9b6tD7ADYUrN7p3BjaxgcX1syJouA1Qg+9d1Jv3O3MTf2zkgk7rUxwabWPqfff4kdAAmeeeuSDQYE7Wzq33TGFrueeXVCpJQ7JW2BgCCetXCaiixrGMu4rOo+ye/WYJKvbNakp3gZCRv6pAAAAFQCchXBumKGFZVZ6mZbxBHm0Gq8f8QAAAIA957J7Ta0wDDYZbrvVXJNrf4p5t6IbfVaouVedVlQrzzspcpUf8DwE5jG3mT1Wzs5WR1r8ypISki5VtPwBDPMYOuMI5m5JNOfinOyjZInFZephcfPt/YmlHZDfvjarxCiO/HB74CDuypWBAeiRKrE9m50VQ8+SmPeB4ziTjClBfAAAAIBeKXT7UD4rmATer67mH74PNOB/fm1l+GfYZ68tX0Km5aizATZVAtWgaAvwlsEJO66dn79UO4/86VMzG+C+mR6QqpKMXRVOdo0wrnJ5+jr9vHYJ0F2qPQW1ZBNf2JoI7sHM+otGUhLnOC+PxhjKblLq1w9KJQnaeLW1o7QG95UG4w== fixture-dsa";
// Security-key keys cannot be made without a security key: these were built by hand (an
// Ed25519 key of bytes 1..=32, and the P-256 point above, application "ssh:"), and their
// fingerprints are what ssh-keygen -l -E sha256 prints for them.
const SK_ED25519: &str = "sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29tAAAAIAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gAAAABHNzaDo= fixture-sk-ed25519";
const SK_ED25519_FP: &str = "SHA256:nX0hpi5mKbTIJ10yBq5/sLQhiI1Y0RBAqN0drDdgJWs";
const SK_ECDSA: &str = "sk-ecdsa-sha2-nistp256@openssh.com AAAAInNrLWVjZHNhLXNoYTItbmlzdHAyNTZAb3BlbnNzaC5jb20AAAAIbmlzdHAyNTYAAABBBD29e5DCjIoY8lj3UG7bstFu/yFtVkC3ZD8bTd3a39VsSZ1/cUZ+B6DyKzYj+VkUPoPzrqhpVXqAWRY7HbTfiQkAAAAEc3NoOg== fixture-sk-ecdsa";
const SK_ECDSA_FP: &str = "SHA256:aKbvePRBwiB+RVuXxSZ0zAiDwEVGyjQad4xdq72qQeo";

fn parse(line: &str) -> Result<SshPublicKey, SshKeyError> {
    line.parse()
}

/// An SSH string (RFC 4251 §5): length, then bytes.
fn string(bytes: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// A positive mpint of `magnitude` (first byte not zero).
fn mpint(magnitude: &[u8]) -> Vec<u8> {
    if magnitude[0] & 0x80 != 0 {
        string(&[&[0][..], magnitude].concat())
    } else {
        string(magnitude)
    }
}

fn blob(fields: &[Vec<u8>]) -> Vec<u8> {
    fields.concat()
}

fn line(key_type: &str, blob: &[u8]) -> String {
    format!("{key_type} {}", STANDARD.encode(blob))
}

fn ed25519_blob(key: &[u8]) -> Vec<u8> {
    blob(&[string(b"ssh-ed25519"), string(key)])
}

fn ecdsa_blob(key_type: &str, curve: &str, point: &[u8]) -> Vec<u8> {
    blob(&[
        string(key_type.as_bytes()),
        string(curve.as_bytes()),
        string(point),
    ])
}

/// A modulus of `bits` bits: top bit set, odd.
fn modulus(bits: usize) -> Vec<u8> {
    let mut n = vec![0x5a; bits.div_ceil(8)];
    n[0] = 1 << ((bits - 1) % 8);
    *n.last_mut().unwrap() |= 1;
    n
}

fn rsa_blob(e: &[u8], n: &[u8]) -> Vec<u8> {
    blob(&[string(b"ssh-rsa"), mpint(e), mpint(n)])
}

/// The blob of a valid fixture line.
fn fixture_blob(line: &str) -> Vec<u8> {
    parse(line).unwrap().blob().to_vec()
}

#[test]
fn keys_made_by_ssh_keygen_parse_with_the_fingerprint_ssh_keygen_prints() {
    let cases = [
        (ED25519, KeyType::Ed25519, 256, ED25519_FP),
        (ECDSA_P256, KeyType::EcdsaP256, 256, ECDSA_P256_FP),
        (ECDSA_P384, KeyType::EcdsaP384, 384, ECDSA_P384_FP),
        (ECDSA_P521, KeyType::EcdsaP521, 521, ECDSA_P521_FP),
        (RSA_2048, KeyType::Rsa, 2048, RSA_2048_FP),
        (SK_ED25519, KeyType::SkEd25519, 256, SK_ED25519_FP),
        (SK_ECDSA, KeyType::SkEcdsaP256, 256, SK_ECDSA_FP),
    ];
    for (text, key_type, bits, fingerprint) in cases {
        let key = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(key.key_type(), key_type);
        assert_eq!(key.bits(), bits, "{key_type}");
        assert_eq!(key.fingerprint(), fingerprint, "{key_type}");
        assert_eq!(key.to_string(), text);
        assert!(key.comment().unwrap().starts_with("fixture-"));
    }
}

#[test]
fn a_key_without_comment_is_shown_without_one() {
    let bare = ED25519.rsplit_once(' ').unwrap().0;
    let key = parse(bare).unwrap();
    assert_eq!(key.comment(), None);
    assert_eq!(key.to_string(), bare);
}

#[test]
fn a_comment_keeps_its_inner_spaces_and_any_visible_script() {
    let bare = ED25519.rsplit_once(' ').unwrap().0;
    let text = format!("{bare} Zoë  Müller @ 東京 laptop");
    let key = parse(&text).unwrap();
    assert_eq!(key.comment(), Some("Zoë  Müller @ 東京 laptop"));
    assert_eq!(key.to_string(), text);
}

#[test]
fn rsa_below_2048_bits_is_refused_with_the_fix() {
    let err = parse(RSA_1024).unwrap_err();
    assert_eq!(err, SshKeyError::RsaSize { bits: 1024 });
    assert_eq!(
        err.to_string(),
        "ssh-rsa key of 1024 bits; use 2048 to 16384 bits, or an ssh-ed25519 key \
         (ssh-keygen -t ed25519)"
    );
}

#[test]
fn rsa_size_bounds_are_inclusive() {
    let e = [0x01, 0x00, 0x01];
    for (bits, ok) in [(2047, false), (2048, true), (16384, true), (16385, false)] {
        let result = parse(&line("ssh-rsa", &rsa_blob(&e, &modulus(bits))));
        if ok {
            assert_eq!(result.unwrap().bits(), bits as u32);
        } else {
            assert_eq!(
                result.unwrap_err(),
                SshKeyError::RsaSize { bits: bits as u32 }
            );
        }
    }
}

#[test]
fn dsa_is_refused_because_openssh_disabled_it() {
    let err = parse(DSA).unwrap_err();
    assert_eq!(err, SshKeyError::Dsa);
    assert!(err.to_string().contains("OpenSSH has disabled DSA"));
}

#[test]
fn other_key_types_are_refused_naming_the_accepted_ones() {
    for name in [
        "ssh-ed448",
        "ssh-ed25519-cert-v01@openssh.com",
        "rsa-sha2-256",
        "AAAA",
    ] {
        let err = parse(&format!("{name} AAAA")).unwrap_err();
        assert_eq!(
            err,
            SshKeyError::UnsupportedType {
                found: name.to_owned()
            }
        );
        let message = err.to_string();
        for accepted in KeyType::ALL {
            assert!(message.contains(accepted.as_str()), "{message}");
        }
    }
}

#[test]
fn an_options_prefix_is_refused() {
    let cases = [
        ("command=\"/bin/sh\"", "command=\"/bin/sh\""),
        ("from=\"10.0.0.0/8\"", "from=\"10.0.0.0/8\""),
        ("restrict", "restrict"),
        ("no-pty,no-port-forwarding", "no-pty,no-port-forwarding"),
        ("cert-authority", "cert-authority"),
    ];
    for (options, found) in cases {
        let err = parse(&format!("{options} {ED25519}")).unwrap_err();
        assert_eq!(
            err,
            SshKeyError::Options {
                found: found.to_owned()
            }
        );
        assert!(err.to_string().contains("only plain keys"));
    }
}

#[test]
fn a_line_break_anywhere_is_refused() {
    let second = format!("{ED25519}\n{ECDSA_P256}");
    for text in [
        format!("{ED25519}\n"),
        format!("{ED25519}\r\n"),
        format!("{ED25519}\r"),
        second,
        "ssh-ed25519\nAAAA".to_owned(),
    ] {
        assert_eq!(
            parse(&text).unwrap_err(),
            SshKeyError::LineBreak,
            "{text:?}"
        );
    }
}

#[test]
fn whitespace_around_the_line_or_between_fields_is_refused_not_trimmed() {
    let bare = ED25519.rsplit_once(' ').unwrap().0;
    let (type_name, encoded) = bare.split_once(' ').unwrap();
    for text in [
        format!(" {ED25519}"),
        format!("{ED25519} "),
        format!("{bare} "),
        format!("{type_name}  {encoded}"),
        format!("{type_name}\t{encoded}"),
        format!("{bare}  comment"),
        format!("{bare}\tcomment"),
        format!("{bare}\u{a0}comment"),
    ] {
        assert_eq!(parse(&text).unwrap_err(), SshKeyError::Spacing, "{text:?}");
    }
}

#[test]
fn empty_and_overlong_lines_are_refused() {
    assert_eq!(parse("").unwrap_err(), SshKeyError::Empty);
    assert_eq!(
        parse("ssh-ed25519").unwrap_err(),
        SshKeyError::MissingBlob {
            key_type: KeyType::Ed25519
        }
    );
    let long = format!("{ED25519} {}", "x".repeat(MAX_LINE_BYTES));
    assert_eq!(
        parse(&long).unwrap_err(),
        SshKeyError::LineTooLong { bytes: long.len() }
    );
}

#[test]
fn comment_rules() {
    let bare = ED25519.rsplit_once(' ').unwrap().0;
    let longest = "c".repeat(MAX_COMMENT_CHARS);
    assert!(parse(&format!("{bare} {longest}")).is_ok());
    assert_eq!(
        parse(&format!("{bare} {longest}é")).unwrap_err(),
        SshKeyError::CommentTooLong {
            chars: MAX_COMMENT_CHARS + 1
        }
    );
    assert_eq!(
        parse(&format!("{bare} a\tb")).unwrap_err(),
        SshKeyError::CommentControl { code_point: 9 }
    );
    assert_eq!(
        parse(&format!("{bare} a\u{1b}[2Jb")).unwrap_err(),
        SshKeyError::CommentControl { code_point: 0x1b }
    );
    for c in ['\u{202e}', '\u{200b}', '\u{2028}', '\u{feff}'] {
        assert_eq!(
            parse(&format!("{bare} eve{c}ecila")).unwrap_err(),
            SshKeyError::CommentInvisible {
                code_point: u32::from(c)
            }
        );
    }
}

const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

#[test]
fn base64_must_be_canonical_standard_padded() {
    let blob = fixture_blob(ECDSA_P256);
    let padded = STANDARD.encode(&blob);
    assert!(padded.ends_with('='), "the fixture must need padding");
    let base64_error = Err(SshKeyError::Base64 {
        key_type: KeyType::EcdsaP256,
    });
    let with = |encoded: &str| parse(&format!("ecdsa-sha2-nistp256 {encoded}"));
    assert!(with(&padded).is_ok());
    assert_eq!(
        with(&STANDARD_NO_PAD.encode(&blob)),
        base64_error,
        "unpadded"
    );
    assert_eq!(with(&format!("{padded}=")), base64_error, "over-padded");
    // The last character before the padding has unused low bits; a decoder that ignores
    // them would read one key from several spellings.
    let mut sloppy = padded.clone().into_bytes();
    let last = sloppy.iter().rposition(|&b| b != b'=').unwrap();
    let index = BASE64_ALPHABET
        .iter()
        .position(|&c| c == sloppy[last])
        .unwrap();
    assert_eq!(
        index & 1,
        0,
        "a canonical last character has its low bits clear"
    );
    sloppy[last] = BASE64_ALPHABET[index | 1];
    assert_eq!(
        with(std::str::from_utf8(&sloppy).unwrap()),
        base64_error,
        "stray bits"
    );
    // The URL-safe alphabet, on a blob that uses '+' or '/'.
    let blob = fixture_blob(RSA_2048);
    let url = URL_SAFE.encode(&blob);
    assert_ne!(url, STANDARD.encode(&blob));
    assert_eq!(
        parse(&format!("ssh-rsa {url}")),
        Err(SshKeyError::Base64 {
            key_type: KeyType::Rsa
        })
    );
    assert_eq!(with("===="), base64_error);
}

#[test]
fn a_blob_larger_than_the_limit_is_refused_before_it_is_decoded() {
    let big = STANDARD.encode(vec![0u8; MAX_BLOB_BYTES + 3]);
    assert_eq!(
        parse(&format!("ssh-rsa {big}")).unwrap_err(),
        SshKeyError::BlobTooLarge {
            key_type: KeyType::Rsa,
            bytes: big.len()
        }
    );
}

#[test]
fn the_inner_type_must_be_the_outer_type() {
    let err = parse(&line("ecdsa-sha2-nistp256", &fixture_blob(ED25519))).unwrap_err();
    assert_eq!(
        err,
        SshKeyError::TypeMismatch {
            key_type: KeyType::EcdsaP256,
            inner: "ssh-ed25519".to_owned()
        }
    );
    // An sk key's blob under the plain type: a security key is not a file key.
    let err = parse(&line("ssh-ed25519", &fixture_blob(SK_ED25519))).unwrap_err();
    assert!(matches!(err, SshKeyError::TypeMismatch { .. }), "{err}");
}

#[test]
fn an_ed25519_key_is_32_bytes() {
    for len in [0, 31, 33, 64] {
        assert_eq!(
            parse(&line("ssh-ed25519", &ed25519_blob(&vec![7; len]))).unwrap_err(),
            SshKeyError::Ed25519Length {
                key_type: KeyType::Ed25519,
                bytes: len
            }
        );
    }
}

#[test]
fn an_ecdsa_key_names_its_curve_and_holds_an_uncompressed_point_of_its_size() {
    let mut point = vec![0x04];
    point.extend_from_slice(&[9; 64]);
    assert!(
        parse(&line(
            "ecdsa-sha2-nistp256",
            &ecdsa_blob("ecdsa-sha2-nistp256", "nistp256", &point)
        ))
        .is_ok()
    );
    assert_eq!(
        parse(&line(
            "ecdsa-sha2-nistp256",
            &ecdsa_blob("ecdsa-sha2-nistp256", "nistp384", &point)
        ))
        .unwrap_err(),
        SshKeyError::CurveMismatch {
            key_type: KeyType::EcdsaP256,
            found: "nistp384".to_owned(),
            expected: "nistp256"
        }
    );
    let compressed = [&[0x02][..], &[9; 32]].concat();
    let wrong_tag = [&[0x05][..], &[9; 64]].concat();
    let p384_sized = [&[0x04][..], &[9; 96]].concat();
    for point in [compressed, wrong_tag, p384_sized, vec![]] {
        assert_eq!(
            parse(&line(
                "ecdsa-sha2-nistp256",
                &ecdsa_blob("ecdsa-sha2-nistp256", "nistp256", &point)
            ))
            .unwrap_err(),
            SshKeyError::EcPoint {
                key_type: KeyType::EcdsaP256,
                expected: 65
            }
        );
    }
}

#[test]
fn rsa_numbers_are_well_formed_mpints() {
    let n = modulus(2048);
    let f4 = [0x01, 0x00, 0x01];
    let malformed = |field| SshKeyError::Mpint {
        key_type: KeyType::Rsa,
        field,
    };
    let cases = [
        // A needless leading zero on e.
        (
            blob(&[string(b"ssh-rsa"), string(&[0, 1, 0, 1]), mpint(&n)]),
            malformed("the public exponent"),
        ),
        // A negative e.
        (
            blob(&[string(b"ssh-rsa"), string(&[0x81]), mpint(&n)]),
            malformed("the public exponent"),
        ),
        // Zero e.
        (
            blob(&[string(b"ssh-rsa"), string(&[]), mpint(&n)]),
            malformed("the public exponent"),
        ),
        // n with its top bit set and no leading zero: negative.
        (
            blob(&[string(b"ssh-rsa"), mpint(&f4), string(&n)]),
            malformed("the modulus"),
        ),
        // n with two leading zeros.
        (
            blob(&[
                string(b"ssh-rsa"),
                mpint(&f4),
                string(&[&[0, 0][..], &n].concat()),
            ]),
            malformed("the modulus"),
        ),
    ];
    for (blob, err) in cases {
        assert_eq!(parse(&line("ssh-rsa", &blob)).unwrap_err(), err);
    }
}

#[test]
fn rsa_exponent_is_odd_and_at_least_3_and_the_modulus_odd() {
    let n = modulus(2048);
    for e in [&[1][..], &[2], &[0x01, 0x00, 0x00]] {
        assert_eq!(
            parse(&line("ssh-rsa", &rsa_blob(e, &n))).unwrap_err(),
            SshKeyError::RsaExponent
        );
    }
    assert!(parse(&line("ssh-rsa", &rsa_blob(&[3], &n))).is_ok());
    let mut even = n.clone();
    *even.last_mut().unwrap() &= 0xfe;
    assert_eq!(
        parse(&line("ssh-rsa", &rsa_blob(&[3], &even))).unwrap_err(),
        SshKeyError::RsaModulusEven
    );
}

#[test]
fn a_security_key_carries_an_ssh_application() {
    let key = [1; 32];
    for application in [&b"webauthn:example.com"[..], b"", b"ssh"] {
        let blob = blob(&[
            string(b"sk-ssh-ed25519@openssh.com"),
            string(&key),
            string(application),
        ]);
        assert_eq!(
            parse(&line("sk-ssh-ed25519@openssh.com", &blob)).unwrap_err(),
            SshKeyError::SkApplication {
                key_type: KeyType::SkEd25519
            }
        );
    }
    let blob = blob(&[
        string(b"sk-ssh-ed25519@openssh.com"),
        string(&key),
        string(b"ssh:work"),
    ]);
    assert!(parse(&line("sk-ssh-ed25519@openssh.com", &blob)).is_ok());
    // The application is part of the key: without it the key is truncated.
    let without = blob_without_last_field(SK_ECDSA);
    assert_eq!(
        parse(&line("sk-ecdsa-sha2-nistp256@openssh.com", &without)).unwrap_err(),
        SshKeyError::Truncated {
            key_type: KeyType::SkEcdsaP256,
            field: "the application"
        }
    );
}

/// The fixture's blob without its last string (`ssh:`, 4 + 4 bytes).
fn blob_without_last_field(fixture: &str) -> Vec<u8> {
    let blob = fixture_blob(fixture);
    blob[..blob.len() - 8].to_vec()
}

#[test]
fn bytes_after_the_key_are_refused() {
    let mut blob = fixture_blob(ED25519);
    blob.extend_from_slice(&string(b"extra"));
    assert_eq!(
        parse(&line("ssh-ed25519", &blob)).unwrap_err(),
        SshKeyError::TrailingBytes {
            key_type: KeyType::Ed25519,
            bytes: 9
        }
    );
}

#[test]
fn a_length_beyond_the_blob_is_a_truncation() {
    let blob = blob(&[
        string(b"ssh-ed25519"),
        u32::MAX.to_be_bytes().to_vec(),
        vec![1; 32],
    ]);
    assert_eq!(
        parse(&line("ssh-ed25519", &blob)).unwrap_err(),
        SshKeyError::Truncated {
            key_type: KeyType::Ed25519,
            field: "the Ed25519 public key"
        }
    );
}

#[test]
fn messages_never_quote_more_than_a_short_escaped_excerpt() {
    let name = format!("x\u{202e}{}", "y".repeat(100));
    let message = parse(&format!("{name} AAAA")).unwrap_err().to_string();
    assert!(message.contains("x\\u{202e}yyy"), "{message}");
    assert!(!message.contains('\u{202e}'));
    assert!(!message.contains(&"y".repeat(41)));
}

#[test]
fn a_list_holds_at_most_ten_distinct_keys() {
    let eleven = vec![ED25519; MAX_SSH_KEYS + 1];
    assert_eq!(
        parse_keys(&eleven).unwrap_err(),
        SshKeyListError::TooMany { count: 11 }
    );
    let fixtures = [
        ED25519, ECDSA_P256, ECDSA_P384, ECDSA_P521, RSA_2048, SK_ED25519, SK_ECDSA,
    ];
    let keys = parse_keys(&fixtures).unwrap();
    assert_eq!(keys.len(), 7);
    assert_eq!(parse_keys::<&str>(&[]).unwrap(), vec![]);
}

#[test]
fn a_key_given_twice_is_refused_whatever_its_comments() {
    let other_comment = ED25519.replace("fixture-ed25519", "laptop");
    let err = parse_keys(&[ED25519, RSA_2048, &other_comment]).unwrap_err();
    assert_eq!(
        err,
        SshKeyListError::Duplicate {
            index: 2,
            first: 0,
            fingerprint: ED25519_FP.to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        format!("SSH key 2 is the same key as SSH key 0 ({ED25519_FP}); give each key once")
    );
}

#[test]
fn an_invalid_entry_is_named_by_its_index() {
    let err = parse_keys(&[ED25519, RSA_1024]).unwrap_err();
    assert_eq!(
        err,
        SshKeyListError::Invalid {
            index: 1,
            source: SshKeyError::RsaSize { bits: 1024 }
        }
    );
    assert!(
        err.to_string()
            .starts_with("SSH key 1: ssh-rsa key of 1024 bits")
    );
}

// ---- properties ----

fn arb_comment() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[!-~éü東]([ -~éü東]{0,60}[!-~éü東])?")
}

/// A valid blob of each type, with random key material.
fn arb_blob() -> impl Strategy<Value = (KeyType, Vec<u8>)> {
    let point = |coordinate: usize| {
        proptest::collection::vec(any::<u8>(), 2 * coordinate)
            .prop_map(|xy| [vec![0x04], xy].concat())
    };
    prop_oneof![
        any::<[u8; 32]>().prop_map(|k| (KeyType::Ed25519, ed25519_blob(&k))),
        point(32).prop_map(|q| (
            KeyType::EcdsaP256,
            ecdsa_blob("ecdsa-sha2-nistp256", "nistp256", &q)
        )),
        point(48).prop_map(|q| (
            KeyType::EcdsaP384,
            ecdsa_blob("ecdsa-sha2-nistp384", "nistp384", &q)
        )),
        point(66).prop_map(|q| (
            KeyType::EcdsaP521,
            ecdsa_blob("ecdsa-sha2-nistp521", "nistp521", &q)
        )),
        (
            prop_oneof![
                Just(vec![3]),
                Just(vec![1, 0, 1]),
                (1u32..u32::MAX / 2).prop_map(|e| (2 * e + 1).to_be_bytes().to_vec())
            ],
            2048usize..=4096,
            proptest::collection::vec(any::<u8>(), 512),
        )
            .prop_map(|(e, bits, noise)| {
                let e: Vec<u8> = e.into_iter().skip_while(|&b| b == 0).collect();
                let mut n = modulus(bits);
                for (b, x) in n.iter_mut().skip(1).zip(noise) {
                    *b ^= x;
                }
                *n.last_mut().unwrap() |= 1;
                (KeyType::Rsa, rsa_blob(&e, &n))
            }),
        (any::<[u8; 32]>(), "[a-z0-9.:]{0,20}").prop_map(|(k, app)| (
            KeyType::SkEd25519,
            blob(&[
                string(b"sk-ssh-ed25519@openssh.com"),
                string(&k),
                string(format!("ssh:{app}").as_bytes())
            ])
        )),
        (point(32), "[a-z0-9.:]{0,20}").prop_map(|(q, app)| (
            KeyType::SkEcdsaP256,
            blob(&[
                string(b"sk-ecdsa-sha2-nistp256@openssh.com"),
                string(b"nistp256"),
                string(&q),
                string(format!("ssh:{app}").as_bytes())
            ])
        )),
    ]
}

fn arb_line() -> impl Strategy<Value = String> {
    (arb_blob(), arb_comment()).prop_map(|((key_type, blob), comment)| {
        let mut text = line(key_type.as_str(), &blob);
        if let Some(comment) = comment {
            text.push(' ');
            text.push_str(&comment);
        }
        text
    })
}

proptest! {
    #[test]
    fn a_key_parses_back_from_its_canonical_line(text in arb_line()) {
        let key = parse(&text).unwrap();
        prop_assert_eq!(key.to_string(), text.clone());
        prop_assert_eq!(parse(&key.to_string()).unwrap(), key);
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn arbitrary_blobs_under_every_type_never_panic(
        type_index in 0..KeyType::ALL.len(),
        tail in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let key_type = KeyType::ALL[type_index];
        let blob = [string(key_type.as_str().as_bytes()), tail].concat();
        let _ = parse(&line(key_type.as_str(), &blob));
    }

    #[test]
    fn a_line_break_anywhere_is_always_refused(
        text in arb_line(),
        at in any::<prop::sample::Index>(),
        brk in prop_oneof![Just('\n'), Just('\r')],
    ) {
        let boundaries: Vec<usize> =
            (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
        let mut broken = text.clone();
        broken.insert(boundaries[at.index(boundaries.len())], brk);
        prop_assert_eq!(parse(&broken).unwrap_err(), SshKeyError::LineBreak);
    }

    #[test]
    fn arbitrary_text_with_a_line_break_is_refused(
        before in any::<String>(),
        after in any::<String>(),
        brk in prop_oneof![Just("\n"), Just("\r")],
    ) {
        let text = format!("{before}{brk}{after}");
        prop_assert!(parse(&text).is_err());
    }

    #[test]
    fn a_blob_one_byte_short_or_long_is_refused(
        (key_type, blob) in arb_blob(),
        extra in any::<u8>(),
    ) {
        let short = &blob[..blob.len() - 1];
        prop_assert!(parse(&line(key_type.as_str(), short)).is_err());
        let long = [&blob[..], &[extra]].concat();
        prop_assert_eq!(
            parse(&line(key_type.as_str(), &long)).unwrap_err(),
            SshKeyError::TrailingBytes { key_type, bytes: 1 }
        );
    }

    #[test]
    fn duplicates_are_found_whatever_their_position(
        text in arb_line(),
        others in proptest::collection::vec(arb_line(), 0..5),
        first in any::<prop::sample::Index>(),
    ) {
        let key = parse(&text).unwrap();
        let mut keys: Vec<SshPublicKey> = others.iter().map(|t| parse(t).unwrap()).collect();
        keys.retain(|k| !k.same_key(&key));
        let at = first.index(keys.len() + 1);
        keys.insert(at, key.clone());
        keys.push(key);
        let expect_index = keys.len() - 1;
        match check_keys(&keys) {
            Err(SshKeyListError::Duplicate { index, first, .. }) => {
                prop_assert_eq!(index, expect_index);
                prop_assert_eq!(first, at);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

/// A key made from raw ed25519 bytes is the key its line parses to, comment included.
#[test]
fn an_ed25519_key_from_its_bytes_reads_back_the_same() {
    let key = SshPublicKey::ed25519(&[9; 32], Some("made here")).unwrap();
    assert_eq!(key.key_type(), KeyType::Ed25519);
    assert_eq!(key.to_string().parse::<SshPublicKey>().unwrap(), key);
    assert!(SshPublicKey::ed25519(&[9; 32], Some("bad\ncomment")).is_err());
}
