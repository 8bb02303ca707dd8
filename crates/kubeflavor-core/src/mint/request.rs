//! The body of a join-token mint request (`POST /v1/flavors/{flavor}/jointokens` of
//! `kubeflavor serve`), decided here: parsed strictly, every problem reported by field, in
//! the shape of the Kubernetes API server's `Invalid` causes.
//!
//! ```json
//! {"issuedTo": "acme-corp/alice", "ttl": "24h", "maxNodes": 1, "output": "cloud-init",
//!  "labels": {"site": "berlin"}}
//! ```
//!
//! `labels` are the node administrator's input labels ([`crate::flavor::input_labels`]): read here
//! as plain strings, admitted against the Flavor's allowlist by [`within_limits`].
//! `sshAuthorizedKeys` are OpenSSH public keys for the cloud-init document
//! ([`crate::mint::ssh_key`]), checked here whole.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::flavor::FlavorRules;
use crate::flavor::input_labels::{InputLabelRefusal, InputLabels, MAX_INPUT_KEYS};
use crate::flavor::token_limits::LimitExceeded;
use crate::flavor::ttl::TokenTtl;
use crate::mint::ssh_key::{MAX_SSH_KEYS, SshKeyListError, SshPublicKey, check_keys};
use crate::token::meta::IssuedTo;

/// The largest body accepted: room for ten of the largest SSH keys taken (RSA 16384 bits,
/// about 2.8 KiB each) and the rest of a request, which is well under 1 KiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A valid mint request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintRequest {
    /// On whose behalf the token is minted (e.g. `acme-corp/alice`), kept with the token
    /// and copied into the binding of every node that joins with it.
    pub issued_to: IssuedTo,
    /// The token's lifetime; `None`: the flavor's default, else 24h.
    pub ttl: Option<TokenTtl>,
    /// How many node names the token may bind; `None`: the flavor's default, else 1.
    pub max_nodes: Option<NonZeroU32>,
    pub output: MintOutput,
    /// The input labels asked for, as sent (the Flavor decides which it allows).
    pub labels: BTreeMap<String, String>,
    /// Keys the cloud-init document installs for the image's default user.
    pub ssh_authorized_keys: Vec<SshPublicKey>,
}

/// What the answer carries besides the token and the join line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MintOutput {
    /// The token, its id, expiry and the `kubeadm join` line.
    Json,
    /// The same and a cloud-init user-data document that joins the machine on first boot.
    CloudInit,
}

/// Why one field was refused, as the API server names it in a Status cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldReason {
    Required,
    Invalid,
    NotSupported,
    Forbidden,
    TooMany,
    Duplicate,
}

impl FieldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldReason::Required => "FieldValueRequired",
            FieldReason::Invalid => "FieldValueInvalid",
            FieldReason::NotSupported => "FieldValueNotSupported",
            FieldReason::Forbidden => "FieldValueForbidden",
            FieldReason::TooMany => "FieldValueTooMany",
            FieldReason::Duplicate => "FieldValueDuplicate",
        }
    }
}

/// One refused field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: String,
    pub reason: FieldReason,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintRequestError {
    #[error("the request body has {0} bytes; at most {MAX_BODY_BYTES} are accepted")]
    TooLarge(usize),
    #[error("the request body is not a JSON object: {0}")]
    Malformed(String),
    #[error(
        "the request body repeats the key {0:?}; JSON readers disagree on which copy counts, so send each key once"
    )]
    DuplicateKey(String),
    #[error("the request is invalid: {}", describe(.0))]
    Invalid(Vec<FieldProblem>),
}

fn describe(problems: &[FieldProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The fields a request may carry.
pub const FIELDS: [&str; 6] = [
    "issuedTo",
    "ttl",
    "maxNodes",
    "output",
    "labels",
    "sshAuthorizedKeys",
];

/// Parses and checks a request body. Every field problem is reported, not just the first.
pub fn parse(body: &[u8]) -> Result<MintRequest, MintRequestError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(MintRequestError::TooLarge(body.len()));
    }
    let value = read_json(body)?;
    let Value::Object(fields) = value else {
        return Err(MintRequestError::Malformed(
            "it is JSON but not an object (send {\"issuedTo\": \"...\"})".into(),
        ));
    };
    let mut problems = Vec::new();
    for name in fields.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        problems.push(FieldProblem {
            field: name.clone(),
            reason: FieldReason::NotSupported,
            message: format!("unknown field; the fields are {}", FIELDS.join(", ")),
        });
    }
    let issued_to = issued_to(&fields, &mut problems);
    let ttl = ttl(&fields, &mut problems);
    let max_nodes = max_nodes(&fields, &mut problems);
    let output = output(&fields, &mut problems);
    let labels = labels(&fields, &mut problems);
    let ssh_authorized_keys = ssh_authorized_keys(&fields, &mut problems);
    match (issued_to, problems.is_empty()) {
        (Some(issued_to), true) => Ok(MintRequest {
            issued_to,
            ttl,
            max_nodes,
            output,
            labels,
            ssh_authorized_keys,
        }),
        _ => Err(MintRequestError::Invalid(problems)),
    }
}

/// The fields a node administrator's request may carry: the rest (for whom, how long, how
/// many nodes) is the roster's to decide, from the verified identity.
pub const ADMINISTRATOR_FIELDS: [&str; 3] = ["output", "labels", "sshAuthorizedKeys"];

/// What a node administrator asks `POST /v1/jointokens` for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdministratorRequest {
    pub output: MintOutput,
    pub labels: BTreeMap<String, String>,
    pub ssh_authorized_keys: Vec<SshPublicKey>,
}

/// Parses a node administrator's request body: only [`ADMINISTRATOR_FIELDS`]; `issuedTo`,
/// `ttl` and `maxNodes` are refused by name (the identity provider says who they are, the
/// owner's roster how long and how many).
pub fn parse_for_administrator(body: &[u8]) -> Result<AdministratorRequest, MintRequestError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(MintRequestError::TooLarge(body.len()));
    }
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        read_json(body)?
    };
    let Value::Object(fields) = value else {
        return Err(MintRequestError::Malformed(
            "it is JSON but not an object (send {} or {\"sshAuthorizedKeys\": [...]})".into(),
        ));
    };
    let mut problems = Vec::new();
    for name in fields.keys() {
        let message = match name.as_str() {
            "issuedTo" => "set by kubeflavor from your sign-in; remove it",
            "ttl" | "maxNodes" => "set by the cluster's owner for every token; remove it",
            n if ADMINISTRATOR_FIELDS.contains(&n) => continue,
            _ => "unknown field; the fields are output, labels, sshAuthorizedKeys",
        };
        problems.push(FieldProblem {
            field: name.clone(),
            reason: FieldReason::NotSupported,
            message: message.into(),
        });
    }
    let output = output(&fields, &mut problems);
    let labels = labels(&fields, &mut problems);
    let ssh_authorized_keys = ssh_authorized_keys(&fields, &mut problems);
    if problems.is_empty() {
        Ok(AdministratorRequest {
            output,
            labels,
            ssh_authorized_keys,
        })
    } else {
        Err(MintRequestError::Invalid(problems))
    }
}

/// The body as JSON, refusing a key repeated in any object: serde_json keeps the last of
/// two equal keys, other readers the first, so a body with both could be checked as one
/// request and acted on as another.
fn read_json(body: &[u8]) -> Result<Value, MintRequestError> {
    let repeated = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_slice(body);
    let value = UniqueKeys {
        path: String::new(),
        repeated: &repeated,
    }
    .deserialize(&mut reader)
    .and_then(|value| reader.end().map(|()| value));
    match (value, repeated.into_inner()) {
        (_, Some(path)) => Err(MintRequestError::DuplicateKey(path)),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(MintRequestError::Malformed(format!(
            "{e} (send a JSON object such as {{\"issuedTo\": \"acme-corp/alice\"}})"
        ))),
    }
}

/// Builds a JSON value as serde_json's own `Value` does, but stops at the first key an
/// object repeats and records where it is (`ttl`, `x.k`, `x[1].k`).
struct UniqueKeys<'a> {
    path: String,
    repeated: &'a RefCell<Option<String>>,
}

impl UniqueKeys<'_> {
    fn child(&self, step: String) -> Self {
        UniqueKeys {
            path: step,
            repeated: self.repeated,
        }
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) =
            seq.next_element_seed(self.child(format!("{}[{}]", self.path, items.len())))?
        {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if fields.contains_key(&key) {
                let message = format!("duplicate key {path:?}");
                *self.repeated.borrow_mut() = Some(path);
                return Err(de::Error::custom(message));
            }
            let value = map.next_value_seed(self.child(path))?;
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

/// What a request is granted by its flavor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub ttl: TokenTtl,
    pub max_nodes: NonZeroU32,
    pub input_labels: InputLabels,
}

/// The TTL and max nodes of `request` once the flavor's defaults fill what it leaves out,
/// and its input labels, if the flavor's token limits and input-label rules allow them;
/// else every limit broken and every label refused, as field problems (the join-token API
/// answers them as a 422, like its other field problems).
pub fn within_limits(
    request: &MintRequest,
    rules: &FlavorRules,
) -> Result<Grant, MintRequestError> {
    let (ttl, max_nodes) = rules.granted(request.ttl, request.max_nodes);
    let exceeded = rules.effective_token_limits().check(ttl, max_nodes);
    let mut problems: Vec<FieldProblem> = exceeded
        .iter()
        .map(|e| {
            let asked = match e.field() {
                "ttl" => request.ttl.is_some(),
                _ => request.max_nodes.is_some(),
            };
            FieldProblem {
                field: e.field().into(),
                reason: match e {
                    LimitExceeded::NeverExpiring => FieldReason::Forbidden,
                    _ => FieldReason::Invalid,
                },
                message: if asked {
                    e.to_string()
                } else {
                    format!(
                        "{e} (the request named no {}: the flavor's default was used)",
                        e.field()
                    )
                },
            }
        })
        .collect();
    let input_labels = match rules.input_labels().admit(&request.labels) {
        Ok(labels) => Some(labels),
        Err(refusal) => {
            problems.extend(label_problems(refusal));
            None
        }
    };
    match input_labels {
        Some(input_labels) if problems.is_empty() => Ok(Grant {
            ttl,
            max_nodes,
            input_labels,
        }),
        _ => Err(MintRequestError::Invalid(problems)),
    }
}

/// A refusal of input labels as field problems: one per key, named as the API server names
/// map entries (`labels[site]`), the same message whether the flavor does not know the key
/// or does not allow the value.
pub fn label_problems(refusal: InputLabelRefusal) -> Vec<FieldProblem> {
    match refusal {
        InputLabelRefusal::NotAllowed(keys) => keys
            .into_iter()
            .map(|key| FieldProblem {
                field: format!("labels[{key}]"),
                reason: FieldReason::NotSupported,
                message: "not an input label this flavor takes, or not a value it allows for the key (ask the cluster owner which input labels the flavor takes)".into(),
            })
            .collect(),
        InputLabelRefusal::TooMany { count, max } => vec![FieldProblem {
            field: "labels".into(),
            reason: FieldReason::TooMany,
            message: format!("{count} input labels; this flavor takes at most {max}"),
        }],
    }
}

fn problem(problems: &mut Vec<FieldProblem>, field: &str, reason: FieldReason, message: String) {
    problems.push(FieldProblem {
        field: field.into(),
        reason,
        message,
    });
}

fn issued_to(fields: &Map<String, Value>, problems: &mut Vec<FieldProblem>) -> Option<IssuedTo> {
    let field = "issuedTo";
    let Some(value) = fields.get(field) else {
        problem(
            problems,
            field,
            FieldReason::Required,
            "say on whose behalf the token is minted, e.g. \"acme-corp/alice\"".into(),
        );
        return None;
    };
    let Some(text) = value.as_str() else {
        problem(
            problems,
            field,
            FieldReason::Invalid,
            "must be a string".into(),
        );
        return None;
    };
    match text.parse::<IssuedTo>() {
        Ok(issued_to) => Some(issued_to),
        Err(e) => {
            problem(problems, field, FieldReason::Invalid, e.to_string());
            None
        }
    }
}

fn ttl(fields: &Map<String, Value>, problems: &mut Vec<FieldProblem>) -> Option<TokenTtl> {
    let value = fields.get("ttl")?;
    let Some(text) = value.as_str() else {
        problem(
            problems,
            "ttl",
            FieldReason::Invalid,
            "must be a string such as \"24h\" or \"90m\"".into(),
        );
        return None;
    };
    match text.parse::<TokenTtl>() {
        // The API server refuses the join-token API's identity a token without an
        // expiration (the policy `install --serve` ships): say so here, per field.
        Ok(TokenTtl::Never) => {
            problem(
                problems,
                "ttl",
                FieldReason::Invalid,
                "must be a duration such as \"24h\": the join-token API mints only tokens that expire"
                    .into(),
            );
            None
        }
        Ok(ttl) => Some(ttl),
        Err(e) => {
            problem(problems, "ttl", FieldReason::Invalid, e.to_string());
            None
        }
    }
}

fn max_nodes(fields: &Map<String, Value>, problems: &mut Vec<FieldProblem>) -> Option<NonZeroU32> {
    let value = fields.get("maxNodes")?;
    let n = value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .and_then(NonZeroU32::new);
    if n.is_none() {
        problem(
            problems,
            "maxNodes",
            FieldReason::Invalid,
            format!("must be a whole number from 1 to {}", u32::MAX),
        );
    }
    n
}

fn output(fields: &Map<String, Value>, problems: &mut Vec<FieldProblem>) -> MintOutput {
    match fields.get("output").map(Value::as_str) {
        None | Some(Some("json")) => MintOutput::Json,
        Some(Some("cloud-init")) => MintOutput::CloudInit,
        Some(_) => {
            problem(
                problems,
                "output",
                FieldReason::NotSupported,
                "must be \"json\" or \"cloud-init\"".into(),
            );
            MintOutput::Json
        }
    }
}

/// `labels`: an object of strings, at most [`MAX_INPUT_KEYS`] entries (which of them the
/// flavor allows is [`within_limits`]' question).
fn labels(
    fields: &Map<String, Value>,
    problems: &mut Vec<FieldProblem>,
) -> BTreeMap<String, String> {
    let Some(value) = fields.get("labels") else {
        return BTreeMap::new();
    };
    let Some(object) = value.as_object() else {
        problem(
            problems,
            "labels",
            FieldReason::Invalid,
            "must be an object of input label keys to values, e.g. {\"site\": \"berlin\"}".into(),
        );
        return BTreeMap::new();
    };
    if object.len() > MAX_INPUT_KEYS {
        problem(
            problems,
            "labels",
            FieldReason::TooMany,
            format!(
                "{} input labels; at most {MAX_INPUT_KEYS} are taken",
                object.len()
            ),
        );
        return BTreeMap::new();
    }
    let mut labels = BTreeMap::new();
    for (key, value) in object {
        match value.as_str() {
            Some(v) => {
                labels.insert(key.clone(), v.to_owned());
            }
            None => problem(
                problems,
                &format!("labels[{key}]"),
                FieldReason::Invalid,
                "must be a string".into(),
            ),
        }
    }
    labels
}

/// `sshAuthorizedKeys`: at most [`MAX_SSH_KEYS`] strings, each one OpenSSH public key, none
/// given twice; each bad entry reported on its own (`sshAuthorizedKeys[1]`).
fn ssh_authorized_keys(
    fields: &Map<String, Value>,
    problems: &mut Vec<FieldProblem>,
) -> Vec<SshPublicKey> {
    let field = "sshAuthorizedKeys";
    let Some(value) = fields.get(field) else {
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        problem(
            problems,
            field,
            FieldReason::Invalid,
            "must be a list of OpenSSH public keys, e.g. [\"ssh-ed25519 AAAA... alice@laptop\"]"
                .into(),
        );
        return Vec::new();
    };
    if items.len() > MAX_SSH_KEYS {
        problem(
            problems,
            field,
            FieldReason::TooMany,
            format!("{} keys; at most {MAX_SSH_KEYS} are taken", items.len()),
        );
        return Vec::new();
    }
    let before = problems.len();
    let mut keys = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = format!("{field}[{index}]");
        match item.as_str().map(str::parse::<SshPublicKey>) {
            Some(Ok(key)) => keys.push(key),
            Some(Err(e)) => problem(problems, &at, FieldReason::Invalid, e.to_string()),
            None => problem(
                problems,
                &at,
                FieldReason::Invalid,
                "must be a string".into(),
            ),
        }
    }
    if problems.len() > before {
        return Vec::new();
    }
    match check_keys(&keys) {
        Ok(()) => keys,
        Err(SshKeyListError::Duplicate { index, first, .. }) => {
            problem(
                problems,
                &format!("{field}[{index}]"),
                FieldReason::Duplicate,
                format!("the same key as {field}[{first}]; give each key once"),
            );
            Vec::new()
        }
        Err(e) => {
            problem(problems, field, FieldReason::Invalid, e.to_string());
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::meta::ISSUED_TO_MAX_CHARS;

    fn fields_of(err: MintRequestError) -> Vec<(String, FieldReason)> {
        match err {
            MintRequestError::Invalid(p) => p.into_iter().map(|p| (p.field, p.reason)).collect(),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_full_request_is_read() {
        let r = parse(
            br#"{"issuedTo":"acme-corp/alice","ttl":"1h30m","maxNodes":3,"output":"cloud-init"}"#,
        )
        .expect("valid");
        assert_eq!(r.issued_to.as_str(), "acme-corp/alice");
        assert_eq!(r.ttl, Some(TokenTtl::Seconds(5400)));
        assert_eq!(r.max_nodes, NonZeroU32::new(3));
        assert_eq!(r.output, MintOutput::CloudInit);
    }

    #[test]
    fn only_issued_to_is_required() {
        let r = parse(br#"{"issuedTo":"bob"}"#).expect("valid");
        assert_eq!(
            (r.ttl, r.max_nodes, r.output),
            (None, None, MintOutput::Json)
        );
        assert_eq!(
            fields_of(parse(b"{}").unwrap_err()),
            [("issuedTo".to_string(), FieldReason::Required)]
        );
    }

    #[test]
    fn every_bad_field_is_reported() {
        let err =
            parse(br#"{"issuedTo":"","ttl":"-1h","maxNodes":0,"output":"xml","flavor":"sweet"}"#)
                .unwrap_err();
        let mut got = fields_of(err);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            [
                ("flavor".to_string(), FieldReason::NotSupported),
                ("issuedTo".to_string(), FieldReason::Invalid),
                ("maxNodes".to_string(), FieldReason::Invalid),
                ("output".to_string(), FieldReason::NotSupported),
                ("ttl".to_string(), FieldReason::Invalid),
            ]
        );
    }

    #[test]
    fn a_token_that_never_expires_is_refused() {
        let err = parse(br#"{"issuedTo":"bob","ttl":"0"}"#).unwrap_err();
        let MintRequestError::Invalid(problems) = err else {
            panic!("expected Invalid");
        };
        assert_eq!(
            problems,
            [FieldProblem {
                field: "ttl".into(),
                reason: FieldReason::Invalid,
                message: "must be a duration such as \"24h\": the join-token API mints only tokens that expire".into(),
            }]
        );
    }

    #[test]
    fn wrong_types_are_invalid_not_malformed() {
        let err = parse(br#"{"issuedTo":7,"ttl":24,"maxNodes":"1"}"#).unwrap_err();
        assert_eq!(fields_of(err).len(), 3);
        assert!(parse(br#"{"issuedTo":"a","maxNodes":4294967296}"#).is_err());
        assert!(parse(br#"{"issuedTo":"a","maxNodes":-1}"#).is_err());
        assert!(parse(br#"{"issuedTo":"a","maxNodes":1.5}"#).is_err());
    }

    #[test]
    fn issued_to_follows_the_custody_rules() {
        let long = format!(
            r#"{{"issuedTo":"{}"}}"#,
            "x".repeat(ISSUED_TO_MAX_CHARS + 1)
        );
        for body in [
            r#"{"issuedTo":" alice"}"#,
            r#"{"issuedTo":"al\nice"}"#,
            long.as_str(),
        ] {
            assert_eq!(
                fields_of(parse(body.as_bytes()).unwrap_err()),
                [("issuedTo".to_string(), FieldReason::Invalid)],
                "{body}"
            );
        }
        assert!(parse("{\"issuedTo\":\"Zoë Ωmega\"}".as_bytes()).is_ok());
    }

    /// serde_json keeps the last of two equal keys, another reader may keep the first: a
    /// body that says two things is refused, whatever the depth and however the key is
    /// spelled (a `\u0054` escape is the letter `T`).
    #[test]
    fn a_repeated_key_is_refused_at_any_depth() {
        for (body, key) in [
            (
                &br#"{"issuedTo":"alice","issuedTo":"mallory"}"#[..],
                "issuedTo",
            ),
            (
                br#"{"issuedTo":"a","ttl":"1h","maxNodes":1,"ttl":"0"}"#,
                "ttl",
            ),
            (br#"{"issuedTo":"a","issued\u0054o":"b"}"#, "issuedTo"),
            (br#"{"issuedTo":"a","x":{"k":1,"k":2}}"#, "x.k"),
            (br#"{"issuedTo":"a","x":[{"k":1},{"k":1,"k":2}]}"#, "x[1].k"),
            (
                br#"{"maxNodes":{"a":{"b":[[{"c":1,"c":1}]]}}}"#,
                "maxNodes.a.b[0][0].c",
            ),
        ] {
            assert_eq!(
                parse(body),
                Err(MintRequestError::DuplicateKey(key.into())),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let message = parse(br#"{"issuedTo":"a","issuedTo":"b"}"#)
            .unwrap_err()
            .to_string();
        assert!(message.contains("\"issuedTo\""), "{message}");
        // Equal keys in different objects are no repeat.
        assert_eq!(
            fields_of(parse(br#"{"issuedTo":"a","x":[{"k":1},{"k":2}]}"#).unwrap_err()),
            [("x".to_string(), FieldReason::NotSupported)]
        );
    }

    #[test]
    fn not_an_object_or_not_json_is_malformed() {
        for body in [&b"[]"[..], b"\"alice\"", b"{", b"", b"null"] {
            assert!(
                matches!(parse(body), Err(MintRequestError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn an_oversized_body_is_refused_before_parsing() {
        let mut body = br#"{"issuedTo":"a","pad":""#.to_vec();
        body.resize(MAX_BODY_BYTES + 1, b' ');
        assert_eq!(
            parse(&body),
            Err(MintRequestError::TooLarge(MAX_BODY_BYTES + 1))
        );
    }

    fn flavor_taking_site() -> FlavorRules {
        let spec: crate::flavor::FlavorSpec = serde_json::from_value(serde_json::json!({
            "tokenLimits": {"maxNodes": 2},
            "inputLabels": {"maxLabels": 1, "keys": [
                {"key": "site", "values": ["berlin", "paris"]},
                {"key": "segment", "pattern": "seg-[0-9]{1,3}"},
            ]},
        }))
        .unwrap();
        FlavorRules::from_spec(&spec).unwrap()
    }

    #[test]
    fn allowed_labels_are_granted_and_others_refused_per_key() {
        let rules = flavor_taking_site();
        let r = parse(br#"{"issuedTo":"bob","labels":{"site":"paris"}}"#).unwrap();
        let grant = within_limits(&r, &rules).expect("allowed");
        assert_eq!(grant.input_labels.summary(), "site=paris");
        let r = parse(br#"{"issuedTo":"bob","labels":{"site":"rome","rack":"r1"},"maxNodes":3}"#)
            .unwrap();
        let problems = match within_limits(&r, &rules).unwrap_err() {
            MintRequestError::Invalid(p) => p,
            other => panic!("{other:?}"),
        };
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["maxNodes", "labels[rack]", "labels[site]"]);
        // One answer for an unknown key and a disallowed value.
        assert_eq!(problems[1].message, problems[2].message);
        assert_eq!(problems[1].reason, FieldReason::NotSupported);
        let r =
            parse(br#"{"issuedTo":"bob","labels":{"site":"paris","segment":"seg-1"}}"#).unwrap();
        assert_eq!(
            fields_of(within_limits(&r, &rules).unwrap_err()),
            [("labels".to_string(), FieldReason::TooMany)]
        );
        // A flavor without input-label rules takes none.
        let plain = FlavorRules::from_spec(&Default::default()).unwrap();
        let r = parse(br#"{"issuedTo":"bob","labels":{"site":"paris"}}"#).unwrap();
        assert_eq!(
            fields_of(within_limits(&r, &plain).unwrap_err()),
            [("labels[site]".to_string(), FieldReason::NotSupported)]
        );
        let r = parse(br#"{"issuedTo":"bob"}"#).unwrap();
        assert!(within_limits(&r, &plain).unwrap().input_labels.is_empty());
    }

    #[test]
    fn labels_must_be_an_object_of_strings() {
        for (body, field) in [
            (&br#"{"issuedTo":"bob","labels":["site"]}"#[..], "labels"),
            (br#"{"issuedTo":"bob","labels":{"site":1}}"#, "labels[site]"),
            (br#"{"issuedTo":"bob","labels":"site=paris"}"#, "labels"),
        ] {
            let got = fields_of(parse(body).unwrap_err());
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].0, field);
        }
        let many: serde_json::Map<String, Value> = (0..=MAX_INPUT_KEYS)
            .map(|i| (format!("k{i}"), Value::from("v")))
            .collect();
        let body = serde_json::json!({"issuedTo": "bob", "labels": many}).to_string();
        assert_eq!(
            fields_of(parse(body.as_bytes()).unwrap_err()),
            [("labels".to_string(), FieldReason::TooMany)]
        );
    }

    /// An ed25519 key line as ssh-keygen writes it, of 32 sample bytes.
    fn ed25519_line(byte: u8, comment: &str) -> String {
        SshPublicKey::ed25519(&[byte; 32], Some(comment))
            .unwrap()
            .to_string()
    }

    #[test]
    fn ssh_keys_are_read_whole_and_each_problem_named() {
        let (a, b) = (ed25519_line(1, "alice@laptop"), ed25519_line(2, "bob"));
        let body = serde_json::json!({"issuedTo": "x", "sshAuthorizedKeys": [a, b]}).to_string();
        let r = parse(body.as_bytes()).expect("valid");
        assert_eq!(r.ssh_authorized_keys.len(), 2);
        assert_eq!(r.ssh_authorized_keys[0].to_string(), a);
        let bad = serde_json::json!({"issuedTo": "x", "sshAuthorizedKeys": [
            a, "ssh-dss AAAA", 7, format!("command=\"sh\" {b}"),
        ]})
        .to_string();
        assert_eq!(
            fields_of(parse(bad.as_bytes()).unwrap_err()),
            [
                ("sshAuthorizedKeys[1]".to_string(), FieldReason::Invalid),
                ("sshAuthorizedKeys[2]".to_string(), FieldReason::Invalid),
                ("sshAuthorizedKeys[3]".to_string(), FieldReason::Invalid),
            ]
        );
        let again = serde_json::json!({"issuedTo": "x", "sshAuthorizedKeys": [
            a, ed25519_line(1, "another comment"),
        ]})
        .to_string();
        assert_eq!(
            fields_of(parse(again.as_bytes()).unwrap_err()),
            [("sshAuthorizedKeys[1]".to_string(), FieldReason::Duplicate)]
        );
        let many: Vec<String> = (0..=MAX_SSH_KEYS as u8)
            .map(|i| ed25519_line(i, "k"))
            .collect();
        let body = serde_json::json!({"issuedTo": "x", "sshAuthorizedKeys": many}).to_string();
        assert_eq!(
            fields_of(parse(body.as_bytes()).unwrap_err()),
            [("sshAuthorizedKeys".to_string(), FieldReason::TooMany)]
        );
        let body = br#"{"issuedTo": "x", "sshAuthorizedKeys": "ssh-ed25519 AAAA"}"#;
        assert_eq!(
            fields_of(parse(body).unwrap_err()),
            [("sshAuthorizedKeys".to_string(), FieldReason::Invalid)]
        );
    }
}
