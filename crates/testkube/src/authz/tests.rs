use serde_json::json;

use super::*;
use crate::authz::testutil::{MemReader, admin, bootstrap_user, node_user, user};
use crate::types::{IdentityKind, UserInfo};

fn req(
    user: UserInfo,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> RequestAttributes {
    RequestAttributes {
        user,
        verb: verb.into(),
        is_resource_request: true,
        path: String::new(),
        api_group: group.into(),
        api_version: "v1".into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
        field_selector: String::new(),
    }
}

fn sub(mut attrs: RequestAttributes, subresource: &str) -> RequestAttributes {
    attrs.subresource = subresource.into();
    attrs
}

fn path(user: UserInfo, path: &str) -> RequestAttributes {
    RequestAttributes {
        is_resource_request: false,
        path: path.into(),
        ..req(user, "get", "", "", "", "")
    }
}

fn anonymous() -> UserInfo {
    UserInfo::anonymous()
}

fn assert_forbidden(
    attrs: &RequestAttributes,
    reader: &MemReader,
    message: &str,
    details: serde_json::Value,
) {
    let err = authorize(attrs, reader).expect_err("must be forbidden");
    assert_eq!((err.code, err.reason.as_deref()), (403, Some("Forbidden")));
    assert_eq!(err.message, message);
    assert_eq!(err.details, Some(details));
    assert!(
        err.nosniff,
        "authorizer 403s carry X-Content-Type-Options: nosniff"
    );
}

#[test]
fn masters_may_do_anything() {
    let reader = MemReader::new();
    assert!(
        authorize(
            &req(admin(), "delete", "", "secrets", "kube-system", "x"),
            &reader
        )
        .is_ok()
    );
    assert!(authorize(&path(admin(), "/metrics"), &reader).is_ok());
}

#[test]
fn bootstrap_identity_is_denied_secrets_and_nodes() {
    let reader = MemReader::with_defaults();
    let u = || bootstrap_user("abcdef");
    assert_forbidden(
        &req(u(), "list", "", "secrets", "kube-system", ""),
        &reader,
        r#"secrets is forbidden: User "system:bootstrap:abcdef" cannot list resource "secrets" in API group "" in the namespace "kube-system""#,
        json!({"kind": "secrets"}),
    );
    assert_forbidden(
        &req(
            u(),
            "get",
            "",
            "secrets",
            "kube-system",
            "bootstrap-token-abcdef",
        ),
        &reader,
        r#"secrets "bootstrap-token-abcdef" is forbidden: User "system:bootstrap:abcdef" cannot get resource "secrets" in API group "" in the namespace "kube-system""#,
        json!({"name": "bootstrap-token-abcdef", "kind": "secrets"}),
    );
    assert_forbidden(
        &req(u(), "list", "", "nodes", "", ""),
        &reader,
        r#"nodes is forbidden: User "system:bootstrap:abcdef" cannot list resource "nodes" in API group "" at the cluster scope"#,
        json!({"kind": "nodes"}),
    );
}

#[test]
fn bootstrap_identity_may_file_and_read_csrs_but_not_approve() {
    let reader = MemReader::with_defaults();
    let csr = |verb: &str, name: &str| {
        req(
            bootstrap_user("abcdef"),
            verb,
            "certificates.k8s.io",
            "certificatesigningrequests",
            "",
            name,
        )
    };
    for verb in ["create", "get", "list", "watch"] {
        assert!(authorize(&csr(verb, ""), &reader).is_ok(), "{verb}");
    }
    assert!(
        authorize(
            &req(bootstrap_user("abcdef"), "get", "", "nodes", "", "worker-1"),
            &reader
        )
        .is_ok()
    );
    assert_forbidden(
        &sub(csr("update", "csr-worker-6"), "approval"),
        &reader,
        r#"certificatesigningrequests.certificates.k8s.io "csr-worker-6" is forbidden: User "system:bootstrap:abcdef" cannot update resource "certificatesigningrequests/approval" in API group "certificates.k8s.io" at the cluster scope"#,
        json!({"name": "csr-worker-6", "group": "certificates.k8s.io", "kind": "certificatesigningrequests"}),
    );
    // A token outside kubeadm's group gets nothing from kubeadm's bindings.
    let other = user(
        IdentityKind::BootstrapToken,
        "system:bootstrap:x1y2z3",
        &["system:bootstrappers", "system:authenticated"],
    );
    let create = req(
        other,
        "create",
        "certificates.k8s.io",
        "certificatesigningrequests",
        "",
        "",
    );
    assert!(authorize(&create, &reader).is_err());
}

#[test]
fn self_subject_review_needs_authentication() {
    let reader = MemReader::with_defaults();
    let review = |u| {
        req(
            u,
            "create",
            "authentication.k8s.io",
            "selfsubjectreviews",
            "",
            "",
        )
    };
    assert!(authorize(&review(bootstrap_user("abcdef")), &reader).is_ok());
    assert!(authorize(&review(node_user("worker-1")), &reader).is_ok());
    assert_forbidden(
        &review(anonymous()),
        &reader,
        r#"selfsubjectreviews.authentication.k8s.io is forbidden: User "system:anonymous" cannot create resource "selfsubjectreviews" in API group "authentication.k8s.io" at the cluster scope"#,
        json!({"group": "authentication.k8s.io", "kind": "selfsubjectreviews"}),
    );
}

#[test]
fn anonymous_reads_only_cluster_info_by_get() {
    let reader = MemReader::with_defaults();
    let cm = |verb: &str, name: &str| req(anonymous(), verb, "", "configmaps", "kube-public", name);
    assert!(authorize(&cm("get", "cluster-info"), &reader).is_ok());
    assert_forbidden(
        &cm("get", "kube-root-ca.crt"),
        &reader,
        r#"configmaps "kube-root-ca.crt" is forbidden: User "system:anonymous" cannot get resource "configmaps" in API group "" in the namespace "kube-public""#,
        json!({"name": "kube-root-ca.crt", "kind": "configmaps"}),
    );
    assert_forbidden(
        &cm("list", ""),
        &reader,
        r#"configmaps is forbidden: User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "kube-public""#,
        json!({"kind": "configmaps"}),
    );
    assert_forbidden(
        &cm("watch", "cluster-info"),
        &reader,
        r#"configmaps "cluster-info" is forbidden: User "system:anonymous" cannot watch resource "configmaps" in API group "" in the namespace "kube-public""#,
        json!({"name": "cluster-info", "kind": "configmaps"}),
    );
    // The Role is namespaced: the same name elsewhere is not readable.
    assert!(
        authorize(
            &req(
                anonymous(),
                "get",
                "",
                "configmaps",
                "default",
                "cluster-info"
            ),
            &reader
        )
        .is_err()
    );
}

#[test]
fn non_resource_paths_follow_discovery_and_public_info_roles() {
    let reader = MemReader::with_defaults();
    for p in ["/version", "/healthz", "/readyz", "/livez"] {
        assert!(authorize(&path(anonymous(), p), &reader).is_ok(), "{p}");
    }
    for p in [
        "/api",
        "/apis/certificates.k8s.io/v1",
        "/openapi/v2",
        "/version",
    ] {
        assert!(
            authorize(&path(bootstrap_user("abcdef"), p), &reader).is_ok(),
            "{p}"
        );
    }
    assert_forbidden(
        &path(anonymous(), "/api"),
        &reader,
        r#"forbidden: User "system:anonymous" cannot get path "/api""#,
        json!({}),
    );
    assert!(authorize(&path(bootstrap_user("abcdef"), "/metrics"), &reader).is_err());
}

#[test]
fn node_reads_only_its_own_node() {
    let reader = MemReader::with_defaults();
    let nodes = |verb: &str, name: &str| req(node_user("worker-1"), verb, "", "nodes", "", name);
    assert!(authorize(&nodes("get", "worker-1"), &reader).is_ok());
    // list/watch pinned by fieldSelector arrive with the name set (RequestInfo does that).
    assert!(authorize(&nodes("list", "worker-1"), &reader).is_ok());
    assert!(authorize(&nodes("watch", "worker-1"), &reader).is_ok());
    for other in ["worker-9", "worker-404"] {
        assert_forbidden(
            &nodes("get", other),
            &reader,
            &format!(
                r#"nodes "{other}" is forbidden: User "system:node:worker-1" cannot get resource "nodes" in API group "" at the cluster scope: node 'worker-1' cannot read '{other}', only its own Node object"#
            ),
            json!({"name": other, "kind": "nodes"}),
        );
    }
    assert_forbidden(
        &nodes("list", ""),
        &reader,
        r#"nodes is forbidden: User "system:node:worker-1" cannot list resource "nodes" in API group "" at the cluster scope: node 'worker-1' cannot read all nodes, only its own Node object"#,
        json!({"kind": "nodes"}),
    );
}

#[test]
fn node_writes_are_left_to_node_restriction_but_delete_is_not_granted() {
    let reader = MemReader::with_defaults();
    let nodes = |verb: &str, name: &str| req(node_user("worker-1"), verb, "", "nodes", "", name);
    for verb in ["create", "update", "patch"] {
        assert!(
            authorize(&nodes(verb, "worker-2"), &reader).is_ok(),
            "{verb}"
        );
    }
    assert!(authorize(&sub(nodes("patch", "worker-1"), "status"), &reader).is_ok());
    assert_forbidden(
        &nodes("delete", "worker-1"),
        &reader,
        r#"nodes "worker-1" is forbidden: User "system:node:worker-1" cannot delete resource "nodes" in API group "" at the cluster scope"#,
        json!({"name": "worker-1", "kind": "nodes"}),
    );
}

#[test]
fn node_static_rules_csrs_events_and_own_lease() {
    let reader = MemReader::with_defaults();
    let n = || node_user("worker-1");
    for verb in ["create", "get", "list", "watch"] {
        assert!(
            authorize(
                &req(
                    n(),
                    verb,
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                    "",
                    ""
                ),
                &reader
            )
            .is_ok()
        );
    }
    assert!(authorize(&req(n(), "create", "", "events", "default", ""), &reader).is_ok());
    assert!(authorize(&req(n(), "patch", "", "events", "default", "e"), &reader).is_ok());
    let lease = |verb: &str, ns: &str, name: &str| {
        req(n(), verb, "coordination.k8s.io", "leases", ns, name)
    };
    assert!(authorize(&lease("create", "kube-node-lease", ""), &reader).is_ok());
    assert!(authorize(&lease("update", "kube-node-lease", "worker-1"), &reader).is_ok());
    let err = authorize(&lease("get", "kube-node-lease", "worker-2"), &reader).unwrap_err();
    assert!(
        err.message
            .ends_with(": can only access node lease with the same name as the requesting node"),
        "{}",
        err.message
    );
    let err = authorize(&lease("get", "default", "worker-1"), &reader).unwrap_err();
    assert!(
        err.message
            .ends_with(r#": can only access leases in the "kube-node-lease" system namespace"#),
        "{}",
        err.message
    );
    let err = authorize(&req(n(), "get", "", "secrets", "kube-system", "s"), &reader).unwrap_err();
    assert!(
        err.message
            .ends_with(": no relationship found between node 'worker-1' and this object"),
        "{}",
        err.message
    );
    // Not a node without the system:nodes group, whatever the name says.
    let impostor = user(
        IdentityKind::StaticToken,
        "system:node:worker-1",
        &["system:authenticated"],
    );
    assert!(authorize(&req(impostor, "get", "", "nodes", "", "worker-1"), &reader).is_err());
}

fn team_reader() -> MemReader {
    MemReader::with_defaults()
        .with(
            RBAC_GROUP_FOR_TESTS,
            "roles",
            json!({"kind": "Role", "metadata": {"name": "cm-reader", "namespace": "team"},
                "rules": [
                    {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]},
                    {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["allowed"]},
                    {"verbs": ["*"], "apiGroups": ["kubeflavor.io"], "resources": ["*/status"]},
                ]}),
        )
        .with(
            RBAC_GROUP_FOR_TESTS,
            "rolebindings",
            json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "team"},
                "roleRef": {"apiGroup": RBAC_GROUP_FOR_TESTS, "kind": "Role", "name": "cm-reader"},
                "subjects": [
                    {"kind": "User", "name": "alice"},
                    {"kind": "ServiceAccount", "name": "robot"},
                ]}),
        )
        .with(
            RBAC_GROUP_FOR_TESTS,
            "rolebindings",
            json!({"kind": "RoleBinding", "metadata": {"name": "dangling", "namespace": "team"},
                "roleRef": {"apiGroup": RBAC_GROUP_FOR_TESTS, "kind": "Role", "name": "missing"},
                "subjects": [{"kind": "Group", "name": "devs"}]}),
        )
}

const RBAC_GROUP_FOR_TESTS: &str = "rbac.authorization.k8s.io";

#[test]
fn role_bindings_allow_in_their_namespace_only() {
    let reader = team_reader();
    let alice = || {
        user(
            IdentityKind::StaticToken,
            "alice",
            &["system:authenticated"],
        )
    };
    assert!(authorize(&req(alice(), "get", "", "configmaps", "team", "x"), &reader).is_ok());
    assert!(authorize(&req(alice(), "list", "", "configmaps", "team", ""), &reader).is_ok());
    assert_forbidden(
        &req(alice(), "get", "", "configmaps", "other", "x"),
        &reader,
        r#"configmaps "x" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "other""#,
        json!({"name": "x", "kind": "configmaps"}),
    );
    assert!(
        authorize(
            &req(alice(), "delete", "", "configmaps", "team", "x"),
            &reader
        )
        .is_err()
    );
    assert!(
        authorize(
            &req(alice(), "get", "", "secrets", "team", "allowed"),
            &reader
        )
        .is_ok()
    );
    assert!(
        authorize(
            &req(alice(), "get", "", "secrets", "team", "other"),
            &reader
        )
        .is_err()
    );
    assert!(
        authorize(&req(alice(), "list", "", "secrets", "team", ""), &reader).is_err(),
        "resourceNames never allow an unnamed list"
    );
    assert!(
        authorize(
            &sub(
                req(
                    alice(),
                    "patch",
                    "kubeflavor.io",
                    "flavorbindings",
                    "team",
                    "n"
                ),
                "status"
            ),
            &reader
        )
        .is_ok()
    );
    assert!(
        authorize(
            &req(
                alice(),
                "patch",
                "kubeflavor.io",
                "flavorbindings",
                "team",
                "n"
            ),
            &reader
        )
        .is_err()
    );
    let bob = user(IdentityKind::StaticToken, "bob", &["system:authenticated"]);
    assert!(authorize(&req(bob, "get", "", "configmaps", "team", "x"), &reader).is_err());
}

#[test]
fn service_account_subjects_default_to_the_binding_namespace() {
    let reader = team_reader();
    let robot = user(
        IdentityKind::StaticToken,
        "system:serviceaccount:team:robot",
        &["system:authenticated"],
    );
    assert!(authorize(&req(robot, "get", "", "configmaps", "team", "x"), &reader).is_ok());
    let stranger = user(
        IdentityKind::StaticToken,
        "system:serviceaccount:other:robot",
        &["system:authenticated"],
    );
    assert!(
        authorize(
            &req(stranger, "get", "", "configmaps", "team", "x"),
            &reader
        )
        .is_err()
    );
}

#[test]
fn a_binding_to_a_missing_role_is_reported_in_the_reason() {
    let reader = team_reader();
    let dev = user(
        IdentityKind::StaticToken,
        "carol",
        &["devs", "system:authenticated"],
    );
    let err = authorize(&req(dev, "get", "", "configmaps", "team", "x"), &reader).unwrap_err();
    assert!(
        err.message.ends_with(
            r#"in the namespace "team": RBAC: role.rbac.authorization.k8s.io "missing" not found"#
        ),
        "{}",
        err.message
    );
}

#[test]
fn cluster_role_bindings_apply_everywhere_and_wildcards_match() {
    let reader = MemReader::new()
        .with(RBAC_GROUP_FOR_TESTS, "clusterroles", json!({"metadata": {"name": "approver"},
            "rules": [{"verbs": ["approve"], "apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": ["example.com/*"]}]}))
        .with(RBAC_GROUP_FOR_TESTS, "clusterrolebindings", json!({"metadata": {"name": "approver"},
            "roleRef": {"kind": "ClusterRole", "name": "approver"}, "subjects": [{"kind": "Group", "name": "approvers"}]}));
    let u = || user(IdentityKind::StaticToken, "dave", &["approvers"]);
    let signer = |name: &str| req(u(), "approve", "certificates.k8s.io", "signers", "", name);
    assert!(is_allowed(&signer("example.com/*"), &reader));
    assert!(
        !is_allowed(&signer("example.com/x"), &reader),
        "resourceNames are literal, the wildcard is the admission's second try"
    );
}

#[test]
fn a_cluster_role_binding_cannot_reference_a_role() {
    let reader = team_reader().with(
        RBAC_GROUP_FOR_TESTS,
        "clusterrolebindings",
        json!({"metadata": {"name": "odd"},
            "roleRef": {"kind": "Role", "name": "cm-reader"},
            "subjects": [{"kind": "User", "name": "erin"}]}),
    );
    let erin = user(IdentityKind::StaticToken, "erin", &["system:authenticated"]);
    let err = authorize(&req(erin, "get", "", "configmaps", "team", "x"), &reader).unwrap_err();
    assert!(
        err.message
            .ends_with(r#": RBAC: role.rbac.authorization.k8s.io "cm-reader" not found"#),
        "{}",
        err.message
    );
}

#[test]
fn evaluate_names_the_allowing_binding_as_subject_access_review_shows_it() {
    let reader = team_reader();
    // A RoleBinding is `name/namespace`; a ServiceAccount subject without a namespace
    // takes the binding's (`describeSubject`).
    let robot = user(
        IdentityKind::StaticToken,
        "system:serviceaccount:team:robot",
        &["system:serviceaccounts"],
    );
    assert_eq!(
        evaluate(&req(robot, "get", "", "configmaps", "team", "x"), &reader),
        Decision {
            allowed: true,
            reason: r#"RBAC: allowed by RoleBinding "b/team" of Role "cm-reader" to ServiceAccount "robot/team""#
                .into()
        }
    );
    let alice = user(IdentityKind::StaticToken, "alice", &[]);
    assert_eq!(
        evaluate(
            &req(alice.clone(), "get", "", "configmaps", "team", "x"),
            &reader
        )
        .reason,
        r#"RBAC: allowed by RoleBinding "b/team" of Role "cm-reader" to User "alice""#
    );
    // Refused: no reason unless an authorizer gave one; masters and nodes allow silently.
    assert_eq!(
        evaluate(
            &req(alice, "delete", "", "configmaps", "team", "x"),
            &reader
        ),
        Decision {
            allowed: false,
            reason: String::new()
        }
    );
    assert_eq!(
        evaluate(
            &req(admin(), "delete", "", "secrets", "kube-system", "x"),
            &reader
        ),
        Decision {
            allowed: true,
            reason: String::new()
        }
    );
    assert_eq!(
        evaluate(
            &req(node_user("worker-1"), "get", "", "nodes", "", "worker-1"),
            &reader
        ),
        Decision {
            allowed: true,
            reason: String::new()
        }
    );
}

#[test]
fn a_subject_access_review_is_answered_by_the_whole_chain_webhook_included() {
    use webhook::Verdict;
    let reader = team_reader();
    let node_get = || req(node_user("w1"), "get", "", "nodes", "", "w1");
    let alice_delete = || {
        let alice = user(IdentityKind::StaticToken, "alice", &[]);
        req(alice, "delete", "", "configmaps", "team", "x")
    };
    let status = |allowed, denied, reason: &str, error: &str| ReviewStatus {
        allowed,
        denied,
        reason: reason.into(),
        evaluation_error: error.into(),
    };
    // The webhook's deny wins over the Node authorizer's allow, with its reason.
    let revoked = Verdict::Deny("node w1 is revoked".into());
    assert_eq!(
        review(&revoked, &node_get(), &reader),
        status(false, true, "node w1 is revoked", "")
    );
    // No opinion: Node and RBAC decide, as without a webhook.
    assert_eq!(
        review(&Verdict::NoOpinion, &node_get(), &reader),
        status(true, false, "", "")
    );
    assert_eq!(
        review(&Verdict::Allow("ok".into()), &alice_delete(), &reader),
        status(true, false, "ok", "")
    );
    // system:masters is allowed before the webhook.
    let masters = req(admin(), "delete", "", "secrets", "kube-system", "x");
    assert_eq!(
        review(&revoked, &masters, &reader),
        status(true, false, "", "")
    );
    // A webhook that could not answer: failurePolicy Deny denies with the error; NoOpinion
    // lets Node and RBAC decide and keeps the error only when nothing allowed.
    let failed = |deny| Verdict::Failed {
        deny,
        error: "dial tcp: refused".into(),
    };
    assert_eq!(
        review(&failed(true), &node_get(), &reader),
        status(false, true, "", "dial tcp: refused")
    );
    assert_eq!(
        review(&failed(false), &node_get(), &reader),
        status(true, false, "", "")
    );
    assert_eq!(
        review(&failed(false), &alice_delete(), &reader),
        status(false, false, "", "dial tcp: refused")
    );
}

mod kubeadm;

/// The Node authorizer's graph: a kubelet reaches the ServiceAccount, Secrets and
/// ConfigMaps of the pods bound to it, and nothing of pods bound elsewhere.
#[test]
fn the_node_graph_follows_pods_bound_to_the_node() {
    use crate::authz::node::{NodeDecision, authorize};
    use crate::authz::testutil::{MemReader, node_user};
    let pod = |name: &str, node: &str| {
        serde_json::json!({"metadata": {"name": name, "namespace": "apps"}, "spec": {
            "nodeName": node, "serviceAccountName": format!("sa-{name}"),
            "volumes": [{"name": "s", "secret": {"secretName": format!("secret-{name}")}}],
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": format!("cm-{name}")}}]}]}})
    };
    let reader = MemReader::new()
        .with("", "pods", pod("here", "worker-1"))
        .with("", "pods", pod("there", "worker-2"));
    let ask = |verb: &str, resource: &str, sub: &str, name: &str| {
        let mut a = crate::types::RequestAttributes::non_resource(
            node_user("worker-1"),
            verb.into(),
            String::new(),
        );
        a.is_resource_request = true;
        a.api_version = "v1".into();
        a.resource = resource.into();
        a.subresource = sub.into();
        a.namespace = "apps".into();
        a.name = name.into();
        matches!(authorize(&a, &reader), Some(NodeDecision::Allow))
    };
    assert!(ask("create", "serviceaccounts", "token", "sa-here"));
    assert!(!ask("create", "serviceaccounts", "token", "sa-there"));
    assert!(ask("get", "secrets", "", "secret-here"));
    assert!(!ask("get", "secrets", "", "secret-there"));
    assert!(ask("get", "configmaps", "", "cm-here"));
    assert!(!ask("get", "configmaps", "", "cm-there"));
    assert!(ask("get", "pods", "", "here"));
    assert!(!ask("get", "pods", "", "there"));
}
