use serde_json::{Value, json};

use super::{assert_admission_forbidden, attrs};
use crate::admission::admit;
use crate::admission::service_account::{TOKEN_MOUNT_PATH, VOLUME_PREFIX, api_access_volume};
use crate::authz::testutil::{MemReader, admin};
use crate::types::{ApiError, Operation};

fn sa(name: &str, extra: Value) -> Value {
    let mut sa = json!({"metadata": {"name": name, "namespace": "apps"}});
    if let (Some(sa), Some(extra)) = (sa.as_object_mut(), extra.as_object()) {
        sa.extend(extra.clone());
    }
    sa
}

fn accounts() -> MemReader {
    MemReader::new()
        .with("", "serviceaccounts", sa("default", json!({})))
        .with(
            "",
            "serviceaccounts",
            sa("quiet", json!({"automountServiceAccountToken": false})),
        )
        .with(
            "",
            "serviceaccounts",
            sa(
                "puller",
                json!({"imagePullSecrets": [{"name": "registry"}]}),
            ),
        )
}

fn pod(spec: Value) -> Value {
    json!({"metadata": {"name": "p", "namespace": "apps"}, "spec": spec})
}

fn create(pod: &mut Value) -> Result<(), ApiError> {
    admit(
        &attrs(admin(), "create", "", "pods", "", "apps", ""),
        Operation::Create,
        None,
        Some(pod),
        &accounts(),
    )
}

fn volume_names(pod: &Value) -> Vec<String> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

/// A pod that names no ServiceAccount runs as `default`, and every container mounts the
/// projected API access volume at the token path.
#[test]
fn a_pod_gets_the_default_account_and_the_api_access_volume() {
    let mut p = pod(json!({
        "initContainers": [{"name": "i", "image": "x"}],
        "containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                       {"name": "b", "image": "x"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
    }));
    create(&mut p).unwrap();
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    let names = volume_names(&p);
    assert_eq!(names.len(), 2, "{names:?}");
    let name = &names[1];
    assert!(
        name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5,
        "{name}"
    );
    assert_eq!(p["spec"]["volumes"][1], api_access_volume(name));
    assert_eq!(
        p["spec"]["volumes"][1]["projected"]["sources"],
        json!([
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ])
    );
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    assert_eq!(
        p["spec"]["initContainers"][0]["volumeMounts"],
        json!([mount])
    );
    assert_eq!(p["spec"]["containers"][0]["volumeMounts"][1], mount);
    assert_eq!(p["spec"]["containers"][1]["volumeMounts"], json!([mount]));
    assert!(p["spec"].get("imagePullSecrets").is_none());
}

/// The pod's `automountServiceAccountToken` wins over its ServiceAccount's.
#[test]
fn automount_false_on_the_pod_or_its_account_mounts_nothing() {
    let container = json!([{"name": "c", "image": "x"}]);
    for (spec, mounted) in [
        (json!({"automountServiceAccountToken": false}), false),
        (json!({"serviceAccountName": "quiet"}), false),
        (
            json!({"serviceAccountName": "quiet", "automountServiceAccountToken": true}),
            true,
        ),
    ] {
        let mut spec = spec;
        spec["containers"] = container.clone();
        let mut p = pod(spec.clone());
        create(&mut p).unwrap();
        assert_eq!(!volume_names(&p).is_empty(), mounted, "{spec}");
        assert_eq!(
            p["spec"]["containers"][0].get("volumeMounts").is_some(),
            mounted,
            "{spec}"
        );
    }
}

/// A container that mounts something at the token path keeps it; an API access volume the
/// pod has already is used, not added again.
#[test]
fn an_own_mount_or_volume_is_kept() {
    let mut p = pod(json!({
        "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]}],
        "volumes": [{"name": "mine", "emptyDir": {}}],
    }));
    create(&mut p).unwrap();
    assert_eq!(volume_names(&p), ["mine"]);
    let mut p = pod(json!({
        "containers": [{"name": "c", "image": "x"}],
        "volumes": [{"name": "kube-api-access-abcde", "emptyDir": {}}],
    }));
    create(&mut p).unwrap();
    assert_eq!(volume_names(&p), ["kube-api-access-abcde"]);
    assert_eq!(
        p["spec"]["containers"][0]["volumeMounts"][0]["name"],
        "kube-api-access-abcde"
    );
}

#[test]
fn a_pod_without_pull_secrets_gets_its_accounts() {
    let mut p =
        pod(json!({"serviceAccountName": "puller", "containers": [{"name": "c", "image": "x"}]}));
    create(&mut p).unwrap();
    assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));
    let mut p = pod(
        json!({"serviceAccountName": "puller", "imagePullSecrets": [{"name": "own"}],
                           "containers": [{"name": "c", "image": "x"}]}),
    );
    create(&mut p).unwrap();
    assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "own"}]));
}

#[test]
fn a_pod_of_a_missing_account_is_refused() {
    let mut p =
        pod(json!({"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "x"}]}));
    assert_admission_forbidden(
        create(&mut p),
        r#"pods "p" is forbidden: error looking up service account apps/ghost: serviceaccount "ghost" not found"#,
        json!({"name": "p", "kind": "pods"}),
    );
}

/// Mirror pods are not changed, and may not use a ServiceAccount.
#[test]
fn mirror_pods_are_left_alone_and_may_not_name_an_account() {
    let mirror = |spec: Value| {
        let mut p = pod(spec);
        p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
        p
    };
    let mut p = mirror(json!({"containers": [{"name": "c", "image": "x"}]}));
    let before = p.clone();
    create(&mut p).unwrap();
    assert_eq!(p, before);
    let mut p = mirror(
        json!({"serviceAccountName": "default", "containers": [{"name": "c", "image": "x"}]}),
    );
    assert_admission_forbidden(
        create(&mut p),
        r#"pods "p" is forbidden: a mirror pod may not reference service accounts"#,
        json!({"name": "p", "kind": "pods"}),
    );
}
