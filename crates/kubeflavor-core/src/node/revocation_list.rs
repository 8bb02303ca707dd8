//! P7 (judged for life), durable: the revocation list, a ConfigMap
//! `kube-system/kubeflavor-revoked-nodes` whose data keys are revoked node names, and the
//! ValidatingAdmissionPolicy that reads it.
//!
//! The authorization webhook refuses a revoked node only while it can answer; when it
//! cannot (a flood, a crash, a partition), the API server's `NoOpinion` fallback hands the
//! request to Node and RBAC. Revocation therefore also takes away what those would still
//! allow, and keeps it away without any kubeflavor process running:
//! - the list is written by `node revoke` itself (no controller leader needed), and only a
//!   deliberate `node forget` removes a name: deleting the binding or the Node does not;
//! - the API server's own admission (this policy, parameterised by the list) refuses every
//!   write of the node's kubelet, a Pod created on it, a scheduler binding to it and a Node
//!   created under its name;
//! - the revocation deletes the pods bound to the node, whose ServiceAccount tokens are
//!   bound to them and stop authenticating once they are gone, and spends the node's join
//!   token (its Secret deleted), so the join line joins no new name.
//!
//! Each value is a small JSON record `{"at": RFC 3339, "by": user, "reason": ...}`; a name
//! is listed by its key alone, so a value that does not parse still revokes (fail closed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::flavor::{REVOKED_TAINT, UNVERIFIED_TAINT};
use crate::node::state::Revocation;

/// Where the list lives (with the token Secrets: readable by admins only).
pub const NAMESPACE: &str = "kube-system";
/// The ConfigMap's name.
pub const NAME: &str = "kubeflavor-revoked-nodes";
/// The ValidatingAdmissionPolicy (and its binding) that reads the list.
pub const POLICY_NAME: &str = "kubeflavor-revoked-nodes";
/// The group of every kubelet identity, and their user name prefix.
pub const NODES_GROUP: &str = "system:nodes";
pub const NODE_USER_PREFIX: &str = "system:node:";

/// Why a name is listed (the Revoked condition's reason of the binding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    RevokedByAdmin,
    TokenRevoked,
}

impl Reason {
    pub fn of(why: &Revocation) -> Reason {
        match why {
            Revocation::ByAdmin => Reason::RevokedByAdmin,
            Revocation::TokenRevoked(_) => Reason::TokenRevoked,
        }
    }
}

/// One listed name's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// When it was listed, RFC 3339.
    pub at: jiff::Timestamp,
    /// Who listed it (the requesting user as the API server names it, or the controller).
    pub by: String,
    pub reason: Reason,
}

/// A value of the list that is not an [`Entry`]. The name stays listed all the same.
#[derive(Debug, thiserror::Error)]
#[error("the revocation record of {name} is not readable ({source}); the node stays revoked")]
pub struct EntryError {
    pub name: String,
    #[source]
    pub source: serde_json::Error,
}

impl Entry {
    pub fn new(at: jiff::Timestamp, by: &str, why: &Revocation) -> Entry {
        Entry {
            at: at.round(jiff::Unit::Second).unwrap_or(at),
            by: by.to_string(),
            reason: Reason::of(why),
        }
    }

    /// The value stored under the node's name.
    pub fn to_value(&self) -> String {
        serde_json::to_string(self).expect("an Entry always serializes")
    }

    pub fn parse(name: &str, value: &str) -> Result<Entry, EntryError> {
        serde_json::from_str(value).map_err(|source| EntryError {
            name: name.to_string(),
            source,
        })
    }
}

/// Whether `node` is listed: its key is present, whatever its value (an unreadable value
/// does not un-revoke).
pub fn is_listed(data: &BTreeMap<String, String>, node: &str) -> bool {
    data.contains_key(node)
}

/// The data with `node` added (`None`: listed already, nothing to write; the first record
/// stands).
pub fn with_node(
    data: &BTreeMap<String, String>,
    node: &str,
    entry: &Entry,
) -> Option<BTreeMap<String, String>> {
    if is_listed(data, node) {
        return None;
    }
    let mut data = data.clone();
    data.insert(node.to_string(), entry.to_value());
    Some(data)
}

/// The data without `node` (`None`: not listed).
pub fn without_node(
    data: &BTreeMap<String, String>,
    node: &str,
) -> Option<BTreeMap<String, String>> {
    if !is_listed(data, node) {
        return None;
    }
    let mut data = data.clone();
    data.remove(node);
    Some(data)
}

// ---------------------------------------------------------------------------------------
// The admission policy.

/// A named CEL expression (a match condition or a variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: &'static str,
    pub expression: String,
}

/// One rule: the request is refused when `expression` is false, with `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: &'static str,
    pub expression: String,
    pub message: String,
}

/// `s` as a CEL string literal.
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The request is for the object itself: the API server leaves `request.subResource` out
/// when there is none (measured on v1.36: `no such key: subResource`), so it is read
/// through `has`.
const NO_SUBRESOURCE: &str = "(!has(request.subResource) || request.subResource == '')";
/// The request is for the `binding` subresource.
const BINDING_SUBRESOURCE: &str = "has(request.subResource) && request.subResource == 'binding'";

/// `name_expr` is a key of the list (the policy's parameter, the ConfigMap). A ConfigMap
/// with no data has no `data` field.
fn listed(name_expr: &str) -> String {
    format!("has(params.data) && {name_expr} in params.data")
}

/// The policy's only match condition: a kubelet's request, or one about a core Pod or
/// Node (so the policy is not evaluated for every other write of the cluster).
pub fn match_conditions() -> Vec<Named> {
    vec![Named {
        name: "kubelet-or-pod-or-node",
        expression: format!(
            "{group} in request.userInfo.groups || (request.resource.group == '' && \
             request.resource.resource in ['pods', 'nodes'])",
            group = cel_string(NODES_GROUP)
        ),
    }]
}

/// `variables.kubelet`: the node name of a kubelet identity (`system:node:<name>` in
/// `system:nodes`, as the Node authorizer reads it), '' for anyone else.
pub fn variables() -> Vec<Named> {
    vec![Named {
        name: "kubelet",
        expression: format!(
            "{group} in request.userInfo.groups && request.userInfo.username.startsWith({prefix}) \
             ? request.userInfo.username.substring({len}) : ''",
            group = cel_string(NODES_GROUP),
            prefix = cel_string(NODE_USER_PREFIX),
            len = NODE_USER_PREFIX.len(),
        ),
    }]
}

fn rule(name: &'static str, refused_when: String, message: &str) -> Rule {
    Rule {
        name,
        expression: format!("!({refused_when})"),
        message: format!(
            "{message} (listed in {NAMESPACE}/{NAME}; 'kubeflavor node forget' un-revokes)"
        ),
    }
}

/// The rules, each refusing one way a revoked node could keep or regain a foothold.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "kubelet-of-a-listed-node",
            format!("variables.kubelet != '' && {}", listed("variables.kubelet")),
            "this node is revoked: its kubelet may write nothing",
        ),
        rule(
            "pod-on-a-listed-node",
            format!(
                "request.resource.group == '' && request.resource.resource == 'pods' && \
                 {NO_SUBRESOURCE} && request.operation == 'CREATE' && \
                 has(object.spec.nodeName) && {}",
                listed("object.spec.nodeName")
            ),
            "no Pod may be created on a revoked node",
        ),
        rule(
            "binding-to-a-listed-node",
            format!(
                "request.resource.group == '' && request.resource.resource == 'pods' && \
                 {BINDING_SUBRESOURCE} && request.operation == 'CREATE' && \
                 has(object.target) && {}",
                listed("object.target.name")
            ),
            "no Pod may be bound to a revoked node",
        ),
        rule(
            "node-of-a-listed-name",
            format!(
                "request.resource.group == '' && request.resource.resource == 'nodes' && \
                 {NO_SUBRESOURCE} && request.operation == 'CREATE' && {}",
                listed("object.metadata.name")
            ),
            "no Node may be created under a revoked node's name",
        ),
    ]
}

/// A request, as far as the policy reads it.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    pub user: &'a str,
    pub groups: &'a [&'a str],
    /// API group and resource, subresource ('' for none), operation.
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub operation: &'a str,
    /// The object's `metadata.name`, a Pod's `spec.nodeName`, a Binding's `target.name`.
    pub name: &'a str,
    pub node_name: Option<&'a str>,
    pub target: Option<&'a str>,
}

/// The model the expressions implement: the name of the rule that refuses `req` given the
/// `listed` names, if any. Tests pair it with the expressions; the e2e suite runs them.
pub fn refused_by(req: &Request<'_>, listed: &BTreeMap<String, String>) -> Option<&'static str> {
    let is = |n: Option<&str>| n.is_some_and(|n| is_listed(listed, n));
    let kubelet = req
        .groups
        .contains(&NODES_GROUP)
        .then(|| req.user.strip_prefix(NODE_USER_PREFIX))
        .flatten()
        .filter(|n| !n.is_empty());
    let core = |r: &str| req.group.is_empty() && req.resource == r;
    if is(kubelet) {
        Some("kubelet-of-a-listed-node")
    } else if core("pods")
        && req.subresource.is_empty()
        && req.operation == "CREATE"
        && is(req.node_name)
    {
        Some("pod-on-a-listed-node")
    } else if core("pods")
        && req.subresource == "binding"
        && req.operation == "CREATE"
        && is(req.target)
    {
        Some("binding-to-a-listed-node")
    } else if core("nodes")
        && req.subresource.is_empty()
        && req.operation == "CREATE"
        && is(Some(req.name))
    {
        Some("node-of-a-listed-name")
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------
// What a revocation must do.

/// The steps of a revocation, in the order they are done; each is idempotent, so a run
/// that stopped anywhere is finished by the next (P6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// Add the name to the list: from here on the API server's admission refuses the node.
    List,
    /// Set the binding's Revoked condition.
    Binding,
    /// Taint the Node `kubeflavor.io/revoked:NoExecute` and `unverified:NoSchedule`.
    Taint,
    /// Delete every Pod bound to the node, at once (grace period 0).
    Pods,
    /// Spend its join token: delete the token Secret.
    Token,
}

impl Step {
    pub const ALL: [Step; 5] = [
        Step::List,
        Step::Binding,
        Step::Taint,
        Step::Pods,
        Step::Token,
    ];

    /// The name shown in progress lines (`[pods] ...`) and trail reasons.
    pub fn name(self) -> &'static str {
        match self {
            Step::List => "list",
            Step::Binding => "binding",
            Step::Taint => "taint",
            Step::Pods => "pods",
            Step::Token => "token",
        }
    }
}

/// What is known of a node being revoked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub listed: bool,
    /// `None`: no binding; `Some(revoked)`.
    pub binding: Option<bool>,
    /// `None`: no Node; else its taints (key, effect).
    pub node_taints: Option<Vec<(String, String)>>,
    /// Pods whose `spec.nodeName` is the node.
    pub pods: usize,
    /// The join token's Secret still exists.
    pub token_secret: bool,
}

/// The taints a revoked Node must carry.
pub const REVOKED_TAINTS: [(&str, &str); 2] = [
    (REVOKED_TAINT, "NoExecute"),
    (UNVERIFIED_TAINT, "NoSchedule"),
];

/// The taints missing from `taints` for a revoked Node, in [`REVOKED_TAINTS`] order.
pub fn missing_taints(taints: &[(String, String)]) -> Vec<(&'static str, &'static str)> {
    REVOKED_TAINTS
        .into_iter()
        .filter(|(k, e)| !taints.iter().any(|(tk, te)| tk == k && te == e))
        .collect()
}

/// The steps still to do for a revoked node, in order. Every step is there whatever the
/// others' state: the list first, because it holds on its own.
pub fn remaining(facts: &Facts) -> Vec<Step> {
    let mut steps = Vec::new();
    if !facts.listed {
        steps.push(Step::List);
    }
    if facts.binding == Some(false) {
        steps.push(Step::Binding);
    }
    if facts
        .node_taints
        .as_ref()
        .is_some_and(|t| !missing_taints(t).is_empty())
    {
        steps.push(Step::Taint);
    }
    if facts.pods > 0 {
        steps.push(Step::Pods);
    }
    if facts.token_secret {
        steps.push(Step::Token);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(names: &[&str]) -> BTreeMap<String, String> {
        let e = Entry::new(jiff::Timestamp::UNIX_EPOCH, "admin", &Revocation::ByAdmin);
        names
            .iter()
            .map(|n| (n.to_string(), e.to_value()))
            .collect()
    }

    const KUBELET: [&str; 2] = ["system:nodes", "system:authenticated"];

    fn req<'a>(resource: &'a str, sub: &'a str, op: &'a str) -> Request<'a> {
        Request {
            user: "admin",
            groups: &["system:masters"],
            resource,
            subresource: sub,
            operation: op,
            ..Request::default()
        }
    }

    #[test]
    fn entry_round_trips_as_the_design_note_shapes_it() {
        let at: jiff::Timestamp = "2026-12-02T06:00:00.5Z".parse().unwrap();
        let e = Entry::new(at, "kubernetes-admin", &Revocation::ByAdmin);
        let v = e.to_value();
        assert_eq!(
            v,
            r#"{"at":"2026-12-02T06:00:01Z","by":"kubernetes-admin","reason":"RevokedByAdmin"}"#
        );
        assert_eq!(Entry::parse("w1", &v).unwrap(), e);
        let t = Entry::new(
            at,
            "x",
            &Revocation::TokenRevoked("abcdef".parse().unwrap()),
        );
        assert_eq!(t.reason, Reason::TokenRevoked);
    }

    #[test]
    fn an_unreadable_record_still_revokes() {
        let mut data = BTreeMap::new();
        data.insert("w1".to_string(), "garbage".to_string());
        assert!(Entry::parse("w1", "garbage").is_err());
        assert!(is_listed(&data, "w1"));
        assert!(
            with_node(
                &data,
                "w1",
                &Entry::new(jiff::Timestamp::UNIX_EPOCH, "a", &Revocation::ByAdmin)
            )
            .is_none()
        );
    }

    #[test]
    fn adding_keeps_the_first_record_and_removing_is_explicit() {
        let data = listed(&["w1"]);
        let e = Entry::new(jiff::Timestamp::now(), "other", &Revocation::ByAdmin);
        assert_eq!(with_node(&data, "w1", &e), None);
        let added = with_node(&data, "w2", &e).unwrap();
        assert_eq!(added.len(), 2);
        assert_eq!(without_node(&added, "w2").unwrap(), data);
        assert_eq!(without_node(&data, "w2"), None);
    }

    /// Every rule is there, under its name: removing one fails this test.
    #[test]
    fn the_policy_has_each_rule() {
        let names: Vec<_> = rules().iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "kubelet-of-a-listed-node",
                "pod-on-a-listed-node",
                "binding-to-a-listed-node",
                "node-of-a-listed-name"
            ]
        );
        let r = rules();
        assert_eq!(
            r[0].expression,
            "!(variables.kubelet != '' && has(params.data) && variables.kubelet in params.data)"
        );
        assert!(
            r[1].expression
                .contains("object.spec.nodeName in params.data")
        );
        assert!(r[1].expression.contains("request.operation == 'CREATE'"));
        assert!(
            r[1].expression
                .contains("(!has(request.subResource) || request.subResource == '')")
        );
        assert!(
            r[2].expression
                .contains("has(request.subResource) && request.subResource == 'binding'")
        );
        assert!(
            r[2].expression
                .contains("object.target.name in params.data")
        );
        assert!(
            r[3].expression
                .contains("request.resource.resource == 'nodes'")
        );
        assert!(
            r[3].expression
                .contains("object.metadata.name in params.data")
        );
        for rule in &r {
            assert!(
                rule.message
                    .contains("kube-system/kubeflavor-revoked-nodes"),
                "{rule:?}"
            );
        }
    }

    /// The kubelet is recognised by its group and user, as the Node authorizer does; the
    /// match condition lets every kubelet request and every Pod or Node write reach the rules.
    #[test]
    fn the_policy_sees_kubelets_pods_and_nodes() {
        assert_eq!(
            variables()[0].expression,
            "'system:nodes' in request.userInfo.groups && request.userInfo.username.startsWith('system:node:') \
             ? request.userInfo.username.substring(12) : ''"
        );
        assert_eq!(
            match_conditions()[0].expression,
            "'system:nodes' in request.userInfo.groups || (request.resource.group == '' && \
             request.resource.resource in ['pods', 'nodes'])"
        );
    }

    #[test]
    fn a_listed_kubelet_may_write_nothing() {
        let data = listed(&["w1"]);
        for (resource, sub, op) in [
            ("nodes", "status", "UPDATE"),
            ("serviceaccounts", "token", "CREATE"),
            ("pods", "", "DELETE"),
            ("leases", "", "UPDATE"),
        ] {
            let mut r = req(resource, sub, op);
            r.user = "system:node:w1";
            r.groups = &KUBELET;
            assert_eq!(
                refused_by(&r, &data),
                Some("kubelet-of-a-listed-node"),
                "{r:?}"
            );
            r.user = "system:node:w2";
            assert_eq!(refused_by(&r, &data), None, "{r:?}");
        }
        // Not in system:nodes: not a kubelet to the Node authorizer, nor here.
        let mut r = req("nodes", "status", "UPDATE");
        r.user = "system:node:w1";
        assert_eq!(refused_by(&r, &data), None);
    }

    #[test]
    fn nothing_lands_on_a_listed_node_and_its_name_cannot_come_back() {
        let data = listed(&["w1"]);
        let mut pod = req("pods", "", "CREATE");
        pod.node_name = Some("w1");
        assert_eq!(refused_by(&pod, &data), Some("pod-on-a-listed-node"));
        pod.node_name = Some("w2");
        assert_eq!(refused_by(&pod, &data), None);
        pod.node_name = None;
        assert_eq!(refused_by(&pod, &data), None);
        let mut bind = req("pods", "binding", "CREATE");
        bind.target = Some("w1");
        assert_eq!(refused_by(&bind, &data), Some("binding-to-a-listed-node"));
        let mut node = req("nodes", "", "CREATE");
        node.name = "w1";
        assert_eq!(refused_by(&node, &data), Some("node-of-a-listed-name"));
        // An admin may still delete the Node and update it (taints).
        node.operation = "DELETE";
        assert_eq!(refused_by(&node, &data), None);
        // Nothing is refused when the list is empty.
        node.operation = "CREATE";
        assert_eq!(refused_by(&node, &BTreeMap::new()), None);
    }

    #[test]
    fn a_fresh_revocation_does_every_step_in_order() {
        let facts = Facts {
            listed: false,
            binding: Some(false),
            node_taints: Some(vec![]),
            pods: 2,
            token_secret: true,
        };
        assert_eq!(remaining(&facts), Step::ALL);
    }

    #[test]
    fn a_finished_revocation_has_nothing_left_and_a_crashed_one_its_rest() {
        let done = Facts {
            listed: true,
            binding: Some(true),
            node_taints: Some(
                REVOKED_TAINTS
                    .iter()
                    .map(|(k, e)| (k.to_string(), e.to_string()))
                    .collect(),
            ),
            pods: 0,
            token_secret: false,
        };
        assert_eq!(remaining(&done), []);
        let crashed = Facts {
            node_taints: Some(vec![(REVOKED_TAINT.into(), "NoExecute".into())]),
            pods: 1,
            ..done.clone()
        };
        assert_eq!(remaining(&crashed), [Step::Taint, Step::Pods]);
        // No binding and no Node: the list alone, and the token if one is known.
        let bare = Facts {
            token_secret: true,
            ..Facts::default()
        };
        assert_eq!(remaining(&bare), [Step::List, Step::Token]);
    }

    #[test]
    fn a_revoked_node_gets_both_taints_once() {
        assert_eq!(missing_taints(&[]), REVOKED_TAINTS);
        let has_unverified = [(UNVERIFIED_TAINT.to_string(), "NoSchedule".to_string())];
        assert_eq!(
            missing_taints(&has_unverified),
            [(REVOKED_TAINT, "NoExecute")]
        );
        // The same key with another effect is another taint.
        let other = [(REVOKED_TAINT.to_string(), "NoSchedule".to_string())];
        assert_eq!(missing_taints(&other).len(), 2);
    }
}
