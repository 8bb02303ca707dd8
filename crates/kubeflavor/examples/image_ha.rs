//! image_ha: the controller image run as the installed Deployment runs it, two replicas as
//! containers against a real cluster, with real faults.
//!
//!     bash image/build
//!     cargo run -p kubeflavor --example image_ha -- --kubeconfig admin.kubeconfig
//!
//! Each replica gets in-cluster configuration as a pod does: a token from a TokenRequest
//! for the ServiceAccount `install --apply` created (so install's RBAC is what is tested),
//! the cluster's CA and the namespace under /var/run/secrets/kubernetes.io/serviceaccount,
//! and KUBERNETES_SERVICE_HOST/PORT. Its arguments and environment are the Deployment's.
//! The replicas live on a Docker network of their own whose gateway is the API server's
//! service address (10.96.0.1, which kubeadm-made serving certificates name); a relay on
//! that address forwards to the API server, so a replica cut off that network cannot
//! reach the API server at all.
//!
//! 1. The image is inspected: user, entrypoint, size, the files it holds.
//! 2. Both replicas start; one takes the Lease.
//! 3. A storm of joins; mid-storm the leader's container is killed; the other takes over.
//! 4. The killed replica starts again; a second storm; mid-storm the leader is disconnected
//!    from the network without being stopped; the other takes over.
//! 5. The cut-off replica is reconnected: it started no API write after its term ended
//!    (its own counters, read over HTTP) and stays a follower.
//! 6. Every join is checked: exactly one approval, a certificate, exactly one binding to
//!    its own token, the token's record naming the node until the used-up token is
//!    retired, the Node flavored.
//! 7. The authorization webhook (`install --authz-webhook`, its Secret's files mounted where
//!    the pod has them): one node is revoked, and each replica, leader and standby alike,
//!    answers a SubjectAccessReview of that node with a denial (client certificate as the
//!    API server's) and one of another node with no opinion.
//!
//! It prints the takeover times, joins, approvals and bindings, and each replica's peak
//! RSS, then removes everything it created. Exit status 0 only if every check held.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{DeleteParams, ListParams};
use kube::config::Kubeconfig;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflavor_cluster::crd::{Flavor, FlavorBinding};
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::BOUND_NODES_ANNOTATION;
use kubeflavor_core::token::secret::{TOKEN_SECRET_NAMESPACE, secret_name};
use serde_json::Value;
use tokio::sync::watch;

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "../tests/support/portal.rs"]
mod portal;
#[path = "support/storm.rs"]
mod storm;
#[path = "../tests/support/webhook_pki.rs"]
mod webhook_pki;

use storm::{Times, ms, percentile};

/// The controller's namespace (install's default).
const NAMESPACE: &str = "kubeflavor";
/// Where a pod finds its ServiceAccount's files.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How long a phase's joins may take, takeover included.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a replica may take to answer /healthz after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// image_ha: two controller replicas from the image, a storm of joins, a killed leader and
/// a cut-off leader; checks takeover, fencing and every join.
#[derive(Debug, Parser)]
#[command(
    name = "image_ha",
    after_help = "Run: cargo run -p kubeflavor --example image_ha -- --kubeconfig FILE"
)]
struct Args {
    /// The cluster (an admin kubeconfig whose server is on this machine's loopback).
    #[arg(long, value_name = "FILE")]
    kubeconfig: String,
    /// The controller image [default: the image `kubeflavor install` names].
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// Joins per storm (two storms run).
    #[arg(long, value_name = "N", default_value_t = 24, value_parser = args::at_least_one)]
    joins: usize,
    /// Joins in flight at once.
    #[arg(long, value_name = "N", default_value_t = 6, value_parser = args::at_least_one)]
    parallel: usize,
    /// The API server's address as pods see it; the serving certificate must name it.
    #[arg(long, value_name = "IP", default_value = "10.96.0.1")]
    service_ip: Ipv4Addr,
    /// The /24 network (its .1 is --service-ip) the replicas live on.
    #[arg(long, value_name = "CIDR", default_value = "10.96.0.0/24")]
    subnet: String,
}

/// Runs `docker` and returns its trimmed standard output; panics with its error output.
fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "docker {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The Deployment's controller container, as `kubeflavor install` prints it.
async fn installed_container(image: Option<&str>) -> Value {
    let mut argv = vec!["kubeflavor", "install", "--authz-webhook"];
    if let Some(image) = image {
        argv.extend(["--image", image]);
    }
    let mut out = Vec::new();
    kubeflavor::run(argv, &mut out)
        .await
        .expect("install prints");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out).expect("UTF-8")).expect("YAML");
    let deployment = docs
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("install prints a Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0].clone()
}

/// Step 1: what the image is, and that it holds nothing but the binary.
fn inspect_image(image: &str) -> u64 {
    let config: Value = serde_json::from_str(&docker(&["image", "inspect", image]))
        .expect("docker image inspect prints JSON");
    let config = &config[0];
    let user = config["Config"]["User"].as_str().unwrap_or_default();
    let entrypoint = &config["Config"]["Entrypoint"];
    let size = config["Size"].as_u64().unwrap_or_default();
    let labels = &config["Config"]["Labels"];
    let created = docker(&["create", image]);
    let listing = Command::new("sh")
        .arg("-c")
        .arg(format!("docker export {created} | tar -t"))
        .output()
        .expect("docker export runs");
    docker(&["rm", &created]);
    let files: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        // Docker adds these to every container's filesystem.
        .filter(|f| {
            !matches!(
                f.trim_end_matches('/'),
                ".dockerenv"
                    | "dev"
                    | "dev/console"
                    | "dev/pts"
                    | "dev/shm"
                    | "etc"
                    | "etc/hostname"
                    | "etc/hosts"
                    | "etc/mtab"
                    | "etc/resolv.conf"
                    | "proc"
                    | "sys"
            )
        })
        .map(str::to_string)
        .collect();
    println!("image {image}");
    println!("  user         {user}");
    println!("  entrypoint   {entrypoint}");
    println!("  size         {:.1} MB ({size} bytes)", size as f64 / 1e6);
    println!("  files        {}", files.join(" "));
    for key in [
        "org.opencontainers.image.source",
        "org.opencontainers.image.version",
        "org.opencontainers.image.licenses",
    ] {
        println!("  {key:<34} {}", labels[key].as_str().unwrap_or("(none)"));
    }
    assert!(
        user.split(':')
            .next()
            .is_some_and(|u| u != "0" && !u.is_empty() && u != "root"),
        "the image runs as a non-root user, not {user:?}"
    );
    assert_eq!(entrypoint, &serde_json::json!(["/kubeflavor"]));
    assert_eq!(files, ["kubeflavor"], "the image holds only the binary");
    size
}

/// Forwards every connection to `listen` on to `upstream`, until dropped.
async fn relay(listen: SocketAddr, upstream: SocketAddr) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .unwrap_or_else(|e| panic!("relay cannot listen on {listen}: {e}"));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

/// The Lease as last seen: holder, renew time and acquire time.
#[derive(Clone, Debug, Default)]
struct Holder {
    identity: String,
    renewed: Option<SystemTime>,
    acquired: Option<SystemTime>,
}

fn system_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(t.0.as_nanosecond().max(0) as u64)
}

/// Publishes every change of the Lease.
fn observe_lease(api: Api<Lease>, name: &str) -> watch::Receiver<Holder> {
    let (tx, rx) = watch::channel(Holder::default());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let stream = watcher(api, config).applied_objects();
        futures::pin_mut!(stream);
        while let Some(lease) = stream.next().await {
            let Ok(lease) = lease else { continue };
            let spec = lease.spec.unwrap_or_default();
            let holder = Holder {
                identity: spec.holder_identity.unwrap_or_default(),
                renewed: spec.renew_time.as_ref().map(system_time),
                acquired: spec.acquire_time.as_ref().map(system_time),
            };
            if tx.send(holder).is_err() {
                return;
            }
        }
    });
    rx
}

/// One replica: a container named like the pod it stands for.
struct Replica {
    name: String,
}

impl Replica {
    fn start(name: &str, run: &[String]) -> Replica {
        let mut argv: Vec<&str> = vec!["run", "-d", "--name", name];
        argv.extend(run.iter().map(String::as_str));
        let argv: Vec<String> = argv
            .into_iter()
            .map(|a| a.replace("{POD_NAME}", name))
            .collect();
        docker(&argv.iter().map(String::as_str).collect::<Vec<_>>());
        Replica { name: name.into() }
    }

    fn ip(&self, network: &str) -> Option<String> {
        let ip = docker(&[
            "inspect",
            "-f",
            &format!(
                "{{{{with index .NetworkSettings.Networks \"{network}\"}}}}{{{{.IPAddress}}}}{{{{end}}}}"
            ),
            &self.name,
        ]);
        (!ip.is_empty()).then_some(ip)
    }

    fn running(&self) -> bool {
        docker(&["inspect", "-f", "{{.State.Running}}", &self.name]) == "true"
    }

    fn peak_rss_mib(&self) -> Option<f64> {
        let pid: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", &self.name])
            .parse()
            .ok()?;
        storm::vm_hwm_kib(pid).map(|kib| kib as f64 / 1024.0)
    }

    /// GET `path` on the replica's HTTP port; None while it does not answer.
    async fn get(&self, network: &str, port: u16, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ip = self.ip(network)?;
        let connect = tokio::net::TcpStream::connect(format!("{ip}:{port}"));
        let mut stream = tokio::time::timeout(Duration::from_secs(2), connect)
            .await
            .ok()?
            .ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
            .await
            .ok()?
            .ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n")?.1.to_string();
        Some((status, body))
    }

    /// Waits until the replica answers `path` with 200.
    async fn until_ok(&self, network: &str, port: u16, path: &str) {
        let deadline = Instant::now() + START_TIMEOUT;
        while self.get(network, port, path).await.map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "{} did not answer {path} within {START_TIMEOUT:?}; docker logs {}:\n{}",
                self.name,
                self.name,
                logs(&self.name)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One metric's value from the replica's /metrics.
    async fn metric(&self, network: &str, port: u16, name: &str) -> Option<f64> {
        let (_, body) = self.get(network, port, "/metrics").await?;
        body.lines()
            .find(|l| l.split_whitespace().next() == Some(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }
}

fn logs(name: &str) -> String {
    Command::new("docker")
        .args(["logs", "--tail", "40", name])
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default()
}

/// What one run creates, for the checks and for clean-up.
struct Run {
    prefix: String,
    flavor: String,
    network: String,
    dir: tempfile::TempDir,
    replicas: Vec<String>,
    nodes: Vec<String>,
    tokens: Vec<String>,
}

/// Waits until the Lease is held by someone other than `not` (a replica of this run).
async fn next_holder(rx: &mut watch::Receiver<Holder>, prefix: &str, not: &str) -> Holder {
    let changed = rx.wait_for(|h| h.identity.starts_with(prefix) && h.identity != not);
    tokio::time::timeout(Duration::from_secs(120), changed)
        .await
        .unwrap_or_else(|_| panic!("no replica took the Lease over from {not:?} within 120 s"))
        .expect("lease observer")
        .clone()
}

/// The storms' shared state: where joins go, how many at once, and their times.
struct Joins<'a> {
    admin_yaml: &'a str,
    csrs: Api<CertificateSigningRequest>,
    parallel: usize,
    fault_after: usize,
    created: Times,
    approved: Times,
    registered: Times,
}

impl Joins<'_> {
    /// One storm: `joins` (node and token), `parallel` at a time; once `fault_after` have
    /// completed, `fault` runs, concurrently with the rest of the storm. Returns what the
    /// fault returned once both are done.
    async fn with_fault<T>(
        &self,
        joins: Vec<(String, BootstrapToken)>,
        fault: impl std::future::Future<Output = T>,
    ) -> T {
        let (done_tx, mut done_rx) = watch::channel(0usize);
        let done_tx = Arc::new(done_tx);
        let storm = futures::stream::iter(joins)
            .map(|(node, token)| {
                let done_tx = done_tx.clone();
                async move {
                    storm::join(
                        self.admin_yaml,
                        &self.csrs,
                        &token,
                        &node,
                        &self.created,
                        &self.registered,
                    )
                    .await;
                    done_tx.send_modify(|n| *n += 1);
                }
            })
            .buffer_unordered(self.parallel)
            .collect::<Vec<()>>();
        let fault = async {
            let _ = done_rx.wait_for(|n| *n >= self.fault_after).await;
            fault.await
        };
        let (_, outcome) =
            tokio::time::timeout(PHASE_TIMEOUT, async { tokio::join!(storm, fault) })
                .await
                .unwrap_or_else(|_| panic!("a storm did not complete within {PHASE_TIMEOUT:?}"));
        outcome
    }
}

/// A fault done to the leader.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `docker kill`: the process dies without releasing the Lease.
    Kill,
    /// `docker network disconnect`: the process runs on, unable to reach the API server.
    CutOff,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::CutOff => "cut-off",
        }
    }
}

/// A fault and the takeover that followed it.
struct Takeover {
    fault: Fault,
    at: SystemTime,
    /// The Lease just before the fault, and once another replica held it.
    before: Holder,
    after: Holder,
}

impl Takeover {
    fn acquired(&self) -> SystemTime {
        self.after
            .acquired
            .expect("a held Lease has an acquire time")
    }
    fn since_fault(&self) -> Duration {
        since(self.acquired(), self.at)
    }
    fn since_renewal(&self) -> Duration {
        since(
            self.acquired(),
            self.before.renewed.expect("a held Lease has a renew time"),
        )
    }
}

/// The two replicas, their network and the Lease they compete for.
struct Replicas {
    network: String,
    prefix: String,
    http_port: u16,
    by_name: HashMap<String, Replica>,
    holder: watch::Receiver<Holder>,
}

impl Replicas {
    fn get(&self, name: &str) -> &Replica {
        &self.by_name[name]
    }

    /// Waits until the replica `name` answers `path` with 200.
    async fn until_ok(&self, name: &str, path: &str) {
        self.get(name)
            .until_ok(&self.network, self.http_port, path)
            .await;
    }

    async fn metric(&self, name: &str, metric: &str) -> f64 {
        self.get(name)
            .metric(&self.network, self.http_port, metric)
            .await
            .unwrap_or_else(|| panic!("{name} serves {metric}"))
    }

    /// Does `fault` to the leader `leader` and waits until another replica holds the Lease.
    async fn fault(&self, leader: &str, fault: Fault) -> Takeover {
        let before = self.holder.borrow().clone();
        match fault {
            Fault::Kill => docker(&["kill", leader]),
            Fault::CutOff => docker(&["network", "disconnect", "--force", &self.network, leader]),
        };
        let at = SystemTime::now();
        println!("{}: the leader {leader}", fault.name());
        let after = next_holder(&mut self.holder.clone(), &self.prefix, leader).await;
        println!(
            "  {} took over {} after the fault ({} after the last renewal)",
            after.identity,
            secs(since(after.acquired.unwrap_or(at), at)),
            secs(since(
                after.acquired.unwrap_or(at),
                before.renewed.unwrap_or(at)
            )),
        );
        Takeover {
            fault,
            at,
            before,
            after,
        }
    }
}

fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let a = args::parse_or_exit::<Args>();
    let admin_yaml = std::fs::read_to_string(&a.kubeconfig).expect("read --kubeconfig");
    let admin = storm::client_from(&admin_yaml).await;
    let prefix = format!("kf-ha-{}", std::process::id());
    let run = Run {
        flavor: prefix.clone(),
        network: prefix.clone(),
        dir: tempfile::tempdir().expect("temp dir"),
        replicas: Vec::new(),
        nodes: (0..2 * a.joins)
            .map(|i| format!("{prefix}-{i:03}"))
            .collect(),
        tokens: Vec::new(),
        prefix,
    };
    let mut run = run;
    let outcome = std::panic::AssertUnwindSafe(exercise(&a, &admin, &admin_yaml, &mut run))
        .catch_unwind()
        .await;
    clean_up(&admin, &run).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    println!("image_ha: every check held; everything it created is removed");
}

async fn exercise(a: &Args, admin: &Client, admin_yaml: &str, run: &mut Run) {
    let container = installed_container(a.image.as_deref()).await;
    let image = container["image"].as_str().expect("image").to_string();
    let image_size = inspect_image(&image);
    let sa_dir = service_account_files(admin, admin_yaml, run).await;
    let authz = AuthzPki::write(&run.dir.path().join("authz"));

    // The network, and the relay from the service address to the API server.
    let upstream = api_server_address(admin_yaml);
    docker(&[
        "network",
        "create",
        "--subnet",
        &a.subnet,
        "--gateway",
        &a.service_ip.to_string(),
        &run.network,
    ]);
    let _relay = relay(SocketAddr::from((a.service_ip, upstream.port())), upstream).await;

    // Step 2: both replicas start, one takes the Lease.
    let mut replicas = start_replicas(
        a,
        admin,
        run,
        &container,
        &[(&sa_dir, SA_DIR), (&authz.dir, authz_mount(&container))],
        upstream.port(),
    )
    .await;
    let first = next_holder(&mut replicas.holder, &run.prefix, "").await;
    replicas.until_ok(&first.identity, "/readyz").await;
    println!("lease taken by {}", first.identity);

    // The storms' flavor and tokens.
    storm::create_flavor(admin, &run.flavor).await;
    let tokens = storm::mint_tokens(admin, &run.flavor, 2 * a.joins, a.parallel).await;
    run.tokens = tokens.iter().map(|t| secret_name(t.id())).collect();
    let token_of: BTreeMap<String, String> = run
        .nodes
        .iter()
        .cloned()
        .zip(tokens.iter().map(|t| t.id().to_string()))
        .collect();
    let mut first_storm: Vec<(String, BootstrapToken)> =
        run.nodes.iter().cloned().zip(tokens).collect();
    let second_storm = first_storm.split_off(a.joins);
    let joins = Joins {
        admin_yaml,
        csrs: Api::all(admin.clone()),
        parallel: a.parallel,
        fault_after: (a.joins / 4).max(1),
        created: Times::default(),
        approved: Times::default(),
        registered: Times::default(),
    };
    let all_approved = storm::record_first(
        joins.csrs.clone(),
        joins.approved.clone(),
        2 * a.joins,
        storm::is_approved,
    );

    // Step 3: kill the leader mid-storm, then start it again (a follower now).
    let killed = joins
        .with_fault(first_storm, replicas.fault(&first.identity, Fault::Kill))
        .await;
    docker(&["start", &first.identity]);
    replicas.until_ok(&first.identity, "/healthz").await;
    println!("restarted {}", first.identity);

    // Step 4: cut the new leader off mid-storm; it keeps running.
    let leader = killed.after.identity.clone();
    let writes_before_cut = replicas
        .metric(&leader, "kubeflavor_api_writes_total")
        .await;
    let cut = joins
        .with_fault(second_storm, replicas.fault(&leader, Fault::CutOff))
        .await;
    assert!(
        replicas.get(&leader).running(),
        "the cut-off replica {leader} kept running through its partition"
    );

    // Step 5: reconnected, the cut-off replica wrote nothing after its term.
    docker(&["network", "connect", &run.network, &leader]);
    let writes = fenced(&replicas, &leader, &cut, writes_before_cut).await;

    // Step 6: every join, once.
    let _ = tokio::time::timeout(Duration::from_secs(60), all_approved).await;
    let check = check_joins(admin, run, &token_of).await;
    assert_eq!(
        replicas.holder.borrow().identity,
        cut.after.identity,
        "the Lease stayed with the replica that took over"
    );
    assert_eq!(
        replicas
            .metric(&leader, "kubeflavor_api_writes_total")
            .await,
        writes,
        "the reconnected replica wrote nothing while a follower"
    );

    // Step 7: every replica cuts a revoked node off.
    let cut_off = every_replica_cuts_off(
        &replicas,
        run,
        &authz,
        authz_port(&container),
        &run.nodes[0],
        &run.nodes[1],
    )
    .await;

    let lease = lease_duration(&container);
    let bound = takeover_bound(lease);
    for takeover in [&killed, &cut] {
        assert!(
            takeover.since_renewal() <= bound,
            "after the {}, the standby took over {} after the last renewal, later than the lease duration and two retry periods and rounds ({})",
            takeover.fault.name(),
            secs(takeover.since_renewal()),
            secs(bound)
        );
    }
    println!(
        "image_ha: 2 replicas of {image} ({:.1} MB), lease {}",
        image_size as f64 / 1e6,
        secs(lease)
    );
    for takeover in [&killed, &cut] {
        println!(
            "  takeover after {:<8}     {} ({} after the last renewal)",
            takeover.fault.name(),
            secs(takeover.since_fault()),
            secs(takeover.since_renewal())
        );
    }
    println!(
        "  joins completed           {} of {}",
        check.joined,
        2 * a.joins
    );
    println!(
        "  approvals / bindings      {} / {}",
        check.approvals, check.bindings
    );
    let csr_lat = storm::latencies(&joins.created, &joins.approved);
    println!(
        "  CSR -> Approved           p50 {}  p99 {}  max {}",
        ms(percentile(&csr_lat, 0.5)),
        ms(percentile(&csr_lat, 0.99)),
        ms(csr_lat.last().copied().unwrap_or_default())
    );
    for (name, after) in &cut_off {
        println!(
            "  webhook of {name:<18} denied the revoked node {} after 'node revoke'; no opinion on another",
            ms(*after)
        );
    }
    for name in &run.replicas {
        if let Some(rss) = replicas.get(name).peak_rss_mib() {
            println!("  peak RSS {name:<20} {rss:.1} MiB");
        }
    }
}

/// Installs the controller's objects (`install --apply`, no replicas: these containers are
/// the replicas) and writes the files a pod of its ServiceAccount gets, readable by the
/// image's user: a token from a TokenRequest, the cluster's CA, the namespace.
async fn service_account_files(admin: &Client, admin_yaml: &str, run: &Run) -> PathBuf {
    let kubeconfig_path = run.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig_path, admin_yaml).expect("write kubeconfig");
    let mut out = Vec::new();
    kubeflavor::run(
        [
            "kubeflavor",
            "--kubeconfig",
            kubeconfig_path.to_str().expect("UTF-8 path"),
            "install",
            "--apply",
            "--replicas",
            "0",
        ],
        &mut out,
    )
    .await
    .expect("install --apply");

    let token = portal::service_account_token(
        admin,
        NAMESPACE,
        kubeflavor::cmd::install::CONTROLLER_SA,
        3600,
    )
    .await;
    let kc = Kubeconfig::from_yaml(admin_yaml).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.clone().expect("cluster");
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.expect("CA data"))
        .expect("CA data is base64");
    let sa_dir = run.dir.path().join("serviceaccount");
    std::fs::create_dir(&sa_dir).expect("mkdir");
    write_world_readable(&sa_dir.join("token"), token.as_bytes());
    write_world_readable(&sa_dir.join("ca.crt"), &ca);
    write_world_readable(&sa_dir.join("namespace"), NAMESPACE.as_bytes());
    make_world_readable(run.dir.path());
    make_world_readable(&sa_dir);
    sa_dir
}

/// The API server's address, which must be an IP address on this machine.
fn api_server_address(admin_yaml: &str) -> SocketAddr {
    let kc = Kubeconfig::from_yaml(admin_yaml).expect("kubeconfig");
    let server = kc.clusters[0]
        .cluster
        .clone()
        .and_then(|c| c.server)
        .expect("server");
    server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|_| panic!("the API server {server} is not at an IP address and port"))
}

/// Starts the two replicas as a kubelet would run the Deployment's container: its image,
/// arguments and environment, a read-only root, no capabilities, the ServiceAccount's
/// files mounted where a pod has them.
async fn start_replicas(
    a: &Args,
    admin: &Client,
    run: &mut Run,
    container: &Value,
    mounts: &[(&Path, &str)],
    port: u16,
) -> Replicas {
    let mut run_args: Vec<String> = [
        "--network",
        &run.network,
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (dir, at) in mounts {
        run_args.push("-v".into());
        run_args.push(format!("{}:{at}:ro", dir.display()));
    }
    for (k, v) in [
        ("KUBERNETES_SERVICE_HOST", a.service_ip.to_string()),
        ("KUBERNETES_SERVICE_PORT", port.to_string()),
        ("POD_NAME", "{POD_NAME}".to_string()),
        ("POD_NAMESPACE", NAMESPACE.to_string()),
        ("RUST_LOG", "info".to_string()),
    ] {
        run_args.push("-e".into());
        run_args.push(format!("{k}={v}"));
    }
    run_args.push(container["image"].as_str().expect("image").to_string());
    for arg in container["args"].as_array().expect("container args") {
        let arg = arg.as_str().expect("string args");
        run_args.push(arg.replace("$(POD_NAMESPACE)", NAMESPACE));
    }
    run.replicas = vec![format!("{}-a", run.prefix), format!("{}-b", run.prefix)];
    let replicas = Replicas {
        network: run.network.clone(),
        prefix: run.prefix.clone(),
        http_port: kubeflavor::cmd::install::HTTP_PORT as u16,
        by_name: run
            .replicas
            .iter()
            .map(|n| (n.clone(), Replica::start(n, &run_args)))
            .collect(),
        holder: observe_lease(
            Api::namespaced(admin.clone(), NAMESPACE),
            kubeflavor::controller::LEASE_NAME,
        ),
    };
    for name in &run.replicas {
        replicas.until_ok(name, "/healthz").await;
    }
    println!("replicas {} started", run.replicas.join(" and "));
    replicas
}

/// The cut-off replica, reconnected: a follower whose last write started before the next
/// leader's term began. Returns its write count.
async fn fenced(replicas: &Replicas, cut_off: &str, cut: &Takeover, writes_before_cut: f64) -> f64 {
    replicas.until_ok(cut_off, "/healthz").await;
    let last_write = replicas
        .metric(cut_off, "kubeflavor_last_api_write_timestamp_seconds")
        .await;
    let writes = replicas
        .metric(cut_off, "kubeflavor_api_writes_total")
        .await;
    let is_leader = replicas.metric(cut_off, "kubeflavor_leader").await;
    let acquired = cut
        .acquired()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    println!(
        "  {cut_off} reconnected: leader={is_leader}, {writes_before_cut} writes before the cut, {writes} in all; its last write started {:.2} s before {} took over",
        acquired - last_write,
        cut.after.identity
    );
    assert_eq!(
        is_leader,
        0.0,
        "the cut-off replica is a follower; its log:\n{}",
        logs(cut_off)
    );
    assert!(
        last_write < acquired,
        "the cut-off replica started a write {:.3} s after the new leader's term began",
        last_write - acquired
    );
    writes
}

/// The lease duration the Deployment's controller runs with (its --lease-duration, or
/// the controller's default of 15 s).
fn lease_duration(container: &Value) -> Duration {
    let secs = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--lease-duration="))
        .map(|s| s.parse().expect("--lease-duration is whole seconds"))
        .unwrap_or(15);
    Duration::from_secs(secs)
}

/// The latest a standby may take over after the leader's last renewal: it must have seen
/// the Lease unchanged for the lease duration, and it starts a round one retry period (2/15
/// of the lease) after the previous round ended, as client-go's sliding loop does. So the
/// first look and the last can each come one period plus one round late; a round (a GET
/// and a PUT) is allowed a second, which a loaded two-core machine running Docker needs
/// (19.7 s was seen against a bound without it).
fn takeover_bound(lease: Duration) -> Duration {
    const ROUND: Duration = Duration::from_secs(1);
    lease + 2 * ((lease * 2 / 15).max(Duration::from_millis(500)) + ROUND)
}

struct Joined {
    joined: usize,
    approvals: usize,
    bindings: usize,
}

/// Every node: one approval and no other verdict, a certificate, one binding to its own
/// token, the token's record naming it until the used-up token is retired, the Node
/// flavored.
async fn check_joins(admin: &Client, run: &Run, token_of: &BTreeMap<String, String>) -> Joined {
    let csrs: Vec<CertificateSigningRequest> = Api::all(admin.clone())
        .list(&ListParams::default())
        .await
        .expect("list CSRs")
        .items;
    let bindings: Vec<FlavorBinding> = Api::all(admin.clone())
        .list(&ListParams::default())
        .await
        .expect("list bindings")
        .items;
    let nodes: Vec<Node> = Api::all(admin.clone())
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .items;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), TOKEN_SECRET_NAMESPACE);
    let mut approvals = 0;
    let mut bound = 0;
    let mut joined = 0;
    for node in &run.nodes {
        let csr = csrs
            .iter()
            .find(|c| c.name_any() == *node)
            .unwrap_or_else(|| panic!("{node}: no CSR"));
        let conditions = csr
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let kinds: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(kinds, ["Approved"], "{node}: the CSR's verdicts");
        approvals += 1;
        assert!(
            csr.status
                .as_ref()
                .and_then(|s| s.certificate.as_ref())
                .is_some(),
            "{node}: a certificate was issued"
        );
        let mine: Vec<&FlavorBinding> = bindings.iter().filter(|b| b.spec.node == *node).collect();
        assert_eq!(mine.len(), 1, "{node}: one binding");
        assert_eq!(
            mine[0].spec.token_id, token_of[node],
            "{node}: bound to its own token"
        );
        assert_eq!(
            mine[0].spec.flavor, run.flavor,
            "{node}: bound to the flavor"
        );
        bound += 1;
        // A single-use token whose node joined is used up: the controller deletes it
        // right after it flavors the Node (and only when its record names exactly the
        // node), so a copy of the join line authenticates nobody.
        let name = secret_name(&token_of[node].parse().expect("token id"));
        let retired = async {
            loop {
                match secrets.get_opt(&name).await.expect("read the token Secret") {
                    None => return,
                    Some(s) => assert_eq!(
                        s.annotations()
                            .get(BOUND_NODES_ANNOTATION)
                            .map(String::as_str),
                        Some(node.as_str()),
                        "{node}: the token's record names the node and nothing else"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), retired)
            .await
            .unwrap_or_else(|_| panic!("{node}: its used-up token was not retired"));
        let n = nodes
            .iter()
            .find(|n| n.name_any() == *node)
            .unwrap_or_else(|| panic!("{node}: no Node"));
        assert_eq!(
            n.labels().get(storm::FLAVOR_LABEL),
            Some(&run.flavor),
            "{node}: flavored"
        );
        joined += 1;
    }
    let ours = bindings
        .iter()
        .filter(|b| b.spec.flavor == run.flavor)
        .count();
    assert_eq!(ours, run.nodes.len(), "no binding beyond the joins");
    Joined {
        joined,
        approvals,
        bindings: bound,
    }
}

fn write_world_readable(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write");
    make_world_readable(path);
}

fn make_world_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if path.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Where the Deployment's container mounts the webhook's Secret.
fn authz_mount(container: &Value) -> &str {
    container["volumeMounts"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == "authz-tls"))
        .and_then(|m| m["mountPath"].as_str())
        .expect("install --authz-webhook mounts the webhook's Secret")
}

/// The Deployment's container port named `authz`.
fn authz_port(container: &Value) -> u16 {
    container["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "authz"))
        .and_then(|p| p["containerPort"].as_u64())
        .expect("install --authz-webhook opens the authz port") as u16
}

/// The webhook Secret's files (`tls.crt`, `tls.key`, `client-ca.crt`) as an operator
/// creates them, and the API server's side: a client certificate with kubeadm's CN.
struct AuthzPki {
    dir: PathBuf,
    client: Arc<rustls::ClientConfig>,
}

/// The name the webhook's serving certificate carries (the test connects by IP).
const AUTHZ_SERVER_NAME: &str = "kubeflavor-authz";

impl AuthzPki {
    fn write(dir: &Path) -> AuthzPki {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let made = webhook_pki::webhook_pki(
            "image-ha-authz-ca",
            vec![AUTHZ_SERVER_NAME.into()],
            kubeflavor::cmd::install::AUTHZ_CLIENT_CN,
        );
        std::fs::create_dir(dir).expect("mkdir");
        write_world_readable(&dir.join("tls.crt"), made.server.0.as_bytes());
        write_world_readable(&dir.join("tls.key"), made.server.1.as_bytes());
        write_world_readable(&dir.join("client-ca.crt"), made.ca_pem.as_bytes());
        make_world_readable(dir);
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(made.ca_pem.as_bytes()).expect("the CA"))
            .expect("the CA as a root");
        let client = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(made.client.0.as_bytes()).expect("a cert")],
                PrivateKeyDer::from_pem_slice(made.client.1.as_bytes()).expect("a key"),
            )
            .expect("a client configuration");
        AuthzPki {
            dir: dir.to_path_buf(),
            client: Arc::new(client),
        }
    }

    /// POSTs a SubjectAccessReview of `system:node:<node>` getting its Node, as the API
    /// server does; the `status` answered, or None while the replica does not answer.
    async fn ask(&self, ip: &str, port: u16, node: &str) -> Option<Value> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let review = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": format!("system:node:{node}"),
                "groups": ["system:nodes", "system:authenticated"],
                "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes", "name": node},
            },
        })
        .to_string();
        let tcp = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect((ip, port)),
        )
        .await
        .ok()?
        .ok()?;
        let name = rustls_pki_types::ServerName::try_from(AUTHZ_SERVER_NAME).ok()?;
        let connector = tokio_rustls::TlsConnector::from(self.client.clone());
        let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
            .await
            .ok()?
            .ok()?;
        let request = format!(
            "POST /authorize HTTP/1.1\r\nHost: {AUTHZ_SERVER_NAME}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{review}",
            review.len()
        );
        tls.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        // The answer is complete when the server closes; a missing close_notify is no error.
        let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut response)).await;
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.1 200") {
            return None;
        }
        let answer: Value = serde_json::from_str(body).ok()?;
        Some(answer["status"].clone())
    }
}

/// Step 7: revokes `revoked` and waits until every replica's webhook denies it (how long
/// after `node revoke` returned, per replica), then checks each has no opinion on `other`.
async fn every_replica_cuts_off(
    replicas: &Replicas,
    run: &Run,
    pki: &AuthzPki,
    port: u16,
    revoked: &str,
    other: &str,
) -> Vec<(String, Duration)> {
    let kubeconfig = run.dir.path().join("admin.kubeconfig");
    let mut out = Vec::new();
    kubeflavor::run(
        [
            "kubeflavor",
            "--kubeconfig",
            kubeconfig.to_str().expect("UTF-8 path"),
            "node",
            "revoke",
            revoked,
        ],
        &mut out,
    )
    .await
    .expect("node revoke");
    let revoked_at = Instant::now();
    let mut cut_off = Vec::new();
    for name in &run.replicas {
        let ip = replicas
            .get(name)
            .ip(&run.network)
            .unwrap_or_else(|| panic!("{name} has an address on {}", run.network));
        let deadline = revoked_at + Duration::from_secs(10);
        loop {
            let status = pki.ask(&ip, port, revoked).await;
            if status.as_ref().is_some_and(|s| s["denied"] == true) {
                let reason = status.as_ref().map(|s| s["reason"].clone());
                assert!(
                    reason
                        .as_ref()
                        .and_then(|r| r.as_str())
                        .is_some_and(|r| r.contains(revoked)),
                    "{name}'s denial names the node: {reason:?}"
                );
                cut_off.push((name.clone(), revoked_at.elapsed()));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}'s webhook did not deny revoked node {revoked} within 10 s (last answer {status:?}); docker logs {name}:\n{}",
                logs(name)
            );
            // The index follows a watch; nothing announces its update to this client.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = pki.ask(&ip, port, other).await;
        assert!(
            status
                .as_ref()
                .is_some_and(|s| s["allowed"] == false && s.get("denied").is_none_or(|d| d != true)),
            "{name}'s webhook has no opinion on node {other} (not revoked): {status:?}"
        );
    }
    cut_off
}

/// Removes the containers, the network and every object the run created.
async fn clean_up(admin: &Client, run: &Run) {
    for name in &run.replicas {
        let _ = Command::new("docker").args(["rm", "-f", name]).output();
    }
    let _ = Command::new("docker")
        .args(["network", "rm", &run.network])
        .output();
    let dp = DeleteParams::default();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let nodes: Api<Node> = Api::all(admin.clone());
    let bindings: Api<FlavorBinding> = Api::all(admin.clone());
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), TOKEN_SECRET_NAMESPACE);
    for node in &run.nodes {
        let _ = csrs.delete(node, &dp).await;
        let _ = nodes.delete(node, &dp).await;
        let _ = bindings.delete(node, &dp).await;
    }
    for token in &run.tokens {
        let _ = secrets.delete(token, &dp).await;
    }
    // The revoked node stays on the revocation list until forgotten (`node forget`).
    for node in &run.nodes {
        let _ = kubeflavor_cluster::revocation_list::remove(admin, node).await;
    }
    let _ = Api::<Flavor>::all(admin.clone())
        .delete(&run.flavor, &dp)
        .await;
    let _ = Api::<Lease>::namespaced(admin.clone(), NAMESPACE)
        .delete(kubeflavor::controller::LEASE_NAME, &dp)
        .await;
}
