//! The body of a join-token mint request (`POST /v1/flavors/{flavor}/jointokens` of
//! `kubeflavor serve`), decided here: parsed strictly, every problem reported by field, in
//! the shape of the Kubernetes API server's `Invalid` causes.
//!
//! ```json
//! {"issuedTo": "acme-corp/alice", "ttl": "24h", "maxNodes": 1, "output": "cloud-init"}
//! ```

use std::cell::RefCell;
use std::fmt;
use std::num::NonZeroU32;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::flavor::FlavorRules;
use crate::token_limits::LimitExceeded;
use crate::token_meta::IssuedTo;
use crate::ttl::TokenTtl;

/// The largest body accepted: a valid request is well under 1 KiB.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

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
}

impl FieldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldReason::Required => "FieldValueRequired",
            FieldReason::Invalid => "FieldValueInvalid",
            FieldReason::NotSupported => "FieldValueNotSupported",
            FieldReason::Forbidden => "FieldValueForbidden",
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
pub const FIELDS: [&str; 4] = ["issuedTo", "ttl", "maxNodes", "output"];

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
    match (issued_to, problems.is_empty()) {
        (Some(issued_to), true) => Ok(MintRequest {
            issued_to,
            ttl,
            max_nodes,
            output,
        }),
        _ => Err(MintRequestError::Invalid(problems)),
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

/// The TTL and max nodes of `request` once the flavor's defaults fill what it leaves out,
/// if the flavor's token limits allow them; else every limit broken, as field problems
/// (the join-token API answers them as a 422, like its other field problems).
pub fn within_limits(
    request: &MintRequest,
    rules: &FlavorRules,
) -> Result<(TokenTtl, NonZeroU32), MintRequestError> {
    let (ttl, max_nodes) = rules.granted(request.ttl, request.max_nodes);
    let exceeded = rules.effective_token_limits().check(ttl, max_nodes);
    if exceeded.is_empty() {
        return Ok((ttl, max_nodes));
    }
    let problems = exceeded
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
    Err(MintRequestError::Invalid(problems))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token_meta::ISSUED_TO_MAX_CHARS;

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
}
