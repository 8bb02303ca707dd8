//! Point reads of CertificateSigningRequests (the CSR loops watch them and write their
//! approval through `controller::csr`): one CSR as the API server has it now, and the
//! latest serving CSR a node filed, for `node get`.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Client;
use kube::api::{Api, ListParams};
use kubeflavor_core::csr::client::NODE_USER_PREFIX;
use kubeflavor_core::csr::serving::KUBELET_SERVING_SIGNER;

use crate::read::{self, ReadError};

/// CertificateSigningRequests (cluster-scoped).
pub fn api(client: &Client) -> Api<CertificateSigningRequest> {
    Api::all(client.clone())
}

/// The CSR `name` as the API server has it now, if it exists.
pub async fn get(
    client: &Client,
    name: &str,
) -> Result<Option<CertificateSigningRequest>, ReadError> {
    read::get(api(client), "CertificateSigningRequest", name).await
}

/// Whether the CSR carries condition `type_` with status True.
pub fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// The latest serving CSR a node filed, and where it stands: for `kubeflavor node get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingCsrState {
    pub csr: String,
    /// `Pending`, `Approved` (not signed yet), `Issued`, `Denied` or `Failed`.
    pub state: &'static str,
    pub created: Option<jiff::Timestamp>,
}

/// The state of one CSR as its conditions and certificate say.
pub fn csr_state(csr: &CertificateSigningRequest) -> &'static str {
    if has_condition(csr, "Denied") {
        "Denied"
    } else if has_condition(csr, "Failed") {
        "Failed"
    } else if csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
    {
        "Issued"
    } else if has_condition(csr, "Approved") {
        "Approved"
    } else {
        "Pending"
    }
}

/// The latest serving CSR filed by `system:node:<node>` (by creation time), if any.
pub async fn latest_serving_csr(
    client: &Client,
    node: &str,
) -> Result<Option<ServingCsrState>, kube::Error> {
    let list = api(client)
        .list(&ListParams::default().fields(&format!("spec.signerName={KUBELET_SERVING_SIGNER}")))
        .await?;
    let user = format!("{NODE_USER_PREFIX}{node}");
    Ok(list
        .items
        .iter()
        .filter(|c| c.spec.username.as_deref() == Some(user.as_str()))
        .max_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|c| ServingCsrState {
            csr: c.metadata.name.clone().unwrap_or_default(),
            state: csr_state(c),
            created: c.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(conditions: &[&str], certificate: bool) -> CertificateSigningRequest {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "spec": {"request": "", "signerName": KUBELET_SERVING_SIGNER},
            "status": {
                "conditions": conditions.iter().map(|t| serde_json::json!({"type": t, "status": "True"})).collect::<Vec<_>>(),
                "certificate": if certificate { "AAAA" } else { "" },
            }
        }))
        .expect("a CSR")
    }

    #[test]
    fn a_csrs_state_is_read_from_conditions_and_certificate() {
        assert_eq!(csr_state(&csr(&[], false)), "Pending");
        assert_eq!(csr_state(&csr(&["Approved"], false)), "Approved");
        assert_eq!(csr_state(&csr(&["Approved"], true)), "Issued");
        assert_eq!(csr_state(&csr(&["Denied"], false)), "Denied");
        assert_eq!(csr_state(&csr(&["Approved", "Failed"], false)), "Failed");
    }
}
