use base64::Engine;
use serde_json::{Value, json};

use super::{assert_admission_forbidden, attrs};
use crate::admission::admit;
use crate::authz::testutil::{MemReader, admin, bootstrap_user, node_user, user};
use crate::types::{ApiError, IdentityKind, Operation, RequestAttributes, UserInfo};

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

fn request(orgs: &[&str], cn: &str) -> String {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    for org in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *org);
    }
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    base64::engine::general_purpose::STANDARD
        .encode(params.serialize_request(&key).unwrap().pem().unwrap())
}

fn csr(name: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "uid": "u1", "resourceVersion": "451"},
        "spec": {
            "request": "LS0tLS1CRUdJTi...",
            "signerName": SIGNER,
            "usages": ["digital signature", "client auth"],
            "username": "system:bootstrap:abcdef",
            "groups": ["system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token", "system:authenticated"],
        },
        "status": {"conditions": conditions},
    })
}

fn csr_attrs(user: UserInfo, sub: &str, name: &str) -> RequestAttributes {
    attrs(
        user,
        if name.is_empty() { "create" } else { "update" },
        "certificates.k8s.io",
        "certificatesigningrequests",
        sub,
        "",
        name,
    )
}

fn update_csr(
    user: UserInfo,
    sub: &str,
    old: &Value,
    new: &mut Value,
    reader: &MemReader,
) -> Result<(), ApiError> {
    let name = old["metadata"]["name"].as_str().unwrap().to_string();
    admit(
        &csr_attrs(user, sub, &name),
        Operation::Update,
        Some(old),
        Some(new),
        reader,
    )
}

fn cond(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message})
}

fn stored_denied() -> Value {
    let mut denied = cond(
        "Denied",
        "True",
        "KubeflavorDenied",
        "no binding for this token",
    );
    denied["lastUpdateTime"] = json!("2026-11-30T04:15:03Z");
    denied["lastTransitionTime"] = json!("2026-11-30T04:15:03Z");
    csr("csr-worker-2", json!([denied]))
}

fn assert_invalid(result: Result<(), ApiError>, message: &str, cause: Value) {
    let err = result.expect_err("must be invalid");
    assert_eq!((err.code, err.reason.as_deref()), (422, Some("Invalid")));
    assert_eq!(err.message, message);
    let details = err.details.unwrap();
    assert_eq!(
        (details["group"].as_str(), details["kind"].as_str()),
        (
            Some("certificates.k8s.io"),
            Some("CertificateSigningRequest")
        )
    );
    assert_eq!(details["causes"], json!([cause]));
}

#[test]
fn csr_create_takes_the_requester_identity() {
    let mut new = csr(
        "csr-worker-6",
        json!([cond("Approved", "True", "A", "pre-approved")]),
    );
    new["spec"]["request"] = json!(request(&["system:nodes"], "system:node:worker-6"));
    new["spec"]["username"] = json!("system:admin");
    new["spec"]["groups"] = json!(["system:masters"]);
    new["spec"]["uid"] = json!("x");
    new["spec"]["extra"] = json!({"k": ["v"]});
    admit(
        &csr_attrs(bootstrap_user("abcdef"), "", ""),
        Operation::Create,
        None,
        Some(&mut new),
        &MemReader::new(),
    )
    .unwrap();
    assert_eq!(new["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(
        new["spec"]["groups"],
        json!([
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:authenticated"
        ])
    );
    assert!(
        new["spec"].get("uid").is_none() && new["spec"].get("extra").is_none(),
        "token identities have no uid/extra"
    );
    assert_eq!(
        new["status"],
        json!({}),
        "a client cannot create a pre-approved CSR"
    );

    let mut node_user = user(
        IdentityKind::ClientCert,
        "system:node:worker-1",
        &["system:nodes", "system:authenticated"],
    );
    node_user.extra.insert(
        "authentication.kubernetes.io/credential-id".into(),
        vec!["X509SHA256=ab".into()],
    );
    let mut renewal = csr("csr-renew", json!([]));
    renewal["spec"]["request"] = json!(request(&["system:nodes"], "system:node:worker-1"));
    admit(
        &csr_attrs(node_user, "", ""),
        Operation::Create,
        None,
        Some(&mut renewal),
        &MemReader::new(),
    )
    .unwrap();
    assert_eq!(
        renewal["spec"]["extra"],
        json!({"authentication.kubernetes.io/credential-id": ["X509SHA256=ab"]})
    );
}

#[test]
fn nodes_may_only_request_certificates_for_themselves() {
    let mut other = csr("csr-x", json!([]));
    other["spec"]["request"] = json!(request(&["system:nodes"], "system:node:worker-2"));
    assert_admission_forbidden(
        admit(
            &csr_attrs(node_user("worker-1"), "", ""),
            Operation::Create,
            None,
            Some(&mut other),
            &MemReader::new(),
        ),
        r#"certificatesigningrequests.certificates.k8s.io "csr-x" is forbidden: can only create a node CSR with CN=system:node:worker-1"#,
        json!({"name": "csr-x", "group": "certificates.k8s.io", "kind": "certificatesigningrequests"}),
    );
}

#[test]
fn masters_client_certificates_are_refused() {
    let mut masters = csr("csr-m", json!([]));
    masters["spec"]["signerName"] = json!("kubernetes.io/kube-apiserver-client");
    masters["spec"]["request"] = json!(request(&["system:masters"], "root"));
    let err = admit(
        &csr_attrs(admin(), "", ""),
        Operation::Create,
        None,
        Some(&mut masters),
        &MemReader::new(),
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        r#"certificatesigningrequests.certificates.k8s.io "csr-m" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"#
    );
}

#[test]
fn conditions_sent_to_the_main_resource_are_dropped() {
    let old = csr("csr-worker-6", json!([]));
    let mut new = csr(
        "csr-worker-6",
        json!([cond(
            "Approved",
            "True",
            "KubeflavorApproved",
            "via main resource"
        )]),
    );
    new["spec"]["username"] = json!("system:admin");
    new["metadata"]["labels"] = json!({"a": "b"});
    update_csr(admin(), "", &old, &mut new, &MemReader::new()).unwrap();
    assert_eq!(new["status"], old["status"]);
    assert_eq!(new["spec"], old["spec"]);
    assert_eq!(
        new["metadata"]["labels"],
        json!({"a": "b"}),
        "metadata still changes"
    );
}

#[test]
fn approval_keeps_the_spec_and_fills_timestamps() {
    let mut old = csr("csr-worker-1", json!([]));
    old["status"]["certificate"] = json!("stored");
    let mut new = csr(
        "csr-worker-1",
        json!([cond(
            "Approved",
            "",
            "KubeflavorApproved",
            "node worker-1 bound"
        )]),
    );
    new["spec"]["signerName"] = json!("example.com/other");
    new["status"]["certificate"] = json!("forged");
    update_csr(admin(), "approval", &old, &mut new, &MemReader::new()).unwrap();
    assert_eq!(new["spec"], old["spec"]);
    assert_eq!(new["status"]["certificate"], "stored");
    let c = &new["status"]["conditions"][0];
    assert_eq!(
        (c["type"].as_str(), c["status"].as_str()),
        (Some("Approved"), Some("True")),
        "status defaults to True"
    );
    let stamp = c["lastUpdateTime"].as_str().unwrap();
    assert!(
        stamp.parse::<jiff::Timestamp>().is_ok() && stamp.len() == 20,
        "second precision: {stamp}"
    );
    assert_eq!(c["lastTransitionTime"], c["lastUpdateTime"]);
}

#[test]
fn approving_a_denied_csr_is_refused() {
    let old = stored_denied();
    let mut both = old.clone();
    both["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(cond(
            "Approved",
            "True",
            "KubeflavorApproved",
            "changed my mind",
        ));
    assert_invalid(
        update_csr(admin(), "approval", &old, &mut both, &MemReader::new()),
        r#"CertificateSigningRequest.certificates.k8s.io "csr-worker-2" is invalid: status.conditions: Invalid value: "Approved": Approved and Denied conditions are mutually exclusive"#,
        json!({"reason": "FieldValueInvalid", "message": r#"Invalid value: "Approved": Approved and Denied conditions are mutually exclusive"#, "field": "status.conditions"}),
    );
    let mut replaced = csr(
        "csr-worker-2",
        json!([cond(
            "Approved",
            "True",
            "KubeflavorApproved",
            "changed my mind"
        )]),
    );
    assert_invalid(
        update_csr(admin(), "approval", &old, &mut replaced, &MemReader::new()),
        r#"CertificateSigningRequest.certificates.k8s.io "csr-worker-2" is invalid: status.conditions: Forbidden: updates may not remove a condition of type "Denied""#,
        json!({"reason": "FieldValueForbidden", "message": r#"Forbidden: updates may not remove a condition of type "Denied""#, "field": "status.conditions"}),
    );
    let mut cleared = csr("csr-worker-2", json!([]));
    assert!(
        update_csr(admin(), "approval", &old, &mut cleared, &MemReader::new()).is_err(),
        "Denied is permanent"
    );
}

#[test]
fn the_message_of_a_decision_may_be_edited() {
    let old = stored_denied();
    let mut edited = old.clone();
    edited["status"]["conditions"][0]["message"] = json!("edited message");
    update_csr(admin(), "approval", &old, &mut edited, &MemReader::new()).unwrap();
    let c = &edited["status"]["conditions"][0];
    assert_eq!(
        (c["message"].as_str(), c["lastTransitionTime"].as_str()),
        (Some("edited message"), Some("2026-11-30T04:15:03Z"))
    );
}

#[test]
fn invalid_condition_sets_are_refused() {
    let old = csr("csr-worker-3", json!([]));
    let prefix = r#"CertificateSigningRequest.certificates.k8s.io "csr-worker-3" is invalid: "#;
    let mut both = csr(
        "csr-worker-3",
        json!([
            cond("Approved", "True", "A", "a"),
            cond("Denied", "True", "D", "d")
        ]),
    );
    assert_invalid(
        update_csr(admin(), "approval", &old, &mut both, &MemReader::new()),
        &format!(
            r#"{prefix}status.conditions: Invalid value: "Denied": Approved and Denied conditions are mutually exclusive"#
        ),
        json!({"reason": "FieldValueInvalid", "message": r#"Invalid value: "Denied": Approved and Denied conditions are mutually exclusive"#, "field": "status.conditions"}),
    );
    let mut falsy = csr("csr-worker-3", json!([cond("Approved", "False", "A", "a")]));
    assert_invalid(
        update_csr(admin(), "approval", &old, &mut falsy, &MemReader::new()),
        &format!(
            r#"{prefix}status.conditions[0].status: Unsupported value: "False": supported values: "True""#
        ),
        json!({"reason": "FieldValueNotSupported", "message": r#"Unsupported value: "False": supported values: "True""#, "field": "status.conditions[0].status"}),
    );
    let mut twice = csr(
        "csr-worker-3",
        json!([
            cond("Approved", "True", "A", "a"),
            cond("Approved", "True", "B", "b")
        ]),
    );
    assert_invalid(
        update_csr(admin(), "approval", &old, &mut twice, &MemReader::new()),
        &format!(r#"{prefix}status.conditions[1].type: Duplicate value: "Approved""#),
        json!({"reason": "FieldValueDuplicate", "message": r#"Duplicate value: "Approved""#, "field": "status.conditions[1].type"}),
    );
}

fn approver_reader(signer_name: &str) -> MemReader {
    MemReader::with_defaults()
        .with("rbac.authorization.k8s.io", "clusterroles", json!({"metadata": {"name": "approver"},
            "rules": [{"verbs": ["approve", "sign"], "apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [signer_name]}]}))
        .with("rbac.authorization.k8s.io", "clusterrolebindings", json!({"metadata": {"name": "approver"},
            "roleRef": {"kind": "ClusterRole", "name": "approver"}, "subjects": [{"kind": "User", "name": "controller"}]}))
}

#[test]
fn approval_needs_approve_on_the_signer() {
    let controller = || {
        user(
            IdentityKind::StaticToken,
            "controller",
            &["system:authenticated"],
        )
    };
    let old = csr("csr-worker-1", json!([]));
    let approve = || csr("csr-worker-1", json!([cond("Approved", "True", "R", "m")]));
    assert_admission_forbidden(
        update_csr(
            controller(),
            "approval",
            &old,
            &mut approve(),
            &approver_reader("example.com/x"),
        ),
        r#"certificatesigningrequests.certificates.k8s.io "csr-worker-1" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client-kubelet""#,
        json!({"name": "csr-worker-1", "group": "certificates.k8s.io", "kind": "certificatesigningrequests"}),
    );
    assert!(
        update_csr(
            controller(),
            "approval",
            &old,
            &mut approve(),
            &approver_reader(SIGNER)
        )
        .is_ok()
    );
    assert!(
        update_csr(
            controller(),
            "approval",
            &old,
            &mut approve(),
            &approver_reader("kubernetes.io/*")
        )
        .is_ok(),
        "domain wildcard"
    );
    // The default approver ClusterRole exists but is not bound.
    assert!(
        update_csr(
            controller(),
            "approval",
            &old,
            &mut approve(),
            &MemReader::with_defaults()
        )
        .is_err()
    );
    // 422 comes before the permission check, as validation precedes validating admission.
    let mut invalid = csr("csr-worker-1", json!([cond("Approved", "False", "R", "m")]));
    assert_eq!(
        update_csr(
            controller(),
            "approval",
            &old,
            &mut invalid,
            &MemReader::with_defaults()
        )
        .unwrap_err()
        .code,
        422
    );
}

#[test]
fn status_sets_the_certificate_but_not_the_decision() {
    let approved = csr("csr-worker-1", json!([cond("Approved", "True", "R", "m")]));
    let cert_pem = {
        let key = rcgen::KeyPair::generate().unwrap();
        rcgen::CertificateParams::default()
            .self_signed(&key)
            .unwrap()
            .pem()
    };
    let cert_b64 = base64::engine::general_purpose::STANDARD.encode(&cert_pem);
    let mut signed = approved.clone();
    signed["status"]["certificate"] = json!(cert_b64);
    signed["status"]["conditions"][0]["message"] = json!("rewritten by the signer");
    signed["spec"]["username"] = json!("someone-else");
    update_csr(admin(), "status", &approved, &mut signed, &MemReader::new()).unwrap();
    assert_eq!(signed["status"]["certificate"], json!(cert_b64));
    assert_eq!(
        signed["status"]["conditions"][0]["message"], "m",
        "Approved/Denied instances are preserved"
    );
    assert_eq!(signed["spec"], approved["spec"]);

    let controller = || {
        user(
            IdentityKind::StaticToken,
            "controller",
            &["system:authenticated"],
        )
    };
    let mut by_stranger = approved.clone();
    by_stranger["status"]["certificate"] = json!(cert_b64);
    let err = update_csr(
        controller(),
        "status",
        &approved,
        &mut by_stranger,
        &MemReader::with_defaults(),
    )
    .unwrap_err();
    assert!(err.message.ends_with(r#"user not permitted to sign requests with signerName "kubernetes.io/kube-apiserver-client-kubelet""#), "{}", err.message);
    let mut by_signer = approved.clone();
    by_signer["status"]["certificate"] = json!(cert_b64);
    assert!(
        update_csr(
            controller(),
            "status",
            &approved,
            &mut by_signer,
            &approver_reader(SIGNER)
        )
        .is_ok()
    );

    let mut rewritten = signed.clone();
    rewritten["status"]["certificate"] =
        json!(base64::engine::general_purpose::STANDARD.encode(cert_pem.replace('A', "B")));
    let err = update_csr(
        admin(),
        "status",
        &signed,
        &mut rewritten,
        &MemReader::new(),
    )
    .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("updates may not modify existing certificate content"),
        "{}",
        err.message
    );

    let mut self_approved = csr("csr-worker-1", json!([cond("Approved", "True", "R", "m")]));
    let pending = csr("csr-worker-1", json!([]));
    let err = update_csr(
        admin(),
        "status",
        &pending,
        &mut self_approved,
        &MemReader::new(),
    )
    .unwrap_err();
    assert!(
        err.message.ends_with(
            r#"status.conditions: Forbidden: updates may not add a condition of type "Approved""#
        ),
        "{}",
        err.message
    );
    let mut garbage = approved.clone();
    garbage["status"]["certificate"] =
        json!(base64::engine::general_purpose::STANDARD.encode("not a pem"));
    let err = update_csr(
        admin(),
        "status",
        &approved,
        &mut garbage,
        &MemReader::new(),
    )
    .unwrap_err();
    assert!(err.message.ends_with(r#"status.certificate: Invalid value: "<certificate data>": must contain at least one CERTIFICATE PEM block"#), "{}", err.message);
}

fn create_as_admin(mut new: Value) -> Result<(), ApiError> {
    admit(
        &csr_attrs(admin(), "", ""),
        Operation::Create,
        None,
        Some(&mut new),
        &MemReader::new(),
    )
}

#[test]
fn create_validates_the_request_usages_signer_and_lifetime() {
    let good = || {
        let mut c = csr("csr-v", json!([]));
        c["spec"]["request"] = json!(request(&["system:nodes"], "system:node:worker-1"));
        c
    };
    assert!(create_as_admin(good()).is_ok());

    let mut garbage = good();
    garbage["spec"]["request"] = json!(base64::engine::general_purpose::STANDARD.encode("hi"));
    let err = create_as_admin(garbage).unwrap_err();
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        r#"CertificateSigningRequest.certificates.k8s.io "csr-v" is invalid: spec.request: Invalid value: []byte{0x68, 0x69}: PEM block type must be CERTIFICATE REQUEST"#
    );

    let mut no_usages = good();
    no_usages["spec"]["usages"] = json!([]);
    assert!(
        create_as_admin(no_usages)
            .unwrap_err()
            .message
            .ends_with("spec.usages: Required value")
    );

    let mut odd_usages = good();
    odd_usages["spec"]["usages"] = json!(["client auth", "flying", "client auth"]);
    let message = create_as_admin(odd_usages).unwrap_err().message;
    assert!(message.contains(r#"[spec.usages[1]: Unsupported value: "flying": supported values: "any", "cert sign", "client auth","#), "{message}");
    assert!(
        message.ends_with(r#"spec.usages[2]: Duplicate value: "client auth"]"#),
        "{message}"
    );

    let mut no_signer = good();
    no_signer["spec"]["signerName"] = json!("");
    assert!(
        create_as_admin(no_signer)
            .unwrap_err()
            .message
            .ends_with("spec.signerName: Required value")
    );
    let mut bare_signer = good();
    bare_signer["spec"]["signerName"] = json!("kubelet");
    assert!(create_as_admin(bare_signer).unwrap_err().message.ends_with(
        r#"spec.signerName: Invalid value: "kubelet": must be a fully qualified domain and path of the form 'example.com/signer-name'"#
    ));

    let mut short = good();
    short["spec"]["expirationSeconds"] = json!(300);
    assert!(create_as_admin(short).unwrap_err().message.ends_with(
        "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 600 seconds (10 minutes)"
    ));
}
