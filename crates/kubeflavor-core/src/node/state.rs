//! The labels and taints a bound node must carry, computed from its binding and Flavor,
//! and the binding's Flavored condition that says how it went.
//!
//! kubeflavor touches only what it owns: the flavor's labels and taints, its own keys
//! ([`FLAVOR_LABEL`], [`TRUST_LEVEL_LABEL`], [`UNVERIFIED_TAINT`], [`REVOKED_TAINT`]) and
//! whatever it applied before (recorded on the Node itself, see [`crate::node::applied_record`],
//! and in the binding's status for Nodes flavored before that record existed). Everything
//! else on the Node is left exactly as it is. The flavor labels live under keys NodeRestriction denies
//! the kubelet (P2 (trusted labels)), so the kubelet cannot undo them; an admin's edit or a re-created Node
//! is drift that the next computation repairs.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::flavor::input_labels::{INPUT_LABEL_PREFIX, InputLabels};
use crate::flavor::{
    FLAVOR_LABEL, FlavorName, FlavorRules, REVOKED_TAINT, TRUST_LEVEL_LABEL, Taint, TaintEffect,
    UNVERIFIED_TAINT,
};
use crate::network::{NetworkPlacement, SITE_NOT_ALLOWED_TAINT, is_placement_label};
use crate::node::applied_record::{APPLIED_ANNOTATION, AppliedRecord};

/// A taint as it is on a Node (any effect string the API server holds, its `timeAdded`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTaint {
    pub key: String,
    /// `None` or empty: no value.
    pub value: Option<String>,
    pub effect: String,
    pub time_added: Option<Timestamp>,
}

impl NodeTaint {
    fn same_slot(&self, key: &str, effect: &str) -> bool {
        self.key == key && self.effect == effect
    }

    fn value_str(&self) -> &str {
        self.value.as_deref().unwrap_or("")
    }

    fn from_taint(t: &Taint) -> Self {
        NodeTaint {
            key: t.key.to_string(),
            value: (!t.value.as_str().is_empty()).then(|| t.value.to_string()),
            effect: t.effect.to_string(),
            time_added: None,
        }
    }
}

/// The labels and taints of a Node, as read, and its applied record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<NodeTaint>,
    /// The [`APPLIED_ANNOTATION`] annotation's text, when the Node carries it.
    pub record: Option<String>,
}

/// What the binding records about the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingState {
    pub revoked: bool,
    /// Label keys kubeflavor applied last time (from the binding's status).
    pub applied_labels: BTreeSet<String>,
    /// Taints (key, effect) kubeflavor applied last time (from the binding's status).
    pub applied_taints: Vec<(String, String)>,
    /// What the node's administrator said through the portal, as the binding recorded it
    /// (put on the Node under [`INPUT_LABEL_PREFIX`] while the node is flavored).
    pub input_labels: InputLabels,
    /// Where the node was observed on the network and what it claims (P9): its labels go
    /// with the flavor, and a flavor that names sites keeps a node observed elsewhere out
    /// of scheduling ([`SITE_NOT_ALLOWED_TAINT`]).
    pub placement: NetworkPlacement,
}

/// The change that brings a Node to its desired state, and what to record as applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeChange {
    /// Labels to add or change.
    pub set_labels: BTreeMap<String, String>,
    /// Labels to remove.
    pub remove_labels: BTreeSet<String>,
    /// The full new taint list, or `None` when the taints are already right.
    pub taints: Option<Vec<NodeTaint>>,
    /// Label keys kubeflavor owns after the change (store in the binding's status).
    pub applied_labels: BTreeSet<String>,
    /// Taints (key, effect) kubeflavor owns after the change (store in the binding's
    /// status).
    pub applied_taints: Vec<(String, String)>,
    /// The applied record to write on the Node with the change (`applied_labels` and
    /// `applied_taints`), or `None` when the Node carries it already.
    pub record: Option<AppliedRecord>,
    /// Where the node stands after the change (the binding's Flavored condition).
    pub outcome: FlavorOutcome,
}

/// Where a bound node stands once its change is applied: the binding's Flavored condition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlavorOutcome {
    /// The node carries the flavor's labels and taints.
    Applied,
    /// The binding is revoked: the flavor is gone and the node is tainted NoExecute.
    Revoked,
    /// The Flavor does not exist or is invalid: nothing can be asserted about the node.
    #[default]
    FlavorMissing,
    /// No binding names the node any more: what kubeflavor gave it is gone, and it is
    /// untrusted again (the unverified taint).
    Released,
}

impl FlavorOutcome {
    /// The node carries its flavor: the Flavored condition's status is True.
    pub fn is_flavored(self) -> bool {
        self == FlavorOutcome::Applied
    }

    /// The Flavored condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            FlavorOutcome::Applied => "Applied",
            FlavorOutcome::Revoked => "Revoked",
            FlavorOutcome::FlavorMissing => "FlavorMissing",
            FlavorOutcome::Released => "Released",
        }
    }

    /// The Flavored condition's message.
    pub fn message(self) -> &'static str {
        match self {
            FlavorOutcome::Applied => "the Node carries the flavor's labels and taints",
            FlavorOutcome::Revoked => {
                "the binding is revoked: flavor labels removed, NoExecute taint set"
            }
            FlavorOutcome::FlavorMissing => "the Flavor does not exist or is invalid",
            FlavorOutcome::Released => {
                "no binding names the node: flavor labels and taints removed, unverified taint set"
            }
        }
    }
}

impl NodeChange {
    /// The node carries its flavor after the change.
    pub fn flavored(&self) -> bool {
        self.outcome.is_flavored()
    }

    /// Nothing to patch on the Node.
    pub fn is_empty(&self) -> bool {
        self.set_labels.is_empty()
            && self.remove_labels.is_empty()
            && self.taints.is_none()
            && self.record.is_none()
    }

    /// The JSON merge patch body for the Node. It carries `metadata.resourceVersion`, so the
    /// API server refuses it with 409 if the Node changed since it was read (the taint list
    /// is replaced whole, so a concurrent change must not be overwritten). The applied
    /// record travels in the same patch as what it records: both land, or neither.
    pub fn to_merge_patch(&self, resource_version: &str) -> Value {
        let mut metadata = serde_json::Map::new();
        metadata.insert("resourceVersion".into(), json!(resource_version));
        if let Some(record) = &self.record {
            metadata.insert(
                "annotations".into(),
                json!({ APPLIED_ANNOTATION: record.encode() }),
            );
        }
        if !self.set_labels.is_empty() || !self.remove_labels.is_empty() {
            let mut labels = serde_json::Map::new();
            for (k, v) in &self.set_labels {
                labels.insert(k.clone(), json!(v));
            }
            for k in &self.remove_labels {
                labels.insert(k.clone(), Value::Null);
            }
            metadata.insert("labels".into(), Value::Object(labels));
        }
        let mut patch = json!({ "metadata": metadata });
        if let Some(taints) = &self.taints {
            let list: Vec<Value> = taints.iter().map(taint_json).collect();
            patch["spec"] = json!({ "taints": list });
        }
        patch
    }
}

fn taint_json(t: &NodeTaint) -> Value {
    let mut o = serde_json::Map::new();
    o.insert("key".into(), json!(t.key));
    if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty()) {
        o.insert("value".into(), json!(v));
    }
    o.insert("effect".into(), json!(t.effect));
    if let Some(at) = t.time_added {
        // Plain metav1.Time: RFC 3339 with second precision.
        o.insert(
            "timeAdded".into(),
            json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
    }
    Value::Object(o)
}

impl NodeFacts {
    /// The Node after a change (what the API server would hold after the patch).
    pub fn apply(&self, change: &NodeChange) -> NodeFacts {
        let mut labels = self.labels.clone();
        for k in &change.remove_labels {
            labels.remove(k);
        }
        labels.extend(change.set_labels.clone());
        NodeFacts {
            labels,
            taints: change.taints.clone().unwrap_or_else(|| self.taints.clone()),
            record: change
                .record
                .as_ref()
                .map(AppliedRecord::encode)
                .or_else(|| self.record.clone()),
        }
    }

    /// What the Node's applied record says kubeflavor set (see
    /// [`AppliedRecord::of_annotation`]).
    pub fn applied_record(&self) -> Option<AppliedRecord> {
        AppliedRecord::of_annotation(self.record.as_deref())
    }
}

/// A taint of kubeflavor's own, without a value.
fn own_taint(key: &str, effect: TaintEffect) -> NodeTaint {
    NodeTaint {
        key: key.into(),
        value: None,
        effect: effect.to_string(),
        time_added: None,
    }
}

/// The labels and taints kubeflavor wants on the node: the input labels go with the
/// flavor, so a revoked node or one whose Flavor is gone carries neither.
fn wanted(
    flavor: Option<&FlavorRules>,
    flavor_name: &FlavorName,
    binding: &BindingState,
) -> (BTreeMap<String, String>, Vec<NodeTaint>) {
    let unverified = own_taint(UNVERIFIED_TAINT, TaintEffect::NoSchedule);
    if binding.revoked {
        // Unverified too: should an admin remove the revoked taint, the node is still
        // kept from new pods until it is judged again.
        let revoked_taint = own_taint(REVOKED_TAINT, TaintEffect::NoExecute);
        return (BTreeMap::new(), vec![revoked_taint, unverified]);
    }
    let Some(rules) = flavor else {
        // The Flavor object is gone: nothing can be asserted about the node any more, so
        // it is released (untrusted again) until the Flavor is back.
        return (BTreeMap::new(), vec![unverified]);
    };
    let mut labels: BTreeMap<String, String> = rules
        .labels()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.extend(binding.input_labels.node_labels());
    labels.extend(binding.placement.labels.clone());
    labels.insert(FLAVOR_LABEL.into(), flavor_name.to_string());
    if let Some(level) = rules.trust_level() {
        labels.insert(TRUST_LEVEL_LABEL.into(), level.to_string());
    }
    let mut taints: Vec<NodeTaint> = rules.taints().iter().map(NodeTaint::from_taint).collect();
    if !binding.placement.allowed_by(rules.allowed_sites()) {
        taints.push(own_taint(SITE_NOT_ALLOWED_TAINT, TaintEffect::NoSchedule));
    }
    (labels, taints)
}

/// Where the CSR that created a binding stands, as the node loop finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingCsr {
    Approved,
    /// Pending, or denied.
    NotApproved,
    /// Deleted (kube-controller-manager removes decided CSRs after an hour).
    Gone,
}

/// What a binding tells about its Node's holder, before its CSR is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HolderFacts {
    /// The binding is revoked.
    pub revoked: bool,
    /// The binding's status records that it flavored its Node (labels or taints applied,
    /// or the Flavored condition).
    pub flavored_before: bool,
}

/// P3 (binding): whether a Node of a binding's name is the token holder's to act on.
///
/// A revoked binding always acts on its Node (to take the flavor away). Once the binding
/// has flavored its Node, that Node (and one re-created under the name) is the holder's.
/// Otherwise only the binding's CSR can tell: until it is approved the holder has no node
/// credentials, so a Node that is there belongs to someone else (a kubelet that joined
/// another way, an admin) and must not get the token's flavor; a binding never flavored
/// whose CSR is gone is not trusted either, as the CSR can no longer show it was approved.
///
/// `csr` is where the binding's CSR stands, `None` when it has not been read: the answer
/// is then `None` when only the CSR can tell (read it and ask again), so the CSR is read
/// only for a binding that never flavored its Node.
pub fn node_is_the_holders(binding: HolderFacts, csr: Option<BindingCsr>) -> Option<bool> {
    if binding.revoked || binding.flavored_before {
        return Some(true);
    }
    csr.map(|csr| csr == BindingCsr::Approved)
}

/// Why a binding is revoked: the reason and message of its Revoked condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// `node revoke`.
    ByAdmin,
    /// `token revoke ID --nodes`: every node bound to the token.
    TokenRevoked(crate::token::TokenId),
}

impl Revocation {
    /// The Revoked condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Revocation::ByAdmin => "RevokedByAdmin",
            Revocation::TokenRevoked(_) => "TokenRevoked",
        }
    }

    /// The Revoked condition's message.
    pub fn message(&self) -> String {
        match self {
            Revocation::ByAdmin => "revoked with 'kubeflavor node revoke'".to_string(),
            Revocation::TokenRevoked(id) => {
                format!("revoked with 'kubeflavor token revoke {id} --nodes'")
            }
        }
    }
}

/// The change that gives the node exactly the state its binding and Flavor call for.
///
/// - flavored (Flavor present, not revoked): the flavor's labels, `FLAVOR_LABEL=<name>`,
///   `TRUST_LEVEL_LABEL=<n>` when the flavor has a level, the flavor's taints, and no
///   `UNVERIFIED_TAINT`;
/// - revoked: no flavor labels, no flavor taints, a NoExecute `REVOKED_TAINT` and the
///   NoSchedule `UNVERIFIED_TAINT`;
/// - Flavor missing: released, no flavor labels or taints, the `UNVERIFIED_TAINT`;
/// - labels and taints kubeflavor set before (the Node's applied record, and the binding's
///   status for a Node flavored before the record existed) but no longer wants are
///   removed; nothing else is touched, and existing taints keep their order and
///   `timeAdded`;
/// - the Node's applied record is rewritten, in the same patch, when it changes.
pub fn desired_node_state(
    flavor: Option<&FlavorRules>,
    flavor_name: &FlavorName,
    binding: &BindingState,
    node: &NodeFacts,
) -> NodeChange {
    let (want_labels, want_taints) = wanted(flavor, flavor_name, binding);
    let outcome = match (binding.revoked, flavor) {
        (true, _) => FlavorOutcome::Revoked,
        (false, Some(_)) => FlavorOutcome::Applied,
        (false, None) => FlavorOutcome::FlavorMissing,
    };
    let owned = binding.with_record(node.applied_record().as_ref());
    change_to(want_labels, want_taints, outcome, &owned, node)
}

/// The change that brings `node` to `want_labels` and `want_taints`, removing what
/// `owned` says kubeflavor set and no longer wants, and recording what it sets.
fn change_to(
    want_labels: BTreeMap<String, String>,
    want_taints: Vec<NodeTaint>,
    outcome: FlavorOutcome,
    owned: &BindingState,
    node: &NodeFacts,
) -> NodeChange {
    let (set_labels, remove_labels) = label_change(&want_labels, owned, node);
    let applied_labels: BTreeSet<String> = want_labels.keys().cloned().collect();
    let applied_taints: Vec<(String, String)> = want_taints
        .iter()
        .map(|t| (t.key.clone(), t.effect.clone()))
        .collect();
    let record = AppliedRecord::new(&applied_labels, &applied_taints);
    let record = (node.record.as_deref() != Some(record.encode().as_str())).then_some(record);
    // The binding's status lists what the binding gave its Node: the unverified taint is
    // no gift (a status listing it would read as a Node flavored before, see
    // `HolderFacts::flavored_before`); the record on the Node keeps it.
    let applied_taints: Vec<(String, String)> = applied_taints
        .into_iter()
        .filter(|(key, _)| key != UNVERIFIED_TAINT)
        .collect();
    NodeChange {
        set_labels,
        remove_labels,
        taints: taint_change(&want_taints, outcome.is_flavored(), owned, node),
        applied_labels,
        applied_taints,
        record,
        outcome,
    }
}

impl BindingState {
    /// What kubeflavor set, as far as anything recorded it: this state's `applied_*`
    /// (the binding's status) and the Node's applied record together.
    fn with_record(&self, record: Option<&AppliedRecord>) -> BindingState {
        let mut owned = self.clone();
        if let Some(record) = record {
            owned.applied_labels.extend(record.labels.iter().cloned());
            for pair in record.taint_pairs() {
                if !owned.applied_taints.contains(&pair) {
                    owned.applied_taints.push(pair);
                }
            }
        }
        owned
    }
}

/// The change for a Node that no live FlavorBinding vouches for any more (its binding was
/// deleted) while it carries kubeflavor's flavor label ([`FLAVOR_LABEL`], which only
/// kubeflavor sets: NodeRestriction keeps the kubelet off it) or kubeflavor's applied
/// record. Nothing vouches for the node now, so it loses kubeflavor's own labels and every
/// label and taint its applied record names, and gets the unverified taint back (P2
/// (trusted labels), P3 (binding), P7). A revoked taint it carries stays: deleting a
/// binding never makes a node more trusted.
///
/// `flavor` (the rules, now, of the Flavor its flavor label names) is read only for a
/// Node without a record, one flavored before the record existed: it is then the best
/// guess left. A Node with a record is released from the record alone, whatever happened
/// to the Flavor since.
pub fn released_node_state(flavor: Option<&FlavorRules>, node: &NodeFacts) -> NodeChange {
    let revoked_taint = own_taint(REVOKED_TAINT, TaintEffect::NoExecute);
    let revoked = node
        .taints
        .iter()
        .any(|t| t.same_slot(&revoked_taint.key, &revoked_taint.effect));
    let record = node.applied_record();
    let legacy = match (&record, flavor) {
        (None, Some(rules)) => AppliedRecord {
            labels: rules.labels().keys().map(|k| k.to_string()).collect(),
            taints: rules
                .taints()
                .iter()
                .map(|t| crate::node::applied_record::RecordedTaint {
                    key: t.key.to_string(),
                    effect: t.effect.to_string(),
                })
                .collect(),
        },
        _ => AppliedRecord::default(),
    };
    let owned = BindingState {
        revoked,
        ..BindingState::default()
    }
    .with_record(Some(&record.unwrap_or(legacy)));
    let mut want_taints = Vec::new();
    if revoked {
        want_taints.push(revoked_taint);
    }
    want_taints.push(own_taint(UNVERIFIED_TAINT, TaintEffect::NoSchedule));
    change_to(
        BTreeMap::new(),
        want_taints,
        FlavorOutcome::Released,
        &owned,
        node,
    )
}

/// The labels to set (wanted, and missing or different on the node) and to remove (owned
/// by kubeflavor, on the node, and no longer wanted). kubeflavor owns every label under
/// [`INPUT_LABEL_PREFIX`]: one that is not the binding's (an admin's, a stale one) goes,
/// so what a workload reads there is what the portal said for this node and nothing else.
fn label_change(
    want: &BTreeMap<String, String>,
    binding: &BindingState,
    node: &NodeFacts,
) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let set: BTreeMap<String, String> = want
        .iter()
        .filter(|(k, v)| node.labels.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let owned = binding
        .applied_labels
        .iter()
        .map(String::as_str)
        .chain([FLAVOR_LABEL, TRUST_LEVEL_LABEL])
        .chain(
            node.labels
                .keys()
                .map(String::as_str)
                .filter(|k| k.starts_with(INPUT_LABEL_PREFIX) || is_placement_label(k)),
        );
    let remove: BTreeSet<String> = owned
        .filter(|k| !want.contains_key(*k) && node.labels.contains_key(*k))
        .map(str::to_owned)
        .collect();
    (set, remove)
}

/// The node's full new taint list, or `None` when it is right already: taints kubeflavor
/// owns but no longer wants are dropped, wanted ones added or given their value; the rest
/// keep their order and `timeAdded`.
fn taint_change(
    want: &[NodeTaint],
    flavored: bool,
    binding: &BindingState,
    node: &NodeFacts,
) -> Option<Vec<NodeTaint>> {
    let drop_taint = |t: &NodeTaint| {
        let previously_applied = binding
            .applied_taints
            .iter()
            .any(|(k, e)| t.same_slot(k, e));
        let own_key = t.key == REVOKED_TAINT || (flavored && t.key == UNVERIFIED_TAINT);
        let still_wanted = want.iter().any(|w| t.same_slot(&w.key, &w.effect));
        (previously_applied || own_key) && !still_wanted
    };
    let mut taints: Vec<NodeTaint> = node
        .taints
        .iter()
        .filter(|t| !drop_taint(t))
        .cloned()
        .collect();
    for w in want {
        match taints.iter_mut().find(|t| t.same_slot(&w.key, &w.effect)) {
            Some(t) if t.value_str() == w.value_str() => {}
            Some(t) => t.value = w.value.clone(),
            None => taints.push(w.clone()),
        }
    }
    (taints != node.taints).then_some(taints)
}
