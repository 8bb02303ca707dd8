use serde_json::json;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;
use crate::authz::testutil::token_secret;

const NOW: &str = "2026-11-30T04:15:02Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

#[test]
fn detached_jws_matches_the_upstream_vectors() {
    let content = "Hello from the other side. I must have called a thousand times.";
    assert_eq!(
        detached_jws(content, "joshua", "my voice is my passcode"),
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
    );
    assert_eq!(
        detached_jws("", "joshua", "my voice is my passcode"),
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk"
    );
    assert_eq!(
        detached_jws(content, "joshua", ""),
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8"
    );
}

fn token(id: &str, extra: &[(&str, &str)]) -> Value {
    let mut data = vec![("token-id", id), ("token-secret", "0123456789abcdef")];
    data.extend_from_slice(extra);
    token_secret(
        &format!("bootstrap-token-{id}"),
        "kube-system",
        TOKEN_SECRET_TYPE,
        &data,
    )
}

#[test]
fn cluster_info_is_signed_for_each_valid_signing_token_only() {
    let kubeconfig = "apiVersion: v1\nkind: Config\n";
    let signing = [("usage-bootstrap-signing", "true")];
    let secrets = vec![
        token("abcdef", &signing),
        token(
            "future",
            &[
                ("usage-bootstrap-signing", "true"),
                ("expiration", "2026-12-01T00:00:00Z"),
            ],
        ),
        token("nosign", &[("usage-bootstrap-authentication", "true")]),
        token("yesyes", &[("usage-bootstrap-signing", "yes")]),
        token(
            "expird",
            &[
                ("usage-bootstrap-signing", "true"),
                ("expiration", "2000-01-01T00:00:00Z"),
            ],
        ),
        token(
            "garbld",
            &[("usage-bootstrap-signing", "true"), ("expiration", "soon")],
        ),
        token_secret(
            "bootstrap-token-opaque",
            "kube-system",
            "Opaque",
            &[
                ("token-id", "opaque"),
                ("token-secret", "x"),
                ("usage-bootstrap-signing", "true"),
            ],
        ),
        token_secret(
            "bootstrap-token-other1",
            "default",
            TOKEN_SECRET_TYPE,
            &[
                ("token-id", "other1"),
                ("token-secret", "x"),
                ("usage-bootstrap-signing", "true"),
            ],
        ),
        token_secret(
            "bootstrap-token-mismat",
            "kube-system",
            TOKEN_SECRET_TYPE,
            &[
                ("token-id", "x5hp34"),
                ("token-secret", "x"),
                ("usage-bootstrap-signing", "true"),
            ],
        ),
    ];
    let signatures = cluster_info_signatures(kubeconfig, &secrets, now());
    let keys: Vec<&str> = signatures.keys().map(String::as_str).collect();
    assert_eq!(keys, ["jws-kubeconfig-abcdef", "jws-kubeconfig-future"]);
    let jws = &signatures["jws-kubeconfig-abcdef"];
    assert!(
        jws.starts_with("eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9.."),
        "header is {{\"alg\":\"HS256\",\"kid\":\"abcdef\"}}: {jws}"
    );
    assert_eq!(jws, &detached_jws(kubeconfig, "abcdef", "0123456789abcdef"));
    assert_ne!(
        jws,
        &detached_jws(
            "apiVersion: v1\nkind: Config\n# changed\n",
            "abcdef",
            "0123456789abcdef"
        )
    );
}

#[test]
fn expired_tokens_are_listed_and_the_next_expiry_is_reported() {
    let secrets = vec![
        token("passed", &[("expiration", "2000-01-01T00:00:00Z")]),
        token("atnow1", &[("expiration", NOW)]),
        token("garbld", &[("expiration", "2030-01-01 00:00:00")]),
        token("later1", &[("expiration", "2026-11-30T05:00:00Z")]),
        token("sooner", &[("expiration", "2026-11-30T04:15:14Z")]),
        token("forevr", &[]),
        token_secret(
            "not-a-token",
            "kube-system",
            "Opaque",
            &[("expiration", "2000-01-01T00:00:00Z")],
        ),
    ];
    let (expired, next) = expired_tokens(&secrets, now());
    assert_eq!(
        expired,
        [
            "bootstrap-token-passed",
            "bootstrap-token-atnow1",
            "bootstrap-token-garbld"
        ]
    );
    assert_eq!(next, Some("2026-11-30T04:15:14Z".parse().unwrap()));
    assert_eq!(
        expired_tokens(&[token("forevr", &[])], now()),
        (vec![], None)
    );
}

struct Ca {
    cert_pem: String,
    key_pem: String,
}

fn make_ca(not_after: Option<(i32, u8, u8)>) -> Ca {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    let (y, m, d) = not_after.unwrap_or((2036, 1, 1));
    params.not_after = rcgen::date_time_ymd(y, m, d);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn kubelet_request(orgs: &[&str], cn: &str, sans: &[&str]) -> String {
    let mut params =
        rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    for org in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *org);
    }
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    STANDARD.encode(params.serialize_request(&key).unwrap().pem().unwrap())
}

fn csr(request: &str, usages: &[&str], conditions: Value) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "csr-worker-1"},
        "spec": {"request": request, "signerName": KUBELET_CLIENT_SIGNER, "usages": usages,
                 "username": "system:bootstrap:abcdef"},
        "status": {"conditions": conditions},
    })
}

fn approved() -> Value {
    json!([{"type": "Approved", "status": "True", "reason": "R", "message": "m"}])
}

fn sign(ca: &Ca, csr: &Value) -> Option<Result<String, String>> {
    sign_csr(
        &SigningCa {
            cert_pem: &ca.cert_pem,
            key_pem: &ca.key_pem,
        },
        csr,
        now(),
    )
}

fn parse_pem_cert(pem: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .unwrap()
        .1
        .contents
}

#[test]
fn approved_kubelet_csr_is_issued_like_kcm_does() {
    let ca = make_ca(None);
    let request = kubelet_request(&["system:nodes"], "system:node:worker-1", &[]);
    let pem = sign(
        &ca,
        &csr(&request, &["digital signature", "client auth"], approved()),
    )
    .unwrap()
    .unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let der = parse_pem_cert(&pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(
        cert.subject().to_string(),
        "O=system:nodes, CN=system:node:worker-1"
    );
    assert_eq!(cert.issuer().to_string(), "CN=kubernetes");
    assert_eq!(
        cert.validity().not_before.timestamp(),
        now().as_second() - 300,
        "backdated 5 minutes"
    );
    assert_eq!(
        cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp(),
        8760 * 3600,
        "kcm's default one year, counted from the backdated notBefore"
    );
    let ku = cert.key_usage().unwrap().unwrap();
    assert!(ku.critical && ku.value.digital_signature() && !ku.value.key_encipherment());
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(
        bc.critical && !bc.value.ca,
        "Basic Constraints: critical, CA:FALSE"
    );
    assert!(cert.subject_alternative_name().unwrap().is_none());
    assert!(cert.tbs_certificate.serial.bits() > 0);

    let ca_der = parse_pem_cert(&ca.cert_pem);
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
    cert.verify_signature(Some(ca_cert.public_key()))
        .expect("signed by the cluster CA");
    let request_der = request_der(&json!({"request": request})).unwrap();
    let (_, req) = X509CertificationRequest::from_der(&request_der).unwrap();
    assert_eq!(
        cert.public_key().raw,
        req.certification_request_info.subject_pki.raw,
        "the requester's key"
    );
}

#[test]
fn key_encipherment_usage_is_carried_into_the_certificate() {
    let ca = make_ca(None);
    let request = kubelet_request(&["system:nodes"], "system:node:worker-1", &[]);
    let usages = ["digital signature", "key encipherment", "client auth"];
    let pem = sign(&ca, &csr(&request, &usages, approved()))
        .unwrap()
        .unwrap();
    let der = parse_pem_cert(&pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert!(cert.key_usage().unwrap().unwrap().value.key_encipherment());
}

#[test]
fn expiration_seconds_shortens_but_never_lengthens_and_the_ca_caps() {
    let ca = make_ca(None);
    let request = kubelet_request(&["system:nodes"], "system:node:worker-1", &[]);
    let lifetime = |csr: Value, ca: &Ca| {
        let der = parse_pem_cert(&sign(ca, &csr).unwrap().unwrap());
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        (
            cert.validity().not_before.timestamp(),
            cert.validity().not_after.timestamp(),
        )
    };
    let with_expiry = |seconds: i64| {
        let mut c = csr(&request, &["digital signature", "client auth"], approved());
        c["spec"]["expirationSeconds"] = json!(seconds);
        c
    };
    let t = now().as_second();
    assert_eq!(
        lifetime(with_expiry(3600), &ca),
        (t - 300, t + 3600),
        "short lifetimes start counting at now"
    );
    assert_eq!(
        lifetime(with_expiry(60), &ca),
        (t - 300, t + 600),
        "at least 10 minutes"
    );
    assert_eq!(
        lifetime(with_expiry(86400), &ca),
        (t - 300, t - 300 + 86400)
    );
    assert_eq!(
        lifetime(with_expiry(5 * 365 * 86400), &ca),
        (t - 300, t - 300 + 8760 * 3600)
    );
    let short_ca = make_ca(Some((2027, 1, 1)));
    let ca_end = "2027-01-01T00:00:00Z"
        .parse::<Timestamp>()
        .unwrap()
        .as_second();
    assert_eq!(
        lifetime(
            csr(&request, &["digital signature", "client auth"], approved()),
            &short_ca
        )
        .1,
        ca_end
    );
}

#[test]
fn nothing_to_sign_unless_approved_and_unissued_for_the_kubelet_signer() {
    let ca = make_ca(None);
    let request = kubelet_request(&["system:nodes"], "system:node:worker-1", &[]);
    let usages = ["digital signature", "client auth"];
    assert!(
        sign(&ca, &csr(&request, &usages, json!([]))).is_none(),
        "pending"
    );
    let denied = json!([{"type": "Denied", "status": "True"}]);
    assert!(
        sign(&ca, &csr(&request, &usages, denied)).is_none(),
        "denied"
    );
    let failed =
        json!([{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}]);
    assert!(
        sign(&ca, &csr(&request, &usages, failed)).is_none(),
        "failed before"
    );
    let mut issued = csr(&request, &usages, approved());
    issued["status"]["certificate"] = json!("LS0tLS1CRUdJTi4uLg==");
    assert!(sign(&ca, &issued).is_none(), "already issued");
    let mut other = csr(&request, &usages, approved());
    other["spec"]["signerName"] = json!("kubernetes.io/kube-apiserver-client");
    assert!(sign(&ca, &other).is_none(), "another signer");
}

#[test]
fn invalid_kubelet_client_requests_fail_with_upstream_messages() {
    let ca = make_ca(None);
    let usages = ["digital signature", "client auth"];
    let fail = |request: String, usages: &[&str]| {
        sign(&ca, &csr(&request, usages, approved()))
            .unwrap()
            .unwrap_err()
    };
    assert_eq!(
        fail(
            kubelet_request(&["system:masters"], "system:node:worker-1", &[]),
            &usages
        ),
        "subject organization is not system:nodes"
    );
    assert_eq!(
        fail(
            kubelet_request(&["system:nodes", "extra"], "system:node:worker-1", &[]),
            &usages
        ),
        "subject organization is not system:nodes"
    );
    assert_eq!(
        fail(kubelet_request(&["system:nodes"], "worker-1", &[]), &usages),
        "subject common name does not begin with system:node:"
    );
    assert_eq!(
        fail(
            kubelet_request(
                &["system:nodes"],
                "system:node:worker-1",
                &["worker-1.example.com"]
            ),
            &usages
        ),
        "DNS subjectAltNames are not allowed"
    );
    assert_eq!(
        fail(
            kubelet_request(&["system:nodes"], "system:node:worker-1", &["10.0.0.1"]),
            &usages
        ),
        "IP subjectAltNames are not allowed"
    );
    assert_eq!(
        fail(
            kubelet_request(&["system:nodes"], "system:node:worker-1", &[]),
            &["digital signature", "server auth"]
        ),
        "usages did not match [client auth digital signature key encipherment]"
    );
    let garbage = STANDARD.encode("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    assert!(fail(garbage, &usages).starts_with("unable to parse csr \"csr-worker-1\""));
}

/// A pending kubelet client CSR for `cn`, filed by `username` in `groups`.
fn filed_by(cn: &str, username: &str, groups: &[&str]) -> Value {
    let request = kubelet_request(&["system:nodes"], cn, &[]);
    let mut c = csr(&request, &["digital signature", "client auth"], json!(null));
    c["spec"]["username"] = json!(username);
    c["spec"]["groups"] = json!(groups);
    c["status"] = json!({});
    c
}

const KUBEADM_TOKEN: &[&str] = &[
    "system:bootstrappers",
    "system:bootstrappers:kubeadm:default-node-token",
    "system:authenticated",
];
const NODE: &[&str] = &["system:nodes", "system:authenticated"];

#[test]
fn the_approver_recognizes_node_clients_and_asks_rbac_sarapprove() {
    use crate::authz::testutil::MemReader;
    let kubeadm = MemReader::with_defaults();
    // nodeclient: kubeadm binds its token group to it.
    let token_csr = filed_by(
        "system:node:worker-1",
        "system:bootstrap:abcdef",
        KUBEADM_TOKEN,
    );
    assert_eq!(
        auto_approval(&token_csr, &kubeadm),
        Some("Auto approving kubelet client certificate after SubjectAccessReview.")
    );
    // selfnodeclient: a node renewing its own certificate; system:nodes is bound to it.
    let renewal = filed_by("system:node:worker-1", "system:node:worker-1", NODE);
    assert_eq!(
        auto_approval(&renewal, &kubeadm),
        Some("Auto approving self kubelet client certificate after SubjectAccessReview.")
    );
    // A node asking for another node's name is only a nodeclient request, which nodes may
    // not make (NodeRestriction refuses to store it in the first place).
    let other = filed_by("system:node:worker-2", "system:node:worker-1", NODE);
    assert_eq!(auto_approval(&other, &kubeadm), None);
    // A token group bound only to system:node-bootstrapper: not approved.
    let kubeflavor = filed_by(
        "system:node:worker-1",
        "system:bootstrap:ghijkl",
        &[
            "system:bootstrappers",
            "system:bootstrappers:kubeflavor:node",
            "system:authenticated",
        ],
    );
    assert_eq!(auto_approval(&kubeflavor, &kubeadm), None);
    // Without kubeadm's auto-approval bindings nothing is approved.
    let bare = MemReader::new();
    assert_eq!(auto_approval(&token_csr, &bare), None);
    assert_eq!(auto_approval(&renewal, &bare), None);
    // The requester, not the approver, is what the review asks about: system:masters may
    // do anything, so an admin-filed kubelet CSR is approved too.
    let admin = filed_by(
        "system:node:worker-1",
        "kubernetes-admin",
        &["system:masters", "system:authenticated"],
    );
    assert_eq!(
        auto_approval(&admin, &bare),
        Some("Auto approving kubelet client certificate after SubjectAccessReview.")
    );
}

#[test]
fn the_approver_leaves_decided_issued_and_other_csrs_alone() {
    use crate::authz::testutil::MemReader;
    let kubeadm = MemReader::with_defaults();
    let pending = filed_by(
        "system:node:worker-1",
        "system:bootstrap:abcdef",
        KUBEADM_TOKEN,
    );
    for decided in ["Approved", "Denied"] {
        let mut c = pending.clone();
        // `GetCertApprovalCondition` looks at the type only.
        c["status"]["conditions"] =
            json!([{"type": decided, "status": "False", "reason": "R", "message": "m"}]);
        assert_eq!(auto_approval(&c, &kubeadm), None, "{decided}");
    }
    let mut issued = pending.clone();
    issued["status"]["certificate"] = json!("LS0t");
    assert_eq!(auto_approval(&issued, &kubeadm), None);
    let mut serving = pending.clone();
    serving["spec"]["signerName"] = json!("kubernetes.io/kubelet-serving");
    assert_eq!(auto_approval(&serving, &kubeadm), None);
    let mut wrong_usages = pending.clone();
    wrong_usages["spec"]["usages"] = json!(["digital signature", "server auth"]);
    assert_eq!(auto_approval(&wrong_usages, &kubeadm), None);
    let not_nodes = {
        let request = kubelet_request(&["example"], "system:node:worker-1", &[]);
        let mut c = pending.clone();
        c["spec"]["request"] = json!(request);
        c
    };
    assert_eq!(auto_approval(&not_nodes, &kubeadm), None);
    let mut garbage = pending;
    garbage["spec"]["request"] = json!("bm90IGEgQ1NS");
    assert_eq!(auto_approval(&garbage, &kubeadm), None);
}

/// A kubelet serving CSR as the kubelet files it (`serverTLSBootstrap`): subject
/// `system:node:<name>` in `system:nodes`, its host name and addresses as DNS and IP SANs.
fn serving_csr(request: &str, usages: &[&str]) -> Value {
    let mut c = csr(request, usages, approved());
    c["spec"]["signerName"] = json!(KUBELET_SERVING_SIGNER);
    c["spec"]["username"] = json!("system:node:worker-1");
    c
}

#[test]
fn approved_kubelet_serving_csr_is_issued_with_its_names_like_kcm_does() {
    let ca = make_ca(None);
    let request = kubelet_request(
        &["system:nodes"],
        "system:node:worker-1",
        &["worker-1", "10.77.0.5"],
    );
    let pem = sign(
        &ca,
        &serving_csr(&request, &["digital signature", "server auth"]),
    )
    .unwrap()
    .unwrap();
    let der = parse_pem_cert(&pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(
        cert.subject().to_string(),
        "O=system:nodes, CN=system:node:worker-1"
    );
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth);
    let names: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => d.to_string(),
            GeneralName::IPAddress(ip) => format!("{ip:?}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(names, ["worker-1", "[10, 77, 0, 5]"]);

    // ValidateKubeletServingCSR's refusals, in its words.
    for (orgs, cn, sans, usages, message) in [
        (
            &["system:masters"][..],
            "system:node:worker-1",
            &["worker-1"][..],
            &["digital signature", "server auth"][..],
            "subject organization is not system:nodes",
        ),
        (
            &["system:nodes"],
            "system:node:worker-1",
            &[],
            &["digital signature", "server auth"],
            "DNS or IP subjectAltName is required",
        ),
        (
            &["system:nodes"],
            "worker-1",
            &["worker-1"],
            &["digital signature", "server auth"],
            "subject common name does not begin with system:node:",
        ),
        (
            &["system:nodes"],
            "system:node:worker-1",
            &["worker-1"],
            &["digital signature", "client auth"],
            "usages did not match [digital signature key encipherment server auth]",
        ),
    ] {
        let request = kubelet_request(orgs, cn, sans);
        assert_eq!(
            sign(&ca, &serving_csr(&request, usages)),
            Some(Err(message.to_string())),
            "{message}"
        );
    }
    // Each signer keeps to its own rules: a serving request is no client request.
    let mut as_client = serving_csr(&request, &["digital signature", "server auth"]);
    as_client["spec"]["signerName"] = json!(KUBELET_CLIENT_SIGNER);
    assert_eq!(
        sign(&ca, &as_client),
        Some(Err("DNS subjectAltNames are not allowed".to_string()))
    );
}
