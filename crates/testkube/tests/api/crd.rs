//! CustomResourceDefinitions and their custom resources: served once the CRD is
//! established, status subresource semantics, generation, Table output, deletion with the
//! CRD, and discovery through kube::Discovery, as a real API server behaves.

use crate::support::raw::RawClient;
use crate::support::{admin, within};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::{Discovery, Scope};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use testkube::TestCluster;

fn flavor_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "flavors.example.kubeflavor.io"},
        "spec": {
            "group": "example.kubeflavor.io",
            "scope": "Cluster",
            "names": {"plural": "flavors", "singular": "flavor", "kind": "Flavor", "listKind": "FlavorList", "shortNames": ["flv"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Bound", "type": "integer", "jsonPath": ".status.boundNodes"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))
    .unwrap()
}

fn flavor_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.kubeflavor.io", "v1alpha1", "Flavor"),
        "flavors",
    )
}

#[tokio::test]
async fn a_crd_is_served_with_status_subresource_and_generation() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &flavor_crd())
        .await
        .unwrap();
    let status = created.status.unwrap();
    assert_eq!(
        status.conditions, None,
        "the create response has status.conditions null, as the real server's does"
    );
    assert_eq!(status.stored_versions, Some(vec!["v1alpha1".to_string()]));
    within(
        "CRD established",
        await_condition(
            crds.clone(),
            "flavors.example.kubeflavor.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap();

    let flavors: Api<DynamicObject> = Api::all_with(client.clone(), &flavor_resource());
    let sweet: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.kubeflavor.io/v1alpha1", "kind": "Flavor", "metadata": {"name": "sweet"},
        "spec": {"maxNodes": 3}, "status": {"phase": "IgnoredOnCreate"},
    }))
    .unwrap();
    let made = flavors
        .create(&PostParams::default(), &sweet)
        .await
        .unwrap();
    assert_eq!(made.metadata.generation, Some(1));
    assert!(
        made.data.get("status").is_none(),
        "status is dropped on create (the status subresource owns it)"
    );

    let st = flavors
        .patch_status(
            "sweet",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"maxNodes": 99}, "status": {"boundNodes": 2, "phase": "Ready"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        (st.data["spec"]["maxNodes"].as_i64(), st.metadata.generation),
        (Some(3), Some(1)),
        "/status ignores spec"
    );
    assert_eq!(st.data["status"]["boundNodes"], 2);

    let main = flavors
        .patch(
            "sweet",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxNodes": 5}, "status": {"phase": "IgnoredOnMain"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        main.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
    assert_eq!(
        main.data["status"]["phase"], "Ready",
        "the main resource ignores status"
    );
    let relabel = flavors
        .patch(
            "sweet",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        relabel.metadata.generation,
        Some(2),
        "metadata changes do not"
    );

    // PUT of a custom resource needs a resourceVersion.
    let mut unconditional = relabel.clone();
    unconditional.metadata.resource_version = None;
    match flavors
        .replace("sweet", &PostParams::default(), &unconditional)
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        other => panic!("{other:?}"),
    }

    let deleted = flavors
        .delete("sweet", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .unwrap();
    let details = deleted.details.unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("example.kubeflavor.io", "flavors")
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn discovery_table_and_crd_deletion() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &flavor_crd())
        .await
        .unwrap();
    within(
        "CRD established",
        await_condition(
            crds.clone(),
            "flavors.example.kubeflavor.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap();

    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (flavor, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "example.kubeflavor.io",
            "v1alpha1",
            "Flavor",
        ))
        .expect("the CRD group is discovered");
    assert_eq!(
        (flavor.plural.as_str(), caps.scope.clone()),
        ("flavors", Scope::Cluster)
    );
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    for (group, kind) in [
        ("", "Secret"),
        ("", "Service"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("coordination.k8s.io", "Lease"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("apps", "Deployment"),
        ("policy", "PodDisruptionBudget"),
        ("events.k8s.io", "Event"),
        ("authentication.k8s.io", "SelfSubjectReview"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ] {
        let version = "v1";
        assert!(
            discovery
                .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
                .is_some(),
            "{group}/{kind}"
        );
    }

    // Aggregated discovery (apidiscovery.k8s.io/v2, what kubectl asks for) agrees.
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (_, caps) = aggregated
        .resolve_gvk(&GroupVersionKind::gvk(
            "example.kubeflavor.io",
            "v1alpha1",
            "Flavor",
        ))
        .expect("the CRD group is in aggregated discovery");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    assert!(
        aggregated
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Node"))
            .is_some()
    );

    let flavors: Api<DynamicObject> = Api::all_with(client.clone(), &flavor_resource());
    for name in ["sweet", "sour"] {
        let f: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.kubeflavor.io/v1alpha1", "kind": "Flavor", "metadata": {"name": name}})).unwrap();
        flavors.create(&PostParams::default(), &f).await.unwrap();
    }
    flavors
        .patch_status(
            "sweet",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"boundNodes": 2, "phase": "Ready"}})),
        )
        .await
        .unwrap();

    let raw = RawClient::admin(&cluster);
    let accept = (
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
    );
    let table = raw
        .send(
            "GET",
            "/apis/example.kubeflavor.io/v1alpha1/flavors?limit=500",
            &[accept],
            "",
        )
        .await
        .json();
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, vec!["Name", "Bound", "Phase", "Age"]);
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows[0]["cells"][0], "sour");
    assert_eq!(
        (&rows[0]["cells"][1], &rows[0]["cells"][2]),
        (&json!(null), &json!(null))
    );
    assert_eq!(
        (&rows[1]["cells"][1], &rows[1]["cells"][2]),
        (&json!(2), &json!("Ready"))
    );
    assert!(
        rows[1]["cells"][3].as_str().unwrap().ends_with('s'),
        "dates are rendered as ages"
    );
    assert_eq!(rows[1]["object"]["kind"], "PartialObjectMetadata");

    crds.delete("flavors.example.kubeflavor.io", &DeleteParams::default())
        .await
        .unwrap();
    let r = raw
        .get("/apis/example.kubeflavor.io/v1alpha1/flavors")
        .await;
    assert_eq!((r.status, r.body.as_str()), (404, "404 page not found\n"));
    cluster.shutdown().await;
}
