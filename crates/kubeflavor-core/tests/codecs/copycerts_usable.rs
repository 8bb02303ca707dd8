//! Each file of the kubeadm-certs set must be able to serve what a control-plane node uses
//! it for, not merely parse: a CA certificate that is a CA, valid now, alone in its file
//! (kube-apiserver's --client-ca-file would trust a second one too); keys and sa.pub with
//! nothing appended. Checked on download and, through the same function, on upload.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use kubeflavor_core::crypto::certkey::CertificateKey;
use kubeflavor_core::crypto::copycerts::{
    CopyCertsError, EtcdMode, PkiEntry, Provenance, Unusable, check_usable, open_all_with,
    open_for_use, seal_secret_data,
};
use kubeflavor_core::crypto::pki::{KeyAlgorithm, generate_shared_ca_set};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

const CA_CERTS: [PkiEntry; 3] = [
    PkiEntry::CaCert,
    PkiEntry::FrontProxyCaCert,
    PkiEntry::EtcdCaCert,
];

/// A self-signed CA as kubeadm makes one (PKCS#8 key), changed by `tweak`.
struct Ca {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(tweak: impl FnOnce(&mut CertificateParams)) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "kubernetes");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    tweak(&mut params);
    let cert = params.self_signed(&key).unwrap();
    Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A client certificate (not a CA) signed by `ca`, changed by `tweak`.
fn leaf(ca: &Ca, tweak: impl FnOnce(&mut CertificateParams)) -> String {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-etcd-client");
    tweak(&mut params);
    params.signed_by(&key, &ca.issuer).unwrap().pem()
}

fn expired(p: &mut CertificateParams) {
    p.not_before = rcgen::date_time_ymd(1999, 1, 1);
    p.not_after = rcgen::date_time_ymd(2000, 1, 1);
}

fn not_yet_valid(p: &mut CertificateParams) {
    p.not_before = rcgen::date_time_ymd(2100, 1, 1);
    p.not_after = rcgen::date_time_ymd(2110, 1, 1);
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn check(entry: PkiEntry, contents: &str) -> Result<(), Unusable> {
    check_usable(entry, contents.as_bytes(), now())
}

#[test]
fn a_valid_ca_certificate_serves_every_ca_entry() {
    let good = ca(|_| {});
    for entry in CA_CERTS {
        assert_eq!(check(entry, &good.cert_pem), Ok(()), "{entry}");
    }
    assert_eq!(check(PkiEntry::CaKey, &good.key_pem), Ok(()));
}

#[test]
fn a_certificate_that_is_not_a_ca_is_refused() {
    let explicit = ca(|p| p.is_ca = IsCa::ExplicitNoCa);
    let implicit = ca(|p| p.is_ca = IsCa::NoCa);
    for entry in CA_CERTS {
        assert_eq!(
            check(entry, &explicit.cert_pem),
            Err(Unusable::NotCa),
            "{entry}"
        );
        assert_eq!(
            check(entry, &implicit.cert_pem),
            Err(Unusable::NoBasicConstraints),
            "{entry}"
        );
    }
}

#[test]
fn a_ca_whose_key_usage_cannot_sign_certificates_is_refused() {
    let no_sign = ca(|p| p.key_usages = vec![KeyUsagePurpose::DigitalSignature]);
    assert_eq!(
        check(PkiEntry::CaCert, &no_sign.cert_pem),
        Err(Unusable::CannotSignCertificates)
    );
    // No keyUsage extension at all puts no limit on the key (RFC 5280 4.2.1.3).
    let unlimited = ca(|p| p.key_usages = Vec::new());
    assert_eq!(check(PkiEntry::CaCert, &unlimited.cert_pem), Ok(()));
}

#[test]
fn an_expired_or_not_yet_valid_ca_is_refused_with_its_date() {
    let old = ca(expired);
    let future = ca(not_yet_valid);
    for entry in CA_CERTS {
        let Err(Unusable::Expired(at)) = check(entry, &old.cert_pem) else {
            panic!("{entry}: expired CA accepted");
        };
        assert_eq!(at.to_string(), "2000-01-01T00:00:00Z");
        let Err(Unusable::NotYetValid(at)) = check(entry, &future.cert_pem) else {
            panic!("{entry}: future CA accepted");
        };
        assert_eq!(at.to_string(), "2100-01-01T00:00:00Z");
    }
}

#[test]
fn a_second_certificate_in_a_ca_file_is_refused() {
    let (real, extra) = (ca(|_| {}), ca(|_| {}));
    let bundle = format!("{}{}", real.cert_pem, extra.cert_pem);
    for entry in CA_CERTS {
        assert_eq!(
            check(entry, &bundle),
            Err(Unusable::SeveralCertificates { count: 2 }),
            "{entry}"
        );
    }
    let message = Unusable::SeveralCertificates { count: 2 }.to_string();
    assert!(
        message.contains("would trust every certificate"),
        "{message}"
    );
}

#[test]
fn the_external_etcd_ca_may_be_a_bundle_of_valid_cas_only() {
    // kubeadm never has that CA's key: the file is a trust bundle for an etcd the
    // operator runs, so several CAs may be legitimate, but each must be a valid CA.
    let (a, b) = (ca(|_| {}), ca(|_| {}));
    let entry = PkiEntry::ExternalEtcdCaCert;
    assert_eq!(
        check(entry, &format!("{}{}", a.cert_pem, b.cert_pem)),
        Ok(())
    );
    let not_ca = ca(|p| p.is_ca = IsCa::ExplicitNoCa);
    assert_eq!(
        check(entry, &format!("{}{}", a.cert_pem, not_ca.cert_pem)),
        Err(Unusable::NotCa)
    );
    let old = ca(expired);
    assert!(matches!(
        check(entry, &format!("{}{}", old.cert_pem, a.cert_pem)),
        Err(Unusable::Expired(_))
    ));
}

#[test]
fn the_etcd_client_certificate_may_carry_its_chain_but_must_be_valid() {
    let issuer = ca(|_| {});
    let entry = PkiEntry::ExternalEtcdCert;
    let chain = format!("{}{}", leaf(&issuer, |_| {}), issuer.cert_pem);
    assert_eq!(check(entry, &chain), Ok(()));
    assert!(matches!(
        check(entry, &leaf(&issuer, expired)),
        Err(Unusable::Expired(_))
    ));
}

#[test]
fn a_key_file_with_anything_appended_is_refused() {
    let good = ca(|_| {});
    let other = ca(|_| {});
    for entry in [
        PkiEntry::CaKey,
        PkiEntry::FrontProxyCaKey,
        PkiEntry::EtcdCaKey,
        PkiEntry::ServiceAccountKey,
        PkiEntry::ExternalEtcdKey,
    ] {
        assert_eq!(
            check(entry, &format!("{}{}", good.key_pem, good.cert_pem)),
            Err(Unusable::ExtraBlock("CERTIFICATE".into())),
            "{entry}"
        );
        assert_eq!(
            check(entry, &format!("{}{}", good.key_pem, other.key_pem)),
            Err(Unusable::ExtraBlock("PRIVATE KEY".into())),
            "{entry}"
        );
    }
}

#[test]
fn ec_parameters_before_an_ec_key_are_accepted_as_openssl_writes_them() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let key = files.iter().find(|f| f.rel_path == "ca.key").unwrap();
    let with_params = format!(
        "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{}",
        String::from_utf8_lossy(key.contents())
    );
    assert_eq!(check(PkiEntry::CaKey, &with_params), Ok(()));
    let after = format!(
        "{}-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n",
        String::from_utf8_lossy(key.contents())
    );
    assert_eq!(
        check(PkiEntry::CaKey, &after),
        Err(Unusable::ExtraBlock("EC PARAMETERS".into()))
    );
}

#[test]
fn a_public_key_file_with_anything_appended_is_refused() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let sa_pub = files.iter().find(|f| f.rel_path == "sa.pub").unwrap();
    let sa_pub = String::from_utf8_lossy(sa_pub.contents()).into_owned();
    assert_eq!(check(PkiEntry::ServiceAccountPublicKey, &sa_pub), Ok(()));
    assert_eq!(
        check(
            PkiEntry::ServiceAccountPublicKey,
            &format!("{sa_pub}{sa_pub}")
        ),
        Err(Unusable::ExtraBlock("PUBLIC KEY".into()))
    );
}

fn key() -> CertificateKey {
    CertificateKey::from_bytes([0x42; 32])
}

/// A Secret over a generated set, with `ca.crt`/`ca.key` replaced.
fn sealed_with_ca(cert: &str, ca_key: &str, now: Timestamp) -> BTreeMap<String, Vec<u8>> {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now).unwrap();
    let mut set: Vec<(PkiEntry, Vec<u8>)> = files
        .iter()
        .map(|f| {
            let entry = PkiEntry::from_data_key(&f.rel_path.replace('/', "-")).unwrap();
            (entry, f.contents().to_vec())
        })
        .collect();
    for (entry, contents) in &mut set {
        match entry {
            PkiEntry::CaCert if !cert.is_empty() => *contents = cert.as_bytes().to_vec(),
            PkiEntry::CaKey if !ca_key.is_empty() => *contents = ca_key.as_bytes().to_vec(),
            _ => {}
        }
    }
    let borrowed: Vec<(PkiEntry, &[u8])> = set.iter().map(|(e, c)| (*e, c.as_slice())).collect();
    seal_secret_data(&key(), EtcdMode::Local, &borrowed).unwrap()
}

#[test]
fn a_download_of_a_non_ca_certificate_with_its_key_is_refused_as_unusable() {
    // Consistent (the key matches), so the older checks let it through.
    let not_ca = ca(|p| p.is_ca = IsCa::ExplicitNoCa);
    let data = sealed_with_ca(&not_ca.cert_pem, &not_ca.key_pem, now());
    assert!(open_all_with(&key(), &data, Provenance::KubeflavorOnly).is_ok());
    let err = open_for_use(&key(), &data, Provenance::KubeflavorOnly, now()).unwrap_err();
    assert_eq!(
        err,
        CopyCertsError::Unusable {
            entry: PkiEntry::CaCert,
            reason: Unusable::NotCa
        }
    );
    let text = err.to_string();
    assert!(
        text.starts_with(
            "entry ca.crt cannot serve as the cluster CA certificate: it is not a CA certificate"
        ),
        "{text}"
    );
}

#[test]
fn a_download_of_an_expired_set_is_refused_and_a_fresh_one_is_not() {
    let eleven_years_ago = now() - SignedDuration::from_hours(24 * 365 * 11);
    let data = sealed_with_ca("", "", eleven_years_ago);
    assert!(matches!(
        open_for_use(&key(), &data, Provenance::KubeflavorOnly, now()),
        Err(CopyCertsError::Unusable {
            reason: Unusable::Expired(_),
            ..
        })
    ));
    let fresh = sealed_with_ca("", "", now());
    assert!(open_for_use(&key(), &fresh, Provenance::KubeflavorOnly, now()).is_ok());
}

#[test]
fn a_download_with_a_key_carrying_an_extra_block_is_refused() {
    let real = ca(|_| {});
    let trailing = format!("{}{}", real.key_pem, ca(|_| {}).cert_pem);
    let data = sealed_with_ca(&real.cert_pem, &trailing, now());
    assert_eq!(
        open_for_use(&key(), &data, Provenance::KubeflavorOnly, now()).unwrap_err(),
        CopyCertsError::Unusable {
            entry: PkiEntry::CaKey,
            reason: Unusable::ExtraBlock("CERTIFICATE".into())
        }
    );
}
