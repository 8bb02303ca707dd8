//! A flavor and a token of it, minted through the CLI the way an admin would, with the join
//! line `token create --print-join-command` printed.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use kubeflavor_core::token::BootstrapToken;

use super::Env;

/// A flavor, a token of it, and the endpoint and pin from the printed join line.
pub struct Minted {
    pub flavor: String,
    pub token: String,
    pub endpoint: String,
    pub pin: String,
}

/// Installs kubeflavor, creates the flavor `base-<run id>` and a token of it, and checks the
/// join line's shape: `kubeadm join ENDPOINT --token TOKEN --discovery-token-ca-cert-hash PIN`.
pub async fn mint_with_join_line(env: &Env, base: &str) -> Minted {
    env.install().await;
    let flavor = env.create_flavor(base, &[]).await;
    let out = env
        .kf(&[
            "token",
            "create",
            "--flavor",
            &flavor,
            "--print-join-command",
        ])
        .await;
    let line = out.expect_ok().trim().to_string();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["kubeadm", "join"], "{line}");
    assert_eq!(words[3], "--token", "{line}");
    assert_eq!(words[5], "--discovery-token-ca-cert-hash", "{line}");
    assert_eq!(words.len(), 7, "one CA, one pin: {line}");
    words[4]
        .parse::<BootstrapToken>()
        .expect("a token in the join line");
    Minted {
        flavor,
        token: words[4].to_string(),
        endpoint: words[2].to_string(),
        pin: words[6].to_string(),
    }
}

/// Deletes the token's Secret and the flavor (a real cluster is reused across runs).
pub async fn cleanup(env: &Env, minted: &Minted) {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let _ = secrets
        .delete(
            &format!("bootstrap-token-{}", &minted.token[..6]),
            &DeleteParams::default(),
        )
        .await;
    let _ = env
        .kf(&["flavor", "delete", &minted.flavor, "--force"])
        .await;
}
