//! Service-account tokens: what TokenRequest (`POST .../serviceaccounts/<name>/token`)
//! issues and the service-account token authenticator accepts.
//!
//! The claims are the real ones (pkg/serviceaccount/claims.go: `aud`, `exp`, `iat`, `iss`,
//! `jti`, `kubernetes.io.{namespace, serviceaccount.{name, uid}}`, `nbf`, `sub`), the
//! checks the real authenticator's (pkg/serviceaccount/jwt.go and claims.go): issuer,
//! audiences, expiry with go-jose's one-minute leeway, the ServiceAccount still existing
//! with the same uid. One difference: the JWS is signed HS256 with a per-cluster random
//! key instead of RS256 with the service-account key, and there is no
//! `/openid/v1/jwks`; only this cluster can verify its tokens.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use jiff::Timestamp;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::CREDENTIAL_ID_KEY;
use crate::types::{IdentityKind, ObjectReader, ResourceKey, UserInfo};

/// kubeadm's `--service-account-issuer`, which is also the API server's audience
/// (`--api-audiences` defaults to the issuer): the default audience of TokenRequest and
/// the audience TokenReview checks when the review names none.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";
/// The user extras of a token bound to a pod (k8s.io/apiserver/pkg/authentication/serviceaccount).
const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
/// go-jose's `DefaultLeeway` for exp/nbf/iat.
const LEEWAY_SECONDS: i64 = 60;

/// The per-cluster signing key of service-account tokens.
pub struct ServiceAccountIssuer {
    key: [u8; 32],
    key_id: String,
}

impl std::fmt::Debug for ServiceAccountIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountIssuer")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// What the service-account authenticator makes of a bearer token.
#[derive(Debug, PartialEq)]
pub enum SaTokenOutcome {
    /// Not a JWT of this issuer: another authenticator's business.
    NotMine,
    /// This issuer's token, rejected with the authenticator's error.
    Rejected(String),
    /// The user, and the audiences the token is good for among the requested ones.
    User(UserInfo, Vec<String>),
}

impl Default for ServiceAccountIssuer {
    fn default() -> Self {
        Self::generate()
    }
}

impl ServiceAccountIssuer {
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the OS random source is available");
        let key_id = URL_SAFE_NO_PAD.encode(&Sha256::digest(key)[..16]);
        ServiceAccountIssuer { key, key_id }
    }

    fn sign(&self, signing_input: &str) -> Vec<u8> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(signing_input.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// A token for the ServiceAccount `sa` (as stored), `token.Claims` for a token bound to
    /// nothing, or to `pod` (as stored): then it names the pod (and the node the pod is
    /// bound to) and authenticates only while that pod exists. Returns the token and its
    /// `jti`.
    pub fn issue(
        &self,
        sa: &Value,
        pod: Option<&Value>,
        audiences: &[String],
        expiration_seconds: i64,
        now: Timestamp,
    ) -> (String, String) {
        let meta = |f: &str| sa["metadata"][f].as_str().unwrap_or("").to_string();
        let (namespace, name) = (meta("namespace"), meta("name"));
        let jti = crate::store::new_uid();
        let now_s = now.as_second();
        let mut claims = json!({
            "aud": audiences,
            "exp": now_s + expiration_seconds,
            "iat": now_s,
            "iss": API_AUDIENCE,
            "jti": jti,
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": meta("uid")},
            },
            "nbf": now_s,
            "sub": format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"),
        });
        if let Some(pod) = pod {
            let pod_meta = |f: &str| pod["metadata"][f].as_str().unwrap_or("").to_string();
            claims["kubernetes.io"]["pod"] =
                json!({"name": pod_meta("name"), "uid": pod_meta("uid")});
            if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                claims["kubernetes.io"]["node"] = json!({"name": node});
            }
        }
        let header = json!({"alg": "HS256", "kid": self.key_id});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = URL_SAFE_NO_PAD.encode(self.sign(&input));
        (format!("{input}.{signature}"), jti)
    }

    /// `jwtTokenAuthenticator.AuthenticateToken` with the bound-token validator.
    pub fn authenticate(
        &self,
        token: &str,
        reader: &dyn ObjectReader,
        requested_audiences: &[String],
        now: Timestamp,
    ) -> SaTokenOutcome {
        let parts: Vec<&str> = token.split('.').collect();
        let [header, payload, signature] = parts.as_slice() else {
            return SaTokenOutcome::NotMine;
        };
        let decode = |part: &str| -> Option<Value> {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
        };
        let (Some(_header), Some(claims)) = (decode(header), decode(payload)) else {
            return SaTokenOutcome::NotMine;
        };
        // `hasCorrectIssuer`, before the signature is checked.
        if claims["iss"].as_str() != Some(API_AUDIENCE) {
            return SaTokenOutcome::NotMine;
        }
        let expected = self.sign(&format!("{header}.{payload}"));
        let valid = URL_SAFE_NO_PAD.decode(signature).is_ok_and(|sig| {
            subtle::ConstantTimeEq::ct_eq(sig.as_slice(), expected.as_slice()).into()
        });
        if !valid {
            return SaTokenOutcome::Rejected(
                "go-jose/go-jose: error in cryptographic primitive".into(),
            );
        }
        let token_audiences: Vec<String> = match &claims["aud"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            _ => vec![API_AUDIENCE.to_string()],
        };
        let audiences: Vec<String> = token_audiences
            .iter()
            .filter(|a| requested_audiences.contains(a))
            .cloned()
            .collect();
        if audiences.is_empty() {
            return SaTokenOutcome::Rejected(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted_list(&token_audiences),
                go_quoted_list(requested_audiences)
            ));
        }
        if let Some(reason) = time_claims_error(&claims, now) {
            return SaTokenOutcome::Rejected(reason.into());
        }
        let k8s = &claims["kubernetes.io"];
        let namespace = k8s["namespace"].as_str().unwrap_or("");
        let name = k8s["serviceaccount"]["name"].as_str().unwrap_or("");
        let uid = k8s["serviceaccount"]["uid"].as_str().unwrap_or("");
        let Some(sa) = reader.get(
            &ResourceKey::new("", "serviceaccounts"),
            Some(namespace),
            name,
        ) else {
            return SaTokenOutcome::Rejected(format!("serviceaccount \"{name}\" not found"));
        };
        let sa_uid = sa["metadata"]["uid"].as_str().unwrap_or("");
        if sa_uid != uid {
            return SaTokenOutcome::Rejected(format!(
                "service account UID ({sa_uid}) does not match claim ({uid})"
            ));
        }
        let mut extra = BTreeMap::new();
        if let Some(jti) = claims["jti"].as_str().filter(|j| !j.is_empty()) {
            extra.insert(CREDENTIAL_ID_KEY.to_string(), vec![format!("JTI={jti}")]);
        }
        // A token bound to a pod is good only while that pod exists with the same uid
        // (and is not being deleted for longer than a minute): the validator of
        // pkg/serviceaccount/claims.go.
        if let Some(pod_ref) = k8s.get("pod").filter(|p| p.is_object()) {
            let pod_name = pod_ref["name"].as_str().unwrap_or("");
            let pod_uid = pod_ref["uid"].as_str().unwrap_or("");
            let Some(pod) = reader.get(&ResourceKey::new("", "pods"), Some(namespace), pod_name)
            else {
                return SaTokenOutcome::Rejected(
                    "service account token has been invalidated".into(),
                );
            };
            let deleted_long_ago = pod["metadata"]["deletionTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_some_and(|t| t.as_second() < now.as_second() - 60);
            if deleted_long_ago {
                return SaTokenOutcome::Rejected(
                    "service account token has been invalidated".into(),
                );
            }
            let actual = pod["metadata"]["uid"].as_str().unwrap_or("");
            if actual != pod_uid {
                return SaTokenOutcome::Rejected(format!(
                    "pod UID ({actual}) does not match service account pod ref claim ({pod_uid})"
                ));
            }
            extra.insert(POD_NAME_KEY.to_string(), vec![pod_name.to_string()]);
            extra.insert(POD_UID_KEY.to_string(), vec![pod_uid.to_string()]);
            if let Some(node) = k8s["node"]["name"].as_str() {
                extra.insert(NODE_NAME_KEY.to_string(), vec![node.to_string()]);
            }
        }
        let user = UserInfo {
            kind: IdentityKind::ServiceAccountToken,
            name: format!("{SERVICE_ACCOUNT_USER_PREFIX}{namespace}:{name}"),
            uid: uid.to_string(),
            groups: vec![
                SERVICE_ACCOUNTS_GROUP.to_string(),
                format!("{SERVICE_ACCOUNTS_GROUP}:{namespace}"),
            ],
            extra,
        };
        SaTokenOutcome::User(user, audiences)
    }
}

/// go-jose's `Claims.Validate` with the default leeway, and the validator's messages.
fn time_claims_error(claims: &Value, now: Timestamp) -> Option<&'static str> {
    let now = now.as_second();
    let at = |k: &str| claims[k].as_i64();
    if at("exp").is_some_and(|exp| now > exp + LEEWAY_SECONDS) {
        return Some("service account token has expired");
    }
    if at("nbf").is_some_and(|nbf| now < nbf - LEEWAY_SECONDS) {
        return Some("service account token is not valid yet");
    }
    if at("iat").is_some_and(|iat| now < iat - LEEWAY_SECONDS) {
        return Some("service account token is issued in the future");
    }
    None
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::testutil::MemReader;

    fn sa() -> Value {
        json!({"metadata": {"name": "portal", "namespace": "portal-demo", "uid": "65bf4dd0-f1f0-43f8-bfda-956b5b4c34c9"}})
    }

    fn api() -> Vec<String> {
        vec![API_AUDIENCE.to_string()]
    }

    #[test]
    fn issued_tokens_authenticate_as_the_service_account() {
        let issuer = ServiceAccountIssuer::generate();
        let now: Timestamp = "2026-11-30T23:08:06Z".parse().unwrap();
        let (token, jti) = issuer.issue(&sa(), None, &api(), 600, now);
        let reader = MemReader::new().with("", "serviceaccounts", sa());
        let SaTokenOutcome::User(user, audiences) =
            issuer.authenticate(&token, &reader, &api(), now)
        else {
            panic!("the token authenticates");
        };
        assert_eq!(user.name, "system:serviceaccount:portal-demo:portal");
        assert_eq!(user.uid, "65bf4dd0-f1f0-43f8-bfda-956b5b4c34c9");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:portal-demo"
            ]
        );
        assert_eq!(user.extra[CREDENTIAL_ID_KEY], [format!("JTI={jti}")]);
        assert_eq!(audiences, api());

        // Past exp plus the leeway, for another audience, or once the ServiceAccount is gone.
        let later = now + jiff::SignedDuration::from_secs(600 + 61);
        assert_eq!(
            issuer.authenticate(&token, &reader, &api(), later),
            SaTokenOutcome::Rejected("service account token has expired".into())
        );
        assert_eq!(
            issuer.authenticate(&token, &reader, &["other".to_string()], now),
            SaTokenOutcome::Rejected(format!(
                "token audiences [\"{API_AUDIENCE}\"] is invalid for the target audiences [\"other\"]"
            ))
        );
        assert_eq!(
            issuer.authenticate(&token, &MemReader::new(), &api(), now),
            SaTokenOutcome::Rejected("serviceaccount \"portal\" not found".into())
        );
        // Another cluster's token, and things that are not JWTs at all.
        let other = ServiceAccountIssuer::generate();
        assert!(matches!(
            other.authenticate(&token, &reader, &api(), now),
            SaTokenOutcome::Rejected(_)
        ));
        assert_eq!(
            issuer.authenticate("abcdef.0123456789abcdef", &reader, &api(), now),
            SaTokenOutcome::NotMine
        );
    }
}
