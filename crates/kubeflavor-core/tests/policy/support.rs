//! Facts builders shared by the policy tests: a valid kubeflavor bootstrap CSR and small
//! modifiers. Each test module uses a subset, hence the dead-code allowance.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use jiff::Timestamp;
use kubeflavor_core::approval::client::{
    BindingFacts, BindingStep, CsrFacts, Decision, DenyCause, IgnoreReason, PolicyOptions,
    TokenInstance, TokenLookup,
};
use kubeflavor_core::csr::client::{CsrError, KUBELET_CLIENT_SIGNER, KubeletClientCsr};
use kubeflavor_core::flavor::token_limits::EffectiveLimits;
use kubeflavor_core::token::meta::LIMITS_OVERRIDE_ANNOTATION;
use kubeflavor_core::token::record::{SecretView, TokenRecord};
use kubeflavor_core::token::secret::{
    BOUND_NODES_ANNOTATION, KEY_EXPIRATION, KEY_USAGE_AUTHENTICATION, MAX_NODES_ANNOTATION,
    flavored_token_secret,
};

pub const ID: &str = "abcdef";
pub const NODE: &str = "worker-1";

pub fn now() -> Timestamp {
    "2026-11-30T05:00:00Z".parse().unwrap()
}

/// The uid of the test's token Secret.
pub const TOKEN_UID: &str = "9c1a1d6e-6b8e-4a55-9f3c-1d0e8a7b2c11";

/// The test's token Secret, created an hour before `now`.
pub fn token_instance() -> Option<TokenInstance> {
    Some(TokenInstance {
        uid: TOKEN_UID.into(),
        created: Some("2026-11-30T04:00:00Z".parse().unwrap()),
    })
}

/// How the token Secret of a test differs from a fresh, valid kubeflavor token.
#[derive(Clone, Debug)]
pub struct TokenSpec {
    pub id: &'static str,
    pub flavor: &'static str,
    pub max_nodes: u32,
    pub bound: Vec<String>,
    pub expiration: Option<String>,
    pub usage_auth: bool,
    pub flavor_label: bool,
    pub being_deleted: bool,
    /// The admin's override of the Flavor's limits (`kubeflavor.io/limits-override`).
    pub limits_override: Option<String>,
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
            limits_override: None,
        }
    }
}

pub fn record(spec: &TokenSpec) -> TokenRecord {
    let token = format!("{}.0123456789abcdef", spec.id).parse().unwrap();
    let obj = flavored_token_secret(
        &token,
        &spec.flavor.parse().unwrap(),
        None,
        NonZeroU32::new(spec.max_nodes).unwrap(),
        &kubeflavor_core::token::meta::Custody::default(),
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
    if let Some(by) = &spec.limits_override {
        annotations.insert(LIMITS_OVERRIDE_ANNOTATION.into(), by.clone());
    }
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

pub fn parsed(node: &str) -> Result<KubeletClientCsr, CsrError> {
    Ok(KubeletClientCsr {
        node_name: node.parse().unwrap(),
        public_key_sha256: [7; 32],
    })
}

/// A binding of the name to token `token` (to the test's own token Secret when `token`
/// is [`ID`]), made half an hour before `now` by another CSR.
pub fn binding(token: &str, revoked: bool) -> Option<BindingFacts> {
    Some(BindingFacts {
        token_id: Some(token.parse().unwrap()),
        flavor: Some("sweet".parse().unwrap()),
        token_uid: Some(if token == ID {
            TOKEN_UID.into()
        } else {
            "other-uid".into()
        }),
        bound_at: "2026-11-30T04:30:00Z".parse().unwrap(),
        revoked,
        csr_name: "csr-earlier".into(),
        public_key_sha256: "07".repeat(32),
    })
}

pub fn groups(extra: &str) -> Vec<String> {
    vec![
        "system:bootstrappers".into(),
        extra.into(),
        "system:authenticated".into(),
    ]
}

/// Limits no test token breaks (any TTL, never expiring included, any max nodes): the
/// tests of other rules are not about the Flavor's token limits.
pub fn no_limits() -> EffectiveLimits {
    EffectiveLimits {
        max_ttl_secs: u64::MAX,
        max_nodes: NonZeroU32::MAX,
        allow_never_expiring: true,
        max_ttl_stated: true,
        max_nodes_stated: true,
    }
}

/// A Flavor's limits: the longest TTL in seconds, the most nodes, no token that never
/// expires.
pub fn limits(max_ttl_secs: u64, max_nodes: u32) -> EffectiveLimits {
    EffectiveLimits {
        max_ttl_secs,
        max_nodes: NonZeroU32::new(max_nodes).unwrap(),
        allow_never_expiring: false,
        max_ttl_stated: true,
        max_nodes_stated: true,
    }
}

/// The test token's lifetime: created at 04:00, it expires 25 hours later.
pub const TOKEN_LIFETIME_SECS: u64 = 25 * 3600;

/// A kubeflavor bootstrap CSR for worker-1 with a fresh single-use token: approvable.
pub fn base() -> CsrFacts {
    CsrFacts {
        csr_name: "csr-new".into(),
        signer_name: KUBELET_CLIENT_SIGNER.into(),
        requester_username: format!("system:bootstrap:{ID}"),
        requester_groups: groups("system:bootstrappers:kubeflavor:node"),
        csr: parsed(NODE),
        already_decided: false,
        token: TokenLookup::Found(record(&TokenSpec::default())),
        token_instance: token_instance(),
        flavor_exists: true,
        flavor_input_labels: kubeflavor_core::flavor::input_labels::InputLabelRules::default(),
        flavor_token_limits: no_limits(),
        binding: None,
        node_exists: false,
        options: PolicyOptions::default(),
        now: now(),
    }
}

pub fn with_token(f: &mut CsrFacts, spec: TokenSpec) {
    f.token = TokenLookup::Found(record(&spec));
}

pub fn renewal(f: &mut CsrFacts) {
    f.requester_username = format!("system:node:{NODE}");
    f.requester_groups = vec!["system:nodes".into(), "system:authenticated".into()];
    f.options.manage_renewals = true;
    f.binding = binding(ID, false);
    f.node_exists = true;
}

/// A decision as the decision table states it: approve with which writes first, deny for
/// which cause, or ignore why. The node, token, flavor and token fate of a decision have
/// their own tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Approve {
        reserve_use: bool,
        create_binding: bool,
    },
    Deny(DenyCause),
    Ignore(IgnoreReason),
}

/// The table's view of a decision.
pub fn want(d: &Decision) -> Want {
    match d {
        Decision::Approve { binding, .. } => match binding {
            BindingStep::Create { reserve_use, .. } => Want::Approve {
                reserve_use: *reserve_use,
                create_binding: true,
            },
            BindingStep::Existing { .. } => Want::Approve {
                reserve_use: false,
                create_binding: false,
            },
        },
        Decision::Deny { cause, .. } => Want::Deny(*cause),
        Decision::Ignore(why) => Want::Ignore(*why),
    }
}

pub const APPROVE_NEW: Want = Want::Approve {
    reserve_use: true,
    create_binding: true,
};
pub const APPROVE_RETRY: Want = Want::Approve {
    reserve_use: false,
    create_binding: false,
};
pub const APPROVE_FINISH_BINDING: Want = Want::Approve {
    reserve_use: false,
    create_binding: true,
};
