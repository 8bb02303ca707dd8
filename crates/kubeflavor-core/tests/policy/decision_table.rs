//! The CSR policy's decision table: every DenyCause and the combinations that matter,
//! each row asserting the exact Decision, plus the named cases of P1 (hidden flavor) and
//! P3 (binding).

use crate::support::*;
use kubeflavor_core::csr::CsrError;
use kubeflavor_core::policy::{
    APPROVED_CONDITION, CsrFacts, DENIED_CONDITION, Decision, DenyCause, IgnoreReason,
    PolicyOptions, TokenLookup, decide,
};
use kubeflavor_core::token_record::TokenRecordError;

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
            Decision::Deny(NameBoundToOtherToken),
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
            "recycled id: the name is bound to an earlier token of the same id",
            |f| {
                f.binding = binding(ID, false);
                f.token_instance.as_mut().unwrap().uid = "a-new-secret".into();
            },
            Decision::Deny(NameBoundToOtherToken),
        ),
        (
            "recycled id, binding without a uid: the token is newer than the binding",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().token_uid = None;
                f.token_instance.as_mut().unwrap().created = Some(now());
            },
            Decision::Deny(NameBoundToOtherToken),
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
            Decision::Deny(NameBoundToOtherToken),
        ),
        (
            "the binding's own CSR, and a Node of the name appeared meanwhile",
            |f| {
                f.binding = binding(ID, false);
                f.binding.as_mut().unwrap().csr_name = f.csr_name.clone();
                f.node_exists = true;
            },
            Decision::Deny(NodeExistsWithoutBinding),
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
