//! Properties of the CSR policy over arbitrary facts (P1 hidden flavor, P3 binding) and the
//! token deletion rule (P4 rejection that ends).

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use crate::support::*;
use kubeflavor_core::approval::client::{
    APPROVED_CONDITION, BindingStep, CsrFacts, DENIED_CONDITION, Decision, DenyCause,
    PolicyOptions, TokenFate, TokenLookup, decide, token_fate,
};
use kubeflavor_core::csr::client::KUBELET_CLIENT_SIGNER;
use proptest::prelude::*;

#[test]
fn exhausted_and_misused_tokens_are_deleted_at_once() {
    for cause in [
        DenyCause::TokenExhausted,
        DenyCause::NameBoundToOtherToken,
        DenyCause::NodeExistsWithoutBinding,
    ] {
        assert_eq!(token_fate(cause, 0, None), TokenFate::Delete, "{cause:?}");
    }
}

#[test]
fn tokens_refused_too_often_are_deleted() {
    let limit = NonZeroU32::new(3);
    let shape = DenyCause::NotKubeletClientShape;
    assert_eq!(token_fate(shape, 1, limit), TokenFate::Count);
    assert_eq!(token_fate(shape, 2, limit), TokenFate::Delete);
    assert_eq!(
        token_fate(DenyCause::BindingRevoked, 3, limit),
        TokenFate::Delete
    );
    assert_eq!(token_fate(shape, 999, None), TokenFate::Count);
    assert_eq!(token_fate(shape, u32::MAX, None), TokenFate::Count);
}

#[test]
fn tokens_that_are_not_readable_kubeflavor_tokens_are_never_deleted() {
    for cause in [
        DenyCause::NotKubeflavorToken,
        DenyCause::TokenMissing,
        DenyCause::TokenUnreadable,
        DenyCause::RenewalRequesterMismatch,
    ] {
        assert_eq!(
            token_fate(cause, u32::MAX, NonZeroU32::new(1)),
            TokenFate::Keep,
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
            token_instance: token_instance(),
            flavor_exists: b[2] || b[1],
            flavor_input_labels: kubeflavor_core::flavor::input_labels::InputLabelRules::default(),
            flavor_token_limits: no_limits(),
            binding,
            node_exists: b[3],
            options: PolicyOptions {
                strict: b[4],
                manage_renewals: b[1] || b[4],
                denial_limit: NonZeroU32::new(u32::from(b[2] && b[3])),
            },
            now: now(),
        },
    )
}

fn approved(d: &Decision) -> bool {
    matches!(d, Decision::Approve { .. })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// P3 (binding): whatever else is true, a bootstrap CSR for a name bound to another
    /// token is not approved.
    #[test]
    fn name_bound_to_another_token_is_never_approved(mut f in arb_facts()) {
        f.binding = binding("zzzzzz", false);
        prop_assume!(f.requester_username.starts_with("system:bootstrap:"));
        prop_assert!(!approved(&decide(&f)));
    }

    /// P3 (binding): a bootstrap CSR for an existing Node is approved only with a binding
    /// to the requesting token.
    #[test]
    fn existing_node_needs_a_binding_to_this_token(mut f in arb_facts()) {
        f.node_exists = true;
        prop_assume!(f.requester_username.starts_with("system:bootstrap:"));
        if approved(&decide(&f)) {
            let b = f.binding.as_ref().expect("approved without a binding");
            prop_assert_eq!(b.token_id.as_ref().map(|t| t.as_str()), Some(ID));
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
            prop_assert!(!approved(&decide(&f)));
        }
    }

    /// P3 (binding): reserving a use happens only for a new name on a token with room.
    #[test]
    fn a_use_is_reserved_only_for_a_new_name_with_room(f in arb_facts()) {
        let decision = decide(&f);
        if let Decision::Approve { node, binding: BindingStep::Create { reserve_use: true, .. } } = &decision {
            let TokenLookup::Found(r) = &f.token else { panic!("reserved without a token") };
            let meta = r.kubeflavor.as_ref().unwrap();
            prop_assert!(meta.has_room());
            prop_assert!(!meta.bound_nodes.contains(node));
            prop_assert_eq!(node, &f.csr.as_ref().unwrap().node_name);
        }
    }

    /// Renewals are approved only for the requester's own name, never for a revoked
    /// binding, and only when kubeflavor manages renewals; nodes kubeflavor never bound
    /// renew too (kubeflavor takes kube-controller-manager's selfnodeclient approval's
    /// place for them).
    #[test]
    fn renewals_are_approved_only_for_the_requesters_own_unrevoked_name(f in arb_facts()) {
        prop_assume!(f.requester_username.starts_with("system:node:"));
        let decision = decide(&f);
        if approved(&decision) {
            let cn = f.csr.as_ref().unwrap().node_name.to_string();
            prop_assert_eq!(&f.requester_username, &format!("system:node:{cn}"));
            prop_assert!(!f.binding.as_ref().is_some_and(|b| b.revoked));
            prop_assert!(f.options.manage_renewals);
        }
        let own_unrevoked = f.csr.as_ref().is_ok_and(|c| {
            f.requester_username == format!("system:node:{}", c.node_name)
        }) && !f.binding.as_ref().is_some_and(|b| b.revoked);
        if f.options.manage_renewals && !f.already_decided && own_unrevoked {
            prop_assert!(approved(&decision), "{decision:?}");
        }
    }

    /// P1 (hidden flavor): swapping the token's flavor for another changes neither the
    /// decision nor the condition written on the CSR.
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
        prop_assert_eq!(want(&a), want(&b));
        prop_assert_eq!(a.condition(), b.condition());
        // The flavor only goes into the binding an approval creates.
        if let Decision::Approve { binding: BindingStep::Create { flavor, .. }, .. } = &a {
            prop_assert_eq!(flavor, &meta.flavor);
        }
        if let Some(c) = a.condition() {
            prop_assert!(c == APPROVED_CONDITION || c == DENIED_CONDITION);
        }
    }

    /// P4 (rejection that ends): a denial never touches a token that is not a readable
    /// kubeflavor token, nor one whose denial is not the token's doing.
    #[test]
    fn only_a_kubeflavor_tokens_own_denials_touch_it(f in arb_facts()) {
        if let Decision::Deny { cause, token_fate } = decide(&f) {
            let kubeflavor_token = matches!(&f.token, TokenLookup::Found(r) if r.kubeflavor.is_some());
            if !kubeflavor_token || !cause.counts_against_token() {
                prop_assert_eq!(token_fate, TokenFate::Keep);
            } else {
                prop_assert_ne!(token_fate, TokenFate::Keep);
            }
        }
    }

    /// P3 (binding): however CSRs for names arrive, applying the decisions never binds more
    /// distinct names to a token than its max_nodes.
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
            if let Decision::Approve { binding: BindingStep::Create { reserve_use, .. }, .. } = decide(&f) {
                if reserve_use { bound.push(node.clone()); }
                bindings.insert(node.clone(), ());
            }
            prop_assert!(bound.len() <= max_nodes as usize);
            prop_assert!(bindings.len() <= max_nodes as usize);
        }
    }
}

proptest! {
    /// P3 (binding): whatever else the facts say, a bootstrap CSR other than the binding's
    /// own is approved only for the key the binding recorded.
    #[test]
    fn a_bound_name_is_approved_only_for_its_bound_key(
        f in arb_facts(),
        key in prop_oneof![Just([7u8; 32]), any::<[u8; 32]>()],
    ) {
        let mut f = f;
        if let Ok(csr) = f.csr.as_mut() {
            csr.public_key_sha256 = key;
        }
        if let (Some(b), Decision::Approve { .. }) = (&f.binding, decide(&f)) {
            let bootstrap = f.requester_username.starts_with("system:bootstrap:");
            if bootstrap && b.csr_name != f.csr_name {
                prop_assert_eq!(&b.public_key_sha256, &hex::encode(key));
            }
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
    let csr = kubeflavor_core::csr::client::validate_kubelet_client_csr(
        KUBELET_CLIENT_SIGNER,
        pem.as_bytes(),
        &usages,
    );
    let mut f = base();
    f.csr = csr;
    assert_eq!(want(&decide(&f)), APPROVE_NEW);
    f.binding = binding("zzzzzz", false);
    assert_eq!(
        want(&decide(&f)),
        Want::Deny(DenyCause::NameBoundToOtherToken)
    );
}

proptest! {
    /// A token is used up exactly when it has no room left and every name it bound has a
    /// Node: never while a use is free, never while a holder may still need it to get its
    /// certificate.
    #[test]
    fn a_token_is_used_up_only_when_full_and_every_holder_joined(
        max_nodes in 1u32..4,
        bound in proptest::collection::btree_set(0usize..5, 0..5),
        joined in proptest::collection::btree_set(0usize..5, 0..5),
    ) {
        let names: Vec<String> = bound.iter().map(|n| format!("worker-{n}")).collect();
        let TokenLookup::Found(record) = record_with(max_nodes, &names) else {
            unreachable!("a valid token")
        };
        let meta = record.kubeflavor.expect("a kubeflavor token");
        let used_up = kubeflavor_core::approval::client::token_is_used_up(&meta, |n| {
            joined.iter().any(|j| n.as_str() == format!("worker-{j}"))
        });
        let full = bound.len() >= max_nodes as usize;
        prop_assert_eq!(used_up, full && bound.is_subset(&joined));
    }
}

fn record_with(max_nodes: u32, bound: &[String]) -> TokenLookup {
    TokenLookup::Found(record(&TokenSpec {
        max_nodes,
        bound: bound.to_vec(),
        ..TokenSpec::default()
    }))
}
