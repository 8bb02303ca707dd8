//! Throughput of testkube, measured through kube-rs (figures printed, nothing asserted):
//! create+get pairs per second (sequential and 16 concurrent clients), and 1,000
//! concurrent watches (time and memory to establish, event fan-out latency).
//!
//! `cargo run --release -p testkube --example bench`

use std::time::{Duration, Instant};

use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use testkube::TestCluster;

const PAIRS: usize = 2_000;
const CONCURRENCY: usize = 16;
const WATCHES: usize = 1_000;
const FANOUT_EVENTS: usize = 10;

/// bench: testkube's throughput, measured through kube-rs.
///
/// create+get pairs per second (2,000 pairs, 1 client and 16 concurrent clients), and
/// 1,000 concurrent watches (time and memory to establish, event fan-out latency over 10
/// events). Fixed sizes; no flags. Prints figures; asserts nothing.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    after_help = "Run: cargo run --release -p testkube --example bench"
)]
struct Args {}

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("a valid ConfigMap")
}

/// Resident set size of this process (client and server together), in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn create_get(api: &Api<ConfigMap>, prefix: &str, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        api.create(&PostParams::default(), &cm(&name)).await?;
        api.get(&name).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args {} = args::parse_or_exit::<Args>();
    let cluster = TestCluster::start().await?;
    let kube = cluster.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), "default");
    create_get(&api, "warmup", 50).await?;

    let started = Instant::now();
    create_get(&api, "seq", PAIRS).await?;
    let seq = started.elapsed();
    println!(
        "create+get, 1 client:   {PAIRS} pairs in {:.2} s = {:.0} pairs/s ({:.0} requests/s)",
        seq.as_secs_f64(),
        PAIRS as f64 / seq.as_secs_f64(),
        2.0 * PAIRS as f64 / seq.as_secs_f64()
    );

    let started = Instant::now();
    let per_task = PAIRS / CONCURRENCY;
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|t| {
            let api = api.clone();
            tokio::spawn(async move { create_get(&api, &format!("par{t}"), per_task).await })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let par = started.elapsed();
    let total = per_task * CONCURRENCY;
    println!(
        "create+get, {CONCURRENCY} clients: {total} pairs in {:.2} s = {:.0} pairs/s ({:.0} requests/s)",
        par.as_secs_f64(),
        total as f64 / par.as_secs_f64(),
        2.0 * total as f64 / par.as_secs_f64()
    );

    let target: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-public");
    target.create(&PostParams::default(), &cm("fanout")).await?;
    let rv = target
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let rss_before = rss_mib();
    let started = Instant::now();
    let mut streams = Vec::with_capacity(WATCHES);
    for _ in 0..WATCHES {
        let params = WatchParams::default()
            .fields("metadata.name=fanout")
            .timeout(290);
        streams.push(target.watch(&params, &rv).await?.boxed());
    }
    let established = started.elapsed();
    let rss_after = rss_mib();
    println!(
        "{WATCHES} watches: established in {:.2} s ({:.2} ms each, sequential); RSS {:.0} -> {:.0} MiB \
         (+{:.0} KiB per watch, client and server together); server-side registrations: {}",
        established.as_secs_f64(),
        established.as_secs_f64() * 1000.0 / WATCHES as f64,
        rss_before,
        rss_after,
        (rss_after - rss_before) * 1024.0 / WATCHES as f64,
        cluster.open_watches()
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    for mut stream in streams {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok(Some(event)) = stream.try_next().await {
                if let WatchEvent::Modified(_) = event {
                    n += 1;
                    if tx.send((n, Instant::now())).is_err() || n == FANOUT_EVENTS {
                        return;
                    }
                }
            }
        });
    }
    drop(tx);
    let mut last_delivery = Vec::new();
    let mut all_latencies = Vec::new();
    for i in 1..=FANOUT_EVENTS {
        let sent = Instant::now();
        target
            .patch(
                "fanout",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": format!("v{i}")}})),
            )
            .await?;
        let mut got = 0;
        let mut latest = Duration::ZERO;
        while got < WATCHES {
            let (n, at) = rx
                .recv()
                .await
                .ok_or_else(|| anyhow::anyhow!("a watch ended early"))?;
            if n == i {
                got += 1;
                let latency = at.duration_since(sent);
                latest = latest.max(latency);
                all_latencies.push(latency);
            }
        }
        last_delivery.push(latest);
    }
    all_latencies.sort();
    last_delivery.sort();
    println!(
        "fan-out of one change to {WATCHES} watches ({FANOUT_EVENTS} changes): per-watch latency p50 {:.1} ms, \
         p99 {:.1} ms; last watch reached after median {:.1} ms, max {:.1} ms (from sending the PATCH)",
        percentile(&all_latencies, 0.5).as_secs_f64() * 1000.0,
        percentile(&all_latencies, 0.99).as_secs_f64() * 1000.0,
        percentile(&last_delivery, 0.5).as_secs_f64() * 1000.0,
        last_delivery
            .last()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1000.0,
    );
    cluster.shutdown().await;
    Ok(())
}
