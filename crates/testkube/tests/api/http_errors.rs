//! Error shapes over plain HTTPS/1.1, compared with a real v1.36 API server's answers (404,
//! 409 AlreadyExists, 422, 415, failed delete preconditions, 400s, the plain-text `404 page
//! not found`, lenient inputs, strict MicroTime): status line, Content-Type, and the exact
//! Status body.

use crate::support::raw::{RawClient, RawResponse};
use serde_json::{Value, json};
use testkube::TestCluster;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json");

fn status(message: &str, reason: Option<&str>, details: Option<Value>, code: u16) -> Value {
    let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "code": code});
    if let Some(r) = reason {
        s["reason"] = json!(r);
    }
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

fn assert_status(resp: &RawResponse, code: u16, want: Value) {
    assert_eq!(resp.status, code, "{}", resp.body);
    assert_eq!(resp.header("Content-Type"), Some("application/json"));
    assert_eq!(resp.header("Cache-Control"), Some("no-cache, private"));
    assert_eq!(resp.json(), want);
    assert!(
        resp.body.ends_with("}\n") && !resp.body.contains("\n  "),
        "compact JSON and one newline"
    );
}

async fn post(c: &RawClient, path: &str, body: &str) -> RawResponse {
    c.send("POST", path, &[ACCEPT, JSON], body).await
}

const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";

#[tokio::test]
async fn not_found_already_exists_and_invalid() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);

    let r = c.get(&format!("{SECRETS}/kf-missing")).await;
    assert_status(
        &r,
        404,
        status(
            "secrets \"kf-missing\" not found",
            Some("NotFound"),
            Some(json!({"name": "kf-missing", "kind": "secrets"})),
            404,
        ),
    );
    let r = c
        .get("/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-missing")
        .await;
    assert_status(
        &r,
        404,
        status(
            "certificatesigningrequests.certificates.k8s.io \"csr-missing\" not found",
            Some("NotFound"),
            Some(
                json!({"name": "csr-missing", "group": "certificates.k8s.io", "kind": "certificatesigningrequests"}),
            ),
            404,
        ),
    );
    let put = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-missing","namespace":"kube-system"}}"#;
    let r = c
        .send(
            "PUT",
            &format!("{SECRETS}/kf-missing"),
            &[ACCEPT, JSON],
            put,
        )
        .await;
    assert_eq!(r.status, 404);

    let demo = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-demo","namespace":"kube-system","labels":{"app":"kf"}},"type":"Opaque","stringData":{"a":"1"}}"#;
    let created = post(&c, SECRETS, demo).await;
    assert_eq!(created.status, 201);
    let obj = created.json();
    assert_eq!(
        (obj["kind"].as_str(), obj["apiVersion"].as_str()),
        (Some("Secret"), Some("v1"))
    );
    assert_eq!(obj["data"], json!({"a": "MQ=="}));
    assert!(obj.get("stringData").is_none());
    let again = post(&c, SECRETS, demo).await;
    assert_status(
        &again,
        409,
        status(
            "secrets \"kf-demo\" already exists",
            Some("AlreadyExists"),
            Some(json!({"name": "kf-demo", "kind": "secrets"})),
            409,
        ),
    );

    let bad = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"Bad_Name","labels":{"x":"bad value!"}},"data":{"a/b":"MQ=="}}"#;
    let r = post(&c, SECRETS, bad).await;
    assert_eq!(r.status, 422);
    let expected_causes = json!([
        {"reason": "FieldValueInvalid", "message": "Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')", "field": "metadata.name"},
        {"reason": "FieldValueInvalid", "message": "Invalid value: \"bad value!\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')", "field": "metadata.labels"},
        {"reason": "FieldValueInvalid", "message": "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')", "field": "data[a/b]"},
    ]);
    let body = r.json();
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["details"],
        json!({"name": "Bad_Name", "kind": "Secret", "causes": expected_causes})
    );
    assert!(body["message"].as_str().unwrap().starts_with("Secret \"Bad_Name\" is invalid: [metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123"));
    cluster.shutdown().await;
}

#[tokio::test]
async fn patch_media_types_and_delete_responses() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let demo = r#"{"metadata":{"name":"kf-demo"},"data":{"a":"NQ=="}}"#;
    let uid = post(&c, SECRETS, demo).await.json()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let patch = r#"{"data":{"b":"Mg=="}}"#;
    let r = c
        .send(
            "PATCH",
            &format!("{SECRETS}/kf-demo"),
            &[ACCEPT, JSON],
            patch,
        )
        .await;
    assert_status(
        &r,
        415,
        status(
            "415: Unsupported Media Type",
            Some("UnsupportedMediaType"),
            Some(json!({})),
            415,
        ),
    );
    let merge = (
        "Content-Type",
        "application/merge-patch+json; charset=utf-8",
    );
    let r = c
        .send(
            "PATCH",
            &format!("{SECRETS}/kf-demo"),
            &[ACCEPT, merge],
            patch,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"], json!({"a": "NQ==", "b": "Mg=="}));

    let wrong_uid = r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}"#;
    let r = c
        .send(
            "DELETE",
            &format!("{SECRETS}/kf-demo"),
            &[ACCEPT, JSON],
            wrong_uid,
        )
        .await;
    assert_status(
        &r,
        409,
        status(
            &format!(
                "Operation cannot be fulfilled on Secret \"kf-demo\": the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
            Some("Conflict"),
            Some(json!({"name": "kf-demo", "kind": "Secret"})),
            409,
        ),
    );
    let wrong_rv =
        r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"1"}}"#;
    let r = c
        .send(
            "DELETE",
            &format!("{SECRETS}/kf-demo"),
            &[ACCEPT, JSON],
            wrong_rv,
        )
        .await;
    assert_eq!(r.status, 409);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("the ResourceVersion in the precondition (1) does not match")
    );
    // Preconditions in the query string are ignored: only the body's count.
    let r = c
        .send(
            "DELETE",
            &format!("{SECRETS}/kf-demo?preconditions.uid=00000000-0000-0000-0000-000000000000"),
            &[ACCEPT],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": "kf-demo", "kind": "secrets", "uid": uid}})
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn bad_requests_and_the_odd_500s() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let cases: Vec<(&str, &str, String)> = vec![
        ("POST", r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-x","namespace":"default"}}"#,
         "the namespace of the provided object does not match the namespace sent on the request".into()),
        ("POST", r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kf-x"}}"#,
         "ConfigMap in version \"v1\" cannot be handled as a Secret: converting (v1.ConfigMap) to (core.Secret): unknown conversion".into()),
        ("POST", r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-x""#,
         "the object provided is unrecognized (must be of type Secret): couldn't get version/kind; json parse error: unexpected end of JSON input ({\"apiVersion\":\"v1\",\"kind\":\"Sec ...)".into()),
        ("POST", r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-x"},"data":{"a":"not base64!"}}"#,
         "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3".into()),
    ];
    for (method, body, message) in cases {
        let r = c.send(method, SECRETS, &[ACCEPT, JSON], body).await;
        assert_status(&r, 400, status(&message, Some("BadRequest"), None, 400));
    }
    let strict = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-x"},"foo":"bar"}"#;
    let r = c
        .send(
            "POST",
            &format!("{SECRETS}?fieldValidation=Strict"),
            &[ACCEPT, JSON],
            strict,
        )
        .await;
    assert_status(
        &r,
        400,
        status(
            "Secret in version \"v1\" cannot be handled as a Secret: strict decoding error: unknown field \"foo\"",
            Some("BadRequest"),
            None,
            400,
        ),
    );
    let r = post(&c, SECRETS, strict).await;
    assert_eq!(r.status, 201);
    assert_eq!(
        r.header("Warning"),
        Some("299 - \"unknown field \\\"foo\\\"\"")
    );
    assert!(r.json().get("foo").is_none());

    let r = c
        .send(
            "PUT",
            &format!("{SECRETS}/kf-x"),
            &[ACCEPT, JSON],
            r#"{"metadata":{"name":"kf-other"}}"#,
        )
        .await;
    assert_status(
        &r,
        400,
        status(
            "the name of the object (kf-other) does not match the name on the URL (kf-x)",
            Some("BadRequest"),
            None,
            400,
        ),
    );
    let with_rv =
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"kf-y","resourceVersion":"5"}}"#;
    let r = post(&c, SECRETS, with_rv).await;
    assert_status(
        &r,
        500,
        status(
            "resourceVersion should not be set on objects to be created",
            None,
            None,
            500,
        ),
    );

    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
    let lease = |t: &str, rv: &str| {
        format!(
            r#"{{"metadata":{{"name":"kf-lease"{rv}}},"spec":{{"holderIdentity":"a","leaseDurationSeconds":15,"acquireTime":"{t}","renewTime":"{t}"}}}}"#
        )
    };
    let r = post(&c, leases, &lease("2026-11-30T04:27:03.123Z", "")).await;
    assert_status(
        &r,
        400,
        status(
            "Lease in version \"v1\" cannot be handled as a Lease: parsing time \"2026-11-30T04:27:03.123Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \".123Z\" as \".000000\"",
            Some("BadRequest"),
            None,
            400,
        ),
    );
    let r = post(&c, leases, &lease("2026-11-30T04:27:03.123000Z", "")).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["spec"]["renewTime"], "2026-11-30T04:27:03.123000Z");
    let r = c
        .send(
            "PUT",
            &format!("{leases}/kf-lease"),
            &[ACCEPT, JSON],
            &lease("2026-11-30T04:27:04.000000Z", r#","resourceVersion":"abc""#),
        )
        .await;
    assert_status(
        &r,
        500,
        status(
            "strconv.ParseUint: parsing \"abc\": invalid syntax",
            None,
            None,
            500,
        ),
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_are_plain_text_404s() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    for path in [
        "/apis/example.kubeflavor.io/v1alpha1/flavors",
        "/api/v1/nothings",
        "/no/such/path",
        "/apis/apps/v9",
    ] {
        let r = c.get(path).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(
            r.header("Content-Type"),
            Some("text/plain; charset=utf-8"),
            "{path}"
        );
        assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
        assert_eq!(r.body, "404 page not found\n", "{path}");
    }
    let r = c.get("/version").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["major"], "1");
    cluster.shutdown().await;
}

#[tokio::test]
async fn watch_stream_framing_is_one_json_object_per_line() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let rv = c.get(SECRETS).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    post(
        &c,
        SECRETS,
        r#"{"metadata":{"name":"kf-watch"},"stringData":{"k":"v1"}}"#,
    )
    .await;
    let merge = ("Content-Type", "application/merge-patch+json");
    c.send(
        "PATCH",
        &format!("{SECRETS}/kf-watch"),
        &[ACCEPT, merge],
        r#"{"stringData":{"k":"v2"}}"#,
    )
    .await;
    c.send("DELETE", &format!("{SECRETS}/kf-watch"), &[ACCEPT], "")
        .await;
    // The stream ends at timeoutSeconds, so the raw client can read it to the end.
    let r = c
        .get(&format!(
            "{SECRETS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    assert!(
        r.body.lines().all(|l| l.starts_with("{\"type\":\"")),
        "type comes first: {}",
        r.body
    );
    let events: Vec<Value> = r
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(events[1]["object"]["data"]["k"], "djI=");
    assert_eq!(events[2]["object"]["kind"], "Secret");
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]),
        "DELETED carries the delete revision: {rvs:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn events_k8s_io_validation_and_the_core_view() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    let events = "/apis/events.k8s.io/v1/namespaces/default/events";
    let r = post(&c, events, r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"bad-event"},"type":"Normal"}"#).await;
    assert_status(
        &r,
        422,
        status(
            "Event \"bad-event\" is invalid: eventTime: Required value",
            Some("Invalid"),
            Some(
                json!({"name": "bad-event", "kind": "Event", "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"}]}),
            ),
            422,
        ),
    );
    let r = post(&c, events, r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"bad-event"},"type":"Normal","eventTime":"2026-11-30T04:27:21.397665Z"}"#).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "Event \"bad-event\" is invalid: [reportingController: Required value, reportingController: Invalid value: \"\": name part must be non-empty, reportingController: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), reportingInstance: Required value, action: Required value, reason: Required value]"
    );

    let good = r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"csr-worker-1.kubeflavor.1","namespace":"default"},"eventTime":"2026-11-30T04:27:21.397665Z","reportingController":"kubeflavor.io/approver","reportingInstance":"kubeflavor-7d9f-abcde","action":"Approve","reason":"Approved","type":"Normal","note":"approved","regarding":{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","name":"csr-worker-1"}}"#;
    let r = post(&c, events, good).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v1 = r.json();
    assert_eq!(
        (&v1["deprecatedSource"], &v1["deprecatedFirstTimestamp"]),
        (&json!({}), &json!(null))
    );
    assert_eq!(v1["note"], "approved");
    let core = c
        .get("/api/v1/namespaces/default/events/csr-worker-1.kubeflavor.1")
        .await
        .json();
    assert_eq!(
        (core["apiVersion"].as_str(), core["message"].as_str()),
        (Some("v1"), Some("approved"))
    );
    assert_eq!(core["involvedObject"]["name"], "csr-worker-1");
    assert_eq!(core["reportingComponent"], "kubeflavor.io/approver");
    cluster.shutdown().await;
}

#[tokio::test]
async fn ill_typed_bodies_and_patches_are_400s_not_dropped_connections() {
    let cluster = TestCluster::start().await.unwrap();
    let c = RawClient::admin(&cluster);
    for body in [
        r#"{"metadata":"x"}"#,
        r#"{"metadata":{"name":"a","labels":{"k":1}}}"#,
        r#"{"metadata":{"name":"a"},"data":["x"]}"#,
        r#"{"metadata":{"name":"a"},"spec":3}"#,
    ] {
        let r = post(&c, SECRETS, body).await;
        assert_eq!(
            (r.status, r.json()["reason"].as_str()),
            (400, Some("BadRequest")),
            "{body}"
        );
    }
    post(&c, SECRETS, r#"{"metadata":{"name":"ok"}}"#).await;
    let json_patch = ("Content-Type", "application/json-patch+json");
    let r = c
        .send(
            "PATCH",
            &format!("{SECRETS}/ok"),
            &[ACCEPT, json_patch],
            r#"[{"op":"replace","path":"","value":5}]"#,
        )
        .await;
    assert_eq!(r.status, 400);
    let r = c
        .send(
            "PATCH",
            &format!("{SECRETS}/ok"),
            &[ACCEPT, json_patch],
            r#"[{"op":"replace","path":"/metadata","value":"x"}]"#,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        c.get(&format!("{SECRETS}/ok")).await.status,
        200,
        "the server is still serving"
    );
    cluster.shutdown().await;
}
