//! The node loop's plan for one name: the Node and binding as read, turned into core's facts;
//! core's answer (`desired_node_state`, `released_node_state`) turned into the Node patch
//! and the binding status to write. No rule is decided here.

use k8s_openapi::api::core::v1::Node;
use kubeflavor_cluster::crd::{Flavor, FlavorBinding, FlavorBindingStatus, rules_from_flavor};
use kubeflavor_core::flavor::{FlavorName, FlavorRules};
use kubeflavor_core::network::NetworkPlacement;
use kubeflavor_core::node::applied_record::APPLIED_ANNOTATION;
use kubeflavor_core::node::state::{
    BindingState, NodeFacts, NodeTaint, desired_node_state, released_node_state,
};

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
        record: node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPLIED_ANNOTATION))
            .cloned(),
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
/// names any more (core's `released_node_state`, from the Node's applied record; the
/// Flavor its flavor label names is read only for a Node without a record); `None` when
/// the Node is released already.
pub fn plan_release(node: &Node, flavor: Option<&Flavor>) -> Option<serde_json::Value> {
    let rules = flavor.and_then(|f| rules_from_flavor(f).ok().map(|(_, r)| r));
    let change = released_node_state(rules.as_ref(), &node_facts(node));
    (!change.is_empty())
        .then(|| change.to_merge_patch(node.metadata.resource_version.as_deref().unwrap_or("")))
}

/// Computes, with core's `desired_node_state`, the Node patch and the binding status.
pub fn plan_node(
    binding: &FlavorBinding,
    flavor: Option<&Flavor>,
    node: &Node,
    placement: NetworkPlacement,
) -> NodePlan {
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
    let state = BindingState {
        placement,
        ..binding.node_state()
    };
    let change = desired_node_state(rules.as_ref(), &flavor_name, &state, &facts);
    let patch = (!change.is_empty())
        .then(|| change.to_merge_patch(node.metadata.resource_version.as_deref().unwrap_or("")));
    NodePlan {
        patch,
        status: binding.status_after(&change, &facts.apply(&change)),
        flavored: change.flavored(),
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
    use kubeflavor_cluster::crd::{CONDITION_REVOKED, Condition};
    use serde_json::json;

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
        let first = plan_node(&binding(None), Some(&flavor()), &n, Default::default());
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
        let again = plan_node(
            &binding(Some(first.status.clone())),
            Some(&flavor()),
            &n2,
            Default::default(),
        );
        assert_eq!(again.patch, None);
        assert_eq!(again.status, first.status);
    }

    #[test]
    fn a_revoked_binding_keeps_its_revoked_condition_and_loses_the_flavor() {
        let n = node(json!({}), json!([]));
        let flavored = plan_node(&binding(None), Some(&flavor()), &n, Default::default());
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
        let revoked = plan_node(
            &binding(Some(status)),
            Some(&flavor()),
            &n2,
            Default::default(),
        );
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
