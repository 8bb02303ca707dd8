//! What the controller and `token list` know about a token Secret: [`TokenRecord`], and
//! whether the API server would authenticate the token right now, decided exactly as the
//! bootstrap token authenticator does (`plugin/pkg/auth/authenticator/token/bootstrap` in
//! Kubernetes: usage `"true"`, valid groups, not expired, right type, namespace and id).

use std::collections::BTreeMap;

use jiff::Timestamp;

pub use crate::token::secret::SecretView;
use crate::token::secret::{
    AUTHENTICATED_GROUP, AuthGroup, AuthGroupError, BOOTSTRAPPERS_GROUP, FlavorTokenMeta,
    KEY_AUTH_EXTRA_GROUPS, KEY_EXPIRATION, KEY_TOKEN_ID, KEY_TOKEN_SECRET,
    KEY_USAGE_AUTHENTICATION, KEY_USAGE_SIGNING, TOKEN_SECRET_NAME_PREFIX, TOKEN_SECRET_NAMESPACE,
    TOKEN_SECRET_TYPE, TokenMetaError, parse_rfc3339,
};
use crate::token::{BOOTSTRAP_USER_PREFIX, TokenId, TokenSecret};

/// The user the API server makes of a valid bootstrap token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapIdentity {
    /// `system:bootstrap:<id>`.
    pub username: String,
    /// `system:bootstrappers` and the extra groups, sorted and deduplicated, then
    /// `system:authenticated`, as the API server reports them.
    pub groups: Vec<String>,
}

/// Why the API server would refuse to authenticate a token (it answers a bare 401 for all
/// of these; the variants say which rule failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthRejection {
    #[error("the token Secret is being deleted")]
    BeingDeleted,
    #[error("the token Secret is in namespace {0:?}; bootstrap tokens only count in kube-system")]
    WrongNamespace(String),
    #[error("the token Secret has type {0:?}; it must be bootstrap.kubernetes.io/token")]
    WrongType(String),
    #[error("the token Secret's token-id does not match its name bootstrap-token-<id>")]
    TokenIdMismatch,
    #[error("the token Secret's token-secret is missing or not 16 characters of a-z0-9")]
    SecretInvalid,
    #[error("the token expired at {0}")]
    Expired(Timestamp),
    #[error("the token Secret's expiration {0:?} is not RFC 3339, which counts as expired")]
    ExpirationUnparseable(String),
    #[error("the token Secret does not have usage-bootstrap-authentication: \"true\"")]
    AuthenticationNotEnabled,
    #[error("{0}")]
    InvalidGroup(AuthGroupError),
}

impl AuthRejection {
    /// Whether the token failed only because of time (its expiration passed or is
    /// unreadable), as opposed to a Secret that never could authenticate.
    pub fn is_expiry(&self) -> bool {
        matches!(
            self,
            AuthRejection::Expired(_) | AuthRejection::ExpirationUnparseable(_)
        )
    }
}

/// The `expiration` of a token Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expiration {
    /// No key (or an empty value): the token never expires.
    Never,
    At(Timestamp),
    /// A value that does not parse; the API server treats the token as expired.
    Unparseable(String),
}

impl Expiration {
    fn from_data(data: &BTreeMap<String, String>) -> Self {
        match data.get(KEY_EXPIRATION).map(String::as_str) {
            None | Some("") => Expiration::Never,
            Some(s) => match parse_rfc3339(s) {
                Some(at) => Expiration::At(at),
                None => Expiration::Unparseable(s.to_owned()),
            },
        }
    }

    /// `GetExpiration` upstream: expired once `now` reaches the expiration (ttl <= 0).
    pub fn check(&self, now: Timestamp) -> Result<(), AuthRejection> {
        match self {
            Expiration::Never => Ok(()),
            Expiration::At(at) if now < *at => Ok(()),
            Expiration::At(at) => Err(AuthRejection::Expired(*at)),
            Expiration::Unparseable(s) => Err(AuthRejection::ExpirationUnparseable(s.clone())),
        }
    }
}

/// The time-independent checks of the authenticator, in its order; returns the id and the
/// sorted, deduplicated bootstrap groups.
fn standing_checks(view: &SecretView<'_>) -> Result<(TokenId, Vec<String>), AuthRejection> {
    if view.being_deleted {
        return Err(AuthRejection::BeingDeleted);
    }
    if view.namespace != TOKEN_SECRET_NAMESPACE {
        return Err(AuthRejection::WrongNamespace(view.namespace.to_owned()));
    }
    if view.type_ != TOKEN_SECRET_TYPE {
        return Err(AuthRejection::WrongType(view.type_.to_owned()));
    }
    let id: TokenId = view
        .name
        .strip_prefix(TOKEN_SECRET_NAME_PREFIX)
        .and_then(|s| s.parse().ok())
        .ok_or(AuthRejection::TokenIdMismatch)?;
    let get = |k: &str| view.data.get(k).map(String::as_str);
    get(KEY_TOKEN_SECRET)
        .and_then(|s| s.parse::<TokenSecret>().ok())
        .ok_or(AuthRejection::SecretInvalid)?;
    if get(KEY_TOKEN_ID) != Some(id.as_str()) {
        return Err(AuthRejection::TokenIdMismatch);
    }
    if get(KEY_USAGE_AUTHENTICATION) != Some("true") {
        return Err(AuthRejection::AuthenticationNotEnabled);
    }
    let mut groups = std::collections::BTreeSet::from([BOOTSTRAPPERS_GROUP.to_owned()]);
    if let Some(extra) = get(KEY_AUTH_EXTRA_GROUPS).filter(|s| !s.is_empty()) {
        for g in extra.split(',') {
            let g: AuthGroup = g.parse().map_err(AuthRejection::InvalidGroup)?;
            groups.insert(g.to_string());
        }
    }
    Ok((id, groups.into_iter().collect()))
}

/// Whether the API server authenticates this token Secret's token at `now`, and as whom.
/// Mirrors the bootstrap token authenticator (deleted, namespace, type, id, secret,
/// expiration, usage, groups); every rejection is a 401 there.
pub fn authenticate_token_secret(
    view: &SecretView<'_>,
    now: Timestamp,
) -> Result<BootstrapIdentity, AuthRejection> {
    let (id, groups) = standing_checks(view)?;
    Expiration::from_data(view.data).check(now)?;
    Ok(identity(&id, groups))
}

fn identity(id: &TokenId, mut groups: Vec<String>) -> BootstrapIdentity {
    groups.push(AUTHENTICATED_GROUP.to_owned());
    BootstrapIdentity {
        username: format!("{BOOTSTRAP_USER_PREFIX}{id}"),
        groups,
    }
}

/// Why a Secret cannot be read as a token record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRecordError {
    #[error(
        "Secret {0:?} is not a bootstrap token Secret (its name must be bootstrap-token-<6 characters of a-z0-9>)"
    )]
    NotATokenSecret(String),
    #[error("token Secret {name:?}: {problem}")]
    Metadata {
        name: String,
        problem: TokenMetaError,
    },
}

/// Everything kubeflavor needs to know about a token Secret, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: TokenId,
    pub expiration: Expiration,
    /// `usage-bootstrap-authentication` is exactly `"true"`.
    pub usage_authentication: bool,
    /// `usage-bootstrap-signing` is exactly `"true"`.
    pub usage_signing: bool,
    /// `auth-extra-groups` as stored, split at commas (unvalidated: see
    /// [`TokenRecord::authentication_at`] for the verdict).
    pub extra_groups: Vec<String>,
    /// kubeflavor's fields; `None` for a token without the flavor label (kubeadm's own).
    pub kubeflavor: Option<FlavorTokenMeta>,
    /// The time-independent part of the authenticator's verdict.
    standing: Result<Vec<String>, AuthRejection>,
}

impl TokenRecord {
    /// Reads a token Secret. Fails only when the Secret is not named like a token Secret
    /// or kubeflavor's own metadata is malformed; a Secret the API server would refuse is
    /// still a record (see [`TokenRecord::authentication_at`]).
    pub fn from_secret(view: &SecretView<'_>) -> Result<Self, TokenRecordError> {
        let id: TokenId = view
            .name
            .strip_prefix(TOKEN_SECRET_NAME_PREFIX)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| TokenRecordError::NotATokenSecret(view.name.to_owned()))?;
        let kubeflavor =
            FlavorTokenMeta::from_metadata(view.labels, view.annotations).map_err(|problem| {
                TokenRecordError::Metadata {
                    name: view.name.to_owned(),
                    problem,
                }
            })?;
        Ok(TokenRecord {
            id,
            expiration: Expiration::from_data(view.data),
            usage_authentication: view.data.get(KEY_USAGE_AUTHENTICATION).map(String::as_str)
                == Some("true"),
            usage_signing: view.data.get(KEY_USAGE_SIGNING).map(String::as_str) == Some("true"),
            extra_groups: view
                .data
                .get(KEY_AUTH_EXTRA_GROUPS)
                .filter(|s| !s.is_empty())
                .map(|s| s.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            kubeflavor,
            standing: standing_checks(view).map(|(_, groups)| groups),
        })
    }

    /// Whether the API server authenticates this token at `now` (same verdict as
    /// [`authenticate_token_secret`] on the Secret the record was read from).
    pub fn authentication_at(&self, now: Timestamp) -> Result<BootstrapIdentity, AuthRejection> {
        let groups = self.standing.clone()?;
        self.expiration.check(now)?;
        Ok(identity(&self.id, groups))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::secret::{
        Custody, ISSUED_BY_ANNOTATION, ISSUED_TO_ANNOTATION, IssuedTo, NODE_GROUP, TokenSecretData,
        flavored_token_secret,
    };
    use std::num::NonZeroU32;

    /// A token Secret variant to put before the authenticator, one rule broken at a time.
    struct Case {
        namespace: &'static str,
        name: String,
        type_: &'static str,
        data: BTreeMap<String, String>,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    }

    impl Case {
        fn new(id: &str, data: &[(&str, &str)]) -> Self {
            let mut d: BTreeMap<String, String> = data
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            d.entry("token-id".into()).or_insert_with(|| id.to_owned());
            d.insert("token-secret".into(), "0123456789abcdef".into());
            Case {
                namespace: "kube-system",
                name: format!("bootstrap-token-{id}"),
                type_: "bootstrap.kubernetes.io/token",
                data: d,
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
            }
        }

        fn view(&self) -> SecretView<'_> {
            SecretView {
                namespace: self.namespace,
                name: &self.name,
                type_: self.type_,
                being_deleted: false,
                data: &self.data,
                labels: &self.labels,
                annotations: &self.annotations,
            }
        }
    }

    fn now() -> Timestamp {
        "2026-11-30T04:26:05Z".parse().unwrap()
    }

    #[test]
    fn groups_are_sorted_and_deduplicated() {
        let c = Case::new(
            "73efe1",
            &[
                ("expiration", "2026-11-30T05:25:53Z"),
                ("usage-bootstrap-authentication", "true"),
                (
                    "auth-extra-groups",
                    "system:bootstrappers:zeta,system:bootstrappers:alpha,system:bootstrappers:zeta",
                ),
            ],
        );
        let who = authenticate_token_secret(&c.view(), now()).unwrap();
        assert_eq!(who.username, "system:bootstrap:73efe1");
        assert_eq!(
            who.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:alpha",
                "system:bootstrappers:zeta",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn no_expiration_never_expires() {
        let c = Case::new("6ibto6", &[("usage-bootstrap-authentication", "true")]);
        let who = authenticate_token_secret(&c.view(), now()).unwrap();
        assert_eq!(who.groups, ["system:bootstrappers", "system:authenticated"]);
    }

    #[test]
    fn each_broken_rule_is_refused() {
        let auth = ("usage-bootstrap-authentication", "true");
        let reject = |c: &Case| authenticate_token_secret(&c.view(), now()).unwrap_err();
        // 3) one invalid group rejects the whole token
        let c = Case::new(
            "sdo2oc",
            &[
                auth,
                (
                    "auth-extra-groups",
                    "system:bootstrappers:ok,system:masters",
                ),
            ],
        );
        assert!(matches!(reject(&c), AuthRejection::InvalidGroup(_)));
        // 4) usage-bootstrap-authentication missing
        let c = Case::new("z2xwa9", &[("usage-bootstrap-signing", "true")]);
        assert_eq!(reject(&c), AuthRejection::AuthenticationNotEnabled);
        // 5) "yes" is not "true"
        let c = Case::new("sad7mk", &[("usage-bootstrap-authentication", "yes")]);
        assert_eq!(reject(&c), AuthRejection::AuthenticationNotEnabled);
        // 6) expired
        let c = Case::new("76jyn4", &[auth, ("expiration", "2000-01-01T00:00:00Z")]);
        assert!(matches!(reject(&c), AuthRejection::Expired(_)));
        // 7) not RFC 3339
        let c = Case::new("kvuyti", &[auth, ("expiration", "2030-01-01 00:00:00")]);
        assert!(matches!(
            reject(&c),
            AuthRejection::ExpirationUnparseable(_)
        ));
        // 8) type Opaque
        let mut c = Case::new("28gsoi", &[auth]);
        c.type_ = "Opaque";
        assert!(matches!(reject(&c), AuthRejection::WrongType(_)));
        // 9) namespace default
        let mut c = Case::new("tsc23h", &[auth]);
        c.namespace = "default";
        assert!(matches!(reject(&c), AuthRejection::WrongNamespace(_)));
        // 10) token-id differs from the name
        let c = Case::new("p1p0v9", &[auth, ("token-id", "x5hp34")]);
        assert_eq!(reject(&c), AuthRejection::TokenIdMismatch);
    }

    #[test]
    fn a_token_expires_at_its_expiration_instant() {
        let c = Case::new(
            "abcdef",
            &[
                ("usage-bootstrap-authentication", "true"),
                ("expiration", "2026-11-30T04:26:05Z"),
            ],
        );
        let before: Timestamp = "2026-11-30T04:26:04.999Z".parse().unwrap();
        assert!(authenticate_token_secret(&c.view(), before).is_ok());
        assert!(authenticate_token_secret(&c.view(), now()).is_err());
    }

    #[test]
    fn deleted_or_secretless_tokens_are_refused() {
        let c = Case::new("abcdef", &[("usage-bootstrap-authentication", "true")]);
        let mut v = c.view();
        v.being_deleted = true;
        assert_eq!(
            authenticate_token_secret(&v, now()),
            Err(AuthRejection::BeingDeleted)
        );
        let mut c = Case::new("abcdef", &[("usage-bootstrap-authentication", "true")]);
        c.data.insert("token-secret".into(), "short".into());
        assert_eq!(
            authenticate_token_secret(&c.view(), now()),
            Err(AuthRejection::SecretInvalid)
        );
    }

    #[test]
    fn a_kubeflavor_token_authenticates_with_exactly_the_node_group() {
        let token = "abcdef.0123456789abcdef".parse().unwrap();
        let obj = flavored_token_secret(
            &token,
            &"sweet".parse().unwrap(),
            Some("2026-12-01T00:00:00Z".parse().unwrap()),
            NonZeroU32::MIN,
            &Custody::default(),
        );
        let view = obj.view();
        let who = authenticate_token_secret(&view, now()).unwrap();
        assert_eq!(
            who.groups,
            ["system:bootstrappers", NODE_GROUP, "system:authenticated"]
        );
        let record = TokenRecord::from_secret(&view).unwrap();
        assert_eq!(record.authentication_at(now()), Ok(who));
        assert_eq!(record.kubeflavor.unwrap().flavor.as_str(), "sweet");
        assert!(record.usage_authentication && record.usage_signing);
        assert_eq!(record.extra_groups, [NODE_GROUP]);
    }

    /// P1 (hidden flavor): what SelfSubjectReview shows a token holder (its groups) is the same for
    /// every flavor; only the user name carries the random token id.
    #[test]
    fn bootstrap_identity_groups_are_the_same_for_every_flavor() {
        let identity = |token: &str, flavor: &str, max: u32, custody: &Custody| {
            let obj = flavored_token_secret(
                &token.parse().unwrap(),
                &flavor.parse().unwrap(),
                Some("2026-12-01T00:00:00Z".parse().unwrap()),
                NonZeroU32::new(max).unwrap(),
                custody,
            );
            let view = obj.view();
            authenticate_token_secret(&view, now()).unwrap()
        };
        let sweet = identity("aaaaaa.0123456789abcdef", "sweet", 1, &Custody::default());
        let sour = identity(
            "bbbbbb.0123456789abcdef",
            "sour",
            5,
            &Custody {
                issued_to: Some("acme-corp/alice".parse().unwrap()),
                issued_by: Some("kubernetes-admin".into()),
                requested_by: None,
                identity: None,
            },
        );
        assert_eq!(sweet.groups, sour.groups);
        assert_eq!(sweet.username, "system:bootstrap:aaaaaa");
        assert_eq!(sour.username, "system:bootstrap:bbbbbb");
    }

    #[test]
    fn record_keeps_secrets_the_api_server_would_refuse() {
        let c = Case::new("abcdef", &[("expiration", "2000-01-01T00:00:00Z")]);
        let record = TokenRecord::from_secret(&c.view()).unwrap();
        assert_eq!(
            record.authentication_at(now()),
            Err(AuthRejection::AuthenticationNotEnabled)
        );
        assert_eq!(
            record.expiration,
            Expiration::At("2000-01-01T00:00:00Z".parse().unwrap())
        );
        assert_eq!(record.kubeflavor, None);
    }

    #[test]
    fn record_refuses_non_token_names_and_bad_metadata() {
        let mut c = Case::new("abcdef", &[]);
        c.name = "my-secret".into();
        assert!(matches!(
            TokenRecord::from_secret(&c.view()),
            Err(TokenRecordError::NotATokenSecret(_))
        ));
        let mut c = Case::new("abcdef", &[]);
        c.labels
            .insert("kubeflavor.io/flavor".into(), "sweet".into());
        c.annotations
            .insert("kubeflavor.io/max-nodes".into(), "many".into());
        assert!(matches!(
            TokenRecord::from_secret(&c.view()),
            Err(TokenRecordError::Metadata { .. })
        ));
        // An issued-to that breaks its rules makes the metadata unreadable, as a bad
        // max-nodes does.
        let mut c = Case::new("abcdef", &[]);
        c.labels
            .insert("kubeflavor.io/flavor".into(), "sweet".into());
        c.annotations
            .insert(ISSUED_TO_ANNOTATION.into(), "alice\n".into());
        let err = TokenRecord::from_secret(&c.view()).unwrap_err();
        assert!(matches!(
            err,
            TokenRecordError::Metadata {
                problem: TokenMetaError::IssuedTo(_),
                ..
            }
        ));
        assert!(err.to_string().contains(ISSUED_TO_ANNOTATION), "{err}");
    }

    proptest::proptest! {
        /// Custody -> Secret annotations -> record: the record carries exactly the custody
        /// the token was minted with, and nothing of it reaches the data.
        #[test]
        fn custody_round_trips_through_the_secret(
            // Visible text: no Cc, Cf, Zl, Zp or Hangul filler (crate::invisible).
            issued_to in proptest::option::of("[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\x{115F}\\x{1160}\\x{3164}\\x{FFA0}\\s][^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\x{115F}\\x{1160}\\x{3164}\\x{FFA0}]{0,40}[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\x{115F}\\x{1160}\\x{3164}\\x{FFA0}\\s]|[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\x{115F}\\x{1160}\\x{3164}\\x{FFA0}\\s]"),
            issued_by in proptest::option::of("(system:serviceaccount:[a-z0-9-]{1,10}:[a-z0-9-]{1,10}|[a-zA-Z0-9@._:-]{1,30})"),
        ) {
            let custody = Custody {
                issued_to: issued_to.map(|t| t.parse::<IssuedTo>().unwrap()),
                issued_by,
                requested_by: None,
                identity: None,
            };
            let obj = flavored_token_secret(
                &"abcdef.0123456789abcdef".parse().unwrap(),
                &"sweet".parse().unwrap(),
                None,
                NonZeroU32::MIN,
                &custody,
            );
            let record = TokenRecord::from_secret(&obj.view()).unwrap();
            proptest::prop_assert_eq!(&record.kubeflavor.unwrap().custody, &custody);
            proptest::prop_assert_eq!(
                obj.annotations.get(ISSUED_BY_ANNOTATION),
                custody.issued_by.as_ref()
            );
            let plain = flavored_token_secret(
                &"abcdef.0123456789abcdef".parse().unwrap(),
                &"sweet".parse().unwrap(),
                None,
                NonZeroU32::MIN,
                &Custody::default(),
            );
            proptest::prop_assert_eq!(&obj.string_data, &plain.string_data);
        }
    }

    proptest::proptest! {
        /// Whatever the data holds, the record's verdict is the direct verdict, and a token
        /// that authenticates satisfies every rule of the authenticator (usage exactly `"true"`,
        /// every extra group valid, an expiration that parses and lies ahead).
        #[test]
        fn record_verdict_is_the_authenticators(
            usage in proptest::option::of(proptest::prop_oneof![proptest::strategy::Just("true"), proptest::strategy::Just("yes"), proptest::strategy::Just("")]),
            groups in proptest::option::of("(system:bootstrappers:[a-z]{1,4}|system:masters|)(,system:bootstrappers:[a-z:]{0,4}[a-z]){0,2}"),
            expiration in proptest::option::of(proptest::prop_oneof![
                proptest::strategy::Just("2026-11-30T04:26:05Z"),
                proptest::strategy::Just("2026-11-30T04:26:06Z"),
                proptest::strategy::Just("2000-01-01T00:00:00Z"),
                proptest::strategy::Just("garbage"),
                proptest::strategy::Just(""),
            ]),
            id_matches: bool,
        ) {
            let mut pairs: Vec<(&str, &str)> = Vec::new();
            if let Some(u) = usage { pairs.push(("usage-bootstrap-authentication", u)); }
            if let Some(g) = &groups { pairs.push(("auth-extra-groups", g)); }
            if let Some(e) = expiration { pairs.push(("expiration", e)); }
            if !id_matches { pairs.push(("token-id", "zzzzzz")); }
            let c = Case::new("abcdef", &pairs);
            let record = TokenRecord::from_secret(&c.view()).unwrap();
            let direct = authenticate_token_secret(&c.view(), now());
            proptest::prop_assert_eq!(record.authentication_at(now()), direct.clone());
            if direct.is_ok() {
                proptest::prop_assert!(id_matches && usage == Some("true"));
                proptest::prop_assert!(matches!(expiration, None | Some("") | Some("2026-11-30T04:26:06Z")));
                for g in groups.iter().flat_map(|g| g.split(',')).filter(|g| !g.is_empty()) {
                    proptest::prop_assert!(g.parse::<AuthGroup>().is_ok());
                }
            }
        }
    }

    #[test]
    fn record_and_direct_check_agree_with_the_data_codec() {
        let data = TokenSecretData::kubeflavor_node(
            "abcdef.0123456789abcdef".parse().unwrap(),
            Some("2026-11-30T04:26:06Z".parse().unwrap()),
        )
        .to_string_data();
        let empty = BTreeMap::new();
        let view = SecretView {
            namespace: "kube-system",
            name: "bootstrap-token-abcdef",
            type_: "bootstrap.kubernetes.io/token",
            being_deleted: false,
            data: &data,
            labels: &empty,
            annotations: &empty,
        };
        let record = TokenRecord::from_secret(&view).unwrap();
        for t in [
            "2026-11-30T04:26:05Z",
            "2026-11-30T04:26:06Z",
            "2026-11-30T04:26:07Z",
        ] {
            let t: Timestamp = t.parse().unwrap();
            assert_eq!(
                record.authentication_at(t),
                authenticate_token_secret(&view, t)
            );
        }
    }
}
