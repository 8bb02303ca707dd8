//! The applied record: what kubeflavor put on a Node, written on the Node itself.
//!
//! Every patch kubeflavor makes to a Node carries, in the same JSON merge patch, the
//! annotation [`APPLIED_ANNOTATION`] naming the label keys and the taints (key, effect)
//! kubeflavor set there. Releasing the Node (no live, unrevoked binding, its Flavor gone)
//! removes what the record names; it never recomputes it from the Flavor's current spec,
//! which may have been edited or deleted while no controller ran, nor from the binding,
//! which may be gone (P7: a Node without a live, unrevoked binding carries none of
//! kubeflavor's trusted labels). Written in the same patch as the labels, the record and
//! the Node cannot disagree: the API server applies both or neither.
//!
//! The record is on the Node, so a kubelet could otherwise rewrite it (NodeRestriction
//! leaves a kubelet its own Node's annotations): a ValidatingAdmissionPolicy `install`
//! ships refuses any request of the `system:nodes` group that sets, changes or removes it
//! (see [`kubelet_may_not_touch`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The Node annotation holding the record (JSON, see [`AppliedRecord`]).
pub const APPLIED_ANNOTATION: &str = "kubeflavor.io/applied";

/// A taint as the record names it: the API server's identity of a taint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RecordedTaint {
    pub key: String,
    pub effect: String,
}

/// What kubeflavor set on a Node: label keys and taints (key, effect). Sets, so the
/// encoding is canonical (sorted, no duplicates) and a record compares by its text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedRecord {
    #[serde(default)]
    pub labels: BTreeSet<String>,
    #[serde(default)]
    pub taints: BTreeSet<RecordedTaint>,
}

/// The annotation's text is not a record.
#[derive(Debug, thiserror::Error)]
#[error(
    "the Node's {APPLIED_ANNOTATION} annotation is not kubeflavor's record \
     (JSON {{\"labels\":[...],\"taints\":[{{\"key\":...,\"effect\":...}}]}}): {0}"
)]
pub struct RecordError(#[from] serde_json::Error);

impl AppliedRecord {
    /// The record of `labels` and `taints` (key, effect).
    pub fn new<'a>(
        labels: impl IntoIterator<Item = &'a String>,
        taints: impl IntoIterator<Item = &'a (String, String)>,
    ) -> AppliedRecord {
        AppliedRecord {
            labels: labels.into_iter().cloned().collect(),
            taints: taints
                .into_iter()
                .map(|(key, effect)| RecordedTaint {
                    key: key.clone(),
                    effect: effect.clone(),
                })
                .collect(),
        }
    }

    /// The annotation's value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a record of strings serializes")
    }

    /// Reads an annotation's value.
    pub fn decode(text: &str) -> Result<AppliedRecord, RecordError> {
        Ok(serde_json::from_str(text)?)
    }

    /// What a Node's annotation says kubeflavor set: `None` without the annotation. An
    /// annotation that does not read (only an admin can write it) still marks the Node as
    /// one kubeflavor judged, with nothing known beyond kubeflavor's own keys: it reads as
    /// an empty record, so the Node is still released, never left trusted.
    pub fn of_annotation(annotation: Option<&str>) -> Option<AppliedRecord> {
        annotation.map(|text| AppliedRecord::decode(text).unwrap_or_default())
    }

    /// The recorded taints as (key, effect) pairs.
    pub fn taint_pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.taints
            .iter()
            .map(|t| (t.key.clone(), t.effect.clone()))
    }
}

/// The ValidatingAdmissionPolicy (and its binding) that keeps kubelets off the record.
pub const POLICY_NAME: &str = "kubeflavor-applied-record";

/// The Node resources the policy matches, CREATE and UPDATE: `nodes/status` too, as the
/// API server keeps an update's metadata through the Node's status subresource (only the
/// spec is reset there, pkg/registry/core/node/strategy.go).
pub const RESOURCES: [&str; 2] = ["nodes", "nodes/status"];

/// The policy's `matchConditions` expression: the requester is a kubelet (any identity
/// in `system:nodes`, whatever its name).
pub fn applies_to() -> String {
    format!(
        "'{}' in request.userInfo.groups",
        crate::admission::unverified::NODES_GROUP
    )
}

/// `object`'s record as a list of zero or one value, so an absent annotation and an empty
/// one differ.
fn record_list(object: &str) -> String {
    format!(
        "has({object}.metadata.annotations) && '{APPLIED_ANNOTATION}' in {object}.metadata.annotations \
         ? [{object}.metadata.annotations['{APPLIED_ANNOTATION}']] : []"
    )
}

/// The policy's variables (name, CEL expression): the record after the request and
/// before it (none before a CREATE, where `oldObject` is null).
pub fn variables() -> [(&'static str, String); 2] {
    [
        ("recordNow", record_list("object")),
        (
            "recordBefore",
            format!(
                "request.operation == 'UPDATE' ? ({}) : []",
                record_list("oldObject")
            ),
        ),
    ]
}

/// The policy's one validation: the record is what it was.
pub const VALIDATION: &str = "variables.recordNow == variables.recordBefore";

/// The message of a refusal.
pub fn refusal() -> String {
    format!(
        "a kubelet may not set, change or remove the {APPLIED_ANNOTATION} annotation: it is \
         kubeflavor's record of what it put on the Node, which release removes"
    )
}

/// The rule of the admission policy on the record: a request of a kubelet (`old` and
/// `new` the annotation's value before and after) is refused when it sets, changes or
/// removes the record. Anyone else (the controller, an admin) passes. The model the
/// policy's expression implements, for tests that run it.
pub fn kubelet_may_not_touch(kubelet: bool, old: Option<&str>, new: Option<&str>) -> bool {
    !kubelet || old == new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, e)| (k.to_string(), e.to_string()))
            .collect()
    }

    #[test]
    fn the_record_encodes_canonically_and_reads_back() {
        let labels = ["b/x".to_string(), "a/y".to_string(), "b/x".to_string()];
        let taints = pairs(&[("t", "NoSchedule"), ("a", "NoExecute"), ("t", "NoSchedule")]);
        let record = AppliedRecord::new(&labels, &taints);
        assert_eq!(
            record.encode(),
            r#"{"labels":["a/y","b/x"],"taints":[{"key":"a","effect":"NoExecute"},{"key":"t","effect":"NoSchedule"}]}"#
        );
        assert_eq!(AppliedRecord::decode(&record.encode()).unwrap(), record);
        let reordered = AppliedRecord::new(labels.iter().rev(), taints.iter().rev());
        assert_eq!(reordered.encode(), record.encode());
    }

    #[test]
    fn missing_fields_read_as_empty_and_garbage_as_an_empty_record() {
        assert_eq!(
            AppliedRecord::decode("{}").unwrap(),
            AppliedRecord::default()
        );
        assert!(AppliedRecord::decode("[1]").is_err());
        assert!(
            AppliedRecord::decode("x")
                .unwrap_err()
                .to_string()
                .contains(APPLIED_ANNOTATION)
        );
        assert_eq!(AppliedRecord::of_annotation(None), None);
        assert_eq!(
            AppliedRecord::of_annotation(Some("not json")),
            Some(AppliedRecord::default()),
            "an unreadable record still marks the Node as judged"
        );
    }

    #[test]
    fn a_kubelet_may_not_set_change_or_remove_the_record() {
        let r = Some(r#"{"labels":[]}"#);
        assert!(kubelet_may_not_touch(true, r, r));
        assert!(kubelet_may_not_touch(true, None, None));
        assert!(!kubelet_may_not_touch(true, None, r), "set");
        assert!(!kubelet_may_not_touch(true, r, None), "removed");
        assert!(!kubelet_may_not_touch(true, r, Some("{}")), "changed");
        assert!(
            kubelet_may_not_touch(false, r, None),
            "admins and the controller"
        );
    }

    /// The policy's expressions compare the record before and after, absent and empty
    /// apart, and apply to the kubelets' group.
    #[test]
    fn the_policy_compares_the_record_before_and_after() {
        assert_eq!(applies_to(), "'system:nodes' in request.userInfo.groups");
        let [(now, now_expr), (before, before_expr)] = variables();
        assert_eq!((now, before), ("recordNow", "recordBefore"));
        assert_eq!(
            now_expr,
            "has(object.metadata.annotations) && 'kubeflavor.io/applied' in object.metadata.annotations \
             ? [object.metadata.annotations['kubeflavor.io/applied']] : []"
        );
        assert!(before_expr.starts_with("request.operation == 'UPDATE' ? (has(oldObject."));
        assert!(before_expr.ends_with(": []"));
        assert_eq!(VALIDATION, "variables.recordNow == variables.recordBefore");
        assert_eq!(RESOURCES, ["nodes", "nodes/status"]);
    }
}
