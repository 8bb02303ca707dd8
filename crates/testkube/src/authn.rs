//! Authentication, as kube-apiserver does it: client certificates signed by the cluster CA,
//! bootstrap tokens backed by `kube-system/bootstrap-token-<id>` Secrets, registered bearer
//! tokens, and anonymous requests.
//!
//! The bootstrap-token Secret readers here are shared with the kube-controller-manager
//! duties (`kcm`), which apply the same expiry and data rules as the authenticator.

use std::collections::BTreeMap;

use base64::Engine;
use jiff::Timestamp;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::types::{ApiError, IdentityKind, ObjectReader, ResourceKey, UserInfo};

pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const TOKEN_SECRET_NAMESPACE: &str = "kube-system";
pub const TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
/// `user.CredentialIDKey`: client-certificate identities carry the certificate's fingerprint.
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

pub mod informer;
pub mod service_account;

pub use informer::TokenSecretCache;
pub use service_account::{API_AUDIENCE, SaTokenOutcome, ServiceAccountIssuer};

/// What the bearer-token authenticators read.
pub struct TokenAuthenticators<'a> {
    /// Bearer tokens registered with the test cluster (a `--token-auth-file`).
    pub static_tokens: &'a BTreeMap<String, UserInfo>,
    /// Where bootstrap token Secrets are looked up: the authenticator's lagged informer
    /// view ([`TokenSecretCache`]) or, without lag, the store.
    pub token_secrets: &'a dyn ObjectReader,
    /// Service-account tokens, checked against the stored ServiceAccounts of `store`.
    pub service_accounts: Option<&'a ServiceAccountIssuer>,
    pub store: &'a dyn ObjectReader,
}

/// A token's user and the audiences it was accepted for.
pub type TokenUser = (UserInfo, Vec<String>);

/// `errInvalidToken` of the bearer-token authenticator: no token authenticator took the
/// token and none had an error to report (TokenReview shows it in `status.error`).
pub const INVALID_BEARER_TOKEN: &str = "invalid bearer token";

/// Decide who made a request.
///
/// - `peer_cert_der`: the client certificate the TLS layer already verified against the
///   cluster CA, if one was presented.
/// - `bearer`: the token from `Authorization: Bearer <token>`, if any.
/// - `static_tokens`: bearer tokens registered with the test cluster.
///
/// A request with no credentials is `system:anonymous` (not a 401). Any credential that fails
/// is the same uninformative 401 `Unauthorized` Status. Bootstrap token Secrets are read from
/// `reader` directly (no lag) and service-account tokens are not accepted; the server uses
/// [`authenticate_with`]; this entry point serves the unit tests.
#[cfg(test)]
pub fn authenticate(
    peer_cert_der: Option<&[u8]>,
    bearer: Option<&str>,
    static_tokens: &BTreeMap<String, UserInfo>,
    reader: &dyn ObjectReader,
    now: Timestamp,
) -> Result<UserInfo, ApiError> {
    let tokens = TokenAuthenticators {
        static_tokens,
        token_secrets: reader,
        service_accounts: None,
        store: reader,
    };
    let cert = peer_cert_der.and_then(ClientCertificate::parse);
    authenticate_with(cert.as_ref(), bearer, &tokens, now)
}

/// [`authenticate`] with every token authenticator.
pub fn authenticate_with(
    cert: Option<&ClientCertificate>,
    bearer: Option<&str>,
    tokens: &TokenAuthenticators<'_>,
    now: Timestamp,
) -> Result<UserInfo, ApiError> {
    // The x509 authenticator runs before the token authenticators; a certificate without a
    // CommonName is ignored (not rejected) and the request falls through to the token. One
    // outside its validity at the time of the request (a connection opened before it
    // expired) is an error: a token may still authenticate the request, but it is never
    // anonymous (`union.NewFailOnError` in front of the anonymous authenticator).
    if let Some(user) = cert.and_then(|c| c.user_at(now)) {
        return Ok(user.clone());
    }
    let cert_failed = cert.is_some_and(|c| !c.valid_at(now));
    // An empty bearer (`Authorization: Bearer `) is no credential at all, as in
    // k8s.io/apiserver's bearertoken authenticator.
    let Some(token) = bearer.filter(|t| !t.is_empty()) else {
        return if cert_failed {
            Err(unauthorized())
        } else {
            Ok(UserInfo::anonymous())
        };
    };
    let api = [API_AUDIENCE.to_string()];
    authenticate_token(token, tokens, &api, now)
        .map(|(user, _)| user)
        .map_err(|_| unauthorized())
}

/// The union of kube-apiserver's token authenticators (token file, service-account tokens,
/// bootstrap tokens) for `audiences`, as a request's bearer token or a TokenReview's
/// `spec.token` is authenticated: the user (with `system:authenticated` added) and the
/// audiences it is good for, or the error TokenReview reports. Static and bootstrap
/// tokens are audience-agnostic: good for the API server's own audience only.
pub fn authenticate_token(
    token: &str,
    tokens: &TokenAuthenticators<'_>,
    audiences: &[String],
    now: Timestamp,
) -> Result<TokenUser, String> {
    let mut errors = Vec::new();
    if let Some(issuer) = tokens.service_accounts {
        match issuer.authenticate(token, tokens.store, audiences, now) {
            SaTokenOutcome::User(user, auds) => {
                let groups = with_authenticated(user.groups.clone());
                return Ok((UserInfo { groups, ..user }, auds));
            }
            SaTokenOutcome::Rejected(err) => errors.push(err),
            SaTokenOutcome::NotMine => {}
        }
    }
    // `WrapAudienceAgnosticToken`: only for (an intersection with) the API audiences.
    let api_audiences: Vec<String> = audiences
        .iter()
        .filter(|a| a.as_str() == API_AUDIENCE)
        .cloned()
        .collect();
    if !api_audiences.is_empty() {
        if let Some(user) = static_token_user(token, tokens.static_tokens) {
            return Ok((user, api_audiences));
        }
        if let Some(user) = bootstrap_token_user(token, tokens.token_secrets, now) {
            return Ok((user, api_audiences));
        }
    }
    Err(match errors.len() {
        0 => INVALID_BEARER_TOKEN.to_string(),
        1 => errors.remove(0),
        _ => format!("[{}]", errors.join(", ")),
    })
}

/// The one 401 the real server gives for every failed credential (wrong secret, unknown
/// token id, garbage bearer): it never says which part was wrong.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// A client certificate the TLS layer verified against the cluster CA when the connection
/// was opened, read once per connection: the user it names and the validity the x509
/// authenticator checks again on every request (kube-apiserver verifies the chain per
/// request, so a certificate that expires while its connection stays open stops working).
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// `None` for a certificate without a CommonName (ignored, not rejected).
    user: Option<UserInfo>,
    not_before: Timestamp,
    not_after: Timestamp,
}

impl ClientCertificate {
    /// `None` if `der` is not a certificate.
    pub fn parse(der: &[u8]) -> Option<ClientCertificate> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let validity = cert.validity();
        let at = |t: &x509_parser::time::ASN1Time| Timestamp::from_second(t.timestamp()).ok();
        Some(ClientCertificate {
            user: certificate_user(&cert, der),
            not_before: at(&validity.not_before)?,
            not_after: at(&validity.not_after)?,
        })
    }

    /// Go's `Certificate.Verify`: invalid before NotBefore and after NotAfter.
    pub fn valid_at(&self, now: Timestamp) -> bool {
        self.not_before <= now && now <= self.not_after
    }

    /// The user the x509 authenticator finds at `now`: none when the certificate is
    /// outside its validity or has no CommonName.
    pub fn user_at(&self, now: Timestamp) -> Option<&UserInfo> {
        self.user.as_ref().filter(|_| self.valid_at(now))
    }
}

/// `CommonNameUserConversion`: user = CN, groups = every O value, plus the credential id;
/// `None` for a certificate without a CommonName.
fn certificate_user(cert: &X509Certificate<'_>, der: &[u8]) -> Option<UserInfo> {
    let subject = cert.subject();
    // Go's pkix.Name keeps the last CommonName when there are several.
    let name = subject
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .last()?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .collect();
    let credential_id = format!("X509SHA256={}", hex::encode(Sha256::digest(der)));
    let extra = BTreeMap::from([(CREDENTIAL_ID_KEY.to_string(), vec![credential_id])]);
    Some(UserInfo {
        kind: IdentityKind::ClientCert,
        name,
        uid: String::new(),
        groups: with_authenticated(groups),
        extra,
    })
}

fn static_token_user(token: &str, static_tokens: &BTreeMap<String, UserInfo>) -> Option<UserInfo> {
    // Compare against every registered token so the time taken does not depend on which
    // (if any) matched.
    let mut found = None;
    for (candidate, user) in static_tokens {
        if bool::from(candidate.as_bytes().ct_eq(token.as_bytes())) {
            found = Some(user);
        }
    }
    let user = found?;
    Some(UserInfo {
        kind: IdentityKind::StaticToken,
        groups: with_authenticated(user.groups.clone()),
        ..user.clone()
    })
}

/// plugin/pkg/auth/authenticator/token/bootstrap: the token's form, a live Secret
/// `kube-system/bootstrap-token-<id>` of the bootstrap type, its secret (compared in
/// constant time) and id, its expiration, `usage-bootstrap-authentication: "true"` and valid
/// extra groups; each failure silently "not authenticated" (the caller turns that into the
/// generic 401).
fn bootstrap_token_user(
    token: &str,
    reader: &dyn ObjectReader,
    now: Timestamp,
) -> Option<UserInfo> {
    let (token_id, token_secret) = parse_bootstrap_token(token)?;
    let secret = reader.get(
        &ResourceKey::new("", "secrets"),
        Some(TOKEN_SECRET_NAMESPACE),
        &format!("{TOKEN_SECRET_PREFIX}{token_id}"),
    )?;
    if secret
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return None;
    }
    if secret.get("type").and_then(Value::as_str) != Some(TOKEN_SECRET_TYPE) {
        return None;
    }
    let stored_secret = secret_data(secret, "token-secret").unwrap_or_default();
    if !bool::from(stored_secret.as_bytes().ct_eq(token_secret.as_bytes())) {
        return None;
    }
    if secret_data(secret, "token-id").as_deref() != Some(token_id) {
        return None;
    }
    if token_has_expired(secret, now) {
        return None;
    }
    if secret_data(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return None;
    }
    let groups = token_groups(secret)?;
    Some(UserInfo {
        kind: IdentityKind::BootstrapToken,
        name: format!("{BOOTSTRAP_USER_PREFIX}{token_id}"),
        uid: String::new(),
        groups: with_authenticated(groups),
        extra: BTreeMap::new(),
    })
}

/// `\A([a-z0-9]{6})\.([a-z0-9]{16})\z`; anything else is not a bootstrap token.
pub fn parse_bootstrap_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let valid = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (valid(id, 6) && valid(secret, 16)).then_some((id, secret))
}

/// `GetGroups`: `system:bootstrappers` plus the extra groups, sorted and de-duplicated; one
/// invalid extra group rejects the whole token (`None`).
fn token_groups(secret: &Value) -> Option<Vec<String>> {
    let mut groups = std::collections::BTreeSet::from([BOOTSTRAPPERS_GROUP.to_string()]);
    let extra = secret_data(secret, "auth-extra-groups").unwrap_or_default();
    if !extra.is_empty() {
        for group in extra.split(',') {
            if !is_valid_bootstrap_group(group) {
                return None;
            }
            groups.insert(group.to_string());
        }
    }
    Some(groups.into_iter().collect())
}

/// `\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`
pub fn is_valid_bootstrap_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    let bytes = rest.as_bytes();
    let Some((last, middle)) = bytes.split_last() else {
        return false;
    };
    middle.len() <= 255
        && middle
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b':' || *b == b'-')
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
}

/// `AuthenticatedGroupAdder`: append `system:authenticated` unless already there.
fn with_authenticated(mut groups: Vec<String>) -> Vec<String> {
    if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.to_string());
    }
    groups
}

/// One value of a Secret's data as a string (`bootstrapsecretutil.GetData`). Stored Secrets
/// carry base64 `data`; a `stringData` value (in case it was not merged at create) wins, as
/// it does in the API server's merge.
pub fn secret_data(secret: &Value, key: &str) -> Option<String> {
    if let Some(s) = secret
        .get("stringData")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
    {
        return Some(s.to_string());
    }
    let encoded = secret.get("data")?.get(key)?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// A token Secret's `expiration` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiration {
    /// No `expiration` key: the token never expires.
    Never,
    At(Timestamp),
    /// Not RFC 3339; every consumer treats the token as expired.
    Unparsable,
}

pub fn token_expiration(secret: &Value) -> Expiration {
    match secret_data(secret, "expiration") {
        None => Expiration::Never,
        Some(s) if s.is_empty() => Expiration::Never,
        Some(s) => parse_rfc3339(&s).map_or(Expiration::Unparsable, Expiration::At),
    }
}

/// `bootstrapsecretutil.HasExpired`: unparsable counts as expired, and a token whose
/// expiration equals `now` is already expired.
pub fn token_has_expired(secret: &Value, now: Timestamp) -> bool {
    match token_expiration(secret) {
        Expiration::Never => false,
        Expiration::At(at) => at <= now,
        Expiration::Unparsable => true,
    }
}

/// Go's `time.Parse(time.RFC3339, s)`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`. jiff alone
/// would also accept forms Go rejects (a space separator, bracketed annotations).
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 20 || !crate::validation::has_date_time_head(b) {
        return None;
    }
    let mut rest = &b[19..];
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|d| d.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &frac[n..];
    }
    let zone_ok = rest == b"Z"
        || (rest.len() == 6
            && (rest[0] == b'+' || rest[0] == b'-')
            && rest[1..3].iter().all(u8::is_ascii_digit)
            && rest[3] == b':'
            && rest[4..6].iter().all(u8::is_ascii_digit));
    if !zone_ok {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests;
