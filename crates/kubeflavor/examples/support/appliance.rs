//! What the appliance examples share: the VM (../shared/appliance's boot script) and the
//! small steps around it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

/// The flags every appliance example takes: the real control plane, the image, the boot
/// script.
#[derive(Debug, clap::Args)]
pub struct VmArgs {
    /// The admin kubeconfig of the real control plane (../shared/real-k8s start).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// The appliance image folder (what ../shared/appliance/build prints).
    #[arg(long, value_name = "DIR")]
    pub image: PathBuf,
    /// The appliance's boot script.
    #[arg(long, value_name = "FILE", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/appliance/boot"))]
    pub boot: PathBuf,
}

/// The examples' logging (the in-process controller's and API's warnings, as `kubeflavor
/// controller` logs them) and the run's id (a token id: random, and valid in names); `None`
/// (said on stderr) without randomness.
pub fn start() -> Option<String> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client=off")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    match kubeflavor_core::token::BootstrapToken::generate() {
        Ok(t) => Some(t.id().to_string()),
        Err(e) => {
            eprintln!("error: no randomness for a run id: {e}");
            None
        }
    }
}

/// A client of a kubeconfig's text (for `sweep`, which makes its clients with
/// `super::client_from`).
pub async fn client_from(kubeconfig_yaml: &str) -> kube::Client {
    kubeflavor::join::client_from_kubeconfig(kubeconfig_yaml)
        .await
        .expect("a usable kubeconfig")
}

/// `program`'s path on the PATH, if it is there.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// The Events the VM's kubelet and kube-controller-manager wrote about the Node, in
/// `default` (where Events about a Node go), named after it; the e2e sweep looks in
/// kube-system only, where kubeflavor's trail is.
pub async fn delete_node_events(kubeconfig: &Path, run_id: &str) -> anyhow::Result<()> {
    let client = kubeflavor::join::client_from_kubeconfig(&std::fs::read_to_string(kubeconfig)?)
        .await
        .map_err(anyhow::Error::msg)?;
    let events: Api<Event> = Api::namespaced(client, "default");
    for event in events.list(&ListParams::default()).await? {
        let name = event.metadata.name.unwrap_or_default();
        if name.contains(run_id) {
            events.delete(&name, &Default::default()).await?;
        }
    }
    Ok(())
}

/// `key[=value]:effect` of every taint.
pub fn taints_of(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| match t.value {
            Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
            _ => format!("{}:{}", t.key, t.effect),
        })
        .collect()
}

/// One kubeflavor command in-process, its output discarded.
pub async fn kf(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut argv = vec![
        "kubeflavor".to_string(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut out = Vec::new();
    kubeflavor::run(argv, &mut out)
        .await
        .map_err(|e| anyhow::anyhow!("kubeflavor {}: {e}", args.join(" ")))
}

/// The API server's port on this host: the VM reaches it there (the boot script's
/// APPLIANCE_API_PORT).
pub fn api_server_port(kubeconfig: &Path) -> anyhow::Result<u16> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let server = config
        .clusters
        .iter()
        .find_map(|c| c.cluster.as_ref().and_then(|c| c.server.clone()))
        .context("the kubeconfig names no server")?;
    let uri: http::Uri = server.parse()?;
    uri.port_u16()
        .with_context(|| format!("the server {server} names no port"))
}

/// Writes `text` readable by its owner only (it holds a token).
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

/// What a VM boots with: a user-data file the boot script puts in a seed ISO it builds, or
/// a seed image attached as is.
#[derive(Clone, Copy)]
pub enum Seed<'a> {
    UserData(&'a Path),
    Image(&'a Path),
}

/// One booted appliance VM.
pub struct Vm {
    pub pid: u32,
    /// `<image>/vms/<name>`: the overlay, seed, ISO and console are this plus a suffix.
    pub stem: PathBuf,
}

impl Vm {
    pub fn boot(
        script: &Path,
        image: &Path,
        name: &str,
        seed: Seed<'_>,
        env: &[(&str, String)],
    ) -> anyhow::Result<Vm> {
        let mut command = Command::new("bash");
        command.arg(script).arg(image).arg(name);
        match seed {
            // The seed image as is: the script's user-data argument is then `-`.
            Seed::Image(seed) => command.arg("-").env("APPLIANCE_SEED_IMAGE", seed),
            Seed::UserData(user_data) => command.arg(user_data),
        };
        command.arg(name);
        for (key, value) in env {
            command.env(key, value);
        }
        let out = command
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let pid = stdout.trim().lines().last().and_then(|l| l.parse().ok());
        match (out.status.success(), pid) {
            (true, Some(pid)) => Ok(Vm {
                pid,
                stem: image.join("vms").join(name),
            }),
            _ => bail!(
                "{} failed ({}): {}{}",
                script.display(),
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }

    /// QEMU still runs (a zombie counts as gone).
    pub fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }

    pub fn path(&self, suffix: &str) -> PathBuf {
        let mut p = self.stem.clone().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    }

    pub fn console(&self, secret: Option<&str>) -> String {
        let text = std::fs::read(self.path(".console")).unwrap_or_default();
        let text = String::from_utf8_lossy(&text).into_owned();
        match secret {
            Some(s) if !s.is_empty() => text.replace(s, "****************"),
            _ => text,
        }
    }

    /// The console's last line with text, without terminal control characters.
    pub fn console_last_line(&self, secret: Option<&str>) -> String {
        let text = self.console(secret);
        let line = text
            .lines()
            .map(printable)
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or_default();
        line.chars().take(160).collect()
    }

    pub fn show_console_tail(&self, secret: Option<&str>) {
        let text = self.console(secret);
        let lines: Vec<String> = text.lines().map(printable).collect();
        eprintln!("--- the VM's console, last 40 lines:");
        for line in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("    {line}");
        }
    }

    /// Kills QEMU and deletes the overlay, the seed (it holds the token) and the console.
    pub fn remove(self) {
        let kill = |signal: &str| {
            let _ = Command::new("kill")
                .args([signal, &self.pid.to_string()])
                .status();
        };
        kill("-TERM");
        let asked = Instant::now();
        while self.running() {
            if asked.elapsed() > Duration::from_secs(10) {
                kill("-KILL");
            }
            if asked.elapsed() > Duration::from_secs(30) {
                eprintln!("warning: QEMU pid {} did not exit", self.pid);
                break;
            }
            // Waiting for another process's exit: nothing to be woken by.
            std::thread::sleep(Duration::from_millis(200));
        }
        for suffix in [".qcow2", ".iso", ".console", ".qemu.log"] {
            let _ = std::fs::remove_file(self.path(suffix));
        }
        let _ = std::fs::remove_dir_all(self.path(".seed"));
    }
}

pub fn printable(line: &str) -> String {
    line.chars().filter(|c| !c.is_control()).collect()
}

pub fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Where the run's kubeadm patch for the kubelet's configuration goes in the VM.
pub const PATCHES_DIR: &str = "/etc/kubeflavor/patches";

/// The document with the kubelet asking for a serving certificate: a kubeadm patch of the
/// KubeletConfiguration (`serverTLSBootstrap: true`) written beside the join configuration,
/// which names the patch directory. The rest of the document is as minted.
pub fn with_serving_bootstrap(document: &str) -> anyhow::Result<String> {
    let join_kind = "      kind: JoinConfiguration\n";
    ensure!(
        document.matches("write_files:\n").count() == 1 && document.matches(join_kind).count() == 1,
        "the minted document has no single write_files list and JoinConfiguration to patch:\n{}",
        document
            .lines()
            .filter(|l| !l.contains("token:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let patch = format!(
        "write_files:\n  - path: {PATCHES_DIR}/kubeletconfiguration+merge.yaml\n    owner: root:root\n    permissions: \"0644\"\n    content: |\n      serverTLSBootstrap: true\n"
    );
    Ok(document.replacen("write_files:\n", &patch, 1).replacen(
        join_kind,
        &format!("{join_kind}      patches:\n        directory: {PATCHES_DIR}\n"),
        1,
    ))
}

/// The controller in-process, scoped to the run's names (as the e2e suites scope theirs),
/// approving serving CSRs, its caches synced; the task running it.
pub async fn start_controller(
    admin: &kube::Client,
    identity: &str,
    run_id: &str,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use kubeflavor::controller::{self, Options, Runtime};
    let mut opts = Options::new("kube-system", identity);
    opts.leader_elect = false;
    opts.scope = Some(format!("-{run_id}"));
    opts.lease_name = format!("kubeflavor-controller-{run_id}");
    opts.approve_serving = true;
    let rt = Runtime::new(admin.clone(), opts);
    let health = rt.health.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = controller::run(rt, std::future::pending()).await {
            eprintln!("error: the controller stopped: {e:#}");
        }
    });
    tokio::time::timeout(Duration::from_secs(60), health.wait_synced())
        .await
        .context("the controller's caches did not sync within 60 s")?;
    Ok(task)
}

/// Runs `scenario` until it ends or the process is interrupted (Ctrl-C, or SIGTERM from a
/// timeout); either way the caller then removes what the run made.
pub async fn until_interrupted<T>(
    scenario: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        outcome = scenario => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        Some(()) = async { match terminate.as_mut() { Some(t) => t.recv().await, None => None } } => {
            Err(anyhow::anyhow!("terminated"))
        }
    }
}

/// The run's objects removed (the e2e sweep of what `made` records and what is named after
/// `run_id`, and the Nodes' Events), then its outcome said: the figures on stdout (exit 0),
/// or the error with `secrets` masked (exit 1).
pub async fn finish(
    kubeconfig: &Path,
    run_id: &str,
    made: super::sweep::Made,
    outcome: anyhow::Result<serde_json::Value>,
    secrets: &[String],
) -> std::process::ExitCode {
    let (path, id) = (kubeconfig.to_path_buf(), run_id.to_string());
    let _ = tokio::task::spawn_blocking(move || super::sweep::sweep(&path, &id, &made)).await;
    if let Err(e) = delete_node_events(kubeconfig, run_id).await {
        eprintln!("warning: the Nodes' Events in default were not deleted: {e:#}");
    }
    match outcome {
        Ok(figures) => {
            println!("{figures}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            let mut message = format!("{e:#}");
            for secret in secrets.iter().filter(|s| !s.is_empty()) {
                message = message.replace(secret.as_str(), "****************");
            }
            eprintln!("error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
