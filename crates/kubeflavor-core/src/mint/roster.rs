//! The roster: which flavor of join token a node administrator gets, decided from who their
//! identity provider says they are, by a list the owner keeps in the cluster and the
//! administrator never sees.
//!
//! The identity is what a verified OpenID Connect ID token says (issuer, subject, e-mail and
//! whether the provider verified it, groups). The rules are read in order and the first
//! that matches decides: a flavor, or no token. No rule matching is no token too: a roster
//! grants nothing it does not name.
//!
//! An identity is the pair (issuer, subject), never the subject alone: two providers may
//! hand out the same subject to two different people, so every rule names its issuer and
//! [`identity_key`] hashes both, unambiguously.

use std::fmt;
use std::num::NonZeroU32;

use std::collections::{BTreeMap, BTreeSet};

use crate::flavor::input_labels::InputLabelRules;
use crate::flavor::token_limits::DEFAULT_MAX_NODES;
use crate::flavor::{DEFAULT_TOKEN_TTL, FlavorName, FlavorRules, TokenTtl};
use crate::mint::request::{FieldProblem, Grant, label_problems};
pub use crate::token::meta::identity_key;

/// The longest rule name, in characters (a rule name is a label value on the tokens it
/// granted).
pub const RULE_NAME_MAX_CHARS: usize = 63;

/// What a verified ID token says about its holder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `iss`, exactly as the provider wrote it (OpenID Connect compares issuers as strings).
    pub issuer: String,
    /// `sub`: unique within its issuer only.
    pub subject: String,
    pub email: Option<String>,
    /// `email_verified`: only a verified e-mail matches an e-mail rule.
    pub email_verified: bool,
    /// The provider's group claim.
    pub groups: Vec<String>,
    /// `name`, for people reading the custody record; never matched.
    pub name: Option<String>,
}

/// What a rule requires of an identity: its issuer, and every other condition it states.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    pub issuer: String,
    pub subject: Option<String>,
    /// A whole address: the part before `@` exactly, the domain in any ASCII case.
    pub email: Option<String>,
    /// The domain after the last `@`, in any ASCII case; `acme.example` matches neither
    /// `evil-acme.example` nor `sub.acme.example`.
    pub email_domain: Option<String>,
    pub group: Option<String>,
}

/// What a matching rule gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Flavor(FlavorName),
    /// An explicit refusal: the identity gets no token, whatever rules come after.
    NoToken,
}

/// How much one identity may hold at once under a rule; `None`: no limit of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdentityLimits {
    /// Join tokens minted for the identity that have not expired or been used up.
    pub live_tokens: Option<NonZeroU32>,
    /// Nodes bound to tokens minted for the identity.
    pub bound_nodes: Option<NonZeroU32>,
}

/// One rule of the roster, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub matcher: Match,
    pub outcome: Outcome,
    pub limits: IdentityLimits,
}

/// Why a rule cannot be used. Each names the rule and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error(
        "rule name {0:?} is not valid: it must be 1 to {RULE_NAME_MAX_CHARS} characters of lowercase letters, digits and '-', starting and ending with a letter or digit (e.g. acme-admins)"
    )]
    Name(String),
    #[error(
        "rule {rule}: issuer {issuer:?} is not an https URL; name the provider's issuer exactly as its ID tokens' `iss` claim (e.g. https://login.acme.example)"
    )]
    Issuer { rule: String, issuer: String },
    #[error(
        "rule {rule} matches every identity of its issuer; add a subject, email, emailDomain or group condition"
    )]
    Unconditional { rule: String },
    #[error(
        "rule {rule}: email {email:?} is not an address; write one address such as alice@acme.example"
    )]
    Email { rule: String, email: String },
    #[error(
        "rule {rule}: emailDomain {domain:?} is not a domain; write the part after '@' alone, such as acme.example"
    )]
    EmailDomain { rule: String, domain: String },
    #[error("rule {rule}: {field} is empty; remove it or give it a value")]
    Empty { rule: String, field: &'static str },
    #[error("two rules are named {0:?}; give each rule its own name")]
    Duplicate(String),
}

fn valid_rule_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= RULE_NAME_MAX_CHARS
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn valid_domain(domain: &str) -> bool {
    !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl Rule {
    /// A rule from its parts, checked: a name usable as a label value, an https issuer, at
    /// least one condition besides the issuer, well-formed e-mail conditions.
    pub fn new(
        name: &str,
        matcher: Match,
        outcome: Outcome,
        limits: IdentityLimits,
    ) -> Result<Rule, RuleError> {
        if !valid_rule_name(name) {
            return Err(RuleError::Name(name.to_string()));
        }
        let rule = || name.to_string();
        let https = matcher
            .issuer
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
        if !https || matcher.issuer.chars().any(|c| c.is_whitespace()) {
            return Err(RuleError::Issuer {
                rule: rule(),
                issuer: matcher.issuer.clone(),
            });
        }
        for (field, value) in [
            ("subject", &matcher.subject),
            ("email", &matcher.email),
            ("emailDomain", &matcher.email_domain),
            ("group", &matcher.group),
        ] {
            if value.as_deref() == Some("") {
                return Err(RuleError::Empty {
                    rule: rule(),
                    field,
                });
            }
        }
        if matcher.subject.is_none()
            && matcher.email.is_none()
            && matcher.email_domain.is_none()
            && matcher.group.is_none()
        {
            return Err(RuleError::Unconditional { rule: rule() });
        }
        if let Some(email) = &matcher.email {
            let ok = email.matches('@').count() == 1
                && email
                    .split_once('@')
                    .is_some_and(|(local, domain)| !local.is_empty() && valid_domain(domain));
            if !ok {
                return Err(RuleError::Email {
                    rule: rule(),
                    email: email.clone(),
                });
            }
        }
        if let Some(domain) = &matcher.email_domain
            && !valid_domain(domain)
        {
            return Err(RuleError::EmailDomain {
                rule: rule(),
                domain: domain.clone(),
            });
        }
        Ok(Rule {
            name: name.to_string(),
            matcher,
            outcome,
            limits,
        })
    }
}

/// Checks that no two rules share a name (a rule's name is how tokens and status refer to
/// it).
pub fn check_unique_names(rules: &[Rule]) -> Result<(), RuleError> {
    let mut seen = std::collections::BTreeSet::new();
    for rule in rules {
        if !seen.insert(rule.name.as_str()) {
            return Err(RuleError::Duplicate(rule.name.clone()));
        }
    }
    Ok(())
}

/// Why a rule does not match an identity: the first of its conditions that fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    Issuer,
    Subject,
    /// The rule matches on e-mail and the identity has none.
    NoEmail,
    /// The rule matches on e-mail and the provider did not verify the identity's.
    EmailNotVerified,
    Email,
    EmailDomain,
    Group,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mismatch::Issuer => "another issuer",
            Mismatch::Subject => "another subject",
            Mismatch::NoEmail => "the identity has no e-mail",
            Mismatch::EmailNotVerified => "the provider did not verify the e-mail",
            Mismatch::Email => "another e-mail",
            Mismatch::EmailDomain => "an e-mail of another domain",
            Mismatch::Group => "not in the group",
        })
    }
}

/// The domain of an address: what follows its last `@`.
fn domain_of(email: &str) -> Option<&str> {
    email.rsplit_once('@').map(|(_, domain)| domain)
}

/// Same address: the local part exactly (providers may treat it as case-sensitive), the
/// domain in any ASCII case.
fn same_address(a: &str, b: &str) -> bool {
    match (a.rsplit_once('@'), b.rsplit_once('@')) {
        (Some((la, da)), Some((lb, db))) => la == lb && da.eq_ignore_ascii_case(db),
        _ => false,
    }
}

impl Match {
    /// Whether `identity` meets every condition, or the first that it does not meet.
    pub fn check(&self, identity: &Identity) -> Result<(), Mismatch> {
        if identity.issuer != self.issuer {
            return Err(Mismatch::Issuer);
        }
        if let Some(subject) = &self.subject
            && identity.subject != *subject
        {
            return Err(Mismatch::Subject);
        }
        if self.email.is_some() || self.email_domain.is_some() {
            let Some(email) = &identity.email else {
                return Err(Mismatch::NoEmail);
            };
            if !identity.email_verified {
                return Err(Mismatch::EmailNotVerified);
            }
            if let Some(wanted) = &self.email
                && !same_address(email, wanted)
            {
                return Err(Mismatch::Email);
            }
            if let Some(domain) = &self.email_domain
                && !domain_of(email).is_some_and(|d| d.eq_ignore_ascii_case(domain))
            {
                return Err(Mismatch::EmailDomain);
            }
        }
        if let Some(group) = &self.group
            && !identity.groups.iter().any(|g| g == group)
        {
            return Err(Mismatch::Group);
        }
        Ok(())
    }
}

/// The rule that decides for `identity`: the first whose conditions all hold, with its
/// index; `None` when none does (no token).
pub fn decide<'a>(identity: &Identity, rules: &'a [Rule]) -> Option<(usize, &'a Rule)> {
    rules
        .iter()
        .enumerate()
        .find(|(_, rule)| rule.matcher.check(identity).is_ok())
}

/// The flavor `identity` gets: the deciding rule's, or none (no rule, or a `NoToken` rule).
pub fn flavor_for<'a>(identity: &Identity, rules: &'a [Rule]) -> Option<&'a FlavorName> {
    match decide(identity, rules) {
        Some((
            _,
            Rule {
                outcome: Outcome::Flavor(flavor),
                ..
            },
        )) => Some(flavor),
        _ => None,
    }
}

/// For an admin asking "which flavor would this identity get, and why": each rule up to
/// and including the deciding one, with why it did not match (`Err`) or that it did.
pub fn explain<'a>(
    identity: &Identity,
    rules: &'a [Rule],
) -> Vec<(&'a Rule, Result<(), Mismatch>)> {
    let mut steps = Vec::new();
    for rule in rules {
        let verdict = rule.matcher.check(identity);
        let matched = verdict.is_ok();
        steps.push((rule, verdict));
        if matched {
            break;
        }
    }
    steps
}

/// Which per-identity limit a new token would break.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityLimitError {
    #[error(
        "you already hold {held} join tokens that are still valid, the most you may hold at once; use one of them, or wait until one expires"
    )]
    LiveTokens { held: u32 },
    #[error(
        "you already have {nodes} nodes and {tokens} unused join tokens, which together may reach the most nodes you may have; use a token you hold, or ask the cluster's owner to release a node you no longer run"
    )]
    Nodes { nodes: u32, tokens: u32 },
}

/// Whether an identity holding `live_tokens` valid, unused tokens and `bound_nodes` nodes
/// may get one more token, which can bind `per_token` nodes, under `limits`. A node limit
/// counts what the tokens held can still bind, not only the nodes bound so far: else many
/// tokens minted before any joins would pass it together. The messages speak to the
/// administrator and name no flavor or rule.
pub fn within_identity_limits(
    limits: &IdentityLimits,
    live_tokens: u32,
    bound_nodes: u32,
    per_token: NonZeroU32,
) -> Result<(), IdentityLimitError> {
    if let Some(max) = limits.live_tokens
        && live_tokens >= max.get()
    {
        return Err(IdentityLimitError::LiveTokens { held: live_tokens });
    }
    if let Some(max) = limits.bound_nodes {
        let reach =
            u64::from(bound_nodes) + (u64::from(live_tokens) + 1) * u64::from(per_token.get());
        if reach > u64::from(max.get()) {
            return Err(IdentityLimitError::Nodes {
                nodes: bound_nodes,
                tokens: live_tokens,
            });
        }
    }
    Ok(())
}

/// The ledger prefix of a reservation: a token being minted, counted before its id exists.
pub const RESERVATION_PREFIX: &str = "pending-";

/// The entries of an administrator's ledger that still count as live tokens at `now`:
/// not expired, and not used up (`spent`: ids whose nodes reached the token's max nodes).
/// A reservation counts until it expires (it was given the token's own expiry), so a mint
/// that crashed after its reservation is counted, never forgotten.
pub fn live_tokens<'a, T>(
    entries: &'a [(String, T)],
    now: T,
    spent: &BTreeSet<String>,
) -> Vec<&'a (String, T)>
where
    T: PartialOrd + Copy,
{
    entries
        .iter()
        .filter(|(id, expires)| *expires > now && !spent.contains(id))
        .collect()
}

/// What every token the roster grants is minted with, whatever its flavor (the roster's
/// `tokenDefaults` and `inputLabels`): one TTL, one max nodes and one set of input-label
/// rules, so that neither an answer nor a refusal tells one flavor from another (P1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterTokens {
    pub ttl: TokenTtl,
    pub max_nodes: NonZeroU32,
    pub input_labels: InputLabelRules,
}

impl Default for RosterTokens {
    fn default() -> Self {
        RosterTokens {
            ttl: DEFAULT_TOKEN_TTL,
            max_nodes: DEFAULT_MAX_NODES,
            input_labels: InputLabelRules::default(),
        }
    }
}

/// Why a node administrator's request gets no token though a rule granted a flavor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantRefusal {
    /// Input labels the roster does not take: the same answer for every flavor.
    Labels(Vec<FieldProblem>),
    /// The granted Flavor does not allow what the roster mints (its token limits or input
    /// labels): the owner's configuration disagrees with itself. Answered exactly as "no
    /// token", so the refusal does not tell this flavor from another; the owner sees it in
    /// the log and the metrics.
    FlavorDisagrees,
}

/// The token a rule's flavor gets: the roster's TTL, max nodes and input labels, checked
/// first against the roster alone (a refusal then is the same for every flavor), then
/// against the Flavor's own limits and input labels, which the controller checks again.
pub fn grant_for(
    tokens: &RosterTokens,
    flavor: &FlavorRules,
    labels: &BTreeMap<String, String>,
) -> Result<Grant, GrantRefusal> {
    let input_labels = tokens
        .input_labels
        .admit(labels)
        .map_err(|refusal| GrantRefusal::Labels(label_problems(refusal)))?;
    let within_flavor = flavor
        .effective_token_limits()
        .check(tokens.ttl, tokens.max_nodes)
        .is_empty()
        && tokens.ttl != TokenTtl::Never
        && flavor.input_labels().admit(labels).is_ok();
    if !within_flavor {
        return Err(GrantRefusal::FlavorDisagrees);
    }
    Ok(Grant {
        ttl: tokens.ttl,
        max_nodes: tokens.max_nodes,
        input_labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ACME: &str = "https://login.acme.example";
    const OTHER: &str = "https://id.other.example";

    fn flavor(name: &str) -> Outcome {
        Outcome::Flavor(name.parse().unwrap())
    }

    fn rule(name: &str, matcher: Match, outcome: Outcome) -> Rule {
        Rule::new(name, matcher, outcome, IdentityLimits::default()).unwrap()
    }

    fn alice() -> Identity {
        Identity {
            issuer: ACME.into(),
            subject: "u-1".into(),
            email: Some("alice@acme.example".into()),
            email_verified: true,
            groups: vec!["sweet-admins".into()],
            name: Some("Alice".into()),
        }
    }

    fn by_group(issuer: &str, group: &str) -> Match {
        Match {
            issuer: issuer.into(),
            group: Some(group.into()),
            ..Match::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let rules = [
            rule("sour", by_group(ACME, "sour-admins"), flavor("sour")),
            rule("sweet", by_group(ACME, "sweet-admins"), flavor("sweet")),
            rule(
                "everyone",
                Match {
                    issuer: ACME.into(),
                    email_domain: Some("acme.example".into()),
                    ..Match::default()
                },
                flavor("sour"),
            ),
        ];
        let (index, decided) = decide(&alice(), &rules).unwrap();
        assert_eq!((index, decided.name.as_str()), (1, "sweet"));
        assert_eq!(flavor_for(&alice(), &rules).unwrap().as_str(), "sweet");
    }

    #[test]
    fn no_rule_and_a_no_token_rule_give_nothing() {
        assert_eq!(flavor_for(&alice(), &[]), None);
        let rules = [
            rule(
                "banned",
                Match {
                    issuer: ACME.into(),
                    subject: Some("u-1".into()),
                    ..Match::default()
                },
                Outcome::NoToken,
            ),
            rule("sweet", by_group(ACME, "sweet-admins"), flavor("sweet")),
        ];
        assert_eq!(decide(&alice(), &rules).unwrap().0, 0);
        assert_eq!(flavor_for(&alice(), &rules), None);
    }

    #[test]
    fn an_unverified_email_matches_no_email_rule() {
        let rules = [rule(
            "acme",
            Match {
                issuer: ACME.into(),
                email_domain: Some("acme.example".into()),
                ..Match::default()
            },
            flavor("sweet"),
        )];
        let unverified = Identity {
            email_verified: false,
            ..alice()
        };
        assert_eq!(flavor_for(&unverified, &rules), None);
        assert_eq!(
            rules[0].matcher.check(&unverified),
            Err(Mismatch::EmailNotVerified)
        );
        assert!(flavor_for(&alice(), &rules).is_some());
    }

    #[test]
    fn email_rules_compare_the_domain_in_any_case_and_nothing_else() {
        let by_domain = |domain: &str| Match {
            issuer: ACME.into(),
            email_domain: Some(domain.into()),
            ..Match::default()
        };
        let with_email = |email: &str| Identity {
            email: Some(email.into()),
            ..alice()
        };
        assert!(
            by_domain("ACME.example")
                .check(&with_email("a@acme.EXAMPLE"))
                .is_ok()
        );
        for other in [
            "a@evil-acme.example",
            "a@sub.acme.example",
            "a@acme.example.evil",
            "acme.example",
        ] {
            assert!(
                by_domain("acme.example").check(&with_email(other)).is_err(),
                "{other}"
            );
        }
        // A quoted local part holding '@' still has one domain: what follows the last '@'.
        assert!(
            by_domain("acme.example")
                .check(&with_email("\"x@evil.example\"@acme.example"))
                .is_ok()
        );
        assert!(
            by_domain("evil.example")
                .check(&with_email("\"x@evil.example\"@acme.example"))
                .is_err()
        );
        let by_address = Match {
            issuer: ACME.into(),
            email: Some("alice@acme.example".into()),
            ..Match::default()
        };
        assert!(by_address.check(&with_email("alice@ACME.example")).is_ok());
        assert_eq!(
            by_address.check(&with_email("Alice@acme.example")),
            Err(Mismatch::Email)
        );
    }

    #[test]
    fn the_same_subject_from_another_issuer_is_another_identity() {
        let rules = [rule(
            "alice",
            Match {
                issuer: ACME.into(),
                subject: Some("u-1".into()),
                ..Match::default()
            },
            flavor("sweet"),
        )];
        let elsewhere = Identity {
            issuer: OTHER.into(),
            ..alice()
        };
        assert_eq!(flavor_for(&elsewhere, &rules), None);
        assert_ne!(identity_key(ACME, "u-1"), identity_key(OTHER, "u-1"));
        // Group names are the issuer's too: another provider's "sweet-admins" is not ours.
        let groups = [rule("g", by_group(ACME, "sweet-admins"), flavor("sweet"))];
        assert_eq!(flavor_for(&elsewhere, &groups), None);
    }

    #[test]
    fn identity_keys_do_not_collide_where_the_boundary_moves() {
        assert_ne!(identity_key("a", "bc"), identity_key("ab", "c"));
        assert_eq!(identity_key(ACME, "u-1"), identity_key(ACME, "u-1"));
        let key = identity_key(ACME, "u-1");
        assert_eq!(key.len(), 40);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn rules_are_checked_when_read() {
        let ok = by_group(ACME, "g");
        let new = |name: &str, matcher: Match| {
            Rule::new(name, matcher, flavor("sweet"), IdentityLimits::default())
        };
        assert!(new("acme-admins", ok.clone()).is_ok());
        for bad in ["", "Acme", "-a", "a-", &"a".repeat(64), "a_b"] {
            assert_eq!(new(bad, ok.clone()), Err(RuleError::Name(bad.into())));
        }
        for issuer in [
            "http://login.acme.example",
            "login.acme.example",
            "https://",
            "https:///x",
            "https://a b",
        ] {
            assert!(
                matches!(
                    new("r", by_group(issuer, "g")),
                    Err(RuleError::Issuer { .. })
                ),
                "{issuer}"
            );
        }
        let unconditional = Match {
            issuer: ACME.into(),
            ..Match::default()
        };
        assert!(matches!(
            new("r", unconditional),
            Err(RuleError::Unconditional { .. })
        ));
        for email in [
            "alice",
            "@acme.example",
            "a@b@c.example",
            "a@",
            "a@acme..example",
        ] {
            let m = Match {
                issuer: ACME.into(),
                email: Some(email.into()),
                ..Match::default()
            };
            assert!(
                matches!(new("r", m), Err(RuleError::Email { .. })),
                "{email}"
            );
        }
        for domain in ["@acme.example", "acme.example.", "a b", ""] {
            let m = Match {
                issuer: ACME.into(),
                email_domain: Some(domain.into()),
                ..Match::default()
            };
            assert!(new("r", m).is_err(), "{domain}");
        }
        let rules = [
            rule("a", by_group(ACME, "g"), flavor("sweet")),
            rule("a", by_group(ACME, "h"), flavor("sour")),
        ];
        assert_eq!(
            check_unique_names(&rules),
            Err(RuleError::Duplicate("a".into()))
        );
        assert_eq!(check_unique_names(&rules[..1]), Ok(()));
    }

    #[test]
    fn explain_stops_at_the_deciding_rule_and_says_why_the_others_did_not_match() {
        let rules = [
            rule(
                "by-address",
                Match {
                    issuer: ACME.into(),
                    email: Some("bob@acme.example".into()),
                    ..Match::default()
                },
                flavor("sour"),
            ),
            rule(
                "other-issuer",
                by_group(OTHER, "sweet-admins"),
                flavor("sour"),
            ),
            rule("sweet", by_group(ACME, "sweet-admins"), flavor("sweet")),
            rule("later", by_group(ACME, "sweet-admins"), flavor("sour")),
        ];
        let steps = explain(&alice(), &rules);
        let names: Vec<_> = steps
            .iter()
            .map(|(r, v)| (r.name.as_str(), v.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("by-address", Err(Mismatch::Email)),
                ("other-issuer", Err(Mismatch::Issuer)),
                ("sweet", Ok(())),
            ]
        );
    }

    #[test]
    fn live_tokens_are_the_unexpired_and_unspent_ones_and_reservations_count() {
        let entries = vec![
            ("expired".to_string(), 5),
            ("spent".to_string(), 20),
            ("live".to_string(), 20),
            (format!("{RESERVATION_PREFIX}x"), 20),
        ];
        let spent: BTreeSet<String> = ["spent".to_string()].into();
        let live: Vec<&str> = live_tokens(&entries, 10, &spent)
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(live, ["live", "pending-x"]);
        assert!(live_tokens(&entries, 20, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn identity_limits_count_what_is_held() {
        let limits = IdentityLimits {
            live_tokens: NonZeroU32::new(2),
            bound_nodes: NonZeroU32::new(3),
        };
        let one = NonZeroU32::MIN;
        // 1 node and 1 unused token, each binding 1: a new token reaches 3, the limit.
        assert_eq!(within_identity_limits(&limits, 1, 1, one), Ok(()));
        assert_eq!(
            within_identity_limits(&limits, 2, 0, one),
            Err(IdentityLimitError::LiveTokens { held: 2 })
        );
        assert_eq!(
            within_identity_limits(&limits, 0, 3, one),
            Err(IdentityLimitError::Nodes {
                nodes: 3,
                tokens: 0
            })
        );
        // Unused tokens count what they can still bind: no node yet, yet no room.
        assert_eq!(
            within_identity_limits(&limits, 1, 0, NonZeroU32::new(2).unwrap()),
            Err(IdentityLimitError::Nodes {
                nodes: 0,
                tokens: 1
            })
        );
        assert_eq!(
            within_identity_limits(&IdentityLimits::default(), 1000, 1000, one),
            Ok(())
        );
    }

    fn flavor_rules(max_ttl: Option<&str>, keys: &[&str]) -> FlavorRules {
        use crate::flavor::input_labels::{InputKeySpec, InputLabelsSpec};
        FlavorRules::from_spec(&crate::flavor::FlavorSpec {
            token_limits: max_ttl.map(|t| crate::flavor::TokenLimitsSpec {
                max_ttl: Some(t.into()),
                ..Default::default()
            }),
            input_labels: Some(InputLabelsSpec {
                max_labels: None,
                keys: keys
                    .iter()
                    .map(|k| InputKeySpec {
                        key: (*k).into(),
                        values: None,
                        pattern: Some("[a-z]+".into()),
                    })
                    .collect(),
            }),
            ..Default::default()
        })
        .unwrap()
    }

    fn roster_tokens(keys: &[&str]) -> RosterTokens {
        let rules = flavor_rules(None, keys);
        RosterTokens {
            input_labels: rules.input_labels().clone(),
            ..RosterTokens::default()
        }
    }

    #[test]
    fn a_label_refusal_is_the_rosters_and_the_same_for_every_flavor() {
        let tokens = roster_tokens(&["site"]);
        // The sweet flavor takes `rack` too; the roster does not, so neither flavor grants it.
        let sweet = flavor_rules(None, &["site", "rack"]);
        let sour = flavor_rules(None, &["site"]);
        let asked: BTreeMap<String, String> = [("rack".into(), "a".into())].into();
        let (a, b) = (
            grant_for(&tokens, &sweet, &asked),
            grant_for(&tokens, &sour, &asked),
        );
        assert!(matches!(a, Err(GrantRefusal::Labels(_))));
        assert_eq!(a, b);
        let site: BTreeMap<String, String> = [("site".into(), "paris".into())].into();
        let granted = grant_for(&tokens, &sweet, &site).unwrap();
        assert_eq!(granted.input_labels.summary(), "site=paris");
        assert_eq!(
            (granted.ttl, granted.max_nodes),
            (DEFAULT_TOKEN_TTL, DEFAULT_MAX_NODES)
        );
    }

    #[test]
    fn a_flavor_that_disallows_what_the_roster_mints_grants_nothing() {
        let tokens = roster_tokens(&["site"]);
        let site: BTreeMap<String, String> = [("site".into(), "paris".into())].into();
        // The flavor does not take the roster's input label.
        assert_eq!(
            grant_for(&tokens, &flavor_rules(None, &[]), &site),
            Err(GrantRefusal::FlavorDisagrees)
        );
        // The flavor's longest TTL is shorter than the roster's.
        assert_eq!(
            grant_for(
                &tokens,
                &flavor_rules(Some("1h"), &["site"]),
                &BTreeMap::new()
            ),
            Err(GrantRefusal::FlavorDisagrees)
        );
        assert!(
            grant_for(
                &tokens,
                &flavor_rules(Some("48h"), &["site"]),
                &BTreeMap::new()
            )
            .is_ok()
        );
    }

    fn identities() -> impl Strategy<Value = Identity> {
        (
            prop::sample::select(vec![ACME, OTHER]),
            "[a-c]{1,2}",
            proptest::option::of("[a-c]{1,2}@(acme|other)\\.example"),
            any::<bool>(),
            prop::collection::vec("g[1-3]", 0..3),
        )
            .prop_map(
                |(issuer, subject, email, email_verified, groups)| Identity {
                    issuer: issuer.into(),
                    subject,
                    email,
                    email_verified,
                    groups,
                    name: None,
                },
            )
    }

    fn rules() -> impl Strategy<Value = Vec<Rule>> {
        let one = (
            prop::sample::select(vec![ACME, OTHER]),
            proptest::option::of("[a-c]{1,2}"),
            proptest::option::of("[a-c]{1,2}@(acme|other)\\.example"),
            proptest::option::of(prop::sample::select(vec!["acme.example", "other.example"])),
            proptest::option::of("g[1-3]"),
            proptest::option::of(prop::sample::select(vec!["sweet", "sour"])),
        );
        prop::collection::vec(one, 0..6).prop_map(|parts| {
            parts
                .into_iter()
                .enumerate()
                .filter_map(|(i, (issuer, subject, email, domain, group, outcome))| {
                    let matcher = Match {
                        issuer: issuer.into(),
                        subject,
                        email,
                        email_domain: domain.map(str::to_string),
                        group,
                    };
                    let outcome = outcome.map_or(Outcome::NoToken, flavor);
                    Rule::new(
                        &format!("r{i}"),
                        matcher,
                        outcome,
                        IdentityLimits::default(),
                    )
                    .ok()
                })
                .collect()
        })
    }

    proptest! {
        /// Whatever is held, granting only within the limits keeps every node the tokens
        /// can bind within the node limit: tokens minted one after another, each checked,
        /// never reach past it however many are minted before any binds.
        #[test]
        fn tokens_granted_within_the_node_limit_cannot_bind_past_it(
            max in 1u32..20,
            per_token in 1u32..5,
            bound in 0u32..20,
        ) {
            let limits = IdentityLimits { live_tokens: None, bound_nodes: NonZeroU32::new(max) };
            let per = NonZeroU32::new(per_token).unwrap();
            let mut live = 0u32;
            while within_identity_limits(&limits, live, bound, per).is_ok() {
                live += 1;
                prop_assert!(live < 100);
            }
            if live > 0 {
                prop_assert!(bound + live * per_token <= max);
            }
        }

        /// A granted flavor comes from a rule of the identity's own issuer whose conditions
        /// all hold, and no earlier rule matches; an e-mail condition held only with a
        /// verified e-mail.
        #[test]
        fn a_grant_comes_from_the_first_rule_whose_conditions_all_hold(
            identity in identities(),
            rules in rules(),
        ) {
            match decide(&identity, &rules) {
                Some((index, rule)) => {
                    prop_assert_eq!(&rule.matcher.issuer, &identity.issuer);
                    if let Some(subject) = &rule.matcher.subject {
                        prop_assert_eq!(subject, &identity.subject);
                    }
                    if rule.matcher.email.is_some() || rule.matcher.email_domain.is_some() {
                        prop_assert!(identity.email_verified);
                    }
                    if let Some(group) = &rule.matcher.group {
                        prop_assert!(identity.groups.contains(group));
                    }
                    for earlier in &rules[..index] {
                        prop_assert!(earlier.matcher.check(&identity).is_err());
                    }
                }
                None => {
                    for rule in &rules {
                        prop_assert!(rule.matcher.check(&identity).is_err());
                    }
                }
            }
        }

        /// Moving an identity to another issuer never keeps a grant that named its issuer.
        #[test]
        fn no_rule_matches_across_issuers(identity in identities(), rules in rules()) {
            let moved = Identity {
                issuer: if identity.issuer == ACME { OTHER.into() } else { ACME.into() },
                ..identity.clone()
            };
            if let Some((_, rule)) = decide(&moved, &rules) {
                prop_assert_eq!(&rule.matcher.issuer, &moved.issuer);
                prop_assert_ne!(&rule.matcher.issuer, &identity.issuer);
            }
        }

        /// Distinct identities get distinct keys.
        #[test]
        fn identity_keys_are_distinct(
            a in ("[a-c/:]{0,4}", "[a-c/:]{0,4}"),
            b in ("[a-c/:]{0,4}", "[a-c/:]{0,4}"),
        ) {
            prop_assert_eq!(identity_key(&a.0, &a.1) == identity_key(&b.0, &b.1), a == b);
        }
    }
}
