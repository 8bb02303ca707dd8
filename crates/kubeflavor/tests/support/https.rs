//! A small HTTPS client for the join-token API, trusting one certificate: what a portal's
//! back end does, without a client library. Shared by the tests and the mint benchmark.

// Each includer uses its own part of this module.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;

#[derive(Clone)]
pub struct HttpsClient {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    pem: String,
}

impl HttpsClient {
    /// A client of the server at `addr` whose certificate is `pem` (self-signed for an IP).
    pub fn new(addr: SocketAddr, pem: &str) -> HttpsClient {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM"))
            .expect("a CA");
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        HttpsClient {
            addr,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            pem: pem.to_string(),
        }
    }

    /// The server's certificate (PEM), as this client trusts it.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A new connection with its TLS handshake done and nothing sent yet.
    pub async fn connect(&self) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        let name = ServerName::from(self.addr.ip());
        self.tls.connect(name, tcp).await.expect("TLS handshake")
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// One request on a new connection with `headers`; the status, headers and body.
    pub async fn send(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (StatusCode, http::HeaderMap, Bytes) {
        let tls = self.connect().await;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string());
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body)))
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        (parts.status, parts.headers, bytes)
    }

    /// One POST on a new connection; the status and the body (JSON when it is JSON, else
    /// a string).
    pub async fn post(
        &self,
        path: &str,
        bearer: Option<&str>,
        accept: Option<&str>,
        body: &[u8],
    ) -> (StatusCode, Value) {
        let tls = self.connect().await;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
        tokio::spawn(conn);
        let mut req = Request::post(path).header("host", self.addr.ip().to_string());
        if let Some(token) = bearer {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        if let Some(accept) = accept {
            req = req.header("accept", accept);
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body)))
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }
}

/// `kubeflavor serve --self-signed` in-process on a free loopback port, with the credentials
/// of `kubeconfig` and a portal's ordinary rate (60 mints a minute, 20 at once), until
/// `shutdown` resolves: a client trusting the certificate it made, and the server's task.
pub async fn serve_self_signed(
    kubeconfig: &std::path::Path,
    instance: &str,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(HttpsClient, tokio::task::JoinHandle<()>)> {
    serve_self_signed_with(kubeconfig, instance, None, shutdown).await
}

/// [`serve_self_signed`], serving node administrators too when `administrators` is given.
pub async fn serve_self_signed_with(
    kubeconfig: &std::path::Path,
    instance: &str,
    administrators: Option<std::sync::Arc<kubeflavor::serve::Administrators>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(HttpsClient, tokio::task::JoinHandle<()>)> {
    serve_configured(kubeconfig, instance, shutdown, |o| {
        o.administrators = administrators
    })
    .await
}

/// [`serve_self_signed`] on `address`, observing nodes whose client certificates
/// `node_client_ca` (a PEM file) issued, connecting back to them on `kubelet_port` (0: not).
pub async fn serve_observing(
    kubeconfig: &std::path::Path,
    instance: &str,
    node_client_ca: std::path::PathBuf,
    address: SocketAddr,
    kubelet_port: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(HttpsClient, tokio::task::JoinHandle<()>)> {
    serve_configured(kubeconfig, instance, shutdown, |o| {
        o.observing = Some(kubeflavor::serve::Observing {
            node_client_ca,
            kubelet_port,
        });
        o.address = address;
        o.tls = kubeflavor::serve::TlsSource::SelfSigned {
            names: vec![address.ip().to_string()],
        };
    })
    .await
}

/// [`serve_self_signed`] with its options changed by `configure`.
async fn serve_configured(
    kubeconfig: &std::path::Path,
    instance: &str,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    configure: impl FnOnce(&mut kubeflavor::serve::Options),
) -> anyhow::Result<(HttpsClient, tokio::task::JoinHandle<()>)> {
    let cluster = kubeflavor::connect::Cluster::connect(&kubeflavor::connect::ClusterArgs {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        context: None,
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut options = kubeflavor::serve::Options {
        address: "127.0.0.1:0".parse()?,
        tls: kubeflavor::serve::TlsSource::SelfSigned {
            names: vec!["127.0.0.1".into()],
        },
        ops_address: None,
        per_minute: 60,
        burst: 20,
        audience: None,
        instance: instance.into(),
        connections: Default::default(),
        administrators: None,
        portal: None,
        observing: None,
    };
    configure(&mut options);
    let bound = kubeflavor::serve::bind(cluster, options).await?;
    let client = HttpsClient::new(
        bound.local_addr()?,
        bound.self_signed_pem.as_deref().unwrap_or_default(),
    );
    Ok((client, tokio::spawn(bound.serve(shutdown))))
}

/// The ports whose `/callback` the test identity provider registers as redirect URIs
/// (`testbed/oidc/start`): a portal binds the first one free.
pub const PORTAL_PORTS: [u16; 4] = [16490, 16491, 16492, 16493];

/// A portal serving on one of [`PORTAL_PORTS`].
pub struct PortalServer {
    /// `https://127.0.0.1:<port>`, as browsers reach it.
    pub origin: String,
    pub client: HttpsClient,
    pub task: tokio::task::JoinHandle<()>,
    /// The session key file, looked at on every request (rotate by writing it).
    pub keys_file: std::path::PathBuf,
    /// The session key and client secret files.
    _dir: tempfile::TempDir,
}

/// `kubeflavor serve --self-signed` with the node administrators' web portal, signing in
/// with `issuer` (the client id is its audience in `administrators`) and `client_secret`,
/// on the first of [`PORTAL_PORTS`] it can bind, until `shutdown` resolves.
pub async fn serve_portal(
    kubeconfig: &std::path::Path,
    instance: &str,
    administrators: std::sync::Arc<kubeflavor::serve::Administrators>,
    (issuer, client_secret): (&str, &str),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<PortalServer> {
    let dir = tempfile::tempdir()?;
    let keys = dir.path().join("session-keys");
    let key = kubeflavor_core::portal::seal::SealingKeys::new_key_line()?;
    std::fs::write(&keys, format!("{}\n", &*key))?;
    let cluster = kubeflavor::connect::Cluster::connect(&kubeflavor::connect::ClusterArgs {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        context: None,
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for port in PORTAL_PORTS {
        let origin = format!("https://127.0.0.1:{port}");
        let portal = kubeflavor::serve::portal::Portal::new(
            issuer.to_string(),
            zeroize::Zeroizing::new(client_secret.to_string()),
            &origin,
            keys.clone(),
            std::time::Duration::from_secs(600),
        )?
        .with_keys_checked_every(std::time::Duration::ZERO);
        let options = kubeflavor::serve::Options {
            address: format!("127.0.0.1:{port}").parse()?,
            tls: kubeflavor::serve::TlsSource::SelfSigned {
                names: vec!["127.0.0.1".into()],
            },
            ops_address: None,
            per_minute: 100,
            burst: 100,
            audience: None,
            instance: instance.into(),
            connections: Default::default(),
            administrators: Some(administrators.clone()),
            portal: Some(std::sync::Arc::new(portal)),
            observing: None,
        };
        // Another test (or run) may hold the port: the next one, then.
        let Ok(bound) = kubeflavor::serve::bind(cluster.clone(), options).await else {
            continue;
        };
        let client = HttpsClient::new(
            bound.local_addr()?,
            bound.self_signed_pem.as_deref().unwrap_or_default(),
        );
        return Ok(PortalServer {
            origin,
            client,
            task: tokio::spawn(bound.serve(shutdown)),
            keys_file: keys,
            _dir: dir,
        });
    }
    anyhow::bail!("every portal port the provider knows ({PORTAL_PORTS:?}) is taken")
}

/// The cluster's CA (PEM) an admin kubeconfig carries (`certificate-authority-data`), the
/// issuer of kubelets' certificates, written to `path` for `serve --node-client-ca-file`.
#[allow(dead_code)]
pub fn write_cluster_ca(kubeconfig_yaml: &str, path: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use base64::Engine;
    let config = kube::config::Kubeconfig::from_yaml(kubeconfig_yaml)?;
    let data = config
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .context("the kubeconfig carries no certificate-authority-data")?;
    std::fs::write(
        path,
        base64::engine::general_purpose::STANDARD.decode(data)?,
    )?;
    Ok(())
}
