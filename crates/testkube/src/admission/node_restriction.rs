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
use crate::kcm::KUBELET_CLIENT_SIGNER;
use crate::types::{ApiError, Operation, RequestAttributes};

const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

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
