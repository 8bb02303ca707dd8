//! ServiceAccount (plugin/pkg/admission/serviceaccount), on a Pod's create, the first
//! mutating plugin of the real server's default order:
//! - a pod that names no ServiceAccount runs as `default`;
//! - the ServiceAccount it names must exist (`admission.NewForbidden` otherwise);
//! - unless the pod, or failing that its ServiceAccount, says
//!   `automountServiceAccountToken: false`, every init container and container that mounts
//!   nothing at the token path gets the API access volume there, added to the pod (once)
//!   as `kube-api-access-<5 random>`: a bound ServiceAccount token (3607 s), `ca.crt` of
//!   the ConfigMap `kube-root-ca.crt` and the namespace. The kubelet mints that token
//!   (a TokenRequest bound to the pod), and the Node authorizer relates the ConfigMap to
//!   the pod's node;
//! - a pod without image pull secrets gets its ServiceAccount's.
//!
//! Mirror pods (a kubelet's static pods) are left as they are, and may reference no
//! ServiceAccount, Secret or token projection. Not imitated: the
//! `kubernetes.io/enforce-mountable-secrets` annotation, ephemeral containers.

use serde_json::{Value, json};

use crate::authz::new_forbidden;
use crate::authz::node::pod_references;
use crate::store::generated_name;
use crate::types::{ApiError, ObjectReader, Operation, RequestAttributes, ResourceKey};

/// The ServiceAccount of a pod that names none (the serviceaccounts controller of
/// kube-controller-manager creates it in every namespace).
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where the API access volume is mounted (`DefaultAPITokenMountPath`).
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The API access volume's name prefix (`ServiceAccountVolumeName` and a dash).
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// The ConfigMap with the cluster's CA, published in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// The token's lifetime (`WarnOnlyBoundTokenExpirationSeconds`: an hour and 7 s, so the
/// server can tell the volume's tokens from others when it extends them).
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub fn admit(
    attrs: &RequestAttributes,
    op: Operation,
    new: Option<&mut Value>,
    reader: &dyn ObjectReader,
) -> Result<(), ApiError> {
    let is_pod = attrs.api_group.is_empty() && attrs.resource == "pods";
    let (Some(pod), true) = (new, is_pod && attrs.subresource.is_empty()) else {
        return Ok(());
    };
    if op != Operation::Create {
        return Ok(());
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let forbid = |message: &str| new_forbidden("", "pods", &name, message);
    if pod
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
    {
        return validate_mirror(pod).map_err(forbid);
    }
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    let spec = &mut pod["spec"];
    if spec["serviceAccountName"].as_str().unwrap_or("").is_empty() {
        spec["serviceAccountName"] = json!(DEFAULT_SERVICE_ACCOUNT);
    }
    let sa_name = spec["serviceAccountName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let namespace = &attrs.namespace;
    let Some(sa) = reader.get(
        &ResourceKey::new("", "serviceaccounts"),
        Some(namespace.as_str()),
        &sa_name,
    ) else {
        return Err(forbid(&format!(
            "error looking up service account {namespace}/{sa_name}: serviceaccount \"{sa_name}\" not found"
        )));
    };
    if automounts(spec, sa) {
        mount_api_access(spec);
    }
    let pull_secrets = sa["imagePullSecrets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has_own = spec["imagePullSecrets"]
        .as_array()
        .is_some_and(|s| !s.is_empty());
    if !has_own && !pull_secrets.is_empty() {
        let names: Vec<Value> = pull_secrets
            .iter()
            .map(|s| json!({"name": s["name"].clone()}))
            .collect();
        spec["imagePullSecrets"] = json!(names);
    }
    Ok(())
}

/// `shouldAutomount`: the pod's choice, then the ServiceAccount's, else yes.
fn automounts(spec: &Value, sa: &Value) -> bool {
    spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// `mountServiceAccountToken`: the mount in every (init) container without one at the
/// token path; the volume, unless the pod has one of that prefix already (then its name).
fn mount_api_access(spec: &mut Value) {
    let existing = spec["volumes"].as_array().and_then(|volumes| {
        volumes
            .iter()
            .filter_map(|v| v["name"].as_str())
            .find(|n| n.starts_with(VOLUME_PREFIX))
            .map(str::to_string)
    });
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| generated_name(VOLUME_PREFIX));
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut mounted = false;
    for key in ["initContainers", "containers"] {
        let Some(containers) = spec[key].as_array_mut() else {
            continue;
        };
        for container in containers {
            let has_mount = container["volumeMounts"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m["mountPath"].as_str() == Some(TOKEN_MOUNT_PATH))
            });
            if has_mount {
                continue;
            }
            match container["volumeMounts"].as_array_mut() {
                Some(mounts) => mounts.push(mount.clone()),
                None => container["volumeMounts"] = json!([mount.clone()]),
            }
            mounted = true;
        }
    }
    if existing.is_some() || !mounted {
        return;
    }
    let volume = api_access_volume(&volume_name);
    match spec["volumes"].as_array_mut() {
        Some(volumes) => volumes.push(volume),
        None => spec["volumes"] = json!([volume]),
    }
}

/// `TokenVolumeSource`, as the real server stores it (`defaultMode` 0644 written out).
pub fn api_access_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [
                    {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
                ]}},
            ],
        },
    })
}

/// `Validate` of a mirror pod: no ServiceAccount, no Secret, no token projection.
fn validate_mirror(pod: &Value) -> Result<(), &'static str> {
    if !pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("")
        .is_empty()
    {
        return Err("a mirror pod may not reference service accounts");
    }
    if !pod_references(pod, "secrets").is_empty() {
        return Err("a mirror pod may not reference secrets");
    }
    let projects_token = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .any(|s| s["serviceAccountToken"].is_object());
    if projects_token {
        return Err("a mirror pod may not use ServiceAccountToken volume projections");
    }
    Ok(())
}
