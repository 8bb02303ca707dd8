//! Token discovery over cluster-info: signature, kubeconfig shape, CA pin, re-fetch.

use std::collections::BTreeMap;

use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::join::discovery::{
    CaVerification, DiscoveryError, KUBECONFIG_KEY, check_refetch_identical, verify_cluster_info,
};
use kubeflavor_core::join::jws::{self, JwsError};

const ID: &str = "abcdef";
const SECRET: &str = "0123456789abcdef";

use crate::fixtures::{SERVER, ca_pem, cluster_info_kubeconfig as kubeconfig};

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
    let der = kubeflavor_core::crypto::keys::parse_certificates_pem(ca_pem)
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
    assert_eq!(info.server, SERVER);
    assert_eq!(info.ca_pem, ca);
}

#[test]
fn any_of_several_pins_may_match() {
    let ca = ca_pem();
    let data = cluster_info(&kubeconfig(&ca));
    let pins = [pin_of(&ca_pem()), pin_of(&ca)];
    assert!(verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&pins)).is_ok());
}

fn der_of(pem: &[u8]) -> Vec<u8> {
    kubeflavor_core::crypto::keys::parse_certificates_pem(pem)
        .unwrap()
        .remove(0)
}

/// With a leaked token, an attacker can sign a bundle holding the real, pinned CA next to
/// its own. One matching certificate must not vouch for the rest: only pinned certificates
/// are trusted (and so written, and used for TLS).
#[test]
fn only_the_pinned_certificates_of_a_bundle_are_trusted() {
    let (real, attacker) = (ca_pem(), ca_pem());
    let bundle = [real.clone(), attacker.clone()].concat();
    let data = cluster_info(&kubeconfig(&bundle));
    let info =
        verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&[pin_of(&real)])).unwrap();
    assert_eq!(info.ca_certs_der, [der_of(&real)]);
    assert_eq!(info.ca_pem, real);
    // The attacker's CA first in the bundle changes nothing.
    let reversed = [attacker.clone(), real.clone()].concat();
    let data = cluster_info(&kubeconfig(&reversed));
    let info =
        verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&[pin_of(&real)])).unwrap();
    assert_eq!(info.ca_certs_der, [der_of(&real)]);
}

/// During a CA rotation cluster-info holds the old and the new CA and the join line pins
/// both (one flag per CA): both are kept, in the bundle's order.
#[test]
fn every_pinned_certificate_is_kept_in_bundle_order() {
    let (old, new) = (ca_pem(), ca_pem());
    let bundle = [old.clone(), new.clone()].concat();
    let data = cluster_info(&kubeconfig(&bundle));
    let pins = [pin_of(&new), pin_of(&old)];
    let info = verify_cluster_info(&data, ID, SECRET, CaVerification::Pins(&pins)).unwrap();
    assert_eq!(info.ca_certs_der, [der_of(&old), der_of(&new)]);
    assert_eq!(info.ca_pem, bundle);
}

/// Without a pin nothing can choose among the certificates: the whole signed bundle is
/// what the unsafe skip trusts (as kubeadm's), only ever its certificates, never text
/// around them.
#[test]
fn the_unsafe_skip_trusts_the_whole_signed_bundle_and_only_its_certificates() {
    let (a, b) = (ca_pem(), ca_pem());
    let commented = [b"# a comment\n".as_slice(), &a, b"junk between\n", &b].concat();
    let data = cluster_info(&kubeconfig(&commented));
    let info = verify_cluster_info(&data, ID, SECRET, CaVerification::UnsafeSkip).unwrap();
    assert_eq!(info.ca_certs_der, [der_of(&a), der_of(&b)]);
    assert_eq!(info.ca_pem, [a, b].concat());
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
