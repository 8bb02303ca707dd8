//! The end-to-end harness. [`Env::start`] connects to the cluster named by
//! `KUBEFLAVOR_E2E_KUBECONFIG` (a real admin kubeconfig) when it is set, and otherwise
//! starts a fresh testkube. Every case runs unchanged on both: names carry a per-run
//! suffix so a real cluster can be shared by tests running in parallel and reused across
//! runs, and when an [`Env`] is dropped (also when its test failed) everything its run
//! made on a real cluster is deleted (see `sweep`).
//!
//! Every test binary of this crate includes this module (`#[path = "../support/mod.rs"]`):
//! besides [`Env`], it is the one place for clients from a kubeconfig ([`client_from`]),
//! safety-net timeouts ([`within`], [`within_for`]) and token Secrets a test plants itself
//! ([`token_secret::TokenSecret`]).

#![allow(dead_code)] // each test binary uses its own subset of the helpers

pub mod browser;
pub mod https;
pub mod minted;
pub mod oidc;
pub mod portal;
pub mod stall;
mod sweep;
pub mod token_secret;
pub mod webhook_pki;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};
use kube::config::Kubeconfig;
use kubeflavor::ExitCode;
use testkube::TestCluster;

/// The variable naming a real cluster's admin kubeconfig.
pub const REAL_CLUSTER_ENV: &str = "KUBEFLAVOR_E2E_KUBECONFIG";

pub struct Env {
    /// The admin kubeconfig file every command is run with (`--kubeconfig`).
    pub kubeconfig: PathBuf,
    /// An admin client, for checking what the commands did.
    pub client: kube::Client,
    /// The testkube server, when not running against a real cluster.
    pub testkube: Option<TestCluster>,
    /// A short random suffix unique to this test's run.
    pub run_id: String,
    dir: tempfile::TempDir,
    /// Held for the whole test by [`Env::start_serial`] on a real cluster.
    _serial: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// What this run made on a real cluster beyond the names carrying its run id.
    pub made: sweep::Made,
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.testkube.is_none() {
            sweep::sweep(&self.kubeconfig, &self.run_id, &self.made);
        }
    }
}

/// Says on the test output (not captured by the test harness) that the running test
/// skipped its case, and why. It still counts as passed in cargo's summary.
pub fn skip(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("this test");
    let _ = writeln!(std::io::stderr(), "SKIPPED {name}: {why}");
}

/// One lock per test binary (cargo runs the binaries one after the other): the real
/// cluster's turn of [`Env::start_serial`] tests.
fn real_cluster_lock() -> Arc<tokio::sync::Mutex<()>> {
    static LOCK: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    LOCK.get_or_init(Default::default).clone()
}

/// What one command did: its exit code, its output, and the error line (if any).
#[derive(Debug)]
pub struct Outcome {
    pub code: ExitCode,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.code == ExitCode::Ok
    }

    /// Panic with everything a reader needs when the command failed.
    #[track_caller]
    pub fn expect_ok(&self) -> &str {
        assert!(self.ok(), "command failed: {self:?}");
        &self.stdout
    }
}

impl Env {
    pub async fn start() -> Env {
        Env::start_with(false).await
    }

    /// Like [`Env::start`], but on a real cluster the tests of one binary that start this
    /// way run one at a time: for tests that share an object of a fixed name (the certs
    /// suite's kube-system/kubeadm-certs). testkube is fresh per test and needs no turn.
    pub async fn start_serial() -> Env {
        Env::start_with(true).await
    }

    async fn start_with(serial: bool) -> Env {
        kubeflavor::connect::install_crypto_provider();
        let dir = tempfile::tempdir().expect("temp dir");
        let run_id = kubeflavor_core::token::BootstrapToken::generate()
            .expect("randomness")
            .id()
            .to_string();
        match std::env::var_os(REAL_CLUSTER_ENV).filter(|v| !v.is_empty()) {
            Some(path) => {
                let serial = match serial {
                    true => Some(real_cluster_lock().lock_owned().await),
                    false => None,
                };
                let kubeconfig = PathBuf::from(path);
                let text =
                    std::fs::read_to_string(&kubeconfig).expect("read KUBEFLAVOR_E2E_KUBECONFIG");
                let client = client_from(&text).await;
                Env {
                    kubeconfig,
                    client,
                    testkube: None,
                    run_id,
                    dir,
                    _serial: serial,
                    made: Default::default(),
                }
            }
            None => {
                let cluster = TestCluster::start().await.expect("start testkube");
                let kubeconfig = dir.path().join("admin.kubeconfig");
                cluster
                    .write_admin_kubeconfig(&kubeconfig)
                    .expect("write admin kubeconfig");
                let client = client_from(&cluster.admin_kubeconfig()).await;
                Env {
                    kubeconfig,
                    client,
                    testkube: Some(cluster),
                    run_id,
                    dir,
                    _serial: None,
                    made: Default::default(),
                }
            }
        }
    }

    /// `base-<run id>`: unique on a shared real cluster.
    pub fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.run_id)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// testkube, for a case that injects faults or reads its counters; `None` on a real
    /// cluster, where the case is reported skipped with `why`.
    pub fn testkube_or_skip(&self, why: &str) -> Option<&TestCluster> {
        if self.testkube.is_none() {
            skip(why);
        }
        self.testkube.as_ref()
    }

    /// Run kubeflavor in-process with the admin kubeconfig.
    pub async fn kf(&self, args: &[&str]) -> Outcome {
        self.kf_with(&self.kubeconfig, args).await
    }

    /// Run kubeflavor in-process with another kubeconfig.
    pub async fn kf_with(&self, kubeconfig: &Path, args: &[&str]) -> Outcome {
        let mut argv = vec![
            "kubeflavor".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.made.command(args);
        let mut out = Vec::new();
        // Boxed: the command's future is large, and a test thread's stack is 2 MiB.
        let result = Box::pin(kubeflavor::run(argv, &mut out)).await;
        let stdout = String::from_utf8(out).expect("utf-8 output");
        self.made.tokens_in(&stdout);
        match result {
            Ok(()) => Outcome {
                code: ExitCode::Ok,
                stdout,
                stderr: String::new(),
            },
            Err(e) => Outcome {
                code: e.code,
                stdout,
                stderr: format!("error: {e}\n"),
            },
        }
    }

    /// Run the real binary (exit status and stderr exactly as a user sees them). The child
    /// is waited for on a blocking thread so that an in-process testkube keeps serving.
    pub async fn kf_bin(&self, args: &[&str]) -> Outcome {
        let mut argv = vec![
            "--kubeconfig".to_string(),
            self.kubeconfig.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.made.command(args);
        let outcome = tokio::task::spawn_blocking(move || {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            bin(env!("CARGO_BIN_EXE_kubeflavor"), &argv)
        })
        .await
        .expect("binary runner");
        self.made.tokens_in(&outcome.stdout);
        outcome
    }

    /// `kubeflavor install --apply --replicas 0` (idempotent; on a real cluster it updates
    /// what is there). No controller Deployment runs: the tests run their own controllers,
    /// and a second one deciding the same CSRs would race them. What stays on a real
    /// cluster afterwards (CRDs, RBAC, the namespace, a Deployment of 0 replicas) is
    /// removed with `kubeflavor install | kubectl delete -f -`.
    pub async fn install(&self) {
        self.kf(&["install", "--apply", "--replicas", "0"])
            .await
            .expect_ok();
    }

    /// `kubeflavor flavor create base-<run id> <flags>`; returns the flavor's name.
    pub async fn create_flavor(&self, base: &str, flags: &[&str]) -> String {
        let flavor = self.name(base);
        self.kf(&[&["flavor", "create", flavor.as_str()], flags].concat())
            .await
            .expect_ok();
        flavor
    }

    /// A kubeconfig file for the same server and CA whose user is this bearer token.
    pub fn token_kubeconfig(&self, token: &str) -> PathBuf {
        let admin = Kubeconfig::read_from(&self.kubeconfig).expect("admin kubeconfig");
        let context_name = admin
            .current_context
            .clone()
            .expect("admin kubeconfig has a current-context");
        let context = admin
            .contexts
            .iter()
            .find(|c| c.name == context_name)
            .and_then(|c| c.context.clone())
            .expect("current context");
        let cluster = admin
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.cluster.clone())
            .expect("cluster of the current context");
        let server = cluster.server.clone().expect("server");
        // The same trust settings as the admin's cluster entry (inline CA, CA file, or none).
        let mut trust = String::new();
        if let Some(data) = &cluster.certificate_authority_data {
            trust.push_str(&format!("    certificate-authority-data: {data}\n"));
        } else if let Some(file) = &cluster.certificate_authority {
            trust.push_str(&format!("    certificate-authority: {file}\n"));
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            trust.push_str("    insecure-skip-tls-verify: true\n");
        }
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{trust}contexts:\n\
             - name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: {token}\n"
        );
        let path = self
            .dir
            .path()
            .join(format!("token-{}.kubeconfig", &token[..6]));
        std::fs::write(&path, yaml).expect("write token kubeconfig");
        path
    }

    /// Returns once the API server authenticates this bootstrap token, made a moment ago
    /// (the authenticator reads token Secrets from an informer cache, so a new token can
    /// get 401 for a moment): before commands that must not retry a 401 themselves use it.
    pub async fn until_authenticated(&self, token: &str) {
        whoami(&self.token_client(token).await)
            .await
            .expect("the new token authenticates");
    }

    /// A client that authenticates with this bearer token. A bootstrap token made a
    /// moment ago may get 401 until the authenticator's cache has its Secret: requests that
    /// use it first go through [`fresh`].
    pub async fn token_client(&self, token: &str) -> kube::Client {
        let text = std::fs::read_to_string(self.token_kubeconfig(token)).expect("token kubeconfig");
        client_from(&text).await
    }

    /// Number of requests the server has seen (testkube only; `None` on a real cluster).
    pub fn request_count(&self) -> Option<u64> {
        self.testkube
            .as_ref()
            .map(|c| c.counters().snapshot().total())
    }
}

/// A client for the current context of a kubeconfig (YAML text): testkube's or a real
/// cluster's, an admin's, a token's or a node's.
pub async fn client_from(kubeconfig_yaml: &str) -> kube::Client {
    testkube::client_from_kubeconfig(kubeconfig_yaml)
        .await
        .expect("a usable kubeconfig")
}

/// A generous safety net for waits on watches; never a synchronisation tool.
pub const WAIT: Duration = Duration::from_secs(30);

/// Waits for `fut` with the safety-net timeout [`WAIT`], naming what was awaited on failure.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    within_for(WAIT, what, fut).await
}

/// [`within`] with another safety net: for waits on a whole command (a join) rather than
/// one event.
pub async fn within_for<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}

/// Runs the first request of a token made a moment ago: the API server may not know the
/// token yet and answers 401 until its informer cache has the token Secret, so a 401 is
/// retried for a bounded time, as every client that creates and uses a token must.
pub async fn fresh<T, F, Fut>(call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    kubeflavor_cluster::cache_lag::retry_unauthorized(
        kubeflavor_cluster::cache_lag::TOKEN_PROPAGATION,
        call,
    )
    .await
}

/// Who the server says this client is: (username, groups). The client's token may be
/// fresh ([`fresh`]).
pub async fn whoami(client: &kube::Client) -> Result<(String, Vec<String>), kube::Error> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let (params, request) = (PostParams::default(), SelfSubjectReview::default());
    let review = fresh(|| api.create(&params, &request)).await?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    Ok((
        user.username.unwrap_or_default(),
        user.groups.unwrap_or_default(),
    ))
}

/// Run a binary and collect its outcome (with `KUBECONFIG` unset).
pub fn bin(path: &str, args: &[&str]) -> Outcome {
    bin_with_env(path, args, &[])
}

/// Run a binary with extra environment variables (`KUBECONFIG` unset unless given).
pub fn bin_with_env(path: &str, args: &[&str], envs: &[(&str, &str)]) -> Outcome {
    let mut command = Command::new(path);
    command.args(args).env_remove("KUBECONFIG");
    for (k, v) in envs {
        command.env(k, v);
    }
    let output = command.output().expect("run the binary");
    let code = match output.status.code() {
        Some(0) => ExitCode::Ok,
        Some(1) => ExitCode::Error,
        Some(2) => ExitCode::Usage,
        Some(3) => ExitCode::NotFound,
        Some(4) => ExitCode::Refused,
        Some(5) => ExitCode::Unreachable,
        Some(6) => ExitCode::Forbidden,
        other => panic!("unexpected exit status {other:?}: {output:?}"),
    };
    Outcome {
        code,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Asserts the shape every refusal must have: non-zero exit, exactly one line on stderr
/// starting with `error: `, nothing on stdout.
#[track_caller]
pub fn assert_one_line_error(outcome: &Outcome, code: ExitCode) {
    assert_eq!(outcome.code, code, "{outcome:?}");
    assert_eq!(
        outcome.stderr.lines().count(),
        1,
        "not one line: {:?}",
        outcome.stderr
    );
    assert!(
        outcome.stderr.starts_with("error: "),
        "{:?}",
        outcome.stderr
    );
    assert!(outcome.stdout.is_empty(), "{:?}", outcome.stdout);
}

/// The names in `dir`, sorted (none when it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Acts as the approver: waits for the kubelet client CSR for `node`, then approves or
/// denies it through `/approval` as the admin.
pub async fn decide_csr(admin: kube::Client, node: String, approve: bool) -> String {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let api: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> = Api::all(admin);
    let mut events = kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default())
        .applied_objects()
        .default_backoff()
        .boxed();
    let csr = within_for(Duration::from_secs(60), "the node's CSR", async {
        loop {
            let csr = events
                .next()
                .await
                .expect("watch ended")
                .expect("watch failed");
            let parsed = kubeflavor_core::csr::client::validate_kubelet_client_csr(
                &csr.spec.signer_name,
                &csr.spec.request.0,
                csr.spec.usages.as_deref().unwrap_or_default(),
            );
            if parsed.is_ok_and(|p| p.node_name.as_str() == node) {
                return csr;
            }
        }
    })
    .await;
    let name = csr.metadata.name.clone().unwrap();
    let kind = if approve { "Approved" } else { "Denied" };
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": kind, "status": "True", "reason": format!("Test{kind}"), "message": "decided by a join test",
    }]}});
    api.patch_approval(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("admin may decide CSRs");
    name
}
