//! kubeflavor's own fields on a token Secret: the flavor (a label) and max nodes, bound
//! node names, denials and the token's custody (annotations). Secret data keys cannot hold `/`, and the data is
//! kubeadm's; a bootstrap identity cannot read the Secret at all (RBAC gives it no `get` on
//! token Secrets, the API server answers 403), so the flavor is safe here (P1, hidden
//! flavor).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use crate::flavor::input_labels::{
    INPUT_LABELS_ANNOTATION, InputLabels, InputLabelsAnnotationError,
};
use crate::flavor::{FlavorName, FlavorNameError};
use crate::names::{NodeName, NodeNameError};

/// Secret label holding the token's flavor.
pub const FLAVOR_TOKEN_LABEL: &str = "kubeflavor.io/flavor";
/// Secret annotation: how many distinct node names the token may bind.
pub const MAX_NODES_ANNOTATION: &str = "kubeflavor.io/max-nodes";
/// Secret annotation: node names bound so far, sorted, comma-separated.
pub const BOUND_NODES_ANNOTATION: &str = "kubeflavor.io/bound-nodes";
/// Secret annotation: how many CSRs of this token were denied.
pub const DENIALS_ANNOTATION: &str = "kubeflavor.io/denials";
/// Secret annotation: on whose behalf the token was minted (an [`IssuedTo`]).
pub const ISSUED_TO_ANNOTATION: &str = "kubeflavor.io/issued-to";
/// Secret annotation: the Kubernetes user name of the identity that minted the token (that
/// created its Secret: the join-token API's own identity for the tokens it mints, which the
/// API server checks, see [`crate::admission::token_shape`]).
pub const ISSUED_BY_ANNOTATION: &str = "kubeflavor.io/issued-by";
/// Secret annotation: the caller the join-token API minted the token for, as its
/// TokenReview named them. The API's word, not the API server's: `issued-by` says who
/// vouches for it.
pub const REQUESTED_BY_ANNOTATION: &str = "kubeflavor.io/requested-by";
/// Secret annotation: an admin minted this token beyond its Flavor's `tokenLimits` on
/// purpose (`token create --override-flavor-limits`); the value says who and when. Without
/// it the controller denies the CSRs of a token that breaks its Flavor's limits; the
/// join-token API's identity cannot write it (the serve policy refuses it).
pub const LIMITS_OVERRIDE_ANNOTATION: &str = "kubeflavor.io/limits-override";
/// Secret annotation: the issuer (`iss`) of the verified ID token of the node administrator
/// the join-token API minted the token for. Written by the API from the token it verified,
/// never from a request body.
pub const IDENTITY_ISSUER_ANNOTATION: &str = "kubeflavor.io/identity-issuer";
/// Secret annotation: the subject (`sub`) of that ID token: unique within its issuer only.
pub const IDENTITY_SUBJECT_ANNOTATION: &str = "kubeflavor.io/identity-subject";
/// Secret and FlavorBinding label: [`crate::mint::roster::identity_key`] of the identity, so
/// an identity's tokens and nodes are counted with a label selector.
pub const IDENTITY_LABEL: &str = "kubeflavor.io/identity";

/// The longest [`IssuedTo`], in characters.
pub const ISSUED_TO_MAX_CHARS: usize = 256;

/// On whose behalf a token was minted, as free text (e.g. `acme-corp/alice`): 1 to
/// [`ISSUED_TO_MAX_CHARS`] characters, no control characters, no character that is
/// invisible or changes how the text is shown ([`crate::invisible`]: a U+202E override
/// would make `node list` show another name than the one stored), no whitespace at either
/// end (kept exactly as given, never trimmed, so what is shown is what was written).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IssuedTo(String);

/// Which rule an issued-to value breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuedToError {
    #[error(
        "issued-to is empty; it must be 1 to {ISSUED_TO_MAX_CHARS} characters (e.g. acme-corp/alice)"
    )]
    Empty,
    #[error(
        "issued-to is {chars} characters long; it must be at most {ISSUED_TO_MAX_CHARS} characters (shorten it)"
    )]
    TooLong { chars: usize },
    #[error(
        "issued-to {value:?} holds a control character; it must be printable text (remove tabs, newlines and other control characters)"
    )]
    ControlCharacter { value: String },
    #[error(
        "issued-to {value:?} holds U+{code_point:04X}, a character that is invisible or changes how the text around it is shown (text-direction controls, zero-width and other format characters, line separators); it must be visible text (remove it)"
    )]
    InvisibleCharacter { value: String, code_point: u32 },
    #[error(
        "issued-to {value:?} starts or ends with whitespace; it must not (remove the surrounding spaces)"
    )]
    SurroundingWhitespace { value: String },
}

impl IssuedTo {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IssuedTo {
    type Err = IssuedToError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(IssuedToError::Empty);
        }
        let chars = s.chars().count();
        if chars > ISSUED_TO_MAX_CHARS {
            return Err(IssuedToError::TooLong { chars });
        }
        if s.chars().any(char::is_control) {
            return Err(IssuedToError::ControlCharacter {
                value: s.to_owned(),
            });
        }
        if let Some(c) = s.chars().find(|&c| crate::invisible::is_invisible(c)) {
            return Err(IssuedToError::InvisibleCharacter {
                value: s.to_owned(),
                code_point: u32::from(c),
            });
        }
        if s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
            return Err(IssuedToError::SurroundingWhitespace {
                value: s.to_owned(),
            });
        }
        Ok(IssuedTo(s.to_owned()))
    }
}

impl fmt::Display for IssuedTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The chain of custody of a token: on whose behalf it was minted and who minted it. Both
/// are optional (tokens minted before custody was recorded have neither). It lives only in
/// the token Secret's annotations and in the FlavorBindings made with the token, both read
/// by admins alone, never by a token holder (P1, hidden flavor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Custody {
    pub issued_to: Option<IssuedTo>,
    /// The minter's Kubernetes user name (e.g. `kubernetes-admin` or
    /// `system:serviceaccount:portal:minter`); never empty.
    pub issued_by: Option<String>,
    /// Who asked the join-token API for the token (its caller), when the API minted it;
    /// never empty.
    pub requested_by: Option<String>,
    /// The node administrator whose verified ID token the API minted the token for (boxed:
    /// the policy's facts hold a token record by value).
    pub identity: Option<Box<CustodyIdentity>>,
}

/// A node administrator as their identity provider's verified ID token named them: the
/// issuer and the subject together (a subject alone is unique within its issuer only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustodyIdentity {
    pub issuer: String,
    pub subject: String,
}

impl CustodyIdentity {
    /// The label value naming this identity ([`IDENTITY_LABEL`]).
    pub fn key(&self) -> String {
        identity_key(&self.issuer, &self.subject)
    }
}

/// A label-safe name of an identity: 40 hex digits of SHA-256 over the issuer and the
/// subject, each prefixed by its length, so that no two (issuer, subject) pairs share the
/// text hashed (("a", "bc") and ("ab", "c") differ). Token Secrets and bindings carry it
/// ([`IDENTITY_LABEL`]), so the join-token API counts an identity's tokens and nodes with a
/// label selector.
pub fn identity_key(issuer: &str, subject: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [issuer, subject] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hex::encode(&hash.finalize()[..20])
}

impl Custody {
    /// Reads the custody annotations: a missing or empty issued-by is none; an issued-to
    /// that breaks the [`IssuedTo`] rules is an error.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, TokenMetaError> {
        let issued_to = annotations
            .get(ISSUED_TO_ANNOTATION)
            .map(|v| v.parse().map_err(TokenMetaError::IssuedTo))
            .transpose()?;
        let named = |key: &str| annotations.get(key).filter(|v| !v.is_empty()).cloned();
        let identity = match (
            named(IDENTITY_ISSUER_ANNOTATION),
            named(IDENTITY_SUBJECT_ANNOTATION),
        ) {
            (Some(issuer), Some(subject)) => Some(Box::new(CustodyIdentity { issuer, subject })),
            _ => None,
        };
        Ok(Custody {
            issued_to,
            issued_by: named(ISSUED_BY_ANNOTATION),
            requested_by: named(REQUESTED_BY_ANNOTATION),
            identity,
        })
    }

    /// The custody annotations; a part that is not known is left out.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::new();
        if let Some(to) = &self.issued_to {
            annotations.insert(ISSUED_TO_ANNOTATION.to_owned(), to.to_string());
        }
        if let Some(by) = self.issued_by.as_ref().filter(|b| !b.is_empty()) {
            annotations.insert(ISSUED_BY_ANNOTATION.to_owned(), by.clone());
        }
        if let Some(by) = self.requested_by.as_ref().filter(|b| !b.is_empty()) {
            annotations.insert(REQUESTED_BY_ANNOTATION.to_owned(), by.clone());
        }
        if let Some(identity) = &self.identity {
            annotations.insert(
                IDENTITY_ISSUER_ANNOTATION.to_owned(),
                identity.issuer.clone(),
            );
            annotations.insert(
                IDENTITY_SUBJECT_ANNOTATION.to_owned(),
                identity.subject.clone(),
            );
        }
        annotations
    }
}

/// kubeflavor's fields of a flavored token Secret (its labels and annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlavorTokenMeta {
    pub flavor: FlavorName,
    pub max_nodes: NonZeroU32,
    /// Distinct node names bound to this token so far (P3, binding: at most `max_nodes`).
    pub bound_nodes: BTreeSet<NodeName>,
    /// CSRs of this token denied so far (P4, rejection that ends: the count decides when
    /// the token is deleted).
    pub denials: u32,
    /// On whose behalf the token was minted, and by whom.
    pub custody: Custody,
    /// What the node's administrator said through the portal (allowed by the flavor when
    /// minted; the controller checks again before it binds).
    pub input_labels: InputLabels,
    /// The admin's override of the Flavor's `tokenLimits` ([`LIMITS_OVERRIDE_ANNOTATION`]:
    /// who and when); `None` when the token must keep to them. (A boxed str: the policy's
    /// facts hold a token record by value.)
    pub limits_override: Option<Box<str>>,
}

/// Why kubeflavor's metadata on a token Secret cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenMetaError {
    #[error("label {FLAVOR_TOKEN_LABEL}: {0}")]
    Flavor(FlavorNameError),
    #[error(
        "annotation {MAX_NODES_ANNOTATION} is {0:?}; it must be a whole number of at least 1 (fix or remove it)"
    )]
    MaxNodes(String),
    #[error("annotation {BOUND_NODES_ANNOTATION} holds an invalid node name: {0}")]
    BoundNodes(NodeNameError),
    #[error(
        "annotation {DENIALS_ANNOTATION} is {0:?}; it must be a whole number (fix or remove it)"
    )]
    Denials(String),
    #[error("annotation {ISSUED_TO_ANNOTATION}: {0} (fix or remove it)")]
    IssuedTo(IssuedToError),
    #[error("{0}")]
    InputLabels(InputLabelsAnnotationError),
}

impl FlavorTokenMeta {
    pub fn new(flavor: FlavorName, max_nodes: NonZeroU32) -> Self {
        FlavorTokenMeta {
            flavor,
            max_nodes,
            bound_nodes: BTreeSet::new(),
            denials: 0,
            custody: Custody::default(),
            input_labels: InputLabels::default(),
            limits_override: None,
        }
    }

    /// The same metadata with `custody`.
    pub fn with_custody(mut self, custody: Custody) -> Self {
        self.custody = custody;
        self
    }

    /// The same metadata with the admin's override of the Flavor's limits (`by`: who, when).
    pub fn with_limits_override(mut self, by: impl Into<String>) -> Self {
        self.limits_override = Some(by.into().into_boxed_str());
        self
    }

    /// The same metadata with `input_labels`.
    pub fn with_input_labels(mut self, input_labels: InputLabels) -> Self {
        self.input_labels = input_labels;
        self
    }

    /// Reads kubeflavor's metadata; `Ok(None)` for a token without the flavor label (a
    /// plain kubeadm token). A missing max-nodes annotation means
    /// [`crate::flavor::token_limits::DEFAULT_MAX_NODES`], missing bound-nodes none, missing denials 0,
    /// missing custody annotations an unknown custody.
    pub fn from_metadata(
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, TokenMetaError> {
        let Some(flavor) = labels.get(FLAVOR_TOKEN_LABEL) else {
            return Ok(None);
        };
        let flavor: FlavorName = flavor.parse().map_err(TokenMetaError::Flavor)?;
        let max_nodes = match annotations.get(MAX_NODES_ANNOTATION) {
            None => crate::flavor::token_limits::DEFAULT_MAX_NODES,
            Some(v) => v
                .parse::<NonZeroU32>()
                .map_err(|_| TokenMetaError::MaxNodes(v.clone()))?,
        };
        let bound_nodes = match annotations.get(BOUND_NODES_ANNOTATION) {
            None => BTreeSet::new(),
            Some(v) if v.is_empty() => BTreeSet::new(),
            Some(v) => v
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(TokenMetaError::BoundNodes)?,
        };
        let denials = match annotations.get(DENIALS_ANNOTATION) {
            None => 0,
            Some(v) => v.parse().map_err(|_| TokenMetaError::Denials(v.clone()))?,
        };
        let custody = Custody::from_annotations(annotations)?;
        let input_labels = match annotations.get(INPUT_LABELS_ANNOTATION) {
            None => InputLabels::default(),
            Some(v) => InputLabels::from_annotation(v).map_err(TokenMetaError::InputLabels)?,
        };
        Ok(Some(FlavorTokenMeta {
            flavor,
            max_nodes,
            bound_nodes,
            denials,
            custody,
            input_labels,
            limits_override: annotations
                .get(LIMITS_OVERRIDE_ANNOTATION)
                .map(|v| v.as_str().into()),
        }))
    }

    /// The Secret labels kubeflavor owns.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> =
            [(FLAVOR_TOKEN_LABEL.to_owned(), self.flavor.to_string())].into();
        if let Some(identity) = &self.custody.identity {
            labels.insert(IDENTITY_LABEL.to_owned(), identity.key());
        }
        labels
    }

    /// The Secret annotations kubeflavor owns (bound nodes sorted, comma-separated; the
    /// custody annotations when known).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let bound: Vec<&str> = self.bound_nodes.iter().map(NodeName::as_str).collect();
        let mut annotations: BTreeMap<String, String> = [
            (MAX_NODES_ANNOTATION.to_owned(), self.max_nodes.to_string()),
            (BOUND_NODES_ANNOTATION.to_owned(), bound.join(",")),
            (DENIALS_ANNOTATION.to_owned(), self.denials.to_string()),
        ]
        .into();
        annotations.extend(self.custody.annotations());
        if !self.input_labels.is_empty() {
            annotations.insert(
                INPUT_LABELS_ANNOTATION.to_owned(),
                self.input_labels.to_annotation(),
            );
        }
        if let Some(by) = &self.limits_override {
            annotations.insert(LIMITS_OVERRIDE_ANNOTATION.to_owned(), by.to_string());
        }
        annotations
    }

    /// Whether another distinct node name may still bind to this token.
    pub fn has_room(&self) -> bool {
        u32::try_from(self.bound_nodes.len()).is_ok_and(|n| n < self.max_nodes.get())
    }

    /// The metadata after reserving a use for `node` (no change when already bound).
    pub fn with_bound_node(&self, node: &NodeName) -> Self {
        let mut next = self.clone();
        next.bound_nodes.insert(node.clone());
        next
    }

    /// The metadata after one more denial.
    pub fn with_denial(&self) -> Self {
        let mut next = self.clone();
        next.denials = next.denials.saturating_add(1);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invisible::FORMAT_CHARACTERS;
    use proptest::prelude::*;

    #[test]
    fn flavor_metadata_round_trips() {
        let mut meta = FlavorTokenMeta::new("sweet".parse().unwrap(), NonZeroU32::new(3).unwrap());
        meta = meta
            .with_bound_node(&"worker-2".parse().unwrap())
            .with_bound_node(&"worker-1".parse().unwrap())
            .with_bound_node(&"worker-2".parse().unwrap())
            .with_denial();
        let annotations = meta.annotations();
        assert_eq!(annotations[BOUND_NODES_ANNOTATION], "worker-1,worker-2");
        assert_eq!(annotations[MAX_NODES_ANNOTATION], "3");
        assert_eq!(annotations[DENIALS_ANNOTATION], "1");
        assert_eq!(
            FlavorTokenMeta::from_metadata(&meta.labels(), &annotations),
            Ok(Some(meta.clone()))
        );
        assert!(meta.has_room());
    }

    #[test]
    fn plain_kubeadm_tokens_have_no_flavor_metadata() {
        assert_eq!(
            FlavorTokenMeta::from_metadata(&BTreeMap::new(), &BTreeMap::new()),
            Ok(None)
        );
    }

    #[test]
    fn malformed_metadata_is_reported() {
        let labels: BTreeMap<String, String> = [(FLAVOR_TOKEN_LABEL.into(), "sweet".into())].into();
        let ann = |k: &str, v: &str| -> BTreeMap<String, String> { [(k.into(), v.into())].into() };
        let defaults = FlavorTokenMeta::from_metadata(&labels, &BTreeMap::new())
            .unwrap()
            .unwrap();
        assert_eq!(defaults.max_nodes.get(), 1);
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(MAX_NODES_ANNOTATION, "0")),
            Err(TokenMetaError::MaxNodes(_))
        ));
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(BOUND_NODES_ANNOTATION, "a,,b")),
            Err(TokenMetaError::BoundNodes(_))
        ));
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(DENIALS_ANNOTATION, "-1")),
            Err(TokenMetaError::Denials(_))
        ));
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &ann(ISSUED_TO_ANNOTATION, " alice")),
            Err(TokenMetaError::IssuedTo(
                IssuedToError::SurroundingWhitespace { .. }
            ))
        ));
        let bad_flavor: BTreeMap<String, String> =
            [(FLAVOR_TOKEN_LABEL.into(), "Sweet".into())].into();
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&bad_flavor, &BTreeMap::new()),
            Err(TokenMetaError::Flavor(_))
        ));
    }

    #[test]
    fn issued_to_rules_are_named() {
        for ok in [
            "acme-corp/alice",
            "a",
            "Ünïcode team · 東京",
            "with inner  spaces",
        ] {
            assert_eq!(ok.parse::<IssuedTo>().unwrap().as_str(), ok);
        }
        let max = "x".repeat(ISSUED_TO_MAX_CHARS);
        assert!(max.parse::<IssuedTo>().is_ok());
        // Characters, not bytes: 256 two-byte characters fit.
        assert!("é".repeat(ISSUED_TO_MAX_CHARS).parse::<IssuedTo>().is_ok());
        assert_eq!("".parse::<IssuedTo>(), Err(IssuedToError::Empty));
        assert_eq!(
            format!("{max}x").parse::<IssuedTo>(),
            Err(IssuedToError::TooLong { chars: 257 })
        );
        for control in ["a\nb", "tab\there", "bell\u{7}", "c1\u{85}x"] {
            assert!(
                matches!(
                    control.parse::<IssuedTo>(),
                    Err(IssuedToError::ControlCharacter { .. })
                ),
                "{control:?}"
            );
        }
        for padded in [" alice", "alice ", "\u{a0}alice", "alice\u{3000}"] {
            assert!(
                matches!(
                    padded.parse::<IssuedTo>(),
                    Err(IssuedToError::SurroundingWhitespace { .. })
                ),
                "{padded:?}"
            );
        }
        let message = " alice".parse::<IssuedTo>().unwrap_err().to_string();
        assert!(message.contains("whitespace"), "{message}");
        let message = "".parse::<IssuedTo>().unwrap_err().to_string();
        assert!(message.contains("1 to 256 characters"), "{message}");
    }

    /// Text that shows one name and stores another is refused: bidi overrides and isolates,
    /// zero-width and other format characters (general category Cf), line and paragraph
    /// separators, and invisible fillers, wherever they stand.
    #[test]
    fn issued_to_refuses_text_that_displays_other_than_it_reads() {
        for (value, code_point) in [
            ("acme\u{202e}ecila", 0x202e),
            ("\u{202a}alice", 0x202a),
            ("al\u{2066}ice\u{2069}", 0x2066),
            ("al\u{200e}ice", 0x200e),
            ("al\u{200f}ice", 0x200f),
            ("al\u{61c}ice", 0x061c),
            ("al\u{200b}ice", 0x200b),
            ("al\u{200d}ice", 0x200d),
            ("al\u{feff}ice", 0xfeff),
            ("al\u{ad}ice", 0x00ad),
            ("al\u{2060}ice", 0x2060),
            ("al\u{e0041}ice", 0xe0041),
            ("al\u{2028}ice", 0x2028),
            ("al\u{2029}ice", 0x2029),
            ("al\u{3164}ice", 0x3164),
        ] {
            assert_eq!(
                value.parse::<IssuedTo>(),
                Err(IssuedToError::InvisibleCharacter {
                    value: value.to_owned(),
                    code_point,
                }),
                "{value:?}"
            );
        }
        let message = "a\u{202e}b".parse::<IssuedTo>().unwrap_err().to_string();
        assert!(message.contains("U+202E"), "{message}");
        // The value is shown escaped in the error, so the error cannot lie either.
        assert!(!message.contains('\u{202e}'), "{message}");
        // Visible text of any script stays accepted, inner spaces too.
        for ok in [
            "\u{5d0}\u{5d1} team",
            "\u{627}\u{644}\u{639}\u{631}\u{628}\u{64a}\u{629}",
            "a\u{3000}b",
            "\u{1f600} ok",
        ] {
            assert!(ok.parse::<IssuedTo>().is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn custody_annotations_with_invisible_characters_are_refused() {
        let labels: BTreeMap<String, String> = [(FLAVOR_TOKEN_LABEL.into(), "sweet".into())].into();
        let annotations: BTreeMap<String, String> =
            [(ISSUED_TO_ANNOTATION.into(), "eve\u{202e}ecila".into())].into();
        assert!(matches!(
            FlavorTokenMeta::from_metadata(&labels, &annotations),
            Err(TokenMetaError::IssuedTo(
                IssuedToError::InvisibleCharacter {
                    code_point: 0x202e,
                    ..
                }
            ))
        ));
    }

    proptest! {
        /// Every code point of general category Cf is refused, alone or inside a name.
        #[test]
        fn every_format_character_is_refused(i in 0..FORMAT_CHARACTERS.len(), offset in 0u32..0x60) {
            let (first, last) = FORMAT_CHARACTERS[i];
            let cp = first + offset % (last - first + 1);
            let c = char::from_u32(cp).expect("a scalar value");
            let value = format!("acme{c}alice");
            prop_assert!(
                matches!(
                    value.parse::<IssuedTo>(),
                    Err(IssuedToError::InvisibleCharacter { code_point, .. }) if code_point == cp
                ),
                "U+{:04X}", cp
            );
        }
    }

    #[test]
    fn custody_is_optional_and_round_trips() {
        let labels: BTreeMap<String, String> = [(FLAVOR_TOKEN_LABEL.into(), "sweet".into())].into();
        let none = FlavorTokenMeta::from_metadata(&labels, &BTreeMap::new())
            .unwrap()
            .unwrap();
        assert_eq!(none.custody, Custody::default());
        assert!(!none.annotations().contains_key(ISSUED_TO_ANNOTATION));
        assert!(!none.annotations().contains_key(ISSUED_BY_ANNOTATION));
        let custody = Custody {
            issued_to: Some("acme-corp/alice".parse().unwrap()),
            issued_by: Some("system:serviceaccount:portal:minter".into()),
            requested_by: Some("system:serviceaccount:portal:portal".into()),
            identity: None,
        };
        let meta = FlavorTokenMeta::new("sweet".parse().unwrap(), NonZeroU32::MIN)
            .with_custody(custody.clone());
        let annotations = meta.annotations();
        assert_eq!(annotations[ISSUED_TO_ANNOTATION], "acme-corp/alice");
        assert_eq!(
            annotations[ISSUED_BY_ANNOTATION],
            "system:serviceaccount:portal:minter"
        );
        let back = FlavorTokenMeta::from_metadata(&meta.labels(), &annotations)
            .unwrap()
            .unwrap();
        assert_eq!(back.custody, custody);
        // A reservation or a denial keeps the custody.
        let later = back.with_bound_node(&"n".parse().unwrap()).with_denial();
        assert_eq!(later.custody, custody);
    }

    proptest! {
        #[test]
        fn bound_nodes_annotation_is_sorted_and_parses_back(
            names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}[a-z0-9]", 0..8)
        ) {
            let mut meta = FlavorTokenMeta::new("f".parse().unwrap(), NonZeroU32::MIN);
            for n in names.iter().rev() {
                meta = meta.with_bound_node(&n.parse().unwrap());
            }
            let value = meta.annotations()[BOUND_NODES_ANNOTATION].clone();
            let sorted: Vec<&str> = names.iter().map(String::as_str).collect();
            prop_assert_eq!(value, sorted.join(","));
            let back = FlavorTokenMeta::from_metadata(&meta.labels(), &meta.annotations()).unwrap();
            prop_assert_eq!(back, Some(meta));
        }
    }
}
