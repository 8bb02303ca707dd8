//! The kube-controller-manager duties, as pure functions over stored objects: the kubelet
//! client CSR signer, the bootstrap signer of `kube-public/cluster-info`, and the token
//! cleaner. The server core runs them and performs the writes. (Being written; the
//! signatures are fixed.)

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::Value;

/// The cluster CA, as PEM, for signing.
pub struct SigningCa<'a> {
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
}

/// For an Approved, not yet issued CSR with signer
/// `kubernetes.io/kube-apiserver-client-kubelet`: the PEM certificate to put in
/// `status.certificate`. `None` when there is nothing to sign (pending, denied, already
/// issued, another signer). `Some(Err)` when it cannot be signed (the real signer then sets
/// a `Failed` condition).
pub fn sign_csr(ca: &SigningCa<'_>, csr: &Value, now: Timestamp) -> Option<Result<String, String>> {
    let _ = (ca, csr, now);
    None
}

/// The `jws-kubeconfig-<id>` entries cluster-info should carry: one per valid,
/// unexpired token Secret with `usage-bootstrap-signing: "true"`, signed over `kubeconfig`.
pub fn cluster_info_signatures(
    kubeconfig: &str,
    token_secrets: &[Value],
    now: Timestamp,
) -> BTreeMap<String, String> {
    let _ = (kubeconfig, token_secrets, now);
    BTreeMap::new()
}

/// Names of the token Secrets whose expiration has passed (or does not parse), and the
/// earliest future expiration among the rest (when the cleaner should look again).
pub fn expired_tokens(token_secrets: &[Value], now: Timestamp) -> (Vec<String>, Option<Timestamp>) {
    let _ = (token_secrets, now);
    (Vec::new(), None)
}
