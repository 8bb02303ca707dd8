//! `x-kubernetes-validations`: each rule is evaluated with `self` bound to the value at its
//! node (and `oldSelf` to the correlated old value on update), as apiextensions-apiserver's
//! `schema/cel` validator does: a node's rules before its children's, rules using `oldSelf`
//! skipped when there is no old value, nothing evaluated for absent or null values. The
//! failure is reported on the node's path (or the rule's `fieldPath`) with the rule's
//! `message` (or `messageExpression`, or `failed rule: <rule>`) and `reason`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use cel::objects::{Key, Map as CelMap, OptionalValue};
use cel::{Context, ExecutionError, Program, Value as Cel};
use serde_json::Value;

use super::cel_functions::base_context;
use super::schema::correlated_item;
use super::{cause, go_value, quote};
use crate::errors::FieldError;

pub fn validate(schema: &Value, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let ctx = base_context();
    let mut errs = Vec::new();
    walk(&ctx, schema, "", new, old, true, &mut errs);
    errs
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn field(path: &str) -> String {
    if path.is_empty() {
        "<nil>".into()
    } else {
        path.into()
    }
}

fn walk(
    ctx: &Context,
    schema: &Value,
    path: &str,
    v: &Value,
    old: Option<&Value>,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    if v.is_null() {
        return;
    }
    if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
        let this = to_cel(schema, v, root);
        let before = old
            .filter(|o| !o.is_null())
            .map(|o| to_cel(schema, o, root));
        for rule in rules {
            check_rule(
                ctx,
                schema,
                path,
                v,
                old,
                &this,
                before.as_ref(),
                rule,
                errs,
            );
        }
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, sub) in props {
                    if root && k == "metadata" {
                        continue;
                    }
                    if let Some(x) = map.get(k) {
                        walk(
                            ctx,
                            sub,
                            &child(path, k),
                            x,
                            old.and_then(|o| o.get(k)),
                            false,
                            errs,
                        );
                    }
                }
            } else if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, x) in map {
                    let p = format!("{path}[{k}]");
                    walk(ctx, sub, &p, x, old.and_then(|o| o.get(k)), false, errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    let old_item = correlated_item(schema, item, old);
                    walk(
                        ctx,
                        sub,
                        &format!("{path}[{i}]"),
                        item,
                        old_item,
                        false,
                        errs,
                    );
                }
            }
        }
        _ => {}
    }
}

thread_local! {
    static PROGRAMS: RefCell<HashMap<String, Result<Rc<Program>, String>>> = RefCell::new(HashMap::new());
}

pub(crate) fn compile(text: &str) -> Result<Rc<Program>, String> {
    PROGRAMS.with(|cache| {
        // A lookup first: the key is copied only when a program is compiled.
        if let Some(program) = cache.borrow().get(text) {
            return program.clone();
        }
        let program = Program::compile(text)
            .map(Rc::new)
            .map_err(|e| e.to_string());
        cache.borrow_mut().insert(text.to_string(), program.clone());
        program
    })
}

/// `message`, else `failed rule: <rule>` (apiextensions' `ruleMessageOrDefault`).
fn rule_message(rule: &Value) -> String {
    match rule["message"]
        .as_str()
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        Some(m) => m.to_string(),
        None => format!("failed rule: {}", rule_text(rule)),
    }
}

/// `message`, else the rule itself (`ruleErrorString`).
fn rule_text(rule: &Value) -> String {
    match rule["message"]
        .as_str()
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        Some(m) => m.to_string(),
        None => rule["rule"].as_str().unwrap_or("").trim().to_string(),
    }
}

fn type_value(schema: &Value) -> String {
    quote(schema["type"].as_str().unwrap_or(""))
}

pub(crate) fn execute(program: &Program, ctx: &Context) -> Result<Cel, String> {
    // The interpreter panics on a few constructs it does not support (struct literals).
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(ctx))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ExecutionError::NoSuchKey(k))) => Err(format!("no such key: {k}")),
        Ok(Err(
            ExecutionError::NoSuchOverload(_)
            | ExecutionError::UnsupportedBinaryOperator(..)
            | ExecutionError::UnexpectedType { .. }
            | ExecutionError::UnsupportedTargetType { .. },
        )) => Err("no such overload".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("testkube's CEL interpreter cannot evaluate this expression".into()),
    }
}

#[allow(clippy::too_many_arguments)]
fn check_rule(
    base: &Context,
    schema: &Value,
    path: &str,
    v: &Value,
    old: Option<&Value>,
    this: &Cel,
    before: Option<&Cel>,
    rule: &Value,
    errs: &mut Vec<FieldError>,
) {
    let text = rule["rule"].as_str().unwrap_or("").trim();
    if text.is_empty() {
        return;
    }
    let program = match compile(text) {
        Ok(p) => p,
        Err(e) => {
            errs.push(cause(
                "FieldValueInvalid",
                &field(path),
                format!(
                    "Invalid value: {}: rule compile error: {e}",
                    type_value(schema)
                ),
            ));
            return;
        }
    };
    let uses_old = program.references().has_variable("oldSelf");
    let optional_old = rule["optionalOldSelf"].as_bool() == Some(true);
    if uses_old && before.is_none() && !optional_old {
        return;
    }
    // Ratcheting: a rule without oldSelf keeps passing an unchanged value.
    if !uses_old && old == Some(v) {
        return;
    }
    let mut ctx = base.new_inner_scope();
    ctx.add_variable_from_value("self", this.clone());
    match (optional_old, before) {
        (true, b) => ctx.add_variable_from_value(
            "oldSelf",
            Cel::Opaque(Arc::new(match b {
                Some(b) => OptionalValue::of(b.clone()),
                None => OptionalValue::none(),
            })),
        ),
        (false, Some(b)) => ctx.add_variable_from_value("oldSelf", b.clone()),
        (false, None) => {}
    }
    let failure = match execute(&program, &ctx) {
        Ok(Cel::Bool(true)) => return,
        Ok(_) => None,
        Err(e) if e == "no such overload" => Some(format!(
            "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
            rule_text(rule)
        )),
        Err(e) => Some(format!("{e} evaluating rule: {}", rule_text(rule))),
    };
    if let Some(detail) = failure {
        let message = format!("Invalid value: {}: {detail}", type_value(schema));
        errs.push(cause("FieldValueInvalid", &field(path), message));
        return;
    }
    let at = rule["fieldPath"]
        .as_str()
        .filter(|p| !p.is_empty())
        .and_then(|p| apply_field_path(schema, path, p))
        .unwrap_or_else(|| path.to_string());
    let from_expression = rule["messageExpression"]
        .as_str()
        .filter(|e| !e.trim().is_empty())
        .and_then(|e| compile(e).ok())
        .and_then(|p| match execute(&p, &ctx) {
            Ok(Cel::String(s)) if !s.trim().is_empty() && !s.contains('\n') => Some(s.to_string()),
            _ => None,
        });
    // The bad value is shown for scalars only; a messageExpression embeds it if it wants.
    let shown = match v {
        Value::Object(_) | Value::Array(_) => None,
        _ if from_expression.is_some() => None,
        scalar => Some(go_value(scalar)),
    };
    let detail = from_expression.unwrap_or_else(|| rule_message(rule));
    let (reason, message) = match rule["reason"].as_str().unwrap_or("FieldValueInvalid") {
        "FieldValueForbidden" => ("FieldValueForbidden", format!("Forbidden: {detail}")),
        "FieldValueRequired" => ("FieldValueRequired", format!("Required value: {detail}")),
        "FieldValueDuplicate" => (
            "FieldValueDuplicate",
            format!("Duplicate value: {}", go_value(v)),
        ),
        _ => (
            "FieldValueInvalid",
            match shown {
                Some(s) => format!("Invalid value: {s}: {detail}"),
                None => format!("Invalid value: {detail}"),
            },
        ),
    };
    errs.push(cause(reason, &field(&at), message));
}

/// A rule's `fieldPath` (`.a.b`, `['a.b']`) below the rule's node: properties become
/// `.name`, map keys `[key]`.
fn apply_field_path(schema: &Value, path: &str, field_path: &str) -> Option<String> {
    let mut s = schema;
    let mut out = path.to_string();
    let mut rest = field_path;
    while !rest.is_empty() {
        let name;
        if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            name = &r[..end];
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            name = &r[..end];
            rest = &r[end..];
        } else {
            return None;
        }
        if let Some(sub) = s["properties"].get(name) {
            out = child(&out, name);
            s = sub;
        } else if let Some(sub) = s.get("additionalProperties").filter(|a| a.is_object()) {
            out = format!("{out}[{name}]");
            s = sub;
        } else {
            return None;
        }
    }
    Some(out)
}

const CEL_RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// How a property name is spelled in CEL (`x-y` is `self.x__dash__y`); `None` for names
/// CEL cannot reach.
fn escape_property(name: &str) -> Option<String> {
    if CEL_RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-/".contains(c);
    if !name.chars().all(allowed)
        || name.starts_with(|c: char| c.is_ascii_digit())
        || name.is_empty()
    {
        return None;
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(r) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = r;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

fn cel_map(entries: impl IntoIterator<Item = (String, Cel)>) -> Cel {
    let map: HashMap<Key, Cel> = entries
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k)), v))
        .collect();
    Cel::Map(CelMap { map: Arc::new(map) })
}

/// A JSON value typed by its schema: objects with properties are reachable by (escaped)
/// field names, maps by their keys, numbers of `type: number` are doubles. The resource
/// root also has `apiVersion`, `kind` and `metadata.name`/`generateName` only.
fn to_cel(schema: &Value, v: &Value, root: bool) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (schema["type"].as_str(), n.as_i64()) {
            (Some("number"), _) | (_, None) => Cel::Float(n.as_f64().unwrap_or(0.0)),
            (_, Some(i)) => Cel::Int(i),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let sub = schema.get("items").unwrap_or(&Value::Null);
            Cel::List(Arc::new(
                items.iter().map(|x| to_cel(sub, x, false)).collect(),
            ))
        }
        Value::Object(map) => {
            let embedded = root || schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
            let mut out: Vec<(String, Cel)> = Vec::new();
            if let Some(props) = schema["properties"].as_object() {
                for (k, sub) in props {
                    if embedded && k == "metadata" {
                        continue;
                    }
                    if let (Some(x), Some(name)) = (map.get(k), escape_property(k)) {
                        out.push((name, to_cel(sub, x, false)));
                    }
                }
            } else {
                let sub = schema.get("additionalProperties").unwrap_or(&Value::Null);
                out.extend(map.iter().map(|(k, x)| (k.clone(), to_cel(sub, x, false))));
            }
            if embedded {
                for k in ["apiVersion", "kind"] {
                    if let Some(Value::String(s)) = map.get(k) {
                        out.push((k.into(), Cel::String(Arc::new(s.clone()))));
                    }
                }
                let meta = &map.get("metadata").cloned().unwrap_or(Value::Null);
                let names = ["name", "generateName"].into_iter().filter_map(|k| {
                    Some((
                        k.to_string(),
                        Cel::String(Arc::new(meta.get(k)?.as_str()?.to_string())),
                    ))
                });
                out.push(("metadata".into(), cel_map(names)));
            }
            cel_map(out)
        }
    }
}
