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
//! Parameters, as upstream's `CollectParams`: a policy with `paramKind` runs once per
//! parameter object its binding's `paramRef` finds (by `name`, or every object its label
//! `selector` matches; in `paramRef.namespace`, else the request's namespace for a
//! namespaced kind), with `params` bound to it; with `paramKind` but no `paramRef`, once
//! with `params` null. None found: `parameterNotFoundAction: Allow` skips the policy,
//! `Deny` refuses with `failed to configure binding: no params found for policy binding
//! with `Deny` parameterNotFoundAction` (as a denial, 422, measured). Resource rules match
//! subresources as upstream (`pods/binding`, `pods/*`, `*/*`; `pods` alone matches none),
//! `excludeResourceRules`, `resourceNames` and `scope` included; DELETE runs the policies
//! with `oldObject` only. The `object` of a subresource is what the subresource takes (a
//! Binding, a TokenRequest).
//!
//! Not imitated: `namespaceSelector`, `objectSelector`, `matchPolicy` and the binding's
//! `matchResources`, `messageExpression`, `reason`, `auditAnnotations`, `Warn`/`Audit`,
//! `failurePolicy: Ignore` (every failure denies), type checking and cost limits.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map as CelMap};
use cel::{Context, Value as Cel};
use serde_json::{Value, json};

use super::policy::{NULL, evaluate, lists, matches_resources, operation_name, request, to_val};
use crate::crd_validation::cel_functions::base_context;
use crate::crd_validation::cel_rules::{compile, execute};
use crate::errors::details_of;
use crate::resources::ResourceInfo;
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
        .collect();
    fn name(v: &Value) -> &str {
        v["metadata"]["name"].as_str().unwrap_or("")
    }
    found.sort_by(|a, b| name(a.1).cmp(name(b.1)).then(name(a.0).cmp(name(b.0))));
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
        .filter(|n| !n.is_empty())
        .unwrap_or(&attrs.name)
        .to_string();
    // Built once, and only when a policy applies; the context borrows from them.
    let request_json = std::cell::OnceCell::new();
    let mut ctx: Option<Context> = None;
    for (binding, policy) in bindings(reader) {
        if !matches_resources(policy, attrs, op) {
            continue;
        }
        let params = match params(policy, binding, attrs, reader) {
            Ok(params) => params,
            // A binding that cannot be configured fails closed (`failurePolicy: Fail`,
            // the default), answered as a denial (measured on a real v1.36 server).
            Err(config) => return Err(denial(attrs, &name, policy, binding, &config)),
        };
        let ctx = ctx.get_or_insert_with(|| {
            let mut ctx = base_context();
            let request = request_json.get_or_init(|| request(attrs, op, &name));
            ctx.add_variable_as_val("request", to_val(request));
            ctx.add_variable_as_val("object", to_val(new.unwrap_or(&NULL)));
            ctx.add_variable_as_val("oldObject", to_val(old.unwrap_or(&NULL)));
            ctx
        });
        for param in params {
            let mut scope = ctx.new_inner_scope();
            scope.add_variable_as_val("params", to_val(param.unwrap_or(&NULL)));
            if let Some(failure) = judge(policy, &scope) {
                return Err(denial(attrs, &name, policy, binding, &failure));
            }
        }
    }
    Ok(())
}

/// The resource a `paramKind` names, among those testkube serves.
fn param_resource(param_kind: &Value, reader: &dyn ObjectReader) -> Option<ResourceInfo> {
    let api_version = param_kind["apiVersion"].as_str().unwrap_or("");
    let kind = param_kind["kind"].as_str().unwrap_or("");
    crate::resources::by_kind(reader, api_version, kind)
}

/// `CollectParams`: the parameter objects the policy runs with, once each (`[None]`:
/// once, `params` null; `[]`: not at all), or the configuration error that denies.
fn params<'a>(
    policy: &Value,
    binding: &Value,
    attrs: &RequestAttributes,
    reader: &'a dyn ObjectReader,
) -> Result<Vec<Option<&'a Value>>, String> {
    let param_kind = &policy["spec"]["paramKind"];
    let param_ref = &binding["spec"]["paramRef"];
    if param_kind.is_null() || param_ref.is_null() {
        return Ok(vec![None]);
    }
    let Some(info) = param_resource(param_kind, reader) else {
        return Err(format!(
            "failed to configure binding: paramKind kind `{}` not known",
            go_param_kind(param_kind)
        ));
    };
    let ref_namespace = param_ref["namespace"].as_str().unwrap_or("");
    let namespace = if !info.namespaced {
        if !ref_namespace.is_empty() {
            return Err(
                "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                    .into(),
            );
        }
        None
    } else if !ref_namespace.is_empty() {
        Some(ref_namespace)
    } else if !attrs.namespace.is_empty() {
        Some(attrs.namespace.as_str())
    } else {
        return Err(
            "failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                .into(),
        );
    };
    let name = param_ref["name"].as_str().unwrap_or("");
    let found: Vec<&Value> = if !name.is_empty() {
        reader
            .get(&info.storage, Some(namespace.unwrap_or("")), name)
            .into_iter()
            .collect()
    } else if let Some(selector) = param_ref.get("selector").filter(|s| s.is_object()) {
        reader
            .list(&info.storage, namespace)
            .into_iter()
            .filter(|o| selector_matches(selector, &o["metadata"]["labels"]))
            .collect()
    } else {
        return Err("failed to configure binding: one of name or selector must be provided".into());
    };
    if found.is_empty() && param_ref["parameterNotFoundAction"].as_str() == Some("Deny") {
        return Err(
            "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
                .into(),
        );
    }
    Ok(found.into_iter().map(Some).collect())
}

/// A `metav1.LabelSelector` (matchLabels, matchExpressions) on an object's labels; an
/// empty selector selects everything.
fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let match_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let match_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str().unwrap_or("") {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        });
    match_labels && match_expressions
}

/// Go's `%v` of a `*ParamKind` as `ParamKind.String()` writes it.
fn go_param_kind(param_kind: &Value) -> String {
    format!(
        "&ParamKind{{APIVersion:{},Kind:{},}}",
        param_kind["apiVersion"].as_str().unwrap_or(""),
        param_kind["kind"].as_str().unwrap_or("")
    )
}

/// What `policy` makes of a request (`request`: admission.k8s.io/v1 AdmissionRequest's
/// fields a policy reads, `object` the new object as JSON), evaluated as [`admit`] does:
/// the message of the first failing rule, or None when it does not apply or allows it. For
/// unit tests of a policy's rules without a server.
pub fn verdict(policy: &Value, request: &Value, object: &Value) -> Option<String> {
    let mut ctx = base_context();
    ctx.add_variable_as_val("request", to_val(request));
    ctx.add_variable_as_val("object", to_val(object));
    ctx.add_variable_as_val("oldObject", to_val(&NULL));
    judge(policy, &ctx)
}

/// Why `policy` refuses the request (None: it does not apply, or it allows it).
fn judge(policy: &Value, base: &Context) -> Option<String> {
    let spec = &policy["spec"];
    let listed = |field: &str| spec[field].as_array().into_iter().flatten();
    for condition in listed("matchConditions") {
        let expression = condition["expression"].as_str().unwrap_or("");
        match evaluate(expression, base) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(format!("expression '{expression}' resulted in error: {e}")),
        }
    }
    // Variables in order, each seeing the ones before it; one that fails is left out, so
    // an expression using it fails with `no such key`. The map grows in place: the scope
    // that saw it is gone before the next variable is added, so nothing is copied.
    let mut variables: Arc<HashMap<Key, Cel>> = Arc::new(HashMap::new());
    let scope = |variables: &Arc<HashMap<Key, Cel>>| {
        let mut ctx = base.new_inner_scope();
        ctx.add_variable_from_value(
            "variables",
            Cel::Map(CelMap {
                map: variables.clone(),
            }),
        );
        ctx
    };
    for variable in listed("variables") {
        let value = {
            let ctx = scope(&variables);
            compile(variable["expression"].as_str().unwrap_or("")).and_then(|p| execute(&p, &ctx))
        };
        if let Ok(value) = value {
            let name = variable["name"].as_str().unwrap_or("").to_string();
            Arc::make_mut(&mut variables).insert(Key::String(Arc::new(name)), value);
        }
    }
    let ctx = if listed("variables").next().is_some() {
        scope(&variables)
    } else {
        base.new_inner_scope()
    };
    for validation in listed("validations") {
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
