//! The node administrators' web portal (`serve --portal-url`): sign in with the owner's
//! identity provider (authorization code with PKCE, `state` and `nonce`), describe the
//! node, download the cloud-init user-data or a NoCloud seed image holding the join token,
//! see "My nodes". Same listener, limits and roster as `POST /v1/jointokens`; every
//! decision (sessions, CSRF, downloads, the form) is in `kubeflavor_core::portal`.
//!
//! The server keeps no session state: sessions, sign-ins in progress and downloads are
//! sealed (AES-256-GCM) with keys from a file (a Secret in the cluster), read again when
//! it changes, so keys rotate without signing anyone out and replicas share sessions.

mod pages;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use kube::api::ListParams;
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_core::mint::request::MAX_BODY_BYTES;
use kubeflavor_core::mint::roster::identity_key;
use kubeflavor_core::mint::seed_image;
use kubeflavor_core::portal::form::{self, NodeFormError};
use kubeflavor_core::portal::seal::{Purpose, SealingKeys};
use kubeflavor_core::portal::{
    Download, SESSION_COOKIE, SIGN_IN_COOKIE, SIGN_IN_WINDOW_SECS, Session, SessionStartError,
    SignIn, check_form,
};
use kubeflavor_core::token::meta::IDENTITY_LABEL;
use zeroize::Zeroizing;

use self::pages::{FormValues, SignedIn, esc};
use super::Server;
use super::administrators::{grant, over_limit, shown_as};
use super::api::Body;

/// What the page's Content-Security-Policy allows: this origin's stylesheet and forms,
/// nothing else (no script at all, no frames, no other origin).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const STYLESHEET: &str = include_str!("portal.css");
/// How often the key file is looked at for changes.
pub const KEYS_CHECKED_EVERY: Duration = Duration::from_secs(5);

/// The portal's configuration.
pub struct Portal {
    /// The issuer administrators sign in with (one of `--oidc-issuer`).
    pub issuer: String,
    pub client_secret: Zeroizing<String>,
    /// Where browsers reach the portal: `https://host[:port]`, no path.
    pub origin: String,
    pub session_lifetime: Duration,
    keys: KeyFile,
}

impl std::fmt::Debug for Portal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Portal")
            .field("issuer", &self.issuer)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The session key file, read again when it changes.
struct KeyFile {
    path: PathBuf,
    loaded: RwLock<Loaded>,
    /// How often the file is looked at ([`KEYS_CHECKED_EVERY`]; tests of rotation: 0).
    checked_every: Duration,
}

struct Loaded {
    keys: Arc<SealingKeys>,
    modified: Option<SystemTime>,
    checked: std::time::Instant,
}

impl Portal {
    /// The portal's configuration; reads the key file now (an error names the problem).
    pub fn new(
        issuer: String,
        client_secret: Zeroizing<String>,
        origin: &str,
        keys_path: PathBuf,
        session_lifetime: Duration,
    ) -> anyhow::Result<Portal> {
        let origin = check_origin(origin)?;
        let (keys, modified) = read_keys(&keys_path)?;
        Ok(Portal {
            issuer,
            client_secret,
            origin,
            session_lifetime,
            keys: KeyFile {
                path: keys_path,
                loaded: RwLock::new(Loaded {
                    keys: Arc::new(keys),
                    modified,
                    checked: std::time::Instant::now(),
                }),
                checked_every: KEYS_CHECKED_EVERY,
            },
        })
    }

    /// The same portal looking at its key file every `every` (tests of rotation use 0).
    pub fn with_keys_checked_every(mut self, every: Duration) -> Portal {
        self.keys.checked_every = every;
        self
    }

    fn redirect_uri(&self) -> String {
        format!("{}/callback", self.origin)
    }

    /// The current keys: the file is looked at again every few seconds, and a file that
    /// no longer parses keeps the keys read before (and says so in the log).
    fn keys(&self) -> Arc<SealingKeys> {
        {
            let loaded = self.keys.loaded.read().unwrap_or_else(|p| p.into_inner());
            if loaded.checked.elapsed() < self.keys.checked_every {
                return loaded.keys.clone();
            }
        }
        let mut loaded = self.keys.loaded.write().unwrap_or_else(|p| p.into_inner());
        loaded.checked = std::time::Instant::now();
        let modified = std::fs::metadata(&self.keys.path)
            .and_then(|m| m.modified())
            .ok();
        if modified != loaded.modified {
            match read_keys(&self.keys.path) {
                Ok((keys, modified)) => {
                    tracing::info!(keys = keys.len(), "portal session keys read again");
                    loaded.keys = Arc::new(keys);
                    loaded.modified = modified;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the portal's session key file changed and cannot be used; the keys read before stay in use")
                }
            }
        }
        loaded.keys.clone()
    }
}

/// `https://host[:port]` with no path, query or trailing slash.
fn check_origin(origin: &str) -> anyhow::Result<String> {
    let trimmed = origin.trim_end_matches('/');
    let uri: http::Uri = trimmed
        .parse()
        .map_err(|e| anyhow::anyhow!("--portal-url {origin:?} is not a URL: {e}"))?;
    let plain = uri.scheme_str() == Some("https")
        && uri.host().is_some()
        && uri
            .path_and_query()
            .is_none_or(|p| p.as_str() == "/" || p.as_str().is_empty());
    if !plain {
        anyhow::bail!(
            "--portal-url {origin:?} must be https://host[:port] with no path: the address browsers use to reach this server (its /callback must be registered as a redirect URI with the identity provider)"
        );
    }
    Ok(trimmed.to_string())
}

fn read_keys(path: &std::path::Path) -> anyhow::Result<(SealingKeys, Option<SystemTime>)> {
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the portal's session key file {}: {e} (give --portal-session-keys-file a file with one base64 key per line; 'kubeflavor install --serve-portal-url' creates the Secret holding it)",
            path.display()
        )
    })?);
    let keys = SealingKeys::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Ok((keys, modified))
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Whether `path` is one of the portal's.
pub fn serves(method: &Method, path: &[&str]) -> bool {
    matches!(
        (method, path),
        (
            &Method::GET,
            [""] | ["portal.css"] | ["signin"] | ["callback"] | ["nodes"]
        ) | (&Method::POST, ["signout"] | ["tokens"] | ["download"])
    )
}

/// Answers one of the portal's requests.
pub async fn handle(
    server: &Server,
    portal: &Portal,
    req: Request<Incoming>,
    path: &[&str],
) -> Response<Body> {
    let mut response = match (req.method(), path) {
        (&Method::GET, ["portal.css"]) => {
            let mut r = respond(
                StatusCode::OK,
                "text/css; charset=utf-8",
                STYLESHEET.to_string(),
            );
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=3600"),
            );
            return secured(r);
        }
        (&Method::GET, [""]) => home(server, portal, req.headers()).await,
        (&Method::GET, ["signin"]) => sign_in(server, portal).await,
        (&Method::GET, ["callback"]) => callback(server, portal, &req).await,
        (&Method::GET, ["nodes"]) => my_nodes(server, portal, req.headers()).await,
        (&Method::POST, ["signout"]) => sign_out(portal, req).await,
        (&Method::POST, ["tokens"]) => new_token(server, portal, req).await,
        (&Method::POST, ["download"]) => download(portal, req).await,
        _ => html(
            StatusCode::NOT_FOUND,
            pages::problem("Not found", "There is no such page.", None),
        ),
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secured(response)
}

/// The headers every portal answer carries.
fn secured(mut response: Response<Body>) -> Response<Body> {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: with the latter browsers send `Origin: null` on
    // the portal's own form posts, which [`check_form`] refuses.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::STRICT_TRANSPORT_SECURITY,
        HeaderValue::from_static("max-age=31536000"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn respond(code: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(http_body_util::Full::new(body.into()));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn html(code: StatusCode, page: String) -> Response<Body> {
    respond(code, "text/html; charset=utf-8", page)
}

fn see_other(location: &str) -> Response<Body> {
    let mut r = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// A `Set-Cookie` for `name`: `Secure`, `HttpOnly`, `SameSite=Lax` (the provider's redirect
/// back is a cross-site navigation that must carry the sign-in cookie; forms are guarded
/// by their CSRF token), `Path=/` and no `Domain` (the `__Host-` prefix demands both).
fn set_cookie(response: &mut Response<Body>, name: &str, value: &str, max_age: i64) {
    let cookie =
        format!("{name}={value}; Max-Age={max_age}; Path=/; Secure; HttpOnly; SameSite=Lax");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn clear_cookie(response: &mut Response<Body>, name: &str) {
    set_cookie(response, name, "", 0);
}

/// The value of cookie `name`, if sent once.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut found = None;
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((k, v)) = pair.trim().split_once('=')
                && k == name
            {
                if found.is_some() {
                    // Two cookies of one name (one planted by a sibling host): trust neither.
                    return None;
                }
                found = Some(v);
            }
        }
    }
    found
}

/// What the session cookie says.
enum SessionState {
    None,
    Ended,
    Valid(Session),
}

fn session(portal: &Portal, headers: &HeaderMap) -> SessionState {
    let Some(sealed) = cookie(headers, SESSION_COOKIE) else {
        return SessionState::None;
    };
    let opened = portal
        .keys()
        .open(Purpose::Session, sealed)
        .and_then(|plain| serde_json::from_slice::<Session>(&plain).ok());
    match opened {
        Some(s) if s.check(now()).is_ok() => SessionState::Valid(s),
        _ => SessionState::Ended,
    }
}

fn signed_in(session: &Session) -> (String, String) {
    (
        shown_as(&session.identity()).as_str().to_string(),
        session.csrf.clone(),
    )
}

/// The page for a browser with no valid session.
fn signed_out(state: &SessionState) -> Response<Body> {
    let notice =
        matches!(state, SessionState::Ended).then_some("Your session has ended; sign in again.");
    let mut r = html(StatusCode::OK, pages::landing(notice));
    if matches!(state, SessionState::Ended) {
        clear_cookie(&mut r, SESSION_COOKIE);
    }
    r
}

/// `GET /`: the node form, or the sign-in page.
async fn home(server: &Server, portal: &Portal, headers: &HeaderMap) -> Response<Body> {
    match session(portal, headers) {
        SessionState::Valid(s) => {
            form_page(
                server,
                &s,
                &FormValues::default(),
                &BTreeMap::new(),
                None,
                StatusCode::OK,
            )
            .await
        }
        other => signed_out(&other),
    }
}

async fn form_page(
    server: &Server,
    session: &Session,
    values: &FormValues,
    errors: &BTreeMap<String, Vec<String>>,
    general: Option<&str>,
    code: StatusCode,
) -> Response<Body> {
    let (shown, csrf) = signed_in(session);
    let who = SignedIn {
        shown_as: &shown,
        csrf: &csrf,
    };
    let Some(administrators) = &server.administrators else {
        return html(
            StatusCode::NOT_FOUND,
            pages::problem("Not served", "This server takes no sign-ins.", None),
        );
    };
    let roster = server
        .recent
        .roster(
            &server.cluster,
            &administrators.roster,
            std::time::Instant::now(),
        )
        .await;
    match roster {
        Ok(Some(roster)) => html(
            code,
            pages::node_form(
                &who,
                &roster.tokens.input_labels,
                &roster.tokens.ttl.to_string(),
                values,
                errors,
                general,
            ),
        ),
        // Without a roster nobody gets a token: the form still shows, and says so when sent.
        Ok(None) => html(
            code,
            pages::node_form(
                &who,
                &Default::default(),
                "a limited time",
                values,
                errors,
                general,
            ),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "the Roster cannot be read for the portal's form");
            unreachable(&who)
        }
    }
}

/// The node form again, with `message` for the whole form.
async fn form_refused(
    server: &Server,
    session: &Session,
    values: &FormValues,
    message: &str,
    code: StatusCode,
) -> Response<Body> {
    form_page(
        server,
        session,
        values,
        &BTreeMap::new(),
        Some(message),
        code,
    )
    .await
}

/// The page for a cluster the portal cannot read right now.
fn unreachable(who: &SignedIn<'_>) -> Response<Body> {
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::problem(
            "Try again shortly",
            "The portal cannot reach the cluster right now; try again in a minute.",
            Some(who),
        ),
    )
}

/// `GET /signin`: start a sign-in at the provider.
async fn sign_in(server: &Server, portal: &Portal) -> Response<Body> {
    let Some(administrators) = &server.administrators else {
        return html(
            StatusCode::NOT_FOUND,
            pages::problem("Not served", "This server takes no sign-ins.", None),
        );
    };
    let endpoints = match administrators.verifier.endpoints(&portal.issuer).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "the identity provider's endpoints cannot be read");
            return html(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::problem(
                    "Sign-in unavailable",
                    "The identity provider cannot be reached right now; try again in a minute.",
                    None,
                ),
            );
        }
    };
    let Ok(attempt) = SignIn::start(now()) else {
        return html(
            StatusCode::INTERNAL_SERVER_ERROR,
            pages::problem(
                "Sign-in unavailable",
                "The portal cannot start a sign-in right now; try again.",
                None,
            ),
        );
    };
    let client_id = administrators
        .verifier
        .audience(&portal.issuer)
        .unwrap_or_default();
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", &portal.redirect_uri())
        .append_pair("scope", "openid")
        .append_pair("state", &attempt.state)
        .append_pair("nonce", &attempt.nonce)
        .append_pair("code_challenge", &attempt.challenge())
        .append_pair("code_challenge_method", "S256")
        .finish();
    let separator = if endpoints.authorization.contains('?') {
        '&'
    } else {
        '?'
    };
    let Ok(sealed) = portal.keys().seal(
        Purpose::SignIn,
        &Zeroizing::new(serde_json::to_vec(&attempt).expect("JSON")),
    ) else {
        return html(
            StatusCode::INTERNAL_SERVER_ERROR,
            pages::problem(
                "Sign-in unavailable",
                "The portal cannot start a sign-in right now; try again.",
                None,
            ),
        );
    };
    let mut r = see_other(&format!("{}{separator}{query}", endpoints.authorization));
    set_cookie(&mut r, SIGN_IN_COOKIE, &sealed, SIGN_IN_WINDOW_SECS);
    r
}

/// `GET /callback`: the provider sends the browser back with a code.
async fn callback(server: &Server, portal: &Portal, req: &Request<Incoming>) -> Response<Body> {
    let refuse = |message: &str| {
        let mut r = html(
            StatusCode::BAD_REQUEST,
            pages::problem("Sign-in failed", message, None),
        );
        clear_cookie(&mut r, SIGN_IN_COOKIE);
        r
    };
    let Some(administrators) = &server.administrators else {
        return refuse("This server takes no sign-ins.");
    };
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let attempt = cookie(req.headers(), SIGN_IN_COOKIE)
        .and_then(|sealed| portal.keys().open(Purpose::SignIn, sealed))
        .and_then(|plain| serde_json::from_slice::<SignIn>(&plain).ok());
    let Some(attempt) = attempt else {
        return refuse(&kubeflavor_core::portal::SignInRefusal::NotStarted.to_string());
    };
    if let Err(e) = attempt.check_callback(query.get("state").map_or("", String::as_str), now()) {
        return refuse(&e.to_string());
    }
    if query.contains_key("error") {
        return refuse(
            "The identity provider did not sign you in (it may have been cancelled). Sign in again.",
        );
    }
    let Some(code) = query
        .get("code")
        .filter(|c| !c.is_empty() && c.len() <= 4096)
    else {
        return refuse("The identity provider's answer holds no code. Sign in again.");
    };
    let verifier = &administrators.verifier;
    let id_token = match verifier
        .redeem_code(
            &portal.issuer,
            code,
            &attempt.verifier,
            &portal.redirect_uri(),
            &portal.client_secret,
        )
        .await
    {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "a sign-in's code could not be redeemed");
            return refuse("The identity provider did not confirm the sign-in. Sign in again.");
        }
    };
    let (identity, nonce) = match verifier.verify_with_nonce(&id_token).await {
        Ok(found) => found,
        Err(e) => {
            server.metrics.administrator_answer("", "invalid-token");
            return refuse(&e.to_string());
        }
    };
    drop(id_token);
    if identity.issuer != portal.issuer {
        return refuse("The ID token comes from another identity provider. Sign in again.");
    }
    if let Err(e) = attempt.check_nonce(nonce.as_deref()) {
        return refuse(&e.to_string());
    }
    let session = match Session::start(&identity, now(), portal.session_lifetime.as_secs() as i64) {
        Ok(s) => s,
        Err(SessionStartError::Refused(why)) => return refuse(&why.to_string()),
        Err(SessionStartError::Random(_)) => {
            return refuse("The portal cannot start a session right now; try again.");
        }
    };
    let sealed = portal.keys().seal(
        Purpose::Session,
        &serde_json::to_vec(&session).expect("JSON"),
    );
    let Ok(sealed) = sealed.map_err(|_| ()).and_then(|s| {
        if s.len() <= kubeflavor_core::portal::MAX_SESSION_COOKIE_BYTES {
            Ok(s)
        } else {
            Err(())
        }
    }) else {
        return refuse(
            "Your sign-in carries more than the portal can keep in a session; ask the cluster's owner.",
        );
    };
    // A new session from the server's randomness, replacing any the browser held: a session
    // planted before sign-in (fixation) does not survive it.
    let mut r = see_other("/");
    set_cookie(
        &mut r,
        SESSION_COOKIE,
        &sealed,
        session.expires_at - session.issued_at,
    );
    clear_cookie(&mut r, SIGN_IN_COOKIE);
    tracing::info!(issuer = %identity.issuer, subject = %identity.subject, "a node administrator signed in to the portal");
    r
}

/// A posted form's body, bounded in size and time.
async fn read_form(
    server_timeout: Duration,
    req: Request<Incoming>,
) -> Result<Bytes, Response<Body>> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let too_large = || {
        html(
            StatusCode::PAYLOAD_TOO_LARGE,
            pages::problem(
                "Too much",
                &format!(
                    "The form is larger than {MAX_BODY_BYTES} bytes; paste fewer or shorter keys."
                ),
                None,
            ),
        )
    };
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(too_large());
    }
    let read = http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES).collect();
    match tokio::time::timeout(server_timeout, read).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(_)) => Err(too_large()),
        Err(_) => Err(html(
            StatusCode::REQUEST_TIMEOUT,
            pages::problem(
                "Too slow",
                "The form did not arrive in time; send it again.",
                None,
            ),
        )),
    }
}

/// The session a form post acts for, after its CSRF and origin checks.
fn form_session(
    portal: &Portal,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Session, Box<Response<Body>>> {
    let session = match session(portal, headers) {
        SessionState::Valid(s) => s,
        other => return Err(Box::new(signed_out(&other))),
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Err(e) = check_form(
        &session,
        csrf,
        header("origin"),
        header("sec-fetch-site"),
        &portal.origin,
    ) {
        tracing::warn!(subject = %session.subject, "a portal form without the session's CSRF token or from another origin was refused");
        let (shown, csrf) = signed_in(&session);
        return Err(Box::new(html(
            StatusCode::FORBIDDEN,
            pages::problem(
                "Not sent from the portal",
                &e.to_string(),
                Some(&SignedIn {
                    shown_as: &shown,
                    csrf: &csrf,
                }),
            ),
        )));
    }
    Ok(session)
}

/// `POST /signout`.
async fn sign_out(portal: &Portal, req: Request<Incoming>) -> Response<Body> {
    let headers = req.headers().clone();
    let Ok(body) = read_form(Duration::from_secs(10), req).await else {
        return see_other("/");
    };
    let csrf = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned());
    match form_session(portal, &headers, csrf.as_deref()) {
        Ok(_) => {
            let mut r = html(StatusCode::OK, pages::landing(Some("You have signed out.")));
            clear_cookie(&mut r, SESSION_COOKIE);
            r
        }
        Err(r) => *r,
    }
}

/// `POST /tokens`: mint for the signed-in administrator.
async fn new_token(server: &Server, portal: &Portal, req: Request<Incoming>) -> Response<Body> {
    let headers = req.headers().clone();
    let body = match read_form(server.request_timeout, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let csrf = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned());
    let session = match form_session(portal, &headers, csrf.as_deref()) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let values = refill(&body);
    let parsed = match form::parse(&body) {
        Ok(f) => f,
        Err(NodeFormError::Invalid(problems)) => {
            let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for p in &problems {
                let (field, message) = form::form_field(p);
                errors.entry(field).or_default().push(message);
            }
            return form_page(
                server,
                &session,
                &values,
                &errors,
                None,
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;
        }
        Err(e) => {
            return form_refused(
                server,
                &session,
                &values,
                &e.to_string(),
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    let Some(administrators) = server.administrators.clone() else {
        return html(
            StatusCode::NOT_FOUND,
            pages::problem("Not served", "This server takes no sign-ins.", None),
        );
    };
    let identity = session.identity();
    if let Some(refused) = over_limit(server, &identity) {
        let (message, _) = refusal(refused).await;
        return form_refused(
            server,
            &session,
            &values,
            &message,
            StatusCode::TOO_MANY_REQUESTS,
        )
        .await;
    }
    let hostname = match parsed.hostname.clone() {
        Some(h) => h,
        None => match form::made_up_hostname() {
            Ok(h) => h,
            Err(_) => {
                return form_refused(
                    server,
                    &session,
                    &values,
                    "The portal cannot make up a name right now; give one.",
                    StatusCode::INTERNAL_SERVER_ERROR,
                )
                .await;
            }
        },
    };
    let granted = match grant(server, &administrators, &identity, &parsed.api_request()).await {
        Ok(g) => g,
        Err(refused) => {
            let code = refused.status();
            let (message, causes) = refusal(refused).await;
            let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (field, text) in causes {
                errors.entry(field).or_default().push(text);
            }
            let general = errors.is_empty().then_some(message.as_str());
            return form_page(server, &session, &values, &errors, general, code).await;
        }
    };
    let handed = &granted.handed;
    let expires_at = handed
        .minted
        .spec
        .expiration
        .map(|t| t.as_second())
        .unwrap_or(now() + 3600);
    let valid_until = handed
        .minted
        .spec
        .expiration
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| "it expires".into());
    let ticket = Download {
        session: session.id.clone(),
        hostname: hostname.clone(),
        instance_id: format!("kubeflavor-{}", handed.minted.token.id()),
        user_data: handed.cloud_init.to_string(),
        expires_at,
    };
    let sealed = portal.keys().seal(
        Purpose::Download,
        &Zeroizing::new(serde_json::to_vec(&ticket).expect("JSON")),
    );
    let Ok(sealed) = sealed else {
        return form_refused(
            server,
            &session,
            &values,
            "The portal cannot prepare the download right now; try again.",
            StatusCode::INTERNAL_SERVER_ERROR,
        )
        .await;
    };
    let (shown, csrf) = signed_in(&session);
    let labels = handed.minted.spec.input_labels.to_map();
    html(
        StatusCode::CREATED,
        pages::minted(
            &SignedIn {
                shown_as: &shown,
                csrf: &csrf,
            },
            &pages::Minted {
                hostname: &hostname,
                token: handed.minted.token.expose().as_str(),
                join_line: handed.join_line.trim_end(),
                valid_until: &valid_until,
                labels: &labels,
                ticket: &sealed,
            },
        ),
    )
}

/// The form's values, to show again with its errors (never the CSRF token).
fn refill(body: &[u8]) -> FormValues {
    let mut values = FormValues::default();
    for (k, v) in form_urlencoded::parse(body) {
        match k.as_ref() {
            "hostname" => values.hostname = v.chars().take(253).collect(),
            "sshAuthorizedKeys" => values.ssh_keys = v.into_owned(),
            other => {
                if let Some(key) = other.strip_prefix(form::LABEL_FIELD_PREFIX) {
                    values.labels.insert(key.to_string(), v.into_owned());
                }
            }
        }
    }
    values
}

/// The message and field causes of a refusal the API would have answered (a Status).
async fn refusal(response: Response<Body>) -> (String, Vec<(String, String)>) {
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let status: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let message = status["message"]
        .as_str()
        .unwrap_or("The cluster refused the request; try again.")
        .to_string();
    let causes = status["details"]["causes"]
        .as_array()
        .map(|causes| {
            causes
                .iter()
                .filter_map(|c| {
                    let problem = kubeflavor_core::mint::request::FieldProblem {
                        field: c["field"].as_str()?.to_string(),
                        reason: kubeflavor_core::mint::request::FieldReason::Invalid,
                        message: c["message"].as_str().unwrap_or("invalid").to_string(),
                    };
                    Some(form::form_field(&problem))
                })
                .collect()
        })
        .unwrap_or_default();
    (message, causes)
}

/// `POST /download`: the user-data or seed image of a token minted in this session.
async fn download(portal: &Portal, req: Request<Incoming>) -> Response<Body> {
    let headers = req.headers().clone();
    let body = match read_form(Duration::from_secs(30), req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let fields: BTreeMap<String, String> = form_urlencoded::parse(&body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let session = match form_session(portal, &headers, fields.get("csrf").map(String::as_str)) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let (shown, csrf) = signed_in(&session);
    let who = SignedIn {
        shown_as: &shown,
        csrf: &csrf,
    };
    let ticket = fields
        .get("ticket")
        .and_then(|t| portal.keys().open(Purpose::Download, t))
        .and_then(|plain| serde_json::from_slice::<Download>(&plain).ok());
    let Some(ticket) = ticket else {
        return html(
            StatusCode::BAD_REQUEST,
            pages::problem(
                "Download failed",
                "This download is not one the portal made; ask for a new token.",
                Some(&who),
            ),
        );
    };
    if let Err(e) = ticket.check(&session, now()) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem("Download refused", &e.to_string(), Some(&who)),
        );
    }
    let (content_type, filename, bytes): (&'static str, String, Vec<u8>) =
        match fields.get("what").map(String::as_str) {
            Some("user-data") => (
                "text/cloud-config; charset=utf-8",
                format!("{}-user-data.yaml", ticket.hostname),
                ticket.user_data.as_bytes().to_vec(),
            ),
            Some("seed-image") => {
                let meta = seed_image::meta_data(&ticket.instance_id, &ticket.hostname);
                // cloud-init names the machine from meta-data's local-hostname: the user-data
                // leaves the hostname alone.
                match seed_image::nocloud(&ticket.user_data, &meta) {
                    Ok(image) => (
                        "application/octet-stream",
                        format!("{}-seed.img", ticket.hostname),
                        image,
                    ),
                    Err(e) => {
                        return html(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            pages::problem("Download failed", &e.to_string(), Some(&who)),
                        );
                    }
                }
            }
            _ => {
                return html(
                    StatusCode::BAD_REQUEST,
                    pages::problem(
                        "Download failed",
                        "Choose the seed image or the user-data.",
                        Some(&who),
                    ),
                );
            }
        };
    let mut r = respond(StatusCode::OK, content_type, bytes);
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", esc(&filename))) {
        r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    r
}

/// `GET /nodes`: the nodes whose custody names the signed-in identity.
async fn my_nodes(server: &Server, portal: &Portal, headers: &HeaderMap) -> Response<Body> {
    let session = match session(portal, headers) {
        SessionState::Valid(s) => s,
        other => return signed_out(&other),
    };
    let (shown, csrf) = signed_in(&session);
    let who = SignedIn {
        shown_as: &shown,
        csrf: &csrf,
    };
    let key = identity_key(&session.issuer, &session.subject);
    let bindings: kube::Api<FlavorBinding> = kube::Api::all(server.cluster.client.clone());
    let listed = bindings
        .list(&ListParams::default().labels(&format!("{IDENTITY_LABEL}={key}")))
        .await;
    match listed {
        Ok(list) => {
            let mut rows: Vec<pages::NodeRow> =
                list.items
                    .iter()
                    // The label names the identity; the record itself must too (a label is only
                    // a hash, and a binding carries the identity it was written with).
                    .filter(|b| {
                        b.spec.identity.as_ref().is_some_and(|i| {
                            i.issuer == session.issuer && i.subject == session.subject
                        })
                    })
                    .map(|b| pages::NodeRow {
                        node: b.spec.node.clone(),
                        joined: b.spec.bound_at.strftime("%Y-%m-%d %H:%M UTC").to_string(),
                        // The controller writes the Flavored condition once it has seen the
                        // Node, whatever it decided: present means registered; its status
                        // (which could tell a revoked node) is not shown.
                        registered: b.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .any(|c| c.type_ == kubeflavor_cluster::crd::CONDITION_FLAVORED)
                        }),
                    })
                    .collect();
            rows.sort_by(|a, b| b.joined.cmp(&a.joined));
            html(StatusCode::OK, pages::nodes(&who, &rows))
        }
        Err(e) => {
            tracing::warn!(error = %e, "FlavorBindings cannot be listed for the portal");
            unreachable(&who)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portal_url_is_an_https_origin() {
        assert_eq!(
            check_origin("https://nodes.acme.example/").unwrap(),
            "https://nodes.acme.example"
        );
        assert_eq!(
            check_origin("https://127.0.0.1:16490").unwrap(),
            "https://127.0.0.1:16490"
        );
        for bad in [
            "http://nodes.acme.example",
            "https://nodes.acme.example/portal",
            "nodes.acme.example",
            "https://a/?x=1",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cookie_sent_twice_is_trusted_in_neither_copy() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; __Host-kubeflavor-session=x"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("x"));
        h.append(
            header::COOKIE,
            HeaderValue::from_static("__Host-kubeflavor-session=y"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), None);
    }
}
