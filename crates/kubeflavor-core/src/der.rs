//! Just enough DER to unwrap a PKCS#8 PrivateKeyInfo into the PKCS#1 / SEC1 forms kubeadm
//! writes (rcgen and aws-lc hand out PKCS#8 only). Every buffer that may hold key material is
//! zeroized.

use zeroize::Zeroizing;

pub(crate) const TAG_INTEGER: u8 = 0x02;
pub(crate) const TAG_BIT_STRING: u8 = 0x03;
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
pub(crate) const TAG_CONTEXT_0: u8 = 0xa0;
pub(crate) const TAG_CONTEXT_1: u8 = 0xa1;

/// Splits one TLV off the front of `input`: `(tag, contents, rest)`.
pub(crate) fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// Reads a TLV that must carry `tag`.
pub(crate) fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match read_tlv(input)? {
        (t, contents, rest) if t == tag => Some((contents, rest)),
        _ => None,
    }
}

/// Appends one TLV to `out`.
pub(crate) fn write_tlv(out: &mut Vec<u8>, tag: u8, contents: &[u8]) {
    out.push(tag);
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
}

/// The parts of a PKCS#8 PrivateKeyInfo (RFC 5208) kubeflavor needs.
pub(crate) struct Pkcs8<'a> {
    /// The AlgorithmIdentifier's parameters TLV, if any (for EC, the named curve OID).
    pub(crate) parameters: &'a [u8],
    /// The privateKey OCTET STRING contents: PKCS#1 RSAPrivateKey or SEC1 ECPrivateKey.
    pub(crate) private_key: &'a [u8],
}

pub(crate) fn parse_pkcs8(der: &[u8]) -> Option<Pkcs8<'_>> {
    let (info, _) = expect(der, TAG_SEQUENCE)?;
    let (_version, rest) = expect(info, TAG_INTEGER)?;
    let (alg_id, rest) = expect(rest, TAG_SEQUENCE)?;
    let (_algorithm, parameters) = expect(alg_id, TAG_OID)?;
    let (private_key, _) = expect(rest, TAG_OCTET_STRING)?;
    Some(Pkcs8 {
        parameters,
        private_key,
    })
}

/// Builds a SEC1 ECPrivateKey (RFC 5915) with the curve and public key present, as Go's
/// `x509.MarshalECPrivateKey` writes it: Go refuses a SEC1 key without the curve OID.
pub(crate) fn sec1_from_pkcs8(
    pkcs8: &Pkcs8<'_>,
    public_point: &[u8],
) -> Option<Zeroizing<Vec<u8>>> {
    let (inner, _) = expect(pkcs8.private_key, TAG_SEQUENCE)?;
    let (_version, rest) = expect(inner, TAG_INTEGER)?;
    let (scalar, _) = expect(rest, TAG_OCTET_STRING)?;
    let mut body = Zeroizing::new(Vec::with_capacity(160));
    write_tlv(&mut body, TAG_INTEGER, &[1]);
    write_tlv(&mut body, TAG_OCTET_STRING, scalar);
    write_tlv(&mut body, TAG_CONTEXT_0, pkcs8.parameters);
    let mut bits = Vec::with_capacity(public_point.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(public_point);
    let mut bit_string = Vec::with_capacity(bits.len() + 4);
    write_tlv(&mut bit_string, TAG_BIT_STRING, &bits);
    write_tlv(&mut body, TAG_CONTEXT_1, &bit_string);
    let mut out = Zeroizing::new(Vec::with_capacity(body.len() + 4));
    write_tlv(&mut out, TAG_SEQUENCE, &body);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let contents = vec![7u8; len];
            let mut out = Vec::new();
            write_tlv(&mut out, TAG_OCTET_STRING, &contents);
            let (tag, got, rest) = read_tlv(&out).unwrap();
            assert_eq!((tag, got.len(), rest.len()), (TAG_OCTET_STRING, len, 0));
        }
    }

    #[test]
    fn truncated_input_is_refused() {
        let mut out = Vec::new();
        write_tlv(&mut out, TAG_SEQUENCE, &[1, 2, 3, 4]);
        assert!(read_tlv(&out[..out.len() - 1]).is_none());
        assert!(read_tlv(&[0x30, 0x84, 0xff]).is_none());
    }
}
