//! The Node authorizer (plugin/pkg/auth/authorizer/node, v1.32+ with
//! AuthorizeNodeWithSelectors): a kubelet reads only its own Node, its own Lease, and the
//! objects the node graph relates to it; everything else it may do is the static
//! `system:node` rule set. Its denials are "no opinion" plus a reason that RBAC may still
//! override and that otherwise ends up in the 403 message (a 403, not a 404, even for a
//! Node that does not exist).

use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::authz::rbac::rule_allows;
use crate::types::{ObjectReader, RequestAttributes, ResourceKey, UserInfo};

pub const NODES_GROUP: &str = "system:nodes";
pub const NODE_USER_PREFIX: &str = "system:node:";

pub enum NodeDecision {
    Allow,
    /// Not allowed by this authorizer; the reason (possibly empty) joins the 403 message.
    NoOpinion(String),
}

/// `NodeIdentity`: `Some(name)` for `system:node:<name>` in `system:nodes` (the name may be
/// empty), `None` for everyone else.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.in_group(NODES_GROUP).then_some(name)
}

/// The Node authorizer's verdict, or `None` when the caller is not a node.
pub fn authorize(attrs: &RequestAttributes, reader: &dyn ObjectReader) -> Option<NodeDecision> {
    let node = node_identity(&attrs.user)?;
    if node.is_empty() {
        return Some(no_opinion(format!(
            "unknown node for user \"{}\"",
            attrs.user.name
        )));
    }
    if attrs.is_resource_request {
        let decision = match (attrs.api_group.as_str(), attrs.resource.as_str()) {
            ("", "secrets" | "configmaps") => Some(read_namespaced_object(node, attrs, reader)),
            ("", "persistentvolumeclaims") if attrs.subresource == "status" => {
                Some(status_update(node, attrs, reader))
            }
            ("", "persistentvolumeclaims" | "persistentvolumes")
            | ("resource.k8s.io", "resourceclaims")
            | ("storage.k8s.io", "volumeattachments") => Some(get_related(node, attrs, reader)),
            ("", "serviceaccounts") => Some(create_token(node, attrs, reader)),
            ("coordination.k8s.io", "leases") => Some(lease(node, attrs)),
            ("storage.k8s.io", "csinodes") => Some(csi_node(node, attrs)),
            ("", "nodes") => Some(node_object(node, attrs)),
            ("", "pods") => Some(pod(node, attrs, reader)),
            _ => None,
        };
        if let Some(decision) = decision {
            return Some(decision);
        }
    }
    static NODE_RULES: LazyLock<Vec<Value>> = LazyLock::new(node_rules);
    if NODE_RULES.iter().any(|rule| rule_allows(attrs, rule)) {
        return Some(NodeDecision::Allow);
    }
    Some(no_opinion(String::new()))
}

fn no_opinion(reason: impl Into<String>) -> NodeDecision {
    NodeDecision::NoOpinion(reason.into())
}

/// The graph walk (`hasPathFrom` over the graph plugin/pkg/auth/authorizer/node's
/// populator keeps): an object is related to a node when a pod bound to that node
/// (`spec.nodeName`) names it: the pod itself, its ServiceAccount, the Secrets,
/// ConfigMaps and PersistentVolumeClaims its volumes, environment and image pull secrets
/// name. testkube serves no PVs, volume attachments or resource claims, so nothing leads
/// from a node to those.
fn related(node: &str, attrs: &RequestAttributes, reader: &dyn ObjectReader) -> NodeDecision {
    if attrs.name.is_empty() {
        return no_opinion("No Object name found");
    }
    let pods = reader.list(&ResourceKey::new("", "pods"), Some(&attrs.namespace));
    let on_node = pods
        .into_iter()
        .filter(|p| p["spec"]["nodeName"].as_str() == Some(node));
    let found = match (attrs.api_group.as_str(), attrs.resource.as_str()) {
        ("", "pods") => on_node
            .into_iter()
            .any(|p| p["metadata"]["name"].as_str() == Some(attrs.name.as_str())),
        ("", kind @ ("serviceaccounts" | "secrets" | "configmaps" | "persistentvolumeclaims")) => {
            on_node
                .into_iter()
                .any(|p| pod_references(p, kind).iter().any(|n| *n == attrs.name))
        }
        _ => false,
    };
    if found {
        return NodeDecision::Allow;
    }
    no_opinion(format!(
        "no relationship found between node '{node}' and this object"
    ))
}

/// The names of the objects of `resource` a pod refers to (`VisitPodSecretNames`,
/// `VisitPodConfigmapNames`, its ServiceAccount and claims), as the graph's edges.
pub fn pod_references<'a>(pod: &'a Value, resource: &str) -> Vec<&'a str> {
    let spec = &pod["spec"];
    let str_at = |v: &'a Value, path: &str| v.pointer(path).and_then(Value::as_str);
    let items = |v: &'a Value| v.as_array().map(Vec::as_slice).unwrap_or_default();
    let containers = || {
        ["containers", "initContainers", "ephemeralContainers"]
            .into_iter()
            .flat_map(|k| items(&spec[k]).iter())
    };
    let volumes = items(&spec["volumes"]);
    let projected = || {
        volumes
            .iter()
            .flat_map(|v| items(&v["projected"]["sources"]).iter())
    };
    let mut names: Vec<&str> = Vec::new();
    match resource {
        "serviceaccounts" => names.extend(str_at(spec, "/serviceAccountName")),
        "secrets" => {
            names.extend(
                items(&spec["imagePullSecrets"])
                    .iter()
                    .filter_map(|s| str_at(s, "/name")),
            );
            names.extend(
                volumes
                    .iter()
                    .filter_map(|v| str_at(v, "/secret/secretName")),
            );
            names.extend(projected().filter_map(|s| str_at(s, "/secret/name")));
            for c in containers() {
                names.extend(
                    items(&c["env"])
                        .iter()
                        .filter_map(|e| str_at(e, "/valueFrom/secretKeyRef/name")),
                );
                names.extend(
                    items(&c["envFrom"])
                        .iter()
                        .filter_map(|e| str_at(e, "/secretRef/name")),
                );
            }
        }
        "configmaps" => {
            names.extend(volumes.iter().filter_map(|v| str_at(v, "/configMap/name")));
            names.extend(projected().filter_map(|s| str_at(s, "/configMap/name")));
            for c in containers() {
                names.extend(
                    items(&c["env"])
                        .iter()
                        .filter_map(|e| str_at(e, "/valueFrom/configMapKeyRef/name")),
                );
                names.extend(
                    items(&c["envFrom"])
                        .iter()
                        .filter_map(|e| str_at(e, "/configMapRef/name")),
                );
            }
        }
        "persistentvolumeclaims" => {
            names.extend(
                volumes
                    .iter()
                    .filter_map(|v| str_at(v, "/persistentVolumeClaim/claimName")),
            );
        }
        _ => {}
    }
    names.retain(|n| !n.is_empty());
    names
}

fn read_namespaced_object(
    node: &str,
    attrs: &RequestAttributes,
    reader: &dyn ObjectReader,
) -> NodeDecision {
    if !matches!(attrs.verb.as_str(), "get" | "list" | "watch") {
        return no_opinion("can only read resources of this type");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot read subresource");
    }
    if attrs.namespace.is_empty() {
        return no_opinion("can only read namespaced object of this type");
    }
    related(node, attrs, reader)
}

fn status_update(node: &str, attrs: &RequestAttributes, reader: &dyn ObjectReader) -> NodeDecision {
    if !matches!(attrs.verb.as_str(), "update" | "patch") {
        return no_opinion("can only get/update/patch this type");
    }
    related(node, attrs, reader)
}

fn get_related(node: &str, attrs: &RequestAttributes, reader: &dyn ObjectReader) -> NodeDecision {
    if attrs.verb != "get" {
        return no_opinion("can only get individual resources of this type");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot get subresource");
    }
    related(node, attrs, reader)
}

fn create_token(node: &str, attrs: &RequestAttributes, reader: &dyn ObjectReader) -> NodeDecision {
    if attrs.verb != "create" || attrs.name.is_empty() {
        return no_opinion("can only create tokens for individual service accounts");
    }
    if attrs.subresource != "token" {
        return no_opinion("can only create token subresource of serviceaccount");
    }
    related(node, attrs, reader)
}

fn lease(node: &str, attrs: &RequestAttributes) -> NodeDecision {
    if !matches!(
        attrs.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no_opinion("can only get, create, update, patch, or delete a node lease");
    }
    if attrs.namespace != "kube-node-lease" {
        return no_opinion("can only access leases in the \"kube-node-lease\" system namespace");
    }
    // On create the name is in the body, which NodeRestriction checks.
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access node lease with the same name as the requesting node");
    }
    NodeDecision::Allow
}

fn csi_node(node: &str, attrs: &RequestAttributes) -> NodeDecision {
    if !matches!(
        attrs.verb.as_str(),
        "get" | "create" | "update" | "patch" | "delete"
    ) {
        return no_opinion("can only get, create, update, patch, or delete a CSINode");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot authorize CSINode subresources");
    }
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access CSINode with the same name as the requesting node");
    }
    NodeDecision::Allow
}

/// `authorizeNode`: writes are left to NodeRestriction; reads only of its own Node, by
/// name or by a list/watch pinned to its name (`fieldSelector=metadata.name=<self>`).
fn node_object(node: &str, attrs: &RequestAttributes) -> NodeDecision {
    match (attrs.subresource.as_str(), attrs.verb.as_str()) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => NodeDecision::Allow,
        ("", "get" | "list" | "watch") => match attrs.name.as_str() {
            n if n == node => NodeDecision::Allow,
            "" => no_opinion(format!(
                "node '{node}' cannot read all nodes, only its own Node object"
            )),
            other => no_opinion(format!(
                "node '{node}' cannot read '{other}', only its own Node object"
            )),
        },
        _ => no_opinion(""),
    }
}

fn pod(node: &str, attrs: &RequestAttributes, reader: &dyn ObjectReader) -> NodeDecision {
    match (attrs.subresource.as_str(), attrs.verb.as_str()) {
        ("", "get") => get_related(node, attrs, reader),
        ("", "list" | "watch") => {
            let pinned = attrs.field_selector.split(',').any(|req| {
                let req = req.trim();
                req == format!("spec.nodeName={node}") || req == format!("spec.nodeName=={node}")
            });
            if pinned {
                NodeDecision::Allow
            } else if !attrs.name.is_empty() {
                related(node, attrs, reader)
            } else {
                no_opinion("can only list/watch pods with spec.nodeName field selector")
            }
        }
        ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
            NodeDecision::Allow
        }
        _ => no_opinion(""),
    }
}

/// `bootstrappolicy.NodeRules()`: what every kubelet may do regardless of which node it is.
/// Also the rules of the `system:node` ClusterRole the real server stores.
pub fn node_rules() -> Vec<Value> {
    let rule = |verbs: &[&str], group: &str, resources: &[&str]| json!({"verbs": verbs, "apiGroups": [group], "resources": resources});
    vec![
        rule(&["create"], "authentication.k8s.io", &["tokenreviews"]),
        rule(
            &["create"],
            "authorization.k8s.io",
            &["localsubjectaccessreviews", "subjectaccessreviews"],
        ),
        rule(&["get", "list", "watch"], "", &["services"]),
        rule(&["create", "get", "list", "watch"], "", &["nodes"]),
        rule(&["patch", "update"], "", &["nodes/status"]),
        rule(&["patch", "update"], "", &["nodes"]),
        rule(&["create", "patch", "update"], "", &["events"]),
        rule(&["get", "list", "watch"], "", &["pods"]),
        rule(&["create", "delete"], "", &["pods"]),
        rule(&["patch", "update"], "", &["pods/status"]),
        rule(&["create"], "", &["pods/eviction"]),
        rule(&["get", "list", "watch"], "", &["configmaps", "secrets"]),
        rule(
            &["get"],
            "",
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        rule(&["get"], "", &["endpoints"]),
        rule(
            &["create", "get", "list", "watch"],
            "certificates.k8s.io",
            &["certificatesigningrequests"],
        ),
        rule(
            &["create", "delete", "get", "patch", "update"],
            "coordination.k8s.io",
            &["leases"],
        ),
        rule(&["get"], "storage.k8s.io", &["volumeattachments"]),
        rule(
            &["get", "patch", "update"],
            "",
            &["persistentvolumeclaims/status"],
        ),
        rule(&["create"], "", &["serviceaccounts/token"]),
        rule(&["get", "list", "watch"], "storage.k8s.io", &["csidrivers"]),
        rule(
            &["create", "delete", "get", "patch", "update"],
            "storage.k8s.io",
            &["csinodes"],
        ),
        rule(
            &["get", "list", "watch"],
            "node.k8s.io",
            &["runtimeclasses"],
        ),
    ]
}
