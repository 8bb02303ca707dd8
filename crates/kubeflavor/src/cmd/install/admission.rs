//! What every ValidatingAdmissionPolicy `install` ships has in common: its rules as the
//! API's validations, and the binding that makes the API server enforce it.

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ParamRef, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation,
};

use super::{Document, object_meta};

/// A policy spec matching `operations` on `resources` of the API `groups` and `versions`,
/// refusing a request a rule cannot evaluate (failurePolicy Fail); the caller adds its
/// conditions, variables and validations.
pub fn matching(
    groups: &[&str],
    versions: &[&str],
    operations: &[&str],
    resources: &[&str],
) -> ValidatingAdmissionPolicySpec {
    let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: strings(groups),
                api_versions: strings(versions),
                operations: strings(operations),
                resources: strings(resources),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Rules (CEL expression, message) as the policy's validations, in order: the API server
/// answers with the message of the first one that fails.
pub fn validations(rules: impl IntoIterator<Item = (String, String)>) -> Vec<Validation> {
    rules
        .into_iter()
        .map(|(expression, message)| Validation {
            expression,
            message: Some(message),
            ..Default::default()
        })
        .collect()
}

/// The binding (named as the policy `name`, labelled for `component`) that makes the API
/// server enforce the policy, with `param_ref` when it has a parameter; `what` says so
/// for the reader.
pub fn deny_binding(
    name: &str,
    component: &str,
    param_ref: Option<ParamRef>,
    what: &str,
) -> Document {
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: object_meta(name, None, component),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: name.into(),
            param_ref,
            validation_actions: vec!["Deny".into()],
            ..Default::default()
        },
    };
    Document::new(what, &binding).note(
        "spec.validationActions",
        "Deny: a failing rule refuses the request (not a warning or an audit note).",
    )
}
