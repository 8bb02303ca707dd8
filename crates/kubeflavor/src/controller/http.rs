//! The operations endpoint: `/metrics`, `/healthz`, `/readyz` on plain HTTP.
//!
//! `/healthz` says the process loop is alive. `/readyz` says this replica is useful: a
//! standby is ready (it is waiting for the Lease, which is its job), a leader is ready once
//! its watch caches have synced, so a rolling update waits for the new leader to see state.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// Shared health flags, flipped by the controller's tasks.
#[derive(Debug, Default)]
pub struct Health {
    leading: AtomicBool,
    synced: AtomicBool,
    stopping: AtomicBool,
}

impl Health {
    pub fn set_leading(&self, v: bool) {
        self.leading.store(v, Ordering::SeqCst);
    }
    pub fn set_synced(&self, v: bool) {
        self.synced.store(v, Ordering::SeqCst);
    }
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }
    /// Ready: not shutting down, and either standing by or leading with synced caches.
    pub fn is_ready(&self) -> bool {
        !self.stopping.load(Ordering::SeqCst)
            && (!self.is_leading() || self.synced.load(Ordering::SeqCst))
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

pub fn route(path: &str, health: &Health, metrics: &Metrics) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if health.is_ready() => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready: the leader's caches have not synced yet\n".into(),
        ),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `addr` and serves until `shutdown` resolves. Returns the bound address (useful
/// with port 0) through `bound` before serving.
pub async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an operations connection failed");
                    continue;
                }
            },
        };
        let health = health.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let resp = route(req.uri().path(), &health, &metrics);
                async move { Ok::<_, Infallible>(resp) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!(error = %e, "operations connection ended with an error");
            }
        });
    }
}

/// Binds the operations address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_follows_leadership_and_sync() {
        let h = Health::default();
        let m = Metrics::new();
        assert_eq!(route("/readyz", &h, &m).status(), StatusCode::OK, "standby");
        h.set_leading(true);
        assert_eq!(
            route("/readyz", &h, &m).status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "leader before sync"
        );
        h.set_synced(true);
        assert_eq!(route("/readyz", &h, &m).status(), StatusCode::OK);
        h.set_stopping();
        assert_eq!(
            route("/readyz", &h, &m).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(route("/healthz", &h, &m).status(), StatusCode::OK);
        assert_eq!(route("/nope", &h, &m).status(), StatusCode::NOT_FOUND);
    }
}
