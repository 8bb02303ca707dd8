//! MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in v1.36), as far as
//! kubeflavor's policy needs it, after k8s.io/apiserver/pkg/admission/plugin/policy/mutating
//! (`dispatcher.go`, `patch/json_patch.go`): for each MutatingAdmissionPolicyBinding, in the
//! name order of the policies (then bindings) the policy source lists, the policy it names
//! applies when its `matchConstraints.resourceRules` match the request and every
//! `matchConditions` expression is true; then each of its `mutations` runs in order on the
//! object as the mutations before it left it. A `JSONPatch` mutation's expression returns
//! a list of `JSONPatch{op, path, value}` values, applied as RFC 6902 patch operations;
//! `Object.<field>...{...}` values are the objects they name.
//!
//! Where it runs: the mutating admission phase, after the built-in mutating plugins
//! (NodeRestriction, which so never sees what a policy adds) and before the object's own
//! validation and the ValidatingAdmissionPolicies, which see the mutated object (upstream's
//! plugin order, `kube-apiserver/app/options/plugins.go`: NodeRestriction ...
//! MutatingAdmissionPolicy, MutatingAdmissionWebhook, ValidatingAdmissionPolicy ...).
//!
//! `reinvocationPolicy: IfNeeded`: when a later policy changed the object, the policies that
//! ran before it with IfNeeded run once more (upstream reinvokes at most once).
//!
//! A failure (a condition or mutation that fails to evaluate, a patch that does not apply)
//! with `failurePolicy: Fail` (the default) refuses the request, captured from a real v1.36
//! API server (a node identity creating a Node):
//!
//! ```text
//! HTTP 403
//! {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
//!  "message":"policy 'probe-err' with binding 'probe-err' denied request: expression '<condition>' resulted in error: no such key: labels",
//!  "reason":"Invalid",
//!  "details":{"name":"probe-e1","kind":"nodes","causes":[{"message":"<the same>"}]},"code":403}
//! ```
//!
//! and for a patch that does not apply the failure reads `JSON Patch: add operation does
//! not apply: doc is missing path: "/spec/nope/x": missing value` (testkube's JSON patch
//! library words its errors its own way after `JSON Patch: `). With `Ignore` the policy is
//! skipped. A policy whose expressions do not compile is refused when it is created (422,
//! `spec.mutations[0].jsonPatch.expression: Invalid value: ...: compilation failed: ...`):
//! see [`validate_policy`].
//!
//! Built-in objects are typed upstream: a Node's `spec` is always there (an empty struct
//! when the client sent none), so a policy may patch `/spec/taints` of a Node created
//! without a spec; testkube gives such a Node `spec: {}` before the policies run.
//!
//! Not imitated: `paramKind`/`paramRef` (such a policy is skipped), `variables`,
//! `applyConfiguration` mutations (they fail), the binding's `matchResources`,
//! `namespaceSelector`, `objectSelector`, `excludeResourceRules`, `matchPolicy`, type
//! checking (a struct's type name is not checked against the schema), cost limits.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedEntryExpr, LiteralValue, MapEntryExpr, MapExpr};
use cel::{Context, IdedExpr, Value as Cel};
use serde_json::{Value, json};

use super::policy::{NULL, evaluate, matches_resources, operation_name, request, to_val};
use crate::crd_validation::cel_functions::base_context;
use crate::errors::details_of;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes, ResourceKey};

const GROUP: &str = "admissionregistration.k8s.io";

fn policies_key() -> ResourceKey {
    ResourceKey::new(GROUP, "mutatingadmissionpolicies")
}

fn bindings_key() -> ResourceKey {
    ResourceKey::new(GROUP, "mutatingadmissionpolicybindings")
}

/// Every binding and the policy it names, in policy name order, then binding name.
fn bindings(reader: &dyn ObjectReader) -> Vec<(&Value, &Value)> {
    let mut found: Vec<(&Value, &Value)> = reader
        .list(&bindings_key(), None)
        .into_iter()
        .filter_map(|b| {
            let name = b["spec"]["policyName"].as_str()?;
            Some((b, reader.get(&policies_key(), None, name)?))
        })
        .filter(|(b, p)| b["spec"]["paramRef"].is_null() && p["spec"]["paramKind"].is_null())
        .collect();
    fn name(v: &Value) -> &str {
        v["metadata"]["name"].as_str().unwrap_or("")
    }
    found.sort_by(|a, b| name(a.1).cmp(name(b.1)).then(name(a.0).cmp(name(b.0))));
    found
}

/// Runs every bound policy on a create or update, changing `new` in place.
pub fn admit(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let Some(new) = new else { return Ok(()) };
    let op = operation_name(op);
    let found = bindings(reader);
    if found.is_empty() {
        return Ok(());
    }
    if attrs.api_group.is_empty() && attrs.resource == "nodes" && new.get("spec").is_none() {
        new["spec"] = json!({});
    }
    let name = new["metadata"]["name"]
        .as_str()
        .unwrap_or(&attrs.name)
        .to_string();
    // (index, object after it ran) of each IfNeeded policy that ran.
    let mut reinvocable: Vec<(usize, Value)> = Vec::new();
    for (i, (binding, policy)) in found.iter().enumerate() {
        if !matches_resources(policy, attrs, op) {
            continue;
        }
        let ran = run(attrs, op, &name, old, new, policy, binding)?;
        if ran && policy["spec"]["reinvocationPolicy"] == "IfNeeded" {
            reinvocable.push((i, new.clone()));
        }
    }
    for (i, after) in reinvocable {
        if *new != after {
            let (binding, policy) = found[i];
            run(attrs, op, &name, old, new, policy, binding)?;
        }
    }
    Ok(())
}

/// One policy through one binding: whether it applied (its conditions held), or the
/// denial when it failed and its failure policy is Fail.
fn run(
    attrs: &RequestAttributes,
    op: &str,
    name: &str,
    old: Option<&Value>,
    new: &mut Value,
    policy: &Value,
    binding: &Value,
) -> Result<bool, ApiError> {
    let spec = &policy["spec"];
    let ignore = spec["failurePolicy"] == "Ignore";
    let fail = |failure: String| -> Result<bool, ApiError> {
        if ignore {
            Ok(false)
        } else {
            Err(denial(attrs, name, policy, binding, &failure))
        }
    };
    let request = request(attrs, op, name);
    {
        let mut ctx = base_context();
        ctx.add_variable_as_val("request", to_val(&request));
        ctx.add_variable_as_val("oldObject", to_val(old.unwrap_or(&NULL)));
        ctx.add_variable_as_val("object", to_val(new));
        for condition in spec["matchConditions"].as_array().into_iter().flatten() {
            let expression = condition["expression"].as_str().unwrap_or("");
            match evaluate(expression, &ctx) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return fail(format!("expression '{expression}' resulted in error: {e}"));
                }
            }
        }
    }
    for mutation in spec["mutations"].as_array().into_iter().flatten() {
        if mutation["patchType"] != "JSONPatch" {
            return fail(format!(
                "testkube does not imitate patchType {}",
                mutation["patchType"]
            ));
        }
        let expression = mutation["jsonPatch"]["expression"].as_str().unwrap_or("");
        // Each mutation sees the object as the mutations before it left it.
        let ops = {
            let mut ctx = base_context();
            ctx.add_variable_as_val("request", to_val(&request));
            ctx.add_variable_as_val("oldObject", to_val(old.unwrap_or(&NULL)));
            ctx.add_variable_as_val("object", to_val(new));
            patch_operations(expression, &ctx)
        };
        let ops = match ops {
            Ok(ops) => ops,
            Err(e) => return fail(format!("expression '{expression}' resulted in error: {e}")),
        };
        let patch: json_patch::Patch = match serde_json::from_value(ops) {
            Ok(p) => p,
            Err(e) => return fail(format!("JSON Patch: {e}")),
        };
        let mut patched = new.clone();
        if let Err(e) = json_patch::patch(&mut patched, &patch) {
            return fail(format!("JSON Patch: {e}"));
        }
        *new = patched;
    }
    Ok(true)
}

/// The JSON patch operations a mutation's expression returns.
fn patch_operations(expression: &str, ctx: &Context) -> Result<Value, String> {
    let parsed = cel::parser::Parser::new()
        .parse(expression)
        .map_err(|e| e.to_string())?;
    let expr = structs_as_maps(parsed);
    let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Cel::resolve(&expr, ctx)))
        .map_err(|_| "testkube's CEL interpreter cannot evaluate this expression".to_string())?
        .map_err(|e| e.to_string())?;
    match from_cel(&value)? {
        list @ Value::Array(_) => Ok(list),
        other => Err(format!("expected a list of JSONPatch, got {other}")),
    }
}

/// The interpreter has no struct values: `JSONPatch{op: 'add'}` and
/// `Object.spec.taints{key: 'k'}` become the maps `{'op': 'add'}` and `{'key': 'k'}`,
/// which is what upstream makes of them once converted to JSON.
fn structs_as_maps(e: IdedExpr) -> IdedExpr {
    let id = e.id;
    let rewrite = |b: Box<IdedExpr>| Box::new(structs_as_maps(*b));
    let expr = match e.expr {
        Expr::Struct(s) => Expr::Map(MapExpr {
            entries: s
                .entries
                .into_iter()
                .map(|entry| IdedEntryExpr {
                    id: entry.id,
                    expr: match entry.expr {
                        EntryExpr::StructField(f) => EntryExpr::MapEntry(MapEntryExpr {
                            key: IdedExpr {
                                id: entry.id,
                                expr: Expr::Literal(LiteralValue::String(f.field.into())),
                            },
                            value: structs_as_maps(f.value),
                            optional: f.optional,
                        }),
                        EntryExpr::MapEntry(m) => EntryExpr::MapEntry(MapEntryExpr {
                            key: structs_as_maps(m.key),
                            value: structs_as_maps(m.value),
                            optional: m.optional,
                        }),
                    },
                })
                .collect(),
        }),
        Expr::Map(m) => Expr::Map(MapExpr {
            entries: m
                .entries
                .into_iter()
                .map(|entry| IdedEntryExpr {
                    id: entry.id,
                    expr: match entry.expr {
                        EntryExpr::MapEntry(m) => EntryExpr::MapEntry(MapEntryExpr {
                            key: structs_as_maps(m.key),
                            value: structs_as_maps(m.value),
                            optional: m.optional,
                        }),
                        other => other,
                    },
                })
                .collect(),
        }),
        Expr::List(mut l) => {
            l.elements = l.elements.into_iter().map(structs_as_maps).collect();
            Expr::List(l)
        }
        Expr::Call(mut c) => {
            c.target = c.target.map(rewrite);
            c.args = c.args.into_iter().map(structs_as_maps).collect();
            Expr::Call(c)
        }
        Expr::Select(mut s) => {
            s.operand = rewrite(s.operand);
            Expr::Select(s)
        }
        Expr::Comprehension(mut c) => {
            c.iter_range = structs_as_maps(c.iter_range);
            c.accu_init = structs_as_maps(c.accu_init);
            c.loop_cond = structs_as_maps(c.loop_cond);
            c.loop_step = structs_as_maps(c.loop_step);
            c.result = structs_as_maps(c.result);
            Expr::Comprehension(c)
        }
        other => other,
    };
    IdedExpr { id, expr }
}

/// A CEL value as JSON.
fn from_cel(v: &Cel) -> Result<Value, String> {
    Ok(match v {
        Cel::Null => Value::Null,
        Cel::Bool(b) => json!(b),
        Cel::Int(i) => json!(i),
        Cel::UInt(u) => json!(u),
        Cel::Float(f) => json!(f),
        Cel::String(s) => json!(s.as_str()),
        Cel::List(items) => Value::Array(items.iter().map(from_cel).collect::<Result<_, _>>()?),
        Cel::Map(map) => {
            let mut out = serde_json::Map::new();
            let entries: &HashMap<cel::objects::Key, Cel> = &map.map;
            for (k, v) in entries {
                let cel::objects::Key::String(k) = k else {
                    return Err(format!("a map key must be a string, got {k:?}"));
                };
                out.insert(String::clone(Arc::as_ref(k)), from_cel(v)?);
            }
            Value::Object(out)
        }
        other => return Err(format!("cannot be JSON: {other:?}")),
    })
}

/// The real server's answer to a request a policy failed on (module comment).
fn denial(
    attrs: &RequestAttributes,
    name: &str,
    policy: &Value,
    binding: &Value,
    failure: &str,
) -> ApiError {
    let message = format!(
        "policy '{}' with binding '{}' denied request: {failure}",
        policy["metadata"]["name"].as_str().unwrap_or(""),
        binding["metadata"]["name"].as_str().unwrap_or(""),
    );
    let mut details = details_of(&attrs.api_group, &attrs.resource, name);
    details.insert("causes".into(), json!([{"message": message}]));
    ApiError::new(403, "Invalid", message).with_details(Value::Object(details))
}

/// A new or changed MutatingAdmissionPolicy: every expression must compile (upstream's
/// `validateMutatingAdmissionPolicySpec` compiles them), else 422 naming the field, as a
/// real v1.36 API server answers:
/// `MutatingAdmissionPolicy.admissionregistration.k8s.io "x" is invalid:
/// spec.mutations[0].jsonPatch.expression: Invalid value: "<expression>": compilation
/// failed: ERROR: <input>:1:125: Syntax error: ...` (testkube's parser words the error
/// after `compilation failed: ` its own way).
pub fn validate_policy(policy: &Value) -> Vec<(String, String, String)> {
    let spec = &policy["spec"];
    let mut fields = Vec::new();
    for (i, c) in spec["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        fields.push((
            format!("spec.matchConditions[{i}].expression"),
            c["expression"].as_str().unwrap_or("").to_string(),
        ));
    }
    for (i, m) in spec["mutations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(e) = m["jsonPatch"]["expression"].as_str() {
            fields.push((
                format!("spec.mutations[{i}].jsonPatch.expression"),
                e.to_string(),
            ));
        }
    }
    fields
        .into_iter()
        .filter_map(|(field, expression)| {
            let error = cel::parser::Parser::new().parse(&expression).err()?;
            Some((field, expression, format!("compilation failed: {error}")))
        })
        .collect()
}
