//! GET of one object and LIST (selectors, pagination, resourceVersion rules), with Table
//! output for `kubectl get`.

use base64::Engine;
use jiff::Timestamp;
use serde_json::{Value, json};

use super::convert::{present, present_item};
use super::{Cx, Reply};
use crate::errors::{FieldError, bad_request, expired, invalid_options, not_found};
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{StoreState, name_of, namespace_of};
use crate::types::ApiError;

pub fn get(st: &mut StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let name = cx.route.name.as_deref().unwrap_or("");
    let ns = cx.object_namespace(info);
    let obj = st
        .get_object(&info.storage, &ns, name)
        .ok_or_else(|| not_found(info, name))?;
    let out = present(info, obj);
    if cx.wants_table() {
        return Ok(Reply::ok(table(
            info,
            std::slice::from_ref(&out),
            &out["metadata"]["resourceVersion"],
            cx.now,
        )));
    }
    Ok(Reply::ok(out))
}

/// Parsed list/watch options shared with the watch handler.
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub resource_version: Option<u64>,
}

pub fn list_options(cx: &Cx<'_>, info: &ResourceInfo) -> Result<ListOptions, ApiError> {
    let labels = LabelSelector::parse(cx.query.get("labelSelector").unwrap_or(""))?;
    let fields = FieldSelector::parse(cx.query.get("fieldSelector").unwrap_or(""), info)?;
    let raw = cx.query.get("resourceVersion").unwrap_or("").to_string();
    let resource_version = if raw.is_empty() {
        None
    } else {
        Some(raw.parse::<u64>().map_err(|_| {
            invalid_options(
                "ListOptions",
                &[FieldError::invalid(
                    "resourceVersion",
                    &raw,
                    "must be a non-negative integer",
                )],
            )
        })?)
    };
    if cx
        .query
        .get("resourceVersionMatch")
        .is_some_and(|m| !m.is_empty())
        && raw.is_empty()
    {
        let forbidden = FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        );
        if !(cx.attrs.verb == "watch" && cx.query.flag("sendInitialEvents")) {
            return Err(invalid_options("ListOptions", &[forbidden]));
        }
    }
    Ok(ListOptions {
        labels,
        fields,
        resource_version,
    })
}

/// The matching objects of a list, in (namespace, name) order.
pub fn matching<'a>(
    st: &'a StoreState,
    info: &ResourceInfo,
    ns: Option<&'a str>,
    opts: &ListOptions,
) -> Vec<&'a Value> {
    matching_after(st, info, ns, opts, None)
}

/// The matching objects after `after` (a continue token's position), in (namespace, name)
/// order. A selector that pins `metadata.name` reads by key, as the real registry does for
/// a single-object match: a kubelet's or client's watch of its one object then costs the
/// same whatever the number of objects of the type.
fn matching_after<'a>(
    st: &'a StoreState,
    info: &ResourceInfo,
    ns: Option<&'a str>,
    opts: &ListOptions,
    after: Option<(&str, &str)>,
) -> Vec<&'a Value> {
    let selected = |o: &&Value| opts.labels.matches(o) && opts.fields.matches(o);
    if let Some(name) = opts.fields.exact_name() {
        let candidates: Vec<&Value> = match (info.namespaced, ns) {
            (false, _) => st.get_object(&info.storage, "", name).into_iter().collect(),
            (true, Some(ns)) => st.get_object(&info.storage, ns, name).into_iter().collect(),
            // Across namespaces: one object per namespace at most.
            (true, None) => st.objects_named(&info.storage, name),
        };
        return candidates
            .into_iter()
            .filter(|o| after.is_none_or(|a| (namespace_of(o), name_of(o)) > a))
            .filter(selected)
            .collect();
    }
    st.list_objects_after(&info.storage, ns, after)
        .filter(selected)
        .collect()
}

fn continue_token(rv: u64, ns: &str, name: &str) -> String {
    let raw = json!({"rv": rv, "ns": ns, "name": name}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn parse_continue(token: &str) -> Result<(String, String), ApiError> {
    let bad = || bad_request("continue key is not valid: illegal base64 data");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v["ns"].as_str().unwrap_or("").to_string(),
        v["name"].as_str().unwrap_or("").to_string(),
    ))
}

pub fn list(st: &mut StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let opts = list_options(cx, info)?;
    let current = st.current_rv();
    let rv_match = cx.query.get("resourceVersionMatch").unwrap_or("");
    if let Some(rv) = opts.resource_version {
        // There is no snapshot history: an exact read of an older revision is gone.
        if rv_match == "Exact" && rv != current {
            return Err(expired(
                "The resourceVersion for the provided list is too old.",
            ));
        }
        if rv > current && rv_match != "Exact" {
            let mut err = ApiError::new(
                504,
                "Timeout",
                format!("Timeout: Too large resource version: {rv}, current: {current}"),
            )
            .with_details(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            }));
            err.headers.push(("Retry-After".into(), "1".into()));
            return Err(err);
        }
    }
    let ns = if info.namespaced {
        cx.route.namespace.as_deref()
    } else {
        None
    };
    let after = match cx.query.get("continue").filter(|t| !t.is_empty()) {
        Some(token) => Some(parse_continue(token)?),
        None => None,
    };
    let after = after.as_ref().map(|(n, m)| (n.as_str(), m.as_str()));
    let mut items = matching_after(st, info, ns, &opts, after);
    let limit = cx
        .query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let mut metadata = json!({"resourceVersion": current.to_string()});
    if let Some(limit) = limit
        && items.len() > limit
    {
        let remaining = items.len() - limit;
        items.truncate(limit);
        let last = items[limit - 1];
        metadata["continue"] = json!(continue_token(current, namespace_of(last), name_of(last)));
        metadata["remainingItemCount"] = json!(remaining);
    } else if info.custom {
        metadata["continue"] = json!("");
    }
    if cx.wants_table() {
        let rows: Vec<Value> = items.iter().map(|o| present(info, o)).collect();
        return Ok(Reply::ok(table(
            info,
            &rows,
            &json!(current.to_string()),
            cx.now,
        )));
    }
    let items: Vec<Value> = items.iter().map(|o| present_item(info, o)).collect();
    Ok(Reply::ok(json!({
        "kind": info.list_kind,
        "apiVersion": info.api_version(),
        "metadata": metadata,
        "items": items,
    })))
}

const NAME_COLUMN_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `kubectl get`'s age rendering (`0s`, `5m`, `3h`, `2d`), which the server puts in date
/// cells itself.
fn human_age(created: &str, now: Timestamp) -> Value {
    let Ok(t) = created.parse::<Timestamp>() else {
        return Value::Null;
    };
    let secs = (now.as_second() - t.as_second()).max(0);
    let text = match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 3 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    };
    json!(text)
}

/// A simple JSONPath (`.status.phase`, `.spec.labels.x`) evaluation.
fn json_path<'a>(obj: &'a Value, path: &str) -> &'a Value {
    let mut cur = obj;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        cur = &cur[part];
    }
    cur
}

/// A `meta.k8s.io/v1` Table: Name, then the CRD's printer columns (or Age for types
/// without any), rows sorted by name, each row's object a PartialObjectMetadata.
pub fn table(info: &ResourceInfo, objects: &[Value], rv: &Value, now: Timestamp) -> Value {
    let mut columns = vec![json!({
        "name": "Name", "type": "string", "format": "name", "description": NAME_COLUMN_DESCRIPTION, "priority": 0,
    })];
    let mut paths: Vec<(String, String)> = Vec::new();
    let printer_columns = if info.printer_columns.is_empty() {
        vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
    } else {
        info.printer_columns.clone()
    };
    for col in &printer_columns {
        let path = col["jsonPath"].as_str().unwrap_or("").to_string();
        let ty = col["type"].as_str().unwrap_or("string").to_string();
        columns.push(json!({
            "name": col["name"],
            "type": ty,
            "format": col["format"].as_str().unwrap_or(""),
            "description": col["description"].as_str().map(String::from)
                .unwrap_or_else(|| format!("Custom resource definition column (in JSONPath format): {path}")),
            "priority": col["priority"].as_i64().unwrap_or(0),
        }));
        paths.push((path, ty));
    }
    let mut sorted: Vec<&Value> = objects.iter().collect();
    sorted.sort_by(|a, b| (namespace_of(a), name_of(a)).cmp(&(namespace_of(b), name_of(b))));
    let rows: Vec<Value> = sorted
        .into_iter()
        .map(|o| {
            let mut cells = vec![json!(name_of(o))];
            for (path, ty) in &paths {
                let v = json_path(o, path);
                cells.push(match (ty.as_str(), v) {
                    ("date", Value::String(s)) => human_age(s, now),
                    (_, v) => v.clone(),
                });
            }
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns,
        "rows": rows,
    })
}
