//! The per-cluster PKI: a fresh CA, the serving certificate for 127.0.0.1/localhost, and
//! client certificates whose subject carries the Kubernetes user (CN) and groups (O).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};

/// The X.520 Organization attribute. rcgen keeps one value per attribute type, so a second
/// group is written under the same OID spelled as a custom type (it encodes identically).
const ORGANIZATION_OID: [u64; 4] = [2, 5, 4, 10];

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused to generate or sign it.
    #[error("generating or signing a certificate failed: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error(
        "a client certificate can carry at most 2 groups here (rcgen keeps one value per attribute \
         type); got {0}. Bind RBAC to fewer groups, or use a static token for this identity"
    )]
    /// More groups (organizations) than a client certificate here can carry.
    TooManyGroups(usize),
}

/// The cluster CA: its certificate and key as PEM, plus the signer built from them.
pub struct Ca {
    cert_pem: String,
    cert_der: Vec<u8>,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// A certificate and its private key, both PEM.
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA named like kubeadm's (`CN=kubernetes`).
    pub fn generate() -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let cert_pem = cert.pem();
        let cert_der = cert.der().to_vec();
        let key_pem = key.serialize_pem();
        let issuer = Issuer::new(params, key);
        Ok(Ca {
            cert_pem,
            cert_der,
            key_pem,
            issuer,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The serving certificate: SANs 127.0.0.1, ::1, localhost and the in-cluster names.
    pub fn server_cert(&self) -> Result<CertAndKey, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate as kube-apiserver's x509 authenticator reads it: CN is the user
    /// name, each O is a group.
    pub fn client_cert(&self, common_name: &str, groups: &[&str]) -> Result<CertAndKey, PkiError> {
        if groups.len() > 2 {
            return Err(PkiError::TooManyGroups(groups.len()));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(first) = groups.first() {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *first);
        }
        if let Some(second) = groups.get(1) {
            params.distinguished_name.push(
                DnType::CustomDnType(ORGANIZATION_OID.to_vec()),
                DnValue::Utf8String((*second).to_string()),
            );
        }
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject_of(pem: &str) -> (Vec<String>, Vec<String>) {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let cn = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap().to_string());
        let o = cert
            .subject()
            .iter_organization()
            .map(|a| a.as_str().unwrap().to_string());
        (cn.collect(), o.collect())
    }

    #[test]
    fn client_cert_carries_user_and_both_groups() {
        let ca = Ca::generate().unwrap();
        let cert = ca
            .client_cert("system:node:worker-1", &["system:nodes", "extra"])
            .unwrap();
        let (cn, o) = subject_of(&cert.cert_pem);
        assert_eq!(cn, vec!["system:node:worker-1"]);
        assert_eq!(o, vec!["system:nodes", "extra"]);
    }

    #[test]
    fn more_than_two_groups_is_refused() {
        let ca = Ca::generate().unwrap();
        let err = ca.client_cert("u", &["a", "b", "c"]).unwrap_err();
        assert!(matches!(err, PkiError::TooManyGroups(3)));
    }
}
