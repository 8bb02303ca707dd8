//! bench_authz: how fast the authorization webhook answers, per answer kind.
//!
//!     cargo run --release -p kubeflavor --example bench_authz -- --bindings 100000 --parallel 64
//!
//! Fills the webhook's in-memory index with N FlavorBindings (one in --revoked-every
//! revoked), serves it in-process over TLS with a client certificate required (as
//! `kubeflavor controller --authz-*` does), and runs P API-server-like clients, each on one
//! keep-alive HTTP/1.1 connection with its client certificate, posting SubjectAccessReview
//! v1 bodies as kube-apiserver's webhook authorizer does: a revoked node, a node not
//! revoked, or a user that is not a node, in turn. Prints p50/p99/max per answer kind as
//! the client saw it, and answers per second. Asserts nothing.
//!
//! With `--flood N`, a flood runs meanwhile: N connections that send one byte of a TLS
//! record and nothing more, renewed as fast as one task can open them (each new one
//! replaces the oldest), from `--flood-sources` loopback addresses (127.0.1.x; with 1, the
//! same count of sources as a single flooding node). A prober opens a fresh connection
//! with the API server's client certificate every 20 ms and asks one review, as the API
//! server does when it must open a new connection: its success rate and latency are the
//! residual window of README's P7.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use kube::runtime::watcher::Event;
use kubeflavor::authz::index::{CutOffIndex, Mark};
use kubeflavor::authz::metrics::AuthzMetrics;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "../tests/support/webhook_pki.rs"]
mod webhook_pki;

/// bench_authz: answers per second of the authorization webhook, by kind.
#[derive(Debug, Parser)]
#[command(
    name = "bench_authz",
    after_help = "Run: cargo run --release -p kubeflavor --example bench_authz -- --bindings 100000"
)]
struct Args {
    /// FlavorBindings in the index.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = args::at_least_one)]
    bindings: usize,
    /// One binding in this many is revoked.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = args::at_least_one)]
    revoked_every: usize,
    /// Clients asking at once, each on its own connection.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = args::at_least_one)]
    parallel: usize,
    /// Seconds to measure.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    seconds: u64,
    /// Half-open connections held and renewed meanwhile (0: no flood).
    #[arg(long, value_name = "N", default_value_t = 0)]
    flood: usize,
    /// Loopback source addresses the flood comes from.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = args::at_least_one)]
    flood_sources: usize,
    /// Tasks opening the flood's connections at once (each holds its share of --flood).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = args::at_least_one)]
    flood_tasks: usize,
}

/// Holds `n` half-open connections to `addr`, each new one replacing the oldest, until
/// `until`; how many it opened.
async fn flood(addr: std::net::SocketAddr, n: usize, sources: usize, until: Instant) -> usize {
    use tokio::io::AsyncWriteExt;
    let mut held = std::collections::VecDeque::with_capacity(n);
    let mut opened = 0usize;
    while Instant::now() < until {
        let source = 1 + (opened % sources.min(250)) as u8;
        opened += 1;
        let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
            continue;
        };
        if socket.bind(([127, 0, 1, source], 0).into()).is_err() {
            continue;
        }
        let Ok(Ok(mut tcp)) =
            tokio::time::timeout(Duration::from_secs(1), socket.connect(addr)).await
        else {
            continue;
        };
        let _ = tcp.write_all(&[0x16]).await;
        held.push_back(tcp);
        if held.len() > n {
            held.pop_front();
        }
    }
    opened
}

/// Every 20 ms until `until`, a fresh connection and one review: the time each took, or
/// `None` when it failed or took over 2 s (the API server's timeout).
async fn prober(
    addr: std::net::SocketAddr,
    tls: tokio_rustls::TlsConnector,
    until: Instant,
) -> Vec<Option<Duration>> {
    let mut out = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(20));
    while Instant::now() < until {
        every.tick().await;
        let started = Instant::now();
        let one = async {
            let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
            let stream = tls.connect(ServerName::from(addr.ip()), tcp).await.ok()?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .ok()?;
            tokio::spawn(conn);
            let request = hyper::Request::post("/authorize")
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(review("system:node:node-0", &["system:nodes"])))
                .ok()?;
            let response = sender.send_request(request).await.ok()?;
            let ok = response.status().is_success();
            let _ = response.into_body().collect().await.ok()?;
            ok.then_some(())
        };
        let answered = tokio::time::timeout(Duration::from_secs(2), one).await;
        out.push(matches!(answered, Ok(Some(()))).then(|| started.elapsed()));
    }
    out
}

const CLIENT_CN: &str = "kube-apiserver-authz-client";

fn pki() -> webhook_pki::WebhookPki {
    webhook_pki::webhook_pki("bench-ca", vec!["127.0.0.1".into()], CLIENT_CN)
}

fn index_of(bindings: usize, revoked_every: usize) -> CutOffIndex {
    let index = CutOffIndex::default();
    index.apply(Mark::Binding, Event::Init);
    for i in 0..bindings {
        let event = Event::InitApply((format!("node-{i}"), i % revoked_every == 0));
        index.apply(Mark::Binding, event);
    }
    index.apply(Mark::Binding, Event::InitDone);
    index.apply(Mark::Node, Event::Init);
    index.apply(Mark::Node, Event::InitDone);
    index.apply_list(Event::Init);
    index.apply_list(Event::InitDone);
    index
}

/// The review kube-apiserver sends for a kubelet's `get node`.
fn review(user: &str, groups: &[&str]) -> Bytes {
    Bytes::from(
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": {
                "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes", "name": user},
                "user": user,
                "groups": groups,
            },
            "status": {"allowed": false},
        })
        .to_string(),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

type Samples = BTreeMap<String, Vec<Duration>>;

async fn client(
    addr: std::net::SocketAddr,
    tls: tokio_rustls::TlsConnector,
    args: Arc<Args>,
    n: usize,
    until: Instant,
) -> Samples {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let stream = tls
        .connect(ServerName::from(addr.ip()), tcp)
        .await
        .expect("TLS");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1");
    tokio::spawn(conn);
    let mut samples = Samples::new();
    let nodes = ["system:nodes", "system:authenticated"];
    let mut i = n;
    while Instant::now() < until {
        i += args.parallel;
        let body = match i % 3 {
            // A revoked node: names node-0, node-<k * revoked_every>.
            0 => review(
                &format!(
                    "system:node:node-{}",
                    (i * args.revoked_every) % args.bindings
                ),
                &nodes,
            ),
            1 => review(
                &format!(
                    "system:node:node-{}",
                    (i * args.revoked_every + 1) % args.bindings
                ),
                &nodes,
            ),
            _ => review("jane", &["system:authenticated"]),
        };
        let request = hyper::Request::post("/authorize")
            .header(hyper::header::HOST, addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("request");
        let started = Instant::now();
        let response = sender.send_request(request).await.expect("answered");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let took = started.elapsed();
        let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let kind = match (status.as_u16(), answer["status"]["denied"].as_bool()) {
            (200, Some(true)) => "denied_revoked".to_string(),
            (200, _) => "no_opinion".to_string(),
            (code, _) => format!("error_{code}"),
        };
        samples.entry(kind).or_default().push(took);
    }
    samples
}

#[tokio::main]
async fn main() {
    let args = Arc::new(args::parse_or_exit::<Args>());
    kubeflavor::connect::install_crypto_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = pki();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let built = Instant::now();
    let index = Arc::new(index_of(args.bindings, args.revoked_every));
    println!(
        "index: {} bindings, {} revoked, built in {:?}",
        args.bindings,
        index.len(Mark::Binding),
        built.elapsed()
    );
    let opts = kubeflavor::authz::Options {
        address: ([127, 0, 0, 1], 0).into(),
        cert: write("tls.crt", &pki.server.0),
        key: write("tls.key", &pki.server.1),
        client_ca: write("ca.crt", &pki.ca_pem),
        client_cn: Some(CLIENT_CN.into()),
        connections: kubeflavor::serve::ConnectionLimits {
            max_connections: args.parallel.max(1) + 16,
            ..Default::default()
        },
        // The index is built once and never watched: never stale for this benchmark.
        max_staleness: Duration::MAX,
    };
    let bound = kubeflavor::authz::bind(opts, index, AuthzMetrics::default())
        .await
        .expect("bind");
    let addr = bound.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.serve(async {
        let _ = stopped.await;
    }));

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).expect("CA"))
        .expect("CA");
    let chain = vec![CertificateDer::from_pem_slice(pki.client.0.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(pki.client.1.as_bytes()).expect("key");
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));

    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds.max(1));
    let flooding = (args.flood > 0).then(|| {
        (
            (0..args.flood_tasks)
                .map(|_| {
                    tokio::spawn(flood(
                        addr,
                        args.flood.div_ceil(args.flood_tasks),
                        args.flood_sources,
                        until,
                    ))
                })
                .collect::<Vec<_>>(),
            tokio::spawn(prober(addr, tls.clone(), until)),
        )
    });
    let tasks: Vec<_> = (0..args.parallel)
        .map(|n| tokio::spawn(client(addr, tls.clone(), args.clone(), n, until)))
        .collect();
    let mut all = Samples::new();
    for t in tasks {
        for (kind, mut samples) in t.await.expect("client") {
            all.entry(kind).or_default().append(&mut samples);
        }
    }
    let flooded = match flooding {
        Some((floods, prober)) => {
            let mut opened = 0;
            for f in floods {
                opened += f.await.expect("flood");
            }
            Some((opened, prober.await.expect("prober")))
        }
        None => None,
    };
    let elapsed = started.elapsed();
    let _ = stop.send(());
    let _ = server.await;

    let total: usize = all.values().map(Vec::len).sum();
    println!(
        "{} clients over TLS with client certificates, keep-alive, {:.1} s",
        args.parallel,
        elapsed.as_secs_f64()
    );
    println!(
        "{:<16} {:>9} {:>10} {:>10} {:>10}",
        "answer", "count", "p50", "p99", "max"
    );
    for (kind, samples) in &mut all {
        samples.sort();
        println!(
            "{:<16} {:>9} {:>10.1?} {:>10.1?} {:>10.1?}",
            kind,
            samples.len(),
            percentile(samples, 0.50),
            percentile(samples, 0.99),
            samples.last().copied().unwrap_or_default()
        );
    }
    println!(
        "answers per second: {:.0} ({} answers)",
        total as f64 / elapsed.as_secs_f64(),
        total
    );
    if let Some((opened, probes)) = flooded {
        let mut ok: Vec<Duration> = probes.iter().flatten().copied().collect();
        ok.sort();
        println!(
            "flood: {} half-open connections held from {} source(s) by {} tasks, {} opened ({:.0}/s)",
            args.flood,
            args.flood_sources,
            args.flood_tasks,
            opened,
            opened as f64 / elapsed.as_secs_f64()
        );
        println!(
            "fresh API-server connections: {}/{} answered within 2 s ({:.2}%), p50 {:.1?}, p99 {:.1?}, max {:.1?}",
            ok.len(),
            probes.len(),
            100.0 * ok.len() as f64 / probes.len().max(1) as f64,
            percentile(&ok, 0.50),
            percentile(&ok, 0.99),
            ok.last().copied().unwrap_or_default()
        );
    }
}
