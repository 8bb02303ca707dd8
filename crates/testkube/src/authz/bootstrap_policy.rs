//! The objects a fresh kubeadm-made cluster starts with, as far as kubeflavor relies on
//! them: kube-apiserver's RBAC bootstrap policy (plugin/pkg/auth/authorizer/rbac/
//! bootstrappolicy), its four namespaces, and the RBAC `kubeadm init` adds for joining
//! nodes: its four ClusterRoleBindings for tokens and nodes (kubelet-bootstrap, get-nodes and
//! the two auto-approvals, which the test cluster's builder can leave out to get a cluster
//! without auto-approval) and the kubeadm-config/kubelet-config readers that `kubeadm join`
//! needs.

use serde_json::{Value, json};

use crate::authz::node::node_rules;
use crate::authz::rbac::RBAC_GROUP;
use crate::types::ResourceKey;

/// kubeadm's default bootstrap-token group.
pub const KUBEADM_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// kubeadm's binding of its token group to the nodeclient auto-approval.
pub const AUTOAPPROVE_BOOTSTRAP_BINDING: &str = "kubeadm:node-autoapprove-bootstrap";
/// kubeadm's binding of `system:nodes` to the selfnodeclient auto-approval.
pub const AUTOAPPROVE_ROTATION_BINDING: &str = "kubeadm:node-autoapprove-certificate-rotation";

pub fn objects() -> Vec<(ResourceKey, Value)> {
    let mut out = Vec::new();
    for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        out.push((ResourceKey::new("", "namespaces"), namespace(ns)));
    }
    let cluster_roles = default_cluster_roles()
        .into_iter()
        .chain(kubeadm_cluster_roles());
    out.extend(cluster_roles.map(|role| (ResourceKey::new(RBAC_GROUP, "clusterroles"), role)));
    let bindings = default_cluster_role_bindings()
        .into_iter()
        .chain(kubeadm_cluster_role_bindings());
    out.extend(bindings.map(|b| (ResourceKey::new(RBAC_GROUP, "clusterrolebindings"), b)));
    // kubeadm's clusterinfo phase: anonymous may get exactly kube-public/cluster-info.
    let anonymous = [("User", "system:anonymous")];
    out.extend(config_map_reader(
        "kube-public",
        "kubeadm:bootstrap-signer-clusterinfo",
        "cluster-info",
        &anonymous,
    ));
    // kubeadm's upload-config phases: joining nodes read the cluster and kubelet settings.
    let joiners = [("Group", KUBEADM_TOKEN_GROUP), ("Group", "system:nodes")];
    out.extend(config_map_reader(
        "kube-system",
        "kubeadm:nodes-kubeadm-config",
        "kubeadm-config",
        &joiners,
    ));
    out.extend(config_map_reader(
        "kube-system",
        "kubeadm:kubelet-config",
        "kubelet-config",
        &joiners,
    ));
    out
}

/// A Role allowing `get` of one ConfigMap, and its RoleBinding of the same name.
fn config_map_reader(
    namespace: &str,
    name: &str,
    config_map: &str,
    subjects: &[(&str, &str)],
) -> [(ResourceKey, Value); 2] {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, who)| json!({"apiGroup": RBAC_GROUP, "kind": kind, "name": who}))
        .collect();
    [
        (
            ResourceKey::new(RBAC_GROUP, "roles"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [config_map]}],
            }),
        ),
        (
            ResourceKey::new(RBAC_GROUP, "rolebindings"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
                "subjects": subjects,
            }),
        ),
    ]
}

fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// The bootstrap policy marks its objects so the API server can reconcile them at start.
fn bootstrap_metadata(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(metadata: Value, rules: Vec<Value>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata, "rules": rules})
}

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": [group], "resources": resources})
}

fn url_rule(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

fn approver(signer: &str) -> Value {
    json!({"verbs": ["approve"], "apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [signer]})
}

fn default_cluster_roles() -> Vec<Value> {
    let csr = "certificates.k8s.io";
    let public_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let roles: Vec<(&str, Vec<Value>)> = vec![
        (
            "cluster-admin",
            vec![
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                url_rule(&["*"], &["*"]),
            ],
        ),
        (
            "system:discovery",
            vec![url_rule(&["get"], &discovery_urls)],
        ),
        (
            "system:public-info-viewer",
            vec![url_rule(&["get"], &public_urls)],
        ),
        (
            "system:basic-user",
            vec![
                rule(
                    &["create"],
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                ),
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
            ],
        ),
        // For servers that delegate authentication and authorization (TokenReview,
        // SubjectAccessReview); bootstrappolicy's `system:auth-delegator`.
        (
            "system:auth-delegator",
            vec![
                rule(&["create"], "authentication.k8s.io", &["tokenreviews"]),
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        ("system:node", node_rules()),
        (
            "system:node-bootstrapper",
            vec![rule(
                &["create", "get", "list", "watch"],
                csr,
                &["certificatesigningrequests"],
            )],
        ),
        (
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(
                &["create"],
                csr,
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        (
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(
                &["create"],
                csr,
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
        (
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            vec![approver("kubernetes.io/kube-apiserver-client")],
        ),
        (
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            vec![approver("kubernetes.io/kube-apiserver-client-kubelet")],
        ),
        (
            "system:certificates.k8s.io:kubelet-serving-approver",
            vec![approver("kubernetes.io/kubelet-serving")],
        ),
        (
            "system:certificates.k8s.io:legacy-unknown-approver",
            vec![approver("kubernetes.io/legacy-unknown")],
        ),
    ];
    roles
        .into_iter()
        .map(|(name, rules)| cluster_role(bootstrap_metadata(name), rules))
        .collect()
}

fn binding(metadata: Value, role: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, name)| json!({"apiGroup": RBAC_GROUP, "kind": kind, "name": name}))
        .collect();
    let mut b = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
    });
    // The real system:node binding has no subjects at all (the Node authorizer replaced it).
    if !subjects.is_empty() {
        b["subjects"] = Value::Array(subjects);
    }
    b
}

fn default_cluster_role_bindings() -> Vec<Value> {
    let bindings: [(&str, &[(&str, &str)]); 5] = [
        ("cluster-admin", &[("Group", "system:masters")]),
        ("system:discovery", &[("Group", "system:authenticated")]),
        (
            "system:public-info-viewer",
            &[
                ("Group", "system:authenticated"),
                ("Group", "system:unauthenticated"),
            ],
        ),
        ("system:basic-user", &[("Group", "system:authenticated")]),
        ("system:node", &[]),
    ];
    bindings
        .into_iter()
        .map(|(name, subjects)| binding(bootstrap_metadata(name), name, subjects))
        .collect()
}

fn kubeadm_cluster_roles() -> Vec<Value> {
    vec![cluster_role(
        json!({"name": "kubeadm:get-nodes"}),
        vec![rule(&["get"], "", &["nodes"])],
    )]
}

fn kubeadm_cluster_role_bindings() -> Vec<Value> {
    vec![
        binding(
            json!({"name": "kubeadm:kubelet-bootstrap"}),
            "system:node-bootstrapper",
            &[("Group", KUBEADM_TOKEN_GROUP)],
        ),
        binding(
            json!({"name": "kubeadm:get-nodes"}),
            "kubeadm:get-nodes",
            &[("Group", KUBEADM_TOKEN_GROUP)],
        ),
        // kube-controller-manager's csrapprover approves what these allow.
        binding(
            json!({"name": AUTOAPPROVE_BOOTSTRAP_BINDING}),
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[("Group", KUBEADM_TOKEN_GROUP)],
        ),
        binding(
            json!({"name": AUTOAPPROVE_ROTATION_BINDING}),
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[("Group", "system:nodes")],
        ),
        // Since v1.29 kubeadm's admin.conf is in this group rather than system:masters.
        binding(
            json!({"name": "kubeadm:cluster-admins"}),
            "cluster-admin",
            &[("Group", "kubeadm:cluster-admins")],
        ),
    ]
}
