//! A fake API server on loopback for the join tests that need a cluster-info no real
//! cluster would serve: one crafted by someone holding a leaked token (a CA bundle with the
//! attacker's CA, a `server` pointing at the attacker), one signed with another secret, or a
//! body far larger than any cluster-info. It speaks just enough HTTPS for discovery: every
//! request gets the same answer, then the connection is closed.
//!
//! It runs on plain threads (rustls over std sockets), so it serves while the test's tokio
//! runtime waits on the binary under test.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kubeflavor_core::crypto::pin::CaPin;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA the test owns: the cluster's (its pin is what the node administrator was given) or
/// an attacker's.
pub struct TestCa {
    pub cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(common_name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            cert_der: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        }
    }

    pub fn pem(&self) -> String {
        kubeflavor_core::crypto::keys::encode_pem("CERTIFICATE", &self.cert_der).to_string()
    }

    pub fn pin(&self) -> String {
        CaPin::from_cert_der(&self.cert_der).unwrap().to_string()
    }

    /// A serving certificate for 127.0.0.1 signed by this CA, as TLS configuration.
    fn serving(&self) -> rustls::ServerConfig {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap()
    }
}

/// The `kubeconfig` of a cluster-info naming `server` and these CA certificates, in
/// kubeadm's layout.
pub fn kubeconfig(server: &str, cas: &[&TestCa]) -> String {
    let bundle: String = cas.iter().map(|ca| ca.pem()).collect();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {}\n    server: {server}\ncontexts: null\ncurrent-context: \"\"\npreferences: {{}}\nusers: null\n",
        STANDARD.encode(bundle)
    )
}

/// The ConfigMap kube-public/cluster-info as JSON, with `kubeconfig` signed for `token_id`
/// with `secret` (the bootstrapsigner's detached JWS).
pub fn cluster_info_json(kubeconfig: &str, token_id: &str, secret: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {
            "kubeconfig": kubeconfig,
            format!("jws-kubeconfig-{token_id}"): kubeflavor_core::join::jws::sign(token_id, secret, kubeconfig.as_bytes()),
        },
    }))
    .unwrap()
}

/// What the fake server answers to every request.
#[derive(Clone)]
pub enum Answer {
    /// 200 with this JSON body.
    Json(Vec<u8>),
    /// 200 with a chunked body that starts like a ConfigMap and goes on for this many
    /// bytes (or until the client hangs up).
    Huge(usize),
}

/// A fake API server on 127.0.0.1 whose serving certificate is signed by `tls`; stops when
/// dropped.
pub struct FakeApiServer {
    /// `127.0.0.1:<port>`, as a join line names the endpoint.
    pub endpoint: String,
    stop: Arc<AtomicBool>,
    /// The request line of every request served (`GET /api/v1/... HTTP/1.1`).
    requests: Arc<Mutex<Vec<String>>>,
}

impl FakeApiServer {
    pub fn start(tls: &TestCa, answer: Answer) -> FakeApiServer {
        Self::start_with(tls, move |_| answer.clone())
    }

    /// Like [`FakeApiServer::start`], with the answer chosen from the server's own endpoint
    /// (for a cluster-info whose `server` points back at it).
    pub fn start_with(tls: &TestCa, answer: impl FnOnce(&str) -> Answer) -> FakeApiServer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        let answer = Arc::new(answer(&endpoint));
        let config = Arc::new(tls.serving());
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (stopped, seen) = (stop.clone(), requests.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (config, answer, seen) = (config.clone(), answer.clone(), seen.clone());
                std::thread::spawn(move || serve(conn, config, &answer, &seen));
            }
        });
        FakeApiServer {
            endpoint,
            stop,
            requests,
        }
    }

    /// The request lines served so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.endpoint)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(&self.endpoint);
    }
}

/// One connection: TLS, one request, one answer, close. Errors end the connection (a
/// client that gives up, as a capped reader does, is the expected way out).
fn serve(
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    answer: &Answer,
    seen: &Mutex<Vec<String>>,
) {
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut stream = rustls::StreamOwned::new(tls, conn);
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&request);
    seen.lock()
        .unwrap()
        .push(line.lines().next().unwrap_or_default().to_owned());
    let _ = match answer {
        Answer::Json(body) => write_json(&mut stream, body),
        Answer::Huge(total) => write_huge(&mut stream, *total),
    };
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

fn write_json(out: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    out.write_all(body)?;
    out.flush()
}

/// A body that never says how long it is (chunked), as a server streaming garbage would.
fn write_huge(out: &mut impl Write, total: usize) -> std::io::Result<()> {
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )?;
    let start = br#"{"apiVersion":"v1","kind":"ConfigMap","data":{"kubeconfig":""#;
    write!(out, "{:x}\r\n", start.len())?;
    out.write_all(start)?;
    out.write_all(b"\r\n")?;
    let chunk = vec![b'A'; 64 * 1024];
    let mut sent = start.len();
    while sent < total {
        write!(out, "{:x}\r\n", chunk.len())?;
        out.write_all(&chunk)?;
        out.write_all(b"\r\n")?;
        sent += chunk.len();
    }
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}
