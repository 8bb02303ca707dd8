//! Schema pieces of the CRDs that the derive cannot express: patterns, bounds, list types,
//! and the CEL (`x-kubernetes-validations`) rules.
//!
//! The label-key rule is the one that matters for security (P2, trusted labels): the API
//! server itself must refuse a Flavor whose labels a kubelet could set on its own Node, so
//! that a Flavor written with `kubectl apply` is held to the same rule as
//! `kubeflavor flavor create`. It restates NodeRestriction
//! (plugin/pkg/admission/noderestriction and k8s.io/kubelet's `IsKubeletLabel`) in CEL:
//!
//! A key is accepted iff it has a prefix (`<prefix>/<name>`) and either
//! - the prefix is `node-restriction.kubernetes.io` or ends with `.node-restriction.kubernetes.io`, or
//! - the prefix is `kubernetes.io`/`k8s.io` or ends with `.kubernetes.io`/`.k8s.io`, AND the
//!   prefix is not `kubelet.kubernetes.io`/`node.kubernetes.io` or one of their subdomains,
//!   AND the key is not one of the eleven well-known keys a kubelet sets itself
//!   ([`KUBELET_KEYS`]).
//!
//! Every other key (no prefix, `example.com/...`, `node.kubernetes.io/...`,
//! `kubernetes.io/hostname`, ...) is one a kubelet may write, and is refused. The test
//! `cel_rule_agrees_with_core` evaluates this exact rule with a CEL interpreter over a table
//! of keys and compares with `kubeflavor_core::flavor::labels::check_flavor_label_key`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kubeflavor_core::flavor::input_labels;
use kubeflavor_core::network;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// The label keys a kubelet may set itself (k8s.io/kubelet `kubeletLabels`).
pub const KUBELET_KEYS: [&str; 11] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// Label keys kubeflavor's controller sets from the Flavor's name and trust level; a
/// Flavor may not set them through `labels`.
pub const RESERVED_KEYS: [&str; 2] = [
    "kubeflavor.node-restriction.kubernetes.io/flavor",
    "kubeflavor.node-restriction.kubernetes.io/trust-level",
];

/// The prefix of the input labels the controller sets from a token's input labels; a
/// Flavor may not set labels under it.
pub const RESERVED_PREFIX: &str = input_labels::INPUT_LABEL_PREFIX;

/// The CEL rule over `spec.labels` (a map: `self.all(k, ...)` ranges over its keys).
pub fn label_key_rule() -> String {
    let kubelet_keys = KUBELET_KEYS
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "self.all(k, k.matches('^([^/]*\\\\.)?node-restriction\\\\.kubernetes\\\\.io/') || \
         (k.matches('^([^/]*\\\\.)?(kubernetes|k8s)\\\\.io/') && \
         !k.matches('^([^/]*\\\\.)?(kubelet|node)\\\\.kubernetes\\\\.io/') && \
         !(k in [{kubelet_keys}])))"
    )
}

pub const LABEL_KEY_MESSAGE: &str = "every label key must be one a kubelet cannot set on its own Node \
     (NodeRestriction): use a key under <x>.node-restriction.kubernetes.io/, e.g. \
     kubeflavor.node-restriction.kubernetes.io/<name>, or a kubernetes.io key outside the kubelet's \
     set such as node-role.kubernetes.io/<role>";

/// Qualified-name syntax of label keys (k8s.io/apimachinery validation.IsQualifiedName):
/// an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63 characters.
pub const QUALIFIED_NAME_PATTERN: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// Label values: empty, or at most 63 characters of `[-A-Za-z0-9_.]` starting and ending
/// alphanumeric.
pub const LABEL_VALUE_PATTERN: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// A DNS-1123 subdomain; Flavor names become label values, so they are also at most 63 long.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// TTLs as `kubeflavor token create --ttl` takes them: hours, minutes, seconds in that
/// order (`24h`, `90m`, `1h30m`), or `0` for a token that never expires.
pub const DURATION_PATTERN: &str = "^(0|([0-9]+h)?([0-9]+m)?([0-9]+s)?)$";

/// Taints kubeflavor's controller manages itself.
pub const RESERVED_TAINTS: [&str; 3] = [
    "kubeflavor.io/unverified",
    "kubeflavor.io/revoked",
    kubeflavor_core::network::SITE_NOT_ALLOWED_TAINT,
];

/// `spec.allowedSites` of a Flavor: site names (label values, `unknown` included).
pub fn allowed_sites(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": network::MAX_SITES,
        "items": { "type": "string", "maxLength": 63, "pattern": NON_EMPTY_LABEL_VALUE_PATTERN },
        "x-kubernetes-list-type": "set"
    })
}

/// `spec.ranges` of a Site: IP ranges, at least one.
pub fn site_ranges(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": network::MAX_RANGES_PER_SITE,
        "items": {
            "type": "string",
            "maxLength": 64,
            "x-kubernetes-validations": [
                rule("isCIDR(self)",
                     "every range must be an IP range such as 10.20.0.0/16 or 2001:db8::/48 (no IPv4-mapped IPv6)"),
            ]
        }
    })
}

/// A Site's name becomes a label value: at most 63 characters, and not `unknown`.
pub fn site_root_rules() -> Vec<ValidationRule> {
    vec![ValidationRule {
        rule: format!(
            "self.metadata.name.size() <= 63 && self.metadata.name != '{}'",
            network::UNKNOWN_SITE
        ),
        message: Some(
            "a Site's name is at most 63 characters and not 'unknown' (kept for addresses no site holds): it becomes the value of the observed.kubeflavor.node-restriction.kubernetes.io/site label"
                .into(),
        ),
        ..Default::default()
    }]
}

fn rule(rule: impl Into<String>, message: &str) -> Value {
    json!({ "rule": rule.into(), "message": message })
}

pub fn flavor_labels(_: &mut SchemaGenerator) -> Schema {
    let reserved = RESERVED_KEYS
        .iter()
        .map(|k| format!("!('{k}' in self)"))
        .collect::<Vec<_>>()
        .join(" && ");
    json_schema!({
        "type": "object",
        "maxProperties": 32,
        "additionalProperties": { "type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN },
        "x-kubernetes-validations": [
            rule(format!("self.all(k, k.matches('{}'))", QUALIFIED_NAME_PATTERN.replace('\\', "\\\\")),
                 "every label key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 characters of [-A-Za-z0-9_.] starting and ending alphanumeric"),
            rule(label_key_rule(), LABEL_KEY_MESSAGE),
            rule(reserved, "kubeflavor sets the flavor and trust-level labels itself: remove them from labels (use spec.trustLevel for the level)"),
            rule(format!("self.all(k, !k.startsWith('{RESERVED_PREFIX}'))"),
                 "kubeflavor sets the labels under input.kubeflavor.node-restriction.kubernetes.io/ from the tokens' input labels: remove them from labels (use spec.inputLabels)"),
            rule(format!("self.all(k, !k.startsWith('{}') && !k.startsWith('{}'))", network::OBSERVED_PREFIX, network::CLAIMED_PREFIX),
                 "kubeflavor sets the labels under observed.kubeflavor.node-restriction.kubernetes.io/ and claimed.kubeflavor.node-restriction.kubernetes.io/ from what it observed of the node's network and what the node reports: remove them from labels (use spec.allowedSites and Site objects)"),
        ]
    })
}

pub fn flavor_taints(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<super::FlavorTaint>();
    json_schema!({
        "type": "array",
        "maxItems": 32,
        "items": item,
        "x-kubernetes-validations": [
            rule("self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",
                 "a taint key may appear only once per effect"),
            rule(format!("self.all(t, {})", RESERVED_TAINTS.iter().map(|k| format!("t.key != '{k}'")).collect::<Vec<_>>().join(" && ")),
                 "kubeflavor manages the kubeflavor.io/unverified, kubeflavor.io/revoked and kubeflavor.io/site-not-allowed taints itself: remove them from the flavor"),
        ]
    })
}

pub fn qualified_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "maxLength": 317, "pattern": QUALIFIED_NAME_PATTERN })
}

pub fn label_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN })
}

/// A label name without a prefix (an input label's key).
pub const LABEL_NAME_PATTERN: &str = "^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A non-empty label value (an input label's value): the same syntax as a label name.
pub const NON_EMPTY_LABEL_VALUE_PATTERN: &str = LABEL_NAME_PATTERN;

pub fn label_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "maxLength": 63, "pattern": LABEL_NAME_PATTERN })
}

pub fn max_input_labels(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "minimum": 1, "maximum": input_labels::MAX_INPUT_KEYS })
}

/// `spec.inputLabels.keys`: a list keyed by `key` (server-side apply merges it by key).
pub fn input_label_keys(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<super::InputLabelKey>();
    json_schema!({
        "type": "array",
        "maxItems": input_labels::MAX_INPUT_KEYS,
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["key"]
    })
}

pub fn input_label_values(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": input_labels::MAX_INPUT_VALUES,
        "items": { "type": "string", "maxLength": 63, "pattern": NON_EMPTY_LABEL_VALUE_PATTERN },
        "x-kubernetes-list-type": "set"
    })
}

/// A pattern: bounded in length, and one the API server's own regular-expression engine
/// (RE2, as kubeflavor's) compiles: `''.matches(self)` fails to evaluate otherwise, and
/// a rule that cannot be evaluated refuses the object.
pub fn input_label_pattern(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": input_labels::MAX_PATTERN_LEN,
        "x-kubernetes-validations": [
            rule("''.matches(self) || !''.matches(self)",
                 "pattern must be a regular expression in RE2 syntax, e.g. seg-[0-9]{1,4}"),
        ]
    })
}

pub fn input_label_key_rules() -> Value {
    json!([rule(
        "has(self.values) != has(self.pattern)",
        "an input label key takes exactly one of values (a list) and pattern (a regular expression)"
    )])
}

/// A binding's `spec.inputLabels`: keys without their prefix, non-empty label values.
pub fn binding_input_labels(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": input_labels::MAX_INPUT_KEYS,
        "additionalProperties": { "type": "string", "maxLength": 63, "pattern": NON_EMPTY_LABEL_VALUE_PATTERN },
        "x-kubernetes-validations": [
            rule(format!("self.all(k, k.matches('{}'))", LABEL_NAME_PATTERN.replace('\\', "\\\\")),
                 "every input label key must be a label name without a prefix: 1-63 characters of [-A-Za-z0-9_.] starting and ending alphanumeric"),
        ]
    })
}

pub fn trust_level(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "minimum": 0, "maximum": 100 })
}

pub fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "minLength": 1, "maxLength": 32, "pattern": DURATION_PATTERN })
}

/// `tokenLimits.maxTTL`: a duration as [`duration`] takes it, but positive: "may never
/// expire" is `allowNeverExpiring`'s to say.
pub fn max_ttl(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": 32,
        "pattern": DURATION_PATTERN,
        "x-kubernetes-validations": [
            rule("!self.matches('^(0|(0+h)?(0+m)?(0+s)?)$')",
                 "maxTTL must be a positive duration such as 168h; to allow tokens that never expire, set allowNeverExpiring: true"),
        ]
    })
}

/// `spec.servingAddresses`: IP ranges, checked by the API server with Kubernetes' CEL
/// `isCIDR` (served since v1.31), which core's `Cidr` reads alike.
pub fn serving_addresses(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": kubeflavor_core::flavor::MAX_SERVING_ADDRESSES,
        "items": {
            "type": "string",
            "maxLength": 64,
            "x-kubernetes-validations": [
                rule("isCIDR(self)",
                     "every serving address must be an IP range such as 10.20.0.0/16 or 2001:db8::/48 (no IPv4-mapped IPv6)"),
            ]
        }
    })
}

pub fn max_nodes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "minimum": 1, "maximum": 10000 })
}

pub fn node_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "maxLength": 253,
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    })
}

pub fn flavor_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "maxLength": 63, "pattern": DNS_SUBDOMAIN_PATTERN })
}

pub fn token_id(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": "^[a-z0-9]{6}$" })
}

pub fn sha256_hex(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": "^[0-9a-f]{64}$" })
}

pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

pub fn condition_status(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["True", "False", "Unknown"] })
}

/// metav1.Condition lists are maps keyed by `type` (so server-side apply merges them).
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<super::Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"]
    })
}

/// `spec.issuedTo` of a FlavorBinding: an IssuedTo as the core checks it when the token is
/// minted (1 to 256 characters; the control-character and whitespace rules stay the
/// core's).
pub fn issued_to(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "minLength": 1, "maxLength": 256 })
}

/// Rules on FlavorBinding.spec: what the binding records may never be rewritten (P3,
/// binding: a binding cannot be moved to another token; its custody is written once, when
/// it is made); revoking is a status change.
pub fn binding_spec_rules() -> Value {
    json!([
        rule(
            "self.node == oldSelf.node && self.tokenId == oldSelf.tokenId && self.flavor == oldSelf.flavor && self.csrName == oldSelf.csrName && self.publicKeySha256 == oldSelf.publicKeySha256 && self.boundAt == oldSelf.boundAt && has(self.tokenUid) == has(oldSelf.tokenUid) && (!has(self.tokenUid) || self.tokenUid == oldSelf.tokenUid)",
            "node, flavor, tokenId, tokenUid, csrName, publicKeySha256 and boundAt of a FlavorBinding are written once, when it is made, and cannot change (delete the binding: its Node loses the flavor, and a new join makes a new binding)"
        ),
        rule(
            "has(self.issuedTo) == has(oldSelf.issuedTo) && (!has(self.issuedTo) || self.issuedTo == oldSelf.issuedTo) && has(self.issuedBy) == has(oldSelf.issuedBy) && (!has(self.issuedBy) || self.issuedBy == oldSelf.issuedBy) && has(self.requestedBy) == has(oldSelf.requestedBy) && (!has(self.requestedBy) || self.requestedBy == oldSelf.requestedBy) && has(self.identity) == has(oldSelf.identity) && (!has(self.identity) || self.identity == oldSelf.identity)",
            "issuedTo, issuedBy, requestedBy and identity of a FlavorBinding are written once, when it is made, and cannot be added, changed or removed"
        ),
        rule(
            "has(self.inputLabels) == has(oldSelf.inputLabels) && (!has(self.inputLabels) || self.inputLabels == oldSelf.inputLabels)",
            "inputLabels of a FlavorBinding are written once, when it is made, and cannot be added, changed or removed"
        ),
    ])
}

pub fn flavor_root_rules() -> Vec<ValidationRule> {
    vec![ValidationRule {
        rule: "self.metadata.name.size() <= 63".into(),
        message: Some(
            "a Flavor name is at most 63 characters: it becomes the value of the kubeflavor.node-restriction.kubernetes.io/flavor label"
                .into(),
        ),
        ..Default::default()
    }]
}

pub fn binding_root_rules() -> Vec<ValidationRule> {
    vec![ValidationRule {
        rule: "self.metadata.name == self.spec.node".into(),
        message: Some(
            "a FlavorBinding is named after its node: metadata.name must equal spec.node".into(),
        ),
        ..Default::default()
    }]
}

/// Add rules that look at the whole object (`self.metadata.name`): they belong on the
/// schema's root, which the derive does not reach.
pub fn add_root_rules(crd: &mut CustomResourceDefinition, rules: Vec<ValidationRule>) {
    for version in &mut crd.spec.versions {
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            root.x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .extend(rules.iter().cloned());
        }
    }
}
