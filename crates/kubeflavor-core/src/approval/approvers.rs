//! Who else approves kubelet client CSRs, read from RBAC.
//!
//! kube-controller-manager's CSR approver (pkg/controller/certificates/approver/
//! sarapprove.go) approves a kubelet client CSR (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`, O=`system:nodes`, CN=`system:node:<name>`)
//! within milliseconds, before kubeflavor sees it, when a SubjectAccessReview allows its
//! requester `create` on `certificatesigningrequests/selfnodeclient` (only when the
//! requester's user name is the CSR's CommonName: a node renewing its own certificate) or
//! on `certificatesigningrequests/nodeclient` (any kubelet client CSR, for any node name),
//! both in the group `certificates.k8s.io`, with no namespace and no object name.
//!
//! [`competing_approvals`] answers, from the ClusterRoles and ClusterRoleBindings alone,
//! which requesters RBAC lets be auto-approved so, and through which binding. RBAC
//! semantics (plugin/pkg/auth/authorizer/rbac, `VisitRulesFor`): a request without a
//! namespace, as these reviews are, is allowed by ClusterRoleBindings only; RoleBindings
//! are consulted only for a namespaced request, so no RoleBinding (and no Role) can grant
//! a cluster-scoped subresource such as these. A ClusterRoleBinding grants the rules of
//! the ClusterRole it names (a missing role grants nothing); an aggregated ClusterRole's
//! rules are those kube-controller-manager's aggregation controller copies in from the
//! ClusterRoles its selectors match, which this reading adds itself so a grant counts
//! before that controller has run. A rule matches as `RuleAllows` does: verb `create` or
//! `*`, apiGroup `certificates.k8s.io` or `*`, resource `*`,
//! `certificatesigningrequests/<sub>` or `*/<sub>`, and no `resourceNames` (the review
//! names no object).
//!
//! Which requesters a subject stands for is what [`Kind`] sorts: kubeflavor's token groups
//! (and every group all bootstrap tokens carry), other bootstrap tokens, nodes, and
//! everyone else. `system:masters` is left out: the API server allows that group every
//! request before RBAC is asked, so its members are auto-approved on every cluster, and
//! they may approve any CSR themselves anyway.

use std::collections::{BTreeMap, BTreeSet};

use crate::token::secret::{
    AUTHENTICATED_GROUP, BOOTSTRAPPERS_GROUP, CONTROL_PLANE_GROUP, NODE_GROUP,
};

/// The API group of CSRs.
pub const CERTIFICATES_GROUP: &str = "certificates.k8s.io";
/// The group of nodes' client certificates.
pub const NODES_GROUP: &str = "system:nodes";
/// The group every anonymous request carries.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group the API server allows everything before RBAC (`user.SystemPrivilegedGroup`).
pub const MASTERS_GROUP: &str = "system:masters";
/// A bootstrap token's user name is this prefix and the token id.
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";
/// A node's user name is this prefix and the node name.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// The two reviews of kube-controller-manager's approver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subresource {
    /// Any kubelet client CSR, for any node name.
    NodeClient,
    /// A kubelet client CSR whose requester is its CommonName (a node renewing).
    SelfNodeClient,
}

impl Subresource {
    pub fn as_str(self) -> &'static str {
        match self {
            Subresource::NodeClient => "nodeclient",
            Subresource::SelfNodeClient => "selfnodeclient",
        }
    }
}

/// Whose kubelet client CSRs kube-controller-manager approves first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// kubeflavor's tokens (their groups, `system:bootstrappers`, `system:authenticated`):
    /// any holder gets any node name, and nothing kubeflavor decides holds.
    KubeflavorTokens,
    /// Bootstrap tokens that are not kubeflavor's: such a token can take a name bound to a
    /// kubeflavor token.
    OtherTokens,
    /// Nodes: their renewals (selfnodeclient), and with nodeclient any name.
    Renewals,
    /// Anyone else RBAC names (users, ServiceAccounts, other groups,
    /// `system:unauthenticated`): they can get a certificate for any node name.
    OtherRequesters,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::KubeflavorTokens,
        Kind::OtherTokens,
        Kind::Renewals,
        Kind::OtherRequesters,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::KubeflavorTokens => "kubeflavor_tokens",
            Kind::OtherTokens => "other_tokens",
            Kind::Renewals => "renewals",
            Kind::OtherRequesters => "other_requesters",
        }
    }

    /// Whose CSRs, in words.
    pub fn whose(self) -> &'static str {
        match self {
            Kind::KubeflavorTokens => "kubeflavor's tokens",
            Kind::OtherTokens => "other bootstrap tokens (not kubeflavor's)",
            Kind::Renewals => "nodes (their renewals)",
            Kind::OtherRequesters => "requesters that are neither bootstrap tokens nor nodes",
        }
    }

    /// Whether the controller must not run (at start) or is not ready (later) while CSRs of
    /// this kind are auto-approved: kubeflavor's own tokens always; other tokens under
    /// `--strict`, renewals under `--manage-renewals` (the flag would silently do nothing).
    pub fn blocks(self, strict: bool, manage_renewals: bool) -> bool {
        match self {
            Kind::KubeflavorTokens => true,
            Kind::OtherTokens => strict,
            Kind::Renewals => manage_renewals,
            Kind::OtherRequesters => false,
        }
    }
}

/// One rule of a ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
}

impl Rule {
    /// `RuleAllows` for `create` on `certificatesigningrequests/<sub>` of
    /// `certificates.k8s.io`, no object name.
    pub fn allows_create(&self, sub: Subresource) -> bool {
        let combined = format!("certificatesigningrequests/{}", sub.as_str());
        let verb = self.verbs.iter().any(|v| v == "*" || v == "create");
        let group = self
            .api_groups
            .iter()
            .any(|g| g == "*" || g == CERTIFICATES_GROUP);
        let resource = self
            .resources
            .iter()
            .any(|r| r == "*" || *r == combined || r.strip_prefix("*/") == Some(sub.as_str()));
        // `ResourceNameMatches`: no names match every name; otherwise the requested one
        // (the review's is empty) must be listed.
        let name =
            self.resource_names.is_empty() || self.resource_names.iter().any(String::is_empty);
        verb && group && resource && name
    }
}

/// One requirement of a label selector (`matchExpressions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`; anything else matches nothing.
    pub operator: String,
    pub values: Vec<String>,
}

/// A label selector of an `aggregationRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

impl Selector {
    /// `metav1.LabelSelectorAsSelector` then `Matches`; an empty selector matches every
    /// object, as upstream's does (the aggregation controller then aggregates every
    /// ClusterRole).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let by_label = self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let by_expression = self.match_expressions.iter().all(|r| {
            let value = labels.get(&r.key);
            match r.operator.as_str() {
                "In" => value.is_some_and(|v| r.values.contains(v)),
                "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        });
        by_label && by_expression
    }
}

/// A ClusterRole as RBAC reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterRole {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub rules: Vec<Rule>,
    /// The selectors of its `aggregationRule`, if it has one.
    pub aggregation: Option<Vec<Selector>>,
}

/// A subject of a binding.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subject {
    User(String),
    Group(String),
    /// (namespace, name)
    ServiceAccount(String, String),
    /// A kind RBAC does not know: applies to nobody (`appliesTo` answers false).
    Other(String, String),
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::User(n) => write!(f, "User {n}"),
            Subject::Group(n) => write!(f, "Group {n}"),
            Subject::ServiceAccount(ns, n) => write!(f, "ServiceAccount {ns}/{n}"),
            Subject::Other(kind, n) => write!(f, "{kind} {n}"),
        }
    }
}

/// A ClusterRoleBinding as RBAC reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterRoleBinding {
    pub name: String,
    /// The kind of `roleRef` (`ClusterRole`; a `Role` from a ClusterRoleBinding grants
    /// nothing).
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<Subject>,
}

/// One auto-approval RBAC grants: through `binding` (of `role`), `subject` may create
/// `subresource`, which makes kube-controller-manager approve CSRs of `kind`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub kind: Kind,
    pub binding: String,
    pub role: String,
    pub subject: Subject,
    pub subresource: Subresource,
}

/// The kinds of requester a subject granted `sub` stands for (see the module
/// documentation): empty when the grant auto-approves nobody's kubelet client CSR.
pub fn kinds_of(subject: &Subject, sub: Subresource) -> BTreeSet<Kind> {
    use Kind::*;
    let kinds: &[Kind] = match (sub, subject) {
        // A selfnodeclient review succeeds only for a requester whose user name is the
        // CSR's CommonName, `system:node:<name>`: nodes alone.
        (Subresource::SelfNodeClient, Subject::Group(g))
            if g == NODES_GROUP || g == AUTHENTICATED_GROUP =>
        {
            &[Renewals]
        }
        (Subresource::SelfNodeClient, Subject::User(u)) if u.starts_with(NODE_USER_PREFIX) => {
            &[Renewals]
        }
        (Subresource::SelfNodeClient, _) => &[],
        (Subresource::NodeClient, Subject::Group(g)) => match g.as_str() {
            MASTERS_GROUP => &[],
            AUTHENTICATED_GROUP => &[KubeflavorTokens, OtherTokens, Renewals, OtherRequesters],
            // Every bootstrap token carries this group, kubeflavor's too.
            BOOTSTRAPPERS_GROUP => &[KubeflavorTokens, OtherTokens],
            NODE_GROUP | CONTROL_PLANE_GROUP => &[KubeflavorTokens],
            NODES_GROUP => &[Renewals],
            g if g.starts_with("system:bootstrappers:") => &[OtherTokens],
            _ => &[OtherRequesters],
        },
        // One token's user: kubeflavor draws its token ids at random, so a grant naming an
        // id is another tool's token (or a token not minted yet).
        (Subresource::NodeClient, Subject::User(u)) if u.starts_with(BOOTSTRAP_USER_PREFIX) => {
            &[OtherTokens]
        }
        (Subresource::NodeClient, Subject::User(u)) if u.starts_with(NODE_USER_PREFIX) => {
            &[Renewals]
        }
        (Subresource::NodeClient, Subject::User(_) | Subject::ServiceAccount(..)) => {
            &[OtherRequesters]
        }
        (Subresource::NodeClient, Subject::Other(..)) => &[],
    };
    kinds.iter().copied().collect()
}

/// The rules a ClusterRole grants: its own, and for an aggregated role those of every
/// ClusterRole its selectors match (what the aggregation controller copies in).
fn effective_rules<'a>(role: &'a ClusterRole, roles: &'a [ClusterRole]) -> Vec<&'a Rule> {
    let mut rules: Vec<&Rule> = role.rules.iter().collect();
    if let Some(selectors) = &role.aggregation {
        for other in roles {
            if other.name != role.name && selectors.iter().any(|s| s.matches(&other.labels)) {
                rules.extend(other.rules.iter());
            }
        }
    }
    rules
}

/// Every auto-approval RBAC grants through ClusterRoleBindings, sorted, each once.
pub fn competing_approvals(roles: &[ClusterRole], bindings: &[ClusterRoleBinding]) -> Vec<Grant> {
    let by_name: BTreeMap<&str, &ClusterRole> =
        roles.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut grants = BTreeSet::new();
    for binding in bindings {
        if binding.role_kind != "ClusterRole" {
            continue;
        }
        let Some(role) = by_name.get(binding.role_name.as_str()) else {
            continue;
        };
        let rules = effective_rules(role, roles);
        for sub in [Subresource::NodeClient, Subresource::SelfNodeClient] {
            if !rules.iter().any(|r| r.allows_create(sub)) {
                continue;
            }
            for subject in &binding.subjects {
                for kind in kinds_of(subject, sub) {
                    grants.insert(Grant {
                        kind,
                        binding: binding.name.clone(),
                        role: role.name.clone(),
                        subject: subject.clone(),
                        subresource: sub,
                    });
                }
            }
        }
    }
    grants.into_iter().collect()
}

/// The bindings behind each kind of competing approval (kinds without any are absent).
pub fn bindings_by_kind(grants: &[Grant]) -> BTreeMap<Kind, BTreeSet<String>> {
    let mut out: BTreeMap<Kind, BTreeSet<String>> = BTreeMap::new();
    for g in grants {
        out.entry(g.kind).or_default().insert(g.binding.clone());
    }
    out
}

/// The grants that stop the controller with these options (see [`Kind::blocks`]).
pub fn blocking(grants: &[Grant], strict: bool, manage_renewals: bool) -> Vec<&Grant> {
    grants
        .iter()
        .filter(|g| g.kind.blocks(strict, manage_renewals))
        .collect()
}

/// What the admin should do about a grant, in words: the binding's deletion, or the
/// install step that hands the approval to kubeflavor.
pub fn fix(grant: &Grant) -> String {
    let delete = format!("kubectl delete clusterrolebinding {}", grant.binding);
    match grant.kind {
        Kind::KubeflavorTokens => {
            format!("{delete} (kubeflavor's tokens must never be auto-approved)")
        }
        Kind::OtherTokens => format!("{delete}, or 'kubeflavor install --apply --sole-approver'"),
        Kind::Renewals => format!("{delete}, or 'kubeflavor install --apply --manage-renewals'"),
        Kind::OtherRequesters => delete,
    }
}

/// One line about a grant: which binding lets whom be auto-approved, and how.
pub fn describe(grant: &Grant) -> String {
    format!(
        "ClusterRoleBinding {} (ClusterRole {}) lets {} create certificatesigningrequests/{}, so \
         kube-controller-manager approves the kubelet client CSRs of {} before kubeflavor decides",
        grant.binding,
        grant.role,
        grant.subject,
        grant.subresource.as_str(),
        grant.kind.whose(),
    )
}

/// The kubelet serving signer, as RBAC names it in `signers` rules.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

impl Rule {
    /// Whether the rule grants `approve` on the signer `kubernetes.io/kubelet-serving`
    /// the way a CSR approver is granted it: a rule that names `signers` (the API server
    /// checks `approve` on the CSR's signer name, and on `kubernetes.io/*`,
    /// plugin/pkg/admission/certificates). Rules for every resource (`*`, as in
    /// cluster-admin) are an administrator's, not an approver's, and are not counted.
    pub fn approves_serving(&self) -> bool {
        let verb = self.verbs.iter().any(|v| v == "*" || v == "approve");
        let group = self
            .api_groups
            .iter()
            .any(|g| g == "*" || g == CERTIFICATES_GROUP);
        let resource = self.resources.iter().any(|r| r == "signers");
        let name = self.resource_names.is_empty()
            || self
                .resource_names
                .iter()
                .any(|n| n == SERVING_SIGNER || n == "kubernetes.io/*");
        verb && group && resource && name
    }
}

/// One grant that lets someone else approve kubelet serving CSRs (with
/// `--approve-serving`, such an approver can approve what kubeflavor denies).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServingApprover {
    pub binding: String,
    pub role: String,
    pub subject: Subject,
}

impl std::fmt::Display for ServingApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClusterRoleBinding {} (ClusterRole {}) lets {} approve kubelet serving CSRs, so it can approve serving \
             certificates kubeflavor denies (run: kubectl delete clusterrolebinding {}, or remove that approver)",
            self.binding, self.role, self.subject, self.binding
        )
    }
}

/// Every subject but `own` (kubeflavor's controller) and `system:masters` that RBAC lets
/// approve kubelet serving CSRs through a ClusterRoleBinding, sorted, each once.
pub fn serving_approvers(
    roles: &[ClusterRole],
    bindings: &[ClusterRoleBinding],
    own: &Subject,
) -> Vec<ServingApprover> {
    let by_name: BTreeMap<&str, &ClusterRole> =
        roles.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut found = BTreeSet::new();
    for binding in bindings {
        if binding.role_kind != "ClusterRole" {
            continue;
        }
        let Some(role) = by_name.get(binding.role_name.as_str()) else {
            continue;
        };
        if !effective_rules(role, roles)
            .iter()
            .any(|r| r.approves_serving())
        {
            continue;
        }
        for subject in &binding.subjects {
            let masters = *subject == Subject::Group(MASTERS_GROUP.into());
            if subject == own || masters || matches!(subject, Subject::Other(..)) {
                continue;
            }
            found.insert(ServingApprover {
                binding: binding.name.clone(),
                role: role.name.clone(),
                subject: subject.clone(),
            });
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests;
