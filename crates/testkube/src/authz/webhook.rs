//! An authorization webhook in a structured `AuthorizationConfiguration`, placed before the
//! Node and RBAC authorizers (the order the real control plane in this project's tests
//! uses: webhook, Node, RBAC; the privileged `system:masters` authorizer always comes first).
//!
//! From kube-apiserver's sources:
//! - staging/src/k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go (`Authorize`):
//!   the SubjectAccessReview v1 it POSTs (spec.user, uid, groups, extra, and
//!   resourceAttributes {namespace, verb, group, version, resource, subresource, name} for
//!   resource requests, nonResourceAttributes {path, verb} otherwise); the answer's
//!   `status.denied` is a deny with `status.reason`, `status.allowed` an allow, neither no
//!   opinion; both is a deny with an error. Any failure to get an answer (dial, TLS,
//!   timeout, non-2xx, undecodable body) returns the `failurePolicy` decision (NoOpinion
//!   or Deny) together with the error.
//! - staging/src/k8s.io/apiserver/pkg/authorization/cel (matchConditions): CEL over the
//!   variable `request`, the SubjectAccessReviewSpec; all must be true for the webhook to
//!   be asked, a false one is no opinion without a call, an error is the failurePolicy
//!   decision with the error.
//! - staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go
//!   (`WithAuthorization`): a request not allowed while an authorizer returned an error is
//!   answered 500 InternalError, not 403; the union authorizer stops at the first allow or
//!   deny and keeps the errors it met.
//!
//! - pkg/registry/authorization/subjectaccessreview/rest.go: a SubjectAccessReview made
//!   through the API is answered by the same authorizer chain, the webhook included
//!   (`status.allowed`, `denied`, `reason`, `evaluationError`).
//!
//! - staging/src/k8s.io/client-go/transport/cache.go and
//!   staging/src/k8s.io/apimachinery/pkg/util/net/http.go (`SetTransportDefaults`): the
//!   webhook's REST client shares one Go `http.Transport` per TLS configuration, with
//!   HTTP/2 enabled and idle connections kept (`MaxIdleConnsPerHost` 25, idle 90 s). Over
//!   h2, which the webhook offers by ALPN, every review rides one connection kept alive;
//!   over HTTP/1.1 an idle connection is reused for the next review. A request on a kept
//!   connection the server closed meanwhile is sent again on a new one (Go retries a
//!   request on a reused connection that died before answering). So a flood that fills
//!   the webhook's pending handshakes reaches a review only when a new connection must be
//!   opened, as on the real server.
//!
//! Not imitated: the answer cache (authorizedTTL/unauthorizedTTL: the tests' control plane
//! disables it) and retries with backoff on transient errors.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Map, Value, json};

use crate::types::RequestAttributes;

/// What the API server decides when the webhook cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Node and RBAC decide as if the webhook were not there (a refusal is then a 500).
    NoOpinion,
    /// The request is refused (500, with the error).
    Deny,
}

/// The webhook's place in the configuration: where it is, how to reach it, when to ask.
#[derive(Debug, Clone)]
pub struct AuthorizationWebhook {
    /// `https://127.0.0.1:<port>/<path>` (the kubeconfig's `server`).
    pub url: String,
    /// The CA that signed the webhook's serving certificate.
    pub ca_pem: String,
    /// The client certificate the API server presents.
    pub client_cert_pem: String,
    /// Its key.
    pub client_key_pem: String,
    /// How long the API server waits for an answer.
    pub timeout: Duration,
    /// What an unanswered review decides.
    pub failure_policy: FailurePolicy,
    /// CEL expressions over `request` (a SubjectAccessReviewSpec); all must hold.
    pub match_conditions: Vec<String>,
}

/// One authorizer's verdict, with its reason (Deny and Allow) or the error met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow(String),
    Deny(String),
    NoOpinion,
    /// The webhook could not answer; the decision is the failurePolicy's.
    Failed {
        deny: bool,
        error: String,
    },
}

/// The SubjectAccessReview v1 spec the API server sends for `attrs`.
pub fn review_spec(attrs: &RequestAttributes) -> Value {
    let user = &attrs.user;
    let mut spec = Map::new();
    spec.insert("user".into(), json!(user.name));
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    spec.insert("groups".into(), json!(user.groups));
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
    if attrs.is_resource_request {
        let mut ra = Map::new();
        for (k, v) in [
            ("namespace", &attrs.namespace),
            ("verb", &attrs.verb),
            ("group", &attrs.api_group),
            ("version", &attrs.api_version),
            ("resource", &attrs.resource),
            ("subresource", &attrs.subresource),
            ("name", &attrs.name),
        ] {
            if !v.is_empty() {
                ra.insert(k.into(), json!(v));
            }
        }
        spec.insert("resourceAttributes".into(), Value::Object(ra));
    } else {
        spec.insert(
            "nonResourceAttributes".into(),
            json!({"path": attrs.path, "verb": attrs.verb}),
        );
    }
    Value::Object(spec)
}

impl AuthorizationWebhook {
    fn failed(&self, error: String) -> Verdict {
        Verdict::Failed {
            deny: self.failure_policy == FailurePolicy::Deny,
            error,
        }
    }

    /// Whether every match condition holds for `spec` (`Err`: one failed to evaluate).
    fn matches(&self, spec: &Value) -> Result<bool, String> {
        use crate::crd_validation::cel_rules::{compile, execute};
        let mut ctx = cel::Context::default();
        ctx.add_variable_as_val("request", crate::admission::to_val(spec));
        for expression in &self.match_conditions {
            let program = compile(expression)?;
            match execute(&program, &ctx)? {
                cel::Value::Bool(true) => {}
                cel::Value::Bool(false) => return Ok(false),
                other => return Err(format!("expected a bool, got {other:?}")),
            }
        }
        Ok(true)
    }

    /// Asks the webhook about `attrs` (or not, when a match condition is false).
    pub async fn authorize(&self, attrs: &RequestAttributes) -> Verdict {
        let spec = review_spec(attrs);
        match self.matches(&spec) {
            Ok(true) => {}
            Ok(false) => return Verdict::NoOpinion,
            Err(e) => return self.failed(format!("matchConditions: {e}")),
        }
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": {"allowed": false},
        });
        let answer = match tokio::time::timeout(self.timeout, self.post(&review)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return self.failed(e),
            Err(_) => return self.failed("context deadline exceeded".into()),
        };
        let status = &answer["status"];
        let flag = |k: &str| status[k].as_bool().unwrap_or(false);
        let reason = status["reason"].as_str().unwrap_or("").to_string();
        match (flag("allowed"), flag("denied")) {
            (true, true) => Verdict::Failed {
                deny: true,
                error: "webhook subject access review returned both allow and deny response".into(),
            },
            (_, true) => Verdict::Deny(reason),
            (true, _) => Verdict::Allow(reason),
            _ => Verdict::NoOpinion,
        }
    }

    /// Which kept connections this webhook may reuse: those of the same address and TLS
    /// configuration (client-go's transport cache key).
    fn pool_key(&self) -> String {
        format!("{}\n{}\n{}", self.url, self.ca_pem, self.client_cert_pem)
    }

    async fn post(&self, review: &Value) -> Result<Value, String> {
        let uri: hyper::Uri = self.url.parse().map_err(|e| format!("bad url: {e}"))?;
        let body = Bytes::from(review.to_string());
        if let Some(kept) = checkout(&self.pool_key()) {
            match self.send(&uri, kept, body.clone()).await {
                Ok(answer) => return answer,
                Err(e) => {
                    tracing::debug!(error = %e, "a kept webhook connection failed; dialing anew")
                }
            }
        }
        let fresh = self.dial(&uri).await?;
        self.send(&uri, fresh, body).await?
    }

    /// Opens a connection to the webhook, h2 when it offers it (as Go's transport does).
    async fn dial(&self, uri: &hyper::Uri) -> Result<Kept, String> {
        let host = uri.host().unwrap_or("127.0.0.1").trim_matches(['[', ']']);
        let port = uri.port_u16().unwrap_or(443);
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| e.to_string())?;
            roots.add(cert).map_err(|e| e.to_string())?;
        }
        let chain = CertificateDer::pem_slice_iter(self.client_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::from_pem_slice(self.client_key_pem.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        if h2 {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            keep_h2(&self.pool_key(), &sender);
            Ok(Kept::H2(sender))
        } else {
            let (sender, conn) = http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(Kept::H1(sender))
        }
    }

    /// Sends the review on `conn`. The outer error: the connection failed before an
    /// answer came (the caller may dial anew); the inner: the answer is not a review.
    async fn send(
        &self,
        uri: &hyper::Uri,
        conn: Kept,
        body: Bytes,
    ) -> Result<Result<Value, String>, String> {
        let host = uri.host().unwrap_or("127.0.0.1");
        let port = uri.port_u16().unwrap_or(443);
        let request = |target: String| {
            hyper::Request::post(target)
                .header(hyper::header::HOST, format!("{host}:{port}"))
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::ACCEPT, "application/json, */*")
                .body(Full::new(body))
                .map_err(|e| e.to_string())
        };
        let (response, h1) = match conn {
            Kept::H2(mut sender) => {
                let request = request(uri.to_string())?;
                (sender.send_request(request).await, None)
            }
            Kept::H1(mut sender) => {
                let request = request(uri.path().to_string())?;
                let response = sender.send_request(request).await;
                (response, Some(sender))
            }
        };
        let response = response.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if let Some(sender) = h1.filter(|s| !s.is_closed()) {
            keep_h1(&self.pool_key(), sender);
        }
        if !status.is_success() {
            return Ok(Err(format!(
                "the server responded with the status code {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            )));
        }
        Ok(serde_json::from_slice(&body).map_err(|e| format!("decoding the answer: {e}")))
    }
}

/// A connection kept alive to a webhook.
enum Kept {
    /// Shared by every review at once.
    H2(http2::SendRequest<Full<Bytes>>),
    /// One review at a time; idle ones wait in the pool.
    H1(http1::SendRequest<Full<Bytes>>),
}

/// The kept connections, by [`AuthorizationWebhook::pool_key`]: process-wide, as
/// client-go's transport cache is.
static KEPT: LazyLock<Mutex<HashMap<String, Pool>>> = LazyLock::new(Default::default);

#[derive(Default)]
struct Pool {
    h2: Option<http2::SendRequest<Full<Bytes>>>,
    idle_h1: Vec<http1::SendRequest<Full<Bytes>>>,
}

/// Go's `MaxIdleConnsPerHost` under `SetTransportDefaults`.
const MAX_IDLE_PER_HOST: usize = 25;

fn kept() -> std::sync::MutexGuard<'static, HashMap<String, Pool>> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

/// A live kept connection for `key`, if any.
fn checkout(key: &str) -> Option<Kept> {
    let mut all = kept();
    let pool = all.get_mut(key)?;
    if let Some(h2) = pool.h2.as_ref() {
        if !h2.is_closed() {
            return Some(Kept::H2(h2.clone()));
        }
        pool.h2 = None;
    }
    while let Some(h1) = pool.idle_h1.pop() {
        if !h1.is_closed() {
            return Some(Kept::H1(h1));
        }
    }
    None
}

/// Keeps an h2 connection for every review to come.
fn keep_h2(key: &str, sender: &http2::SendRequest<Full<Bytes>>) {
    kept().entry(key.to_string()).or_default().h2 = Some(sender.clone());
}

/// Returns an idle HTTP/1.1 connection to the pool.
fn keep_h1(key: &str, sender: http1::SendRequest<Full<Bytes>>) {
    let mut all = kept();
    let pool = all.entry(key.to_string()).or_default();
    if pool.idle_h1.len() < MAX_IDLE_PER_HOST {
        pool.idle_h1.push(sender);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::UserInfo;

    fn node_get(node: &str) -> RequestAttributes {
        let mut user = UserInfo::anonymous();
        user.name = format!("system:node:{node}");
        user.groups = vec!["system:nodes".into(), "system:authenticated".into()];
        RequestAttributes {
            user,
            verb: "get".into(),
            is_resource_request: true,
            path: format!("/api/v1/nodes/{node}"),
            api_group: String::new(),
            api_version: "v1".into(),
            resource: "nodes".into(),
            subresource: String::new(),
            namespace: String::new(),
            name: node.into(),
            field_selector: String::new(),
        }
    }

    fn webhook(conditions: &[&str], policy: FailurePolicy) -> AuthorizationWebhook {
        AuthorizationWebhook {
            // Nothing listens on port 1.
            url: "https://127.0.0.1:1/authorize".into(),
            ca_pem: String::new(),
            client_cert_pem: String::new(),
            client_key_pem: String::new(),
            timeout: Duration::from_secs(1),
            failure_policy: policy,
            match_conditions: conditions.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn the_review_carries_the_user_and_resource_attributes() {
        let spec = review_spec(&node_get("w1"));
        assert_eq!(spec["user"], "system:node:w1");
        assert_eq!(spec["groups"][0], "system:nodes");
        assert_eq!(
            spec["resourceAttributes"],
            json!({"verb": "get", "version": "v1", "resource": "nodes", "name": "w1"})
        );
    }

    #[tokio::test]
    async fn a_false_match_condition_is_no_opinion_without_a_call() {
        let w = webhook(
            &["'system:nodes' in request.groups && request.user.startsWith('system:node:authz-')"],
            FailurePolicy::Deny,
        );
        assert_eq!(w.authorize(&node_get("other")).await, Verdict::NoOpinion);
    }

    #[tokio::test]
    async fn a_webhook_that_cannot_be_asked_gives_the_failure_policy_with_the_error() {
        let cond = ["'system:nodes' in request.groups"];
        for (policy, deny) in [
            (FailurePolicy::NoOpinion, false),
            (FailurePolicy::Deny, true),
        ] {
            match webhook(&cond, policy).authorize(&node_get("w1")).await {
                Verdict::Failed { deny: d, .. } => assert_eq!(d, deny),
                other => panic!("expected a failure, got {other:?}"),
            }
        }
    }

    /// A webhook that denies everyone, offering `alpn`; counts the connections it accepts.
    async fn counting_webhook(
        alpn: &[&[u8]],
    ) -> (AuthorizationWebhook, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let ca = crate::pki::Ca::generate().unwrap();
        let server = ca.server_cert().unwrap();
        let client = ca.client_cert("kube-apiserver-authz-client", &[]).unwrap();
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(server.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).unwrap(),
            )
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let tls = acceptor.accept(tcp).await.unwrap();
                    let service = hyper::service::service_fn(|_req| async {
                        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                          "status": {"allowed": false, "denied": true, "reason": "no"}});
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from(body.to_string()),
                        )))
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let hook = AuthorizationWebhook {
            url: format!("https://127.0.0.1:{port}/authorize"),
            ca_pem: ca.cert_pem().to_string(),
            client_cert_pem: client.cert_pem,
            client_key_pem: client.key_pem,
            timeout: Duration::from_secs(5),
            failure_policy: FailurePolicy::NoOpinion,
            match_conditions: vec![],
        };
        (hook, accepted)
    }

    #[tokio::test]
    async fn reviews_ride_one_kept_connection_as_kube_apiservers_do() {
        use std::sync::atomic::Ordering;
        let both: &[&[u8]] = &[b"h2", b"http/1.1"];
        let http1: &[&[u8]] = &[b"http/1.1"];
        for alpn in [both, http1] {
            let (hook, accepted) = counting_webhook(alpn).await;
            for _ in 0..5 {
                assert_eq!(
                    hook.authorize(&node_get("w1")).await,
                    Verdict::Deny("no".into())
                );
            }
            assert_eq!(
                accepted.load(Ordering::SeqCst),
                1,
                "one connection for five reviews ({alpn:?})"
            );
        }
    }
}
