//! Who a caller is and what it may do, end to end through kube-rs clients: bootstrap-token
//! authentication with every way a token Secret fails the authenticator, client-certificate
//! and anonymous identities (SelfSubjectReview), RBAC allow and deny, the Node authorizer
//! (a node reads only its own Node, and gets 403 even for one that does not exist) and
//! anonymous discovery of cluster-info.

use std::collections::BTreeMap;

use crate::support::{admin, client_from, within};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, UserInfo};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use sha2::{Digest, Sha256};
use testkube::TestCluster;

const SECRET: &str = "0123456789abcdef";

fn token_secret(name: &str, namespace: &str, type_: &str, data: &[(&str, &str)]) -> Secret {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "type": type_,
        "stringData": data,
    }))
    .unwrap()
}

async fn create_token(cluster: &TestCluster, id: &str, data: &[(&str, &str)]) {
    create_secret(
        cluster,
        &format!("bootstrap-token-{id}"),
        "kube-system",
        "bootstrap.kubernetes.io/token",
        data,
    )
    .await;
}

async fn create_secret(
    cluster: &TestCluster,
    name: &str,
    namespace: &str,
    type_: &str,
    data: &[(&str, &str)],
) {
    let secrets: Api<Secret> = Api::namespaced(admin(cluster).await, namespace);
    secrets
        .create(
            &PostParams::default(),
            &token_secret(name, namespace, type_, data),
        )
        .await
        .unwrap();
}

async fn whoami(client: kube::Client) -> Result<UserInfo, kube::Error> {
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review.status.and_then(|s| s.user_info).unwrap_or_default())
}

async fn token_client(cluster: &TestCluster, token: &str) -> kube::Client {
    client_from(&cluster.kubeconfig_for_token(token)).await
}

async fn cert_client(cluster: &TestCluster, cert_pem: &str, key_pem: &str) -> kube::Client {
    client_from(&cluster.kubeconfig_for_client_cert(cert_pem, key_pem)).await
}

/// The Status of a failed call: (code, reason, message).
fn status(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn assert_401(result: Result<impl std::fmt::Debug, kube::Error>) {
    assert_eq!(
        status(result),
        (401, "Unauthorized".into(), "Unauthorized".into())
    );
}

#[tokio::test]
async fn every_bootstrap_token_rejection_is_the_same_401() {
    let cluster = TestCluster::start().await.unwrap();
    let auth = ("usage-bootstrap-authentication", "true");
    // One Secret per way the authenticator rejects a token: an invalid extra group, no
    // authentication usage, a usage other than "true", expired, an unparseable expiration,
    // the wrong type, the wrong namespace, a token-id unlike its name. Each token is
    // presented with its name's id.
    create_token(
        &cluster,
        "sdo2oc",
        &[
            ("token-id", "sdo2oc"),
            ("token-secret", SECRET),
            auth,
            (
                "auth-extra-groups",
                "system:bootstrappers:ok,system:masters",
            ),
        ],
    )
    .await;
    create_token(
        &cluster,
        "z2xwa9",
        &[
            ("token-id", "z2xwa9"),
            ("token-secret", SECRET),
            ("usage-bootstrap-signing", "true"),
        ],
    )
    .await;
    create_token(
        &cluster,
        "sad7mk",
        &[
            ("token-id", "sad7mk"),
            ("token-secret", SECRET),
            ("usage-bootstrap-authentication", "yes"),
        ],
    )
    .await;
    create_token(
        &cluster,
        "76jyn4",
        &[
            ("token-id", "76jyn4"),
            ("token-secret", SECRET),
            auth,
            ("expiration", "2000-01-01T00:00:00Z"),
        ],
    )
    .await;
    create_token(
        &cluster,
        "kvuyti",
        &[
            ("token-id", "kvuyti"),
            ("token-secret", SECRET),
            auth,
            ("expiration", "2030-01-01 00:00:00"),
        ],
    )
    .await;
    create_secret(
        &cluster,
        "bootstrap-token-28gsoi",
        "kube-system",
        "Opaque",
        &[("token-id", "28gsoi"), ("token-secret", SECRET), auth],
    )
    .await;
    create_secret(
        &cluster,
        "bootstrap-token-tsc23h",
        "default",
        "bootstrap.kubernetes.io/token",
        &[("token-id", "tsc23h"), ("token-secret", SECRET), auth],
    )
    .await;
    create_token(
        &cluster,
        "p1p0v9",
        &[("token-id", "x5hp34"), ("token-secret", SECRET), auth],
    )
    .await;
    create_token(
        &cluster,
        "abcdef",
        &[("token-id", "abcdef"), ("token-secret", SECRET), auth],
    )
    .await;

    // The good token works once the authenticator has seen its Secret (it reads an informer
    // cache); it was created last, so every Secret above is seen too and each 401 below is
    // the rule's.
    cluster.token_auth_caught_up().await;
    let good = token_client(&cluster, &format!("abcdef.{SECRET}")).await;
    assert_eq!(
        whoami(good.clone()).await.unwrap().username.as_deref(),
        Some("system:bootstrap:abcdef")
    );
    for id in [
        "sdo2oc", "z2xwa9", "sad7mk", "76jyn4", "kvuyti", "28gsoi", "tsc23h", "p1p0v9",
    ] {
        let result = whoami(token_client(&cluster, &format!("{id}.{SECRET}")).await).await;
        assert_eq!(
            status(result),
            (401, "Unauthorized".into(), "Unauthorized".into()),
            "token {id}"
        );
    }
    // The same 401 for a wrong secret for an existing id, an unknown id, a garbage bearer.
    assert_401(whoami(token_client(&cluster, "abcdef.aaaaaaaaaaaaaaaa").await).await);
    assert_401(whoami(token_client(&cluster, &format!("zzzzzz.{SECRET}")).await).await);
    assert_401(whoami(token_client(&cluster, "not-a-token").await).await);

    // It works until its Secret is deleted; the authenticator trails the delete too, so a
    // client sees the 401 a moment later.
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");
    secrets
        .delete("bootstrap-token-abcdef", &DeleteParams::default())
        .await
        .unwrap();
    within(
        "the authenticator to see the delete",
        cluster.token_auth_caught_up(),
    )
    .await;
    assert_401(whoami(good.clone()).await);
    cluster.shutdown().await;
}

#[tokio::test]
async fn self_subject_review_reports_each_identity() {
    let cluster = TestCluster::start().await.unwrap();
    create_token(
        &cluster,
        "73efe1",
        &[
            ("token-id", "73efe1"),
            ("token-secret", SECRET),
            ("usage-bootstrap-authentication", "true"),
            ("expiration", "2099-01-01T00:00:00Z"),
            (
                "auth-extra-groups",
                "system:bootstrappers:zeta,system:bootstrappers:alpha,system:bootstrappers:zeta",
            ),
        ],
    )
    .await;
    cluster.token_auth_caught_up().await;
    let client = token_client(&cluster, &format!("73efe1.{SECRET}")).await;
    let token = whoami(client.clone()).await.unwrap();
    assert_eq!(token.username.as_deref(), Some("system:bootstrap:73efe1"));
    assert_eq!(
        token.groups.unwrap(),
        [
            "system:bootstrappers",
            "system:bootstrappers:alpha",
            "system:bootstrappers:zeta",
            "system:authenticated"
        ]
    );
    assert!(
        token.uid.is_none() && token.extra.is_none(),
        "token identities have no uid or extra"
    );

    let (cert, key) = cluster
        .issue_client_cert("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let node = whoami(cert_client(&cluster, &cert, &key).await)
        .await
        .unwrap();
    assert_eq!(node.username.as_deref(), Some("system:node:worker-1"));
    assert_eq!(
        node.groups.unwrap(),
        ["system:nodes", "system:authenticated"]
    );
    let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    let fingerprint = format!("X509SHA256={}", hex::encode(Sha256::digest(der.as_ref())));
    assert_eq!(
        node.extra.unwrap()["authentication.kubernetes.io/credential-id"],
        [fingerprint]
    );

    let me = whoami(admin(&cluster).await).await.unwrap();
    assert_eq!(me.username.as_deref(), Some("kubernetes-admin"));
    assert_eq!(
        me.groups.unwrap(),
        ["system:masters", "system:authenticated"]
    );

    let anonymous = whoami(client_from(&cluster.anonymous_kubeconfig()).await).await;
    assert_eq!(
        status(anonymous),
        (
            403,
            "Forbidden".into(),
            r#"selfsubjectreviews.authentication.k8s.io is forbidden: User "system:anonymous" cannot create resource "selfsubjectreviews" in API group "authentication.k8s.io" at the cluster scope"#.into()
        )
    );
    cluster.shutdown().await;
}

fn reader_role(namespace: &str) -> Role {
    serde_json::from_value(json!({
        "metadata": {"name": "cm-reader", "namespace": namespace},
        "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}],
    }))
    .unwrap()
}

fn binding(namespace: &str, user: &str) -> RoleBinding {
    serde_json::from_value(json!({
        "metadata": {"name": "cm-reader", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap()
}

#[tokio::test]
async fn rbac_allows_what_a_binding_grants_and_nothing_else() {
    let cluster = TestCluster::start().await.unwrap();
    let root = admin(&cluster).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    Api::<Namespace>::all(root.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    cluster.register_static_token("alice-token", "alice", &["devs"]);
    let alice: Api<ConfigMap> =
        Api::namespaced(token_client(&cluster, "alice-token").await, "team");

    let denied = r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "team""#;
    assert_eq!(
        status(alice.list(&ListParams::default()).await),
        (403, "Forbidden".into(), denied.into())
    );

    Api::<Role>::namespaced(root.clone(), "team")
        .create(&PostParams::default(), &reader_role("team"))
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(root.clone(), "team");
    bindings
        .create(&PostParams::default(), &binding("team", "alice"))
        .await
        .unwrap();
    assert!(
        alice
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let (code, _, message) = status(alice.delete("x", &DeleteParams::default()).await);
    assert_eq!(code, 403);
    assert_eq!(
        message,
        r#"configmaps "x" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "team""#
    );
    let elsewhere: Api<ConfigMap> =
        Api::namespaced(token_client(&cluster, "alice-token").await, "default");
    assert_eq!(
        status(elsewhere.list(&ListParams::default()).await).0,
        403,
        "a RoleBinding grants in its namespace only"
    );

    bindings
        .delete("cm-reader", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        status(alice.list(&ListParams::default()).await),
        (403, "Forbidden".into(), denied.into())
    );
    cluster.shutdown().await;
}

fn node(name: &str) -> Node {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
    )
    .unwrap()
}

#[tokio::test]
async fn a_node_reads_only_its_own_node() {
    let cluster = TestCluster::start().await.unwrap();
    Api::<Node>::all(admin(&cluster).await)
        .create(&PostParams::default(), &node("worker-9"))
        .await
        .unwrap();
    let (cert, key) = cluster
        .issue_client_cert("system:node:worker-1", &["system:nodes"])
        .unwrap();
    let nodes: Api<Node> = Api::all(cert_client(&cluster, &cert, &key).await);

    for other in ["worker-9", "worker-404"] {
        assert_eq!(
            status(nodes.get(other).await),
            (
                403,
                "Forbidden".into(),
                format!(
                    r#"nodes "{other}" is forbidden: User "system:node:worker-1" cannot get resource "nodes" in API group "" at the cluster scope: node 'worker-1' cannot read '{other}', only its own Node object"#
                )
            ),
        );
    }
    assert_eq!(
        status(nodes.list(&ListParams::default()).await).2,
        r#"nodes is forbidden: User "system:node:worker-1" cannot list resource "nodes" in API group "" at the cluster scope: node 'worker-1' cannot read all nodes, only its own Node object"#
    );
    // Before registering, a kubelet may look for its own Node (404, not 403).
    assert_eq!(status(nodes.get("worker-1").await).0, 404);
    nodes
        .create(&PostParams::default(), &node("worker-1"))
        .await
        .unwrap();
    assert_eq!(
        nodes
            .get("worker-1")
            .await
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("worker-1")
    );
    let own = nodes
        .list(&ListParams::default().fields("metadata.name=worker-1"))
        .await
        .unwrap();
    assert_eq!(own.items.len(), 1);
    assert_eq!(
        status(nodes.delete("worker-1", &DeleteParams::default()).await).0,
        403
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn anonymous_may_get_cluster_info_and_nothing_else() {
    let cluster = TestCluster::start().await.unwrap();
    let anonymous = client_from(&cluster.anonymous_kubeconfig()).await;
    let public: Api<ConfigMap> = Api::namespaced(anonymous.clone(), "kube-public");
    let info = public.get("cluster-info").await.unwrap();
    assert!(info.data.unwrap()["kubeconfig"].contains(cluster.server_url()));
    assert_eq!(
        status(public.get("kube-root-ca.crt").await).2,
        r#"configmaps "kube-root-ca.crt" is forbidden: User "system:anonymous" cannot get resource "configmaps" in API group "" in the namespace "kube-public""#
    );
    assert_eq!(
        status(public.list(&ListParams::default()).await).2,
        r#"configmaps is forbidden: User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "kube-public""#
    );
    let secrets: Api<Secret> = Api::namespaced(anonymous, "kube-system");
    assert_eq!(status(secrets.get("bootstrap-token-abcdef").await).0, 403);
    cluster.shutdown().await;
}
