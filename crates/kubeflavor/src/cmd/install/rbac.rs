//! The RBAC objects of `kubeflavor install`: least privilege for the controller (each verb
//! with its reason) and the permissions of kubeflavor's bootstrap tokens.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;
use kubeflavor_cluster::ops::trail::TRAIL_NAMESPACE;
use kubeflavor_core::token::secret::{CONTROL_PLANE_GROUP, NODE_GROUP, TOKEN_SECRET_NAMESPACE};

use super::Document;

/// The controller's ServiceAccount (in the install namespace).
pub use crate::controller::approvers::CONTROLLER_SERVICE_ACCOUNT as CONTROLLER_SA;
/// The signer of kubelet client certificates: the only one the controller may approve for.
pub use kubeflavor_core::csr::client::KUBELET_CLIENT_SIGNER;
/// The signer of kubelet serving certificates: approved for only with --approve-serving.
pub use kubeflavor_core::csr::serving::KUBELET_SERVING_SIGNER;

/// A rule and the sentence a reader of the YAML needs to judge it.
pub struct Rule {
    pub why: &'static str,
    pub rule: PolicyRule,
}

pub(super) fn rule(
    groups: &[&str],
    resources: &[&str],
    verbs: &[&str],
    names: &[&str],
    why: &'static str,
) -> Rule {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Rule {
        why,
        rule: PolicyRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            resource_names: (!names.is_empty()).then(|| strings(names)),
            non_resource_urls: None,
        },
    }
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    super::object_meta(name, namespace, "rbac")
}

/// The notes (for the YAML comments) and the rules (for the object), in the same order.
fn notes_and_rules(rules: Vec<Rule>) -> (Vec<String>, Vec<PolicyRule>) {
    rules
        .into_iter()
        .map(|r| (r.why.to_string(), r.rule))
        .unzip()
}

pub(super) fn cluster_role(name: &str, about: &str, rules: Vec<Rule>) -> Document {
    let (notes, rules) = notes_and_rules(rules);
    Document::with_rules(
        about,
        &ClusterRole {
            metadata: meta(name, None),
            rules: Some(rules),
            aggregation_rule: None,
        },
        notes,
    )
}

pub(super) fn role(name: &str, namespace: &str, about: &str, rules: Vec<Rule>) -> Document {
    let (notes, rules) = notes_and_rules(rules);
    Document::with_rules(
        about,
        &Role {
            metadata: meta(name, Some(namespace)),
            rules: Some(rules),
        },
        notes,
    )
}

/// The ServiceAccount `name` of `namespace` as a binding's subject.
pub(super) fn service_account_subject(name: &str, namespace: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        api_group: None,
    }
}

pub(super) fn group_subject(group: &str) -> Subject {
    Subject {
        kind: "Group".into(),
        name: group.into(),
        namespace: None,
        api_group: Some("rbac.authorization.k8s.io".into()),
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
    }
}

pub(super) fn cluster_role_binding(
    name: &str,
    about: &str,
    role: &str,
    subjects: Vec<Subject>,
) -> Document {
    Document::new(
        about,
        &ClusterRoleBinding {
            metadata: meta(name, None),
            role_ref: role_ref("ClusterRole", role),
            subjects: Some(subjects),
        },
    )
}

pub(super) fn role_binding(
    name: &str,
    namespace: &str,
    about: &str,
    role: &str,
    subjects: Vec<Subject>,
) -> Document {
    Document::new(
        about,
        &RoleBinding {
            metadata: meta(name, Some(namespace)),
            role_ref: role_ref("Role", role),
            subjects: Some(subjects),
        },
    )
}

/// The groups of kubeflavor's join tokens: node tokens and control-plane tokens. Both
/// join a kubelet, so both need what `kubeadm join` and the kubelet's TLS bootstrap need.
fn token_groups() -> Vec<Subject> {
    vec![
        group_subject(NODE_GROUP),
        group_subject(CONTROL_PLANE_GROUP),
    ]
}

/// Who a role is granted to: the binding's subjects, and how its comment names them.
pub(super) struct Grantee {
    pub shown: String,
    pub subjects: Vec<Subject>,
}

/// A ClusterRole and the ClusterRoleBinding (of the same name) granting it to `to`.
pub(super) fn granted_cluster_role(
    name: &str,
    about: &str,
    rules: Vec<Rule>,
    to: &Grantee,
) -> [Document; 2] {
    [
        cluster_role(name, about, rules),
        cluster_role_binding(
            name,
            &format!("Grants {name} to {}.", to.shown),
            name,
            to.subjects.clone(),
        ),
    ]
}

/// A Role in `namespace` and the RoleBinding (of the same name) granting it to `to`.
pub(super) fn granted_role(
    name: &str,
    namespace: &str,
    about: &str,
    rules: Vec<Rule>,
    to: &Grantee,
) -> [Document; 2] {
    [
        role(name, namespace, about, rules),
        role_binding(
            name,
            namespace,
            &format!("Grants {name} to {}.", to.shown),
            name,
            to.subjects.clone(),
        ),
    ]
}

/// The controller's permissions: one ClusterRole for cluster-scoped work, and Roles for
/// token Secrets (kube-system only), leader election and Events.
pub fn controller(namespace: &str, approve_serving: bool) -> Vec<Document> {
    let to = Grantee {
        shown: "the controller's ServiceAccount".into(),
        subjects: vec![service_account_subject(CONTROLLER_SA, namespace)],
    };
    let cluster_rules = [
        csr_approval_rules(),
        serving_approval_rules(approve_serving),
        flavor_and_binding_rules(),
        node_rules(),
        pod_rules(),
        approver_check_rules(),
    ]
    .into_iter()
    .flatten()
    .collect();
    [
        granted_cluster_role(
            "kubeflavor:controller",
            "The controller's cluster-wide permissions: only what approving kubelet client CSRs, binding nodes and flavoring them needs.",
            cluster_rules,
            &to,
        ),
        granted_role(
            "kubeflavor:controller:tokens",
            TOKEN_SECRET_NAMESPACE,
            "The controller's access to bootstrap token Secrets, in kube-system only (a Role, not a ClusterRole: no Secret elsewhere is readable).",
            token_rules(),
            &to,
        ),
        granted_role(
            "kubeflavor:controller:leader-election",
            namespace,
            "Leader election in the controller's own namespace.",
            election_rules(),
            &to,
        ),
        granted_role(
            "kubeflavor:controller:trail",
            TRAIL_NAMESPACE,
            "The admin trail: Events about CSR decisions, in kube-system.",
            trail_rules(),
            &to,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Seeing kubelet client CSRs and deciding them, for the kubelet client signer only.
fn csr_approval_rules() -> Vec<Rule> {
    vec![
        rule(
            &["certificates.k8s.io"],
            &["certificatesigningrequests"],
            &["get", "list", "watch"],
            &[],
            "get, list, watch: see kubelet client CSRs as they are filed (the watch is filtered by signer on the server) so each one gets a decision.",
        ),
        rule(
            &["certificates.k8s.io"],
            &["certificatesigningrequests/approval"],
            &["update"],
            &[],
            "update: approve or deny a CSR, which is a PUT of its /approval subresource with an Approved or Denied condition.",
        ),
        rule(
            &["certificates.k8s.io"],
            &["signers"],
            &["approve"],
            &[KUBELET_CLIENT_SIGNER],
            "approve: the API server also requires 'approve' on the CSR's signer. Limited by resourceNames to the kubelet client signer, so this controller cannot approve any other kind of certificate (serving, legacy, custom signers).",
        ),
    ]
}

/// With `--approve-serving`: 'approve' on the kubelet serving signer too. The CSR rules
/// above already let the controller see and decide CSRs of any signer; the API server's
/// signer check is what limits approvals, so this grant exists only when the controller
/// runs with the flag.
fn serving_approval_rules(approve_serving: bool) -> Vec<Rule> {
    if !approve_serving {
        return Vec::new();
    }
    vec![rule(
        &["certificates.k8s.io"],
        &["signers"],
        &["approve"],
        &[KUBELET_SERVING_SIGNER],
        "approve (--approve-serving): kubelet serving certificates of nodes kubeflavor bound. Limited by resourceNames to the kubelet serving signer.",
    )]
}

/// Reading flavors and publishing their status; keeping the bindings, never deleting one.
fn flavor_and_binding_rules() -> Vec<Rule> {
    vec![
        rule(
            &["kubeflavor.io"],
            &["flavors"],
            &["get", "list", "watch"],
            &[],
            "get, list, watch: read what each flavor puts on its nodes. Flavors are written by admins, never by the controller.",
        ),
        rule(
            &["kubeflavor.io"],
            &["flavors/status"],
            &["update", "patch"],
            &[],
            "update, patch: publish how many nodes each flavor has (status only).",
        ),
        rule(
            &["kubeflavor.io"],
            &["flavorbindings"],
            &["get", "list", "watch", "create", "update", "patch"],
            &[],
            "get, list, watch: know which token each node name is bound to. create: write the binding BEFORE approving the CSR (P3, binding). update, patch: record revocation. No delete: bindings are the audit trail.",
        ),
        rule(
            &["kubeflavor.io"],
            &["flavorbindings/status"],
            &["update", "patch"],
            &[],
            "update, patch: record whether the Node carries its flavor (Flavored, Revoked conditions, applied labels and taints).",
        ),
        rule(
            &["kubeflavor.io"],
            &["sites", "nodereports"],
            &["get", "list", "watch"],
            &[],
            "get, list, watch: the owner's Sites and each node's report, to label nodes with the site they were observed on (P9). No write: Sites are the owner's, reports the nodes'.",
        ),
        rule(
            &["kubeflavor.io"],
            &["nodereports/status"],
            &["patch"],
            &[],
            "patch: record the site and how the node's claims compare with the observation (status only; the observation itself is the join-token API's).",
        ),
    ]
}

/// Watching Nodes and patching their flavor onto them.
fn node_rules() -> Vec<Rule> {
    vec![rule(
        &[""],
        &["nodes"],
        &["get", "list", "watch", "patch"],
        &[],
        "get, list, watch: notice new, changed and re-created Nodes. patch: put the flavor's labels and taints on the Node (and restore them after drift). No update, create or delete.",
    )]
}

/// Keeping pods off revoked nodes: the revocation deletes the pods bound to a listed node,
/// and the controller deletes any that appear there later.
fn pod_rules() -> Vec<Rule> {
    vec![rule(
        &[""],
        &["pods"],
        &["list", "watch", "delete"],
        &[],
        "list, watch: see the pods bound to a revoked node (spec.nodeName). delete: remove them at once (grace period 0), so their ServiceAccount tokens stop authenticating and nothing runs there. No create, update or read of pod contents beyond the list.",
    )]
}

/// Finding out who else approves kubelet CSRs: RBAC reads and one access review.
fn approver_check_rules() -> Vec<Rule> {
    vec![
        rule(
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
            &["create"],
            &[],
            "create: at start the controller asks, as a cross-check of its RBAC reading, whether another authorizer (a webhook) lets kube-controller-manager auto-approve kubelet CSRs of kubeflavor's tokens, other tokens or renewals. It learns only yes or no, and which binding.",
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles", "clusterrolebindings"],
            &["list", "watch"],
            &[],
            "list, watch: read who may create certificatesigningrequests/nodeclient or /selfnodeclient (whose kubelet CSRs kube-controller-manager approves before kubeflavor decides), at start and whenever RBAC changes. Read only: no get of other objects, no writes.",
        ),
        rule(
            &["admissionregistration.k8s.io"],
            &[
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ],
            &["get"],
            &[kubeflavor_core::admission::unverified::POLICY_NAME],
            "get, of kubeflavor's own policy and binding only: at start the controller checks that the API server taints every kubelet-created Node, and warns when it does not.",
        ),
    ]
}

/// Reading token Secrets, reserving their uses and deleting the ones that must stop.
fn token_rules() -> Vec<Rule> {
    vec![
        rule(
            &[""],
            &["secrets"],
            &["get", "list", "watch"],
            &[],
            "get, list, watch: read bootstrap token Secrets (their flavor, use count, expiry). This Role exists only in kube-system, where token Secrets live.",
        ),
        rule(
            &[""],
            &["secrets"],
            &["update"],
            &[],
            "update: reserve a use on a token (bound node names) and count denials, with a resourceVersion precondition so two approvals cannot both take the last use.",
        ),
        rule(
            &[""],
            &["secrets"],
            &["delete"],
            &[],
            "delete: P4, rejection that ends. A denied kubelet files a new CSR about every 32 s for as long as its token authenticates; deleting an exhausted or misused token is what stops it. Also a revoked node's token, so its join line joins no new name.",
        ),
        rule(
            &[""],
            &["configmaps"],
            &["get", "list", "watch", "update"],
            &[kubeflavor_core::node::revocation_list::NAME],
            "get, list, watch, update: the revocation list only (resourceNames): every replica's webhook reads it, and the leader adds the names of revoked bindings it finds. No create or delete, and no other ConfigMap.",
        ),
    ]
}

/// Leader election among the replicas.
fn election_rules() -> Vec<Rule> {
    vec![rule(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "create", "update"],
        &[],
        "get, create, update: leader election among the replicas; only the holder of the Lease writes.",
    )]
}

/// The admin trail: Events about decisions, written and never read back.
fn trail_rules() -> Vec<Rule> {
    vec![rule(
        &["events.k8s.io"],
        &["events"],
        &["create"],
        &[],
        "create: the admin-only record of each decision's exact cause. The Events are about CSRs, which are cluster-scoped, so the API server accepts them only in default or kube-system; kube-system is readable by cluster admins and by no token holder or node. No read: the controller never reads them back.",
    )]
}

/// What kubeflavor's join tokens (node and control-plane) may do: exactly what `kubeadm
/// join` and the kubelet's TLS bootstrap need, and deliberately NOT the nodeclient
/// auto-approval.
pub fn bootstrap_tokens(token_node_read: bool) -> Vec<Document> {
    let groups = format!("groups {NODE_GROUP} and {CONTROL_PLANE_GROUP}");
    let to = Grantee {
        shown: format!("kubeflavor's join tokens ({groups})"),
        subjects: token_groups(),
    };
    let csr_filing = cluster_role_binding(
        "kubeflavor:node-bootstrapper",
        &format!(
            "Lets kubeflavor's join tokens ({groups}) file kubelet CSRs: the built-in \
             system:node-bootstrapper role (create/get/list/watch CSRs). A control-plane node's \
             kubelet bootstraps like any other, by the same binding rules.\n\
             Deliberately NO binding to system:certificates.k8s.io:certificatesigningrequests:nodeclient: \
             with it, kube-controller-manager would approve any CSR of these tokens for any node name. \
             kubeflavor's controller decides instead."
        ),
        "system:node-bootstrapper",
        to.subjects.clone(),
    );
    let config_read = granted_role(
        "kubeflavor:kubeadm-config-reader",
        TOKEN_SECRET_NAMESPACE,
        "kubeadm join reads the cluster's kubeadm and kubelet configuration.",
        vec![rule(
            &[""],
            &["configmaps"],
            &["get"],
            &["kubeadm-config", "kubelet-config"],
            "get: only the kubeadm-config and kubelet-config ConfigMaps (resourceNames), which kubeadm join downloads.",
        )],
        &to,
    );
    let node_read = token_node_read.then(|| {
        granted_cluster_role(
            GET_NODES,
            "kubeadm join reads the Node of its own name (to refuse joining over an existing node).",
            vec![rule(
                &[""],
                &["nodes"],
                &["get"],
                &[],
                "get: kubeadm join checks whether a Node of its name already exists. No list, watch or write. \
                 It also lets a token holder read the labels (the flavor) of any Node whose name it knows; \
                 install --no-token-node-read leaves this grant out (kubeflavor join does not need it, kubeadm join does).",
            )],
            &to,
        )
    });
    std::iter::once(csr_filing)
        .chain(config_read)
        .chain(node_read.into_iter().flatten())
        .collect()
}

/// The ClusterRole and ClusterRoleBinding that let join tokens read Nodes.
pub const GET_NODES: &str = "kubeflavor:get-nodes";
