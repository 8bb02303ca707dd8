//! The CertificateSigningRequest rules of kube-apiserver: the registry strategies
//! (pkg/registry/certificates/certificates/strategy.go), their validation
//! (pkg/apis/certificates/validation) and the approval, signing and subject-restriction
//! admission plugins (plugin/pkg/admission/certificates).
//!
//! - create: the requester's identity overwrites `spec.username/uid/groups/extra`, and a
//!   client-set status is dropped;
//! - update of the main resource: spec and status stay as stored (conditions sent there
//!   are silently dropped, with a 200);
//! - `/approval`: only the conditions change; Approved and Denied are exclusive and
//!   permanent, but their reason and message may still be edited later; the caller
//!   needs `approve` on the signer;
//! - `/status`: the spec and the Approved/Denied conditions stay; changing the certificate
//!   or the conditions needs `sign` on the signer.

use jiff::Timestamp;
use serde_json::{Value, json};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use crate::authz::{self, new_forbidden};
use crate::kcm::request_der;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes, UserInfo};
use validation::{Subresource, quote, validate_create, validate_update};

mod validation;

pub(super) const GROUP: &str = "certificates.k8s.io";
const RESOURCE: &str = "certificatesigningrequests";
pub(super) const KIND: &str = "CertificateSigningRequest";
pub(super) const APPROVED: &str = "Approved";
pub(super) const DENIED: &str = "Denied";
pub(super) const FAILED: &str = "Failed";

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
            validate_create(new)?;
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

pub(super) fn name_of(object: &Value) -> &str {
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

pub(super) fn conditions(csr: &Value) -> Vec<Value> {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(super) fn cond_str<'a>(condition: &'a Value, field: &str) -> &'a str {
    condition.get(field).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn certificate(csr: &Value) -> &str {
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
