//! Authorization, as `--authorization-mode=Node,RBAC` does it: `system:masters` may do
//! anything; then the Node authorizer; then RBAC over the stored Role/ClusterRole objects
//! and their bindings (the default bootstrap policy is seeded into the store at start, as
//! the real server does).
//!
//! Not imitated: ClusterRole `aggregationRule`s (no aggregation controller), RBAC's
//! escalation and `bind` checks on writes of roles and bindings, impersonation, and the
//! Node authorizer's graph (testkube serves no pods or volumes, so nothing is ever related
//! to a node beyond its own Node and Lease).

mod bootstrap_policy;
pub mod node;
pub mod rbac;
pub mod webhook;

use serde_json::{Map, Value, json};

use crate::types::{ApiError, ObjectReader, RequestAttributes, ResourceKey};

pub use bootstrap_policy::{AUTOAPPROVE_BOOTSTRAP_BINDING, AUTOAPPROVE_ROTATION_BINDING};

/// The group the privileged-group authorizer lets do anything, before any other authorizer.
pub const MASTERS_GROUP: &str = "system:masters";

/// Allow the request, or answer the exact 403 the real server gives.
pub fn authorize(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> Result<(), ApiError> {
    match decide(attrs, reader) {
        Ok(()) => Ok(()),
        Err(reason) => Err(forbidden(attrs, &reason)),
    }
}

/// Authorization with the webhook's verdict already in (see `webhook`): its deny is a 403
/// with its reason, its allow skips Node and RBAC; otherwise Node and RBAC decide, and a
/// webhook error turns their "not allowed" into a 500 (`WithAuthorization`), or the
/// failurePolicy's deny into one at once.
pub fn authorize_after(
    verdict: &webhook::Verdict,
    attrs: &RequestAttributes,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    use webhook::Verdict;
    match verdict {
        Verdict::Allow(_) => Ok(()),
        Verdict::Deny(reason) => Err(forbidden(attrs, reason)),
        Verdict::Failed { deny: true, error } => Err(crate::errors::internal_error(error)),
        Verdict::NoOpinion => authorize(attrs, reader),
        Verdict::Failed { deny: false, error } => match decide(attrs, reader) {
            Ok(()) => Ok(()),
            Err(_) => Err(crate::errors::internal_error(error)),
        },
    }
}

/// True when the request would be allowed (for the checks admission synthesizes).
pub fn is_allowed(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> bool {
    decide(attrs, reader).is_ok()
}

/// What the authorizer chain decided, and why (SubjectAccessReview's `status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The allowing authorizer's reason (only RBAC gives one: `RBAC: allowed by ...`), or
    /// the non-empty reasons of every authorizer that had no opinion, joined by newlines.
    pub reason: String,
}

/// The union authorizer `system:masters`, Node, RBAC: the first "allow" wins; otherwise the
/// non-empty reasons of every authorizer, joined by newlines. The privileged-group and
/// Node authorizers allow without a reason.
pub fn evaluate(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> Decision {
    let allow = |reason: String| Decision {
        allowed: true,
        reason,
    };
    if attrs.user.in_group(MASTERS_GROUP) {
        return allow(String::new());
    }
    let mut reasons = Vec::new();
    match node::authorize(attrs, reader) {
        Some(node::NodeDecision::Allow) => return allow(String::new()),
        Some(node::NodeDecision::NoOpinion(reason)) if !reason.is_empty() => reasons.push(reason),
        _ => {}
    }
    let rbac = rbac::evaluate(attrs, reader);
    if rbac.allowed {
        return allow(rbac.allowed_by);
    }
    reasons.extend(rbac.reason());
    Decision {
        allowed: false,
        reason: reasons.join("\n"),
    }
}

/// A SubjectAccessReview's `status`: what the whole chain decided, the webhook included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewStatus {
    pub allowed: bool,
    /// An authorizer (here only the webhook) denied outright.
    pub denied: bool,
    pub reason: String,
    /// The error an authorizer met (the webhook could not be asked), if any.
    pub evaluation_error: String,
}

/// The union authorizer `system:masters`, webhook, Node, RBAC with the webhook's verdict
/// already in (staging/src/k8s.io/apiserver/pkg/authorization/union/union.go): the first
/// allow or deny wins with its own reason and error; otherwise no opinion with every
/// reason joined by newlines and the errors met (a failed webhook under failurePolicy
/// Deny is a deny with its error and no reason, webhook.go).
pub fn review(
    verdict: &webhook::Verdict,
    attrs: &RequestAttributes,
    reader: &dyn ObjectReader,
) -> ReviewStatus {
    use webhook::Verdict;
    let status = |allowed: bool, denied: bool, reason: &str, error: &str| ReviewStatus {
        allowed,
        denied,
        reason: reason.to_string(),
        evaluation_error: error.to_string(),
    };
    if attrs.user.in_group(MASTERS_GROUP) {
        return status(true, false, "", "");
    }
    let error = match verdict {
        Verdict::Allow(reason) => return status(true, false, reason, ""),
        Verdict::Deny(reason) => return status(false, true, reason, ""),
        Verdict::Failed { deny: true, error } => return status(false, true, "", error),
        Verdict::Failed { deny: false, error } => error.as_str(),
        Verdict::NoOpinion => "",
    };
    let rest = evaluate(attrs, reader);
    // An allow after the error carries the allowing authorizer's (empty) error only.
    let error = if rest.allowed { "" } else { error };
    status(rest.allowed, false, &rest.reason, error)
}

fn decide(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> Result<(), String> {
    let decision = evaluate(attrs, reader);
    if decision.allowed {
        Ok(())
    } else {
        Err(decision.reason)
    }
}

/// `responsewriters.Forbidden`: the RBAC-style sentence, `: <reason>` when an authorizer
/// gave one, wrapped by `NewForbidden`. Authorizer 403s carry
/// `X-Content-Type-Options: nosniff`; admission 403s do not.
pub fn forbidden(attrs: &RequestAttributes, reason: &str) -> ApiError {
    let user = &attrs.user.name;
    let mut sentence = if !attrs.is_resource_request {
        format!(
            "User \"{user}\" cannot {} path \"{}\"",
            attrs.verb, attrs.path
        )
    } else {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", attrs.namespace)
        };
        format!(
            "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            attrs.verb, attrs.api_group
        )
    };
    if !reason.is_empty() {
        sentence = format!("{sentence}: {reason}");
    }
    let (group, resource, name) = if attrs.is_resource_request {
        (
            attrs.api_group.as_str(),
            attrs.resource.as_str(),
            attrs.name.as_str(),
        )
    } else {
        ("", "", "")
    };
    let mut err = new_forbidden(group, resource, name, &sentence);
    err.nosniff = true;
    err
}

/// `apierrors.NewForbidden(groupResource, name, err)`: the message names the qualified
/// resource and the object; `details.kind` is the plural resource.
pub fn new_forbidden(group: &str, resource: &str, name: &str, cause: &str) -> ApiError {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let message = match (qualified.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {cause}"),
        (false, true) => format!("{qualified} is forbidden: {cause}"),
        (false, false) => format!("{qualified} \"{name}\" is forbidden: {cause}"),
    };
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    if !resource.is_empty() {
        details.insert("kind".into(), json!(resource));
    }
    ApiError::new(403, "Forbidden", message).with_details(Value::Object(details))
}

/// The objects a fresh real cluster (kube-apiserver's bootstrap policy plus what `kubeadm
/// init` adds for joining nodes) starts with: namespaces, default ClusterRoles and
/// ClusterRoleBindings, the kube-public Role/RoleBinding that lets anonymous read
/// cluster-info. The store seeds these at start; they are then ordinary objects.
pub fn default_objects() -> Vec<(ResourceKey, Value)> {
    bootstrap_policy::objects()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;
