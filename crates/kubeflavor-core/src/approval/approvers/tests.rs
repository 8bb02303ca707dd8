use super::*;
use proptest::prelude::*;

const NODECLIENT_ROLE: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
const SELFNODECLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";
const KUBEADM_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
    Rule {
        verbs: strings(verbs),
        api_groups: strings(groups),
        resources: strings(resources),
        resource_names: vec![],
    }
}

fn mk_role(name: &str, rules: Vec<Rule>) -> ClusterRole {
    ClusterRole {
        name: name.into(),
        rules,
        ..Default::default()
    }
}

/// The bootstrap policy's two approval roles, as the API server seeds them.
fn seeded_roles() -> Vec<ClusterRole> {
    vec![
        mk_role(
            NODECLIENT_ROLE,
            vec![rule(
                &["create"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        mk_role(
            SELFNODECLIENT_ROLE,
            vec![rule(
                &["create"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
        mk_role("cluster-admin", vec![rule(&["*"], &["*"], &["*"])]),
        mk_role(
            "system:node-bootstrapper",
            vec![rule(
                &["create", "get", "list", "watch"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests"],
            )],
        ),
    ]
}

fn mk_binding(name: &str, role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        name: name.into(),
        role_kind: "ClusterRole".into(),
        role_name: role.into(),
        subjects,
    }
}

fn group(g: &str) -> Subject {
    Subject::Group(g.into())
}

fn kinds(grants: &[Grant]) -> Vec<(Kind, &str)> {
    let mut out: Vec<(Kind, &str)> = grants
        .iter()
        .map(|g| (g.kind, g.binding.as_str()))
        .collect();
    out.dedup();
    out
}

#[test]
fn kubeadms_two_bindings_are_other_tokens_and_renewals() {
    let bindings = vec![
        mk_binding(
            "kubeadm:node-autoapprove-bootstrap",
            NODECLIENT_ROLE,
            vec![group(KUBEADM_GROUP)],
        ),
        mk_binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            SELFNODECLIENT_ROLE,
            vec![group(NODES_GROUP)],
        ),
        mk_binding("cluster-admin", "cluster-admin", vec![group(MASTERS_GROUP)]),
        mk_binding(
            "kubeflavor:node",
            "system:node-bootstrapper",
            vec![group(NODE_GROUP)],
        ),
    ];
    let grants = competing_approvals(&seeded_roles(), &bindings);
    assert_eq!(
        kinds(&grants),
        vec![
            (Kind::OtherTokens, "kubeadm:node-autoapprove-bootstrap"),
            (
                Kind::Renewals,
                "kubeadm:node-autoapprove-certificate-rotation"
            ),
        ]
    );
    assert_eq!(
        describe(&grants[0]),
        "ClusterRoleBinding kubeadm:node-autoapprove-bootstrap (ClusterRole \
         system:certificates.k8s.io:certificatesigningrequests:nodeclient) lets Group \
         system:bootstrappers:kubeadm:default-node-token create certificatesigningrequests/nodeclient, \
         so kube-controller-manager approves the kubelet client CSRs of other bootstrap tokens \
         (not kubeflavor's) before kubeflavor decides"
    );
    assert_eq!(
        fix(&grants[0]),
        "kubectl delete clusterrolebinding kubeadm:node-autoapprove-bootstrap, or 'kubeflavor install --apply --sole-approver'"
    );
}

#[test]
fn any_bootstrap_group_not_only_kubeadms_is_another_token() {
    let bindings = vec![mk_binding(
        "workers",
        NODECLIENT_ROLE,
        vec![group("system:bootstrappers:workers")],
    )];
    let grants = competing_approvals(&seeded_roles(), &bindings);
    assert_eq!(kinds(&grants), vec![(Kind::OtherTokens, "workers")]);
    assert_eq!(
        blocking(&grants, true, false).len(),
        1,
        "--strict is stopped by it"
    );
    assert!(
        blocking(&grants, false, true).is_empty(),
        "only --strict is"
    );
}

#[test]
fn one_tokens_user_is_another_token() {
    let bindings = vec![mk_binding(
        "one",
        NODECLIENT_ROLE,
        vec![Subject::User("system:bootstrap:abcdef".into())],
    )];
    assert_eq!(
        kinds(&competing_approvals(&seeded_roles(), &bindings)),
        vec![(Kind::OtherTokens, "one")]
    );
}

#[test]
fn groups_every_token_carries_auto_approve_kubeflavors_tokens() {
    for (g, expected) in [
        (NODE_GROUP, vec![Kind::KubeflavorTokens]),
        (CONTROL_PLANE_GROUP, vec![Kind::KubeflavorTokens]),
        (
            BOOTSTRAPPERS_GROUP,
            vec![Kind::KubeflavorTokens, Kind::OtherTokens],
        ),
        (
            AUTHENTICATED_GROUP,
            vec![
                Kind::KubeflavorTokens,
                Kind::OtherTokens,
                Kind::Renewals,
                Kind::OtherRequesters,
            ],
        ),
    ] {
        let bindings = vec![mk_binding("b", NODECLIENT_ROLE, vec![group(g)])];
        let grants = competing_approvals(&seeded_roles(), &bindings);
        assert_eq!(
            grants.iter().map(|g| g.kind).collect::<Vec<_>>(),
            expected,
            "{g}"
        );
        assert!(
            !blocking(&grants, false, false).is_empty(),
            "{g}: kubeflavor's own tokens stop the controller whatever its options"
        );
    }
}

#[test]
fn a_group_merely_named_like_kubeflavors_is_not_kubeflavors() {
    let bindings = vec![mk_binding(
        "b",
        NODECLIENT_ROLE,
        vec![group("system:bootstrappers:kubeflavor:other")],
    )];
    assert_eq!(
        kinds(&competing_approvals(&seeded_roles(), &bindings)),
        vec![(Kind::OtherTokens, "b")]
    );
}

#[test]
fn renewals_are_nodes_self_approval() {
    let bindings = vec![
        mk_binding("nodes", SELFNODECLIENT_ROLE, vec![group(NODES_GROUP)]),
        mk_binding(
            "one-node",
            SELFNODECLIENT_ROLE,
            vec![Subject::User("system:node:n1".into())],
        ),
        mk_binding(
            "everyone",
            SELFNODECLIENT_ROLE,
            vec![group(AUTHENTICATED_GROUP)],
        ),
        // selfnodeclient for requesters whose name is never a node's: auto-approves nothing.
        mk_binding(
            "tokens",
            SELFNODECLIENT_ROLE,
            vec![group(BOOTSTRAPPERS_GROUP)],
        ),
        mk_binding(
            "sa",
            SELFNODECLIENT_ROLE,
            vec![
                Subject::ServiceAccount("ns".into(), "sa".into()),
                Subject::User("alice".into()),
            ],
        ),
    ];
    let grants = competing_approvals(&seeded_roles(), &bindings);
    assert_eq!(
        kinds(&grants),
        vec![
            (Kind::Renewals, "everyone"),
            (Kind::Renewals, "nodes"),
            (Kind::Renewals, "one-node")
        ]
    );
    assert_eq!(
        blocking(&grants, true, false).len(),
        0,
        "--strict alone: renewals do not stop it"
    );
    assert_eq!(blocking(&grants, false, true).len(), 3);
}

#[test]
fn nodeclient_to_nodes_or_anyone_else_is_found() {
    let bindings = vec![mk_binding(
        "wide",
        NODECLIENT_ROLE,
        vec![
            group(NODES_GROUP),
            Subject::ServiceAccount("ns".into(), "robot".into()),
            Subject::User("alice".into()),
            group(UNAUTHENTICATED_GROUP),
            group(MASTERS_GROUP),
            Subject::Other("Alien".into(), "x".into()),
        ],
    )];
    let grants = competing_approvals(&seeded_roles(), &bindings);
    let subjects: Vec<(Kind, String)> = grants
        .iter()
        .map(|g| (g.kind, g.subject.to_string()))
        .collect();
    assert_eq!(
        subjects,
        vec![
            (Kind::Renewals, "Group system:nodes".to_string()),
            (Kind::OtherRequesters, "User alice".to_string()),
            (
                Kind::OtherRequesters,
                "Group system:unauthenticated".to_string()
            ),
            (Kind::OtherRequesters, "ServiceAccount ns/robot".to_string()),
        ]
    );
    assert!(
        blocking(&grants, true, false).is_empty(),
        "no token is auto-approved"
    );
}

#[test]
fn wildcards_grant_as_rbac_matches_them() {
    for (r, grants) in [
        (rule(&["*"], &["*"], &["*"]), true),
        (rule(&["create"], &["*"], &["*/nodeclient"]), true),
        (
            rule(
                &["*"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/nodeclient"],
            ),
            true,
        ),
        // The parent resource alone does not cover the subresource.
        (
            rule(
                &["create"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests"],
            ),
            false,
        ),
        (
            rule(
                &["create"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/*"],
            ),
            false,
        ),
        (rule(&["get"], &[CERTIFICATES_GROUP], &["*"]), false),
        (rule(&["create"], &[""], &["*"]), false),
        (
            rule(&["create"], &["certificates.k8s.io"], &["*/selfnodeclient"]),
            false,
        ),
    ] {
        let named = Rule {
            resource_names: strings(&["x"]),
            ..r.clone()
        };
        assert_eq!(r.allows_create(Subresource::NodeClient), grants, "{r:?}");
        assert!(
            !named.allows_create(Subresource::NodeClient),
            "a named rule: {named:?}"
        );
    }
}

#[test]
fn an_aggregated_role_grants_what_it_aggregates_before_the_controller_copied_it() {
    let mut labels = BTreeMap::new();
    labels.insert(
        "example.com/aggregate-to-approvers".to_string(),
        "true".to_string(),
    );
    let piece = ClusterRole {
        name: "piece".into(),
        labels: labels.clone(),
        rules: vec![rule(
            &["create"],
            &[CERTIFICATES_GROUP],
            &["certificatesigningrequests/nodeclient"],
        )],
        aggregation: None,
    };
    let whole = ClusterRole {
        name: "whole".into(),
        aggregation: Some(vec![Selector {
            match_labels: labels,
            match_expressions: vec![],
        }]),
        ..Default::default()
    };
    let other = ClusterRole {
        name: "other".into(),
        aggregation: Some(vec![Selector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![Requirement {
                key: "example.com/aggregate-to-approvers".into(),
                operator: "DoesNotExist".into(),
                values: vec![],
            }],
        }]),
        ..Default::default()
    };
    let roles = vec![piece, whole, other];
    let bindings = vec![
        mk_binding(
            "via-whole",
            "whole",
            vec![group("system:bootstrappers:workers")],
        ),
        mk_binding(
            "via-other",
            "other",
            vec![group("system:bootstrappers:workers")],
        ),
    ];
    assert_eq!(
        kinds(&competing_approvals(&roles, &bindings)),
        vec![(Kind::OtherTokens, "via-whole")]
    );
}

#[test]
fn missing_roles_and_role_references_grant_nothing() {
    let mut role_ref = mk_binding("role-ref", NODECLIENT_ROLE, vec![group(KUBEADM_GROUP)]);
    role_ref.role_kind = "Role".into();
    let bindings = vec![
        role_ref,
        mk_binding("missing", "no-such-role", vec![group(KUBEADM_GROUP)]),
    ];
    assert!(competing_approvals(&seeded_roles(), &bindings).is_empty());
}

#[test]
fn selectors_follow_upstream_operators() {
    let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
    let req = |op: &str, vals: &[&str]| Selector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![Requirement {
            key: "a".into(),
            operator: op.into(),
            values: strings(vals),
        }],
    };
    assert!(Selector::default().matches(&labels), "empty matches all");
    assert!(req("In", &["1", "2"]).matches(&labels));
    assert!(!req("In", &["2"]).matches(&labels));
    assert!(req("NotIn", &["2"]).matches(&labels));
    assert!(!req("NotIn", &["1"]).matches(&labels));
    assert!(req("Exists", &[]).matches(&labels));
    assert!(!req("DoesNotExist", &[]).matches(&labels));
    assert!(!req("Gt", &["0"]).matches(&labels));
}

// Properties over arbitrary RBAC: the reading is the RBAC authorizer's answer.

fn arb_word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        Just("create".to_string()),
        Just("get".to_string()),
        Just(CERTIFICATES_GROUP.to_string()),
        Just("".to_string()),
        Just("certificatesigningrequests/nodeclient".to_string()),
        Just("certificatesigningrequests/selfnodeclient".to_string()),
        Just("certificatesigningrequests".to_string()),
        Just("*/nodeclient".to_string()),
        Just("*/selfnodeclient".to_string()),
    ]
}

fn arb_rule() -> impl Strategy<Value = Rule> {
    (
        prop::collection::vec(arb_word(), 0..3),
        prop::collection::vec(arb_word(), 0..3),
        prop::collection::vec(arb_word(), 0..3),
        prop::collection::vec(
            prop_oneof![Just("x".to_string()), Just("".to_string())],
            0..2,
        ),
    )
        .prop_map(|(verbs, api_groups, resources, resource_names)| Rule {
            verbs,
            api_groups,
            resources,
            resource_names,
        })
}

fn arb_subject() -> impl Strategy<Value = Subject> {
    prop_oneof![
        prop_oneof![
            Just(NODE_GROUP),
            Just(CONTROL_PLANE_GROUP),
            Just(BOOTSTRAPPERS_GROUP),
            Just(AUTHENTICATED_GROUP),
            Just(UNAUTHENTICATED_GROUP),
            Just(MASTERS_GROUP),
            Just(NODES_GROUP),
            Just(KUBEADM_GROUP),
            Just("system:bootstrappers:workers"),
            Just("developers"),
        ]
        .prop_map(|g| Subject::Group(g.into())),
        prop_oneof![
            Just("system:bootstrap:abcdef"),
            Just("system:node:n1"),
            Just("alice")
        ]
        .prop_map(|u| Subject::User(u.into())),
        Just(Subject::ServiceAccount("ns".into(), "sa".into())),
    ]
}

const ROLE_NAMES: [&str; 3] = ["r0", "r1", "r2"];

fn arb_rbac() -> impl Strategy<Value = (Vec<ClusterRole>, Vec<ClusterRoleBinding>)> {
    let roles =
        prop::collection::vec(prop::collection::vec(arb_rule(), 0..3), 3).prop_map(|rules| {
            rules
                .into_iter()
                .zip(ROLE_NAMES)
                .map(|(rules, name)| mk_role(name, rules))
                .collect::<Vec<_>>()
        });
    let bindings = prop::collection::vec(
        (
            prop_oneof![Just("r0"), Just("r1"), Just("r2"), Just("gone")],
            prop::collection::vec(arb_subject(), 0..4),
        ),
        0..5,
    )
    .prop_map(|bs| {
        bs.into_iter()
            .enumerate()
            .map(|(i, (role, subjects))| mk_binding(&format!("b{i}"), role, subjects))
            .collect::<Vec<_>>()
    });
    (roles, bindings)
}

/// The RBAC authorizer's answer for one requester and review, written the plain way: some
/// ClusterRoleBinding has a subject that applies and a role with an allowing rule.
fn authorizer_allows(
    roles: &[ClusterRole],
    bindings: &[ClusterRoleBinding],
    applies: impl Fn(&Subject) -> bool,
    sub: Subresource,
) -> Option<String> {
    bindings.iter().find_map(|b| {
        let role = roles.iter().find(|r| r.name == b.role_name)?;
        let allowed =
            b.subjects.iter().any(&applies) && role.rules.iter().any(|r| r.allows_create(sub));
        allowed.then(|| b.name.clone())
    })
}

proptest! {
    /// A kubeflavor token (user `system:bootstrap:<id>`, its group, `system:bootstrappers`,
    /// `system:authenticated`) that RBAC lets create nodeclient is always found as
    /// kubeflavor_tokens, naming that binding; and the reading never says so otherwise.
    #[test]
    fn kubeflavor_tokens_are_found_exactly_when_rbac_auto_approves_them((roles, bindings) in arb_rbac()) {
        let grants = competing_approvals(&roles, &bindings);
        let found: BTreeSet<String> = grants.iter().filter(|g| g.kind == Kind::KubeflavorTokens).map(|g| g.binding.clone()).collect();
        let token = |s: &Subject| matches!(s, Subject::Group(g) if [NODE_GROUP, BOOTSTRAPPERS_GROUP, AUTHENTICATED_GROUP].contains(&g.as_str()));
        let allowed: BTreeSet<String> = bindings.iter().filter(|b| authorizer_allows(&roles, std::slice::from_ref(*b), token, Subresource::NodeClient).is_some()).map(|b| b.name.clone()).collect();
        let token_cp = |s: &Subject| matches!(s, Subject::Group(g) if [CONTROL_PLANE_GROUP, BOOTSTRAPPERS_GROUP, AUTHENTICATED_GROUP].contains(&g.as_str()));
        let allowed_cp: BTreeSet<String> = bindings.iter().filter(|b| authorizer_allows(&roles, std::slice::from_ref(*b), token_cp, Subresource::NodeClient).is_some()).map(|b| b.name.clone()).collect();
        let expected: BTreeSet<String> = allowed.union(&allowed_cp).cloned().collect();
        prop_assert_eq!(found, expected);
    }

    /// Another tool's token (user `system:bootstrap:zzzzzz`, groups `system:bootstrappers`,
    /// `system:bootstrappers:workers`, `system:authenticated`) auto-approved by RBAC is found
    /// as other_tokens; a bootstrap token never counts as a node or anyone else.
    #[test]
    fn another_tokens_auto_approval_is_always_found((roles, bindings) in arb_rbac()) {
        let grants = competing_approvals(&roles, &bindings);
        let other = |s: &Subject| matches!(s, Subject::Group(g) if [BOOTSTRAPPERS_GROUP, "system:bootstrappers:workers", AUTHENTICATED_GROUP].contains(&g.as_str()));
        if let Some(binding) = authorizer_allows(&roles, &bindings, other, Subresource::NodeClient) {
            prop_assert!(grants.iter().any(|g| g.kind == Kind::OtherTokens && g.binding == binding), "{binding}: {grants:?}");
        }
        if grants.iter().any(|g| g.kind == Kind::OtherTokens) {
            prop_assert!(blocking(&grants, true, false).iter().any(|g| g.kind == Kind::OtherTokens));
        }
        if grants.is_empty() {
            prop_assert!(blocking(&grants, true, true).is_empty());
        }
    }

    /// A node (`system:node:n1`, `system:nodes`, `system:authenticated`) that RBAC lets
    /// renew (selfnodeclient) or ask for any name (nodeclient) is found as renewals.
    #[test]
    fn nodes_auto_approval_is_always_found((roles, bindings) in arb_rbac()) {
        let grants = competing_approvals(&roles, &bindings);
        let node = |s: &Subject| match s {
            Subject::Group(g) => g == NODES_GROUP || g == AUTHENTICATED_GROUP,
            Subject::User(u) => u == "system:node:n1",
            _ => false,
        };
        for sub in [Subresource::NodeClient, Subresource::SelfNodeClient] {
            if authorizer_allows(&roles, &bindings, node, sub).is_some() {
                prop_assert!(grants.iter().any(|g| g.kind == Kind::Renewals && g.subresource == sub), "{sub:?}: {grants:?}");
            }
        }
    }

    /// `system:masters` never counts, and a role without an allowing rule never counts.
    #[test]
    fn only_allowing_rules_and_real_requesters_count((roles, bindings) in arb_rbac()) {
        for g in competing_approvals(&roles, &bindings) {
            prop_assert_ne!(&g.subject, &Subject::Group(MASTERS_GROUP.into()));
            let role = roles.iter().find(|r| r.name == g.role).expect("a granting role exists");
            prop_assert!(role.rules.iter().any(|r| r.allows_create(g.subresource)));
        }
    }
}

fn signer_rule(verbs: &[&str], names: &[&str]) -> Rule {
    Rule {
        resource_names: strings(names),
        ..rule(verbs, &[CERTIFICATES_GROUP], &["signers"])
    }
}

#[test]
fn serving_approvers_are_those_granted_approve_on_the_serving_signer() {
    let own = Subject::ServiceAccount("kubeflavor".into(), "kubeflavor-controller".into());
    let other = Subject::ServiceAccount("kube-system".into(), "kubelet-csr-approver".into());
    let mut roles = seeded_roles();
    roles.push(mk_role(
        "serving",
        vec![signer_rule(&["approve"], &[SERVING_SIGNER])],
    ));
    roles.push(mk_role(
        "domain",
        vec![signer_rule(&["approve"], &["kubernetes.io/*"])],
    ));
    roles.push(mk_role(
        "client-only",
        vec![signer_rule(
            &["approve"],
            &["kubernetes.io/kube-apiserver-client-kubelet"],
        )],
    ));
    roles.push(mk_role(
        "read-only",
        vec![signer_rule(&["get"], &[SERVING_SIGNER])],
    ));
    let bindings = vec![
        mk_binding("kubeflavor", "serving", vec![own.clone()]),
        mk_binding("approver", "serving", vec![other.clone()]),
        mk_binding("domain", "domain", vec![group("approvers")]),
        mk_binding("client-only", "client-only", vec![group("x")]),
        mk_binding("read-only", "read-only", vec![group("y")]),
        mk_binding("admins", "cluster-admin", vec![group("admins")]),
        mk_binding("masters", "serving", vec![group(MASTERS_GROUP)]),
    ];
    let found = serving_approvers(&roles, &bindings, &own);
    let names: Vec<&str> = found.iter().map(|a| a.binding.as_str()).collect();
    assert_eq!(names, ["approver", "domain"]);
    assert!(
        found[0]
            .to_string()
            .contains("kubectl delete clusterrolebinding approver")
    );
}
