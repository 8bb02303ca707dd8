//! RBAC evaluation over the stored objects, as plugin/pkg/auth/authorizer/rbac does it:
//! ClusterRoleBindings at every scope, RoleBindings in the request's namespace, and the
//! rule matching of `RuleAllows` (verbs, apiGroups, resources with `*` and `*/sub`,
//! resourceNames, nonResourceURLs with a trailing `*`).

use serde_json::Value;

use crate::types::{ObjectReader, RequestAttributes, ResourceKey, UserInfo};

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The outcome of evaluating every binding that applies to the user.
pub struct RbacOutcome {
    pub allowed: bool,
    /// For an allowed request, the binding that allowed it, as the real authorizer
    /// describes it (`RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to
    /// ServiceAccount "name/namespace"`); SubjectAccessReview shows it.
    pub allowed_by: String,
    /// Bindings that applied but whose role is missing, as the real authorizer reports
    /// them in the 403's reason (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`).
    pub errors: Vec<String>,
}

impl RbacOutcome {
    /// The reason text the union authorizer appends to the 403 message, if any.
    pub fn reason(&self) -> Option<String> {
        match self.errors.as_slice() {
            [] => None,
            [one] => Some(format!("RBAC: {one}")),
            many => Some(format!("RBAC: [{}]", many.join(", "))),
        }
    }
}

pub fn evaluate(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> RbacOutcome {
    let mut outcome = RbacOutcome {
        allowed: false,
        allowed_by: String::new(),
        errors: Vec::new(),
    };
    let cluster_bindings = reader.list(&ResourceKey::new(RBAC_GROUP, "clusterrolebindings"), None);
    for binding in &cluster_bindings {
        if visit(attrs, reader, binding, "", &mut outcome) {
            return outcome;
        }
    }
    // Non-resource requests and cluster-scoped resources have no namespace: only the
    // cluster-wide bindings can allow them.
    if !attrs.namespace.is_empty() {
        let bindings = reader.list(
            &ResourceKey::new(RBAC_GROUP, "rolebindings"),
            Some(&attrs.namespace),
        );
        for binding in &bindings {
            if visit(attrs, reader, binding, &attrs.namespace, &mut outcome) {
                return outcome;
            }
        }
    }
    outcome
}

/// Apply one binding; true once the request is allowed.
fn visit(
    attrs: &RequestAttributes,
    reader: &dyn ObjectReader,
    binding: &Value,
    namespace: &str,
    outcome: &mut RbacOutcome,
) -> bool {
    let subjects = binding
        .get("subjects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let Some(subject) = subjects
        .iter()
        .find(|s| applies_to(&attrs.user, s, namespace))
    else {
        return false;
    };
    match role_rules(reader, binding, namespace) {
        Ok(rules) => {
            if rules.iter().any(|rule| rule_allows(attrs, rule)) {
                outcome.allowed = true;
                outcome.allowed_by =
                    format!("RBAC: allowed by {}", describe(binding, subject, namespace));
                return true;
            }
        }
        Err(err) => outcome.errors.push(err),
    }
    false
}

/// `clusterRoleBindingDescriber` / `roleBindingDescriber`: the binding (`name/namespace`
/// for a RoleBinding), its role, and the first subject that applied (`describeSubject`: a
/// ServiceAccount as `name/namespace`, its namespace defaulting to the binding's).
fn describe(binding: &Value, subject: &Value, namespace: &str) -> String {
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let name = field(&binding["metadata"], "name");
    let (kind, binding_name) = if namespace.is_empty() {
        ("ClusterRoleBinding", name)
    } else {
        ("RoleBinding", format!("{name}/{namespace}"))
    };
    let subject_kind = field(subject, "kind");
    let mut subject_name = field(subject, "name");
    if subject_kind == "ServiceAccount" {
        let sa_namespace = match field(subject, "namespace") {
            ns if ns.is_empty() => namespace.to_string(),
            ns => ns,
        };
        subject_name = format!("{subject_name}/{sa_namespace}");
    }
    format!(
        "{kind} {} of {} {} to {subject_kind} {}",
        quote(&binding_name),
        field(&binding["roleRef"], "kind"),
        quote(&field(&binding["roleRef"], "name")),
        quote(&subject_name),
    )
}

/// Go's `%q` for the plain names RBAC objects have.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `appliesToUser`: User by name, Group by membership, ServiceAccount by its username
/// (`system:serviceaccount:<ns>:<name>`, the namespace defaulting to the binding's).
pub fn applies_to(user: &UserInfo, subject: &Value, namespace: &str) -> bool {
    let field = |k: &str| subject.get(k).and_then(Value::as_str).unwrap_or("");
    match field("kind") {
        "User" => user.name == field("name"),
        "Group" => user.in_group(field("name")),
        "ServiceAccount" => {
            let sa_namespace = if field("namespace").is_empty() {
                namespace
            } else {
                field("namespace")
            };
            !sa_namespace.is_empty()
                && user.name == format!("system:serviceaccount:{sa_namespace}:{}", field("name"))
        }
        _ => false,
    }
}

/// `GetRoleReferenceRules`: a RoleBinding may name a Role of its own namespace or a
/// ClusterRole; a ClusterRoleBinding only a ClusterRole.
fn role_rules(
    reader: &dyn ObjectReader,
    binding: &Value,
    namespace: &str,
) -> Result<Vec<Value>, String> {
    let role_ref = binding.get("roleRef").cloned().unwrap_or(Value::Null);
    let name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
    let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
    let role = match kind {
        "ClusterRole" => reader
            .get(&ResourceKey::new(RBAC_GROUP, "clusterroles"), None, name)
            .ok_or_else(|| format!("clusterrole.{RBAC_GROUP} \"{name}\" not found"))?,
        // From a ClusterRoleBinding (no namespace) a Role reference finds nothing.
        "Role" => Some(namespace)
            .filter(|ns| !ns.is_empty())
            .and_then(|ns| reader.get(&ResourceKey::new(RBAC_GROUP, "roles"), Some(ns), name))
            .ok_or_else(|| format!("role.{RBAC_GROUP} \"{name}\" not found"))?,
        other => return Err(format!("unsupported role reference kind: \"{other}\"")),
    };
    Ok(role
        .get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

fn strings<'a>(rule: &'a Value, key: &str) -> impl Iterator<Item = &'a str> {
    rule.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// `RuleAllows` for one PolicyRule.
pub fn rule_allows(attrs: &RequestAttributes, rule: &Value) -> bool {
    let verb_matches = strings(rule, "verbs").any(|v| v == "*" || v == attrs.verb);
    if !verb_matches {
        return false;
    }
    if !attrs.is_resource_request {
        return strings(rule, "nonResourceURLs")
            .any(|url| non_resource_url_matches(url, &attrs.path));
    }
    let group_matches = strings(rule, "apiGroups").any(|g| g == "*" || g == attrs.api_group);
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let resource_matches = strings(rule, "resources").any(|r| {
        r == "*"
            || r == combined
            || (!attrs.subresource.is_empty()
                && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
    });
    let mut names = strings(rule, "resourceNames").peekable();
    let name_matches = names.peek().is_none() || names.any(|n| n == attrs.name);
    group_matches && resource_matches && name_matches
}

fn non_resource_url_matches(rule_url: &str, path: &str) -> bool {
    rule_url == "*"
        || rule_url == path
        || rule_url
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}
