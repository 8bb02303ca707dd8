//! End-to-end: `kubeflavor install` against testkube, or the cluster named by
//! KUBEFLAVOR_E2E_KUBECONFIG.

use crate::support::Env;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;

#[tokio::test]
async fn install_apply_creates_everything_print_shows_and_is_idempotent() {
    let env = Env::start().await;
    let printed = env.kf(&["install"]).await;
    let docs: Vec<Value> = serde_saphyr::from_multiple(printed.expect_ok()).unwrap();
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    assert!(docs.len() > 10, "{} documents", docs.len());

    // No controller runs on a real cluster during the tests (see Env::install).
    let first = env.kf(&["install", "--apply", "--replicas", "0"]).await;
    assert_eq!(first.expect_ok().lines().count(), docs.len());
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    let before = roles.get("kubeflavor:controller").await.unwrap();
    let second = env.kf(&["install", "--apply", "--replicas", "0"]).await;
    assert_eq!(
        second.expect_ok(),
        first.stdout,
        "a re-run applies the same set"
    );
    let after = roles.get("kubeflavor:controller").await.unwrap();
    assert_eq!(before.rules, after.rules);

    // Every printed object exists on the cluster.
    for doc in &docs {
        let api_version = doc["apiVersion"].as_str().unwrap();
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let plural = match kind {
            "CustomResourceDefinition" => "customresourcedefinitions",
            "Namespace" => "namespaces",
            "ServiceAccount" => "serviceaccounts",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            "Deployment" => "deployments",
            other => panic!("unexpected kind {other}"),
        };
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
            None => Api::all_with(env.client.clone(), &ar),
        };
        let stored = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind}/{name} missing: {e}"));
        if kind == "ClusterRole" || kind == "Role" {
            assert_eq!(
                serde_json::to_value(&stored.data["rules"]).unwrap(),
                doc["rules"],
                "{kind}/{name} rules differ"
            );
        }
    }

    // The CRDs are served once install returns.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    for name in ["flavors.kubeflavor.io", "flavorbindings.kubeflavor.io"] {
        let crd = crds.get(name).await.unwrap();
        let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            established
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} not established"
        );
    }
    env.kf(&["flavor", "list"]).await.expect_ok();
}

#[tokio::test]
async fn install_print_touches_no_cluster() {
    let env = Env::start().await;
    let before = env.request_count();
    let out = env
        .kf(&[
            "install",
            "--namespace",
            "ops",
            "--image",
            "registry.example/kf:dev",
            "--replicas",
            "3",
        ])
        .await;
    let text = out.expect_ok();
    assert!(text.contains("namespace: ops") && text.contains("image: registry.example/kf:dev"));
    assert!(text.contains("replicas: 3"), "{text}");
    assert_eq!(env.request_count(), before);
}

/// `kubectl get flavors` shows the CRD's printer columns (the API server renders the Table
/// from `additionalPrinterColumns` when asked for `as=Table`).
#[tokio::test]
async fn kubectl_get_shows_the_printer_columns() {
    let env = Env::start().await;
    env.install().await;
    let name = env.name("table");
    env.kf(&[
        "flavor",
        "create",
        &name,
        "--trust-level",
        "42",
        "--ttl",
        "3h",
        "--max-nodes",
        "2",
    ])
    .await
    .expect_ok();
    let request = http::Request::get(format!("/apis/kubeflavor.io/v1alpha1/flavors/{name}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value =
        serde_json::from_str(&env.client.request_text(request).await.unwrap()).unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        ["Name", "Trust", "TTL", "Max Nodes", "Bound", "Age"]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], name.as_str());
    assert_eq!(cells[1], 42);
    assert_eq!(cells[2], "3h");
    assert_eq!(cells[3], 2);
    assert!(cells[4].is_null(), "no status yet: {cells}");
    env.kf(&["flavor", "delete", &name]).await.expect_ok();
}
