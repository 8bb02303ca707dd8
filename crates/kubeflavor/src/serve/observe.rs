//! `POST /v1/observations`: a node shows itself to kubeflavor from outside (P9). It
//! connects with its own kubelet client certificate (`system:node:<name>`, group
//! `system:nodes`, verified against the cluster's CA given as `serve
//! --node-client-ca-file`), and this server records what it saw, not what the node says:
//! the source address of the TCP connection, which instance saw it, and when, in the
//! status of the node's NodeReport (which the node cannot write). The controller turns the
//! address into the node's site.
//!
//! A revoked node is refused (its binding says so), and each node is held to the API's
//! per-caller rate.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use kube::Api;
use kube::api::{ListParams, PatchParams};
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_cluster::crd::network::OBSERVED_BY_CLIENT_CERTIFICATE;
use kubeflavor_cluster::node_reports;
use kubeflavor_core::network::probe;
use serde_json::json;

use super::Server;
use super::api::{Body, respond, status};

/// Who is at the other end of a connection, as the TLS handshake and the socket show it.
#[derive(Debug, Clone)]
pub struct Peer {
    pub address: SocketAddr,
    /// This server's address the peer connected to.
    pub local: Option<SocketAddr>,
    /// The node its client certificate names, once the handshake verified one against the
    /// cluster's CA; set once, after the handshake, before any request is read.
    pub node: Arc<OnceLock<Option<String>>>,
}

impl Peer {
    pub fn new(address: SocketAddr, local: Option<SocketAddr>) -> Peer {
        Peer {
            address,
            local,
            node: Arc::default(),
        }
    }

    fn node(&self) -> Option<&str> {
        self.node.get().and_then(Option::as_deref)
    }
}

/// The node a verified client certificate names: common name `system:node:<name>` and
/// organization `system:nodes`, each exactly once (the chain was verified by the handshake
/// against the CA given; a certificate without one is no node).
pub fn node_of(conn: &rustls::ServerConnection) -> Option<String> {
    node_of_certificate(conn.peer_certificates()?.first()?.as_ref())
}

/// The node a certificate (DER) names: see [`node_of`].
fn node_of_certificate(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cns: Vec<&str> = subject
        .iter_common_name()
        .map(|a| a.as_str().ok())
        .collect::<Option<_>>()?;
    let orgs: Vec<&str> = subject
        .iter_organization()
        .map(|a| a.as_str().ok())
        .collect::<Option<_>>()?;
    probe::node_of_subject(&cns, &orgs)
}

/// How long connecting back, and then the TLS handshake, may each take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The TLS client that connects back to nodes: it trusts the cluster's CA (`ca`, which
/// issues kubelets' serving certificates on a cluster kubeadm set up) and presents nothing.
pub fn probe_config(ca: &std::path::Path) -> anyhow::Result<rustls::ClientConfig> {
    let roots = crate::authz::ca_roots(ca, "--node-client-ca-file")?;
    Ok(rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Connects back to `address`:`port` from `from` (the address the node reached, to which
/// it has a route; `None`: the system's choice): the TCP handshake's time, and what the TLS
/// handshake showed (verified against the cluster's CA for that very address).
pub async fn probe(
    config: Arc<rustls::ClientConfig>,
    from: Option<IpAddr>,
    address: IpAddr,
    port: u16,
) -> (probe::ProbeOutcome, Option<u64>) {
    let connect = async {
        let socket = match address {
            IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        if let Some(from) = from.filter(|f| f.is_ipv4() == address.is_ipv4()) {
            socket.bind(SocketAddr::new(from, 0))?;
        }
        let started = Instant::now();
        let tcp = socket.connect(SocketAddr::new(address, port)).await?;
        Ok::<_, std::io::Error>((tcp, started.elapsed()))
    };
    let (tcp, elapsed) = match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
        Ok(Ok(connected)) => connected,
        _ => return (probe::ProbeOutcome::NoAnswer, None),
    };
    let round_trip = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let name = rustls_pki_types::ServerName::IpAddress(address.into());
    let connector = tokio_rustls::TlsConnector::from(config);
    let outcome = match tokio::time::timeout(PROBE_TIMEOUT, connector.connect(name, tcp)).await {
        Ok(Ok(tls)) => probe::ProbeOutcome::Presented {
            node: tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| node_of_certificate(leaf.as_ref())),
        },
        _ => probe::ProbeOutcome::Unverified,
    };
    (outcome, Some(round_trip))
}

/// Answers `POST /v1/observations`.
pub async fn observe(server: &Server, req: Request<Incoming>) -> Response<Body> {
    let Some(peer) = req.extensions().get::<Peer>().cloned() else {
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "the connection's peer is not known",
            None,
        );
    };
    if !server.observes_nodes {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "this server observes no nodes (start it with --node-client-ca-file, the CA of the kubelets' client certificates)",
            None,
        );
    }
    let Some(node) = peer.node().map(str::to_string) else {
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "present the node's own client certificate (system:node:<name>, as the kubelet holds it in /var/lib/kubelet/pki/kubelet-client-current.pem)",
            None,
        );
    };
    if let Err(wait) = server
        .limiter
        .check(&format!("node:{node}"), Instant::now())
    {
        let mut response = status(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            &format!(
                "too many observations of {node}; retry in {} s",
                wait.as_secs() + 1
            ),
            None,
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs() + 1));
        return response;
    }
    match revoked(server, &node).await {
        Ok(false) => {}
        Ok(true) => {
            return status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!("node {node} is revoked"),
                None,
            );
        }
        Err(e) => {
            tracing::warn!(%node, error = %e, "cannot read the node's binding");
            return status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "cannot read the node's binding now; retry",
                None,
            );
        }
    }
    // An IPv4 peer of a dual-stack listener, as IPv4.
    let address = kubeflavor_core::network::canonical(peer.address.ip());
    let at = kubeflavor_cluster::crd::whole_seconds(jiff::Timestamp::now());
    let mut observed = json!({
        "address": address.to_string(),
        "method": OBSERVED_BY_CLIENT_CERTIFICATE,
        "observer": server.instance,
        "at": at.to_string(),
        // A merge patch: what this observation does not measure is cleared.
        "kubeletEndpoint": null,
        "servingCertificate": null,
        "roundTripMicroseconds": null,
    });
    if let Some((config, port)) = &server.kubelet_probe {
        let from = peer
            .local
            .map(|l| kubeflavor_core::network::canonical(l.ip()));
        let (outcome, round_trip) = probe(config.clone(), from, address, *port).await;
        let verdict = probe::serving_verdict(&node, &outcome);
        observed["kubeletEndpoint"] = json!(SocketAddr::new(address, *port).to_string());
        observed["servingCertificate"] = json!(verdict.as_str());
        observed["roundTripMicroseconds"] = json!(round_trip);
    }
    let patch = json!({"status": {"observed": observed}});
    match node_reports::patch_status(
        &server.cluster.client,
        &node,
        &PatchParams::default(),
        &patch,
    )
    .await
    {
        Ok(_) => {
            tracing::info!(%node, %address, serving = %observed["servingCertificate"], "observed a node");
            respond(
                StatusCode::OK,
                "application/json",
                json!({
                    "node": node,
                    "address": address.to_string(),
                    "observedAt": at.to_string(),
                    "servingCertificate": observed["servingCertificate"],
                    "roundTripMicroseconds": observed["roundTripMicroseconds"],
                })
                .to_string(),
            )
        }
        Err(kube::Error::Api(e)) if e.code == 404 => status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "node {node} has no NodeReport yet: write it first (kubeflavor node report does both, in that order)"
            ),
            None,
        ),
        Err(e) => {
            tracing::warn!(%node, error = %e, "cannot record an observation");
            status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "cannot record the observation now; retry",
                None,
            )
        }
    }
}

/// Whether the node's binding is revoked (no binding: not revoked; such a node carries no
/// flavor, and its observation says nothing anyone trusts until it is bound).
async fn revoked(server: &Server, node: &str) -> Result<bool, kube::Error> {
    let bindings: Api<FlavorBinding> = Api::all(server.cluster.client.clone());
    let found = bindings
        .list(&ListParams::default().fields(&format!("metadata.name={node}")))
        .await?;
    Ok(found.items.iter().any(FlavorBinding::is_revoked))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate whose subject has these common names and organizations (rcgen keeps
    /// one value per attribute type: the last).
    fn cert(cns: &[&str], orgs: &[&str]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::default();
        let mut name = rcgen::DistinguishedName::new();
        for cn in cns {
            name.push(rcgen::DnType::CommonName, *cn);
        }
        for org in orgs {
            name.push(rcgen::DnType::OrganizationName, *org);
        }
        params.distinguished_name = name;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn only_a_node_certificate_names_a_node() {
        let node = |cns: &[&str], orgs: &[&str]| node_of_certificate(&cert(cns, orgs));
        assert_eq!(
            node(&["system:node:worker-1"], &["system:nodes"]).as_deref(),
            Some("worker-1")
        );
        // A user named like a node but not in the nodes' group (another signer could
        // issue that name): no node.
        assert_eq!(node(&["system:node:worker-1"], &[]), None);
        assert_eq!(node(&["system:node:worker-1"], &["system:masters"]), None);
        assert_eq!(node(&["worker-1"], &["system:nodes"]), None);
        assert_eq!(node(&["system:node:Not_A_Name"], &["system:nodes"]), None);
        assert_eq!(node(&["system:node:"], &["system:nodes"]), None);
        assert_eq!(node_of_certificate(b"not a certificate"), None);
    }
}
