//! The sole-approver policy: with `install --sole-approver`, no grant that lets
//! kube-controller-manager auto-approve a bootstrap identity's kubelet client CSRs can
//! take effect. A ValidatingAdmissionPolicy `install` ships refuses it at admission, so it
//! never exists for a moment (kube-controller-manager approves within milliseconds, before
//! the controller could delete the grant or a node's CSR be judged).
//!
//! kube-controller-manager approves a kubelet client CSR of any node name when a
//! SubjectAccessReview allows its requester `create` on
//! `certificatesigningrequests/nodeclient` in `certificates.k8s.io` (see
//! [`crate::approval::approvers`]). Two writes can make that true for a bootstrap token:
//!
//! - a binding that grants a bootstrap identity (the groups `system:bootstrappers` and
//!   `system:bootstrappers:*`, the users `system:bootstrap:*`, and the groups every
//!   request carries, `system:authenticated` and `system:unauthenticated`) a ClusterRole.
//!   Refused unless the role is one of [`ALLOWED_ROLES`], roles known not to grant that
//!   create: kubeadm's `kubeadm:node-autoapprove-bootstrap` (roleRef
//!   `system:certificates.k8s.io:certificatesigningrequests:nodeclient`), which `kubeadm
//!   upgrade apply` re-creates in its `bootstrap-token` phase, is refused. A RoleBinding of
//!   a Role passes: a namespaced Role grants nothing on a cluster-scoped resource (RBAC
//!   consults RoleBindings only for namespaced requests), and kubeadm's own
//!   `kubeadm:kubelet-config` and `kubeadm:nodes-kubeadm-config` are such bindings;
//! - a role that grants that create (wildcards in apiGroups, resources and verbs
//!   included), which an allowed name or an existing binding could then carry. Refused
//!   unless its name is `system:*` (the API server's own roles, reconciled at every start;
//!   writing them is an admin's act on the API server's defaults) and not one of
//!   [`ALLOWED_ROLES`]: those are bound to bootstrap tokens already (kubeadm binds
//!   `system:node-bootstrapper` to its token group), so such an edit of one, or the
//!   aggregation controller filling one an edit made aggregated, would be the grant
//!   itself. The API server's reconciliation never adds that create to them.
//!
//! [`binding_refused`] and [`role_refused`] are the rules as plain functions; the
//! policy's expressions implement them in CEL.

use crate::approval::approvers::{
    BOOTSTRAP_USER_PREFIX, CERTIFICATES_GROUP, UNAUTHENTICATED_GROUP,
};
use crate::token::secret::{AUTHENTICATED_GROUP, BOOTSTRAPPERS_GROUP};

/// The ValidatingAdmissionPolicy (and its binding).
pub const POLICY_NAME: &str = "kubeflavor-sole-approver";

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The binding resources the policy matches (CREATE and UPDATE).
pub const BINDING_RESOURCES: [&str; 2] = ["clusterrolebindings", "rolebindings"];
/// The role resources the policy matches (CREATE and UPDATE).
pub const ROLE_RESOURCES: [&str; 2] = ["clusterroles", "roles"];

/// The subresource whose `create` kube-controller-manager's approver reviews.
pub const NODECLIENT: &str = "certificatesigningrequests/nodeclient";

/// kubeadm's auto-approval's role, the one the policy is first about.
pub const NODECLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient";

/// Roles a bootstrap identity may be granted: none grants `create` on
/// [`NODECLIENT`]. The API server's defaults for every identity (`system:basic-user`,
/// `system:discovery`, `system:public-info-viewer`), the CSR filing role
/// (`system:node-bootstrapper`), kubeadm's `kubeadm:get-nodes`, and kubeflavor's own
/// grants to its join tokens (`kubeflavor:get-nodes`, the Role
/// `kubeflavor:kubeadm-config-reader`).
pub const ALLOWED_ROLES: [&str; 7] = [
    "system:node-bootstrapper",
    "system:basic-user",
    "system:discovery",
    "system:public-info-viewer",
    "kubeadm:get-nodes",
    "kubeflavor:get-nodes",
    "kubeflavor:kubeadm-config-reader",
];

/// A binding's subject as RBAC names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject<'a> {
    pub kind: &'a str,
    pub name: &'a str,
}

/// Whether `subject` stands for a bootstrap token (or every requester, which includes one).
pub fn is_bootstrap_identity(subject: Subject<'_>) -> bool {
    match subject.kind {
        "Group" => {
            subject.name == BOOTSTRAPPERS_GROUP
                || subject
                    .name
                    .strip_prefix(BOOTSTRAPPERS_GROUP)
                    .is_some_and(|rest| rest.starts_with(':'))
                || subject.name == AUTHENTICATED_GROUP
                || subject.name == UNAUTHENTICATED_GROUP
        }
        "User" => subject.name.starts_with(BOOTSTRAP_USER_PREFIX),
        _ => false,
    }
}

/// The binding rule: a binding (`role_kind`, `role_name` its roleRef) is refused when it
/// grants a bootstrap identity a ClusterRole not in [`ALLOWED_ROLES`].
pub fn binding_refused(subjects: &[Subject<'_>], role_kind: &str, role_name: &str) -> bool {
    role_kind == "ClusterRole"
        && !ALLOWED_ROLES.contains(&role_name)
        && subjects.iter().copied().any(is_bootstrap_identity)
}

/// A role's rule, as RBAC names its lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule<'a> {
    pub api_groups: Vec<&'a str>,
    pub resources: Vec<&'a str>,
    pub verbs: Vec<&'a str>,
}

/// Whether `rule` allows `create` on [`NODECLIENT`] (as RBAC's `RuleAllows` matches:
/// `*` everywhere, `*/nodeclient` for the subresource).
pub fn grants_nodeclient(rule: &Rule<'_>) -> bool {
    rule.api_groups
        .iter()
        .any(|g| *g == CERTIFICATES_GROUP || *g == "*")
        && rule
            .resources
            .iter()
            .any(|r| *r == NODECLIENT || *r == "*" || *r == "*/nodeclient")
        && rule.verbs.iter().any(|v| *v == "create" || *v == "*")
}

/// The role rule: a role named `name` is refused when a rule of it grants `create` on
/// [`NODECLIENT`] and its name is not `system:*`, or is one of [`ALLOWED_ROLES`].
pub fn role_refused(name: &str, rules: &[Rule<'_>]) -> bool {
    (!name.starts_with("system:") || ALLOWED_ROLES.contains(&name))
        && rules.iter().any(grants_nodeclient)
}

fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL: the subject `s` is a bootstrap identity ([`is_bootstrap_identity`]).
fn bootstrap_subject(s: &str) -> String {
    format!(
        "({s}.kind == 'Group' && ({s}.name == '{BOOTSTRAPPERS_GROUP}' \
         || {s}.name.startsWith('{BOOTSTRAPPERS_GROUP}:') || {s}.name == '{AUTHENTICATED_GROUP}' \
         || {s}.name == '{UNAUTHENTICATED_GROUP}')) \
         || ({s}.kind == 'User' && {s}.name.startsWith('{BOOTSTRAP_USER_PREFIX}'))"
    )
}

/// CEL: the rule `r` grants create on [`NODECLIENT`] ([`grants_nodeclient`]).
fn nodeclient_rule(r: &str) -> String {
    format!(
        "has({r}.apiGroups) && {r}.apiGroups.exists(g, g == '{CERTIFICATES_GROUP}' || g == '*') \
         && has({r}.resources) && {r}.resources.exists(x, x == '{NODECLIENT}' || x == '*' || x == '*/nodeclient') \
         && {r}.verbs.exists(v, v == 'create' || v == '*')"
    )
}

/// A validation of the policy: its CEL expression and the message of its refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    pub expression: String,
    pub message: String,
}

/// The policy's validations: the binding rule, then the role rule. Each passes requests
/// about the other's resources.
pub fn rules() -> [PolicyRule; 2] {
    let bindings = cel_list(&BINDING_RESOURCES);
    let roles = cel_list(&ROLE_RESOURCES);
    let allowed = cel_list(&ALLOWED_ROLES);
    [
        PolicyRule {
            expression: format!(
                "!(request.resource.resource in {bindings}) || object.roleRef.kind != 'ClusterRole' \
                 || object.roleRef.name in {allowed} || !has(object.subjects) \
                 || !object.subjects.exists(s, {})",
                bootstrap_subject("s")
            ),
            message: format!(
                "kubeflavor is the sole approver (install --sole-approver): a binding may not grant \
                 bootstrap tokens (groups {BOOTSTRAPPERS_GROUP}, {BOOTSTRAPPERS_GROUP}:*, \
                 {AUTHENTICATED_GROUP}, {UNAUTHENTICATED_GROUP}; users {BOOTSTRAP_USER_PREFIX}*) a \
                 ClusterRole other than {}: another role may let kube-controller-manager approve their \
                 node certificates for any name (kubeadm's kubeadm:node-autoapprove-bootstrap does; \
                 run kubeadm upgrade apply with --skip-phases bootstrap-token)",
                ALLOWED_ROLES.join(", ")
            ),
        },
        PolicyRule {
            expression: format!(
                "!(request.resource.resource in {roles}) \
                 || (object.metadata.name.startsWith('system:') && !(object.metadata.name in {allowed})) \
                 || !has(object.rules) || !object.rules.exists(r, {})",
                nodeclient_rule("r")
            ),
            message: format!(
                "kubeflavor is the sole approver (install --sole-approver): a role not named system:*, \
                 or one bootstrap tokens may be granted ({}), may not grant create on {NODECLIENT} in \
                 {CERTIFICATES_GROUP} (wildcards included): whoever holds it has \
                 kube-controller-manager approve node certificates for any name",
                ALLOWED_ROLES.join(", ")
            ),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str) -> Subject<'_> {
        Subject {
            kind: "Group",
            name,
        }
    }

    fn user(name: &str) -> Subject<'_> {
        Subject { kind: "User", name }
    }

    #[test]
    fn bootstrap_identities_are_the_token_groups_users_and_everyone() {
        for s in [
            group("system:bootstrappers"),
            group("system:bootstrappers:kubeadm:default-node-token"),
            group("system:bootstrappers:kubeflavor:node"),
            group("system:authenticated"),
            group("system:unauthenticated"),
            user("system:bootstrap:abcdef"),
        ] {
            assert!(is_bootstrap_identity(s), "{s:?}");
        }
        for s in [
            group("system:bootstrappersx"),
            group("system:nodes"),
            group("system:masters"),
            user("system:bootstrappers"),
            user("system:node:a"),
            Subject {
                kind: "ServiceAccount",
                name: "system:bootstrap:abcdef",
            },
        ] {
            assert!(!is_bootstrap_identity(s), "{s:?}");
        }
    }

    #[test]
    fn kubeadms_autoapproval_is_refused_and_the_allowed_roles_pass() {
        let kubeadm = [group("system:bootstrappers:kubeadm:default-node-token")];
        assert!(binding_refused(&kubeadm, "ClusterRole", NODECLIENT_ROLE));
        assert!(binding_refused(
            &[user("system:bootstrap:abcdef")],
            "ClusterRole",
            "cluster-admin"
        ));
        assert!(binding_refused(
            &[group("system:nodes"), group("system:authenticated")],
            "ClusterRole",
            "edit"
        ));
        for role in ALLOWED_ROLES {
            assert!(!binding_refused(&kubeadm, "ClusterRole", role), "{role}");
        }
        assert!(
            !binding_refused(&[group("system:nodes")], "ClusterRole", NODECLIENT_ROLE),
            "not a bootstrap identity"
        );
        assert!(!binding_refused(&[], "ClusterRole", NODECLIENT_ROLE));
        assert!(
            !binding_refused(&kubeadm, "Role", "kubeadm:kubelet-config"),
            "a namespaced Role grants nothing cluster-scoped"
        );
    }

    fn rule<'a>(groups: &[&'a str], resources: &[&'a str], verbs: &[&'a str]) -> Rule<'a> {
        Rule {
            api_groups: groups.to_vec(),
            resources: resources.to_vec(),
            verbs: verbs.to_vec(),
        }
    }

    #[test]
    fn a_role_granting_create_on_nodeclient_is_refused_wildcards_included() {
        let granting = [
            rule(&[CERTIFICATES_GROUP], &[NODECLIENT], &["create"]),
            rule(&["*"], &[NODECLIENT], &["create"]),
            rule(&[CERTIFICATES_GROUP], &["*"], &["create"]),
            rule(&[CERTIFICATES_GROUP], &["*/nodeclient"], &["create"]),
            rule(&[CERTIFICATES_GROUP], &[NODECLIENT], &["*"]),
            rule(&["*"], &["*"], &["*"]),
        ];
        for r in &granting {
            assert!(grants_nodeclient(r), "{r:?}");
            assert!(role_refused("approver", std::slice::from_ref(r)), "{r:?}");
            assert!(!role_refused("system:anything", std::slice::from_ref(r)));
        }
        let harmless = [
            rule(&[""], &["*"], &["*"]),
            rule(
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests"],
                &["*"],
            ),
            rule(
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/selfnodeclient"],
                &["create"],
            ),
            rule(&[CERTIFICATES_GROUP], &[NODECLIENT], &["get", "list"]),
        ];
        for r in &harmless {
            assert!(!grants_nodeclient(r), "{r:?}");
        }
        assert!(!role_refused("viewer", &harmless));
        assert!(role_refused(
            "mixed",
            &[harmless[0].clone(), granting[0].clone()]
        ));
    }

    #[test]
    fn a_role_bootstrap_tokens_may_be_granted_may_not_be_edited_to_grant_nodeclient() {
        let granting = [rule(&[CERTIFICATES_GROUP], &[NODECLIENT], &["create"])];
        for role in ALLOWED_ROLES {
            assert!(role_refused(role, &granting), "{role}");
        }
        // Its ordinary rules stay writable (the API server reconciles them at start).
        let bootstrapper = [rule(
            &[CERTIFICATES_GROUP],
            &["certificatesigningrequests"],
            &["create", "get", "list", "watch"],
        )];
        assert!(!role_refused("system:node-bootstrapper", &bootstrapper));
        // The API server's own nodeclient role keeps its grant: no bootstrap token may be
        // bound to it (the binding rule).
        assert!(!role_refused(NODECLIENT_ROLE, &granting));
    }

    #[test]
    fn the_expressions_name_the_lists_of_the_model() {
        let [bindings, roles] = rules();
        assert!(
            bindings
                .expression
                .contains("['clusterrolebindings', 'rolebindings']")
        );
        for role in ALLOWED_ROLES {
            assert!(bindings.expression.contains(&format!("'{role}'")), "{role}");
            assert!(bindings.message.contains(role));
        }
        assert!(roles.expression.contains("['clusterroles', 'roles']"));
        assert!(roles.expression.contains("'*/nodeclient'"));
        for role in ALLOWED_ROLES {
            assert!(roles.expression.contains(&format!("'{role}'")), "{role}");
        }
        assert!(bindings.message.contains("--skip-phases bootstrap-token"));
    }
}
