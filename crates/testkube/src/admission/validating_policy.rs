//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), as far as kubeflavor's
//! policy needs it, after k8s.io/apiserver/pkg/admission/plugin/policy/validating: for each
//! ValidatingAdmissionPolicyBinding whose `validationActions` hold `Deny`, the policy it
//! names applies when its `matchConstraints.resourceRules` match the request (group,
//! version, resource, operation; `*` everywhere) and every `matchConditions` expression is
//! true; then its `variables` and `validations` are evaluated with `request`, `object` and
//! `oldObject` bound (objects as unstructured JSON: a Secret's data values are base64 text,
//! as upstream hands them to CEL). The first validation that is false or fails is the
//! denial; validating admission runs after the object's own validation, as upstream's
//! `createValidation`/`updateValidation` do.
//!
//! The denial, captured from a real v1.36 API server (a ServiceAccount creating a Secret a
//! policy refuses):
//!
//! ```text
//! HTTP/2 422
//! {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
//!  "message":"secrets \"opaque-x\" is forbidden: ValidatingAdmissionPolicy 'vap-probe' with binding 'vap-probe' denied request: type must be bootstrap.kubernetes.io/token",
//!  "reason":"Invalid",
//!  "details":{"name":"opaque-x","kind":"secrets","causes":[{"message":"ValidatingAdmissionPolicy 'vap-probe' with binding 'vap-probe' denied request: type must be bootstrap.kubernetes.io/token"}]},
//!  "code":422}
//! ```
//!
//! (upstream builds it with `admission.NewForbidden`, then sets reason `Invalid`, the
//! default of a validation without `reason`, and its code 422.) A validation without
//! `message` says `failed expression: <expression>`; one whose evaluation fails says
//! `expression '<expression>' resulted in error: <error>` (measured: `no such key: data`).
//!
//! Not imitated: `paramKind`/`paramRef` (such a policy is skipped), `namespaceSelector`,
//! `objectSelector`, `excludeResourceRules`, `matchPolicy` and the binding's
//! `matchResources`, `messageExpression`, `reason`, `auditAnnotations`, `Warn`/`Audit`,
//! `failurePolicy: Ignore` (every failure denies), type checking and cost limits.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map as CelMap};
use cel::{Context, Value as Cel};
use serde_json::{Value, json};

use super::policy::{evaluate, lists, matches_resources, operation_name, request, to_cel};
use crate::crd_validation::cel_functions::base_context;
use crate::crd_validation::cel_rules::{compile, execute};
use crate::errors::details_of;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes, ResourceKey};

fn policies_key() -> ResourceKey {
    ResourceKey::new(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
    )
}

fn bindings_key() -> ResourceKey {
    ResourceKey::new(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
    )
}

/// Every binding with `Deny`, and the policy it names, in name order (the order upstream's
/// policy source lists them).
fn bindings(reader: &dyn ObjectReader) -> Vec<(&Value, &Value)> {
    let mut found: Vec<(&Value, &Value)> = reader
        .list(&bindings_key(), None)
        .into_iter()
        .filter(|b| lists(&b["spec"]["validationActions"], "Deny"))
        .filter_map(|b| {
            let name = b["spec"]["policyName"].as_str()?;
            Some((b, reader.get(&policies_key(), None, name)?))
        })
        .filter(|(b, p)| b["spec"]["paramRef"].is_null() && p["spec"]["paramKind"].is_null())
        .collect();
    found.sort_by(|a, b| {
        let name = |v: &Value| v["metadata"]["name"].as_str().unwrap_or("").to_string();
        name(a.1).cmp(&name(b.1)).then(name(a.0).cmp(&name(b.0)))
    });
    found
}

/// Runs every bound policy on a write; the first denial is the answer.
pub fn admit(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let op = operation_name(op);
    let name = new
        .or(old)
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or(&attrs.name)
        .to_string();
    let mut ctx: Option<Context> = None;
    for (binding, policy) in bindings(reader) {
        if !matches_resources(policy, attrs, op) {
            continue;
        }
        let ctx = ctx.get_or_insert_with(|| {
            let mut ctx = base_context();
            ctx.add_variable_from_value("request", to_cel(&request(attrs, op, &name)));
            ctx.add_variable_from_value("object", to_cel(new.unwrap_or(&Value::Null)));
            ctx.add_variable_from_value("oldObject", to_cel(old.unwrap_or(&Value::Null)));
            ctx
        });
        if let Some(failure) = judge(policy, ctx) {
            return Err(denial(attrs, &name, policy, binding, &failure));
        }
    }
    Ok(())
}

/// What `policy` makes of a request (`request`: admission.k8s.io/v1 AdmissionRequest's
/// fields a policy reads, `object` the new object as JSON), evaluated as [`admit`] does:
/// the message of the first failing rule, or None when it does not apply or allows it. For
/// unit tests of a policy's rules without a server.
pub fn verdict(policy: &Value, request: &Value, object: &Value) -> Option<String> {
    let mut ctx = base_context();
    ctx.add_variable_from_value("request", to_cel(request));
    ctx.add_variable_from_value("object", to_cel(object));
    ctx.add_variable_from_value("oldObject", to_cel(&Value::Null));
    judge(policy, &ctx)
}

/// Why `policy` refuses the request (None: it does not apply, or it allows it).
fn judge(policy: &Value, base: &Context) -> Option<String> {
    let spec = &policy["spec"];
    let conditions = spec["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for condition in &conditions {
        let expression = condition["expression"].as_str().unwrap_or("");
        match evaluate(expression, base) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(format!("expression '{expression}' resulted in error: {e}")),
        }
    }
    // Variables in order, each seeing the ones before it; one that fails is left out, so
    // an expression using it fails with `no such key`.
    let mut variables: HashMap<Key, Cel> = HashMap::new();
    let mut ctx = base.new_inner_scope();
    for variable in spec["variables"].as_array().cloned().unwrap_or_default() {
        let name = variable["name"].as_str().unwrap_or("").to_string();
        let value =
            compile(variable["expression"].as_str().unwrap_or("")).and_then(|p| execute(&p, &ctx));
        if let Ok(value) = value {
            variables.insert(Key::String(Arc::new(name)), value);
        }
        ctx = base.new_inner_scope();
        ctx.add_variable_from_value(
            "variables",
            Cel::Map(CelMap {
                map: Arc::new(variables.clone()),
            }),
        );
    }
    for validation in spec["validations"].as_array().cloned().unwrap_or_default() {
        let expression = validation["expression"].as_str().unwrap_or("");
        match evaluate(expression, &ctx) {
            Ok(true) => {}
            Ok(false) => {
                return Some(match validation["message"].as_str() {
                    Some(m) if !m.trim().is_empty() => m.to_string(),
                    _ => format!("failed expression: {expression}"),
                });
            }
            Err(e) => return Some(format!("expression '{expression}' resulted in error: {e}")),
        }
    }
    None
}

/// The real server's answer to a denied request (module comment).
fn denial(
    attrs: &RequestAttributes,
    name: &str,
    policy: &Value,
    binding: &Value,
    failure: &str,
) -> ApiError {
    let cause = format!(
        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {failure}",
        policy["metadata"]["name"].as_str().unwrap_or(""),
        binding["metadata"]["name"].as_str().unwrap_or(""),
    );
    let resource = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    let subject = if name.is_empty() {
        resource
    } else {
        format!("{resource} \"{name}\"")
    };
    let mut details = details_of(&attrs.api_group, &attrs.resource, name);
    details.insert("causes".into(), json!([{"message": cause}]));
    ApiError::new(422, "Invalid", format!("{subject} is forbidden: {cause}"))
        .with_details(Value::Object(details))
}
