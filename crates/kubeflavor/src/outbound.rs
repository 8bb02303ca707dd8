//! HTTPS requests kubeflavor makes to peers other than the API server: the owner's identity
//! providers (`serve::oidc`) and, from a node, the join-token API that observes it
//! (`report`). One request per connection over HTTP/1.1, host names resolved in process,
//! the answer's body read up to a limit.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::StatusCode;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;

/// One request.
pub struct Request<'a> {
    pub method: http::Method,
    /// An `https://` URL.
    pub url: &'a str,
    /// Headers beside Host and `Accept: application/json`.
    pub headers: Vec<(http::header::HeaderName, String)>,
    pub body: Bytes,
    /// The local address to connect from; `None`: the system's choice.
    pub source: Option<IpAddr>,
    /// The most of the answer's body read.
    pub max_bytes: usize,
}

impl<'a> Request<'a> {
    /// A request without headers or body, from the system's choice of address.
    pub fn new(method: http::Method, url: &'a str, max_bytes: usize) -> Request<'a> {
        Request {
            method,
            url,
            headers: Vec::new(),
            body: Bytes::new(),
            source: None,
            max_bytes,
        }
    }
}

/// Sends `req` over TLS configured by `tls`; the answer's status and body. Errors name the
/// method and URL.
pub async fn send(
    tls: &Arc<rustls::ClientConfig>,
    req: Request<'_>,
) -> Result<(StatusCode, Bytes), String> {
    let (method, url) = (&req.method, req.url);
    let fail = |e: &dyn std::fmt::Display| format!("{method} {url}: {e}");
    let uri: http::Uri = url.parse().map_err(|e| fail(&e))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!("{url} is not https"));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("{url} names no host"))?
        .trim_matches(['[', ']']);
    let port = uri.port_u16().unwrap_or(443);
    let addresses = resolve(host, port).await.map_err(|e| fail(&e))?;
    let tcp = connect(&addresses, req.source)
        .await
        .map_err(|e| fail(&e))?;
    let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(|e| fail(&e))?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| fail(&format!("TLS: {e}")))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| fail(&e))?;
    tokio::spawn(conn);
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let mut request = http::Request::builder()
        .method(method.clone())
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(http::header::HOST, authority)
        .header(http::header::ACCEPT, "application/json");
    for (name, value) in &req.headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(req.body)).map_err(|e| fail(&e))?;
    let response = sender.send_request(request).await.map_err(|e| fail(&e))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), req.max_bytes)
        .collect()
        .await
        .map_err(|e| fail(&e))?;
    Ok((status, body.to_bytes()))
}

/// A TCP connection to the first of `addresses` that answers, from `source` when given.
async fn connect(
    addresses: &[SocketAddr],
    source: Option<IpAddr>,
) -> std::io::Result<tokio::net::TcpStream> {
    let mut last = std::io::Error::other("no address to connect to");
    for addr in addresses {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if let Some(source) = source {
            socket.bind(SocketAddr::new(source, 0))?;
        }
        match socket.connect(*addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The addresses of `host`: an IP address as is, else resolved in process with the system's
/// configuration (`/etc/resolv.conf`, `/etc/hosts`), not libc's getaddrinfo, whose NSS
/// modules a static binary in an empty image does not have; libc only where no
/// configuration can be read.
pub async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    static RESOLVER: std::sync::OnceLock<Option<hickory_resolver::TokioResolver>> =
        std::sync::OnceLock::new();
    let resolver = RESOLVER.get_or_init(|| {
        hickory_resolver::Resolver::builder_tokio()
            .ok()
            .and_then(|b| b.build().ok())
    });
    let found: Vec<SocketAddr> = match resolver {
        Some(resolver) => resolver
            .lookup_ip(host)
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect(),
        None => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .collect(),
    };
    if found.is_empty() {
        return Err(format!("{host} has no address"));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn host_names_resolve_in_process_and_addresses_pass_as_they_are() {
        let ip = resolve("192.0.2.7", 443).await.unwrap();
        assert_eq!(ip, ["192.0.2.7:443".parse().unwrap()]);
        // localhost comes from /etc/hosts, read by the in-process resolver.
        let local = resolve("localhost", 8443).await.unwrap();
        assert!(
            local
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8443),
            "{local:?}"
        );
    }
}
