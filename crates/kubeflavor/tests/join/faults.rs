//! `join` when the cluster misbehaves, and `token create --print-join-command` without
//! cluster-info. These inject faults into testkube, or remove kube-public/cluster-info, so
//! they run on testkube only (skipped, with a note, when KUBEFLAVOR_E2E_KUBECONFIG is set).

use std::time::Duration;

use crate::support::{Env, within_for};
use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeflavor::join::{self, CaCheck, JoinOptions, RecordedReport};
use kubeflavor_core::crypto::pin::CaPin;

const PATIENCE: Duration = Duration::from_secs(60);

fn testkube_only(env: &Env) -> Option<&testkube::TestCluster> {
    env.testkube_or_skip("this case injects faults into testkube")
}

/// The pin of the test cluster's CA, computed independently of kubeflavor's join code.
fn cluster_pin(cluster: &testkube::TestCluster) -> CaPin {
    let der = kubeflavor_core::crypto::keys::parse_certificates_pem(cluster.ca_pem().as_bytes())
        .unwrap()
        .remove(0);
    CaPin::from_cert_der(&der).unwrap()
}

async fn join_line(env: &Env, flavor: &str) -> Vec<String> {
    env.install().await;
    env.kf(&["flavor", "create", flavor]).await.expect_ok();
    let out = env
        .kf(&[
            "token",
            "create",
            "--flavor",
            flavor,
            "--print-join-command",
        ])
        .await;
    out.expect_ok()
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn options(words: &[String], node: &str, dir: &std::path::Path) -> JoinOptions {
    JoinOptions {
        endpoint: join::parse_endpoint(&words[2]).unwrap(),
        token: words[4].parse().unwrap(),
        ca_check: CaCheck::Pinned(vec![words[6].parse().unwrap()]),
        node_name: node.parse().unwrap(),
        kubelet_dir: dir.to_path_buf(),
        tls_bootstrap: true,
        timeout: PATIENCE,
        retry_interval: Duration::from_millis(100),
        control_plane: None,
    }
}

/// Approves the first kubelet client CSR that shows up, as the admin.
async fn approve_next_csr(admin: kube::Client) {
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let mut csrs = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .default_backoff()
        .boxed();
    let csr = within_for(PATIENCE, "a CSR", csrs.next())
        .await
        .unwrap()
        .unwrap();
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "TestApproved", "message": "approved by the test",
    }]}});
    api.patch_approval(
        csr.metadata.name.as_deref().unwrap(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn print_join_command_matches_the_cluster_ca_and_falls_back_to_the_kubeconfig() {
    let env = Env::start().await;
    let Some(cluster) = testkube_only(&env) else {
        return;
    };
    let words = join_line(&env, "fallback").await;
    let expected_pin = cluster_pin(cluster).to_string();
    let server = cluster
        .server_url()
        .trim_start_matches("https://")
        .trim_end_matches('/');
    assert_eq!(words[2], server);
    assert_eq!(words[6], expected_pin);

    // Without cluster-info the kubeconfig's server and CA are used, and agree.
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), "kube-public");
    let saved = configmaps.get("cluster-info").await.unwrap();
    configmaps
        .delete("cluster-info", &DeleteParams::default())
        .await
        .unwrap();
    let out = env
        .kf(&[
            "token",
            "create",
            "--flavor",
            "fallback",
            "--print-join-command",
        ])
        .await;
    let fallback: Vec<String> = out
        .expect_ok()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(fallback[2], server);
    assert_eq!(fallback[6], expected_pin);
    assert_ne!(fallback[4], words[4], "a fresh token each time");

    let mut restored = saved;
    restored.metadata.resource_version = None;
    restored.metadata.uid = None;
    configmaps
        .create(&PostParams::default(), &restored)
        .await
        .unwrap();
}

#[tokio::test]
async fn discovery_retries_through_server_errors() {
    let env = Env::start().await;
    let Some(cluster) = testkube_only(&env) else {
        return;
    };
    let words = join_line(&env, "flaky").await;
    let dir = env.dir().join("node");
    let mut opts = options(&words, "flaky-1", &dir);
    opts.tls_bootstrap = false;
    cluster.faults().fail_next(3, "get", "configmaps", 500);

    let mut report = RecordedReport::default();
    join::run(&opts, &mut report)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{:#?}", report.lines));
    let retries = report
        .lines
        .iter()
        .filter(|l| l.contains("Failed to request cluster-info, will try again"))
        .count();
    assert_eq!(retries, 3, "{:#?}", report.lines);
    assert!(dir.join("bootstrap-kubelet.conf").exists());
}

#[tokio::test]
async fn waiting_for_the_certificate_survives_cut_watches() {
    let env = Env::start().await;
    let Some(cluster) = testkube_only(&env) else {
        return;
    };
    let words = join_line(&env, "cut").await;
    let dir = env.dir().join("node");
    let opts = options(&words, "cut-1", &dir);
    let admin = env.client.clone();

    // Cut every open watch (the joining node's included) once the CSR exists, then approve.
    let approver = async {
        let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
        let mut csrs = watcher(api, watcher::Config::default())
            .applied_objects()
            .default_backoff()
            .boxed();
        within_for(PATIENCE, "a CSR", csrs.next()).await;
        drop(csrs);
        cluster.faults().cut_watches();
        approve_next_csr(admin.clone()).await;
    };
    let mut report = RecordedReport::default();
    let (joined, ()) = tokio::join!(join::run(&opts, &mut report), approver);
    let outcome = joined.unwrap_or_else(|e| panic!("{e}\n{:#?}", report.lines));
    assert!(outcome.kubelet_kubeconfig.is_some());
}
