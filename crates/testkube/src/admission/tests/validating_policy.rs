use serde_json::{Value, json};

use super::attrs;
use crate::admission::validate;
use crate::authz::testutil::{MemReader, admin, user};
use crate::types::{ApiError, IdentityKind, Operation, UserInfo};

const GROUP: &str = "admissionregistration.k8s.io";

fn probe() -> UserInfo {
    user(
        IdentityKind::ServiceAccountToken,
        "system:serviceaccount:default:probe",
        &["system:serviceaccounts"],
    )
}

/// The policy and binding `vap-probe`, refusing Secrets of the probe ServiceAccount that
/// fail `validations`.
fn reader(validations: Value, variables: Value) -> MemReader {
    MemReader::new()
        .with(
            GROUP,
            "validatingadmissionpolicies",
            json!({"metadata": {"name": "vap-probe"}, "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]}]},
                "matchConditions": [{"name": "probe",
                    "expression": "request.userInfo.username == 'system:serviceaccount:default:probe'"}],
                "variables": variables,
                "validations": validations,
            }}),
        )
        .with(
            GROUP,
            "validatingadmissionpolicybindings",
            json!({"metadata": {"name": "vap-probe"},
                   "spec": {"policyName": "vap-probe", "validationActions": ["Deny"]}}),
        )
}

fn secret(name: &str, type_: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": "default"}, "type": type_, "data": data})
}

fn create(reader: &MemReader, who: UserInfo, resource: &str, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap();
    validate(
        &attrs(who, "create", "", resource, "", "default", name),
        Operation::Create,
        None,
        Some(obj),
        reader,
    )
}

fn type_rule() -> Value {
    json!([{"expression": "object.type == 'bootstrap.kubernetes.io/token'",
            "message": "type must be bootstrap.kubernetes.io/token"}])
}

/// The exact answer captured from a real v1.36 API server (see the module comment).
#[test]
fn a_denial_is_the_real_servers_422() {
    let r = reader(type_rule(), json!([]));
    let err = create(
        &r,
        probe(),
        "secrets",
        &secret("opaque-x", "Opaque", json!({"a": "YQ=="})),
    )
    .unwrap_err();
    let cause = "ValidatingAdmissionPolicy 'vap-probe' with binding 'vap-probe' denied request: \
                 type must be bootstrap.kubernetes.io/token";
    assert_eq!((err.code, err.reason.as_deref()), (422, Some("Invalid")));
    assert_eq!(
        err.message,
        format!("secrets \"opaque-x\" is forbidden: {cause}")
    );
    assert_eq!(
        err.details,
        Some(json!({"name": "opaque-x", "kind": "secrets", "causes": [{"message": cause}]}))
    );
}

#[test]
fn only_matching_requests_are_judged() {
    let r = reader(type_rule(), json!([]));
    let opaque = secret("opaque-x", "Opaque", json!({}));
    assert!(
        create(&r, admin(), "secrets", &opaque).is_ok(),
        "matchConditions false"
    );
    assert!(
        create(&r, probe(), "configmaps", &opaque).is_ok(),
        "another resource"
    );
    let delete = validate(
        &attrs(probe(), "delete", "", "secrets", "", "default", "opaque-x"),
        Operation::Delete,
        Some(&opaque),
        None,
        &r,
    );
    assert!(delete.is_ok(), "another operation");
    let token = secret(
        "bootstrap-token-abcdef",
        "bootstrap.kubernetes.io/token",
        json!({}),
    );
    assert!(create(&r, probe(), "secrets", &token).is_ok());
    // A binding without Deny enforces nothing.
    let warn_only = MemReader::new()
        .with(
            GROUP,
            "validatingadmissionpolicies",
            json!({"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                "operations": ["*"], "resources": ["*"]}]},
            "validations": [{"expression": "false"}]}}),
        )
        .with(
            GROUP,
            "validatingadmissionpolicybindings",
            json!({"metadata": {"name": "b"},
            "spec": {"policyName": "p", "validationActions": ["Warn"]}}),
        );
    assert!(create(&warn_only, probe(), "secrets", &opaque).is_ok());
}

/// The first failing validation is the answer; without a message it names the expression;
/// an evaluation error is the real server's text.
#[test]
fn the_first_failing_validation_answers() {
    let r = reader(
        json!([
            {"expression": "object.metadata.name.startsWith('bootstrap-token-')"},
            {"expression": "object.data['token-id'] == 'x'", "message": "second"},
        ]),
        json!([]),
    );
    let err = create(&r, probe(), "secrets", &secret("foo", "Opaque", json!({}))).unwrap_err();
    assert!(
        err.message.ends_with(
            "denied request: failed expression: object.metadata.name.startsWith('bootstrap-token-')"
        ),
        "{}",
        err.message
    );
    let missing = json!({"metadata": {"name": "bootstrap-token-abcdef", "namespace": "default"},
                         "type": "bootstrap.kubernetes.io/token"});
    let err = create(&r, probe(), "secrets", &missing).unwrap_err();
    assert!(
        err.message.ends_with(
            "denied request: expression 'object.data['token-id'] == 'x'' resulted in error: no such key: data"
        ),
        "{}",
        err.message
    );
}

/// Variables see the ones before them; data values are base64 text, as upstream gives them
/// to CEL; `request` carries operation, namespace and user.
#[test]
fn variables_request_and_base64_data() {
    let r = reader(
        json!([
            {"expression": "request.operation == 'CREATE' && request.namespace == 'default'", "message": "request"},
            {"expression": "string(object.data['token-id']) == variables.encoded", "message": "encoded"},
        ]),
        json!([
            {"name": "id", "expression": "object.metadata.name.substring(16)"},
            {"name": "encoded", "expression":
                "variables.id == 'abcdef' ? 'YWJjZGVm' : [0, 1].map(i, variables.id.charAt(i)).join('')"},
        ]),
    );
    let ok = secret(
        "bootstrap-token-abcdef",
        "bootstrap.kubernetes.io/token",
        json!({"token-id": "YWJjZGVm"}),
    );
    assert!(create(&r, probe(), "secrets", &ok).is_ok());
    let other = secret(
        "bootstrap-token-zz0000",
        "bootstrap.kubernetes.io/token",
        json!({"token-id": "YWJjZGVm"}),
    );
    let err = create(&r, probe(), "secrets", &other).unwrap_err();
    assert!(
        err.message.ends_with("denied request: encoded"),
        "{}",
        err.message
    );
    let update = validate(
        &attrs(
            probe(),
            "update",
            "",
            "secrets",
            "",
            "default",
            "bootstrap-token-abcdef",
        ),
        Operation::Update,
        Some(&ok),
        Some(&ok),
        &r,
    )
    .unwrap_err();
    assert!(
        update.message.ends_with("denied request: request"),
        "{}",
        update.message
    );
}
