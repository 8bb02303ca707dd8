//! NodeRestriction (plugin/pkg/admission/noderestriction) for the resources testkube
//! serves: a kubelet may create or modify only its own Node, may not touch restricted
//! labels (`node-restriction.kubernetes.io`, `*.node-restriction.kubernetes.io`, and the
//! `kubernetes.io`/`k8s.io` keys outside the kubelet's own set), may set taints only when it
//! creates its Node, may use only its own Lease, and may file kubelet CSRs only for its own
//! name.
//!
//! Its 403s are `admission.NewForbidden`: no `nosniff` header, and the create and update
//! messages differ (`node "x" is not allowed to set the following labels: ...` on create,
//! `nodes "x" is forbidden: is not allowed to modify labels: ...` on update).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::authz::new_forbidden;
use crate::authz::node::pod_references;
use crate::kcm::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes, ResourceKey};

/// Labels a kubelet may set although they are under `kubernetes.io`
/// (pkg/kubelet/apis/well_known_labels.go).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

pub fn admit(
    node: &str,
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let forbid = |message: String| Err(forbidden(attrs, new, &message));
    if node.is_empty() {
        return forbid(format!(
            "could not determine node from user \"{}\"",
            attrs.user.name
        ));
    }
    match (attrs.api_group.as_str(), attrs.resource.as_str()) {
        ("", "nodes") => admit_node(node, attrs, op, old, new),
        ("coordination.k8s.io", "leases") => {
            if attrs.namespace != "kube-node-lease" {
                return forbid(
                    "can only access leases in the \"kube-node-lease\" system namespace".into(),
                );
            }
            if target_name(attrs, op, new) != node {
                return forbid(
                    "can only access node lease with the same name as the requesting node".into(),
                );
            }
            Ok(())
        }
        ("", "serviceaccounts") if op == Operation::Create && attrs.subresource == "token" => {
            admit_token_request(node, attrs, new, reader).map_or(Ok(()), Err)
        }
        ("", "pods") => admit_pod(node, attrs, op, old, new, reader),
        ("certificates.k8s.io", "certificatesigningrequests") if op == Operation::Create => {
            admit_csr(node, new).map_or(Ok(()), forbid)
        }
        _ => Ok(()),
    }
}

/// On create the name is in the body, not in the request path.
fn target_name<'a>(attrs: &'a RequestAttributes, op: Operation, new: Option<&'a Value>) -> &'a str {
    match op {
        Operation::Create => name_of(new).unwrap_or(&attrs.name),
        _ => &attrs.name,
    }
}

fn name_of(object: Option<&Value>) -> Option<&str> {
    object?.pointer("/metadata/name")?.as_str()
}

/// `admission.NewForbidden`: the name comes from the request, or from the object on create.
fn forbidden(attrs: &RequestAttributes, new: Option<&Value>, message: &str) -> ApiError {
    let name = if attrs.name.is_empty() {
        name_of(new).unwrap_or("")
    } else {
        &attrs.name
    };
    new_forbidden(&attrs.api_group, &attrs.resource, name, message)
}

fn admit_node(
    node: &str,
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Result<(), ApiError> {
    let forbid = |message: String| Err(forbidden(attrs, new, &message));
    let requested = target_name(attrs, op, new);
    if requested != node {
        return forbid(format!(
            "node \"{node}\" is not allowed to modify node \"{requested}\""
        ));
    }
    let (Some(new), true) = (new, op != Operation::Delete) else {
        return Ok(());
    };
    let config_source = |o: &Value| {
        o.pointer("/spec/configSource")
            .filter(|c| !c.is_null())
            .cloned()
    };
    match op {
        Operation::Create => {
            if config_source(new).is_some() {
                return forbid(format!(
                    "node \"{node}\" is not allowed to create pods with a non-nil configSource"
                ));
            }
            let forbidden_labels =
                forbidden_labels(&modified_labels(&labels(new), &BTreeMap::new()));
            if !forbidden_labels.is_empty() {
                return forbid(format!(
                    "node \"{node}\" is not allowed to set the following labels: {}",
                    forbidden_labels.join(", ")
                ));
            }
        }
        Operation::Update => {
            let old = old.unwrap_or(&Value::Null);
            if config_source(new).is_some() && config_source(new) != config_source(old) {
                return forbid(format!(
                    "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                ));
            }
            if taints(new) != taints(old) {
                return forbid(format!("node \"{node}\" is not allowed to modify taints"));
            }
            let forbidden_labels = forbidden_labels(&modified_labels(&labels(new), &labels(old)));
            if !forbidden_labels.is_empty() {
                return forbid(format!(
                    "is not allowed to modify labels: {}",
                    forbidden_labels.join(", ")
                ));
            }
        }
        Operation::Delete => {}
    }
    Ok(())
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// Taints compared as Go's `Semantic.DeepEqual` would: a missing list equals an empty
/// one, an omitted value equals "".
fn taints(object: &Value) -> Vec<[Value; 4]> {
    let field = |t: &Value, k: &str| match t.get(k) {
        None | Some(Value::Null) => Value::from(""),
        Some(v) => v.clone(),
    };
    object
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            [
                field(t, "key"),
                field(t, "value"),
                field(t, "effect"),
                field(t, "timeAdded"),
            ]
        })
        .collect()
}

/// `getModifiedLabels`: keys added, removed or changed.
pub fn modified_labels(
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let changed = |x: &BTreeMap<String, String>, y: &BTreeMap<String, String>| {
        x.iter()
            .filter(|(k, v)| y.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    changed(a, b).into_iter().chain(changed(b, a)).collect()
}

/// `getForbiddenLabels`, sorted as Go's `sets.String.List()`.
pub fn forbidden_labels(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|label| is_forbidden_label(label))
        .cloned()
        .collect()
}

pub fn is_forbidden_label(label: &str) -> bool {
    let namespace = label.split_once('/').map_or("", |(ns, _)| ns);
    let in_namespace = |root: &str| namespace == root || namespace.ends_with(&format!(".{root}"));
    if in_namespace(NODE_RESTRICTION_NAMESPACE) {
        return true;
    }
    let kubernetes_label = in_namespace("kubernetes.io") || in_namespace("k8s.io");
    let kubelet_label = KUBELET_LABELS.contains(&label)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|root| in_namespace(root));
    kubernetes_label && !kubelet_label
}

/// `admitCSR`: a node may request kubelet client or serving certificates only for itself.
fn admit_csr(node: &str, new: Option<&Value>) -> Option<String> {
    let spec = new?.get("spec")?;
    let signer = spec.get("signerName").and_then(Value::as_str).unwrap_or("");
    if signer != KUBELET_CLIENT_SIGNER && signer != KUBELET_SERVING_SIGNER {
        return None;
    }
    let common_name = match crate::admission::csr::request_common_name(spec) {
        Ok(cn) => cn,
        Err(err) => return Some(format!("unable to parse csr: {err}")),
    };
    (common_name != format!("system:node:{node}"))
        .then(|| format!("can only create a node CSR with CN=system:node:{node}"))
}

fn pod_key() -> ResourceKey {
    ResourceKey::new("", "pods")
}

/// `admitServiceAccount`: a node's TokenRequest must be bound to a pod (v1 Pod, name and
/// uid) that exists with that uid and runs on the node.
fn admit_token_request(
    node: &str,
    attrs: &RequestAttributes,
    request: Option<&Value>,
    reader: &dyn ObjectReader,
) -> Option<ApiError> {
    let forbid = |message: &str| Some(forbidden(attrs, None, message));
    let reference = request?
        .pointer("/spec/boundObjectRef")
        .filter(|r| r.is_object());
    let field = |f: &str| {
        reference
            .and_then(|r| r.get(f))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if reference.is_none()
        || field("apiVersion") != "v1"
        || field("kind") != "Pod"
        || field("name").is_empty()
    {
        return forbid("node requested token not bound to a pod");
    }
    if field("uid").is_empty() {
        return forbid("node requested token with a pod binding without a uid");
    }
    let Some(pod) = reader.get(&pod_key(), Some(&attrs.namespace), field("name")) else {
        return Some(crate::errors::not_found_resource("", "pods", field("name")));
    };
    if pod["metadata"]["uid"].as_str() != Some(field("uid")) {
        return forbid(&format!(
            "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
            field("uid")
        ));
    }
    if pod["spec"]["nodeName"].as_str() != Some(node) {
        return forbid("node requested token bound to a pod scheduled on a different node");
    }
    // `validateNodeServiceAccountAudience` (ServiceAccountNodeAudienceRestriction, on by
    // default): one audience at most, and one the pod's projected token volumes ask for
    // (none: the API server's), unless RBAC grants `request-serviceaccounts-token-audience`
    // on it. testkube serves no CSIDrivers, so no CSI volume grants an audience.
    let audiences = request?
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if audiences.len() > 1 {
        return forbid("node may only request 0 or 1 audiences");
    }
    let audience = audiences.first().and_then(Value::as_str).unwrap_or("");
    if pod_token_audiences(pod).contains(&audience) {
        return None;
    }
    let mut check = attrs.clone();
    check.verb = "request-serviceaccounts-token-audience".into();
    check.api_group = String::new();
    check.api_version = "v1".into();
    check.resource = audience.to_string();
    check.subresource = String::new();
    if crate::authz::is_allowed(&check, reader) {
        return None;
    }
    forbid(&format!(
        "audience \"{audience}\" not found in pod spec volume, {} is not authorized to request tokens for this audience",
        attrs.user.name
    ))
}

/// The audiences of a pod's projected service-account token volumes ("" for one without).
fn pod_token_audiences(pod: &Value) -> Vec<&str> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .filter_map(|source| source.get("serviceAccountToken").filter(|t| t.is_object()))
        .map(|t| t.get("audience").and_then(Value::as_str).unwrap_or(""))
        .collect()
}

/// `admitPod`, `admitPodStatus`, `admitPodEviction`: a node creates only mirror pods bound
/// to itself, deletes and updates the status of only pods bound to itself.
fn admit_pod(
    node: &str,
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let forbid = |message: String| Err(forbidden(attrs, new, &message));
    let bound_here = |p: Option<&Value>| {
        p.and_then(|p| p.pointer("/spec/nodeName"))
            .and_then(Value::as_str)
            == Some(node)
    };
    match (attrs.subresource.as_str(), op) {
        ("", Operation::Create) => {
            let pod = new.unwrap_or(&Value::Null);
            const MIRROR: &str = "kubernetes.io/config.mirror";
            if pod
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(MIRROR))
                .is_none()
            {
                return forbid(format!(
                    "pod does not have \"{MIRROR}\" annotation, node \"{node}\" can only create mirror pods"
                ));
            }
            if !bound_here(Some(pod)) {
                return forbid(format!(
                    "node \"{node}\" can only create pods with spec.nodeName set to itself"
                ));
            }
            let owners = pod
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let own = owners.first().filter(|o| {
                owners.len() == 1
                    && o["apiVersion"] == "v1"
                    && o["kind"] == "Node"
                    && o["name"].as_str() == Some(node)
            });
            if own.is_none() {
                return forbid(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            if !pod_references(pod, "serviceaccounts").is_empty() {
                return forbid(format!(
                    "node \"{node}\" can not create pods that reference a service account"
                ));
            }
            for (resource, what) in [
                ("secrets", "secrets"),
                ("configmaps", "configmaps"),
                ("persistentvolumeclaims", "persistentvolumeclaims"),
            ] {
                if !pod_references(pod, resource).is_empty() {
                    return forbid(format!(
                        "node \"{node}\" can not create pods that reference {what}"
                    ));
                }
            }
            Ok(())
        }
        ("", Operation::Delete) => {
            if !bound_here(old) {
                return forbid(format!(
                    "node \"{node}\" can only delete pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        ("", op) => forbid(format!(
            "unexpected operation \"{}\", node \"{node}\" can only create and delete mirror pods",
            operation_name(op)
        )),
        ("status", Operation::Update) => {
            if !bound_here(old) {
                return forbid(format!(
                    "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            let labels = |p: Option<&Value>| p.and_then(|p| p.pointer("/metadata/labels")).cloned();
            let empty =
                |l: Option<Value>| l.filter(|v| v.as_object().is_some_and(|m| !m.is_empty()));
            if empty(labels(old)) != empty(labels(new)) {
                return forbid(format!(
                    "node \"{node}\" cannot update labels through pod status"
                ));
            }
            Ok(())
        }
        ("status", op) => forbid(format!("unexpected operation \"{}\"", operation_name(op))),
        ("eviction", _) => {
            let pod = reader.get(&pod_key(), Some(&attrs.namespace), &attrs.name);
            if !bound_here(pod) {
                return forbid(format!(
                    "node {node} can only evict pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        (sub, _) => forbid(format!(
            "unexpected pod subresource \"{sub}\", only 'status' and 'eviction' are allowed"
        )),
    }
}

fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
    }
}
