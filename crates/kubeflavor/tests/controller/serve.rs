//! The join-token API (`kubeflavor serve`) as a portal uses it: a ServiceAccount allowed
//! to mint one flavor mints a token over HTTPS, a node joins with it; everything else the
//! portal might send gets its own answer and creates nothing.

use std::time::Duration;

use http::StatusCode;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use kubeflavor::connect::{Cluster, ClusterArgs};
use kubeflavor::serve::{self, ConnectionLimits, Options, TlsSource};
use kubeflavor_core::token::BootstrapToken;
use serde_json::Value;

use crate::harness::*;
use crate::support::https::HttpsClient;
use crate::support::portal::service_account_token;
use crate::support::stall::{Seen, Stall, hold};
use crate::support::within_for;

/// The namespace of the portal's ServiceAccount.
const PORTAL_NAMESPACE: &str = "default";

/// A running join-token API and a client of it.
pub(crate) struct MintApi {
    client: HttpsClient,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for MintApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub(crate) async fn start_api(h: &Harness) -> MintApi {
    start_api_with(h, h.env.kubeconfig.clone(), 100).await
}

/// The API running with the credentials of `kubeconfig`, letting each caller mint `burst`
/// tokens at once.
async fn start_api_with(h: &Harness, kubeconfig: std::path::PathBuf, burst: u32) -> MintApi {
    start_api_tuned(h, kubeconfig, |o| o.burst = burst).await
}

/// The API running with the credentials of `kubeconfig` and the options `tune` sets (by
/// default: 1 mint a minute per caller, burst 1, the default connection limits).
async fn start_api_tuned(
    h: &Harness,
    kubeconfig: std::path::PathBuf,
    tune: impl FnOnce(&mut Options),
) -> MintApi {
    let mut options = Options {
        address: "127.0.0.1:0".parse().unwrap(),
        tls: TlsSource::SelfSigned {
            names: vec!["127.0.0.1".into()],
        },
        ops_address: None,
        per_minute: 1,
        burst: 1,
        audience: None,
        instance: h.name("serve"),
        connections: ConnectionLimits::default(),
        administrators: None,
        portal: None,
        observing: None,
    };
    tune(&mut options);
    let cluster = Cluster::connect(&ClusterArgs {
        kubeconfig: Some(kubeconfig),
        context: None,
    })
    .await
    .expect("admin kubeconfig");
    serve_bound(serve::bind(cluster, options).await.expect("the API binds"))
}

/// Serves `bound` until the returned handle is dropped.
pub(crate) fn serve_bound(bound: serve::Bound) -> MintApi {
    let client = HttpsClient::new(
        bound.local_addr().expect("bound"),
        bound.self_signed_pem.as_deref().expect("self-signed"),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.serve(async {
        let _ = rx.await;
    }));
    MintApi {
        client,
        stop: Some(tx),
    }
}

pub(crate) async fn call(
    api: &MintApi,
    path: &str,
    bearer: Option<&str>,
    accept: Option<&str>,
    body: &[u8],
) -> (StatusCode, Value) {
    api.client.post(path, bearer, accept, body).await
}

/// A ServiceAccount of this run allowed to mint the flavors `may_mint` and nothing else;
/// its token.
pub(crate) async fn portal(h: &Harness, may_mint: &[&str]) -> String {
    crate::support::portal::portal(&h.admin, PORTAL_NAMESPACE, &h.name("portal"), may_mint).await
}

/// The token Secrets of `flavor`.
pub(crate) async fn tokens_of(h: &Harness, flavor: &str) -> Vec<Secret> {
    Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
        .list(&ListParams::default().labels(&format!("kubeflavor.io/flavor={flavor}")))
        .await
        .expect("list Secrets")
        .items
}

pub(crate) fn path(flavor: &str) -> String {
    format!("/v1/flavors/{flavor}/jointokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_mints_its_flavor_and_the_node_joins() {
    let h = Harness::start().await;
    let sour = h.gold_flavor("sour").await;
    let sweet = h.gold_flavor("sweet").await;
    let portal = portal(&h, &[&sour]).await;
    let api = start_api(&h).await;
    let ctl = h.start_controller(h.options("ctl"));

    let (code, minted) = call(
        &api,
        &path(&sour),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme-corp/alice", "ttl": "1h", "output": "cloud-init"}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    let token: BootstrapToken = minted["token"]
        .as_str()
        .expect("a token")
        .parse()
        .expect("a bootstrap token");
    assert_eq!(minted["id"], token.id().to_string());
    assert_eq!(minted["flavor"], sour.as_str());
    assert_eq!(minted["issuedTo"], "acme-corp/alice");
    assert_eq!(
        minted["issuedBy"],
        format!(
            "system:serviceaccount:{PORTAL_NAMESPACE}:{}",
            h.name("portal")
        )
    );
    let line = minted["joinCommand"].as_str().expect("join line");
    assert!(
        line.starts_with("kubeadm join ")
            && line.contains(&format!("--token {}", token.expose().as_str()))
            && line.contains("--discovery-token-ca-cert-hash sha256:"),
        "{line}"
    );
    assert!(
        minted["cloudInit"]
            .as_str()
            .is_some_and(|d| d.starts_with("#cloud-config\n")),
        "{minted}"
    );
    let stored = tokens_of(&h, &sour).await;
    assert_eq!(stored.len(), 1, "one token stored");
    let requested_by = stored[0]
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubeflavor.io/requested-by"))
        .cloned()
        .expect("requested-by recorded");

    // The node joins with it and is bound to its flavor.
    let node = h.name("portal-node");
    let boot = h.bootstrap_client(&token).await;
    h.submit_csr(&boot, &node, &node).await;
    assert_eq!(h.decision(&node).await, "Approved");
    let binding = h
        .binding_until(&node, "bound to the minted token", |b| {
            b.spec.token_id == token.id().to_string()
        })
        .await;
    assert_eq!(binding.spec.flavor, sour);
    // The custody record: for whom the portal said, minted by the API's own identity (the
    // one name the serve policy lets it write as issued-by), asked for by the portal's
    // identity (as its TokenReview said).
    assert_eq!(binding.spec.issued_to.as_deref(), Some("acme-corp/alice"));
    let (api_identity, _) = crate::support::whoami(&h.admin).await.expect("whoami");
    assert_eq!(
        binding.spec.issued_by.as_deref(),
        Some(api_identity.as_str())
    );
    assert_eq!(
        requested_by,
        minted["issuedBy"].as_str().expect("the caller"),
        "asked for by the portal's own identity"
    );
    assert_eq!(
        binding.spec.requested_by.as_deref(),
        Some(requested_by.as_str()),
        "the binding keeps who asked"
    );

    // The same portal may not mint another flavor, and learns nothing about it.
    let (code, refused) = call(
        &api,
        &path(&sweet),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme-corp/alice"}"#,
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["reason"], "Forbidden");
    let (_, ghost) = call(
        &api,
        &path(&h.name("no-such-flavor")),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme-corp/alice"}"#,
    )
    .await;
    assert_eq!(
        ghost["message"]
            .as_str()
            .map(|m| m.replace(&h.name("no-such-flavor"), "X")),
        refused["message"].as_str().map(|m| m.replace(&sweet, "X")),
        "a flavor that exists and one that does not are refused alike"
    );
    assert!(tokens_of(&h, &sweet).await.is_empty(), "nothing minted");
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_gets_its_own_answer_and_creates_nothing() {
    let h = Harness::start().await;
    let sour = h.gold_flavor("sour").await;
    let ghost = h.name("ghost");
    let portal = portal(&h, &[&sour, &ghost]).await;
    let api = start_api(&h).await;
    let ok = br#"{"issuedTo": "acme-corp/alice"}"#;

    struct Case<'a> {
        what: &'a str,
        flavor: &'a str,
        bearer: Option<&'a str>,
        body: Vec<u8>,
        want: StatusCode,
        reason: &'a str,
    }
    let case = |what, flavor, bearer, body: &[u8], want, reason| Case {
        what,
        flavor,
        bearer,
        body: body.to_vec(),
        want,
        reason,
    };
    let oversized = vec![b' '; kubeflavor_core::mint::request::MAX_BODY_BYTES + 1];
    let cases = [
        case(
            "no credentials",
            &sour,
            None,
            ok,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        case(
            "a bad token",
            &sour,
            Some("not-a-real-token"),
            ok,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        case(
            "a malformed body",
            &sour,
            Some(&portal),
            b"{issuedTo",
            StatusCode::BAD_REQUEST,
            "BadRequest",
        ),
        case(
            "an invalid field",
            &sour,
            Some(&portal),
            br#"{"issuedTo": "", "maxNodes": 0}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
        ),
        case(
            "an unknown flavor it may mint",
            &ghost,
            Some(&portal),
            ok,
            StatusCode::NOT_FOUND,
            "NotFound",
        ),
        case(
            "an oversized body",
            &sour,
            Some(&portal),
            &oversized,
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
        ),
    ];
    for c in &cases {
        let (code, answer) = call(&api, &path(c.flavor), c.bearer, None, &c.body).await;
        assert_eq!(code, c.want, "{}: {answer}", c.what);
        assert_eq!(answer["kind"], "Status", "{}: {answer}", c.what);
        assert_eq!(answer["reason"], c.reason, "{}: {answer}", c.what);
    }
    let (_, invalid) = call(
        &api,
        &path(&sour),
        Some(&portal),
        None,
        br#"{"issuedTo": "", "maxNodes": 0}"#,
    )
    .await;
    let fields: Vec<&str> = invalid["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert_eq!(fields, ["issuedTo", "maxNodes"], "{invalid}");
    assert!(tokens_of(&h, &sour).await.is_empty(), "no token minted");
    assert!(tokens_of(&h, &ghost).await.is_empty(), "no token minted");
}

/// The API needs no more than `install --serve` grants its ServiceAccount: run with that
/// identity's token, it reviews its callers, reads the flavor and cluster-info, checks the
/// bindings and stores the token; and that identity cannot read the Secret it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_identity_is_enough_to_mint() {
    let h = Harness::start().await;
    h.env
        .kf(&["install", "--apply", "--serve", "--replicas", "0"])
        .await
        .expect_ok();
    let sour = h.gold_flavor("sour").await;
    let portal = portal(&h, &[&sour]).await;
    let own = service_account_token(&h.admin, "kubeflavor", "kubeflavor-serve", 600).await;
    let api = start_api_with(&h, h.env.token_kubeconfig(&own), 100).await;
    let (code, minted) = call(
        &api,
        &path(&sour),
        Some(&portal),
        None,
        br#"{"issuedTo": "acme-corp/bob"}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    let id = minted["id"].as_str().expect("id");
    let as_server = h.env.token_client(&own).await;
    let read = Api::<Secret>::namespaced(as_server, "kube-system")
        .get(&format!("bootstrap-token-{id}"))
        .await;
    assert!(
        matches!(read, Err(kube::Error::Api(ref s)) if s.code == 403),
        "the API's identity may create token Secrets but not read them: {read:?}"
    );
}

/// A caller past its burst is told to come back later and gets no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_past_its_rate_gets_429_and_no_token() {
    let h = Harness::start().await;
    let sour = h.gold_flavor("sour").await;
    let portal = portal(&h, &[&sour]).await;
    let api = start_api_with(&h, h.env.kubeconfig.clone(), 1).await;
    let body = br#"{"issuedTo": "acme-corp/alice"}"#;
    let (first, _) = call(&api, &path(&sour), Some(&portal), None, body).await;
    assert_eq!(first, StatusCode::CREATED);
    let (second, answer) = call(&api, &path(&sour), Some(&portal), None, body).await;
    assert_eq!(second, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert_eq!(answer["reason"], "TooManyRequests");
    assert_eq!(
        tokens_of(&h, &sour).await.len(),
        1,
        "the refused request minted nothing"
    );
    // Unauthenticated requests are answered before any bucket is touched.
    let (anonymous, _) = call(&api, &path(&sour), None, None, body).await;
    assert_eq!(anonymous, StatusCode::UNAUTHORIZED);
}

/// Connection slots of the API in [`stalled_clients_cannot_hold_the_api`].
const SLOTS: usize = 16;

/// Clients that connect and then send nothing, too little or too slowly cannot take the
/// API from a portal: with 16 slots, 20 stalled connections of each kind (silent after
/// the handshake, HTTP/1.1 headers cut short or sent a byte at a time, an h2 preface
/// alone, a body sent a byte at a time, an h2 stream whose body never ends) are closed
/// by the server and a mint sent behind them gets its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_cannot_hold_the_api() {
    let h = Harness::start().await;
    let sour = h.gold_flavor("sour").await;
    let portal = portal(&h, &[&sour]).await;
    let limits = ConnectionLimits {
        max_connections: SLOTS,
        idle_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let body = br#"{"issuedTo": "acme-corp/alice"}"#;
    let (h, sour, portal) = (&h, &sour, &portal);
    // One API per kind of stall, all at once.
    let kinds = [
        (Stall::Silent, Seen::Closed),
        (Stall::PartialHeaders, Seen::Closed),
        (Stall::H2Preface, Seen::Closed),
        (Stall::HeadersByTheByte, Seen::Closed),
        (
            Stall::BodyByTheByte,
            Seen::Answered(StatusCode::REQUEST_TIMEOUT),
        ),
        (
            Stall::H2BodyNeverEnds,
            Seen::Answered(StatusCode::REQUEST_TIMEOUT),
        ),
    ]
    .map(|(stall, answer)| async move {
        let api = start_api_tuned(h, h.env.kubeconfig.clone(), |o| {
            o.burst = 100;
            o.connections = limits;
        })
        .await;
        let (ready_tx, mut ready) = tokio::sync::mpsc::unbounded_channel();
        let held: Vec<_> = (0..SLOTS + 4)
            .map(|_| {
                tokio::spawn(hold(
                    api.client.clone(),
                    stall,
                    path(sour),
                    portal.clone(),
                    ready_tx.clone(),
                ))
            })
            .collect();
        within(
            &format!("{SLOTS} {stall:?} connections holding every slot"),
            async {
                for _ in 0..SLOTS {
                    ready.recv().await.expect("a held connection");
                }
            },
        )
        .await;
        // Every slot is held and more stalled clients wait ahead of this mint.
        let (code, minted) = within_for(
            Duration::from_secs(20),
            &format!("a mint behind {} {stall:?} connections", SLOTS + 4),
            call(&api, &path(sour), Some(portal), None, body),
        )
        .await;
        assert_eq!(code, StatusCode::CREATED, "{stall:?}: {minted}");
        for client in held {
            let seen = within(
                &format!("the server closing a {stall:?} connection"),
                client,
            )
            .await
            .expect("the stalled client ran");
            assert_eq!(seen, answer, "{stall:?}");
        }
    });
    futures::future::join_all(kinds).await;
}

/// The rate a caller gets is the one `install --serve` is given, whatever the replicas:
/// `--serve-rate-per-minute 3 --serve-burst 3` over `--serve-replicas 3` runs each replica
/// with `--rate-per-minute=1 --burst=1`, and a caller whose requests are spread over the
/// three (as a Service without session affinity does) mints 3 tokens at once, not 9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_rate_is_the_installed_one_across_replicas() {
    let h = Harness::start().await;
    let printed = h
        .env
        .kf(&[
            "install",
            "--serve",
            "--serve-replicas",
            "3",
            "--serve-rate-per-minute",
            "3",
            "--serve-burst",
            "3",
        ])
        .await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(printed.expect_ok()).expect("YAML");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "kubeflavor-serve")
        .expect("the join-token API's Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let flag = |name: &str| -> u32 {
        let prefix = format!("--{name}=");
        args.iter()
            .find_map(|a| a.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{prefix} in {args:?}"))
            .parse()
            .expect("a number")
    };
    let (per_minute, burst) = (flag("rate-per-minute"), flag("burst"));
    assert_eq!((per_minute, burst), (1, 1), "3 and 3 split over 3 replicas");

    let sour = h.gold_flavor("sour").await;
    let portal = portal(&h, &[&sour]).await;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(
            start_api_tuned(&h, h.env.kubeconfig.clone(), |o| {
                o.per_minute = per_minute;
                o.burst = burst;
            })
            .await,
        );
    }
    let body = br#"{"issuedTo": "acme-corp/alice"}"#;
    let mut codes = Vec::new();
    for _ in 0..2 {
        for api in &replicas {
            codes.push(call(api, &path(&sour), Some(&portal), None, body).await.0);
        }
    }
    use StatusCode as S;
    assert_eq!(
        codes,
        [
            S::CREATED,
            S::CREATED,
            S::CREATED,
            S::TOO_MANY_REQUESTS,
            S::TOO_MANY_REQUESTS,
            S::TOO_MANY_REQUESTS
        ],
        "one mint at once per replica"
    );
    assert_eq!(
        tokens_of(&h, &sour).await.len(),
        3,
        "the caller minted the installed burst, 3, across the replicas"
    );
}

/// A portal's POST of `body` for `flavor`, answered.
async fn post(api: &MintApi, flavor: &str, portal: &str, body: &[u8]) -> (StatusCode, Value) {
    call(api, &path(flavor), Some(portal), None, body).await
}

/// The causes of a refusal: (field, reason, message).
fn causes(answer: &Value) -> Vec<(String, String, String)> {
    answer["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes: {answer}"))
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("field"), text("reason"), text("message"))
        })
        .collect()
}

/// A portal asks for no more than the flavor allows: without `tokenLimits` at most the
/// flavor's defaults (24h, one node); with them, up to the limits; never a token that
/// never expires, whatever the flavor allows (the API server would refuse this API's
/// identity such a token Secret). Each refusal is a 422 naming the field and the limit,
/// and mints nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_cannot_mint_past_the_flavors_limits() {
    let h = Harness::start().await;
    let plain = h.gold_flavor("plain").await;
    let limited = h.name("limited");
    let portal = portal(&h, &[&plain, &limited]).await;
    let api = start_api(&h).await;

    for (body, field, needle) in [
        (
            &br#"{"issuedTo": "acme-corp/alice", "ttl": "0"}"#[..],
            "ttl",
            "the join-token API mints only tokens that expire",
        ),
        (
            br#"{"issuedTo": "acme-corp/alice", "maxNodes": 4294967295}"#,
            "maxNodes",
            "tokenLimits.maxNodes",
        ),
        (
            br#"{"issuedTo": "acme-corp/alice", "ttl": "24h1s"}"#,
            "ttl",
            "tokenLimits.maxTTL",
        ),
    ] {
        let (code, answer) = post(&api, &plain, &portal, body).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["reason"], "Invalid", "{answer}");
        let causes = causes(&answer);
        assert_eq!(causes.len(), 1, "{answer}");
        assert_eq!(causes[0].0, field, "{answer}");
        assert!(causes[0].2.contains(needle), "{answer}");
    }
    assert!(tokens_of(&h, &plain).await.is_empty(), "nothing minted");
    // Both limits at once: both named.
    let (_, both) = post(
        &api,
        &plain,
        &portal,
        br#"{"issuedTo": "a", "ttl": "25h", "maxNodes": 2}"#,
    )
    .await;
    let fields: Vec<String> = causes(&both).into_iter().map(|c| c.0).collect();
    assert_eq!(fields, ["ttl", "maxNodes"], "{both}");
    // At the defaults, it mints.
    let (code, minted) = post(
        &api,
        &plain,
        &portal,
        br#"{"issuedTo": "acme-corp/alice", "ttl": "24h", "maxNodes": 1}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");

    // A flavor that states its limits gets up to them, and no further.
    h.env
        .kf(&[
            "flavor",
            "create",
            &limited,
            "--max-ttl",
            "48h",
            "--max-nodes-limit",
            "5",
            "--allow-never-expiring",
        ])
        .await
        .expect_ok();
    let (code, minted) = post(
        &api,
        &limited,
        &portal,
        br#"{"issuedTo": "acme-corp/alice", "ttl": "48h", "maxNodes": 5}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    assert_eq!(minted["maxNodes"], 5);
    let (code, never) = post(
        &api,
        &limited,
        &portal,
        br#"{"issuedTo": "acme-corp/alice", "ttl": "0"}"#,
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{never}");
    assert_eq!(causes(&never)[0].0, "ttl", "{never}");
    let (code, over) = post(
        &api,
        &limited,
        &portal,
        br#"{"issuedTo": "acme-corp/alice", "ttl": "49h", "maxNodes": 6}"#,
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{over}");
    let messages: Vec<String> = causes(&over).into_iter().map(|c| c.2).collect();
    assert!(
        messages[0].contains("48h") && messages[1].contains('5'),
        "{over}"
    );
    assert_eq!(tokens_of(&h, &limited).await.len(), 1, "one minted");
    assert_eq!(tokens_of(&h, &plain).await.len(), 1, "one minted");
}

/// Custody text must read as it shows, and a body must say one thing: an issuedTo with a
/// text-direction override or another invisible character is a 422 naming the character;
/// a body repeating a key (at any depth, whichever copy would have won) is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_custody_text_and_repeated_keys_are_refused() {
    let h = Harness::start().await;
    let sour = h.gold_flavor("sour").await;
    let portal = portal(&h, &[&sour]).await;
    let api = start_api(&h).await;

    for (body, code_point) in [
        (&br#"{"issuedTo": "eve\u202eecila"}"#[..], "U+202E"),
        (br#"{"issuedTo": "\u2066acme\u2069/alice"}"#, "U+2066"),
        (br#"{"issuedTo": "al\u200bice"}"#, "U+200B"),
        (br#"{"issuedTo": "alice\u2028bob"}"#, "U+2028"),
        (br#"{"issuedTo": "\ufeffalice"}"#, "U+FEFF"),
    ] {
        let (code, answer) = post(&api, &sour, &portal, body).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        let causes = causes(&answer);
        assert_eq!(causes.len(), 1, "{answer}");
        assert_eq!(causes[0].0, "issuedTo", "{answer}");
        assert!(causes[0].2.contains(code_point), "{answer}");
    }
    for (body, key) in [
        (
            &br#"{"issuedTo": "acme-corp/alice", "issuedTo": "mallory"}"#[..],
            "issuedTo",
        ),
        (
            br#"{"issuedTo": "acme-corp/alice", "ttl": "1h", "ttl": "0"}"#,
            "ttl",
        ),
        (br#"{"issuedTo": "a", "x": {"k": 1, "k": 2}}"#, "x.k"),
    ] {
        let (code, answer) = post(&api, &sour, &portal, body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["reason"], "BadRequest", "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("{key:?}"))),
            "{answer}"
        );
        assert_eq!(
            causes(&answer),
            [(
                key.to_string(),
                "FieldValueDuplicate".to_string(),
                "the key appears more than once".to_string()
            )],
            "{answer}"
        );
    }
    assert!(tokens_of(&h, &sour).await.is_empty(), "nothing minted");
}
