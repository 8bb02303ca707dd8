//! A caller of the join-token API as an operator sets one up: a ServiceAccount, a
//! ClusterRole naming the flavors it may mint, the binding, and the account's token from a
//! TokenRequest. Shared by the tests, the mint benchmark and the walkthrough.

// Each includer uses its own part of this module.
#![allow(dead_code)]

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// A token of ServiceAccount `namespace/name` from a TokenRequest (what `kubectl create
/// token` does), valid for `seconds`.
pub async fn service_account_token(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
    seconds: i64,
) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
        .status
        .and_then(|status| status.token)
        .expect("a TokenRequest answers with a token")
}

/// ServiceAccount `namespace/name`, allowed to mint the flavors `may_mint` and nothing
/// else (ClusterRole and ClusterRoleBinding `name`); its token.
pub async fn portal(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
    may_mint: &[&str],
) -> String {
    let pp = PostParams::default();
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}}))
            .expect("a ServiceAccount");
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create(&pp, &account)
        .await
        .expect("ServiceAccount");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["kubeflavor.io"], "resources": ["flavors/jointoken"],
                   "resourceNames": may_mint, "verbs": ["create"]}]
    }))
    .expect("a ClusterRole");
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &role)
        .await
        .expect("ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    }))
    .expect("a ClusterRoleBinding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &binding)
        .await
        .expect("ClusterRoleBinding");
    service_account_token(admin, namespace, name, 600).await
}
