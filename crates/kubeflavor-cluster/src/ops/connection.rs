//! One connection of a TLS server of kubeflavor (the join-token API, the authorization
//! webhook), from its TLS handshake to its close, and the limits every such server keeps.
//!
//! Before its handshake ends a connection is anyone's: no credential has been checked. So
//! it does not hold one of the server's connection slots but a place in a separate, bounded
//! pool of pending handshakes (`kubeflavor_core::handshake_pool`), for at most the
//! handshake timeout: when the pool is full the oldest pending handshake is closed to admit
//! the newest, and one source address holds at most a few places, its newest connection
//! pushing out its own oldest. A flood of connections that send one byte of a TLS record,
//! or nothing, therefore churns through the pool without ever keeping a legitimate client
//! (the API server asking the webhook) from completing its handshake, which takes a few
//! milliseconds. Only a finished handshake the server accepts (for the webhook: the API
//! server's client certificate) takes a connection slot; when every slot is taken it waits
//! for one (twice the time an idle connection may hold one), keeping its place in the pool
//! meanwhile.
//!
//! A connection that carries no request is closed after the idle timeout, whatever it
//! sends and in either protocol: before its first request's headers are complete (sent a
//! byte at a time or not at all, an h2 preface alone), and between requests. A request
//! counts from the moment its headers are complete (hyper calls the service) until its
//! answer is returned; its body has its own deadline in the handler
//! ([`ConnectionLimits::request_timeout`]). hyper's own HTTP/1.1 header timeout is not
//! used: it starts only once the version is known, so a client that sends nothing at all
//! escapes it, and h2 has none.
//!
//! What a flood does is visible: every connection closed before it was served (pushed out
//! of the pool, its handshake timed out, no slot came in time) is reported to the server's
//! [`DropCounter`], through which the feature running the server counts it in its own
//! metric families; this layer registers none.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use kubeflavor_core::handshake_pool::{self, Bounds, Pool, Ticket};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
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
    /// At most this many connections past their TLS handshake at once; a further one
    /// waits for a slot (twice the idle timeout and the close grace at most) in its place
    /// in the handshake pool.
    pub max_connections: usize,
    /// A connection that carries no request is closed after this: before its first
    /// request's headers are complete (whatever it trickles), and between requests. h2
    /// and HTTP/1.1 alike.
    pub idle_timeout: Duration,
    /// A request's body must have arrived within this once the request is accepted
    /// (authenticated, authorized); else 408 and the request ends.
    pub request_timeout: Duration,
    /// A TLS handshake must end within this, or the connection is closed.
    pub handshake_timeout: Duration,
    /// Pending TLS handshakes at once; when full, the oldest is closed for the newest.
    pub max_handshakes: usize,
    /// Pending TLS handshakes at once from one source address; its newest connection
    /// closes its own oldest past this.
    pub max_handshakes_per_source: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            idle_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(1),
            max_handshakes: 512,
            max_handshakes_per_source: 32,
        }
    }
}

/// Why a connection was closed before it was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// A newer connection took its place in the pool of pending handshakes (the pool was
    /// full, or its source held its whole share), during its handshake or while it waited
    /// for a slot.
    PushedOut,
    /// Its TLS handshake did not end within the handshake timeout.
    HandshakeTimedOut,
    /// Its handshake was accepted, but no connection slot came free in time.
    NoSlot,
}

impl Dropped {
    pub const ALL: [Dropped; 3] = [
        Dropped::PushedOut,
        Dropped::HandshakeTimedOut,
        Dropped::NoSlot,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::PushedOut => "pushed_out",
            Dropped::HandshakeTimedOut => "handshake_timeout",
            Dropped::NoSlot => "no_slot",
        }
    }
}

/// Where a server reports the connections it closed unserved: the feature that runs the
/// server (the webhook, the join-token API) counts them in its own metric families.
pub trait DropCounter: Send + Sync + 'static {
    fn dropped(&self, why: Dropped);
}

/// The pending handshakes of one server, and how to close each.
struct Handshakes {
    pool: Pool<IpAddr>,
    /// Dropping a sender closes that connection (its handshake is pushed out).
    close: HashMap<Ticket, oneshot::Sender<()>>,
}

/// What a connection goes through before it is served: a place in the handshake pool,
/// then one of the connection slots. Made by [`accept_loop`] for each connection.
pub struct Gate {
    handshakes: Arc<Mutex<Handshakes>>,
    slots: Arc<Semaphore>,
    counter: Arc<dyn DropCounter>,
    ticket: Ticket,
    pushed_out: oneshot::Receiver<()>,
    left: bool,
}

/// Why a handshake did not give a connection.
#[derive(Debug)]
pub enum NoHandshake<E> {
    Failed(E),
    TimedOut,
    /// A newer connection took its place in the pool.
    PushedOut,
}

fn lock(h: &Mutex<Handshakes>) -> std::sync::MutexGuard<'_, Handshakes> {
    h.lock().unwrap_or_else(|p| p.into_inner())
}

/// What every connection of one server passes through: its pool of pending handshakes,
/// its connection slots, and where it reports the connections it closes unserved.
struct Gates {
    handshakes: Arc<Mutex<Handshakes>>,
    slots: Arc<Semaphore>,
    counter: Arc<dyn DropCounter>,
}

impl Gates {
    fn new(limits: &ConnectionLimits, counter: Arc<dyn DropCounter>) -> Gates {
        Gates {
            handshakes: Arc::new(Mutex::new(Handshakes {
                pool: Pool::new(Bounds {
                    total: limits.max_handshakes,
                    per_source: limits.max_handshakes_per_source,
                }),
                close: HashMap::new(),
            })),
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            counter,
        }
    }

    /// Admits a new connection from `source` to the pool, closing those it pushes out.
    fn admit(&self, source: IpAddr) -> Gate {
        let (tx, rx) = oneshot::channel();
        let mut h = lock(&self.handshakes);
        let (ticket, pushed_out) = h.pool.admit(source);
        for old in pushed_out {
            // Counted before its connection is closed: whoever sees it closed sees it counted.
            self.counter.dropped(Dropped::PushedOut);
            h.close.remove(&old);
        }
        h.close.insert(ticket, tx);
        drop(h);
        Gate {
            handshakes: self.handshakes.clone(),
            slots: self.slots.clone(),
            counter: self.counter.clone(),
            ticket,
            pushed_out: rx,
            left: false,
        }
    }
}

impl Gate {
    /// Runs `handshake` within `deadline`, unless a newer connection pushes it out first.
    pub async fn handshake<T, E>(
        &mut self,
        deadline: Duration,
        handshake: impl Future<Output = Result<T, E>>,
    ) -> Result<T, NoHandshake<E>> {
        tokio::select! {
            biased;
            _ = &mut self.pushed_out => Err(NoHandshake::PushedOut),
            ended = timeout(deadline, handshake) => match ended {
                Ok(Ok(t)) => Ok(t),
                Ok(Err(e)) => Err(NoHandshake::Failed(e)),
                Err(_) => {
                    self.counter.dropped(Dropped::HandshakeTimedOut);
                    Err(NoHandshake::TimedOut)
                }
            },
        }
    }

    /// One of the server's connection slots, held until dropped, waited for at most
    /// `wait`; the connection keeps its place in the handshake pool meanwhile (so waiting
    /// connections are bounded too), and leaves it with the slot. `None`: no slot came in
    /// time, or a newer connection pushed this one out.
    pub async fn slot(&mut self, wait: Duration) -> Option<OwnedSemaphorePermit> {
        let slots = self.slots.clone();
        let slot = tokio::select! {
            biased;
            // Counted when it was pushed out (`Gates::admit`).
            _ = &mut self.pushed_out => None,
            slot = timeout(wait, slots.acquire_owned()) => match slot {
                Ok(slot) => slot.ok(),
                Err(_) => {
                    self.counter.dropped(Dropped::NoSlot);
                    None
                }
            },
        };
        // Pushed out between getting the slot and now: not served either.
        if self.leave() { slot } else { None }
    }

    /// Leaves the pool; false if the connection had been pushed out.
    fn leave(&mut self) -> bool {
        if std::mem::replace(&mut self.left, true) {
            return false;
        }
        let mut h = lock(&self.handshakes);
        h.close.remove(&self.ticket);
        h.pool.leave(self.ticket)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.leave();
    }
}

/// Accepts connections on `listener` until `shutdown` resolves and runs each in its own
/// task as `serve_one(stream, peer, gate)` makes it; the gate gives it its place in the
/// handshake pool and, once its handshake is accepted, its connection slot
/// (`limits.max_connections` at most). Connections closed unserved are reported to
/// `counter`.
pub async fn accept_loop<C, F>(
    listener: TcpListener,
    limits: ConnectionLimits,
    counter: Arc<dyn DropCounter>,
    shutdown: impl std::future::Future<Output = ()>,
    mut serve_one: C,
) where
    C: FnMut(TcpStream, SocketAddr, Gate) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    let gates = Gates::new(&limits, counter);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, most often: give closing connections a
                    // moment rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let gate = gates.admit(handshake_pool::source_of(peer.ip()));
        tokio::spawn(serve_one(stream, peer, gate));
    }
}

/// Serves one accepted connection with `handler` until it ends or has been idle for the
/// idle timeout. `admit` sees the finished handshake (e.g. the client's certificate) and
/// may close the connection before it takes a slot or any request is read.
pub async fn serve<H, F>(
    handler: H,
    acceptor: TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    mut gate: Gate,
    limits: ConnectionLimits,
    admit: impl FnOnce(&rustls::ServerConnection) -> bool,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let tls = match gate
        .handshake(limits.handshake_timeout, acceptor.accept(stream))
        .await
    {
        Ok(tls) if admit(tls.get_ref().1) => tls,
        Ok(_) => {
            tracing::debug!(%peer, "client refused after the handshake");
            return;
        }
        Err(NoHandshake::Failed(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(NoHandshake::TimedOut) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
        Err(NoHandshake::PushedOut) => {
            tracing::debug!(%peer, "TLS handshake closed for a newer connection (pool full)");
            return;
        }
    };
    // A slot held by a connection that carries nothing frees within the idle timeout and
    // the close grace; waiting twice that lets a client behind a wall of stalled ones in.
    let Some(_slot) = gate.slot(2 * (limits.idle_timeout + CLOSE_GRACE)).await else {
        tracing::debug!(%peer, max = limits.max_connections, "no connection slot came free in time, or pushed out while waiting; closing");
        return;
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

    /// The connections reported closed unserved, in order.
    #[derive(Default)]
    struct Reported(Mutex<Vec<Dropped>>);

    impl DropCounter for Reported {
        fn dropped(&self, why: Dropped) {
            self.0.lock().unwrap().push(why);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_connection_closed_unserved_is_reported_once_with_why() {
        let reported = Arc::new(Reported::default());
        let limits = ConnectionLimits {
            max_connections: 1,
            max_handshakes: 2,
            max_handshakes_per_source: 2,
            ..ConnectionLimits::default()
        };
        let gates = Gates::new(&limits, reported.clone());
        let source = IpAddr::from([10, 0, 0, 1]);
        let wait = Duration::from_secs(1);

        // A handshake that fails is the client's doing, not a flood's: not reported.
        let failed = gates
            .admit(source)
            .handshake(wait, async { Err::<(), _>("bad certificate") })
            .await;
        assert!(matches!(failed, Err(NoHandshake::Failed(_))));
        // One that never ends is closed at its deadline.
        let stalled = gates
            .admit(source)
            .handshake(wait, std::future::pending::<Result<(), ()>>())
            .await;
        assert!(matches!(stalled, Err(NoHandshake::TimedOut)));
        // The one slot is held: the next accepted connection waits for it in vain.
        let _held = gates.admit(source).slot(wait).await.expect("a free slot");
        assert!(gates.admit(source).slot(wait).await.is_none());
        // A full pool pushes out its oldest, reported once: not again when its wait ends.
        let mut oldest = gates.admit(source);
        let (_newer, _newest) = (gates.admit(source), gates.admit(source));
        assert!(oldest.slot(wait).await.is_none());

        assert_eq!(
            *reported.0.lock().unwrap(),
            vec![
                Dropped::HandshakeTimedOut,
                Dropped::NoSlot,
                Dropped::PushedOut
            ]
        );
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
