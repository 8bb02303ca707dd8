//! appliance_join: our users' scenario end to end, with a real VM. A portal mints a token
//! with output cloud-init through `kubeflavor serve`; the appliance VM (../shared/appliance)
//! boots with that document as its cloud-init user-data, and its own cloud-init, kubeadm and
//! kubelet join the real control plane; the kubeflavor controller flavors the Node.
//!
//!     img=$(../shared/appliance/build | tail -1)
//!     cargo run -p kubeflavor --example appliance_join -- --kubeconfig FILE --image "$img"
//!
//! It checks that the Node registers tainted `kubeflavor.io/unverified:NoSchedule` (no
//! ordinary pod lands on it before it is judged), then carries its flavor's labels with the
//! taint gone, and that its FlavorBinding names the minted token. The VM's kubelet also
//! asks for a serving certificate (`serverTLSBootstrap: true`, set by a kubeadm patch the
//! run adds to the document, as a cluster owner would set it in the kubelet-config
//! ConfigMap): the controller (`--approve-serving`) must approve it for the node's name and
//! the address its Flavor allows, and kube-controller-manager issue it. The last line of the
//! output is the run's figures as one JSON object: power-on to Node registered, to
//! flavored, the taints seen at registration. Exit code 1 when an expectation fails.
//!
//! It makes, named after a run id, and removes on success and failure alike: the VM (killed,
//! its overlay, seed and console deleted), a Flavor, a portal ServiceAccount with its
//! ClusterRole and binding, the token, the Node, its FlavorBinding and CSR, the trail's
//! Events. `kubeflavor install --apply --replicas 0` stays, as with the e2e suites. The
//! controller runs in-process, scoped to the run's names as the e2e suites scope theirs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kubeflavor::controller;
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_core::flavor::input_labels::INPUT_LABEL_PREFIX;
use kubeflavor_core::flavor::{FLAVOR_LABEL, TRUST_LEVEL_LABEL, UNVERIFIED_TAINT};
use serde_json::json;

use appliance::{
    Seed, Vm, api_server_port, client_from, kf, load_average, secs, taints_of, which,
    with_serving_bootstrap, write_private,
};

#[path = "support/appliance.rs"]
mod appliance;
#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "../tests/support/browser.rs"]
mod browser;
#[path = "../tests/support/https.rs"]
mod https;
#[path = "../tests/support/portal.rs"]
mod portal;
// The e2e suites' clean-up, of which this run records its token alone.
#[allow(dead_code)]
#[path = "../tests/support/sweep.rs"]
mod sweep;

/// appliance_join: a real VM joins through the cloud-init document `kubeflavor serve`
/// mints; its Node must register tainted unverified, then be flavored with the taint gone.
#[derive(Debug, Parser)]
#[command(
    name = "appliance_join",
    after_help = "Run: cargo run -p kubeflavor --example appliance_join -- --kubeconfig FILE --image DIR"
)]
struct Args {
    #[command(flatten)]
    vm: appliance::VmArgs,
    /// How long the Node may take from power-on to flavored (an emulated VM boots in about
    /// a minute on an idle machine, several under load).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
    /// Mint as a node administrator instead of a portal: the env file of a running OpenID
    /// Provider (what testbed/oidc/start prints). alice signs in, a Roster of the run gives
    /// her group the flavor, and the FlavorBinding must name her verified identity.
    #[arg(long, value_name = "FILE")]
    administrator_env: Option<PathBuf>,
    /// Hand the VM a NoCloud seed image (FAT, labelled CIDATA) that kubeflavor builds in
    /// process (kubeflavor_core::mint::seed_image), attached as is, instead of letting the
    /// boot script build one from the user-data.
    #[arg(long)]
    seed_image: bool,
    /// With --administrator-env: alice goes through the web portal in a real browser
    /// (Debian's headless Chromium over chromium-driver): she signs in at the provider's
    /// login page, describes the node, pastes her SSH key and downloads the seed image, which
    /// the VM boots with as downloaded (the run's serving-certificate patch is then not
    /// added, so the kubelet asks for no serving certificate and none is checked).
    #[arg(long, requires = "administrator_env")]
    via_portal: bool,
}

/// The provider's env file, as `KEY=value` lines.
fn read_env_file(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --administrator-env {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// alice's ID token from the provider (testbed/oidc/token).
fn id_token(env: &BTreeMap<String, String>, user: &str) -> anyhow::Result<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/oidc/token");
    let out = Command::new("bash")
        .arg(script)
        .arg(user)
        .envs(env)
        .output()
        .context("running testbed/oidc/token")?;
    ensure!(
        out.status.success(),
        "testbed/oidc/token {user}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// The flavor's class label and trust level: what the flavored Node must carry.
const CLASS_LABEL: &str = "tier.node-restriction.kubernetes.io/class";
const CLASS: &str = "appliance";
const TRUST_LEVEL: &str = "60";
/// How often the wait says where the VM is.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    kubeflavor::connect::install_crypto_provider();
    let a = args::parse_or_exit::<Args>();
    let Some(run_id) = appliance::start() else {
        return ExitCode::FAILURE;
    };
    let mut run = Run {
        id: run_id,
        made: sweep::Made::default(),
        vm: None,
        tasks: Vec::new(),
        secret: None,
    };
    let outcome = appliance::until_interrupted(scenario(&a, &mut run)).await;
    // Everything the run made goes, whatever happened: the VM first (its kubelet would
    // register the Node again), then the processes, then the objects.
    if let Some(vm) = run.vm.take() {
        if outcome.is_err() {
            vm.show_console_tail(run.secret.as_deref());
        }
        vm.remove();
    }
    for task in &run.tasks {
        task.abort();
    }
    let secrets: Vec<String> = run.secret.iter().cloned().collect();
    appliance::finish(&a.vm.kubeconfig, &run.id, run.made, outcome, &secrets).await
}

/// What the run made, for the clean-up.
struct Run {
    id: String,
    made: sweep::Made,
    vm: Option<Vm>,
    /// The controller and the join-token API.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The token's secret half, masked wherever the VM's console is shown.
    secret: Option<String>,
}

impl Run {
    fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.id)
    }
}

async fn scenario(a: &Args, run: &mut Run) -> anyhow::Result<serde_json::Value> {
    let admin_yaml = std::fs::read_to_string(&a.vm.kubeconfig)
        .with_context(|| format!("reading --kubeconfig {}", a.vm.kubeconfig.display()))?;
    let admin = kubeflavor::join::client_from_kubeconfig(&admin_yaml)
        .await
        .map_err(anyhow::Error::msg)?;
    let api_port = api_server_port(&a.vm.kubeconfig)?;
    ensure!(
        a.vm.image.join("root.img").is_file(),
        "--image {} holds no root.img: build the appliance first (../shared/appliance/build)",
        a.vm.image.display()
    );

    progress("kubeflavor install --apply --replicas 0; a flavor; a portal allowed to mint it");
    kf(&a.vm.kubeconfig, &["install", "--apply", "--replicas", "0"]).await?;
    let flavor = run.name("appliance");
    let node = flavor.clone();
    kf(
        &a.vm.kubeconfig,
        &[
            "flavor",
            "create",
            &flavor,
            "--label",
            &format!("{CLASS_LABEL}={CLASS}"),
            "--trust-level",
            TRUST_LEVEL,
            "--input-label",
            "site=berlin,paris",
            "--input-label-pattern",
            "segment=seg-[0-9]{1,4}",
            "--serving-address",
            GUEST_NETWORK,
        ],
    )
    .await?;
    let portal_token =
        portal::portal(&admin, "default", &run.name("appliance-portal"), &[&flavor]).await;

    progress("the controller, scoped to this run's names; the join-token API");
    run.tasks
        .push(appliance::start_controller(&admin, "appliance-join", &run.id).await?);
    let provider = a
        .administrator_env
        .as_deref()
        .map(read_env_file)
        .transpose()?;
    let administrators = match &provider {
        None => None,
        Some(env) => Some(administrators(&admin, env, &run.name("roster"), &flavor).await?),
    };
    let portal = match (&provider, &administrators) {
        (Some(env), Some(administrators)) if a.via_portal => {
            let get = |k: &str| env.get(k).cloned().unwrap_or_default();
            let server = https::serve_portal(
                &a.vm.kubeconfig,
                "appliance-join-portal",
                administrators.clone(),
                (
                    &get("KUBEFLAVOR_OIDC_ISSUER"),
                    &get("KUBEFLAVOR_OIDC_CLIENT_SECRET"),
                ),
                std::future::pending(),
            )
            .await?;
            Some(server)
        }
        _ => None,
    };
    let (api, server) = https::serve_self_signed_with(
        &a.vm.kubeconfig,
        "appliance-join",
        administrators,
        std::future::pending(),
    )
    .await?;
    run.tasks.push(server);

    let key_dir = tempfile::tempdir()?;
    let ssh_key = SshKey::generate(&run.name("appliance-join"), key_dir.path())?;
    // The VM's SSH server on a free loopback port of this machine (bound, read, released).
    let ssh_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let labels = INPUT_LABELS.iter().copied().collect::<BTreeMap<_, _>>();
    let mut downloaded_seed: Option<Vec<u8>> = None;
    let (code, minted) = match &provider {
        Some(env) if a.via_portal => {
            let portal = portal.as_ref().context("the portal")?;
            progress(&format!(
                "alice opens the web portal ({}) in headless Chromium and signs in at the provider's login page",
                portal.origin
            ));
            let password = format!(
                "alice{}",
                env.get("KUBEFLAVOR_OIDC_PASSWORD_SUFFIX")
                    .map_or("-password", String::as_str)
            );
            let (minted, image) =
                through_the_portal(&portal.origin, &password, &node, &labels, &ssh_key.line)
                    .await?;
            downloaded_seed = Some(image);
            (http::StatusCode::CREATED, minted)
        }
        None => {
            progress(&format!(
                "the portal mints a {flavor} token with output cloud-init"
            ));
            let body = json!({
                "issuedTo": format!("appliance-join/{node}"),
                "ttl": "30m",
                "output": "cloud-init",
                "labels": labels,
                "sshAuthorizedKeys": [ssh_key.line],
            });
            api.post(
                &format!("/v1/flavors/{flavor}/jointokens"),
                Some(&portal_token),
                None,
                body.to_string().as_bytes(),
            )
            .await
        }
        Some(env) => {
            progress(
                "alice signs in at the OpenID Provider and asks for a join token (no flavor named)",
            );
            let body = json!({
                "output": "cloud-init",
                "labels": labels,
                "sshAuthorizedKeys": [ssh_key.line],
            });
            let (code, minted) = api
                .post(
                    "/v1/jointokens",
                    Some(&id_token(env, "alice")?),
                    None,
                    body.to_string().as_bytes(),
                )
                .await;
            ensure!(
                minted.get("flavor").is_none(),
                "the answer names a flavor: {minted}"
            );
            (code, minted)
        }
    };
    if let Some(id) = minted["id"].as_str() {
        run.made.token_id(id);
    }
    ensure!(
        code == http::StatusCode::CREATED,
        "the mint answered {code}: {}",
        minted["message"]
    );
    let token_id = minted["id"].as_str().context("no token id")?.to_string();
    run.secret = minted["token"]
        .as_str()
        .and_then(|t| t.split_once('.'))
        .map(|(_, s)| s.to_string());
    let document = match &downloaded_seed {
        // What the VM boots with is the seed image as downloaded: no document to change.
        Some(_) => "",
        None => minted["cloudInit"]
            .as_str()
            .context("the answer has no cloudInit")?,
    };

    // The Node's events from before power-on: the first one is the Node as registered.
    let nodes: Api<Node> = Api::all(admin.clone());
    let by_name = format!("metadata.name={node}");
    let listed = nodes.list(&ListParams::default().fields(&by_name)).await?;
    ensure!(listed.items.is_empty(), "a Node {node} exists already");
    let mut rv = listed.metadata.resource_version.unwrap_or_default();

    let document = match &downloaded_seed {
        Some(_) => String::new(),
        None => with_serving_bootstrap(document)?,
    };

    let seed = tempfile::tempdir()?;
    let user_data = seed.path().join("user-data");
    write_private(&user_data, &document)?;
    let seed_image = if let Some(image) = &downloaded_seed {
        let path = seed.path().join("seed.img");
        std::fs::write(&path, image)?;
        progress(&format!(
            "the seed image alice downloaded from the portal: {} bytes, attached as is",
            image.len()
        ));
        Some(path)
    } else if a.seed_image {
        use kubeflavor_core::mint::seed_image;
        let meta = seed_image::meta_data(&format!("kubeflavor-{token_id}"), &node);
        let image = seed_image::nocloud(&document, &meta)?;
        let path = seed.path().join("seed.img");
        std::fs::write(&path, &image)?;
        progress(&format!(
            "a NoCloud seed image built in process: {} bytes, FAT labelled CIDATA, attached as is",
            image.len()
        ));
        Some(path)
    } else {
        None
    };
    progress(&format!(
        "power-on: {} {} {node} (APPLIANCE_API_PORT={api_port})",
        a.vm.boot.display(),
        a.vm.image.display()
    ));
    let powered_on = Instant::now();
    run.vm = Some(Vm::boot(
        &a.vm.boot,
        &a.vm.image,
        &node,
        match seed_image.as_deref() {
            Some(image) => Seed::Image(image),
            None => Seed::UserData(&user_data),
        },
        &[
            ("APPLIANCE_API_PORT", api_port.to_string()),
            ("APPLIANCE_SSH_PORT", ssh_port.to_string()),
        ],
    )?);
    drop(seed);

    let deadline = powered_on + Duration::from_secs(a.timeout);
    let mut registered: Option<(Duration, Vec<String>)> = None;
    let mut last_progress = Instant::now();
    let flavored = 'wait: loop {
        let params = WatchParams::default().fields(&by_name).timeout(60);
        let mut stream = nodes.watch(&params, &rv).await?.boxed();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            ensure!(
                !left.is_zero(),
                "Node {node} {} within {} s of power-on",
                match registered {
                    None => "did not register",
                    Some(_) => "registered but was not flavored",
                },
                a.timeout
            );
            let vm = run.vm.as_ref().expect("booted");
            ensure!(vm.running(), "the VM (QEMU pid {}) exited", vm.pid);
            if last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                progress(&format!(
                    "{} s after power-on, {}; console: {}",
                    powered_on.elapsed().as_secs(),
                    if registered.is_some() {
                        "Node registered"
                    } else {
                        "no Node yet"
                    },
                    vm.console_last_line(run.secret.as_deref())
                ));
            }
            let next = tokio::time::timeout(
                left.min(PROGRESS_EVERY.saturating_sub(last_progress.elapsed())),
                stream.try_next(),
            )
            .await;
            let event = match next {
                Err(_) => continue,
                Ok(Ok(Some(event))) => event,
                // The server ended the watch: watch again from where it stopped.
                Ok(Ok(None)) => continue 'wait,
                Ok(Err(e)) => return Err(e).context("watching the Node"),
            };
            let node_now = match event {
                WatchEvent::Added(n) | WatchEvent::Modified(n) => n,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Deleted(_) => bail!("Node {node} was deleted while joining"),
                WatchEvent::Error(e) => bail!("watching Node {node}: {e}"),
            };
            rv = node_now
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            if registered.is_none() {
                let taints = taints_of(&node_now);
                progress(&format!(
                    "Node {node} registered {} s after power-on, taints {taints:?}",
                    powered_on.elapsed().as_secs()
                ));
                registered = Some((powered_on.elapsed(), taints));
            }
            if is_flavored(&node_now, &flavor) {
                break 'wait (powered_on.elapsed(), node_now);
            }
        }
    };
    let (registered_after, taints_at_registration) = registered.expect("seen before flavored");
    let (flavored_after, node_flavored) = flavored;
    progress(&format!(
        "Node {node} flavored {} s after power-on",
        flavored_after.as_secs()
    ));

    // What must hold: untrusted from its first moment, then exactly its flavor.
    let unverified = format!("{UNVERIFIED_TAINT}:NoSchedule");
    ensure!(
        taints_at_registration.contains(&unverified),
        "Node {node} registered without {unverified} (taints {taints_at_registration:?}): ordinary pods could land on it before the controller judged it; the JoinConfiguration needs nodeRegistration.taints"
    );
    let labels = node_flavored.metadata.labels.clone().unwrap_or_default();
    for (key, want) in [
        (FLAVOR_LABEL, flavor.as_str()),
        (TRUST_LEVEL_LABEL, TRUST_LEVEL),
        (CLASS_LABEL, CLASS),
    ] {
        ensure!(
            labels.get(key).map(String::as_str) == Some(want),
            "the flavored Node has {key}={:?}, not {want:?}",
            labels.get(key)
        );
    }
    // The administrator's input labels, set by the controller (the field manager of the
    // flavor's own label), never by the kubelet, which the API server refuses them.
    for (key, want) in INPUT_LABELS {
        let key = format!("{INPUT_LABEL_PREFIX}{key}");
        ensure!(
            labels.get(&key).map(String::as_str) == Some(want),
            "the flavored Node has {key}={:?}, not {want:?}",
            labels.get(&key)
        );
    }
    let site = format!("{INPUT_LABEL_PREFIX}site");
    let (site_managers, flavor_managers) = (
        label_managers(&node_flavored, &site),
        label_managers(&node_flavored, FLAVOR_LABEL),
    );
    ensure!(
        site_managers == [controller::FIELD_MANAGER] && flavor_managers == site_managers,
        "{site} is managed by {site_managers:?}, the flavor label by {flavor_managers:?}: the controller ({}) must set both, and no one else",
        controller::FIELD_MANAGER
    );
    let kubelet_refused = kubelet_label_refused(&admin_yaml, &node, &site).await?;
    progress(&format!(
        "the kubelet's own write of {site}: {kubelet_refused}"
    ));
    let fingerprint_seen = wait_for_console(run, powered_on, deadline, &ssh_key.cloud_init_fingerprint)
        .await
        .context("the VM's console never listed the portal's SSH key among the default user's authorized keys")?;
    progress(&format!(
        "the default user's authorized_keys holds the portal's key ({} s after power-on): {}",
        fingerprint_seen.as_secs(),
        ssh_key.fingerprint
    ));
    // The administrator logs in with the key they pasted (where this machine has ssh).
    let ssh_login = ssh_key.log_in(ssh_port, deadline)?;
    match &ssh_login {
        Some(hostname) => {
            ensure!(
                hostname == &node,
                "logged in over SSH with the pasted key, but the machine calls itself {hostname:?}, not {node}"
            );
            progress(&format!(
                "ssh -i <the pasted key's private half> -p {ssh_port} debian@127.0.0.1 hostname: {hostname}"
            ));
        }
        None => {
            progress("no ssh client here: the SSH login was not tried (the console listed the key)")
        }
    }
    let taints_after = taints_of(&node_flavored);
    let binding = Api::<FlavorBinding>::all(admin.clone())
        .get(&node)
        .await
        .with_context(|| format!("FlavorBinding {node}"))?;
    ensure!(
        binding.spec.token_id == token_id && binding.spec.flavor == flavor,
        "FlavorBinding {node} names token {} of flavor {}, not the minted {token_id} of {flavor}",
        binding.spec.token_id,
        binding.spec.flavor
    );
    binding_records_input_labels(&binding)?;
    let identity = match &provider {
        None => None,
        Some(env) => {
            let (issuer, subject) = (
                env.get("KUBEFLAVOR_OIDC_ISSUER")
                    .cloned()
                    .unwrap_or_default(),
                env.get("KUBEFLAVOR_OIDC_SUB_ALICE")
                    .cloned()
                    .unwrap_or_default(),
            );
            let recorded = binding
                .spec
                .identity
                .as_ref()
                .map(|i| (&i.issuer, &i.subject));
            ensure!(
                recorded == Some((&issuer, &subject)),
                "FlavorBinding {node} names identity {recorded:?}, not alice's ({issuer}, {subject})"
            );
            ensure!(
                binding.spec.issued_to.as_deref() == Some("alice@acme.example"),
                "FlavorBinding {node} is issued to {:?}, not alice's verified e-mail",
                binding.spec.issued_to
            );
            progress(&format!(
                "FlavorBinding {node} names alice's verified identity ({issuer}#{subject}) and the flavor the Roster gave her"
            ));
            Some(json!({"issuer": issuer, "subject": subject}))
        }
    };
    let serving = if downloaded_seed.is_some() {
        progress(
            "the kubelet's serving certificate: not asked for (the seed image is the portal's, unchanged)",
        );
        None
    } else {
        let serving = serving_certificate_issued(&admin, &node, powered_on, deadline).await?;
        progress(&format!(
            "the kubelet's serving certificate: CSR {} approved by kubeflavor and issued {} s after power-on, names {:?}",
            serving.csr,
            serving.issued_after.as_secs(),
            serving.names
        ));
        Some(serving)
    };
    Ok(json!({
        "scenario": "appliance_join",
        "minted_by": if identity.is_some() { "node administrator (Roster)" } else { "portal" },
        "seed_image": a.seed_image || a.via_portal,
        "via_portal": a.via_portal,
        "ssh_login_hostname": ssh_login,
        "identity": identity,
        "node": node,
        "flavor": flavor,
        "power_on_to_registered_s": secs(registered_after),
        "power_on_to_flavored_s": secs(flavored_after),
        "registered_to_flavored_ms": (flavored_after - registered_after).as_millis() as u64,
        "taints_at_registration": taints_at_registration,
        "taints_after": taints_after,
        "flavor_labels_after": {
            FLAVOR_LABEL: labels.get(FLAVOR_LABEL),
            TRUST_LEVEL_LABEL: labels.get(TRUST_LEVEL_LABEL),
            CLASS_LABEL: labels.get(CLASS_LABEL),
        },
        "input_labels_after": INPUT_LABELS
            .iter()
            .map(|(k, _)| (k.to_string(), labels.get(&format!("{INPUT_LABEL_PREFIX}{k}"))))
            .collect::<BTreeMap<_, _>>(),
        "input_labels_manager": site_managers,
        "kubelet_write_refused": kubelet_refused,
        "ssh_key_on_console_s": secs(fingerprint_seen),
        "serving_csr": serving.as_ref().map(|s| s.csr.clone()),
        "serving_certificate_names": serving.as_ref().map(|s| s.names.clone()),
        "serving_certificate_issued_s": serving.as_ref().map(|s| secs(s.issued_after)),
        "load_average_1m": load_average(),
    }))
}

/// QEMU user networking's guest network: the VM's kubelet reports 10.0.2.15, and the
/// Flavor's spec.servingAddresses allows this range for its serving certificate.
const GUEST_NETWORK: &str = "10.0.2.0/24";
/// The serving certificate the VM's kubelet asked for, as issued.
struct Serving {
    csr: String,
    names: Vec<String>,
    issued_after: Duration,
}

/// Waits (a watch on serving CSRs) until a CSR of `system:node:<node>` carries a
/// certificate, then checks it was kubeflavor that approved it and that the certificate
/// names the node and an address of the guest network, nothing else.
async fn serving_certificate_issued(
    admin: &kube::Client,
    node: &str,
    powered_on: Instant,
    deadline: Instant,
) -> anyhow::Result<Serving> {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use kube::runtime::{WatchStreamExt, watcher};
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let requester = format!("system:node:{node}");
    let by_signer = watcher::Config::default().fields(&format!(
        "spec.signerName={}",
        kubeflavor_core::csr::serving::KUBELET_SERVING_SIGNER
    ));
    let mut events = watcher(csrs, by_signer).applied_objects().boxed();
    let issued = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, events.try_next())
            .await
            .with_context(|| {
                format!("no serving certificate was issued to {requester} before the deadline")
            })??;
        let Some(csr) = next else {
            bail!("the watch of serving CSRs ended");
        };
        if csr.spec.username.as_deref() != Some(requester.as_str()) {
            continue;
        }
        let status = csr.status.clone().unwrap_or_default();
        if let Some(denied) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Denied")
        {
            bail!(
                "serving CSR {} of {requester} was denied ({:?}); see the Events ServingCSRDenied in kube-system",
                csr.metadata.name.clone().unwrap_or_default(),
                denied.reason
            );
        }
        if status.certificate.is_some_and(|c| !c.0.is_empty()) {
            break csr;
        }
    };
    let issued_after = powered_on.elapsed();
    let name = issued.metadata.name.clone().unwrap_or_default();
    let status = issued.status.clone().unwrap_or_default();
    let approved = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Approved")
        .context("an issued CSR without an Approved condition")?;
    let ours = kubeflavor_core::approval::client::APPROVED_CONDITION;
    ensure!(
        approved.reason.as_deref() == Some(ours.reason),
        "serving CSR {name} was approved by someone else (reason {:?}, not kubeflavor's {})",
        approved.reason,
        ours.reason
    );
    let pem = status.certificate.map(|c| c.0).unwrap_or_default();
    let names = certificate_names(&pem)?;
    ensure!(
        names
            .iter()
            .all(|n| *n == format!("DNS:{node}") || n.starts_with("IP:10.0.2."))
            && names.contains(&format!("DNS:{node}")),
        "the serving certificate names {names:?}: only DNS:{node} and addresses in {GUEST_NETWORK} may be there"
    );
    Ok(Serving {
        csr: name,
        names,
        issued_after,
    })
}

/// A PEM certificate's subject alternative names, as `DNS:x` / `IP:a.b.c.d`.
fn certificate_names(pem: &[u8]) -> anyhow::Result<Vec<String>> {
    use x509_parser::extensions::GeneralName;
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem).context("the issued certificate's PEM")?;
    let cert = block.parse_x509().context("the issued certificate")?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            names.push(match n {
                GeneralName::DNSName(d) => format!("DNS:{d}"),
                GeneralName::IPAddress(b) if b.len() == 4 => {
                    format!("IP:{}", std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]))
                }
                other => format!("{other:?}"),
            });
        }
    }
    Ok(names)
}

/// The input labels the portal attaches (the flavor allows `site` berlin or paris, and
/// `segment` matching `seg-[0-9]{1,4}`).
const INPUT_LABELS: [(&str, &str); 2] = [("segment", "seg-42"), ("site", "berlin")];

fn binding_records_input_labels(binding: &FlavorBinding) -> anyhow::Result<()> {
    let want: BTreeMap<String, String> = INPUT_LABELS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ensure!(
        binding.spec.input_labels == want,
        "FlavorBinding records input labels {:?}, not {want:?}",
        binding.spec.input_labels
    );
    Ok(())
}

/// The field managers of `key` in the Node's labels (its managedFields).
fn label_managers(node: &Node, key: &str) -> Vec<String> {
    let field = format!("f:{key}");
    node.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:metadata/f:labels")
                    .and_then(serde_json::Value::as_object)
                    .is_some_and(|labels| labels.contains_key(&field))
            })
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// What the API server answers the kubelet of `node` (user `system:node:<node>`, group
/// `system:nodes`) that sets `key` on its own Node, as `--node-labels` would: the admin's
/// kubeconfig impersonating it, so authorization (Node) and admission (NodeRestriction)
/// see exactly the kubelet's request. Anything but a 403 from NodeRestriction is an error.
async fn kubelet_label_refused(admin_yaml: &str, node: &str, key: &str) -> anyhow::Result<String> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(admin_yaml)?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.auth_info.impersonate = Some(format!("system:node:{node}"));
    config.auth_info.impersonate_groups =
        Some(vec!["system:nodes".into(), "system:authenticated".into()]);
    let kubelet: Api<Node> = Api::all(kube::Client::try_from(config)?);
    let patch = json!({"metadata": {"labels": {key: "forged"}}});
    match kubelet
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("not allowed to modify labels") =>
        {
            Ok(format!("{} {}", s.code, s.message))
        }
        Err(e) => {
            bail!("the kubelet's write of {key} failed otherwise than NodeRestriction's 403: {e}")
        }
        Ok(_) => bail!("the API server let the kubelet of {node} set {key}"),
    }
}

/// Polls the VM's console (a file QEMU appends to; nothing announces a new line) until it
/// holds `needle`, up to `deadline`; how long after power-on it appeared.
async fn wait_for_console(
    run: &Run,
    powered_on: Instant,
    deadline: Instant,
    needle: &str,
) -> anyhow::Result<Duration> {
    let vm = run.vm.as_ref().context("no VM")?;
    loop {
        if vm.console(None).contains(needle) {
            return Ok(powered_on.elapsed());
        }
        ensure!(Instant::now() < deadline, "not within the timeout");
        ensure!(vm.running(), "the VM (QEMU pid {}) exited", vm.pid);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// An SSH key pair made for the run (ed25519; the private half is dropped at once): the
/// public key as a portal sends it, and its fingerprints as ssh-keygen and cloud-init's
/// `ssh_authkey_fingerprints` print them.
struct SshKey {
    line: String,
    fingerprint: String,
    cloud_init_fingerprint: String,
    /// The private key's file, when ssh-keygen made the pair (then the run logs in with it).
    private: Option<PathBuf>,
}

impl SshKey {
    /// A new ed25519 pair: by ssh-keygen into `dir` when this machine has it and ssh (the
    /// run then logs in to the VM with it), else rcgen's (the key is then only seen on the
    /// VM's console).
    fn generate(comment: &str, dir: &Path) -> anyhow::Result<SshKey> {
        let private = dir.join("id_ed25519");
        let made = which("ssh").is_some()
            && Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
                .arg(&private)
                .status()
                .is_ok_and(|s| s.success());
        if made {
            let line = std::fs::read_to_string(private.with_extension("pub"))?;
            let parsed: kubeflavor_core::mint::ssh_key::SshPublicKey = line.trim().parse()?;
            return Ok(SshKey::of(&parsed, Some(private)));
        }
        SshKey::generated(comment)
    }

    fn of(
        parsed: &kubeflavor_core::mint::ssh_key::SshPublicKey,
        private: Option<PathBuf>,
    ) -> SshKey {
        use sha2::Digest;
        SshKey {
            fingerprint: parsed.fingerprint(),
            cloud_init_fingerprint: hex::encode(sha2::Sha256::digest(parsed.blob()))
                .as_bytes()
                .chunks(2)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join(":"),
            line: parsed.to_string(),
            private,
        }
    }

    fn generated(comment: &str) -> anyhow::Result<SshKey> {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
        let raw: &[u8; 32] = pair
            .public_key_raw()
            .try_into()
            .context("an ed25519 public key of 32 bytes")?;
        let parsed = kubeflavor_core::mint::ssh_key::SshPublicKey::ed25519(raw, Some(comment))?;
        Ok(SshKey::of(&parsed, None))
    }

    /// Logs in to the VM's default user through the forwarded `port` with the private key,
    /// and returns what `hostname` printed there. The VM's SSH server may start after its
    /// console listed the key: tried again until `deadline`.
    fn log_in(&self, port: u16, deadline: Instant) -> anyhow::Result<Option<String>> {
        let Some(private) = &self.private else {
            return Ok(None);
        };
        let mut last = String::new();
        while Instant::now() < deadline {
            let out = Command::new("ssh")
                .arg("-i")
                .arg(private)
                .args(["-p", &port.to_string()])
                .args([
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "IdentitiesOnly=yes",
                    "-o",
                    "ConnectTimeout=10",
                    "-o",
                    "StrictHostKeyChecking=no",
                    "-o",
                    "UserKnownHostsFile=/dev/null",
                    "-o",
                    "LogLevel=ERROR",
                    "debian@127.0.0.1",
                    "hostname",
                ])
                .output()?;
            if out.status.success() {
                return Ok(Some(
                    String::from_utf8_lossy(&out.stdout).trim().to_string(),
                ));
            }
            last = String::from_utf8_lossy(&out.stderr).trim().to_string();
            // The VM's sshd is another machine's process: nothing to await but its port.
            std::thread::sleep(Duration::from_secs(2));
        }
        bail!("could not log in to the VM over SSH with the pasted key: {last}")
    }
}

/// The Node carries its flavor's label and no longer the unverified taint.
fn is_flavored(node: &Node, flavor: &str) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(FLAVOR_LABEL))
        .is_some_and(|f| f == flavor);
    labelled
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == UNVERIFIED_TAINT))
}

fn progress(what: &str) {
    eprintln!("[appliance_join] {what}");
}

/// alice's way through the web portal at `origin`, in a real browser: sign in at the
/// provider's login page, name the node, choose the run's input labels, paste her key, get
/// the token; then download the seed image. The token's id and secret (to find and redact
/// it), and the image's bytes.
async fn through_the_portal(
    origin: &str,
    password: &str,
    node: &str,
    labels: &BTreeMap<&str, &str>,
    ssh_key: &str,
) -> anyhow::Result<(serde_json::Value, Vec<u8>)> {
    use fantoccini::Locator;
    let browser = browser::Browser::start().await;
    let c = &browser.client;
    browser.sign_in(origin, "alice", password, None).await;
    c.find(Locator::Id("hostname"))
        .await?
        .send_keys(node)
        .await?;
    for (key, value) in labels {
        let field = c.find(Locator::Id(&format!("label-{key}"))).await?;
        if field.tag_name().await? == "select" {
            field
                .find(Locator::Css(&format!("option[value='{value}']")))
                .await?
                .click()
                .await?;
        } else {
            field.send_keys(value).await?;
        }
    }
    c.find(Locator::Id("sshAuthorizedKeys"))
        .await?
        .send_keys(ssh_key)
        .await?;
    c.find(Locator::Css("form[action='/tokens'] button[type='submit']"))
        .await?
        .click()
        .await?;
    let line = browser
        .wait_for("the token page", Locator::Css("pre.secret"))
        .await
        .text()
        .await?;
    let token = line
        .split_whitespace()
        .skip_while(|w| *w != "--token")
        .nth(1)
        .context("the portal's join line names no --token")?
        .to_string();
    let (id, _) = token.split_once('.').context("not a bootstrap token")?;
    progress(&format!(
        "the portal showed alice her token {id}.<secret> once; she downloads the seed image"
    ));
    c.find(Locator::XPath("//button[text()='Download the seed image']"))
        .await?
        .click()
        .await?;
    let image = browser
        .downloaded(&format!("{node}-seed.img"), Duration::from_secs(60))
        .await;
    browser.close().await;
    Ok((json!({"id": id, "token": token}), image))
}

/// The join-token API's node administrators: the provider's first issuer, and a Roster of
/// this run giving alice's group (sweet-admins) `flavor`, with the run's input labels.
async fn administrators(
    admin: &kube::Client,
    env: &BTreeMap<String, String>,
    roster: &str,
    flavor: &str,
) -> anyhow::Result<std::sync::Arc<kubeflavor::serve::Administrators>> {
    use kubeflavor::serve::oidc::{IssuerConfig, Verifier};
    use kubeflavor_cluster::crd::roster::Roster;
    use rustls_pki_types::pem::PemObject;
    let get = |k: &str| {
        env.get(k)
            .cloned()
            .with_context(|| format!("the provider's env file names no {k}"))
    };
    let issuer = get("KUBEFLAVOR_OIDC_ISSUER")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(get("KUBEFLAVOR_OIDC_CA")?)? {
        roots.add(cert?)?;
    }
    let object: Roster = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Roster",
        "metadata": {"name": roster},
        "spec": {
            "tokenDefaults": {"ttl": "30m"},
            "inputLabels": {"keys": [
                {"key": "site", "values": ["berlin", "paris"]},
                {"key": "segment", "pattern": "seg-[0-9]{1,4}"},
            ]},
            "rules": [{"name": "appliance-admins", "issuer": issuer, "group": "sweet-admins", "flavor": flavor}],
        },
    }))?;
    Api::<Roster>::all(admin.clone())
        .create(&Default::default(), &object)
        .await
        .context("creating the run's Roster")?;
    Ok(std::sync::Arc::new(kubeflavor::serve::Administrators::new(
        Verifier::new(
            vec![IssuerConfig {
                issuer,
                audience: get("KUBEFLAVOR_OIDC_CLIENT_ID")?,
            }],
            "groups".into(),
            roots,
        ),
        roster.to_string(),
    )))
}
