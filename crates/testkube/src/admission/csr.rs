//! The CertificateSigningRequest rules of kube-apiserver: the registry strategies
//! (pkg/registry/certificates/certificates/strategy.go), their validation
//! (pkg/apis/certificates/validation) and the approval, signing and subject-restriction
//! admission plugins (plugin/pkg/admission/certificates).
//!
//! - create: the requester's identity overwrites `spec.username/uid/groups/extra`, and a
//!   client-set status is dropped (capture 17);
//! - update of the main resource: spec and status stay as stored (conditions sent there
//!   are silently dropped, capture 25);
//! - `/approval`: only the conditions change; Approved and Denied are exclusive and
//!   permanent, but their reason and message may be edited (captures 22-24); the caller
//!   needs `approve` on the signer;
//! - `/status`: the spec and the Approved/Denied conditions stay; changing the certificate
//!   or the conditions needs `sign` on the signer.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use serde_json::{Value, json};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use crate::authz::{self, new_forbidden};
use crate::errors::{FieldError, invalid};
use crate::kcm::request_der;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes, UserInfo};

const GROUP: &str = "certificates.k8s.io";
const RESOURCE: &str = "certificatesigningrequests";
const KIND: &str = "CertificateSigningRequest";
const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
const FAILED: &str = "Failed";

pub fn admit(
    attrs: &RequestAttributes,
    op: Operation,
    old: Option<&Value>,
    new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let Some(new) = new else { return Ok(()) };
    match (op, attrs.subresource.as_str(), old) {
        (Operation::Create, "", _) => {
            prepare_for_create(&attrs.user, new);
            restrict_subject(new)
        }
        (Operation::Update, "", Some(old)) => {
            // Everything but metadata is immutable through the main resource.
            copy_field(new, old, "spec");
            copy_field(new, old, "status");
            Ok(())
        }
        (Operation::Update, "approval", Some(old)) => update_approval(attrs, old, new, reader),
        (Operation::Update, "status", Some(old)) => update_status(attrs, old, new, reader),
        _ => Ok(()),
    }
}

fn copy_field(new: &mut Value, old: &Value, field: &str) {
    match old.get(field) {
        Some(v) => new[field] = v.clone(),
        None => {
            if let Some(obj) = new.as_object_mut() {
                obj.remove(field);
            }
        }
    }
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `csrStrategy.PrepareForCreate`.
fn prepare_for_create(user: &UserInfo, csr: &mut Value) {
    if !csr.get("spec").is_some_and(Value::is_object) {
        csr["spec"] = json!({});
    }
    let spec = csr["spec"]
        .as_object_mut()
        .expect("spec was just made an object");
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    spec.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
    csr["status"] = json!({});
}

/// certificatesubjectrestriction: nobody gets a `system:masters` client certificate from
/// the generic client signer.
fn restrict_subject(csr: &Value) -> Result<(), ApiError> {
    let spec = &csr["spec"];
    let signer = "kubernetes.io/kube-apiserver-client";
    if spec.get("signerName").and_then(Value::as_str) != Some(signer) {
        return Ok(());
    }
    let Ok(der) = request_der(spec) else {
        return Ok(());
    };
    let Ok((_, request)) = X509CertificationRequest::from_der(&der) else {
        return Ok(());
    };
    let masters = request
        .certification_request_info
        .subject
        .iter_organization()
        .any(|o| o.as_str() == Ok(authz::MASTERS_GROUP));
    if masters {
        return Err(new_forbidden(
            GROUP,
            RESOURCE,
            name_of(csr),
            &format!(
                "use of {signer} signer with {} group is not allowed",
                authz::MASTERS_GROUP
            ),
        ));
    }
    Ok(())
}

/// The CommonName of `spec.request` (for NodeRestriction's check on node-filed CSRs).
pub fn request_common_name(spec: &Value) -> Result<String, String> {
    let der = request_der(spec)?;
    let (_, request) = X509CertificationRequest::from_der(&der).map_err(|e| e.to_string())?;
    let cn = request
        .certification_request_info
        .subject
        .iter_common_name()
        .filter_map(|c| c.as_str().ok())
        .last();
    Ok(cn.unwrap_or_default().to_string())
}

fn conditions(csr: &Value) -> Vec<Value> {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn cond_str<'a>(condition: &'a Value, field: &str) -> &'a str {
    condition.get(field).and_then(Value::as_str).unwrap_or("")
}

fn certificate(csr: &Value) -> &str {
    csr.pointer("/status/certificate")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn set_conditions(csr: &mut Value, conditions: Vec<Value>) {
    if !csr.get("status").is_some_and(Value::is_object) {
        csr["status"] = json!({});
    }
    let status = csr["status"]
        .as_object_mut()
        .expect("status was just made an object");
    if conditions.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), Value::Array(conditions));
    }
}

/// v1 defaulting: a condition without a status is `True`.
fn default_condition_status(conditions: &mut [Value]) {
    for c in conditions.iter_mut().filter(|c| c.is_object()) {
        if cond_str(c, "status").is_empty() {
            c["status"] = json!("True");
        }
    }
}

/// `populateConditionTimestamps`: fill what the client left out; an unchanged type and
/// status keeps its old lastTransitionTime.
fn populate_timestamps(new: &mut [Value], old: &[Value], now: Timestamp) {
    let now = json!(
        Timestamp::from_second(now.as_second())
            .unwrap_or(now)
            .to_string()
    );
    let is_zero = |c: &Value, f: &str| cond_str(c, f).is_empty();
    for c in new.iter_mut().filter(|c| c.is_object()) {
        if is_zero(c, "lastUpdateTime") {
            c["lastUpdateTime"] = now.clone();
        }
        if is_zero(c, "lastTransitionTime") {
            let previous = old.iter().find(|o| {
                cond_str(o, "type") == cond_str(c, "type")
                    && cond_str(o, "status") == cond_str(c, "status")
                    && !is_zero(o, "lastTransitionTime")
            });
            c["lastTransitionTime"] =
                previous.map_or(now.clone(), |o| o["lastTransitionTime"].clone());
        }
    }
}

/// `csrApprovalStrategy.PrepareForUpdate`, its validation, then the approval plugin.
fn update_approval(
    attrs: &RequestAttributes,
    old: &Value,
    new: &mut Value,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let old_conditions = conditions(old);
    let mut new_conditions = conditions(new);
    default_condition_status(&mut new_conditions);
    populate_timestamps(&mut new_conditions, &old_conditions, Timestamp::now());
    copy_field(new, old, "spec");
    copy_field(new, old, "status");
    set_conditions(new, new_conditions);
    validate_update(old, new, Subresource::Approval)?;
    require_signer_permission(attrs, old, new, reader, "approve")
}

/// `csrStatusStrategy.PrepareForUpdate`, its validation, then the signing plugin.
fn update_status(
    attrs: &RequestAttributes,
    old: &Value,
    new: &mut Value,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    copy_field(new, old, "spec");
    let old_conditions = conditions(old);
    let mut new_conditions = conditions(new);
    default_condition_status(&mut new_conditions);
    for kind in [APPROVED, DENIED] {
        preserve_instances(&mut new_conditions, &old_conditions, kind);
    }
    populate_timestamps(&mut new_conditions, &old_conditions, Timestamp::now());
    set_conditions(new, new_conditions);
    validate_update(old, new, Subresource::Status)?;
    let changed = certificate(old) != certificate(new) || conditions(old) != conditions(new);
    if changed {
        require_signer_permission(attrs, old, new, reader, "sign")?;
    }
    Ok(())
}

/// `preserveConditionInstances`: when the count of a type is unchanged, the stored
/// instances win (only the signer's own conditions are its to edit).
fn preserve_instances(new: &mut [Value], old: &[Value], kind: &str) {
    let old_idx: Vec<usize> = (0..old.len())
        .filter(|&i| cond_str(&old[i], "type") == kind)
        .collect();
    let new_idx: Vec<usize> = (0..new.len())
        .filter(|&i| cond_str(&new[i], "type") == kind)
        .collect();
    if old_idx.len() == new_idx.len() {
        for (n, o) in new_idx.into_iter().zip(old_idx) {
            new[n] = old[o].clone();
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Subresource {
    Approval,
    Status,
}

/// `validateCertificateSigningRequestUpdate` for what an update can change: the conditions
/// and the certificate. The field paths and messages are those of the captures (22, 23).
fn validate_update(old: &Value, new: &Value, via: Subresource) -> Result<(), ApiError> {
    let old_conditions = conditions(old);
    let new_conditions = conditions(new);
    let mut causes = validate_conditions(&new_conditions, &old_conditions);
    let (old_cert, new_cert) = (certificate(old), certificate(new));
    if old_cert != new_cert
        && let Err(err) = validate_certificate(new_cert)
    {
        causes.push(FieldError::invalid(
            "status.certificate",
            "<certificate data>",
            &err,
        ));
    }
    let count =
        |cs: &[Value], kind: &str| cs.iter().filter(|c| cond_str(c, "type") == kind).count();
    for kind in [APPROVED, DENIED, FAILED] {
        if count(&new_conditions, kind) < count(&old_conditions, kind) {
            causes.push(FieldError::forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type \"{kind}\""),
            ));
        }
    }
    if via != Subresource::Approval {
        for kind in [APPROVED, DENIED] {
            if count(&new_conditions, kind) > count(&old_conditions, kind) {
                causes.push(FieldError::forbidden(
                    "status.conditions",
                    &format!("updates may not add a condition of type \"{kind}\""),
                ));
            }
        }
    }
    if old_cert != new_cert {
        if via != Subresource::Status {
            causes.push(FieldError::forbidden(
                "status.certificate",
                "updates may not set certificate content",
            ));
        } else if !old_cert.is_empty() {
            causes.push(FieldError::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(KIND, GROUP, name_of(new), &causes))
    }
}

fn validate_conditions(new: &[Value], old: &[Value]) -> Vec<FieldError> {
    let has = |cs: &[Value], kind: &str| cs.iter().any(|c| cond_str(c, "type") == kind);
    let duplicated = |cs: &[Value]| {
        let mut seen = std::collections::BTreeSet::new();
        cs.iter()
            .any(|c| !seen.insert(cond_str(c, "type").to_string()))
    };
    // Problems already stored are tolerated, for compatibility with existing data.
    let allow_both = has(old, APPROVED) && has(old, DENIED);
    let allow_duplicates = duplicated(old);
    let allow_empty_type = old.iter().any(|c| cond_str(c, "type").is_empty());

    let mut causes = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in new.iter().enumerate() {
        let kind = cond_str(c, "type");
        let status = cond_str(c, "status");
        if kind.is_empty() && !allow_empty_type {
            causes.push(FieldError::required(
                format!("status.conditions[{i}].type"),
                "",
            ));
        }
        let allowed: &[&str] = if [APPROVED, DENIED, FAILED].contains(&kind) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if status.is_empty() {
            causes.push(FieldError::required(
                format!("status.conditions[{i}].status"),
                "",
            ));
        } else if !allowed.contains(&status) {
            causes.push(not_supported(
                format!("status.conditions[{i}].status"),
                status,
                allowed,
            ));
        }
        if !allow_both {
            let clash = match kind {
                APPROVED => {
                    approved = true;
                    denied
                }
                DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                causes.push(FieldError::invalid(
                    "status.conditions",
                    kind,
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !allow_duplicates && !seen.insert(kind.to_string()) {
            causes.push(FieldError {
                reason: "FieldValueDuplicate",
                field: format!("status.conditions[{i}].type"),
                message: format!("Duplicate value: {}", quote(kind)),
            });
        }
    }
    causes
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn not_supported(field: String, value: &str, allowed: &[&str]) -> FieldError {
    let allowed: Vec<String> = allowed.iter().map(|a| quote(a)).collect();
    FieldError {
        reason: "FieldValueNotSupported",
        field,
        message: format!(
            "Unsupported value: {}: supported values: {}",
            quote(value),
            allowed.join(", ")
        ),
    }
}

/// `validateCertificate`: `status.certificate` (base64 on the wire) must be one or more
/// PEM `CERTIFICATE` blocks holding parseable certificates.
fn validate_certificate(encoded: &str) -> Result<(), String> {
    if encoded.is_empty() {
        return Ok(());
    }
    let bytes = STANDARD.decode(encoded).map_err(|e| e.to_string())?;
    let mut blocks = 0;
    for pem in x509_parser::pem::Pem::iter_from_buffer(&bytes) {
        let Ok(pem) = pem else { break };
        if pem.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {}",
                quote(&pem.label)
            ));
        }
        pem.parse_x509()
            .map_err(|e| format!("x509: malformed certificate: {e}"))?;
        blocks += 1;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

/// `IsAuthorizedForSignerName`: the verb on `signers/<signerName>`, or on `<domain>/*`.
fn require_signer_permission(
    attrs: &RequestAttributes,
    old: &Value,
    new: &Value,
    reader: &dyn ObjectReader,
    verb: &str,
) -> Result<(), ApiError> {
    let signer = old
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let domain = signer.split('/').next().unwrap_or("");
    let allowed = [signer.to_string(), format!("{domain}/*")]
        .into_iter()
        .any(|name| {
            let check = RequestAttributes {
                user: attrs.user.clone(),
                verb: verb.into(),
                is_resource_request: true,
                path: String::new(),
                api_group: GROUP.into(),
                api_version: "*".into(),
                resource: "signers".into(),
                subresource: String::new(),
                namespace: String::new(),
                name,
                field_selector: String::new(),
            };
            authz::is_allowed(&check, reader)
        });
    if allowed {
        return Ok(());
    }
    let name = if attrs.name.is_empty() {
        name_of(new)
    } else {
        &attrs.name
    };
    Err(new_forbidden(
        GROUP,
        RESOURCE,
        name,
        &format!(
            "user not permitted to {verb} requests with signerName {}",
            quote(signer)
        ),
    ))
}
