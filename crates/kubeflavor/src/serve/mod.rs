//! `kubeflavor serve`: an HTTPS JSON API that mints join tokens for an operator's portal,
//! so the portal needs no access to Secrets: it authenticates with its own Kubernetes
//! bearer token and may mint exactly the flavors its RBAC names (`create` on
//! `flavors/jointoken` of `kubeflavor.io`, `resourceNames` = the flavors). The server's own
//! identity does the reviews and writes the token Secrets.

pub mod administrators;
pub mod api;
pub mod ledger;
pub mod limits;
pub mod observe;
pub mod oidc;
pub mod openapi;
pub mod portal;
pub mod recent;
pub mod roster_status;
pub mod routes;
pub use kubeflavor_cluster::ops::tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubeflavor_cluster::ops::connection;
use kubeflavor_cluster::ops::http::{self as ops, Exposition, Health};
use kubeflavor_core::flavor::input_labels::InputLabels;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::connect::Cluster;
use crate::dropped_connections::DroppedConnections;

use self::limits::RateLimiter;
pub use kubeflavor_cluster::ops::connection::ConnectionLimits;

/// Who writes the trail's mint Events.
pub const REPORTING_CONTROLLER: &str = "kubeflavor.io/serve";
/// At most this many TokenReviews and SubjectAccessReviews in flight: a flood of requests
/// with bad tokens queues here instead of on the API server.
const REVIEWS_IN_FLIGHT: usize = 32;

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    /// PEM files, read again when they change.
    Files { cert: PathBuf, key: PathBuf },
    /// A certificate made at start for these names (tests, demos).
    SelfSigned { names: Vec<String> },
}

#[derive(Debug, Clone)]
pub struct Options {
    pub address: SocketAddr,
    pub tls: TlsSource,
    /// `/metrics`, `/healthz`, `/readyz` on plain HTTP; `None` for none.
    pub ops_address: Option<SocketAddr>,
    /// Mints per caller on this server: on average `per_minute` a minute, `burst` at once.
    /// Each replica counts on its own (see `kubeflavor_core::mint::rate`).
    pub per_minute: u32,
    pub burst: u32,
    /// The audience callers' tokens must carry; `None`: the API server's own.
    pub audience: Option<String>,
    /// This server's name in the trail (the pod name in a Deployment).
    pub instance: String,
    /// Connections held at once and how long each may take.
    pub connections: ConnectionLimits,
    /// Node administrators' sign-ins (`POST /v1/jointokens`); `None`: not served.
    pub administrators: Option<Arc<Administrators>>,
    /// The node administrators' web portal; `None`: not served.
    pub portal: Option<Arc<portal::Portal>>,
    /// Nodes presenting a client certificate of this CA are observed (`POST
    /// /v1/observations`); `None`: not served, and no client certificate is asked.
    pub observing: Option<Observing>,
}

/// How nodes are observed.
#[derive(Debug, Clone)]
pub struct Observing {
    /// The CA of the kubelets' client certificates, which also issues their serving
    /// certificates on a cluster kubeadm set up.
    pub node_client_ca: PathBuf,
    /// The kubelet's port, connected back to at the observed address; 0: not.
    pub kubelet_port: u16,
}

/// What `POST /v1/jointokens` needs: the identity providers the owner trusts and the
/// Roster that decides.
pub struct Administrators {
    pub verifier: oidc::Verifier,
    /// The Roster's name.
    pub roster: String,
    /// Grants not yet written to the Roster's status.
    pub pending: Arc<roster_status::Pending>,
}

impl Administrators {
    pub fn new(verifier: oidc::Verifier, roster: impl Into<String>) -> Administrators {
        Administrators {
            verifier,
            roster: roster.into(),
            pending: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Administrators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Administrators")
            .field("roster", &self.roster)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MintLabels {
    flavor: String,
    caller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputKeyLabels {
    flavor: String,
    key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdministratorLabels {
    rule: String,
    answer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: u16,
}

/// The answers the join-token API's alerts watch: 401 (no or a bad token), 403 (a flavor
/// the caller may not mint), 429 (over the caller's rate), 500 and 503.
const ALERTED_CODES: [u16; 5] = [401, 403, 429, 500, 503];

/// The API's metrics (`kubeflavor_serve_*`, and the connections it closed unserved with
/// `server="serve"`, see `crate::dropped_connections`). `caller` is the user name a
/// TokenReview authenticated and a SubjectAccessReview allowed to mint the flavor: bounded
/// by the identities RBAC lets mint (a request without that right is counted only by its
/// status code).
#[derive(Clone)]
pub struct ServeMetrics {
    mints: Family<MintLabels, Counter>,
    input_labels: Family<InputKeyLabels, Counter>,
    responses: Family<CodeLabels, Counter>,
    administrators: Family<AdministratorLabels, Counter>,
    /// Connections closed before they were served (a flood shows here).
    pub connections: DroppedConnections,
    registry: Arc<Registry>,
}

impl Default for ServeMetrics {
    fn default() -> Self {
        let mut root = Registry::with_prefix("kubeflavor");
        let connections = DroppedConnections::new("serve");
        connections.register(&mut root);
        let registry = root.sub_registry_with_prefix("serve");
        let mints = Family::<MintLabels, Counter>::default();
        registry.register(
            "join_tokens_minted",
            "Join tokens minted, by flavor and caller",
            mints.clone(),
        );
        // Keys come from the flavor's allowlist (at most 16 per flavor), never from the
        // caller: a refused key is answered 422 before anything is counted.
        let input_labels = Family::<InputKeyLabels, Counter>::default();
        registry.register(
            "input_labels",
            "Input labels carried by minted join tokens, by flavor and key",
            input_labels.clone(),
        );
        let responses = Family::<CodeLabels, Counter>::default();
        registry.register(
            "responses",
            "Answers of the join-token API by HTTP status code",
            responses.clone(),
        );
        // By the Roster rule that decided (empty: none) and the answer, never by flavor or
        // identity: rules are the owner's (at most 512), answers a fixed set.
        let administrators = Family::<AdministratorLabels, Counter>::default();
        registry.register(
            "administrator_answers",
            "Answers to node administrators, by deciding Roster rule and answer (minted, no-token, limit, invalid, invalid-token, misconfigured)",
            administrators.clone(),
        );
        // The answers the alerts watch exist from the start, at 0 (see the controller's
        // `Metrics::start_at_zero`).
        for code in ALERTED_CODES {
            let _ = responses.get_or_create(&CodeLabels { code });
        }
        // No rule decided: the answers the alerts tell apart (a 403 of "no token" is an
        // administrator not on the list, not a portal probing for flavors).
        for answer in ["no-token", "misconfigured"] {
            let _ = administrators.get_or_create(&AdministratorLabels {
                rule: String::new(),
                answer: answer.into(),
            });
        }
        ServeMetrics {
            mints,
            input_labels,
            responses,
            administrators,
            connections,
            registry: Arc::new(root),
        }
    }
}

impl ServeMetrics {
    pub fn minted(&self, flavor: &str, caller: &str) {
        self.mints
            .get_or_create(&MintLabels {
                flavor: flavor.into(),
                caller: caller.into(),
            })
            .inc();
    }

    /// A minted token's input labels, one count per key.
    pub fn input_labels(&self, flavor: &str, labels: &InputLabels) {
        for (key, _) in labels.iter() {
            self.input_labels
                .get_or_create(&InputKeyLabels {
                    flavor: flavor.into(),
                    key: key.to_string(),
                })
                .inc();
        }
    }

    /// One answer to a node administrator: the deciding rule (empty: none) and what they got.
    pub fn administrator_answer(&self, rule: &str, answer: &str) {
        self.administrators
            .get_or_create(&AdministratorLabels {
                rule: rule.into(),
                answer: answer.into(),
            })
            .inc();
    }

    pub fn response(&self, code: u16) {
        self.responses.get_or_create(&CodeLabels { code }).inc();
    }
}

impl Exposition for ServeMetrics {
    fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// What a request needs.
pub struct Server {
    pub cluster: Cluster,
    pub limiter: RateLimiter,
    pub reviews: Semaphore,
    pub metrics: ServeMetrics,
    pub audience: Option<String>,
    pub instance: String,
    /// How long a request's body may take once the request is accepted.
    pub request_timeout: Duration,
    /// This server's own Kubernetes user name: the `issued-by` of every token it mints,
    /// the one name the API server lets it write there (the serve policy).
    pub identity: String,
    /// Flavors' rules and the join target, read at most once a second.
    pub recent: recent::Recent,
    /// Node administrators' sign-ins, when served.
    pub administrators: Option<Arc<Administrators>>,
    /// The web portal, when served.
    pub portal: Option<Arc<portal::Portal>>,
    /// Nodes are observed (`POST /v1/observations`).
    pub observes_nodes: bool,
    /// How a node is connected back to when observed: TLS trusting the cluster's CA, on the
    /// kubelet's port; `None`: not.
    pub kubelet_probe: Option<(Arc<rustls::ClientConfig>, u16)>,
}

/// A server bound to its address, not yet serving.
pub struct Bound {
    server: Arc<Server>,
    listener: TcpListener,
    ops: Option<TcpListener>,
    acceptor: TlsAcceptor,
    connections: ConnectionLimits,
    /// The self-signed certificate, when one was made.
    pub self_signed_pem: Option<String>,
}

/// The server's own user name, as the API server knows it (a SelfSubjectReview, which
/// every authenticated user may create).
async fn own_name(cluster: &Cluster) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(cluster.client.clone());
    let review = reviews
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot ask the API server who this server is (SelfSubjectReview): {e}; the \
                 tokens it mints record that name as issued-by (check the API server's address \
                 and this identity's credentials)"
            )
        })?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!("the API server's SelfSubjectReview named no user for this server")
        })
}

/// Loads the certificate, learns its own user name and binds the addresses; an error here
/// is a configuration error.
pub async fn bind(cluster: Cluster, opts: Options) -> anyhow::Result<Bound> {
    crate::connect::install_crypto_provider();
    let (resolver, self_signed_pem): (Arc<dyn rustls::server::ResolvesServerCert>, _) = match &opts
        .tls
    {
        TlsSource::Files { cert, key } => {
            let reloading = tls::ReloadingCert::new(cert.clone(), key.clone()).map_err(|e| {
                    anyhow::anyhow!("{e} (give --tls-cert-file and --tls-key-file a PEM certificate and its key, e.g. a cert-manager Secret's tls.crt and tls.key)")
                })?;
            (Arc::new(reloading), None)
        }
        TlsSource::SelfSigned { names } => {
            let (key, pem) = tls::self_signed(names)?;
            (Arc::new(tls::FixedCert(key)), Some(pem))
        }
    };
    let config = match &opts.observing {
        Some(observing) => {
            let verifier = crate::authz::client_verifier(
                &observing.node_client_ca,
                "--node-client-ca-file",
                true,
            )?;
            tls::server_config_with_clients(resolver, verifier)
        }
        None => tls::server_config(resolver),
    };
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(opts.address).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {}: {e} (choose another --address)",
            opts.address
        )
    })?;
    let ops = match opts.ops_address {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
            anyhow::anyhow!("cannot listen on {addr}: {e} (choose another --http-address)")
        })?),
        None => None,
    };
    let identity = own_name(&cluster).await?;
    let server = Server {
        cluster,
        limiter: RateLimiter::new(opts.per_minute, opts.burst),
        reviews: Semaphore::new(REVIEWS_IN_FLIGHT),
        metrics: ServeMetrics::default(),
        audience: opts.audience,
        instance: opts.instance,
        request_timeout: opts.connections.request_timeout,
        identity,
        recent: recent::Recent::default(),
        administrators: opts.administrators,
        portal: opts.portal,
        observes_nodes: opts.observing.is_some(),
        kubelet_probe: match &opts.observing {
            Some(o) if o.kubelet_port != 0 => Some((
                Arc::new(observe::probe_config(&o.node_client_ca)?),
                o.kubelet_port,
            )),
            _ => None,
        },
    };
    Ok(Bound {
        server: Arc::new(server),
        listener,
        ops,
        acceptor,
        connections: opts.connections,
        self_signed_pem,
    })
}

impl Bound {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn ops_addr(&self) -> Option<SocketAddr> {
        self.ops.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Bound {
            server,
            listener,
            ops,
            acceptor,
            connections,
            ..
        } = self;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving the join-token API");
        let health = Arc::new(Health::default());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = async move {
            let mut rx = stop_rx;
            let _ = rx.wait_for(|s| *s).await;
        };
        let metrics: Arc<dyn Exposition> = Arc::new(server.metrics.clone());
        let ops_task = async {
            if let Some(listener) = ops
                && let Err(e) = ops::serve(listener, health.clone(), metrics, stopped).await
            {
                tracing::warn!(error = %e, "operations endpoint failed");
            }
        };
        // The Roster's status, written while the server serves.
        let status_writer = server.administrators.as_ref().map(|a| {
            tokio::spawn(roster_status::write_loop(
                server.cluster.clone(),
                a.roster.clone(),
                a.pending.clone(),
            ))
        });
        let accept = accept_loop(server, listener, acceptor, connections, shutdown);
        let accept = async {
            accept.await;
            health.set_stopping();
            let _ = stop_tx.send(true);
        };
        tokio::join!(ops_task, accept);
        if let Some(writer) = status_writer {
            writer.abort();
        }
    }
}

async fn accept_loop(
    server: Arc<Server>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let dropped = Arc::new(server.metrics.connections.clone());
    connection::accept_loop(listener, limits, dropped, shutdown, |stream, peer, gate| {
        let (server, acceptor) = (server.clone(), acceptor.clone());
        // The address the peer reached: a node observed is connected back to from it.
        let seen = observe::Peer::new(peer, stream.local_addr().ok());
        let node = seen.node.clone();
        let handler = move |mut req: http::Request<hyper::body::Incoming>| {
            let server = server.clone();
            req.extensions_mut().insert(seen.clone());
            async move { routes::handle(&server, req).await }
        };
        connection::serve(handler, acceptor, stream, peer, gate, limits, move |conn| {
            let _ = node.set(observe::node_of(conn));
            true
        })
    })
    .await;
}

#[cfg(test)]
mod tests {
    use kubeflavor_cluster::ops::connection::{DropCounter, Dropped};

    use super::*;

    #[test]
    fn the_apis_families_keep_their_prefix_beside_the_servers_dropped_connections() {
        let metrics = ServeMetrics::default();
        metrics.response(401);
        metrics.connections.dropped(Dropped::HandshakeTimedOut);
        let text = metrics.render();
        for line in [
            "kubeflavor_serve_responses_total{code=\"401\"} 1",
            "kubeflavor_serve_responses_total{code=\"429\"} 0",
            "kubeflavor_tls_connections_dropped_total{server=\"serve\",reason=\"handshake_timeout\"} 1",
            "kubeflavor_tls_connections_dropped_total{server=\"serve\",reason=\"pushed_out\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
