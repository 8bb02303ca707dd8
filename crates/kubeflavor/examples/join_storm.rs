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

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::config::Kubeconfig;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflavor::controller::{self, Options, Runtime};
use kubeflavor::crd::Flavor;
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token_secret::flavored_token_secret;

const FLAVOR_LABEL: &str = "kubeflavor.node-restriction.kubernetes.io/flavor";
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

async fn client_from(yaml: &str) -> Client {
    kubeflavor::join::client_from_kubeconfig(yaml)
        .await
        .expect("kubeconfig usable")
}

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

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU time (user + system) the process has used so far, all its threads included, from
/// `/proc/PID/stat` fields 14 and 15, in clock ticks of USER_HZ (100 per second on Linux).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from the
    // last ')', after which field 3 is the first.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

type Times = Arc<Mutex<HashMap<String, Instant>>>;

/// Records the first time each object satisfies `done`, until `n` have.
fn record_first<K, F>(api: Api<K>, times: Times, n: usize, done: F) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    F: Fn(&K) -> bool + Send + 'static,
{
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(obj) = stream.next().await {
            let Ok(obj) = obj else { continue };
            if done(&obj) {
                let mut t = times.lock().unwrap();
                t.entry(obj.name_any()).or_insert_with(Instant::now);
                if t.len() >= n {
                    return;
                }
            }
        }
    })
}

/// The CSR a kubelet files for `node` (the same shape `kubeflavor join` sends), and its key.
fn csr_for(node: &str) -> (CertificateSigningRequest, String) {
    let generated = kubeflavor_core::kubelet_csr::generate_kubelet_csr(node).expect("kubelet CSR");
    let csr = kubeflavor::join::tls_bootstrap::kubelet_csr_object(Some(node), generated.csr_pem());
    let key = String::from_utf8(generated.key_pem().to_vec()).expect("PEM is ASCII");
    (csr, key)
}

/// A kubeconfig like `base` (same server and CA) with another user.
fn kubeconfig_with_user(base: &str, user: &str) -> String {
    let kc = Kubeconfig::from_yaml(base).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.clone().expect("cluster");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n{user}",
        cluster.server.expect("server"),
        cluster.certificate_authority_data.expect("CA data"),
    )
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

    let flavor: Flavor = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
        "metadata": {"name": "storm"},
        "spec": {"labels": {"tier.node-restriction.kubernetes.io/class": "gold"}, "trustLevel": 50},
    }))
    .unwrap();
    Api::<Flavor>::all(admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("flavor created");

    // N tokens.
    let setup = Instant::now();
    let name: FlavorName = "storm".parse().unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let tokens: Vec<BootstrapToken> = futures::stream::iter(0..n)
        .map(|_| {
            let secrets = secrets.clone();
            let name = name.clone();
            async move {
                let t = BootstrapToken::generate().expect("randomness");
                let obj = flavored_token_secret(&t, &name, None, NonZeroU32::MIN);
                let s = Secret {
                    metadata: ObjectMeta {
                        name: Some(obj.name.clone()),
                        namespace: Some(obj.namespace.into()),
                        labels: Some(obj.labels.clone()),
                        annotations: Some(obj.annotations.clone()),
                        ..ObjectMeta::default()
                    },
                    type_: Some(obj.type_.into()),
                    string_data: Some(obj.string_data.clone()),
                    ..Secret::default()
                };
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .expect("token");
                t
            }
        })
        .buffer_unordered(a.parallel)
        .collect()
        .await;
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
    let w1 = record_first(
        csrs.clone(),
        approved.clone(),
        n,
        |c: &CertificateSigningRequest| {
            c.name_any().starts_with("storm-")
                && c.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|x| x.type_ == "Approved"))
        },
    );
    let w2 = record_first(
        Api::<Node>::all(admin.clone()),
        flavored.clone(),
        n,
        |node: &Node| node.labels().get(FLAVOR_LABEL).map(String::as_str) == Some("storm"),
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
                let boot = client_from(&kubeconfig_with_user(&admin_yaml, &format!("    token: {}\n", t.expose().as_str()))).await;
                let (csr, key) = csr_for(&node);
                // A token minted a moment ago may get 401 until the API server's cache has it.
                let (boot_csrs, params) = (Api::<CertificateSigningRequest>::all(boot), PostParams::default());
                kubeflavor::cluster::retry_unauthorized(kubeflavor::cluster::TOKEN_PROPAGATION, || {
                    boot_csrs.create(&params, &csr)
                })
                .await
                .expect("CSR created");
                // From the moment the CSR exists: the bootstrap client's own TLS handshake
                // and request are not the controller's latency.
                created.lock().unwrap().insert(node.clone(), Instant::now());
                let issued = kube::runtime::wait::await_condition(csrs, &node, |c: Option<&CertificateSigningRequest>| {
                    c.and_then(|c| c.status.as_ref()).and_then(|s| s.certificate.as_ref()).is_some()
                })
                .await
                .expect("watch")
                .expect("CSR");
                let cert = String::from_utf8(issued.status.unwrap().certificate.unwrap().0).unwrap();
                use base64::Engine;
                let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
                let user = format!("    client-certificate-data: {}\n    client-key-data: {}\n", b64(&cert), b64(&key));
                let kubelet = client_from(&kubeconfig_with_user(&admin_yaml, &user)).await;
                let node_obj: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": node},
                    "spec": {"taints": [{"key": "kubeflavor.io/unverified", "effect": "NoSchedule"}]},
                }))
                .unwrap();
                Api::<Node>::all(kubelet)
                    .create(&PostParams::default(), &node_obj)
                    .await
                    .expect("node registers");
                registered.lock().unwrap().insert(node, Instant::now());
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
    let lat = |from: &Times, to: &Times| {
        let from = from.lock().unwrap();
        let to = to.lock().unwrap();
        let mut v: Vec<Duration> = to
            .iter()
            .filter_map(|(k, t)| from.get(k).map(|f| t.saturating_duration_since(*f)))
            .collect();
        v.sort();
        v
    };
    let csr_lat = lat(&created, &approved);
    let node_lat = lat(&registered, &flavored);
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
