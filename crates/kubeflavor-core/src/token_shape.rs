//! The only Secret the join-token API's identity may create: a kubeflavor node token exactly
//! as `mint` writes it ([`crate::token_secret::flavored_token_secret`]). RBAC cannot limit
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
//! with `data.token-id`.

use base64::Engine;

use crate::input_labels::INPUT_LABELS_ANNOTATION;
use crate::token_meta::{
    BOUND_NODES_ANNOTATION, DENIALS_ANNOTATION, FLAVOR_TOKEN_LABEL, ISSUED_BY_ANNOTATION,
    ISSUED_TO_ANNOTATION, MAX_NODES_ANNOTATION,
};
use crate::token_secret::{
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
pub const ANNOTATIONS: [&str; 6] = [
    MAX_NODES_ANNOTATION,
    BOUND_NODES_ANNOTATION,
    DENIALS_ANNOTATION,
    ISSUED_TO_ANNOTATION,
    ISSUED_BY_ANNOTATION,
    INPUT_LABELS_ANNOTATION,
];

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

/// The variables: `tokenId`, the id the Secret's name carries ('' when the name is not
/// `bootstrap-token-` and six letters or digits), and `tokenIdBase64`, its base64 (six
/// bytes, so two groups of three bytes, eight characters, no padding).
pub fn variables() -> Vec<Variable> {
    let prefix = TOKEN_SECRET_NAME_PREFIX;
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
    ]
}

/// The rules, broad causes first: the request, the token it creates, its data, its
/// metadata, and how it may be deleted or changed.
pub fn rules() -> Vec<Rule> {
    [
        request_rules(),
        token_rules(),
        data_rules(),
        metadata_rules(),
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

/// A bootstrap token Secret named after its token id, which expires.
fn token_rules() -> Vec<Rule> {
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
/// state (bound nodes, denials) as a new token has it.
fn metadata_rules() -> Vec<Rule> {
    let annotations_list = ANNOTATIONS.join(", ");
    vec![
        rule(
            format!(
                "has(object.metadata.labels) && object.metadata.labels.size() == 1 && {l} in \
                 object.metadata.labels && object.metadata.labels[{l}] != ''",
                l = cel_string(FLAVOR_TOKEN_LABEL),
            ),
            format!(
                "metadata.labels must be exactly {FLAVOR_TOKEN_LABEL} (the token's flavor, not empty)"
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
                "has(object.metadata.annotations) && {m} in object.metadata.annotations && \
                 object.metadata.annotations[{m}].matches('^[1-9][0-9]{{0,9}}$') && \
                 int(object.metadata.annotations[{m}]) <= 4294967295",
                m = cel_string(MAX_NODES_ANNOTATION),
            ),
            format!(
                "metadata.annotations[{MAX_NODES_ANNOTATION}] must be a whole number from 1 to 4294967295"
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
    use crate::input_labels::InputLabels;
    use crate::token::BootstrapToken;
    use crate::token_meta::{Custody, FlavorTokenMeta};
    use crate::token_secret::{TokenSecretData, TokenSecretObject, secret_name};
    use std::num::NonZeroU32;

    fn minted() -> crate::token_secret::TokenSecretObject {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let flavor: FlavorName = "sweet".parse().unwrap();
        let custody = Custody {
            issued_to: Some("acme-corp/alice".parse().unwrap()),
            issued_by: Some("system:serviceaccount:portal:portal".into()),
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

    /// The rules describe what `mint` writes: every data key, the one label and every
    /// annotation it writes, with bound nodes and denials as a new token has them.
    #[test]
    fn the_shape_is_what_mint_writes() {
        let secret = minted();
        let keys: Vec<&str> = secret.string_data.keys().map(String::as_str).collect();
        let mut expected = DATA_KEYS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(
            secret.labels.keys().collect::<Vec<_>>(),
            [FLAVOR_TOKEN_LABEL]
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
        let rules = rules();
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

    #[test]
    fn the_policy_applies_to_one_user() {
        assert_eq!(
            applies_to("system:serviceaccount:kubeflavor:kubeflavor-serve"),
            "request.userInfo.username == 'system:serviceaccount:kubeflavor:kubeflavor-serve'"
        );
    }
}
