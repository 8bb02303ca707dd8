//! HTTPS serving: TLS (optional client certificates verified against the cluster CA),
//! HTTP/1.1 and h2, the request pipeline (authentication → attributes → counters → faults
//! → authorization → handler), response rendering, and shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use jiff::Timestamp;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::authn::ClientCertificate;
use crate::discovery::{self, AGGREGATED_V2};
use crate::errors::{page_not_found, status_body};
use crate::handlers::route::{Query, Route, attributes, parse_route};
use crate::handlers::watch::{StopSignals, WatchStart};
use crate::handlers::{self, Cx, Reply};
use crate::pki::Ca;
use crate::resources;
use crate::shared::Shared;
use crate::types::{ApiError, ObjectReader};
use crate::{authn, authz, openapi};

pub type Body = BoxBody<Bytes, Infallible>;

/// Why the server could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The serving certificate or TLS configuration could not be built.
    #[error("building the TLS configuration failed: {0}")]
    Tls(String),
    /// No port on 127.0.0.1 could be bound.
    #[error("binding 127.0.0.1 failed: {0}")]
    Bind(#[from] std::io::Error),
}

pub fn tls_config(ca: &Ca) -> Result<rustls::ServerConfig, ServeError> {
    let tls = |e: &dyn std::fmt::Display| ServeError::Tls(e.to_string());
    let serving = ca.server_cert().map_err(|e| tls(&e))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .map_err(|e| tls(&e))?;
    // Client certificates are optional: requests without one are authenticated by bearer
    // token or run as system:anonymous, as on the real server.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| tls(&e))?;
    let chain =
        vec![CertificateDer::from_pem_slice(serving.cert_pem.as_bytes()).map_err(|e| tls(&e))?];
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Accept connections until shutdown, then let open connections finish (watches end on
/// the same signal) for up to two seconds.
pub async fn accept_loop(listener: TcpListener, tls: rustls::ServerConfig, shared: Arc<Shared>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let mut shutdown = shared.shutdown.clone();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                connections.spawn(serve_connection(tcp, acceptor.clone(), shared.clone()));
            }
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        connections.abort_all();
    }
}

async fn serve_connection(
    tcp: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    shared: Arc<Shared>,
) {
    let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
    else {
        return;
    };
    // The client certificate, read once per connection: it cannot change on a connection,
    // and parsing it per request (under the store's lock) was a visible share of each
    // request's cost. Its validity is still checked per request, as the real server does.
    let peer: Option<Arc<ClientCertificate>> = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| ClientCertificate::parse(c))
        .map(Arc::new);
    let mut shutdown = shared.shutdown.clone();
    let service = service_fn(move |req| {
        let shared = shared.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(serve(shared, peer, req).await) }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
        }
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// The real server pretty-prints JSON for these clients (00-setup.txt).
fn wants_pretty(headers: &HeaderMap, query: &Query) -> bool {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    query.flag("pretty")
        || ua.starts_with("curl")
        || ua.starts_with("Wget")
        || ua.starts_with("Mozilla/5.0")
}

fn json_bytes(value: &Value, pretty: bool) -> Bytes {
    let mut out = if pretty {
        serde_json::to_vec_pretty(value)
    } else {
        serde_json::to_vec(value)
    }
    .unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    Bytes::from(out)
}

fn base_response(code: u16, content_type: &str) -> http::response::Builder {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_TYPE, content_type)
}

fn with_headers(
    mut builder: http::response::Builder,
    headers: &[(String, String)],
) -> http::response::Builder {
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            builder = builder.header(k.as_str(), v);
        }
    }
    builder
}

fn finish(builder: http::response::Builder, body: Body) -> Response<Body> {
    builder
        .body(body)
        .unwrap_or_else(|_| Response::new(full("")))
}

pub fn error_response(err: &ApiError, pretty: bool) -> Response<Body> {
    if let Some(text) = &err.plain_text {
        let b = base_response(err.code, "text/plain; charset=utf-8")
            .header("X-Content-Type-Options", "nosniff");
        return finish(with_headers(b, &err.headers), full(text.clone()));
    }
    let mut b = base_response(err.code, "application/json");
    if err.nosniff {
        b = b.header("X-Content-Type-Options", "nosniff");
    }
    finish(
        with_headers(b, &err.headers),
        full(json_bytes(&status_body(err), pretty)),
    )
}

fn json_response(
    code: u16,
    body: &Value,
    headers: &[(String, String)],
    pretty: bool,
) -> Response<Body> {
    finish(
        with_headers(base_response(code, "application/json"), headers),
        full(json_bytes(body, pretty)),
    )
}

fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

async fn serve(
    shared: Arc<Shared>,
    peer: Option<Arc<ClientCertificate>>,
    req: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let query = Query::parse(parts.uri.query());
    let pretty = wants_pretty(&parts.headers, &query);
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return error_response(
                &crate::errors::bad_request(format!("reading the body: {e}")),
                pretty,
            );
        }
    };
    match respond(&shared, peer.as_deref(), &parts, &query, &body).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err, pretty),
    }
}

async fn respond(
    shared: &Arc<Shared>,
    peer: Option<&ClientCertificate>,
    parts: &http::request::Parts,
    query: &Query,
    body: &Bytes,
) -> Result<Response<Body>, ApiError> {
    let path = parts.uri.path();
    let method = parts.method.as_str();
    let pretty = wants_pretty(&parts.headers, query);
    let header_str =
        |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let now = Timestamp::now();
    // The x509 authenticator runs before the token authenticators.
    let user = match peer.and_then(|c| c.user_at(now)) {
        Some(user) => user.clone(),
        None => {
            let st = shared.store.lock();
            let bearer = bearer_token(&parts.headers);
            shared.with_token_authenticators(&st, |tokens| {
                authn::authenticate_with(peer, bearer.as_deref(), tokens, now)
            })?
        }
    };
    let route = parse_route(path);
    let attrs = attributes(&user, method, &route, query, path);
    let counted = match &route {
        Route::Resource(r) if r.subresource.is_empty() => r.resource.clone(),
        Route::Resource(r) => format!("{}/{}", r.resource, r.subresource),
        _ => path.to_string(),
    };
    shared.counters.record(user.kind, &attrs.verb, &counted);
    if let Route::Resource(r) = &route {
        let injected = shared
            .faults
            .take(&attrs.verb, &r.resource, &r.subresource, &attrs.name);
        if let Some(delay) = injected.delay {
            tokio::time::sleep(delay).await;
        }
        if let Some(err) = injected.error {
            return Err(err);
        }
    }
    // The webhook is asked first (after system:masters), outside the store's lock.
    let webhook = shared
        .authz_webhook
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let verdict = match &webhook {
        Some(w) if !attrs.user.in_group(authz::MASTERS_GROUP) => w.authorize(&attrs).await,
        _ => authz::webhook::Verdict::NoOpinion,
    };
    // A SubjectAccessReview is answered by the same chain: the webhook is asked about the
    // request it describes now, outside the lock, too (JSON bodies; an invalid spec asks
    // no one).
    let review_verdict = match (&webhook, &route) {
        (Some(w), Route::Resource(r))
            if attrs.verb == "create"
                && r.group == "authorization.k8s.io"
                && r.resource == "subjectaccessreviews"
                && r.subresource.is_empty() =>
        {
            let reviewed = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|obj| handlers::review::reviewed_attributes(&obj["spec"]));
            match reviewed {
                Some(a) if !a.user.in_group(authz::MASTERS_GROUP) => w.authorize(&a).await,
                _ => authz::webhook::Verdict::NoOpinion,
            }
        }
        _ => authz::webhook::Verdict::NoOpinion,
    };
    let authorize = |st: &dyn ObjectReader| authz::authorize_after(&verdict, &attrs, st);
    match &route {
        Route::NonResource(p) => {
            let st = shared.store.lock();
            authorize(&*st)?;
            non_resource(&*st, p, pretty)
        }
        Route::Discovery(which) => {
            let doc = {
                let st = shared.store.lock();
                authorize(&*st)?;
                discovery::document(
                    &*st,
                    which,
                    header_str(header::ACCEPT),
                    &shared.server_address,
                )?
            };
            Ok(discovery_response(
                &doc,
                header_str(header::IF_NONE_MATCH),
                pretty,
            ))
        }
        Route::Resource(r) => {
            let reply = {
                let mut st = shared.store.lock();
                authorize(&*st)?;
                let info = resources::resolve(&*st, &r.group, &r.version, &r.resource)
                    .ok_or_else(page_not_found)?;
                let cx = Cx {
                    user: &user,
                    attrs: &attrs,
                    route: r,
                    query,
                    body,
                    content_type: header_str(header::CONTENT_TYPE),
                    accept: header_str(header::ACCEPT),
                    now,
                    shared,
                    review_verdict,
                };
                // A bug in a handler answers 500 instead of dropping the connection.
                let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    handlers::handle(&mut st, &cx, &info, method)
                }));
                handled.unwrap_or_else(|_| {
                    Err(crate::errors::internal_error("the handler panicked"))
                })?
            };
            Ok(match reply {
                Reply::Json {
                    code,
                    body,
                    headers,
                } => json_response(code, &body, &headers, pretty),
                Reply::Watch(w) => watch_response(shared, *w),
            })
        }
    }
}

fn non_resource(
    reader: &dyn ObjectReader,
    path: &str,
    pretty: bool,
) -> Result<Response<Body>, ApiError> {
    if let Some(gv) = path.strip_prefix("/openapi/v3/") {
        let doc = openapi::group_version(reader, gv).ok_or_else(page_not_found)?;
        return Ok(json_response(200, &doc, &[], pretty));
    }
    match path.trim_end_matches('/') {
        "/version" => Ok(json_response(200, &discovery::version(), &[], pretty)),
        "/healthz" | "/livez" | "/readyz" => Ok(finish(
            base_response(200, "text/plain; charset=utf-8")
                .header("X-Content-Type-Options", "nosniff"),
            full("ok"),
        )),
        "/openapi/v3" => Ok(json_response(200, &openapi::root(reader), &[], pretty)),
        _ => Err(page_not_found()),
    }
}

fn discovery_response(
    doc: &discovery::DiscoveryDoc,
    if_none_match: Option<&str>,
    pretty: bool,
) -> Response<Body> {
    if !doc.aggregated {
        return json_response(200, &doc.body, &[], pretty);
    }
    let etag = doc.etag();
    let builder = Response::builder()
        .header(header::CACHE_CONTROL, "public")
        .header(header::ETAG, etag.as_str())
        .header(header::VARY, "Accept");
    if if_none_match == Some(etag.as_str()) {
        return finish(builder.status(StatusCode::NOT_MODIFIED), full(""));
    }
    finish(
        builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, AGGREGATED_V2),
        full(json_bytes(&doc.body, pretty)),
    )
}

fn watch_response(shared: &Arc<Shared>, w: WatchStart) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let stop = StopSignals {
        shutdown: shared.shutdown.clone(),
        cut: shared.faults.cut_signal(),
    };
    tokio::spawn(handlers::watch::run(w, shared.store.clone(), stop, tx));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    finish(
        base_response(200, "application/json"),
        StreamBody::new(stream).boxed(),
    )
}
