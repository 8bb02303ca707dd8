//! join-storm: N tokens, N CSRs from N bootstrap identities, N Nodes registered by the N
//! node identities once their certificates are issued, against one kubeflavor controller.
//!
//!     cargo run --release -p kubeflavor --example join_storm -- --nodes 1000
//!
//! By default it starts testkube in-process; the controller always runs as a child process
//! (this same program, re-executed), so its CPU time and peak RSS are its own, and on
//! testkube its API requests are counted apart (it authenticates with its own bearer
//! token). Prints approvals/s, p50/p99 CSR->Approved, p50/p99 Node registered->flavored,
//! controller API writes and reads per join by verb and resource, the controller's CPU
//! time per join, its peak RSS (VmHWM), its CPU in the steady state after the storm, and
//! what it waited on (per loop: the turn queue, API reads, API writes; conflicts and
//! errors, from its own metrics). The last line of the output is the run's figures as one
//! JSON object (`--record FILE` also appends it to FILE).
//!
//! With `--baseline M` it runs a storm of M nodes, then the storm of `--nodes`, then M nodes
//! again, each against a fresh testkube and controller, and compares testkube's CPU per
//! request of the large storm with the mean of the two small ones (`--min-cost-ratio F`
//! exits 1 when the cost is not flat enough): the check CI runs so a cost per request that
//! grows with the fleet cannot slip in unseen. A baseline on each side cancels a machine
//! that speeds up or slows down while they run.
//!
//! With `--kubeconfig FILE` it runs against that cluster instead (request counters are
//! testkube-only and are skipped; the API server's own metrics and, when the control plane
//! runs on this machine, its processes' CPU are printed instead). It creates `install
//! --apply` objects, a Flavor, N tokens, CSRs and Nodes named `storm-*`, and deletes the
//! Flavor, CSRs, Nodes and FlavorBindings before and after the storm: use a throwaway
//! cluster.

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
    /// Run against this cluster instead of testkube (no request counters; the API
    /// server's metrics instead). It creates install objects, a Flavor, N tokens, CSRs and
    /// Nodes named storm-*, and deletes them before and after: use a throwaway cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// After the storm, measure the controller's CPU for this many seconds with no joins
    /// (steady state); 0 to skip.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    idle_seconds: u64,
    /// Print the N slowest CSR -> Approved latencies, with when each CSR was created.
    #[arg(long, value_name = "N", default_value_t = 0)]
    show_slowest: usize,
    /// Also append the run's JSON line to this file, so runs can be compared over time.
    #[arg(long, value_name = "FILE")]
    record: Option<std::path::PathBuf>,
    /// Run a storm of this many nodes (a fresh testkube and controller) before and after
    /// the storm of `--nodes`, and compare: testkube's CPU per request and approvals/s of
    /// the large storm against the mean of the two small ones. Flat cost means a cost ratio
    /// near 1.
    #[arg(long, value_name = "N", value_parser = args::at_least_one)]
    baseline: Option<usize>,
    /// With --baseline: exit 1 when the baselines' mean in-process CPU per request divided
    /// by the larger storm's is below this floor (the larger storm costs more than 1/floor
    /// times as much per request).
    #[arg(long, value_name = "RATIO", requires = "baseline")]
    min_cost_ratio: Option<f64>,
    /// Internal: run as the controller child process with this kubeconfig.
    #[arg(long, value_name = "FILE", hide = true)]
    controller_child: Option<String>,
}

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "support/storm.rs"]
mod storm;

use storm::{Times, client_from, cpu_time, kubeconfig_with_user, percentile, vm_hwm_kib};

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
    let metrics = rt.metrics.clone();
    // Tell the parent when the caches are synced: the storm starts then, so its figures
    // measure decisions, not the controller's start-up.
    let ready = async move {
        health.wait_synced().await;
        println!("ready");
    };
    let run = controller::run(rt, stop);
    let (_, ran) = tokio::join!(ready, run);
    ran.expect("controller runs");
    // What the controller waited on, for the parent's figures.
    print!("{}", metrics.render());
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let a = args::parse_or_exit::<Args>();
    if let Some(path) = &a.controller_child {
        run_child(path, a.concurrency).await;
        return;
    }
    let Some(small) = a.baseline else {
        storm(&a, a.nodes).await;
        return;
    };
    // The baseline before and after the large storm, compared by their mean: a machine
    // that speeds up or slows down during the runs moves the two baselines apart and their
    // mean with the large storm, not the ratio.
    let before = storm(&a, small).await;
    let large = storm(&a, a.nodes).await;
    let after = storm(&a, small).await;
    let verdict = compare(&[before, after], &large, a.min_cost_ratio);
    println!("{}", verdict.text);
    if !verdict.holds {
        std::process::exit(1);
    }
}

/// The baseline storm against the larger one.
struct Verdict {
    text: String,
    holds: bool,
}

fn compare(bases: &[Report; 2], large: &Report, floor: Option<f64>) -> Verdict {
    let mean = |f: fn(&Report) -> Option<f64>| {
        bases
            .iter()
            .map(f)
            .sum::<Option<f64>>()
            .map(|sum| sum / bases.len() as f64)
    };
    let base_cpu = mean(|r| r.in_process_cpu_us_per_request);
    let base_rate = mean(|r| Some(r.approvals_per_s)).unwrap_or(f64::NAN);
    let base_requests = mean(|r| r.requests_per_join).unwrap_or(f64::NAN);
    let base = &bases[0];
    let (Some(b), Some(l)) = (base_cpu, large.in_process_cpu_us_per_request) else {
        return Verdict {
            text: "no CPU per request to compare (testkube only)".into(),
            holds: floor.is_none(),
        };
    };
    let cost_ratio = b / l;
    let rate_ratio = large.approvals_per_s / base_rate;
    let mut text = format!(
        "compared: {} nodes against {} (the mean of a run before and one after): in-process \
         CPU per request {l:.0} against {b:.0} us ({:.0} and {:.0}; cost ratio \
         {cost_ratio:.2}, 1 is flat), approvals/s {:.0} against {:.0} ({:.0} %), testkube \
         requests per join {:.2} against {:.2}",
        large.nodes,
        base.nodes,
        bases[0].in_process_cpu_us_per_request.unwrap_or(f64::NAN),
        bases[1].in_process_cpu_us_per_request.unwrap_or(f64::NAN),
        large.approvals_per_s,
        base_rate,
        rate_ratio * 100.0,
        large.requests_per_join.unwrap_or(f64::NAN),
        base_requests,
    );
    text.push_str(&format!(
        "\nwithin the {}-node storm, its 9th tenth of approvals ran at {:.0} % of its 2nd (same run, same machine)",
        large.nodes,
        large.approvals_per_s_late / large.approvals_per_s_early * 100.0
    ));
    let holds = floor.is_none_or(|f| cost_ratio >= f);
    if let Some(f) = floor {
        text.push_str(&if holds {
            format!("\ncost ratio {cost_ratio:.2} >= floor {f:.2}: flat enough")
        } else {
            format!(
                "\ncost ratio {cost_ratio:.2} < floor {f:.2}: a request costs {:.2}x as much \
                 with {} nodes as with {}; something in testkube grows with the fleet \
                 (profile join_storm --nodes {} with perf)",
                1.0 / cost_ratio,
                large.nodes,
                base.nodes,
                large.nodes
            )
        });
    }
    Verdict { text, holds }
}

/// One storm of `n` joins against a fresh cluster and controller: its figures printed,
/// recorded (with --record) and returned.
async fn storm(a: &Args, n: usize) -> Report {
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

    // A cluster that outlives the storm may hold an earlier one's objects (an interrupted
    // run): their names must be free.
    if cluster.is_none() {
        storm::clean_up(&admin, "storm", "storm-").await;
    }
    storm::create_flavor(&admin, "storm").await;

    // N tokens.
    let setup = Instant::now();
    let tokens = storm::mint_tokens(&admin, "storm", n, a.parallel).await;
    eprintln!(
        "setup: {n} tokens in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    // The controller: a child process (its own CPU time and peak RSS). On testkube it
    // authenticates with its own token, so its requests are counted apart.
    let controller_kubeconfig = match &cluster {
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
            path
        }
        None => admin_path.clone(),
    };
    let exe = std::env::current_exe().expect("own path");
    let mut command = std::process::Command::new(exe);
    command
        .arg("--controller-child")
        .arg(&controller_kubeconfig);
    if let Some(c) = a.concurrency {
        command.arg("--concurrency").arg(c.to_string());
    }
    let mut started = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("controller child starts");
    let stdout = started.stdout.take().expect("child stdout");
    let (line, reader) = tokio::task::spawn_blocking(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).map(|_| (line, reader))
    })
    .await
    .expect("reader")
    .expect("read the child's ready line");
    assert_eq!(line.trim(), "ready", "the controller child did not start");
    let cpu_at_start = cpu_time(started.id());
    let mut child = Some((started, reader));
    if let Some(c) = &cluster {
        c.counters().reset();
    }
    // On a real cluster, the API server's own account of the storm: its metrics now and
    // after.
    let served_before = if cluster.is_none() {
        api_server_metrics(&admin).await
    } else {
        None
    };
    // A control plane running on this machine (kube-controller-manager's command name is
    // cut to 15 characters by the kernel).
    const CONTROL_PLANE: &[&str] = &["etcd", "kube-apiserver", "kube-controller"];
    let control_plane_before = if cluster.is_none() {
        storm::cpu_by_command(CONTROL_PLANE)
    } else {
        BTreeMap::new()
    };
    // This process: testkube, the simulated kubelets and the watchers timing them.
    let own_cpu_at_start = cpu_time(std::process::id());

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
    let served_after = if served_before.is_some() {
        api_server_metrics(&admin).await
    } else {
        None
    };
    let control_plane_cpu: BTreeMap<String, f64> = storm::cpu_by_command(CONTROL_PLANE)
        .into_iter()
        .filter_map(|(k, after)| {
            let before = control_plane_before.get(&k)?;
            Some((k, after.saturating_sub(*before).as_secs_f64()))
        })
        .collect();

    // Figures.
    let own_cpu = cpu_time(std::process::id())
        .zip(own_cpu_at_start)
        .map(|(after, before)| after.saturating_sub(before));
    let storm_cpu = child
        .as_ref()
        .and_then(|(ch, _)| cpu_time(ch.id()))
        .zip(cpu_at_start)
        .map(|(after, before)| after.saturating_sub(before));
    if a.show_slowest > 0 {
        // When in the storm the slowest approvals started: a tail at the start is the
        // first burst; one spread out is load.
        let created = created.lock().unwrap();
        let approved = approved.lock().unwrap();
        let mut slow: Vec<(Duration, Duration, &String)> = approved
            .iter()
            .filter_map(|(k, t)| {
                let c = created.get(k)?;
                Some((
                    t.saturating_duration_since(*c),
                    c.saturating_duration_since(start),
                    k,
                ))
            })
            .collect();
        slow.sort();
        eprintln!("slowest CSR -> Approved:");
        for (latency, at, name) in slow.iter().rev().take(a.show_slowest) {
            eprintln!(
                "  {name}  created {:.3} s into the storm, approved {:.0} ms later",
                at.as_secs_f64(),
                latency.as_secs_f64() * 1000.0
            );
        }
    }
    let csr_lat = storm::latencies(&created, &approved);
    let node_lat = storm::latencies(&registered, &flavored);
    let first = created.lock().unwrap().values().min().copied().unwrap();
    let last_ok = approved.lock().unwrap().values().max().copied().unwrap();
    // One lock for both (a guard in the literal below would live to its end).
    let (early, late) = {
        let approved = approved.lock().unwrap();
        (
            window_rate(&approved, 0.1, 0.2),
            window_rate(&approved, 0.8, 0.9),
        )
    };
    let mut report = Report {
        cluster: if cluster.is_some() {
            "testkube"
        } else {
            "kubeconfig"
        },
        nodes: n,
        in_flight: a.parallel,
        concurrency: a.concurrency.unwrap_or(Options::new("", "").concurrency),
        total_s: total.as_secs_f64(),
        approvals_per_s: n as f64 / last_ok.saturating_duration_since(first).as_secs_f64(),
        approvals_per_s_early: early,
        approvals_per_s_late: late,
        csr_approved_p50_ms: ms_f(percentile(&csr_lat, 0.5)),
        csr_approved_p99_ms: ms_f(percentile(&csr_lat, 0.99)),
        csr_approved_max_ms: ms_f(percentile(&csr_lat, 1.0)),
        node_flavored_p50_ms: ms_f(percentile(&node_lat, 0.5)),
        node_flavored_p99_ms: ms_f(percentile(&node_lat, 0.99)),
        writes_per_join: None,
        reads_per_join: None,
        controller_cpu_ms_per_join: storm_cpu.map(|c| c.as_secs_f64() * 1000.0 / n as f64),
        requests_per_join: None,
        in_process_cpu_us_per_request: None,
        controller_peak_rss_mib: None,
        idle_cpu_ms_per_min: None,
        waited: BTreeMap::new(),
        conflicts: BTreeMap::new(),
        errors: BTreeMap::new(),
        api_server: BTreeMap::new(),
        etcd: BTreeMap::new(),
        priority_wait: BTreeMap::new(),
        control_plane_cores: control_plane_cpu
            .into_iter()
            .map(|(k, cpu)| (k, cpu / total.as_secs_f64()))
            .collect(),
    };
    // Beside it, on the same cores: the kubelets and the controller.
    if !report.control_plane_cores.is_empty() {
        for (k, cpu) in [
            ("join_storm (the kubelets)", own_cpu),
            ("kubeflavor controller", storm_cpu),
        ] {
            if let Some(cpu) = cpu {
                report
                    .control_plane_cores
                    .insert(k.into(), cpu.as_secs_f64() / total.as_secs_f64());
            }
        }
    }
    if let (Some(before), Some(after)) = (&served_before, &served_after) {
        let per = |name: &str, keys: &[&str], min_per_join: f64| {
            let (b, a) = (
                storm::histograms_by(before, name, keys),
                storm::histograms_by(after, name, keys),
            );
            a.iter()
                .map(|(k, h)| (k.clone(), h.since(&b.get(k).cloned().unwrap_or_default())))
                .filter(|(_, h)| h.count as f64 / n as f64 >= min_per_join)
                .map(|(k, h)| (k.trim().to_string(), Served::of(&h, n)))
                .collect::<BTreeMap<_, _>>()
        };
        report.api_server = per(
            "apiserver_request_duration_seconds",
            &["verb", "resource", "subresource"],
            0.5,
        );
        report.etcd = per(
            "etcd_request_duration_seconds",
            &["operation", "resource"],
            0.5,
        );
        report.priority_wait = per(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            &["priority_level", "execute"],
            0.5,
        );
    }
    let mut by_request: Vec<(String, BTreeMap<String, u64>)> = Vec::new();
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
        let requests = snap.total();
        report.requests_per_join = Some(requests as f64 / n as f64);
        report.in_process_cpu_us_per_request =
            own_cpu.map(|c| c.as_secs_f64() * 1e6 / requests.max(1) as f64);
        report.writes_per_join = Some(writes.values().sum::<u64>() as f64 / n as f64);
        report.reads_per_join = Some(reads.values().sum::<u64>() as f64 / n as f64);
        by_request = vec![("writes".into(), writes), ("reads".into(), reads)];
    }

    // Steady state: no joins, the controller holding every node.
    let idle_pid = child.as_ref().map(|(ch, _)| ch.id());
    if a.idle_seconds > 0
        && let Some(idle_pid) = idle_pid
        && let Some(before) = cpu_time(idle_pid)
    {
        eprintln!(
            "steady state: measuring the controller's CPU for {} s with no joins",
            a.idle_seconds
        );
        let idle = Duration::from_secs(a.idle_seconds);
        tokio::time::sleep(idle).await;
        if let Some(after) = cpu_time(idle_pid) {
            let used = after.saturating_sub(before).as_secs_f64() * 1000.0;
            report.idle_cpu_ms_per_min = Some(used * 60.0 / idle.as_secs_f64());
        }
    }

    // Stop the controller and read what it waited on.
    let metrics_text = match child.take() {
        Some((mut ch, reader)) => {
            report.controller_peak_rss_mib = vm_hwm_kib(ch.id()).map(|k| k as f64 / 1024.0);
            drop(ch.stdin.take());
            let text = tokio::task::spawn_blocking(move || {
                let mut text = String::new();
                let mut reader = reader;
                let _ = std::io::Read::read_to_string(&mut reader, &mut text);
                text
            })
            .await
            .unwrap_or_default();
            let _ = ch.wait();
            text
        }
        None => String::new(),
    };
    for controller in ["csr", "node"] {
        for stage in ["queue", "read", "write"] {
            let h = storm::histogram(
                &metrics_text,
                "kubeflavor_stage_duration_seconds",
                &format!("controller=\"{controller}\",stage=\"{stage}\""),
            );
            report.waited.insert(
                format!("{controller}_{stage}"),
                Waited {
                    ms_per_join: h.sum * 1000.0 / n as f64,
                    count_per_join: h.count as f64 / n as f64,
                    p99_ms_at_most: h.quantile(0.99) * 1000.0,
                },
            );
        }
    }
    report.conflicts = storm::counter_series(&metrics_text, "kubeflavor_reconcile_conflicts_total");
    report.errors = storm::counter_series(&metrics_text, "kubeflavor_reconcile_errors_total");

    print_report(&report, &by_request);
    let line = serde_json::to_string(&report).expect("figures serialize");
    println!("{line}");
    if let Some(path) = &a.record {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open --record file");
        writeln!(f, "{line}").expect("append to --record file");
    }
    match cluster {
        None => storm::clean_up(&admin, "storm", "storm-").await,
        // Stopped and dropped here, not left to end on its own: freeing a 100,000-node
        // store takes seconds of CPU, which would otherwise fall into the next storm of a
        // --baseline run.
        Some(cluster) => cluster.shutdown().await,
    }
    report
}

/// Time a loop spent in one stage, per join.
#[derive(serde::Serialize)]
struct Waited {
    /// Milliseconds in this stage, summed over the run, per join.
    ms_per_join: f64,
    /// Times this stage was entered, per join.
    count_per_join: f64,
    /// The 99th percentile of one stay, as the upper bound of its histogram bucket.
    p99_ms_at_most: f64,
}

/// One run's figures: printed as a table and as one JSON line.
#[derive(serde::Serialize)]
struct Report {
    cluster: &'static str,
    nodes: usize,
    in_flight: usize,
    concurrency: u16,
    total_s: f64,
    approvals_per_s: f64,
    /// Approvals/s over the second tenth of the storm's approvals (ramp-up excluded) and
    /// over the ninth (the store holding nearly every node, the tail excluded): measured in
    /// one run, a machine that speeds up or slows down between runs moves both alike, so
    /// `late / early` shows whether a join costs more as the store fills.
    approvals_per_s_early: f64,
    approvals_per_s_late: f64,
    csr_approved_p50_ms: f64,
    csr_approved_p99_ms: f64,
    csr_approved_max_ms: f64,
    node_flavored_p50_ms: f64,
    node_flavored_p99_ms: f64,
    /// Controller API writes and reads per join (testkube only: it counts requests).
    writes_per_join: Option<f64>,
    reads_per_join: Option<f64>,
    controller_cpu_ms_per_join: Option<f64>,
    /// Requests testkube served per join, from every client (testkube only).
    requests_per_join: Option<f64>,
    /// This process's CPU (testkube, the simulated kubelets and the watchers that time
    /// them) per request testkube served, in microseconds (testkube only).
    in_process_cpu_us_per_request: Option<f64>,
    controller_peak_rss_mib: Option<f64>,
    /// The controller's CPU with no joins, in ms per minute.
    idle_cpu_ms_per_min: Option<f64>,
    /// Per `<loop>_<stage>`: what the controller waited on.
    waited: BTreeMap<String, Waited>,
    /// Writes that lost an optimistic-concurrency race and were decided again, by loop
    /// and stage.
    conflicts: BTreeMap<String, u64>,
    /// Failed reconciles (retried), by loop and stage.
    errors: BTreeMap<String, u64>,
    /// On a real cluster, from the API server's metrics over the storm: the requests it
    /// served by verb, resource and subresource (`apiserver_request_duration_seconds`),
    /// its etcd requests by operation and type (`etcd_request_duration_seconds`), and the
    /// time requests waited in API Priority and Fairness queues by priority level
    /// (`apiserver_flowcontrol_request_wait_duration_seconds`); those seen at least once
    /// per two joins.
    api_server: BTreeMap<String, Served>,
    etcd: BTreeMap<String, Served>,
    priority_wait: BTreeMap<String, Served>,
    /// The cores a control plane running on this machine used during the storm, by
    /// process (etcd, kube-apiserver, kube-controller-manager), and beside it the
    /// simulated kubelets and the controller: CPU time over the storm's.
    control_plane_cores: BTreeMap<String, f64>,
}

/// Requests of one kind as a server measured them.
#[derive(serde::Serialize)]
struct Served {
    count_per_join: f64,
    mean_ms: f64,
    /// The upper bound of the histogram bucket holding the 99th percentile.
    p99_ms_at_most: f64,
}

impl Served {
    fn of(h: &storm::Histogram, joins: usize) -> Self {
        Served {
            count_per_join: h.count as f64 / joins as f64,
            mean_ms: h.sum * 1000.0 / h.count.max(1) as f64,
            p99_ms_at_most: h.quantile(0.99) * 1000.0,
        }
    }
}

/// The API server's metrics (`GET /metrics`), or `None` when it serves none to this user
/// (testkube serves none).
async fn api_server_metrics(admin: &kube::Client) -> Option<String> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    admin.request_text(request).await.ok()
}

/// Approvals per second between the `from` and `to` fractions of the approvals, in the
/// order they happened.
fn window_rate<K>(approved: &std::collections::HashMap<K, Instant>, from: f64, to: f64) -> f64 {
    let mut times: Vec<Instant> = approved.values().copied().collect();
    times.sort();
    let n = times.len();
    let (a, b) = (
        (n as f64 * from) as usize,
        ((n as f64 * to) as usize).min(n.saturating_sub(1)),
    );
    if b <= a {
        return f64::NAN;
    }
    (b - a) as f64 / times[b].saturating_duration_since(times[a]).as_secs_f64()
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_report(r: &Report, by_request: &[(String, BTreeMap<String, u64>)]) {
    let n = r.nodes as f64;
    println!(
        "join-storm: {} joins, {} in flight, controller concurrency {} ({})",
        r.nodes, r.in_flight, r.concurrency, r.cluster
    );
    println!("  total time              {:.2} s", r.total_s);
    println!("  approvals/s             {:.0}", r.approvals_per_s);
    println!(
        "  approvals/s in tenths   {:.0} in the 2nd, {:.0} in the 9th ({:.0} %: the store nearly full against nearly empty)",
        r.approvals_per_s_early,
        r.approvals_per_s_late,
        r.approvals_per_s_late / r.approvals_per_s_early * 100.0
    );
    println!(
        "  CSR -> Approved         p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        r.csr_approved_p50_ms, r.csr_approved_p99_ms, r.csr_approved_max_ms
    );
    println!(
        "  Node -> flavored        p50 {:.1} ms  p99 {:.1} ms",
        r.node_flavored_p50_ms, r.node_flavored_p99_ms
    );
    for (what, counts) in by_request {
        let total: u64 = counts.values().sum();
        println!("  controller {what}/join   {:.2}", total as f64 / n);
        for (k, v) in counts {
            println!("    {k:<48} {:.2}", *v as f64 / n);
        }
    }
    if let Some(c) = r.controller_cpu_ms_per_join {
        println!("  controller CPU/join     {c:.2} ms (user+system during the storm)");
    }
    if let (Some(q), Some(c)) = (r.requests_per_join, r.in_process_cpu_us_per_request) {
        println!("  testkube requests/join  {q:.2} (every client)");
        println!("  in-process CPU/request  {c:.0} us (testkube and the simulated kubelets)");
    }
    if let Some(m) = r.controller_peak_rss_mib {
        println!(
            "  controller peak RSS     {m:.1} MiB (VmHWM, {} flavored nodes)",
            r.nodes
        );
    }
    if let Some(i) = r.idle_cpu_ms_per_min {
        println!(
            "  steady state CPU        {i:.1} ms per minute (no joins, {} nodes)",
            r.nodes
        );
    }
    println!(
        "  what the controller waited on, per join (ms in stage, times entered, p99 of one stay):"
    );
    for (k, w) in &r.waited {
        println!(
            "    {k:<14} {:>8.2} ms  {:>5.2}x  p99 <= {:.0} ms",
            w.ms_per_join, w.count_per_join, w.p99_ms_at_most
        );
    }
    for (title, served) in [
        (
            "what the API server served during the storm, per join (its metrics: count, mean, p99):",
            &r.api_server,
        ),
        ("its etcd requests, per join:", &r.etcd),
        (
            "time requests waited for a seat (API Priority and Fairness), by priority level:",
            &r.priority_wait,
        ),
    ] {
        if served.is_empty() {
            continue;
        }
        println!("  {title}");
        let mut rows: Vec<_> = served.iter().collect();
        rows.sort_by(|a, b| {
            (b.1.mean_ms * b.1.count_per_join).total_cmp(&(a.1.mean_ms * a.1.count_per_join))
        });
        for (k, s) in rows {
            println!(
                "    {k:<48} {:>5.2}x  mean {:>7.1} ms  p99 <= {:.0} ms",
                s.count_per_join, s.mean_ms, s.p99_ms_at_most
            );
        }
    }
    if !r.control_plane_cores.is_empty() {
        println!(
            "  cores used during the storm, by process ({} cores here):",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        for (k, cores) in &r.control_plane_cores {
            println!("    {k:<48} {cores:.2} cores");
        }
    }
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    println!(
        "  conflicts (decided again) {}  {:?}",
        total(&r.conflicts),
        r.conflicts
    );
    println!(
        "  errors (retried)          {}  {:?}",
        total(&r.errors),
        r.errors
    );
}
