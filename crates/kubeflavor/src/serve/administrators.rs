//! `POST /v1/jointokens`: a node administrator, signed in with the owner's identity
//! provider, asks for a join token without naming a flavor; the Roster decides.
//!
//! What the administrator can tell apart is only what they asked and who they are: every
//! grant, whatever its flavor, has the same status, body shape (no flavor, no max nodes,
//! the roster's one TTL) and token format, and goes through the same steps; "the roster
//! gives you nothing", a `noToken` rule, a missing Flavor and a Flavor that disagrees with
//! the roster all get one answer ([`no_token`]). Input labels are refused by the roster's
//! own rules, the same for every flavor. The custody record is the verified identity
//! (issuer, subject, and the e-mail the provider verified, else the name or subject, as
//! issued-to), written from the ID token, never from the body.

use std::time::Instant;

use http::header;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use kube::api::ListParams;
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_core::mint::request::{self, MintRequest, MintRequestError};
use kubeflavor_core::mint::roster::{self, GrantRefusal, Identity, Outcome, identity_key};
use kubeflavor_core::token::meta::{Custody, CustodyIdentity, IDENTITY_LABEL, IssuedTo};

use super::Server;
use super::api::{
    Asked, Body, Handed, bearer, created, invalid, mint_token, read_body, status, too_many,
    unauthorized, unavailable,
};
use super::ledger::{self, LedgerError};
use super::oidc::Rejection;

/// The one answer for every way an identity gets no token.
pub const NO_TOKEN_MESSAGE: &str = "no join token for your sign-in: the cluster's owner has not given you one (ask them, naming the account you signed in with)";

fn no_token() -> Response<Body> {
    status(StatusCode::FORBIDDEN, "Forbidden", NO_TOKEN_MESSAGE, None)
}

/// What the custody record shows people as issued-to: the verified e-mail, else the
/// name, else the subject, the first that is an [`IssuedTo`] (visible text, no control or
/// direction characters); the issuer and subject are recorded beside it either way.
pub fn shown_as(identity: &Identity) -> IssuedTo {
    let email = identity.email.as_ref().filter(|_| identity.email_verified);
    [email, identity.name.as_ref(), Some(&identity.subject)]
        .into_iter()
        .flatten()
        .find_map(|text| text.parse::<IssuedTo>().ok())
        .unwrap_or_else(|| {
            identity_key(&identity.issuer, &identity.subject)
                .parse()
                .expect("40 hex digits are an IssuedTo")
        })
}

/// `POST /v1/jointokens`.
pub async fn mint_for_administrator(server: &Server, req: Request<Incoming>) -> Response<Body> {
    let Some(administrators) = server.administrators.clone() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "this server takes no node administrators' sign-ins (it runs without --oidc-issuer); portals use POST /v1/flavors/{flavor}/jointokens",
            None,
        );
    };
    let Some(token) = bearer(req.headers()) else {
        return unauthorized(
            "send the ID token your identity provider gave you at sign-in as Authorization: Bearer <token>",
        );
    };
    let identity = match administrators.verifier.verify(&token).await {
        Ok(identity) => identity,
        Err(Rejection::Unavailable(why)) => {
            tracing::warn!(error = %why, "an identity provider's keys could not be fetched");
            return status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "the identity provider cannot be reached to check your sign-in; retry shortly",
                None,
            );
        }
        Err(rejection) => {
            server.metrics.administrator_answer("", "invalid-token");
            return unauthorized(&rejection.to_string());
        }
    };
    drop(token);
    if let Some(refused) = over_limit(server, &identity) {
        return refused;
    }
    let wants_document = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(super::api::CLOUD_CONFIG));
    let body = match read_body(req, server.request_timeout).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match grant(server, &administrators, &identity, &body).await {
        Ok(granted) => answer(&granted.handed, &granted.request, wants_document),
        Err(refused) => refused,
    }
}

/// The identity's turn under the per-caller rate limit: `None` when it has one, else the
/// 429 saying when to come back.
pub(super) fn over_limit(server: &Server, identity: &Identity) -> Option<Response<Body>> {
    let key = identity_key(&identity.issuer, &identity.subject);
    server
        .limiter
        .check(&format!("oidc:{key}"), Instant::now())
        .err()
        .map(|wait| too_many(shown_as(identity).as_str(), wait))
}

/// A token minted for a node administrator, and what they asked.
pub(super) struct Granted {
    pub handed: Handed,
    pub request: MintRequest,
}

/// What the roster gives `identity` for the request `body` (an API request's JSON): the
/// minted token, or the answer refusing it. The API and the portal both mint through here,
/// so they refuse the same things with the same words.
pub(super) async fn grant(
    server: &Server,
    administrators: &super::Administrators,
    identity: &Identity,
    body: &[u8],
) -> Result<Granted, Response<Body>> {
    let key = identity_key(&identity.issuer, &identity.subject);
    let caller = format!("oidc:{}#{}", identity.issuer, identity.subject);
    let asked = match request::parse_for_administrator(body) {
        Ok(asked) => asked,
        Err(err) => return Err(invalid(err)),
    };
    let roster = match server
        .recent
        .roster(&server.cluster, &administrators.roster, Instant::now())
        .await
    {
        Ok(Some(roster)) => roster,
        Ok(None) => {
            tracing::error!(roster = %administrators.roster, "no Roster: node administrators get no token until it exists (kubeflavor roster add-rule)");
            server.metrics.administrator_answer("", "misconfigured");
            return Err(no_token());
        }
        Err(err) => {
            tracing::error!(error = %err, "the Roster cannot be used; node administrators get no token until it is fixed");
            return Err(unavailable("read the roster"));
        }
    };
    let Some((_, rule)) = roster::decide(identity, &roster.rules) else {
        server.metrics.administrator_answer("", "no-token");
        return Err(no_token());
    };
    let Outcome::Flavor(flavor) = &rule.outcome else {
        server.metrics.administrator_answer(&rule.name, "no-token");
        return Err(no_token());
    };
    let bound_nodes = match bound_nodes(server, rule, &key).await {
        Ok(n) => n,
        Err(response) => return Err(response),
    };
    let rules = match server
        .recent
        .flavor_rules(&server.cluster, flavor, Instant::now())
        .await
    {
        Ok(Some(rules)) => rules,
        Ok(None) => {
            tracing::error!(rule = %rule.name, flavor = %flavor, "a Roster rule grants a Flavor that does not exist; its administrators get no token");
            server
                .metrics
                .administrator_answer(&rule.name, "misconfigured");
            return Err(no_token());
        }
        Err(err) => {
            tracing::warn!(error = %err, "reading a Flavor failed");
            return Err(unavailable("read the cluster's configuration"));
        }
    };
    let grant = match roster::grant_for(&roster.tokens, &rules, &asked.labels) {
        Ok(grant) => grant,
        Err(GrantRefusal::Labels(problems)) => {
            server.metrics.administrator_answer(&rule.name, "invalid");
            return Err(invalid(MintRequestError::Invalid(problems)));
        }
        Err(GrantRefusal::FlavorDisagrees) => {
            tracing::error!(rule = %rule.name, flavor = %flavor, "the Flavor a Roster rule grants does not allow the Roster's tokenDefaults or inputLabels; its administrators get no token");
            server
                .metrics
                .administrator_answer(&rule.name, "misconfigured");
            return Err(no_token());
        }
    };
    // The grant in the administrator's ledger before the token exists: the rule among those
    // that granted them, and for a rule's maxLiveTokens a place reserved, expiring (with a
    // minute to spare) after the token will.
    let Some(expires) = grant
        .ttl
        .expiration(jiff::Timestamp::now())
        .and_then(|at| at.checked_add(jiff::SignedDuration::from_secs(60)).ok())
    else {
        // Never-expiring tokens are refused before this (grant_for).
        return Err(no_token());
    };
    let recorded = ledger::record(
        &server.cluster,
        &administrators.roster,
        (&identity.issuer, &identity.subject),
        &rule.name,
        (&rule.limits, bound_nodes),
        grant.max_nodes,
        expires,
    )
    .await;
    let recorded = match recorded {
        Ok(recorded) => recorded,
        Err(LedgerError::Limit(refusal)) => {
            server.metrics.administrator_answer(&rule.name, "limit");
            return Err(status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &refusal.to_string(),
                None,
            ));
        }
        Err(LedgerError::Api(err)) => {
            tracing::warn!(error = %err, "an AdministratorLedger could not be read or written");
            return Err(unavailable("count your join tokens"));
        }
    };
    let issued_to = shown_as(identity);
    let request = MintRequest {
        issued_to: issued_to.clone(),
        ttl: None,
        max_nodes: None,
        output: asked.output,
        labels: asked.labels.clone(),
        ssh_authorized_keys: asked.ssh_authorized_keys.clone(),
    };
    let custody = Custody {
        issued_to: Some(issued_to),
        issued_by: Some(server.identity.clone()),
        requested_by: None,
        identity: Some(Box::new(CustodyIdentity {
            issuer: identity.issuer.clone(),
            subject: identity.subject.clone(),
        })),
    };
    let asked = Asked {
        request: &request,
        grant,
        caller: &caller,
        custody,
    };
    match mint_token(server, flavor, &asked).await {
        Ok(handed) => {
            server.metrics.administrator_answer(&rule.name, "minted");
            administrators
                .pending
                .granted(&rule.name, recorded.first_for_rule);
            if let Some(reservation) = recorded.reservation {
                reservation
                    .minted(&server.cluster, &handed.minted.token.id().to_string())
                    .await;
            }
            Ok(Granted { handed, request })
        }
        Err(err) => {
            if let Some(reservation) = recorded.reservation {
                reservation.release(&server.cluster).await;
            }
            tracing::warn!(rule = %rule.name, error = %err, "minting a node administrator's join token failed");
            Err(unavailable("mint the token"))
        }
    }
}

/// The identity's bound nodes (FlavorBindings labelled with its key), read only when the
/// rule limits nodes.
async fn bound_nodes(
    server: &Server,
    rule: &roster::Rule,
    key: &str,
) -> Result<u32, Response<Body>> {
    if rule.limits.bound_nodes.is_none() {
        return Ok(0);
    }
    let selector = ListParams::default().labels(&format!("{IDENTITY_LABEL}={key}"));
    let bindings: kube::Api<FlavorBinding> = kube::Api::all(server.cluster.client.clone());
    let bound = bindings
        .list_metadata(&selector)
        .await
        .map_err(|_| unavailable("count your nodes"))?
        .items
        .len();
    Ok(u32::try_from(bound).unwrap_or(u32::MAX))
}

/// 201 with the token, its id, expiry and join line, the input labels and for whom:
/// never the flavor or max nodes.
fn answer(handed: &Handed, request: &MintRequest, wants_document: bool) -> Response<Body> {
    created(handed, request, wants_document, |_| {})
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
            groups: vec![],
            name: Some("Alice".into()),
        }
    }

    #[test]
    fn custody_shows_the_verified_email_else_the_name_else_the_subject() {
        assert_eq!(shown_as(&identity()).as_str(), "alice@acme.example");
        let unverified = Identity {
            email_verified: false,
            ..identity()
        };
        assert_eq!(shown_as(&unverified).as_str(), "Alice");
        let hidden_name = Identity {
            email_verified: false,
            name: Some("Al\u{202e}ice".into()),
            ..identity()
        };
        assert_eq!(shown_as(&hidden_name).as_str(), "u-1");
        let nothing_shown = Identity {
            email: None,
            name: None,
            subject: "\u{0007}".into(),
            ..identity()
        };
        assert_eq!(
            shown_as(&nothing_shown).as_str(),
            identity_key("https://login.acme.example", "\u{0007}")
        );
    }
}
