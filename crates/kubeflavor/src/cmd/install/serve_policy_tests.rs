//! The token policy `install --serve` ships, evaluated as the API server evaluates it
//! (testkube's ValidatingAdmissionPolicy evaluator, Kubernetes' CEL extensions included)
//! against token Secrets as the API server hands them to CEL: data values in base64,
//! `metadata.creationTimestamp` an RFC 3339 string (measured on v1.36). Each refusal
//! test fails when its rule is removed: what mint writes passes every other rule.

use std::num::NonZeroU32;

use base64::Engine;
use jiff::{SignedDuration, Timestamp};
use kubeflavor_core::admission::token_shape::{self, Ceilings, DEFAULT_CEILINGS};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::{
    Custody, FlavorTokenMeta, ISSUED_BY_ANNOTATION, LIMITS_OVERRIDE_ANNOTATION,
    MAX_NODES_ANNOTATION, REQUESTED_BY_ANNOTATION,
};
use kubeflavor_core::token::secret::{
    KEY_EXPIRATION, TokenSecretData, TokenSecretObject, format_expiration,
};
use serde_json::{Value, json};

use super::{policy_spec, serve_user};

const CREATED: &str = "2026-12-02T06:00:00Z";

fn user() -> String {
    serve_user("kubeflavor")
}

fn policy(ceilings: &Ceilings) -> Value {
    json!({"spec": serde_json::to_value(policy_spec(&user(), ceilings)).unwrap()})
}

fn request(username: &str) -> Value {
    json!({
        "operation": "CREATE",
        "namespace": "kube-system",
        "name": "",
        "userInfo": {"username": username, "groups": ["system:serviceaccounts"]},
    })
}

/// A token Secret exactly as the join-token API mints it, created at [`CREATED`] and
/// expiring `ttl` later, as CEL sees it.
fn minted(ttl: SignedDuration) -> Value {
    let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
    let flavor: FlavorName = "sweet".parse().unwrap();
    let custody = Custody {
        issued_to: Some("acme-corp/alice".parse().unwrap()),
        issued_by: Some(user()),
        requested_by: Some("system:serviceaccount:portal:portal".into()),
        identity: None,
    };
    let meta = FlavorTokenMeta::new(flavor, NonZeroU32::new(3).unwrap()).with_custody(custody);
    let created: Timestamp = CREATED.parse().unwrap();
    let data = TokenSecretData::kubeflavor_node(token, Some(created + ttl));
    let secret = TokenSecretObject::new(&data, Some(&meta));
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let data: serde_json::Map<String, Value> = secret
        .string_data
        .iter()
        .map(|(k, v)| (k.clone(), json!(b64(v))))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret.name,
            "namespace": secret.namespace,
            "creationTimestamp": CREATED,
            "labels": secret.labels,
            "annotations": secret.annotations,
        },
        "type": secret.type_,
        "data": data,
    })
}

fn hour() -> SignedDuration {
    SignedDuration::from_hours(1)
}

fn verdict(ceilings: &Ceilings, secret: &Value) -> Option<String> {
    testkube::validating_policy_verdict(&policy(ceilings), &request(&user()), secret)
}

fn rule_about(ceilings: &Ceilings, start: &str) -> String {
    token_shape::rules(ceilings)
        .into_iter()
        .map(|r| r.message)
        .find(|m| m.starts_with(start))
        .unwrap_or_else(|| panic!("no rule starts with {start:?}"))
}

fn with_expiration(mut secret: Value, written: &str) -> Value {
    secret["data"][KEY_EXPIRATION] =
        json!(base64::engine::general_purpose::STANDARD.encode(written));
    secret
}

fn ttl_rule() -> String {
    rule_about(
        &DEFAULT_CEILINGS,
        &format!("data.{KEY_EXPIRATION} must be at most"),
    )
}

#[test]
fn what_the_api_mints_passes() {
    assert_eq!(verdict(&DEFAULT_CEILINGS, &minted(hour())), None);
}

#[test]
fn an_expiration_past_the_ceiling_is_refused() {
    let far = with_expiration(minted(hour()), "9999-12-30T00:00:00Z");
    assert_eq!(verdict(&DEFAULT_CEILINGS, &far), Some(ttl_rule()));
    // The ceiling is the install's: a week by default, a day when asked.
    let week = SignedDuration::from_hours(7 * 24);
    assert_eq!(verdict(&DEFAULT_CEILINGS, &minted(week)), None);
    let day = Ceilings {
        max_ttl_secs: 24 * 3600,
        ..DEFAULT_CEILINGS
    };
    assert_eq!(
        verdict(&day, &minted(week)),
        Some(rule_about(
            &day,
            &format!("data.{KEY_EXPIRATION} must be at most")
        ))
    );
}

/// The decoded arithmetic counts seconds as jiff does, across month ends, leap days and
/// centuries: the ceiling (plus the 5 minutes for clocks) passes, one second more does not.
#[test]
fn the_ttl_is_counted_to_the_second_across_calendars() {
    let allowance = SignedDuration::from_secs(300);
    for created in [
        "2026-12-02T06:00:00Z",
        "2024-02-28T23:59:59Z",
        "2099-12-31T12:00:00Z",
        "2100-02-27T00:00:01Z",
        "2000-02-29T00:00:00Z",
        "1999-12-31T23:59:59Z",
        "9999-12-01T00:00:00Z",
        "0001-01-01T00:00:00Z",
    ] {
        for max_ttl_secs in [3600, 7 * 24 * 3600, 400 * 24 * 3600] {
            let ceilings = Ceilings {
                max_ttl_secs,
                ..DEFAULT_CEILINGS
            };
            let start: Timestamp = created.parse().unwrap();
            let at = |extra: i64| {
                let mut secret = minted(hour());
                secret["metadata"]["creationTimestamp"] = json!(created);
                let end = start
                    + SignedDuration::from_secs(max_ttl_secs as i64)
                    + allowance
                    + SignedDuration::from_secs(extra);
                with_expiration(secret, &format_expiration(end))
            };
            // jiff's timestamps end on 9999-12-30: skip what it cannot write.
            let last: Timestamp = "9999-12-30T00:00:00Z".parse().unwrap();
            if start
                .checked_add(SignedDuration::from_secs(max_ttl_secs as i64 + 301))
                .is_ok_and(|end| end > last)
                || start
                    .checked_add(SignedDuration::from_secs(max_ttl_secs as i64 + 301))
                    .is_err()
            {
                continue;
            }
            assert_eq!(
                verdict(&ceilings, &at(0)),
                None,
                "{created} + {max_ttl_secs}s"
            );
            assert_eq!(
                verdict(&ceilings, &at(1)),
                Some(rule_about(
                    &ceilings,
                    &format!("data.{KEY_EXPIRATION} must be at most")
                )),
                "{created} + {max_ttl_secs}s + 1s"
            );
        }
    }
}

#[test]
fn an_expiration_not_as_mint_writes_it_is_refused() {
    let shape = rule_about(
        &DEFAULT_CEILINGS,
        &format!("data.{KEY_EXPIRATION} must be a UTC time"),
    );
    for written in [
        "2026-12-02T07:00:00+00:00",
        "2026-12-02T07:00:00.5Z",
        "2026-12-02 07:00:00Z",
        "2026-13-02T07:00:00Z",
        "2026-00-02T07:00:00Z",
        "2026-12-32T07:00:00Z",
        "2026-12-02T24:00:00Z",
        "2026-12-02T07:60:00Z",
        "2026-12-02T07:00:60Z",
        "2026-12-02t07:00:00z",
        "+2026-12-02T07:00:0Z",
        "tomorrow",
    ] {
        let secret = with_expiration(minted(hour()), written);
        assert_eq!(
            verdict(&DEFAULT_CEILINGS, &secret),
            Some(shape.clone()),
            "{written}"
        );
    }
}

#[test]
fn a_secret_without_a_creation_time_is_refused() {
    let mut secret = minted(hour());
    secret["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("creationTimestamp");
    assert_eq!(
        verdict(&DEFAULT_CEILINGS, &secret),
        Some(rule_about(
            &DEFAULT_CEILINGS,
            "metadata.creationTimestamp is missing"
        ))
    );
}

#[test]
fn max_nodes_past_the_ceiling_is_refused() {
    let rule = rule_about(
        &DEFAULT_CEILINGS,
        &format!("metadata.annotations[{MAX_NODES_ANNOTATION}]"),
    );
    for refused in ["4294967295", "101", "0", "01"] {
        let mut secret = minted(hour());
        secret["metadata"]["annotations"][MAX_NODES_ANNOTATION] = json!(refused);
        assert_eq!(
            verdict(&DEFAULT_CEILINGS, &secret),
            Some(rule.clone()),
            "{refused}"
        );
    }
    let mut hundred = minted(hour());
    hundred["metadata"]["annotations"][MAX_NODES_ANNOTATION] = json!("100");
    assert_eq!(verdict(&DEFAULT_CEILINGS, &hundred), None);
}

#[test]
fn issued_by_must_be_the_requester() {
    let rule = rule_about(
        &DEFAULT_CEILINGS,
        &format!("metadata.annotations[{ISSUED_BY_ANNOTATION}]"),
    );
    let mut admin = minted(hour());
    admin["metadata"]["annotations"][ISSUED_BY_ANNOTATION] = json!("kubernetes-admin");
    assert_eq!(verdict(&DEFAULT_CEILINGS, &admin), Some(rule.clone()));
    let mut none = minted(hour());
    none["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(ISSUED_BY_ANNOTATION);
    assert_eq!(verdict(&DEFAULT_CEILINGS, &none), Some(rule));
    // The caller the API minted for is the API's word, in its own annotation.
    let mut asked = minted(hour());
    asked["metadata"]["annotations"][REQUESTED_BY_ANNOTATION] = json!("kubernetes-admin");
    assert_eq!(verdict(&DEFAULT_CEILINGS, &asked), None);
}

#[test]
fn the_limits_override_is_refused() {
    let mut secret = minted(hour());
    secret["metadata"]["annotations"][LIMITS_OVERRIDE_ANNOTATION] =
        json!(r#"{"by":"kubernetes-admin","at":"2026-12-02T06:00:00Z"}"#);
    assert_eq!(
        verdict(&DEFAULT_CEILINGS, &secret),
        Some(rule_about(
            &DEFAULT_CEILINGS,
            &format!("metadata.annotations[{LIMITS_OVERRIDE_ANNOTATION}]")
        ))
    );
}

#[test]
fn the_policy_binds_the_serve_identity_only() {
    let far = with_expiration(minted(hour()), "9999-12-30T00:00:00Z");
    assert_eq!(
        testkube::validating_policy_verdict(
            &policy(&DEFAULT_CEILINGS),
            &request("kubernetes-admin"),
            &far
        ),
        None
    );
}
