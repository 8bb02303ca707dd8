//! Fault injection (fail_next with 500/409/429, delay_next) and the request counters, through
//! kube-rs and plain HTTP. cut_watches is covered in watch.rs.

use std::time::Duration;

use crate::support::raw::RawClient;
use crate::support::{admin, client_from, within};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::json;
use testkube::{IdentityKind, TestCluster};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

fn api_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn fail_next_gives_real_status_errors_then_stops() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    cluster.faults().fail_next(1, "create", "configmaps", 500);
    let err = api_status(
        cms.create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    assert_eq!(err.message, "Internal error occurred: injected fault");
    let made = cms.create(&PostParams::default(), &cm("a")).await.unwrap();

    cluster.faults().fail_next(1, "update", "configmaps", 409);
    let err = api_status(
        cms.replace("a", &PostParams::default(), &made)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    cms.replace("a", &PostParams::default(), &made)
        .await
        .unwrap();

    // Rules match on verb and resource only.
    cluster.faults().fail_next(1, "delete", "secrets", 500);
    cms.get("a").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "default");
    let err = api_status(
        secrets
            .delete("nothing", &Default::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 500);
    cluster.shutdown().await;
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_and_kube_rs_retries_it() {
    let cluster = TestCluster::start().await.unwrap();
    let raw = RawClient::admin(&cluster);
    cluster.faults().fail_next(1, "list", "configmaps", 429);
    let r = raw.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("Retry-After"), Some("1"));
    let body = r.json();
    assert_eq!(
        (
            body["reason"].as_str(),
            body["details"]["retryAfterSeconds"].as_u64()
        ),
        (Some("TooManyRequests"), Some(1))
    );

    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    cluster.counters().reset();
    cluster.faults().fail_next(1, "get", "configmaps", 429);
    cms.get("x").await.expect("kube-rs retries a 429");
    let counts = cluster.counters().snapshot();
    assert_eq!(
        counts.get(IdentityKind::ClientCert, "get", "configmaps"),
        2,
        "one refused, one served"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn delay_next_holds_a_request_while_others_proceed() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    cluster
        .faults()
        .delay_next(1, "get", "configmaps", Duration::from_secs(2));
    let delayed = {
        let cms = cms.clone();
        tokio::spawn(async move { cms.get_opt("late").await })
    };
    // Once the delay has fired the GET has reached the server; without the delay it would
    // now be answered 404, since "late" does not exist yet.
    within("the delayed GET to arrive", cluster.faults().fired(1)).await;
    cms.create(&PostParams::default(), &cm("late"))
        .await
        .unwrap();
    let found = within("the delayed GET", delayed).await.unwrap().unwrap();
    assert!(found.is_some(), "the delayed GET ran after the create");
    cluster.shutdown().await;
}

#[tokio::test]
async fn counters_split_by_identity_verb_and_resource() {
    let cluster = TestCluster::start().await.unwrap();
    cluster.register_static_token("static-token-1", "tester", &["testers"]);
    let by_token: Api<ConfigMap> = Api::namespaced(
        client_from(&cluster.kubeconfig_for_token("static-token-1")).await,
        "kube-public",
    );
    let anonymous: Api<ConfigMap> = Api::namespaced(
        client_from(&cluster.anonymous_kubeconfig()).await,
        "kube-public",
    );
    let adm: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "kube-public");
    cluster.counters().reset();
    anonymous.get("cluster-info").await.unwrap();
    anonymous.get("cluster-info").await.unwrap();
    let _ = by_token.get("cluster-info").await;
    adm.create(&PostParams::default(), &cm("made"))
        .await
        .unwrap();
    let counts = cluster.counters().snapshot();
    assert_eq!(counts.get(IdentityKind::Anonymous, "get", "configmaps"), 2);
    assert_eq!(
        counts.get(IdentityKind::StaticToken, "get", "configmaps"),
        1
    );
    assert_eq!(
        counts.get(IdentityKind::ClientCert, "create", "configmaps"),
        1
    );
    assert_eq!(counts.total(), 4);
    cluster.counters().reset();
    assert_eq!(cluster.counters().snapshot().total(), 0);
    cluster.shutdown().await;
}
