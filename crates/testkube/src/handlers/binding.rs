//! The scheduler's bind: `POST .../namespaces/<ns>/pods/<name>/binding` (and the legacy
//! `POST .../namespaces/<ns>/bindings`, the pod named in the body), after upstream's
//! `BindingREST.Create` (pkg/registry/core/pod/storage/storage.go): the Binding's name must
//! be the pod's, `ValidatePodBinding`, validating admission on the Binding, then the pod
//! gets `spec.nodeName`, the Binding's annotations and the condition PodScheduled=True.
//! Nothing else is stored. Answers captured from a real v1.36 API server:
//!
//! ```text
//! 201 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}
//! 409 Conflict: Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n"
//!     (details {"name":"p","kind":"pods/binding"})
//! 400 BadRequest: name in URL does not match name in Binding object
//! 404 NotFound: pods "p" not found
//! 500 (no reason): [target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>", target.name: Required value]
//! ```

use serde_json::{Value, json};

use super::{Cx, Reply, check_type_meta, decode_body, strip_unknown_fields};
use crate::admission;
use crate::errors::{bad_request, internal_without_reason, not_found_resource};
use crate::resources::ResourceInfo;
use crate::store::{StoreState, format_time, meta_str};
use crate::types::{ApiError, Operation, ResourceKey};

pub fn bind(st: &mut StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let mut body_info = info.clone();
    body_info.kind = "Binding".into();
    body_info.known_fields = Some(&["target"]);
    let mut binding = decode_body(&body_info, cx)?;
    check_type_meta(&body_info, &binding)?;
    let warnings = strip_unknown_fields(&body_info, &mut binding, cx.query)?;
    let namespace = cx.object_namespace(info);
    let body_ns = meta_str(&binding, "namespace");
    if !body_ns.is_empty() && body_ns != namespace {
        return Err(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if !binding["metadata"].is_object() {
        binding["metadata"] = json!({});
    }
    binding["metadata"]["namespace"] = json!(namespace);
    let body_name = meta_str(&binding, "name").to_string();
    // pods/<name>/binding names the pod in the path; the legacy resource in the body.
    let pod_name = match &cx.route.name {
        Some(name) if info.resource == "pods" => name.clone(),
        _ => body_name.clone(),
    };
    // Mutating admission (NodeRestriction refuses a node's pods/binding).
    admission::mutate(cx.attrs, Operation::Create, None, Some(&mut binding), &*st)?;
    if pod_name != body_name {
        return Err(bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    validate_pod_binding(&binding)?;
    admission::validate(cx.attrs, Operation::Create, None, Some(&binding), &*st)?;
    let key = ResourceKey::new("", "pods");
    let pod = st
        .get_object(&key, &namespace, &pod_name)
        .cloned()
        .ok_or_else(|| not_found_resource("", "pods", &pod_name))?;
    let conflict = |why: String| {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on pods/binding \"{pod_name}\": {why}"),
        )
        .with_details(json!({"name": pod_name, "kind": "pods/binding"}))
    };
    let precondition = |field: &str| meta_str(&binding, field).to_string();
    let uid = precondition("uid");
    if !uid.is_empty() && uid != meta_str(&pod, "uid") {
        return Err(conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta_str(&pod, "uid")
        )));
    }
    let rv = precondition("resourceVersion");
    if !rv.is_empty() && rv != meta_str(&pod, "resourceVersion") {
        return Err(crate::errors::conflict_stale_plain("pods", &pod_name));
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return Err(conflict(format!(
            "pod {pod_name} is being deleted, cannot be assigned to a host"
        )));
    }
    let assigned = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if !assigned.is_empty() {
        return Err(conflict(format!(
            "pod {pod_name} is already assigned to node \"{assigned}\""
        )));
    }
    if pod["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty())
    {
        return Err(conflict(format!(
            "pod {pod_name} has non-empty .spec.schedulingGates"
        )));
    }
    let mut bound = pod;
    bound["spec"]["nodeName"] = binding["target"]["name"].clone();
    if let Some(annotations) = binding["metadata"]["annotations"].as_object() {
        if !bound["metadata"]["annotations"].is_object() {
            bound["metadata"]["annotations"] = json!({});
        }
        for (k, v) in annotations {
            bound["metadata"]["annotations"][k] = v.clone();
        }
    }
    set_scheduled(&mut bound, &format_time(cx.now));
    if !cx.dry_run() {
        st.replace(&key, bound);
    }
    Ok(Reply::created(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        warnings,
    ))
}

/// `ValidatePodBinding`; its aggregate is a plain error upstream, so a 500 without reason.
fn validate_pod_binding(binding: &Value) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    let kind = binding["target"]["kind"].as_str().unwrap_or("");
    if !kind.is_empty() && kind != "Node" {
        errs.push(format!(
            "target.kind: Unsupported value: \"{kind}\": supported values: \"Node\", \"<empty>\""
        ));
    }
    if binding["target"]["name"].as_str().unwrap_or("").is_empty() {
        errs.push("target.name: Required value".to_string());
    }
    match errs.len() {
        0 => Ok(()),
        1 => Err(internal_without_reason(errs.remove(0))),
        _ => Err(internal_without_reason(format!("[{}]", errs.join(", ")))),
    }
}

/// `UpdatePodCondition` with PodScheduled=True: the transition time changes only when the
/// status does.
fn set_scheduled(pod: &mut Value, now: &str) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let conditions = pod["status"]["conditions"]
        .as_array_mut()
        .expect("made a list above");
    match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
        Some(c) if c["status"] == "True" => {}
        Some(c) => {
            c["status"] = json!("True");
            c["lastTransitionTime"] = json!(now);
        }
        None => conditions.push(json!({
            "type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now,
        })),
    }
}
