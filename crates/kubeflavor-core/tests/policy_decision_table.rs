//! The CSR policy's decision table (every DenyCause and the combinations that matter) and
//! its properties (P1, P3, P4), through the public API only.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use jiff::Timestamp;
use kubeflavor_core::csr::{CsrError, KUBELET_CLIENT_SIGNER, KubeletClientCsr};
use kubeflavor_core::policy::{
    APPROVED_CONDITION, BindingFacts, CsrFacts, DENIED_CONDITION, Decision, DenyCause,
    IgnoreReason, PolicyOptions, TokenLookup, decide, should_delete_token,
};
use kubeflavor_core::token_record::{SecretView, TokenRecord, TokenRecordError};
use kubeflavor_core::token_secret::{
    BOUND_NODES_ANNOTATION, KEY_EXPIRATION, KEY_USAGE_AUTHENTICATION, MAX_NODES_ANNOTATION,
    flavored_token_secret,
};
use proptest::prelude::*;

const ID: &str = "abcdef";
const NODE: &str = "worker-1";

fn now() -> Timestamp {
    "2026-11-30T05:00:00Z".parse().unwrap()
}

/// How the token Secret of a test differs from a fresh, valid kubeflavor token.
#[derive(Clone, Debug)]
struct TokenSpec {
    id: &'static str,
    flavor: &'static str,
    max_nodes: u32,
    bound: Vec<String>,
    expiration: Option<String>,
    usage_auth: bool,
    flavor_label: bool,
    being_deleted: bool,
}

impl Default for TokenSpec {
    fn default() -> Self {
        TokenSpec {
            id: ID,
            flavor: "sweet",
            max_nodes: 1,
            bound: vec![],
            expiration: Some("2026-12-01T05:00:00Z".into()),
            usage_auth: true,
            flavor_label: true,
            being_deleted: false,
        }
    }
}

fn record(spec: &TokenSpec) -> TokenRecord {
    let token = format!("{}.0123456789abcdef", spec.id).parse().unwrap();
    let obj = flavored_token_secret(
        &token,
        &spec.flavor.parse().unwrap(),
        None,
        NonZeroU32::new(spec.max_nodes).unwrap(),
    );
    let mut data = obj.string_data.clone();
    if let Some(e) = &spec.expiration {
        data.insert(KEY_EXPIRATION.into(), e.clone());
    }
    if !spec.usage_auth {
        data.remove(KEY_USAGE_AUTHENTICATION);
    }
    let labels = if spec.flavor_label {
        obj.labels.clone()
    } else {
        BTreeMap::new()
    };
    let mut annotations = obj.annotations.clone();
    annotations.insert(MAX_NODES_ANNOTATION.into(), spec.max_nodes.to_string());
    annotations.insert(BOUND_NODES_ANNOTATION.into(), {
        let mut b = spec.bound.clone();
        b.sort();
        b.dedup();
        b.join(",")
    });
    TokenRecord::from_secret(&SecretView {
        namespace: obj.namespace,
        name: &obj.name,
        type_: obj.type_,
        being_deleted: spec.being_deleted,
        data: &data,
        labels: &labels,
        annotations: &annotations,
    })
    .unwrap()
}

fn parsed(node: &str) -> Result<KubeletClientCsr, CsrError> {
    Ok(KubeletClientCsr {
        node_name: node.parse().unwrap(),
        public_key_sha256: [7; 32],
    })
}

fn binding(token: &str, revoked: bool) -> Option<BindingFacts> {
    Some(BindingFacts {
        token_id: token.parse().unwrap(),
        revoked,
        csr_name: "csr-earlier".into(),
        public_key_sha256: "07".repeat(32),
    })
}

fn groups(extra: &str) -> Vec<String> {
    vec![
        "system:bootstrappers".into(),
        extra.into(),
        "system:authenticated".into(),
    ]
}

/// A kubeflavor bootstrap CSR for worker-1 with a fresh single-use token: approvable.
fn base() -> CsrFacts {
    CsrFacts {
        csr_name: "csr-new".into(),
        signer_name: KUBELET_CLIENT_SIGNER.into(),
        requester_username: format!("system:bootstrap:{ID}"),
        requester_groups: groups("system:bootstrappers:kubeflavor:node"),
        csr: parsed(NODE),
        already_decided: false,
        token: TokenLookup::Found(record(&TokenSpec::default())),
        flavor_exists: true,
        binding: None,
        node_exists: false,
        options: PolicyOptions::default(),
        now: now(),
    }
}

fn with_token(f: &mut CsrFacts, spec: TokenSpec) {
    f.token = TokenLookup::Found(record(&spec));
}

fn renewal(f: &mut CsrFacts) {
    f.requester_username = format!("system:node:{NODE}");
    f.requester_groups = vec!["system:nodes".into(), "system:authenticated".into()];
    f.options.manage_renewals = true;
    f.binding = binding(ID, false);
    f.node_exists = true;
}

const APPROVE_NEW: Decision = Decision::Approve {
    reserve_use: true,
    create_binding: true,
};
const APPROVE_RETRY: Decision = Decision::Approve {
    reserve_use: false,
    create_binding: false,
};
const APPROVE_FINISH_BINDING: Decision = Decision::Approve {
    reserve_use: false,
    create_binding: true,
};

type Row = (&'static str, fn(&mut CsrFacts), Decision);

fn table() -> Vec<Row> {
    use DenyCause::*;
    vec![
        ("fresh token, free name", |_| {}, APPROVE_NEW),
        (
            "strict mode does not change kubeflavor CSRs",
            |f| f.options.strict = true,
            APPROVE_NEW,
        ),
        (
            "already decided is left alone, even a takeover",
            |f| {
                f.already_decided = true;
                f.binding = binding("zzzzzz", false);
            },
            Decision::Ignore(IgnoreReason::AlreadyDecided),
        ),
        (
            "other signer",
            |f| f.signer_name = "kubernetes.io/kubelet-serving".into(),
            Decision::Ignore(IgnoreReason::OtherSigner),
        ),
        (
            "kubeadm token, not strict",
            |f| f.requester_groups = groups("system:bootstrappers:kubeadm:default-node-token"),
            Decision::Ignore(IgnoreReason::NotKubeflavorToken),
        ),
        (
            "kubeadm token, strict",
            |f| {
                f.requester_groups = groups("system:bootstrappers:kubeadm:default-node-token");
                f.options.strict = true;
            },
            Decision::Deny(NotKubeflavorToken),
        ),
        (
            "other requester",
            |f| f.requester_username = "kubernetes-admin".into(),
            Decision::Ignore(IgnoreReason::OtherRequester),
        ),
        (
            "malformed request",
            |f| f.csr = Err(CsrError::NotPem),
            Decision::Deny(MalformedCsr),
        ),
        (
            "bad signature",
            |f| f.csr = Err(CsrError::BadSignature),
            Decision::Deny(MalformedCsr),
        ),
        (
            "wrong shape",
            |f| f.csr = Err(CsrError::SubjectAltNames),
            Decision::Deny(NotKubeletClientShape),
        ),
        (
            "wrong shape beats a missing token",
            |f| {
                f.csr = Err(CsrError::Organization(vec![]));
                f.token = TokenLookup::Missing;
            },
            Decision::Deny(NotKubeletClientShape),
        ),
        (
            "token Secret gone: still recognised by the CSR's groups",
            |f| f.token = TokenLookup::Missing,
            Decision::Deny(TokenMissing),
        ),
        (
            "token Secret being deleted",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        being_deleted: true,
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenMissing),
        ),
        (
            "token record of another id",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        id: "zzzzzz",
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenMissing),
        ),
        (
            "token metadata unreadable",
            |f| f.token = TokenLookup::Unreadable(TokenRecordError::NotATokenSecret("x".into())),
            Decision::Deny(TokenUnreadable),
        ),
        (
            "token expired",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        expiration: Some("2026-11-30T04:59:59Z".into()),
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenExpired),
        ),
        (
            "token expires exactly now",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        expiration: Some("2026-11-30T05:00:00Z".into()),
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenExpired),
        ),
        (
            "expiration unreadable counts as expired",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        expiration: Some("tomorrow".into()),
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenExpired),
        ),
        (
            "expired token beats a takeover",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        expiration: Some("2000-01-01T00:00:00Z".into()),
                        ..TokenSpec::default()
                    },
                );
                f.binding = binding("zzzzzz", false);
            },
            Decision::Deny(TokenExpired),
        ),
        (
            "token without authentication usage",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        usage_auth: false,
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenNotForAuthentication),
        ),
        (
            "token in the kubeflavor group but without a flavor",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        flavor_label: false,
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(FlavorMissing),
        ),
        (
            "Flavor object deleted",
            |f| f.flavor_exists = false,
            Decision::Deny(FlavorMissing),
        ),
        (
            "single-use token already used for another name",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        bound: vec!["worker-0".into()],
                        ..TokenSpec::default()
                    },
                )
            },
            Decision::Deny(TokenExhausted),
        ),
        (
            "two-use token with one name bound",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        max_nodes: 2,
                        bound: vec!["worker-0".into()],
                        ..TokenSpec::default()
                    },
                )
            },
            APPROVE_NEW,
        ),
        (
            "name takeover: bound to another token",
            |f| f.binding = binding("zzzzzz", false),
            Decision::Deny(NameBoundToOtherToken),
        ),
        (
            "name takeover: bound to another, revoked token",
            |f| f.binding = binding("zzzzzz", true),
            Decision::Deny(NameBoundToOtherToken),
        ),
        (
            "name takeover: bound to another token and the Node exists",
            |f| {
                f.binding = binding("zzzzzz", false);
                f.node_exists = true;
            },
            Decision::Deny(NameBoundToOtherToken),
        ),
        (
            "retry: binding to this token",
            |f| f.binding = binding(ID, false),
            APPROVE_RETRY,
        ),
        (
            "retry: binding to this token, Node registered",
            |f| {
                f.binding = binding(ID, false);
                f.node_exists = true;
            },
            APPROVE_RETRY,
        ),
        (
            "retry: binding to this token, token now full",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        bound: vec![NODE.into()],
                        ..TokenSpec::default()
                    },
                );
                f.binding = binding(ID, false);
            },
            APPROVE_RETRY,
        ),
        (
            "binding to this token revoked",
            |f| f.binding = binding(ID, true),
            Decision::Deny(BindingRevoked),
        ),
        (
            "takeover of an existing Node without binding",
            |f| f.node_exists = true,
            Decision::Deny(NodeExistsWithoutBinding),
        ),
        (
            "existing Node without binding, even if the token listed the name",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        bound: vec![NODE.into()],
                        ..TokenSpec::default()
                    },
                );
                f.node_exists = true;
            },
            Decision::Deny(NodeExistsWithoutBinding),
        ),
        (
            "crash after reserving, before the binding: finish without a second use",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        bound: vec![NODE.into()],
                        ..TokenSpec::default()
                    },
                )
            },
            APPROVE_FINISH_BINDING,
        ),
        (
            "renewal, renewals not managed",
            |f| {
                renewal(f);
                f.options.manage_renewals = false;
            },
            Decision::Ignore(IgnoreReason::RenewalsNotManaged),
        ),
        (
            "renewal, not managed, strict",
            |f| {
                renewal(f);
                f.options = PolicyOptions {
                    strict: true,
                    manage_renewals: false,
                };
            },
            Decision::Ignore(IgnoreReason::RenewalsNotManaged),
        ),
        ("renewal of a bound node", renewal, APPROVE_RETRY),
        (
            "renewal for another node's name",
            |f| {
                renewal(f);
                f.csr = parsed("worker-2");
            },
            Decision::Deny(RenewalRequesterMismatch),
        ),
        (
            "renewal of an unbound node",
            |f| {
                renewal(f);
                f.binding = None;
            },
            Decision::Deny(RenewalUnbound),
        ),
        (
            "renewal of a revoked node",
            |f| {
                renewal(f);
                f.binding = binding(ID, true);
            },
            Decision::Deny(BindingRevoked),
        ),
        (
            "renewal with a malformed request",
            |f| {
                renewal(f);
                f.csr = Err(CsrError::NotPkcs10("x".into()));
            },
            Decision::Deny(MalformedCsr),
        ),
        (
            "renewal does not depend on the token",
            |f| {
                renewal(f);
                f.token = TokenLookup::Missing;
                f.flavor_exists = false;
            },
            APPROVE_RETRY,
        ),
    ]
}

#[test]
fn decision_table() {
    let mut failures = Vec::new();
    for (name, modify, expected) in table() {
        let mut facts = base();
        modify(&mut facts);
        let got = decide(&facts);
        if got != expected {
            failures.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn decision_table_covers_every_deny_cause() {
    let denied: Vec<DenyCause> = table()
        .into_iter()
        .filter_map(|(_, _, d)| match d {
            Decision::Deny(c) => Some(c),
            _ => None,
        })
        .collect();
    for cause in DenyCause::ALL {
        assert!(
            denied.contains(&cause),
            "no table row denies with {cause:?}"
        );
    }
}

#[test]
fn name_takeover_is_denied() {
    // A sour token asks for the name of a node a sweet token bound.
    let mut f = base();
    with_token(
        &mut f,
        TokenSpec {
            id: "s0urs0",
            flavor: "sour",
            ..TokenSpec::default()
        },
    );
    f.requester_username = "system:bootstrap:s0urs0".into();
    f.binding = binding(ID, false);
    f.node_exists = true;
    assert_eq!(decide(&f), Decision::Deny(DenyCause::NameBoundToOtherToken));
}

#[test]
fn takeover_of_a_node_that_joined_otherwise_is_denied() {
    let mut f = base();
    f.node_exists = true;
    assert_eq!(
        decide(&f),
        Decision::Deny(DenyCause::NodeExistsWithoutBinding)
    );
}

#[test]
fn retry_of_the_same_token_for_the_same_name_uses_nothing_twice() {
    let mut f = base();
    assert_eq!(decide(&f), APPROVE_NEW);
    // The controller reserved the use and wrote the binding; the kubelet retries.
    with_token(
        &mut f,
        TokenSpec {
            bound: vec![NODE.into()],
            ..TokenSpec::default()
        },
    );
    f.binding = binding(ID, false);
    f.csr_name = "csr-retry".into();
    assert_eq!(decide(&f), APPROVE_RETRY);
}

#[test]
fn approval_message_is_the_same_for_every_flavor() {
    let conditions: Vec<_> = ["sweet", "sour", "trust-10", "trust-90"]
        .into_iter()
        .map(|flavor| {
            let mut f = base();
            with_token(
                &mut f,
                TokenSpec {
                    flavor,
                    ..TokenSpec::default()
                },
            );
            decide(&f).condition()
        })
        .collect();
    assert!(
        conditions.iter().all(|c| *c == Some(APPROVED_CONDITION)),
        "{conditions:?}"
    );
}

#[test]
fn denial_message_is_the_same_for_every_cause() {
    for cause in DenyCause::ALL {
        let c = Decision::Deny(cause).condition().unwrap();
        assert_eq!(c, DENIED_CONDITION);
        for word in [
            cause.as_str(),
            "sweet",
            "missing",
            "token",
            "expired",
            "revoked",
            "bound",
        ] {
            assert!(!c.message.to_lowercase().contains(word), "{word} in {c:?}");
            assert!(!c.reason.to_lowercase().contains(word), "{word} in {c:?}");
        }
    }
    assert_ne!(APPROVED_CONDITION.reason, DENIED_CONDITION.reason);
    assert_eq!(
        Decision::Ignore(IgnoreReason::OtherSigner).condition(),
        None
    );
}

#[test]
fn cause_labels_are_distinct_snake_case() {
    let mut labels: Vec<&str> = DenyCause::ALL.iter().map(|c| c.as_str()).collect();
    assert!(
        labels
            .iter()
            .all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    );
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), DenyCause::ALL.len());
    assert!(DenyCause::ALL.iter().all(|c| !c.description().is_empty()));
}

#[test]
fn exhausted_and_misused_tokens_are_deleted_at_once() {
    for cause in [
        DenyCause::TokenExhausted,
        DenyCause::NameBoundToOtherToken,
        DenyCause::NodeExistsWithoutBinding,
    ] {
        assert!(should_delete_token(cause, 1, None), "{cause:?}");
    }
}

#[test]
fn tokens_refused_too_often_are_deleted() {
    let limit = NonZeroU32::new(3);
    assert!(!should_delete_token(
        DenyCause::NotKubeletClientShape,
        2,
        limit
    ));
    assert!(should_delete_token(
        DenyCause::NotKubeletClientShape,
        3,
        limit
    ));
    assert!(should_delete_token(DenyCause::BindingRevoked, 4, limit));
    assert!(!should_delete_token(
        DenyCause::NotKubeletClientShape,
        1000,
        None
    ));
}

#[test]
fn tokens_that_are_not_kubeflavors_are_never_deleted() {
    for cause in [
        DenyCause::NotKubeflavorToken,
        DenyCause::TokenMissing,
        DenyCause::RenewalUnbound,
        DenyCause::RenewalRequesterMismatch,
    ] {
        assert!(
            !should_delete_token(cause, u32::MAX, NonZeroU32::new(1)),
            "{cause:?}"
        );
    }
}

// ---- properties over arbitrary facts ----

fn arb_facts() -> impl Strategy<Value = CsrFacts> {
    let node = prop_oneof![Just("worker-1"), Just("worker-2"), Just("worker-3")];
    let requester = prop_oneof![
        Just((
            format!("system:bootstrap:{ID}"),
            "system:bootstrappers:kubeflavor:node"
        )),
        Just((
            format!("system:bootstrap:{ID}"),
            "system:bootstrappers:kubeadm:default-node-token"
        )),
        Just(("system:node:worker-1".to_owned(), "system:nodes")),
        Just(("system:node:worker-2".to_owned(), "system:nodes")),
    ];
    let token = (
        prop_oneof![Just("sweet"), Just("sour")],
        1u32..4,
        proptest::collection::vec(
            prop_oneof![Just("worker-1"), Just("worker-2"), Just("worker-9")],
            0..3,
        ),
        prop_oneof![
            Just(None),
            Just(Some("2000-01-01T00:00:00Z")),
            Just(Some("2030-01-01T00:00:00Z"))
        ],
        any::<bool>(),
        any::<bool>(),
        0u8..10,
    )
        .prop_map(
            |(flavor, max_nodes, bound, exp, usage_auth, flavor_label, missing)| {
                if missing == 0 {
                    return TokenLookup::Missing;
                }
                TokenLookup::Found(record(&TokenSpec {
                    flavor,
                    max_nodes,
                    bound: bound.into_iter().map(str::to_owned).collect(),
                    expiration: exp.map(str::to_owned),
                    usage_auth: usage_auth || missing > 3,
                    flavor_label: flavor_label || missing > 3,
                    ..TokenSpec::default()
                }))
            },
        );
    let binding = prop_oneof![
        Just(None),
        (prop_oneof![Just(ID), Just("zzzzzz")], any::<bool>()).prop_map(|(t, r)| binding(t, r)),
    ];
    (node, requester, token, binding, any::<[bool; 5]>()).prop_map(
        |(node, (user, group), token, binding, b)| CsrFacts {
            csr_name: "csr-x".into(),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            requester_username: user,
            requester_groups: groups(group),
            csr: parsed(node),
            already_decided: b[0] && b[1],
            token,
            flavor_exists: b[2] || b[1],
            binding,
            node_exists: b[3],
            options: PolicyOptions {
                strict: b[4],
                manage_renewals: b[1] || b[4],
            },
            now: now(),
        },
    )
}

fn approved(d: Decision) -> bool {
    matches!(d, Decision::Approve { .. })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// P3: whatever else is true, a bootstrap CSR for a name bound to another token is not
    /// approved.
    #[test]
    fn name_bound_to_another_token_is_never_approved(mut f in arb_facts()) {
        f.binding = binding("zzzzzz", false);
        prop_assume!(f.requester_username.starts_with("system:bootstrap:"));
        prop_assert!(!approved(decide(&f)));
    }

    /// P3: a bootstrap CSR for an existing Node is approved only with a binding to the
    /// requesting token.
    #[test]
    fn existing_node_needs_a_binding_to_this_token(mut f in arb_facts()) {
        f.node_exists = true;
        prop_assume!(f.requester_username.starts_with("system:bootstrap:"));
        if approved(decide(&f)) {
            let b = f.binding.as_ref().expect("approved without a binding");
            prop_assert_eq!(b.token_id.as_str(), ID);
            prop_assert!(!b.revoked);
        }
    }

    /// A token that would not authenticate now never gets a CSR approved.
    #[test]
    fn tokens_that_do_not_authenticate_are_never_approved(f in arb_facts()) {
        prop_assume!(f.requester_username.starts_with("system:bootstrap:"));
        let authenticates = match &f.token {
            TokenLookup::Found(r) => r.authentication_at(f.now).is_ok(),
            _ => false,
        };
        if !authenticates {
            prop_assert!(!approved(decide(&f)));
        }
    }

    /// P3: reserving a use happens only for a new name on a token with room.
    #[test]
    fn a_use_is_reserved_only_for_a_new_name_with_room(f in arb_facts()) {
        if let Decision::Approve { reserve_use: true, create_binding } = decide(&f) {
            prop_assert!(create_binding);
            let TokenLookup::Found(r) = &f.token else { panic!("reserved without a token") };
            let meta = r.kubeflavor.as_ref().unwrap();
            prop_assert!(meta.has_room());
            prop_assert!(!meta.bound_nodes.contains(&f.csr.as_ref().unwrap().node_name));
        }
    }

    /// Renewals are approved only for the requester's own, bound, unrevoked name.
    #[test]
    fn renewals_are_approved_only_for_the_requesters_own_binding(f in arb_facts()) {
        prop_assume!(f.requester_username.starts_with("system:node:"));
        if approved(decide(&f)) {
            let cn = f.csr.as_ref().unwrap().node_name.to_string();
            prop_assert_eq!(f.requester_username, format!("system:node:{cn}"));
            prop_assert!(f.binding.as_ref().is_some_and(|b| !b.revoked));
            prop_assert!(f.options.manage_renewals);
        }
    }

    /// P1: swapping the token's flavor for another changes neither the decision nor the
    /// condition written on the CSR.
    #[test]
    fn decision_never_depends_on_the_flavor(f in arb_facts()) {
        let TokenLookup::Found(r) = &f.token else { return Ok(()) };
        let Some(meta) = &r.kubeflavor else { return Ok(()) };
        let mut other = f.clone();
        let mut r2 = r.clone();
        let mut m2 = meta.clone();
        m2.flavor = if meta.flavor.as_str() == "sweet" { "sour" } else { "sweet" }.parse().unwrap();
        r2.kubeflavor = Some(m2);
        other.token = TokenLookup::Found(r2);
        let (a, b) = (decide(&f), decide(&other));
        prop_assert_eq!(a, b);
        prop_assert_eq!(a.condition(), b.condition());
        if let Some(c) = a.condition() {
            prop_assert!(c == APPROVED_CONDITION || c == DENIED_CONDITION);
        }
    }

    /// P3: however CSRs for names arrive, applying the decisions never binds more distinct
    /// names to a token than its max_nodes.
    #[test]
    fn a_token_never_binds_more_than_max_nodes(
        max_nodes in 1u32..4,
        names in proptest::collection::vec(0usize..6, 1..20),
    ) {
        let mut bound: Vec<String> = Vec::new();
        let mut bindings: BTreeMap<String, ()> = BTreeMap::new();
        for n in names {
            let node = format!("worker-{n}");
            let mut f = base();
            with_token(&mut f, TokenSpec { max_nodes, bound: bound.clone(), ..TokenSpec::default() });
            f.csr = parsed(&node);
            f.binding = bindings.contains_key(&node).then(|| binding(ID, false)).flatten();
            f.node_exists = bindings.contains_key(&node);
            if let Decision::Approve { reserve_use, create_binding } = decide(&f) {
                if reserve_use { bound.push(node.clone()); }
                if create_binding { bindings.insert(node.clone(), ()); }
            }
            prop_assert!(bound.len() <= max_nodes as usize);
            prop_assert!(bindings.len() <= max_nodes as usize);
        }
    }
}

/// End to end through the CSR validator: a real CSR made by a sour token holder for the
/// name of a node bound to a sweet token.
#[test]
fn name_takeover_with_a_real_csr_is_denied() {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{NODE}"));
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let usages = vec!["digital signature".to_owned(), "client auth".to_owned()];
    let csr = kubeflavor_core::csr::validate_kubelet_client_csr(
        KUBELET_CLIENT_SIGNER,
        pem.as_bytes(),
        &usages,
    );
    let mut f = base();
    f.csr = csr;
    assert_eq!(decide(&f), APPROVE_NEW);
    f.binding = binding("zzzzzz", false);
    assert_eq!(decide(&f), Decision::Deny(DenyCause::NameBoundToOtherToken));
}
