//! ADAPTER between the Kubernetes objects the controller reads and kubeflavor-core's pure
//! policy. Everything here converts; the decisions themselves are core functions.
//!
//! INTERIM: kubeflavor-core's policy API (decide, DenyCause, TokenRecord,
//! desired_node_state) has not landed on this branch yet; the bodies below marked INTERIM
//! are replaced by calls into core when it does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Secret, Taint};
use serde_json::json;

use super::Options;
use super::facts::CsrFactsRead;
use crate::crd::{BindingCondition, Flavor, FlavorBinding, FlavorBindingStatus, FlavorTaint};

/// P1: the ONE reason/message pair on every approval and every denial, whatever the
/// flavor or the cause: a bootstrap identity can read every CSR.
pub const APPROVED_REASON: &str = "KubeflavorApproved";
pub const APPROVED_MESSAGE: &str = "approved by kubeflavor";
pub const DENIED_REASON: &str = "KubeflavorDenied";
pub const DENIED_MESSAGE: &str = "denied by kubeflavor";

pub const BOUND_NODES_ANNOTATION: &str = "kubeflavor.io/bound-nodes";
pub const DENIALS_ANNOTATION: &str = "kubeflavor.io/denials";
pub const FLAVOR_LABEL_ON_TOKEN: &str = "kubeflavor.io/flavor";

/// A pending CSR's fate, with what the apply stage needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Approve {
        node: String,
        reserve_use: bool,
        create_binding: bool,
        binding: BindingFields,
    },
    Deny {
        /// Metric label of the cause (admin-only surfaces).
        cause: &'static str,
        /// Human description for the Event and the log (admin-only surfaces).
        description: String,
    },
    Ignore {
        why: &'static str,
    },
}

/// The spec of the FlavorBinding an approval creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingFields {
    pub flavor: String,
    pub token_id: String,
    pub public_key_sha256: String,
}

/// The node name from the CSR's CN, when the request parses as a kubelet client CSR.
/// INTERIM: core's csr validator.
pub fn node_name_of(_request_pem: &[u8]) -> Option<String> {
    None
}

/// The flavor a token Secret names.
pub fn token_flavor(secret: &Secret) -> Option<String> {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(FLAVOR_LABEL_ON_TOKEN))
        .cloned()
}

/// INTERIM: core's decide().
pub fn decide(facts: &CsrFactsRead, _opts: &Options, _now: jiff::Timestamp) -> Verdict {
    if facts.csr.bootstrap_token_id().is_none() {
        return Verdict::Ignore {
            why: "not_bootstrap",
        };
    }
    Verdict::Deny {
        cause: "malformed_csr",
        description: "the request is not a kubelet client CSR".into(),
    }
}

/// P4: delete the token after this denial? INTERIM: core's should_delete_token.
pub fn should_delete_token(_cause: &str, denials_after_this: u32, limit: u32) -> bool {
    denials_after_this >= limit
}

fn bound_nodes(secret: &Secret) -> Vec<String> {
    secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BOUND_NODES_ANNOTATION))
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The Secret with `node` added to its bound names (the reservation write).
pub fn with_reservation(secret: &Secret, node: &str) -> Secret {
    let mut names = bound_nodes(secret);
    names.push(node.to_string());
    names.sort();
    names.dedup();
    let mut s = secret.clone();
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(BOUND_NODES_ANNOTATION.into(), names.join(","));
    s
}

/// The token's denial count so far.
pub fn denials(secret: &Secret) -> u32 {
    secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DENIALS_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The Secret with its denial count raised by one.
pub fn with_denial(secret: &Secret) -> Secret {
    let n = denials(secret) + 1;
    let mut s = secret.clone();
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DENIALS_ANNOTATION.into(), n.to_string());
    s
}

/// Whether the binding was revoked (`node revoke` / `token revoke --nodes`).
pub fn is_revoked(binding: &FlavorBinding) -> bool {
    binding.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Revoked" && c.status == "True")
    })
}

/// What the node flow should write for one binding.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePlan {
    /// JSON merge patch for the Node (with metadata.resourceVersion), if it differs.
    pub patch: Option<serde_json::Value>,
    /// The binding status after the patch.
    pub status: FlavorBindingStatus,
    /// The Node carries the flavor once the patch is applied.
    pub flavored: bool,
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    prev: Option<&FlavorBindingStatus>,
) -> BindingCondition {
    let status = if ok { "True" } else { "False" };
    let old = prev.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let last_transition_time = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string(),
        ),
    };
    BindingCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time,
    }
}

/// INTERIM: core's desired_node_state + merge patch rendering.
pub fn plan_node(binding: &FlavorBinding, flavor: Option<&Flavor>, node: &Node) -> NodePlan {
    let revoked = is_revoked(binding);
    let prev = binding.status.as_ref();
    let mut want_labels = BTreeMap::new();
    let mut want_taints: Vec<FlavorTaint> = Vec::new();
    if let (Some(f), false) = (flavor, revoked) {
        want_labels = f.spec.labels.clone();
        want_labels.insert(
            "kubeflavor.node-restriction.kubernetes.io/flavor".into(),
            binding.spec.flavor.clone(),
        );
        want_taints = f.spec.taints.clone();
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut label_patch = serde_json::Map::new();
    for (k, v) in &want_labels {
        if labels.get(k) != Some(v) {
            label_patch.insert(k.clone(), json!(v));
        }
    }
    let applied_before = prev.map(|p| p.applied_labels.clone()).unwrap_or_default();
    for k in applied_before.keys() {
        if !want_labels.contains_key(k) && labels.contains_key(k) {
            label_patch.insert(k.clone(), serde_json::Value::Null);
        }
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let mut new_taints: Vec<Taint> = taints
        .iter()
        .filter(|t| {
            (revoked || t.key != "kubeflavor.io/revoked") && t.key != "kubeflavor.io/unverified"
        })
        .cloned()
        .collect();
    for t in &want_taints {
        if !new_taints
            .iter()
            .any(|n| n.key == t.key && n.effect == t.effect)
        {
            new_taints.push(Taint {
                key: t.key.clone(),
                value: Some(t.value.clone()),
                effect: t.effect.clone(),
                time_added: None,
            });
        }
    }
    if revoked && !new_taints.iter().any(|n| n.key == "kubeflavor.io/revoked") {
        new_taints.push(Taint {
            key: "kubeflavor.io/revoked".into(),
            value: None,
            effect: "NoExecute".into(),
            time_added: None,
        });
    }
    let mut patch = serde_json::Map::new();
    let mut meta = serde_json::Map::new();
    if !label_patch.is_empty() {
        meta.insert("labels".into(), serde_json::Value::Object(label_patch));
    }
    if new_taints != taints {
        patch.insert("spec".into(), json!({ "taints": new_taints }));
    }
    let patch = if meta.is_empty() && patch.is_empty() {
        None
    } else {
        meta.insert(
            "resourceVersion".into(),
            json!(node.metadata.resource_version.clone().unwrap_or_default()),
        );
        patch.insert("metadata".into(), serde_json::Value::Object(meta));
        Some(serde_json::Value::Object(patch))
    };
    let flavored = flavor.is_some() && !revoked;
    let mut conditions = vec![condition(
        "Flavored",
        flavored,
        if flavored {
            "Applied"
        } else if revoked {
            "Revoked"
        } else {
            "FlavorMissing"
        },
        if flavored {
            "the Node carries the flavor's labels and taints"
        } else if revoked {
            "the binding is revoked"
        } else {
            "the Flavor does not exist"
        },
        prev,
    )];
    if revoked {
        conditions.push(condition(
            "Revoked",
            true,
            "Revoked",
            "revoked by an administrator",
            prev,
        ));
    }
    NodePlan {
        patch,
        status: FlavorBindingStatus {
            conditions,
            applied_labels: want_labels,
            applied_taints: want_taints,
            observed_generation: binding.metadata.generation,
        },
        flavored,
    }
}
