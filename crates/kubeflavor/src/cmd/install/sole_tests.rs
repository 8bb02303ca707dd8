//! The sole-approver policy, shipped only with `--sole-approver`, evaluated as the API
//! server evaluates it (testkube's ValidatingAdmissionPolicy evaluator) against RBAC
//! objects; every verdict agrees with core's model (`binding_refused`, `role_refused`).

use kubeflavor_core::admission::sole_approver::{
    ALLOWED_ROLES, NODECLIENT, NODECLIENT_ROLE, POLICY_NAME, Rule, Subject, binding_refused,
    role_refused, rules,
};
use serde_json::{Value, json};

use super::super::{Mode, documents};
use super::policy_spec;

fn policy() -> Value {
    json!({"spec": serde_json::to_value(policy_spec()).unwrap()})
}

fn request(resource: &str, operation: &str) -> Value {
    json!({
        "operation": operation,
        "resource": {"group": "rbac.authorization.k8s.io", "version": "v1", "resource": resource},
        "name": "x",
        "userInfo": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
    })
}

fn verdict(resource: &str, object: &Value) -> Option<String> {
    testkube::validating_policy_verdict(&policy(), &request(resource, "CREATE"), object)
}

fn binding(kind: &str, role_kind: &str, role: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(k, n)| json!({"kind": k, "name": n, "apiGroup": "rbac.authorization.k8s.io"}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "kubeadm:node-autoapprove-bootstrap"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    })
}

fn role(kind: &str, name: &str, rules: &[Rule<'_>]) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| json!({"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "rules": rules,
    })
}

fn binding_message() -> String {
    rules()[0].message.clone()
}

fn role_message() -> String {
    rules()[1].message.clone()
}

/// A binding's kind, roleRef kind and name, and subjects (kind, name).
type BindingCase<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

const KUBEADM_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

#[test]
fn the_policy_ships_only_with_sole_approver() {
    let has = |mode: Mode| {
        documents("kubeflavor", "example.com/kubeflavor:test", 2, mode)
            .iter()
            .filter(|d| d.object["metadata"]["name"] == POLICY_NAME)
            .map(|d| d.object["kind"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(has(Mode::default_install()).is_empty());
    let renewals = Mode {
        manage_renewals: true,
        ..Mode::default_install()
    };
    assert!(has(renewals).is_empty());
    let sole = Mode {
        manage_renewals: true,
        strict: true,
        approve_serving: true,
        ..Mode::default_install()
    };
    assert_eq!(
        has(sole),
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    let docs = documents("kubeflavor", "example.com/kubeflavor:test", 2, sole);
    let b = docs
        .iter()
        .find(|d| {
            d.object["kind"] == "ValidatingAdmissionPolicyBinding"
                && d.object["metadata"]["name"] == POLICY_NAME
        })
        .unwrap();
    assert_eq!(b.object["spec"]["policyName"], POLICY_NAME);
    assert_eq!(b.object["spec"]["validationActions"], json!(["Deny"]));
    let p = docs
        .iter()
        .find(|d| {
            d.object["kind"] == "ValidatingAdmissionPolicy"
                && d.object["metadata"]["name"] == POLICY_NAME
        })
        .unwrap();
    assert_eq!(p.object["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        p.object["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        json!([
            "clusterrolebindings",
            "rolebindings",
            "clusterroles",
            "roles"
        ])
    );
}

/// kubeadm's auto-approval, as `kubeadm upgrade apply` re-creates it, is refused; so is any
/// ClusterRole off the list granted to any bootstrap identity; the roles on it pass.
#[test]
fn kubeadms_autoapproval_is_refused() {
    let kubeadm = binding(
        "ClusterRoleBinding",
        "ClusterRole",
        NODECLIENT_ROLE,
        &[("Group", KUBEADM_GROUP)],
    );
    assert_eq!(
        verdict("clusterrolebindings", &kubeadm),
        Some(binding_message())
    );
    let update = testkube::validating_policy_verdict(
        &policy(),
        &request("clusterrolebindings", "UPDATE"),
        &kubeadm,
    );
    assert_eq!(update, Some(binding_message()));
    let cases: &[BindingCase] = &[
        (
            "ClusterRoleBinding",
            "ClusterRole",
            NODECLIENT_ROLE,
            &[("Group", "system:bootstrappers")],
        ),
        (
            "ClusterRoleBinding",
            "ClusterRole",
            "cluster-admin",
            &[("User", "system:bootstrap:abcdef")],
        ),
        (
            "ClusterRoleBinding",
            "ClusterRole",
            "edit",
            &[("Group", "system:nodes"), ("Group", "system:authenticated")],
        ),
        (
            "RoleBinding",
            "ClusterRole",
            NODECLIENT_ROLE,
            &[("Group", "system:unauthenticated")],
        ),
        (
            "ClusterRoleBinding",
            "ClusterRole",
            NODECLIENT_ROLE,
            &[("Group", "system:nodes")],
        ),
        (
            "ClusterRoleBinding",
            "ClusterRole",
            NODECLIENT_ROLE,
            &[("Group", "system:bootstrappersx")],
        ),
        (
            "RoleBinding",
            "Role",
            "kubeadm:kubelet-config",
            &[("Group", KUBEADM_GROUP)],
        ),
        (
            "ClusterRoleBinding",
            "ClusterRole",
            NODECLIENT_ROLE,
            &[("ServiceAccount", "system:bootstrap:x")],
        ),
    ];
    for (kind, role_kind, role_name, subjects) in cases {
        let resource = if *kind == "RoleBinding" {
            "rolebindings"
        } else {
            "clusterrolebindings"
        };
        let model: Vec<Subject<'_>> = subjects
            .iter()
            .map(|(kind, name)| Subject { kind, name })
            .collect();
        let expected = binding_refused(&model, role_kind, role_name).then(binding_message);
        assert_eq!(
            verdict(resource, &binding(kind, role_kind, role_name, subjects)),
            expected,
            "{kind} {role_kind}/{role_name} {subjects:?}"
        );
    }
    for allowed in ALLOWED_ROLES {
        let b = binding(
            "ClusterRoleBinding",
            "ClusterRole",
            allowed,
            &[("Group", KUBEADM_GROUP)],
        );
        assert_eq!(verdict("clusterrolebindings", &b), None, "{allowed}");
    }
    // A binding without subjects, and the roleRef check failing alone: the rule is what refuses.
    let mut none = kubeadm.clone();
    none.as_object_mut().unwrap().remove("subjects");
    assert_eq!(verdict("clusterrolebindings", &none), None);
}

fn rule<'a>(groups: &[&'a str], resources: &[&'a str], verbs: &[&'a str]) -> Rule<'a> {
    Rule {
        api_groups: groups.to_vec(),
        resources: resources.to_vec(),
        verbs: verbs.to_vec(),
    }
}

/// A role granting create on nodeclient, wildcards included, is refused unless `system:*`
/// and not one of the roles bootstrap tokens may be granted.
#[test]
fn a_role_granting_the_autoapproval_is_refused() {
    let certs = "certificates.k8s.io";
    let cases = [
        rule(&[certs], &[NODECLIENT], &["create"]),
        rule(&["*"], &[NODECLIENT], &["create"]),
        rule(&[certs], &["*"], &["create"]),
        rule(&[certs], &["*/nodeclient"], &["*"]),
        rule(&["*"], &["*"], &["*"]),
        rule(&[""], &["*"], &["*"]),
        rule(&[certs], &["certificatesigningrequests"], &["*"]),
        rule(&[certs], &[NODECLIENT], &["get"]),
        rule(
            &[certs],
            &["certificatesigningrequests/selfnodeclient"],
            &["create"],
        ),
    ];
    for (resource, kind) in [("clusterroles", "ClusterRole"), ("roles", "Role")] {
        for r in &cases {
            let rules = std::slice::from_ref(r);
            for name in [
                "approver",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                "system:node-bootstrapper",
                "system:basic-user",
            ] {
                let expected = role_refused(name, rules).then(role_message);
                assert_eq!(
                    verdict(resource, &role(kind, name, rules)),
                    expected,
                    "{name} {r:?}"
                );
            }
        }
    }
    assert_eq!(
        verdict(
            "clusterroles",
            &role("ClusterRole", "approver", &cases[..1])
        ),
        Some(role_message()),
        "the rule is what refuses"
    );
    // A role without rules (aggregated, not yet filled) passes; its later update is judged.
    let empty = json!({"kind": "ClusterRole", "metadata": {"name": "agg"}});
    assert_eq!(verdict("clusterroles", &empty), None);
}
