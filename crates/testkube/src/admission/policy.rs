//! What ValidatingAdmissionPolicy and MutatingAdmissionPolicy share, after
//! k8s.io/apiserver/pkg/admission/plugin/policy/generic and .../matching: which requests a
//! policy's `matchConstraints.resourceRules` match, the `request` variable, objects as CEL
//! sees unstructured content, and one boolean expression's outcome.

use std::collections::HashMap;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap as CelValMap, CelMapKey, CelNull, CelString,
};
use cel::common::value::Val;
use cel::{Context, Value as Cel};
use serde_json::{Value, json};

use crate::crd_validation::cel_rules::{compile, execute};
use crate::types::{Operation, RequestAttributes};

pub(super) fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
    }
}

/// Whether a list of strings (absent: none) holds `value` or `*`.
pub(super) fn lists(v: &Value, value: &str) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().any(|s| s == "*" || s == value))
}

/// `matchConstraints`: one of `resourceRules` matches and none of `excludeResourceRules`
/// (k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules): group, version,
/// operation, scope, and resource as `resource/subresource` where `*` stands for any
/// resource and `pods` alone matches no subresource of pods (`pods/*` all of them, `*/*`
/// everything).
pub(super) fn matches_resources(policy: &Value, attrs: &RequestAttributes, op: &str) -> bool {
    let constraints = &policy["spec"]["matchConstraints"];
    let any_rule = |rules: &Value| {
        rules
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| rule_matches(r, attrs, op))
    };
    any_rule(&constraints["resourceRules"]) && !any_rule(&constraints["excludeResourceRules"])
}

fn rule_matches(r: &Value, attrs: &RequestAttributes, op: &str) -> bool {
    let resource = r["resources"].as_array().into_iter().flatten().any(|res| {
        let res = res.as_str().unwrap_or("");
        let (res, sub) = res.split_once('/').unwrap_or((res, ""));
        (res == "*" || res == attrs.resource) && (sub == "*" || sub == attrs.subresource)
    });
    let names_match = r["resourceNames"]
        .as_array()
        .is_none_or(|names| names.is_empty() || names.iter().any(|n| n == attrs.name.as_str()));
    let is_namespace = attrs.api_group.is_empty() && attrs.resource == "namespaces";
    let scope = match r["scope"].as_str().unwrap_or("*") {
        "Namespaced" => !is_namespace && !attrs.namespace.is_empty(),
        "Cluster" => is_namespace || attrs.namespace.is_empty(),
        _ => true,
    };
    lists(&r["apiGroups"], &attrs.api_group)
        && lists(&r["apiVersions"], &attrs.api_version)
        && lists(&r["operations"], op)
        && resource
        && names_match
        && scope
}

/// `null`, for a variable bound to nothing (`oldObject` on a create).
pub(crate) static NULL: Value = Value::Null;

/// The value [`to_cel`] makes, built straight as the interpreter's own values and
/// borrowing every string from `v`: what a context variable holds. Going through [`Cel`]
/// copied each string and map twice per request (once into `Cel`, once into the
/// interpreter's value); admission binds the whole object on every write.
pub(crate) fn to_val<'v>(v: &'v Value) -> Box<dyn Val + 'v> {
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => Box::new(CelString::from(s.as_str())),
        Value::Array(items) => {
            Box::new(CelList::from(items.iter().map(to_val).collect::<Vec<_>>()))
        }
        Value::Object(map) => Box::new(CelValMap::from(
            map.iter()
                .map(|(k, x)| (CelMapKey::from(k.as_str()), to_val(x)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// The `request` variable: the fields of admission.k8s.io/v1 AdmissionRequest a policy
/// reads.
pub(super) fn request(attrs: &RequestAttributes, op: &str, name: &str) -> Value {
    let mut user = json!({"username": attrs.user.name, "groups": attrs.user.groups});
    if !attrs.user.uid.is_empty() {
        user["uid"] = json!(attrs.user.uid);
    }
    let mut request = json!({
        "operation": op,
        "resource": {"group": attrs.api_group, "version": attrs.api_version, "resource": attrs.resource},
        "userInfo": user,
    });
    // `name`, `namespace` and `subResource` are `omitempty` in AdmissionRequest: absent,
    // not "", when empty (measured: `request.subResource` on a Pod create is `no such
    // key: subResource` on a real v1.36 server).
    for (field, value) in [
        ("name", name),
        ("namespace", attrs.namespace.as_str()),
        ("subResource", attrs.subresource.as_str()),
    ] {
        if !value.is_empty() {
            request[field] = json!(value);
        }
    }
    request
}

/// What one expression made of the request: true, false, or an error's text.
pub(super) fn evaluate(expression: &str, ctx: &Context) -> Result<bool, String> {
    let program = compile(expression)?;
    match execute(&program, ctx)? {
        Cel::Bool(b) => Ok(b),
        other => Err(format!("expected a bool, got {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cel::objects::{Key, Map as CelMap};

    use super::*;
    use crate::crd_validation::cel_functions::base_context;

    /// A JSON value as CEL sees unstructured content: objects are maps with string keys,
    /// whole numbers ints. Kept as the reference [`to_val`] is checked against.
    fn to_cel(v: &Value) -> Cel {
        match v {
            Value::Null => Cel::Null,
            Value::Bool(b) => Cel::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Cel::Int(i),
                None => Cel::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => Cel::String(Arc::new(s.clone())),
            Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
            Value::Object(map) => {
                let map: HashMap<Key, Cel> = map
                    .iter()
                    .map(|(k, x)| (Key::String(Arc::new(k.clone())), to_cel(x)))
                    .collect();
                Cel::Map(CelMap { map: Arc::new(map) })
            }
        }
    }

    /// A variable bound with [`to_val`] reads back in an expression as the value
    /// [`to_cel`] makes, for every kind of JSON value, nested.
    #[test]
    fn to_val_binds_what_to_cel_makes() {
        let samples = [
            json!(null),
            json!(true),
            json!(-7),
            json!(1.5),
            json!(u64::MAX),
            json!("node-a"),
            json!([]),
            json!({}),
            json!({"metadata": {"name": "n", "labels": {"a": "b"}, "generation": 3},
                   "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "x": [1, [2.5, null]]}}),
        ];
        for v in samples {
            let mut ctx = base_context();
            ctx.add_variable_as_val("object", to_val(&v));
            let program = compile("object").unwrap();
            assert_eq!(execute(&program, &ctx).unwrap(), to_cel(&v), "{v}");
            let program = compile("object == expected").unwrap();
            ctx.add_variable_from_value("expected", to_cel(&v));
            assert_eq!(execute(&program, &ctx).unwrap(), Cel::Bool(true), "{v}");
        }
    }
}
