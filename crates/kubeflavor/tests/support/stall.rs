//! Clients that connect to the join-token API and then stall: they hold a connection and
//! send nothing, too little or too slowly, as an attacker who wants to use up the
//! server's connection slots does. Each runs until the server closes its connection and
//! says what it saw.

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::StreamBody;
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::https::HttpsClient;

/// The 24 bytes an h2 client starts with (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How often a trickling client sends its next byte: pacing, not synchronisation.
const TRICKLE: Duration = Duration::from_millis(100);

/// How a client stalls once its TLS handshake is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// Sends nothing at all.
    Silent,
    /// Sends an HTTP/1.1 request line and one header, never the blank line.
    PartialHeaders,
    /// Sends the h2 connection preface and nothing else (not even SETTINGS).
    H2Preface,
    /// Sends HTTP/1.1 headers one byte at a time, without end (slowloris).
    HeadersByTheByte,
    /// Sends complete HTTP/1.1 headers of a mint (with the caller's bearer token) and its
    /// 1,000-byte body one byte at a time.
    BodyByTheByte,
    /// Opens an h2 stream for a mint (with the caller's bearer token) and never ends its body.
    H2BodyNeverEnds,
}

/// What a stalled client saw before the server closed its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The connection was closed, with no HTTP answer.
    Closed,
    /// An answer with this status, then the connection was closed.
    Answered(StatusCode),
}

/// Connects, completes the TLS handshake, sends `()` on `ready` (the connection now holds
/// one of the server's slots), stalls as `stall` says until the server closes the
/// connection, and says what it saw. `path` and `bearer` make the mint request of the
/// stalls that send one.
pub async fn hold(
    client: HttpsClient,
    stall: Stall,
    path: String,
    bearer: String,
    ready: mpsc::UnboundedSender<()>,
) -> Seen {
    let mut tls = client.connect().await;
    let _ = ready.send(());
    let host = tls
        .get_ref()
        .0
        .peer_addr()
        .expect("connected")
        .ip()
        .to_string();
    match stall {
        Stall::Silent => closed(&mut tls).await,
        Stall::PartialHeaders => {
            let head = format!("POST {path} HTTP/1.1\r\nHost: {host}\r\n");
            tls.write_all(head.as_bytes()).await.expect("write");
            closed(&mut tls).await
        }
        Stall::H2Preface => {
            tls.write_all(H2_PREFACE).await.expect("write");
            closed(&mut tls).await
        }
        Stall::HeadersByTheByte => {
            let head = format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nX-Slow: ");
            tls.write_all(head.as_bytes()).await.expect("write");
            trickle(&mut tls).await
        }
        Stall::BodyByTheByte => {
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {bearer}\r\n\
                 Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
            );
            tls.write_all(head.as_bytes()).await.expect("write");
            trickle(&mut tls).await
        }
        Stall::H2BodyNeverEnds => h2_body_never_ends(tls, &host, &path, &bearer).await,
    }
}

/// Reads until the server closes the connection (end of stream, or an error such as a
/// reset or a TLS stream cut without close_notify); what it read, if it is an HTTP/1.1
/// answer, gives its status.
async fn closed(tls: &mut (impl AsyncRead + Unpin)) -> Seen {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => return seen(&read),
            Ok(n) => read.extend_from_slice(&buf[..n]),
        }
    }
}

/// Writes one more space every [`TRICKLE`] until the server closes the connection.
async fn trickle(tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Seen {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    let mut tick = tokio::time::interval(TRICKLE);
    loop {
        tokio::select! {
            r = tls.read(&mut buf) => match r {
                Ok(0) | Err(_) => return seen(&read),
                Ok(n) => read.extend_from_slice(&buf[..n]),
            },
            _ = tick.tick() => {
                if tls.write_all(b" ").await.is_err() || tls.flush().await.is_err() {
                    // The server closed: read what it answered before.
                    return match closed(tls).await {
                        Seen::Closed => seen(&read),
                        answered => answered,
                    };
                }
            }
        }
    }
}

fn seen(read: &[u8]) -> Seen {
    let text = String::from_utf8_lossy(read);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .map_or(Seen::Closed, Seen::Answered)
}

/// An h2 mint whose request body never ends: the answer's status once the server gives
/// up on the body, after the server closed the connection.
async fn h2_body_never_ends(
    tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    host: &str,
    path: &str,
    bearer: &str,
) -> Seen {
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let never = StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, Infallible>>());
    let req = Request::post(format!("https://{host}{path}"))
        .header("authorization", format!("Bearer {bearer}"))
        .header("content-type", "application/json")
        .body(never)
        .expect("request");
    let seen = match sender.send_request(req).await {
        Ok(response) => Seen::Answered(response.status()),
        Err(_) => Seen::Closed,
    };
    // The connection task ends when the server closes the connection: `sender` stays,
    // since a client whose last sender is gone closes the connection itself.
    let _ = conn.await;
    drop(sender);
    seen
}
