//! The CSR policy's decision table: every DenyCause and the combinations that matter,
//! each row asserting the exact Decision, plus the named cases of P1 (hidden flavor) and
//! P3 (binding).

use crate::support::*;
use kubeflavor_core::csr::client::CsrError;
use std::num::NonZeroU32;

use kubeflavor_core::approval::client::{
    APPROVED_CONDITION, BindingStep, CsrFacts, DENIED_CONDITION, Decision, DenyCause, IgnoreReason,
    PolicyOptions, TokenFate, TokenLookup, decide,
};
use kubeflavor_core::flavor::input_labels::{
    InputKeySpec, InputLabelRules, InputLabels, InputLabelsSpec,
};
use kubeflavor_core::token::meta::Custody;
use kubeflavor_core::token::record::TokenRecordError;

type Row = (&'static str, fn(&mut CsrFacts), Want);

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
            Want::Ignore(IgnoreReason::AlreadyDecided),
        ),
        (
            "other signer",
            |f| f.signer_name = "kubernetes.io/kubelet-serving".into(),
            Want::Ignore(IgnoreReason::OtherSigner),
        ),
        (
            "control-plane token: the same rules as a node token",
            |f| f.requester_groups = groups("system:bootstrappers:kubeflavor:control-plane"),
            APPROVE_NEW,
        ),
        (
            "control-plane token taking a bound name",
            |f| {
                f.requester_groups = groups("system:bootstrappers:kubeflavor:control-plane");
                f.binding = binding("zzzzzz", false);
            },
            Want::Deny(NameBoundToOtherToken),
        ),
        (
            "kubeadm token, not strict",
            |f| f.requester_groups = groups("system:bootstrappers:kubeadm:default-node-token"),
            Want::Ignore(IgnoreReason::NotKubeflavorToken),
        ),
        (
            "kubeadm token, strict",
            |f| {
                f.requester_groups = groups("system:bootstrappers:kubeadm:default-node-token");
                f.options.strict = true;
            },
            Want::Deny(NotKubeflavorToken),
        ),
        (
            "other requester",
            |f| f.requester_username = "kubernetes-admin".into(),
            Want::Ignore(IgnoreReason::OtherRequester),
        ),
        (
            "malformed request",
            |f| f.csr = Err(CsrError::NotPem),
            Want::Deny(MalformedCsr),
        ),
        (
            "bad signature",
            |f| f.csr = Err(CsrError::BadSignature),
            Want::Deny(MalformedCsr),
        ),
        (
            "wrong shape",
            |f| f.csr = Err(CsrError::SubjectAltNames),
            Want::Deny(NotKubeletClientShape),
        ),
        (
            "wrong shape beats a missing token",
            |f| {
                f.csr = Err(CsrError::Organization(vec![]));
                f.token = TokenLookup::Missing;
            },
            Want::Deny(NotKubeletClientShape),
        ),
        (
            "token Secret gone: still recognised by the CSR's groups",
            |f| f.token = TokenLookup::Missing,
            Want::Deny(TokenMissing),
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
            Want::Deny(TokenMissing),
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
            Want::Deny(TokenMissing),
        ),
        (
            "token metadata unreadable",
            |f| f.token = TokenLookup::Unreadable(TokenRecordError::NotATokenSecret("x".into())),
            Want::Deny(TokenUnreadable),
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
            Want::Deny(TokenExpired),
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
            Want::Deny(TokenExpired),
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
            Want::Deny(TokenExpired),
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
            Want::Deny(TokenExpired),
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
            Want::Deny(TokenNotForAuthentication),
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
            Want::Deny(FlavorMissing),
        ),
        (
            "Flavor object deleted",
            |f| f.flavor_exists = false,
            Want::Deny(FlavorMissing),
        ),
        (
            "token carrying an input label its Flavor does not allow",
            |f| {
                if let TokenLookup::Found(record) = &mut f.token {
                    let meta = record.kubeflavor.take().unwrap();
                    let site = [("site".to_string(), "paris".to_string())].into();
                    record.kubeflavor =
                        Some(meta.with_input_labels(InputLabels::from_map(&site).unwrap()));
                }
            },
            Want::Deny(InputLabelsNotAllowed),
        ),
        (
            "token living longer than its Flavor's maxTTL",
            |f| f.flavor_token_limits = limits(3600, 1),
            Want::Deny(TokenOverLimits),
        ),
        (
            "token living its Flavor's maxTTL and the 5 minutes for clocks",
            |f| f.flavor_token_limits = limits(TOKEN_LIFETIME_SECS - 300, 1),
            APPROVE_NEW,
        ),
        (
            "token living one second past the maxTTL and the 5 minutes for clocks",
            |f| f.flavor_token_limits = limits(TOKEN_LIFETIME_SECS - 301, 1),
            Want::Deny(TokenOverLimits),
        ),
        (
            "token binding more nodes than its Flavor's maxNodes",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        max_nodes: 4294967295,
                        ..TokenSpec::default()
                    },
                );
                f.flavor_token_limits = limits(TOKEN_LIFETIME_SECS, 1);
            },
            Want::Deny(TokenOverLimits),
        ),
        (
            "token that never expires, Flavor not allowing one",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        expiration: None,
                        ..TokenSpec::default()
                    },
                );
                f.flavor_token_limits = limits(10 * TOKEN_LIFETIME_SECS, 1);
            },
            Want::Deny(TokenOverLimits),
        ),
        (
            "token of unknown creation time is judged as never expiring",
            |f| {
                f.token_instance.as_mut().unwrap().created = None;
                f.flavor_token_limits = limits(10 * TOKEN_LIFETIME_SECS, 1);
            },
            Want::Deny(TokenOverLimits),
        ),
        (
            "token beyond its Flavor's limits by an admin's override",
            |f| {
                with_token(
                    f,
                    TokenSpec {
                        max_nodes: 4294967295,
                        limits_override: Some(r#"{"by":"kubernetes-admin"}"#.into()),
                        ..TokenSpec::default()
                    },
                );
                f.flavor_token_limits = limits(3600, 1);
            },
            APPROVE_NEW,
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
            Want::Deny(TokenExhausted),
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
            Want::Deny(NameBoundToOtherToken),
        ),
        (
            "name takeover: bound to another, revoked token",
            |f| f.binding = binding("zzzzzz", true),
            Want::Deny(NameBoundToOtherToken),
        ),
        (
            "name takeover: bound to another token and the Node exists",
            |f| {
                f.binding = binding("zzzzzz", false);
                f.node_exists = true;
            },
            Want::Deny(NameBoundToOtherToken),
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
            "retry: a name bound to this token is not judged against the limits again",
            |f| {
                f.binding = binding(ID, false);
                f.flavor_token_limits = limits(3600, 1);
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
            Want::Deny(BindingRevoked),
        ),
        (
            "recycled id: the name is bound to an earlier token of the same id",
            |f| {
                f.binding = binding(ID, false);
                f.token_instance.as_mut().unwrap().uid = "a-new-secret".into();
            },
            Want::Deny(NameBoundToOtherToken),
        ),
        (
            "recycled id, binding without a uid: the token is newer than the binding",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().token_uid = None;
                f.token_instance.as_mut().unwrap().created = Some(now());
            },
            Want::Deny(NameBoundToOtherToken),
        ),
        (
            "binding without a uid, token older than the binding: a retry",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().token_uid = None;
            },
            APPROVE_RETRY,
        ),
        (
            "token Secret not found: no binding is its",
            |f| {
                f.binding = binding(ID, false);
                f.token_instance = None;
            },
            Want::Deny(NameBoundToOtherToken),
        ),
        (
            "the binding's own CSR, and a Node of the name appeared meanwhile",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().csr_name = f.csr_name.clone();
                f.node_exists = true;
            },
            Want::Deny(NodeExistsWithoutBinding),
        ),
        (
            "the binding's own CSR, no Node yet: finish the approval",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().csr_name = f.csr_name.clone();
            },
            APPROVE_RETRY,
        ),
        (
            "takeover of an existing Node without binding",
            |f| f.node_exists = true,
            Want::Deny(NodeExistsWithoutBinding),
        ),
        (
            "re-key: another key for a name bound to this token, Node registered",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().public_key_sha256 = "08".repeat(32);
                f.node_exists = true;
            },
            Want::Deny(RekeyAttempt),
        ),
        (
            "re-key: another key while the binding's own CSR may still be in flight",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().public_key_sha256 = "08".repeat(32);
            },
            Want::Deny(RekeyAttempt),
        ),
        (
            "the binding's own CSR carries the bound key by definition",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().csr_name = f.csr_name.clone();
                f.binding.as_mut().unwrap().public_key_sha256 = "08".repeat(32);
            },
            APPROVE_RETRY,
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
            Want::Deny(NodeExistsWithoutBinding),
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
            Want::Ignore(IgnoreReason::RenewalsNotManaged),
        ),
        (
            "renewal, not managed, strict",
            |f| {
                renewal(f);
                f.options = PolicyOptions {
                    strict: true,
                    manage_renewals: false,
                    denial_limit: None,
                };
            },
            Want::Ignore(IgnoreReason::RenewalsNotManaged),
        ),
        ("renewal of a bound node", renewal, APPROVE_RETRY),
        (
            "renewal for another node's name",
            |f| {
                renewal(f);
                f.csr = parsed("worker-2");
            },
            Want::Deny(RenewalRequesterMismatch),
        ),
        (
            "renewal of a node kubeflavor never bound (control plane, kubeadm's joins)",
            |f| {
                renewal(f);
                f.binding = None;
            },
            APPROVE_RETRY,
        ),
        (
            "renewal of a revoked node",
            |f| {
                renewal(f);
                f.binding = binding(ID, true);
            },
            Want::Deny(BindingRevoked),
        ),
        (
            "renewal with a malformed request",
            |f| {
                renewal(f);
                f.csr = Err(CsrError::NotPkcs10("x".into()));
            },
            Want::Deny(MalformedCsr),
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
        let got = want(&decide(&facts));
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
            Want::Deny(c) => Some(c),
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
    assert_eq!(
        want(&decide(&f)),
        Want::Deny(DenyCause::NameBoundToOtherToken)
    );
}

#[test]
fn takeover_of_a_node_that_joined_otherwise_is_denied() {
    let mut f = base();
    f.node_exists = true;
    assert_eq!(
        want(&decide(&f)),
        Want::Deny(DenyCause::NodeExistsWithoutBinding)
    );
}

#[test]
fn retry_of_the_same_token_for_the_same_name_uses_nothing_twice() {
    let mut f = base();
    assert_eq!(want(&decide(&f)), APPROVE_NEW);
    // The controller reserved the use and wrote the binding; the kubelet retries.
    bound_to_this_token(&mut f);
    f.csr_name = "csr-retry".into();
    assert_eq!(want(&decide(&f)), APPROVE_RETRY);
}

/// The name is in the token's bound names and bound to it by a binding another CSR made.
fn bound_to_this_token(f: &mut CsrFacts) {
    with_token(
        f,
        TokenSpec {
            bound: vec![NODE.into()],
            ..TokenSpec::default()
        },
    );
    f.binding = binding(ID, false);
}

/// P3 (binding): a join line found after its node joined (in a cloud-init file, a portal
/// log, a shell history) cannot get a second certificate for that node: the same token,
/// a new key and a new CSR are denied, counted on the token, and named in the trail.
#[test]
fn rekey_of_a_joined_node_is_denied() {
    let mut f = base();
    bound_to_this_token(&mut f);
    f.node_exists = true;
    f.csr_name = "csr-someone-else".into();
    f.csr = Ok(kubeflavor_core::csr::client::KubeletClientCsr {
        node_name: NODE.parse().unwrap(),
        public_key_sha256: [8; 32],
    });
    assert_eq!(
        decide(&f),
        Decision::Deny {
            cause: DenyCause::RekeyAttempt,
            token_fate: TokenFate::Count,
        }
    );
    // The kubelet that holds the bound key still gets its retry approved.
    f.csr = parsed(NODE);
    assert_eq!(want(&decide(&f)), APPROVE_RETRY);
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
        let denial = Decision::Deny {
            cause,
            token_fate: TokenFate::Keep,
        };
        let c = denial.condition().unwrap();
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
fn an_approval_names_the_node_token_and_flavor() {
    let token = || ID.parse().unwrap();
    let sweet = || "sweet".parse().unwrap();
    let node = || NODE.parse().unwrap();
    let mut f = base();
    assert_eq!(
        decide(&f),
        Decision::Approve {
            node: node(),
            binding: BindingStep::Create {
                token: token(),
                flavor: sweet(),
                reserve_use: true,
                custody: Custody::default(),
                input_labels: InputLabels::default(),
            },
        }
    );
    // A retry: the binding's token and flavor.
    f.binding = binding(ID, false);
    assert_eq!(
        decide(&f),
        Decision::Approve {
            node: node(),
            binding: BindingStep::Existing {
                token: Some(token()),
                flavor: Some(sweet()),
            },
        }
    );
    // A renewal of a node kubeflavor never bound: no token, no flavor.
    renewal(&mut f);
    f.binding = None;
    assert_eq!(
        decide(&f),
        Decision::Approve {
            node: node(),
            binding: BindingStep::Existing {
                token: None,
                flavor: None,
            },
        }
    );
}

/// A new binding records the token's custody; an existing binding is left as it is.
#[test]
fn a_new_binding_carries_the_tokens_custody() {
    let custody = Custody {
        issued_to: Some("acme-corp/alice".parse().unwrap()),
        issued_by: Some("system:serviceaccount:portal:minter".into()),
        requested_by: None,
        identity: None,
    };
    let mut f = base();
    if let TokenLookup::Found(record) = &mut f.token {
        let meta = record.kubeflavor.take().unwrap();
        record.kubeflavor = Some(meta.with_custody(custody.clone()));
    }
    match decide(&f) {
        Decision::Approve {
            binding: BindingStep::Create { custody: got, .. },
            ..
        } => assert_eq!(got, custody),
        other => panic!("not a new binding: {other:?}"),
    }
    f.binding = binding(ID, false);
    assert!(matches!(
        decide(&f),
        Decision::Approve {
            binding: BindingStep::Existing { .. },
            ..
        }
    ));
}

/// A new binding carries the token's input labels when the Flavor allows them; when it
/// does not (its allowlist narrowed since the token was minted, or the token Secret was
/// written by someone else than the join-token API), the CSR is denied and counted on the
/// token: the Flavor, not the token Secret, decides what reaches the Node.
#[test]
fn input_labels_reach_a_binding_only_as_the_flavor_allows() {
    let labels =
        InputLabels::from_map(&[("site".to_string(), "paris".to_string())].into()).unwrap();
    let allowing = |values: Vec<&str>| {
        InputLabelRules::from_spec(&InputLabelsSpec {
            max_labels: None,
            keys: vec![InputKeySpec {
                key: "site".into(),
                values: Some(values.into_iter().map(String::from).collect()),
                pattern: None,
            }],
        })
        .unwrap()
    };
    let mut f = base();
    if let TokenLookup::Found(record) = &mut f.token {
        let meta = record.kubeflavor.take().unwrap();
        record.kubeflavor = Some(meta.with_input_labels(labels.clone()));
    }
    f.flavor_input_labels = allowing(vec!["paris", "berlin"]);
    match decide(&f) {
        Decision::Approve {
            binding: BindingStep::Create { input_labels, .. },
            ..
        } => assert_eq!(input_labels, labels),
        other => panic!("not a new binding: {other:?}"),
    }
    for narrowed in [allowing(vec!["berlin"]), InputLabelRules::default()] {
        f.flavor_input_labels = narrowed;
        assert_eq!(
            decide(&f),
            Decision::Deny {
                cause: DenyCause::InputLabelsNotAllowed,
                token_fate: TokenFate::Count,
            }
        );
    }
    // A retry of a binding already made keeps what it recorded.
    f.binding = binding(ID, false);
    assert!(matches!(
        decide(&f),
        Decision::Approve {
            binding: BindingStep::Existing { .. },
            ..
        }
    ));
}

/// P4 (rejection that ends): what each denial does to the requester's token Secret.
#[test]
fn a_denial_settles_the_token_fate() {
    let fate = |modify: fn(&mut CsrFacts), limit: Option<u32>| {
        let mut f = base();
        f.options.denial_limit = limit.and_then(NonZeroU32::new);
        modify(&mut f);
        match decide(&f) {
            Decision::Deny { token_fate, .. } => token_fate,
            other => panic!("not a denial: {other:?}"),
        }
    };
    let exhausted: fn(&mut CsrFacts) = |f| {
        with_token(
            f,
            TokenSpec {
                bound: vec!["worker-0".into()],
                ..TokenSpec::default()
            },
        )
    };
    let taken: fn(&mut CsrFacts) = |f| f.binding = binding("zzzzzz", false);
    let flavor_gone: fn(&mut CsrFacts) = |f| f.flavor_exists = false;
    let malformed: fn(&mut CsrFacts) = |f| f.csr = Err(CsrError::NotPem);
    let missing: fn(&mut CsrFacts) = |f| f.token = TokenLookup::Missing;
    let kubeadm: fn(&mut CsrFacts) = |f| {
        f.requester_groups = groups("system:bootstrappers:kubeadm:default-node-token");
        f.options.strict = true;
    };
    // Misuse ends the token at once.
    assert_eq!(fate(exhausted, None), TokenFate::Delete);
    assert_eq!(fate(taken, None), TokenFate::Delete);
    // Other causes count, and end the token at the limit.
    assert_eq!(fate(flavor_gone, None), TokenFate::Count);
    assert_eq!(fate(flavor_gone, Some(2)), TokenFate::Count);
    assert_eq!(fate(flavor_gone, Some(1)), TokenFate::Delete);
    assert_eq!(fate(malformed, Some(1)), TokenFate::Delete);
    // Nothing to count on a token that is gone or not kubeflavor's.
    assert_eq!(fate(missing, Some(1)), TokenFate::Keep);
    assert_eq!(fate(kubeadm, Some(1)), TokenFate::Keep);
}
