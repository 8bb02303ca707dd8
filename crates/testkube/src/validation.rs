//! Generic validation with the real server's messages: object names, label keys
//! and values, annotation keys, Secret/ConfigMap data keys, Secret base64, MicroTime fields.

use base64::Engine;
use serde_json::Value;

use crate::errors::{FieldError, bad_request, invalid, invalid_object};
use crate::resources::{NameRule, ResourceInfo};
use crate::types::ApiError;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn is_alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| is_alnum_lower(c) || c == '-')
        && s.starts_with(is_alnum_lower)
        && s.ends_with(is_alnum_lower)
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_qualified_name_part(s)
}

pub fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// Problems with a label or annotation key (`[prefix/]name`).
fn qualified_name_errors(field: &str, key: &str) -> Vec<FieldError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if let Some(prefix) = prefix
        && !is_dns1123_subdomain(prefix)
    {
        errs.push(FieldError::invalid(
            field,
            key,
            &format!("prefix part {SUBDOMAIN_MSG}"),
        ));
    }
    // As apimachinery's IsQualifiedName: an empty name part fails both checks.
    if name.is_empty() {
        errs.push(FieldError::invalid(
            field,
            key,
            "name part must be non-empty",
        ));
    } else if name.len() > 63 {
        errs.push(FieldError::invalid(
            field,
            key,
            "name part must be no more than 63 characters",
        ));
    }
    let regex_ok = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !regex_ok {
        errs.push(FieldError::invalid(field, key, QUALIFIED_NAME_MSG));
    }
    errs
}

fn name_errors(rule: NameRule, name: &str) -> Option<FieldError> {
    let ok = match rule {
        NameRule::Subdomain => is_dns1123_subdomain(name),
        NameRule::Label => is_dns1123_label(name),
        NameRule::PathSegment => !matches!(name, "." | "..") && !name.contains(['/', '%']),
    };
    if ok {
        return None;
    }
    let msg = match rule {
        NameRule::Subdomain => SUBDOMAIN_MSG.to_string(),
        NameRule::Label => LABEL_MSG.to_string(),
        NameRule::PathSegment => {
            "may not contain '/' or '%', and may not be '.' or '..'".to_string()
        }
    };
    Some(FieldError::invalid("metadata.name", name, &msg))
}

/// Metadata and type-specific field checks that end in a 422 Invalid; for a custom resource
/// also its CRD schema and CEL rules (`old` is the stored object on update).
pub fn validate_object(
    info: &ResourceInfo,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if let Some(e) = name_errors(info.name_rule, name) {
        errs.push(e);
    }
    if info.resource == "customresourcedefinitions" {
        errs.extend(crd_name_errors(obj, name));
    }
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            errs.extend(qualified_name_errors("metadata.labels", k));
            match v.as_str() {
                Some(s) if is_label_value(s) => {}
                Some(s) => errs.push(FieldError::invalid("metadata.labels", s, LABEL_VALUE_MSG)),
                None => errs.push(FieldError::invalid(
                    "metadata.labels",
                    &v.to_string(),
                    LABEL_VALUE_MSG,
                )),
            }
        }
    }
    if let Some(annotations) = obj["metadata"]["annotations"].as_object() {
        for k in annotations.keys() {
            errs.extend(qualified_name_errors("metadata.annotations", k));
        }
    }
    if !info.custom && info.resource == "events" {
        // The strategy's validation comes first and alone; the generic metadata checks run
        // after it (k8s.io/apiserver BeforeCreate/BeforeUpdate).
        let event_errs = event_errors(info, obj, old, &errs);
        if !event_errs.is_empty() {
            return Err(invalid("Event", "", name, &event_errs));
        }
    }
    if !info.custom && info.resource == "mutatingadmissionpolicies" {
        for (field, expression, detail) in crate::admission::mutating_policy_errors(obj) {
            errs.push(FieldError::invalid(field, &expression, &detail));
        }
    }
    if !info.custom && matches!(info.resource.as_str(), "secrets" | "configmaps") {
        for field in ["data", "binaryData"] {
            if let Some(map) = obj[field].as_object() {
                for k in map.keys().filter(|k| !is_config_key(k)) {
                    errs.push(FieldError::invalid(
                        format!("{field}[{k}]"),
                        k,
                        CONFIG_KEY_MSG,
                    ));
                }
            }
        }
    }
    if let Some(schema) = &info.schema {
        let meta_errs = errs.clone();
        errs.extend(crate::crd_validation::errors(schema, obj, old, &meta_errs));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid_object(info, name, &errs))
    }
}

/// Event validation (pkg/apis/core/validation/events.go), on the stored (core) form.
///
/// Every Event passes `legacyValidateEvent`: its namespace must agree with the namespace of
/// the object it is about. Without `eventTime` (old-style Events) an Event about a
/// cluster-scoped object must be in `default` (or have no namespace) and one about a
/// namespaced object in that object's namespace; with `eventTime` an Event about a
/// cluster-scoped object must be in `default` or `kube-system` (any other
/// namespace is 422 `involvedObject.namespace: Invalid value: "": does not match
/// event.namespace`, even for an admin), a namespaced object's namespace is not compared, and
/// the reporting fields, action and reason are required. events.k8s.io/v1 writes
/// (`ValidateEventCreate`/`ValidateEventUpdate` for a newer request version) add the strict
/// checks (`eventTime` required, `type` Normal or Warning, the deprecated fields unset,
/// fixed fields immutable). Field paths name the internal fields (`involvedObject`,
/// `reportingController`, `message`), whichever API version the request used.
fn event_errors(
    info: &ResourceInfo,
    ev: &Value,
    old: Option<&Value>,
    meta_errs: &[FieldError],
) -> Vec<FieldError> {
    let mut errs = legacy_event_errors(ev);
    if info.group != "events.k8s.io" {
        // core/v1 (and events.k8s.io/v1beta1): no further validation, for compatibility.
        return errs;
    }
    let text = |f: &str| ev[f].as_str().unwrap_or("").to_string();
    let Some(old) = old else {
        errs.extend(meta_errs.iter().cloned());
        errs.extend(event_series_errors(ev));
        if is_zero_time(&ev["eventTime"]) {
            errs.push(FieldError::required("eventTime", ""));
        }
        let ty = text("type");
        if ty != "Normal" && ty != "Warning" {
            errs.push(FieldError::invalid(
                "type",
                "",
                &format!("has invalid value: {ty}"),
            ));
        }
        for field in ["firstTimestamp", "lastTimestamp"] {
            if !is_zero_time(&ev[field]) {
                errs.push(FieldError::invalid(field, "", "needs to be unset"));
            }
        }
        if ev["count"].as_i64().unwrap_or(0) != 0 {
            errs.push(FieldError::invalid("count", "", "needs to be unset"));
        }
        let source = |f: &str| ev["source"][f].as_str().unwrap_or("").to_string();
        if !source("component").is_empty() || !source("host").is_empty() {
            errs.push(FieldError::invalid("source", "", "needs to be unset"));
        }
        return errs;
    };
    // Update: ValidateObjectMetaUpdate is the generic metadata handling's; the series is
    // checked again only when it changed; then the immutable fields. Only the string and
    // count fields are compared here (see the README); `reason` is listed twice upstream.
    if ev["series"] != old["series"] {
        errs.extend(event_series_errors(ev));
    }
    for field in [
        "reason",
        "message",
        "count",
        "reason",
        "type",
        "action",
        "reportingComponent",
        "reportingInstance",
    ] {
        let (new_v, old_v) = (&ev[field], &old[field]);
        let same = if field == "count" {
            new_v.as_i64().unwrap_or(0) == old_v.as_i64().unwrap_or(0)
        } else {
            new_v.as_str().unwrap_or("") == old_v.as_str().unwrap_or("")
        };
        if same {
            continue;
        }
        let path = if field == "reportingComponent" {
            "reportingController"
        } else {
            field
        };
        errs.push(if field == "count" {
            FieldError::invalid_bare(
                path,
                &format!("{}: field is immutable", new_v.as_i64().unwrap_or(0)),
            )
        } else {
            FieldError::invalid(path, new_v.as_str().unwrap_or(""), "field is immutable")
        });
    }
    errs
}

/// `legacyValidateEvent` (the namespace of the event namespace is always a valid
/// subdomain here: it exists).
fn legacy_event_errors(ev: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespace = ev["metadata"]["namespace"].as_str().unwrap_or("");
    let involved = ev["involvedObject"]["namespace"].as_str().unwrap_or("");
    let mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            involved,
            "does not match event.namespace",
        )
    };
    if is_zero_time(&ev["eventTime"]) {
        // Old-style Events: an Event about a cluster-scoped object may only be in
        // `default` (or have no namespace), one about a namespaced object only in its
        // namespace.
        let agrees = if involved.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved
        };
        if !agrees {
            errs.push(mismatch());
        }
        return errs;
    }
    if involved.is_empty() && namespace != "default" && namespace != "kube-system" {
        errs.push(mismatch());
    }
    let text = |f: &str| ev[f].as_str().unwrap_or("").to_string();
    let controller = text("reportingComponent");
    if controller.is_empty() {
        errs.push(FieldError::required("reportingController", ""));
    }
    errs.extend(qualified_name_errors("reportingController", &controller));
    let limited = [
        ("reportingInstance", "reportingInstance", 128, true),
        ("action", "action", 128, true),
        ("reason", "reason", 128, true),
        ("message", "message", 1024, false),
    ];
    for (stored, path, limit, required) in limited {
        let value = text(stored);
        if required && value.is_empty() {
            errs.push(FieldError::required(path, ""));
        }
        if value.len() > limit {
            errs.push(FieldError::invalid(
                path,
                "",
                &format!("can have at most {limit} characters"),
            ));
        }
    }
    errs
}

/// `validateV1EventSeries`.
fn event_series_errors(ev: &Value) -> Vec<FieldError> {
    let series = &ev["series"];
    if !series.is_object() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    if series["count"].as_i64().unwrap_or(0) < 2 {
        errs.push(FieldError::invalid(
            "series.count",
            "",
            "should be at least 2",
        ));
    }
    if is_zero_time(&series["lastObservedTime"]) {
        errs.push(FieldError::required("series.lastObservedTime", ""));
    }
    errs
}

/// A Time or MicroTime that is unset (Go's zero time: `null`, absent, or the zero instant).
fn is_zero_time(v: &Value) -> bool {
    match v.as_str() {
        None => true,
        Some(s) => s.is_empty() || s.starts_with("0001-01-01T00:00:00"),
    }
}

/// A CRD must be named `<plural>.<group>`.
fn crd_name_errors(obj: &Value, name: &str) -> Vec<FieldError> {
    let plural = obj["spec"]["names"]["plural"].as_str().unwrap_or("");
    let group = obj["spec"]["group"].as_str().unwrap_or("");
    let mut errs = Vec::new();
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    }
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    }
    if obj["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or("")
        .is_empty()
    {
        errs.push(FieldError::required("spec.names.kind", ""));
    }
    if errs.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    errs
}

/// Secret data must decode as standard base64 (a 400 from the JSON decoder, not a 422).
pub fn check_secret_base64(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    if info.custom || info.resource != "secrets" {
        return Ok(());
    }
    let Some(data) = obj["data"].as_object() else {
        return Ok(());
    };
    for v in data.values() {
        let s = v.as_str().unwrap_or("");
        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(s) {
            let at = match e {
                base64::DecodeError::InvalidByte(i, _)
                | base64::DecodeError::InvalidLastSymbol(i, _) => i,
                _ => s.len(),
            };
            return Err(bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte {at}"
            )));
        }
    }
    Ok(())
}

/// The MicroTime fields of a type (metav1.MicroTime parses exactly 6 fractional digits).
fn micro_time_fields(info: &ResourceInfo) -> &'static [&'static [&'static str]] {
    match (info.group.as_str(), info.resource.as_str()) {
        ("coordination.k8s.io", "leases") => &[&["spec", "acquireTime"], &["spec", "renewTime"]],
        (_, "events") => &[&["eventTime"], &["series", "lastObservedTime"]],
        _ => &[],
    }
}

/// Go's parse of `2006-01-02T15:04:05.000000Z07:00`: the fraction must have exactly six
/// digits. Returns the unparsed rest on failure, as Go's error message shows it.
fn micro_time_rest(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if !has_date_time_head(b) {
        return Some(s);
    }
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let rest = &s[19..];
    let frac_ok = rest.len() >= 7 && rest.as_bytes()[0] == b'.' && digits(20..26);
    if !frac_ok {
        return Some(rest);
    }
    let zone = &rest[7..];
    let zone_ok = zone == "Z"
        || (zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && zone.as_bytes()[3] == b':'
            && zone
                .bytes()
                .enumerate()
                .all(|(i, c)| i == 0 || i == 3 || c.is_ascii_digit()));
    if zone_ok { None } else { Some(zone) }
}

pub fn check_micro_times(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    for path in micro_time_fields(info) {
        let mut cur = obj;
        for p in path.iter() {
            cur = &cur[*p];
        }
        let Some(s) = cur.as_str() else { continue };
        if let Some(rest) = micro_time_rest(s) {
            let wanted = if rest.starts_with('.') || rest.starts_with('Z') || rest.is_empty() {
                ".000000"
            } else {
                "Z07:00"
            };
            return Err(bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: parsing time \"{s}\" as \
                 \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"{rest}\" as \"{wanted}\"",
                kind = info.kind,
                v = info.version,
            )));
        }
    }
    Ok(())
}

/// Whether `b` starts with the `YYYY-MM-DDTHH:MM:SS` head every RFC 3339 time of the API
/// has (what comes after it, fraction and zone, differs between Time and MicroTime).
pub(crate) fn has_date_time_head(b: &[u8]) -> bool {
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_subdomain("kf-demo.example"));
        assert!(!is_dns1123_subdomain("Bad_Name"));
        assert!(is_dns1123_label("kube-system"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label("-a"));
    }

    #[test]
    fn label_values_and_config_keys() {
        assert!(is_label_value(""));
        assert!(is_label_value("sweet_1.a"));
        assert!(!is_label_value("bad value!"));
        assert!(is_config_key("ca.crt"));
        assert!(!is_config_key("a/b"));
    }

    #[test]
    fn micro_time_needs_six_digits() {
        assert_eq!(micro_time_rest("2026-11-30T04:27:03.123000Z"), None);
        assert_eq!(micro_time_rest("2026-11-30T04:27:03.123000+01:00"), None);
        assert_eq!(micro_time_rest("2026-11-30T04:27:03.123Z"), Some(".123Z"));
        assert_eq!(micro_time_rest("2026-11-30T04:27:03Z"), Some("Z"));
    }
}
