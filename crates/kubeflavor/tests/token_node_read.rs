//! What a token holder can read of other nodes: by default (kubeadm join's check for an
//! existing Node needs it) join tokens may `get` Nodes, and so read their flavor labels;
//! `install --no-token-node-read` takes that away. A binary of its own: it changes what
//! every test's install applies, and test binaries run one at a time.

mod support;

use std::time::Duration;

use crate::support::{Env, fresh};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use kubeflavor_cluster::cache_lag::until_settled;
use kubeflavor_core::token::BootstrapToken;

/// The RBAC authorizer reads an informer cache: a grant given or taken a moment ago shows
/// after a while. Asks again until `want` is the answer, for at most 10 s.
async fn until_get_node_is(client: &kube::Client, node: &str, want: u16) -> u16 {
    let nodes: Api<Node> = Api::all(client.clone());
    let get_code = || async {
        match fresh(|| nodes.get(node)).await {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => s.code,
            Err(e) => panic!("{e}"),
        }
    };
    until_settled(Duration::from_secs(10), get_code, |code| *code == want).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_node_read_hides_every_node_from_token_holders() {
    let env = Env::start().await;
    env.install().await;
    let flavor = env.create_flavor("sweet", &[]).await;
    let node = env.name("joined");
    let obj: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": node}})).expect("node");
    Api::<Node>::all(env.client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .expect("node");
    let token = env
        .kf(&["token", "create", "--flavor", &flavor])
        .await
        .expect_ok()
        .trim()
        .parse::<BootstrapToken>()
        .expect("token");
    let holder = env.token_client(&token.expose()).await;
    assert_eq!(until_get_node_is(&holder, &node, 200).await, 200);

    env.kf(&[
        "install",
        "--apply",
        "--replicas",
        "0",
        "--no-token-node-read",
    ])
    .await
    .expect_ok();
    assert_eq!(until_get_node_is(&holder, &node, 403).await, 403);

    // Back to the default install for the suites that follow (kubeadm join needs it).
    env.install().await;
    assert_eq!(until_get_node_is(&holder, &node, 200).await, 200);
}
