//! Garbage collection by ownerReferences (kube-controller-manager's garbage collector,
//! which removes a dependent within about 0.1 s of its owner): background deletion of
//! dependents, dangling owner uids, foreground deletion, orphaning, finalizers, namespace
//! cleanup, and the collector switched off.

use crate::support::{admin, watch_from_now, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use serde_json::json;
use testkube::TestCluster;

fn owned(name: &str, owner: &Secret) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "Secret", "name": owner.metadata.name, "uid": owner.metadata.uid,
            "controller": true, "blockOwnerDeletion": true,
        }]},
    }))
    .unwrap()
}

fn plain(name: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

async fn wait_deleted(secrets: &Api<Secret>, rv: &str, name: &str) {
    let mut stream = secrets
        .watch(&WatchParams::default(), rv)
        .await
        .unwrap()
        .boxed();
    within(&format!("{name} deleted"), async {
        while let Some(e) = stream.try_next().await.unwrap() {
            if let WatchEvent::Deleted(s) = e
                && s.metadata.name.as_deref() == Some(name)
            {
                return;
            }
        }
        panic!("watch ended before {name} was deleted");
    })
    .await;
}

#[tokio::test]
async fn dependents_follow_their_owner_and_dangling_references_are_collected() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");
    let owner = secrets
        .create(&PostParams::default(), &plain("bootstrap-token-012q3l"))
        .await
        .unwrap();
    let dep = secrets
        .create(&PostParams::default(), &owned("kf-gc-dependent", &owner))
        .await
        .unwrap();
    let rv = dep.metadata.resource_version.clone().unwrap();
    let deleted = secrets
        .delete("bootstrap-token-012q3l", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        deleted.is_right(),
        "background deletion answers a Status at once"
    );
    wait_deleted(&secrets, &rv, "kf-gc-dependent").await;

    // An ownerReference to a uid that no longer exists is accepted, then collected.
    let dangling = secrets
        .create(&PostParams::default(), &owned("kf-gc-dangling", &owner))
        .await
        .unwrap();
    assert_eq!(dangling.metadata.name.as_deref(), Some("kf-gc-dangling"));
    wait_deleted(
        &secrets,
        &dangling.metadata.resource_version.unwrap(),
        "kf-gc-dangling",
    )
    .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn foreground_deletion_returns_the_owner_and_removes_it_after_its_dependents() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");
    let owner = secrets
        .create(&PostParams::default(), &plain("owner"))
        .await
        .unwrap();
    let dep = secrets
        .create(&PostParams::default(), &owned("dependent", &owner))
        .await
        .unwrap();
    let rv = dep.metadata.resource_version.clone().unwrap();
    let answer = secrets
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let lingering = answer
        .left()
        .expect("foreground deletion answers the object");
    assert!(lingering.metadata.deletion_timestamp.is_some());
    assert_eq!(
        lingering.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    wait_deleted(&secrets, &rv, "owner").await;
    assert!(
        secrets.get_opt("dependent").await.unwrap().is_none(),
        "the dependent went first"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn orphaning_and_finalizers() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "default");
    let owner = secrets
        .create(&PostParams::default(), &plain("owner"))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &owned("orphan", &owner))
        .await
        .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    secrets.delete("owner", &dp).await.unwrap();
    let orphan = secrets.get("orphan").await.unwrap();
    assert_eq!(
        orphan.metadata.owner_references.unwrap_or_default().len(),
        0,
        "the reference is removed"
    );

    let held: Secret = serde_json::from_value(
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .unwrap();
    secrets.create(&PostParams::default(), &held).await.unwrap();
    let marked = secrets
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the object lingers");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let rv = marked.metadata.resource_version.clone().unwrap();
    secrets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_deleted(&secrets, &rv, "held").await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_deleted_namespace_is_emptied_then_removed() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "scratch"}})).unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "scratch");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
    )
    .await
    .unwrap();
    let mut stream = watch_from_now(&namespaces, &WatchParams::default()).await;
    let terminating = namespaces
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    within("namespace removed", async {
        while let Some(e) = stream.try_next().await.unwrap() {
            if matches!(e, WatchEvent::Deleted(_)) {
                return;
            }
        }
    })
    .await;
    assert!(cms.get_opt("x").await.unwrap().is_none());
    cluster.shutdown().await;
}
