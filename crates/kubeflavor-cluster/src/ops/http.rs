//! The operations endpoint: `/metrics`, `/healthz`, `/readyz` on plain HTTP.
//!
//! `/healthz` says the process loop is alive. `/readyz` says this replica is useful: a
//! standby is ready (it is waiting for the Lease, which is its job), a leader is ready once
//! its watch caches have synced, so a rolling update waits for the new leader to see state.
//! No replica is ready while another approver decides CSRs the options say are kubeflavor's
//! (see `approvers`): `/readyz` then names the binding and the fix.

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

use super::text_format;

/// What `/metrics` shows: the controller's metrics, or the join-token API's.
pub trait Exposition: Send + Sync + 'static {
    /// The OpenMetrics text exposition.
    fn render(&self) -> String;
}

/// Shared health flags, flipped by the controller's tasks.
#[derive(Debug, Default)]
pub struct Health {
    leading: AtomicBool,
    synced: AtomicBool,
    stopping: AtomicBool,
    /// Woken when `synced` turns true.
    synced_changed: tokio::sync::Notify,
    /// Woken when `leading` changes.
    leading_changed: tokio::sync::Notify,
    /// Why another approver keeps this replica from being ready, if it does.
    blocked: std::sync::Mutex<Option<String>>,
    /// Woken when `blocked` changes between some and none.
    blocked_changed: tokio::sync::Notify,
}

impl Health {
    pub fn set_leading(&self, v: bool) {
        if self.leading.swap(v, Ordering::SeqCst) != v {
            self.leading_changed.notify_waiters();
        }
    }
    /// Resolves once this replica leads (`true`) or does not (`false`).
    pub async fn wait_leading(&self, leading: bool) {
        wait_on(&self.leading_changed, || self.is_leading() == leading).await
    }
    pub fn set_synced(&self, v: bool) {
        self.synced.store(v, Ordering::SeqCst);
        if v {
            self.synced_changed.notify_waiters();
        }
    }
    /// Resolves once a leadership term has its caches synced: from then on the
    /// controller decides what it sees.
    pub async fn wait_synced(&self) {
        wait_on(&self.synced_changed, || self.synced.load(Ordering::SeqCst)).await
    }
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
    /// Another approver decides CSRs the options say are kubeflavor's (`Some(why)`), or
    /// none does any more (`None`).
    pub fn set_blocked(&self, why: Option<String>) {
        let now = why.is_some();
        let was = std::mem::replace(
            &mut *self.blocked.lock().unwrap_or_else(|e| e.into_inner()),
            why,
        );
        if was.is_some() != now {
            self.blocked_changed.notify_waiters();
        }
    }
    /// Resolves once another approver keeps this replica from being ready (`true`), or
    /// none does (`false`).
    pub async fn wait_blocked(&self, blocked: bool) {
        wait_on(&self.blocked_changed, || {
            self.blocked().is_some() == blocked
        })
        .await
    }
    /// Why another approver keeps this replica from being ready, if it does.
    pub fn blocked(&self) -> Option<String> {
        self.blocked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }
    /// Ready: not shutting down, no other approver in the way, and either standing by or
    /// leading with synced caches.
    pub fn is_ready(&self) -> bool {
        !self.stopping.load(Ordering::SeqCst)
            && self.blocked().is_none()
            && (!self.is_leading() || self.synced.load(Ordering::SeqCst))
    }
}

/// Resolves once `done` holds, re-checked each time `changed` wakes its waiters.
async fn wait_on(changed: &tokio::sync::Notify, done: impl Fn() -> bool) {
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        // Registered before the check, so a change in between is not missed.
        notified.as_mut().enable();
        if done() {
            return;
        }
        notified.await;
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

pub fn route(path: &str, health: &Health, metrics: &dyn Exposition) -> Response<Full<Bytes>> {
    route_accepting(path, None, health, metrics)
}

/// Answers `path`; `/metrics` in OpenMetrics when `accept` asks for it (Prometheus'
/// scrapes do), in the Prometheus text format otherwise.
pub fn route_accepting(
    path: &str,
    accept: Option<&str>,
    health: &Health,
    metrics: &dyn Exposition,
) -> Response<Full<Bytes>> {
    match path {
        "/metrics" if text_format::wants_openmetrics(accept) => respond(
            StatusCode::OK,
            text_format::OPENMETRICS_TEXT,
            metrics.render(),
        ),
        "/metrics" => respond(
            StatusCode::OK,
            text_format::PROMETHEUS_TEXT,
            text_format::prometheus_text(&metrics.render()),
        ),
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if health.is_ready() => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            match health.blocked() {
                Some(why) => format!("not ready: {why}\n"),
                None => "not ready: the leader's caches have not synced yet\n".into(),
            },
        ),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    metrics: Arc<dyn Exposition>,
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
                let accept = req
                    .headers()
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                let resp = route_accepting(req.uri().path(), accept, &health, metrics.as_ref());
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A `/metrics` exposition that says what it was given.
    struct Metrics(std::sync::Mutex<String>);

    impl Metrics {
        fn new() -> Self {
            Metrics(std::sync::Mutex::new(String::new()))
        }

        fn decision(&self, decision: &str, cause: &str) {
            *self.0.lock().unwrap() =
                format!("decisions_total{{decision=\"{decision}\",cause=\"{cause}\"}} 1\n");
        }
    }

    impl Exposition for Metrics {
        fn render(&self) -> String {
            self.0.lock().unwrap().clone()
        }
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn serves_metrics_and_probes_over_http_until_shutdown() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let health = Arc::new(Health::default());
        let metrics = Metrics::new();
        metrics.decision("denied", "token_missing");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, health.clone(), Arc::new(metrics), async {
            let _ = rx.await;
        }));
        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(m.contains("cause=\"token_missing\""), "{m}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        health.set_leading(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        health.set_synced(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

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

    #[test]
    fn readyz_fails_while_another_approver_is_in_the_way_and_says_why() {
        let h = Health::default();
        let m = Metrics::new();
        h.set_leading(true);
        h.set_synced(true);
        h.set_blocked(Some(
            "ClusterRoleBinding x lets ... (run: kubectl delete clusterrolebinding x)".into(),
        ));
        let resp = route("/readyz", &h, &m);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        h.set_leading(false);
        assert!(!h.is_ready(), "a standby is not ready either");
        h.set_blocked(None);
        assert!(h.is_ready(), "ready again once the grant is gone");
    }

    #[tokio::test]
    async fn wait_synced_returns_once_the_caches_are_synced() {
        let health = Arc::new(Health::default());
        let waiter = tokio::spawn({
            let health = health.clone();
            async move { health.wait_synced().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "returned before the caches synced");
        health.set_synced(true);
        waiter.await.expect("waiter");
        // Already synced: at once.
        health.wait_synced().await;
    }
}
