//! Untrusted until judged: the rules of the MutatingAdmissionPolicy `install` ships, which
//! puts [`UNVERIFIED_TAINT`]`:NoSchedule` on every Node a kubelet creates, whatever the
//! kubelet asked. Without it the taint is there only when the kubelet asks for it
//! (`registerWithTaints`), so a kubelet that leaves it out (a hostile one, kubeadm's joins,
//! a Node its kubelet re-creates) registers schedulable before anyone judged it.
//!
//! The policy applies to CREATE of Nodes only: the controller removes the taint when it
//! flavors the Node (an UPDATE, which must not get it back), a Node its kubelet re-creates
//! is a CREATE again, and nothing but the taint changes. It applies to requesters in
//! [`NODES_GROUP`] only (every kubelet identity, whatever its name), so a Node an admin
//! creates is left as it is.
//!
//! The mutation is a JSON patch, not an apply configuration: `spec.taints` is an atomic
//! list (`+listType=atomic` in k8s.io/api/core/v1), and upstream refuses apply
//! configurations that change atomic lists ("Apply configurations may not modify atomic
//! structs, maps or arrays", MutatingAdmissionPolicy's `applyConfiguration` field doc;
//! merging one would replace the kubelet's taints). A JSON patch `add` at `/spec/taints/-`
//! appends, so the kubelet's taints keep their order.

use crate::flavor::UNVERIFIED_TAINT;

/// The group of every kubelet identity (`system:node:<name>`).
pub const NODES_GROUP: &str = "system:nodes";

/// The name of the policy and of its binding.
pub const POLICY_NAME: &str = "kubeflavor-unverified-nodes";

/// The effect the policy gives the taint.
pub const EFFECT: &str = "NoSchedule";

/// The resource and operation the policy matches: CREATE of core v1 Nodes.
pub const RESOURCE: &str = "nodes";
pub const OPERATION: &str = "CREATE";

/// A named CEL condition; the policy is skipped for a request where one is false.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub name: &'static str,
    pub expression: String,
}

/// `s` as a CEL string literal.
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The policy's `matchConditions`: the requester is a kubelet (in [`NODES_GROUP`]), and
/// the Node does not carry the taint yet (key and effect: a taint with the same key and
/// effect but another value is the same taint to the API server, which refuses a Node
/// carrying both).
pub fn match_conditions() -> Vec<Condition> {
    vec![
        Condition {
            name: "created-by-a-kubelet",
            expression: format!("{} in request.userInfo.groups", cel_string(NODES_GROUP)),
        },
        Condition {
            name: "not-tainted-yet",
            expression: format!(
                "!(has(object.spec.taints) && object.spec.taints.exists(t, t.key == {key} && t.effect == {effect}))",
                key = cel_string(UNVERIFIED_TAINT),
                effect = cel_string(EFFECT),
            ),
        },
    ]
}

/// The mutation's JSON patch expression: append the taint to `spec.taints`, or create the
/// list with it when the Node has none.
pub fn json_patch() -> String {
    let taint = format!(
        "Object.spec.taints{{key: {key}, effect: {effect}}}",
        key = cel_string(UNVERIFIED_TAINT),
        effect = cel_string(EFFECT),
    );
    format!(
        "has(object.spec.taints) \
         ? [JSONPatch{{op: 'add', path: '/spec/taints/-', value: {taint}}}] \
         : [JSONPatch{{op: 'add', path: '/spec/taints', value: [{taint}]}}]"
    )
}

/// What the policy does to a Node created by a requester in `groups` with `taints` (key,
/// effect): the taints the API server stores. The model the expressions implement, for
/// tests that run them.
pub fn taints_after_create(groups: &[&str], taints: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut after: Vec<(String, String)> = taints
        .iter()
        .map(|(k, e)| (k.to_string(), e.to_string()))
        .collect();
    let kubelet = groups.contains(&NODES_GROUP);
    let tainted = taints
        .iter()
        .any(|(k, e)| *k == UNVERIFIED_TAINT && *e == EFFECT);
    if kubelet && !tainted {
        after.push((UNVERIFIED_TAINT.to_string(), EFFECT.to_string()));
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy applies to kubelets only: the condition names their group and reads
    /// the requester's groups (not the name, which an admin can choose).
    #[test]
    fn only_kubelets_are_matched() {
        let conditions = match_conditions();
        assert_eq!(
            conditions[0].expression,
            "'system:nodes' in request.userInfo.groups"
        );
    }

    /// A Node that already carries the taint (any value) is skipped: adding it again
    /// would make the API server refuse the Node (duplicate key and effect).
    #[test]
    fn a_tainted_node_is_left_as_is() {
        let conditions = match_conditions();
        assert_eq!(
            conditions[1].expression,
            "!(has(object.spec.taints) && object.spec.taints.exists(t, t.key == 'kubeflavor.io/unverified' \
             && t.effect == 'NoSchedule'))"
        );
        assert_eq!(
            taints_after_create(&["system:nodes"], &[(UNVERIFIED_TAINT, "NoSchedule")]),
            [(UNVERIFIED_TAINT.to_string(), "NoSchedule".to_string())]
        );
    }

    /// The patch appends (other taints keep their order) and creates the list when the
    /// Node has none; it writes the taint and nothing else.
    #[test]
    fn the_patch_appends_the_taint_only() {
        let patch = json_patch();
        assert_eq!(
            patch,
            "has(object.spec.taints) ? [JSONPatch{op: 'add', path: '/spec/taints/-', value: \
             Object.spec.taints{key: 'kubeflavor.io/unverified', effect: 'NoSchedule'}}] : \
             [JSONPatch{op: 'add', path: '/spec/taints', value: [Object.spec.taints{key: \
             'kubeflavor.io/unverified', effect: 'NoSchedule'}]}]"
        );
        assert_eq!(patch.matches("op: 'add'").count(), 2);
        assert!(!patch.contains("replace") && !patch.contains("remove"));
    }

    #[test]
    fn the_model_taints_kubelets_only() {
        let kubelet = ["system:nodes", "system:authenticated"];
        assert_eq!(
            taints_after_create(&kubelet, &[("a", "NoExecute")]),
            [
                ("a".to_string(), "NoExecute".to_string()),
                (UNVERIFIED_TAINT.to_string(), "NoSchedule".to_string())
            ]
        );
        assert_eq!(
            taints_after_create(&["system:masters"], &[]),
            Vec::<(String, String)>::new()
        );
        // Another effect of the same key is another taint: it gets NoSchedule too.
        assert_eq!(
            taints_after_create(&kubelet, &[(UNVERIFIED_TAINT, "NoExecute")]).len(),
            2
        );
    }
}
