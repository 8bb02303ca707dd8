//! A kubelet may mint a token for the ServiceAccount of a pod bound to it, bound to that
//! pod (Node authorizer graph, NodeRestriction's TokenRequest rules); not for a pod on
//! another node, nor unbound. The token authenticates while the pod exists and stops
//! once the pod is deleted (the bound-token validator), which is what revocation relies
//! on.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kubeflavor_cluster::cache_lag::until_settled;
use serde_json::json;

use crate::kubelet::{kubelet, refused, register};
use crate::support::{Env, whoami};

const NAMESPACE: &str = "default";

async fn service_account(env: &Env, name: &str) {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a ServiceAccount");
    Api::<ServiceAccount>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &sa)
        .await
        .expect("the admin creates the ServiceAccount");
}

/// A pod bound to `node` (as the scheduler would) running as `sa`.
async fn pod(env: &Env, name: &str, node: &str, sa: &str) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": sa,
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            // The API server's audience, which the kubelet may then ask for.
            "volumes": [{"name": "token", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
        },
    }))
    .expect("a Pod");
    Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the admin creates the Pod")
}

fn bound_to(pod: Option<&Pod>) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            bound_object_ref: pod.map(|p| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: p.metadata.name.clone(),
                uid: p.metadata.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether the API server's TokenReview authenticates `token` now.
async fn authenticated(admin: &kube::Client, token: &str) -> bool {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: None,
        },
        ..Default::default()
    };
    let answer = Api::<TokenReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("the admin may review tokens");
    answer.status.and_then(|s| s.authenticated).unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_mints_a_pod_bound_token_that_dies_with_the_pod() {
    let env = Env::start().await;
    let (node, other_node) = (env.name("fid-tok"), env.name("fid-tok-elsewhere"));
    let (sa, other_sa) = (env.name("fid-sa"), env.name("fid-sa-other"));
    let kubelet = kubelet(&env, &node).await;
    register(&kubelet, &node, &[]).await;
    service_account(&env, &sa).await;
    service_account(&env, &other_sa).await;
    let here = pod(&env, &env.name("fid-pod"), &node, &sa).await;
    let there = pod(&env, &env.name("fid-pod-elsewhere"), &other_node, &sa).await;
    let other_sa_pod = pod(&env, &env.name("fid-pod-other-sa"), &other_node, &other_sa).await;
    let as_kubelet = Api::<ServiceAccount>::namespaced(kubelet.clone(), NAMESPACE);
    let params = PostParams::default();

    // Allowed: bound to its own pod. The Node authorizer's graph is an informer cache on a
    // real server: a pod created a moment ago may not be there yet (once it is, the
    // refusals below come from NodeRestriction, not from a graph that lags).
    let own_pod = bound_to(Some(&here));
    let minted = until_settled(
        Duration::from_secs(10),
        || as_kubelet.create_token_request(&sa, &params, &own_pod),
        Result::is_ok,
    )
    .await
    .expect("the kubelet may mint a token for its own pod's ServiceAccount");
    // Refused: unbound, bound to a pod on another node, and for a ServiceAccount no pod of
    // this node runs as.
    let (code, message) = refused(
        "an unbound token",
        as_kubelet
            .create_token_request(&sa, &params, &bound_to(None))
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("node requested token not bound to a pod"),
        "{message}"
    );
    let (code, message) = refused(
        "a token bound to another node's pod",
        as_kubelet
            .create_token_request(&sa, &params, &bound_to(Some(&there)))
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("node requested token bound to a pod scheduled on a different node"),
        "{message}"
    );
    let (code, message) = refused(
        "a token for an unrelated ServiceAccount",
        as_kubelet
            .create_token_request(&other_sa, &params, &bound_to(Some(&other_sa_pod)))
            .await,
    );
    assert_eq!(code, 403, "{message}");

    let mut other_audience = bound_to(Some(&here));
    if let Some(spec) = other_audience.spec.as_mut() {
        spec.audiences = Some(vec!["https://elsewhere.example".into()]);
    }
    let (code, message) = refused(
        "an audience the pod does not use",
        as_kubelet
            .create_token_request(&sa, &params, &other_audience)
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("audience \"https://elsewhere.example\" not found in pod spec volume"),
        "{message}"
    );

    let token = minted.status.and_then(|s| s.token).expect("a token");

    let (user, _) = whoami(&env.token_client(&token).await)
        .await
        .expect("the pod's token authenticates");
    assert_eq!(user, format!("system:serviceaccount:{NAMESPACE}:{sa}"));
    assert!(authenticated(&env.client, &token).await);

    // The pod goes: the token stops authenticating (a real server caches a successful
    // authentication for up to 10 s).
    Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
        .delete(
            here.metadata.name.as_deref().unwrap(),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .expect("the admin deletes the pod");
    let deleted = Instant::now();
    let still = until_settled(
        Duration::from_secs(30),
        || authenticated(&env.client, &token),
        |ok| !ok,
    )
    .await;
    assert!(!still, "the token of a deleted pod still authenticates");
    eprintln!(
        "a pod-bound token stopped authenticating {:?} after its pod was deleted",
        deleted.elapsed()
    );
    let (code, _) = refused(
        "a request with the deleted pod's token",
        whoami(&env.token_client(&token).await).await,
    );
    assert_eq!(code, 401);
}
