use serde_json::{Value, json};

use super::attrs;
use crate::admission::{admit, mutating_policy_errors};
use crate::authz::testutil::{MemReader, admin, node_user, user};
use crate::types::{ApiError, IdentityKind, Operation, UserInfo};

const GROUP: &str = "admissionregistration.k8s.io";
const TAINT: &str = "kubeflavor.io/unverified";

/// kubeflavor's policy as `install` ships it (kubeflavor_core::admission::unverified).
fn unverified_policy(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["nodes"]}]},
        "matchConditions": [
            {"name": "created-by-a-kubelet", "expression": "'system:nodes' in request.userInfo.groups"},
            {"name": "not-tainted-yet", "expression": "!(has(object.spec.taints) && object.spec.taints.exists(t, t.key == 'kubeflavor.io/unverified' && t.effect == 'NoSchedule'))"},
        ],
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
            "has(object.spec.taints) ? [JSONPatch{op: 'add', path: '/spec/taints/-', value: Object.spec.taints{key: 'kubeflavor.io/unverified', effect: 'NoSchedule'}}] : [JSONPatch{op: 'add', path: '/spec/taints', value: [Object.spec.taints{key: 'kubeflavor.io/unverified', effect: 'NoSchedule'}]}]"}}],
    }})
}

fn bound(reader: MemReader, policy: Value) -> MemReader {
    let name = policy["metadata"]["name"].as_str().unwrap().to_string();
    reader
        .with(GROUP, "mutatingadmissionpolicies", policy)
        .with(
            GROUP,
            "mutatingadmissionpolicybindings",
            json!({"metadata": {"name": name}, "spec": {"policyName": name}}),
        )
}

fn reader() -> MemReader {
    bound(MemReader::new(), unverified_policy("unverified"))
}

fn node(name: &str, taints: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "spec": {"taints": taints}})
}

fn write(
    reader: &MemReader,
    who: UserInfo,
    op: Operation,
    old: Option<&Value>,
    obj: &Value,
) -> Result<Value, ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap();
    let verb = if op == Operation::Create {
        "create"
    } else {
        "update"
    };
    let mut obj = obj.clone();
    admit(
        &attrs(who, verb, "", "nodes", "", "", name),
        op,
        old,
        Some(&mut obj),
        reader,
    )?;
    Ok(obj)
}

fn taints(obj: &Value) -> Value {
    obj["spec"]["taints"].clone()
}

#[test]
fn a_kubelet_created_node_gets_the_taint_after_its_own() {
    let asked = json!([{"key": "a", "effect": "NoExecute"}, {"key": "b", "effect": "NoSchedule"}]);
    let stored = write(
        &reader(),
        node_user("n1"),
        Operation::Create,
        None,
        &node("n1", asked),
    )
    .unwrap();
    assert_eq!(
        taints(&stored),
        json!([{"key": "a", "effect": "NoExecute"}, {"key": "b", "effect": "NoSchedule"},
               {"key": TAINT, "effect": "NoSchedule"}])
    );
}

/// A Node sent without a spec has one upstream (a typed struct), so the patch applies.
#[test]
fn a_node_without_taints_or_spec_gets_the_list() {
    let bare = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    let stored = write(&reader(), node_user("n1"), Operation::Create, None, &bare).unwrap();
    assert_eq!(
        taints(&stored),
        json!([{"key": TAINT, "effect": "NoSchedule"}])
    );
}

#[test]
fn a_node_carrying_the_taint_is_left_as_is() {
    let asked = json!([{"key": TAINT, "value": "x", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]);
    let stored = write(
        &reader(),
        node_user("n1"),
        Operation::Create,
        None,
        &node("n1", asked.clone()),
    )
    .unwrap();
    assert_eq!(taints(&stored), asked);
}

#[test]
fn an_admin_created_node_is_untouched() {
    let obj = node("n1", json!([{"key": "a", "effect": "NoExecute"}]));
    let stored = write(&reader(), admin(), Operation::Create, None, &obj).unwrap();
    assert_eq!(stored, obj);
}

/// The controller's update removing the taint is not a CREATE: it stays removed, even
/// for a requester the conditions match (NodeRestriction keeps kubelets themselves from
/// changing taints at all).
#[test]
fn an_update_is_not_matched() {
    let in_nodes = user(IdentityKind::ClientCert, "in-nodes", &["system:nodes"]);
    let old = node("n1", json!([{"key": TAINT, "effect": "NoSchedule"}]));
    let new = node("n1", json!([]));
    for who in [admin(), in_nodes] {
        let stored = write(&reader(), who, Operation::Update, Some(&old), &new).unwrap();
        assert_eq!(taints(&stored), json!([]));
    }
}

#[test]
fn without_a_binding_nothing_happens() {
    let reader = MemReader::new().with(
        GROUP,
        "mutatingadmissionpolicies",
        unverified_policy("unverified"),
    );
    let obj = node("n1", json!([]));
    assert_eq!(
        write(&reader, node_user("n1"), Operation::Create, None, &obj).unwrap(),
        obj
    );
}

/// Captured from a real v1.36 API server (mutating_policy.rs module comment).
#[test]
fn a_failing_condition_denies_with_fail_and_skips_with_ignore() {
    let mut policy = unverified_policy("probe-err");
    policy["spec"]["matchConditions"] =
        json!([{"name": "e", "expression": "object.metadata.labels['nope'] == 'x'"}]);
    let err = write(
        &bound(MemReader::new(), policy.clone()),
        node_user("n1"),
        Operation::Create,
        None,
        &node("n1", json!([])),
    )
    .unwrap_err();
    let message = "policy 'probe-err' with binding 'probe-err' denied request: expression 'object.metadata.labels['nope'] == 'x'' resulted in error: no such key: labels";
    assert_eq!((err.code, err.reason.as_deref()), (403, Some("Invalid")));
    assert_eq!(err.message, message);
    assert_eq!(
        err.details,
        Some(json!({"name": "n1", "kind": "nodes", "causes": [{"message": message}]}))
    );
    policy["spec"]["failurePolicy"] = json!("Ignore");
    let obj = node("n1", json!([]));
    assert_eq!(
        write(
            &bound(MemReader::new(), policy),
            node_user("n1"),
            Operation::Create,
            None,
            &obj
        )
        .unwrap(),
        obj
    );
}

#[test]
fn a_patch_that_does_not_apply_denies() {
    let mut policy = unverified_policy("probe-err");
    policy["spec"]["mutations"][0]["jsonPatch"]["expression"] =
        json!("[JSONPatch{op: 'add', path: '/spec/nope/x', value: 'a'}]");
    let err = write(
        &bound(MemReader::new(), policy),
        node_user("n1"),
        Operation::Create,
        None,
        &node("n1", json!([])),
    )
    .unwrap_err();
    assert_eq!((err.code, err.reason.as_deref()), (403, Some("Invalid")));
    assert!(
        err.message.starts_with(
            "policy 'probe-err' with binding 'probe-err' denied request: JSON Patch: "
        ),
        "{}",
        err.message
    );
}

/// A later policy dropping the taint makes the IfNeeded policy run again.
#[test]
fn if_needed_reruns_after_a_later_change() {
    let dropper = json!({"metadata": {"name": "zz-drop"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["nodes"]}]},
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'replace', path: '/spec/taints', value: []}]"}}],
    }});
    let reader = bound(reader(), dropper);
    let stored = write(
        &reader,
        node_user("n1"),
        Operation::Create,
        None,
        &node("n1", json!([])),
    )
    .unwrap();
    assert_eq!(
        taints(&stored),
        json!([{"key": TAINT, "effect": "NoSchedule"}])
    );
}

#[test]
fn a_policy_whose_expression_does_not_compile_is_invalid() {
    let mut policy = unverified_policy("bad");
    policy["spec"]["matchConditions"][1]["expression"] = json!("!(has(object.spec.taints) &&(");
    let errors = mutating_policy_errors(&policy);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, "spec.matchConditions[1].expression");
    assert!(
        errors[0].2.starts_with("compilation failed: "),
        "{:?}",
        errors[0]
    );
    assert!(mutating_policy_errors(&unverified_policy("good")).is_empty());
}
