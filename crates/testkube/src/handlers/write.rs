//! POST, PUT, PATCH and DELETE: the order of checks follows the real server (decode →
//! admission → validation → storage preconditions), and every write goes through the store
//! so watchers see it.

use serde_json::{Value, json};

use super::convert::{present, to_storage};
use super::hooks;
use super::{Cx, Reply, check_type_meta, decode_body, strip_unknown_fields, warning_headers};
use crate::admission;
use crate::errors::{
    FieldError, already_exists, bad_request, conflict_stale, delete_success, forbidden,
    internal_without_reason, invalid_object, namespace_not_found, not_found, precondition_failed,
};
use crate::gc;
use crate::patch::{
    PatchType, apply_patch, field_manager_required, parse_apply, strategic_unsupported,
};
use crate::resources::{ResourceInfo, StatusOnCreate};
use crate::store::{StoreState, format_time, generated_name, meta_str};
use crate::types::{ApiError, Operation, ResourceKey};
use crate::validation::{check_micro_times, check_secret_base64, validate_object};

/// The 400 checks every incoming object goes through before anything else.
pub(super) fn decode_checks(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    check_shape(info, obj)?;
    check_type_meta(info, obj)?;
    check_secret_base64(info, obj)?;
    check_micro_times(info, obj)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Fields the server reads as objects (or maps of strings) must be such: the real decoder
/// answers 400 when a JSON type does not fit the Go type.
fn check_shape(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let mismatch = |field: &str, v: &Value, go_type: &str| {
        bad_request(format!(
            "{k} in version \"{ver}\" cannot be handled as a {k}: json: cannot unmarshal {t} into Go struct \
             field {k}.{field} of type {go_type}",
            k = info.kind,
            ver = info.version,
            t = json_type(v),
        ))
    };
    if !obj.is_object() {
        return Err(mismatch("", obj, "object"));
    }
    // A custom resource's spec and status are whatever its schema says (422s, not 400s).
    let typed: &[&str] = if info.custom {
        &["metadata"]
    } else {
        &["metadata", "spec", "status"]
    };
    for field in typed.iter().copied() {
        match obj.get(field) {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(v) => return Err(mismatch(field, v, "object")),
        }
    }
    let mut string_maps = vec![
        ("metadata.labels", &obj["metadata"]["labels"]),
        ("metadata.annotations", &obj["metadata"]["annotations"]),
    ];
    if !info.custom {
        string_maps.extend([
            ("data", &obj["data"]),
            ("stringData", &obj["stringData"]),
            ("binaryData", &obj["binaryData"]),
        ]);
    }
    for (field, v) in string_maps {
        let ok = match v {
            Value::Null => true,
            Value::Object(m) => m.values().all(|x| x.is_string() || x.is_null()),
            _ => false,
        };
        if !ok {
            return Err(mismatch(field, v, "map[string]string"));
        }
    }
    Ok(())
}

/// Namespaced objects can only be created in a namespace that exists and is not terminating
/// (NamespaceLifecycle admission).
fn check_namespace(st: &StoreState, info: &ResourceInfo, ns: &str) -> Result<(), ApiError> {
    if !info.namespaced {
        return Ok(());
    }
    let namespace = st
        .get_object(&ResourceKey::new("", "namespaces"), "", ns)
        .ok_or_else(|| namespace_not_found(ns))?;
    if !namespace["metadata"]["deletionTimestamp"].is_null() {
        return Err(forbidden(
            info,
            meta_str(namespace, "name"),
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        ));
    }
    Ok(())
}

pub fn create(
    st: &mut StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
    body: Option<Value>,
) -> Result<Reply, ApiError> {
    let mut obj = match body {
        Some(v) => v,
        None => decode_body(info, cx)?,
    };
    decode_checks(info, &obj)?;
    let warnings = strip_unknown_fields(info, &mut obj, cx.query)?;
    if !meta_str(&obj, "resourceVersion").is_empty() {
        return Err(internal_without_reason(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let ns = cx.object_namespace(info);
    let body_ns = meta_str(&obj, "namespace");
    if info.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if info.namespaced {
        obj["metadata"]["namespace"] = json!(ns);
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    if meta_str(&obj, "name").is_empty() && !meta_str(&obj, "generateName").is_empty() {
        obj["metadata"]["name"] = json!(generated_name(meta_str(&obj, "generateName")));
    }
    let mut obj = to_storage(info, obj);
    match &info.status_on_create {
        StatusOnCreate::Keep => {}
        StatusOnCreate::Drop => {
            obj.as_object_mut().map(|m| m.remove("status"));
        }
        StatusOnCreate::Reset(v) => obj["status"] = v.clone(),
    }
    if let Some(m) = obj["metadata"].as_object_mut() {
        for server_owned in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ] {
            m.remove(server_owned);
        }
        if info.has_generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    hooks::before_create(info, &mut obj);
    hooks::allocate(st, info, &mut obj);
    check_namespace(st, info, &ns)?;
    admission::admit(cx.attrs, Operation::Create, None, Some(&mut obj), &*st)?;
    // Upstream's registry Store.Create: BeforeCreate stamps the creation time (with the
    // uid, FillObjectMetaSystemFields) after mutating admission and before the validating
    // plugins run, so a ValidatingAdmissionPolicy reads metadata.creationTimestamp on a
    // create (measured on v1.36).
    obj["metadata"]["creationTimestamp"] = json!(format_time(cx.now));
    validate_object(info, &obj, None)?;
    admission::validate(
        cx.attrs,
        Operation::Create,
        None,
        Some(&as_requested(info, &obj)),
        &*st,
    )?;
    let name = meta_str(&obj, "name").to_string();
    if st.get_object(&info.storage, &ns, &name).is_some() {
        return Err(already_exists(info, &name));
    }
    if cx.dry_run() {
        obj["metadata"]["creationTimestamp"] = json!(format_time(cx.now));
        return Ok(Reply::created(present(info, &obj), warnings));
    }
    let stored = st.insert(&info.storage, obj, cx.now);
    hooks::after_create(st, info, &stored, cx.now);
    Ok(Reply::created(present(info, &stored), warnings))
}

fn parse_rv(raw: &str) -> Result<Option<u64>, ApiError> {
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse::<u64>().map(Some).map_err(|_| {
        internal_without_reason(format!(
            "strconv.ParseUint: parsing {raw:?}: invalid syntax"
        ))
    })
}

pub fn update(st: &mut StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let mut obj = decode_body(info, cx)?;
    decode_checks(info, &obj)?;
    let warnings = strip_unknown_fields(info, &mut obj, cx.query)?;
    let name = cx.route.name.clone().unwrap_or_default();
    let ns = cx.object_namespace(info);
    let body_name = meta_str(&obj, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta_str(&obj, "namespace");
    if info.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let rv = parse_rv(meta_str(&obj, "resourceVersion"))?;
    let Some(old) = st.get_object(&info.storage, &ns, &name).cloned() else {
        if info.create_on_update && cx.route.subresource.is_empty() {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("resourceVersion");
                m.insert("name".into(), json!(name));
            }
            return create(st, cx, info, Some(obj));
        }
        return Err(not_found(info, &name));
    };
    match rv {
        Some(rv) if rv.to_string() != meta_str(&old, "resourceVersion") => {
            return Err(conflict_stale(info, &name));
        }
        None if !info.unconditional_update => {
            return Err(invalid_object(
                info,
                &name,
                &[FieldError::invalid_bare(
                    "metadata.resourceVersion",
                    "0x0: must be specified for an update",
                )],
            ));
        }
        _ => {}
    }
    obj["metadata"]["name"] = json!(name);
    let new = to_storage(info, obj);
    finish_update(st, cx, info, old, new, warnings)
}

/// Merge what a subresource may change into the stored object: the main resource cannot
/// change `status` (when there is a status subresource), `/status` changes only status,
/// `/approval` only the CSR conditions; what else the body says is dropped without error.
fn merge_subresource(info: &ResourceInfo, sub: &str, old: &Value, mut new: Value) -> Value {
    match sub {
        "" if info.has_subresource("status") => {
            match old.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
            new
        }
        // The status strategies of Node, Namespace and Pod keep the stored spec and take
        // the rest, metadata included (a Pod also keeps its owner references).
        "status" if !info.custom && matches!(info.kind.as_str(), "Node" | "Namespace" | "Pod") => {
            let mut out = new;
            match old.get("spec") {
                Some(spec) => out["spec"] = spec.clone(),
                None => {
                    out.as_object_mut().map(|m| m.remove("spec"));
                }
            }
            if info.kind == "Pod" {
                match old["metadata"].get("ownerReferences") {
                    Some(o) => out["metadata"]["ownerReferences"] = o.clone(),
                    None => {
                        out["metadata"]
                            .as_object_mut()
                            .map(|m| m.remove("ownerReferences"));
                    }
                }
            }
            out
        }
        "status" => {
            let mut out = old.clone();
            out["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            out["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
            out
        }
        "approval" => {
            let mut out = old.clone();
            if !out["status"].is_object() {
                out["status"] = json!({});
            }
            out["status"]["conditions"] = new["status"]["conditions"].clone();
            out["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
            out
        }
        _ => new,
    }
}

/// Everything but metadata (and status, when it is a subresource): what bumps `generation`.
fn spec_part(info: &ResourceInfo, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if info.has_subresource("status") || !info.custom {
            m.remove("status");
        }
    }
    v
}

/// Compare two versions ignoring what only the server changes.
fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

fn finish_update(
    st: &mut StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
    old: Value,
    new: Value,
    warnings: Vec<String>,
) -> Result<Reply, ApiError> {
    let mut new = new;
    // Fields only the server sets keep their stored values.
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
    ] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => {
                new["metadata"].as_object_mut().map(|m| m.remove(field));
            }
        }
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    // Mutating admission sees the object as sent, before the strategy keeps what the
    // subresource may not change (see `admission::mutate`).
    admission::mutate(
        cx.attrs,
        Operation::Update,
        Some(&old),
        Some(&mut new),
        &*st,
    )?;
    let mut new = merge_subresource(info, &cx.route.subresource, &old, new);
    admission::admit_type(
        cx.attrs,
        Operation::Update,
        Some(&old),
        Some(&mut new),
        &*st,
    )?;
    validate_object(info, &new, Some(&old))?;
    admission::validate(
        cx.attrs,
        Operation::Update,
        Some(&as_requested(info, &old)),
        Some(&as_requested(info, &new)),
        &*st,
    )?;
    if info.has_generation && spec_part(info, &new) != spec_part(info, &old) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    let headers = warning_headers(warnings);
    if same_content(&old, &new) || cx.dry_run() {
        let shown = if cx.dry_run() { new } else { old };
        return Ok(Reply::Json {
            code: 200,
            body: present(info, &shown),
            headers,
        });
    }
    // Removing the last finalizer of an object being deleted completes the delete.
    let finalizing = !new["metadata"]["deletionTimestamp"].is_null();
    let no_finalizers = new["metadata"]["finalizers"]
        .as_array()
        .is_none_or(|f| f.is_empty());
    let stored = if finalizing && no_finalizers {
        let gone = st.replace(&info.storage, new);
        st.remove(
            &info.storage,
            &cx.object_namespace(info),
            meta_str(&gone, "name"),
        );
        gone
    } else {
        st.replace(&info.storage, new)
    };
    Ok(Reply::Json {
        code: 200,
        body: present(info, &stored),
        headers,
    })
}

pub fn patch(st: &mut StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let patch_type = PatchType::from_content_type(cx.content_type)?;
    if patch_type == PatchType::Apply && cx.query.get("fieldManager").is_none_or(str::is_empty) {
        return Err(field_manager_required());
    }
    let name = cx.route.name.clone().unwrap_or_default();
    let ns = cx.object_namespace(info);
    let Some(old) = st.get_object(&info.storage, &ns, &name).cloned() else {
        if patch_type == PatchType::Apply && cx.route.subresource.is_empty() {
            let mut applied = parse_apply(cx.body)?;
            if applied["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .is_empty()
            {
                applied["metadata"]["name"] = json!(name);
            }
            return create(st, cx, info, Some(applied));
        }
        return Err(not_found(info, &name));
    };
    if patch_type == PatchType::Strategic && info.custom {
        return Err(strategic_unsupported());
    }
    let current = present(info, &old);
    let mut patched = apply_patch(patch_type, &info.kind, &current, cx.body)?;
    decode_checks(info, &patched)?;
    let warnings = strip_unknown_fields(info, &mut patched, cx.query)?;
    let rv = parse_rv(meta_str(&patched, "resourceVersion"))?;
    if rv.is_some_and(|rv| rv.to_string() != meta_str(&old, "resourceVersion")) {
        return Err(conflict_stale(info, &name));
    }
    patched["metadata"]["name"] = json!(name);
    let new = to_storage(info, patched);
    finish_update(st, cx, info, old, new, warnings)
}

/// `DeleteOptions` from the body; the real server silently ignores preconditions in the
/// query but reads `propagationPolicy` and `dryRun` there too.
struct DeleteOptions {
    uid: Option<String>,
    resource_version: Option<String>,
    propagation: String,
}

fn delete_options(cx: &Cx<'_>) -> Result<DeleteOptions, ApiError> {
    let body: Value = if cx.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(cx.body)
            .map_err(|e| bad_request(format!("error decoding DeleteOptions: {e}")))?
    };
    let pre = &body["preconditions"];
    let propagation = body["propagationPolicy"]
        .as_str()
        .or_else(|| cx.query.get("propagationPolicy"))
        .unwrap_or("Background")
        .to_string();
    Ok(DeleteOptions {
        uid: pre["uid"].as_str().map(String::from),
        resource_version: pre["resourceVersion"].as_str().map(String::from),
        propagation,
    })
}

pub fn delete(st: &mut StoreState, cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    let opts = delete_options(cx)?;
    let name = cx.route.name.clone().unwrap_or_default();
    let ns = cx.object_namespace(info);
    let old = st
        .get_object(&info.storage, &ns, &name)
        .cloned()
        .ok_or_else(|| not_found(info, &name))?;
    let uid = meta_str(&old, "uid").to_string();
    if let Some(want) = opts.uid.as_deref().filter(|u| *u != uid) {
        return Err(precondition_failed(
            info,
            &name,
            &format!(
                "the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might \
                 have been deleted and then recreated"
            ),
        ));
    }
    let have_rv = meta_str(&old, "resourceVersion");
    if let Some(want) = opts.resource_version.as_deref().filter(|r| *r != have_rv) {
        return Err(precondition_failed(
            info,
            &name,
            &format!(
                "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record \
                 ({have_rv}). The object might have been modified"
            ),
        ));
    }
    admission::admit(cx.attrs, Operation::Delete, Some(&old), None, &*st)?;
    admission::validate(cx.attrs, Operation::Delete, Some(&old), None, &*st)?;
    if cx.dry_run() {
        return Ok(Reply::ok(delete_success(info, &name, &uid)));
    }
    delete_object(st, cx, info, old, &opts.propagation)
}

/// Remove an object, or mark it deleted when finalizers (or foreground deletion, or a
/// namespace's own finalizer) keep it until they are done; then the DELETE answers with the
/// object itself, `deletionTimestamp` set.
fn delete_object(
    st: &mut StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
    old: Value,
    propagation: &str,
) -> Result<Reply, ApiError> {
    let name = meta_str(&old, "name").to_string();
    let ns = cx.object_namespace(info);
    let uid = meta_str(&old, "uid").to_string();
    if propagation == "Orphan" {
        gc::orphan_dependents(st, &uid);
    }
    let mut finalizers: Vec<Value> = old["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if propagation == "Foreground" && !finalizers.contains(&json!("foregroundDeletion")) {
        finalizers.push(json!("foregroundDeletion"));
    }
    let is_namespace = info.resource == "namespaces" && !info.custom;
    if finalizers.is_empty() && !is_namespace {
        st.remove(&info.storage, &ns, &name);
        hooks::after_delete(st, info, &old);
        return Ok(Reply::ok(delete_success(info, &name, &uid)));
    }
    if !old["metadata"]["deletionTimestamp"].is_null() {
        return Ok(Reply::ok(present(info, &old)));
    }
    let mut marked = old.clone();
    marked["metadata"]["deletionTimestamp"] = json!(format_time(cx.now));
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    if !finalizers.is_empty() {
        marked["metadata"]["finalizers"] = Value::Array(finalizers);
    }
    if is_namespace {
        marked["status"]["phase"] = json!("Terminating");
    }
    let stored = st.replace(&info.storage, marked);
    Ok(Reply::ok(present(info, &stored)))
}

pub fn delete_collection(
    st: &mut StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
) -> Result<Reply, ApiError> {
    let opts = super::read::list_options(cx, info)?;
    let propagation = delete_options(cx)?.propagation;
    let ns = if info.namespaced {
        cx.route.namespace.as_deref()
    } else {
        None
    };
    let victims: Vec<Value> = super::read::matching(st, info, ns, &opts)
        .into_iter()
        .cloned()
        .collect();
    let mut items = Vec::new();
    for old in victims {
        admission::admit(cx.attrs, Operation::Delete, Some(&old), None, &*st)?;
        admission::validate(cx.attrs, Operation::Delete, Some(&old), None, &*st)?;
        items.push(super::convert::present_item(info, &old));
        if !cx.dry_run() {
            delete_object(st, cx, info, old, &propagation)?;
        }
    }
    Ok(Reply::ok(json!({
        "kind": info.list_kind,
        "apiVersion": info.api_version(),
        "metadata": {"resourceVersion": st.current_rv().to_string()},
        "items": items,
    })))
}

/// SelfSubjectReview: nothing is stored; the answer is the caller's own identity.
pub fn self_subject_review(cx: &Cx<'_>, info: &ResourceInfo) -> Result<Reply, ApiError> {
    // The request carries nothing the answer depends on; kubectl sends it as protobuf,
    // which testkube does not decode, so only JSON and YAML bodies are checked.
    if !cx.body.iter().all(u8::is_ascii_whitespace) && !super::is_protobuf(cx) {
        let obj = decode_body(info, cx)?;
        check_type_meta(info, &obj)?;
    }
    let mut user_info = json!({"username": cx.user.name, "groups": cx.user.groups});
    if !cx.user.uid.is_empty() {
        user_info["uid"] = json!(cx.user.uid);
    }
    if !cx.user.extra.is_empty() {
        user_info["extra"] = json!(cx.user.extra);
    }
    Ok(Reply::created(
        json!({
            "kind": "SelfSubjectReview",
            "apiVersion": info.api_version(),
            "metadata": {"creationTimestamp": format_time(cx.now)},
            "status": {"userInfo": user_info},
        }),
        Vec::new(),
    ))
}

/// The object as validating admission sees it: in the version of the request, as upstream
/// hands it to admission (an events.k8s.io/v1 Event with `reportingController`, not the
/// core/v1 fields it is stored under). Other kinds are stored as they are requested.
fn as_requested(info: &ResourceInfo, stored: &Value) -> Value {
    if info.group == "events.k8s.io" {
        present(info, stored)
    } else {
        stored.clone()
    }
}
