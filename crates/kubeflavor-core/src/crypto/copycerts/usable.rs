//! Whether each file of the set can serve what a control-plane node uses it for, beyond
//! parsing and matching its partner (the checks of `open_all_with`).
//!
//! - `ca.crt`, `front-proxy-ca.crt`, `etcd/ca.crt`: kube-apiserver trusts every certificate
//!   in them (`--client-ca-file`, `--requestheader-client-ca-file`, etcd's
//!   `--trusted-ca-file`), and the controller-manager signs with `ca.crt` and its key. So
//!   exactly one certificate, a CA (basicConstraints CA:TRUE, keyCertSign when a key usage
//!   is given), valid now. A second certificate appended would be trusted along with it.
//! - `external-etcd-ca.crt`: a trust bundle for an etcd the operator runs (kubeadm never
//!   has its key), so several certificates are allowed, each a CA valid now.
//! - `external-etcd.crt`: the API server's etcd client certificate, which may carry its
//!   chain: the first certificate must be valid now.
//! - Private keys and `sa.pub`: exactly one key block (an `EC PARAMETERS` block before an
//!   EC key, as `openssl ecparam -genkey` writes, is allowed); nothing appended.
//!
//! Upload and download both run these checks ([`open_for_use`](super::open_for_use)):
//! such a file is refused where it comes from and where it would be written.

use jiff::Timestamp;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use super::entries::{PkiEntry, PkiEntryKind};
use crate::crypto::keys::{LABEL_CERTIFICATE, LABEL_PUBLIC_KEY, PemKind};
use crate::crypto::pem;

const LABEL_EC_PARAMETERS: &str = "EC PARAMETERS";

/// Why a file cannot serve its purpose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error(
        "it holds {count} certificates; a CA file must hold exactly one (the API server would trust every certificate in it)"
    )]
    SeveralCertificates { count: usize },
    #[error("it is not a CA certificate (basicConstraints CA:FALSE)")]
    NotCa,
    #[error("it is not a CA certificate (it has no basicConstraints extension)")]
    NoBasicConstraints,
    #[error("its key usage does not allow signing certificates (no keyCertSign)")]
    CannotSignCertificates,
    #[error("it expired at {0}")]
    Expired(Timestamp),
    #[error("it is not valid before {0} (if that is in the past, check this machine's clock)")]
    NotYetValid(Timestamp),
    #[error("it holds a PEM block '{0}' besides the key")]
    ExtraBlock(String),
    #[error("it cannot be read: {0}")]
    Unreadable(String),
}

/// Checks one file for the use its entry names, at `now`.
pub fn check_usable(entry: PkiEntry, contents: &[u8], now: Timestamp) -> Result<(), Unusable> {
    let blocks = pem::decode_all(contents).map_err(|e| Unusable::Unreadable(e.to_string()))?;
    match entry {
        PkiEntry::CaCert | PkiEntry::FrontProxyCaCert | PkiEntry::EtcdCaCert => {
            if blocks.len() != 1 {
                return Err(Unusable::SeveralCertificates {
                    count: blocks.len(),
                });
            }
            check_ca(&blocks[0], now)
        }
        PkiEntry::ExternalEtcdCaCert => blocks.iter().try_for_each(|b| check_ca(b, now)),
        PkiEntry::ExternalEtcdCert => {
            let cert = parse_certificate(&blocks[0])?;
            check_validity(&cert, now)
        }
        _ => match entry.kind() {
            PkiEntryKind::PublicKey => only_block(&blocks, |label| label == LABEL_PUBLIC_KEY),
            _ => only_block(&blocks, |label| {
                matches!(
                    crate::crypto::keys::kind_of_label(label),
                    PemKind::PrivateKey(_)
                )
            }),
        },
    }
}

/// Exactly one block for which `is_key` holds, after any `EC PARAMETERS` blocks.
fn only_block(blocks: &[pem::Block], is_key: impl Fn(&str) -> bool) -> Result<(), Unusable> {
    let mut rest = blocks.iter().skip_while(|b| b.label == LABEL_EC_PARAMETERS);
    match rest.next() {
        Some(b) if is_key(&b.label) => {}
        Some(b) => return Err(Unusable::ExtraBlock(b.label.clone())),
        None => return Err(Unusable::Unreadable("it holds no key".into())),
    }
    match rest.next() {
        Some(extra) => Err(Unusable::ExtraBlock(extra.label.clone())),
        None => Ok(()),
    }
}

fn parse_certificate(block: &pem::Block) -> Result<X509Certificate<'_>, Unusable> {
    if block.label != LABEL_CERTIFICATE {
        return Err(Unusable::Unreadable(format!(
            "a PEM block '{}' where a certificate should be",
            block.label
        )));
    }
    X509Certificate::from_der(&block.der)
        .map(|(_, cert)| cert)
        .map_err(|e| Unusable::Unreadable(e.to_string()))
}

fn check_ca(block: &pem::Block, now: Timestamp) -> Result<(), Unusable> {
    let cert = parse_certificate(block)?;
    match cert.basic_constraints() {
        Ok(Some(bc)) if bc.value.ca => {}
        Ok(Some(_)) => return Err(Unusable::NotCa),
        Ok(None) => return Err(Unusable::NoBasicConstraints),
        Err(e) => return Err(Unusable::Unreadable(e.to_string())),
    }
    // Without a key usage extension the key may do anything (RFC 5280 4.2.1.3).
    match cert.key_usage() {
        Ok(Some(ku)) if !ku.value.key_cert_sign() => {
            return Err(Unusable::CannotSignCertificates);
        }
        Ok(_) => {}
        Err(e) => return Err(Unusable::Unreadable(e.to_string())),
    }
    check_validity(&cert, now)
}

fn check_validity(cert: &X509Certificate<'_>, now: Timestamp) -> Result<(), Unusable> {
    let at = |t: x509_parser::time::ASN1Time| {
        Timestamp::from_second(t.timestamp()).map_err(|e| Unusable::Unreadable(e.to_string()))
    };
    let not_before = at(cert.validity().not_before)?;
    let not_after = at(cert.validity().not_after)?;
    if now < not_before {
        return Err(Unusable::NotYetValid(not_before));
    }
    if now > not_after {
        return Err(Unusable::Expired(not_after));
    }
    Ok(())
}
