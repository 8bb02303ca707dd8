//! `Roster` (`rosters.kubeflavor.io`): the owner's list of node administrators, kept in the
//! cluster and read by admins and the join-token API alone. Each rule names an identity
//! provider (issuer) and who of its users it covers (a subject, a verified e-mail or its
//! domain, a group), and gives them a flavor or no token; the first matching rule decides
//! and no match is no token. The join-token API's `POST /v1/jointokens` decides with it
//! (`kubeflavor_core::mint::roster`), so a node administrator never names, or learns, a
//! flavor.

use kube::CustomResource;
use kubeflavor_core::flavor::input_labels::InputLabelRules as CoreInputLabelRules;
use kubeflavor_core::flavor::token_limits::DEFAULT_MAX_NODES;
use kubeflavor_core::flavor::{
    DEFAULT_TOKEN_TTL, FlavorError, FlavorName, TokenTtl, parse_max_nodes,
};
use kubeflavor_core::mint::roster::{
    IdentityLimits, Match, Outcome, RosterTokens, Rule, RuleError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{InputLabelRules, TokenDefaults, schema};

/// The Roster the join-token API reads unless `serve --roster` names another.
pub const DEFAULT_ROSTER: &str = "default";

/// The owner's list of node administrators and the flavor each gets.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "Roster",
    plural = "rosters",
    singular = "roster",
    category = "kubeflavor",
    status = "RosterStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Which node administrators get a join token, and of which flavor: rules over the verified identity their identity provider vouches for, read in order; the first that matches decides, and no match is no token.",
    printcolumn = r#"{"name":"Rules","type":"integer","jsonPath":".status.rules"}"#,
    printcolumn = r#"{"name":"Last Match","type":"date","jsonPath":".status.lastMatched"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RosterSpec {
    /// The rules, in the order they are read: the first whose conditions all hold decides.
    #[serde(default)]
    #[schemars(schema_with = "roster_rules")]
    pub rules: Vec<RosterRule>,

    /// The TTL and max nodes of every token the roster grants, whatever its flavor: one
    /// value for all, so an answer's expiry never tells one flavor from another (default
    /// 24h and 1; each granted Flavor's `tokenLimits` must allow them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_defaults: Option<TokenDefaults>,

    /// The input labels a node administrator may ask for, the same for every flavor (so a
    /// refusal never tells one flavor from another); each granted Flavor must allow them
    /// too. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_labels: Option<InputLabelRules>,
}

/// One rule: an issuer, conditions on the identity, and what it gives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = rule_rules()))]
pub struct RosterRule {
    /// The rule's name (lowercase letters, digits, '-'), unique in the roster.
    #[schemars(schema_with = "rule_name")]
    pub name: String,
    /// The identity provider's issuer, exactly as its ID tokens' `iss` (an https URL); it
    /// must be one `serve --oidc-issuer` trusts.
    #[schemars(schema_with = "issuer")]
    pub issuer: String,
    /// The ID token's `sub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A whole e-mail address; matches only an e-mail the provider verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// An e-mail domain (`acme.example`); matches only an e-mail the provider verified,
    /// of that domain exactly (no subdomains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email_domain: Option<String>,
    /// A value of the provider's group claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The Flavor granted; leave it out with `noToken: true` to refuse whom the rule
    /// matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::flavor_name")]
    pub flavor: Option<String>,
    /// Refuse whom the rule matches, whatever later rules say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_token: Option<bool>,
    /// The most nodes one administrator may have bound under this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_nodes")]
    pub max_nodes: Option<u32>,
    /// The most join tokens one administrator may hold at once under this rule (minted,
    /// not expired, not used up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::max_nodes")]
    pub max_live_tokens: Option<u32>,
}

/// Written by the join-token API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RosterStatus {
    /// How many rules the spec has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<i64>,
    /// When a rule last granted a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_matched: Option<jiff::Timestamp>,
    /// Per rule, by name: tokens granted and when last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_matches: Vec<RuleMatches>,
}

/// What one rule matched.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleMatches {
    pub name: String,
    /// Join tokens the rule granted.
    #[serde(default)]
    pub grants: i64,
    /// Distinct administrators the rule granted a token.
    #[serde(default)]
    pub administrators: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_matched: Option<jiff::Timestamp>,
}

fn rule_name(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": 63,
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    })
}

fn issuer(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 2048,
        "pattern": "^https://[^/\\s][^\\s]*$"
    })
}

/// Rules are a list keyed by name (so names are unique, and server-side apply merges by
/// name), in the order they are read.
fn roster_rules(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<RosterRule>();
    schemars::json_schema!({
        "type": "array",
        "maxItems": 512,
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"]
    })
}

fn rule_rules() -> Value {
    json!([
        {
            "rule": "has(self.subject) || has(self.email) || has(self.emailDomain) || has(self.group)",
            "message": "a rule matches every identity of its issuer; add a subject, email, emailDomain or group condition"
        },
        {
            "rule": "has(self.flavor) != (has(self.noToken) && self.noToken)",
            "message": "a rule gives a flavor or, with noToken: true, nothing; set exactly one"
        },
    ])
}

/// The core's rules from a Roster's spec, in order; the first rule that cannot be used
/// is an error naming it (the API server's schema refuses most of them already).
pub fn rules_from_roster(spec: &RosterSpec) -> Result<Vec<Rule>, RuleError> {
    let rules = spec
        .rules
        .iter()
        .map(|r| {
            let outcome = match (&r.flavor, r.no_token.unwrap_or(false)) {
                (Some(flavor), false) => match flavor.parse::<FlavorName>() {
                    Ok(flavor) => Outcome::Flavor(flavor),
                    Err(_) => Outcome::NoToken,
                },
                _ => Outcome::NoToken,
            };
            let limits = IdentityLimits {
                live_tokens: r.max_live_tokens.and_then(std::num::NonZeroU32::new),
                bound_nodes: r.max_nodes.and_then(std::num::NonZeroU32::new),
            };
            let matcher = Match {
                issuer: r.issuer.clone(),
                subject: r.subject.clone(),
                email: r.email.clone(),
                email_domain: r.email_domain.clone(),
                group: r.group.clone(),
            };
            Rule::new(&r.name, matcher, outcome, limits)
        })
        .collect::<Result<Vec<_>, _>>()?;
    kubeflavor_core::mint::roster::check_unique_names(&rules)?;
    Ok(rules)
}

/// What every token of the roster is minted with (`tokenDefaults`, `inputLabels`), checked
/// as a Flavor's are.
pub fn roster_tokens(spec: &RosterSpec) -> Result<RosterTokens, FlavorError> {
    let defaults = spec.token_defaults.as_ref();
    let ttl = defaults
        .and_then(|d| d.ttl.as_deref())
        .map(str::parse::<TokenTtl>)
        .transpose()
        .map_err(FlavorError::TokenTtl)?
        .unwrap_or(DEFAULT_TOKEN_TTL);
    let max_nodes = defaults
        .and_then(|d| d.max_nodes)
        .map(|n| parse_max_nodes(i64::from(n)))
        .transpose()?
        .unwrap_or(DEFAULT_MAX_NODES);
    let input_labels = spec
        .input_labels
        .as_ref()
        .map(|r| CoreInputLabelRules::from_spec(&super::convert::input_labels_spec(r)))
        .transpose()
        .map_err(FlavorError::InputLabels)?
        .unwrap_or_default();
    Ok(RosterTokens {
        ttl,
        max_nodes,
        input_labels,
    })
}

/// What one node administrator holds under one Roster: the rules that granted them tokens,
/// and the join tokens minted for them that may still be live. Written by the join-token
/// API before each mint (for a rule with `maxLiveTokens`, a reservation first and the
/// token's id once minted), so replicas count together and a crash between the two leaves
/// an entry that expires with the token.
/// Named by a hash of the Roster and the identity; read and written by the API alone.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "AdministratorLedger",
    plural = "administratorledgers",
    singular = "administratorledger",
    category = "kubeflavor",
    derive = "Default",
    derive = "PartialEq",
    doc = "The join tokens the join-token API minted for one node administrator under one Roster that may still be live: how a rule's maxLiveTokens is counted across the API's replicas.",
    printcolumn = r#"{"name":"Roster","type":"string","jsonPath":".spec.roster"}"#,
    printcolumn = r#"{"name":"Subject","type":"string","jsonPath":".spec.subject"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AdministratorLedgerSpec {
    pub roster: String,
    pub issuer: String,
    pub subject: String,
    /// Tokens, or reservations (`pending-…`) for tokens being minted.
    #[serde(default)]
    pub tokens: Vec<LedgerToken>,
    /// The Roster rules that ever granted this administrator a token (the Roster's status
    /// counts each rule's distinct administrators from the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

/// One token (or reservation) and when it expires.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LedgerToken {
    pub id: String,
    #[schemars(schema_with = "schema::date_time")]
    pub expires: jiff::Timestamp,
}

/// The ledger's name: 40 hex digits naming the Roster and the identity together.
pub fn ledger_name(roster: &str, issuer: &str, subject: &str) -> String {
    kubeflavor_core::token::meta::identity_key(&format!("{roster}\n{issuer}"), subject)
}
