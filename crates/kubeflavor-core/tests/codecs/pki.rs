//! The shared CA set kubeflavor generates, and reading / matching keys in every PEM form.

use jiff::{SignedDuration, Timestamp};
use kubeflavor_core::crypto::keys::{
    CertificateSummary, KeyError, PemKind, PrivateKey, PrivateKeyForm, PublicKey, classify_pem,
    parse_certificates_pem, tls_certificate_chain, tls_private_key,
};
use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::crypto::pki::{
    KeyAlgorithm, PkiError, PkiFile, generate_shared_ca_set, generate_shared_ca_set_with,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::FromDer;

fn file<'a>(files: &'a [PkiFile], rel_path: &str) -> &'a PkiFile {
    files
        .iter()
        .find(|f| f.rel_path == rel_path)
        .unwrap_or_else(|| panic!("{rel_path} missing"))
}

fn cert_der(files: &[PkiFile], rel_path: &str) -> Vec<u8> {
    parse_certificates_pem(file(files, rel_path).contents())
        .unwrap()
        .remove(0)
}

fn now() -> Timestamp {
    "2026-11-30T05:00:00Z".parse().unwrap()
}

fn check_set(algorithm: KeyAlgorithm, key_label: &str, form: PrivateKeyForm) {
    let files = generate_shared_ca_set(algorithm, now()).unwrap();
    let mut names: Vec<(&str, u32)> = files
        .iter()
        .map(|f| (f.rel_path.as_str(), f.mode))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("ca.crt", 0o644),
            ("ca.key", 0o600),
            ("etcd/ca.crt", 0o644),
            ("etcd/ca.key", 0o600),
            ("front-proxy-ca.crt", 0o644),
            ("front-proxy-ca.key", 0o600),
            ("sa.key", 0o600),
            ("sa.pub", 0o644)
        ]
    );
    for (base, cn) in [
        ("ca", "kubernetes"),
        ("front-proxy-ca", "front-proxy-ca"),
        ("etcd/ca", "etcd-ca"),
    ] {
        let der = cert_der(&files, &format!("{base}.crt"));
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let cns: Vec<&str> = cert
            .subject()
            .iter_common_name()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(cns, [cn]);
        assert_eq!(cert.subject(), cert.issuer());
        cert.verify_signature(None).expect("self-signed");
        assert!(cert.is_ca());
        let ku = cert.key_usage().unwrap().unwrap().value;
        assert!(ku.key_cert_sign() && ku.digital_signature() && ku.key_encipherment());
        let nb = cert.validity().not_before.timestamp();
        let na = cert.validity().not_after.timestamp();
        assert_eq!(nb, (now() - SignedDuration::from_mins(5)).as_second());
        assert_eq!(
            na,
            (now() + SignedDuration::from_hours(24 * 3650)).as_second()
        );
        let sans = cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectAlternativeName(san) => {
                    Some(format!("{:?}", san.general_names))
                }
                _ => None,
            });
        assert!(sans.unwrap().contains(cn));
        assert!(!cert.raw_serial().is_empty() && cert.raw_serial()[0] & 0x80 == 0);

        let key_pem = file(&files, &format!("{base}.key")).contents();
        assert!(
            std::str::from_utf8(key_pem)
                .unwrap()
                .starts_with(&format!("-----BEGIN {key_label}-----\n"))
        );
        let key = PrivateKey::from_pem(key_pem).unwrap();
        assert_eq!(key.form(), form);
        assert!(key.matches_certificate(&der).unwrap());
    }
    let sa_key = PrivateKey::from_pem(file(&files, "sa.key").contents()).unwrap();
    let sa_pub_pem = file(&files, "sa.pub").contents();
    assert!(
        std::str::from_utf8(sa_pub_pem)
            .unwrap()
            .starts_with("-----BEGIN PUBLIC KEY-----\n")
    );
    let sa_pub = PublicKey::from_pem(sa_pub_pem).unwrap();
    assert!(sa_key.matches_public_key(&sa_pub));

    // Keys do not match each other's certificates.
    let ca_key = PrivateKey::from_pem(file(&files, "ca.key").contents()).unwrap();
    assert!(
        !ca_key
            .matches_certificate(&cert_der(&files, "front-proxy-ca.crt"))
            .unwrap()
    );
    assert!(!ca_key.matches_public_key(&sa_pub));
    assert!(
        !sa_key
            .matches_certificate(&cert_der(&files, "ca.crt"))
            .unwrap()
    );
}

#[test]
fn rsa_2048_set_has_kubeadm_names_subjects_validity_and_pkcs1_keys() {
    check_set(
        KeyAlgorithm::Rsa2048,
        "RSA PRIVATE KEY",
        PrivateKeyForm::Pkcs1,
    );
    let files = generate_shared_ca_set(KeyAlgorithm::Rsa2048, now()).unwrap();
    let der = cert_der(&files, "ca.crt");
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(cert.public_key().parsed().unwrap().key_size(), 2048);
}

#[test]
fn ecdsa_p256_set_has_kubeadm_names_subjects_validity_and_sec1_keys() {
    check_set(
        KeyAlgorithm::EcdsaP256,
        "EC PRIVATE KEY",
        PrivateKeyForm::Sec1,
    );
}

#[test]
fn sec1_keys_carry_the_curve_as_go_requires() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let pem = std::str::from_utf8(file(&files, "ca.key").contents()).unwrap();
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    use base64::Engine as _;
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    // [0] { OID prime256v1 }: Go's x509.ParseECPrivateKey refuses a SEC1 key without it.
    let curve = [
        0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ];
    assert!(der.windows(curve.len()).any(|w| w == curve));
}

#[test]
fn every_generation_makes_new_keys_and_serials_come_from_the_seam() {
    let a = generate_shared_ca_set_with(KeyAlgorithm::EcdsaP256, now(), |b| b.fill(0x11)).unwrap();
    let b = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    assert_ne!(file(&a, "ca.key").contents(), file(&b, "ca.key").contents());
    let der = cert_der(&a, "ca.crt");
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(cert.raw_serial(), [0x11; 8]);
}

#[test]
fn all_pem_forms_are_read() {
    // PKCS#8, as openssl and rcgen write it, for both key types.
    for alg in [&rcgen::PKCS_RSA_SHA256, &rcgen::PKCS_ECDSA_P256_SHA256] {
        let pair = rcgen::KeyPair::generate_for(alg).unwrap();
        let key = PrivateKey::from_pem(pair.serialize_pem().as_bytes()).unwrap();
        assert_eq!(key.form(), PrivateKeyForm::Pkcs8);
        let public = PublicKey::from_pem(pair.public_key_pem().as_bytes()).unwrap();
        assert!(key.matches_public_key(&public));
        assert_eq!(
            classify_pem(pair.serialize_pem().as_bytes()),
            Ok(PemKind::PrivateKey(PrivateKeyForm::Pkcs8))
        );
    }
    // PKCS#1 and SEC1 come from the generator (checked above); PKIX public keys from sa.pub.
    let files = generate_shared_ca_set(KeyAlgorithm::Rsa2048, now()).unwrap();
    assert_eq!(
        classify_pem(file(&files, "sa.pub").contents()),
        Ok(PemKind::PublicKey)
    );
    assert_eq!(
        classify_pem(file(&files, "ca.crt").contents()),
        Ok(PemKind::Certificate)
    );
    assert_eq!(
        classify_pem(file(&files, "ca.key").contents()),
        Ok(PemKind::PrivateKey(PrivateKeyForm::Pkcs1))
    );
}

#[test]
fn an_ec_parameters_block_before_the_key_is_skipped() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let params = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n";
    let text = format!(
        "{params}{}",
        std::str::from_utf8(file(&files, "ca.key").contents()).unwrap()
    );
    let key = PrivateKey::from_pem(text.as_bytes()).unwrap();
    assert!(
        key.matches_certificate(&cert_der(&files, "ca.crt"))
            .unwrap()
    );
}

#[test]
fn wrong_material_is_refused_with_what_was_found() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let err = PrivateKey::from_pem(file(&files, "ca.crt").contents()).unwrap_err();
    assert!(
        matches!(&err, KeyError::UnexpectedBlock { found, .. } if found == "CERTIFICATE"),
        "{err:?}"
    );
    assert!(matches!(
        PublicKey::from_pem(file(&files, "ca.key").contents()),
        Err(KeyError::UnexpectedBlock { .. })
    ));
    assert!(matches!(
        parse_certificates_pem(file(&files, "sa.pub").contents()),
        Err(KeyError::UnexpectedBlock { .. })
    ));
    let garbage = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
    assert_eq!(
        PrivateKey::from_pem(garbage.as_bytes()),
        Err(KeyError::InvalidPrivateKey)
    );
    let bad_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        parse_certificates_pem(bad_cert.as_bytes()),
        Err(KeyError::InvalidCertificate { index: 0, .. })
    ));
}

#[test]
fn serving_files_are_read_as_go_tls_reads_them() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let text = |name: &str| String::from_utf8(file(&files, name).contents().to_vec()).unwrap();
    let (crt, key) = (text("ca.crt"), text("ca.key"));
    // Other blocks in a certificate file are skipped, and so are blocks before the key.
    let chain = tls_certificate_chain(format!("{crt}{key}{crt}").as_bytes()).unwrap();
    assert_eq!(
        chain,
        [cert_der(&files, "ca.crt"), cert_der(&files, "ca.crt")]
    );
    let (form, der) = tls_private_key(format!("{crt}{key}").as_bytes()).unwrap();
    assert_eq!(form, PrivateKeyForm::Sec1);
    assert_eq!(
        PrivateKey::from_pem(key.as_bytes()).unwrap(),
        PrivateKey::from_pem(
            kubeflavor_core::crypto::keys::encode_pem("EC PRIVATE KEY", &der).as_bytes()
        )
        .unwrap()
    );
    assert!(matches!(
        tls_private_key(crt.as_bytes()),
        Err(KeyError::UnexpectedBlock { found, .. }) if found == "CERTIFICATE"
    ));
}

#[test]
fn debug_of_files_and_keys_shows_no_key_material() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let key_file = file(&files, "ca.key");
    let shown = format!(
        "{key_file:?} {:?}",
        PrivateKey::from_pem(key_file.contents()).unwrap()
    );
    let body: String = std::str::from_utf8(key_file.contents())
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .into();
    assert!(!shown.contains(&body[..16]), "{shown}");
    assert!(shown.contains("ca.key") && shown.contains("600"), "{shown}");
}

#[test]
fn the_pin_of_a_generated_ca_is_its_public_key_hash() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let der = cert_der(&files, "ca.crt");
    let key = PrivateKey::from_pem(file(&files, "ca.key").contents()).unwrap();
    assert_eq!(
        CaPin::from_cert_der(&der).unwrap(),
        CaPin::from_spki_der(key.public_key().spki_der())
    );
}

#[test]
fn certificate_summaries_show_subject_validity_and_pin() {
    let files = generate_shared_ca_set(KeyAlgorithm::EcdsaP256, now()).unwrap();
    let der = cert_der(&files, "front-proxy-ca.crt");
    let summary = CertificateSummary::from_der(&der).unwrap();
    assert_eq!(summary.subject, "CN=front-proxy-ca");
    assert_eq!(summary.issuer, summary.subject);
    assert!(summary.is_ca);
    assert_eq!(summary.not_before, now() - SignedDuration::from_mins(5));
    assert_eq!(
        summary.not_after,
        now() + SignedDuration::from_hours(24 * 3650)
    );
    assert_eq!(summary.pin, CaPin::from_cert_der(&der).unwrap());
    assert!(CertificateSummary::from_der(b"junk").is_err());
}

#[test]
fn key_types_parse_from_the_cli_spelling() {
    assert_eq!(
        "rsa-2048".parse::<KeyAlgorithm>().unwrap(),
        KeyAlgorithm::Rsa2048
    );
    assert_eq!(
        "ECDSA-P256".parse::<KeyAlgorithm>().unwrap(),
        KeyAlgorithm::EcdsaP256
    );
    let err = "ed25519".parse::<KeyAlgorithm>().unwrap_err();
    assert!(matches!(err, PkiError::UnknownKeyType(_)));
    assert!(err.to_string().contains("rsa-2048 or ecdsa-p256"));
}
