//! join-storm: N tokens, N CSRs from N bootstrap identities, N Nodes registered by the N
//! node identities once their certificates are issued, against one kubeflavor controller.
//!
//!     cargo run --release -p kubeflavor --example join_storm -- --nodes 1000
//!
//! By default it starts testkube in-process and runs the controller as a child process
//! (this same program, re-executed), so the controller's peak RSS is its own and its API
//! requests are counted apart (it authenticates with its own bearer token). Prints
//! approvals/s, p50/p99 CSR->Approved, p50/p99 Node registered->flavored, controller API
//! writes per join by verb and resource, the controller's CPU time per join and its peak
//! RSS (VmHWM).
//!
//! With `--kubeconfig FILE` it runs against that cluster instead (the controller in-process
//! with that kubeconfig; request counters are testkube-only and are skipped). It creates
//! `install --apply` objects, a Flavor, N tokens, CSRs and Nodes named `storm-*`: use a
//! throwaway cluster.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt};
use kubeflavor::controller::{self, Options, Runtime};

const CONTROLLER_TOKEN: &str = "storm-controller-token";

/// join_storm: N kubeflavor joins against one controller, the controller as it ships.
///
/// Prints approvals/s, p50/p99 CSR->Approved, p50/p99 Node registered->flavored, the
/// controller's API writes and reads per join by verb and resource, its CPU time per join
/// and its peak RSS (VmHWM). By default against an in-process testkube, the controller a child process.
#[derive(Debug, Parser)]
#[command(
    name = "join_storm",
    after_help = "Run: cargo run --release -p kubeflavor --example join_storm -- --nodes 1000"
)]
struct Args {
    /// How many nodes join: one token, one CSR and one Node each.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = args::at_least_one)]
    nodes: usize,
    /// How many joins are in flight at once.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = args::at_least_one)]
    parallel: usize,
    /// The controller's parallel reconciles per loop (its --concurrency) [default: the
    /// controller's default, 16].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: Option<u16>,
    /// Run against this cluster instead of testkube (controller in-process, no request
    /// counters). It creates install objects, a Flavor, N tokens, CSRs and Nodes named
    /// storm-*: use a throwaway cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// Internal: run as the controller child process with this kubeconfig.
    #[arg(long, value_name = "FILE", hide = true)]
    controller_child: Option<String>,
}

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "support/storm.rs"]
mod storm;

use storm::{Times, client_from, cpu_time, kubeconfig_with_user, ms, percentile, vm_hwm_kib};

fn controller_options(identity: &str, concurrency: Option<u16>) -> Options {
    let mut o = Options::new("kube-system", identity);
    o.leader_elect = false;
    if let Some(c) = concurrency {
        o.concurrency = c;
    }
    o
}

/// The child: the controller alone, until the parent closes our stdin.
async fn run_child(kubeconfig_path: &str, concurrency: Option<u16>) {
    // The controller's log on stderr, as `kubeflavor controller` writes it (RUST_LOG).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client=off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let yaml = std::fs::read_to_string(kubeconfig_path).expect("controller kubeconfig");
    let client = client_from(&yaml).await;
    let stop = async {
        let _ = tokio::task::spawn_blocking(|| {
            let mut buf = [0u8; 1];
            let _ = std::io::stdin().read(&mut buf);
        })
        .await;
    };
    let rt = Runtime::new(client, controller_options("storm", concurrency));
    let health = rt.health.clone();
    // Tell the parent when the caches are synced: the storm starts then, so its figures
    // measure decisions, not the controller's start-up.
    let ready = async move {
        health.wait_synced().await;
        println!("ready");
    };
    let run = controller::run(rt, stop);
    let (_, ran) = tokio::join!(ready, run);
    ran.expect("controller runs");
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let a = args::parse_or_exit::<Args>();
    if let Some(path) = &a.controller_child {
        run_child(path, a.concurrency).await;
        return;
    }
    let n = a.nodes;
    let dir = tempfile::tempdir().expect("temp dir");

    // The cluster: testkube, or the given kubeconfig.
    let (cluster, admin_yaml) = match &a.kubeconfig {
        Some(path) => (
            None,
            std::fs::read_to_string(path).expect("read --kubeconfig"),
        ),
        None => {
            // The storm's nodes skip discovery, so cluster-info needs no signatures; the
            // bootstrap signer re-signs cluster-info for every token on every token write,
            // which at thousands of tokens would make the API server, not the controller,
            // the thing measured.
            let c = testkube::TestCluster::builder()
                .bootstrap_signer(false)
                .start()
                .await
                .expect("testkube starts");
            let y = c.admin_kubeconfig();
            (Some(c), y)
        }
    };
    let admin_path = dir.path().join("admin.kubeconfig");
    std::fs::write(&admin_path, &admin_yaml).expect("write kubeconfig");
    let admin = client_from(&admin_yaml).await;
    let mut out = Vec::new();
    kubeflavor::run(
        [
            "kubeflavor",
            "--kubeconfig",
            admin_path.to_str().unwrap(),
            "install",
            "--apply",
            // The storm runs its own controller; none may run from the Deployment.
            "--replicas",
            "0",
        ],
        &mut out,
    )
    .await
    .expect("install --apply");

    storm::create_flavor(&admin, "storm").await;

    // N tokens.
    let setup = Instant::now();
    let tokens = storm::mint_tokens(&admin, "storm", n, a.parallel).await;
    eprintln!(
        "setup: {n} tokens in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    // The controller: a child process on testkube (own token, own counters, own RSS).
    let mut child = None;
    let mut cpu_at_start = None;
    let mut in_process = None;
    match &cluster {
        Some(c) => {
            c.register_static_token(
                CONTROLLER_TOKEN,
                "kubeflavor-storm-controller",
                &["system:masters"],
            );
            let path = dir.path().join("controller.kubeconfig");
            std::fs::write(
                &path,
                kubeconfig_with_user(&admin_yaml, &format!("    token: {CONTROLLER_TOKEN}\n")),
            )
            .unwrap();
            let exe = std::env::current_exe().expect("own path");
            let mut command = std::process::Command::new(exe);
            command.arg("--controller-child").arg(&path);
            if let Some(c) = a.concurrency {
                command.arg("--concurrency").arg(c.to_string());
            }
            let mut started = command
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("controller child starts");
            let stdout = started.stdout.take().expect("child stdout");
            let line = tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
                    .map(|_| line)
            })
            .await
            .expect("reader")
            .expect("read the child's ready line");
            assert_eq!(line.trim(), "ready", "the controller child did not start");
            cpu_at_start = cpu_time(started.id());
            child = Some(started);
            c.counters().reset();
        }
        None => {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let rt = Runtime::new(admin.clone(), controller_options("storm", a.concurrency));
            let health = rt.health.clone();
            in_process = Some((
                tx,
                tokio::spawn(controller::run(rt, async move {
                    let _ = rx.await;
                })),
            ));
            health.wait_synced().await;
        }
    }

    let approved: Times = Arc::default();
    let flavored: Times = Arc::default();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let w1 = storm::record_first(
        csrs.clone(),
        approved.clone(),
        n,
        |c: &CertificateSigningRequest| c.name_any().starts_with("storm-") && storm::is_approved(c),
    );
    let w2 = storm::record_first(
        Api::<Node>::all(admin.clone()),
        flavored.clone(),
        n,
        |node: &Node| node.labels().get(storm::FLAVOR_LABEL).map(String::as_str) == Some("storm"),
    );

    // The storm.
    let created: Times = Arc::default();
    let registered: Times = Arc::default();
    let start = Instant::now();
    futures::stream::iter(tokens.into_iter().enumerate())
        .map(|(i, t)| {
            let admin_yaml = admin_yaml.clone();
            let created = created.clone();
            let registered = registered.clone();
            let csrs = csrs.clone();
            async move {
                let node = format!("storm-{i:05}");
                storm::join(&admin_yaml, &csrs, &t, &node, &created, &registered).await;
            }
        })
        .buffer_unordered(a.parallel)
        .collect::<Vec<()>>()
        .await;
    tokio::time::timeout(Duration::from_secs(600), async {
        let _ = w1.await;
        let _ = w2.await;
    })
    .await
    .expect("every node approved and flavored within 10 minutes");
    let total = start.elapsed();

    // Figures.
    let csr_lat = storm::latencies(&created, &approved);
    let node_lat = storm::latencies(&registered, &flavored);
    let first = created.lock().unwrap().values().min().copied().unwrap();
    let last_ok = approved.lock().unwrap().values().max().copied().unwrap();
    println!("join-storm: {n} joins, {} in flight", a.parallel);
    println!("  total time              {:.2} s", total.as_secs_f64());
    println!(
        "  approvals/s             {:.0}",
        n as f64 / last_ok.saturating_duration_since(first).as_secs_f64()
    );
    println!(
        "  CSR -> Approved         p50 {}  p99 {}",
        ms(percentile(&csr_lat, 0.5)),
        ms(percentile(&csr_lat, 0.99))
    );
    println!(
        "  Node -> flavored        p50 {}  p99 {}",
        ms(percentile(&node_lat, 0.5)),
        ms(percentile(&node_lat, 0.99))
    );
    if let Some(c) = &cluster {
        let snap = c.counters().snapshot();
        let mut writes: BTreeMap<String, u64> = BTreeMap::new();
        let mut reads: BTreeMap<String, u64> = BTreeMap::new();
        for (k, v) in &snap.counts {
            if k.identity != testkube::IdentityKind::StaticToken {
                continue;
            }
            let key = format!("{} {}", k.verb, k.resource);
            match k.verb.as_str() {
                "create" | "update" | "patch" | "delete" | "deletecollection" => {
                    *writes.entry(key).or_default() += v
                }
                _ => *reads.entry(key).or_default() += v,
            }
        }
        let total_writes: u64 = writes.values().sum();
        println!(
            "  controller writes/join  {:.2}",
            total_writes as f64 / n as f64
        );
        for (k, v) in &writes {
            println!("    {k:<48} {:.2}", *v as f64 / n as f64);
        }
        let total_reads: u64 = reads.values().sum();
        println!(
            "  controller reads/join   {:.2} (GET/LIST/WATCH)",
            total_reads as f64 / n as f64
        );
        for (k, v) in &reads {
            println!("    {k:<48} {:.2}", *v as f64 / n as f64);
        }
    }
    if let Some(mut ch) = child {
        if let (Some(before), Some(after)) = (cpu_at_start, cpu_time(ch.id())) {
            let used = after.saturating_sub(before);
            println!(
                "  controller CPU/join     {:.2} ms (user+system of the controller process during the storm: {:.2} s)",
                used.as_secs_f64() * 1000.0 / n as f64,
                used.as_secs_f64()
            );
        }
        if let Some(kib) = vm_hwm_kib(ch.id()) {
            println!(
                "  controller peak RSS     {:.1} MiB (VmHWM of the controller process, {n} flavored nodes)",
                kib as f64 / 1024.0
            );
        }
        drop(ch.stdin.take());
        let _ = ch.wait();
    }
    if let Some((tx, task)) = in_process {
        let _ = tx.send(());
        let _ = task.await;
        if let Some(kib) = vm_hwm_kib(std::process::id()) {
            println!(
                "  process peak RSS        {:.1} MiB (controller in-process with the storm clients)",
                kib as f64 / 1024.0
            );
        }
    }
}
