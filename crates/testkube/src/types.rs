//! Types shared by the server core (store, handlers, watch) and the policy modules
//! (authentication, authorization, admission, the kube-controller-manager duties).
//!
//! The policy modules never touch the store directly: they read through [`ObjectReader`]
//! and answer with values or an [`ApiError`]; the server core performs every write.

use std::collections::BTreeMap;

use serde_json::Value;

/// How a caller proved who it is. Used for request counters and for rules that depend on
/// the credential type (client-certificate identities carry a credential id, token ones do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdentityKind {
    /// A client certificate signed by the cluster CA.
    ClientCert,
    /// A bootstrap token (`<id>.<secret>`) backed by a `kube-system/bootstrap-token-<id>` Secret.
    BootstrapToken,
    /// A bearer token registered with the test cluster (the "bearer token kubeconfig").
    StaticToken,
    /// A service-account token from TokenRequest (`serviceaccounts/<name>/token`).
    ServiceAccountToken,
    /// No credentials at all: `system:anonymous`.
    Anonymous,
}

impl IdentityKind {
    /// A short name of the kind, e.g. `bootstrap-token`, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityKind::ClientCert => "client-cert",
            IdentityKind::BootstrapToken => "bootstrap-token",
            IdentityKind::StaticToken => "static-token",
            IdentityKind::ServiceAccountToken => "service-account-token",
            IdentityKind::Anonymous => "anonymous",
        }
    }
}

/// The authenticated user of one request, as the real authenticators report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub kind: IdentityKind,
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn anonymous() -> Self {
        UserInfo {
            kind: IdentityKind::Anonymous,
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// A resource type by API group (empty for core/v1) and plural name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub group: String,
    pub resource: String,
}

impl ResourceKey {
    pub fn new(group: &str, resource: &str) -> Self {
        ResourceKey {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

/// The attributes an authorizer sees, as in k8s.io/apiserver's `authorizer.Attributes`.
#[derive(Clone, Debug)]
pub struct RequestAttributes {
    pub user: UserInfo,
    /// get, list, watch, create, update, patch, delete, deletecollection (and, for the
    /// synthesized checks admission makes: approve, sign).
    pub verb: String,
    /// True for `/api/...` and `/apis/...` object paths, false for `/version`, `/healthz`,
    /// discovery documents and the like.
    pub is_resource_request: bool,
    /// The raw path, for non-resource requests.
    pub path: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The raw `fieldSelector` query of a list/watch (the Node authorizer allows a node to
    /// list Nodes only with `metadata.name=<itself>`).
    pub field_selector: String,
}

impl RequestAttributes {
    /// A request for a non-resource path (`/version`, `/healthz`, discovery).
    pub fn non_resource(user: UserInfo, verb: String, path: String) -> Self {
        RequestAttributes {
            user,
            verb,
            is_resource_request: false,
            path,
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            field_selector: String::new(),
        }
    }
}

/// Read access to the stored objects, as JSON exactly as the API would return them.
pub trait ObjectReader {
    fn get(&self, key: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<&Value>;
    /// All objects of a type, in one namespace (`Some`) or across all (`None`).
    fn list(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<&Value>;
}

/// An error response. Rendered as a `metav1.Status` JSON body unless `plain_text` is set
/// (the real server answers some errors, such as `404 page not found`, as text/plain).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// The Status `reason`; `None` leaves the field out (some 500s have none).
    pub reason: Option<String>,
    pub message: String,
    /// The Status `details` object, when there is one.
    pub details: Option<Value>,
    /// Authorizer 403s carry `X-Content-Type-Options: nosniff`; admission 403s do not.
    pub nosniff: bool,
    /// Answer with this text body and `Content-Type: text/plain` instead of a Status.
    pub plain_text: Option<String>,
    /// Extra response headers (for example `Retry-After`).
    pub headers: Vec<(String, String)>,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: if reason.is_empty() {
                None
            } else {
                Some(reason.into())
            },
            message: message.into(),
            details: None,
            nosniff: false,
            plain_text: None,
            headers: Vec::new(),
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// What an admission step is looking at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// A string field of an object's metadata (`""` when absent).
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or("")
}

/// An object's name.
pub fn name_of(obj: &Value) -> &str {
    meta_str(obj, "name")
}

/// An object's namespace (`""` for a cluster-scoped object).
pub fn namespace_of(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}
