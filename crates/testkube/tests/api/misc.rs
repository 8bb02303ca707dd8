//! Smaller behaviours: SelfSubjectReview, Leases with MicroTime through k8s-openapi, list
//! and watch option errors, verbs a resource does not serve, Tables of built-in types, and
//! the kubeconfig accessors.

use crate::support::raw::RawClient;
use crate::support::{admin, client_from};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;
use testkube::TestCluster;

#[tokio::test]
async fn self_subject_review_returns_the_callers_identity() {
    let cluster = TestCluster::start().await.unwrap();
    let review: SelfSubjectReview = serde_json::from_value(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .unwrap();

    let admin_api: Api<SelfSubjectReview> = Api::all(admin(&cluster).await);
    let me = admin_api
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let user = me.status.unwrap().user_info.unwrap();
    assert_eq!(user.username.as_deref(), Some("kubernetes-admin"));
    assert!(user.groups.unwrap().contains(&"system:masters".to_string()));
    assert!(
        me.metadata.creation_timestamp.is_some() && me.metadata.uid.is_none(),
        "nothing is stored"
    );

    let (cert, key) = cluster
        .issue_client_cert("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let node_api: Api<SelfSubjectReview> =
        Api::all(client_from(&cluster.kubeconfig_for_client_cert(&cert, &key)).await);
    let node = node_api
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .user_info
        .unwrap();
    assert_eq!(node.username.as_deref(), Some("system:node:worker-1"));
    assert_eq!(
        node.groups,
        Some(vec![
            "system:nodes".to_string(),
            "system:authenticated".to_string()
        ])
    );

    cluster.register_static_token("tok-123", "robot", &["robots"]);
    let tok_api: Api<SelfSubjectReview> =
        Api::all(client_from(&cluster.kubeconfig_for_token("tok-123")).await);
    let robot = tok_api
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .user_info
        .unwrap();
    assert_eq!(robot.username.as_deref(), Some("robot"));
    assert!(robot.groups.unwrap().contains(&"robots".to_string()));

    // Only create is served.
    let r = RawClient::admin(&cluster)
        .get("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn leases_round_trip_micro_times_from_k8s_openapi() {
    let cluster = TestCluster::start().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(admin(&cluster).await, "kube-system");
    let now = jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "kubeflavor-controller"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0},
    }))
    .unwrap();
    let mut lease = lease;
    let spec = lease.spec.as_mut().unwrap();
    spec.acquire_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        now,
    ));
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        now,
    ));
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let renew = created.spec.unwrap().renew_time.unwrap().0;
    assert_eq!(
        renew.as_microsecond(),
        now.as_microsecond(),
        "microseconds survive the round trip"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn list_and_watch_option_errors() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let secrets = "/api/v1/namespaces/kube-system/secrets";
    let r = c
        .get(&format!("{secrets}?resourceVersionMatch=NotOlderThan"))
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
    );
    let r = c
        .get(&format!(
            "{secrets}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    let r = c
        .get(&format!(
            "{secrets}?resourceVersion=1000645&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!((r.status, r.header("Retry-After")), (504, Some("1")));
    assert_eq!(r.json()["reason"], "Timeout");
    let r = c
        .get(&format!("{secrets}?labelSelector=app%20in%20kf"))
        .await;
    assert_eq!(r.status, 400);

    // A streaming list: initial ADDED events, then the initial-events-end bookmark.
    let r = c.get(&format!("{secrets}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")).await;
    let last: serde_json::Value = serde_json::from_str(r.body.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "BOOKMARK");
    assert_eq!(
        last["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn tables_of_built_in_types_and_pretty_json_for_curl() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let accept = (
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    );
    let table = c
        .send("GET", "/api/v1/namespaces", &[accept], "")
        .await
        .json();
    assert_eq!(table["kind"], "Table");
    let names: Vec<&str> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cells"][0].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    // kubectl get -w: every watch event carries a one-row Table.
    let watch = c
        .send(
            "GET",
            "/api/v1/namespaces?watch=1&timeoutSeconds=1",
            &[accept],
            "",
        )
        .await;
    let first: serde_json::Value =
        serde_json::from_str(watch.body.lines().next().unwrap()).unwrap();
    assert_eq!(
        (first["type"].as_str(), first["object"]["kind"].as_str()),
        (Some("ADDED"), Some("Table"))
    );
    assert_eq!(first["object"]["rows"][0]["cells"][0], "default");

    let pretty = c
        .send("GET", "/version", &[("User-Agent", "curl/8.0")], "")
        .await;
    assert!(
        pretty.body.contains("\n  \"major\""),
        "curl gets indented JSON: {}",
        pretty.body
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn kubeconfigs_are_written_and_usable() {
    let cluster = TestCluster::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.kubeconfig");
    cluster.write_admin_kubeconfig(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(cluster.server_url()));
    let client = client_from(&text).await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    cluster.shutdown().await;
}

#[tokio::test]
async fn body_formats_and_the_openapi_kubectl_needs() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v\n";
    let r = c
        .send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/yaml")],
            yaml,
        )
        .await;
    assert_eq!((r.status, r.json()["data"]["k"].as_str()), (201, Some("v")));
    let r = c
        .send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/vnd.kubernetes.protobuf")],
            "k8s\0",
        )
        .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );

    // kubectl's --validate=strict looks for PATCH operations with fieldValidation per GVK.
    let root = c.get("/openapi/v3").await.json();
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = c.get(&url).await.json();
    let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert!(
        patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
    );
    assert!(root["paths"]["apis/certificates.k8s.io/v1"].is_object());
    assert_eq!(
        c.get("/openapi/v3/apis/nothing.example/v1").await.status,
        404
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn kube_runtime_recorder_creates_then_patches_an_event_series() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as EventV1;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let reporter = Reporter {
        controller: "kubeflavor.io/approver".into(),
        instance: Some("kubeflavor-0".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let regarding = ObjectReference {
        api_version: Some("certificates.k8s.io/v1".into()),
        kind: Some("CertificateSigningRequest".into()),
        name: Some("csr-worker-1".into()),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "Approved".into(),
        note: Some("approved".into()),
        action: "Approve".into(),
        secondary: None,
    };
    recorder.publish(&event, &regarding).await.unwrap();
    recorder.publish(&event, &regarding).await.unwrap();
    let events: Api<EventV1> = Api::namespaced(client, "default");
    let list = events.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let stored = &list.items[0];
    assert_eq!(stored.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(
        stored.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("csr-worker-1")
    );
    cluster.shutdown().await;
}
