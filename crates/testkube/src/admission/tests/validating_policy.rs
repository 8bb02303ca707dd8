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

/// A policy with a ConfigMap parameter refusing writes by listed nodes, bound with
/// `paramRef` (`ref_` merged into it).
fn listed_nodes_policy(ref_: Value, list: Option<Value>) -> MemReader {
    let mut param_ref = json!({"namespace": "kube-system", "parameterNotFoundAction": "Allow"});
    for (k, v) in ref_.as_object().unwrap() {
        param_ref[k] = v.clone();
    }
    let mut reader = MemReader::new()
        .with(
            GROUP,
            "validatingadmissionpolicies",
            json!({"metadata": {"name": "revoked"}, "spec": {
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["nodes", "pods/binding"]}]},
                "validations": [{"expression":
                    "!has(request.subResource) ? !(request.name in params.data) : !(object.target.name in params.data)",
                    "message": "revoked"}],
            }}),
        )
        .with(
            GROUP,
            "validatingadmissionpolicybindings",
            json!({"metadata": {"name": "revoked"}, "spec": {
                "policyName": "revoked", "validationActions": ["Deny"], "paramRef": param_ref}}),
        );
    if let Some(list) = list {
        reader = reader.with("", "configmaps", list);
    }
    reader
}

fn list(name: &str, labels: Value, nodes: &[&str]) -> Value {
    let data: serde_json::Map<String, Value> =
        nodes.iter().map(|n| (n.to_string(), json!("x"))).collect();
    json!({"metadata": {"name": name, "namespace": "kube-system", "labels": labels}, "data": data})
}

fn write_node(reader: &MemReader, name: &str) -> Result<(), ApiError> {
    let node = json!({"metadata": {"name": name}});
    validate(
        &attrs(admin(), "update", "", "nodes", "", "", name),
        Operation::Update,
        Some(&node),
        Some(&node),
        reader,
    )
}

#[test]
fn params_by_name_with_not_found_actions() {
    let listed = listed_nodes_policy(
        json!({"name": "revoked-nodes"}),
        Some(list("revoked-nodes", json!({}), &["bad"])),
    );
    let err = write_node(&listed, "bad").unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.ends_with(
            "ValidatingAdmissionPolicy 'revoked' with binding 'revoked' denied request: revoked"
        ),
        "{}",
        err.message
    );
    assert!(write_node(&listed, "good").is_ok());
    // No list: Allow lets everything through, Deny refuses everything.
    let allow = listed_nodes_policy(json!({"name": "revoked-nodes"}), None);
    assert!(write_node(&allow, "bad").is_ok());
    let deny = listed_nodes_policy(
        json!({"name": "revoked-nodes", "parameterNotFoundAction": "Deny"}),
        None,
    );
    let err = write_node(&deny, "bad").unwrap_err();
    assert_eq!(err.code, 422);
    assert!(err.message.ends_with("denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"), "{}", err.message);
    // A namespaced paramKind without a namespace cannot serve a cluster-scoped request.
    let mut no_namespace = listed_nodes_policy(json!({"name": "revoked-nodes"}), None);
    no_namespace = no_namespace.with(
        GROUP,
        "validatingadmissionpolicybindings",
        json!({"metadata": {"name": "revoked"}, "spec": {"policyName": "revoked",
               "validationActions": ["Deny"], "paramRef": {"name": "revoked-nodes", "parameterNotFoundAction": "Allow"}}}),
    );
    assert!(
        write_node(&no_namespace, "bad")
            .unwrap_err()
            .message
            .contains("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
    );
}

#[test]
fn params_by_selector_run_once_each() {
    let reader = listed_nodes_policy(
        json!({"selector": {"matchLabels": {"kind": "revoked"}}}),
        Some(list("a", json!({"kind": "revoked"}), &["one"])),
    )
    .with(
        "",
        "configmaps",
        list("b", json!({"kind": "revoked"}), &["two"]),
    )
    .with(
        "",
        "configmaps",
        list("c", json!({"kind": "other"}), &["three"]),
    );
    assert!(write_node(&reader, "one").is_err());
    assert!(write_node(&reader, "two").is_err());
    assert!(write_node(&reader, "three").is_ok());
}

/// `pods` matches no subresource; `pods/binding` matches the bind, whose object is the
/// Binding.
#[test]
fn subresource_rules_and_the_binding_object() {
    let reader = listed_nodes_policy(
        json!({"name": "revoked-nodes"}),
        Some(list("revoked-nodes", json!({}), &["bad"])),
    );
    let bind = |node: &str| {
        let binding =
            json!({"metadata": {"name": "p", "namespace": "default"}, "target": {"name": node}});
        validate(
            &attrs(admin(), "create", "", "pods", "binding", "default", "p"),
            Operation::Create,
            None,
            Some(&binding),
            &reader,
        )
    };
    assert!(bind("bad").is_err());
    assert!(bind("good").is_ok());
    // nodes/status is not matched by `nodes`.
    let node = json!({"metadata": {"name": "bad"}});
    assert!(
        validate(
            &attrs(admin(), "update", "", "nodes", "status", "", "bad"),
            Operation::Update,
            Some(&node),
            Some(&node),
            &reader,
        )
        .is_ok()
    );
}
