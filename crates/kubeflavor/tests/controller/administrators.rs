//! Node administrators sign in with a real identity provider (glewlwyd, see
//! `support::oidc`) and ask `POST /v1/jointokens` for a join token without naming a
//! flavor: the Roster decides, the answers of different flavors cannot be told apart, the
//! token's custody is the verified identity, and tokens the provider did not sign for us
//! mint nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine;
use http::StatusCode;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeflavor::connect::{Cluster, ClusterArgs};
use kubeflavor::serve::administrators::NO_TOKEN_MESSAGE;
use kubeflavor::serve::oidc::{IssuerConfig, Verifier};
use kubeflavor::serve::{self, Administrators, ConnectionLimits, Options, TlsSource};
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_cluster::crd::roster::Roster;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::{
    IDENTITY_ISSUER_ANNOTATION, IDENTITY_LABEL, IDENTITY_SUBJECT_ANNOTATION,
};
use serde_json::{Value, json};

use crate::harness::*;
use crate::serve::{MintApi, call};
use crate::support::oidc::{PrivateProvider, Provider};

const PATH: &str = "/v1/jointokens";

/// The provider's CA as a root store.
pub(crate) fn roots(provider: &Provider) -> rustls::RootCertStore {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(&provider.ca).expect("CA file") {
        roots.add(cert.expect("a certificate")).expect("a CA");
    }
    roots
}

/// The API serving node administrators of both the provider's issuers with `roster`.
async fn start(h: &Harness, provider: &Provider, roster: &str) -> MintApi {
    start_with(
        h,
        provider,
        &[&provider.issuer, &provider.issuer2],
        roster,
        |v| v,
    )
    .await
}

/// The API serving node administrators of `issuers` with `roster`, its verifier as `tune`
/// leaves it.
async fn start_with(
    h: &Harness,
    provider: &Provider,
    issuers: &[&String],
    roster: &str,
    tune: impl FnOnce(Verifier) -> Verifier,
) -> MintApi {
    let issuers = issuers
        .iter()
        .map(|issuer| IssuerConfig {
            issuer: (*issuer).clone(),
            audience: provider.client_id.clone(),
        })
        .collect();
    let administrators = Administrators::new(
        tune(Verifier::new(issuers, "groups".into(), roots(provider))),
        roster.to_string(),
    );
    let options = Options {
        address: "127.0.0.1:0".parse().unwrap(),
        tls: TlsSource::SelfSigned {
            names: vec!["127.0.0.1".into()],
        },
        ops_address: None,
        per_minute: 100,
        burst: 100,
        audience: None,
        instance: h.name("serve-admins"),
        connections: ConnectionLimits::default(),
        administrators: Some(Arc::new(administrators)),
        portal: None,
        observing: None,
    };
    let cluster = Cluster::connect(&ClusterArgs {
        kubeconfig: Some(h.env.kubeconfig.clone()),
        context: None,
    })
    .await
    .expect("admin kubeconfig");
    crate::serve::serve_bound(serve::bind(cluster, options).await.expect("the API binds"))
}

/// A Roster of this run: alice's group gets `sweet` (one node each at most), bob's `sour`
/// (two live tokens each at most), an e-mail domain rule
/// that carol's unverified address must not meet gives `sour`, dave is refused by a
/// `noToken` rule before a rule that would grant him; nothing for issuer 2.
async fn roster(h: &Harness, provider: &Provider, sweet: &str, sour: &str) -> String {
    roster_limited(h, provider, (sweet, sour), true).await
}

/// [`roster`], with its two per-administrator limits only when `limits`.
async fn roster_limited(
    h: &Harness,
    provider: &Provider,
    (sweet, sour): (&str, &str),
    limits: bool,
) -> String {
    let name = h.name("roster");
    let (max_nodes, max_live) = if limits {
        (json!(1), json!(2))
    } else {
        (json!(null), json!(null))
    };
    let roster: Roster = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Roster",
        "metadata": {"name": name},
        "spec": {
            "rules": [
                {"name": "sweet-admins", "issuer": provider.issuer, "group": "sweet-admins", "flavor": sweet, "maxNodes": max_nodes},
                {"name": "sour-admins", "issuer": provider.issuer, "group": "sour-admins", "flavor": sour, "maxLiveTokens": max_live},
                {"name": "acme-verified", "issuer": provider.issuer, "emailDomain": "acme.example", "flavor": sour},
                {"name": "dave-refused", "issuer": provider.issuer, "email": "dave@other.example", "noToken": true},
                {"name": "other-domain", "issuer": provider.issuer, "emailDomain": "other.example", "flavor": sour},
            ],
            "tokenDefaults": {"ttl": "2h"},
        },
    }))
    .expect("a Roster");
    Api::<Roster>::all(h.admin.clone())
        .create(&PostParams::default(), &roster)
        .await
        .expect("Roster created");
    name
}

/// The token Secret of a minted token's id.
async fn secret_of(h: &Harness, minted: &Value) -> Secret {
    let id = minted["id"].as_str().expect("an id");
    Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
        .get(&format!("bootstrap-token-{id}"))
        .await
        .expect("the token Secret")
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn administrators_get_the_rosters_flavor_without_learning_it() {
    let provider = Provider::shared();
    let h = Harness::start().await;
    let sweet = h.gold_flavor("sweet").await;
    let sour = h.gold_flavor("sour").await;
    let roster = roster(&h, provider, &sweet, &sour).await;
    let api = start(&h, provider, &roster).await;

    let alice = provider.token("alice", &[]);
    let bob = provider.token("bob", &[]);
    let (code_a, minted_a) = call(&api, PATH, Some(&alice), None, b"{}").await;
    let (code_b, minted_b) = call(&api, PATH, Some(&bob), None, b"{}").await;
    assert_eq!(code_a, StatusCode::CREATED, "{minted_a}");
    assert_eq!(code_b, StatusCode::CREATED, "{minted_b}");

    // The two answers have the same shape, and nothing in them names a flavor.
    assert_eq!(keys(&minted_a), keys(&minted_b));
    for minted in [&minted_a, &minted_b] {
        assert!(
            minted.get("flavor").is_none() && minted.get("maxNodes").is_none(),
            "{minted}"
        );
        let text = minted.to_string();
        assert!(!text.contains(&sweet) && !text.contains(&sour), "{text}");
        minted["token"]
            .as_str()
            .expect("a token")
            .parse::<BootstrapToken>()
            .expect("a bootstrap token");
    }
    assert_eq!(
        minted_a["expiration"].as_str().map(str::len),
        minted_b["expiration"].as_str().map(str::len)
    );
    assert_eq!(minted_a["issuedTo"], "alice@acme.example");

    // The cluster knows: alice's token is sweet, bob's sour, each with its verified
    // identity (issuer and subject, never from the body).
    let (secret_a, secret_b) = (
        secret_of(&h, &minted_a).await,
        secret_of(&h, &minted_b).await,
    );
    let label = |s: &Secret, k: &str| s.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let annotation = |s: &Secret, k: &str| {
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
    };
    assert_eq!(
        label(&secret_a, "kubeflavor.io/flavor").as_deref(),
        Some(sweet.as_str())
    );
    assert_eq!(
        label(&secret_b, "kubeflavor.io/flavor").as_deref(),
        Some(sour.as_str())
    );
    assert_eq!(
        annotation(&secret_a, IDENTITY_ISSUER_ANNOTATION).as_deref(),
        Some(provider.issuer.as_str())
    );
    let subject_a = annotation(&secret_a, IDENTITY_SUBJECT_ANNOTATION).expect("a subject");
    assert_eq!(
        label(&secret_a, IDENTITY_LABEL),
        Some(kubeflavor_core::mint::roster::identity_key(
            &provider.issuer,
            &subject_a
        ))
    );

    // alice's rule allows her 1 node, and her unused token can bind it: a second token is
    // refused before any node joins (tokens minted ahead cannot pass the limit together).
    let (code, body) = call(&api, PATH, Some(&alice), None, b"{}").await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    let message = body["message"].as_str().expect("a message");
    assert!(
        message.contains("0 nodes and 1 unused join tokens"),
        "{message}"
    );

    // No token: no rule (alice at the second issuer: the same subject is another
    // identity there), an unverified e-mail (carol), a noToken rule (dave). One answer.
    let alice_elsewhere = provider.token("alice", &["--issuer", "2"]);
    let carol = provider.token("carol", &[]);
    let dave = provider.token("dave", &[]);
    let mut refusals = Vec::new();
    for token in [&alice_elsewhere, &carol, &dave] {
        let (code, body) = call(&api, PATH, Some(token), None, b"{}").await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["message"], NO_TOKEN_MESSAGE);
        refusals.push(body);
    }
    assert!(refusals.windows(2).all(|w| w[0] == w[1]), "{refusals:?}");

    // An input label the Roster does not take: one refusal, the same whichever flavor the
    // asker's rule gives.
    let asked = br#"{"labels": {"rack": "r1"}}"#;
    let (code_a, refused_a) = call(&api, PATH, Some(&alice), None, asked).await;
    let (code_b, refused_b) = call(&api, PATH, Some(&bob), None, asked).await;
    assert_eq!(code_a, StatusCode::UNPROCESSABLE_ENTITY, "{refused_a}");
    assert_eq!((code_a, &refused_a), (code_b, &refused_b));
    assert_eq!(refused_a["details"]["causes"][0]["field"], "labels[rack]");

    // A body that names who or how long is refused by name, and mints nothing.
    let (code, body) = call(
        &api,
        PATH,
        Some(&alice),
        None,
        br#"{"issuedTo": "mallory"}"#,
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "issuedTo");

    // Once alice has a node (a binding labelled with her identity), her rule's maxNodes
    // of 1 is reached: a refusal that says so, and names no flavor.
    let node = h.name("alice-node");
    let binding: FlavorBinding = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "FlavorBinding",
        "metadata": {"name": node, "labels": {IDENTITY_LABEL: label(&secret_a, IDENTITY_LABEL)}},
        "spec": {"node": node, "flavor": sweet, "tokenId": "abcdef", "csrName": "csr-1",
                 "publicKeySha256": "0".repeat(64), "boundAt": "2026-11-30T04:22:19Z",
                 "identity": {"issuer": provider.issuer, "subject": subject_a}},
    }))
    .expect("a FlavorBinding");
    Api::<FlavorBinding>::all(h.admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("alice's node bound");
    let (code, body) = call(&api, PATH, Some(&alice), None, b"{}").await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    let message = body["message"].as_str().expect("a message");
    assert!(message.contains("you already have 1 nodes"), "{message}");
    assert!(!message.contains(&sweet), "{message}");
    // bob's rule sets no such limit, but holds him to 2 live tokens: his second is
    // minted, his third refused with a reason that names no flavor.
    let (code, body) = call(&api, PATH, Some(&bob), None, b"{}").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (code, body) = call(&api, PATH, Some(&bob), None, b"{}").await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    let message = body["message"].as_str().expect("a message");
    assert!(
        message.contains("you already hold 2 join tokens"),
        "{message}"
    );
    assert!(!message.contains(&sour), "{message}");

    // The Roster's status counts each rule's grants (written every few seconds): alice's
    // rule one, bob's two, the others none; one administrator each. Watched until three
    // are counted.
    let grants_of = |r: &Roster| -> Vec<(String, i64, i64)> {
        r.status
            .clone()
            .unwrap_or_default()
            .rule_matches
            .iter()
            .filter(|m| m.grants > 0)
            .map(|m| (m.name.clone(), m.grants, m.administrators))
            .collect()
    };
    let rosters = Api::<Roster>::all(h.admin.clone());
    let stored = crate::support::within(
        "the Roster's status to count the grants",
        kube::runtime::wait::await_condition(rosters, &roster, |r: Option<&Roster>| {
            r.is_some_and(|r| grants_of(r).iter().map(|(_, n, _)| n).sum::<i64>() >= 3)
        }),
    )
    .await
    .expect("a watch of the Roster")
    .expect("the Roster");
    let counted = grants_of(&stored);
    assert_eq!(
        counted,
        [
            ("sweet-admins".to_string(), 1, 1),
            ("sour-admins".to_string(), 2, 1)
        ]
    );
}

/// Tokens the provider did not sign for this API, or that say what they may not: each is
/// 401 and mints nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_the_provider_did_not_sign_for_us_mint_nothing() {
    let provider = Provider::shared();
    let h = Harness::start().await;
    let sweet = h.gold_flavor("sweet").await;
    let roster = roster_limited(&h, provider, (&sweet, &sweet), false).await;
    // This API trusts the provider's first issuer only.
    let api = start_with(&h, provider, &[&provider.issuer], &roster, |v| v).await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);

    let alice = provider.token("alice", &[]);
    let parts: Vec<&str> = alice.split('.').collect();
    let payload = parts[1];
    // alg none: the same claims, no signature.
    let none = format!("{}.{payload}.", b64(br#"{"alg":"none","typ":"JWT"}"#));
    // HS256 keyed with the provider's public key (the old algorithm-confusion attack).
    let jwks: Value = {
        let discovery = fetch_json(
            provider,
            &format!("{}/.well-known/openid-configuration", provider.issuer),
        )
        .await;
        fetch_json(provider, discovery["jwks_uri"].as_str().expect("jwks_uri")).await
    };
    let public_key = serde_json::to_vec(&jwks["keys"][0]).expect("a key");
    let hs256 = {
        use hmac::{KeyInit, Mac};
        let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&public_key).expect("HMAC key");
        mac.update(format!("{header}.{payload}").as_bytes());
        format!("{header}.{payload}.{}", b64(&mac.finalize().into_bytes()))
    };
    // The payload changed under the provider's signature (groups widened).
    let mut claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64"),
    )
    .expect("claims");
    claims["groups"] = json!(["sweet-admins", "sour-admins"]);
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    );
    // Issued to another client of the same provider.
    let other_client = provider.token("alice", &["--client", "other-app"]);
    // Issued by an issuer this API does not trust.
    let other_issuer = provider.token("alice", &["--issuer", "2"]);

    for (what, token) in [
        ("not a JWT", "not-a-token".to_string()),
        ("alg none", none),
        ("HS256 keyed with the public key", hs256),
        ("claims changed under the signature", forged),
        ("another audience", other_client),
        ("an issuer not trusted", other_issuer),
    ] {
        let (code, body) = call(&api, PATH, Some(&token), None, b"{}").await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{what}: {body}");
    }
    let minted = Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
        .list(&ListParams::default().labels(&format!("kubeflavor.io/flavor={sweet}")))
        .await
        .expect("list")
        .items;
    assert!(minted.is_empty(), "{} tokens minted", minted.len());
}

/// GET a provider document, trusting its CA.
async fn fetch_json(provider: &Provider, url: &str) -> Value {
    let out = tokio::process::Command::new("curl")
        .args(["-fsS", "--cacert"])
        .arg(&provider.ca)
        .arg(url)
        .output()
        .await
        .expect("curl");
    assert!(
        out.status.success(),
        "GET {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Key rotation at the provider, on a provider of this test's own: a token signed with a
/// key rotated in is accepted at once (the key set is fetched again for its unknown
/// `kid`), and once the provider stops publishing the old key, a token signed with it
/// mints nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_in_key_works_and_a_rotated_out_key_does_not() {
    let private = PrivateProvider::start();
    let provider = &private.provider;
    let h = Harness::start().await;
    let sweet = h.gold_flavor("sweet").await;
    let roster = roster_limited(&h, provider, (&sweet, &sweet), false).await;
    // Key sets are kept for no time, so the provider's word is read at every request.
    let api = start_with(&h, provider, &[&provider.issuer], &roster, |v| {
        v.with_key_cache(std::time::Duration::ZERO, std::time::Duration::ZERO)
    })
    .await;
    let before = provider.token("alice", &[]);
    let (code, body) = call(&api, PATH, Some(&before), None, b"{}").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");

    provider.script("rotate", &[]);
    let after = provider.token("alice", &[]);
    assert_ne!(kid(&before), kid(&after), "rotate changes the signing key");
    for token in [&after, &before] {
        let (code, body) = call(&api, PATH, Some(token), None, b"{}").await;
        assert_eq!(code, StatusCode::CREATED, "both keys are published: {body}");
    }

    provider.script("rotate", &["--drop-old", "--no-new"]);
    let (code, body) = call(&api, PATH, Some(&before), None, b"{}").await;
    assert_eq!(
        code,
        StatusCode::UNAUTHORIZED,
        "the old key is gone: {body}"
    );
    let (code, body) = call(&api, PATH, Some(&after), None, b"{}").await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}

/// An expired ID token mints nothing: on a provider of this test's own whose tokens live
/// 2 s, checked with no leeway, a token is accepted while valid and refused once its `exp`
/// has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_mints_nothing() {
    let private = PrivateProvider::start();
    let provider = &private.provider;
    provider.script("lifetime", &["2"]);
    let h = Harness::start().await;
    let sweet = h.gold_flavor("sweet").await;
    let roster = roster_limited(&h, provider, (&sweet, &sweet), false).await;
    let api = start_with(&h, provider, &[&provider.issuer], &roster, |v| {
        v.with_clock_skew(std::time::Duration::ZERO)
    })
    .await;
    let token = provider.token("alice", &[]);
    let exp = claims(&token)["exp"].as_i64().expect("exp");
    let (code, body) = call(&api, PATH, Some(&token), None, b"{}").await;
    assert_eq!(code, StatusCode::CREATED, "still valid: {body}");
    // Expiry is the wall clock passing `exp`: one timer set for the first second after it
    // (jsonwebtoken refuses once `exp < now`), not a poll.
    let expired_at = jiff::Timestamp::from_second(exp + 1).expect("a time");
    let until = jiff::Timestamp::now()
        .duration_until(expired_at)
        .max(jiff::SignedDuration::ZERO)
        .unsigned_abs();
    crate::support::within(
        "the token's exp to pass",
        tokio::time::sleep_until(tokio::time::Instant::now() + until),
    )
    .await;
    let (code, body) = call(&api, PATH, Some(&token), None, b"{}").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["message"].as_str().unwrap_or("").contains("expired"),
        "{body}"
    );
}

/// The claims of a JWT, not verified.
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a payload");
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64"),
    )
    .expect("JSON")
}

/// The `kid` of a JWT's header.
fn kid(token: &str) -> String {
    let header = token.split('.').next().expect("a header");
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .expect("base64"),
    )
    .expect("JSON");
    header["kid"].as_str().expect("a kid").to_string()
}
