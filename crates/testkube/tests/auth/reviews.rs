//! Delegated authentication and authorization, as a token portal uses them: TokenRequest
//! for a ServiceAccount, TokenReview of its token and of garbage, SubjectAccessReview
//! through the real chain (`system:masters`, Node, RBAC) with RBAC's reason, and the 403
//! for a caller without `create` on the review.

use crate::support::raw::{RawClient, RawResponse};
use base64::Engine;
use serde_json::{Value, json};
use testkube::TestCluster;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json");
const AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const TOKENREVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SA_GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:portal-demo",
    "system:authenticated",
];

async fn post(c: &RawClient, path: &str, body: &Value) -> RawResponse {
    c.send("POST", path, &[ACCEPT, JSON], &body.to_string())
        .await
}

async fn post_as(c: &RawClient, token: &str, path: &str, body: &Value) -> RawResponse {
    let bearer = format!("Bearer {token}");
    c.send(
        "POST",
        path,
        &[("Authorization", bearer.as_str()), ACCEPT, JSON],
        &body.to_string(),
    )
    .await
}

async fn created(c: &RawClient, path: &str, body: Value) -> Value {
    let r = post(c, path, &body).await;
    assert_eq!(r.status, 201, "{path}: {}", r.body);
    r.json()
}

/// A token portal's setup: namespace portal-demo, ServiceAccount portal, ClusterRole
/// kubeflavor:mint-sour (create on flavors.kubeflavor.io/jointoken named sour) bound to it.
async fn portal_setup(admin: &RawClient) -> Value {
    created(
        admin,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "portal-demo"}}),
    )
    .await;
    let sa = created(
        admin,
        "/api/v1/namespaces/portal-demo/serviceaccounts",
        json!({"metadata": {"name": "portal"}}),
    )
    .await;
    created(
        admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "kubeflavor:mint-sour"}, "rules": [
            {"verbs": ["create"], "apiGroups": ["kubeflavor.io"], "resources": ["flavors/jointoken"], "resourceNames": ["sour"]}]}),
    )
    .await;
    created(
        admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": "kubeflavor:portal-mint-sour"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflavor:mint-sour"},
               "subjects": [{"kind": "ServiceAccount", "name": "portal", "namespace": "portal-demo"}]}),
    )
    .await;
    sa
}

fn sar(flavor: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:serviceaccount:portal-demo:portal",
            "groups": SA_GROUPS,
            "resourceAttributes": {"group": "kubeflavor.io", "resource": "flavors", "subresource": "jointoken", "verb": "create", "name": flavor},
        },
    })
}

const ALLOWED_BY: &str = "RBAC: allowed by ClusterRoleBinding \"kubeflavor:portal-mint-sour\" of ClusterRole \"kubeflavor:mint-sour\" to ServiceAccount \"portal/portal-demo\"";

fn jwt_claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn token_request_token_review_and_subject_access_review() {
    let cluster = TestCluster::start().await.unwrap();
    let admin = RawClient::admin(&cluster);
    let sa = portal_setup(&admin).await;
    let sa_uid = sa["metadata"]["uid"].as_str().unwrap().to_string();

    // The real server answers the first two requests with managedFields and without a
    // Cache-Control header; testkube writes no managedFields anywhere and always sends
    // Cache-Control, so those two details are not compared.
    // 1) TokenRequest, 10 minutes, default audience.
    let r = post(
        &admin,
        "/api/v1/namespaces/portal-demo/serviceaccounts/portal/token",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mut tr = r.json();
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let created_at: jiff::Timestamp = tr["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    tr["status"]["token"] = json!("REDACTED (a JWT)");
    assert_eq!(
        tr,
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": "portal", "namespace": "portal-demo", "uid": sa_uid,
                         "creationTimestamp": tr["metadata"]["creationTimestamp"]},
            "spec": {"audiences": [AUDIENCE], "expirationSeconds": 600, "boundObjectRef": null},
            "status": {"token": "REDACTED (a JWT)",
                       "expirationTimestamp": (created_at + jiff::SignedDuration::from_secs(600))
                           .strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
        })
    );
    let claims = jwt_claims(&token);
    assert_eq!(claims["sub"], "system:serviceaccount:portal-demo:portal");
    assert_eq!(claims["aud"], json!([AUDIENCE]));
    assert_eq!(
        claims["kubernetes.io"],
        json!({"namespace": "portal-demo", "serviceaccount": {"name": "portal", "uid": sa_uid}})
    );
    let jti = claims["jti"].as_str().unwrap();

    // 2) TokenReview of the SA token.
    let review = created(
        &admin,
        TOKENREVIEWS,
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}),
    )
    .await;
    assert_eq!(
        review,
        json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {},
            "spec": {"token": token},
            "status": {
                "authenticated": true,
                "user": {
                    "username": "system:serviceaccount:portal-demo:portal",
                    "uid": sa_uid,
                    "groups": SA_GROUPS,
                    "extra": {"authentication.kubernetes.io/credential-id": [format!("JTI={jti}")]},
                },
                "audiences": [AUDIENCE],
            },
        })
    );

    // 3) TokenReview of a garbage token.
    let r = post(
        &admin,
        TOKENREVIEWS,
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-real-token"}}),
    )
    .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("Cache-Control"), Some("no-cache, private"));
    assert_eq!(
        r.json(),
        json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {},
            "spec": {"token": "not-a-real-token"},
            "status": {"user": {}, "error": "invalid bearer token"},
        })
    );

    // 4) The SA may create flavors/jointoken "sour": allowed, the reason names the binding.
    let resource = |name: &str| json!({"verb": "create", "group": "kubeflavor.io", "resource": "flavors", "subresource": "jointoken", "name": name});
    assert_eq!(
        created(&admin, SAR, sar("sour")).await,
        json!({
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {},
            "spec": {"resourceAttributes": resource("sour"), "user": "system:serviceaccount:portal-demo:portal", "groups": SA_GROUPS},
            "status": {"allowed": true, "reason": ALLOWED_BY},
        })
    );
    // 5) ... but not "sweet": allowed false and no reason at all.
    assert_eq!(
        created(&admin, SAR, sar("sweet")).await["status"],
        json!({"allowed": false})
    );
    // 6) As a server sends it from a TokenReview result: uid and extra copied, echoed.
    let mut from_review = sar("sour");
    from_review["spec"]["uid"] = json!(sa_uid);
    from_review["spec"]["extra"] =
        json!({"authentication.kubernetes.io/credential-id": [format!("JTI={jti}")]});
    let answer = created(&admin, SAR, from_review.clone()).await;
    assert_eq!(answer["spec"]["uid"], json!(sa_uid));
    assert_eq!(answer["spec"]["extra"], from_review["spec"]["extra"]);
    assert_eq!(
        answer["status"],
        json!({"allowed": true, "reason": ALLOWED_BY})
    );

    // 7) A TokenReview by the bootstrap identity, which has no RBAC for it: 403.
    let kubeadm_token = "abcdef.0123456789abcdef";
    created(
        &admin,
        "/api/v1/namespaces/kube-system/secrets",
        json!({"metadata": {"name": "bootstrap-token-abcdef"}, "type": "bootstrap.kubernetes.io/token",
               "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef",
                              "usage-bootstrap-authentication": "true",
                              "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}),
    )
    .await;
    let anyone = RawClient::new(&cluster, None);
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-real-token"}});
    let mut r = post_as(&anyone, kubeadm_token, TOKENREVIEWS, &body).await;
    while r.status == 401 {
        // The authenticator trails the new Secret (it reads an informer cache).
        r = post_as(&anyone, kubeadm_token, TOKENREVIEWS, &body).await;
    }
    assert_eq!(r.status, 403);
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(
        r.json(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "tokenreviews.authentication.k8s.io is forbidden: User \"system:bootstrap:abcdef\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope",
            "reason": "Forbidden",
            "details": {"group": "authentication.k8s.io", "kind": "tokenreviews"},
            "code": 403,
        })
    );
    // The same for a SubjectAccessReview.
    let r = post_as(&anyone, kubeadm_token, SAR, &sar("sour")).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "subjectaccessreviews.authorization.k8s.io is forbidden: User \"system:bootstrap:abcdef\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
    );
    // A bootstrap token reviewed: the authenticator's user, for the API server's audience.
    let review = created(
        &admin,
        TOKENREVIEWS,
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": kubeadm_token}}),
    )
    .await;
    assert_eq!(
        review["status"],
        json!({"authenticated": true, "audiences": [AUDIENCE], "user": {
            "username": "system:bootstrap:abcdef",
            "groups": ["system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token", "system:authenticated"]}})
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn service_account_tokens_authenticate_requests_until_the_account_goes() {
    let cluster = TestCluster::start().await.unwrap();
    let admin = RawClient::admin(&cluster);
    let sa = portal_setup(&admin).await;
    let token = created(
        &admin,
        "/api/v1/namespaces/portal-demo/serviceaccounts/portal/token",
        json!({}),
    )
    .await["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        jwt_claims(&token)["exp"].as_i64().unwrap() - jwt_claims(&token)["iat"].as_i64().unwrap(),
        3600,
        "one hour by default"
    );
    let anyone = RawClient::new(&cluster, None);
    let ssr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let me = post_as(
        &anyone,
        &token,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &ssr,
    )
    .await;
    assert_eq!(me.status, 201, "{}", me.body);
    let user = &me.json()["status"]["userInfo"];
    assert_eq!(user["username"], "system:serviceaccount:portal-demo:portal");
    assert_eq!(user["uid"], sa["metadata"]["uid"]);
    assert_eq!(user["groups"], json!(SA_GROUPS));
    assert!(
        user["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .unwrap()
            .starts_with("JTI=")
    );
    // Its RBAC applies: the portal's binding lets it do nothing real, so a list is 403.
    let r = anyone
        .send(
            "GET",
            "/api/v1/namespaces/portal-demo/secrets",
            &[
                ("Authorization", format!("Bearer {token}").as_str()),
                ACCEPT,
            ],
            "",
        )
        .await;
    assert_eq!(r.status, 403);
    // Once the ServiceAccount is deleted its tokens are refused; TokenReview says why.
    let r = admin
        .send(
            "DELETE",
            "/api/v1/namespaces/portal-demo/serviceaccounts/portal",
            &[ACCEPT],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    let r = post_as(
        &anyone,
        &token,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &ssr,
    )
    .await;
    assert_eq!(r.status, 401);
    let review = created(&admin, TOKENREVIEWS, json!({"spec": {"token": token}})).await;
    assert_eq!(
        review["status"],
        json!({"user": {}, "error": "serviceaccount \"portal\" not found"})
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn review_and_token_request_errors() {
    let cluster = TestCluster::start().await.unwrap();
    let admin = RawClient::admin(&cluster);
    portal_setup(&admin).await;
    // tokenreview/storage.go: an empty token is a 400.
    let r = post(&admin, TOKENREVIEWS, &json!({"spec": {}})).await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (
            400,
            Some("token is required for TokenReview in authentication")
        )
    );
    // Another audience than the token's: not authenticated.
    let r = post(
        &admin,
        TOKENREVIEWS,
        &json!({"spec": {"token": "abcdef.0123456789abcdef", "audiences": ["https://elsewhere"]}}),
    )
    .await;
    assert_eq!(r.json()["status"]["error"], "invalid bearer token");
    // ValidateSubjectAccessReviewSpec: a user or group, and exactly one kind of attributes.
    let r = post(&admin, SAR, &json!({"spec": {}})).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [spec: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]",
            "reason": "Invalid",
            "details": {"group": "authorization.k8s.io", "kind": "SubjectAccessReview", "causes": [
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified", "field": "spec"},
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"\": at least one of user or group must be specified", "field": "spec.user"},
            ]},
            "code": 422,
        })
    );
    // TokenRequest validation and a missing ServiceAccount.
    let r = post(
        &admin,
        "/api/v1/namespaces/portal-demo/serviceaccounts/portal/token",
        &json!({"spec": {"expirationSeconds": 599}}),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    );
    let r = post(
        &admin,
        "/api/v1/namespaces/portal-demo/serviceaccounts/nobody/token",
        &json!({}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (404, Some("serviceaccounts \"nobody\" not found"))
    );
    let r = admin
        .send(
            "GET",
            "/api/v1/namespaces/portal-demo/serviceaccounts/portal/token",
            &[ACCEPT],
            "",
        )
        .await;
    assert_eq!(r.status, 405);
    cluster.shutdown().await;
}

#[tokio::test]
async fn subject_access_review_uses_the_node_authorizer_and_non_resource_rules() {
    let cluster = TestCluster::start().await.unwrap();
    let admin = RawClient::admin(&cluster);
    let node = |verb: &str, name: &str| {
        json!({"spec": {"user": "system:node:worker-1", "groups": ["system:nodes", "system:authenticated"],
                        "resourceAttributes": {"verb": verb, "resource": "nodes", "name": name}}})
    };
    // The Node authorizer allows without a reason and refuses with its own.
    assert_eq!(
        created(&admin, SAR, node("get", "worker-1")).await["status"],
        json!({"allowed": true})
    );
    assert_eq!(
        created(&admin, SAR, node("get", "worker-2")).await["status"],
        json!({"allowed": false, "reason": "node 'worker-1' cannot read 'worker-2', only its own Node object"})
    );
    // system:masters (the privileged-group authorizer): allowed, no reason.
    let masters = json!({"spec": {"groups": ["system:masters"], "resourceAttributes": {"verb": "delete", "resource": "secrets", "namespace": "kube-system"}}});
    assert_eq!(
        created(&admin, SAR, masters).await["status"],
        json!({"allowed": true})
    );
    // The groups are taken as given: without system:authenticated, no discovery.
    let path = |groups: Value| json!({"spec": {"user": "alice", "groups": groups, "nonResourceAttributes": {"path": "/api", "verb": "get"}}});
    let with = created(&admin, SAR, path(json!(["system:authenticated"]))).await;
    assert_eq!(with["status"]["allowed"], true);
    assert!(
        with["status"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("RBAC: allowed by ClusterRoleBinding \"system:")
    );
    assert_eq!(
        with["spec"]["nonResourceAttributes"],
        json!({"path": "/api", "verb": "get"})
    );
    assert_eq!(
        created(&admin, SAR, path(json!([]))).await["status"],
        json!({"allowed": false})
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn discovery_lists_the_reviews_and_the_token_subresource() {
    let cluster = TestCluster::start().await.unwrap();
    let admin = RawClient::admin(&cluster);
    let v1 = admin.get("/api/v1").await.json();
    let token = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned();
    // The entry kube-apiserver lists in /api/v1.
    assert_eq!(
        token,
        Some(
            json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                    "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                    "verbs": ["create"]})
        )
    );
    let groups: Vec<String> = admin.get("/apis").await.json()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect();
    // kube-apiserver's group order: ... authentication.k8s.io authorization.k8s.io ...
    let at = |g: &str| groups.iter().position(|x| x == g).unwrap();
    assert_eq!(at("authorization.k8s.io"), at("authentication.k8s.io") + 1);
    let authz = admin.get("/apis/authorization.k8s.io/v1").await.json();
    assert_eq!(
        authz["resources"],
        json!([{"name": "subjectaccessreviews", "singularName": "subjectaccessreview",
                "namespaced": false, "kind": "SubjectAccessReview", "verbs": ["create"]}])
    );
    let authn = admin.get("/apis/authentication.k8s.io/v1").await.json();
    let names: Vec<&str> = authn["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["selfsubjectreviews", "tokenreviews"]);
    cluster.shutdown().await;
}
