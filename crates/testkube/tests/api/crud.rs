//! Create, get, list, update, patch and delete through kube-rs, compared with what a real
//! API server does.

use std::collections::BTreeMap;

use crate::support::admin;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::json;
use testkube::TestCluster;

fn secret(name: &str, labels: &[(&str, &str)]) -> Secret {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        },
        "stringData": {"a": "1"},
    }))
    .unwrap()
}

fn api_error(err: kube::Error) -> Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_conflict_and_delete_like_the_real_server() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");

    let created = secrets
        .create(&PostParams::default(), &secret("kf-demo", &[("app", "kf")]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(
        meta.resource_version
            .as_deref()
            .unwrap()
            .parse::<u64>()
            .is_ok()
    );
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        created.data.unwrap()["a"].0,
        b"1",
        "stringData is folded into data"
    );

    let again = api_error(
        secrets
            .create(&PostParams::default(), &secret("kf-demo", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(again.message, "secrets \"kf-demo\" already exists");

    let got = secrets.get("kf-demo").await.unwrap();
    assert_eq!(got.metadata.uid, meta.uid);

    let missing = api_error(secrets.get("kf-missing").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "secrets \"kf-missing\" not found");

    let deleted = secrets
        .delete("kf-demo", &DeleteParams::default())
        .await
        .unwrap();
    let status = deleted
        .right()
        .expect("DELETE answers a Status, not the object");
    let details = status.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("kf-demo", "secrets")
    );
    assert_eq!(Some(details.uid), meta.uid);
    let gone = api_error(
        secrets
            .delete("kf-demo", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(gone.code, 404);
    cluster.shutdown().await;
}

#[tokio::test]
async fn update_with_a_stale_resource_version_is_a_conflict() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "default");
    let first = secrets
        .create(&PostParams::default(), &secret("s", &[]))
        .await
        .unwrap();
    let mut next = first.clone();
    next.string_data = Some(BTreeMap::from([("a".to_string(), "2".to_string())]));
    let second = secrets
        .replace("s", &PostParams::default(), &next)
        .await
        .unwrap();
    assert!(
        second
            .metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > first
                .metadata
                .resource_version
                .clone()
                .unwrap()
                .parse::<u64>()
                .unwrap()
    );
    let stale = api_error(
        secrets
            .replace("s", &PostParams::default(), &next)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on secrets \"s\": the object has been modified; please apply your changes to \
         the latest version and try again"
    );
    let stale_patch = json!({"metadata": {"resourceVersion": first.metadata.resource_version}, "data": {"b": "Mg=="}});
    let err = api_error(
        secrets
            .patch("s", &PatchParams::default(), &Patch::Merge(&stale_patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    // Without a resourceVersion the update is unconditional (the real server allows it).
    next.metadata.resource_version = None;
    secrets
        .replace("s", &PostParams::default(), &next)
        .await
        .unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn list_filters_by_label_and_field_selectors() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    for (name, labels) in [
        ("a", vec![("tier", "node"), ("app", "kf")]),
        ("b", vec![("tier", "cp"), ("app", "kf")]),
        ("c", vec![("app", "other")]),
    ] {
        secrets
            .create(&PostParams::default(), &secret(name, &labels))
            .await
            .unwrap();
    }
    let names = |l: kube::api::ObjectList<Secret>| -> Vec<String> {
        l.items
            .into_iter()
            .map(|s| s.metadata.name.unwrap())
            .collect()
    };
    let cases = [
        ("app=kf", vec!["a", "b"]),
        ("app!=kf", vec!["c"]),
        ("tier in (node,x)", vec!["a"]),
        ("tier notin (node)", vec!["b", "c"]),
        ("tier", vec!["a", "b"]),
        ("!tier", vec!["c"]),
    ];
    for (selector, want) in cases {
        let got = names(
            secrets
                .list(&ListParams::default().labels(selector))
                .await
                .unwrap(),
        );
        assert_eq!(got, want, "labelSelector {selector}");
    }
    let by_name = names(
        secrets
            .list(&ListParams::default().fields("metadata.name=b"))
            .await
            .unwrap(),
    );
    assert_eq!(by_name, vec!["b"]);
    let bad = api_error(
        secrets
            .list(&ListParams::default().fields("spec.nothing=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (bad.code, bad.message.as_str()),
        (400, "field label not supported: spec.nothing")
    );

    // Pagination: kube-rs follows continue tokens when asked for pages.
    let page = secrets.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().expect("a continue token");
    let rest = secrets
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(rest), vec!["c"]);

    let all: Api<Secret> = Api::all(client);
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn generate_name_and_namespaces() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    for ns in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(names.contains(&ns.to_string()), "{ns} exists at start");
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "kf-gen-"}})).unwrap();
    let missing_ns = api_error(cms.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!(
        (missing_ns.code, missing_ns.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );

    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let made = cms.create(&PostParams::default(), &cm).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(
        name.starts_with("kf-gen-") && name.len() == "kf-gen-".len() + 5,
        "{name}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn delete_collection_removes_only_the_selected_objects() {
    let cluster = TestCluster::start().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "default");
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        secrets
            .create(&PostParams::default(), &secret(name, &[("tier", tier)]))
            .await
            .unwrap();
    }
    let gone = secrets
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=x"),
        )
        .await
        .unwrap();
    let listed: Vec<String> = gone
        .left()
        .expect("the deleted objects")
        .items
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect();
    assert_eq!(listed, vec!["a", "b"]);
    let left: Vec<String> = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect();
    assert_eq!(left, vec!["c"]);
    cluster.shutdown().await;
}

/// A Service created without an address gets one of the Service CIDR in `clusterIP` and
/// `clusterIPs`, each its own; a headless Service keeps `None`; a re-apply keeps the address.
#[tokio::test]
async fn services_get_a_cluster_ip_on_create() {
    use k8s_openapi::api::core::v1::Service;
    let cluster = TestCluster::start().await.unwrap();
    let services: Api<Service> = Api::namespaced(admin(&cluster).await, "default");
    let service = |name: &str, cluster_ip: Option<&str>| -> Service {
        let mut spec = json!({"ports": [{"name": "https", "port": 443, "targetPort": "https"}]});
        if let Some(ip) = cluster_ip {
            spec["clusterIP"] = json!(ip);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let mut seen = Vec::new();
    for name in ["svc-a", "svc-b"] {
        let created = services
            .create(&PostParams::default(), &service(name, None))
            .await
            .unwrap();
        let spec = created.spec.unwrap();
        let ip: std::net::Ipv4Addr = spec.cluster_ip.clone().unwrap().parse().unwrap();
        let octets = ip.octets();
        assert!(
            octets[0] == 10 && (96..112).contains(&octets[1]),
            "{ip} in 10.96.0.0/12"
        );
        assert_ne!(
            ip,
            std::net::Ipv4Addr::new(10, 96, 0, 1),
            "the kubernetes Service's"
        );
        assert_eq!(spec.cluster_ips, Some(vec![ip.to_string()]));
        assert!(!seen.contains(&ip), "{ip} given twice");
        seen.push(ip);
        assert_eq!(
            serde_json::to_value(created.status.unwrap()).unwrap(),
            json!({"loadBalancer": {}})
        );
    }
    let headless = services
        .create(
            &PostParams::default(),
            &service("svc-headless", Some("None")),
        )
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
    assert_eq!(headless.cluster_ips, Some(vec!["None".to_string()]));

    let applied = services
        .patch(
            "svc-a",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "svc-a"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": "https"}]},
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.spec.unwrap().cluster_ip,
        Some(seen[0].to_string()),
        "apply keeps the assigned address"
    );
}
