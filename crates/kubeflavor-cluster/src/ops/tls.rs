//! The API's serving certificate: read from PEM files (e.g. a cert-manager Secret mounted
//! into the pod) and read again when they change, so a renewed certificate is served
//! without a restart; or, only when asked for, a self-signed one made at start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kubeflavor_core::crypto::keys::{self, PrivateKeyForm};
use rustls::crypto::aws_lc_rs::sign::any_supported_type;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use zeroize::Zeroizing;

/// How often the files are looked at (on a handshake, never in between).
const RECHECK: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the serving certificate {path}: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("cannot read the serving key {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("cannot make a self-signed certificate: {0}")]
    SelfSigned(String),
}

/// A certificate and key as loaded, with what identified the files then.
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: Option<(SystemTime, SystemTime)>,
    checked: Instant,
}

/// Serves the certificate of `cert`/`key` files, reloaded when either file changes.
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn stamp(cert: &Path, key: &Path) -> Option<(SystemTime, SystemTime)> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((modified(cert)?, modified(key)?))
}

/// Reads a certificate chain and its private key from PEM files.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let cert_text = std::fs::read(cert).map_err(|e| TlsError::Certificate {
        path: cert.into(),
        reason: e.to_string(),
    })?;
    let key_text = Zeroizing::new(std::fs::read(key).map_err(|e| TlsError::Key {
        path: key.into(),
        reason: e.to_string(),
    })?);
    certified_from_pem(&cert_text, &key_text, cert, key)
}

/// A certificate chain and its private key from PEM text, ready to sign (`cert` and `key`
/// name where the text comes from, in errors). The key's DER is zeroized once rustls
/// holds it.
pub fn certified_from_pem(
    cert_text: &[u8],
    key_text: &[u8],
    cert: &Path,
    key: &Path,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let cert_error = |reason: String| TlsError::Certificate {
        path: cert.into(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = keys::tls_certificate_chain(cert_text)
        .map_err(|e| cert_error(e.to_string()))?
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    if chain.is_empty() {
        return Err(cert_error("no CERTIFICATE block in it".into()));
    }
    let (form, der) = keys::tls_private_key(key_text).map_err(|e| TlsError::Key {
        path: key.into(),
        reason: e.to_string(),
    })?;
    let private = match form {
        PrivateKeyForm::Pkcs1 => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(&der[..])),
        PrivateKeyForm::Sec1 => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(&der[..])),
        PrivateKeyForm::Pkcs8 => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(&der[..])),
    };
    certified(chain, private, key)
}

fn certified(
    chain: Vec<CertificateDer<'static>>,
    private: PrivateKeyDer<'_>,
    key_path: &Path,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let signing = any_supported_type(&private).map_err(|e| TlsError::Key {
        path: key_path.into(),
        reason: format!("unsupported key: {e}"),
    })?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| TlsError::Key {
        path: key_path.into(),
        reason: format!("it does not belong to the certificate: {e}"),
    })?;
    Ok(Arc::new(certified))
}

impl ReloadingCert {
    /// Loads the files once; an error here stops the server from starting.
    pub fn new(cert: PathBuf, key: PathBuf) -> Result<Self, TlsError> {
        let stamp = stamp(&cert, &key);
        let certified = load(&cert, &key)?;
        Ok(ReloadingCert {
            loaded: Mutex::new(Loaded {
                key: certified,
                stamp,
                checked: Instant::now(),
            }),
            cert,
            key,
        })
    }

    /// The certificate to serve now: the files are read again if they changed since the
    /// last look; a pair that does not load (half written, mismatched) leaves the previous
    /// one in service until the next change.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.checked.elapsed() >= RECHECK {
            loaded.checked = Instant::now();
            let now = stamp(&self.cert, &self.key);
            if now.is_some() && now != loaded.stamp {
                match load(&self.cert, &self.key) {
                    Ok(key) => {
                        tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                        loaded.key = key;
                        loaded.stamp = now;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the serving certificate changed but does not load; still serving the previous one")
                    }
                }
            }
        }
        loaded.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A fixed certificate (the self-signed one).
#[derive(Debug)]
pub struct FixedCert(pub Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A self-signed certificate for `names` (DNS names or IP addresses), and its PEM, so the
/// caller can be told what to trust.
pub fn self_signed(names: &[String]) -> Result<(Arc<CertifiedKey>, String), TlsError> {
    let generated = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| TlsError::SelfSigned(e.to_string()))?;
    let pem = generated.cert.pem();
    let chain = vec![generated.cert.der().clone()];
    let private = PrivateKeyDer::try_from(generated.signing_key.serialize_der())
        .map_err(|e| TlsError::SelfSigned(e.to_string()))?;
    Ok((certified(chain, private, Path::new("(generated)"))?, pem))
}

/// The rustls configuration serving `resolver`'s certificate over HTTP/1.1 and HTTP/2.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> rustls::ServerConfig {
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// [`server_config`], asking clients for a certificate `verifier` checks (a client may
/// still connect without one when the verifier allows it).
pub fn server_config_with_clients(
    resolver: Arc<dyn ResolvesServerCert>,
    verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
) -> rustls::ServerConfig {
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fresh certificate and key for `name`; returns the paths and the DER.
    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
        let generated = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        (cert, key, generated.cert.der().to_vec())
    }

    /// Makes a file look changed the way a Secret update does: a new modification time.
    fn touch_later(path: &Path) {
        std::fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
    }

    #[test]
    fn a_pair_loads_and_a_mismatched_pair_does_not() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = write_pair(dir.path(), "mint.example.org");
        assert!(load(&cert, &key).is_ok());
        let other = rcgen::generate_simple_self_signed(vec!["x".into()]).unwrap();
        std::fs::write(&key, other.signing_key.serialize_pem()).unwrap();
        assert!(matches!(load(&cert, &key), Err(TlsError::Key { .. })));
        std::fs::write(&cert, "not PEM").unwrap();
        assert!(matches!(
            load(&cert, &key),
            Err(TlsError::Certificate { .. })
        ));
    }

    #[test]
    fn a_renewed_pair_is_served_after_the_recheck_interval() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, old) = write_pair(dir.path(), "old.example.org");
        let reloading = ReloadingCert::new(cert.clone(), key.clone()).unwrap();
        assert_eq!(reloading.current().cert[0].as_ref(), old.as_slice());
        let (_, _, new) = write_pair(dir.path(), "new.example.org");
        touch_later(&cert);
        touch_later(&key);
        assert_eq!(
            reloading.current().cert[0].as_ref(),
            old.as_slice(),
            "not looked at again before the interval"
        );
        // Pretend the last look was long ago instead of waiting for it.
        reloading.loaded.lock().unwrap().checked = Instant::now() - RECHECK;
        assert_eq!(reloading.current().cert[0].as_ref(), new.as_slice());
    }

    #[test]
    fn a_broken_renewal_keeps_the_previous_certificate() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, old) = write_pair(dir.path(), "old.example.org");
        let reloading = ReloadingCert::new(cert.clone(), key).unwrap();
        std::fs::write(&cert, "half written").unwrap();
        touch_later(&cert);
        reloading.loaded.lock().unwrap().checked = Instant::now() - RECHECK;
        assert_eq!(reloading.current().cert[0].as_ref(), old.as_slice());
    }

    #[test]
    fn a_self_signed_certificate_is_served_and_printed() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let (key, pem) = self_signed(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        let printed = keys::tls_certificate_chain(pem.as_bytes()).unwrap();
        assert_eq!(printed[0], key.cert[0].as_ref());
    }
}
