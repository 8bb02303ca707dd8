//! ADAPTER between the Kubernetes objects the controller reads and kubeflavor-core's pure
//! policy: converts k8s-openapi/CRD objects into core's facts, calls core, and turns core's
//! answer into the exact objects to write. No rule is decided here.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeflavor_core::csr::{CsrError, KubeletClientCsr, validate_kubelet_client_csr};
use kubeflavor_core::flavor::{FlavorName, FlavorRules};
use kubeflavor_core::names::NodeName;
use kubeflavor_core::node_state::{
    NodeChange, NodeFacts, NodeTaint, desired_node_state, released_node_state,
};
use kubeflavor_core::policy::{
    CsrFacts, Decision, DenyCause, PolicyOptions, TokenFate, TokenInstance, TokenLookup,
    decide as core_decide, token_fate,
};
use kubeflavor_core::token::TokenId;
use kubeflavor_core::token_secret::{Custody, FLAVOR_TOKEN_LABEL, FlavorTokenMeta};

use super::Options;
use super::facts::{CsrFactsRead, CsrView};
use crate::cluster::token_secrets;
use crate::crd::{
    BINDING_TOKEN_ID_LABEL, CONDITION_FLAVORED, CONDITION_REVOKED, Condition, Flavor,
    FlavorBinding, FlavorBindingSpec, FlavorBindingStatus, FlavorTaint, rules_from_flavor,
};

/// The CSR validated as a kubelet client CSR by core, as Kubernetes' own
/// `ValidateKubeletClientCSR` does. Done once per decision: the facts carry the result.
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

/// The identity of the token Secret read for a CSR.
fn token_instance(secret: &Secret) -> Option<TokenInstance> {
    Some(TokenInstance {
        uid: secret.metadata.uid.clone()?,
        created: secret.metadata.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// The controller's switches that change decisions.
pub fn policy_options(opts: &Options) -> PolicyOptions {
    PolicyOptions {
        strict: opts.strict,
        manage_renewals: opts.manage_renewals,
        denial_limit: NonZeroU32::new(opts.denial_limit),
    }
}

/// Core's facts for one pending CSR.
pub fn csr_facts(facts: &CsrFactsRead, opts: &Options, now: jiff::Timestamp) -> CsrFacts {
    let token = match &facts.token_secret {
        None => TokenLookup::Missing,
        Some(s) => match token_secrets::record(s) {
            Ok(r) => TokenLookup::Found(r),
            Err(e) => TokenLookup::Unreadable(e),
        },
    };
    CsrFacts {
        csr_name: facts.csr.name.clone(),
        signer_name: facts.csr.signer_name.clone(),
        requester_username: facts.csr.username.clone(),
        requester_groups: facts.csr.groups.clone(),
        csr: facts.parsed.clone(),
        already_decided: facts.csr.decided,
        token,
        token_instance: facts.token_secret.as_ref().and_then(token_instance),
        flavor_exists: facts.flavor.is_some(),
        binding: facts.binding.as_ref().map(FlavorBinding::policy_facts),
        node_exists: facts.node_exists,
        options: policy_options(opts),
        now,
    }
}

/// Core's decision on a pending CSR.
pub fn decide(facts: &CsrFactsRead, opts: &Options, now: jiff::Timestamp) -> Decision {
    core_decide(&csr_facts(facts, opts, now))
}

/// The FlavorBinding of `node` to `token` with `flavor` that an approval creates first,
/// recording the token's `custody`.
pub fn new_binding(
    facts: &CsrFactsRead,
    node: &NodeName,
    token: &TokenId,
    flavor: &FlavorName,
    custody: &Custody,
    now: jiff::Timestamp,
) -> FlavorBinding {
    FlavorBinding {
        metadata: ObjectMeta {
            name: Some(node.to_string()),
            // `token create` looks bindings up by id, so it never mints an id a binding
            // still names.
            labels: Some([(BINDING_TOKEN_ID_LABEL.to_string(), token.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: FlavorBindingSpec {
            node: node.to_string(),
            flavor: flavor.to_string(),
            token_id: token.to_string(),
            token_uid: facts
                .token_secret
                .as_ref()
                .and_then(|s| s.metadata.uid.clone()),
            csr_name: facts.csr.name.clone(),
            public_key_sha256: facts
                .parsed
                .as_ref()
                .map(KubeletClientCsr::public_key_sha256_hex)
                .unwrap_or_default(),
            bound_at: whole_seconds(now),
            issued_to: custody.issued_to.as_ref().map(|t| t.to_string()),
            issued_by: custody.issued_by.clone(),
        },
        status: None,
    }
}

/// Core's description of the cause plus the particulars, for the admin trail only.
pub fn describe(cause: DenyCause, facts: &CsrFactsRead) -> String {
    let node = facts
        .parsed
        .as_ref()
        .map(|c| c.node_name.to_string())
        .unwrap_or_else(|e| format!("? ({e})"));
    format!(
        "{} (requester {}, node {node})",
        cause.description(),
        facts.csr.username
    )
}

/// metav1.Time has second precision on the wire.
fn whole_seconds(t: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn with_meta(secret: &Secret, meta: &FlavorTokenMeta) -> Secret {
    let mut s = secret.clone();
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(meta.annotations());
    s
}

/// kubeflavor's metadata on a token Secret, when it is a readable kubeflavor token.
pub fn kubeflavor_meta(secret: &Secret) -> Option<FlavorTokenMeta> {
    token_secrets::record(secret)
        .ok()
        .and_then(|r| r.kubeflavor)
}

/// The Secret with `node` added to its bound names (the reservation write), or None if
/// the Secret is not a readable kubeflavor token.
pub fn with_reservation(secret: &Secret, node: &NodeName) -> Option<Secret> {
    let meta = kubeflavor_meta(secret)?;
    Some(with_meta(secret, &meta.with_bound_node(node)))
}

/// Core's fate for a token Secret as it is now, for one more denial for `cause`: the
/// controller asks again on a fresh copy when a count loses a race, so the limit is judged
/// on the count as it is, not as it was read. Only a readable kubeflavor token has one.
pub fn current_token_fate(secret: &Secret, cause: DenyCause, opts: &Options) -> TokenFate {
    kubeflavor_meta(secret).map_or(TokenFate::Keep, |meta| {
        token_fate(cause, meta.denials, policy_options(opts).denial_limit)
    })
}

/// The Secret with its denial count raised by one.
pub fn with_denial(secret: &Secret) -> Option<Secret> {
    let meta = kubeflavor_meta(secret)?;
    Some(with_meta(secret, &meta.with_denial()))
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

fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| NodeTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                time_added: t.time_added.as_ref().map(|x| x.0),
            })
            .collect(),
    }
}

/// A binding condition of `type_`, keeping the previous transition time while the status
/// holds, so an unchanged status compares equal and is not written again.
fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    prev: Option<&FlavorBindingStatus>,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let old = prev.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let last_transition_time = match old {
        Some(c) if c.status == status => c.last_transition_time,
        _ => whole_seconds(jiff::Timestamp::now()),
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time,
        observed_generation: None,
    }
}

/// The Flavor's rules; `None` when it is missing or invalid (both mean: no flavor).
fn flavor_rules(binding: &FlavorBinding, flavor: Option<&Flavor>) -> Option<FlavorRules> {
    match rules_from_flavor(flavor?) {
        Ok((_, rules)) => Some(rules),
        Err(e) => {
            tracing::warn!(flavor = %binding.spec.flavor, error = %e, "Flavor is invalid; treated as missing");
            None
        }
    }
}

/// The merge patch (with the Node's resourceVersion) that releases a Node no binding
/// names any more (core's `released_node_state`), given the Flavor its flavor label names;
/// `None` when nothing is left to remove.
pub fn plan_release(node: &Node, flavor: Option<&Flavor>) -> Option<serde_json::Value> {
    let rules = flavor.and_then(|f| rules_from_flavor(f).ok().map(|(_, r)| r));
    let change = released_node_state(rules.as_ref(), &node_facts(node));
    (!change.is_empty())
        .then(|| change.to_merge_patch(node.metadata.resource_version.as_deref().unwrap_or("")))
}

/// Computes, with core's `desired_node_state`, the Node patch and the binding status.
pub fn plan_node(binding: &FlavorBinding, flavor: Option<&Flavor>, node: &Node) -> NodePlan {
    let prev = binding.status.as_ref();
    let Ok(flavor_name) = binding.spec.flavor.parse::<FlavorName>() else {
        // The CRD's schema keeps an invalid flavor name off a binding.
        return NodePlan {
            patch: None,
            status: prev.cloned().unwrap_or_default(),
            flavored: false,
        };
    };
    let rules = flavor_rules(binding, flavor);
    let facts = node_facts(node);
    let change = desired_node_state(rules.as_ref(), &flavor_name, &binding.node_state(), &facts);
    let patch = (!change.is_empty())
        .then(|| change.to_merge_patch(node.metadata.resource_version.as_deref().unwrap_or("")));
    NodePlan {
        patch,
        status: binding_status(binding, &change, &facts.apply(&change)),
        flavored: change.flavored(),
    }
}

/// The binding's status once `change` made the Node `after`: what kubeflavor applied
/// (with the values it has), the Flavored condition core chose, and the administrator's
/// Revoked condition (`node revoke`) carried over unchanged.
fn binding_status(
    binding: &FlavorBinding,
    change: &NodeChange,
    after: &NodeFacts,
) -> FlavorBindingStatus {
    let prev = binding.status.as_ref();
    let applied_labels: BTreeMap<String, String> = change
        .applied_labels
        .iter()
        .filter_map(|k| after.labels.get(k).map(|v| (k.clone(), v.clone())))
        .collect();
    let applied_taints: Vec<FlavorTaint> = change
        .applied_taints
        .iter()
        .filter_map(|(k, e)| {
            let t = after
                .taints
                .iter()
                .find(|t| &t.key == k && &t.effect == e)?;
            Some(FlavorTaint {
                key: k.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: serde_json::from_value(serde_json::json!(e)).ok()?,
            })
        })
        .collect();
    let outcome = change.outcome;
    let flavored = condition(
        CONDITION_FLAVORED,
        outcome.is_flavored(),
        outcome.reason(),
        outcome.message(),
        prev,
    );
    let revoked = prev
        .into_iter()
        .flat_map(|p| p.conditions.iter())
        .filter(|c| c.type_ == CONDITION_REVOKED)
        .cloned();
    FlavorBindingStatus {
        conditions: std::iter::once(flavored).chain(revoked).collect(),
        applied_labels,
        applied_taints,
        observed_generation: binding.metadata.generation,
    }
}

/// For each Flavor whose `status.boundNodes` differs from the number of bindings naming
/// it, the count to write. `flavors` are (name, current count); `bound` the number of
/// bindings naming a flavor.
pub fn bound_node_updates<'a>(
    flavors: impl IntoIterator<Item = (&'a str, Option<i64>)>,
    bound: impl Fn(&str) -> i64,
) -> Vec<(String, i64)> {
    flavors
        .into_iter()
        .filter_map(|(name, current)| {
            let want = bound(name);
            (current != Some(want)).then(|| (name.to_string(), want))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn token_secret(bound: &str) -> Secret {
        serde_json::from_value(json!({
            "metadata": {
                "name": "bootstrap-token-abcdef", "namespace": "kube-system", "resourceVersion": "42",
                "labels": {"kubeflavor.io/flavor": "sweet"},
                "annotations": {"kubeflavor.io/max-nodes": "3", "kubeflavor.io/bound-nodes": bound},
            },
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {},
        }))
        .unwrap()
    }

    #[test]
    fn reservation_adds_the_name_and_keeps_the_resource_version() {
        let node: NodeName = "b-node".parse().unwrap();
        let s = with_reservation(&token_secret("c-node"), &node).expect("a kubeflavor token");
        // The read's resourceVersion is what makes the PUT fail on a concurrent reservation.
        assert_eq!(s.metadata.resource_version.as_deref(), Some("42"));
        let ann = s.metadata.annotations.unwrap();
        assert_eq!(ann["kubeflavor.io/bound-nodes"], "b-node,c-node");
        assert_eq!(ann["kubeflavor.io/max-nodes"], "3");
    }

    #[test]
    fn a_plain_kubeadm_token_is_never_reserved_or_counted() {
        let mut s = token_secret("");
        s.metadata.labels = None;
        let node: NodeName = "a".parse().unwrap();
        assert!(with_reservation(&s, &node).is_none());
        assert!(with_denial(&s).is_none());
    }

    #[test]
    fn a_raced_denial_is_judged_on_the_current_count() {
        let mut opts = Options::new("ns", "me");
        opts.denial_limit = 2;
        let cause = DenyCause::FlavorMissing;
        let mut s = token_secret("");
        assert_eq!(current_token_fate(&s, cause, &opts), TokenFate::Count);
        let counted = with_denial(&s).expect("a kubeflavor token");
        assert_eq!(
            current_token_fate(&counted, cause, &opts),
            TokenFate::Delete
        );
        s.metadata.labels = None;
        assert_eq!(current_token_fate(&s, cause, &opts), TokenFate::Keep);
    }

    fn binding(status: Option<FlavorBindingStatus>) -> FlavorBinding {
        let mut b: FlavorBinding = serde_json::from_value(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "FlavorBinding",
            "metadata": {"name": "n1"},
            "spec": {"node": "n1", "flavor": "sweet", "tokenId": "abcdef", "csrName": "c",
                     "publicKeySha256": "00".repeat(32), "boundAt": "2026-11-30T00:00:00Z"},
        }))
        .unwrap();
        b.status = status;
        b
    }

    fn flavor() -> Flavor {
        serde_json::from_value(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
            "metadata": {"name": "sweet"},
            "spec": {"labels": {"tier.node-restriction.kubernetes.io/class": "gold"},
                     "taints": [{"key": "dedicated", "value": "p", "effect": "NoSchedule"}]},
        }))
        .unwrap()
    }

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "7", "labels": labels},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    /// What the API server would hold after a merge patch of labels and taints.
    fn patched(n: &Node, patch: &serde_json::Value) -> Node {
        let mut v = serde_json::to_value(n).unwrap();
        json_merge(&mut v, patch);
        serde_json::from_value(v).unwrap()
    }

    fn json_merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        json_merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (t, p) => *t = p.clone(),
        }
    }

    #[test]
    fn a_flavored_node_plans_nothing_more_and_the_same_status() {
        let n = node(
            json!({"kubernetes.io/hostname": "n1"}),
            json!([{"key": "kubeflavor.io/unverified", "effect": "NoSchedule"}]),
        );
        let first = plan_node(&binding(None), Some(&flavor()), &n);
        let patch = first.patch.clone().expect("a new node needs its flavor");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert!(first.flavored);
        let n2 = patched(&n, &patch);
        assert_eq!(
            n2.labels()["tier.node-restriction.kubernetes.io/class"],
            "gold"
        );
        assert_eq!(
            n2.labels()["kubernetes.io/hostname"],
            "n1",
            "other labels untouched"
        );
        // The next round, with the status written: nothing to patch, nothing to write.
        let again = plan_node(&binding(Some(first.status.clone())), Some(&flavor()), &n2);
        assert_eq!(again.patch, None);
        assert_eq!(again.status, first.status);
    }

    #[test]
    fn a_revoked_binding_keeps_its_revoked_condition_and_loses_the_flavor() {
        let n = node(json!({}), json!([]));
        let flavored = plan_node(&binding(None), Some(&flavor()), &n);
        let n2 = patched(&n, flavored.patch.as_ref().unwrap());
        let mut status = flavored.status.clone();
        status.conditions.push(Condition {
            type_: CONDITION_REVOKED.into(),
            status: "True".into(),
            reason: "RevokedByAdmin".into(),
            message: String::new(),
            last_transition_time: jiff::Timestamp::UNIX_EPOCH,
            observed_generation: None,
        });
        let revoked = plan_node(&binding(Some(status)), Some(&flavor()), &n2);
        assert!(!revoked.flavored);
        let n3 = patched(
            &n2,
            revoked.patch.as_ref().expect("revocation changes the node"),
        );
        assert!(
            n3.labels()
                .get("tier.node-restriction.kubernetes.io/class")
                .is_none()
        );
        let taints = n3.spec.unwrap().taints.unwrap();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "kubeflavor.io/revoked" && t.effect == "NoExecute")
        );
        assert!(
            revoked
                .status
                .conditions
                .iter()
                .any(|c| c.type_ == CONDITION_REVOKED)
        );
    }

    #[test]
    fn bound_node_counts_are_written_only_where_they_differ() {
        let flavors = [
            ("sweet", Some(2)),
            ("sour", None),
            ("bitter", Some(1)),
            ("umami", Some(0)),
        ];
        let bindings = ["sweet", "sour", "sweet", "sour", "sour", "gone"];
        let bound = |f: &str| bindings.iter().filter(|b| **b == f).count() as i64;
        let mut updates = bound_node_updates(flavors, bound);
        updates.sort();
        assert_eq!(
            updates,
            vec![("bitter".to_string(), 0), ("sour".to_string(), 3)]
        );
        let none = |_: &str| 0;
        assert!(bound_node_updates([("sweet", Some(0))], none).is_empty());
        assert_eq!(
            bound_node_updates([("sweet", None)], none),
            vec![("sweet".to_string(), 0)]
        );
    }
}
