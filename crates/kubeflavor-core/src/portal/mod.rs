//! The node administrators' web portal: the decisions behind its pages, with no I/O.
//!
//! - [`SignIn`]: an authorization-code sign-in in progress (`state`, `nonce`, the PKCE
//!   verifier), sealed into a short-lived cookie; the provider's answer must bring back the
//!   same `state` within [`SIGN_IN_WINDOW_SECS`], and the ID token the same `nonce`.
//! - [`Session`]: who signed in (the verified identity), until when, and the session's CSRF
//!   token; sealed into the session cookie ([`seal`]), so the server keeps no state and
//!   replicas share sessions through the key Secret.
//! - [`check_form`]: every form post carries the session's CSRF token and, when the
//!   browser names one, comes from the portal's own origin.
//! - [`Download`]: what a minted token's page lets the administrator download again (the
//!   user-data holding the token), sealed and bound to the session that minted it.

pub mod form;
pub mod seal;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::mint::roster::Identity;

/// The session cookie: `__Host-` makes browsers require `Secure`, `Path=/` and no
/// `Domain`, so no other host or path can set or shadow it.
pub const SESSION_COOKIE: &str = "__Host-kubeflavor-session";
/// The cookie of a sign-in in progress.
pub const SIGN_IN_COOKIE: &str = "__Host-kubeflavor-sign-in";
/// How long a sign-in may take at the identity provider.
pub const SIGN_IN_WINDOW_SECS: i64 = 600;
/// A session's lifetime unless `serve --portal-session-lifetime` says otherwise.
pub const DEFAULT_SESSION_SECS: i64 = 3600;
/// The longest session `--portal-session-lifetime` may give.
pub const MAX_SESSION_SECS: i64 = 12 * 3600;
/// The most groups a session keeps: a session is a cookie, and browsers drop cookies above
/// 4 KiB. An identity with more gets a clear refusal instead of a session that would
/// silently lose groups the roster may match.
pub const MAX_SESSION_GROUPS: usize = 32;
/// The largest sealed session accepted as a cookie value.
pub const MAX_SESSION_COOKIE_BYTES: usize = 3800;

fn random_text(bytes: usize) -> Result<String, getrandom::Error> {
    let mut buf = Zeroizing::new(vec![0u8; bytes]);
    getrandom::fill(&mut buf)?;
    Ok(URL_SAFE_NO_PAD.encode(&*buf))
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A sign-in in progress.
#[derive(Debug, Clone, Serialize, Deserialize, Zeroize, ZeroizeOnDrop)]
pub struct SignIn {
    pub state: String,
    pub nonce: String,
    /// The PKCE code verifier (RFC 7636), 43 characters.
    pub verifier: String,
    pub expires_at: i64,
}

/// Why the provider's answer does not finish a sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignInRefusal {
    #[error(
        "this sign-in was not started here or has already been used; start again from the portal's page"
    )]
    NotStarted,
    #[error("the sign-in took longer than {SIGN_IN_WINDOW_SECS} seconds; sign in again")]
    TooSlow,
    #[error("the identity provider's answer does not belong to this sign-in; sign in again")]
    WrongState,
    #[error("the ID token was not issued for this sign-in (nonce); sign in again")]
    WrongNonce,
}

impl SignIn {
    /// A new sign-in started at `now` (Unix seconds).
    pub fn start(now: i64) -> Result<SignIn, getrandom::Error> {
        Ok(SignIn {
            state: random_text(24)?,
            nonce: random_text(24)?,
            verifier: random_text(32)?,
            expires_at: now + SIGN_IN_WINDOW_SECS,
        })
    }

    /// The PKCE S256 code challenge of the verifier.
    pub fn challenge(&self) -> String {
        URL_SAFE_NO_PAD.encode(Sha256::digest(self.verifier.as_bytes()))
    }

    /// Whether the provider's redirect, bringing `state`, finishes this sign-in at `now`.
    pub fn check_callback(&self, state: &str, now: i64) -> Result<(), SignInRefusal> {
        if now > self.expires_at {
            return Err(SignInRefusal::TooSlow);
        }
        if state.is_empty() || !same(state, &self.state) {
            return Err(SignInRefusal::WrongState);
        }
        Ok(())
    }

    /// Whether the ID token's `nonce` claim is this sign-in's.
    pub fn check_nonce(&self, nonce: Option<&str>) -> Result<(), SignInRefusal> {
        match nonce {
            Some(n) if same(n, &self.nonce) => Ok(()),
            _ => Err(SignInRefusal::WrongNonce),
        }
    }
}

/// A signed-in node administrator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Random, per sign-in: binds downloads to the session that minted them.
    pub id: String,
    pub issuer: String,
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(default)]
    pub email_verified: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The token every form of this session carries.
    pub csrf: String,
    pub issued_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    #[error("your session has ended; sign in again")]
    Expired,
    #[error(
        "your sign-in names more than {MAX_SESSION_GROUPS} groups, more than the portal can keep; ask the cluster's owner to use the API (POST /v1/jointokens) or narrow the groups claim"
    )]
    TooManyGroups,
}

impl Session {
    /// The session of `identity`, signed in at `now` for `lifetime` seconds (at most
    /// [`MAX_SESSION_SECS`]).
    pub fn start(
        identity: &Identity,
        now: i64,
        lifetime: i64,
    ) -> Result<Session, SessionStartError> {
        if identity.groups.len() > MAX_SESSION_GROUPS {
            return Err(SessionStartError::Refused(SessionRefusal::TooManyGroups));
        }
        Ok(Session {
            id: random_text(16)?,
            issuer: identity.issuer.clone(),
            subject: identity.subject.clone(),
            email: identity.email.clone(),
            email_verified: identity.email_verified,
            groups: identity.groups.clone(),
            name: identity.name.clone(),
            csrf: random_text(24)?,
            issued_at: now,
            expires_at: now + lifetime.clamp(60, MAX_SESSION_SECS),
        })
    }

    /// Whether the session is still good at `now`.
    pub fn check(&self, now: i64) -> Result<(), SessionRefusal> {
        if now >= self.expires_at || now < self.issued_at - 300 {
            return Err(SessionRefusal::Expired);
        }
        Ok(())
    }

    /// The identity the session was started for, as the roster reads it.
    pub fn identity(&self) -> Identity {
        Identity {
            issuer: self.issuer.clone(),
            subject: self.subject.clone(),
            email: self.email.clone(),
            email_verified: self.email_verified,
            groups: self.groups.clone(),
            name: self.name.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionStartError {
    #[error(transparent)]
    Refused(SessionRefusal),
    #[error("no randomness for the session: {0}")]
    Random(#[from] getrandom::Error),
}

/// Why a form post is not acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormRefusal {
    #[error(
        "this form was not sent from the portal's own page (it may be old, or another site sent it); open the portal and try again"
    )]
    Forged,
}

/// Whether a form post may be acted on: it carries the session's CSRF token, and the
/// browser's `Origin` (when sent) is the portal's and `Sec-Fetch-Site` (when sent) does not
/// say another site sent it.
pub fn check_form(
    session: &Session,
    csrf_field: Option<&str>,
    origin: Option<&str>,
    fetch_site: Option<&str>,
    portal_origin: &str,
) -> Result<(), FormRefusal> {
    let token_ok = csrf_field.is_some_and(|t| same(t, &session.csrf));
    let origin_ok = origin.is_none_or(|o| o == portal_origin);
    let site_ok = fetch_site.is_none_or(|s| s == "same-origin" || s == "none");
    if token_ok && origin_ok && site_ok {
        Ok(())
    } else {
        Err(FormRefusal::Forged)
    }
}

/// A minted token's downloads, sealed into its page.
#[derive(Debug, Clone, Serialize, Deserialize, Zeroize, ZeroizeOnDrop)]
pub struct Download {
    pub session: String,
    pub hostname: String,
    pub instance_id: String,
    /// Holds the join token: never logged, zeroized when dropped.
    pub user_data: String,
    pub expires_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DownloadRefusal {
    #[error(
        "this download belongs to another sign-in; downloads work only in the session that asked for the token"
    )]
    OtherSession,
    #[error("this token has expired; ask for a new one")]
    Expired,
}

impl Download {
    /// Whether `session` may have this download at `now`.
    pub fn check(&self, session: &Session, now: i64) -> Result<(), DownloadRefusal> {
        if !same(&self.session, &session.id) {
            return Err(DownloadRefusal::OtherSession);
        }
        if now >= self.expires_at {
            return Err(DownloadRefusal::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            issuer: "https://login.acme.example".into(),
            subject: "u-1".into(),
            email: Some("alice@acme.example".into()),
            email_verified: true,
            groups: vec!["sweet-admins".into()],
            name: Some("Alice".into()),
        }
    }

    #[test]
    fn a_sign_in_finishes_only_with_its_own_state_nonce_and_in_time() {
        let s = SignIn::start(1000).unwrap();
        assert_eq!(s.verifier.len(), 43);
        assert!(
            s.check_callback(&s.state.clone(), 1000 + SIGN_IN_WINDOW_SECS)
                .is_ok()
        );
        assert_eq!(
            s.check_callback(&s.state.clone(), 1001 + SIGN_IN_WINDOW_SECS),
            Err(SignInRefusal::TooSlow)
        );
        let other = SignIn::start(1000).unwrap();
        assert_eq!(
            s.check_callback(&other.state, 1000),
            Err(SignInRefusal::WrongState)
        );
        assert_eq!(s.check_callback("", 1000), Err(SignInRefusal::WrongState));
        assert!(s.check_nonce(Some(&s.nonce.clone())).is_ok());
        assert_eq!(
            s.check_nonce(Some(&other.nonce)),
            Err(SignInRefusal::WrongNonce)
        );
        assert_eq!(s.check_nonce(None), Err(SignInRefusal::WrongNonce));
    }

    #[test]
    fn the_pkce_challenge_is_rfc_7636_s256() {
        // RFC 7636 appendix B.
        let s = SignIn {
            state: String::new(),
            nonce: String::new(),
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
            expires_at: 0,
        };
        assert_eq!(s.challenge(), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }

    #[test]
    fn a_session_keeps_the_identity_until_it_ends() {
        let s = Session::start(&identity(), 1000, 600).unwrap();
        assert_eq!(s.identity(), identity());
        assert!(s.check(1599).is_ok());
        assert_eq!(s.check(1600), Err(SessionRefusal::Expired));
        let long = Session::start(&identity(), 0, i64::MAX / 2).unwrap();
        assert_eq!(long.expires_at, MAX_SESSION_SECS);
        let crowded = Identity {
            groups: (0..=MAX_SESSION_GROUPS).map(|i| format!("g{i}")).collect(),
            ..identity()
        };
        assert!(matches!(
            Session::start(&crowded, 0, 60),
            Err(SessionStartError::Refused(SessionRefusal::TooManyGroups))
        ));
        // Two sign-ins of one identity are two sessions.
        let again = Session::start(&identity(), 1000, 600).unwrap();
        assert_ne!(again.id, s.id);
        assert_ne!(again.csrf, s.csrf);
    }

    #[test]
    fn forms_need_the_sessions_token_and_the_portals_origin() {
        let s = Session::start(&identity(), 0, 600).unwrap();
        let origin = "https://portal.acme.example";
        let csrf = s.csrf.clone();
        assert!(check_form(&s, Some(&csrf), Some(origin), Some("same-origin"), origin).is_ok());
        assert!(check_form(&s, Some(&csrf), None, None, origin).is_ok());
        assert!(check_form(&s, None, Some(origin), None, origin).is_err());
        assert!(check_form(&s, Some("x"), Some(origin), None, origin).is_err());
        let other = Session::start(&identity(), 0, 600).unwrap();
        assert!(check_form(&s, Some(&other.csrf), Some(origin), None, origin).is_err());
        assert!(check_form(&s, Some(&csrf), Some("https://evil.example"), None, origin).is_err());
        assert!(check_form(&s, Some(&csrf), Some("null"), None, origin).is_err());
        assert!(check_form(&s, Some(&csrf), None, Some("cross-site"), origin).is_err());
        assert!(check_form(&s, Some(&csrf), None, Some("same-site"), origin).is_err());
    }

    #[test]
    fn a_download_is_its_sessions_until_the_token_expires() {
        let s = Session::start(&identity(), 0, 600).unwrap();
        let d = Download {
            session: s.id.clone(),
            hostname: "node-1".into(),
            instance_id: "i-1".into(),
            user_data: "#cloud-config\n".into(),
            expires_at: 100,
        };
        assert!(d.check(&s, 99).is_ok());
        assert_eq!(d.check(&s, 100), Err(DownloadRefusal::Expired));
        let other = Session::start(&identity(), 0, 600).unwrap();
        assert_eq!(d.check(&other, 0), Err(DownloadRefusal::OtherSession));
    }
}
