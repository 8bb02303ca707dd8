//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`exists) and field selectors
//! (`metadata.name`, `metadata.namespace`, plus the few type-specific fields the real server
//! supports and kubeflavor uses).

use serde_json::Value;

use crate::errors::bad_request;
use crate::resources::ResourceInfo;
use crate::types::ApiError;

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Split on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_error(s: &str, why: &str) -> ApiError {
    bad_request(format!("unable to parse requirement: {why}: {s:?}"))
}

fn parse_set(key: &str, rest: &str, whole: &str) -> Result<(String, Vec<String>), ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| parse_error(whole, "expected a parenthesized set of values"))?;
    let values = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((key.to_string(), values))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                let (k, vals) = parse_set(k.trim(), rest, part)?;
                Requirement::NotIn(k, vals)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                let (k, vals) = parse_set(k.trim(), rest, part)?;
                Requirement::In(k, vals)
            } else if part.contains(|c: char| c.is_whitespace() || "()<>".contains(c)) {
                return Err(parse_error(part, "found unexpected characters"));
            } else {
                Requirement::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels[k].as_str();
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The field selectors each type supports (k8s.io/kubernetes registry `GetAttrs`).
fn supported_field(info: &ResourceInfo, field: &str) -> bool {
    if field == "metadata.name" || (field == "metadata.namespace" && info.namespaced) {
        return true;
    }
    if info.custom {
        return false;
    }
    matches!(
        (info.resource.as_str(), field),
        ("certificatesigningrequests", "spec.signerName")
            // pkg/registry/core/pod/strategy.go, PodToSelectableFields (a subset).
            | ("pods", "spec.nodeName")
            | ("pods", "spec.serviceAccountName")
            | ("pods", "spec.schedulerName")
            | ("pods", "spec.restartPolicy")
            | ("pods", "status.phase")
            | ("secrets", "type")
            | ("nodes", "spec.unschedulable")
            | ("namespaces", "status.phase")
            | ("events", "involvedObject.kind")
            | ("events", "involvedObject.name")
            | ("events", "involvedObject.namespace")
            | ("events", "involvedObject.uid")
            | ("events", "reason")
            | ("events", "type")
    )
}

fn field_value(obj: &Value, field: &str) -> String {
    let mut cur = obj;
    for part in field.split('.') {
        cur = &cur[part];
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        // An unset boolean such as spec.unschedulable reads as false.
        Value::Null if field == "spec.unschedulable" => "false".into(),
        _ => String::new(),
    }
}

impl FieldSelector {
    pub fn parse(s: &str, info: &ResourceInfo) -> Result<FieldSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !supported_field(info, field) {
                return Err(bad_request(format!("field label not supported: {field}")));
            }
            reqs.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(f, equal, v)| (field_value(obj, f) == *v) == *equal)
    }

    /// The name an equality requirement on `metadata.name` pins: such a list reads the one
    /// object by key (the real registry's `MatchesSingle`), not every object of the type.
    pub fn exact_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, equal, _)| *equal && f == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }

    /// The name a `metadata.name=<x>` selector pins, which the real server puts in the
    /// request's attributes for authorization of list and watch.
    pub fn pinned_name(raw: &str) -> Option<String> {
        raw.split(',').find_map(|p| {
            let p = p.trim();
            p.strip_prefix("metadata.name==")
                .or_else(|| p.strip_prefix("metadata.name="))
                .map(String::from)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    #[test]
    fn every_label_operator() {
        let o = obj(json!({"app": "kf", "tier": "node"}));
        let yes = [
            "app=kf",
            "app==kf",
            "app!=other",
            "app in (kf, x)",
            "zone notin (a)",
            "tier",
            "!zone",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches(&o),
                "{s} should match"
            );
        }
        let no = [
            "app=x",
            "app!=kf",
            "app in (x,y)",
            "tier notin (node)",
            "zone",
            "!tier",
            "app=kf,zone",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(&o),
                "{s} should not match"
            );
        }
    }

    #[test]
    fn malformed_label_selector_is_a_bad_request() {
        let err = LabelSelector::parse("app in kf").unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn pinned_name_reads_metadata_name() {
        assert_eq!(
            FieldSelector::pinned_name("metadata.name=worker-1").as_deref(),
            Some("worker-1")
        );
        assert_eq!(FieldSelector::pinned_name("spec.signerName=x"), None);
    }
}
