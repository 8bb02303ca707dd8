//! The whole kubeflavor story, told with real calls against an in-memory API server:
//!
//! ```sh
//! cargo run --example walkthrough
//! ```
//!
//! An owner defines two flavors (sweet: trusted; sour: a partner's boxes) and mints one
//! token of each. The kubeflavor controller runs. Two machines join with `kubeflavor join
//! --tls-bootstrap`, register their Nodes with the certificates they were issued, and get
//! their flavor's labels from the controller. Then the two attacks kubeflavor exists to
//! stop: a sour token holder asking for the sweet node's name is refused, and the sweet
//! node trying to raise its own trust level is refused by NodeRestriction. Last, a
//! partner's portal mints a token through the join-token API (`kubeflavor serve`) with its
//! own ServiceAccount token; its node joins and records on whose behalf it runs, and the
//! portal is refused the flavor it was not given. Then the owner names a site by address
//! range, the sweet node reports its network with its own credentials and is observed on
//! that site, and a pod joining the site's network with macvlan selects it.
//!
//! Every `kubeflavor ...` line below runs the real command in-process; the output under it
//! is that command's output. Token secrets are masked in this narration.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Node, Secret, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions::is_deleted};
use kubeflavor::controller::{self, Options, Runtime};

const FLAVOR_LABEL: &str = "kubeflavor.node-restriction.kubernetes.io/flavor";
const TRUST_LABEL: &str = "kubeflavor.node-restriction.kubernetes.io/trust-level";
const CLASS_LABEL: &str = "tier.node-restriction.kubernetes.io/class";
const UNVERIFIED: &str = "kubeflavor.io/unverified";
/// Safety net for waiting on the controller; never reached when things work.
const PATIENCE: Duration = Duration::from_secs(60);

/// walkthrough: the whole kubeflavor story, told with real calls on an in-memory API
/// server (testkube).
///
/// An owner installs kubeflavor, defines two flavors and mints a token of each; the
/// controller runs; two machines join with `kubeflavor join --tls-bootstrap` and get their
/// flavor's labels; then a sour token asking for the sweet node's name is refused, and the
/// sweet node raising its own trust level is refused by NodeRestriction; a portal mints
/// through `kubeflavor serve`; and, when `KUBEFLAVOR_E2E_OIDC` names a running OpenID
/// Provider (testbed/oidc/start), node administrators sign in and get the flavor the
/// owner's Roster gives them without being told it. It measures nothing and takes no flags.
#[derive(Debug, Parser)]
#[command(
    name = "walkthrough",
    after_help = "Run: cargo run -p kubeflavor --example walkthrough"
)]
struct Args {}

#[path = "../../kubeflavor-core/examples/support/args.rs"]
mod args;
#[path = "../tests/support/https.rs"]
mod https;
#[path = "../tests/support/portal.rs"]
mod portal;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args {} = args::parse_or_exit::<Args>();
    kubeflavor::connect::install_crypto_provider();
    let work = tempfile::tempdir()?;

    chapter("An API server to play with");
    let cluster = testkube::TestCluster::start().await?;
    let kubeconfig = work.path().join("admin.kubeconfig");
    cluster.write_admin_kubeconfig(&kubeconfig)?;
    let admin = client_from(&cluster.admin_kubeconfig()).await?;
    say(&format!(
        "testkube (an in-memory Kubernetes API server) listens on {}; the owner is its admin.",
        cluster.server_url()
    ));

    chapter("The owner installs kubeflavor and defines two flavors");
    let kf = Kf {
        kubeconfig: kubeconfig.clone(),
    };
    kf.run(&["install", "--apply"], Quiet::Yes).await?;
    kf.run(
        &[
            "flavor",
            "create",
            "sweet",
            "--label",
            &format!("{CLASS_LABEL}=gold"),
            "--trust-level",
            "90",
        ],
        Quiet::No,
    )
    .await?;
    kf.run(
        &[
            "flavor",
            "create",
            "sour",
            "--label",
            &format!("{CLASS_LABEL}=bronze"),
            "--taint",
            "partner=sour:NoSchedule",
            "--trust-level",
            "20",
            // Its tokens may bind up to two node names (through the portal too).
            "--max-nodes-limit",
            "2",
        ],
        Quiet::No,
    )
    .await?;

    chapter("One token of each flavor, handed out as kubeadm join lines");
    let sweet_line = kf
        .run(
            &[
                "token",
                "create",
                "--flavor",
                "sweet",
                "--print-join-command",
            ],
            Quiet::Masked,
        )
        .await?;
    // The partner gets two node names' worth of token (it runs two boxes).
    let sour_line = kf
        .run(
            &[
                "token",
                "create",
                "--flavor",
                "sour",
                "--max-nodes",
                "2",
                "--print-join-command",
            ],
            Quiet::Masked,
        )
        .await?;
    for line in [&sweet_line, &sour_line] {
        let token = token_of(line)?;
        let client = client_from(&cluster.kubeconfig_for_token(&token.expose())).await?;
        // A token minted a moment ago may get 401 until the API server's cache has it.
        let (reviews, params) = (Api::<SelfSubjectReview>::all(client), PostParams::default());
        let request = SelfSubjectReview::default();
        let review = kubeflavor_cluster::cache_lag::retry_unauthorized(
            kubeflavor_cluster::cache_lag::TOKEN_PROPAGATION,
            || reviews.create(&params, &request),
        )
        .await?;
        let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
        say(&format!(
            "token {} authenticates as {} in groups {:?}",
            token.id(),
            user.username.unwrap_or_default(),
            user.groups.unwrap_or_default()
        ));
    }
    say(
        "The holders see the same groups: the flavor lives only in the Secret's metadata, which they cannot read.",
    );

    chapter("The kubeflavor controller starts");
    let (stop_controller, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut opts = Options::new("kube-system", "walkthrough");
    opts.leader_elect = false;
    let controller_task = tokio::spawn(controller::run(
        Runtime::new(admin.clone(), opts),
        async move {
            let _ = stopped.await;
        },
    ));
    say("It watches kubelet client CSRs, tokens, flavors, bindings and Nodes.");

    chapter("Two machines join with `kubeflavor join --tls-bootstrap`");
    let sweet_dir = work.path().join("sweet-node-1");
    let sour_dir = work.path().join("sour-node-1");
    kf.join(&sweet_line, "sweet-node-1", &sweet_dir).await?;
    kf.join(&sour_line, "sour-node-1", &sour_dir).await?;

    chapter("Each kubelet registers its Node with its own certificate, untrusted at first");
    for (name, dir) in [("sweet-node-1", &sweet_dir), ("sour-node-1", &sour_dir)] {
        let node_client = node_client(dir).await?;
        register_node(&node_client, name).await?;
        say(&format!(
            "{name}: Node created as system:node:{name}, tainted {UNVERIFIED}:NoSchedule"
        ));
    }

    chapter("The controller puts each flavor on its Node");
    let nodes: Api<Node> = Api::all(admin.clone());
    for (name, flavor) in [("sweet-node-1", "sweet"), ("sour-node-1", "sour")] {
        let node = wait_until_flavored(&nodes, name, flavor).await?;
        show_node(&node);
    }
    say(
        "A nodeSelector on tier.node-restriction.kubernetes.io/class=gold now means a node the owner trusts.",
    );

    chapter("Attack 1: a sour token holder asks for the sweet node's name");
    let takeover_dir = work.path().join("impostor");
    match kf
        .join_as("impostor", &sour_line, "sweet-node-1", &takeover_dir)
        .await
    {
        Ok(()) => bail!(
            "the impostor joined as sweet-node-1: kubeflavor failed to refuse a name takeover"
        ),
        Err(e) => say(&format!(
            "refused as expected (exit code {}): {e}",
            e.code.code()
        )),
    }
    say(&format!(
        "The impostor's kubelet directory holds nothing: {:?}",
        entries(&takeover_dir)
    ));
    let sour_secret = kubeflavor_core::token::secret::secret_name(token_of(&sour_line)?.id());
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    tokio::time::timeout(
        PATIENCE,
        await_condition(secrets, &sour_secret, is_deleted("")),
    )
    .await
    .with_context(|| format!("{sour_secret} was not deleted within {PATIENCE:?}"))??;
    say(&format!(
        "The controller deleted {sour_secret}: a misused token ends (P4, rejection that ends), so a retrying kubelet stops."
    ));
    let bound = nodes.get("sour-node-1").await?;
    say(&format!(
        "sour-node-1, joined earlier with that token, keeps its flavor: {}",
        bound
            .metadata
            .labels
            .unwrap_or_default()
            .get(FLAVOR_LABEL)
            .cloned()
            .unwrap_or_default()
    ));

    chapter("Attack 2: the sweet node tries to raise its own trust level");
    let sweet_client = node_client(&sweet_dir).await?;
    let own: Api<Node> = Api::all(sweet_client);
    let patch = serde_json::json!({"metadata": {"labels": {TRUST_LABEL: "100"}}});
    say(&format!(
        "as system:node:sweet-node-1: PATCH nodes/sweet-node-1 {patch}"
    ));
    match own
        .patch(
            "sweet-node-1",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => bail!("the node changed its own trust level: NodeRestriction did not apply"),
        Err(kube::Error::Api(s)) => say(&format!(
            "refused by NodeRestriction ({} {}): {}",
            s.code, s.reason, s.message
        )),
        Err(e) => return Err(e).context("patching the node as itself"),
    }

    portal_chapter(&kf, &admin, &kubeconfig, &work.path().join("sour-node-2")).await?;
    network_chapter(&admin, &kubeconfig, &sweet_dir, work.path()).await?;
    administrators_chapter(&kf, &admin, &kubeconfig, &work.path().join("alice-node")).await?;

    chapter("The end");
    let _ = stop_controller.send(());
    controller_task.await??;
    cluster.shutdown().await;
    say(
        "Flavors were assigned by the cluster, not claimed by the nodes; both attacks were refused.",
    );
    Ok(())
}

/// A partner's portal mints a sour token over HTTPS with its own ServiceAccount token; its
/// node joins and carries the custody record; the portal cannot mint sweet tokens.
async fn portal_chapter(
    kf: &Kf,
    admin: &kube::Client,
    kubeconfig: &Path,
    kubelet_dir: &Path,
) -> anyhow::Result<()> {
    chapter("A partner's portal mints a token through `kubeflavor serve`");
    let rule = serde_json::json!({"apiGroups": ["kubeflavor.io"], "resources": ["flavors/jointoken"],
        "resourceNames": ["sour"], "verbs": ["create"]});
    say(&format!(
        "The owner gives the portal's ServiceAccount default/portal one rule, and no access to Secrets: {rule}"
    ));
    let portal_token = portal::portal(admin, "default", "portal", &["sour"]).await;
    say("$ kubectl create token portal    # the portal's credential (a TokenRequest)");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (portal, server) = https::serve_self_signed(kubeconfig, "walkthrough", async {
        let _ = stopped.await;
    })
    .await?;
    let addr = portal.addr();
    say(&format!(
        "$ kubeflavor serve --self-signed    # listening on https://{addr}"
    ));

    let body = r#"{"issuedTo": "acme-corp/alice", "ttl": "1h"}"#;
    say(&format!(
        "[portal]$ curl -H 'Authorization: Bearer <portal token>' -d '{body}' https://{addr}/v1/flavors/sour/jointokens"
    ));
    let (code, minted) = portal
        .post(
            "/v1/flavors/sour/jointokens",
            Some(&portal_token),
            None,
            body.as_bytes(),
        )
        .await;
    indent(&mask_tokens(&format!(
        "{} {}",
        code.as_u16(),
        serde_json::to_string_pretty(&minted)?
    )));
    if code != http::StatusCode::CREATED {
        bail!("the portal could not mint a sour token: {minted}");
    }
    let line = minted["joinCommand"]
        .as_str()
        .context("no join line")?
        .to_string();
    kf.join(&line, "sour-node-2", kubelet_dir).await?;
    register_node(&node_client(kubelet_dir).await?, "sour-node-2").await?;
    wait_until_flavored(&Api::all(admin.clone()), "sour-node-2", "sour").await?;
    say("On whose behalf does sour-node-2 run? The binding says:");
    kf.run(&["node", "get", "sour-node-2"], Quiet::No).await?;

    let (code, refused) = portal
        .post(
            "/v1/flavors/sweet/jointokens",
            Some(&portal_token),
            None,
            body.as_bytes(),
        )
        .await;
    say("[portal]$ the same request for a sweet token:");
    indent(&format!(
        "{} {}",
        code.as_u16(),
        refused["message"].as_str().unwrap_or_default()
    ));
    if code != http::StatusCode::FORBIDDEN {
        bail!("the portal minted a flavor it was not given: {refused}");
    }
    let _ = stop.send(());
    server.await?;
    Ok(())
}

/// Where a node is on the network: the owner names a site by address range; the sweet
/// node reports its network with its own credentials and is observed by the join-token API
/// from the address it connects from; the controller labels the Node with the observed
/// site, and a pod that joins the site's network with macvlan selects it.
async fn network_chapter(
    admin: &kube::Client,
    kubeconfig: &Path,
    kubelet_dir: &Path,
    work: &Path,
) -> anyhow::Result<()> {
    use kubeflavor_core::network::{CLAIMED_PREFIX, OBSERVED_PREFIX, SITE_LABEL, ZONE_LABEL};
    chapter("Where the sweet node is on the network: observed, not claimed");
    let site = serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Site",
        "metadata": {"name": "lab"},
        "spec": {"ranges": ["127.0.0.0/8"], "zone": "lab-a"},
    });
    say(
        "The owner names a site by its address range (this walkthrough's machines connect from loopback):",
    );
    say(&format!("$ kubectl apply -f - <<< '{site}'"));
    Api::<kubeflavor_cluster::crd::network::Site>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(site)?)
        .await?;

    // The cluster CA, which issued the kubelets' client certificates.
    let ca = work.join("cluster-ca.crt");
    https::write_cluster_ca(&std::fs::read_to_string(kubeconfig)?, &ca)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (api, server) = https::serve_observing(
        kubeconfig,
        "walkthrough-observer",
        ca.clone(),
        "127.0.0.1:0".parse()?,
        // No kubelet serves on this machine: nothing to connect back to.
        0,
        async {
            let _ = stopped.await;
        },
    )
    .await?;
    let observer_ca = work.join("observer-ca.crt");
    std::fs::write(&observer_ca, api.pem())?;
    let url = format!("https://{}", api.addr());
    say(&format!(
        "$ kubeflavor serve --self-signed --node-client-ca-file {}    # listening on {url}",
        ca.display()
    ));

    let node_kubeconfig = kubelet_dir.join(kubeflavor::join::KUBELET_CONF);
    let args = [
        "node",
        "report",
        "--observer",
        &url,
        "--observer-ca-file",
        &observer_ca.display().to_string(),
    ];
    say(&format!(
        "[sweet-node-1]# kubeflavor --kubeconfig {} {}",
        node_kubeconfig.display(),
        args.join(" ")
    ));
    let mut argv = vec![
        "kubeflavor".to_string(),
        "--kubeconfig".into(),
        node_kubeconfig.display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut out = Vec::new();
    let reported = kubeflavor::run(argv, &mut out).await;
    indent(&String::from_utf8(out)?);
    reported.map_err(|e| anyhow::anyhow!("kubeflavor node report failed: {e}"))?;

    let nodes: Api<Node> = Api::all(admin.clone());
    let node = tokio::time::timeout(
        PATIENCE,
        await_condition(nodes, "sweet-node-1", |n: Option<&Node>| {
            n.and_then(|n| n.metadata.labels.as_ref())
                .and_then(|l| l.get(SITE_LABEL))
                .is_some_and(|s| s == "lab")
        }),
    )
    .await
    .context("sweet-node-1 was not labelled with its observed site")??
    .context("sweet-node-1 is gone")?;
    say(
        "The controller labels the Node with what it observed (and the Site's zone); the claims it copies only when they agree:",
    );
    for (k, v) in node.metadata.labels.iter().flatten() {
        if k.starts_with(OBSERVED_PREFIX) || k.starts_with(CLAIMED_PREFIX) || k == ZONE_LABEL {
            say(&format!("    label  {k}={v}"));
        }
    }
    say(
        "A pod that joins the lab's own network with macvlan (Multus) selects the nodes observed there, of the flavor it trusts:",
    );
    indent(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\n\
         kind: NetworkAttachmentDefinition\n\
         metadata: {{name: lab-site}}\n\
         spec:\n\
         \x20 config: '{{\"cniVersion\": \"0.3.1\", \"type\": \"macvlan\", \"master\": \"ens4\", \"mode\": \"bridge\", \"ipam\": {{\"type\": \"dhcp\"}}}}'\n\
         ---\n\
         apiVersion: v1\n\
         kind: Pod\n\
         metadata:\n\
         \x20 name: probe\n\
         \x20 annotations: {{k8s.v1.cni.cncf.io/networks: lab-site}}\n\
         spec:\n\
         \x20 nodeSelector:\n\
         \x20   {SITE_LABEL}: lab\n\
         \x20   {FLAVOR_LABEL}: sweet\n\
         \x20 containers: [{{name: probe, image: registry.example/probe:1}}]\n"
    ));
    let _ = stop.send(());
    server.await?;
    Ok(())
}

/// Node administrators sign in with the owner's OpenID Provider (the running one that
/// `KUBEFLAVOR_E2E_OIDC` names, as testbed/oidc/start prints it) and get the flavor the
/// Roster gives them without learning it; alice's machine joins and its binding names her.
async fn administrators_chapter(
    kf: &Kf,
    admin: &kube::Client,
    kubeconfig: &Path,
    kubelet_dir: &Path,
) -> anyhow::Result<()> {
    chapter("Node administrators sign in; the owner's Roster decides their flavor");
    let Some(env_file) = std::env::var_os("KUBEFLAVOR_E2E_OIDC") else {
        say(
            "(skipped: no OpenID Provider. Start one with testbed/oidc/start and set KUBEFLAVOR_E2E_OIDC to the file it prints.)",
        );
        return Ok(());
    };
    let env: BTreeMap<String, String> = std::fs::read_to_string(&env_file)
        .with_context(|| format!("reading KUBEFLAVOR_E2E_OIDC {env_file:?}"))?
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |k: &str| {
        env.get(k)
            .cloned()
            .with_context(|| format!("{env_file:?} names no {k}"))
    };
    let (issuer, audience, ca) = (
        get("KUBEFLAVOR_OIDC_ISSUER")?,
        get("KUBEFLAVOR_OIDC_CLIENT_ID")?,
        get("KUBEFLAVOR_OIDC_CA")?,
    );
    say(&format!(
        "The owner trusts one identity provider, {issuer}, and keeps a list of who gets what:"
    ));
    for (rule, group, flavor) in [
        ("partners", "sour-admins", "sour"),
        ("staff", "sweet-admins", "sweet"),
    ] {
        kf.run(
            &[
                "roster", "add-rule", rule, "--issuer", &issuer, "--group", group, "--flavor",
                flavor,
            ],
            Quiet::No,
        )
        .await?;
    }
    kf.run(&["roster", "get"], Quiet::No).await?;

    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(&ca)? {
        roots.add(cert?)?;
    }
    let administrators = kubeflavor::serve::Administrators::new(
        kubeflavor::serve::oidc::Verifier::new(
            vec![kubeflavor::serve::oidc::IssuerConfig {
                issuer: issuer.clone(),
                audience: audience.clone(),
            }],
            "groups".into(),
            roots,
        ),
        "default",
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (api, server) = https::serve_self_signed_with(
        kubeconfig,
        "walkthrough-administrators",
        Some(std::sync::Arc::new(administrators)),
        async {
            let _ = stopped.await;
        },
    )
    .await?;
    let addr = api.addr();
    say(&format!(
        "$ kubeflavor serve --self-signed --oidc-issuer {issuer}={audience}    # listening on https://{addr}"
    ));

    let token_of_user = |user: &str| -> anyhow::Result<String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/oidc/token");
        let out = std::process::Command::new("bash")
            .arg(script)
            .arg(user)
            .envs(&env)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "testbed/oidc/token {user}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    };
    let mut line = String::new();
    for user in ["alice", "bob"] {
        say(&format!(
            "[{user}]$ curl -H 'Authorization: Bearer <{user}'s ID token>' -d '{{}}' https://{addr}/v1/jointokens    # no flavor named"
        ));
        let (code, minted) = api
            .post("/v1/jointokens", Some(&token_of_user(user)?), None, b"{}")
            .await;
        let shown: BTreeMap<&String, &serde_json::Value> = minted
            .as_object()
            .context("an object")?
            .iter()
            .filter(|(k, _)| !["token", "joinCommand", "id"].contains(&k.as_str()))
            .collect();
        indent(&format!(
            "{} {}",
            code.as_u16(),
            serde_json::to_string(&shown)?
        ));
        if code != http::StatusCode::CREATED {
            bail!("{user} got no token: {minted}");
        }
        if user == "alice" {
            line = minted["joinCommand"]
                .as_str()
                .context("no join line")?
                .to_string();
        }
    }
    say("Both answers have the same fields: neither says which flavor the Roster gave.");
    kf.join(&line, "alice-node", kubelet_dir).await?;
    register_node(&node_client(kubelet_dir).await?, "alice-node").await?;
    wait_until_flavored(&Api::all(admin.clone()), "alice-node", "sweet").await?;
    say("alice's node is sweet, as her rule says; its binding names her verified identity:");
    kf.run(&["node", "get", "alice-node"], Quiet::No).await?;
    let _ = stop.send(());
    server.await?;
    Ok(())
}

/// Runs `kubeflavor` commands in-process against the walkthrough's cluster.
struct Kf {
    kubeconfig: PathBuf,
}

#[derive(Clone, Copy, PartialEq)]
enum Quiet {
    /// Show the command and its output.
    No,
    /// Show the command only (the output is long and not the point).
    Yes,
    /// Show the output with token secrets masked.
    Masked,
}

impl Kf {
    async fn run(&self, args: &[&str], quiet: Quiet) -> anyhow::Result<String> {
        say(&format!("$ kubeflavor {}", args.join(" ")));
        let mut argv = vec![
            "kubeflavor".to_string(),
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let mut out = Vec::new();
        let result = kubeflavor::run(argv, &mut out).await;
        let text = String::from_utf8(out)?;
        match quiet {
            Quiet::No => indent(&text),
            Quiet::Masked => indent(&mask_tokens(&text)),
            Quiet::Yes => {}
        }
        result.map_err(|e| anyhow::anyhow!("kubeflavor {} failed: {e}", args.join(" ")))?;
        Ok(text)
    }

    /// `kubeflavor join <endpoint> --token ... --discovery-token-ca-cert-hash ...
    /// --tls-bootstrap`, from a printed join line, as machine `node`.
    async fn join(
        &self,
        join_line: &str,
        node: &str,
        kubelet_dir: &Path,
    ) -> Result<(), kubeflavor::CliError> {
        self.join_as(node, join_line, node, kubelet_dir).await
    }

    /// The same, run on `machine` (whose prompt is shown) asking for the name `node`.
    async fn join_as(
        &self,
        machine: &str,
        join_line: &str,
        node: &str,
        kubelet_dir: &Path,
    ) -> Result<(), kubeflavor::CliError> {
        let words: Vec<&str> = join_line.split_whitespace().collect();
        let mut args: Vec<String> = vec!["join".into()];
        // Skip `kubeadm join`: kubeflavor join takes the same endpoint and flags.
        args.extend(words[2..].iter().map(|w| w.to_string()));
        args.extend(
            [
                "--node-name",
                node,
                "--kubelet-dir",
                &kubelet_dir.display().to_string(),
                "--tls-bootstrap",
                "--timeout",
                "1m",
            ]
            .map(String::from),
        );
        say(&format!(
            "[{machine}]$ {}",
            mask_tokens(&format!("kubeflavor {}", args.join(" ")))
        ));
        let argv = std::iter::once("kubeflavor".to_string()).chain(args);
        let mut out = Indented::default();
        let result = kubeflavor::run(argv, &mut out).await;
        out.flush().ok();
        result
    }
}

/// The token in a printed join line.
fn token_of(join_line: &str) -> anyhow::Result<kubeflavor_core::token::BootstrapToken> {
    let words: Vec<&str> = join_line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "--token")
        .context("no --token in the join line")?;
    Ok(words
        .get(at + 1)
        .context("no token after --token")?
        .parse()?)
}

/// The kubelet's client, from the kubelet.conf `join` wrote.
async fn node_client(kubelet_dir: &Path) -> anyhow::Result<kube::Client> {
    let text = std::fs::read_to_string(kubelet_dir.join(kubeflavor::join::KUBELET_CONF))?;
    kubeflavor::join::client_from_kubeconfig(&text)
        .await
        .map_err(anyhow::Error::msg)
}

/// What a kubelet started with the flags `join` printed sends (its `--config` file has
/// `registerWithTaints` kubeflavor.io/unverified:NoSchedule): its Node, with the hostname
/// label and the taint (NodeRestriction lets a kubelet set taints only when it creates its
/// Node).
async fn register_node(node_client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_string(),
                name.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![Taint {
                key: UNVERIFIED.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    Api::<Node>::all(node_client.clone())
        .create(&PostParams::default(), &node)
        .await?;
    Ok(())
}

async fn wait_until_flavored(nodes: &Api<Node>, name: &str, flavor: &str) -> anyhow::Result<Node> {
    let flavored = |n: Option<&Node>| {
        n.and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(FLAVOR_LABEL))
            .map(String::as_str)
            == Some(flavor)
            && !n
                .and_then(|n| n.spec.as_ref())
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == UNVERIFIED))
    };
    let node = tokio::time::timeout(PATIENCE, await_condition(nodes.clone(), name, flavored))
        .await
        .with_context(|| format!("{name} was not flavored within {PATIENCE:?}"))??;
    node.with_context(|| format!("{name} disappeared"))
}

fn show_node(node: &Node) {
    let name = node.metadata.name.as_deref().unwrap_or("?");
    say(&format!("{name}:"));
    for (k, v) in node.metadata.labels.iter().flatten() {
        say(&format!("    label  {k}={v}"));
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.is_empty() {
        say("    no taints (kubeflavor.io/unverified was removed)");
    }
    for t in taints {
        say(&format!(
            "    taint  {}={}:{}",
            t.key,
            t.value.unwrap_or_default(),
            t.effect
        ));
    }
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `abcdef.0123456789abcdef` -> `abcdef.****************` wherever a token appears.
fn mask_tokens(text: &str) -> String {
    // Every run of token characters that parses as a token, wherever it stands (a flag's
    // value, a JSON string).
    fn flush(word: &mut String, out: &mut String) {
        match word.parse::<kubeflavor_core::token::BootstrapToken>() {
            Ok(t) => out.push_str(&word.replace(t.secret().expose(), "****************")),
            Err(_) => out.push_str(word),
        }
        word.clear();
    }
    let (mut out, mut word) = (String::with_capacity(text.len()), String::new());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

fn chapter(title: &str) {
    println!("\n== {title}");
}

fn say(line: &str) {
    println!("  {line}");
}

fn indent(text: &str) {
    for line in text.lines() {
        println!("      {line}");
    }
}

async fn client_from(kubeconfig_yaml: &str) -> anyhow::Result<kube::Client> {
    kubeflavor::join::client_from_kubeconfig(kubeconfig_yaml)
        .await
        .map_err(anyhow::Error::msg)
}

/// Command output, printed line by line as it comes, indented under the command.
#[derive(Default)]
struct Indented {
    pending: Vec<u8>,
}

impl Write for Indented {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=pos).collect();
            println!("      {}", String::from_utf8_lossy(&line[..line.len() - 1]));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            println!("      {}", String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
        Ok(())
    }
}
