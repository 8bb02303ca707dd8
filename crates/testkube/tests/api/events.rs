//! Event namespace validation (upstream `legacyValidateEvent` in
//! pkg/apis/core/validation/events.go): an Event about a cluster-scoped object lives in
//! `default` or `kube-system`, one about a namespaced object in that object's namespace,
//! for events.k8s.io/v1 and core/v1 alike; and the strict events.k8s.io/v1 checks.

use crate::support::raw::{RawClient, RawResponse};
use serde_json::{Value, json};
use testkube::TestCluster;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json");

async fn post(c: &RawClient, path: &str, body: &Value) -> RawResponse {
    c.send("POST", path, &[ACCEPT, JSON], &body.to_string())
        .await
}

fn events_v1(ns: &str) -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")
}

fn core_events(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/events")
}

/// An events.k8s.io/v1 Event such as the controller writes for a denial, in `ns`, about
/// `regarding`.
fn event_v1(name: &str, ns: &str, regarding: Value) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "eventTime": "2026-11-30T23:10:00.000000Z",
        "reportingController": "kubeflavor.io/controller",
        "reportingInstance": "kubeflavor-abc",
        "action": "Deny",
        "reason": "CSRDenied",
        "type": "Warning",
        "note": "denied: the node name is bound to a different token",
        "regarding": regarding,
    })
}

fn csr_x() -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "name": "csr-x"})
}

/// kube-apiserver's 422 for an Event named `name` whose involved object's namespace is
/// `value` and does not match the Event's.
fn mismatch(name: &str, value: &str) -> Value {
    let message = format!("Invalid value: \"{value}\": does not match event.namespace");
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("Event \"{name}\" is invalid: involvedObject.namespace: {message}"),
        "reason": "Invalid",
        "details": {
            "name": name,
            "kind": "Event",
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": "involvedObject.namespace"}],
        },
        "code": 422,
    })
}

async fn with_namespace(c: &RawClient, ns: &str) {
    let r = post(c, "/api/v1/namespaces", &json!({"metadata": {"name": ns}})).await;
    assert_eq!(r.status, 201, "{}", r.body);
}

#[tokio::test]
async fn an_event_about_a_cluster_scoped_object_lives_in_default_or_kube_system() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    with_namespace(&c, "kubeflavor").await;

    // An Event about a CSR in a namespace other than default or kube-system: 422, even for
    // an admin.
    let r = post(
        &c,
        &events_v1("kubeflavor"),
        &event_v1("csr-x.in-kubeflavor", "kubeflavor", csr_x()),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.json(), mismatch("csr-x.in-kubeflavor", ""));

    // The same Event in default or kube-system is 201.
    for (name, ns) in [
        ("csr-x.in-default", "default"),
        ("csr-x.in-kube-system", "kube-system"),
    ] {
        let r = post(&c, &events_v1(ns), &event_v1(name, ns, csr_x())).await;
        assert_eq!(r.status, 201, "{ns}: {}", r.body);
        let created = r.json();
        assert_eq!(created["regarding"], csr_x());
        assert_eq!(
            (
                &created["deprecatedSource"],
                &created["deprecatedFirstTimestamp"]
            ),
            (&json!({}), &Value::Null)
        );
    }

    // About a namespaced object (a Lease), in that object's namespace: 201.
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "kubeflavor-controller", "namespace": "kubeflavor"});
    let r = post(
        &c,
        &events_v1("kubeflavor"),
        &event_v1("lease.in-kubeflavor", "kubeflavor", lease),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);

    // Upstream's eventTime branch compares nothing else: an Event with eventTime about an
    // object of another namespace is accepted.
    let elsewhere =
        json!({"apiVersion": "v1", "kind": "Secret", "name": "s", "namespace": "kube-public"});
    let r = post(
        &c,
        &events_v1("kubeflavor"),
        &event_v1("secret.elsewhere", "kubeflavor", elsewhere),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    cluster.shutdown().await;
}

#[tokio::test]
async fn core_v1_events_pass_the_same_legacy_validation() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    with_namespace(&c, "kubeflavor").await;
    let old_style = |name: &str, involved: Value| {
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": involved,
            "reason": "CSRDenied",
            "message": "denied",
            "type": "Warning",
            "source": {"component": "kubeflavor"},
        })
    };
    // Without eventTime (an old-style Event): about a cluster-scoped object only in
    // `default` (kube-system is refused too), about a namespaced one only in its namespace.
    let r = post(
        &c,
        &core_events("default"),
        &old_style("a.default", csr_x()),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    for ns in ["kubeflavor", "kube-system"] {
        let r = post(&c, &core_events(ns), &old_style("a.refused", csr_x())).await;
        assert_eq!(
            (r.status, r.json()),
            (422, mismatch("a.refused", "")),
            "{ns}"
        );
    }
    let in_kubeflavor =
        json!({"kind": "Lease", "name": "kubeflavor-controller", "namespace": "kubeflavor"});
    let r = post(
        &c,
        &core_events("kubeflavor"),
        &old_style("b.same", in_kubeflavor.clone()),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = post(
        &c,
        &core_events("default"),
        &old_style("b.other", in_kubeflavor),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (422, mismatch("b.other", "kubeflavor"))
    );

    // With eventTime, the core API applies the events.k8s.io namespace rule too, and
    // wants the reporting fields (named as upstream's internal fields).
    let mut new_style = old_style("c.new", csr_x());
    new_style["eventTime"] = json!("2026-11-30T23:10:00.000000Z");
    new_style["action"] = json!("Deny");
    new_style["reportingComponent"] = json!("kubeflavor.io/controller");
    new_style["reportingInstance"] = json!("kubeflavor-abc");
    let r = post(&c, &core_events("kubeflavor"), &new_style).await;
    assert_eq!((r.status, r.json()), (422, mismatch("c.new", "")));
    let r = post(&c, &core_events("kube-system"), &new_style).await;
    assert_eq!(r.status, 201, "{}", r.body);
    new_style["metadata"]["name"] = json!("c.bare");
    for field in ["action", "reportingComponent"] {
        new_style.as_object_mut().unwrap().remove(field);
    }
    let r = post(&c, &core_events("kube-system"), &new_style).await;
    assert_eq!(r.status, 422);
    let fields: Vec<Value> = r.json()["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].clone())
        .collect();
    assert_eq!(
        fields,
        [
            "reportingController",
            "reportingController",
            "reportingController",
            "action"
        ]
    );
    // A PUT that creates or updates an Event is checked the same way.
    let mut moved = old_style("d.put", csr_x());
    moved["metadata"]["namespace"] = json!("kubeflavor");
    let r = c
        .send(
            "PUT",
            &format!("{}/d.put", core_events("kubeflavor")),
            &[ACCEPT, JSON],
            &moved.to_string(),
        )
        .await;
    assert_eq!((r.status, r.json()), (422, mismatch("d.put", "")));
    cluster.shutdown().await;
}

#[tokio::test]
async fn events_k8s_io_v1_strict_checks() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    // Without eventTime the namespace check is the old-style one and the v1 checks add
    // `eventTime: Required value`; with a bad type as well, both.
    let r = post(
        &c,
        &events_v1("default"),
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bad-event"}, "type": "normal"}),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Event \"bad-event\" is invalid: [eventTime: Required value, type: Invalid value: \"\": has invalid value: normal]"
    );
    // A series needs a count of at least 2 and a lastObservedTime; deprecated fields must be
    // unset.
    let mut event = event_v1("series.bad", "default", csr_x());
    event["series"] = json!({"count": 1});
    event["deprecatedCount"] = json!(3);
    event["deprecatedSource"] = json!({"component": "x"});
    let r = post(&c, &events_v1("default"), &event).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Event \"series.bad\" is invalid: [series.count: Invalid value: \"\": should be at least 2, \
         series.lastObservedTime: Required value, count: Invalid value: \"\": needs to be unset, \
         source: Invalid value: \"\": needs to be unset]"
    );
    // An update through events.k8s.io/v1 may not change what the Event says.
    let event = event_v1("immutable", "default", csr_x());
    assert_eq!(post(&c, &events_v1("default"), &event).await.status, 201);
    let r = c
        .send(
            "PATCH",
            &format!("{}/immutable", events_v1("default")),
            &[ACCEPT, ("Content-Type", "application/merge-patch+json")],
            r#"{"note":"changed","reason":"Other"}"#,
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Event \"immutable\" is invalid: [reason: Invalid value: \"Other\": field is immutable, \
         message: Invalid value: \"changed\": field is immutable]"
    );
    cluster.shutdown().await;
}
