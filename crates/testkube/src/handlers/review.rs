//! The create-only resources whose answer is computed, never stored:
//! SubjectAccessReview (the authorizer chain on a described request), TokenReview (the
//! token authenticators on a token) and TokenRequest (a service-account token).

use serde_json::{Map, Value, json};

use super::{Cx, Reply, check_type_meta, decode_body, strip_unknown_fields};
use crate::admission;
use crate::authn::{self, API_AUDIENCE};
use crate::errors::{FieldError, bad_request, invalid, not_found};
use crate::resources::ResourceInfo;
use crate::store::{StoreState, format_time};
use crate::types::{ApiError, IdentityKind, Operation, RequestAttributes, ResourceKey, UserInfo};

/// Decode a review body with the usual 400s and unknown-field warnings.
fn decode_review(info: &ResourceInfo, cx: &Cx<'_>) -> Result<(Value, Vec<String>), ApiError> {
    let mut obj = decode_body(info, cx)?;
    super::write::decode_checks(info, &obj)?;
    let warnings = strip_unknown_fields(info, &mut obj, cx.query)?;
    Ok((obj, warnings))
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

fn string_map(v: &Value) -> std::collections::BTreeMap<String, Vec<String>> {
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), string_list(v))).collect())
        .unwrap_or_default()
}

/// The fields of a decoded Go struct: the known ones, empty strings and lists dropped
/// (`omitempty`), in the order given.
fn echo(from: &Value, fields: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    for field in fields {
        match &from[*field] {
            Value::String(s) if !s.is_empty() => {
                out.insert(field.to_string(), json!(s));
            }
            Value::Array(a) if !a.is_empty() => {
                out.insert(field.to_string(), json!(string_list(&from[*field])));
            }
            Value::Object(m) if !m.is_empty() => {
                out.insert(field.to_string(), json!(string_map(&from[*field])));
            }
            _ => {}
        }
    }
    out
}

/// The parts of a SubjectAccessReview `spec` both the validation and the authorizers read.
struct ReviewSpec<'a> {
    resource: Option<&'a Value>,
    non_resource: Option<&'a Value>,
    user: &'a str,
    groups: Vec<String>,
}

impl<'a> ReviewSpec<'a> {
    fn of(spec: &'a Value) -> Self {
        let object = |key: &str| spec[key].as_object().map(|_| &spec[key]);
        ReviewSpec {
            resource: object("resourceAttributes"),
            non_resource: object("nonResourceAttributes"),
            user: spec["user"].as_str().unwrap_or(""),
            groups: string_list(&spec["groups"]),
        }
    }
}

/// The request a valid SubjectAccessReview `spec` describes, on its user exactly as given
/// (no `system:authenticated` is added); `None` when the spec is not valid (then no
/// authorizer is asked).
pub fn reviewed_attributes(spec: &Value) -> Option<RequestAttributes> {
    let ReviewSpec {
        resource,
        non_resource,
        user,
        groups,
    } = ReviewSpec::of(spec);
    if user.is_empty() && groups.is_empty() {
        return None;
    }
    let subject = UserInfo {
        // The kind only feeds request counters; a reviewed subject makes no request.
        kind: IdentityKind::StaticToken,
        name: user.to_string(),
        uid: spec["uid"].as_str().unwrap_or("").to_string(),
        groups,
        extra: string_map(&spec["extra"]),
    };
    let text = |v: &Value, f: &str| v[f].as_str().unwrap_or("").to_string();
    match (resource, non_resource) {
        (Some(r), None) => Some(RequestAttributes {
            user: subject,
            verb: text(r, "verb"),
            is_resource_request: true,
            path: String::new(),
            api_group: text(r, "group"),
            // `matchAllVersionIfEmpty`
            api_version: Some(text(r, "version"))
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "*".into()),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            namespace: text(r, "namespace"),
            name: text(r, "name"),
            field_selector: String::new(),
        }),
        (None, Some(nr)) => Some(RequestAttributes::non_resource(
            subject,
            text(nr, "verb"),
            text(nr, "path"),
        )),
        _ => None,
    }
}

/// POST /apis/authorization.k8s.io/v1/subjectaccessreviews (subjectaccessreview/rest.go):
/// `ValidateSubjectAccessReview`, then the whole authorizer chain (`system:masters`, the
/// webhook when one is configured, whose verdict the server asked for before taking the
/// store's lock: `Cx::review_verdict`, then Node and RBAC) on the described request, and
/// `status.allowed`/`denied`/`reason`/`evaluationError`.
pub fn subject_access_review(
    st: &StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
) -> Result<Reply, ApiError> {
    let (obj, warnings) = decode_review(info, cx)?;
    let spec = &obj["spec"];
    let ReviewSpec {
        resource,
        non_resource,
        user,
        groups,
    } = ReviewSpec::of(spec);
    let mut errs = Vec::new();
    match (resource, non_resource) {
        (Some(_), Some(nr)) => {
            let text = |f: &str| nr[f].as_str().unwrap_or("").to_string();
            errs.push(FieldError::invalid_bare(
                "spec",
                &format!(
                    "authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}: exactly one of \
                     nonResourceAttributes or resourceAttributes must be specified",
                    text("path"),
                    text("verb"),
                ),
            ));
        }
        (None, None) => errs.push(FieldError::invalid(
            "spec",
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if user.is_empty() && groups.is_empty() {
        errs.push(FieldError::invalid(
            "spec.user",
            user,
            "at least one of user or group must be specified",
        ));
    }
    if !errs.is_empty() {
        return Err(invalid(&info.kind, &info.group, "", &errs));
    }
    let attrs = reviewed_attributes(spec).ok_or_else(|| {
        crate::errors::internal_error("a validated SubjectAccessReview has no attributes")
    })?;
    let decision = crate::authz::review(&cx.review_verdict, &attrs, st);
    let mut echoed = echo(spec, &["user", "groups", "extra", "uid"]);
    if let Some(r) = resource {
        let fields = [
            "namespace",
            "verb",
            "group",
            "version",
            "resource",
            "subresource",
            "name",
        ];
        echoed.insert("resourceAttributes".into(), Value::Object(echo(r, &fields)));
    }
    if let Some(nr) = non_resource {
        echoed.insert(
            "nonResourceAttributes".into(),
            Value::Object(echo(nr, &["path", "verb"])),
        );
    }
    let mut status = json!({"allowed": decision.allowed});
    if decision.denied {
        status["denied"] = json!(true);
    }
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    if !decision.evaluation_error.is_empty() {
        status["evaluationError"] = json!(decision.evaluation_error);
    }
    Ok(Reply::created(
        json!({
            "kind": info.kind,
            "apiVersion": info.api_version(),
            "metadata": {},
            "spec": echoed,
            "status": status,
        }),
        warnings,
    ))
}

/// POST /apis/authentication.k8s.io/v1/tokenreviews (tokenreview/storage.go): the token
/// authenticators on `spec.token` for `spec.audiences` (the API server's own by default);
/// `status.authenticated`, `user`, `audiences`, or `error`. Bootstrap tokens
/// are read through the authenticator's lagged view, as for requests.
pub fn token_review(st: &StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let (obj, warnings) = decode_review(info, cx)?;
    let spec = &obj["spec"];
    let token = spec["token"].as_str().unwrap_or("");
    if token.is_empty() {
        return Err(bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let mut audiences = string_list(&spec["audiences"]);
    if audiences.is_empty() {
        audiences = vec![API_AUDIENCE.to_string()];
    }
    let result = cx.shared.with_token_authenticators(st, |tokens| {
        authn::authenticate_token(token, tokens, &audiences, cx.now)
    });
    let status = match result {
        Ok((user, audiences)) => {
            let mut user_info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                user_info["uid"] = json!(user.uid);
            }
            if !user.extra.is_empty() {
                user_info["extra"] = json!(user.extra);
            }
            json!({"authenticated": true, "user": user_info, "audiences": audiences})
        }
        Err(error) => json!({"user": {}, "error": error}),
    };
    let metadata = obj["metadata"].as_object().cloned().unwrap_or_default();
    Ok(Reply::created(
        json!({
            "kind": info.kind,
            "apiVersion": info.api_version(),
            "metadata": metadata,
            "spec": echo(spec, &["token", "audiences"]),
            "status": status,
        }),
        warnings,
    ))
}

/// The smallest and largest `spec.expirationSeconds` (authentication validation).
const MIN_TOKEN_SECONDS: i64 = 10 * 60;
const MAX_TOKEN_SECONDS: i64 = 1 << 32;
/// v1 defaulting of `spec.expirationSeconds`.
const DEFAULT_TOKEN_SECONDS: i64 = 60 * 60;

/// POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token (TokenREST.Create): a
/// service-account token for the API server's audience by default, one hour by default;
/// bound to a Pod (`spec.boundObjectRef`), it authenticates only while that pod exists.
/// Binding to a Secret is not supported (400 as for an unknown kind).
pub fn token_request(st: &StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    // The body is a TokenRequest, not a ServiceAccount.
    let mut request_info = info.clone();
    request_info.group = "authentication.k8s.io".into();
    request_info.version = "v1".into();
    request_info.kind = "TokenRequest".into();
    request_info.known_fields = Some(&["spec", "status"]);
    let body_info = &request_info;
    let (obj, warnings) = if cx.body.iter().all(u8::is_ascii_whitespace) {
        (json!({}), Vec::new())
    } else {
        let mut obj = decode_body(body_info, cx)?;
        check_type_meta(body_info, &obj)?;
        let warnings = strip_unknown_fields(body_info, &mut obj, cx.query)?;
        (obj, warnings)
    };
    let name = cx.route.name.clone().unwrap_or_default();
    let namespace = cx.route.namespace.clone().unwrap_or_default();
    let group = body_info.group.as_str();
    let meta = |f: &str| obj["metadata"][f].as_str().unwrap_or("").to_string();
    if !meta("name").is_empty() && meta("name") != name {
        let e = FieldError::invalid(
            "metadata.name",
            &meta("name"),
            "must match the service account name if specified",
        );
        return Err(invalid("TokenRequest", group, &name, &[e]));
    }
    if !meta("namespace").is_empty() && meta("namespace") != namespace {
        let e = FieldError::invalid(
            "metadata.namespace",
            &meta("namespace"),
            "must match the service account namespace if specified",
        );
        return Err(invalid("TokenRequest", group, &name, &[e]));
    }
    let sa = st
        .get_object(&ResourceKey::new("", "serviceaccounts"), &namespace, &name)
        .ok_or_else(|| not_found(info, &name))?;
    let spec = &obj["spec"];
    let mut audiences = string_list(&spec["audiences"]);
    if audiences.is_empty() {
        audiences = vec![API_AUDIENCE.to_string()];
    }
    let expiration = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_TOKEN_SECONDS);
    let mut errs = Vec::new();
    if expiration < MIN_TOKEN_SECONDS {
        errs.push(FieldError::invalid_bare(
            "spec.expirationSeconds",
            &format!("{expiration}: may not specify a duration less than 10 minutes"),
        ));
    }
    if expiration > MAX_TOKEN_SECONDS {
        errs.push(FieldError::invalid_bare(
            "spec.expirationSeconds",
            &format!("{expiration}: may not specify a duration larger than 2^32 seconds"),
        ));
    }
    if !errs.is_empty() {
        return Err(invalid("TokenRequest", group, "", &errs));
    }
    // Admission sees the TokenRequest: NodeRestriction's rules for a kubelet's request,
    // then the ValidatingAdmissionPolicies (`createValidation`).
    let mut request = obj.clone();
    admission::mutate(cx.attrs, Operation::Create, None, Some(&mut request), st)?;
    admission::validate(cx.attrs, Operation::Create, None, Some(&request), st)?;
    let bound = match request["spec"]["boundObjectRef"].as_object() {
        Some(reference) => Some(bound_pod(st, &namespace, &name, reference)?),
        None => None,
    };
    let (token, _jti) = cx
        .shared
        .sa_issuer
        .issue(sa, bound, &audiences, expiration, cx.now);
    let sa_meta = |f: &str| sa["metadata"][f].clone();
    let expires = cx.now + jiff::SignedDuration::from_secs(expiration);
    Ok(Reply::created(
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {
                "name": sa_meta("name"),
                "namespace": sa_meta("namespace"),
                "uid": sa_meta("uid"),
                "creationTimestamp": format_time(cx.now),
            },
            "spec": {"audiences": audiences, "expirationSeconds": expiration,
                     "boundObjectRef": request["spec"]["boundObjectRef"].clone()},
            "status": {"token": token, "expirationTimestamp": format_time(expires)},
        }),
        warnings,
    ))
}

/// The Pod a TokenRequest binds its token to (TokenREST.Create): it must exist, run with
/// the ServiceAccount, and have the uid the reference names (when it names one).
fn bound_pod<'a>(
    st: &'a StoreState,
    namespace: &str,
    service_account: &str,
    reference: &serde_json::Map<String, Value>,
) -> Result<&'a Value, ApiError> {
    let field = |f: &str| reference.get(f).and_then(Value::as_str).unwrap_or("");
    let (g, v) = match field("apiVersion").split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", field("apiVersion")),
    };
    if !(g.is_empty() && field("kind") == "Pod") {
        return Err(bad_request(format!(
            "cannot bind token to object of type {g}/{v}, Kind={}",
            field("kind")
        )));
    }
    let pod_name = field("name");
    let pod = st
        .get_object(&ResourceKey::new("", "pods"), namespace, pod_name)
        .ok_or_else(|| crate::errors::not_found_resource("", "pods", pod_name))?;
    if pod["spec"]["serviceAccountName"].as_str().unwrap_or("") != service_account {
        return Err(bad_request(format!(
            "cannot bind token for serviceaccount \"{service_account}\" to pod running with different serviceaccount name."
        )));
    }
    let uid = field("uid");
    if !uid.is_empty() && pod["metadata"]["uid"].as_str() != Some(uid) {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on Pod \"{pod_name}\": the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        )
        .with_details(json!({"name": pod_name, "kind": "Pod"})));
    }
    Ok(pod)
}
