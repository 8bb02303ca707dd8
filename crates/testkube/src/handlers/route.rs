//! From a request line to what it addresses, and the authorizer attributes the real
//! server's `RequestInfoFactory` computes for it.

use std::collections::HashMap;

use crate::selectors::FieldSelector;
use crate::types::{RequestAttributes, UserInfo};

#[derive(Clone, Debug, PartialEq)]
pub enum Discovery {
    /// `/api`
    Api,
    /// `/api/v1` (or `/apis/<group>/<version>`)
    GroupVersion(String, String),
    /// `/apis`
    Apis,
    /// `/apis/<group>`
    Group(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ResourceRoute {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    /// The namespace in the path (for the namespaces resource itself: the namespace's name).
    pub namespace: Option<String>,
    pub name: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    Discovery(Discovery),
    Resource(ResourceRoute),
    /// `/version`, `/healthz`, `/openapi/...`, and any other path (404 when unserved).
    NonResource(String),
}

/// Subresources of a namespace that the path grammar treats as such, not as a resource.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

pub fn parse_route(path: &str) -> Route {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    match parts.as_slice() {
        ["api"] => Route::Discovery(Discovery::Api),
        ["api", version] => {
            Route::Discovery(Discovery::GroupVersion(String::new(), version.to_string()))
        }
        ["apis"] => Route::Discovery(Discovery::Apis),
        ["apis", group] => Route::Discovery(Discovery::Group(group.to_string())),
        ["apis", group, version] => Route::Discovery(Discovery::GroupVersion(
            group.to_string(),
            version.to_string(),
        )),
        ["api", version, rest @ ..] => resource_route("", version, rest, path),
        ["apis", group, version, rest @ ..] => resource_route(group, version, rest, path),
        _ => Route::NonResource(path.to_string()),
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str], path: &str) -> Route {
    let mut parts = rest;
    let mut namespace = None;
    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        namespace = Some(parts[1].to_string());
        if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
            parts = &parts[2..];
        }
    }
    if parts.is_empty() || parts.len() > 3 {
        return Route::NonResource(path.to_string());
    }
    Route::Resource(ResourceRoute {
        group: group.into(),
        version: version.into(),
        resource: parts[0].into(),
        name: parts.get(1).map(|s| s.to_string()),
        subresource: parts.get(2).map(|s| s.to_string()).unwrap_or_default(),
        namespace,
    })
}

/// Query parameters, percent-decoded; the last occurrence wins.
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(percent_decode(k), percent_decode(v));
        }
        Query(map)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A boolean parameter (`true`, `1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// The Kubernetes verb for a resource request.
pub fn resource_verb(method: &str, route: &ResourceRoute, query: &Query) -> String {
    let named = route.name.is_some();
    match method {
        "GET" | "HEAD" if query.flag("watch") => "watch",
        "GET" | "HEAD" if named => "get",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        other => return other.to_ascii_lowercase(),
    }
    .to_string()
}

pub fn attributes(
    user: &UserInfo,
    method: &str,
    route: &Route,
    query: &Query,
    path: &str,
) -> RequestAttributes {
    let mut attrs = RequestAttributes::non_resource(
        user.clone(),
        method.to_ascii_lowercase(),
        path.to_string(),
    );
    let Route::Resource(r) = route else {
        return attrs;
    };
    attrs.is_resource_request = true;
    attrs.verb = resource_verb(method, r, query);
    attrs.api_group = r.group.clone();
    attrs.api_version = r.version.clone();
    attrs.resource = r.resource.clone();
    attrs.subresource = r.subresource.clone();
    attrs.namespace = r.namespace.clone().unwrap_or_default();
    attrs.name = r.name.clone().unwrap_or_default();
    attrs.field_selector = query.get("fieldSelector").unwrap_or("").to_string();
    // As k8s.io/apiserver does: a list or watch pinned to one name by
    // `fieldSelector=metadata.name=<x>` is authorized as a request for that name.
    if matches!(attrs.verb.as_str(), "list" | "watch")
        && attrs.name.is_empty()
        && let Some(name) = FieldSelector::pinned_name(&attrs.field_selector)
    {
        attrs.name = name;
    }
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourceRoute {
        match parse_route(path) {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn namespaced_and_cluster_paths() {
        let r = res("/api/v1/namespaces/kube-system/secrets/x");
        assert_eq!(
            (
                r.resource.as_str(),
                r.namespace.as_deref(),
                r.name.as_deref()
            ),
            ("secrets", Some("kube-system"), Some("x"))
        );
        let r = res("/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval");
        assert_eq!(
            (r.group.as_str(), r.subresource.as_str()),
            ("certificates.k8s.io", "approval")
        );
        let r = res("/api/v1/namespaces/kube-public");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref()),
            ("namespaces", Some("kube-public"))
        );
        let r = res("/api/v1/namespaces/kf/status");
        assert_eq!(
            (r.resource.as_str(), r.subresource.as_str()),
            ("namespaces", "status")
        );
        assert_eq!(
            parse_route("/version"),
            Route::NonResource("/version".into())
        );
    }

    #[test]
    fn query_decoding_and_pinned_names() {
        let q = Query::parse(Some("fieldSelector=metadata.name%3Dworker-1&watch=1"));
        let route = parse_route("/api/v1/nodes");
        let attrs = attributes(&UserInfo::anonymous(), "GET", &route, &q, "/api/v1/nodes");
        assert_eq!(
            (attrs.verb.as_str(), attrs.name.as_str()),
            ("watch", "worker-1")
        );
    }
}
