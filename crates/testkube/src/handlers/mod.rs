//! The REST handlers for resource requests. Each runs synchronously on the locked store and
//! answers a [`Reply`]; watches answer a [`watch::WatchStart`] the server turns into a stream.

mod binding;
pub mod convert;
pub mod hooks;
pub mod read;
pub mod review;
pub mod route;
pub mod watch;
pub mod write;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::errors::{bad_request, page_not_found};
use crate::resources::ResourceInfo;
use crate::store::StoreState;
use crate::types::{ApiError, RequestAttributes, UserInfo};
use route::{Query, ResourceRoute};

/// What a handler answers.
pub enum Reply {
    Json {
        code: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
    Watch(Box<watch::WatchStart>),
}

impl Reply {
    pub fn ok(body: Value) -> Reply {
        Reply::Json {
            code: 200,
            body,
            headers: Vec::new(),
        }
    }

    pub fn created(body: Value, warnings: Vec<String>) -> Reply {
        Reply::Json {
            code: 201,
            body,
            headers: warning_headers(warnings),
        }
    }
}

pub fn warning_headers(warnings: Vec<String>) -> Vec<(String, String)> {
    warnings
        .into_iter()
        .map(|w| ("Warning".to_string(), format!("299 - {}", json!(w))))
        .collect()
}

/// Everything a handler needs to know about the request besides the store.
pub struct Cx<'a> {
    pub user: &'a UserInfo,
    pub attrs: &'a RequestAttributes,
    pub route: &'a ResourceRoute,
    pub query: &'a Query,
    pub body: &'a [u8],
    pub content_type: Option<&'a str>,
    pub accept: Option<&'a str>,
    pub now: Timestamp,
    /// The cluster, for handlers that authenticate tokens or issue them.
    pub shared: &'a crate::shared::Shared,
    /// For a SubjectAccessReview: the authorization webhook's verdict on the request it
    /// describes (asked before the store was locked); no opinion otherwise.
    pub review_verdict: crate::authz::webhook::Verdict,
}

impl Cx<'_> {
    pub fn dry_run(&self) -> bool {
        self.query.get("dryRun").is_some_and(|v| v == "All")
    }

    /// The namespace objects of this type live in for this request ("" if cluster-scoped).
    pub fn object_namespace(&self, info: &ResourceInfo) -> String {
        if info.namespaced {
            self.route.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        }
    }

    pub fn wants_table(&self) -> bool {
        self.accept.is_some_and(|a| {
            a.split(',')
                .next()
                .is_some_and(|first| first.contains("as=Table"))
        })
    }
}

/// The body media types a create or update accepts: JSON and YAML. Protobuf and CBOR,
/// which the real server also decodes, get the 415 it gives for unknown formats.
pub fn decode_body(info: &ResourceInfo, cx: &Cx<'_>) -> Result<Value, ApiError> {
    let media = cx
        .content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "" | "application/json" | "*/*" => decode_object(info, cx.body),
        "application/yaml" => {
            let text = std::str::from_utf8(cx.body)
                .map_err(|e| bad_request(format!("error decoding YAML: {e}")))?;
            match serde_saphyr::from_str::<Value>(text) {
                Ok(v @ Value::Object(_)) => Ok(v),
                Ok(_) => Err(bad_request(
                    "error decoding YAML: the body must be an object",
                )),
                Err(e) => Err(bad_request(format!("error decoding YAML: {e}"))),
            }
        }
        _ => Err(unknown_body_format()),
    }
}

pub fn is_protobuf(cx: &Cx<'_>) -> bool {
    cx.content_type
        .is_some_and(|c| c.starts_with("application/vnd.kubernetes.protobuf"))
}

fn unknown_body_format() -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: \
         application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor",
    )
}

/// Parse a request body as a JSON object, with the real decoder's 400.
pub fn decode_object(info: &ResourceInfo, body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json \
             parse error: json: cannot unmarshal into Go value of type struct",
            info.kind
        ))),
        Err(e) => {
            let preview: String = String::from_utf8_lossy(body).chars().take(30).collect();
            let why = if e.is_eof() {
                "unexpected end of JSON input".to_string()
            } else {
                e.to_string()
            };
            Err(bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json \
                 parse error: {why} ({preview} ...)",
                info.kind
            )))
        }
    }
}

/// A body whose kind or apiVersion names another type is refused with 400; a body without
/// them is accepted.
pub fn check_type_meta(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let kind = obj["kind"].as_str().unwrap_or("");
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    if !kind.is_empty() && kind != info.kind {
        let v = if api_version.is_empty() {
            info.version.as_str()
        } else {
            api_version
        };
        let short_v = v.rsplit('/').next().unwrap_or(v);
        return Err(bad_request(format!(
            "{kind} in version \"{short_v}\" cannot be handled as a {k}: converting ({short_v}.{kind}) to \
             ({g}.{k}): unknown conversion",
            k = info.kind,
            g = info.internal_group(),
        )));
    }
    if !api_version.is_empty() && api_version != info.api_version() {
        return Err(bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    Ok(())
}

/// Built-in types drop unknown top-level fields with a `Warning: 299` header, or refuse
/// them with `?fieldValidation=Strict`; only their top-level fields are checked. Custom
/// resources with a schema are pruned by it (any depth) and get its defaults.
pub fn strip_unknown_fields(
    info: &ResourceInfo,
    obj: &mut Value,
    query: &Query,
) -> Result<Vec<String>, ApiError> {
    let unknown: Vec<String> = match (&info.schema, info.known_fields) {
        (Some(schema), _) => {
            let strict = query.get("fieldValidation") == Some("Strict");
            let mut copy = if strict { obj.clone() } else { Value::Null };
            let target = if strict { &mut copy } else { &mut *obj };
            let pruned = crate::crd_validation::prune_and_default(schema, target);
            if !strict {
                return Ok(unknown_field_warnings(pruned, query));
            }
            if pruned.is_empty() {
                *obj = copy;
            }
            pruned
        }
        (None, Some(known)) => {
            // No Go field is named `$...`: a strategic merge patch's directives left in an
            // atomic list are unknown fields at any depth (`spec.taints[0].$patch`).
            let mut directives = Vec::new();
            collect_dollar_keys(obj, "", &mut directives);
            if !directives.is_empty() && query.get("fieldValidation") != Some("Strict") {
                for path in &directives {
                    remove_path(obj, path);
                }
            }
            let Some(map) = obj.as_object() else {
                return Ok(Vec::new());
            };
            map.keys()
                .filter(|k| {
                    !matches!(k.as_str(), "kind" | "apiVersion" | "metadata")
                        && !known.contains(&k.as_str())
                        && !k.starts_with('$')
                })
                .cloned()
                .chain(directives.into_iter().map(|(shown, _)| shown))
                .collect()
        }
        (None, None) => Vec::new(),
    };
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if query.get("fieldValidation") == Some("Strict") {
        return Err(bad_request(format!(
            "{k} in version \"{v}\" cannot be handled as a {k}: strict decoding error: {fields}",
            k = info.kind,
            v = info.version,
            fields = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect::<Vec<_>>()
                .join(", "),
        )));
    }
    if let Some(map) = obj.as_object_mut() {
        for k in &unknown {
            map.remove(k);
        }
    }
    Ok(unknown_field_warnings(unknown, query))
}

/// Every key starting with `$`, as (the decoder's field path, the path's steps).
fn collect_dollar_keys(v: &Value, at: &str, out: &mut Vec<(String, Vec<PathStep>)>) {
    fn walk(
        v: &Value,
        shown: String,
        steps: &mut Vec<PathStep>,
        out: &mut Vec<(String, Vec<PathStep>)>,
    ) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let here = if shown.is_empty() {
                        k.clone()
                    } else {
                        format!("{shown}.{k}")
                    };
                    steps.push(PathStep::Key(k.clone()));
                    if k.starts_with('$') {
                        out.push((here, steps.clone()));
                    } else {
                        walk(x, here, steps, out);
                    }
                    steps.pop();
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    steps.push(PathStep::Index(i));
                    walk(x, format!("{shown}[{i}]"), steps, out);
                    steps.pop();
                }
            }
            _ => {}
        }
    }
    walk(v, at.to_string(), &mut Vec::new(), out);
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn remove_path(v: &mut Value, (_, steps): &(String, Vec<PathStep>)) {
    let Some((last, parents)) = steps.split_last() else {
        return;
    };
    let mut at = v;
    for step in parents {
        let next = match step {
            PathStep::Key(k) => at.get_mut(k.as_str()),
            PathStep::Index(i) => at.get_mut(*i),
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    if let (PathStep::Key(k), Some(m)) = (last, at.as_object_mut()) {
        m.remove(k);
    }
}

fn unknown_field_warnings(fields: Vec<String>, query: &Query) -> Vec<String> {
    if query.get("fieldValidation") == Some("Ignore") {
        return Vec::new();
    }
    fields
        .into_iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect()
}

/// Dispatch a resource request to its handler.
pub fn handle(
    st: &mut StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
    method: &str,
) -> Result<Reply, ApiError> {
    let sub = cx.route.subresource.as_str();
    if !sub.is_empty() && !info.has_subresource(sub) {
        return Err(page_not_found());
    }
    if info.namespaced && cx.route.namespace.is_none() && cx.route.name.is_some() {
        return Err(page_not_found());
    }
    if !info.namespaced && cx.route.namespace.is_some() && info.resource != "namespaces" {
        return Err(page_not_found());
    }
    let verb = cx.attrs.verb.as_str();
    if !info.verbs.contains(&verb) {
        return Err(crate::errors::method_not_allowed(method));
    }
    if !sub.is_empty() && info.subresource_meta(sub).2 == "TokenRequest" {
        return match verb {
            "create" => review::token_request(st, cx, info),
            _ => Err(crate::errors::method_not_allowed(method)),
        };
    }
    if (!sub.is_empty() && info.subresource_meta(sub).2 == "Binding")
        || (!info.custom && info.resource == "bindings")
    {
        return match verb {
            "create" if cx.route.namespace.is_some() => binding::bind(st, cx, info),
            "create" => Err(page_not_found()),
            _ => Err(crate::errors::method_not_allowed(method)),
        };
    }
    match verb {
        "get" => read::get(st, cx, info),
        "list" => read::list(st, cx, info),
        "watch" => watch::start(st, cx, info).map(|w| Reply::Watch(Box::new(w))),
        "create" if info.resource == "selfsubjectreviews" => write::self_subject_review(cx, info),
        "create" if info.resource == "subjectaccessreviews" => {
            review::subject_access_review(st, cx, info)
        }
        "create" if info.resource == "tokenreviews" => review::token_review(st, cx, info),
        "create" if cx.route.namespace.is_none() && info.namespaced => Err(page_not_found()),
        "create" => write::create(st, cx, info, None),
        "update" => write::update(st, cx, info),
        "patch" => write::patch(st, cx, info),
        "delete" => write::delete(st, cx, info),
        "deletecollection" => write::delete_collection(st, cx, info),
        _ => Err(crate::errors::method_not_allowed(method)),
    }
}
