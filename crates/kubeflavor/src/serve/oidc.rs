//! Node administrators' ID tokens: OpenID Connect issuers the owner trusts (`serve
//! --oidc-issuer URL=AUDIENCE`), their keys found by discovery and kept, and the checks a
//! token must pass before the roster reads the identity it names.
//!
//! Signature and claims are checked by the `jsonwebtoken` crate, never here: the token's
//! algorithm must be one of [`ALGORITHMS`] (asymmetric only: no `none`, no HMAC, so a
//! public key can never serve as an HMAC secret), the key is the issuer's own, found by the
//! token's `kid` in the issuer's published key set (a key, `jku` or `x5u` the token carries
//! is never used), the key's own `alg` and `use` must agree, and `iss`, `aud`, `exp`, `nbf`
//! and `iat` are checked with [`CLOCK_SKEW`] of leeway.
//!
//! Keys rotate: a token whose `kid` is not in the kept set makes the set be fetched again,
//! at most once per [`REFETCH_AT_MOST_EVERY`] per issuer (so a flood of made-up `kid`s
//! costs the provider one fetch per interval), and the set is fetched again anyway when
//! it is older than [`KEYS_KEPT_FOR`] (a key the provider dropped stops verifying).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use hyper::body::Bytes;
use jsonwebtoken::jwk::{JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use kubeflavor_core::mint::roster::Identity;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;

/// The signature algorithms accepted: asymmetric ones only.
pub const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Leeway on `exp`, `nbf` and `iat` for clocks that disagree (`serve --oidc-clock-skew`).
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// The most leeway `--oidc-clock-skew` may give: more would keep expired tokens alive.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// A key set fetched again at most this often when a token names a key it lacks.
pub const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);
/// A key set older than this is fetched again before it is used.
pub const KEYS_KEPT_FOR: Duration = Duration::from_secs(300);
/// The most a discovery document or key set may weigh.
const MAX_DOCUMENT_BYTES: usize = 512 * 1024;
/// How long one fetch from a provider may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest ID token read.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// One issuer the owner trusts, and the audience (client id) its tokens must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerConfig {
    pub issuer: String,
    pub audience: String,
}

impl FromStr for IssuerConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let Some((issuer, audience)) = s.rsplit_once('=') else {
            return Err(format!(
                "{s:?} names no audience; write the issuer URL, '=', and the client id its ID tokens are issued to (e.g. https://login.acme.example=kubeflavor)"
            ));
        };
        let https = issuer
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
        if !https || issuer.chars().any(char::is_whitespace) {
            return Err(format!(
                "issuer {issuer:?} is not an https URL; write it exactly as the provider's ID tokens' iss claim (e.g. https://login.acme.example)"
            ));
        }
        if audience.is_empty() || audience.chars().any(char::is_whitespace) {
            return Err(format!(
                "audience {audience:?} for issuer {issuer} is empty or holds whitespace; write the client id (e.g. kubeflavor)"
            ));
        }
        Ok(IssuerConfig {
            issuer: issuer.to_string(),
            audience: audience.to_string(),
        })
    }
}

/// Why an ID token was not accepted. The message is for the administrator: it says what
/// to do, not how the check works inside.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("the bearer token is not an ID token (a JWT); sign in again and send the ID token")]
    Malformed,
    #[error(
        "the ID token's issuer is not one this cluster trusts; sign in with the cluster owner's identity provider"
    )]
    UnknownIssuer,
    #[error("the ID token is not valid ({0}); sign in again")]
    Invalid(String),
    /// The provider's keys could not be fetched: not the administrator's fault.
    #[error("the identity provider's keys cannot be fetched right now ({0}); retry shortly")]
    Unavailable(String),
}

/// The issuers and what is kept of each.
pub struct Verifier {
    issuers: HashMap<String, Issuer>,
    groups_claim: String,
    tls: Arc<rustls::ClientConfig>,
    skew: Duration,
    keys_kept_for: Duration,
    refetch_every: Duration,
}

struct Issuer {
    config: IssuerConfig,
    /// What was fetched; read without waiting on a fetch in flight (a slow provider or a
    /// flood of unknown `kid`s does not hold up tokens of known keys).
    keys: std::sync::RwLock<Keys>,
    /// One fetch at a time per issuer.
    fetching: Mutex<()>,
}

#[derive(Default)]
struct Keys {
    jwks_uri: Option<String>,
    /// Where a browser signs in and where its code is redeemed (the portal's sign-in).
    endpoints: Option<Endpoints>,
    set: Option<(Instant, JwkSet)>,
    last_fetch: Option<Instant>,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
    #[serde(default)]
    authorization_endpoint: Option<String>,
    #[serde(default)]
    token_endpoint: Option<String>,
}

/// An issuer's endpoints for the authorization code flow, from its discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub authorization: String,
    pub token: String,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    #[serde(default)]
    iat: Option<i64>,
    #[serde(default)]
    azp: Option<String>,
    #[serde(default)]
    aud: Value,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    email_verified: Option<Value>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    nonce: Option<String>,
    #[serde(flatten)]
    rest: HashMap<String, Value>,
}

impl Verifier {
    /// A verifier for `issuers`; `roots`: the CAs their TLS certificates chain to (the
    /// system's when `None`). Nothing is fetched until the first token comes.
    pub fn new(
        issuers: Vec<IssuerConfig>,
        groups_claim: String,
        roots: rustls::RootCertStore,
    ) -> Self {
        crate::connect::install_crypto_provider();
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Verifier {
            issuers: issuers
                .into_iter()
                .map(|config| {
                    (
                        config.issuer.clone(),
                        Issuer {
                            config,
                            keys: Default::default(),
                            fetching: Mutex::new(()),
                        },
                    )
                })
                .collect(),
            groups_claim,
            tls: Arc::new(tls),
            skew: CLOCK_SKEW,
            keys_kept_for: KEYS_KEPT_FOR,
            refetch_every: REFETCH_AT_MOST_EVERY,
        }
    }

    /// The same verifier keeping key sets for `kept_for` and fetching one again for an
    /// unknown `kid` at most every `refetch_every` (tests of key rotation use zero for both).
    pub fn with_key_cache(mut self, kept_for: Duration, refetch_every: Duration) -> Self {
        self.keys_kept_for = kept_for;
        self.refetch_every = refetch_every;
        self
    }

    /// The same verifier with `skew` of leeway on `exp`, `nbf` and `iat` (at most
    /// [`MAX_CLOCK_SKEW`]).
    pub fn with_clock_skew(mut self, skew: Duration) -> Self {
        self.skew = skew.min(MAX_CLOCK_SKEW);
        self
    }

    /// The identity a valid ID token names.
    pub async fn verify(&self, token: &str) -> Result<Identity, Rejection> {
        self.verify_with_nonce(token)
            .await
            .map(|(identity, _)| identity)
    }

    /// The identity a valid ID token names, and its `nonce` claim (a sign-in checks it is
    /// its own).
    pub async fn verify_with_nonce(
        &self,
        token: &str,
    ) -> Result<(Identity, Option<String>), Rejection> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Rejection::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| Rejection::Malformed)?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(Rejection::Invalid(format!(
                "its algorithm {:?} is not accepted",
                header.alg
            )));
        }
        // Which issuer: read from the unverified payload only to pick the keys and the
        // checks; the signature and `iss` are then checked against that issuer alone.
        let issuer = unverified_issuer(token).ok_or(Rejection::Malformed)?;
        let issuer = self.issuers.get(&issuer).ok_or(Rejection::UnknownIssuer)?;
        let key = issuer.key(self, header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.skew.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[issuer.config.issuer.as_str()]);
        validation.set_audience(&[issuer.config.audience.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| Rejection::Invalid(describe(e.kind())))?;
        let claims = data.claims;
        let now = jiff::Timestamp::now().as_second();
        if claims
            .iat
            .is_some_and(|iat| iat > now + self.skew.as_secs() as i64)
        {
            return Err(Rejection::Invalid("it was issued in the future".into()));
        }
        // OpenID Connect Core 3.1.3.7: with several audiences, `azp` names ours.
        let audiences = match &claims.aud {
            Value::Array(a) => a.len(),
            _ => 1,
        };
        if audiences > 1 && claims.azp.as_deref() != Some(issuer.config.audience.as_str()) {
            return Err(Rejection::Invalid(
                "it was issued to another client (azp)".into(),
            ));
        }
        if claims.sub.is_empty() {
            return Err(Rejection::Invalid("it names no subject".into()));
        }
        let groups = match claims.rest.get(&self.groups_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            Some(Value::String(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        let identity = Identity {
            issuer: claims.iss,
            subject: claims.sub,
            email: claims.email.filter(|e| !e.is_empty()),
            // Only a JSON `true` is a verified e-mail (OpenID Connect Core 5.1: a boolean).
            email_verified: claims.email_verified == Some(Value::Bool(true)),
            groups,
            name: claims.name.filter(|n| !n.is_empty()),
        };
        Ok((identity, claims.nonce))
    }

    /// The client id (audience) the owner gave `issuer`, if it is trusted.
    pub fn audience(&self, issuer: &str) -> Option<&str> {
        self.issuers.get(issuer).map(|i| i.config.audience.as_str())
    }

    /// `issuer`'s authorization and token endpoints, from its discovery document (fetched
    /// once, then kept).
    pub async fn endpoints(&self, issuer: &str) -> Result<Endpoints, Rejection> {
        let issuer = self.issuers.get(issuer).ok_or(Rejection::UnknownIssuer)?;
        if let Some(found) = issuer.read().endpoints.clone() {
            return Ok(found);
        }
        let _turn = issuer.fetching.lock().await;
        if let Some(found) = issuer.read().endpoints.clone() {
            return Ok(found);
        }
        issuer.discover(&self.tls).await?;
        issuer.read().endpoints.clone().ok_or_else(|| {
            Rejection::Unavailable(
                "its discovery document names no https authorization_endpoint and token_endpoint"
                    .into(),
            )
        })
    }

    /// Redeems an authorization `code` at `issuer`'s token endpoint (RFC 6749 4.1.3, with
    /// the PKCE `code_verifier` of RFC 7636 and the client's secret by HTTP Basic), and
    /// returns the ID token it answers with. The token is verified by the caller, as any.
    pub async fn redeem_code(
        &self,
        issuer: &str,
        code: &str,
        code_verifier: &str,
        redirect_uri: &str,
        client_secret: &str,
    ) -> Result<zeroize::Zeroizing<String>, Rejection> {
        let endpoints = self.endpoints(issuer).await?;
        let client_id = self.audience(issuer).ok_or(Rejection::UnknownIssuer)?;
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_verifier", code_verifier)
            .finish();
        // RFC 6749 2.3.1: client id and secret form-encoded, then Basic.
        let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let basic = zeroize::Zeroizing::new(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                encode(client_id),
                encode(client_secret)
            ))
        ));
        let answer = tokio::time::timeout(
            FETCH_TIMEOUT,
            send(
                &self.tls,
                http::Method::POST,
                &endpoints.token,
                Some((basic.as_str(), body)),
            ),
        )
        .await
        .map_err(|_| Rejection::Unavailable("its token endpoint did not answer".into()))?
        .map_err(Rejection::Unavailable)?;
        #[derive(Deserialize)]
        struct TokenAnswer {
            id_token: Option<String>,
        }
        let parsed: TokenAnswer = serde_json::from_slice(&answer).map_err(|_| {
            Rejection::Unavailable("its token endpoint's answer is not JSON".into())
        })?;
        parsed
            .id_token
            .map(zeroize::Zeroizing::new)
            .ok_or_else(|| Rejection::Invalid("the provider's answer holds no ID token".into()))
    }
}

/// What went wrong, in words for the administrator.
fn describe(kind: &jsonwebtoken::errors::ErrorKind) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => "it has expired".into(),
        K::ImmatureSignature => "it is not valid yet".into(),
        K::InvalidAudience => "it was issued to another client".into(),
        K::InvalidIssuer => "another issuer".into(),
        K::InvalidSignature => "its signature does not verify".into(),
        K::MissingRequiredClaim(c) => format!("it lacks the {c} claim"),
        K::InvalidAlgorithm => "its algorithm does not match the key".into(),
        _ => "it cannot be read".into(),
    }
}

/// `iss` of the token's payload, not verified.
fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    value.get("iss")?.as_str().map(str::to_string)
}

impl Issuer {
    /// The decoding key for `kid` and `alg` from the issuer's key set, fetching the set
    /// when it is missing, old, or lacks `kid` (within [`REFETCH_AT_MOST_EVERY`]).
    async fn key(
        &self,
        verifier: &Verifier,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<DecodingKey, Rejection> {
        let fresh = |keys: &Keys, now: Instant| {
            keys.set
                .as_ref()
                .is_some_and(|(at, _)| now.duration_since(*at) < verifier.keys_kept_for)
        };
        // A known key of a fresh set: no waiting.
        {
            let keys = self.read();
            if fresh(&keys, Instant::now())
                && let Some(found) = find(&keys, kid, alg)?
            {
                return Ok(found);
            }
        }
        // Else one fetch at a time: the set is stale, or lacks the key and was not
        // fetched within `refetch_every`. Another task may have fetched meanwhile.
        let _turn = self.fetching.lock().await;
        let now = Instant::now();
        let (stale, may_refetch) = {
            let keys = self.read();
            if fresh(&keys, now)
                && let Some(found) = find(&keys, kid, alg)?
            {
                return Ok(found);
            }
            let may_refetch = keys
                .last_fetch
                .is_none_or(|at| now.duration_since(at) >= verifier.refetch_every);
            (!fresh(&keys, now), may_refetch)
        };
        if stale || may_refetch {
            self.fetch(&verifier.tls, now).await?;
            if let Some(found) = find(&self.read(), kid, alg)? {
                return Ok(found);
            }
        }
        Err(Rejection::Invalid(
            "it is signed with a key the provider does not publish".into(),
        ))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.keys.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Keys> {
        self.keys.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Fetches the key set (and the discovery document the first time), with no lock held
    /// across the network; the caller holds `fetching`.
    async fn fetch(&self, tls: &Arc<rustls::ClientConfig>, now: Instant) -> Result<(), Rejection> {
        let known_uri = {
            let mut keys = self.write();
            keys.last_fetch = Some(now);
            keys.jwks_uri.clone()
        };
        let jwks_uri = match known_uri {
            Some(uri) => uri,
            None => self.discover(tls).await?,
        };
        let body = get(tls, &jwks_uri).await.map_err(Rejection::Unavailable)?;
        let set: JwkSet = serde_json::from_slice(&body)
            .map_err(|e| Rejection::Unavailable(format!("its key set: {e}")))?;
        tracing::debug!(issuer = %self.config.issuer, keys = set.keys.len(), "identity provider keys fetched");
        self.write().set = Some((now, set));
        Ok(())
    }
}

impl Issuer {
    /// Fetches the discovery document and keeps its `jwks_uri` and code-flow endpoints;
    /// the caller holds `fetching`.
    async fn discover(&self, tls: &Arc<rustls::ClientConfig>) -> Result<String, Rejection> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let body = get(tls, &url).await.map_err(Rejection::Unavailable)?;
        let discovery: Discovery = serde_json::from_slice(&body)
            .map_err(|e| Rejection::Unavailable(format!("its discovery document: {e}")))?;
        // OpenID Connect Discovery 4.3: the document's issuer is the issuer asked.
        if discovery.issuer != self.config.issuer {
            return Err(Rejection::Unavailable(format!(
                "its discovery document names issuer {:?}, not {:?}",
                discovery.issuer, self.config.issuer
            )));
        }
        if !discovery.jwks_uri.starts_with("https://") {
            return Err(Rejection::Unavailable(
                "its discovery document's jwks_uri is not https".into(),
            ));
        }
        let endpoints = discovery
            .authorization_endpoint
            .zip(discovery.token_endpoint)
            .filter(|(a, t)| a.starts_with("https://") && t.starts_with("https://"))
            .map(|(authorization, token)| Endpoints {
                authorization,
                token,
            });
        let mut keys = self.write();
        keys.jwks_uri = Some(discovery.jwks_uri.clone());
        keys.endpoints = endpoints;
        Ok(discovery.jwks_uri)
    }
}

/// The key of the set that `kid` names (the only key when the token names none and the
/// set has one), if its `use` and `alg` allow `alg`.
fn find(keys: &Keys, kid: Option<&str>, alg: Algorithm) -> Result<Option<DecodingKey>, Rejection> {
    let Some((_, set)) = &keys.set else {
        return Ok(None);
    };
    let jwk = match kid {
        Some(kid) => set.find(kid),
        None if set.keys.len() == 1 => set.keys.first(),
        None => None,
    };
    let Some(jwk) = jwk else {
        return Ok(None);
    };
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err(Rejection::Invalid("its key is an encryption key".into()));
    }
    if let Some(key_alg) = jwk.common.key_algorithm
        && !same_algorithm(key_alg, alg)
    {
        return Err(Rejection::Invalid("its algorithm is not its key's".into()));
    }
    DecodingKey::from_jwk(jwk)
        .map(Some)
        .map_err(|_| Rejection::Invalid("its key cannot be used".into()))
}

fn same_algorithm(key: KeyAlgorithm, alg: Algorithm) -> bool {
    format!("{key:?}") == format!("{alg:?}")
}

/// GET `url` over TLS (roots of `tls`), within [`FETCH_TIMEOUT`], at most
/// [`MAX_DOCUMENT_BYTES`].
async fn get(tls: &Arc<rustls::ClientConfig>, url: &str) -> Result<Bytes, String> {
    tokio::time::timeout(FETCH_TIMEOUT, send(tls, http::Method::GET, url, None))
        .await
        .map_err(|_| format!("GET {url}: no answer within {} s", FETCH_TIMEOUT.as_secs()))?
}

/// One request to a provider over TLS: a GET, or a POST of a form with an Authorization
/// header (`form`); the answer's body, at most [`MAX_DOCUMENT_BYTES`].
async fn send(
    tls: &Arc<rustls::ClientConfig>,
    method: http::Method,
    url: &str,
    form: Option<(&str, String)>,
) -> Result<Bytes, String> {
    let mut request = crate::outbound::Request::new(method.clone(), url, MAX_DOCUMENT_BYTES);
    if let Some((authorization, form)) = form {
        request.headers = vec![
            (http::header::AUTHORIZATION, authorization.to_string()),
            (
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded".to_string(),
            ),
        ];
        request.body = Bytes::from(form);
    }
    let (status, body) = crate::outbound::send(tls, request).await?;
    if !status.is_success() {
        return Err(format!("{method} {url}: HTTP {status}"));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issuer_names_its_audience_and_is_https() {
        let ok: IssuerConfig = "https://login.acme.example=kubeflavor".parse().unwrap();
        assert_eq!(ok.issuer, "https://login.acme.example");
        assert_eq!(ok.audience, "kubeflavor");
        let with_path: IssuerConfig = "https://idp.example/realms/a=b".parse().unwrap();
        assert_eq!(with_path.issuer, "https://idp.example/realms/a");
        for bad in [
            "https://login.acme.example",
            "http://login.acme.example=kubeflavor",
            "https://=kubeflavor",
            "https://login.acme.example=",
            "https://login.acme.example=a b",
        ] {
            assert!(bad.parse::<IssuerConfig>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_asymmetric_algorithms_are_accepted() {
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            assert!(!ALGORITHMS.contains(&alg));
        }
    }

    /// A provider on loopback: discovery and a key set of one P-256 key, counting fetches
    /// of the key set; and a signer of ID tokens with that key.
    struct Provider {
        issuer: String,
        roots: rustls::RootCertStore,
        jwks_fetches: Arc<std::sync::atomic::AtomicUsize>,
        signing: jsonwebtoken::EncodingKey,
    }

    async fn provider() -> Provider {
        use http_body_util::Full;
        use std::sync::atomic::{AtomicUsize, Ordering};
        crate::connect::install_crypto_provider();
        let (certified, pem) =
            kubeflavor_cluster::ops::tls::self_signed(&["127.0.0.1".into()]).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        {
            use rustls_pki_types::pem::PemObject;
            for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
        }
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(kubeflavor_cluster::ops::tls::FixedCert(certified)));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("https://{}", listener.local_addr().unwrap());
        let key = rcgen::KeyPair::generate().unwrap();
        let point = key.public_key_raw().to_vec();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwks = serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        }]})
        .to_string();
        let discovery =
            serde_json::json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")}).to_string();
        let fetches = Arc::new(AtomicUsize::new(0));
        let counted = fetches.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, jwks, discovery, counted) = (
                    acceptor.clone(),
                    jwks.clone(),
                    discovery.clone(),
                    counted.clone(),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let body = if req.uri().path() == "/jwks" {
                                counted.fetch_add(1, Ordering::SeqCst);
                                jwks.clone()
                            } else {
                                discovery.clone()
                            };
                            async move {
                                Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                    Bytes::from(body),
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let signing = jsonwebtoken::EncodingKey::from_ec_der(&key.serialize_der());
        Provider {
            issuer,
            roots,
            jwks_fetches: fetches,
            signing,
        }
    }

    impl Provider {
        fn verifier(&self) -> Verifier {
            Verifier::new(
                vec![IssuerConfig {
                    issuer: self.issuer.clone(),
                    audience: "kubeflavor".into(),
                }],
                "groups".into(),
                self.roots.clone(),
            )
        }

        fn token(&self, kid: &str, claims: serde_json::Value) -> String {
            let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
            header.kid = Some(kid.into());
            let now = jiff::Timestamp::now().as_second();
            let mut all = serde_json::json!({
                "iss": self.issuer, "aud": "kubeflavor", "sub": "u-1",
                "iat": now, "exp": now + 600,
            });
            for (k, v) in claims.as_object().unwrap() {
                all[k] = v.clone();
            }
            jsonwebtoken::encode(&header, &all, &self.signing).unwrap()
        }

        fn fetches(&self) -> usize {
            self.jwks_fetches.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_token_of_the_issuers_key_names_its_identity_and_only_a_true_email_verified_counts() {
        let p = provider().await;
        let v = p.verifier();
        let id = v
            .verify(&p.token("k1", serde_json::json!({"email": "a@acme.example", "email_verified": true, "groups": ["g"]})))
            .await
            .unwrap();
        assert_eq!((id.subject.as_str(), id.email_verified), ("u-1", true));
        assert_eq!(id.groups, ["g"]);
        // A string "true" is not OpenID Connect's boolean: not verified.
        let id = v
            .verify(&p.token(
                "k1",
                serde_json::json!({"email": "a@acme.example", "email_verified": "true"}),
            ))
            .await
            .unwrap();
        assert!(!id.email_verified);
        let now = jiff::Timestamp::now().as_second();
        for (what, claims) in [
            (
                "expired",
                serde_json::json!({"exp": now - 600, "iat": now - 1200}),
            ),
            ("not yet valid", serde_json::json!({"nbf": now + 600})),
            (
                "issued in the future",
                serde_json::json!({"iat": now + 600}),
            ),
            ("another audience", serde_json::json!({"aud": "other"})),
            (
                "another party among audiences",
                serde_json::json!({"aud": ["kubeflavor", "other"], "azp": "other"}),
            ),
            ("no subject", serde_json::json!({"sub": ""})),
        ] {
            let got = v.verify(&p.token("k1", claims)).await;
            assert!(matches!(got, Err(Rejection::Invalid(_))), "{what}: {got:?}");
        }
    }

    /// A flood of made-up `kid`s fetches the key set again at most once per
    /// [`REFETCH_AT_MOST_EVERY`], and tokens of the known key keep verifying meanwhile.
    #[tokio::test]
    async fn unknown_kids_refetch_the_key_set_at_most_once_per_interval() {
        let p = provider().await;
        let v = p.verifier();
        v.verify(&p.token("k1", serde_json::json!({})))
            .await
            .unwrap();
        assert_eq!(p.fetches(), 1);
        for i in 0..20 {
            let got = v
                .verify(&p.token(&format!("made-up-{i}"), serde_json::json!({})))
                .await;
            assert!(matches!(got, Err(Rejection::Invalid(_))), "{got:?}");
            v.verify(&p.token("k1", serde_json::json!({})))
                .await
                .unwrap();
        }
        assert_eq!(
            p.fetches(),
            1,
            "within the interval nothing is fetched again"
        );
        // With no interval, each unknown kid fetches once.
        let eager = p.verifier().with_key_cache(KEYS_KEPT_FOR, Duration::ZERO);
        eager
            .verify(&p.token("k1", serde_json::json!({})))
            .await
            .unwrap();
        let before = p.fetches();
        let _ = eager
            .verify(&p.token("made-up", serde_json::json!({})))
            .await;
        assert_eq!(p.fetches(), before + 1);
    }

    #[test]
    fn the_issuer_is_read_from_the_payload() {
        let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let token = format!(
            "{}.{}.sig",
            b64(r#"{"alg":"RS256"}"#),
            b64(r#"{"iss":"https://a.example","sub":"x"}"#)
        );
        assert_eq!(
            unverified_issuer(&token).as_deref(),
            Some("https://a.example")
        );
        assert_eq!(unverified_issuer("a.b.c"), None);
        assert_eq!(unverified_issuer("nodots"), None);
    }
}
