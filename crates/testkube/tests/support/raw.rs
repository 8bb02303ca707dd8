//! A minimal HTTPS/1.1 client over tokio-rustls, for asserting exact status lines, headers
//! and bodies the way curl sees them from a real API server.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// Credentials for the raw client: a client certificate, or nothing (anonymous).
pub struct RawClient {
    config: Arc<rustls::ClientConfig>,
    addr: String,
}

impl RawClient {
    pub fn new(cluster: &testkube::TestCluster, cert: Option<(&str, &str)>) -> RawClient {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(cluster.ca_pem().as_bytes()).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        RawClient {
            config: Arc::new(config),
            addr: cluster
                .server_url()
                .trim_start_matches("https://")
                .to_string(),
        }
    }

    pub fn admin(cluster: &testkube::TestCluster) -> RawClient {
        let (cert, key) = cluster
            .issue_client_cert("kubernetes-admin", &["system:masters"])
            .unwrap();
        RawClient::new(cluster, Some((&cert, &key)))
    }

    /// Send one request (`Connection: close`) and read the whole response.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> RawResponse {
        let tcp = TcpStream::connect(&self.addr).await.unwrap();
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let mut tls = connector
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("User-Agent"))
        {
            req.push_str("User-Agent: testkube-raw/1.0\r\n");
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        tls.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        // A TLS peer may close without close_notify after `Connection: close`.
        let _ = tls.read_to_end(&mut raw).await;
        parse(&raw)
    }

    pub async fn get(&self, path: &str) -> RawResponse {
        self.send("GET", path, &[("Accept", "application/json")], "")
            .await
    }
}

fn parse(raw: &[u8]) -> RawResponse {
    let text = String::from_utf8_lossy(raw);
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .expect("a complete response head");
    let mut lines = head.lines();
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v == "chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    RawResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}
