//! The bootstrap token Secret in kubeadm's exact layout (`kube-system/bootstrap-token-<id>`,
//! type `bootstrap.kubernetes.io/token`, data keys of `k8s.io/cluster-bootstrap`), plus
//! kubeflavor's own fields as labels and annotations (Secret data keys cannot hold `/`).
//!
//! Data values here are plain strings; base64 is the binary's job. P1 (hidden flavor): every
//! kubeflavor token carries the same group ([`NODE_GROUP`]) and the same description
//! ([`KUBEFLAVOR_TOKEN_DESCRIPTION`]) whatever its flavor; the flavor lives only in the Secret's
//! metadata, which a bootstrap identity cannot read (the API server answers it 403 on get and list
//! of Secrets).

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use jiff::Timestamp;
use zeroize::Zeroize;

use crate::flavor::FlavorName;
pub use crate::token::meta::{
    BOUND_NODES_ANNOTATION, Custody, DENIALS_ANNOTATION, FLAVOR_TOKEN_LABEL, FlavorTokenMeta,
    ISSUED_BY_ANNOTATION, ISSUED_TO_ANNOTATION, IssuedTo, IssuedToError, MAX_NODES_ANNOTATION,
    TokenMetaError,
};
use crate::token::{BootstrapToken, TokenId, TokenParseError};

/// The parts of a Secret object the token rules read, borrowed from whatever type the
/// caller holds. `data` values are the decoded strings.
#[derive(Debug, Clone, Copy)]
pub struct SecretView<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub type_: &'a str,
    /// `metadata.deletionTimestamp` is set.
    pub being_deleted: bool,
    pub data: &'a BTreeMap<String, String>,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
}

/// Namespace of every bootstrap token Secret.
pub const TOKEN_SECRET_NAMESPACE: &str = "kube-system";
/// `type` of a bootstrap token Secret.
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Name prefix of a bootstrap token Secret: `bootstrap-token-<id>`.
pub const TOKEN_SECRET_NAME_PREFIX: &str = "bootstrap-token-";

/// Data keys of kubeadm's layout.
pub const KEY_TOKEN_ID: &str = "token-id";
pub const KEY_TOKEN_SECRET: &str = "token-secret";
pub const KEY_EXPIRATION: &str = "expiration";
/// What every usage key starts with (the authenticator and the signer read any such key).
pub const USAGE_KEY_PREFIX: &str = "usage-bootstrap-";
pub const KEY_USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
pub const KEY_USAGE_SIGNING: &str = "usage-bootstrap-signing";
pub const KEY_AUTH_EXTRA_GROUPS: &str = "auth-extra-groups";
pub const KEY_DESCRIPTION: &str = "description";

/// The group every bootstrap token authenticates with, besides its extra groups.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// The group every authenticated identity gets.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The ONE group of every kubeflavor node token, whatever its flavor (P1, hidden flavor).
pub const NODE_GROUP: &str = "system:bootstrappers:kubeflavor:node";
/// The group of kubeflavor control-plane join tokens (allowed to read kubeadm-certs: P5,
/// certificate hand-off).
pub const CONTROL_PLANE_GROUP: &str = "system:bootstrappers:kubeflavor:control-plane";
/// The ONE description of every kubeflavor node token. It must never name a flavor (P1, hidden
/// flavor).
pub const KUBEFLAVOR_TOKEN_DESCRIPTION: &str = "kubeflavor node bootstrap token";
/// The description of a control-plane join token (`token create --control-plane`).
pub const CONTROL_PLANE_TOKEN_DESCRIPTION: &str = "kubeflavor control-plane join token";

/// The Secret name of a token: `bootstrap-token-<id>`.
pub fn secret_name(id: &TokenId) -> String {
    format!("{TOKEN_SECRET_NAME_PREFIX}{id}")
}

/// The longest tail of an extra group after `system:bootstrappers:`, as the regex
/// `[a-z0-9:-]{0,255}[a-z0-9]` allows.
const GROUP_TAIL_MAX: usize = 256;

/// An `auth-extra-groups` entry, valid per `\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AuthGroup(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bootstrap token group {group:?} is invalid: it must start with system:bootstrappers: and continue with 1-256 characters of [a-z0-9:-] ending in a letter or digit (the API server rejects the whole token otherwise)"
)]
pub struct AuthGroupError {
    pub group: String,
}

impl AuthGroup {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AuthGroup {
    type Err = AuthGroupError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || AuthGroupError {
            group: s.to_owned(),
        };
        let tail = s.strip_prefix("system:bootstrappers:").ok_or_else(err)?;
        let ok_char = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let valid = !tail.is_empty()
            && tail.len() <= GROUP_TAIL_MAX
            && tail.bytes().all(|b| ok_char(b) || b == b':' || b == b'-')
            && tail.bytes().last().is_some_and(ok_char);
        if valid {
            Ok(AuthGroup(s.to_owned()))
        } else {
            Err(err())
        }
    }
}

impl fmt::Display for AuthGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Go's `time.Parse(time.RFC3339, s)` as the authenticator uses it: a `T` separator, an
/// upper-case `Z` or a numeric offset, optional fractional seconds.
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let shape = b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && !s.contains(['t', 'z', ' ']);
    if !shape {
        return None;
    }
    s.parse().ok()
}

/// The `expiration` value kubeadm writes: RFC 3339 UTC with no fractional seconds.
pub fn format_expiration(at: Timestamp) -> String {
    let whole = Timestamp::from_second(at.as_second()).expect("a valid timestamp's seconds");
    whole.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Why the data of a token Secret does not follow kubeadm's layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenSecretError {
    #[error("the token Secret has no {0:?} data key; recreate the token")]
    MissingKey(&'static str),
    #[error("the token Secret's {key:?}: {problem}")]
    Token {
        key: &'static str,
        problem: TokenParseError,
    },
    #[error(
        "the token Secret's expiration {0:?} is not RFC 3339 (e.g. 2026-12-01T12:00:00Z); the API server treats the token as expired"
    )]
    Expiration(String),
    #[error(
        "the token Secret's {key:?} is {value:?}; only \"true\" enables a usage, remove the key to disable it"
    )]
    Usage { key: &'static str, value: String },
    #[error("the token Secret's auth-extra-groups: {0}")]
    Group(AuthGroupError),
}

/// A bootstrap token Secret's `data`, in kubeadm's layout.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecretData {
    pub token: BootstrapToken,
    /// `None`: the token never expires (no `expiration` key).
    pub expiration: Option<Timestamp>,
    pub usage_authentication: bool,
    pub usage_signing: bool,
    pub extra_groups: Vec<AuthGroup>,
    pub description: Option<String>,
}

impl fmt::Debug for TokenSecretData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSecretData")
            .field("token", &self.token)
            .field("expiration", &self.expiration)
            .field("usage_authentication", &self.usage_authentication)
            .field("usage_signing", &self.usage_signing)
            .field("extra_groups", &self.extra_groups)
            .field("description", &self.description)
            .finish()
    }
}

impl TokenSecretData {
    /// The data of a kubeflavor node token: usages authentication and signing (kubeadm join
    /// needs both), the ONE group [`NODE_GROUP`] and the ONE description, so nothing in it
    /// depends on the flavor (P1, hidden flavor).
    pub fn kubeflavor_node(token: BootstrapToken, expiration: Option<Timestamp>) -> Self {
        TokenSecretData {
            token,
            expiration,
            usage_authentication: true,
            usage_signing: true,
            extra_groups: vec![AuthGroup(NODE_GROUP.to_owned())],
            description: Some(KUBEFLAVOR_TOKEN_DESCRIPTION.to_owned()),
        }
    }

    /// The data of a control-plane join token: both usages (kubeadm join runs discovery
    /// with it) and the ONE group [`CONTROL_PLANE_GROUP`], which alone may read the
    /// control-plane certificate Secret.
    pub fn control_plane(token: BootstrapToken, expiration: Option<Timestamp>) -> Self {
        TokenSecretData {
            token,
            expiration,
            usage_authentication: true,
            usage_signing: true,
            extra_groups: vec![AuthGroup(CONTROL_PLANE_GROUP.to_owned())],
            description: Some(CONTROL_PLANE_TOKEN_DESCRIPTION.to_owned()),
        }
    }

    /// The data of the TTL-proxy token `kubeadm init phase upload-certs` makes: no usages
    /// and no groups, so it can never authenticate; it exists only so that tokencleaner
    /// deletes it at `expiration`, and garbage collection then the Secret it owns.
    pub fn ttl_proxy(token: BootstrapToken, expiration: Timestamp) -> Self {
        TokenSecretData {
            token,
            expiration: Some(expiration),
            usage_authentication: false,
            usage_signing: false,
            extra_groups: Vec::new(),
            description: Some(crate::crypto::copycerts::OWNER_TOKEN_DESCRIPTION.to_owned()),
        }
    }

    /// The Secret's string data (kubeadm's keys; values not yet base64-encoded). Holds the
    /// token secret: zeroize the map when done with it.
    pub fn to_string_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        data.insert(KEY_TOKEN_ID.into(), self.token.id().to_string());
        data.insert(
            KEY_TOKEN_SECRET.into(),
            self.token.secret().expose().to_owned(),
        );
        if let Some(at) = self.expiration {
            data.insert(KEY_EXPIRATION.into(), format_expiration(at));
        }
        if self.usage_authentication {
            data.insert(KEY_USAGE_AUTHENTICATION.into(), "true".into());
        }
        if self.usage_signing {
            data.insert(KEY_USAGE_SIGNING.into(), "true".into());
        }
        if !self.extra_groups.is_empty() {
            let groups: Vec<&str> = self.extra_groups.iter().map(AuthGroup::as_str).collect();
            data.insert(KEY_AUTH_EXTRA_GROUPS.into(), groups.join(","));
        }
        if let Some(d) = &self.description {
            data.insert(KEY_DESCRIPTION.into(), d.clone());
        }
        data
    }

    /// Reads kubeadm's layout strictly: every present field must be well-formed.
    pub fn from_string_data(data: &BTreeMap<String, String>) -> Result<Self, TokenSecretError> {
        let get = |k: &'static str| data.get(k).map(String::as_str);
        let id: TokenId = get(KEY_TOKEN_ID)
            .ok_or(TokenSecretError::MissingKey(KEY_TOKEN_ID))?
            .parse()
            .map_err(|problem| TokenSecretError::Token {
                key: KEY_TOKEN_ID,
                problem,
            })?;
        let secret = get(KEY_TOKEN_SECRET)
            .ok_or(TokenSecretError::MissingKey(KEY_TOKEN_SECRET))?
            .parse()
            .map_err(|problem| TokenSecretError::Token {
                key: KEY_TOKEN_SECRET,
                problem,
            })?;
        let expiration = match get(KEY_EXPIRATION) {
            None | Some("") => None,
            Some(s) => {
                Some(parse_rfc3339(s).ok_or_else(|| TokenSecretError::Expiration(s.to_owned()))?)
            }
        };
        let usage = |key: &'static str| match get(key) {
            None => Ok(false),
            Some("true") => Ok(true),
            Some(v) => Err(TokenSecretError::Usage {
                key,
                value: v.to_owned(),
            }),
        };
        let extra_groups = match get(KEY_AUTH_EXTRA_GROUPS) {
            None | Some("") => Vec::new(),
            Some(s) => s
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(TokenSecretError::Group)?,
        };
        Ok(TokenSecretData {
            token: BootstrapToken::new(id, secret),
            expiration,
            usage_authentication: usage(KEY_USAGE_AUTHENTICATION)?,
            usage_signing: usage(KEY_USAGE_SIGNING)?,
            extra_groups,
            description: get(KEY_DESCRIPTION).map(str::to_owned),
        })
    }
}

/// A whole token Secret as `token create` writes it. The string data holds the token
/// secret: `Debug` redacts it and dropping the object zeroizes every value.
pub struct TokenSecretObject {
    pub name: String,
    pub namespace: &'static str,
    pub type_: &'static str,
    pub string_data: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl TokenSecretObject {
    /// The token Secret holding `data`, with kubeflavor's metadata `meta` (the flavor, its
    /// uses and custody) when it is a flavored token. Every token Secret kubeflavor writes
    /// is built here.
    pub fn new(data: &TokenSecretData, meta: Option<&FlavorTokenMeta>) -> Self {
        TokenSecretObject {
            name: secret_name(data.token.id()),
            namespace: TOKEN_SECRET_NAMESPACE,
            type_: TOKEN_SECRET_TYPE,
            string_data: data.to_string_data(),
            labels: meta.map(FlavorTokenMeta::labels).unwrap_or_default(),
            annotations: meta.map(FlavorTokenMeta::annotations).unwrap_or_default(),
        }
    }

    /// This Secret as the API server would read it back (not being deleted).
    pub fn view(&self) -> SecretView<'_> {
        SecretView {
            namespace: self.namespace,
            name: &self.name,
            type_: self.type_,
            being_deleted: false,
            data: &self.string_data,
            labels: &self.labels,
            annotations: &self.annotations,
        }
    }
}

impl Drop for TokenSecretObject {
    fn drop(&mut self) {
        for v in self.string_data.values_mut() {
            v.zeroize();
        }
    }
}

impl fmt::Debug for TokenSecretObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let data: BTreeMap<&str, &str> = self
            .string_data
            .iter()
            .map(|(k, v)| {
                let shown = if k == KEY_TOKEN_SECRET {
                    "****"
                } else {
                    v.as_str()
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("TokenSecretObject")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("type_", &self.type_)
            .field("string_data", &data)
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .finish()
    }
}

/// The Secret of a new flavored token: kubeadm's layout with the ONE group and the ONE
/// description (P1, hidden flavor), and the flavor, max nodes, no bound names, no denials and the
/// custody as metadata (the custody never reaches the data: what a token holder's
/// authentication depends on is the same whoever the token was minted for).
pub fn flavored_token_secret(
    token: &BootstrapToken,
    flavor: &FlavorName,
    expiration: Option<Timestamp>,
    max_nodes: NonZeroU32,
    custody: &Custody,
) -> TokenSecretObject {
    let meta = FlavorTokenMeta::new(flavor.clone(), max_nodes).with_custody(custody.clone());
    let data = TokenSecretData::kubeflavor_node(token.clone(), expiration);
    TokenSecretObject::new(&data, Some(&meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token() -> BootstrapToken {
        "abcdef.0123456789abcdef".parse().unwrap()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn kubeflavor_token_data_matches_kubeadms_layout() {
        let data = TokenSecretData::kubeflavor_node(token(), Some(ts("2026-12-01T04:11:50.999Z")))
            .to_string_data();
        let expected: BTreeMap<String, String> = [
            ("auth-extra-groups", "system:bootstrappers:kubeflavor:node"),
            ("description", "kubeflavor node bootstrap token"),
            ("expiration", "2026-12-01T04:11:50Z"),
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
            ("usage-bootstrap-signing", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(data, expected);
    }

    #[test]
    fn reads_a_kubeadm_secret_as_stored() {
        // The decoded data of a Secret `kubeadm token create` made (its secret replaced:
        // any valid one will do).
        let data: BTreeMap<String, String> = [
            (
                "auth-extra-groups",
                "system:bootstrappers:kubeadm:default-node-token",
            ),
            ("description", "any free text"),
            ("expiration", "2026-12-01T04:11:50Z"),
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
            ("usage-bootstrap-signing", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let parsed = TokenSecretData::from_string_data(&data).unwrap();
        assert_eq!(parsed.token.id().as_str(), "abcdef");
        assert_eq!(parsed.expiration, Some(ts("2026-12-01T04:11:50Z")));
        assert!(parsed.usage_authentication && parsed.usage_signing);
        assert_eq!(
            parsed.extra_groups,
            vec![
                "system:bootstrappers:kubeadm:default-node-token"
                    .parse::<AuthGroup>()
                    .unwrap()
            ]
        );
        assert_eq!(parsed.to_string_data(), data);
    }

    #[test]
    fn data_errors_name_the_field() {
        let mut data = TokenSecretData::kubeflavor_node(token(), None).to_string_data();
        data.insert(KEY_USAGE_SIGNING.into(), "yes".into());
        assert!(matches!(
            TokenSecretData::from_string_data(&data),
            Err(TokenSecretError::Usage {
                key: KEY_USAGE_SIGNING,
                ..
            })
        ));
        data.insert(KEY_USAGE_SIGNING.into(), "true".into());
        data.insert(KEY_EXPIRATION.into(), "2030-01-01 00:00:00".into());
        assert!(matches!(
            TokenSecretData::from_string_data(&data),
            Err(TokenSecretError::Expiration(_))
        ));
        data.remove(KEY_EXPIRATION);
        data.insert(
            KEY_AUTH_EXTRA_GROUPS.into(),
            "system:bootstrappers:ok,system:masters".into(),
        );
        assert!(matches!(
            TokenSecretData::from_string_data(&data),
            Err(TokenSecretError::Group(_))
        ));
        data.remove(KEY_AUTH_EXTRA_GROUPS);
        data.remove(KEY_TOKEN_SECRET);
        assert_eq!(
            TokenSecretData::from_string_data(&data),
            Err(TokenSecretError::MissingKey(KEY_TOKEN_SECRET))
        );
    }

    #[test]
    fn auth_group_follows_the_upstream_regex() {
        for ok in [
            NODE_GROUP,
            CONTROL_PLANE_GROUP,
            "system:bootstrappers:a",
            "system:bootstrappers:kubeadm:default-node-token",
        ] {
            assert!(ok.parse::<AuthGroup>().is_ok(), "{ok}");
        }
        let long_ok = format!("system:bootstrappers:{}", "a".repeat(256));
        assert!(long_ok.parse::<AuthGroup>().is_ok());
        let too_long = format!("system:bootstrappers:{}", "a".repeat(257));
        for bad in [
            "system:bootstrappers",
            "system:bootstrappers:",
            "system:bootstrappers:a-",
            "system:bootstrappers:a:",
            "system:bootstrappers:A",
            "system:masters",
            " system:bootstrappers:a",
            too_long.as_str(),
        ] {
            assert!(bad.parse::<AuthGroup>().is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339_parsing_matches_go() {
        assert_eq!(
            parse_rfc3339("2026-12-01T12:00:00Z"),
            Some(ts("2026-12-01T12:00:00Z"))
        );
        assert_eq!(
            parse_rfc3339("2026-12-01T13:00:00.5+01:00"),
            Some(ts("2026-12-01T12:00:00.5Z"))
        );
        for bad in [
            "2030-01-01 00:00:00",
            "2030-01-01T00:00:00",
            "2030-01-01t00:00:00Z",
            "2030-01-01T00:00:00z",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn token_secret_object_debug_redacts_the_secret() {
        let obj = flavored_token_secret(
            &token(),
            &"sweet".parse().unwrap(),
            None,
            NonZeroU32::MIN,
            &Custody::default(),
        );
        let debug = format!("{obj:?}");
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(debug.contains("****"));
        assert_eq!(obj.name, "bootstrap-token-abcdef");
        assert_eq!(obj.namespace, "kube-system");
        assert_eq!(obj.type_, "bootstrap.kubernetes.io/token");
        assert_eq!(obj.string_data[KEY_TOKEN_SECRET], "0123456789abcdef");
    }

    /// P1 (hidden flavor): the Secret fields a token's authentication depends on (usages, groups,
    /// description) are the same for every flavor; only the metadata differs.
    #[test]
    fn auth_fields_are_the_same_for_every_flavor() {
        let strip = |mut d: BTreeMap<String, String>| {
            d.remove(KEY_TOKEN_ID);
            d.remove(KEY_TOKEN_SECRET);
            d.remove(KEY_EXPIRATION);
            d.clone()
        };
        let exp = Some(ts("2026-12-01T00:00:00Z"));
        let sweet = flavored_token_secret(
            &token(),
            &"sweet".parse().unwrap(),
            exp,
            NonZeroU32::MIN,
            &Custody::default(),
        );
        let other: BootstrapToken = "zzzzzz.yyyyyyyyyyyyyyyy".parse().unwrap();
        let sour = flavored_token_secret(
            &other,
            &"sour".parse().unwrap(),
            None,
            NonZeroU32::new(9).unwrap(),
            &Custody {
                issued_to: Some("acme-corp/alice".parse().unwrap()),
                issued_by: Some("kubernetes-admin".into()),
                requested_by: None,
                identity: None,
            },
        );
        assert_eq!(
            strip(sweet.string_data.clone()),
            strip(sour.string_data.clone())
        );
        assert!(!sweet.string_data.values().any(|v| v.contains("sweet")));
        // The custody is metadata only, like the flavor.
        assert!(
            !sour
                .string_data
                .values()
                .any(|v| v.contains("acme") || v.contains("admin"))
        );
        assert_eq!(sour.annotations[ISSUED_TO_ANNOTATION], "acme-corp/alice");
        assert!(!KUBEFLAVOR_TOKEN_DESCRIPTION.contains("sweet"));
    }

    /// P1 (hidden flavor): input labels are metadata only: a token minted with them has
    /// the same data, apart from its own id, secret and expiry, as one minted without.
    #[test]
    fn input_labels_never_reach_the_data() {
        use crate::flavor::input_labels::{INPUT_LABELS_ANNOTATION, InputLabels};
        let labels =
            InputLabels::from_map(&[("site".to_string(), "berlin-7".to_string())].into()).unwrap();
        let exp = Some(ts("2026-12-01T00:00:00Z"));
        let data = TokenSecretData::kubeflavor_node(token(), exp);
        let meta = FlavorTokenMeta::new("sweet".parse().unwrap(), NonZeroU32::MIN);
        let plain = TokenSecretObject::new(&data, Some(&meta));
        let labelled =
            TokenSecretObject::new(&data, Some(&meta.clone().with_input_labels(labels.clone())));
        assert_eq!(plain.string_data, labelled.string_data);
        assert!(!labelled.string_data.values().any(|v| v.contains("berlin")));
        assert_eq!(
            labelled.annotations[INPUT_LABELS_ANNOTATION],
            labels.to_annotation()
        );
        assert!(!plain.annotations.contains_key(INPUT_LABELS_ANNOTATION));
        let read = FlavorTokenMeta::from_metadata(&labelled.labels, &labelled.annotations);
        assert_eq!(read.unwrap().unwrap().input_labels, labels);
    }

    proptest! {
        #[test]
        fn data_round_trips(
            s in "[a-z0-9]{6}\\.[a-z0-9]{16}",
            secs in proptest::option::of(0i64..4_000_000_000),
            auth: bool,
            signing: bool,
            groups in proptest::collection::vec("system:bootstrappers:[a-z0-9:-]{0,20}[a-z0-9]", 0..4),
            description in proptest::option::of("[ -~]{0,40}"),
        ) {
            let d = TokenSecretData {
                token: s.parse().unwrap(),
                expiration: secs.map(|s| Timestamp::from_second(s).unwrap()),
                usage_authentication: auth,
                usage_signing: signing,
                extra_groups: groups.iter().map(|g| g.parse().unwrap()).collect(),
                description,
            };
            let back = TokenSecretData::from_string_data(&d.to_string_data()).unwrap();
            prop_assert_eq!(back, d);
        }

    }
}
