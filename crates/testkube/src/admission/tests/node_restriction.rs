use serde_json::{Value, json};

use super::{assert_admission_forbidden, attrs};
use crate::admission::admit;
use crate::authz::testutil::{MemReader, admin, node_user};
use crate::types::{ApiError, Operation, UserInfo};

fn node_obj(name: &str, labels: Value, taints: Option<Value>) -> Value {
    let mut node =
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}});
    if let Some(taints) = taints {
        node["spec"] = json!({"taints": taints});
    }
    node
}

fn create_node(user: UserInfo, node: &mut Value) -> Result<(), ApiError> {
    admit(
        &attrs(user, "create", "", "nodes", "", "", ""),
        Operation::Create,
        None,
        Some(node),
        &MemReader::new(),
    )
}

fn update_node(user: UserInfo, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    let name = old["metadata"]["name"].as_str().unwrap().to_string();
    let a = attrs(user, "patch", "", "nodes", "", "", &name);
    admit(
        &a,
        Operation::Update,
        Some(old),
        Some(new),
        &MemReader::new(),
    )
}

fn base_labels() -> Value {
    json!({"kubernetes.io/hostname": "worker-1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"})
}

#[test]
fn node_create_with_a_restricted_label_is_refused() {
    let mut labels = base_labels();
    labels["kubeflavor.node-restriction.kubernetes.io/flavor"] = json!("sweet");
    let mut node = node_obj(
        "worker-1",
        labels,
        Some(json!([{"key": "kubeflavor.io/pending", "effect": "NoSchedule"}])),
    );
    assert_admission_forbidden(
        create_node(node_user("worker-1"), &mut node),
        r#"nodes "worker-1" is forbidden: node "worker-1" is not allowed to set the following labels: kubeflavor.node-restriction.kubernetes.io/flavor"#,
        json!({"name": "worker-1", "kind": "nodes"}),
    );
    assert!(
        create_node(admin(), &mut node).is_ok(),
        "only node identities are restricted"
    );
}

#[test]
fn node_create_with_taints_and_kubelet_labels_is_allowed() {
    let mut labels = base_labels();
    for key in [
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "kubelet.kubernetes.io/x",
        "x.kubelet.kubernetes.io/y",
        "example.com/flavor",
        "beta.kubernetes.io/arch",
    ] {
        labels[key] = json!("v");
    }
    let mut node = node_obj(
        "worker-1",
        labels,
        Some(json!([{"key": "kubeflavor.io/pending", "effect": "NoSchedule"}])),
    );
    assert!(create_node(node_user("worker-1"), &mut node).is_ok());
}

#[test]
fn node_may_not_create_another_node() {
    let mut node = node_obj("worker-2", base_labels(), None);
    assert_admission_forbidden(
        create_node(node_user("worker-1"), &mut node),
        r#"nodes "worker-2" is forbidden: node "worker-1" is not allowed to modify node "worker-2""#,
        json!({"name": "worker-2", "kind": "nodes"}),
    );
}

#[test]
fn node_label_updates() {
    let old = node_obj(
        "worker-1",
        base_labels(),
        Some(json!([{"key": "kubeflavor.io/pending", "effect": "NoSchedule"}])),
    );
    for key in [
        "kubeflavor.node-restriction.kubernetes.io/flavor",
        "node-restriction.kubernetes.io/flavor",
    ] {
        let mut new = old.clone();
        new["metadata"]["labels"][key] = json!("sweet");
        assert_admission_forbidden(
            update_node(node_user("worker-1"), &old, &mut new),
            &format!(r#"nodes "worker-1" is forbidden: is not allowed to modify labels: {key}"#),
            json!({"name": "worker-1", "kind": "nodes"}),
        );
    }
    let mut new = old.clone();
    new["metadata"]["labels"]["example.com/flavor"] = json!("sweet");
    assert!(update_node(node_user("worker-1"), &old, &mut new).is_ok());

    // Removing a restricted label an admin set is as forbidden as setting it.
    let mut flavored = old.clone();
    flavored["metadata"]["labels"]["kubeflavor.node-restriction.kubernetes.io/flavor"] =
        json!("sweet");
    let mut removed = old.clone();
    let err = update_node(node_user("worker-1"), &flavored, &mut removed).unwrap_err();
    assert_eq!(
        err.message,
        r#"nodes "worker-1" is forbidden: is not allowed to modify labels: kubeflavor.node-restriction.kubernetes.io/flavor"#
    );
    // Several keys are listed sorted, comma separated.
    let mut many = old.clone();
    many["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    many["metadata"]["labels"]["a.k8s.io/x"] = json!("1");
    let err = update_node(node_user("worker-1"), &old, &mut many).unwrap_err();
    assert!(
        err.message.ends_with(
            "is not allowed to modify labels: a.k8s.io/x, node-role.kubernetes.io/control-plane"
        ),
        "{}",
        err.message
    );
}

#[test]
fn node_taint_updates() {
    let old = node_obj(
        "worker-1",
        base_labels(),
        Some(json!([{"key": "kubeflavor.io/pending", "effect": "NoSchedule"}])),
    );
    let message =
        r#"nodes "worker-1" is forbidden: node "worker-1" is not allowed to modify taints"#;
    let mut added = old.clone();
    added["spec"]["taints"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "kubeflavor.io/extra", "effect": "NoExecute"}));
    assert_admission_forbidden(
        update_node(node_user("worker-1"), &old, &mut added),
        message,
        json!({"name": "worker-1", "kind": "nodes"}),
    );
    let mut emptied = old.clone();
    emptied["spec"]["taints"] = json!([]);
    assert_eq!(
        update_node(node_user("worker-1"), &old, &mut emptied)
            .unwrap_err()
            .message,
        message
    );
    let mut dropped = old.clone();
    dropped["spec"] = json!({});
    assert_eq!(
        update_node(node_user("worker-1"), &old, &mut dropped)
            .unwrap_err()
            .message,
        message
    );
    // Taints take precedence over labels, as upstream checks them first.
    let mut both = added.clone();
    both["metadata"]["labels"]["node-role.kubernetes.io/x"] = json!("");
    assert_eq!(
        update_node(node_user("worker-1"), &old, &mut both)
            .unwrap_err()
            .message,
        message
    );
    // The same taints, spelled with an explicit empty value, are no change.
    let mut same = old.clone();
    same["spec"]["taints"][0]["value"] = json!("");
    assert!(update_node(node_user("worker-1"), &old, &mut same).is_ok());
    // No taints before and none after: a missing list equals an empty one.
    let bare = node_obj("worker-1", base_labels(), None);
    let mut empty = bare.clone();
    empty["spec"] = json!({"taints": []});
    assert!(update_node(node_user("worker-1"), &bare, &mut empty).is_ok());
    assert!(update_node(admin(), &old, &mut added.clone()).is_ok());
}

#[test]
fn node_may_not_update_or_delete_another_node() {
    let other = node_obj("worker-2", base_labels(), None);
    let mut new = other.clone();
    assert!(
        update_node(node_user("worker-1"), &other, &mut new)
            .unwrap_err()
            .message
            .ends_with(r#"node "worker-1" is not allowed to modify node "worker-2""#)
    );
    let a = attrs(
        node_user("worker-1"),
        "delete",
        "",
        "nodes",
        "",
        "",
        "worker-2",
    );
    assert!(admit(&a, Operation::Delete, Some(&other), None, &MemReader::new()).is_err());
}

#[test]
fn node_leases_only_its_own_in_kube_node_lease() {
    let lease = |name: &str, ns: &str| json!({"metadata": {"name": name, "namespace": ns}});
    let create = |name: &str, ns: &str| {
        let a = attrs(
            node_user("worker-1"),
            "create",
            "coordination.k8s.io",
            "leases",
            "",
            ns,
            "",
        );
        admit(
            &a,
            Operation::Create,
            None,
            Some(&mut lease(name, ns)),
            &MemReader::new(),
        )
    };
    assert!(create("worker-1", "kube-node-lease").is_ok());
    assert_admission_forbidden(
        create("worker-2", "kube-node-lease"),
        r#"leases.coordination.k8s.io "worker-2" is forbidden: can only access node lease with the same name as the requesting node"#,
        json!({"name": "worker-2", "group": "coordination.k8s.io", "kind": "leases"}),
    );
    assert!(
        create("worker-1", "default")
            .unwrap_err()
            .message
            .ends_with(r#"can only access leases in the "kube-node-lease" system namespace"#)
    );
}

fn bound_pod(name: &str, node: &str, volumes: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "apps", "uid": format!("uid-{name}")},
           "spec": {"nodeName": node, "serviceAccountName": "app", "volumes": volumes}})
}

fn token_request(pod: Option<&str>, audiences: Value) -> Value {
    let mut request = json!({"spec": {"audiences": audiences}});
    if let Some(pod) = pod {
        request["spec"]["boundObjectRef"] =
            json!({"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": format!("uid-{pod}")});
    }
    request
}

fn request_token(reader: &MemReader, node: &str, request: &mut Value) -> Result<(), ApiError> {
    admit(
        &attrs(
            node_user(node),
            "create",
            "",
            "serviceaccounts",
            "token",
            "apps",
            "app",
        ),
        Operation::Create,
        None,
        Some(request),
        reader,
    )
}

/// `admitServiceAccount`: a kubelet's token must be bound to a pod on its node, for an
/// audience the pod's projected volumes use.
#[test]
fn a_kubelet_token_request_must_be_bound_to_its_own_pod() {
    let api_volume = json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]);
    let reader = MemReader::new()
        .with(
            "",
            "pods",
            bound_pod("here", "worker-1", api_volume.clone()),
        )
        .with("", "pods", bound_pod("there", "worker-2", api_volume))
        .with("", "pods", bound_pod("bare", "worker-1", json!([])));
    assert!(
        request_token(
            &reader,
            "worker-1",
            &mut token_request(Some("here"), json!([]))
        )
        .is_ok()
    );
    let refused = |pod: Option<&str>, audiences: Value| {
        request_token(&reader, "worker-1", &mut token_request(pod, audiences))
            .expect_err("refused")
            .message
    };
    assert!(refused(None, json!([])).contains("node requested token not bound to a pod"));
    assert!(
        refused(Some("there"), json!([]))
            .contains("node requested token bound to a pod scheduled on a different node")
    );
    assert!(refused(Some("bare"), json!([])).contains(
        "audience \"\" not found in pod spec volume, system:node:worker-1 is not authorized"
    ));
    assert!(
        refused(Some("here"), json!(["a", "b"])).contains("node may only request 0 or 1 audiences")
    );
    assert_eq!(
        request_token(
            &reader,
            "worker-1",
            &mut token_request(Some("gone"), json!([]))
        )
        .unwrap_err()
        .code,
        404
    );
    let mut stale = token_request(Some("here"), json!([]));
    stale["spec"]["boundObjectRef"]["uid"] = json!("other");
    assert!(
        request_token(&reader, "worker-1", &mut stale)
            .unwrap_err()
            .message
            .contains("does not match the UID in record")
    );
}

/// A kubelet deletes only pods bound to it.
#[test]
fn a_kubelet_deletes_only_its_own_pods() {
    let delete = |node: &str, pod: &Value| {
        admit(
            &attrs(
                node_user(node),
                "delete",
                "",
                "pods",
                "",
                "apps",
                pod["metadata"]["name"].as_str().unwrap(),
            ),
            Operation::Delete,
            Some(pod),
            None,
            &MemReader::new(),
        )
    };
    let pod = bound_pod("here", "worker-1", json!([]));
    assert!(delete("worker-1", &pod).is_ok());
    assert!(
        delete("worker-2", &pod)
            .unwrap_err()
            .message
            .contains("can only delete pods with spec.nodeName set to itself")
    );
}
