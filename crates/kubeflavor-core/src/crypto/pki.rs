//! kubeadm's shared control-plane CA set (the files `kubeadm init --upload-certs` moves):
//! `ca`, `front-proxy-ca`, `etcd/ca` and the service-account key pair `sa.key`/`sa.pub`,
//! with kubeadm's subjects, validity, file names, PEM forms and modes. Writing the files is
//! the binary's job; this module returns them as [`PkiFile`]s.

use std::fmt;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    PKCS_RSA_SHA256, SanType, SerialNumber,
};
use zeroize::Zeroizing;

use crate::crypto::der;
use crate::crypto::keys::{KeyPairGuard, LABEL_CERTIFICATE, PrivateKeyForm, encode_pem};
use crate::crypto::random::{RandomnessError, os_fill};

/// File mode of private keys.
pub const MODE_PRIVATE_KEY: u32 = 0o600;
/// File mode of certificates and `sa.pub`.
pub const MODE_PUBLIC: u32 = 0o644;
/// Mode of the directories (`pki/`, `pki/etcd/`).
pub const MODE_DIR: u32 = 0o755;

/// kubeadm's CA validity (10 years) and the backdate it applies against clock skew.
const CA_VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 365 * 10);
const BACKDATE: SignedDuration = SignedDuration::from_mins(5);

/// The key type of `kubeflavor certs generate --key-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Rsa2048,
    EcdsaP256,
}

impl KeyAlgorithm {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rsa2048 => "rsa-2048",
            Self::EcdsaP256 => "ecdsa-p256",
        }
    }

    fn private_key_form(self) -> PrivateKeyForm {
        match self {
            Self::Rsa2048 => PrivateKeyForm::Pkcs1,
            Self::EcdsaP256 => PrivateKeyForm::Sec1,
        }
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyAlgorithm {
    type Err = PkiError;

    fn from_str(s: &str) -> Result<Self, PkiError> {
        match s.to_ascii_lowercase().as_str() {
            "rsa-2048" | "rsa2048" => Ok(Self::Rsa2048),
            "ecdsa-p256" | "ecdsa-p-256" => Ok(Self::EcdsaP256),
            _ => Err(PkiError::UnknownKeyType(s.to_string())),
        }
    }
}

/// One file of a PKI directory: path relative to the PKI dir, mode, contents. Contents are
/// zeroized on drop (they may be a CA private key) and Debug prints only their size.
#[derive(Clone, PartialEq, Eq)]
pub struct PkiFile {
    pub rel_path: String,
    pub mode: u32,
    contents: Zeroizing<Vec<u8>>,
}

impl PkiFile {
    pub fn new(rel_path: impl Into<String>, mode: u32, contents: Zeroizing<Vec<u8>>) -> Self {
        Self {
            rel_path: rel_path.into(),
            mode,
            contents,
        }
    }

    pub fn contents(&self) -> &[u8] {
        &self.contents
    }
}

impl fmt::Debug for PkiFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PkiFile")
            .field("rel_path", &self.rel_path)
            .field("mode", &format_args!("{:o}", self.mode))
            .field("len", &self.contents.len())
            .finish()
    }
}

/// Why a PKI could not be generated.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PkiError {
    #[error("unknown key type '{0}'; use rsa-2048 or ecdsa-p256")]
    UnknownKeyType(String),
    #[error("key generation failed in aws-lc: {0}")]
    KeyGeneration(String),
    #[error("certificate generation failed: {0}")]
    Certificate(String),
    #[error("time {0} is outside the range a certificate can carry")]
    Time(Timestamp),
    #[error(transparent)]
    Randomness(#[from] RandomnessError),
}

/// Generates the shared CA set with serial numbers from the OS CSPRNG.
pub fn generate_shared_ca_set(
    algorithm: KeyAlgorithm,
    now: Timestamp,
) -> Result<Vec<PkiFile>, PkiError> {
    let mut serials = Zeroizing::new([0u8; 24]);
    os_fill(&mut serials[..])?;
    let mut serials = serials
        .chunks(8)
        .map(|c| c.to_vec())
        .collect::<Vec<_>>()
        .into_iter();
    generate_shared_ca_set_with(algorithm, now, |buf| {
        if let Some(s) = serials.next() {
            buf.copy_from_slice(&s);
        }
    })
}

/// As [`generate_shared_ca_set`], with the certificate serial numbers drawn from `fill`
/// (8 bytes per CA). The private keys always come from aws-lc's generator.
pub fn generate_shared_ca_set_with(
    algorithm: KeyAlgorithm,
    now: Timestamp,
    mut fill: impl FnMut(&mut [u8]),
) -> Result<Vec<PkiFile>, PkiError> {
    let mut files = Vec::with_capacity(8);
    // kubeadm's names: certs.go KubeadmCertRootCA, KubeadmCertFrontProxyCA, KubeadmCertEtcdCA.
    for (base, common_name) in [
        ("ca", "kubernetes"),
        ("front-proxy-ca", "front-proxy-ca"),
        ("etcd/ca", "etcd-ca"),
    ] {
        let key = generate_key(algorithm)?;
        let cert_der = self_signed_ca(&key, common_name, now, &mut fill)?;
        files.push(PkiFile::new(
            format!("{base}.crt"),
            MODE_PUBLIC,
            Zeroizing::new(encode_pem(LABEL_CERTIFICATE, &cert_der).as_bytes().to_vec()),
        ));
        files.push(PkiFile::new(
            format!("{base}.key"),
            MODE_PRIVATE_KEY,
            private_key_pem(&key, algorithm.private_key_form())?,
        ));
    }
    let sa = generate_key(algorithm)?;
    files.push(PkiFile::new(
        "sa.key",
        MODE_PRIVATE_KEY,
        private_key_pem(&sa, algorithm.private_key_form())?,
    ));
    files.push(PkiFile::new(
        "sa.pub",
        MODE_PUBLIC,
        Zeroizing::new(sa.0.public_key_pem().into_bytes()),
    ));
    Ok(files)
}

pub(crate) fn generate_key(algorithm: KeyAlgorithm) -> Result<KeyPairGuard, PkiError> {
    let alg = match algorithm {
        KeyAlgorithm::Rsa2048 => &PKCS_RSA_SHA256,
        KeyAlgorithm::EcdsaP256 => &PKCS_ECDSA_P256_SHA256,
    };
    rcgen::KeyPair::generate_for(alg)
        .map(KeyPairGuard)
        .map_err(|e| PkiError::KeyGeneration(e.to_string()))
}

/// A key pair as PEM in `form`. rcgen holds PKCS#8; PKCS#1 and SEC1 are unwrapped from it.
pub(crate) fn private_key_pem(
    key: &KeyPairGuard,
    form: PrivateKeyForm,
) -> Result<Zeroizing<Vec<u8>>, PkiError> {
    let pkcs8 = key.0.serialized_der();
    let bad = || PkiError::KeyGeneration("unexpected PKCS#8 layout from aws-lc".into());
    let der: Zeroizing<Vec<u8>> = match form {
        PrivateKeyForm::Pkcs8 => Zeroizing::new(pkcs8.to_vec()),
        PrivateKeyForm::Pkcs1 => Zeroizing::new(
            der::parse_pkcs8(pkcs8)
                .ok_or_else(bad)?
                .private_key
                .to_vec(),
        ),
        PrivateKeyForm::Sec1 => {
            let info = der::parse_pkcs8(pkcs8).ok_or_else(bad)?;
            der::sec1_from_pkcs8(&info, key.0.public_key_raw()).ok_or_else(bad)?
        }
    };
    Ok(Zeroizing::new(
        encode_pem(form.pem_label(), &der).as_bytes().to_vec(),
    ))
}

/// Seconds since the epoch, for rcgen's `time::OffsetDateTime` fields: kubeflavor's time is
/// jiff, and adding seconds to `rcgen::date_time_ymd(1970, 1, 1)` avoids a direct dependency
/// on the `time` crate.
pub(crate) fn epoch_seconds(t: Timestamp) -> Result<std::time::Duration, PkiError> {
    let secs = u64::try_from(t.as_second()).map_err(|_| PkiError::Time(t))?;
    Ok(std::time::Duration::from_secs(secs))
}

fn self_signed_ca(
    key: &KeyPairGuard,
    common_name: &str,
    now: Timestamp,
    fill: &mut impl FnMut(&mut [u8]),
) -> Result<Vec<u8>, PkiError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    // client-go's NewSelfSignedCACert also puts the CN in the DNS SANs.
    params.subject_alt_names =
        vec![SanType::DnsName(common_name.try_into().map_err(
            |e: rcgen::Error| PkiError::Certificate(e.to_string()),
        )?)];
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    let not_before = now.checked_sub(BACKDATE).map_err(|_| PkiError::Time(now))?;
    let not_after = now
        .checked_add(CA_VALIDITY)
        .map_err(|_| PkiError::Time(now))?;
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + epoch_seconds(not_before)?;
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + epoch_seconds(not_after)?;
    // kubeadm draws a uniform serial in [1, 2^63): positive, non-zero.
    let mut serial = [0u8; 8];
    fill(&mut serial);
    serial[0] &= 0x7f;
    if serial == [0; 8] {
        serial[7] = 1;
    }
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    let cert = params
        .self_signed(&key.0)
        .map_err(|e| PkiError::Certificate(e.to_string()))?;
    Ok(cert.der().to_vec())
}
