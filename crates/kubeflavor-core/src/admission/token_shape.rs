//! The only Secret the join-token API's identity may create: a kubeflavor node token exactly
//! as `mint` writes it ([`crate::token::secret::flavored_token_secret`]). RBAC cannot limit
//! `create secrets` by content, so `install --serve` ships these rules as a
//! ValidatingAdmissionPolicy the API server enforces on that identity's requests: whoever
//! steals its token can mint kubeflavor node tokens, which the controller judges (flavor,
//! max nodes, binding), and nothing kube-controller-manager approves (kubeadm's groups) or
//! that pre-fills what the controller trusts (bound nodes, denials).
//!
//! Each rule is a CEL expression over the admission request (`request`) and the Secret
//! (`object`) with the message the API server returns when it is false. The API server
//! reports the first failing rule only, so the order puts the broad causes first.
//!
//! Kubernetes gives CEL a Secret's `data` values as the base64 text of the JSON form, and
//! its CEL has no base64 decoder (`base64.decode` is not declared on v1.36: measured). So
//! the rules compare data values with the base64 of what kubeflavor writes, and the token
//! id in the Secret's name is encoded to base64 by the policy's variables to compare it
//! with `data.token-id`. The same arithmetic decodes `data.expiration` (the 20 ASCII
//! characters `YYYY-MM-DDTHH:MM:SSZ` mint writes, 28 base64 characters) into digits, so the
//! policy can refuse a token that lives longer than a ceiling after its Secret's
//! `creationTimestamp` (set before validating admission runs: upstream's registry Store
//! fills it in `BeforeCreate`, then calls the validating admission plugins; measured on
//! v1.36, where CEL sees it as an RFC 3339 string).
//!
//! What the policy enforces is a ceiling for the whole identity, set at install
//! ([`Ceilings`]): the join-token API keeps to each Flavor's own `tokenLimits`, and the
//! controller judges every token against them again when its CSRs come
//! ([`crate::approval::client::DenyCause::TokenOverLimits`]), so a thief of this identity gets at most
//! the ceiling here and then the Flavor's limits at approval.

use std::num::NonZeroU32;

use base64::Engine;

use crate::approval::client::CLOCK_SKEW_ALLOWANCE_SECS;
use crate::flavor::input_labels::INPUT_LABELS_ANNOTATION;
use crate::flavor::ttl::TokenTtl;
use crate::token::meta::{
    BOUND_NODES_ANNOTATION, DENIALS_ANNOTATION, FLAVOR_TOKEN_LABEL, IDENTITY_ISSUER_ANNOTATION,
    IDENTITY_LABEL, IDENTITY_SUBJECT_ANNOTATION, ISSUED_BY_ANNOTATION, ISSUED_TO_ANNOTATION,
    LIMITS_OVERRIDE_ANNOTATION, MAX_NODES_ANNOTATION, REQUESTED_BY_ANNOTATION,
};
use crate::token::secret::{
    KEY_AUTH_EXTRA_GROUPS, KEY_DESCRIPTION, KEY_EXPIRATION, KEY_TOKEN_ID, KEY_TOKEN_SECRET,
    KEY_USAGE_AUTHENTICATION, KEY_USAGE_SIGNING, KUBEFLAVOR_TOKEN_DESCRIPTION, NODE_GROUP,
    TOKEN_SECRET_NAME_PREFIX, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE,
};

/// A named CEL expression the rules use (`variables.<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    pub expression: String,
}

/// One rule: the Secret is refused when `expression` is false, with `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub expression: String,
    pub message: String,
}

/// The data keys of a kubeflavor node token, all required.
pub const DATA_KEYS: [&str; 7] = [
    KEY_TOKEN_ID,
    KEY_TOKEN_SECRET,
    KEY_EXPIRATION,
    KEY_USAGE_AUTHENTICATION,
    KEY_USAGE_SIGNING,
    KEY_AUTH_EXTRA_GROUPS,
    KEY_DESCRIPTION,
];

/// The annotations `mint` may write. Bound nodes and denials are the controller's state:
/// they may be present only as a new token has them (none bound, no denial). The input
/// labels are checked again by the controller against the Flavor before it binds a node.
/// Not the admins' override of a Flavor's limits ([`LIMITS_OVERRIDE_ANNOTATION`]).
pub const ANNOTATIONS: [&str; 9] = [
    MAX_NODES_ANNOTATION,
    BOUND_NODES_ANNOTATION,
    DENIALS_ANNOTATION,
    ISSUED_TO_ANNOTATION,
    ISSUED_BY_ANNOTATION,
    REQUESTED_BY_ANNOTATION,
    INPUT_LABELS_ANNOTATION,
    IDENTITY_ISSUER_ANNOTATION,
    IDENTITY_SUBJECT_ANNOTATION,
];

/// The most the identity the policy binds may mint, whatever a Flavor allows: `install
/// --serve-max-token-ttl` and `--serve-max-nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// The longest time from the Secret's creation to its expiration, in seconds.
    pub max_ttl_secs: u64,
    /// The largest `kubeflavor.io/max-nodes`.
    pub max_nodes: NonZeroU32,
}

/// A week, and 100 nodes: a portal hands out join lines for machines it is about to start,
/// so a week covers a weekend's delay, and 100 a batch of machines sharing one line. An
/// owner whose portal needs more raises them at install (the Flavors' own limits still
/// apply when their CSRs are judged).
pub const DEFAULT_CEILINGS: Ceilings = Ceilings {
    max_ttl_secs: 7 * 24 * 3600,
    max_nodes: NonZeroU32::new(100).expect("100 is not 0"),
};

impl Default for Ceilings {
    fn default() -> Self {
        DEFAULT_CEILINGS
    }
}

impl Ceilings {
    /// The TTL ceiling as `token create --ttl` spells a duration (`168h`).
    pub fn max_ttl(&self) -> TokenTtl {
        TokenTtl::Seconds(self.max_ttl_secs)
    }
}

/// The CEL condition selecting the requests of `user` (the policy applies to no one else).
pub fn applies_to(user: &str) -> String {
    format!("request.userInfo.username == {}", cel_string(user))
}

/// `s` as a CEL string literal.
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn cel_list(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|s| cel_string(s)).collect();
    format!("[{}]", items.join(", "))
}

/// `data[key]`, as base64 text, equals `value`'s base64.
fn data_is(key: &str, value: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    format!(
        "has(object.data) && {k} in object.data && string(object.data[{k}]) == {v}",
        k = cel_string(key),
        v = cel_string(&encoded),
    )
}

/// The annotation `key` is absent or `value`.
fn annotation_absent_or(key: &str, value: &str) -> String {
    format!(
        "!has(object.metadata.annotations) || !({k} in object.metadata.annotations) || \
         object.metadata.annotations[{k}] == {v}",
        k = cel_string(key),
        v = cel_string(value),
    )
}

/// The lower-case letters and digits of a token id, in the order of their ASCII codes
/// (digits 48-57, letters 97-122).
const ID_ALPHABET: &str = "0123456789abcdefghijklmnopqrstuvwxyz";
/// Standard base64's alphabet (what the API server's JSON uses for `[]byte`).
const BASE64_ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The length of what mint writes in `data.expiration`: `YYYY-MM-DDTHH:MM:SSZ`.
const EXPIRATION_CHARS: usize = 20;
/// The positions of its digits; the others hold `-`, `T`, `:` and `Z`.
const EXPIRATION_DIGITS: [usize; 14] = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
/// The separators: position and ASCII code.
const EXPIRATION_SEPARATORS: [(usize, u8); 6] = [
    (4, b'-'),
    (7, b'-'),
    (10, b'T'),
    (13, b':'),
    (16, b':'),
    (19, b'Z'),
];

/// A CEL expression counting the seconds of the time whose digit at position `i` of
/// `YYYY-MM-DDTHH:MM:SSZ` is `digit(i)` (an int expression), from an epoch of its own
/// (what matters is the difference of two such counts). The day count is Howard Hinnant's
/// `days_from_civil` with the year moved 400 years on (one whole Gregorian cycle, so the
/// count keeps its differences), which keeps every year of four digits positive: CEL's
/// integer division truncates toward zero and the algorithm wants floor.
fn seconds_since_epoch(digit: impl Fn(usize) -> String) -> String {
    let number = |positions: &[usize]| {
        let terms: Vec<String> = positions
            .iter()
            .rev()
            .enumerate()
            .map(|(power, &i)| format!("{} * {}", digit(i), 10_i64.pow(power as u32)))
            .collect();
        format!("({})", terms.join(" + "))
    };
    let (year, month, day) = (number(&[0, 1, 2, 3]), number(&[5, 6]), number(&[8, 9]));
    let (hour, minute, second) = (number(&[11, 12]), number(&[14, 15]), number(&[17, 18]));
    // y: the year counted from March (January and February belong to the year before).
    let y = format!("({year} + 400 - ({month} <= 2 ? 1 : 0))");
    let era = format!("({y} / 400)");
    let yoe = format!("({y} - {era} * 400)");
    let doy = format!("((153 * ({month} + ({month} > 2 ? -3 : 9)) + 2) / 5 + {day} - 1)");
    let doe = format!("({yoe} * 365 + {yoe} / 4 - {yoe} / 100 + {doy})");
    format!("(({era} * 146097 + {doe}) * 86400 + {hour} * 3600 + {minute} * 60 + {second})")
}

/// The variables: `tokenId`, the id the Secret's name carries ('' when the name is not
/// `bootstrap-token-` and six letters or digits), and `tokenIdBase64`, its base64 (six
/// bytes, so two groups of three bytes, eight characters, no padding); `expirationBytes`,
/// the ASCII codes `data.expiration` decodes to when it is 20 characters long (else
/// empty), `expirationSeconds` and `createdSeconds`, the expiration's and the Secret's
/// `creationTimestamp`'s seconds from one epoch (0 when either is not in mint's shape).
pub fn variables() -> Vec<Variable> {
    let prefix = TOKEN_SECRET_NAME_PREFIX;
    let e = cel_string(KEY_EXPIRATION);
    // 20 bytes: 6 whole groups of 3 and 2 bytes, so 27 base64 digits and one `=`.
    let sextets: Vec<String> = (0..27).map(|j| j.to_string()).collect();
    let positions: Vec<String> = (0..EXPIRATION_CHARS).map(|k| k.to_string()).collect();
    let time_shape = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$";
    vec![
        Variable {
            name: "tokenId",
            expression: format!(
                "object.metadata.name.matches({pattern}) ? object.metadata.name.substring({len}) : ''",
                pattern = cel_string(&format!("^{prefix}[a-z0-9]{{6}}$")),
                len = prefix.len(),
            ),
        },
        Variable {
            name: "tokenIdBytes",
            expression: format!(
                "[0, 1, 2, 3, 4, 5].map(i, {alphabet}.indexOf(variables.tokenId.charAt(i)))\
                 .map(x, x < 10 ? x + 48 : x + 87)",
                alphabet = cel_string(ID_ALPHABET),
            ),
        },
        Variable {
            name: "tokenIdBase64",
            expression: format!(
                "[0, 3].map(g, variables.tokenIdBytes[g] * 65536 + variables.tokenIdBytes[g + 1] * 256 \
                 + variables.tokenIdBytes[g + 2])\
                 .map(n, [n / 262144, n / 4096 % 64, n / 64 % 64, n % 64]\
                 .map(s, {alphabet}.charAt(s)).join('')).join('')",
                alphabet = cel_string(BASE64_ALPHABET),
            ),
        },
        Variable {
            name: "expiration",
            expression: format!(
                "has(object.data) && {e} in object.data ? string(object.data[{e}]) : ''"
            ),
        },
        Variable {
            name: "expirationSextets",
            expression: format!(
                "variables.expiration.matches('^[A-Za-z0-9+/]{{27}}=$') ? \
                 [{sextets}].map(j, {alphabet}.indexOf(variables.expiration.charAt(j))) : []",
                sextets = sextets.join(", "),
                alphabet = cel_string(BASE64_ALPHABET),
            ),
        },
        Variable {
            name: "expirationBytes",
            // Byte k is in group k / 3 of four digits s0..s3: s0 s1 make byte 0 of the
            // group, s1 s2 byte 1, s2 s3 byte 2.
            expression: format!(
                "size(variables.expirationSextets) == 27 ? [{positions}].map(k, \
                 k % 3 == 0 ? variables.expirationSextets[k / 3 * 4] * 4 + variables.expirationSextets[k / 3 * 4 + 1] / 16 : \
                 (k % 3 == 1 ? variables.expirationSextets[k / 3 * 4 + 1] % 16 * 16 + variables.expirationSextets[k / 3 * 4 + 2] / 4 : \
                 variables.expirationSextets[k / 3 * 4 + 2] % 4 * 64 + variables.expirationSextets[k / 3 * 4 + 3])) : []",
                positions = positions.join(", "),
            ),
        },
        Variable {
            name: "expirationSeconds",
            expression: format!(
                "{shape} ? {seconds} : 0",
                shape = expiration_shape("variables.expirationBytes"),
                seconds = seconds_since_epoch(|i| format!("(variables.expirationBytes[{i}] - 48)")),
            ),
        },
        Variable {
            name: "created",
            expression: "has(object.metadata.creationTimestamp) ? \
                         string(object.metadata.creationTimestamp) : ''"
                .into(),
        },
        Variable {
            name: "createdSeconds",
            expression: format!(
                "variables.created.matches({shape}) ? {seconds} : 0",
                shape = cel_string(time_shape),
                seconds = seconds_since_epoch(|i| format!(
                    "'0123456789'.indexOf(variables.created.charAt({i}))"
                )),
            ),
        },
    ]
}

/// A CEL condition: `bytes` (a list of ints) are the ASCII codes of `YYYY-MM-DDTHH:MM:SSZ`
/// with a month from 1 to 12, a day from 1 to 31, hours, minutes and seconds in range:
/// what mint writes and what the API server's token authenticator reads (Go's
/// `time.RFC3339`).
fn expiration_shape(bytes: &str) -> String {
    let digits: Vec<String> = EXPIRATION_DIGITS.iter().map(usize::to_string).collect();
    let separators: Vec<String> = EXPIRATION_SEPARATORS
        .iter()
        .map(|(i, c)| format!("{bytes}[{i}] == {c}"))
        .collect();
    let two = |i: usize| format!("(({bytes}[{i}] - 48) * 10 + {bytes}[{}] - 48)", i + 1);
    format!(
        "(size({bytes}) == {EXPIRATION_CHARS} && [{digits}].all(i, {bytes}[i] >= 48 && {bytes}[i] <= 57) \
         && {separators} && {month} >= 1 && {month} <= 12 && {day} >= 1 && {day} <= 31 \
         && {hour} <= 23 && {minute} <= 59 && {second} <= 59)",
        digits = digits.join(", "),
        separators = separators.join(" && "),
        month = two(5),
        day = two(8),
        hour = two(11),
        minute = two(14),
        second = two(17),
    )
}

/// The rules, broad causes first: the request, the token it creates (within `ceilings`),
/// its data, its metadata, and how it may be deleted or changed.
pub fn rules(ceilings: &Ceilings) -> Vec<Rule> {
    [
        request_rules(),
        token_rules(ceilings),
        data_rules(),
        metadata_rules(ceilings),
        lifecycle_rules(),
    ]
    .concat()
}

fn rule(expression: impl Into<String>, message: impl Into<String>) -> Rule {
    Rule {
        expression: expression.into(),
        message: message.into(),
    }
}

/// A create, in the namespace of token Secrets.
fn request_rules() -> Vec<Rule> {
    vec![
        rule(
            "request.operation == 'CREATE'",
            "the join-token API creates token Secrets and never changes one; this update is refused",
        ),
        rule(
            format!(
                "request.namespace == {}",
                cel_string(TOKEN_SECRET_NAMESPACE)
            ),
            format!(
                "the join-token API creates Secrets in {TOKEN_SECRET_NAMESPACE} only, where token Secrets live"
            ),
        ),
    ]
}

/// A bootstrap token Secret named after its token id, which expires, in mint's shape and
/// within the TTL ceiling.
fn token_rules(ceilings: &Ceilings) -> Vec<Rule> {
    let max_ttl = ceilings.max_ttl();
    vec![
        rule(
            format!(
                "has(object.type) && object.type == {}",
                cel_string(TOKEN_SECRET_TYPE)
            ),
            format!(
                "type must be {TOKEN_SECRET_TYPE}: the join-token API creates bootstrap token Secrets only"
            ),
        ),
        rule(
            format!(
                "variables.tokenId != '' && has(object.data) && {id} in object.data && \
                 string(object.data[{id}]) == variables.tokenIdBase64",
                id = cel_string(KEY_TOKEN_ID),
            ),
            format!(
                "metadata.name must be {TOKEN_SECRET_NAME_PREFIX}<id> with <id> six lower-case letters or \
                 digits, and data.{KEY_TOKEN_ID} must be that <id>"
            ),
        ),
        rule(
            format!(
                "has(object.data) && {e} in object.data && size(object.data[{e}]) > 0",
                e = cel_string(KEY_EXPIRATION),
            ),
            format!(
                "data.{KEY_EXPIRATION} is missing: tokens the join-token API mints must expire"
            ),
        ),
        rule(
            expiration_shape("variables.expirationBytes"),
            format!(
                "data.{KEY_EXPIRATION} must be a UTC time written YYYY-MM-DDTHH:MM:SSZ, as \
                 kubeflavor writes it"
            ),
        ),
        rule(
            "variables.createdSeconds > 0",
            "metadata.creationTimestamp is missing or not YYYY-MM-DDTHH:MM:SSZ: the API server \
             sets it before this policy runs",
        ),
        rule(
            format!(
                "variables.expirationSeconds - variables.createdSeconds <= {}",
                ceilings.max_ttl_secs + CLOCK_SKEW_ALLOWANCE_SECS
            ),
            format!(
                "data.{KEY_EXPIRATION} must be at most {max_ttl} after the Secret's creation \
                 (and {skew} for clocks that disagree): the join-token API mints no \
                 longer-lived token, whatever a Flavor allows (install --serve-max-token-ttl)",
                skew = TokenTtl::Seconds(CLOCK_SKEW_ALLOWANCE_SECS),
            ),
        ),
    ]
}

/// Exactly the data keys kubeflavor writes, with the values every kubeflavor node token
/// has: its group, both usages, the one description.
fn data_rules() -> Vec<Rule> {
    let data_list = DATA_KEYS.join(", ");
    vec![
        rule(
            format!(
                "has(object.data) && object.data.size() == {n} && {keys}.all(k, k in object.data)",
                n = DATA_KEYS.len(),
                keys = cel_list(&DATA_KEYS),
            ),
            format!("data must hold exactly these keys: {data_list}"),
        ),
        rule(
            data_is(KEY_AUTH_EXTRA_GROUPS, NODE_GROUP),
            format!(
                "data.{KEY_AUTH_EXTRA_GROUPS} must be exactly {NODE_GROUP}: the join-token API mints \
                 kubeflavor node tokens only (kubeadm's groups, kubeflavor's control-plane group and \
                 any other group are refused)"
            ),
        ),
        rule(
            format!(
                "({}) && ({})",
                data_is(KEY_USAGE_AUTHENTICATION, "true"),
                data_is(KEY_USAGE_SIGNING, "true")
            ),
            format!(
                "data.{KEY_USAGE_AUTHENTICATION} and data.{KEY_USAGE_SIGNING} must both be \"true\", \
                 as kubeflavor writes them"
            ),
        ),
        rule(
            data_is(KEY_DESCRIPTION, KUBEFLAVOR_TOKEN_DESCRIPTION),
            format!(
                "data.{KEY_DESCRIPTION} must be exactly {KUBEFLAVOR_TOKEN_DESCRIPTION:?}, the one \
                 description of every kubeflavor token"
            ),
        ),
    ]
}

/// The flavor label alone, and only the annotations `mint` writes, with the controller's
/// state (bound nodes, denials) as a new token has it, max nodes within the ceiling, the
/// requesting identity as the minter, no override of the Flavor's limits.
fn metadata_rules(ceilings: &Ceilings) -> Vec<Rule> {
    let annotations_list = ANNOTATIONS.join(", ");
    let max_nodes = ceilings.max_nodes;
    vec![
        rule(
            format!(
                "has(object.metadata.labels) && {l} in object.metadata.labels && \
                 object.metadata.labels[{l}] != '' && (object.metadata.labels.size() == 1 || \
                 (object.metadata.labels.size() == 2 && {i} in object.metadata.labels && \
                 object.metadata.labels[{i}].matches('^[0-9a-f]{{40}}$')))",
                l = cel_string(FLAVOR_TOKEN_LABEL),
                i = cel_string(IDENTITY_LABEL),
            ),
            format!(
                "metadata.labels must be exactly {FLAVOR_TOKEN_LABEL} (the token's flavor, not empty), \
                 and {IDENTITY_LABEL} (40 hex digits) for a node administrator's token"
            ),
        ),
        rule(
            format!(
                "has(object.metadata.annotations) && ({is} in object.metadata.annotations) == \
                 ({su} in object.metadata.annotations) && ({is} in object.metadata.annotations) == \
                 (has(object.metadata.labels) && {i} in object.metadata.labels)",
                is = cel_string(IDENTITY_ISSUER_ANNOTATION),
                su = cel_string(IDENTITY_SUBJECT_ANNOTATION),
                i = cel_string(IDENTITY_LABEL),
            ),
            format!(
                "a node administrator's token names its identity whole: the annotations \
                 {IDENTITY_ISSUER_ANNOTATION} and {IDENTITY_SUBJECT_ANNOTATION} and the label \
                 {IDENTITY_LABEL}, all three or none"
            ),
        ),
        rule(
            format!(
                "!has(object.metadata.annotations) || !({o} in object.metadata.annotations)",
                o = cel_string(LIMITS_OVERRIDE_ANNOTATION),
            ),
            format!(
                "metadata.annotations[{LIMITS_OVERRIDE_ANNOTATION}] is refused: only an admin \
                 overrides a Flavor's token limits (kubeflavor token create --override-flavor-limits)"
            ),
        ),
        rule(
            format!(
                "has(object.metadata.annotations) && object.metadata.annotations.all(k, k in {list})",
                list = cel_list(&ANNOTATIONS),
            ),
            format!("metadata.annotations may be only these: {annotations_list}"),
        ),
        rule(
            format!(
                "has(object.metadata.annotations) && {b} in object.metadata.annotations && \
                 object.metadata.annotations[{b}] == request.userInfo.username",
                b = cel_string(ISSUED_BY_ANNOTATION),
            ),
            format!(
                "metadata.annotations[{ISSUED_BY_ANNOTATION}] must be the requesting user's own \
                 name: a token's custody names who minted it (the caller the join-token API \
                 minted for goes in {REQUESTED_BY_ANNOTATION})"
            ),
        ),
        rule(
            format!(
                "has(object.metadata.annotations) && {m} in object.metadata.annotations && \
                 object.metadata.annotations[{m}].matches('^[1-9][0-9]{{0,9}}$') && \
                 int(object.metadata.annotations[{m}]) <= {max_nodes}",
                m = cel_string(MAX_NODES_ANNOTATION),
            ),
            format!(
                "metadata.annotations[{MAX_NODES_ANNOTATION}] must be a whole number from 1 to \
                 {max_nodes} (install --serve-max-nodes)"
            ),
        ),
        rule(
            annotation_absent_or(BOUND_NODES_ANNOTATION, ""),
            format!(
                "metadata.annotations[{BOUND_NODES_ANNOTATION}] must be absent or empty: a new token \
                 has bound no node, and only the controller records one"
            ),
        ),
        rule(
            annotation_absent_or(DENIALS_ANNOTATION, "0"),
            format!(
                "metadata.annotations[{DENIALS_ANNOTATION}] must be absent or \"0\": a new token has \
                 no denial, and only the controller counts them"
            ),
        ),
    ]
}

/// Nothing that would keep the Secret after it is deleted, or stop the controller writing it.
fn lifecycle_rules() -> Vec<Rule> {
    vec![
        rule(
            "!has(object.metadata.finalizers) && !has(object.metadata.ownerReferences)",
            "metadata.finalizers and metadata.ownerReferences must be absent: a token Secret must \
             go when the controller or the token cleaner deletes it, and only then",
        ),
        rule(
            "!has(object.immutable) || object.immutable == false",
            "immutable must not be set: the controller records bound nodes and denials on the token",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flavor::FlavorName;
    use crate::flavor::input_labels::InputLabels;
    use crate::token::BootstrapToken;
    use crate::token::meta::{Custody, FlavorTokenMeta};
    use crate::token::secret::{TokenSecretData, TokenSecretObject, secret_name};
    use std::num::NonZeroU32;

    fn minted() -> crate::token::secret::TokenSecretObject {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let flavor: FlavorName = "sweet".parse().unwrap();
        let custody = Custody {
            issued_to: Some("acme-corp/alice".parse().unwrap()),
            issued_by: Some("system:serviceaccount:kubeflavor:kubeflavor-serve".into()),
            requested_by: Some("system:serviceaccount:portal:portal".into()),
            identity: Some(Box::new(crate::token::meta::CustodyIdentity {
                issuer: "https://login.acme.example".into(),
                subject: "u-1".into(),
            })),
        };
        let input_labels =
            InputLabels::from_map(&[("site".into(), "paris".into())].into()).expect("input labels");
        let meta = FlavorTokenMeta::new(flavor, NonZeroU32::new(3).unwrap())
            .with_custody(custody)
            .with_input_labels(input_labels);
        let data =
            TokenSecretData::kubeflavor_node(token, Some("2026-12-01T00:00:00Z".parse().unwrap()));
        TokenSecretObject::new(&data, Some(&meta))
    }

    /// The rules describe what `mint` writes: every data key, the labels and every
    /// annotation it writes (a node administrator's token has them all), with bound nodes
    /// and denials as a new token has them.
    #[test]
    fn the_shape_is_what_mint_writes() {
        let secret = minted();
        let keys: Vec<&str> = secret.string_data.keys().map(String::as_str).collect();
        let mut expected = DATA_KEYS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(
            secret.labels.keys().collect::<Vec<_>>(),
            [FLAVOR_TOKEN_LABEL, IDENTITY_LABEL]
        );
        let mut annotations = ANNOTATIONS.to_vec();
        annotations.sort_unstable();
        assert_eq!(
            secret
                .annotations
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            annotations
        );
        assert_eq!(secret.annotations[BOUND_NODES_ANNOTATION], "");
        assert_eq!(secret.annotations[DENIALS_ANNOTATION], "0");
        assert_eq!(secret.name, secret_name(&"abcdef".parse().unwrap()));
        assert_eq!(secret.namespace, TOKEN_SECRET_NAMESPACE);
        assert_eq!(secret.type_, TOKEN_SECRET_TYPE);
    }

    /// The data values the rules compare are the base64 of what `mint` writes.
    #[test]
    fn the_compared_values_are_mints_in_base64() {
        let secret = minted();
        let rules = rules(&DEFAULT_CEILINGS);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for key in [
            KEY_AUTH_EXTRA_GROUPS,
            KEY_USAGE_AUTHENTICATION,
            KEY_USAGE_SIGNING,
            KEY_DESCRIPTION,
        ] {
            let compared = format!(
                "string(object.data['{key}']) == '{}'",
                b64(&secret.string_data[key])
            );
            assert!(
                rules.iter().any(|r| r.expression.contains(&compared)),
                "no rule compares {key} with what mint writes"
            );
        }
    }

    /// The policy's base64 of a token id, computed here as its variables compute it: ASCII
    /// codes from the alphabet's index, then 3-byte groups into 6-bit digits.
    #[test]
    fn the_id_encoding_is_base64() {
        let encode = |id: &str| -> String {
            let bytes: Vec<u32> = id
                .chars()
                .map(|c| ID_ALPHABET.find(c).unwrap() as u32)
                .map(|x| if x < 10 { x + 48 } else { x + 87 })
                .collect();
            let alphabet: Vec<char> = BASE64_ALPHABET.chars().collect();
            [0, 3]
                .iter()
                .map(|g| bytes[*g] * 65536 + bytes[g + 1] * 256 + bytes[g + 2])
                .flat_map(|n| [n / 262144, n / 4096 % 64, n / 64 % 64, n % 64])
                .map(|s| alphabet[s as usize])
                .collect()
        };
        for id in ["abcdef", "000000", "zzzzzz", "a9z0m5", "07x3qk"] {
            assert_eq!(
                encode(id),
                base64::engine::general_purpose::STANDARD.encode(id),
                "{id}"
            );
        }
    }

    /// Only an admin overrides a Flavor's limits: never an annotation a mint may write, and
    /// a rule of its own names it.
    #[test]
    fn the_limits_override_is_not_the_apis_to_write() {
        assert!(!ANNOTATIONS.contains(&LIMITS_OVERRIDE_ANNOTATION));
        assert!(
            rules(&DEFAULT_CEILINGS)
                .iter()
                .any(|r| r.expression.contains(LIMITS_OVERRIDE_ANNOTATION)
                    && r.message.contains("only an admin"))
        );
    }

    /// The ceilings are in the rules as install sets them, the TTL's with the allowance for
    /// clocks.
    #[test]
    fn the_ceilings_are_the_installs() {
        let ceilings = Ceilings {
            max_ttl_secs: 3600,
            max_nodes: NonZeroU32::new(7).unwrap(),
        };
        let rules = rules(&ceilings);
        assert!(rules.iter().any(|r| r.expression
            == "variables.expirationSeconds - variables.createdSeconds <= 3900"
            && r.message.contains("at most 1h after the Secret's creation")));
        assert!(rules.iter().any(|r| {
            r.expression.contains(") <= 7")
                && r.message
                    .contains("from 1 to 7 (install --serve-max-nodes)")
        }));
        assert!(
            rules
                .iter()
                .any(|r| r.expression.contains("request.userInfo.username")
                    && r.message.contains(ISSUED_BY_ANNOTATION))
        );
    }

    /// The policy's day count (Hinnant's days_from_civil, moved 400 years on), computed here
    /// as its CEL computes it with truncating integer division, counts days as jiff does.
    #[test]
    fn the_day_count_is_the_calendars() {
        let days = |y: i64, m: i64, d: i64| -> i64 {
            let y = y + 400 - i64::from(m <= 2);
            let era = y / 400;
            let yoe = y - era * 400;
            let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
            let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
            era * 146097 + doe
        };
        let epoch = days(1970, 1, 1);
        for date in [
            "0001-01-01",
            "1970-01-01",
            "2000-02-29",
            "2024-03-01",
            "2100-02-28",
            "2100-03-01",
            "9999-12-30",
        ] {
            let d: jiff::civil::Date = date.parse().unwrap();
            let since_epoch = d
                .to_zoned(jiff::tz::TimeZone::UTC)
                .unwrap()
                .timestamp()
                .as_second()
                .div_euclid(86400);
            assert_eq!(
                days(
                    i64::from(d.year()),
                    i64::from(d.month()),
                    i64::from(d.day())
                ) - epoch,
                since_epoch,
                "{date}"
            );
        }
    }

    #[test]
    fn the_policy_applies_to_one_user() {
        assert_eq!(
            applies_to("system:serviceaccount:kubeflavor:kubeflavor-serve"),
            "request.userInfo.username == 'system:serviceaccount:kubeflavor:kubeflavor-serve'"
        );
    }
}
