use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::authz::testutil::{MemReader, token_secret, user};

const NOW: &str = "2026-11-30T04:26:05Z";
const SECRET: &str = "0123456789abcdef";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn reader_with(id: &str, namespace: &str, type_: &str, data: &[(&str, &str)]) -> MemReader {
    MemReader::new().with(
        "",
        "secrets",
        token_secret(&format!("bootstrap-token-{id}"), namespace, type_, data),
    )
}

fn valid_token(id: &str, extra: &[(&str, &str)]) -> MemReader {
    let mut data = vec![
        ("token-id", id),
        ("token-secret", SECRET),
        ("usage-bootstrap-authentication", "true"),
    ];
    data.extend_from_slice(extra);
    reader_with(id, "kube-system", TOKEN_SECRET_TYPE, &data)
}

fn auth_token(reader: &MemReader, token: &str) -> Result<UserInfo, ApiError> {
    authenticate(None, Some(token), &BTreeMap::new(), reader, now())
}

fn assert_unauthorized(result: Result<UserInfo, ApiError>) {
    let err = result.expect_err("the credential must be rejected");
    assert_eq!(err, unauthorized());
    assert_eq!(
        (err.code, err.reason.as_deref(), err.message.as_str()),
        (401, Some("Unauthorized"), "Unauthorized")
    );
}

#[test]
fn bootstrap_groups_are_sorted_and_deduplicated() {
    let reader = valid_token(
        "73efe1",
        &[
            ("expiration", "2026-11-30T05:25:53Z"),
            (
                "auth-extra-groups",
                "system:bootstrappers:zeta,system:bootstrappers:alpha,system:bootstrappers:zeta",
            ),
        ],
    );
    let user = auth_token(&reader, &format!("73efe1.{SECRET}")).unwrap();
    assert_eq!(user.kind, IdentityKind::BootstrapToken);
    assert_eq!(user.name, "system:bootstrap:73efe1");
    assert_eq!(
        user.groups,
        [
            "system:bootstrappers",
            "system:bootstrappers:alpha",
            "system:bootstrappers:zeta",
            "system:authenticated"
        ]
    );
    assert!(
        user.uid.is_empty() && user.extra.is_empty(),
        "token identities carry no uid or extra"
    );
}

#[test]
fn bootstrap_token_without_expiration_or_groups_authenticates() {
    let user = auth_token(&valid_token("6ibto6", &[]), &format!("6ibto6.{SECRET}")).unwrap();
    assert_eq!(
        user.groups,
        ["system:bootstrappers", "system:authenticated"]
    );
}

#[test]
fn one_bad_extra_group_rejects_the_token() {
    let reader = valid_token(
        "sdo2oc",
        &[(
            "auth-extra-groups",
            "system:bootstrappers:ok,system:masters",
        )],
    );
    assert_unauthorized(auth_token(&reader, &format!("sdo2oc.{SECRET}")));
}

#[test]
fn missing_or_wrong_authentication_usage_is_rejected() {
    let missing = reader_with(
        "z2xwa9",
        "kube-system",
        TOKEN_SECRET_TYPE,
        &[
            ("token-id", "z2xwa9"),
            ("token-secret", SECRET),
            ("usage-bootstrap-signing", "true"),
        ],
    );
    assert_unauthorized(auth_token(&missing, &format!("z2xwa9.{SECRET}")));
    let yes = reader_with(
        "sad7mk",
        "kube-system",
        TOKEN_SECRET_TYPE,
        &[
            ("token-id", "sad7mk"),
            ("token-secret", SECRET),
            ("usage-bootstrap-authentication", "yes"),
        ],
    );
    assert_unauthorized(auth_token(&yes, &format!("sad7mk.{SECRET}")));
}

#[test]
fn expired_and_unparsable_expirations_are_rejected() {
    for expiration in ["2000-01-01T00:00:00Z", "2030-01-01 00:00:00", NOW] {
        let reader = valid_token("76jyn4", &[("expiration", expiration)]);
        assert_unauthorized(auth_token(&reader, &format!("76jyn4.{SECRET}")));
    }
    let later = valid_token("76jyn4", &[("expiration", "2026-11-30T04:26:06Z")]);
    assert!(
        auth_token(&later, &format!("76jyn4.{SECRET}")).is_ok(),
        "one second before expiry still works"
    );
}

#[test]
fn wrong_type_namespace_or_token_id_is_rejected() {
    let data = [
        ("token-id", "28gsoi"),
        ("token-secret", SECRET),
        ("usage-bootstrap-authentication", "true"),
    ];
    assert_unauthorized(auth_token(
        &reader_with("28gsoi", "kube-system", "Opaque", &data),
        &format!("28gsoi.{SECRET}"),
    ));
    assert_unauthorized(auth_token(
        &reader_with("28gsoi", "default", TOKEN_SECRET_TYPE, &data),
        &format!("28gsoi.{SECRET}"),
    ));
    let other_id = [
        ("token-id", "x5hp34"),
        ("token-secret", SECRET),
        ("usage-bootstrap-authentication", "true"),
    ];
    assert_unauthorized(auth_token(
        &reader_with("p1p0v9", "kube-system", TOKEN_SECRET_TYPE, &other_id),
        &format!("p1p0v9.{SECRET}"),
    ));
}

#[test]
fn wrong_secret_unknown_id_garbage_and_deleted_are_the_same_401() {
    let reader = valid_token("abcdef", &[]);
    assert!(auth_token(&reader, &format!("abcdef.{SECRET}")).is_ok());
    assert_unauthorized(auth_token(&reader, "abcdef.0123456789abcdeX"));
    assert_unauthorized(auth_token(&reader, "abcdef.aaaaaaaaaaaaaaaa"));
    assert_unauthorized(auth_token(&reader, &format!("zzzzzz.{SECRET}")));
    assert_unauthorized(auth_token(&reader, "not-a-token"));
    assert_unauthorized(auth_token(&MemReader::new(), &format!("abcdef.{SECRET}")));

    let mut deleting = token_secret(
        "bootstrap-token-abcdef",
        "kube-system",
        TOKEN_SECRET_TYPE,
        &[
            ("token-id", "abcdef"),
            ("token-secret", SECRET),
            ("usage-bootstrap-authentication", "true"),
        ],
    );
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-30T04:00:00Z");
    assert_unauthorized(auth_token(
        &MemReader::new().with("", "secrets", deleting),
        &format!("abcdef.{SECRET}"),
    ));
}

#[test]
fn string_data_is_read_when_not_merged() {
    let secret = json!({
        "metadata": {"name": "bootstrap-token-5ndnfh", "namespace": "kube-system"},
        "type": TOKEN_SECRET_TYPE,
        "stringData": {"token-id": "5ndnfh", "token-secret": SECRET, "usage-bootstrap-authentication": "true"},
    });
    let reader = MemReader::new().with("", "secrets", secret);
    assert_eq!(
        auth_token(&reader, &format!("5ndnfh.{SECRET}"))
            .unwrap()
            .name,
        "system:bootstrap:5ndnfh"
    );
}

#[test]
fn no_credentials_or_an_empty_bearer_is_anonymous() {
    let reader = MemReader::new();
    for bearer in [None, Some("")] {
        let user = authenticate(None, bearer, &BTreeMap::new(), &reader, now()).unwrap();
        assert_eq!(user, UserInfo::anonymous());
        assert_eq!(user.groups, ["system:unauthenticated"]);
    }
}

#[test]
fn static_tokens_authenticate_and_gain_the_authenticated_group() {
    let tokens = BTreeMap::from([(
        "s3cret-static".to_string(),
        user(IdentityKind::StaticToken, "alice", &["devs"]),
    )]);
    let alice = authenticate(
        None,
        Some("s3cret-static"),
        &tokens,
        &MemReader::new(),
        now(),
    )
    .unwrap();
    assert_eq!(
        (alice.name.as_str(), alice.kind),
        ("alice", IdentityKind::StaticToken)
    );
    assert_eq!(alice.groups, ["devs", "system:authenticated"]);
    assert_unauthorized(authenticate(
        None,
        Some("s3cret-statiX"),
        &tokens,
        &MemReader::new(),
        now(),
    ));
}

fn client_cert(cn: Option<&str>, orgs: &[&str]) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    for org in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *org);
    }
    if let Some(cn) = cn {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

#[test]
fn client_certificate_user_is_cn_groups_are_o_with_credential_id() {
    let der = client_cert(Some("system:node:worker-1"), &["system:nodes"]);
    let user = authenticate(Some(&der), None, &BTreeMap::new(), &MemReader::new(), now()).unwrap();
    assert_eq!(user.kind, IdentityKind::ClientCert);
    assert_eq!(user.name, "system:node:worker-1");
    assert_eq!(user.groups, ["system:nodes", "system:authenticated"]);
    let fingerprint = hex::encode(Sha256::digest(&der));
    assert_eq!(fingerprint.len(), 64);
    assert_eq!(
        user.extra[CREDENTIAL_ID_KEY],
        [format!("X509SHA256={fingerprint}")]
    );
}

#[test]
fn certificate_wins_over_a_bearer_token_and_one_without_cn_falls_through() {
    let reader = valid_token("abcdef", &[]);
    let admin = client_cert(Some("kubernetes-admin"), &["system:masters"]);
    let user = authenticate(
        Some(&admin),
        Some("garbage"),
        &BTreeMap::new(),
        &reader,
        now(),
    )
    .unwrap();
    assert_eq!(user.name, "kubernetes-admin");

    let nameless = client_cert(None, &["system:masters"]);
    let user = authenticate(
        Some(&nameless),
        Some(&format!("abcdef.{SECRET}")),
        &BTreeMap::new(),
        &reader,
        now(),
    );
    assert_eq!(user.unwrap().name, "system:bootstrap:abcdef");
    let anonymous = authenticate(Some(&nameless), None, &BTreeMap::new(), &reader, now()).unwrap();
    assert_eq!(anonymous, UserInfo::anonymous());
}

/// kube-apiserver verifies a client certificate on every request, not only when the
/// connection is opened: one that expired while its connection stayed open (or is not yet
/// valid) authenticates nothing. A bearer token can still authenticate the request, but
/// without one it is a 401, never `system:anonymous`.
#[test]
fn a_certificate_outside_its_validity_fails_and_is_never_anonymous() {
    let reader = valid_token("abcdef", &[]);
    let cert_valid = |not_before: (i32, u8, u8), not_after: (i32, u8, u8)| {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:worker-1");
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    };
    // NOW is 2026-11-30.
    let current = cert_valid((2026, 11, 1), (2026, 12, 31));
    let expired = cert_valid((2026, 10, 1), (2026, 11, 29));
    let not_yet = cert_valid((2026, 12, 1), (2027, 1, 1));
    let auth = |der: &[u8], bearer: Option<&str>| {
        authenticate(Some(der), bearer, &BTreeMap::new(), &reader, now())
    };
    assert_eq!(auth(&current, None).unwrap().name, "system:node:worker-1");
    for der in [&expired, &not_yet] {
        assert_unauthorized(auth(der, None));
        assert_unauthorized(auth(der, Some("garbage")));
        let token = format!("abcdef.{SECRET}");
        assert_eq!(
            auth(der, Some(&token)).unwrap().name,
            "system:bootstrap:abcdef"
        );
    }
}

#[test]
fn bootstrap_group_pattern_matches_upstream() {
    let long_ok = format!("system:bootstrappers:{}a", "b".repeat(255));
    let too_long = format!("system:bootstrappers:{}a", "b".repeat(256));
    for ok in [
        "system:bootstrappers:a",
        "system:bootstrappers:kubeadm:default-node-token",
        long_ok.as_str(),
    ] {
        assert!(is_valid_bootstrap_group(ok), "{ok}");
    }
    for bad in [
        "system:bootstrappers",
        "system:bootstrappers:",
        "system:bootstrappers:x-",
        "system:bootstrappers:X",
        "system:masters",
        "system:bootstrappers:a b",
        too_long.as_str(),
    ] {
        assert!(!is_valid_bootstrap_group(bad), "{bad}");
    }
}

#[test]
fn rfc3339_parsing_is_as_strict_as_go() {
    assert_eq!(
        parse_rfc3339("2026-12-01T12:00:00Z"),
        Some("2026-12-01T12:00:00Z".parse().unwrap())
    );
    assert_eq!(
        parse_rfc3339("2026-12-01T13:00:00+01:00"),
        Some("2026-12-01T12:00:00Z".parse().unwrap())
    );
    assert!(parse_rfc3339("2026-12-01T12:00:00.5Z").is_some());
    for bad in [
        "2030-01-01 00:00:00",
        "2030-01-01T00:00:00",
        "2030-01-01 00:00:00Z",
        "2030-01-01T00:00:00.Z",
        "tomorrow",
        "",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}

#[test]
fn bootstrap_token_shape() {
    assert_eq!(
        parse_bootstrap_token("abcdef.0123456789abcdef"),
        Some(("abcdef", "0123456789abcdef"))
    );
    for bad in [
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcde",
        "abcdef0123456789abcdef",
        "abcdef.0123456789abcdef.x",
    ] {
        assert_eq!(parse_bootstrap_token(bad), None, "{bad}");
    }
}

#[test]
fn token_review_audiences_and_errors() {
    let reader = valid_token("abcdef", &[]);
    let tokens = TokenAuthenticators {
        static_tokens: &BTreeMap::new(),
        token_secrets: &reader,
        service_accounts: None,
        store: &reader,
    };
    let api = [API_AUDIENCE.to_string()];
    let (user, audiences) =
        authenticate_token(&format!("abcdef.{SECRET}"), &tokens, &api, now()).unwrap();
    assert_eq!(user.name, "system:bootstrap:abcdef");
    assert_eq!(audiences, api);
    // Bootstrap (and static) tokens are audience-agnostic: good for the API audience only.
    let elsewhere = ["https://elsewhere".to_string()];
    assert_eq!(
        authenticate_token(&format!("abcdef.{SECRET}"), &tokens, &elsewhere, now()),
        Err(INVALID_BEARER_TOKEN.to_string())
    );
    // A string no token authenticator recognizes is `invalid bearer token`, as TokenReview
    // reports it.
    assert_eq!(
        authenticate_token("not-a-real-token", &tokens, &api, now()),
        Err("invalid bearer token".to_string())
    );
}
