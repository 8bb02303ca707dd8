//! Node flavoring: desired labels and taints from a binding and its Flavor (P2 trusted
//! labels: drift repair, revocation, nothing else touched).

use std::collections::{BTreeMap, BTreeSet};

use kubeflavor_core::flavor::input_labels::{INPUT_LABEL_PREFIX, InputLabels};
use kubeflavor_core::flavor::{
    FLAVOR_LABEL, FlavorName, FlavorRules, FlavorSpec, REVOKED_TAINT, TRUST_LEVEL_LABEL, TaintSpec,
    UNVERIFIED_TAINT,
};
use kubeflavor_core::node::state::{
    BindingState, FlavorOutcome, NodeChange, NodeFacts, NodeTaint, desired_node_state,
    released_node_state,
};
use proptest::prelude::*;
use serde_json::json;

const TIER: &str = "kubeflavor.node-restriction.kubernetes.io/tier";
const ROLE: &str = "node-role.kubernetes.io/edge";

fn sweet() -> FlavorRules {
    FlavorRules::from_spec(&FlavorSpec {
        labels: [(TIER.into(), "gold".into()), (ROLE.into(), "".into())].into(),
        taints: vec![TaintSpec {
            key: "edge".into(),
            value: Some("partner".into()),
            effect: "NoSchedule".into(),
        }],
        trust_level: Some(70),
        ..FlavorSpec::default()
    })
    .unwrap()
}

fn name() -> FlavorName {
    "sweet".parse().unwrap()
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> NodeTaint {
    NodeTaint {
        key: key.into(),
        value: value.map(str::to_owned),
        effect: effect.into(),
        time_added: None,
    }
}

/// A Node as the kubelet registers it: its own labels, the unverified taint.
fn fresh_node() -> NodeFacts {
    NodeFacts {
        labels: [
            ("kubernetes.io/hostname".to_owned(), "worker-1".to_owned()),
            ("example.com/owner".to_owned(), "partner-a".to_owned()),
        ]
        .into(),
        taints: vec![
            taint("node.kubernetes.io/not-ready", None, "NoSchedule"),
            taint(UNVERIFIED_TAINT, None, "NoSchedule"),
        ],
        record: None,
    }
}

fn converge(
    flavor: Option<&FlavorRules>,
    binding: &BindingState,
    node: &NodeFacts,
) -> (NodeChange, NodeFacts) {
    let change = desired_node_state(flavor, &name(), binding, node);
    let after = node.apply(&change);
    (change, after)
}

#[test]
fn flavored_node_gets_the_flavor_labels_and_taints() {
    let (change, after) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    let expected_set: BTreeMap<String, String> = [
        (FLAVOR_LABEL, "sweet"),
        (TRUST_LEVEL_LABEL, "70"),
        (TIER, "gold"),
        (ROLE, ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(change.set_labels, expected_set);
    assert!(change.remove_labels.is_empty());
    assert_eq!(
        change.taints,
        Some(vec![
            taint("node.kubernetes.io/not-ready", None, "NoSchedule"),
            taint("edge", Some("partner"), "NoSchedule"),
        ])
    );
    assert!(change.flavored());
    assert_eq!(
        change.applied_labels,
        expected_set.keys().cloned().collect::<BTreeSet<_>>()
    );
    assert_eq!(
        change.applied_taints,
        vec![("edge".to_owned(), "NoSchedule".to_owned())]
    );
    assert_eq!(after.labels["example.com/owner"], "partner-a");
}

#[test]
fn unverified_taint_is_removed_once_flavored() {
    let (_, after) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    assert!(!after.taints.iter().any(|t| t.key == UNVERIFIED_TAINT));
}

#[test]
fn unverified_taint_stays_while_the_flavor_is_missing() {
    let (change, after) = converge(None, &BindingState::default(), &fresh_node());
    assert!(
        change.set_labels.is_empty() && change.remove_labels.is_empty() && change.taints.is_none(),
        "only the record is written: {change:?}"
    );
    assert_eq!(change.outcome, FlavorOutcome::FlavorMissing);
    assert!(!change.flavored());
    assert!(after.taints.iter().any(|t| t.key == UNVERIFIED_TAINT));
}

#[test]
fn a_flavored_node_needs_no_patch() {
    let (first, after) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    let binding = BindingState {
        revoked: false,
        applied_labels: first.applied_labels.clone(),
        applied_taints: first.applied_taints.clone(),
        ..BindingState::default()
    };
    let again = desired_node_state(Some(&sweet()), &name(), &binding, &after);
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn admin_removing_the_flavor_label_sees_it_restored() {
    let (first, mut after) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    after.labels.remove(FLAVOR_LABEL);
    after.labels.insert(TRUST_LEVEL_LABEL.into(), "100".into());
    let binding = BindingState {
        applied_labels: first.applied_labels,
        applied_taints: first.applied_taints,
        ..BindingState::default()
    };
    let change = desired_node_state(Some(&sweet()), &name(), &binding, &after);
    let expected: BTreeMap<String, String> = [
        (FLAVOR_LABEL.to_owned(), "sweet".to_owned()),
        (TRUST_LEVEL_LABEL.to_owned(), "70".to_owned()),
    ]
    .into();
    assert_eq!(change.set_labels, expected);
    assert_eq!(change.taints, None);
}

#[test]
fn recreated_node_gets_its_labels_back() {
    let (first, _) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    let binding = BindingState {
        applied_labels: first.applied_labels.clone(),
        applied_taints: first.applied_taints.clone(),
        ..BindingState::default()
    };
    let change = desired_node_state(Some(&sweet()), &name(), &binding, &fresh_node());
    assert_eq!(change.set_labels, first.set_labels);
    assert_eq!(change.taints, first.taints);
}

#[test]
fn the_flavored_condition_says_why() {
    let revoked = BindingState {
        revoked: true,
        ..BindingState::default()
    };
    let cases = [
        (
            Some(sweet()),
            BindingState::default(),
            FlavorOutcome::Applied,
            "Applied",
        ),
        (
            None,
            BindingState::default(),
            FlavorOutcome::FlavorMissing,
            "FlavorMissing",
        ),
        // Revocation wins over a missing Flavor.
        (
            Some(sweet()),
            revoked.clone(),
            FlavorOutcome::Revoked,
            "Revoked",
        ),
        (None, revoked, FlavorOutcome::Revoked, "Revoked"),
    ];
    for (flavor, binding, outcome, reason) in cases {
        let change = desired_node_state(flavor.as_ref(), &name(), &binding, &fresh_node());
        assert_eq!(change.outcome, outcome);
        assert_eq!(change.outcome.reason(), reason);
        assert_eq!(change.flavored(), outcome == FlavorOutcome::Applied);
        assert!(!change.outcome.message().is_empty());
    }
}

#[test]
fn revoked_node_loses_flavor_labels_and_gets_a_noexecute_taint() {
    let (first, flavored) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    let binding = BindingState {
        revoked: true,
        applied_labels: first.applied_labels.clone(),
        applied_taints: first.applied_taints.clone(),
        ..BindingState::default()
    };
    let (change, after) = converge(Some(&sweet()), &binding, &flavored);
    assert!(!change.flavored());
    assert!(change.set_labels.is_empty());
    assert_eq!(change.remove_labels, first.applied_labels);
    assert_eq!(
        after.taints,
        vec![
            taint("node.kubernetes.io/not-ready", None, "NoSchedule"),
            taint(REVOKED_TAINT, None, "NoExecute"),
            taint(UNVERIFIED_TAINT, None, "NoSchedule"),
        ]
    );
    assert_eq!(after.labels, fresh_node().labels);
}

fn site_paris() -> InputLabels {
    InputLabels::from_map(&[("site".to_string(), "paris".to_string())].into()).unwrap()
}

const SITE: &str = "input.kubeflavor.node-restriction.kubernetes.io/site";

/// Input labels go on the Node with the flavor, come back after drift and on a re-created
/// Node, and go with the flavor when the binding is revoked; any other label under the
/// input prefix (an admin's, a kubelet's that slipped through) is removed.
#[test]
fn input_labels_follow_the_flavor() {
    let with_input = BindingState {
        input_labels: site_paris(),
        ..BindingState::default()
    };
    let (first, flavored) = converge(Some(&sweet()), &with_input, &fresh_node());
    assert_eq!(flavored.labels[SITE], "paris");
    assert!(first.applied_labels.contains(SITE));
    let recorded = BindingState {
        applied_labels: first.applied_labels.clone(),
        applied_taints: first.applied_taints.clone(),
        ..with_input.clone()
    };
    // Drift: changed by an admin, plus a stray key under the prefix.
    let mut drifted = flavored.clone();
    drifted.labels.insert(SITE.into(), "rome".into());
    let stray = format!("{INPUT_LABEL_PREFIX}rack");
    drifted.labels.insert(stray.clone(), "r1".into());
    let (change, repaired) = converge(Some(&sweet()), &recorded, &drifted);
    assert_eq!(
        change.set_labels,
        [(SITE.to_string(), "paris".to_string())].into()
    );
    assert_eq!(change.remove_labels, [stray].into());
    assert_eq!(repaired.labels, flavored.labels);
    // Re-created Node.
    let (_, recreated) = converge(Some(&sweet()), &recorded, &fresh_node());
    assert_eq!(recreated.labels[SITE], "paris");
    // Revoked, or the Flavor gone: the input labels go with the flavor.
    let revoked = BindingState {
        revoked: true,
        ..recorded.clone()
    };
    let (_, after) = converge(Some(&sweet()), &revoked, &flavored);
    assert!(!after.labels.contains_key(SITE));
    let (_, after) = converge(None, &recorded, &flavored);
    assert!(!after.labels.contains_key(SITE));
    // Released: no binding names the node any more.
    let released = released_node_state(Some(&sweet()), &flavored);
    assert!(released.remove_labels.contains(SITE));
}

#[test]
fn revoked_taint_goes_when_the_binding_is_restored() {
    let mut node = fresh_node();
    node.taints.push(taint(REVOKED_TAINT, None, "NoExecute"));
    let (_, after) = converge(Some(&sweet()), &BindingState::default(), &node);
    assert!(!after.taints.iter().any(|t| t.key == REVOKED_TAINT));
}

#[test]
fn labels_and_taints_dropped_from_the_flavor_are_removed() {
    let (first, flavored) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    let binding = BindingState {
        applied_labels: first.applied_labels,
        applied_taints: first.applied_taints,
        ..BindingState::default()
    };
    let plain = FlavorRules::from_spec(&FlavorSpec::default()).unwrap();
    let (change, after) = converge(Some(&plain), &binding, &flavored);
    let removed: BTreeSet<String> = [TRUST_LEVEL_LABEL, TIER, ROLE]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(change.remove_labels, removed);
    assert_eq!(after.labels[FLAVOR_LABEL], "sweet");
    assert!(!after.taints.iter().any(|t| t.key == "edge"));
}

#[test]
fn a_changed_taint_value_is_updated_in_place() {
    let mut node = fresh_node();
    node.taints
        .insert(0, taint("edge", Some("old"), "NoSchedule"));
    let (change, _) = converge(Some(&sweet()), &BindingState::default(), &node);
    assert_eq!(
        change.taints,
        Some(vec![
            taint("edge", Some("partner"), "NoSchedule"),
            taint("node.kubernetes.io/not-ready", None, "NoSchedule"),
        ])
    );
}

#[test]
fn merge_patch_carries_resource_version_labels_and_full_taints() {
    let mut node = fresh_node();
    node.labels.insert(TRUST_LEVEL_LABEL.into(), "1".into());
    node.taints[0].time_added = Some("2026-11-30T04:16:38Z".parse().unwrap());
    let plain = FlavorRules::from_spec(&FlavorSpec::default()).unwrap();
    let change = desired_node_state(Some(&plain), &name(), &BindingState::default(), &node);
    assert_eq!(
        change.to_merge_patch("4711"),
        json!({
            "metadata": {
                "resourceVersion": "4711",
                "annotations": {
                    "kubeflavor.io/applied": format!(r#"{{"labels":["{FLAVOR_LABEL}"],"taints":[]}}"#),
                },
                "labels": {
                    FLAVOR_LABEL: "sweet",
                    TRUST_LEVEL_LABEL: null,
                }
            },
            "spec": {
                "taints": [
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "2026-11-30T04:16:38Z"},
                ]
            }
        })
    );
    let labels_only = NodeChange {
        set_labels: [("a".to_owned(), "b".to_owned())].into(),
        ..NodeChange::default()
    };
    assert_eq!(
        labels_only.to_merge_patch("1"),
        json!({"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})
    );
}

// ---- properties ----

fn arb_node() -> impl Strategy<Value = NodeFacts> {
    let key = prop_oneof![
        Just(FLAVOR_LABEL.to_owned()),
        Just(TRUST_LEVEL_LABEL.to_owned()),
        Just(TIER.to_owned()),
        Just("example.com/owner".to_owned()),
        Just("kubernetes.io/hostname".to_owned()),
        Just(SITE.to_owned()),
        Just("input.kubeflavor.node-restriction.kubernetes.io/rack".to_owned()),
        "[a-z]{1,5}\\.example/[a-z]{1,5}",
    ];
    let taint_key = prop_oneof![
        Just(UNVERIFIED_TAINT.to_owned()),
        Just(REVOKED_TAINT.to_owned()),
        Just("edge".to_owned()),
        Just("other".to_owned()),
        Just("node.kubernetes.io/not-ready".to_owned()),
    ];
    let effect = prop_oneof![
        Just("NoSchedule"),
        Just("NoExecute"),
        Just("PreferNoSchedule")
    ];
    (
        proptest::collection::btree_map(key, "[a-z0-9]{0,4}", 0..6),
        proptest::collection::vec(
            (taint_key, proptest::option::of("[a-z]{1,3}"), effect),
            0..5,
        ),
    )
        .prop_map(|(labels, taints)| {
            let mut seen = BTreeSet::new();
            let taints = taints
                .into_iter()
                .filter(|(k, _, e)| seen.insert((k.clone(), *e)))
                .map(|(k, v, e)| taint(&k, v.as_deref(), e))
                .collect();
            NodeFacts {
                labels,
                taints,
                record: None,
            }
        })
}

fn arb_binding() -> impl Strategy<Value = BindingState> {
    (
        any::<bool>(),
        proptest::collection::btree_set(
            prop_oneof![
                Just(TIER.to_owned()),
                Just("old.node-restriction.kubernetes.io/x".to_owned())
            ],
            0..2,
        ),
        proptest::collection::vec(
            prop_oneof![
                Just(("edge".to_owned(), "NoSchedule".to_owned())),
                Just(("gone".to_owned(), "NoExecute".to_owned()))
            ],
            0..2,
        ),
        any::<bool>(),
    )
        .prop_map(
            |(revoked, applied_labels, applied_taints, with_input)| BindingState {
                revoked,
                applied_labels,
                applied_taints,
                input_labels: if with_input {
                    site_paris()
                } else {
                    InputLabels::default()
                },
                placement: if with_input {
                    observed_in_lyon()
                } else {
                    Default::default()
                },
            },
        )
}

/// A node observed in lyon (with a zone) that claims lyon too.
fn observed_in_lyon() -> kubeflavor_core::network::NetworkPlacement {
    use kubeflavor_core::network::{Claim, SiteEntry, Sites, placement};
    let lyon = ["10.20.0.0/16".to_string()];
    let (sites, _) = Sites::build([SiteEntry {
        zone: Some("lyon-a"),
        ..SiteEntry::new("lyon", &lyon)
    }]);
    let claim = Claim {
        prefixes: vec!["10.20.1.0/24".parse().unwrap()],
        ..Claim::default()
    };
    placement(&sites, Some("10.20.1.5".parse().unwrap()), Some(&claim))
}

proptest! {
    /// Applying the computed change reaches a fixed point: computing again asks for nothing.
    #[test]
    fn applying_the_change_converges(node in arb_node(), binding in arb_binding(), has_flavor: bool) {
        let rules = sweet();
        let flavor = has_flavor.then_some(&rules);
        let change = desired_node_state(flavor, &name(), &binding, &node);
        let after = node.apply(&change);
        let next = BindingState {
            revoked: binding.revoked,
            applied_labels: change.applied_labels.clone(),
            applied_taints: change.applied_taints.clone(),
            input_labels: binding.input_labels.clone(),
            placement: binding.placement.clone(),
        };
        let again = desired_node_state(flavor, &name(), &next, &after);
        prop_assert!(again.is_empty(), "{:?}", again);
    }

    /// Labels and taints kubeflavor does not own are never changed.
    #[test]
    fn nothing_else_on_the_node_is_touched(node in arb_node(), binding in arb_binding(), has_flavor: bool) {
        let rules = sweet();
        let change = desired_node_state(has_flavor.then_some(&rules), &name(), &binding, &node);
        let after = node.apply(&change);
        let owned_label = |k: &str| {
            k == FLAVOR_LABEL || k == TRUST_LEVEL_LABEL || k == TIER || k == ROLE || binding.applied_labels.contains(k)
                || k.starts_with(INPUT_LABEL_PREFIX)
        };
        for (k, v) in &node.labels {
            if !owned_label(k) {
                prop_assert_eq!(after.labels.get(k), Some(v));
            }
        }
        let owned_taint = |t: &NodeTaint| {
            [UNVERIFIED_TAINT, REVOKED_TAINT, "edge"].contains(&t.key.as_str())
                || binding.applied_taints.iter().any(|(k, e)| *k == t.key && *e == t.effect)
        };
        let before: Vec<&NodeTaint> = node.taints.iter().filter(|t| !owned_taint(t)).collect();
        let kept: Vec<&NodeTaint> = after.taints.iter().filter(|t| !owned_taint(t)).collect();
        prop_assert_eq!(before, kept);
    }

    /// A revoked node never keeps a flavor label and always gets the NoExecute taint.
    #[test]
    fn revoked_nodes_carry_no_flavor(node in arb_node(), mut binding in arb_binding()) {
        binding.revoked = true;
        binding.applied_labels.insert(TIER.to_owned());
        let change = desired_node_state(Some(&sweet()), &name(), &binding, &node);
        let after = node.apply(&change);
        for k in [FLAVOR_LABEL, TRUST_LEVEL_LABEL, TIER] {
            prop_assert!(!after.labels.contains_key(k));
        }
        prop_assert!(!after.labels.keys().any(|k| k.starts_with(INPUT_LABEL_PREFIX)));
        prop_assert!(after.taints.iter().any(|t| t.key == REVOKED_TAINT && t.effect == "NoExecute"));
    }
}

/// P3 (binding): a Node that was there before the binding's CSR was approved is not the
/// holder's.
#[test]
fn only_an_approved_binding_makes_a_node_the_holders() {
    use kubeflavor_core::node::state::{BindingCsr, HolderFacts, node_is_the_holders};
    let never_flavored = HolderFacts::default();
    assert_eq!(
        node_is_the_holders(never_flavored, None),
        None,
        "only the CSR can tell"
    );
    assert_eq!(
        node_is_the_holders(never_flavored, Some(BindingCsr::Approved)),
        Some(true)
    );
    assert_eq!(
        node_is_the_holders(never_flavored, Some(BindingCsr::NotApproved)),
        Some(false)
    );
    assert_eq!(
        node_is_the_holders(never_flavored, Some(BindingCsr::Gone)),
        Some(false)
    );
    let flavored = HolderFacts {
        flavored_before: true,
        ..HolderFacts::default()
    };
    let revoked = HolderFacts {
        revoked: true,
        ..HolderFacts::default()
    };
    for binding in [flavored, revoked] {
        assert_eq!(
            node_is_the_holders(binding, None),
            Some(true),
            "{binding:?}: no CSR read"
        );
        for csr in [
            BindingCsr::Approved,
            BindingCsr::NotApproved,
            BindingCsr::Gone,
        ] {
            assert_eq!(
                node_is_the_holders(binding, Some(csr)),
                Some(true),
                "{binding:?} {csr:?}"
            );
        }
    }
}

/// P2/P3: a Node whose binding was deleted keeps nothing kubeflavor gave it and is
/// untrusted again; what the kubelet or others put there stays.
#[test]
fn a_node_whose_binding_went_loses_the_flavor_and_is_unverified_again() {
    let (_, flavored) = converge(Some(&sweet()), &BindingState::default(), &fresh_node());
    let change = released_node_state(Some(&sweet()), &flavored);
    assert_eq!(change.outcome, FlavorOutcome::Released);
    assert!(!change.flavored());
    let after = flavored.apply(&change);
    assert_eq!(
        after.labels,
        fresh_node().labels,
        "only the kubelet's own labels are left"
    );
    assert_eq!(
        after.taints,
        vec![
            taint("node.kubernetes.io/not-ready", None, "NoSchedule"),
            taint(UNVERIFIED_TAINT, None, "NoSchedule"),
        ]
    );
    let again = released_node_state(Some(&sweet()), &after);
    assert!(again.is_empty(), "converged: {again:?}");
}

/// Without the Flavor (deleted too), kubeflavor's own labels still go and the node is
/// unverified; a revoked node keeps its NoExecute taint: deleting its binding never
/// makes it more trusted.
#[test]
fn a_released_node_without_its_flavor_or_revoked_stays_untrusted() {
    let mut node = fresh_node();
    node.labels.insert(FLAVOR_LABEL.into(), "sweet".into());
    node.labels.insert(TRUST_LEVEL_LABEL.into(), "70".into());
    node.taints = vec![taint(REVOKED_TAINT, None, "NoExecute")];
    let after = node.apply(&released_node_state(None, &node));
    assert!(!after.labels.contains_key(FLAVOR_LABEL));
    assert!(!after.labels.contains_key(TRUST_LEVEL_LABEL));
    assert_eq!(
        after.taints,
        vec![
            taint(REVOKED_TAINT, None, "NoExecute"),
            taint(UNVERIFIED_TAINT, None, "NoSchedule"),
        ]
    );
}

/// P9: where the node was observed goes on the Node with its flavor (the site, the site's
/// zone), a flavor that names sites keeps a node observed elsewhere (or not yet) out of
/// scheduling, a revoked node loses the observed labels with the flavor's, and an observed
/// or claimed label kubeflavor does not want (an admin's, a stale one) goes.
#[test]
fn the_observed_site_goes_with_the_flavor_and_an_unallowed_site_keeps_pods_off() {
    use kubeflavor_core::network::{
        CLAIMED_PREFIX, SITE_LABEL, SITE_NOT_ALLOWED_TAINT, SiteEntry, Sites, ZONE_LABEL, placement,
    };
    let lyon = ["10.20.0.0/16".to_string()];
    let paris = ["10.30.0.0/16".to_string()];
    let (sites, _) = Sites::build([
        SiteEntry {
            zone: Some("lyon-a"),
            ..SiteEntry::new("lyon", &lyon)
        },
        SiteEntry::new("paris", &paris),
    ]);
    let only_lyon = FlavorRules::from_spec(&FlavorSpec {
        allowed_sites: vec!["lyon".into()],
        ..sweet().to_spec()
    })
    .unwrap();
    let at = |addr: Option<&str>| BindingState {
        placement: placement(&sites, addr.map(|a| a.parse().unwrap()), None),
        ..BindingState::default()
    };
    let site_taint = |n: &NodeFacts| n.taints.iter().any(|t| t.key == SITE_NOT_ALLOWED_TAINT);

    // Not observed yet: no site label, and kept off by a flavor that names sites.
    let (_, unobserved) = converge(Some(&only_lyon), &at(None), &fresh_node());
    assert!(!unobserved.labels.contains_key(SITE_LABEL));
    assert!(site_taint(&unobserved));
    // Without allowed sites, the same node takes pods.
    let (_, any_site) = converge(Some(&sweet()), &at(None), &fresh_node());
    assert!(!site_taint(&any_site));

    // Observed in lyon: the site, its zone, no site taint.
    let (_, in_lyon) = converge(Some(&only_lyon), &at(Some("10.20.3.4")), &unobserved);
    assert_eq!(in_lyon.labels[SITE_LABEL], "lyon");
    assert_eq!(in_lyon.labels[ZONE_LABEL], "lyon-a");
    assert!(!site_taint(&in_lyon));
    // Moved to paris: the zone goes with lyon, and the site taint comes back.
    let (_, in_paris) = converge(Some(&only_lyon), &at(Some("10.30.3.4")), &in_lyon);
    assert_eq!(in_paris.labels[SITE_LABEL], "paris");
    assert!(
        !in_paris.labels.contains_key(ZONE_LABEL),
        "{:?}",
        in_paris.labels
    );
    assert!(site_taint(&in_paris));

    // A label under the claimed prefix nobody asked for (an admin's) is removed.
    let mut planted = in_lyon.clone();
    planted
        .labels
        .insert(format!("{CLAIMED_PREFIX}site"), "paris".into());
    let (_, cleaned) = converge(Some(&only_lyon), &at(Some("10.20.3.4")), &planted);
    assert!(
        !cleaned
            .labels
            .contains_key(&format!("{CLAIMED_PREFIX}site"))
    );

    // Revoked: the observed labels and the zone go with the flavor.
    let revoked = BindingState {
        revoked: true,
        ..at(Some("10.20.3.4"))
    };
    let (_, gone) = converge(Some(&only_lyon), &revoked, &in_lyon);
    assert!(!gone.labels.contains_key(SITE_LABEL));
    assert!(!gone.labels.contains_key(ZONE_LABEL));
    // Released (the binding deleted): the record takes them away too.
    let released = in_lyon.apply(&released_node_state(None, &in_lyon));
    assert!(!released.labels.contains_key(SITE_LABEL));
    assert!(!released.labels.contains_key(ZONE_LABEL));
}

/// No Flavor may carry an observed or claimed label: only the placement puts them on.
#[test]
fn a_flavor_cannot_carry_a_placement_label() {
    for key in [
        "observed.kubeflavor.node-restriction.kubernetes.io/site",
        "claimed.kubeflavor.node-restriction.kubernetes.io/site",
    ] {
        let spec = FlavorSpec {
            labels: [(key.into(), "lyon".into())].into(),
            ..FlavorSpec::default()
        };
        assert!(FlavorRules::from_spec(&spec).is_err(), "{key}");
    }
    let bad_site = FlavorSpec {
        allowed_sites: vec!["not a site".into()],
        ..FlavorSpec::default()
    };
    assert!(FlavorRules::from_spec(&bad_site).is_err());
}
