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
//! Not imitated: the answer cache (authorizedTTL/unauthorizedTTL: the tests' control plane
//! disables it) and retries with backoff on transient errors.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
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
        ctx.add_variable_from_value("request", crate::admission::to_cel(spec));
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

    async fn post(&self, review: &Value) -> Result<Value, String> {
        let uri: hyper::Uri = self.url.parse().map_err(|e| format!("bad url: {e}"))?;
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
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?;
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let request = hyper::Request::post(uri.path())
            .header(hyper::header::HOST, format!("{host}:{port}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(review.to_string())))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "the server responded with the status code {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            ));
        }
        serde_json::from_slice(&body).map_err(|e| format!("decoding the answer: {e}"))
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
}
