//! One connection of a TLS server of kubeflavor (the join-token API, the authorization
//! webhook), from its TLS handshake to its close, and the limits every such server keeps.
//!
//! A connection holds one of the server's slots while it is open, so a connection that
//! carries no request is closed after the idle timeout, whatever it sends and in either
//! protocol: before or during its TLS handshake, before its first request's headers are
//! complete (sent a byte at a time or not at all, an h2 preface alone), and between
//! requests. A request counts from the moment its headers are complete (hyper calls the
//! service) until its answer is returned; its body has its own deadline in the handler
//! ([`ConnectionLimits::request_timeout`]). hyper's own HTTP/1.1 header timeout is not
//! used: it starts only once the version is known, so a client that sends nothing at all
//! escapes it, and h2 has none.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;

use http_body_util::Full;
use hyper::body::Bytes;

/// The body of every answer of kubeflavor's TLS servers: whole, in memory.
pub type Body = Full<Bytes>;

/// How long an idle connection asked to close (h2: GOAWAY; HTTP/1.1: no keep-alive) may
/// take to end by itself before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How many connections a server holds at once, and how long each may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// At most this many connections at once; further ones wait in the listen backlog
    /// until one closes.
    pub max_connections: usize,
    /// A connection that carries no request is closed after this: before or during its
    /// TLS handshake, before its first request's headers are complete (whatever it
    /// trickles), and between requests. h2 and HTTP/1.1 alike.
    pub idle_timeout: Duration,
    /// A request's body must have arrived within this once the request is accepted
    /// (authenticated, authorized); else 408 and the request ends.
    pub request_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            idle_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Accepts connections on `listener` until `shutdown` resolves, at most
/// `limits.max_connections` at once (further ones wait in the listen backlog until one
/// closes), and runs each in its own task as `serve_one(stream, peer)` makes it; the slot
/// is held until that task ends.
pub(crate) async fn accept_loop<C, F>(
    listener: TcpListener,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
    mut serve_one: C,
) where
    C: FnMut(TcpStream, SocketAddr) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return,
            permit = slots.clone().acquire_owned() => permit.expect("never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
        };
        let connection = serve_one(stream, peer);
        tokio::spawn(async move {
            let _slot = permit;
            connection.await;
        });
    }
}

/// Serves one accepted connection with `handler` until it ends or has been idle for the
/// idle timeout. `admit` sees the finished handshake (e.g. the client's certificate) and
/// may close the connection before any request is read.
pub(crate) async fn serve<H, F>(
    handler: H,
    acceptor: TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    limits: ConnectionLimits,
    admit: impl FnOnce(&rustls::ServerConnection) -> bool,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let tls = match timeout(limits.idle_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) if admit(tls.get_ref().1) => tls,
        Ok(Ok(_)) => {
            tracing::debug!(%peer, "client refused after the handshake");
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let requests = Arc::new(watch::Sender::new(0usize));
    let service = {
        let requests = requests.clone();
        service_fn(move |req| {
            // Counted as soon as hyper hands the request over, before the handler runs.
            let in_progress = InProgress::start(&requests);
            let handler = handler.clone();
            async move {
                let response = handler(req).await;
                drop(in_progress);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let builder = Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        ended = conn.as_mut() => {
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            return;
        }
        () = idle_for(requests.subscribe(), limits.idle_timeout) => {}
    }
    tracing::debug!(%peer, idle = ?limits.idle_timeout, "closing an idle connection");
    conn.as_mut().graceful_shutdown();
    if timeout(CLOSE_GRACE, conn).await.is_err() {
        tracing::debug!(%peer, "dropped an idle connection that did not close by itself");
    }
}

/// One request in progress on a connection, for as long as it lives.
struct InProgress(Arc<watch::Sender<usize>>);

impl InProgress {
    fn start(requests: &Arc<watch::Sender<usize>>) -> InProgress {
        requests.send_modify(|n| *n += 1);
        InProgress(requests.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Resolves once no request has been in progress for `limit` at a stretch.
async fn idle_for(mut requests: watch::Receiver<usize>, limit: Duration) {
    loop {
        if requests.wait_for(|n| *n == 0).await.is_err() {
            return;
        }
        match timeout(limit, requests.wait_for(|n| *n > 0)).await {
            Ok(Ok(_)) => continue,
            Ok(Err(_)) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use super::*;

    /// Whether `idle` has resolved once the paused clock has moved on by `by`; it is polled
    /// before and after, so it sees every change of the count when it happens.
    async fn idle_after(idle: &mut Pin<Box<impl Future<Output = ()>>>, by: Duration) -> bool {
        if futures::poll!(idle.as_mut()).is_ready() {
            return true;
        }
        tokio::time::advance(by).await;
        futures::poll!(idle.as_mut()).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_without_a_request_for_the_whole_limit() {
        let requests = Arc::new(watch::Sender::new(0usize));
        let limit = Duration::from_secs(10);
        let mut idle = Box::pin(idle_for(requests.subscribe(), limit));
        assert!(!idle_after(&mut idle, Duration::from_secs(9)).await);
        // A request starts before the limit: the count starts again once it ends.
        let request = InProgress::start(&requests);
        assert!(
            !idle_after(&mut idle, Duration::from_secs(60)).await,
            "not idle while a request is in progress, however long"
        );
        drop(request);
        assert!(!idle_after(&mut idle, Duration::from_secs(9)).await);
        assert!(idle_after(&mut idle, Duration::from_secs(1)).await);
    }

    #[test]
    fn requests_in_progress_are_counted_until_they_end() {
        let requests = Arc::new(watch::Sender::new(0usize));
        let (a, b) = (InProgress::start(&requests), InProgress::start(&requests));
        assert_eq!(*requests.borrow(), 2);
        drop(a);
        assert_eq!(*requests.borrow(), 1);
        drop(b);
        assert_eq!(*requests.borrow(), 0);
    }
}
