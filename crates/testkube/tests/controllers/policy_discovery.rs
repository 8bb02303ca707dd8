//! Discovery as `kubeadm join` performs it (cmd/kubeadm/app/discovery/token): an anonymous
//! client reads kube-public/cluster-info, finds `jws-kubeconfig-<id>` for its token and
//! verifies it against the kubeconfig bytes; when the token expires, the token cleaner
//! deletes it and the signature disappears with it (kube-controller-manager's tokencleaner
//! and bootstrapsigner act at the same moment). Every wait is on a watch.

use crate::support::{admin, client_from, within};
use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use hmac::{Hmac, KeyInit, Mac};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use sha2::Sha256;
use testkube::TestCluster;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// What a joining node checks: the detached JWS recomputed from the token it holds.
fn verify(jws: &str, kubeconfig: &str, id: &str, secret: &str) -> bool {
    let Some((header, signature)) = jws.split_once("..") else {
        return false;
    };
    let Ok(header_json) = B64URL.decode(header) else {
        return false;
    };
    if header_json != format!("{{\"alg\":\"HS256\",\"kid\":\"{id}\"}}").as_bytes() {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{header}.{}", B64URL.encode(kubeconfig)).as_bytes());
    B64URL
        .decode(signature)
        .is_ok_and(|sig| mac.verify_slice(&sig).is_ok())
}

/// Wait, by watching as admin, until cluster-info satisfies `pred`.
async fn cluster_info_until(cluster: &TestCluster, pred: impl Fn(&ConfigMap) -> bool) {
    let cms: Api<ConfigMap> = Api::namespaced(admin(cluster).await, "kube-public");
    let current = cms.get("cluster-info").await.unwrap();
    if pred(&current) {
        return;
    }
    let params = WatchParams::default().fields("metadata.name=cluster-info");
    let rv = current.metadata.resource_version.unwrap();
    let mut stream = cms.watch(&params, &rv).await.unwrap().boxed();
    within("cluster-info to change", async {
        while let Some(event) = stream.try_next().await.unwrap() {
            if let WatchEvent::Modified(cm) = event
                && pred(&cm)
            {
                return;
            }
        }
        panic!("the watch ended");
    })
    .await;
}

fn has(cm: &ConfigMap, key: &str) -> bool {
    cm.data.as_ref().is_some_and(|d| d.contains_key(key))
}

#[tokio::test]
async fn a_joining_node_verifies_cluster_info_until_its_token_expires() {
    let cluster = TestCluster::start().await.unwrap();
    let (id, secret) = ("k9x2m4", "0123456789abcdef");
    let expiration = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id, "token-secret": secret, "usage-bootstrap-signing": "true",
            "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        },
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster).await, "kube-system");
    let created = secrets
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    let key = format!("jws-kubeconfig-{id}");
    cluster_info_until(&cluster, |cm| has(cm, &key)).await;

    let anonymous: Api<ConfigMap> = Api::namespaced(
        client_from(&cluster.anonymous_kubeconfig()).await,
        "kube-public",
    );
    let data = anonymous.get("cluster-info").await.unwrap().data.unwrap();
    assert!(
        verify(&data[&key], &data["kubeconfig"], id, secret),
        "the signature verifies with the token"
    );
    assert!(
        !verify(&data[&key], &data["kubeconfig"], id, "0123456789abcdeX"),
        "and with nothing else"
    );
    assert!(
        !verify(&data[&key], &format!("{} ", data["kubeconfig"]), id, secret),
        "over exactly these bytes"
    );

    let params = WatchParams::default().fields(&format!("metadata.name=bootstrap-token-{id}"));
    let mut stream = secrets
        .watch(&params, &created.metadata.resource_version.unwrap())
        .await
        .unwrap()
        .boxed();
    within("the token cleaner to delete the expired token", async {
        while let Some(event) = stream.try_next().await.unwrap() {
            if let WatchEvent::Deleted(_) = event {
                return;
            }
        }
        panic!("the watch ended");
    })
    .await;
    cluster_info_until(&cluster, |cm| !has(cm, &key)).await;
    let data = anonymous.get("cluster-info").await.unwrap().data.unwrap();
    assert!(!data.contains_key(&key));
    cluster.shutdown().await;
}
