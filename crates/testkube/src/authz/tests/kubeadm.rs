//! The seeded objects: the bootstrap policy and what `kubeadm init` adds.

use super::{anonymous, path, req};
use crate::authz::testutil::{MemReader, bootstrap_user, node_user, user};
use crate::authz::{authorize, default_objects};
use crate::types::{IdentityKind, UserInfo};

#[test]
fn default_objects_are_complete_and_named() {
    let objects = default_objects();
    for (key, object) in &objects {
        assert!(
            object["apiVersion"].is_string() && object["kind"].is_string(),
            "{key:?} {object}"
        );
        assert!(
            object["metadata"]["name"]
                .as_str()
                .is_some_and(|n| !n.is_empty()),
            "{object}"
        );
        let namespaced = matches!(key.resource.as_str(), "roles" | "rolebindings");
        assert_eq!(
            object["metadata"]["namespace"].is_string(),
            namespaced,
            "{object}"
        );
    }
    let names: Vec<&str> = objects
        .iter()
        .filter(|(k, _)| k.resource == "namespaces")
        .map(|(_, o)| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    // The four ClusterRoleBindings kubeadm creates for tokens and nodes, exactly as a real
    // kubeadm cluster reads them back: name -> (role, group).
    let kubeadm = [
        (
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
        (
            "kubeadm:get-nodes",
            "kubeadm:get-nodes",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
    ];
    for (name, role, group) in kubeadm {
        let (_, binding) = objects
            .iter()
            .find(|(k, o)| k.resource == "clusterrolebindings" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} is seeded"));
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}]),
            "{name}"
        );
        assert_eq!(
            binding["roleRef"],
            serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}),
            "{name}"
        );
        assert!(
            objects
                .iter()
                .any(|(k, o)| k.resource == "clusterroles" && o["metadata"]["name"] == role),
            "{role} exists"
        );
    }
}

#[test]
fn kubeadm_join_reads_its_config_maps_and_nothing_more() {
    let reader = MemReader::with_defaults();
    let cm = |u: UserInfo, name: &str| req(u, "get", "", "configmaps", "kube-system", name);
    for name in ["kubeadm-config", "kubelet-config"] {
        assert!(
            authorize(&cm(bootstrap_user("abcdef"), name), &reader).is_ok(),
            "{name}"
        );
        assert!(
            authorize(&cm(node_user("worker-1"), name), &reader).is_ok(),
            "{name}"
        );
    }
    assert!(authorize(&cm(bootstrap_user("abcdef"), "kube-proxy"), &reader).is_err());
    assert!(authorize(&cm(anonymous(), "kubeadm-config"), &reader).is_err());
}

#[test]
fn kubeadm_cluster_admins_group_is_cluster_admin() {
    let reader = MemReader::with_defaults();
    let kubeadm_admin = user(
        IdentityKind::ClientCert,
        "kubernetes-admin",
        &["kubeadm:cluster-admins", "system:authenticated"],
    );
    let attrs = req(
        kubeadm_admin.clone(),
        "delete",
        "",
        "secrets",
        "kube-system",
        "x",
    );
    assert!(
        authorize(&attrs, &reader).is_ok(),
        "through RBAC, not the masters shortcut"
    );
    assert!(
        authorize(&attrs, &MemReader::new()).is_err(),
        "and only with the binding present"
    );
    assert!(authorize(&path(kubeadm_admin, "/metrics"), &reader).is_ok());
}
