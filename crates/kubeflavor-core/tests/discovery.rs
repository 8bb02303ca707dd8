//! Token discovery over cluster-info: signature, kubeconfig shape, CA pin, re-fetch.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use kubeflavor_core::discovery::{
    CaVerification, DiscoveryError, KUBECONFIG_KEY, check_refetch_identical, verify_cluster_info,
};
use kubeflavor_core::jws::{self, JwsError};
use kubeflavor_core::pin::CaPin;
use kubeflavor_core::pki::{KeyAlgorithm, generate_shared_ca_set};

const ID: &str = "abcdef";
const SECRET: &str = "0123456789abcdef";

fn ca_pem() -> Vec<u8> {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, Timestamp::now()).unwrap();
    files
        .into_iter()
        .find(|f| f.rel_path == "ca.crt")
        .unwrap()
        .contents()
        .to_vec()
}

fn kubeconfig(ca_pem: &[u8]) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {}\n    server: https://10.0.0.1:6443\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n",
        STANDARD.encode(ca_pem)
    )
}

/// cluster-info as kube-controller-manager leaves it: the kubeconfig plus one signature per
/// signing token.
fn cluster_info(kubeconfig: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (KUBECONFIG_KEY.to_string(), kubeconfig.to_string()),
        (
            jws::configmap_key(ID),
            jws::sign(ID, SECRET, kubeconfig.as_bytes()),
        ),
        (
            jws::configmap_key("g2ejdz"),
            jws::sign("g2ejdz", "zzzzzzzzzzzzzzzz", kubeconfig.as_bytes()),
        ),
    ])
}

fn pin_of(ca_pem: &[u8]) -> CaPin {
    let der = kubeflavor_core::keys::parse_certificates_pem(ca_pem)
        .unwrap()
        .remove(0);
    CaPin::from_cert_der(&der).unwrap()
}

#[test]
fn a_signed_pinned_cluster_info_is_trusted() {
    let ca = ca_pem();
    let data = cluster_info(&kubeconfig(&ca));
    let info =
        verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&[pin_of(&ca)])).unwrap();
    assert_eq!(info.server, "https://10.0.0.1:6443");
    assert_eq!(info.ca_pem, ca);
}

#[test]
fn any_of_several_pins_may_match() {
    let ca = ca_pem();
    let data = cluster_info(&kubeconfig(&ca));
    let pins = [pin_of(&ca_pem()), pin_of(&ca)];
    assert!(verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&pins)).is_ok());
}

#[test]
fn a_ca_swapped_by_an_attacker_who_knows_the_token_fails_the_pin() {
    // The attacker can re-sign (it knows the token) but cannot make its CA match the pin.
    let real = ca_pem();
    let fake = ca_pem();
    let data = cluster_info(&kubeconfig(&fake));
    let err =
        verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&[pin_of(&real)])).unwrap_err();
    assert!(
        matches!(&err, DiscoveryError::PinMismatch { found, .. } if *found == pin_of(&fake).to_string()),
        "{err:?}"
    );
    assert!(err.to_string().contains("may be an attack"), "{err}");
}

#[test]
fn a_ca_swapped_by_someone_without_the_token_fails_the_signature() {
    let real = ca_pem();
    let mut data = cluster_info(&kubeconfig(&real));
    data.insert(KUBECONFIG_KEY.into(), kubeconfig(&ca_pem()));
    let err = verify_cluster_info(&data, ID, SECRET, CaVerification::UnsafeSkip).unwrap_err();
    assert_eq!(
        err,
        DiscoveryError::Signature(JwsError::Mismatch {
            token_id: ID.into()
        })
    );
}

#[test]
fn a_wrong_secret_fails_the_signature() {
    let ca = ca_pem();
    let data = cluster_info(&kubeconfig(&ca));
    let err = verify_cluster_info(
        &data,
        ID,
        "0123456789abcdeX",
        CaVerification::Pins(&[pin_of(&ca)]),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        DiscoveryError::Signature(JwsError::Mismatch { .. })
    ));
}

#[test]
fn no_signature_yet_is_retryable_and_says_why() {
    let ca = ca_pem();
    let data = cluster_info(&kubeconfig(&ca));
    let err = verify_cluster_info(
        &data,
        "zzzzzz",
        SECRET,
        CaVerification::Pins(&[pin_of(&ca)]),
    )
    .unwrap_err();
    assert_eq!(
        err,
        DiscoveryError::NoSignature {
            token_id: "zzzzzz".into()
        }
    );
    assert!(err.is_retryable());
    assert!(err.to_string().contains("expired"), "{err}");
    assert!(
        !DiscoveryError::PinMismatch {
            expected: String::new(),
            found: String::new()
        }
        .is_retryable()
    );
}

#[test]
fn pins_are_required_unless_explicitly_skipped() {
    let ca = ca_pem();
    let data = cluster_info(&kubeconfig(&ca));
    assert_eq!(
        verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&[])).unwrap_err(),
        DiscoveryError::NoPins
    );
    assert!(verify_cluster_info(&data, ID, SECRET, CaVerification::UnsafeSkip).is_ok());
}

#[test]
fn missing_kubeconfig_and_bad_kubeconfig_are_reported() {
    let mut data = cluster_info(&kubeconfig(&ca_pem()));
    data.remove(KUBECONFIG_KEY);
    assert_eq!(
        verify_cluster_info(&data, ID, SECRET, CaVerification::UnsafeSkip).unwrap_err(),
        DiscoveryError::NoKubeconfig
    );

    let bad = "apiVersion: v1\nclusters: null\n";
    let data = cluster_info(bad);
    assert!(matches!(
        verify_cluster_info(&data, ID, SECRET, CaVerification::UnsafeSkip),
        Err(DiscoveryError::Kubeconfig(_))
    ));
}

#[test]
fn the_refetch_must_be_byte_identical() {
    let k = kubeconfig(&ca_pem());
    assert_eq!(check_refetch_identical(&k, &k), Ok(()));
    assert_eq!(
        check_refetch_identical(&k, &format!("{k} ")),
        Err(DiscoveryError::ChangedOnRefetch)
    );
}
