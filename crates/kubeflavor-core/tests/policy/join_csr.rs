//! The CSR that `kubeflavor join --tls-bootstrap` files must be one the controller's
//! validator accepts as a kubelet client CSR, for exactly the node it names.

use kubeflavor_core::crypto::keys::PrivateKey;
use kubeflavor_core::csr::client::validate_kubelet_client_csr;
use kubeflavor_core::csr::kubelet::{
    KUBELET_CLIENT_SIGNER, KUBELET_CLIENT_USAGES, generate_kubelet_csr,
};

#[test]
fn join_csr_is_a_valid_kubelet_client_csr_for_its_node() {
    let csr = generate_kubelet_csr("edge-7.example.com").unwrap();
    let usages: Vec<String> = KUBELET_CLIENT_USAGES
        .iter()
        .map(|u| u.to_string())
        .collect();
    let parsed =
        validate_kubelet_client_csr(KUBELET_CLIENT_SIGNER, csr.csr_pem().as_bytes(), &usages)
            .expect("the join CSR must pass the controller's validation");
    assert_eq!(parsed.node_name.as_str(), "edge-7.example.com");

    // The fingerprint the binding records is the join key's public key.
    let key = PrivateKey::from_pem(csr.key_pem()).unwrap();
    let spki = key.public_key();
    use sha2::Digest;
    let expected: [u8; 32] = sha2::Sha256::digest(spki.spki_der()).into();
    assert_eq!(parsed.public_key_sha256, expected);
}
