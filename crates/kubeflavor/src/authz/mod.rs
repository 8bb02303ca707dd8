//! The authorization webhook (P7, revocation that cuts off): the API server asks it about
//! every request of a kubelet before its Node and RBAC authorizers, and it answers
//! "denied" for a node whose revocation still stands (see `kubeflavor_core::node::cutoff`),
//! "no opinion" for everything else.
//!
//! It runs in every controller replica, leader or not, and answers from memory (`index`):
//! no API call per request. Only the API server may ask: the TLS handshake requires a
//! client certificate signed by the CA given, and optionally with the common name given.

pub mod freshness;
pub mod index;
pub mod metrics;
pub mod review;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use kube::Client;
use kubeflavor_cluster::ops::connection::{self, ConnectionLimits};
use kubeflavor_cluster::ops::tls;
use kubeflavor_core::crypto::keys;
use kubeflavor_core::node::cutoff::{self, Answer};
use kubeflavor_core::node::index_freshness;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use self::index::CutOffIndex;
use self::metrics::AuthzMetrics;

/// The path the API server's kubeconfig names.
pub const PATH: &str = "/authorize";
/// A SubjectAccessReview is a few hundred bytes; anything past this is not one.
const MAX_BODY: usize = 64 * 1024;

/// Where and how the webhook serves.
#[derive(Debug, Clone)]
pub struct Options {
    pub address: SocketAddr,
    /// The serving certificate and key (PEM), read again when they change.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA that signed the API server's client certificate.
    pub client_ca: PathBuf,
    /// The common name the client certificate must carry (`None`: any signed by the CA).
    pub client_cn: Option<String>,
    pub connections: ConnectionLimits,
    /// Answer 503 rather than from an index last confirmed current longer ago than this.
    pub max_staleness: Duration,
}

/// A webhook bound to its address, not yet serving.
pub struct Bound {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    opts: Options,
    state: Arc<State>,
}

struct State {
    index: Arc<CutOffIndex>,
    metrics: AuthzMetrics,
    request_timeout: Duration,
    max_staleness: Duration,
}

/// The CA certificates of the PEM file `ca` (given as `flag`), as roots.
pub fn ca_roots(ca: &std::path::Path, flag: &str) -> anyhow::Result<RootCertStore> {
    let unreadable = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "cannot read the client CA {}: {e} (give {flag} the PEM CA certificate that issues the clients' certificates)",
            ca.display()
        )
    };
    let text = std::fs::read(ca).map_err(|e| unreadable(&e))?;
    let certs = keys::tls_certificate_chain(&text).map_err(|e| unreadable(&e))?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(CertificateDer::from(cert))
            .map_err(|e| anyhow::anyhow!("the client CA {} is not usable: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        anyhow::bail!("the client CA {} holds no certificate", ca.display());
    }
    Ok(roots)
}

/// A verifier of client certificates issued by the CA in the PEM file `ca` (named by
/// `flag` in errors); `optional`: a client without a certificate may still connect (the
/// requests it may make are the handler's to decide).
pub fn client_verifier(
    ca: &std::path::Path,
    flag: &str,
    optional: bool,
) -> anyhow::Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let roots = ca_roots(ca, flag)?;
    let builder = WebPkiClientVerifier::builder(Arc::new(roots));
    let builder = if optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    builder
        .build()
        .map_err(|e| anyhow::anyhow!("the client CA {} is not usable: {e}", ca.display()))
}

/// The client certificate's common name is `want` (the CA already verified the chain).
fn client_cn_is(conn: &rustls::ServerConnection, want: &str) -> bool {
    let Some(leaf) = conn.peer_certificates().and_then(|c| c.first()) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return false;
    };
    let mut cns = cert.subject().iter_common_name();
    let first = cns.next().and_then(|cn| cn.as_str().ok());
    first == Some(want) && cns.next().is_none()
}

/// Loads the certificates and binds the address; an error here is a configuration error.
pub async fn bind(
    opts: Options,
    index: Arc<CutOffIndex>,
    metrics: AuthzMetrics,
) -> anyhow::Result<Bound> {
    crate::connect::install_crypto_provider();
    let serving = tls::ReloadingCert::new(opts.cert.clone(), opts.key.clone()).map_err(|e| {
        anyhow::anyhow!("{e} (give --authz-tls-cert-file and --authz-tls-key-file the webhook's serving certificate and key)")
    })?;
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(client_verifier(
            &opts.client_ca,
            "--authz-client-ca-file",
            false,
        )?)
        .with_cert_resolver(Arc::new(serving));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let listener = TcpListener::bind(opts.address).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {} for the authorization webhook: {e} (choose another --authz-address)",
            opts.address
        )
    })?;
    let state = Arc::new(State {
        index,
        metrics,
        request_timeout: opts.connections.request_timeout,
        max_staleness: opts.max_staleness,
    });
    Ok(Bound {
        listener,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        opts,
        state,
    })
}

impl Bound {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Bound {
            listener,
            acceptor,
            opts,
            state,
        } = self;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving the authorization webhook");
        let limits = opts.connections;
        let client_cn: Option<Arc<str>> = opts.client_cn.as_deref().map(Arc::from);
        let dropped = Arc::new(state.metrics.connections.clone());
        connection::accept_loop(listener, limits, dropped, shutdown, |stream, peer, gate| {
            let _ = stream.set_nodelay(true);
            let (state, acceptor, client_cn) = (state.clone(), acceptor.clone(), client_cn.clone());
            let handler = move |req| {
                let state = state.clone();
                async move { handle(&state, req).await }
            };
            let admit = move |conn: &rustls::ServerConnection| match &client_cn {
                Some(cn) => client_cn_is(conn, cn),
                None => true,
            };
            connection::serve(handler, acceptor, stream, peer, gate, limits, admit)
        })
        .await;
    }
}

/// Runs the index's watches and the webhook until `shutdown` resolves.
pub async fn run(client: Client, bound: Bound, shutdown: impl std::future::Future<Output = ()>) {
    let index = bound.state.index.clone();
    tokio::select! {
        _ = index.feed(client) => tracing::warn!("the authorization webhook's watches ended"),
        _ = bound.serve(shutdown) => {}
    }
}

fn respond(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

fn error(code: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let status = serde_json::json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": message, "code": code.as_u16(),
    });
    respond(code, status.to_string())
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let (kind, response) = answer(state, req).await;
    state.metrics.answer(kind, started.elapsed().as_secs_f64());
    response
}

/// A refusal to answer, and its metric label.
type Refusal = (&'static str, Response<Full<Bytes>>);

/// The body of `POST /authorize`, read within the request timeout and the size limit.
async fn review_body(state: &State, req: Request<Incoming>) -> Result<Bytes, Refusal> {
    if req.uri().path() != PATH {
        return Err((
            "not_found",
            error(StatusCode::NOT_FOUND, "the webhook serves POST /authorize"),
        ));
    }
    if req.method() != Method::POST {
        return Err((
            "bad_request",
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "the webhook serves POST /authorize",
            ),
        ));
    }
    let body = Limited::new(req.into_body(), MAX_BODY).collect();
    match tokio::time::timeout(state.request_timeout, body).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(_)) => Err((
            "too_large",
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "a SubjectAccessReview is not that large",
            ),
        )),
        Err(_) => Err((
            "bad_request",
            error(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time",
            ),
        )),
    }
}

/// The answer and its metric label.
async fn answer(state: &State, req: Request<Incoming>) -> (&'static str, Response<Full<Bytes>>) {
    let body = match review_body(state, req).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let subject = match review::parse(&body) {
        Ok(s) => s,
        Err(e) => {
            return (
                "bad_request",
                error(StatusCode::BAD_REQUEST, &e.to_string()),
            );
        }
    };
    // Until both watches have listed once, the index does not know who is revoked: an
    // error lets the API server apply its failurePolicy instead of a made-up answer.
    if !state.index.is_synced() {
        return (
            "not_synced",
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the webhook has not read the FlavorBindings and Nodes yet",
            ),
        );
    }
    // A replica cut off from the API server would answer from what it knew then: past
    // the bound, an error instead, and the API server applies its failurePolicy.
    let age = state.index.freshness.age(tokio::time::Instant::now());
    if !index_freshness::may_answer(age, state.max_staleness) {
        let message = match age {
            Some(age) => format!(
                "the webhook's view of revoked nodes was last confirmed current {:.1}s ago, past its bound of {:?}: its watches or the API server are unreachable",
                age.as_secs_f64(),
                state.max_staleness
            ),
            None => "the webhook's view of revoked nodes has not been confirmed current".into(),
        };
        return ("stale", error(StatusCode::SERVICE_UNAVAILABLE, &message));
    }
    let decided = cutoff::decide(&subject.user, &subject.groups, |n| state.index.cut_off(n));
    if let Answer::Denied(reason) = &decided {
        tracing::debug!(user = %subject.user, reason, "denied a revoked node");
    }
    (
        decided.kind(),
        respond(StatusCode::OK, review::answer(&decided).to_string()),
    )
}

#[cfg(test)]
mod tests {
    use hyper_util::rt::TokioIo;
    use kube::runtime::watcher::Event;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{PrivateKeyDer, ServerName};
    use serde_json::{Value, json};

    use super::index::Mark;
    use super::*;

    struct Ca {
        pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// (certificate PEM, key PEM) signed by `ca`.
    fn leaf(
        ca: &Ca,
        names: Vec<String>,
        cn: &str,
        usage: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![usage];
        (
            p.signed_by(&key, &ca.issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    }

    const CN: &str = "kube-apiserver-authz-client";

    struct Running {
        addr: SocketAddr,
        index: Arc<CutOffIndex>,
        server_ca: String,
        client_ca: Ca,
        metrics: AuthzMetrics,
        _dir: tempfile::TempDir,
        stop: tokio::sync::oneshot::Sender<()>,
    }

    async fn running() -> Running {
        running_with(ConnectionLimits::default()).await
    }

    async fn running_with(connections: ConnectionLimits) -> Running {
        crate::connect::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let server_ca = ca("server-ca");
        let client_ca = ca("client-ca");
        let (cert, key) = leaf(
            &server_ca,
            vec!["127.0.0.1".into()],
            "webhook",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let index = Arc::new(CutOffIndex::default());
        for mark in [Mark::Binding, Mark::Node] {
            index.apply(mark, Event::Init);
            index.apply(mark, Event::InitDone);
        }
        index.apply_list(Event::Init);
        index.apply_list(Event::InitDone);
        index.apply(Mark::Binding, Event::Apply(("w1".to_string(), true)));
        let opts = Options {
            address: ([127, 0, 0, 1], 0).into(),
            cert: write("tls.crt", &cert),
            key: write("tls.key", &key),
            client_ca: write("ca.crt", &client_ca.pem),
            client_cn: Some(CN.into()),
            connections,
            // The index is fed by hand here, never by watches: see the staleness test.
            max_staleness: Duration::from_secs(3600),
        };
        let metrics = AuthzMetrics::default();
        let bound = bind(opts, index.clone(), metrics.clone()).await.unwrap();
        let addr = bound.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(bound.serve(async {
            let _ = stopped.await;
        }));
        Running {
            addr,
            index,
            server_ca: server_ca.pem.clone(),
            client_ca,
            metrics,
            _dir: dir,
            stop,
        }
    }

    /// POSTs `body` to `path` with the client certificate `client`: the status and JSON,
    /// or the error text when no answer came.
    async fn post(
        r: &Running,
        client: Option<&(String, String)>,
        path: &str,
        body: Value,
    ) -> Result<(u16, Value), String> {
        let tcp = tokio::net::TcpStream::connect(r.addr).await.unwrap();
        post_on(r, tcp, client, path, body).await
    }

    /// [`post`] over a TCP connection already open.
    async fn post_on(
        r: &Running,
        tcp: tokio::net::TcpStream,
        client: Option<&(String, String)>,
        path: &str,
        body: Value,
    ) -> Result<(u16, Value), String> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(r.server_ca.as_bytes()).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::from(r.addr.ip()), tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = Request::post(path)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        Ok((code, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    fn sar(user: &str) -> Value {
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:nodes", "system:authenticated"],
                     "resourceAttributes": {"verb": "get", "resource": "nodes", "name": user}},
        })
    }

    fn api_server(r: &Running) -> (String, String) {
        leaf(
            &r.client_ca,
            vec![],
            CN,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    #[tokio::test]
    async fn revoked_node_is_denied_and_others_get_no_opinion_over_https() {
        let r = running().await;
        let me = api_server(&r);
        let (code, denied) = post(&r, Some(&me), PATH, sar("system:node:w1"))
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert_eq!(denied["kind"], "SubjectAccessReview");
        assert_eq!(denied["status"]["allowed"], false);
        assert_eq!(denied["status"]["denied"], true);
        assert!(
            denied["status"]["reason"]
                .as_str()
                .unwrap()
                .contains("node w1 is revoked")
        );
        let (code, other) = post(&r, Some(&me), PATH, sar("system:node:w2"))
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert_eq!(other["status"], json!({"allowed": false}));
        let text = r.metrics.render();
        assert!(
            text.contains("kubeflavor_authz_answers_total{answer=\"denied_revoked\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kubeflavor_authz_answers_total{answer=\"no_opinion\"} 1"),
            "{text}"
        );
        let _ = r.stop.send(());
    }

    #[tokio::test]
    async fn only_the_api_servers_client_certificate_is_answered() {
        let r = running().await;
        assert!(
            post(&r, None, PATH, sar("system:node:w1")).await.is_err(),
            "no client certificate: no answer"
        );
        let stranger = leaf(
            &ca("other-ca"),
            vec![],
            CN,
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        assert!(
            post(&r, Some(&stranger), PATH, sar("system:node:w1"))
                .await
                .is_err(),
            "a certificate of another CA: no answer"
        );
        // The cluster CA signs every kubelet's certificate too: the CN keeps nodes out.
        let kubelet = leaf(
            &r.client_ca,
            vec![],
            "system:node:w2",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        assert!(
            post(&r, Some(&kubelet), PATH, sar("system:node:w1"))
                .await
                .is_err(),
            "a certificate of the CA with another CN: no answer"
        );
        assert_eq!(
            post(&r, Some(&api_server(&r)), PATH, sar("system:node:w1"))
                .await
                .unwrap()
                .0,
            200
        );
        let _ = r.stop.send(());
    }

    #[tokio::test]
    async fn anything_but_a_subject_access_review_v1_is_refused() {
        let r = running().await;
        let me = api_server(&r);
        let mut beta = sar("system:node:w1");
        beta["apiVersion"] = json!("authorization.k8s.io/v1beta1");
        assert_eq!(post(&r, Some(&me), PATH, beta).await.unwrap().0, 400);
        let token_review =
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}});
        assert_eq!(
            post(&r, Some(&me), PATH, token_review).await.unwrap().0,
            400
        );
        assert_eq!(
            post(&r, Some(&me), "/other", sar("system:node:w1"))
                .await
                .unwrap()
                .0,
            404
        );
        assert!(
            r.metrics
                .render()
                .contains("kubeflavor_authz_answers_total{answer=\"bad_request\"} 2")
        );
        let _ = r.stop.send(());
    }

    /// A connection from `source` that sends one byte of a TLS record and then nothing,
    /// as a flood's would.
    async fn half_open(to: SocketAddr, source: [u8; 4]) -> tokio::net::TcpStream {
        use tokio::io::AsyncWriteExt;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((source, 0).into()).unwrap();
        let mut tcp = socket.connect(to).await.unwrap();
        tcp.write_all(&[0x16]).await.unwrap();
        tcp
    }

    /// Whether the server closed `tcp` (EOF or reset) within `limit`.
    async fn closed_within(tcp: &mut tokio::net::TcpStream, limit: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(limit, tcp.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    const FLOOD: usize = 300;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_half_open_connections_cannot_keep_the_api_server_out() {
        // Few connection slots and pending handshakes, and a handshake allowance far longer
        // than the test: only pushing the oldest pending handshake out for the newest lets
        // the API server in behind the flood.
        let r = running_with(ConnectionLimits {
            max_connections: 4,
            max_handshakes: 16,
            max_handshakes_per_source: 16,
            handshake_timeout: Duration::from_secs(60),
            ..ConnectionLimits::default()
        })
        .await;
        let mut flood = Vec::new();
        for _ in 0..FLOOD {
            flood.push(half_open(r.addr, [127, 0, 0, 1]).await);
        }
        let me = api_server(&r);
        let answered = tokio::time::timeout(
            Duration::from_secs(2),
            post(&r, Some(&me), PATH, sar("system:node:w1")),
        )
        .await
        .expect("the API server is answered within its 2 s timeout, flood or not");
        assert_eq!(answered.unwrap().0, 200);
        // The flood's oldest connections were closed to make room, and counted.
        assert!(closed_within(&mut flood[0], Duration::from_secs(2)).await);
        let text = r.metrics.render();
        assert!(
            !text.contains(
                "kubeflavor_tls_connections_dropped_total{server=\"authz\",reason=\"pushed_out\"} 0"
            ),
            "{text}"
        );
        let _ = r.stop.send(());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pending_handshake_is_closed_after_the_handshake_timeout() {
        let r = running_with(ConnectionLimits {
            handshake_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(60),
            ..ConnectionLimits::default()
        })
        .await;
        let mut tcp = half_open(r.addr, [127, 0, 0, 1]).await;
        let started = std::time::Instant::now();
        assert!(
            closed_within(&mut tcp, Duration::from_secs(5)).await,
            "closed by the handshake deadline, not the idle timeout"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(r.metrics.render().contains(
            "kubeflavor_tls_connections_dropped_total{server=\"authz\",reason=\"handshake_timeout\"} 1"
        ));
        let _ = r.stop.send(());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_source_flooding_never_pushes_out_another_sources_handshake() {
        // The API server opened its connection (from 127.0.0.1) and is slow to finish its
        // handshake; a flood from 127.0.0.2 fills the pool many times over. Were the flood
        // not held to its own share, the API server's pending handshake, the oldest, would
        // be the first pushed out.
        let r = running_with(ConnectionLimits {
            max_handshakes: 16,
            max_handshakes_per_source: 4,
            handshake_timeout: Duration::from_secs(60),
            ..ConnectionLimits::default()
        })
        .await;
        let slow = tokio::net::TcpStream::connect(r.addr).await.unwrap();
        let mut flood = Vec::new();
        for _ in 0..FLOOD {
            flood.push(half_open(r.addr, [127, 0, 0, 2]).await);
        }
        assert!(
            closed_within(&mut flood[0], Duration::from_secs(2)).await,
            "the flood pushes out its own oldest"
        );
        let me = api_server(&r);
        let answered = post_on(&r, slow, Some(&me), PATH, sar("system:node:w1")).await;
        assert_eq!(answered.unwrap().0, 200);
        let _ = r.stop.send(());
    }

    #[tokio::test]
    async fn a_replica_whose_index_is_not_current_answers_503() {
        let r = running().await;
        let me = api_server(&r);
        assert_eq!(
            post(&r, Some(&me), PATH, sar("system:node:w1"))
                .await
                .unwrap()
                .0,
            200
        );
        // Its watches fail and it stays cut off: the clock no longer moves, and the last
        // confirmation is older than the bound (an hour here).
        let long_ago = tokio::time::Instant::now()
            .checked_sub(Duration::from_secs(3601))
            .expect("the clock is past an hour");
        r.index.freshness.watches_down();
        r.index.freshness.listed(Mark::Binding, long_ago);
        r.index.freshness.listed(Mark::Node, long_ago);
        r.index.freshness.listed(Mark::Listed, long_ago);
        r.index.freshness.watches_down();
        r.index.freshness.confirm(tokio::time::Instant::now());
        let (code, body) = post(&r, Some(&me), PATH, sar("system:node:w1"))
            .await
            .unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("last confirmed current"),
            "{body}"
        );
        assert!(
            r.metrics
                .render()
                .contains("kubeflavor_authz_answers_total{answer=\"stale\"} 1")
        );
        let _ = r.stop.send(());
    }
}
