//! The kube-controller-manager duties, as pure functions over stored objects: the kubelet
//! client CSR approver (csrapproving) and signer (csrsigning), the bootstrap signer of
//! `kube-public/cluster-info` (bootstrapsigner), and the token cleaner (tokencleaner). The
//! server core runs them and performs the writes.
//!
//! The kubelet client and kubelet serving signers are imitated (kcm also signs
//! `kube-apiserver-client` and `legacy-unknown` requests); issued certificates carry a
//! Subject Key Identifier, which Go's x509 leaves out of leaf certificates.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sha2::Sha256;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension};

use crate::authn::{
    Expiration, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_PREFIX, TOKEN_SECRET_TYPE, secret_data,
    token_expiration, token_has_expired,
};
use crate::types::{IdentityKind, ObjectReader, RequestAttributes, UserInfo};

pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// kcm's `--cluster-signing-duration` default (8760h).
const DEFAULT_TTL: SignedDuration = SignedDuration::from_hours(8760);
/// The signer backdates notBefore by 5 minutes against clock skew.
const BACKDATE: SignedDuration = SignedDuration::from_mins(5);
/// Below this lifetime the backdate is not taken out of the requested duration.
const SHORT: SignedDuration = SignedDuration::from_hours(8);
/// The smallest lifetime `spec.expirationSeconds` can ask for.
const MIN_TTL: SignedDuration = SignedDuration::from_mins(10);

/// The approver's messages (pkg/controller/certificates/approver/sarapprove.go).
pub const SELF_NODE_CLIENT_APPROVAL: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";
pub const NODE_CLIENT_APPROVAL: &str =
    "Auto approving kubelet client certificate after SubjectAccessReview.";
/// The reason of an auto-approval's Approved condition.
pub const AUTO_APPROVED: &str = "AutoApproved";

/// `sarApprover.handle`: for a CSR that is neither issued, Approved nor Denied and whose
/// request parses, try the recognizers in order (selfnodeclient: a kubelet client CSR whose
/// requester is its CommonName; nodeclient: any kubelet client CSR) and return the message
/// of the first whose SubjectAccessReview allows the requester (`spec.username/uid/groups/
/// extra`) `create` on `certificatesigningrequests/<selfnodeclient|nodeclient>`. `None`:
/// leave the CSR alone.
pub fn auto_approval(csr: &Value, reader: &dyn ObjectReader) -> Option<&'static str> {
    let status = csr.get("status");
    let issued = status
        .and_then(|s| s.get("certificate"))
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    // `GetCertApprovalCondition` looks at the condition types only.
    let decided = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Approved" || c["type"] == "Denied")
        });
    if issued || decided {
        return None;
    }
    let spec = csr.get("spec")?;
    let der = request_der(spec).ok()?;
    let (_, request) = X509CertificationRequest::from_der(&der).ok()?;
    let usages = spec_usages(spec);
    let is_node_client = spec.get("signerName").and_then(Value::as_str)
        == Some(KUBELET_CLIENT_SIGNER)
        && validate_kubelet_client(&request, &usages).is_ok();
    if !is_node_client {
        return None;
    }
    let username = spec.get("username").and_then(Value::as_str).unwrap_or("");
    let common_name = request
        .certification_request_info
        .subject
        .iter_common_name()
        .filter_map(|c| c.as_str().ok())
        .last()
        .unwrap_or("");
    let requester = requester_of(spec);
    let recognizers = [
        (
            username == common_name,
            "selfnodeclient",
            SELF_NODE_CLIENT_APPROVAL,
        ),
        (true, "nodeclient", NODE_CLIENT_APPROVAL),
    ];
    for (recognized, subresource, message) in recognizers {
        if !recognized {
            continue;
        }
        let review = RequestAttributes {
            user: requester.clone(),
            verb: "create".into(),
            is_resource_request: true,
            path: String::new(),
            api_group: "certificates.k8s.io".into(),
            api_version: "*".into(),
            resource: "certificatesigningrequests".into(),
            subresource: subresource.into(),
            namespace: String::new(),
            name: String::new(),
            field_selector: String::new(),
        };
        if crate::authz::evaluate(&review, reader).allowed {
            return Some(message);
        }
    }
    None
}

/// The user a CSR's spec names (what its SubjectAccessReview asks about).
fn requester_of(spec: &Value) -> UserInfo {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let extra = spec
        .get("extra")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
        .unwrap_or_default();
    UserInfo {
        // The kind only feeds request counters; a reviewed subject makes no request.
        kind: IdentityKind::StaticToken,
        name: spec["username"].as_str().unwrap_or("").to_string(),
        uid: spec["uid"].as_str().unwrap_or("").to_string(),
        groups: strings(&spec["groups"]),
        extra,
    }
}

/// The cluster CA, as PEM, for signing.
pub struct SigningCa<'a> {
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
}

/// An Approved kubelet client or serving CSR that is not Denied, not Failed and not yet
/// issued: what the signers still have to act on.
pub fn awaits_signing(csr: &Value) -> bool {
    let signer = csr.pointer("/spec/signerName").and_then(Value::as_str);
    if signer != Some(KUBELET_CLIENT_SIGNER) && signer != Some(KUBELET_SERVING_SIGNER) {
        return false;
    }
    let status = csr.get("status");
    let has_condition = |kind: &str| {
        status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == kind && c["status"] == "True")
            })
    };
    let issued = status
        .and_then(|s| s.get("certificate"))
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    has_condition("Approved") && !has_condition("Denied") && !has_condition("Failed") && !issued
}

/// For an Approved, not yet issued CSR with signer
/// `kubernetes.io/kube-apiserver-client-kubelet` or `kubernetes.io/kubelet-serving`: the
/// PEM certificate to put in `status.certificate`. `None` when there is nothing to sign
/// (pending, denied, failed, already issued, another signer). `Some(Err(message))` when the
/// request is not valid for its signer: the real signer then appends a condition
/// `Failed`/`True` with reason `SignerValidationFailure` and this message.
pub fn sign_csr(ca: &SigningCa<'_>, csr: &Value, now: Timestamp) -> Option<Result<String, String>> {
    if !awaits_signing(csr) {
        return None;
    }
    let spec = csr.get("spec")?;
    let name = csr
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let der = match request_der(spec) {
        Ok(der) => der,
        Err(err) => return Some(Err(format!("unable to parse csr \"{name}\": {err}"))),
    };
    let usages = spec_usages(spec);
    let expiration_seconds = spec.get("expirationSeconds").and_then(Value::as_i64);
    let validate = match spec.get("signerName").and_then(Value::as_str) {
        Some(KUBELET_SERVING_SIGNER) => validate_kubelet_serving,
        _ => validate_kubelet_client,
    };
    Some(issue(ca, &der, &usages, validate, expiration_seconds, now))
}

/// `spec.request` is base64 (on the JSON wire) of a PEM `CERTIFICATE REQUEST` block.
/// A CSR spec's `usages` (absent: none).
pub(crate) fn spec_usages(spec: &Value) -> Vec<&str> {
    spec.get("usages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

pub(crate) fn request_der(spec: &Value) -> Result<Vec<u8>, String> {
    let encoded = spec.get("request").and_then(Value::as_str).unwrap_or("");
    let pem_bytes = STANDARD
        .decode(encoded)
        .map_err(|e| format!("spec.request is not base64: {e}"))?;
    let pem_text = String::from_utf8(pem_bytes)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes())
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    Ok(pem.contents)
}

/// `ValidateKubeletClientCSR` (pkg/apis/certificates/v1): what the kubelet client signer
/// accepts. The messages are upstream's.
pub fn validate_kubelet_client(
    csr: &X509CertificationRequest<'_>,
    usages: &[&str],
) -> Result<(), String> {
    let subject = &csr.certification_request_info.subject;
    check_nodes_organization(subject)?;
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                return Err(match name {
                    GeneralName::DNSName(_) => "DNS subjectAltNames are not allowed",
                    GeneralName::RFC822Name(_) => "Email subjectAltNames are not allowed",
                    GeneralName::IPAddress(_) => "IP subjectAltNames are not allowed",
                    GeneralName::URI(_) => "URI subjectAltNames are not allowed",
                    _ => continue,
                }
                .into());
            }
        }
    }
    check_node_common_name(subject)?;
    check_usages(
        usages,
        &["client auth", "digital signature", "key encipherment"],
        &["client auth", "digital signature"],
    )
}

/// Both kubelet signers' rule: the organization is exactly `system:nodes`.
fn check_nodes_organization(subject: &x509_parser::x509::X509Name<'_>) -> Result<(), String> {
    let orgs: Vec<&str> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .collect();
    if orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    Ok(())
}

/// Both kubelet signers' rule: the (last) common name begins with `system:node:`.
fn check_node_common_name(subject: &x509_parser::x509::X509Name<'_>) -> Result<(), String> {
    let cn = subject
        .iter_common_name()
        .filter_map(|c| c.as_str().ok())
        .last()
        .unwrap_or("");
    if !cn.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// The usages, as a set, are exactly `with_rsa` or `without_rsa` (both sorted); the
/// message names the first, as upstream's `sets.List` prints it.
fn check_usages(usages: &[&str], with_rsa: &[&str], without_rsa: &[&str]) -> Result<(), String> {
    let mut set: Vec<&str> = usages.to_vec();
    set.sort_unstable();
    set.dedup();
    if set != with_rsa && set != without_rsa {
        return Err(format!("usages did not match [{}]", with_rsa.join(" ")));
    }
    Ok(())
}

/// `ValidateKubeletServingCSR` (pkg/apis/certificates/v1): what the kubelet serving
/// signer accepts. The messages are upstream's.
pub fn validate_kubelet_serving(
    csr: &X509CertificationRequest<'_>,
    usages: &[&str],
) -> Result<(), String> {
    let subject = &csr.certification_request_info.subject;
    check_nodes_organization(subject)?;
    let names: Vec<&GeneralName<'_>> = csr
        .requested_extensions()
        .into_iter()
        .flatten()
        .filter_map(|ext| match ext {
            ParsedExtension::SubjectAlternativeName(san) => Some(san.general_names.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    let has = |f: fn(&GeneralName<'_>) -> bool| names.iter().any(|n| f(n));
    if !has(|n| matches!(n, GeneralName::DNSName(_) | GeneralName::IPAddress(_))) {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if has(|n| matches!(n, GeneralName::RFC822Name(_))) {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if has(|n| matches!(n, GeneralName::URI(_))) {
        return Err("URI subjectAltNames are not allowed".into());
    }
    check_node_common_name(subject)?;
    check_usages(
        usages,
        &["digital signature", "key encipherment", "server auth"],
        &["digital signature", "server auth"],
    )
}

/// `CertificateAuthority.Sign` with kcm's `PermissiveSigningPolicy`: the request's subject
/// and subject alternative names (DNS names and IP addresses), the usages asked for.
fn issue(
    ca: &SigningCa<'_>,
    der: &[u8],
    usages: &[&str],
    validate: fn(&X509CertificationRequest<'_>, &[&str]) -> Result<(), String>,
    expiration_seconds: Option<i64>,
    now: Timestamp,
) -> Result<String, String> {
    let (_, request) =
        X509CertificationRequest::from_der(der).map_err(|e| format!("unable to parse csr: {e}"))?;
    validate(&request, usages)?;
    request
        .verify_signature()
        .map_err(|e| format!("unable to verify certificate request signature: {e}"))?;

    let ca_der = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes())
        .map_err(|e| format!("cluster CA certificate: {e}"))?
        .1
        .contents;
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der)
        .map_err(|e| format!("cluster CA certificate: {e}"))?;
    let ca_not_after = Timestamp::from_second(ca_cert.validity().not_after.timestamp())
        .map_err(|e| format!("cluster CA certificate: {e}"))?;

    let ttl = requested_ttl(expiration_seconds);
    let not_before = now - BACKDATE;
    let mut not_after = if ttl < SHORT {
        now + ttl
    } else {
        not_before + ttl
    };
    if not_after >= ca_not_after {
        not_after = ca_not_after;
    }
    if not_before >= ca_not_after {
        return Err(format!("the signer has expired: NotAfter={ca_not_after}"));
    }

    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = subject_of(&request)?;
    params.not_before = asn1_time(not_before)?.to_datetime();
    params.not_after = asn1_time(not_after)?.to_datetime();
    params.serial_number = Some(random_serial()?);
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    for usage in usages {
        match *usage {
            "digital signature" => params
                .key_usages
                .push(rcgen::KeyUsagePurpose::DigitalSignature),
            "key encipherment" => params
                .key_usages
                .push(rcgen::KeyUsagePurpose::KeyEncipherment),
            "client auth" => {
                params.insert_extended_key_usage(rcgen::ExtendedKeyUsagePurpose::ClientAuth)
            }
            "server auth" => {
                params.insert_extended_key_usage(rcgen::ExtendedKeyUsagePurpose::ServerAuth)
            }
            _ => {}
        }
    }
    for ext in request.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(dns) => {
                        params.subject_alt_names.push(rcgen::SanType::DnsName(
                            (*dns)
                                .try_into()
                                .map_err(|e| format!("DNS name {dns}: {e}"))?,
                        ))
                    }
                    GeneralName::IPAddress(bytes) => {
                        let ip = match bytes.len() {
                            4 => std::net::IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()),
                            16 => std::net::IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()),
                            n => return Err(format!("an IP address of {n} bytes")),
                        };
                        params.subject_alt_names.push(rcgen::SanType::IpAddress(ip));
                    }
                    _ => {}
                }
            }
        }
    }
    let spki =
        rcgen::SubjectPublicKeyInfo::from_der(request.certification_request_info.subject_pki.raw)
            .map_err(|e| format!("unsupported public key: {e}"))?;
    let key = rcgen::KeyPair::from_pem(ca.key_pem).map_err(|e| format!("cluster CA key: {e}"))?;
    let issuer = rcgen::Issuer::from_ca_cert_der(&ca_der.into(), key)
        .map_err(|e| format!("cluster CA certificate: {e}"))?;
    let cert = params
        .signed_by(&spki, &issuer)
        .map_err(|e| format!("signing failed: {e}"))?;
    Ok(cert.pem())
}

/// `duration()`: `spec.expirationSeconds` may shorten the lifetime (down to 10 minutes),
/// never lengthen it.
fn requested_ttl(expiration_seconds: Option<i64>) -> SignedDuration {
    match expiration_seconds.map(SignedDuration::from_secs) {
        None => DEFAULT_TTL,
        Some(d) if d > DEFAULT_TTL => DEFAULT_TTL,
        Some(d) if d < MIN_TTL => MIN_TTL,
        Some(d) => d,
    }
}

/// The CSR's subject, re-encoded as Go's `pkix.Name` does it: one attribute per RDN in a
/// fixed order (C, ST, L, O, OU, CN), PrintableString where the value allows it.
fn subject_of(request: &X509CertificationRequest<'_>) -> Result<rcgen::DistinguishedName, String> {
    use x509_parser::oid_registry as oids;
    let subject = &request.certification_request_info.subject;
    let mut dn = rcgen::DistinguishedName::new();
    let order = [
        (oids::OID_X509_COUNTRY_NAME, rcgen::DnType::CountryName),
        (
            oids::OID_X509_STATE_OR_PROVINCE_NAME,
            rcgen::DnType::StateOrProvinceName,
        ),
        (oids::OID_X509_LOCALITY_NAME, rcgen::DnType::LocalityName),
        (
            oids::OID_X509_ORGANIZATION_NAME,
            rcgen::DnType::OrganizationName,
        ),
        (
            oids::OID_X509_ORGANIZATIONAL_UNIT,
            rcgen::DnType::OrganizationalUnitName,
        ),
        (oids::OID_X509_COMMON_NAME, rcgen::DnType::CommonName),
    ];
    for (oid, ty) in order {
        let value = subject
            .iter_by_oid(&oid)
            .filter_map(|a| a.as_str().ok())
            .last();
        if let Some(value) = value {
            let encoded = match rcgen::string::PrintableString::try_from(value) {
                Ok(printable) => rcgen::DnValue::PrintableString(printable),
                Err(_) => rcgen::DnValue::Utf8String(value.to_string()),
            };
            dn.push(ty, encoded);
        }
    }
    Ok(dn)
}

fn asn1_time(t: Timestamp) -> Result<x509_parser::time::ASN1Time, String> {
    x509_parser::time::ASN1Time::from_timestamp(t.as_second())
        .map_err(|e| format!("time out of range: {e}"))
}

/// A positive 63-bit serial, as Go's `rand.Int(rand.Reader, MaxInt64)`.
fn random_serial() -> Result<rcgen::SerialNumber, String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    bytes[0] &= 0x7f;
    bytes[7] |= 1;
    Ok(rcgen::SerialNumber::from_slice(&bytes))
}

/// The `jws-kubeconfig-<id>` entries cluster-info should carry (keys are the full data
/// keys): one per valid, unexpired token Secret with `usage-bootstrap-signing: "true"`,
/// signed over `kubeconfig`.
pub fn cluster_info_signatures<'a>(
    kubeconfig: &str,
    token_secrets: impl IntoIterator<Item = &'a Value>,
    now: Timestamp,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for secret in token_secrets {
        if let Some((id, token_secret)) = signing_token(secret, now) {
            out.entry(format!("jws-kubeconfig-{id}"))
                .or_insert_with(|| detached_jws(kubeconfig, &id, &token_secret));
        }
    }
    out
}

/// bootstrapsigner's `validateSecretForSigning`.
fn signing_token(secret: &Value, now: Timestamp) -> Option<(String, String)> {
    if !is_token_secret(secret) {
        return None;
    }
    let name = secret.pointer("/metadata/name").and_then(Value::as_str)?;
    let name_id = name.strip_prefix(TOKEN_SECRET_PREFIX)?;
    if name_id.len() != 6
        || !name_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return None;
    }
    let id = secret_data(secret, "token-id").filter(|id| id == name_id)?;
    let token_secret = secret_data(secret, "token-secret").filter(|s| !s.is_empty())?;
    if token_has_expired(secret, now) {
        return None;
    }
    (secret_data(secret, "usage-bootstrap-signing").as_deref() == Some("true"))
        .then_some((id, token_secret))
}

fn is_token_secret(secret: &Value) -> bool {
    secret.get("type").and_then(Value::as_str) == Some(TOKEN_SECRET_TYPE)
        && secret
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .is_none_or(|ns| ns == TOKEN_SECRET_NAMESPACE)
}

/// A compact HS256 JWS with detached payload, as kube-controller-manager's bootstrapsigner
/// writes it: header `{"alg":"HS256","kid":"<id>"}`, key = the token secret, output
/// `header..signature`.
pub fn detached_jws(content: &str, token_id: &str, token_secret: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(format!("{{\"alg\":\"HS256\",\"kid\":\"{token_id}\"}}"));
    let payload = URL_SAFE_NO_PAD.encode(content);
    let mut mac = Hmac::<Sha256>::new_from_slice(token_secret.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(format!("{header}.{payload}").as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{header}..{signature}")
}

/// Names of the token Secrets whose expiration has passed (or does not parse), and the
/// earliest future expiration among the rest (when the cleaner should look again).
pub fn expired_tokens<'a>(
    token_secrets: impl IntoIterator<Item = &'a Value>,
    now: Timestamp,
) -> (Vec<String>, Option<Timestamp>) {
    let mut expired = Vec::new();
    let mut next: Option<Timestamp> = None;
    for secret in token_secrets.into_iter().filter(|s| is_token_secret(s)) {
        let Some(name) = secret.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        match token_expiration(secret) {
            Expiration::Never => {}
            Expiration::Unparsable => expired.push(name.to_string()),
            Expiration::At(at) if at <= now => expired.push(name.to_string()),
            Expiration::At(at) => next = Some(next.map_or(at, |n| n.min(at))),
        }
    }
    (expired, next)
}

#[cfg(test)]
mod tests;
