//! The bootstrap-token authenticator trails its Secrets: the real one reads an informer
//! cache, so a token used right after its Secret's 201 gets the ordinary 401 for a moment;
//! deletions and updates trail the same way.

use std::time::{Duration, Instant};

use crate::support::raw::{RawClient, RawResponse};
use serde_json::json;
use testkube::TestCluster;

const SECRET: &str = "0123456789abcdef";
const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";

/// A token Secret as a client creates it (stringData, authentication usage, one extra
/// group).
fn token_secret(id: &str) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {
            "token-id": id,
            "token-secret": SECRET,
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": "system:bootstrappers:kubeflavor:node",
        },
    })
    .to_string()
}

async fn create_token(admin: &RawClient, id: &str) {
    let r = admin
        .send(
            "POST",
            SECRETS,
            &[
                ("Accept", "application/json"),
                ("Content-Type", "application/json"),
            ],
            &token_secret(id),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

/// A SelfSubjectReview with `Authorization: Bearer <token>`: the cheapest way to ask the
/// server who a token is.
async fn whoami(c: &RawClient, token: &str) -> RawResponse {
    let bearer = format!("Bearer {token}");
    c.send(
        "POST",
        SSR,
        &[
            ("Authorization", bearer.as_str()),
            ("Accept", "application/json"),
            ("Content-Type", "application/json"),
        ],
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
    )
    .await
}

/// Repeat the review without pause until it is no longer a 401, as a client that creates
/// and uses a token must; returns the answer and how many 401s came first.
async fn until_not_401(c: &RawClient, token: &str) -> (RawResponse, usize) {
    let mut rejected = 0;
    loop {
        let r = whoami(c, token).await;
        if r.status != 401 {
            return (r, rejected);
        }
        rejected += 1;
        assert!(rejected < 100_000, "the authenticator never saw the token");
    }
}

/// The 401 of a token the authenticator has not seen yet: the same uninformative Status as
/// every other failed credential (wrong secret, unknown id, garbage bearer), compact JSON
/// and one newline.
fn assert_plain_401(r: &RawResponse) {
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.header("Cache-Control"), Some("no-cache, private"));
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    assert!(
        r.body.ends_with("}\n") && !r.body.contains("\n "),
        "compact JSON"
    );
    assert!(r.header("WWW-Authenticate").is_none());
}

#[tokio::test]
async fn a_token_used_at_once_gets_the_ordinary_401_then_works_after_the_lag() {
    let lag = Duration::from_millis(500);
    let cluster = TestCluster::builder()
        .token_auth_lag(lag)
        .start()
        .await
        .unwrap();
    assert_eq!(cluster.token_auth_lag(), lag);
    let admin = RawClient::admin(&cluster);
    let anyone = RawClient::new(&cluster, None);
    let token = format!("g02m5i.{SECRET}");

    // Timed from before the request: the store's write, which the lag counts from, comes
    // between this instant and the 201.
    let created = Instant::now();
    create_token(&admin, "g02m5i").await;
    // As on a real server, the request sent right after the Secret's 201 is 401.
    let first = whoami(&anyone, &token).await;
    assert_plain_401(&first);
    // ... exactly the body a wrong secret gets.
    let wrong = whoami(&anyone, "g02m5i.aaaaaaaaaaaaaaaa").await;
    assert_eq!((first.status, &first.body), (wrong.status, &wrong.body));
    // Repeated without pause, it is 201 once the authenticator has seen the Secret.
    let (ok, _) = until_not_401(&anyone, &token).await;
    assert!(created.elapsed() >= lag, "not before the lag");
    assert_eq!(ok.status, 201, "{}", ok.body);
    assert_eq!(
        ok.json()["status"]["userInfo"],
        json!({"username": "system:bootstrap:g02m5i", "groups": [
            "system:bootstrappers", "system:bootstrappers:kubeflavor:node", "system:authenticated"]})
    );

    // The cache trails deletions the same way: the token works a moment longer.
    let deleted = Instant::now();
    let r = admin
        .send(
            "DELETE",
            &format!("{SECRETS}/bootstrap-token-g02m5i"),
            &[("Accept", "application/json")],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(whoami(&anyone, &token).await.status, 201, "still seen");
    loop {
        let r = whoami(&anyone, &token).await;
        if r.status == 401 {
            assert_plain_401(&r);
            break;
        }
        assert!(deleted.elapsed() < Duration::from_secs(20));
    }
    assert!(deleted.elapsed() >= lag);
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_default_lag_makes_a_client_that_uses_its_token_at_once_meet_a_401() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};

    let cluster = TestCluster::start().await.unwrap();
    let lag = testkube::DEFAULT_TOKEN_AUTH_LAG;
    assert_eq!(cluster.token_auth_lag(), lag);
    // Two kube-rs clients with their connections already open, as a tool that creates a
    // token and then uses it has.
    let secrets: Api<Secret> =
        Api::namespaced(crate::support::admin(&cluster).await, "kube-system");
    secrets.list(&Default::default()).await.unwrap();
    let token = format!("g02m5j.{SECRET}");
    let reviews: Api<SelfSubjectReview> =
        Api::all(crate::support::client_from(&cluster.kubeconfig_for_token(&token)).await);
    let (params, review) = (PostParams::default(), SelfSubjectReview::default());
    assert!(
        reviews.create(&params, &review).await.is_err(),
        "no Secret yet"
    );

    let started = Instant::now();
    let secret: Secret = serde_json::from_str(&token_secret("g02m5j")).unwrap();
    secrets.create(&params, &secret).await.unwrap();
    let first = reviews.create(&params, &review).await;
    if started.elapsed() < lag {
        // Answered within the lag of the write: the authenticator cannot have seen it.
        assert!(
            matches!(&first, Err(kube::Error::Api(s)) if s.code == 401 && s.reason == "Unauthorized"),
            "{first:?}"
        );
    } else {
        eprintln!("the machine is too busy to use the token within the lag; nothing to check");
    }
    // Once the authenticator has caught up with the write, the token works.
    cluster.token_auth_caught_up().await;
    let answer = reviews.create(&params, &review).await.unwrap();
    assert_eq!(username(answer).as_deref(), Some("system:bootstrap:g02m5j"));
    cluster.shutdown().await;
}

#[tokio::test]
async fn without_lag_a_token_works_at_once_and_dies_with_its_secret() {
    let cluster = TestCluster::builder()
        .token_auth_lag(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let admin = RawClient::admin(&cluster);
    let anyone = RawClient::new(&cluster, None);
    let token = format!("g02m5k.{SECRET}");
    create_token(&admin, "g02m5k").await;
    let r = whoami(&anyone, &token).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = admin
        .send(
            "DELETE",
            &format!("{SECRETS}/bootstrap-token-g02m5k"),
            &[("Accept", "application/json")],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_plain_401(&whoami(&anyone, &token).await);
    cluster.shutdown().await;
}

#[tokio::test]
async fn caught_up_means_the_authenticator_has_seen_creations_and_deletions() {
    let cluster = TestCluster::builder()
        .token_auth_lag(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let admin = RawClient::admin(&cluster);
    let anyone = RawClient::new(&cluster, None);
    let token = format!("g02m5l.{SECRET}");
    create_token(&admin, "g02m5l").await;
    assert_plain_401(&whoami(&anyone, &token).await);
    cluster.token_auth_caught_up().await;
    assert_eq!(whoami(&anyone, &token).await.status, 201);
    let r = admin
        .send(
            "DELETE",
            &format!("{SECRETS}/bootstrap-token-g02m5l"),
            &[("Accept", "application/json")],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(whoami(&anyone, &token).await.status, 201, "still seen");
    cluster.token_auth_caught_up().await;
    assert_plain_401(&whoami(&anyone, &token).await);
    cluster.shutdown().await;
}

/// The user a SelfSubjectReview answered with.
fn username(review: k8s_openapi::api::authentication::v1::SelfSubjectReview) -> Option<String> {
    review.status?.user_info?.username
}
