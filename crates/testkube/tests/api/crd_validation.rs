//! Custom resources checked against their CRD's structural schema and CEL rules, with the
//! real server's 422s (messages as kube-openapi and apiextensions-apiserver word them),
//! pruning of unknown fields, defaults, transition rules and ratcheting.

use crate::support::admin;
use crate::support::raw::RawClient;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use testkube::TestCluster;

/// A Flavor CRD with a CEL rule on its labels and a minimum on maxNodes, as a client
/// sends it.
fn example_flavor_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "flavors.example.kubeflavor.io"},
        "spec": {
            "group": "example.kubeflavor.io", "scope": "Cluster",
            "names": {"plural": "flavors", "singular": "flavor", "kind": "Flavor", "listKind": "FlavorList", "shortNames": ["flv"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "labels": {"type": "object", "additionalProperties": {"type": "string"},
                            "x-kubernetes-validations": [{
                                "rule": "self.all(k, k.contains('node-restriction.kubernetes.io/'))",
                                "message": "every label key must contain node-restriction.kubernetes.io/"}]},
                        "maxNodes": {"type": "integer", "minimum": 0}}},
                    "status": {"type": "object", "properties": {
                        "boundNodes": {"type": "integer"}, "phase": {"type": "string"}}}}}}
            }]
        }
    })
}

fn status_422(name: &str, causes: Value) -> Value {
    let list = causes.as_array().unwrap();
    let parts: Vec<String> = list
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap(),
                c["message"].as_str().unwrap()
            )
        })
        .collect();
    let joined = if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    };
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Flavor.example.kubeflavor.io \"{name}\" is invalid: {joined}"),
        "reason": "Invalid",
        "details": {"name": name, "group": "example.kubeflavor.io", "kind": "Flavor", "causes": causes},
        "code": 422
    })
}

const JSON: (&str, &str) = ("Content-Type", "application/json");
const MERGE: (&str, &str) = ("Content-Type", "application/merge-patch+json");
const FLAVORS: &str = "/apis/example.kubeflavor.io/v1alpha1/flavors";

/// The real server's 422s for a CEL rule alone, schema and CEL together, and a patch,
/// compared body for body.
#[tokio::test]
async fn cel_and_schema_422s_are_exact() {
    let cluster = TestCluster::start().await.unwrap();
    let raw = RawClient::admin(&cluster);
    let crd = raw
        .send(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &[JSON],
            &example_flavor_crd().to_string(),
        )
        .await;
    assert_eq!(crd.status, 201, "{}", crd.body);
    let label_cause = json!({"reason": "FieldValueInvalid",
        "message": "Invalid value: every label key must contain node-restriction.kubernetes.io/",
        "field": "spec.labels"});

    let bad = json!({"apiVersion": "example.kubeflavor.io/v1alpha1", "kind": "Flavor", "metadata": {"name": "bad"},
        "spec": {"labels": {"example.com/flavor": "sweet"}}});
    let r = raw.send("POST", FLAVORS, &[JSON], &bad.to_string()).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json(), status_422("bad", json!([label_cause])));
    let message = r.json()["message"].clone();
    assert_eq!(
        message,
        "Flavor.example.kubeflavor.io \"bad\" is invalid: spec.labels: Invalid value: every label key must contain node-restriction.kubernetes.io/"
    );

    let mut both = bad.clone();
    both["spec"]["maxNodes"] = json!(-1);
    let r = raw.send("POST", FLAVORS, &[JSON], &both.to_string()).await;
    assert_eq!(r.status, 422);
    let min_cause = json!({"reason": "FieldValueInvalid",
        "message": "Invalid value: -1: spec.maxNodes in body should be greater than or equal to 0",
        "field": "spec.maxNodes"});
    assert_eq!(r.json(), status_422("bad", json!([min_cause, label_cause])));
    assert_eq!(
        r.json()["message"],
        "Flavor.example.kubeflavor.io \"bad\" is invalid: [spec.maxNodes: Invalid value: -1: spec.maxNodes in body should be greater than or equal to 0, spec.labels: Invalid value: every label key must contain node-restriction.kubernetes.io/]"
    );

    let sweet = json!({"apiVersion": "example.kubeflavor.io/v1alpha1", "kind": "Flavor", "metadata": {"name": "sweet"},
        "spec": {"labels": {"kubeflavor.node-restriction.kubernetes.io/flavor": "sweet"}, "maxNodes": 3}});
    let r = raw.send("POST", FLAVORS, &[JSON], &sweet.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let patch = json!({"spec": {"labels": {"example.com/x": "y"}}});
    let r = raw
        .send(
            "PATCH",
            &format!("{FLAVORS}/sweet"),
            &[MERGE],
            &patch.to_string(),
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json(), status_422("sweet", json!([label_cause])));
}

/// A schema exercising every keyword testkube checks, and CEL rules of each kind.
fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object", "required": ["spec"],
                    "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('w')", "message": "name must start with w"}],
                    "properties": {
                        "spec": {"type": "object", "required": ["node"],
                            "x-kubernetes-validations": [
                                {"rule": "!has(self.tags) || self.tags.all(t, t.lowerAscii() == t)",
                                 "messageExpression": "'tags must be lowercase, got ' + self.tags.join(',')", "fieldPath": ".tags"},
                                {"rule": "!has(self.trustLevel) || self.trustLevel != 14", "message": "unlucky",
                                 "reason": "FieldValueForbidden", "fieldPath": ".trustLevel"}],
                            "properties": {
                                "node": {"type": "string", "minLength": 2, "maxLength": 10, "pattern": "^[a-z]+$",
                                    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "node is immutable"}]},
                                "trustLevel": {"type": "integer", "minimum": 0, "maximum": 100,
                                    "x-kubernetes-validations": [{"rule": "self % 2 == 0", "message": "must be even"}]},
                                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
                                "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                                "port": {"x-kubernetes-int-or-string": true},
                                "when": {"type": "string", "format": "date-time"},
                                "note": {"type": "string", "nullable": true},
                                "enabled": {"type": "boolean"},
                                "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
                                "labels": {"type": "object", "minProperties": 1, "maxProperties": 2,
                                    "additionalProperties": {"type": "string"},
                                    "x-kubernetes-validations": [{"rule": "self.all(k, k.startsWith('x-'))", "message": "keys start with x-"}]},
                                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                        "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["Ready", "Pending"]}}}}}}
            }]
        }
    }))
    .unwrap()
}

fn widgets(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}))
        .unwrap()
}

async fn widget_cluster() -> (TestCluster, kube::Client) {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    (cluster, client)
}

/// `(field, reason, message)` of each cause of a 422.
fn causes(err: kube::Error) -> Vec<(String, String, String)> {
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    let details = status.details.expect("details");
    details
        .causes
        .into_iter()
        .map(|c| (c.field, c.reason, c.message))
        .collect()
}

fn c(field: &str, reason: &str, message: &str) -> (String, String, String) {
    (field.into(), reason.into(), message.into())
}

const SKIPPED: &str = "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

#[tokio::test]
async fn each_schema_keyword_is_reported_like_kube_openapi() {
    let (_cluster, client) = widget_cluster().await;
    let api = widgets(&client);
    let pp = PostParams::default();
    let spec = json!({"node": "N", "trustLevel": 101, "ratio": 0, "mode": "C", "port": true, "when": "yesterday",
        "note": null, "tags": [], "labels": {}, "enabled": "yes"});
    let got = causes(api.create(&pp, &widget("w1", spec)).await.unwrap_err());
    assert_eq!(
        got,
        vec![
            c(
                "spec.enabled",
                "FieldValueTypeInvalid",
                "Invalid value: \"string\": spec.enabled in body must be of type boolean: \"string\""
            ),
            c(
                "spec.labels",
                "FieldValueInvalid",
                "Invalid value: 0: spec.labels in body should have at least 1 properties"
            ),
            c(
                "spec.mode",
                "FieldValueNotSupported",
                "Unsupported value: \"C\": supported values: \"A\", \"B\""
            ),
            c(
                "spec.node",
                "FieldValueInvalid",
                "Invalid value: \"N\": spec.node in body should be at least 2 chars long"
            ),
            c(
                "spec.port",
                "FieldValueTypeInvalid",
                "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
            ),
            c(
                "spec.ratio",
                "FieldValueInvalid",
                "Invalid value: 0: spec.ratio in body should be greater than 0"
            ),
            c(
                "spec.tags",
                "FieldValueInvalid",
                "Invalid value: 0: spec.tags in body should have at least 1 items"
            ),
            c(
                "spec.trustLevel",
                "FieldValueInvalid",
                "Invalid value: 101: spec.trustLevel in body should be less than or equal to 100"
            ),
            c(
                "spec.when",
                "FieldValueTypeInvalid",
                "Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\""
            ),
            c("<nil>", "FieldValueInvalid", SKIPPED),
        ]
    );

    let spec = json!({"node": "abcdefghijk", "tags": ["a", "b", "c"], "labels": {"x-a": "1", "x-b": "2", "x-c": "3"}});
    let got = causes(api.create(&pp, &widget("w2", spec)).await.unwrap_err());
    assert_eq!(
        got,
        vec![
            c(
                "spec.labels",
                "FieldValueTooMany",
                "Too many: 3: must have at most 2 items"
            ),
            c(
                "spec.node",
                "FieldValueTooLong",
                "Too long: may not be more than 10 bytes"
            ),
            c(
                "spec.tags",
                "FieldValueTooMany",
                "Too many: 3: must have at most 2 items"
            ),
            c("<nil>", "FieldValueInvalid", SKIPPED),
        ]
    );

    let got = causes(
        api.create(&pp, &widget("w3", json!({"node": "AB", "ratio": 0.5})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![c(
            "spec.node",
            "FieldValueInvalid",
            "Invalid value: \"AB\": spec.node in body should match '^[a-z]+$'"
        )]
    );

    let got = causes(
        api.create(&pp, &widget("w4", json!({"port": "http"})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![
            c("spec.node", "FieldValueRequired", "Required value"),
            c("<nil>", "FieldValueInvalid", SKIPPED)
        ]
    );

    let ok = json!({"node": "ab", "port": 8080, "ratio": 0.5, "when": "2026-11-30T04:22:19Z", "note": null, "enabled": true});
    let created = api.create(&pp, &widget("w5", ok)).await.unwrap();
    assert_eq!(created.data["spec"]["mode"], "A", "the default is applied");
}

#[tokio::test]
async fn cel_rules_reject_with_their_messages_and_accept_good_objects() {
    let (_cluster, client) = widget_cluster().await;
    let api = widgets(&client);
    let pp = PostParams::default();
    let spec = json!({"node": "ab", "trustLevel": 7, "tags": ["Ab"], "labels": {"y": "1"}});
    let got = causes(api.create(&pp, &widget("bad", spec)).await.unwrap_err());
    assert_eq!(
        got,
        vec![
            c(
                "<nil>",
                "FieldValueInvalid",
                "Invalid value: name must start with w"
            ),
            c(
                "spec.tags",
                "FieldValueInvalid",
                "Invalid value: tags must be lowercase, got Ab"
            ),
            c(
                "spec.labels",
                "FieldValueInvalid",
                "Invalid value: keys start with x-"
            ),
            c(
                "spec.trustLevel",
                "FieldValueInvalid",
                "Invalid value: 7: must be even"
            ),
        ]
    );
    let got = causes(
        api.create(
            &pp,
            &widget("w-forbidden", json!({"node": "ab", "trustLevel": 14})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![c(
            "spec.trustLevel",
            "FieldValueForbidden",
            "Forbidden: unlucky"
        )]
    );

    let good = json!({"node": "ab", "trustLevel": 8, "tags": ["ab"], "labels": {"x-y": "1"}});
    api.create(&pp, &widget("worker", good)).await.unwrap();

    // A patch is checked on the patched object.
    let bad_patch = Patch::Merge(json!({"spec": {"labels": {"nope": "1"}}}));
    let got = causes(
        api.patch("worker", &PatchParams::default(), &bad_patch)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![c(
            "spec.labels",
            "FieldValueInvalid",
            "Invalid value: keys start with x-"
        )]
    );
}

#[tokio::test]
async fn transition_rules_see_old_self_and_status_is_validated() {
    let (_cluster, client) = widget_cluster().await;
    let api = widgets(&client);
    api.create(
        &PostParams::default(),
        &widget("worker", json!({"node": "ab"})),
    )
    .await
    .unwrap();
    let pp = PatchParams::default();
    let got = causes(
        api.patch(
            "worker",
            &pp,
            &Patch::Merge(json!({"spec": {"node": "cd"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![c(
            "spec.node",
            "FieldValueInvalid",
            "Invalid value: \"cd\": node is immutable"
        )]
    );
    let changed = api
        .patch(
            "worker",
            &pp,
            &Patch::Merge(json!({"spec": {"trustLevel": 10}})),
        )
        .await
        .unwrap();
    assert_eq!(changed.data["spec"]["trustLevel"], 10);

    let bad_status = Patch::Merge(json!({"status": {"phase": "Gone"}}));
    let got = causes(
        api.patch_status("worker", &pp, &bad_status)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![
            c(
                "status.phase",
                "FieldValueNotSupported",
                "Unsupported value: \"Gone\": supported values: \"Ready\", \"Pending\""
            ),
            c("<nil>", "FieldValueInvalid", SKIPPED),
        ]
    );
    let ok = api
        .patch_status(
            "worker",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(ok.data["status"]["phase"], "Ready");
}

#[tokio::test]
async fn unknown_fields_are_pruned_with_warnings_or_refused_when_strict() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let raw = RawClient::admin(&cluster);
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "wp"}, "junk": 1,
        "spec": {"node": "ab", "extra": {"a": 1}, "free": {"anything": {"goes": true}}}});
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    let r = raw.send("POST", path, &[JSON], &body.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let stored = r.json();
    assert_eq!(stored.get("junk"), None);
    assert_eq!(stored["spec"].get("extra"), None);
    assert_eq!(stored["spec"]["free"], json!({"anything": {"goes": true}}));
    let warnings: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Warning"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        warnings,
        vec![
            r#"299 - "unknown field \"junk\"""#,
            r#"299 - "unknown field \"spec.extra\"""#
        ]
    );

    let mut strict = body.clone();
    strict["metadata"]["name"] = json!("ws");
    let r = raw
        .send(
            "POST",
            &format!("{path}?fieldValidation=Strict"),
            &[JSON],
            &strict.to_string(),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.json()["message"].as_str().unwrap().ends_with(
            r#"strict decoding error: unknown field "junk", unknown field "spec.extra""#
        ),
        "{}",
        r.body
    );
}

/// An object that was valid under an older schema may be updated as long as the
/// offending value does not change (CRD validation ratcheting).
#[tokio::test]
async fn unchanged_invalid_values_are_ratcheted() {
    let cluster = TestCluster::start().await.unwrap();
    let client = admin(&cluster).await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let mut crd = widget_crd();
    let loose = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    crd.spec.versions[0].schema =
        Some(serde_json::from_value(json!({"openAPIV3Schema": loose})).unwrap());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let api = widgets(&client);
    api.create(
        &PostParams::default(),
        &widget("wr", json!({"node": "ab", "trustLevel": 500})),
    )
    .await
    .unwrap();
    let strict = serde_json::to_value(widget_crd().spec.versions).unwrap();
    crds.patch(
        "widgets.example.com",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"versions": strict}})),
    )
    .await
    .unwrap();
    let pp = PatchParams::default();
    api.patch("wr", &pp, &Patch::Merge(json!({"spec": {"tags": ["ok"]}})))
        .await
        .unwrap();
    let got = causes(
        api.patch(
            "wr",
            &pp,
            &Patch::Merge(json!({"spec": {"trustLevel": 600}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        got,
        vec![c(
            "spec.trustLevel",
            "FieldValueInvalid",
            "Invalid value: 600: spec.trustLevel in body should be less than or equal to 100"
        )]
    );
}
