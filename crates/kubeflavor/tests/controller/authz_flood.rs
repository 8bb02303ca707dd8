//! P7 under a connection flood: connections that send one byte of a
//! TLS record, or nothing, need no credential, and the revoked node itself can open them.
//! While thousands are held and renewed, the API server still gets the webhook's answer:
//! the revoked node's requests are refused 403 with the webhook's reason, and a fresh
//! connection presenting the API server's client certificate is answered.
//!
//! The flood comes from a few loopback addresses other than the API server's (127.0.0.1),
//! as a flooding node's would: each address holds at most its share of the webhook's
//! pending handshakes and pushes out only its own. Runs on testkube and on the real
//! control plane (whose one webhook port allows one such test binary at a time).
//!
//! And a replica cut off from the API server: once its index has not
//! been confirmed current for `max_staleness`, it answers 503 rather than from what it
//! knew, and answers again once its watches have listed anew.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;
use kubeflavor_core::node::cutoff::CutOff;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::authz::{Webhook, assert_cut_off, real_pki, test_pki};
use crate::harness::*;

/// Half-open connections held before the checks start.
const HELD: usize = 3000;
/// The flood's source addresses (none is the API server's).
const SOURCES: u8 = 8;
/// While the checks run, waves of this many new connections replace the oldest ones.
const WAVE: usize = 500;
/// Checks made under the flood: each a request of the revoked node through the API
/// server and a review over a fresh connection.
const ROUNDS: usize = 10;

/// What the API server presents to the webhook, and the CA of the webhook's certificate.
struct ApiServerIdentity {
    server_ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

/// A connection from `127.0.1.<source>` that sends the first byte of a TLS record and then
/// nothing; `None` when the connection could not be made (the flood goes on without it).
async fn half_open(to: SocketAddr, source: u8) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(([127, 0, 1, source], 0).into()).ok()?;
    let mut tcp = socket.connect(to).await.ok()?;
    tcp.write_all(&[0x16]).await.ok()?;
    Some(tcp)
}

async fn flood(to: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let source = 1 + (i % usize::from(SOURCES)) as u8;
        held.extend(half_open(to, source).await);
    }
    held
}

/// A SubjectAccessReview about `node` over a new connection with the API server's client
/// certificate: the answer's JSON and how long the connection and answer took.
async fn review_over_fresh_connection(
    id: &ApiServerIdentity,
    to: SocketAddr,
    node: &str,
) -> Result<(Value, Duration), String> {
    let started = Instant::now();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(id.server_ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(id.cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    let tcp = TcpStream::connect(to).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::from(to.ip()), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": format!("system:node:{node}"), "groups": ["system:nodes", "system:authenticated"],
                 "resourceAttributes": {"verb": "get", "resource": "nodes", "name": node}},
    });
    let request = hyper::Request::post(kubeflavor::authz::PATH)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(review.to_string())))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let answer = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Ok((answer, started.elapsed()))
}

fn real_identity(kubeconfig: &Path) -> ApiServerIdentity {
    let pki = real_pki(kubeconfig);
    let dir = pki.client_ca.parent().expect("a folder").to_path_buf();
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| {
            panic!(
                "{name} in {}: {e} (the API server's client certificate for the webhook)",
                dir.display()
            )
        })
    };
    ApiServerIdentity {
        server_ca_pem: read("ca.crt"),
        cert_pem: read("apiserver-authz-client.crt"),
        key_pem: read("apiserver-authz-client.key"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_never_lets_a_revoked_node_through() {
    let h = Harness::start_serial().await;
    let dir = tempfile::tempdir().unwrap();
    let (webhook, port, id) = match h.testkube() {
        Some(tk) => {
            let (pki, mut config) = test_pki(dir.path());
            let (webhook, port) = Webhook::start(h.admin.clone(), &pki).await;
            config.url = format!("https://127.0.0.1:{port}/authorize");
            let id = ApiServerIdentity {
                server_ca_pem: config.ca_pem.clone(),
                cert_pem: config.client_cert_pem.clone(),
                key_pem: config.client_key_pem.clone(),
            };
            tk.set_authorization_webhook(Some(config));
            (webhook, port, id)
        }
        None => {
            let pki = real_pki(&h.env.kubeconfig);
            let (webhook, port) = Webhook::start(h.admin.clone(), &pki).await;
            (webhook, port, real_identity(&h.env.kubeconfig))
        }
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    let ctl = h.start_controller(h.options("ctl"));
    let (csr, node) = joined_node(&h, "flood", "authz-flood").await;
    let kubelet = h.node_client(&csr).await;
    h.env.kf(&["node", "revoke", &node]).await.expect_ok();
    webhook
        .until_cut_off(&node, Some(CutOff::BindingRevoked))
        .await;

    // The flood: thousands held, then renewed in waves for as long as the checks run.
    let held = flood(addr, HELD).await;
    eprintln!("flood: {} of {HELD} connections opened", held.len());
    assert!(held.len() > HELD / 2, "the flood could not be opened");
    let stop = Arc::new(AtomicBool::new(false));
    let renewing = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut waves = 0usize;
            let mut previous = held;
            // Bounded: at most 200 waves, however long the checks take.
            while !stop.load(Ordering::Relaxed) && waves < 200 {
                let next = flood(addr, WAVE).await;
                previous.drain(..next.len().min(previous.len()));
                previous.extend(next);
                waves += 1;
            }
            waves
        }
    });

    let nodes = Api::<Node>::all(kubelet.clone());
    let denied_before = webhook.answers("denied_revoked");
    let mut fresh = Vec::new();
    for round in 0..ROUNDS {
        assert_cut_off(
            &format!("get its Node under the flood (round {round})"),
            &node,
            nodes.get(&node).await,
        );
        let (answer, took) = within(
            "a review over a fresh connection under the flood",
            review_over_fresh_connection(&id, addr, &node),
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: the API server's new connection failed: {e}"));
        assert_eq!(answer["status"]["denied"], true, "{answer}");
        fresh.push(took);
    }
    stop.store(true, Ordering::Relaxed);
    let waves = renewing.await.unwrap();
    fresh.sort();
    eprintln!(
        "under a flood of {HELD} held and {waves} waves of {WAVE} new half-open connections from {SOURCES} sources: \
         {ROUNDS}/{ROUNDS} refusals through the API server, fresh API-server connections answered in {:?} (median) / {:?} (max)",
        fresh[fresh.len() / 2],
        fresh[fresh.len() - 1]
    );
    assert!(
        webhook.answers("denied_revoked") >= denied_before + 2 * ROUNDS as u64,
        "each refusal was the webhook's"
    );

    h.delete_revoked_binding(&node).await;
    let _ = Api::<Node>::all(h.admin.clone())
        .delete(&node, &DeleteParams::default())
        .await;
    if let Some(tk) = h.testkube() {
        tk.set_authorization_webhook(None);
    }
    ctl.stop().await;
    webhook.stop().await;
}

/// A TCP relay between the webhook's client and the API server that a test can cut (as a
/// partition would: every open connection dropped, new ones closed at once) and restore.
struct Relay {
    port: u16,
    open: Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(tokio::sync::watch::Sender::new(true));
        let task = tokio::spawn({
            let open = open.clone();
            async move {
                loop {
                    let Ok((mut down, _)) = listener.accept().await else {
                        return;
                    };
                    if !*open.borrow() {
                        continue;
                    }
                    let mut cut = open.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut up) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                            _ = cut.wait_for(|open| !*open) => {}
                        }
                    });
                }
            }
        });
        Relay { port, open, task }
    }

    fn cut(&self) {
        self.open.send_replace(false);
    }

    fn restore(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The admin kubeconfig with its server's port replaced by `port` (same host, so the
/// serving certificate still matches).
fn through(kubeconfig: &Path, port: u16) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        match line.trim_start().strip_prefix("server: ") {
            Some(url) => {
                let (head, _) = url.rsplit_once(':').expect("a server URL with a port");
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push_str(&format!("{indent}server: {head}:{port}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The API server's address in the admin kubeconfig.
fn api_server_addr(kubeconfig: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let url = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server: "))
        .expect("a server");
    let hostport = url.trim_start_matches("https://").trim_end_matches('/');
    let (host, port) = hostport.rsplit_once(':').unwrap();
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{port}")
        .parse()
        .expect("an IP address and port")
}

/// Reviews over fresh connections every 100 ms (a measurement, 300 tries at most) until
/// `done` holds of one; how long that took.
async fn until_answer(
    id: &ApiServerIdentity,
    to: SocketAddr,
    node: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Duration {
    let started = Instant::now();
    let mut every = tokio::time::interval(Duration::from_millis(100));
    for _ in 0..300 {
        every.tick().await;
        if let Ok((answer, _)) = review_over_fresh_connection(id, to, node).await
            && done(&answer)
        {
            return started.elapsed();
        }
    }
    panic!("{what}: not within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_api_server_stops_answering_from_its_index() {
    let h = Harness::start_serial().await;
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(api_server_addr(&h.env.kubeconfig)).await;
    let relayed = client_from(&through(&h.env.kubeconfig, relay.port)).await;
    let (webhook, port, id) = match h.testkube() {
        Some(_) => {
            let (pki, config) = test_pki(dir.path());
            let (webhook, port) = Webhook::start(relayed, &pki).await;
            let id = ApiServerIdentity {
                server_ca_pem: config.ca_pem.clone(),
                cert_pem: config.client_cert_pem.clone(),
                key_pem: config.client_key_pem.clone(),
            };
            (webhook, port, id)
        }
        None => {
            let pki = real_pki(&h.env.kubeconfig);
            let (webhook, port) = Webhook::start(relayed, &pki).await;
            (webhook, port, real_identity(&h.env.kubeconfig))
        }
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let ctl = h.start_controller(h.options("ctl"));
    let (_, node) = joined_node(&h, "stale", "authz-stale").await;
    h.env.kf(&["node", "revoke", &node]).await.expect_ok();
    webhook
        .until_cut_off(&node, Some(CutOff::BindingRevoked))
        .await;
    let denied = |a: &Value| a["status"]["denied"] == true;
    let stale = |a: &Value| {
        a["code"] == 503
            && a["message"]
                .as_str()
                .is_some_and(|m| m.contains("last confirmed current"))
    };
    let (answer, _) = review_over_fresh_connection(&id, addr, &node)
        .await
        .unwrap();
    assert!(denied(&answer), "{answer}");

    // The partition: the replica's watches and probes fail.
    relay.cut();
    let went_stale = until_answer(&id, addr, &node, "a 503 stale answer", stale).await;
    eprintln!(
        "replica cut off from the API server: answers 503 stale {went_stale:?} after the cut (bound 3 s)"
    );
    assert!(
        went_stale <= Duration::from_secs(3) + 2 * kubeflavor::authz::freshness::PROBE_EVERY,
        "past the bound plus a probe's period and timeout: {went_stale:?}"
    );
    assert!(webhook.answers("stale") > 0);

    // The partition heals: the watches list anew and the replica answers again.
    relay.restore();
    let back = until_answer(&id, addr, &node, "the denial again", denied).await;
    eprintln!("partition healed: the replica denies the revoked node again {back:?} later");

    h.delete_revoked_binding(&node).await;
    let _ = Api::<Node>::all(h.admin.clone())
        .delete(&node, &DeleteParams::default())
        .await;
    ctl.stop().await;
    webhook.stop().await;
}

/// A node of this run (`base`) joined with a token of a new Flavor (`flavor`), approved
/// and registered (a controller runs); its CSR's name and its own.
async fn joined_node(h: &Harness, flavor: &str, base: &str) -> (String, String) {
    let f = h.gold_flavor(flavor).await;
    let node = h.name(base);
    let t = h.token(&f, 1, None).await;
    let boot = h.bootstrap_client(&t).await;
    let csr = format!("{node}-csr");
    h.submit_csr(&boot, &csr, &node).await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.register_node(&csr, &node, &[], &[]).await;
    (csr, node)
}
