//! ADAPTER between the Kubernetes objects the controller reads and kubeflavor-core's pure
//! policy. Everything here converts; the decisions themselves are core functions.
//!
//! INTERIM: kubeflavor-core's policy API (decide, DenyCause, TokenRecord,
//! desired_node_state) has not landed on this branch yet; the bodies below marked INTERIM
//! are replaced by calls into core when it does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Secret, Taint};
use kubeflavor_core::csr::{CsrError, KubeletClientCsr, validate_kubelet_client_csr};
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token_record::{SecretView, TokenRecord, TokenRecordError};
use kubeflavor_core::token_secret::{FLAVOR_TOKEN_LABEL, FlavorTokenMeta};
use serde_json::json;

use super::Options;
use super::facts::{CsrFactsRead, CsrView};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::{
    BindingCondition, Flavor, FlavorBinding, FlavorBindingSpec, FlavorBindingStatus, FlavorTaint,
};

/// P1: the ONE reason/message pair on every approval and every denial, whatever the
/// flavor or the cause: a bootstrap identity can read every CSR.
pub const APPROVED_REASON: &str = "KubeflavorApproved";
pub const APPROVED_MESSAGE: &str = "approved by kubeflavor";
pub const DENIED_REASON: &str = "KubeflavorDenied";
pub const DENIED_MESSAGE: &str = "denied by kubeflavor";

/// A pending CSR's fate, as the writes the apply stage performs (in this order).
#[derive(Clone, Debug)]
pub enum Verdict {
    Approve {
        node: NodeName,
        flavor: String,
        token_id: String,
        /// The token Secret with the node name added to `bound-nodes`, to PUT with the
        /// resourceVersion it was read at; None when the name is already reserved.
        reserve: Option<Secret>,
        /// The FlavorBinding to create; None when it already binds this token.
        binding: Option<FlavorBinding>,
    },
    Deny {
        /// Metric label of the cause (admin-only surfaces).
        cause: &'static str,
        /// Human description for the Event and the log (admin-only surfaces).
        description: String,
        /// The token Secret to delete first (P4), if core says the token must go.
        delete_token: Option<Secret>,
        /// The token Secret with its denial count raised, to PUT after the denial.
        count_denial: Option<Secret>,
    },
    Ignore {
        why: &'static str,
    },
}

/// The CSR validated as a kubelet client CSR (spec section 4), by core.
pub fn validate(csr: &CsrView) -> Result<KubeletClientCsr, CsrError> {
    validate_kubelet_client_csr(&csr.signer_name, &csr.request, &csr.usages)
}

/// The flavor a token Secret names.
pub fn token_flavor(secret: &Secret) -> Option<String> {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(FLAVOR_TOKEN_LABEL))
        .cloned()
}

/// Why core would deny, as in CORE's `DenyCause` (INTERIM mirror, same metric labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyCause {
    MalformedCsr,
    NotKubeletClientShape,
    TokenMissing,
    TokenExpired,
    TokenNotForAuthentication,
    FlavorMissing,
    TokenExhausted,
    NameBoundToOtherToken,
    NodeExistsWithoutBinding,
    BindingRevoked,
    RenewalRequesterMismatch,
    RenewalUnbound,
    NotKubeflavorToken,
}

impl DenyCause {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyCause::MalformedCsr => "malformed_csr",
            DenyCause::NotKubeletClientShape => "not_kubelet_client_shape",
            DenyCause::TokenMissing => "token_missing",
            DenyCause::TokenExpired => "token_expired",
            DenyCause::TokenNotForAuthentication => "token_not_for_authentication",
            DenyCause::FlavorMissing => "flavor_missing",
            DenyCause::TokenExhausted => "token_exhausted",
            DenyCause::NameBoundToOtherToken => "name_bound_to_other_token",
            DenyCause::NodeExistsWithoutBinding => "node_exists_without_binding",
            DenyCause::BindingRevoked => "binding_revoked",
            DenyCause::RenewalRequesterMismatch => "renewal_requester_mismatch",
            DenyCause::RenewalUnbound => "renewal_unbound",
            DenyCause::NotKubeflavorToken => "not_kubeflavor_token",
        }
    }
}

/// INTERIM decision (the rules of CORE.md's `decide`), until core's policy lands.
enum Interim {
    Approve { reserve: bool, create: bool },
    Deny(DenyCause, String),
    Ignore(&'static str),
}

fn interim_decide(
    facts: &CsrFactsRead,
    parsed: &Result<KubeletClientCsr, CsrError>,
    record: Option<&TokenRecord>,
    opts: &Options,
    now: jiff::Timestamp,
) -> Interim {
    let csr = &facts.csr;
    if let Some(requester_node) = csr.username.strip_prefix(super::facts::NODE_USER_PREFIX) {
        if !opts.manage_renewals {
            return Interim::Ignore("renewal_not_managed");
        }
        let p = match parsed {
            Ok(p) => p,
            Err(e) => {
                return Interim::Deny(
                    if e.is_malformed() {
                        DenyCause::MalformedCsr
                    } else {
                        DenyCause::NotKubeletClientShape
                    },
                    e.to_string(),
                );
            }
        };
        if p.node_name.as_str() != requester_node {
            return Interim::Deny(
                DenyCause::RenewalRequesterMismatch,
                format!(
                    "{} asked for a certificate of node {}",
                    csr.username,
                    p.node_name.as_str()
                ),
            );
        }
        return match &facts.binding {
            None => Interim::Deny(
                DenyCause::RenewalUnbound,
                "no FlavorBinding for this node".into(),
            ),
            Some(b) if is_revoked(b) => {
                Interim::Deny(DenyCause::BindingRevoked, "the binding is revoked".into())
            }
            Some(_) => Interim::Approve {
                reserve: false,
                create: false,
            },
        };
    }
    let Some(id) = csr.bootstrap_token_id() else {
        return Interim::Ignore("not_a_bootstrap_or_node_requester");
    };
    if !csr
        .groups
        .iter()
        .any(|g| g == kubeflavor_core::token_secret::NODE_GROUP)
    {
        return if opts.strict {
            Interim::Deny(
                DenyCause::NotKubeflavorToken,
                format!("token {id} is not a kubeflavor token"),
            )
        } else {
            Interim::Ignore("not_kubeflavor_token")
        };
    }
    let p = match parsed {
        Ok(p) => p,
        Err(e) => {
            return Interim::Deny(
                if e.is_malformed() {
                    DenyCause::MalformedCsr
                } else {
                    DenyCause::NotKubeletClientShape
                },
                e.to_string(),
            );
        }
    };
    let Some(record) = record else {
        return Interim::Deny(
            DenyCause::TokenMissing,
            format!("token Secret bootstrap-token-{id} does not exist"),
        );
    };
    if let Err(e) = record.authentication_at(now) {
        return Interim::Deny(
            if e.is_expiry() {
                DenyCause::TokenExpired
            } else {
                DenyCause::TokenNotForAuthentication
            },
            e.to_string(),
        );
    }
    let Some(meta) = &record.kubeflavor else {
        return Interim::Deny(
            DenyCause::TokenMissing,
            "the token Secret has no kubeflavor flavor label".into(),
        );
    };
    if facts.flavor.is_none() {
        return Interim::Deny(
            DenyCause::FlavorMissing,
            format!("Flavor {} does not exist", meta.flavor),
        );
    }
    let node = &p.node_name;
    if let Some(b) = &facts.binding {
        if b.spec.token_id != id {
            return Interim::Deny(
                DenyCause::NameBoundToOtherToken,
                format!("node {} is bound to another token", node.as_str()),
            );
        }
        if is_revoked(b) {
            return Interim::Deny(DenyCause::BindingRevoked, "the binding is revoked".into());
        }
        let reserve = !meta.bound_nodes.contains(node);
        if reserve && !meta.has_room() {
            return Interim::Deny(
                DenyCause::TokenExhausted,
                "the token has no use left".into(),
            );
        }
        return Interim::Approve {
            reserve,
            create: false,
        };
    }
    if facts.node_exists {
        return Interim::Deny(
            DenyCause::NodeExistsWithoutBinding,
            format!(
                "Node {} exists and is not bound to this token",
                node.as_str()
            ),
        );
    }
    if meta.bound_nodes.contains(node) {
        return Interim::Approve {
            reserve: false,
            create: true,
        };
    }
    if !meta.has_room() {
        return Interim::Deny(
            DenyCause::TokenExhausted,
            format!(
                "the token already bound {} node(s), its maximum",
                meta.bound_nodes.len()
            ),
        );
    }
    Interim::Approve {
        reserve: true,
        create: true,
    }
}

/// Decides a pending CSR and turns the decision into the writes to perform.
pub fn decide(facts: &CsrFactsRead, opts: &Options, now: jiff::Timestamp) -> Verdict {
    let parsed = validate(&facts.csr);
    let record = facts
        .token_secret
        .as_ref()
        .and_then(|s| token_record(s).ok());
    match interim_decide(facts, &parsed, record.as_ref(), opts, now) {
        Interim::Ignore(why) => Verdict::Ignore { why },
        Interim::Deny(cause, description) => {
            let meta = record.as_ref().and_then(|r| r.kubeflavor.as_ref());
            let secret = facts.token_secret.as_ref().filter(|_| meta.is_some());
            let denials_after = meta.map_or(0, |m| m.denials.saturating_add(1));
            let delete =
                secret.is_some() && should_delete_token(cause, denials_after, opts.denial_limit);
            Verdict::Deny {
                cause: cause.as_str(),
                description,
                delete_token: secret.filter(|_| delete).cloned(),
                count_denial: if delete {
                    None
                } else {
                    secret.and_then(with_denial)
                },
            }
        }
        Interim::Approve { reserve, create } => {
            let p = parsed.expect("approval implies a valid CSR");
            let node = p.node_name.clone();
            let (flavor, token_id) = match &facts.binding {
                Some(b) => (b.spec.flavor.clone(), b.spec.token_id.clone()),
                None => (
                    record
                        .as_ref()
                        .and_then(|r| r.kubeflavor.as_ref())
                        .map(|m| m.flavor.to_string())
                        .unwrap_or_default(),
                    facts
                        .csr
                        .bootstrap_token_id()
                        .unwrap_or_default()
                        .to_string(),
                ),
            };
            let reserve = if reserve {
                facts
                    .token_secret
                    .as_ref()
                    .and_then(|s| with_reservation(s, &node))
            } else {
                None
            };
            let binding = create.then(|| FlavorBinding {
                metadata: ObjectMeta {
                    name: Some(node.as_str().to_string()),
                    ..ObjectMeta::default()
                },
                spec: FlavorBindingSpec {
                    node: node.as_str().to_string(),
                    flavor: flavor.clone(),
                    token_id: token_id.clone(),
                    csr_name: facts.csr.name.clone(),
                    public_key_sha256: p.public_key_sha256_hex(),
                    bound_at: Some(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
                },
                status: None,
            });
            Verdict::Approve {
                node,
                flavor,
                token_id,
                reserve,
                binding,
            }
        }
    }
}

/// P4: delete the token after this denial? INTERIM: core's should_delete_token.
pub fn should_delete_token(cause: DenyCause, denials_after_this: u32, limit: u32) -> bool {
    matches!(
        cause,
        DenyCause::TokenExhausted
            | DenyCause::NameBoundToOtherToken
            | DenyCause::NodeExistsWithoutBinding
    ) || denials_after_this >= limit
}

/// Reads a token Secret as core's [`TokenRecord`] (data values decoded to strings).
pub fn token_record(secret: &Secret) -> Result<TokenRecord, TokenRecordError> {
    let data: BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    let empty = BTreeMap::new();
    let view = SecretView {
        namespace: secret.metadata.namespace.as_deref().unwrap_or(""),
        name: secret.metadata.name.as_deref().unwrap_or(""),
        type_: secret.type_.as_deref().unwrap_or(""),
        being_deleted: secret.metadata.deletion_timestamp.is_some(),
        data: &data,
        labels: secret.metadata.labels.as_ref().unwrap_or(&empty),
        annotations: secret.metadata.annotations.as_ref().unwrap_or(&empty),
    };
    TokenRecord::from_secret(&view)
}

fn with_meta(secret: &Secret, meta: &FlavorTokenMeta) -> Secret {
    let mut s = secret.clone();
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(meta.annotations());
    s
}

fn kubeflavor_meta(secret: &Secret) -> Option<FlavorTokenMeta> {
    token_record(secret).ok().and_then(|r| r.kubeflavor)
}

/// The Secret with `node` added to its bound names (the reservation write), or None if
/// the Secret is not a readable kubeflavor token.
pub fn with_reservation(secret: &Secret, node: &NodeName) -> Option<Secret> {
    let meta = kubeflavor_meta(secret)?;
    Some(with_meta(secret, &meta.with_bound_node(node)))
}

/// The token's denial count so far.
pub fn denials(secret: &Secret) -> u32 {
    kubeflavor_meta(secret).map_or(0, |m| m.denials)
}

/// The Secret with its denial count raised by one.
pub fn with_denial(secret: &Secret) -> Option<Secret> {
    let meta = kubeflavor_meta(secret)?;
    Some(with_meta(secret, &meta.with_denial()))
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
