//! One request to the join-token API: who is calling (TokenReview), may they mint this
//! flavor (SubjectAccessReview: `create` on `flavors/jointoken` of `kubeflavor.io`, named
//! after the flavor), is the body valid, then the token, its record in the trail and the
//! answer. Errors are Kubernetes `Status` objects, like the API server's own.
//!
//! What a caller learns about flavors is only what it may mint: authorization comes before
//! the flavor is looked up, and a refusal names the flavor the caller asked for, nothing
//! more.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use kubeflavor_cluster::ops::trail::{self, Regarding};
use kubeflavor_core::flavor::{FlavorName, TokenTtl};
use kubeflavor_core::mint::request::{self, Grant, MintOutput, MintRequest, MintRequestError};
use kubeflavor_core::token::meta::Custody;
use kubeflavor_core::token::secret::format_expiration;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::Server;
use crate::minting::{MintError, Minted, NodeTokenSpec, join_command_line, mint_node_token};

pub use kubeflavor_cluster::ops::connection::Body;

/// The API group and resource a caller needs `create` on, per flavor name.
pub const GROUP: &str = "kubeflavor.io";
pub const RESOURCE: &str = "flavors";
pub const SUBRESOURCE: &str = "jointoken";
/// The media type cloud-init reads user data in, for callers that want the document alone.
pub const CLOUD_CONFIG: &str = "text/cloud-config";

pub(super) fn respond(code: StatusCode, content_type: &str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).expect("a valid media type"),
    );
    response
}

/// A Kubernetes `Status` answer.
pub fn status(
    code: StatusCode,
    reason: &str,
    message: &str,
    causes: Option<Vec<Value>>,
) -> Response<Body> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(causes) = causes {
        body["details"] = json!({ "causes": causes });
    }
    respond(code, "application/json", body.to_string())
}

pub(super) fn unauthorized(message: &str) -> Response<Body> {
    let mut response = status(StatusCode::UNAUTHORIZED, "Unauthorized", message, None);
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

pub(super) fn unavailable(doing: &str) -> Response<Body> {
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        &format!("could not {doing} with the Kubernetes API; retry shortly"),
        None,
    )
}

/// `Authorization: Bearer <token>`, if the request carries one.
pub(super) fn bearer(headers: &HeaderMap) -> Option<Zeroizing<String>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty())
        .then(|| Zeroizing::new(token.to_string()))
}

/// The caller, as the Kubernetes API authenticates its bearer token.
async fn authenticate(server: &Server, headers: &HeaderMap) -> Result<UserInfo, Response<Body>> {
    let Some(token) = bearer(headers) else {
        return Err(unauthorized(
            "no credentials: send Authorization: Bearer <a Kubernetes ServiceAccount token>",
        ));
    };
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: server.audience.clone().map(|a| vec![a]),
        },
        ..TokenReview::default()
    };
    let _turn = server.reviews.acquire().await;
    let answer = Api::<TokenReview>::all(server.cluster.client.clone())
        .create(&PostParams::default(), &review)
        .await;
    drop(review);
    match answer {
        Ok(TokenReview {
            status: Some(status),
            ..
        }) if status.authenticated == Some(true) => Ok(status.user.unwrap_or_default()),
        Ok(_) => Err(unauthorized(
            "the bearer token was not accepted by the Kubernetes API (expired, revoked, or for another audience)",
        )),
        Err(e) => {
            tracing::warn!(error = %e, "TokenReview failed");
            Err(unavailable("check the credentials"))
        }
    }
}

/// Whether `user` may create join tokens of the flavor named `flavor`.
async fn authorize(server: &Server, user: &UserInfo, flavor: &str) -> Result<(), Response<Body>> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(RESOURCE.into()),
                subresource: Some(SUBRESOURCE.into()),
                verb: Some("create".into()),
                name: Some(flavor.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let _turn = server.reviews.acquire().await;
    match Api::<SubjectAccessReview>::all(server.cluster.client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Ok(()),
        Ok(_) => Err(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "{RESOURCE}.{GROUP} {flavor:?} is forbidden: User {:?} cannot create resource \"{RESOURCE}/{SUBRESOURCE}\" in API group \"{GROUP}\"",
                user.username.as_deref().unwrap_or_default()
            ),
            None,
        )),
        Err(e) => {
            tracing::warn!(error = %e, "SubjectAccessReview failed");
            Err(unavailable("check the caller's permissions"))
        }
    }
}

fn not_found(flavor: &str) -> Response<Body> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{RESOURCE}.{GROUP} {flavor:?} not found"),
        None,
    )
}

/// Reads the body, refusing it as soon as it is larger than a request can be, or when it
/// has not all arrived within `limit` (a body sent a byte at a time, or never ended, must
/// not hold the connection).
pub(super) async fn read_body(
    req: Request<Incoming>,
    limit: Duration,
) -> Result<Bytes, Response<Body>> {
    let too_large = |size: &str| {
        status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            &format!(
                "the request body has {size} bytes; at most {} are accepted",
                request::MAX_BODY_BYTES
            ),
            None,
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(size) = declared.filter(|s| *s > request::MAX_BODY_BYTES) {
        return Err(too_large(&size.to_string()));
    }
    let read = Limited::new(req.into_body(), request::MAX_BODY_BYTES).collect();
    let Ok(read) = tokio::time::timeout(limit, read).await else {
        return Err(status(
            StatusCode::REQUEST_TIMEOUT,
            "Timeout",
            &format!(
                "the request body did not arrive within {limit:?}; send the whole request at once"
            ),
            None,
        ));
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large("more than that")),
        Err(_) => Err(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the request body could not be read",
            None,
        )),
    }
}

pub(super) fn invalid(err: MintRequestError) -> Response<Body> {
    match err {
        MintRequestError::TooLarge(size) => status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            &err.to_string(),
            Some(vec![
                json!({"reason": "FieldValueTooLong", "message": format!("{size} bytes")}),
            ]),
        ),
        MintRequestError::Malformed(_) => status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &err.to_string(),
            None,
        ),
        MintRequestError::DuplicateKey(ref key) => status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &err.to_string(),
            Some(vec![
                json!({"reason": request::FieldReason::Duplicate.as_str(), "message": "the key appears more than once", "field": key}),
            ]),
        ),
        MintRequestError::Invalid(ref problems) => {
            let causes = problems
                .iter()
                .map(|p| json!({"reason": p.reason.as_str(), "message": p.message, "field": p.field}))
                .collect();
            status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                &format!("JoinToken is invalid: {err}"),
                Some(causes),
            )
        }
    }
}

/// Errors of the minting itself, with nothing of the cluster's other flavors in them.
fn failed(flavor: &str, err: MintError) -> Response<Body> {
    match err {
        MintError::InvalidFlavor { .. } => status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "flavor {flavor:?} cannot mint tokens now: its definition is invalid; ask the cluster's administrators"
            ),
            None,
        ),
        _ => {
            tracing::warn!(flavor, error = %err, cause = err.metric_label(), "minting a join token failed");
            unavailable("mint the token")
        }
    }
}

/// `POST /v1/flavors/{flavor}/jointokens`: who calls, within their rate, allowed this
/// flavor; then what they ask, within the flavor's limits; then the token.
pub(super) async fn mint_for(
    server: &Server,
    flavor: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let user = match authenticate(server, req.headers()).await {
        Ok(user) => user,
        Err(response) => return response,
    };
    let caller = user.username.clone().unwrap_or_default();
    if let Err(wait) = server.limiter.check(&caller, Instant::now()) {
        return too_many(&caller, wait);
    }
    if let Err(response) = authorize(server, &user, flavor).await {
        return response;
    }
    let Ok(flavor_name) = flavor.parse::<FlavorName>() else {
        return not_found(flavor);
    };
    let wants_document = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(CLOUD_CONFIG));
    let request = match read_request(server, req).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let grant = match granted(server, &flavor_name, &request).await {
        Ok(grant) => grant,
        Err(response) => return response,
    };
    // The custody record: for whom (the caller says), who asked (the TokenReview says),
    // who minted (this server's identity: the API server refuses any other issued-by from
    // it, so a token's custody never names someone who did not mint it).
    let custody = Custody {
        issued_to: Some(request.issued_to.clone()),
        issued_by: Some(server.identity.clone()),
        requested_by: Some(caller.clone()),
        identity: None,
    };
    let asked = Asked {
        request: &request,
        grant,
        caller: &caller,
        custody,
    };
    match mint_token(server, &flavor_name, &asked).await {
        Ok(minted) => answer(&minted, &request, wants_document),
        Err(err) => failed(flavor, err),
    }
}

/// 429, with when to retry.
pub(super) fn too_many(caller: &str, wait: Duration) -> Response<Body> {
    let mut response = status(
        StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        &format!(
            "too many join tokens requested by {caller:?}; retry in {} s",
            wait.as_secs() + 1
        ),
        None,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs() + 1));
    response
}

/// The body, read within the request timeout and parsed as a mint request.
async fn read_request(
    server: &Server,
    req: Request<Incoming>,
) -> Result<MintRequest, Response<Body>> {
    let body = read_body(req, server.request_timeout).await?;
    request::parse(&body).map_err(invalid)
}

/// What the caller asks, filled in with the flavor's defaults, within the flavor's limits
/// and input-label rules (core's `within_limits`); else a 404 for a flavor that does not
/// exist, a 422 naming each limit and each refused label, or the minting error.
async fn granted(
    server: &Server,
    flavor: &FlavorName,
    request: &MintRequest,
) -> Result<Grant, Response<Body>> {
    let read = server
        .recent
        .flavor_rules(&server.cluster, flavor, std::time::Instant::now())
        .await;
    let rules = match read {
        Ok(Some(rules)) => rules,
        Ok(None) => return Err(not_found(flavor.as_str())),
        Err(err) => return Err(failed(flavor.as_str(), err)),
    };
    let grant = request::within_limits(request, &rules).map_err(invalid)?;
    if grant.ttl == TokenTtl::Never {
        // Only a flavor whose own default is "never" and which allows it gets here: the
        // API server refuses this identity any token Secret without an expiration (the
        // policy `install --serve` ships), whatever the flavor allows.
        return Err(invalid(MintRequestError::Invalid(vec![
            request::FieldProblem {
                field: "ttl".into(),
                reason: request::FieldReason::Invalid,
                message: format!(
                    "flavor {flavor}'s default token TTL is 0 (never expires); the join-token API mints only tokens that expire: pass a ttl such as \"24h\""
                ),
            },
        ])));
    }
    Ok(grant)
}

/// A request within its flavor's limits, with the defaults filled in.
pub(super) struct Asked<'a> {
    pub request: &'a MintRequest,
    pub grant: Grant,
    /// Who asked, for the log and the trail.
    pub caller: &'a str,
    /// The custody record the token carries.
    pub custody: Custody,
}

/// A token as minted, with what the answer hands over besides it.
pub(super) struct Handed {
    pub minted: Minted,
    /// For whom, as the caller said.
    issued_to: String,
    /// Who asked (the TokenReview's user): the answer's and the trail's issuer.
    issued_by: String,
    pub join_line: Zeroizing<String>,
    pub cloud_init: Zeroizing<String>,
}

pub(super) async fn mint_token(
    server: &Server,
    flavor: &FlavorName,
    asked: &Asked<'_>,
) -> Result<Handed, MintError> {
    let (request, caller, grant) = (asked.request, asked.caller, &asked.grant);
    let expiration = grant.ttl.expiration(Timestamp::now());
    // Where nodes join, resolved before the token exists: a token nobody is handed is never
    // stored.
    let target = server
        .recent
        .join_target(&server.cluster, std::time::Instant::now())
        .await?;
    let spec = NodeTokenSpec {
        flavor: flavor.clone(),
        max_nodes: grant.max_nodes,
        expiration,
        custody: asked.custody.clone(),
        input_labels: grant.input_labels.clone(),
        limits_override: None,
    };
    let minted = mint_node_token(&server.cluster, spec).await?;
    let handed = Handed {
        join_line: join_command_line(&target, &minted.token),
        cloud_init: kubeflavor_core::mint::cloud_init::user_data(
            &target.endpoint,
            &minted.token,
            &target.pins,
            &request.ssh_authorized_keys,
        ),
        minted,
        issued_to: request.issued_to.to_string(),
        issued_by: caller.to_string(),
    };
    record(server, &handed).await;
    Ok(handed)
}

/// The mint in the admin trail, the log and the metrics: who, which flavor, which token
/// id, for whom. Never the token's secret.
async fn record(server: &Server, handed: &Handed) {
    let id = handed.minted.token.id().to_string();
    let labels = handed.minted.spec.input_labels.summary();
    tracing::info!(caller = %handed.issued_by, flavor = %handed.minted.spec.flavor, token = %id, issued_to = %handed.issued_to, input_labels = %labels, "join token minted");
    // Node administrators are counted as one caller: one series per administrator would
    // grow with the fleet (their answers are counted by rule instead).
    let counted_as = if handed.minted.spec.custody.identity.is_some() {
        "node-administrator"
    } else {
        handed.issued_by.as_str()
    };
    server
        .metrics
        .minted(handed.minted.spec.flavor.as_str(), counted_as);
    server.metrics.input_labels(
        handed.minted.spec.flavor.as_str(),
        &handed.minted.spec.input_labels,
    );
    let note = format!(
        "{} minted join token {id} of flavor {} for {:?} (expires {}, max nodes {}, input labels {labels})",
        handed.issued_by,
        handed.minted.spec.flavor,
        handed.issued_to,
        handed
            .minted
            .spec
            .expiration
            .map(format_expiration)
            .unwrap_or_else(|| "never".into()),
        handed.minted.spec.max_nodes,
    );
    let event = trail::event(
        super::REPORTING_CONTROLLER,
        &server.instance,
        Regarding {
            api_version: "kubeflavor.io/v1alpha1",
            kind: "Flavor",
            name: handed.minted.spec.flavor.as_str(),
            uid: None,
        },
        ("Normal", "Mint", "JoinTokenMinted"),
        &note,
    );
    trail::post(&server.cluster.client, &event).await;
}

pub(super) fn answer(
    handed: &Handed,
    request: &MintRequest,
    wants_document: bool,
) -> Response<Body> {
    created(handed, request, wants_document, |body| {
        body.insert("flavor", json!(handed.minted.spec.flavor.as_str()));
        body.insert("maxNodes", json!(handed.minted.spec.max_nodes.get()));
        body.insert("issuedBy", json!(handed.issued_by));
        if handed.minted.spec.input_labels.is_empty() {
            body.remove("labels");
        }
    })
}

/// 201 with a minted token: the cloud-init document alone when the caller asked for it,
/// else the JoinToken every answer carries (token, id, for whom, the join line, the input
/// labels, expiry, cloud-init when asked) with what `more` adds or removes. Never cached.
pub(super) fn created(
    handed: &Handed,
    request: &MintRequest,
    wants_document: bool,
    more: impl FnOnce(&mut BTreeMap<&'static str, Value>),
) -> Response<Body> {
    let mut response = if wants_document {
        respond(
            StatusCode::CREATED,
            CLOUD_CONFIG,
            handed.cloud_init.to_string(),
        )
    } else {
        let mut body: BTreeMap<&str, Value> = BTreeMap::from([
            ("kind", json!("JoinToken")),
            ("apiVersion", json!("kubeflavor.io/v1alpha1")),
            ("token", json!(handed.minted.token.expose().as_str())),
            ("id", json!(handed.minted.token.id().to_string())),
            ("issuedTo", json!(request.issued_to.as_str())),
            ("joinCommand", json!(handed.join_line.trim_end())),
            ("labels", json!(handed.minted.spec.input_labels.to_map())),
        ]);
        if let Some(at) = handed.minted.spec.expiration {
            body.insert("expiration", json!(format_expiration(at)));
        }
        if request.output == MintOutput::CloudInit {
            body.insert("cloudInit", json!(handed.cloud_init.as_str()));
        }
        more(&mut body);
        let text = Zeroizing::new(serde_json::to_string(&body).expect("JSON"));
        respond(StatusCode::CREATED, "application/json", text.to_string())
    };
    // The answer carries a secret: no cache may keep it.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_authorization_is_a_credential() {
        let mut h = HeaderMap::new();
        assert!(bearer(&h).is_none());
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic YTpi"),
        );
        assert!(bearer(&h).is_none());
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert!(bearer(&h).is_none());
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer abc.def"),
        );
        assert_eq!(bearer(&h).as_deref().map(String::as_str), Some("abc.def"));
    }

    #[test]
    fn errors_are_kubernetes_status_objects() {
        let r = status(StatusCode::FORBIDDEN, "Forbidden", "no", None);
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let body: Value = serde_json::from_slice(
            &futures::executor::block_on(r.into_body().collect())
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["status"], "Failure");
        assert_eq!(body["reason"], "Forbidden");
        assert_eq!(body["code"], 403);
    }

    #[test]
    fn field_problems_become_status_causes() {
        let err = request::parse(br#"{"issuedTo":"","bogus":1}"#).unwrap_err();
        let r = invalid(err);
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = serde_json::from_slice(
            &futures::executor::block_on(r.into_body().collect())
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        let fields: Vec<&str> = body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert!(
            fields.contains(&"issuedTo") && fields.contains(&"bogus"),
            "{body}"
        );
    }
}
