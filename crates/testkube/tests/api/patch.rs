//! PATCH through kube-rs: JSON merge patch, JSON patch (with a failing test op), strategic
//! merge patch, server-side apply (fieldManager required, create-if-missing), no-op
//! patches, dry run.

use crate::support::admin;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use testkube::TestCluster;

fn status_of(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn merge_json_and_strategic_patches() {
    let cluster = TestCluster::start().await.unwrap();
    let nodes: Api<Node> = Api::all(admin(&cluster).await);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "worker-1", "labels": {"a": "1", "b": "2"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();

    let merged = nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": null, "c": "3"}}})),
        )
        .await
        .unwrap();
    let labels = merged.metadata.labels.clone().unwrap();
    assert_eq!(labels.keys().collect::<Vec<_>>(), vec!["b", "c"]);

    let rv = merged.metadata.resource_version.clone().unwrap();
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/labels/d", "value": "4"},
    ]))
    .unwrap();
    let patched = nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Json::<()>(ops.clone()),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["d"], "4");
    // The same test op against the old resourceVersion now fails: 422 like the real server.
    let stale = status_of(
        nodes
            .patch("worker-1", &PatchParams::default(), &Patch::Json::<()>(ops))
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (422, "Invalid"));

    let strategic = nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"taints": [{"key": "other", "effect": "NoExecute"}]}}),
            ),
        )
        .await
        .unwrap();
    let taints = strategic.spec.unwrap().taints.unwrap();
    assert_eq!(
        taints.len(),
        1,
        "lists are replaced (strategic merge is treated as a merge patch)"
    );

    // A patch that changes nothing does not create a new revision.
    let same = nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
        )
        .await
        .unwrap();
    let again = nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        again.metadata.resource_version
    );
    assert_eq!(created.metadata.uid, again.metadata.uid);
    cluster.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_needs_a_field_manager_and_creates_missing_objects() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}});

    let no_manager = status_of(
        cms.patch("applied", &PatchParams::default(), &Patch::Apply(&applied))
            .await
            .unwrap_err(),
    );
    assert_eq!(no_manager.code, 422);
    assert_eq!(
        no_manager.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let details = no_manager.details.unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("meta.k8s.io", "PatchOptions")
    );

    let params = PatchParams::apply("kubeflavor").force();
    let created = cms
        .patch("applied", &params, &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["a"], "1");
    let updated = cms
        .patch("applied", &params, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"b": "2"}})))
        .await
        .unwrap();
    let data = updated.data.unwrap();
    assert_eq!(
        (data.get("a").map(String::as_str), data["b"].as_str()),
        (Some("1"), "2")
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dry"}})).unwrap();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answered = cms.create(&pp, &cm).await.unwrap();
    assert_eq!(answered.metadata.name.as_deref(), Some("dry"));
    assert!(cms.get_opt("dry").await.unwrap().is_none());
    cluster.shutdown().await;
}
