//! The SubjectAccessReview the API server sends and the one it expects back.
//!
//! kube-apiserver's webhook authorizer (staging/src/k8s.io/apiserver/plugin/pkg/authorizer/
//! webhook/webhook.go) POSTs an `authorization.k8s.io/v1` SubjectAccessReview and decodes
//! the answer's `status`: `denied` refuses the request with `reason` (403), `allowed`
//! allows it, neither is "no opinion" and the next authorizer decides. Any answer that is
//! not a 2xx SubjectAccessReview is an error, which the API server turns into its
//! `failurePolicy` (NoOpinion or Deny).

use kubeflavor_core::node::cutoff::Answer;
use serde_json::{Value, json};

pub const API_VERSION: &str = "authorization.k8s.io/v1";
pub const KIND: &str = "SubjectAccessReview";

/// Who the review asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub user: String,
    pub groups: Vec<String>,
}

/// Why a body is not a SubjectAccessReview v1 (answered with 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadReview {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error(
        "expected apiVersion authorization.k8s.io/v1 and kind SubjectAccessReview, got {0:?} {1:?}"
    )]
    WrongKind(String, String),
    #[error("spec.{0} has the wrong type")]
    Field(&'static str),
}

/// Reads the subject of a SubjectAccessReview v1.
pub fn parse(body: &[u8]) -> Result<Subject, BadReview> {
    let v: Value = serde_json::from_slice(body).map_err(|e| BadReview::NotJson(e.to_string()))?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if api_version != API_VERSION || kind != KIND {
        return Err(BadReview::WrongKind(api_version, kind));
    }
    let spec = v.get("spec").ok_or(BadReview::Field("spec"))?;
    let user = match spec.get("user") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(BadReview::Field("user")),
    };
    let groups = match spec.get("groups") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|g| g.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or(BadReview::Field("groups"))?,
        Some(_) => return Err(BadReview::Field("groups")),
    };
    Ok(Subject { user, groups })
}

/// The SubjectAccessReview answering `answer` (200).
pub fn answer(answer: &Answer) -> Value {
    let status = match answer {
        Answer::Denied(reason) => json!({"allowed": false, "denied": true, "reason": reason}),
        Answer::NoOpinion => json!({"allowed": false}),
    };
    json!({"apiVersion": API_VERSION, "kind": KIND, "status": status})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(user: &str, groups: &[&str]) -> Vec<u8> {
        json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"creationTimestamp": null},
            "spec": {
                "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes", "name": "w1"},
                "user": user,
                "groups": groups,
                "uid": "",
            },
            "status": {"allowed": false},
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn reads_the_user_and_groups_the_api_server_sends() {
        assert_eq!(
            parse(&review(
                "system:node:w1",
                &["system:nodes", "system:authenticated"]
            ))
            .unwrap(),
            Subject {
                user: "system:node:w1".into(),
                groups: vec!["system:nodes".into(), "system:authenticated".into()],
            }
        );
    }

    #[test]
    fn other_bodies_are_refused() {
        assert!(matches!(parse(b"{"), Err(BadReview::NotJson(_))));
        let beta = json!({"apiVersion": "authorization.k8s.io/v1beta1", "kind": KIND, "spec": {}});
        assert!(matches!(
            parse(beta.to_string().as_bytes()),
            Err(BadReview::WrongKind(..))
        ));
        let token = json!({"apiVersion": API_VERSION, "kind": "TokenReview", "spec": {}});
        assert!(matches!(
            parse(token.to_string().as_bytes()),
            Err(BadReview::WrongKind(..))
        ));
        let groups = json!({"apiVersion": API_VERSION, "kind": KIND, "spec": {"groups": "x"}});
        assert_eq!(
            parse(groups.to_string().as_bytes()),
            Err(BadReview::Field("groups"))
        );
    }

    #[test]
    fn answers_are_what_the_webhook_authorizer_decodes() {
        assert_eq!(
            answer(&Answer::Denied("r".into()))["status"],
            json!({"allowed": false, "denied": true, "reason": "r"})
        );
        assert_eq!(
            answer(&Answer::NoOpinion)["status"],
            json!({"allowed": false})
        );
        assert_eq!(answer(&Answer::NoOpinion)["kind"], KIND);
    }
}
