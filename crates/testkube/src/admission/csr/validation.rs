//! `pkg/apis/certificates/validation` for what testkube lets a request change: the
//! request itself on create, the conditions and the certificate on update. Field paths and
//! messages are those kube-apiserver puts in its 422s.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use super::{APPROVED, DENIED, FAILED, GROUP, KIND, certificate, cond_str, conditions, name_of};
use crate::errors::{FieldError, invalid};
use crate::kcm::{request_der, spec_usages};
use crate::types::ApiError;

/// Every usage the API accepts, sorted as Go's `sets.List` returns them.
const VALID_USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// `ValidateCertificateSigningRequestCreate`, minus the object-meta checks the server core
/// makes for every resource.
pub(super) fn validate_create(csr: &Value) -> Result<(), ApiError> {
    let spec = csr.get("spec").unwrap_or(&Value::Null);
    let mut causes = Vec::new();
    if let Err(err) = check_request(spec) {
        let encoded = spec.get("request").and_then(Value::as_str).unwrap_or("");
        let raw = STANDARD.decode(encoded).unwrap_or_default();
        causes.push(FieldError {
            reason: "FieldValueInvalid",
            field: "spec.request".into(),
            message: format!("Invalid value: {}: {err}", go_bytes(&raw)),
        });
    }
    let usages = spec_usages(spec);
    if usages.is_empty() {
        causes.push(FieldError::required("spec.usages", ""));
    }
    for (i, usage) in usages.iter().enumerate() {
        if !VALID_USAGES.contains(usage) {
            causes.push(not_supported(
                format!("spec.usages[{i}]"),
                usage,
                &VALID_USAGES,
            ));
        }
    }
    for (i, usage) in usages.iter().enumerate() {
        if usages[..i].contains(usage) {
            causes.push(duplicate(format!("spec.usages[{i}]"), usage));
        }
    }
    let signer = spec.get("signerName").and_then(Value::as_str).unwrap_or("");
    if signer.is_empty() {
        causes.push(FieldError::required("spec.signerName", ""));
    } else if signer == "kubernetes.io/legacy-unknown" {
        causes.push(FieldError::invalid(
            "spec.signerName",
            signer,
            "the legacy signerName is not allowed via this API version",
        ));
    } else if signer.split('/').count() != 2 {
        causes.push(FieldError::invalid(
            "spec.signerName",
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
    }
    if let Some(seconds) = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .filter(|s| *s < 600)
    {
        causes.push(FieldError {
            reason: "FieldValueInvalid",
            field: "spec.expirationSeconds".into(),
            message: format!(
                "Invalid value: {seconds}: may not specify a duration less than 600 seconds (10 minutes)"
            ),
        });
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(KIND, GROUP, name_of(csr), &causes))
    }
}

/// `validateCSR`: a PEM `CERTIFICATE REQUEST` whose signature verifies.
fn check_request(spec: &Value) -> Result<(), String> {
    let der = request_der(spec)?;
    let (_, request) =
        X509CertificationRequest::from_der(&der).map_err(|e| format!("asn1: {e}"))?;
    request.verify_signature().map_err(|e| format!("x509: {e}"))
}

/// Go's `%#v` of a `[]byte`, as field errors print an invalid byte-slice value.
fn go_bytes(bytes: &[u8]) -> String {
    let items: Vec<String> = bytes.iter().map(|b| format!("{b:#x}")).collect();
    format!("[]byte{{{}}}", items.join(", "))
}

fn duplicate(field: String, value: &str) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate",
        field,
        message: format!("Duplicate value: {}", quote(value)),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Subresource {
    Approval,
    Status,
}

/// `validateCertificateSigningRequestUpdate` for what an update can change: the conditions
/// and the certificate. The field paths and messages are those of kube-apiserver's 422s.
pub(super) fn validate_update(old: &Value, new: &Value, via: Subresource) -> Result<(), ApiError> {
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
            causes.push(duplicate(format!("status.conditions[{i}].type"), kind));
        }
    }
    causes
}

pub(super) fn quote(s: &str) -> String {
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
