//! appliance_sites: P9 with real VMs on real networks. Two appliance VMs (../shared/appliance)
//! of one flavor boot with the cloud-init document the join-token API mints, each with a
//! second NIC on a network this run builds on this machine: a network namespace holding a
//! bridge (the site's gateway), the VM's tap device and a veth to this host, routed, with
//! its own /24. The join-token API (`kubeflavor serve --node-client-ca-file`) listens on an
//! address of this host that each VM reaches through its site's gateway.
//!
//!     img=$(../shared/appliance/build | tail -1)
//!     bin=$(bash image/build >/dev/null; echo target/x86_64-unknown-linux-gnu/release/kubeflavor)
//!     docker save "$(bash image/build)" -o /tmp/kubeflavor-image.tar
//!     cargo run -p kubeflavor --example appliance_sites -- --kubeconfig FILE --image "$img" \
//!         --kubeflavor "$bin" --image-archive /tmp/kubeflavor-image.tar
//!
//! On each VM, as an appliance image would, cloud-init installs the kubeflavor binary
//! (carried in the seed image), writes the reporter's systemd unit with `kubeflavor node
//! report --systemd-unit` and starts it once the node has joined. With `--image-archive`
//! (the controller image, `docker save`), the lyon VM imports it into its containerd
//! instead and its reporter is `install --node-reporter`'s DaemonSet, whose pod the run
//! binds to it (the control plane has no scheduler): the reporter as pods run it, reading
//! the kubelet's credentials from the host. Then:
//! - the VM on `lyon`'s network is observed there: its Node gets the observed site, the
//!   Site's zone and region, its (true) claims, and no site taint;
//! - the VM on `paris`'s network lies: it gives itself a lyon address on a dummy interface,
//!   so its report claims a lyon prefix. It is observed in paris; its claim is not copied
//!   and is recorded as contradicting, with a Warning Event; the flavor allows lyon only,
//!   so it is tainted `kubeflavor.io/site-not-allowed`;
//! - on that VM, with the kubelet's own credentials (its kubeconfig, as root), kubectl tries
//!   to write the other node's NodeReport and to set its own `topology.kubernetes.io/zone`:
//!   the API server refuses both, and the zone stays the observed site's.
//!
//! Needs root (network namespaces, tap devices). It makes, named after a run id, and
//! removes on success and failure alike: the VMs, the namespaces, veths, taps, routes and
//! the observer's address, the Sites, the Flavor, the portal's account, the
//! tokens, Nodes, FlavorBindings, CSRs, NodeReports and Events. The controller runs
//! in-process, scoped to the run's names. The last line is the run's figures as JSON; exit
//! code 1 when an expectation fails.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::PostParams;

use kubeflavor_cluster::crd::network::{NodeReport, Site};
use kubeflavor_core::admission::node_report::POLICY_NAME as REPORT_POLICY;
use kubeflavor_core::flavor::FLAVOR_LABEL;
use kubeflavor_core::network::probe::{ROUND_TRIP_LABEL, SERVING_LABEL};
use kubeflavor_core::network::{
    CLAIMED_PREFIX, REGION_LABEL, SITE_LABEL, SITE_NOT_ALLOWED_TAINT, ZONE_LABEL,
};
use serde_json::json;

// The pieces appliance_join uses too, some of which this run does not.
#[allow(dead_code)]
#[path = "support/appliance.rs"]
mod appliance;
#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "../tests/support/https.rs"]
mod https;
#[path = "../tests/support/portal.rs"]
mod portal;
#[allow(dead_code)]
#[path = "../tests/support/sweep.rs"]
mod sweep;

use appliance::{
    Seed, Vm, api_server_port, client_from, kf, load_average, secs, taints_of,
    with_serving_bootstrap,
};

/// appliance_sites: two VMs on two networks this run builds; each is observed on its own
/// site, a lying claim is refused, and a node cannot write another's report or its zone.
#[derive(Debug, Parser)]
#[command(
    name = "appliance_sites",
    after_help = "Run (as root): cargo run -p kubeflavor --example appliance_sites -- --kubeconfig FILE --image DIR --kubeflavor BIN"
)]
struct Args {
    #[command(flatten)]
    vm: appliance::VmArgs,
    /// The kubeflavor binary the VMs run: statically linked, as image/build makes it
    /// (target/x86_64-unknown-linux-gnu/release/kubeflavor), so it runs on the appliance's
    /// Debian whatever this machine's C library is.
    #[arg(long, value_name = "FILE")]
    kubeflavor: PathBuf,
    /// Container images as `docker save` wrote them, repeated: the controller image
    /// (image/build's) and the pod sandbox image (testbed/pause/build's; the VM has no
    /// registry to pull it from). The lyon VM imports them into its containerd, and its
    /// reporter is `install --node-reporter`'s DaemonSet, whose pod this run binds to it (the
    /// control plane has no scheduler), instead of the systemd unit. Without them both VMs
    /// run the unit.
    #[arg(long, value_name = "FILE")]
    image_archive: Vec<PathBuf>,
    /// How long both Nodes may take from power-on to observed and judged (emulated VMs,
    /// two at once: several minutes under load).
    #[arg(long, value_name = "SECONDS", default_value_t = 900)]
    timeout: u64,
}

/// The flavor's label, which both flavored Nodes carry.
const CLASS_LABEL: &str = "tier.node-restriction.kubernetes.io/class";
const CLASS: &str = "sited";
/// How often the waits say where the VMs are.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);
/// Where the VMs install the reporter's pieces.
const VM_BINARY: &str = "/usr/local/bin/kubeflavor";
const VM_OBSERVER_CA: &str = "/etc/kubeflavor/observer-ca.crt";
const VM_UNIT: &str = "/etc/systemd/system/kubeflavor-node-report.service";
const VM_KUBELET_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";
/// The kubelet's port, where the observer connects back.
const KUBELET_PORT: u16 = 10250;
/// The container images' archives in the seed image are this, a number and `.tar`.
const IMAGE_ARCHIVE_PREFIX: &str = "image-";
/// The marker of the lines the lying VM's attempts print on its console.
const ATTEMPT: &str = "KUBEFLAVOR-ATTEMPT";
/// The address the lying VM gives itself on lyon's network.
const LIE_HOST: u8 = 77;

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
        vms: Vec::new(),
        networks: None,
        tasks: Vec::new(),
        secrets: Vec::new(),
        namespaces: Vec::new(),
    };
    let outcome = appliance::until_interrupted(scenario(&a, &mut run)).await;
    // The VMs first (their kubelets would register the Nodes again), then the networks,
    // the processes and the objects.
    for vm in run.vms.drain(..) {
        if outcome.is_err() {
            eprintln!("--- {}", vm.stem.display());
            vm.show_console_tail(None);
        }
        vm.remove();
    }
    if let Some(networks) = run.networks.take() {
        networks.remove();
    }
    for task in &run.tasks {
        task.abort();
    }
    for namespace in &run.namespaces {
        if let Err(e) = delete_namespace(&a.vm.kubeconfig, namespace).await {
            eprintln!("warning: namespace {namespace} was not deleted: {e:#}");
        }
    }
    appliance::finish(&a.vm.kubeconfig, &run.id, run.made, outcome, &run.secrets).await
}

/// What the run made, for the clean-up.
struct Run {
    id: String,
    made: sweep::Made,
    vms: Vec<Vm>,
    networks: Option<Networks>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The tokens' secret halves, masked wherever a console or an error is shown.
    secrets: Vec<String>,
    /// Namespaces the run made (the node reporter's).
    namespaces: Vec<String>,
}

impl Run {
    fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.id)
    }
}

/// One site of the run: its Site object, its network, and the VM on it.
struct SiteRun {
    site: String,
    zone: String,
    /// The site's /24 is 10.<block>.<index>.0/24.
    index: u8,
    node: String,
    /// Whether the VM on it lies about its network and tries the other node's report and
    /// its own zone.
    liar: bool,
}

async fn scenario(a: &Args, run: &mut Run) -> anyhow::Result<serde_json::Value> {
    ensure!(
        a.vm.image.join("root.img").is_file(),
        "--image {} holds no root.img: build the appliance first (../shared/appliance/build)",
        a.vm.image.display()
    );
    ensure!(
        a.kubeflavor.is_file(),
        "--kubeflavor {} is not a file: build the static binary (bash image/build)",
        a.kubeflavor.display()
    );
    let admin_yaml = std::fs::read_to_string(&a.vm.kubeconfig)
        .with_context(|| format!("reading --kubeconfig {}", a.vm.kubeconfig.display()))?;
    let admin = kubeflavor::join::client_from_kubeconfig(&admin_yaml)
        .await
        .map_err(anyhow::Error::msg)?;
    let api_port = api_server_port(&a.vm.kubeconfig)?;

    let block = free_block(&run.id)?;
    let sites = [
        SiteRun {
            site: run.name("lyon"),
            zone: "lyon-a".into(),
            index: 1,
            node: run.name("sited-lyon"),
            liar: false,
        },
        SiteRun {
            site: run.name("paris"),
            zone: "paris-a".into(),
            index: 2,
            node: run.name("sited-paris"),
            liar: true,
        },
    ];
    let region = "fr";
    progress(&format!(
        "networks 10.{block}.1.0/24 ({}) and 10.{block}.2.0/24 ({}), each in a namespace of its own behind a veth; the observer at {}",
        sites[0].site,
        sites[1].site,
        Networks::observer(block)
    ));
    let networks = Networks::build(&run.id, block)?;
    run.networks = Some(networks.clone());

    progress("kubeflavor install --apply --replicas 0; the Sites; a flavor allowed on lyon only");
    kf(&a.vm.kubeconfig, &["install", "--apply", "--replicas", "0"]).await?;
    let site_api: Api<Site> = Api::all(admin.clone());
    for s in &sites {
        let site: Site = serde_json::from_value(json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Site",
            "metadata": {"name": s.site},
            "spec": {"ranges": [format!("10.{block}.{}.0/24", s.index)], "zone": s.zone, "region": region},
        }))?;
        site_api.create(&PostParams::default(), &site).await?;
    }
    let flavor = run.name("sited");
    kf(
        &a.vm.kubeconfig,
        &[
            "flavor",
            "create",
            &flavor,
            "--label",
            &format!("{CLASS_LABEL}={CLASS}"),
            "--allowed-site",
            &sites[0].site,
            // Serving certificates for the sites' addresses (and QEMU's user network,
            // where a kubelet left to its default address is).
            "--serving-address",
            &format!("10.{block}.0.0/16"),
            "--serving-address",
            "10.0.2.0/24",
        ],
    )
    .await?;
    let portal_token =
        portal::portal(&admin, "default", &run.name("sited-portal"), &[&flavor]).await;

    progress("the controller, scoped to this run's names; the join-token API observing nodes");
    run.tasks
        .push(appliance::start_controller(&admin, "appliance-sites", &run.id).await?);
    let dir = tempfile::tempdir()?;
    let (api, server) = https::serve_observing(
        &a.vm.kubeconfig,
        "appliance-sites",
        {
            let path = dir.path().join("cluster-ca.crt");
            https::write_cluster_ca(&admin_yaml, &path)?;
            path
        },
        SocketAddr::from((Networks::observer(block), 0)),
        KUBELET_PORT,
        std::future::pending(),
    )
    .await?;
    run.tasks.push(server);
    let observer_url = format!("https://{}", api.addr());

    // With the controller image: lyon's reporter is install --node-reporter's DaemonSet.
    let by_daemon_set = |s: &SiteRun| !a.image_archive.is_empty() && !s.liar;
    let reporter_namespace = match a.image_archive.first() {
        None => None,
        Some(_) => {
            let namespace = run.name("sites");
            let reporter = format!("{namespace}-node-reporter");
            run.namespaces.push(reporter.clone());
            progress(&format!(
                "kubeflavor install --namespace {namespace} --node-reporter {observer_url} --node-reporter-ca-configmap observer-ca --node-reporter-every 30s: its namespace and DaemonSet; {} binds its pod for {} (no scheduler here)",
                "this run", sites[0].node
            ));
            node_reporter(
                &a.vm.kubeconfig,
                &admin,
                &namespace,
                &observer_url,
                api.pem(),
            )
            .await?;
            let (admin, node) = (admin.clone(), sites[0].node.clone());
            let bind_in = reporter.clone();
            run.tasks.push(tokio::spawn(async move {
                if let Err(e) = bind_pods(&admin, &bind_in, &node).await {
                    eprintln!("error: binding the reporter's pod: {e:#}");
                }
            }));
            Some(reporter)
        }
    };

    let nodes: Api<Node> = Api::all(admin.clone());
    for s in &sites {
        progress(&format!("the portal mints a {flavor} token for {}", s.node));
        let body = json!({"issuedTo": format!("appliance-sites/{}", s.node), "ttl": "30m", "output": "cloud-init"});
        let (code, minted) = api
            .post(
                &format!("/v1/flavors/{flavor}/jointokens"),
                Some(&portal_token),
                None,
                body.to_string().as_bytes(),
            )
            .await;
        if let Some(id) = minted["id"].as_str() {
            run.made.token_id(id);
        }
        ensure!(
            code == http::StatusCode::CREATED,
            "the mint answered {code}: {}",
            minted["message"]
        );
        if let Some((_, secret)) = minted["token"].as_str().and_then(|t| t.split_once('.')) {
            run.secrets.push(secret.to_string());
        }
        let document = minted["cloudInit"]
            .as_str()
            .context("the answer has no cloudInit")?;
        let other = sites
            .iter()
            .find(|o| o.index != s.index)
            .context("two sites")?;
        // Both kubelets ask for a serving certificate; lyon's names its site address as the
        // node's (kubelet --node-ip), paris's keeps QEMU's user network address, so only
        // lyon answers at its observed address with a certificate for it.
        let mut document = with_serving_bootstrap(document)?;
        if !s.liar {
            document = with_node_ip(&document, &format!("10.{block}.{}.10", s.index))?;
        }
        let document = with_reporter(
            &document,
            &observer_url,
            api.pem(),
            (block, s.index),
            s.liar.then_some(other),
            by_daemon_set(s),
        )?;
        let seed = dir.path().join(format!("{}.iso", s.node));
        seed_image(
            &seed,
            &document,
            &network_config(block, s.index),
            &s.node,
            &a.kubeflavor,
            if by_daemon_set(s) {
                &a.image_archive
            } else {
                &[]
            },
        )?;
        let tap = networks.tap(s.index);
        progress(&format!(
            "power-on: {} on {} (a second NIC on {tap}, 10.{block}.{}.10/24)",
            s.node, s.site, s.index
        ));
        let vm = Vm::boot(
            &a.vm.boot,
            &a.vm.image,
            &s.node,
            Seed::Image(&seed),
            &[
                ("APPLIANCE_API_PORT", api_port.to_string()),
                ("APPLIANCE_TAP", tap.clone()),
                ("APPLIANCE_TAP_MAC", site_mac(s.index)),
            ],
        )?;
        run.vms.push(vm);
        std::fs::remove_file(&seed)?;
        // QEMU has opened the tap: now it goes into the site's namespace, on its bridge.
        networks.attach_tap(s.index)?;
    }
    let powered_on = Instant::now();
    let deadline = powered_on + Duration::from_secs(a.timeout);

    // lyon: observed there, its true claims copied, allowed.
    let lyon = &sites[0];
    let honest = wait_node(
        run,
        &nodes,
        &lyon.node,
        deadline,
        "observed on lyon, its claims copied",
        |n| {
            label(n, SITE_LABEL) == Some(lyon.site.as_str())
                && label(n, &format!("{CLAIMED_PREFIX}site")).is_some()
                && !taints_of(n)
                    .iter()
                    .any(|t| t.starts_with(SITE_NOT_ALLOWED_TAINT))
        },
    )
    .await?;
    let honest_after = powered_on.elapsed();
    ensure!(
        label(&honest, FLAVOR_LABEL) == Some(flavor.as_str()),
        "{} is not of {flavor}: {:?}",
        lyon.node,
        honest.metadata.labels
    );
    ensure!(
        label(&honest, ZONE_LABEL) == Some(lyon.zone.as_str())
            && label(&honest, REGION_LABEL) == Some(region),
        "{}'s zone and region are not lyon's: {:?}",
        lyon.node,
        honest.metadata.labels
    );
    ensure!(
        label(&honest, &format!("{CLAIMED_PREFIX}site")) == Some(lyon.site.as_str()),
        "{}'s claimed site is not lyon: {:?}",
        lyon.node,
        honest.metadata.labels
    );
    // Connected back to at its site address: its own certificate answers there. The
    // kubelet's serving certificate comes after the join: the reporter's next round sees it.
    let honest = wait_node(
        run,
        &nodes,
        &lyon.node,
        deadline,
        "verified at its site address",
        |n| label(n, SERVING_LABEL) == Some("verified"),
    )
    .await?;
    let reported_by = match &reporter_namespace {
        None => "its systemd unit (node report --systemd-unit)".to_string(),
        Some(namespace) => {
            let pods: Api<k8s_openapi::api::core::v1::Pod> =
                Api::namespaced(admin.clone(), namespace);
            let running = pods
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(lyon.node.as_str())
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .with_context(|| {
                    format!("no running reporter pod on {} in {namespace}", lyon.node)
                })?;
            format!(
                "the DaemonSet's pod {}/{}",
                namespace,
                running.metadata.name.unwrap_or_default()
            )
        }
    };
    ensure!(
        label(&honest, ROUND_TRIP_LABEL).is_some(),
        "{} has no round-trip label: {:?}",
        lyon.node,
        honest.metadata.labels
    );
    progress(&format!(
        "{} observed on {} ({} s after power-on; reported by {reported_by}): zone {}, claimed site {}, no site taint; its own serving certificate answers at its site address, round trip {}",
        lyon.node,
        lyon.site,
        honest_after.as_secs(),
        lyon.zone,
        lyon.site,
        label(&honest, ROUND_TRIP_LABEL).unwrap_or_default()
    ));

    // paris: observed there; its lyon claim refused; kept off by the flavor.
    let paris = &sites[1];
    let liar = wait_node(
        run,
        &nodes,
        &paris.node,
        deadline,
        "observed on paris and tainted",
        |n| {
            label(n, SITE_LABEL) == Some(paris.site.as_str())
                && taints_of(n)
                    .iter()
                    .any(|t| t.starts_with(SITE_NOT_ALLOWED_TAINT))
        },
    )
    .await?;
    let liar_after = powered_on.elapsed();
    let claimed: Vec<&String> = liar
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with(CLAIMED_PREFIX))
        .collect();
    ensure!(
        claimed.is_empty(),
        "{}'s contradicting claim was copied: {claimed:?}",
        paris.node
    );
    ensure!(
        label(&liar, ZONE_LABEL) == Some(paris.zone.as_str()),
        "{}'s zone is {:?}, not its observed site's {}",
        paris.node,
        label(&liar, ZONE_LABEL),
        paris.zone
    );
    let reports: Api<NodeReport> = Api::all(admin.clone());
    // The controller writes the report's status right after the Node: watched for.
    let report = tokio::time::timeout(
        deadline.saturating_duration_since(Instant::now()),
        kube::runtime::wait::await_condition(
            reports.clone(),
            &paris.node,
            |r: Option<&NodeReport>| {
                r.and_then(|r| r.status.as_ref())
                    .is_some_and(|s| s.claim.is_some() && s.observed.is_some())
            },
        ),
    )
    .await
    .with_context(|| format!("NodeReport {} was not judged in time", paris.node))??
    .with_context(|| format!("NodeReport {} is gone", paris.node))?;
    let status = report.status.clone().unwrap_or_default();
    let observed = status.observed.clone().context("no observation recorded")?;
    let paris_address = format!("10.{block}.{}.10", paris.index);
    ensure!(
        observed.address == paris_address,
        "{} was observed at {}, not its site address {paris_address}",
        paris.node,
        observed.address
    );
    ensure!(
        observed.serving_certificate.as_deref() == Some("unverified"),
        "connecting back to {} at {} gave {:?}, not unverified (its certificate names 10.0.2.15, not its site address)",
        paris.node,
        observed.address,
        observed.serving_certificate
    );
    let verdict = status
        .claim
        .as_ref()
        .map(|c| c.verdict.clone())
        .unwrap_or_default();
    ensure!(
        verdict == "Contradicts",
        "the claim of {} was read {verdict:?}, not Contradicts: {:?}",
        paris.node,
        status.claim
    );
    let lie = format!("10.{block}.{}.{LIE_HOST}", lyon.index);
    ensure!(
        report
            .spec
            .interfaces
            .iter()
            .any(|i| i.addresses.iter().any(|x| x.starts_with(&lie))),
        "the liar's report does not carry its lie ({lie}): {:?}",
        report.spec.interfaces
    );
    let event = claim_event(&admin, &paris.node, deadline).await?;
    progress(&format!(
        "{} observed on {} at {} ({} s after power-on): its claim of {lie} refused ({verdict}), Event {}: {}",
        paris.node,
        paris.site,
        observed.address,
        liar_after.as_secs(),
        event.reason.clone().unwrap_or_default(),
        event.note.clone().unwrap_or_default()
    ));

    // What the lying VM tried with the kubelet's credentials.
    let liar_vm = run
        .vms
        .iter()
        .find(|v| v.stem.ends_with(&paris.node))
        .context("the liar's VM")?;
    let other_report = attempt(liar_vm, "other-report", deadline).await?;
    ensure!(
        other_report.0 != 0 && other_report.1.contains(REPORT_POLICY),
        "writing {}'s report from {} was not refused by {REPORT_POLICY}: rc {} {}",
        lyon.node,
        paris.node,
        other_report.0,
        other_report.1
    );
    let zone = attempt(liar_vm, "zone", deadline).await?;
    ensure!(
        zone.0 != 0
            && zone
                .1
                .contains("may not set, change or remove topology.kubernetes.io/zone"),
        "the kubelet's own write of its zone was not refused: rc {} {}",
        zone.0,
        zone.1
    );
    let honest_report = reports.get(&lyon.node).await?;
    ensure!(
        honest_report.spec.dhcp_domain.as_deref() != Some("forged.example"),
        "{}'s report carries what {} wrote",
        lyon.node,
        paris.node
    );
    let after = nodes.get(&paris.node).await?;
    ensure!(
        label(&after, ZONE_LABEL) == Some(paris.zone.as_str()),
        "after the kubelet's try, {}'s zone is {:?}",
        paris.node,
        label(&after, ZONE_LABEL)
    );
    progress(&format!(
        "from {} with the kubelet's credentials: {}'s report refused ({}); its own zone refused ({}); the zone is still {}",
        paris.node,
        lyon.node,
        first_line(&other_report.1),
        first_line(&zone.1),
        paris.zone
    ));

    Ok(json!({
        "scenario": "appliance_sites",
        "flavor": flavor,
        "networks": [format!("10.{block}.1.0/24"), format!("10.{block}.2.0/24")],
        "observer": observer_url,
        "honest": {"node": lyon.node, "observed_site": label(&honest, SITE_LABEL), "zone": label(&honest, ZONE_LABEL),
            "claimed_site": label(&honest, &format!("{CLAIMED_PREFIX}site")), "taints": taints_of(&honest),
            "serving_certificate": label(&honest, SERVING_LABEL), "round_trip": label(&honest, ROUND_TRIP_LABEL),
            "reported_by": reported_by,
            "power_on_to_judged_s": secs(honest_after)},
        "liar": {"node": paris.node, "observed_site": label(&liar, SITE_LABEL), "observed_address": observed.address,
            "zone": label(&liar, ZONE_LABEL), "claim": verdict,
            "serving_certificate": observed.serving_certificate, "round_trip_us": observed.round_trip_microseconds, "event": event.reason, "taints": taints_of(&liar),
            "power_on_to_judged_s": secs(liar_after)},
        "other_report_refused": first_line(&other_report.1),
        "kubelet_zone_refused": first_line(&zone.1),
        "load_average_1m": load_average(),
    }))
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(240)
        .collect()
}

fn progress(what: &str) {
    eprintln!("[appliance_sites] {what}");
}

/// Waits (by watch) until the Node `name` satisfies `done`, saying where the VMs are every
/// [`PROGRESS_EVERY`]; fails when a VM exits or the deadline passes.
async fn wait_node(
    run: &Run,
    nodes: &Api<Node>,
    name: &str,
    deadline: Instant,
    what: &str,
    done: impl Fn(&Node) -> bool + Clone,
) -> anyhow::Result<Node> {
    loop {
        for vm in &run.vms {
            ensure!(
                vm.running(),
                "the VM {} (QEMU pid {}) exited",
                vm.stem.display(),
                vm.pid
            );
        }
        let left = deadline.saturating_duration_since(Instant::now());
        ensure!(!left.is_zero(), "Node {name} was not {what} in time");
        let check = done.clone();
        let waited = tokio::time::timeout(
            left.min(PROGRESS_EVERY),
            kube::runtime::wait::await_condition(nodes.clone(), name, move |n: Option<&Node>| {
                n.is_some_and(&check)
            }),
        )
        .await;
        match waited {
            Ok(Ok(Some(node))) => return Ok(node),
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => return Err(e).with_context(|| format!("watching Node {name}")),
            Err(_) => {
                let seen = nodes.get_opt(name).await?;
                progress(&format!(
                    "waiting for {name} to be {what}: {}; consoles: {}",
                    match &seen {
                        None => "no Node yet".to_string(),
                        Some(n) =>
                            format!("site {:?}, taints {:?}", label(n, SITE_LABEL), taints_of(n)),
                    },
                    run.vms
                        .iter()
                        .map(|v| v.console_last_line(None))
                        .collect::<Vec<_>>()
                        .join(" | ")
                ));
            }
        }
    }
}

/// `install --node-reporter` (as printed for the install namespace `namespace`, observed by
/// `observer`, every 30 s) applied: the reporter's namespace, its DaemonSet and the
/// ConfigMap `observer-ca` with the observer's CA.
async fn node_reporter(
    kubeconfig: &Path,
    admin: &kube::Client,
    namespace: &str,
    observer: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let argv: Vec<String> = [
        "kubeflavor",
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "install",
        "--namespace",
        namespace,
        "--node-reporter",
        observer,
        "--node-reporter-ca-configmap",
        "observer-ca",
        "--node-reporter-every",
        "30s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut out = Vec::new();
    kubeflavor::run(argv, &mut out)
        .await
        .map_err(|e| anyhow::anyhow!("kubeflavor install --node-reporter: {e}"))?;
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&String::from_utf8(out)?)?;
    let pick = |kind: &str| {
        documents
            .iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.contains("node-reporter"))
            })
            .cloned()
            .with_context(|| format!("install printed no node reporter {kind}"))
    };
    let (ns, ds) = (pick("Namespace")?, pick("DaemonSet")?);
    let reporter = ns["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pp = PostParams::default();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(&pp, &serde_json::from_value(ns)?)
        .await?;
    let ca: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "observer-ca", "namespace": reporter},
        "data": {"ca.crt": ca_pem},
    }))?;
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin.clone(), &reporter)
        .create(&pp, &ca)
        .await?;
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), &reporter)
        .create(&pp, &serde_json::from_value(ds)?)
        .await?;
    Ok(())
}

/// What a scheduler does for the DaemonSet's pod meant for `node` (its required node
/// affinity names it): binds it there. Watched for until the run ends.
async fn bind_pods(admin: &kube::Client, namespace: &str, node: &str) -> anyhow::Result<()> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{WatchStreamExt, watcher};
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let stream = watcher(pods.clone(), watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    while let Some(pod) = stream.next().await {
        let Ok(pod) = pod else { continue };
        let spec = pod.spec.clone().unwrap_or_default();
        let meant = serde_json::to_value(&spec.affinity)?
            .pointer("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
            .and_then(serde_json::Value::as_str)
            == Some(node);
        if spec.node_name.is_some() || !meant {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        pods.create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await?;
        progress(&format!("bound the reporter's pod {name} to {node}"));
    }
    Ok(())
}

/// Deletes the namespace `name` and waits (2 minutes at most) until it is gone. Its pods
/// are deleted first with no grace period: their VM is gone, and no kubelet would
/// confirm a graceful end.
async fn delete_namespace(kubeconfig: &Path, name: &str) -> anyhow::Result<()> {
    use kube::api::DeleteParams;
    use kube::runtime::wait::{await_condition, conditions::is_deleted};
    let client = client_from(&std::fs::read_to_string(kubeconfig)?).await;
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), name);
    for pod in pods.list(&Default::default()).await?.items {
        let pod = pod.metadata.name.unwrap_or_default();
        pods.delete(&pod, &DeleteParams::default().grace_period(0))
            .await?;
    }
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client);
    let Some(namespace) = namespaces.get_opt(name).await? else {
        return Ok(());
    };
    namespaces.delete(name, &Default::default()).await?;
    let uid = namespace.metadata.uid.unwrap_or_default();
    tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(namespaces, name, is_deleted(&uid)),
    )
    .await
    .context("still terminating after 2 minutes")??;
    Ok(())
}

/// The Warning Event ClaimContradicted the controller wrote about `node` (watched for).
async fn claim_event(admin: &kube::Client, node: &str, deadline: Instant) -> anyhow::Result<Event> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let events: Api<Event> = Api::namespaced(admin.clone(), "kube-system");
    let stream = watcher(events, watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    let found = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), async {
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            if event.reason.as_deref() == Some("ClaimContradicted")
                && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
            {
                return Some(event);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(event)) => Ok(event),
        _ => bail!("no Event ClaimContradicted about {node}"),
    }
}

/// What the lying VM's attempt `what` printed on its console: its exit code and output.
async fn attempt(vm: &Vm, what: &str, deadline: Instant) -> anyhow::Result<(i32, String)> {
    let marker = format!("{ATTEMPT} {what} rc=");
    loop {
        let console = vm.console(None);
        if let Some(line) = console
            .lines()
            .find_map(|l| l.split_once(&marker).map(|(_, rest)| rest.to_string()))
        {
            let (rc, output) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            return Ok((rc.trim().parse().unwrap_or(-1), output.to_string()));
        }
        ensure!(
            Instant::now() < deadline,
            "the VM never printed its attempt {what}"
        );
        ensure!(vm.running(), "the VM (QEMU pid {}) exited", vm.pid);
        // The console is a file QEMU appends to: nothing announces a new line.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The second octet of a 10.x.0.0/16 no route of this machine touches, derived from the
/// run id (runs side by side get their own).
fn free_block(run_id: &str) -> anyhow::Result<u8> {
    let routes = Command::new("ip")
        .args(["-4", "route", "show", "table", "all"])
        .output()
        .context("running ip (iproute2)")?;
    let routes = String::from_utf8_lossy(&routes.stdout);
    let start = run_id
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    for i in 0..128u32 {
        let block = (64 + (start + i) % 128) as u8;
        let prefix = format!("10.{block}.");
        if !routes.lines().any(|l| l.contains(&prefix)) {
            return Ok(block);
        }
    }
    bail!("no free 10.x.0.0/16 between 10.64 and 10.191 on this machine")
}

/// The MAC of a VM's site NIC.
fn site_mac(index: u8) -> String {
    format!("52:54:00:77:{index:02x}:10")
}

/// The VM's network-config: the first NIC as it is (QEMU's user network, the API server's
/// way), the second on its site. (The route to the observer is added by a command: the
/// image's ifupdown renders network-config routes with `route`, which it lacks.)
fn network_config(block: u8, index: u8) -> String {
    format!(
        "version: 2\n\
         ethernets:\n\
         \x20 user:\n\
         \x20   match: {{macaddress: \"52:54:00:12:34:56\"}}\n\
         \x20   dhcp4: true\n\
         \x20 site:\n\
         \x20   match: {{macaddress: \"{mac}\"}}\n\
         \x20   set-name: site0\n\
         \x20   addresses: [10.{block}.{index}.10/24]\n",
        mac = site_mac(index),
    )
}

/// The minted document with the reporter added, as an appliance image would carry it: the
/// observer's CA written beside the join configuration; after the join, the binary from the
/// seed image installed, the unit written by `kubeflavor node report --systemd-unit` and
/// started. With `lie`, the VM first gives itself an address on the other site's network
/// (so its report claims that prefix), and after the join tries, with the kubelet's
/// credentials, to write the other node's report and its own zone, printing what the API
/// server answered on the console.
fn with_reporter(
    document: &str,
    observer: &str,
    ca_pem: &str,
    (block, index): (u8, u8),
    lie: Option<&SiteRun>,
    daemon_set: bool,
) -> anyhow::Result<String> {
    ensure!(
        document.contains("\nwrite_files:\n")
            && document.trim_end().ends_with("]")
            && document.contains("\nruncmd:\n"),
        "the minted document is not shaped as expected (write_files, then runcmd last)"
    );
    let mut files = String::from("write_files:\n");
    files.push_str(&file(VM_OBSERVER_CA, "0644", ca_pem));
    let sh = |c: &str| {
        format!(
            "  - {}\n",
            serde_json::to_string(&["sh", "-c", c]).expect("json")
        )
    };
    // Before the join, as an appliance image would have them: the binary, the controller
    // image in containerd (for the DaemonSet's pod), the route to the observer.
    // The appliance's containerd configuration names no runtime type (its kubelet runs no
    // pods); a node that runs pods gets one, as its image would ship it.
    if daemon_set {
        files.push_str(&file(
            "/etc/containerd/config.toml",
            "0644",
            "version = 2\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
             \x20 default_runtime_name = \"runc\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
             \x20 runtime_type = \"io.containerd.runc.v2\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n\
             \x20 SystemdCgroup = true\n",
        ));
    }
    let import = if daemon_set {
        format!(
            " && systemctl restart containerd && for image in /run/kubeflavor-seed/{IMAGE_ARCHIVE_PREFIX}*.tar; do ctr -n k8s.io images import \"$image\" || exit 1; done"
        )
    } else {
        String::new()
    };
    let before = sh(&format!(
        "mkdir -p /run/kubeflavor-seed && mount -o ro LABEL=cidata /run/kubeflavor-seed && install -m 0755 /run/kubeflavor-seed/kubeflavor {VM_BINARY}{import}; umount /run/kubeflavor-seed"
    )) + &sh(&format!(
        "ip route replace {}/32 via 10.{block}.{index}.1 dev site0",
        Networks::observer(block)
    ));
    let mut commands = String::new();
    let mut command = |c: &str| commands.push_str(&sh(c));
    if let Some(other) = lie {
        command(&format!(
            "ip link add lie0 type dummy && ip addr add 10.{block}.{}.{LIE_HOST}/24 dev lie0 && ip link set lie0 up",
            other.index
        ));
        let forged = json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "NodeReport",
            "metadata": {"name": other.node},
            "spec": {"dhcpDomain": "forged.example"},
        });
        files.push_str(&file(
            "/etc/kubeflavor/forged-report.json",
            "0644",
            &forged.to_string(),
        ));
        let kubectl = format!("kubectl --kubeconfig {VM_KUBELET_KUBECONFIG}");
        // The kubelet registers its Node after kubeadm join returns: wait for it (2 min).
        command(&format!(
            "for i in $(seq 60); do {kubectl} get node \"$(hostname)\" >/dev/null 2>&1 && break; sleep 2; done"
        ));
        command(&format!(
            "out=$({kubectl} apply --server-side --field-manager=forger -f /etc/kubeflavor/forged-report.json 2>&1); echo \"{ATTEMPT} other-report rc=$? $out\" | tr '\\n' ' ' >/dev/console; echo >/dev/console"
        ));
        command(&format!(
            "out=$({kubectl} label node \"$(hostname)\" {ZONE_LABEL}=forged --overwrite 2>&1); echo \"{ATTEMPT} zone rc=$? $out\" | tr '\\n' ' ' >/dev/console; echo >/dev/console"
        ));
    }
    if !daemon_set {
        command(&format!(
            "{VM_BINARY} --kubeconfig {VM_KUBELET_KUBECONFIG} node report --observer {observer} --observer-ca-file {VM_OBSERVER_CA} --every 30s --systemd-unit > {VM_UNIT} && systemctl daemon-reload && systemctl enable --now kubeflavor-node-report.service"
        ));
    }
    let document = document
        .replacen("\nwrite_files:\n", &format!("\n{files}"), 1)
        .replacen("\nruncmd:\n", &format!("\nruncmd:\n{before}"), 1);
    Ok(format!("{}\n{commands}", document.trim_end()))
}

/// The document with the kubelet's node address set (`kubeletExtraArgs` node-ip in the
/// JoinConfiguration): the address its Node reports and its serving certificate names.
fn with_node_ip(document: &str, ip: &str) -> anyhow::Result<String> {
    let registration = "      nodeRegistration:\n";
    ensure!(
        document.matches(registration).count() == 1,
        "the minted document has no single nodeRegistration to extend"
    );
    Ok(document.replacen(
        registration,
        &format!(
            "{registration}        kubeletExtraArgs:\n          - name: node-ip\n            value: \"{ip}\"\n"
        ),
        1,
    ))
}

/// A cloud-init write_files entry.
fn file(path: &str, permissions: &str, content: &str) -> String {
    let mut entry = format!(
        "  - path: {path}\n    owner: root:root\n    permissions: \"{permissions}\"\n    content: |\n"
    );
    for line in content.lines() {
        entry.push_str(&format!("      {line}\n"));
    }
    entry
}

/// A NoCloud seed ISO (genisoimage, as the boot script makes them) with the user-data,
/// meta-data naming the node, the network-config and the kubeflavor binary.
fn seed_image(
    path: &Path,
    user_data: &str,
    network_config: &str,
    node: &str,
    binary: &Path,
    image_archives: &[PathBuf],
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    for (i, archive) in image_archives.iter().enumerate() {
        std::fs::copy(
            archive,
            dir.path().join(format!("{IMAGE_ARCHIVE_PREFIX}{i}.tar")),
        )?;
    }
    appliance::write_private(&dir.path().join("user-data"), user_data)?;
    std::fs::write(
        dir.path().join("meta-data"),
        format!("instance-id: {node}\nlocal-hostname: {node}\n"),
    )?;
    std::fs::write(dir.path().join("network-config"), network_config)?;
    std::fs::copy(binary, dir.path().join("kubeflavor"))?;
    let out = Command::new("genisoimage")
        .args(["-quiet", "-volid", "cidata", "-joliet", "-rock", "-output"])
        .arg(path)
        .arg(dir.path())
        .output()
        .context("running genisoimage")?;
    ensure!(
        out.status.success(),
        "genisoimage: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The run's networks on this machine: per site a namespace `kubeflavor-<id>-<index>`
/// (bridge `br0` at 10.B.i.1/24, the VM's tap on it, and `uplink`, a veth to this host at
/// 10.B.(100+i).2/30, its default route), the host's end `kf<id>v<i>` at 10.B.(100+i).1/30
/// with a route to the site's /24, and the observer's address 10.B.200.1 on this host's
/// loopback device. No NAT: the observer sees each VM's own site address.
#[derive(Clone)]
struct Networks {
    id: String,
    block: u8,
}

impl Networks {
    fn observer(block: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, block, 200, 1)
    }

    fn namespace(&self, index: u8) -> String {
        format!("kubeflavor-{}-{index}", self.id)
    }

    fn tap(&self, index: u8) -> String {
        format!("kf{}t{index}", self.id)
    }

    fn build(id: &str, block: u8) -> anyhow::Result<Networks> {
        let networks = Networks {
            id: id.to_string(),
            block,
        };
        let b = block;
        // On the loopback device: local to this host, reached from either site.
        ip(&[
            "addr",
            "add",
            &format!("{}/32", Networks::observer(b)),
            "dev",
            "lo",
        ])?;
        for i in [1u8, 2] {
            let (ns, host_end, tap) = (
                networks.namespace(i),
                format!("kf{id}v{i}"),
                networks.tap(i),
            );
            let transit = 100 + i;
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", "uplink", "netns", &ns,
            ])?;
            ip(&[
                "addr",
                "add",
                &format!("10.{b}.{transit}.1/30"),
                "dev",
                &host_end,
            ])?;
            ip(&["link", "set", &host_end, "up"])?;
            for args in [
                vec!["link", "set", "lo", "up"],
                vec![
                    "addr",
                    "add",
                    &format!("10.{b}.{transit}.2/30"),
                    "dev",
                    "uplink",
                ],
                vec!["link", "set", "uplink", "up"],
                vec!["link", "add", "br0", "type", "bridge"],
                vec!["addr", "add", &format!("10.{b}.{i}.1/24"), "dev", "br0"],
                vec!["link", "set", "br0", "up"],
                vec![
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("10.{b}.{transit}.1"),
                ],
            ] {
                let mut full = vec!["-n", ns.as_str()];
                full.extend(args.iter().map(|s| &**s));
                ip(&full)?;
            }
            run_checked(Command::new("ip").args([
                "netns",
                "exec",
                &ns,
                "sh",
                "-c",
                "echo 1 > /proc/sys/net/ipv4/ip_forward",
            ]))?;
            ip(&[
                "route",
                "add",
                &format!("10.{b}.{i}.0/24"),
                "via",
                &format!("10.{b}.{transit}.2"),
            ])?;
            ip(&["tuntap", "add", &tap, "mode", "tap"])?;
            ip(&["link", "set", &tap, "up"])?;
        }
        Ok(networks)
    }

    /// Once QEMU has opened it: the tap into its site's namespace, on the bridge. Moved
    /// before, QEMU would make a new tap of that name here.
    fn attach_tap(&self, index: u8) -> anyhow::Result<()> {
        let (ns, tap) = (self.namespace(index), self.tap(index));
        // A tap has carrier once a process holds it open. The kernel announces that on
        // netlink only; the sysfs file is read until then (QEMU opens it at start).
        let carrier = format!("/sys/class/net/{tap}/carrier");
        let asked = Instant::now();
        while std::fs::read_to_string(&carrier)
            .map(|c| c.trim() != "1")
            .unwrap_or(true)
        {
            ensure!(
                asked.elapsed() < Duration::from_secs(60),
                "QEMU did not open {tap} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        ip(&["link", "set", &tap, "netns", &ns])?;
        ip(&["-n", &ns, "link", "set", &tap, "master", "br0"])?;
        ip(&["-n", &ns, "link", "set", &tap, "up"])
    }

    /// Removes everything `build` made (what is already gone is no error).
    fn remove(self) {
        let id = &self.id;
        for i in [1u8, 2] {
            let _ = ip(&["route", "del", &format!("10.{}.{i}.0/24", self.block)]);
            // With the namespace go its bridge, the veth (both ends) and the tap in it.
            let _ = ip(&["netns", "del", &self.namespace(i)]);
            let _ = ip(&["link", "del", &format!("kf{id}v{i}")]);
            let _ = ip(&["link", "del", &self.tap(i)]);
        }
        let _ = ip(&[
            "addr",
            "del",
            &format!("{}/32", Networks::observer(self.block)),
            "dev",
            "lo",
        ]);
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    run_checked(Command::new("ip").args(args))
}

fn run_checked(command: &mut Command) -> anyhow::Result<()> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(
        out.status.success(),
        "{command:?} failed: {} (this needs root and iproute2)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
