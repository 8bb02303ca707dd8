//! `[tls-bootstrap]`: the kubelet's part of joining, done by kubeflavor itself (for
//! appliances without a kubelet that bootstraps, and for the walkthrough and tests).
//!
//! As the kubelet does (`pkg/kubelet/certificate/bootstrap`): a fresh ECDSA P-256 key, a CSR with
//! CN `system:node:<name>` and O `system:nodes`, created as the bootstrap identity with signer
//! `kubernetes.io/kube-apiserver-client-kubelet`; then a watch on that one CSR by name until it is
//! issued or denied. The private key never leaves this process except into kubelet.conf.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kubeflavor_core::csr::kubelet::{
    KUBELET_CLIENT_SIGNER, KUBELET_CLIENT_USAGES, generate_kubelet_csr,
};
use kubeflavor_core::names::NodeName;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::Report;
use super::fetch::{error_chain, human_duration};

/// The issued client certificate and its key.
pub struct IssuedCertificate {
    pub csr_name: String,
    pub cert_pem: String,
    pub key_pem: Zeroizing<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsBootstrapError {
    #[error("cannot generate the node key and CSR: {0}")]
    Generate(String),
    #[error("cannot use the bootstrap kubeconfig: {0}")]
    Client(String),
    #[error(
        "the API server refused the bootstrap token when creating the CSR: {0} (the token is invalid or expired; create a new one)"
    )]
    TokenRejected(String),
    #[error(
        "the bootstrap token may not create CSRs: {0} (the token's group has no binding to the system:node-bootstrapper ClusterRole; the cluster administrator must bind it: 'kubeflavor install --apply' of this version binds kubeflavor's node and control-plane token groups)"
    )]
    Forbidden(String),
    #[error("cannot create the CSR: {0}")]
    Create(String),
    #[error(
        "the cluster refused this node: certificate signing request {csr_name} was denied ({reason})"
    )]
    Denied { csr_name: String, reason: String },
    #[error(
        "the cluster refused this node: the token stopped being accepted while certificate signing request {csr_name} was pending (it was revoked or expired)"
    )]
    TokenWithdrawn { csr_name: String },
    #[error(
        "the signer could not issue certificate signing request {csr_name}: {message} (ask the cluster administrator)"
    )]
    SigningFailed { csr_name: String, message: String },
    #[error(
        "the certificate issued for certificate signing request {csr_name} is unusable: {why} (run join again)"
    )]
    WrongCertificate { csr_name: String, why: String },
    #[error(
        "certificate signing request {csr_name} was deleted before a certificate was issued (run join again)"
    )]
    Deleted { csr_name: String },
    #[error(
        "certificate signing request {csr_name} was not {stage} within {timeout} (ask the cluster administrator whether the kubeflavor controller is running)"
    )]
    TimedOut {
        csr_name: String,
        stage: &'static str,
        timeout: String,
    },
}

/// The CertificateSigningRequest object a kubelet files for `csr_pem`: the kubelet client
/// signer and the kubelet's usages. Named `name`, or `csr-<random>` by the API server.
pub fn kubelet_csr_object(name: Option<&str>, csr_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            generate_name: name.is_none().then(|| "csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            usages: Some(
                KUBELET_CLIENT_USAGES
                    .iter()
                    .map(|u| u.to_string())
                    .collect(),
            ),
            ..Default::default()
        },
        status: None,
    }
}

/// Generates the key and CSR, submits it with `client` (authenticated as the bootstrap
/// identity), and waits until `deadline` for the certificate.
pub async fn request_client_certificate(
    client: Client,
    node_name: &NodeName,
    timeout: Duration,
    report: &mut dyn Report,
) -> Result<IssuedCertificate, TlsBootstrapError> {
    let deadline = Instant::now() + timeout;
    let generated = generate_kubelet_csr(node_name.as_str())
        .map_err(|e| TlsBootstrapError::Generate(e.to_string()))?;
    let csr = kubelet_csr_object(None, generated.csr_pem());
    let api: Api<CertificateSigningRequest> = Api::all(client);
    // A token minted a moment ago may not authenticate yet (see `kubeflavor_cluster::cache_lag`).
    let params = PostParams::default();
    let created = kubeflavor_cluster::cache_lag::retry_unauthorized(
        kubeflavor_cluster::cache_lag::TOKEN_PROPAGATION,
        || api.create(&params, &csr),
    )
    .await
    .map_err(create_error)?;
    let csr_name = created.metadata.name.clone().unwrap_or_default();
    let requester = created
        .spec
        .username
        .clone()
        .unwrap_or_else(|| "the bootstrap identity".into());
    report.info(&format!(
        "[tls-bootstrap] Created certificate signing request {csr_name} for node \"{node_name}\" as {requester}, waiting for approval"
    ));

    let cert_pem = wait_for_certificate(&api, &csr_name, deadline, timeout, report).await?;
    check_certificate_is_ours(&cert_pem, generated.key_pem(), &csr_name)?;
    report.info(&format!("[tls-bootstrap] Certificate signing request {csr_name} was approved and the certificate issued"));
    Ok(IssuedCertificate {
        csr_name,
        cert_pem,
        key_pem: Zeroizing::new(generated.key_pem().to_vec()),
    })
}

/// The issued certificate must carry this node's public key: a certificate for another key
/// would make a kubelet.conf that can never authenticate (or one swapped in by whoever
/// wrote the CSR status).
fn check_certificate_is_ours(
    cert_pem: &str,
    key_pem: &[u8],
    csr_name: &str,
) -> Result<(), TlsBootstrapError> {
    let bad = |why: String| TlsBootstrapError::WrongCertificate {
        csr_name: csr_name.into(),
        why,
    };
    let certs = kubeflavor_core::crypto::keys::parse_certificates_pem(cert_pem.as_bytes())
        .map_err(|e| bad(e.to_string()))?;
    let leaf = certs
        .first()
        .ok_or_else(|| bad("it holds no certificate".into()))?;
    let key = kubeflavor_core::crypto::keys::PrivateKey::from_pem(key_pem)
        .map_err(|e| bad(e.to_string()))?;
    match key.matches_certificate(leaf) {
        Ok(true) => Ok(()),
        Ok(false) => Err(bad("it is for another public key than this node's".into())),
        Err(e) => Err(bad(e.to_string())),
    }
}

fn create_error(err: kube::Error) -> TlsBootstrapError {
    match &err {
        kube::Error::Api(s) if s.code == 401 => TlsBootstrapError::TokenRejected(s.message.clone()),
        kube::Error::Api(s) if s.code == 403 => TlsBootstrapError::Forbidden(s.message.clone()),
        _ => TlsBootstrapError::Create(error_chain(&err)),
    }
}

/// What one observed state of the CSR means for the node.
#[derive(Debug, PartialEq, Eq)]
pub enum CsrState {
    Pending,
    /// Approved; the signer has not written the certificate yet.
    Approved,
    Issued(String),
    Denied(String),
    Failed(String),
}

/// Reads the CSR's conditions and certificate. Denied wins over everything (it is final);
/// an approved CSR only counts once the certificate is there.
pub fn csr_state(csr: &CertificateSigningRequest) -> CsrState {
    let status = csr.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let is_true = |c: &&k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition| {
        c.status == "True"
    };
    let describe = |c: &k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition| {
        let reason = c.reason.clone().unwrap_or_default();
        match c.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason,
        }
    };
    if let Some(c) = conditions
        .iter()
        .filter(is_true)
        .find(|c| c.type_ == "Denied")
    {
        return CsrState::Denied(describe(c));
    }
    if let Some(c) = conditions
        .iter()
        .filter(is_true)
        .find(|c| c.type_ == "Failed")
    {
        return CsrState::Failed(describe(c));
    }
    let approved = conditions
        .iter()
        .filter(is_true)
        .any(|c| c.type_ == "Approved");
    let certificate = status
        .and_then(|s| s.certificate.as_ref())
        .filter(|c| !c.0.is_empty());
    match (approved, certificate) {
        (true, Some(cert)) => CsrState::Issued(String::from_utf8_lossy(&cert.0).into_owned()),
        (true, None) => CsrState::Approved,
        (false, _) => CsrState::Pending,
    }
}

/// Watches the CSR until it is issued, denied or failed, or `deadline` passes.
async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    csr_name: &str,
    deadline: Instant,
    timeout: Duration,
    report: &mut dyn Report,
) -> Result<String, TlsBootstrapError> {
    // The kubelet watches its CSR with a metadata.name field selector; the watcher lists
    // first, so an approval that landed before the watch began is not missed.
    let config = watcher::Config::default().fields(&format!("metadata.name={csr_name}"));
    let mut events = watcher(api.clone(), config).default_backoff().boxed();
    let mut said_approved = false;
    loop {
        let Ok(next) = tokio::time::timeout_at(deadline, events.next()).await else {
            let stage = if said_approved { "issued" } else { "approved" };
            return Err(TlsBootstrapError::TimedOut {
                csr_name: csr_name.into(),
                stage,
                timeout: human_duration(timeout),
            });
        };
        let Some(csr) = observed(next, csr_name)? else {
            continue;
        };
        match csr_state(&csr) {
            CsrState::Pending => {}
            CsrState::Approved if !said_approved => {
                report.info(&format!(
                    "[tls-bootstrap] Certificate signing request {csr_name} was approved, waiting for the certificate"
                ));
                said_approved = true;
            }
            CsrState::Approved => {}
            CsrState::Issued(cert) => return Ok(cert),
            CsrState::Denied(reason) => {
                return Err(TlsBootstrapError::Denied {
                    csr_name: csr_name.into(),
                    reason,
                });
            }
            CsrState::Failed(message) => {
                return Err(TlsBootstrapError::SigningFailed {
                    csr_name: csr_name.into(),
                    message,
                });
            }
        }
    }
}

/// The CSR one watch event shows, `None` for an event without one (and for a watch
/// error the watcher retries), or why waiting is over.
fn observed(
    next: Option<Result<watcher::Event<CertificateSigningRequest>, watcher::Error>>,
    csr_name: &str,
) -> Result<Option<CertificateSigningRequest>, TlsBootstrapError> {
    let deleted = || TlsBootstrapError::Deleted {
        csr_name: csr_name.into(),
    };
    match next {
        Some(Ok(watcher::Event::Apply(csr) | watcher::Event::InitApply(csr))) => Ok(Some(csr)),
        Some(Ok(watcher::Event::Delete(_))) | None => Err(deleted()),
        Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => Ok(None),
        // The bootstrap identity is gone. kubeflavor deletes a refused node's token (P4,
        // rejection that ends), so this is how a refusal looks when the Denied event itself
        // was missed by a reconnecting watch.
        Some(Err(err)) if is_unauthorized(&err) => Err(TlsBootstrapError::TokenWithdrawn {
            csr_name: csr_name.into(),
        }),
        Some(Err(err)) => {
            tracing::debug!(error = %error_chain(&err), "watch of the CSR failed; the watcher retries");
            Ok(None)
        }
    }
}

fn is_unauthorized(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 401,
        watcher::Error::WatchError(s) => s.code == 401,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    use super::*;

    fn mk_csr(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| CertificateSigningRequestCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            reason: Some(format!("Kubeflavor{t}")),
                            ..Default::default()
                        })
                        .collect(),
                ),
                certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pending_until_a_true_condition() {
        assert_eq!(
            csr_state(&CertificateSigningRequest::default()),
            CsrState::Pending
        );
        assert_eq!(
            csr_state(&mk_csr(&[("Approved", "False")], None)),
            CsrState::Pending
        );
    }

    #[test]
    fn approved_is_not_issued_until_the_certificate_is_there() {
        assert_eq!(
            csr_state(&mk_csr(&[("Approved", "True")], None)),
            CsrState::Approved
        );
        assert_eq!(
            csr_state(&mk_csr(&[("Approved", "True")], Some(""))),
            CsrState::Approved
        );
        assert_eq!(
            csr_state(&mk_csr(&[("Approved", "True")], Some("PEM"))),
            CsrState::Issued("PEM".into())
        );
    }

    #[test]
    fn a_certificate_without_approval_is_not_taken() {
        assert_eq!(csr_state(&mk_csr(&[], Some("PEM"))), CsrState::Pending);
    }

    #[test]
    fn denied_and_failed_are_final() {
        assert_eq!(
            csr_state(&mk_csr(&[("Denied", "True")], None)),
            CsrState::Denied("KubeflavorDenied".into())
        );
        assert_eq!(
            csr_state(&mk_csr(&[("Approved", "True"), ("Failed", "True")], None)),
            CsrState::Failed("KubeflavorFailed".into())
        );
    }
}
