//! A kubelet cannot change its Node's taints by strategic merge patch directives nor
//! through `nodes/status`: NodeRestriction sees the patched object before the status
//! strategy keeps the stored spec, and `Node.spec.taints` is an atomic list, so a
//! `$patch: delete` element replaces the whole list.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::kubelet::{kubelet, refused, register, taints};
use crate::support::Env;

const A: &str = "example.com/fidelity-a";
const B: &str = "example.com/fidelity-b";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cannot_drop_taints_by_directive_or_through_status() {
    let env = Env::start().await;
    let node = env.name("fid-taints");
    let kubelet = kubelet(&env, &node).await;
    register(&kubelet, &node, &[(A, "NoSchedule"), (B, "NoExecute")]).await;
    let own: Api<Node> = Api::all(kubelet);
    let params = PatchParams::default();
    let expected = format!("node \"{node}\" is not allowed to modify taints");

    let strategic = [
        // An element with a delete directive in an atomic list: the list becomes [{key: A}].
        json!({"spec": {"taints": [{"key": A, "$patch": "delete"}]}}),
        // A map directive deleting the whole spec, or replacing it.
        json!({"spec": {"$patch": "delete"}}),
        json!({"spec": {"$patch": "replace", "taints": []}}),
        // A directive map where the list was.
        json!({"spec": {"taints": {"$patch": "delete"}}}),
    ];
    for patch in &strategic {
        let (code, message) = refused(
            &format!("strategic {patch}"),
            own.patch(&node, &params, &Patch::Strategic(patch)).await,
        );
        assert_eq!(code, 403, "{patch}: {message}");
        assert!(message.contains(&expected), "{patch}: {message}");
    }

    let status_patches: [(&str, Patch<serde_json::Value>); 3] = [
        ("merge", Patch::Merge(json!({"spec": {"taints": []}}))),
        (
            "strategic",
            Patch::Strategic(json!({"spec": {"taints": [{"key": A, "$patch": "delete"}]}})),
        ),
        (
            "json",
            Patch::Json(
                serde_json::from_value(json!([{"op": "remove", "path": "/spec/taints"}]))
                    .expect("a JSON patch"),
            ),
        ),
    ];
    for (kind, patch) in &status_patches {
        let (code, message) = refused(
            &format!("{kind} patch of nodes/status"),
            own.patch_status(&node, &params, patch).await,
        );
        assert_eq!(code, 403, "{kind} through nodes/status: {message}");
        assert!(message.contains(&expected), "{kind}: {message}");
    }

    // What the status strategy does keep: the kubelet's own label, sent through status.
    let labelled = own
        .patch_status(
            &node,
            &params,
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/fidelity": "yes"}}})),
        )
        .await
        .expect("a kubelet may label itself through nodes/status");
    assert_eq!(
        labelled
            .metadata
            .labels
            .unwrap_or_default()
            .get("example.com/fidelity"),
        Some(&"yes".to_string())
    );

    let stored = Api::<Node>::all(env.client.clone())
        .get(&node)
        .await
        .expect("the Node");
    assert_eq!(
        taints(&stored, &[A, B]),
        [
            (A.to_string(), "NoSchedule".to_string()),
            (B.to_string(), "NoExecute".to_string())
        ],
        "the taints are as the kubelet registered them"
    );
}

/// The Node status strategy (pkg/registry/core/node/strategy.go,
/// `nodeStatusStrategy.PrepareForUpdate`) resets only the spec: labels and annotations
/// added, changed or removed through `nodes/status` are stored, a spec change is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_through_nodes_status_keeps_its_metadata_and_drops_its_spec() {
    let env = Env::start().await;
    let node = env.name("fid-status-meta");
    let nodes: Api<Node> = Api::all(env.client.clone());
    let created: Node = serde_json::from_value(json!({
        "metadata": {"name": node, "labels": {"example.com/gone": "x", "example.com/kept": "x"},
                     "annotations": {"example.com/changed": "before"}},
    }))
    .expect("a Node");
    nodes
        .create(&kube::api::PostParams::default(), &created)
        .await
        .expect("the admin creates the Node");
    let patch = json!({
        "metadata": {
            "labels": {"example.com/gone": null, "example.com/added": "yes"},
            "annotations": {"example.com/changed": "after"},
        },
        "spec": {"unschedulable": true},
    });
    nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("a status patch");
    let stored = nodes.get(&node).await.expect("the Node");
    let labels = stored.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("example.com/added").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        labels.get("example.com/kept").map(String::as_str),
        Some("x")
    );
    assert!(!labels.contains_key("example.com/gone"), "{labels:?}");
    let annotations = stored.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("example.com/changed").map(String::as_str),
        Some("after")
    );
    assert_eq!(
        stored.spec.and_then(|s| s.unschedulable),
        None,
        "the spec is the stored one"
    );
    let _ = nodes.delete(&node, &Default::default()).await;
}
