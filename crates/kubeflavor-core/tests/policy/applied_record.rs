//! Release from the applied record (P7: a Node without a live, unrevoked binding carries
//! none of kubeflavor's trusted labels): whatever happened to the Flavor (edited, deleted)
//! and whether or not the binding's status kept up (a controller that died between the
//! Node patch and the status write), release removes every label and taint kubeflavor
//! ever set, and leaves the Node unverified.

use std::collections::BTreeSet;

use kubeflavor_core::flavor::{
    FLAVOR_LABEL, FlavorName, FlavorRules, FlavorSpec, REVOKED_TAINT, TRUST_LEVEL_LABEL, TaintSpec,
    UNVERIFIED_TAINT,
};
use kubeflavor_core::node::applied_record::{APPLIED_ANNOTATION, AppliedRecord};
use kubeflavor_core::node::state::{
    BindingState, FlavorOutcome, NodeFacts, NodeTaint, desired_node_state, released_node_state,
};
use proptest::prelude::*;

const OLD: &str = "old.node-restriction.kubernetes.io/class";
const NEW: &str = "new.node-restriction.kubernetes.io/class";

fn rules(labels: &[&str], taints: &[(&str, &str)], level: Option<i64>) -> FlavorRules {
    FlavorRules::from_spec(&FlavorSpec {
        labels: labels
            .iter()
            .map(|k| (k.to_string(), "v".to_string()))
            .collect(),
        taints: taints
            .iter()
            .map(|(k, e)| TaintSpec {
                key: k.to_string(),
                value: None,
                effect: e.to_string(),
            })
            .collect(),
        trust_level: level,
        ..FlavorSpec::default()
    })
    .unwrap()
}

fn name() -> FlavorName {
    "sweet".parse().unwrap()
}

fn taint(key: &str, effect: &str) -> NodeTaint {
    NodeTaint {
        key: key.into(),
        value: None,
        effect: effect.into(),
        time_added: None,
    }
}

fn fresh_node() -> NodeFacts {
    NodeFacts {
        labels: [("kubernetes.io/hostname".to_owned(), "w1".to_owned())].into(),
        taints: vec![taint(UNVERIFIED_TAINT, "NoSchedule")],
        record: None,
    }
}

fn has(node: &NodeFacts, key: &str, effect: &str) -> bool {
    node.taints
        .iter()
        .any(|t| t.key == key && t.effect == effect)
}

/// The Flavor moved to other labels while no controller ran, then the binding went:
/// release removes the labels the record names, not those the Flavor names now. Without
/// the record (the Flavor's current rules only) the old label would stay.
#[test]
fn release_removes_what_was_recorded_not_what_the_flavor_says_now() {
    let old = rules(&[OLD], &[("edge", "NoSchedule")], Some(50));
    let change = desired_node_state(Some(&old), &name(), &BindingState::default(), &fresh_node());
    let record = change.record.clone().expect("the first patch records");
    assert_eq!(
        record,
        AppliedRecord::new(
            &[
                FLAVOR_LABEL.to_string(),
                OLD.to_string(),
                TRUST_LEVEL_LABEL.to_string()
            ],
            &[("edge".to_string(), "NoSchedule".to_string())],
        )
    );
    let patch = change.to_merge_patch("1");
    assert_eq!(
        patch["metadata"]["annotations"][APPLIED_ANNOTATION],
        record.encode(),
        "the record travels in the same patch as the labels"
    );
    let flavored = fresh_node().apply(&change);
    assert!(flavored.labels.contains_key(OLD));
    // Edited while the controller was down; then the binding deleted.
    let edited = rules(&[NEW], &[], None);
    let release = released_node_state(Some(&edited), &flavored);
    assert_eq!(release.outcome, FlavorOutcome::Released);
    let after = flavored.apply(&release);
    assert_eq!(after.labels, fresh_node().labels);
    assert_eq!(after.taints, vec![taint(UNVERIFIED_TAINT, "NoSchedule")]);
    // The Flavor deleted instead: the same.
    let after = flavored.apply(&released_node_state(None, &flavored));
    assert_eq!(after.labels, fresh_node().labels);
    assert!(has(&after, UNVERIFIED_TAINT, "NoSchedule"));
    // Converged: released twice asks for nothing.
    assert!(released_node_state(None, &after).is_empty());
}

/// The Flavor deleted while the binding stays: the Node is released (unverified, no
/// trusted label), and the Flavor re-created flavors it again.
#[test]
fn a_missing_flavor_releases_the_node_and_its_return_flavors_it_again() {
    let sweet = rules(&[OLD], &[], Some(10));
    let first = desired_node_state(
        Some(&sweet),
        &name(),
        &BindingState::default(),
        &fresh_node(),
    );
    let flavored = fresh_node().apply(&first);
    assert!(!has(&flavored, UNVERIFIED_TAINT, "NoSchedule"));
    let status = BindingState {
        applied_labels: first.applied_labels.clone(),
        applied_taints: first.applied_taints.clone(),
        ..BindingState::default()
    };
    let missing = desired_node_state(None, &name(), &status, &flavored);
    assert_eq!(missing.outcome, FlavorOutcome::FlavorMissing);
    let released = flavored.apply(&missing);
    assert_eq!(released.labels, fresh_node().labels);
    assert!(has(&released, UNVERIFIED_TAINT, "NoSchedule"));
    let back = desired_node_state(Some(&sweet), &name(), &status, &released);
    let again = released.apply(&back);
    assert_eq!(again.labels[OLD], "v");
    assert!(!has(&again, UNVERIFIED_TAINT, "NoSchedule"));
}

/// A revoked node is unverified too; an admin who removes the revoked taint gets it back
/// while the binding is revoked, and the unverified taint stays once the binding is gone.
#[test]
fn a_revoked_node_is_unverified_and_gets_its_revoked_taint_back() {
    let sweet = rules(&[OLD], &[], None);
    let first = desired_node_state(
        Some(&sweet),
        &name(),
        &BindingState::default(),
        &fresh_node(),
    );
    let flavored = fresh_node().apply(&first);
    let revoked = BindingState {
        revoked: true,
        applied_labels: first.applied_labels,
        applied_taints: first.applied_taints,
        ..BindingState::default()
    };
    let node = flavored.apply(&desired_node_state(
        Some(&sweet),
        &name(),
        &revoked,
        &flavored,
    ));
    assert!(has(&node, REVOKED_TAINT, "NoExecute"));
    assert!(has(&node, UNVERIFIED_TAINT, "NoSchedule"));
    assert!(!node.labels.contains_key(OLD));
    let mut by_hand = node.clone();
    by_hand.taints.retain(|t| t.key != REVOKED_TAINT);
    let repaired = by_hand.apply(&desired_node_state(
        Some(&sweet),
        &name(),
        &revoked,
        &by_hand,
    ));
    assert!(has(&repaired, REVOKED_TAINT, "NoExecute"));
    // Binding gone: the revoked taint stays if there, the unverified taint always.
    let released = node.apply(&released_node_state(None, &node));
    assert!(has(&released, REVOKED_TAINT, "NoExecute"));
    assert!(has(&released, UNVERIFIED_TAINT, "NoSchedule"));
    let mut untainted = by_hand.clone();
    untainted.taints.clear();
    let released = untainted.apply(&released_node_state(None, &untainted));
    assert_eq!(released.taints, vec![taint(UNVERIFIED_TAINT, "NoSchedule")]);
}

/// An unreadable record (only an admin can write one) still releases the Node.
#[test]
fn an_unreadable_record_still_releases() {
    let mut node = fresh_node();
    node.taints.clear();
    node.record = Some("garbage".into());
    let change = released_node_state(None, &node);
    let after = node.apply(&change);
    assert!(has(&after, UNVERIFIED_TAINT, "NoSchedule"));
    assert_eq!(
        after.applied_record(),
        Some(AppliedRecord::new(
            &[],
            &[(UNVERIFIED_TAINT.to_string(), "NoSchedule".to_string())]
        )),
        "rewritten readable"
    );
}

// ---- property: no label kubeflavor ever set survives release ----

const LABEL_POOL: [&str; 4] = [
    OLD,
    NEW,
    "node-role.kubernetes.io/edge",
    "z.node-restriction.kubernetes.io/zone",
];
const TAINT_POOL: [(&str, &str); 3] = [
    ("edge", "NoSchedule"),
    ("edge", "NoExecute"),
    ("dedicated", "PreferNoSchedule"),
];

fn arb_flavor() -> impl Strategy<Value = Option<FlavorRules>> {
    proptest::option::weighted(
        0.8,
        (
            proptest::sample::subsequence(LABEL_POOL.to_vec(), 0..=LABEL_POOL.len()),
            proptest::sample::subsequence(TAINT_POOL.to_vec(), 0..=TAINT_POOL.len()),
            proptest::option::of(0i64..=100),
        )
            .prop_map(|(labels, taints, level)| rules(&labels, &taints, level)),
    )
}

/// One reconcile of the binding: the Flavor as it is then, whether the status write that
/// follows the Node patch lands (a controller that dies in between leaves it stale), and
/// whether the binding is revoked by then.
#[derive(Debug, Clone)]
struct Step {
    flavor: Option<FlavorRules>,
    status_written: bool,
    revoked: bool,
}

fn arb_step() -> impl Strategy<Value = Step> {
    (arb_flavor(), any::<bool>(), proptest::bool::weighted(0.1)).prop_map(
        |(flavor, status_written, revoked)| Step {
            flavor,
            status_written,
            revoked,
        },
    )
}

proptest! {
    #[test]
    fn no_label_kubeflavor_ever_set_survives_release(
        steps in proptest::collection::vec(arb_step(), 1..8),
        at_release in arb_flavor(),
    ) {
        let mut node = fresh_node();
        let mut status = BindingState::default();
        let mut ever_labels = BTreeSet::new();
        let mut ever_taints = BTreeSet::new();
        for step in &steps {
            status.revoked |= step.revoked;
            let change = desired_node_state(step.flavor.as_ref(), &name(), &status, &node);
            ever_labels.extend(change.set_labels.keys().cloned());
            for t in change.taints.iter().flatten() {
                if t.key != UNVERIFIED_TAINT && t.key != REVOKED_TAINT {
                    ever_taints.insert((t.key.clone(), t.effect.clone()));
                }
            }
            node = node.apply(&change);
            if step.status_written {
                status.applied_labels = change.applied_labels.clone();
                status.applied_taints = change.applied_taints.clone();
            }
        }
        let was_revoked = has(&node, REVOKED_TAINT, "NoExecute");
        let release = released_node_state(at_release.as_ref(), &node);
        let after = node.apply(&release);
        for k in &ever_labels {
            prop_assert!(!after.labels.contains_key(k), "{} survived release: {:?}", k, after);
        }
        for (k, e) in &ever_taints {
            prop_assert!(!has(&after, k, e), "taint {}:{} survived release", k, e);
        }
        prop_assert_eq!(&after.labels, &fresh_node().labels);
        prop_assert!(has(&after, UNVERIFIED_TAINT, "NoSchedule"));
        prop_assert_eq!(has(&after, REVOKED_TAINT, "NoExecute"), was_revoked);
        prop_assert!(released_node_state(at_release.as_ref(), &after).is_empty());
    }
}

/// A binding whose Flavor is missing from the start gave its Node nothing: its status
/// lists nothing applied (so it does not read as flavored before, and the token is still
/// looked at once the Node is flavored), while the record on the Node names the
/// unverified taint.
#[test]
fn the_unverified_taint_is_recorded_on_the_node_not_in_the_status() {
    let change = desired_node_state(None, &name(), &BindingState::default(), &fresh_node());
    assert!(change.applied_labels.is_empty());
    assert!(change.applied_taints.is_empty(), "{change:?}");
    assert_eq!(
        change.record,
        Some(AppliedRecord::new(
            &[],
            &[(UNVERIFIED_TAINT.to_string(), "NoSchedule".to_string())]
        ))
    );
}
