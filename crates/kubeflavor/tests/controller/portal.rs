//! The node administrators' web portal in a real browser (Debian's headless Chromium over
//! WebDriver), signing in through the real identity provider's login page (glewlwyd, see
//! `support::oidc`): sign in, describe the node, a bad key refused beside its field, the
//! token shown once, the seed image downloaded and read back, "My nodes", sign-out; and
//! the page attacked from outside the browser: forms without the session's CSRF token or
//! from another origin, a forged or planted session cookie, markup in every field,
//! oversized bodies.
//!
//! With `KUBEFLAVOR_E2E_SCREENSHOTS=<dir>` the test saves a screenshot of each page there
//! (the README's are made this way).

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::Locator;
use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeflavor::serve::Administrators;
use kubeflavor::serve::oidc::{IssuerConfig, Verifier};
use kubeflavor_cluster::crd::roster::Roster;
use kubeflavor_core::flavor::input_labels::INPUT_LABELS_ANNOTATION;
use kubeflavor_core::portal::SESSION_COOKIE;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::IDENTITY_SUBJECT_ANNOTATION;
use serde_json::json;

use crate::administrators::roots;
use crate::harness::*;
use crate::input_labels::sited_flavor;
use crate::support::browser::Browser;
use crate::support::https::{HttpsClient, serve_portal};
use crate::support::oidc::Provider;

const ED25519_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5Hh8Xq5u8lPq5dL0K0Jg9p5pJzqfTfYqzv3vjv2yJ+ alice@laptop";

/// A running portal, stopped when dropped.
struct RunningPortal {
    origin: String,
    client: HttpsClient,
    keys_file: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Holds the key file's folder.
    _server: crate::support::https::PortalServer,
}

impl Drop for RunningPortal {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The API with its portal, signing in with the provider's first issuer, deciding with
/// `roster`.
async fn start_portal(h: &Harness, provider: &Provider, roster: &str) -> RunningPortal {
    let verifier = Verifier::new(
        vec![IssuerConfig {
            issuer: provider.issuer.clone(),
            audience: provider.client_id.clone(),
        }],
        "groups".into(),
        roots(provider),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = serve_portal(
        &h.env.kubeconfig,
        &h.name("serve-portal"),
        Arc::new(Administrators::new(verifier, roster.to_string())),
        (&provider.issuer, &provider.client_secret),
        async {
            let _ = rx.await;
        },
    )
    .await
    .expect("the portal serves");
    RunningPortal {
        origin: server.origin.clone(),
        client: server.client.clone(),
        keys_file: server.keys_file.clone(),
        stop: Some(tx),
        _server: server,
    }
}

/// A Roster of this run: alice's group gets `sited`; its tokens may carry `site`.
async fn roster(h: &Harness, provider: &Provider, sited: &str) -> String {
    let name = h.name("portal-roster");
    let roster: Roster = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Roster",
        "metadata": {"name": name},
        "spec": {
            "rules": [
                {"name": "sweet-admins", "issuer": provider.issuer, "group": "sweet-admins", "flavor": sited},
            ],
            "tokenDefaults": {"ttl": "2h"},
            "inputLabels": {"keys": [{"key": "site", "values": ["berlin", "paris"]}]},
        },
    }))
    .expect("a Roster");
    Api::<Roster>::all(h.admin.clone())
        .create(&PostParams::default(), &roster)
        .await
        .expect("Roster created");
    name
}

fn screenshots() -> Option<PathBuf> {
    std::env::var_os("KUBEFLAVOR_E2E_SCREENSHOTS").map(PathBuf::from)
}

/// Clicks what `locator` finds on the page.
async fn click(c: &fantoccini::Client, locator: Locator<'_>) {
    c.find(locator)
        .await
        .unwrap_or_else(|e| panic!("{locator:?} is not on the page: {e}"))
        .click()
        .await
        .expect("click");
}

/// The session cookie the browser holds, as a `Cookie` header value.
async fn session_cookie(browser: &Browser) -> String {
    let cookie = browser
        .client
        .get_named_cookie(SESSION_COOKIE)
        .await
        .expect("the session cookie");
    format!("{}={}", cookie.name(), cookie.value())
}

/// The value of the hidden `csrf` field of the page's first form.
async fn csrf_of_page(browser: &Browser) -> String {
    browser
        .client
        .find(Locator::Css("input[name='csrf']"))
        .await
        .expect("a CSRF field")
        .attr("value")
        .await
        .expect("its value")
        .expect("a value")
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_signs_in_describes_the_node_and_downloads_its_seed_image() {
    let provider = Provider::shared();
    let h = Harness::start().await;
    let sited = sited_flavor(&h, "sited").await;
    let roster = roster(&h, provider, &sited).await;
    let portal = start_portal(&h, provider, &roster).await;
    let browser = Browser::start().await;
    let c = &browser.client;
    // The machine's name: this run's own (a real cluster is shared).
    let host = h.name("edge");

    // Signed out: the landing page, with the headers every portal page carries.
    let (code, headers, body) = portal.client.send(Method::GET, "/", &[], b"").await;
    assert_eq!(code, StatusCode::OK);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'")
            && csp.contains("form-action 'self'")
            && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["cache-control"], "no-store");
    assert!(String::from_utf8_lossy(&body).contains("href=\"/signin\""));
    // A planted session (a value the portal never sealed) is no session.
    let (_, _, body) = portal
        .client
        .send(
            Method::GET,
            "/",
            &[("cookie", &format!("{SESSION_COOKIE}=planted"))],
            b"",
        )
        .await;
    assert!(String::from_utf8_lossy(&body).contains("Your session has ended"));

    // The provider's answer must belong to a sign-in this browser started: without the
    // sign-in cookie, or with another `state`, nothing is redeemed (login CSRF).
    let (code, headers, _) = portal.client.send(Method::GET, "/signin", &[], b"").await;
    assert_eq!(code, StatusCode::SEE_OTHER);
    let started = headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("__Host-kubeflavor-sign-in="))
        .and_then(|v| v.split(';').next())
        .expect("a sign-in cookie")
        .to_string();
    for (cookie, why) in [
        (None, "not started here"),
        (Some(started.as_str()), "does not belong to this sign-in"),
    ] {
        let mut headers = vec![];
        if let Some(c) = cookie {
            headers.push(("cookie", c));
        }
        let (code, _, body) = portal
            .client
            .send(
                Method::GET,
                "/callback?code=stolen&state=other",
                &headers,
                b"",
            )
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(String::from_utf8_lossy(&body).contains(why), "{why}");
    }

    let password = provider
        .env("KUBEFLAVOR_OIDC_PASSWORD_SUFFIX")
        .unwrap_or("-password");
    browser
        .sign_in(
            &portal.origin,
            "alice",
            &format!("alice{password}"),
            screenshots().as_deref(),
        )
        .await;
    browser
        .screenshot(screenshots().as_deref(), "2-describe-the-node")
        .await;

    // The session cookie: Secure, HttpOnly, SameSite, host-only.
    let cookie = c
        .get_named_cookie(SESSION_COOKIE)
        .await
        .expect("a session cookie");
    assert_eq!(cookie.secure(), Some(true));
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(format!("{:?}", cookie.same_site()), "Some(Lax)");
    assert_eq!(cookie.path(), Some("/"));
    // The form offers the roster's input labels (the same for every flavor).
    let offered: Vec<String> = {
        let select = c
            .find(Locator::Id("label-site"))
            .await
            .expect("the site field");
        let mut values = Vec::new();
        for option in select.find_all(Locator::Css("option")).await.unwrap() {
            values.push(option.attr("value").await.unwrap().unwrap_or_default());
        }
        values
    };
    assert_eq!(offered, ["", "berlin", "paris"]);

    // Keys rotate without signing anyone out: a new key on top, the old one kept.
    let old_keys = std::fs::read_to_string(&portal.keys_file).unwrap();
    let new_key = kubeflavor_core::portal::seal::SealingKeys::new_key_line().unwrap();
    std::fs::write(&portal.keys_file, format!("{}\n{old_keys}", &*new_key)).unwrap();
    c.refresh().await.unwrap();
    browser
        .wait_for(
            "still signed in after the rotation",
            Locator::Css("form[action='/tokens']"),
        )
        .await;
    // Readable on a phone: nothing wider than a phone's screen.
    let desktop = c.get_window_rect().await.unwrap();
    c.set_window_size(390, 844).await.unwrap();
    let overflow = c
        .execute(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        overflow.as_i64().unwrap_or(1) <= 0,
        "the page is {overflow} px wider than a phone"
    );
    browser
        .screenshot(screenshots().as_deref(), "2b-on-a-phone")
        .await;
    c.set_window_size(desktop.2 as u32, desktop.3 as u32)
        .await
        .unwrap();

    // A bad key: refused beside its field, what was typed kept.
    c.find(Locator::Id("hostname"))
        .await
        .unwrap()
        .send_keys(&host)
        .await
        .unwrap();
    c.find(Locator::Id("sshAuthorizedKeys"))
        .await
        .unwrap()
        .send_keys("ssh-ed25519 not-a-key")
        .await
        .unwrap();
    click(c, Locator::Css("button[type='submit']:not(.secondary)")).await;
    let error = browser
        .wait_for("the key's error", Locator::Id("sshAuthorizedKeys-error"))
        .await;
    assert!(
        error.text().await.unwrap().starts_with("line 1:"),
        "{}",
        error.text().await.unwrap()
    );
    assert_eq!(
        c.find(Locator::Id("sshAuthorizedKeys"))
            .await
            .unwrap()
            .attr("aria-invalid")
            .await
            .unwrap()
            .as_deref(),
        Some("true")
    );
    assert_eq!(
        c.find(Locator::Id("hostname"))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap()
            .as_deref(),
        Some(host.as_str())
    );
    browser
        .screenshot(screenshots().as_deref(), "3-a-bad-key")
        .await;
    assert!(
        Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
            .list(&ListParams::default().labels(&format!("kubeflavor.io/flavor={sited}")))
            .await
            .unwrap()
            .items
            .is_empty(),
        "a refused form mints nothing"
    );

    // A good one: the token, once, with how long it is valid.
    let keys = c.find(Locator::Id("sshAuthorizedKeys")).await.unwrap();
    keys.clear().await.unwrap();
    keys.send_keys(ED25519_KEY).await.unwrap();
    click(c, Locator::Css("#label-site option[value='paris']")).await;
    click(c, Locator::Css("button[type='submit']:not(.secondary)")).await;
    let shown = browser
        .wait_for("the token page", Locator::Css("pre.secret"))
        .await;
    let join_line = shown.text().await.unwrap();
    let token: BootstrapToken = join_line
        .split_whitespace()
        .skip_while(|w| *w != "--token")
        .nth(1)
        .expect("a --token")
        .parse()
        .expect("a bootstrap token");
    let page = c.source().await.unwrap();
    assert!(
        page.contains("valid until"),
        "the page says how long the token is valid"
    );
    assert!(!page.contains(&sited), "the page never names the flavor");
    browser
        .screenshot(screenshots().as_deref(), "4-the-join-token")
        .await;

    // Custody: the signed-in identity, the roster's flavor, the chosen label.
    let secret = Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
        .get(&format!("bootstrap-token-{}", token.id()))
        .await
        .expect("the token Secret");
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(IDENTITY_SUBJECT_ANNOTATION)
            .map(String::as_str),
        Some("kf-sub-alice")
    );
    assert_eq!(
        secret
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("kubeflavor.io/flavor"),
        Some(&sited)
    );
    assert_eq!(
        annotations.get(INPUT_LABELS_ANNOTATION).map(String::as_str),
        Some(r#"{"site":"paris"}"#)
    );

    // The seed image: a CIDATA FAT volume whose user-data joins with the token and
    // installs the key, and whose meta-data names the machine.
    click(
        c,
        Locator::XPath("//button[text()='Download the seed image']"),
    )
    .await;
    let mut image = browser
        .downloaded(&format!("{host}-seed.img"), Duration::from_secs(30))
        .await;
    {
        let fs = fatfs::FileSystem::new(
            std::io::Cursor::new(&mut image[..]),
            fatfs::FsOptions::new(),
        )
        .expect("a FAT volume");
        assert_eq!(fs.volume_label().trim(), "CIDATA");
        let read = |name: &str| {
            let mut text = String::new();
            fs.root_dir()
                .open_file(name)
                .expect(name)
                .read_to_string(&mut text)
                .unwrap();
            text
        };
        let user_data = read("user-data");
        assert!(user_data.starts_with("#cloud-config\n"));
        assert!(
            user_data.contains(token.expose().as_str()),
            "the user-data carries the token"
        );
        assert!(
            user_data.contains(ED25519_KEY.split_whitespace().nth(1).unwrap()),
            "and the key"
        );
        let meta = read("meta-data");
        assert!(meta.contains(&format!("local-hostname: {host}")), "{meta}");
    }
    c.find(Locator::XPath(
        "//button[text()='Download the cloud-init user-data']",
    ))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    let user_data = browser
        .downloaded(&format!("{host}-user-data.yaml"), Duration::from_secs(30))
        .await;
    assert!(String::from_utf8_lossy(&user_data).contains(token.expose().as_str()));

    // Attacks from outside the browser, with the browser's own session cookie.
    let session = session_cookie(&browser).await;
    let csrf = csrf_of_page(&browser).await;
    let post = |fields: Vec<(&'static str, String)>, extra: Vec<(&'static str, String)>| {
        let session = session.clone();
        let client = portal.client.clone();
        async move {
            let body = form(
                &fields
                    .iter()
                    .map(|(k, v)| (*k, v.as_str()))
                    .collect::<Vec<_>>(),
            );
            let mut headers = vec![
                ("cookie", session),
                (
                    "content-type",
                    "application/x-www-form-urlencoded".to_string(),
                ),
            ];
            headers.extend(extra);
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            client
                .send(Method::POST, "/tokens", &headers, body.as_bytes())
                .await
        }
    };
    let minted_before = tokens_minted(&h, &sited).await;
    // No CSRF token; another session's token; the right token from another origin.
    let (code, _, _) = post(vec![("hostname", "x".into())], vec![]).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "a form without the CSRF token");
    let (code, _, _) = post(vec![("csrf", "AAAA".into())], vec![]).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "a wrong CSRF token");
    let (code, _, _) = post(
        vec![("csrf", csrf.clone())],
        vec![("origin", "https://evil.example".into())],
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "another origin");
    let (code, _, _) = post(
        vec![("csrf", csrf.clone())],
        vec![("sec-fetch-site", "cross-site".into())],
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "a cross-site post");
    // Markup in every field: refused or escaped, never rendered.
    let xss = "\"><script>alert(1)</script>";
    let (code, _, body) = post(
        vec![
            ("csrf", csrf.clone()),
            ("hostname", xss.into()),
            ("label.site", xss.into()),
            ("sshAuthorizedKeys", xss.into()),
        ],
        vec![("origin", portal.origin.clone())],
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let body = String::from_utf8_lossy(&body);
    assert!(!body.contains("<script>"), "markup is escaped:\n{body}");
    assert!(body.contains("&lt;script&gt;"), "and shown as typed");
    // An oversized body: refused from its declared length, before it is read.
    let (code, _, _) = post(
        vec![("csrf", csrf.clone())],
        vec![("content-length", (10 * 1024 * 1024).to_string())],
    )
    .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    // A download ticket changed by a byte is not a download.
    let (code, _, _) = portal
        .client
        .send(
            Method::POST,
            "/download",
            &[
                ("cookie", &session),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            form(&[
                ("csrf", &csrf),
                ("ticket", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
                ("what", "seed-image"),
            ])
            .as_bytes(),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(
        tokens_minted(&h, &sited).await,
        minted_before,
        "no attack minted a token"
    );

    // My nodes: the node that joins with the token appears, under its name.
    let ctl = h.start_controller(h.options("ctl"));
    let boot = h.bootstrap_client(&token).await;
    h.submit_csr(&boot, &host, &host).await;
    assert_eq!(h.decision(&host).await, "Approved");
    c.goto(&format!("{}/nodes", portal.origin)).await.unwrap();
    let table = browser
        .wait_for("my nodes", Locator::Css("table tbody"))
        .await;
    let rows = table.text().await.unwrap();
    assert!(rows.contains(&host) && rows.contains("not yet"), "{rows}");
    // Its Node registers and the controller sees it: registered.
    h.register_node(&host, &host, &[], &[]).await;
    h.binding_until(&host, "flavored", |b| b.is_flavored())
        .await;
    c.refresh().await.unwrap();
    let table = browser
        .wait_for("my nodes", Locator::Css("table tbody"))
        .await;
    let rows = table.text().await.unwrap();
    assert!(rows.contains(&host) && rows.ends_with("yes"), "{rows}");
    assert!(
        !c.source().await.unwrap().contains(&sited),
        "never the flavor"
    );
    browser
        .screenshot(screenshots().as_deref(), "5-my-nodes")
        .await;
    drop(ctl);

    // Sign out: the landing page, and the browser holds no session.
    click(c, Locator::Css("header button")).await;
    browser
        .wait_for("signed out", Locator::LinkText("Sign in"))
        .await;
    assert!(c.source().await.unwrap().contains("You have signed out"));
    assert!(
        c.get_named_cookie(SESSION_COOKIE).await.is_err(),
        "the session cookie is gone"
    );
    c.goto(&format!("{}/nodes", portal.origin)).await.unwrap();
    assert!(c.source().await.unwrap().contains("href=\"/signin\""));
    // The old key removed (a session lifetime after the rotation): what it sealed no
    // longer opens, so a session from before the rotation has ended.
    std::fs::write(&portal.keys_file, format!("{}\n", &*new_key)).unwrap();
    let (_, _, body) = portal
        .client
        .send(Method::GET, "/", &[("cookie", &session)], b"")
        .await;
    assert!(String::from_utf8_lossy(&body).contains("Your session has ended"));
    browser.close().await;
}

/// The token Secrets of `flavor`.
async fn tokens_minted(h: &Harness, flavor: &str) -> usize {
    Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
        .list(&ListParams::default().labels(&format!("kubeflavor.io/flavor={flavor}")))
        .await
        .expect("list Secrets")
        .items
        .len()
}
