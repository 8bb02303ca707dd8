//! `kubeflavor node list|get|revoke|forget`: the FlavorBindings, i.e. which node joined with
//! which token and flavor, and revocation. `node revoke` does every step of a revocation
//! itself (`crate::revocation`: the revocation list, the binding, the Node's taints, the
//! pods, the join token), so it holds without a controller leader; the controller then also
//! removes the flavor labels and denies the node's renewals. `node forget` un-revokes.

use std::io::Write;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use kube::ResourceExt;
use kubeflavor_cluster::crd::FlavorBinding;
use kubeflavor_cluster::{bindings, revocation_list};
use kubeflavor_core::flavor::{REVOKED_TAINT, UNVERIFIED_TAINT};
use kubeflavor_core::names::NodeName;
use kubeflavor_core::node::cutoff;
use kubeflavor_core::node::state::Revocation;

use kubeflavor_core::node::revocation_list as list_consts;

use crate::connect::Cluster;
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::output::{self, Format, Table};
use crate::revocation;

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List bound nodes: NODE, FLAVOR, TOKEN, BOUND, STATUS, ISSUED-TO.
    List(NodeListArgs),
    /// Show one node's binding, with on whose behalf its token was minted and by whom
    ///
    /// Under the table, where the node stands:
    ///   Judged:   the binding's Flavored condition, and whether the Node still carries
    ///             the kubeflavor.io/unverified taint.
    ///   Revoked:  the binding's Revoked condition, and whether the Node carries the
    ///             kubeflavor.io/revoked taint (without a binding: that taint alone,
    ///             which keeps a revoked node cut off after its binding was deleted).
    ///   Cut off:  the API server's own answer to a SubjectAccessReview of
    ///             system:node:NAME (groups system:nodes, system:authenticated) for
    ///             `get nodes NAME`: "yes" when it is denied (with the authorization
    ///             webhook's reason); "no" when allowed or no opinion (a revoked node that
    ///             is not refused: the webhook is not configured, see README).
    ///   Serving:  the node's latest kubelet-serving CSR and its state, or "none".
    ///   Network:  its NodeReport: the site kubeflavor observed it on, from which address,
    ///             by which observer and when; what answered when it connected back
    ///             (serving certificate, round trip); whether its claims agree.
    ///
    /// A node with a Node but no FlavorBinding gets these lines alone (exit 0); with
    /// neither, or with -o json|yaml and no binding, exit 3 (not found).
    /// `-o json|yaml` print the binding object alone.
    #[command(verbatim_doc_comment)]
    Get(NodeGetArgs),
    /// Revoke a node, at once and for good, without waiting for the controller
    ///
    /// Steps, each idempotent (run it again to finish a run that stopped):
    ///   [list]     add the name to kube-system/kubeflavor-revoked-nodes: the API server's
    ///              admission policy then refuses every write of its kubelet, any Pod
    ///              created on or bound to it, and any Node created under its name;
    ///   [binding]  mark its FlavorBinding Revoked (the webhook refuses the node);
    ///   [taint]    taint its Node kubeflavor.io/revoked:NoExecute and
    ///              kubeflavor.io/unverified:NoSchedule;
    ///   [pods]     delete every Pod bound to it (grace period 0): their ServiceAccount
    ///              tokens stop authenticating;
    ///   [token]    spend its join token (delete the token Secret): its join line joins
    ///              no new name.
    /// The controller strips the flavor and denies certificate renewals. Deleting the
    /// binding or the Node does not un-revoke: see 'kubeflavor node forget'.
    /// Needs: update of that ConfigMap, patch of flavorbindings/status and nodes, list and
    /// delete of pods, get and delete of token Secrets (README, "Cutting revoked nodes off").
    /// Exit 3 when nothing names the node (no binding, no Node, not listed).
    #[command(verbatim_doc_comment)]
    Revoke(NodeRevokeArgs),
    /// Un-revoke a node on purpose: delete its Node and FlavorBinding, then remove it from
    /// the revocation list
    ///
    /// Revocation survives the deletion of the binding or of the Node: only this command
    /// (or an admin editing kube-system/kubeflavor-revoked-nodes) lifts it. Afterwards the
    /// name is free: its kubelet may register again, as a node nobody judged (tainted
    /// kubeflavor.io/unverified, no flavor), and a new join with a live token may bind it.
    /// Its spent join token stays spent. Exit 3 when nothing named the node.
    #[command(verbatim_doc_comment)]
    Forget(NodeForgetArgs),
    /// On the node, with the kubelet's credentials: report this machine's network and be
    /// observed by kubeflavor
    ///
    /// Writes the NodeReport named after this node (its spec: interfaces and addresses,
    /// macvlan links, the default gateway and its MAC, the DHCP search domain, an LLDP
    /// neighbour when lldpd runs) with the node's own identity, then connects to the
    /// join-token API (--observer) with the node's client certificate, which records the
    /// address the connection came from. The controller labels the Node with the site of
    /// that address (observed.kubeflavor.node-restriction.kubernetes.io/site) and copies
    /// the claims (claimed.kubeflavor.node-restriction.kubernetes.io/*) only when they
    /// agree with it.
    ///
    /// Run it on the node with --kubeconfig /etc/kubernetes/kubelet.conf (as root: the
    /// kubelet's key is root's), once after the kubelet has its certificate and then with
    /// --every. Exit 0 when reported (and observed); 1 when the API server or the observer
    /// refused (the message says why).
    #[command(verbatim_doc_comment)]
    Report(NodeReportArgs),
}

#[derive(Debug, Args)]
pub struct NodeReportArgs {
    /// The join-token API that observes nodes (`serve --node-client-ca-file`):
    /// https://HOST[:PORT]. Without it only the report is written.
    #[arg(long, value_name = "URL")]
    pub observer: Option<String>,
    /// The CA of the observer's serving certificate (PEM); default: the public roots.
    #[arg(long, value_name = "FILE", requires = "observer")]
    pub observer_ca_file: Option<std::path::PathBuf>,
    /// The local address to connect to the observer from: on a machine with several
    /// networks, the one whose site counts. Default: the system's choice.
    #[arg(long, value_name = "IP", requires = "observer")]
    pub source_address: Option<std::net::IpAddr>,
    /// Report again at this interval (e.g. 10m) instead of once; failures are logged and
    /// retried at the next one.
    #[arg(long, value_name = "DURATION", value_parser = crate::cli::discovery_flags::parse_duration)]
    pub every: Option<std::time::Duration>,
    /// Print, instead of reporting, a systemd unit that runs this command with the same
    /// --kubeconfig, --observer, --observer-ca-file and --source-address, every --every
    /// (default 10m), from this binary's path: for an appliance image, e.g.
    /// `kubeflavor --kubeconfig /etc/kubernetes/kubelet.conf node report --observer URL
    /// --systemd-unit > /etc/systemd/system/kubeflavor-node-report.service`.
    #[arg(long)]
    pub systemd_unit: bool,
}

#[derive(Debug, Args)]
pub struct NodeForgetArgs {
    pub name: NodeName,
}

#[derive(Debug, Args)]
pub struct NodeListArgs {
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct NodeGetArgs {
    pub name: NodeName,
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct NodeRevokeArgs {
    pub name: NodeName,
}

/// Revoked, Flavored, or Pending (bound, Node not flavored yet).
pub fn status_of(b: &FlavorBinding) -> &'static str {
    if b.is_revoked() {
        "Revoked"
    } else if b.is_flavored() {
        "Flavored"
    } else {
        "Pending"
    }
}

/// The table of `node list`, and of `node get` (`single`), which adds ISSUED-BY and
/// IDENTITY (the verified `issuer#subject` a node administrator's token was minted for);
/// both add the input labels (keys without their prefix) with `-o wide` or `single`.
fn table(bindings: &[FlavorBinding], now: Timestamp, single: bool, wide: bool) -> String {
    let mut header = vec!["NODE", "FLAVOR", "TOKEN", "BOUND", "STATUS", "ISSUED-TO"];
    if single {
        header.extend(["ISSUED-BY", "IDENTITY"]);
    }
    if single || wide {
        header.push("INPUT-LABELS");
    }
    let mut t = Table::new(&header);
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "<none>".into());
    for b in bindings {
        let mut row = vec![
            b.name_any(),
            b.spec.flavor.clone(),
            b.spec.token_id.clone(),
            output::age(Some(b.spec.bound_at), now),
            status_of(b).to_string(),
            or_none(&b.spec.issued_to),
        ];
        if single {
            row.push(or_none(&b.spec.issued_by));
            row.push(b.spec.identity.as_ref().map_or_else(
                || "<none>".into(),
                |i| format!("{}#{}", i.issuer, i.subject),
            ));
        }
        if single || wide {
            row.push(b.input_labels().summary());
        }
        t.row(row);
    }
    t.render()
}

fn print(
    out: &mut dyn Write,
    bindings: &[FlavorBinding],
    format: Option<Format>,
    single: bool,
) -> Result<()> {
    match format.unwrap_or_default() {
        format @ (Format::Table | Format::Wide) => {
            if bindings.is_empty() {
                writeln!(out, "No bound nodes.")?;
            } else {
                let wide = format == Format::Wide;
                write!(out, "{}", table(bindings, Timestamp::now(), single, wide))?;
            }
            Ok(())
        }
        Format::Json if single => output::write_json(out, &bindings[0]),
        Format::Yaml if single => output::write_yaml(out, &bindings[0]),
        Format::Json => output::write_json(out, &output::List::of(bindings)),
        Format::Yaml => output::write_yaml(out, &output::List::of(bindings)),
        Format::Name => {
            for b in bindings {
                writeln!(out, "flavorbinding/{}", b.name_any())?;
            }
            Ok(())
        }
    }
}

pub async fn list(cluster: &Cluster, args: &NodeListArgs, out: &mut dyn Write) -> Result<()> {
    let items = bindings::list(&cluster.client)
        .await
        .map_err(|e| cluster.error("list FlavorBindings", e))?;
    print(out, &items, args.output, false)
}

pub async fn get(cluster: &Cluster, args: &NodeGetArgs, out: &mut dyn Write) -> Result<()> {
    let name = args.name.as_str();
    let table = matches!(
        args.output.unwrap_or_default(),
        Format::Table | Format::Wide
    );
    let binding = match bindings::get(&cluster.client, name).await {
        Ok(b) => b,
        Err(e) => return Err(cluster.error(&format!("get FlavorBinding {name}"), e.source)),
    };
    let not_found = || {
        CliError::not_found(
            format!("node {name} has no FlavorBinding"),
            "see 'kubeflavor node list'",
        )
    };
    match binding {
        Some(b) => {
            print(out, std::slice::from_ref(&b), args.output, true)?;
            if table {
                let standing = Standing::read(&cluster.client, name, Some(&b)).await;
                write!(out, "\n{}", standing.describe(Timestamp::now()))?;
            }
            Ok(())
        }
        // No binding, but a Node: one kubeflavor never judged, or one whose binding was
        // deleted (a revoked one stays cut off by its taint). Where it stands is still
        // worth saying; -o json|yaml prints bindings, and there is none.
        None if table => {
            let standing = Standing::read(&cluster.client, name, None).await;
            if !matches!(standing.node_taints, Ok(Some(_))) {
                return Err(not_found());
            }
            writeln!(out, "node {name} has no FlavorBinding")?;
            write!(out, "\n{}", standing.describe(Timestamp::now()))?;
            Ok(())
        }
        None => Err(not_found()),
    }
}

pub async fn revoke(cluster: &Cluster, args: &NodeRevokeArgs, out: &mut dyn Write) -> Result<()> {
    let name = args.name.as_str();
    let client = &cluster.client;
    let known = async {
        Ok::<bool, kube::Error>(
            bindings::api(client).get_opt(name).await?.is_some()
                || kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
                    .get_opt(name)
                    .await?
                    .is_some()
                || revocation_list::is_listed(client, name).await?,
        )
    };
    if !known
        .await
        .map_err(|e| cluster.error(&format!("read node {name}"), e))?
    {
        return Err(CliError::new(
            ExitCode::NotFound,
            format!("node {name} has no FlavorBinding and no Node"),
            "see 'kubeflavor node list'",
        ));
    }
    crate::cmd::revoke_steps::run(cluster, name, &Revocation::ByAdmin, out).await?;
    writeln!(out, "node {name} revoked")?;
    Ok(())
}

pub async fn forget(cluster: &Cluster, args: &NodeForgetArgs, out: &mut dyn Write) -> Result<()> {
    let name = args.name.as_str();
    let done = revocation::forget(&cluster.client, name)
        .await
        .map_err(|e| cluster.error(&format!("forget node {name}"), e))?;
    let say = |did: bool, yes: &str, no: &str| if did { yes.to_string() } else { no.to_string() };
    writeln!(
        out,
        "[node] {}",
        say(
            done.node_deleted,
            &format!("Node {name} deleted"),
            &format!("no Node {name}")
        )
    )?;
    writeln!(
        out,
        "[binding] {}",
        say(
            done.binding_deleted,
            &format!("FlavorBinding {name} deleted"),
            &format!("no FlavorBinding {name}")
        )
    )?;
    writeln!(
        out,
        "[list] {}",
        say(
            done.unlisted,
            &format!(
                "node {name} removed from {}/{}",
                list_consts::NAMESPACE,
                list_consts::NAME
            ),
            &format!(
                "node {name} was not in {}/{}",
                list_consts::NAMESPACE,
                list_consts::NAME
            ),
        )
    )?;
    if done == revocation::Forgotten::default() {
        return Err(CliError::not_found(
            format!("nothing names node {name} (no Node, no FlavorBinding, not listed)"),
            "see 'kubeflavor node list'",
        ));
    }
    writeln!(out, "node {name} forgotten: its name is free to join again")?;
    Ok(())
}

/// What the API server answered about the node's own requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiServerAnswer {
    /// `status.denied`, with the reason (the authorization webhook's).
    Refused(String),
    /// Allowed, or no opinion: the node's requests go through.
    NotRefused,
    /// The review could not be made.
    Unknown(String),
}

/// Where a node stands for `node get`: judged, revoked, cut off, its serving certificate.
#[derive(Debug, Clone)]
pub struct Standing {
    pub node: String,
    /// What its FlavorBinding says; `None` when no binding names the node.
    pub binding: Option<BindingStanding>,
    /// The Node's taints (key, effect); `None` when there is no Node (or it could not be
    /// read).
    pub node_taints: std::result::Result<Option<Vec<(String, String)>>, String>,
    /// Whether the name is in the revocation list.
    pub listed: std::result::Result<bool, String>,
    pub api_server: ApiServerAnswer,
    pub serving: std::result::Result<Option<kubeflavor_cluster::csrs::ServingCsrState>, String>,
    /// Its NodeReport: what it claims, and what kubeflavor observed.
    pub network: std::result::Result<Option<kubeflavor_cluster::crd::network::NodeReport>, String>,
}

/// The binding's Flavored and Revoked, as the binding itself answers them, with the
/// conditions that say why.
#[derive(Debug, Clone)]
pub struct BindingStanding {
    pub flavored: bool,
    pub revoked: bool,
    pub flavored_condition: Option<kubeflavor_cluster::crd::Condition>,
    pub revoked_condition: Option<kubeflavor_cluster::crd::Condition>,
    /// The revocation's records: its token spent, its pods deleted.
    pub token_spent_condition: Option<kubeflavor_cluster::crd::Condition>,
    pub pods_removed_condition: Option<kubeflavor_cluster::crd::Condition>,
}

impl BindingStanding {
    pub fn of(b: &FlavorBinding) -> BindingStanding {
        let condition = |type_: &str| {
            b.status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
        };
        BindingStanding {
            flavored: b.is_flavored(),
            revoked: b.is_revoked(),
            flavored_condition: condition(kubeflavor_cluster::crd::CONDITION_FLAVORED),
            revoked_condition: condition(kubeflavor_cluster::crd::CONDITION_REVOKED),
            token_spent_condition: condition(kubeflavor_cluster::crd::CONDITION_TOKEN_SPENT),
            pods_removed_condition: condition(kubeflavor_cluster::crd::CONDITION_PODS_REMOVED),
        }
    }
}

/// Asks the API server whether it would let `system:node:<node>` get its own Node: the
/// whole authorizer chain answers, the authorization webhook included.
pub async fn api_server_answer(client: &kube::Client, node: &str) -> ApiServerAnswer {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "{}{node}",
                kubeflavor_core::csr::client::NODE_USER_PREFIX
            )),
            groups: Some(vec!["system:nodes".into(), "system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                name: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api = kube::Api::<SubjectAccessReview>::all(client.clone());
    match api.create(&kube::api::PostParams::default(), &review).await {
        Ok(answer) => match answer.status {
            Some(s) if s.denied == Some(true) => {
                ApiServerAnswer::Refused(s.reason.unwrap_or_default())
            }
            Some(_) => ApiServerAnswer::NotRefused,
            None => ApiServerAnswer::Unknown("the review came back without a status".into()),
        },
        Err(e) => ApiServerAnswer::Unknown(e.to_string()),
    }
}

impl Standing {
    /// Reads the Node, asks the API server and lists the serving CSRs; a failure of one
    /// read shows in its line, not as the command's error.
    pub async fn read(client: &kube::Client, node: &str, b: Option<&FlavorBinding>) -> Standing {
        use k8s_openapi::api::core::v1::Node;
        let node_taints = kube::Api::<Node>::all(client.clone())
            .get_opt(node)
            .await
            .map(|n| {
                n.map(|n| {
                    n.spec
                        .and_then(|s| s.taints)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|t| (t.key, t.effect))
                        .collect()
                })
            })
            .map_err(|e| e.to_string());
        let listed = revocation_list::is_listed(client, node)
            .await
            .map_err(|e| e.to_string());
        let api_server = api_server_answer(client, node).await;
        let serving = kubeflavor_cluster::csrs::latest_serving_csr(client, node)
            .await
            .map_err(|e| e.to_string());
        let network = kubeflavor_cluster::node_reports::get(client, node)
            .await
            .map_err(|e| e.to_string());
        Standing {
            node: node.to_string(),
            binding: b.map(BindingStanding::of),
            node_taints,
            listed,
            api_server,
            serving,
            network,
        }
    }

    /// Whether the Node carries the revocation mark, as core's rule reads it (the
    /// webhook's and the serving loop's rule).
    fn node_marked_revoked(&self) -> bool {
        matches!(&self.node_taints, Ok(Some(taints))
            if taints.iter().any(|(k, e)| cutoff::is_revocation_mark(k, e)))
    }

    fn node_has(&self, taint: &str) -> Option<bool> {
        match &self.node_taints {
            Ok(Some(taints)) => Some(taints.iter().any(|(k, _)| k == taint)),
            _ => None,
        }
    }

    /// The lines under `node get`'s table, like kubectl describe's.
    pub fn describe(&self, now: Timestamp) -> String {
        format!(
            "Judged:   {}\nRevoked:  {}\nListed:   {}\nToken:    {}\nPods:     {}\nCut off:  {}\nServing:  {}\nNetwork:  {}\n",
            self.judged(),
            self.revoked_line(),
            self.listed_line(),
            self.token_line(),
            self.pods_line(),
            self.cut_off(),
            self.serving_line(now),
            self.network_line(now)
        )
    }

    fn listed_line(&self) -> String {
        let list = format!("{}/{}", list_consts::NAMESPACE, list_consts::NAME);
        match &self.listed {
            Ok(true) => format!(
                "yes (in {list}: the API server refuses its kubelet's writes and pods on it; 'kubeflavor node forget' lifts it)"
            ),
            Ok(false) => format!("no (not in {list})"),
            Err(e) => format!("unknown (the list could not be read: {e})"),
        }
    }

    /// Whether the revocation spent the node's join token.
    fn token_line(&self) -> String {
        match &self.binding {
            Some(b) if b.token_spent_condition.is_some() => {
                format!("spent ({})", why(&b.token_spent_condition))
            }
            Some(b) if b.revoked => {
                "not recorded as spent (run 'kubeflavor node revoke' again to finish)".into()
            }
            Some(_) => "live (not revoked)".into(),
            None => "unknown (no FlavorBinding names it)".into(),
        }
    }

    fn pods_line(&self) -> String {
        match &self.binding {
            Some(b) if b.pods_removed_condition.is_some() => {
                format!("removed ({})", why(&b.pods_removed_condition))
            }
            _ => "none removed".into(),
        }
    }

    /// `; the Node ...` about `taint`, worded for whether it should be there (`want`).
    fn node_note(&self, taint: &str, want: bool) -> String {
        match (&self.node_taints, self.node_has(taint)) {
            (Err(e), _) => format!("; the Node could not be read: {e}"),
            (Ok(None), _) => format!("; no Node {}", self.node),
            (_, Some(true)) if want => format!("; the Node carries {taint}"),
            (_, Some(true)) => format!("; the Node still carries {taint}"),
            (_, _) if want => format!("; the Node does not carry {taint} yet"),
            _ => format!("; the Node does not carry {taint}"),
        }
    }

    fn judged(&self) -> String {
        let unverified = self.node_note(UNVERIFIED_TAINT, false);
        match &self.binding {
            Some(b) => format!(
                "{} ({}{unverified})",
                if b.flavored { "yes" } else { "no" },
                why(&b.flavored_condition),
            ),
            None => format!("no (no FlavorBinding{unverified})"),
        }
    }

    /// Revoked by its binding's condition; without a binding, by the Node's taint, the
    /// revocation that stands (P7: the webhook denies the name while it is there).
    fn is_revoked(&self) -> bool {
        match &self.binding {
            Some(b) => b.revoked,
            None => self.node_marked_revoked(),
        }
    }

    fn revoked_line(&self) -> String {
        match &self.binding {
            Some(b) if b.revoked => format!(
                "yes ({}{})",
                why(&b.revoked_condition),
                self.node_note(REVOKED_TAINT, true)
            ),
            Some(_) => "no".to_string(),
            None if self.is_revoked() => {
                format!("yes (no FlavorBinding; the Node carries {REVOKED_TAINT})")
            }
            None => "no (no FlavorBinding)".to_string(),
        }
    }

    fn cut_off(&self) -> String {
        match (&self.api_server, self.is_revoked()) {
            (ApiServerAnswer::Refused(reason), _) => {
                format!("yes (the API server refuses its requests: {reason})")
            }
            (ApiServerAnswer::NotRefused, true) => "no (revoked, but the API server does not \
                 refuse it: the authorization webhook is not configured, see README)"
                .to_string(),
            (ApiServerAnswer::NotRefused, false) => "no (not revoked)".to_string(),
            (ApiServerAnswer::Unknown(e), _) => {
                format!("unknown (the API server could not be asked: {e})")
            }
        }
    }

    fn serving_line(&self, now: Timestamp) -> String {
        match &self.serving {
            Ok(Some(s)) => format!(
                "{} {} ({} ago)",
                s.csr,
                s.state,
                output::age(s.created, now)
            ),
            Ok(None) => "none".to_string(),
            Err(e) => format!("unknown (the CSRs could not be listed: {e})"),
        }
    }
}

impl Standing {
    /// Where kubeflavor observed the node, what answered when it connected back, and how
    /// its claims read.
    fn network_line(&self, now: Timestamp) -> String {
        let report = match &self.network {
            Err(e) => return format!("unknown (its NodeReport could not be read: {e})"),
            Ok(None) => {
                return "no report (the node has not run 'kubeflavor node report')".into();
            }
            Ok(Some(r)) => r,
        };
        let status = report.status.clone().unwrap_or_default();
        let Some(observed) = &status.observed else {
            return "reported, not observed yet (node report --observer)".into();
        };
        let mut line = format!(
            "observed on site {} at {} by {} ({} ago)",
            status.site.as_deref().unwrap_or("(not mapped yet)"),
            observed.address,
            observed.observer,
            output::age(Some(observed.at), now)
        );
        if let Some(verdict) = &observed.serving_certificate {
            line.push_str(&format!("; serving certificate there: {verdict}"));
        }
        if let Some(micros) = observed.round_trip_microseconds {
            line.push_str(&format!(", round trip {:.1} ms", micros as f64 / 1000.0));
        }
        match &status.claim {
            Some(c) if c.message.is_empty() => line.push_str(&format!("; claims {}", c.verdict)),
            Some(c) => line.push_str(&format!("; claims {}: {}", c.verdict, c.message)),
            None => line.push_str("; claims not judged yet"),
        }
        line
    }
}

/// A condition's reason and message, as `node get` shows why.
fn why(c: &Option<kubeflavor_cluster::crd::Condition>) -> String {
    match c {
        Some(c) if c.message.is_empty() => c.reason.clone(),
        Some(c) => format!("{}: {}", c.reason, c.message),
        None => "no condition yet".into(),
    }
}

/// `node report`: once, or at `--every` until stopped; with `--systemd-unit`, the unit
/// that runs it so.
pub async fn report(
    global: &crate::cli::GlobalArgs,
    args: &NodeReportArgs,
    out: &mut dyn Write,
) -> Result<()> {
    use crate::report::{self as reporter, Observer};
    if args.systemd_unit {
        let program = std::env::current_exe().map_err(|e| {
            CliError::failed(
                format!("cannot tell where this kubeflavor binary is: {e}"),
                "run it by its full path",
            )
        })?;
        let flags = reporter::UnitFlags {
            observer: args.observer.as_deref(),
            observer_ca_file: args.observer_ca_file.as_deref(),
            source_address: args.source_address,
            every: args.every,
        };
        let unit = reporter::systemd_unit(&program, global.kubeconfig.as_deref(), &flags).map_err(
            |e| {
                CliError::new(
                    crate::exit::ExitCode::Usage,
                    e,
                    "give paths and an address without control characters",
                )
            },
        )?;
        out.write_all(unit.as_bytes())?;
        return Ok(());
    }
    let observer = match &args.observer {
        Some(url) => Some(Observer {
            url: url.clone(),
            ca_pem: args
                .observer_ca_file
                .as_deref()
                .map(reporter::read_ca)
                .transpose()
                .map_err(|e| CliError::failed(e, "give --observer-ca-file a readable PEM file"))?,
            source: args.source_address,
        }),
        None => None,
    };
    // Each report starts an interval after the previous one started (one that ran late
    // does not make the next come early).
    let mut ticks = args.every.map(|every| {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    loop {
        if let Some(ticks) = ticks.as_mut() {
            ticks.tick().await;
        }
        // The kubeconfig and the client certificate are read each time: the kubelet
        // rotates its certificate, and a reporter started before the kubelet had one
        // reports once it has.
        let done = match report_once(global, observer.as_ref()).await {
            Ok(done) => Ok(done),
            Err(e) if args.every.is_some() => Err(e.to_string()),
            Err(e) => return Err(e),
        };
        match done {
            Ok(r) => {
                match &r.observed {
                    Some(address) => writeln!(
                        out,
                        "nodereport.kubeflavor.io/{} reported; observed at {address}",
                        r.node
                    )?,
                    None => writeln!(out, "nodereport.kubeflavor.io/{} reported", r.node)?,
                }
                out.flush()?;
            }
            Err(e) => {
                tracing::warn!(error = %e, "node report failed; retrying at the next interval")
            }
        }
        if ticks.is_none() {
            return Ok(());
        }
    }
}

/// One report with the kubeconfig as it is now.
async fn report_once(
    global: &crate::cli::GlobalArgs,
    observer: Option<&crate::report::Observer>,
) -> Result<crate::report::Reported> {
    use crate::report as reporter;
    let (cluster, config) = Cluster::connect_with_config(&global.cluster()).await?;
    let identity = reporter::identity_of(&config).map_err(|e| {
        CliError::failed(
            e,
            "run it on the node with --kubeconfig /etc/kubernetes/kubelet.conf",
        )
    })?;
    let spec = reporter::gather::this_machine();
    reporter::report(&cluster, &identity, &spec, observer)
        .await
        .map_err(|e| {
            CliError::failed(
                e,
                "check that kubeflavor is installed (its NodeReport CRD and the nodes' reporter role) and that --observer is the join-token API started with --node-client-ca-file",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> kubeflavor_cluster::crd::Condition {
        kubeflavor_cluster::crd::Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Timestamp::UNIX_EPOCH,
            observed_generation: None,
        }
    }

    fn standing(revoked: bool, answer: ApiServerAnswer, taints: &[(&str, &str)]) -> Standing {
        Standing {
            node: "w1".into(),
            binding: Some(BindingStanding {
                flavored: true,
                revoked,
                flavored_condition: Some(cond("Flavored", "True", "Applied", "")),
                revoked_condition: revoked
                    .then(|| cond("Revoked", "True", "RevokedByAdmin", "by node revoke")),
                token_spent_condition: revoked.then(|| {
                    cond(
                        "TokenSpent",
                        "True",
                        "TokenSecretDeleted",
                        "token abcdef spent",
                    )
                }),
                pods_removed_condition: None,
            }),
            node_taints: Ok(Some(
                taints
                    .iter()
                    .map(|(k, e)| (k.to_string(), e.to_string()))
                    .collect(),
            )),
            listed: Ok(revoked),
            api_server: answer,
            serving: Ok(None),
            network: Ok(None),
        }
    }

    fn line<'a>(text: &'a str, label: &str) -> &'a str {
        text.lines()
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} in {text}"))
            .trim_start()
    }

    #[test]
    fn cut_off_is_what_the_api_server_answers_not_the_binding() {
        let now = Timestamp::UNIX_EPOCH;
        let refused = ApiServerAnswer::Refused("kubeflavor: node w1 is revoked".into());
        let text = standing(true, refused, &[("kubeflavor.io/revoked", "NoExecute")]).describe(now);
        assert_eq!(
            line(&text, "Cut off:"),
            "yes (the API server refuses its requests: kubeflavor: node w1 is revoked)"
        );
        assert_eq!(
            line(&text, "Revoked:"),
            "yes (RevokedByAdmin: by node revoke; the Node carries kubeflavor.io/revoked)"
        );
        // Revoked, yet the API server lets it in: said so, not "yes".
        let text = standing(true, ApiServerAnswer::NotRefused, &[]).describe(now);
        assert!(
            line(&text, "Cut off:")
                .starts_with("no (revoked, but the API server does not refuse it")
        );
        assert!(line(&text, "Revoked:").ends_with("does not carry kubeflavor.io/revoked yet)"));
        let text = standing(false, ApiServerAnswer::NotRefused, &[]).describe(now);
        assert_eq!(line(&text, "Cut off:"), "no (not revoked)");
        assert_eq!(line(&text, "Revoked:"), "no");
        assert_eq!(line(&text, "Token:"), "live (not revoked)");
        assert!(
            line(&text, "Listed:").starts_with("no (not in kube-system/kubeflavor-revoked-nodes")
        );
        let text = standing(false, ApiServerAnswer::Unknown("403".into()), &[]).describe(now);
        assert!(line(&text, "Cut off:").starts_with("unknown"));
    }

    #[test]
    fn a_revoked_node_says_its_token_is_spent_and_it_is_listed() {
        let now = Timestamp::UNIX_EPOCH;
        let refused = ApiServerAnswer::Refused("kubeflavor: node w1 is revoked".into());
        let mut s = standing(true, refused, &[("kubeflavor.io/revoked", "NoExecute")]);
        let text = s.describe(now);
        assert_eq!(
            line(&text, "Token:"),
            "spent (TokenSecretDeleted: token abcdef spent)"
        );
        assert!(line(&text, "Listed:").starts_with("yes (in kube-system/kubeflavor-revoked-nodes"));
        assert_eq!(line(&text, "Pods:"), "none removed");
        let b = s.binding.as_mut().unwrap();
        b.token_spent_condition = None;
        b.pods_removed_condition = Some(cond(
            "PodsRemoved",
            "True",
            "PodsDeleted",
            "1 pod(s) deleted: default/p",
        ));
        let text = s.describe(now);
        assert!(
            line(&text, "Token:").starts_with("not recorded as spent"),
            "{text}"
        );
        assert_eq!(
            line(&text, "Pods:"),
            "removed (PodsDeleted: 1 pod(s) deleted: default/p)"
        );
    }

    #[test]
    fn judged_names_the_condition_and_a_leftover_unverified_taint() {
        let now = Timestamp::UNIX_EPOCH;
        let mut s = standing(
            false,
            ApiServerAnswer::NotRefused,
            &[("kubeflavor.io/unverified", "NoSchedule")],
        );
        assert_eq!(
            line(&s.describe(now), "Judged:"),
            "yes (Applied; the Node still carries kubeflavor.io/unverified)"
        );
        let b = s.binding.as_mut().unwrap();
        b.flavored = false;
        b.flavored_condition = None;
        s.node_taints = Ok(None);
        assert_eq!(
            line(&s.describe(now), "Judged:"),
            "no (no condition yet; no Node w1)"
        );
        assert_eq!(line(&s.describe(now), "Serving:"), "none");
    }

    #[test]
    fn a_node_without_a_binding_is_revoked_while_its_node_carries_the_taint() {
        let now = Timestamp::UNIX_EPOCH;
        let refused = ApiServerAnswer::Refused("kubeflavor: node w1 is revoked".into());
        let mut s = standing(true, refused, &[("kubeflavor.io/revoked", "NoExecute")]);
        s.binding = None;
        let text = s.describe(now);
        assert_eq!(
            line(&text, "Revoked:"),
            "yes (no FlavorBinding; the Node carries kubeflavor.io/revoked)"
        );
        assert!(line(&text, "Judged:").starts_with("no (no FlavorBinding"));
        assert!(line(&text, "Cut off:").starts_with("yes (the API server refuses"));
        // Never judged, never revoked: not cut off, and said so plainly.
        let mut s = standing(false, ApiServerAnswer::NotRefused, &[]);
        s.binding = None;
        let text = s.describe(now);
        assert_eq!(line(&text, "Revoked:"), "no (no FlavorBinding)");
        assert_eq!(line(&text, "Cut off:"), "no (not revoked)");
    }

    #[test]
    fn only_the_noexecute_mark_revokes_a_node_without_a_binding() {
        let now = Timestamp::UNIX_EPOCH;
        let taint = [("kubeflavor.io/revoked", "NoSchedule")];
        let mut s = standing(false, ApiServerAnswer::NotRefused, &taint);
        s.binding = None;
        let text = s.describe(now);
        assert!(line(&text, "Revoked:").starts_with("no"), "{text}");
    }

    #[test]
    fn the_network_line_says_what_was_observed_and_how_the_claims_read() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let mut s = standing(false, ApiServerAnswer::NotRefused, &[]);
        assert!(line(&s.describe(now), "Network:").starts_with("no report"));
        let report: kubeflavor_cluster::crd::network::NodeReport =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kubeflavor.io/v1alpha1", "kind": "NodeReport",
                "metadata": {"name": "w1"},
                "spec": {},
                "status": {
                    "site": "lyon",
                    "observed": {"address": "10.20.5.9", "method": "tls-client-certificate",
                        "observer": "serve-0", "at": "2026-12-03T11:59:00Z",
                        "servingCertificate": "verified", "roundTripMicroseconds": 1500},
                    "claim": {"verdict": "Contradicts", "message": "the node claims 10.30.0.9/24"},
                },
            }))
            .unwrap();
        s.network = Ok(Some(report.clone()));
        assert_eq!(
            line(&s.describe(now), "Network:"),
            "observed on site lyon at 10.20.5.9 by serve-0 (60s ago); serving certificate there: verified, round trip 1.5 ms; claims Contradicts: the node claims 10.30.0.9/24"
        );
        let mut unobserved = report;
        unobserved.status = None;
        s.network = Ok(Some(unobserved));
        assert!(line(&s.describe(now), "Network:").starts_with("reported, not observed yet"));
    }
}
