//! The kubelet's zone is not trusted: rules of the ValidatingAdmissionPolicy `install`
//! ships to keep kubelets off kubeflavor's applied record (`node::applied_record`; it matches
//! every Node write of a `system:nodes` identity), which also refuses a kubelet that creates
//! its Node with `topology.kubernetes.io/zone` or `region`, or sets, changes or removes them
//! afterwards.
//!
//! NodeRestriction lets a kubelet set both on its own Node (they are among the labels
//! `--node-labels` may carry, kubernetes/kubernetes plugin/pkg/admission/noderestriction),
//! so without this policy a workload placed by zone trusts whoever runs the node. Cloud
//! controller managers and admins set them with identities of their own, which the policy
//! leaves alone; since the in-tree cloud providers are gone, a kubelet never sets them by
//! itself, only when its operator asks (`--node-labels`).

/// The labels a kubelet may not write: the zone and region, and their deprecated beta
/// names, which NodeRestriction allows a kubelet just the same and older workloads still
/// select on.
pub const TOPOLOGY_LABELS: [&str; 4] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// `object`'s zone and region, each as a list of zero or one value (absent and empty
/// differ).
fn topology_of(object: &str) -> String {
    let each: Vec<String> = TOPOLOGY_LABELS
        .iter()
        .map(|k| {
            format!(
                "has({object}.metadata.labels) && '{k}' in {object}.metadata.labels \
                 ? [{object}.metadata.labels['{k}']] : []"
            )
        })
        .map(|e| format!("({e})"))
        .collect();
    format!("[{}]", each.join(", "))
}

/// The policy's variables (name, CEL expression): the zone and region after the request
/// and before it (none before a CREATE, where `oldObject` is null). The policy is the one
/// keeping kubelets off kubeflavor's applied record (same match: kubelets' Node writes).
pub fn variables() -> [(&'static str, String); 2] {
    [
        ("topologyNow", topology_of("object")),
        (
            "topologyBefore",
            format!(
                "request.operation == 'UPDATE' ? ({}) : [{}]",
                topology_of("oldObject"),
                vec!["[]"; TOPOLOGY_LABELS.len()].join(", ")
            ),
        ),
    ]
}

/// The validation: zone and region are what they were.
pub const VALIDATION: &str = "variables.topologyNow == variables.topologyBefore";

/// What the API server answers a kubelet that tries.
pub fn refusal() -> String {
    "a kubelet may not set, change or remove topology.kubernetes.io/zone or region (nor their failure-domain.beta.kubernetes.io names) on its Node: whoever runs the node would decide where zone-placed workloads run (remove them from the kubelet's --node-labels)".into()
}

/// The rule the policy stands for, as a plain function (what the tests compare it with):
/// may a kubelet write a Node whose zone/region labels go from `old` (None on CREATE) to
/// `new`?
pub fn allows(
    old: Option<&std::collections::BTreeMap<String, String>>,
    new: &std::collections::BTreeMap<String, String>,
) -> bool {
    TOPOLOGY_LABELS.iter().all(|k| match old {
        None => !new.contains_key(*k),
        Some(old) => old.get(*k) == new.get(*k),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_kubelet_may_neither_bring_nor_change_a_zone() {
        let zone = "topology.kubernetes.io/zone";
        let region = "topology.kubernetes.io/region";
        assert!(allows(None, &labels(&[("kubernetes.io/hostname", "n1")])));
        assert!(!allows(None, &labels(&[(zone, "lyon")])));
        assert!(!allows(None, &labels(&[(region, "eu")])));
        let set = labels(&[(zone, "lyon")]);
        assert!(allows(Some(&set), &set), "what someone else set stays");
        assert!(!allows(Some(&set), &labels(&[(zone, "paris")])));
        assert!(!allows(Some(&set), &labels(&[])), "nor removes it");
        assert!(!allows(Some(&labels(&[])), &labels(&[(region, "eu")])));
    }

    #[test]
    fn the_variables_read_both_labels_before_and_after() {
        let [(now, after), (before, earlier)] = variables();
        assert_eq!((now, before), ("topologyNow", "topologyBefore"));
        for k in TOPOLOGY_LABELS {
            assert!(
                after.contains(&format!("'{k}' in object.metadata.labels")),
                "{after}"
            );
            assert!(
                earlier.contains(&format!("'{k}' in oldObject.metadata.labels")),
                "{earlier}"
            );
        }
        assert!(
            earlier.ends_with(": [[], [], [], []]"),
            "a CREATE has no zone before: {earlier}"
        );
    }
}
