//! A PKCS#8 PrivateKeyInfo unwrapped into the PKCS#1 / SEC1 forms kubeadm writes (rcgen and
//! aws-lc hand out PKCS#8 only), read and written with asn1-rs, the DER reader under
//! x509-parser.
//!
//! asn1-rs wipes nothing, so no key material is left to it: reading borrows from the
//! caller's buffer (rcgen's PKCS#8, wiped by `KeyPairGuard`) without copying, and the SEC1
//! key is written straight into one `Zeroizing` buffer, reserved at its full length first so
//! that no reallocation leaves a copy behind.

use x509_parser::asn1_rs::{
    Any, BitString, Error, FromDer, Header, Integer, Length, OctetString, Oid, Sequence, Tag,
    TaggedExplicit, ToDer,
};
use zeroize::Zeroizing;

/// The parts of a PKCS#8 PrivateKeyInfo (RFC 5208) kubeflavor needs.
pub(crate) struct Pkcs8<'a> {
    /// The AlgorithmIdentifier's parameters, if any (for EC, the named curve OID).
    parameters: Option<Any<'a>>,
    /// The privateKey OCTET STRING contents: PKCS#1 RSAPrivateKey or SEC1 ECPrivateKey.
    pub(crate) private_key: &'a [u8],
}

/// `PrivateKeyInfo ::= SEQUENCE { version, AlgorithmIdentifier, privateKey OCTET STRING, ... }`.
pub(crate) fn parse_pkcs8(der: &[u8]) -> Option<Pkcs8<'_>> {
    let (_, pkcs8) = Sequence::from_der_and_then(der, |info| {
        let (rest, _version) = Integer::from_der(info)?;
        let (rest, parameters) = Sequence::from_der_and_then(rest, |alg_id| {
            let (parameters, _algorithm) = Oid::from_der(alg_id)?;
            Option::<Any>::from_der(parameters)
        })?;
        let (rest, private_key) = <&[u8]>::from_der(rest)?;
        Ok::<_, x509_parser::nom::Err<Error>>((
            rest,
            Pkcs8 {
                parameters,
                private_key,
            },
        ))
    })
    .ok()?;
    Some(pkcs8)
}

/// Builds a SEC1 ECPrivateKey (RFC 5915) with the curve and public key present, as Go's
/// `x509.MarshalECPrivateKey` writes it: Go refuses a SEC1 key without the curve OID.
pub(crate) fn sec1_from_pkcs8(
    pkcs8: &Pkcs8<'_>,
    public_point: &[u8],
) -> Option<Zeroizing<Vec<u8>>> {
    let (_, scalar) = Sequence::from_der_and_then(pkcs8.private_key, |inner| {
        let (rest, _version) = Integer::from_der(inner)?;
        <&[u8]>::from_der(rest)
    })
    .ok()?;
    let version = 1u32; // ecPrivkeyVer1
    let private_key = OctetString::new(scalar);
    let parameters = TaggedExplicit::<Any, Error, 0>::explicit(pkcs8.parameters.clone()?);
    let public_key =
        TaggedExplicit::<BitString, Error, 1>::explicit(BitString::new(0, public_point));
    let fields: [&dyn ToDer; 4] = [&version, &private_key, &parameters, &public_key];
    let body_len = fields
        .iter()
        .map(|f| f.to_der_len())
        .sum::<Result<usize, _>>()
        .ok()?;
    let header = Header::new(
        x509_parser::asn1_rs::Class::Universal,
        true,
        Tag::Sequence,
        Length::Definite(body_len),
    );
    // A few bytes of slack over the computed length: the buffer must never grow.
    let mut out = Zeroizing::new(Vec::with_capacity(body_len + 16));
    header.write_der_header(&mut *out).ok()?;
    for field in fields {
        field.write_der(&mut *out).ok()?;
    }
    Some(out)
}

/// SEQUENCE's identifier octet, for building test inputs.
#[cfg(test)]
pub(crate) const TAG_SEQUENCE: u8 = 0x30;

/// Appends one TLV to `out`, the header written by asn1-rs: for building test inputs.
#[cfg(test)]
pub(crate) fn write_tlv(out: &mut Vec<u8>, tag: u8, contents: &[u8]) {
    let class = x509_parser::asn1_rs::Class::try_from(tag >> 6).expect("a two-bit class");
    let header = Header::new(
        class,
        tag & 0x20 != 0,
        Tag(u32::from(tag & 0x1f)),
        Length::Definite(contents.len()),
    );
    header.write_der_header(out).expect("writing to a Vec");
    out.extend_from_slice(contents);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sec1_is_laid_out_as_go_writes_it() {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pkcs8 = parse_pkcs8(pair.serialized_der()).unwrap();
        let point = pair.public_key_raw();
        let sec1 = sec1_from_pkcs8(&pkcs8, point).unwrap();
        // SEQUENCE { INTEGER 1, OCTET STRING (32-byte scalar), [0] { OID prime256v1 },
        // [1] { BIT STRING (the uncompressed point) } }: 121 bytes, as from Go.
        assert_eq!(sec1.len(), 121);
        assert_eq!(sec1[..7], [0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20]);
        let curve = [
            0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
        ];
        assert_eq!(sec1[39..51], curve);
        assert_eq!(sec1[51..56], [0xa1, 0x44, 0x03, 0x42, 0x00]);
        assert_eq!(&sec1[56..], point);
        // And the key loads back as the same key.
        let back = rcgen::KeyPair::try_from(&sec1[..]).unwrap();
        assert_eq!(back.public_key_raw(), point);
    }

    #[test]
    fn malformed_pkcs8_is_refused() {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let der = pair.serialized_der();
        assert!(parse_pkcs8(&der[..der.len() - 1]).is_none());
        assert!(parse_pkcs8(&[0x30, 0x84, 0xff]).is_none());
        assert!(parse_pkcs8(&[]).is_none());
    }

    #[test]
    fn test_tlvs_have_definite_lengths() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let mut out = Vec::new();
            write_tlv(&mut out, TAG_SEQUENCE, &vec![7u8; len]);
            let (rest, seq) = Sequence::from_der(&out).unwrap();
            assert_eq!((rest.len(), seq.content.len()), (0, len));
        }
    }
}
