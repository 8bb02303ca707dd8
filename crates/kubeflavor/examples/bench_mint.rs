//! bench_mint: join tokens minted per second through `kubeflavor serve`, with the
//! TokenReview and SubjectAccessReview of every request in the loop.
//!
//!     cargo run --release -p kubeflavor --example bench_mint -- --mints 2000 --parallel 16
//!
//! Starts testkube (or uses --kubeconfig), a flavor, a portal ServiceAccount allowed to
//! mint it (its token from a TokenRequest), and the API in-process with a self-signed
//! certificate; then N mints from P concurrent callers, each on a new TLS connection as a
//! portal without keep-alive would make them. Prints mints/s, latency p50/p99/max and, on
//! testkube, the API server requests per mint by verb and resource.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use http::StatusCode;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kubeflavor::connect::{Cluster, ClusterArgs};
use kubeflavor::serve::{self, Options, TlsSource};
use kubeflavor_cluster::crd::Flavor;
use serde_json::json;

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "../tests/support/https.rs"]
mod https;
#[path = "../tests/support/portal.rs"]
mod portal;

/// bench_mint: mints per second through the join-token API, reviews included.
#[derive(Debug, Parser)]
#[command(
    name = "bench_mint",
    after_help = "Run: cargo run --release -p kubeflavor --example bench_mint -- --mints 2000"
)]
struct Args {
    /// How many tokens to mint.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = args::at_least_one)]
    mints: usize,
    /// How many callers mint at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = args::at_least_one)]
    parallel: usize,
    /// Run against this cluster instead of testkube. It creates a Flavor, a ServiceAccount
    /// in `default`, a ClusterRole and binding named bench-mint, N token Secrets and their
    /// N trail Events, and removes them afterwards.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
}

const NAME: &str = "bench-mint";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    kubeflavor::connect::install_crypto_provider();
    let a = args::parse_or_exit::<Args>();
    let dir = tempfile::tempdir().expect("temp dir");
    let (testkube, kubeconfig) = match &a.kubeconfig {
        Some(path) => (None, path.clone()),
        None => {
            let c = testkube::TestCluster::builder()
                .bootstrap_signer(false)
                .start()
                .await
                .expect("testkube starts");
            let path = dir.path().join("admin.kubeconfig");
            c.write_admin_kubeconfig(&path).expect("kubeconfig");
            (Some(c), path)
        }
    };
    let cluster = Cluster::connect(&ClusterArgs {
        kubeconfig: Some(kubeconfig.clone()),
        context: None,
    })
    .await
    .expect("cluster");
    let admin = cluster.client.clone();
    let mut out = Vec::new();
    let kubeconfig_arg = kubeconfig.to_str().expect("UTF-8 path");
    kubeflavor::run(
        [
            "kubeflavor",
            "--kubeconfig",
            kubeconfig_arg,
            "install",
            "--apply",
            "--replicas",
            "0",
        ],
        &mut out,
    )
    .await
    .expect("install --apply");
    let token = setup(&admin).await;

    let bound = serve::bind(
        cluster,
        Options {
            address: "127.0.0.1:0".parse().unwrap(),
            tls: TlsSource::SelfSigned {
                names: vec!["127.0.0.1".into()],
            },
            ops_address: None,
            per_minute: u32::MAX,
            burst: u32::MAX,
            audience: None,
            instance: NAME.into(),
            connections: Default::default(),
            administrators: None,
            portal: None,
            observing: None,
        },
    )
    .await
    .expect("the API binds");
    let client = https::HttpsClient::new(
        bound.local_addr().expect("bound"),
        bound.self_signed_pem.as_deref().expect("self-signed"),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.serve(async {
        let _ = stopped.await;
    }));
    if let Some(c) = &testkube {
        c.counters().reset();
    }

    let path = format!("/v1/flavors/{NAME}/jointokens");
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(0..a.mints)
        .map(|i| {
            let (client, path, token) = (client.clone(), path.clone(), token.clone());
            async move {
                let body = json!({"issuedTo": format!("bench/{i}")}).to_string();
                let t = Instant::now();
                let (code, answer) = client
                    .post(&path, Some(&token), None, body.as_bytes())
                    .await;
                assert_eq!(code, StatusCode::CREATED, "{answer}");
                t.elapsed()
            }
        })
        .buffer_unordered(a.parallel)
        .collect()
        .await;
    let total = started.elapsed();
    latencies.sort();
    println!(
        "bench_mint: {} mints, {} callers at once",
        a.mints, a.parallel
    );
    println!(
        "  mints/s                 {:.0}",
        a.mints as f64 / total.as_secs_f64()
    );
    println!(
        "  latency                 p50 {}  p99 {}  max {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default())
    );
    if let Some(c) = &testkube {
        let mut per: BTreeMap<String, u64> = BTreeMap::new();
        for (k, v) in &c.counters().snapshot().counts {
            *per.entry(format!("{} {}", k.verb, k.resource)).or_default() += v;
        }
        println!("  API requests per mint   (all identities)");
        for (k, v) in per {
            println!("    {k:<40} {:.2}", v as f64 / a.mints as f64);
        }
    }
    let _ = stop.send(());
    let _ = server.await;
    clean_up(&admin).await;
}

/// The flavor, a ServiceAccount allowed to mint it, and that account's token.
async fn setup(admin: &kube::Client) -> String {
    let flavor: Flavor = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
        "metadata": {"name": NAME},
        "spec": {"labels": {"tier.node-restriction.kubernetes.io/class": "bench"}},
    }))
    .unwrap();
    Api::<Flavor>::all(admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("flavor");
    portal::portal(admin, "default", NAME, &[NAME]).await
}

async fn clean_up(admin: &kube::Client) {
    let dp = DeleteParams::default();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    if let Ok(list) = secrets
        .list(&ListParams::default().labels(&format!("kubeflavor.io/flavor={NAME}")))
        .await
    {
        for s in list.items {
            let _ = secrets
                .delete(s.metadata.name.as_deref().unwrap_or_default(), &dp)
                .await;
        }
    }
    // The trail's Events about the benchmark's flavor: one per mint.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "kube-system");
    if let Ok(list) = events.list(&ListParams::default()).await {
        for e in list.items {
            let about = e.regarding.as_ref().and_then(|r| r.name.as_deref());
            if about == Some(NAME) {
                let _ = events
                    .delete(e.metadata.name.as_deref().unwrap_or_default(), &dp)
                    .await;
            }
        }
    }
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(NAME, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(NAME, &dp)
        .await;
    let _ = Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .delete(NAME, &dp)
        .await;
    let _ = Api::<Flavor>::all(admin.clone()).delete(NAME, &dp).await;
}
