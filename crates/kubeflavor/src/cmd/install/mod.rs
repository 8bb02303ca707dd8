//! `kubeflavor install`: everything the controller needs, as YAML documents to read (and to
//! pipe into `kubectl apply -f -`), or applied directly with server-side apply.

mod admission;
mod applied_record;
mod authz;
mod monitoring;
mod node_reports;
mod pods;
mod rbac;
mod revoked;
mod serve;
mod sole;
mod trail;
mod unverified;
mod workload;

use std::collections::BTreeMap;
use std::io::Write;
use std::num::NonZeroU32;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kubeflavor_cluster::crd;
use kubeflavor_cluster::unverified_policy;
use kubeflavor_core::admission::token_shape::{self, Ceilings};
use kubeflavor_core::flavor::TokenTtl;
use kubeflavor_core::mint::rate::MintRate;
use serde::Serialize;
use serde_json::Value;

pub use authz::KUBEADM_CLIENT_CN as AUTHZ_CLIENT_CN;
pub use rbac::{CONTROLLER_SA, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};
pub use serve::{SERVE, ServePlan, TLS_SECRET, TOKEN_POLICY, serve_user};
pub use workload::{HTTP_PORT, default_image};

use crate::connect::Cluster;
use crate::connect::FIELD_MANAGER;
use crate::controller::approvers::{self, KUBEADM_RENEWAL_BINDING};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::output;
use crate::output::yaml::{comment, with_notes};
use kubeflavor_core::admission::unverified::POLICY_NAME;
use kubeflavor_core::flavor::{TrustLevel, UNVERIFIED_TAINT};
use kubeflavor_core::node::placement::Placement;

/// How long `install --apply` waits for the CRDs to be served.
const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The namespace of the controller (created if missing).
    #[arg(
        long,
        short = 'n',
        default_value = "kubeflavor",
        value_name = "NAMESPACE"
    )]
    pub namespace: String,
    /// Apply the objects to the cluster (server-side apply, field manager `kubeflavor`)
    /// instead of printing them. Safe to re-run.
    #[arg(long)]
    pub apply: bool,
    /// The controller image. Default: ghcr.io/kubeflavor/kubeflavor:<this version>.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Controller replicas. They elect a leader: only the Lease holder writes, another
    /// takes over within the lease duration. 0 installs everything but runs no
    /// controller (to run `kubeflavor controller` elsewhere), nor, with --serve, the
    /// join-token API.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub replicas: u16,
    /// Hand node certificate renewals to kubeflavor: the controller runs with
    /// --manage-renewals (renewals of bound, unrevoked nodes approved, the rest denied,
    /// so a revoked node cannot renew) and may ask the API server who approves renewals.
    /// With --apply it also deletes kubeadm's ClusterRoleBinding
    /// kubeadm:node-autoapprove-certificate-rotation, without which kube-controller-manager
    /// approves every renewal first; without --apply the YAML says to.
    #[arg(long)]
    pub manage_renewals: bool,
    /// Make kubeflavor the only approver of kubelet client CSRs: --manage-renewals, plus
    /// the controller runs with --strict (other bootstrap tokens' CSRs are denied) and
    /// --apply deletes kubeadm's kubeadm:node-autoapprove-bootstrap binding, and a
    /// ValidatingAdmissionPolicy refuses any RBAC write granting bootstrap tokens the
    /// nodeclient auto-approval again (so `kubeadm upgrade apply` needs --skip-phases
    /// bootstrap-token). Only then does a node name bind to exactly one token whatever
    /// other tokens exist; kubeadm's own tokens can no longer join nodes.
    #[arg(long)]
    pub sole_approver: bool,
    /// Let the controller approve kubelet serving certificates (kubernetes.io/kubelet-serving)
    /// of the nodes kubeflavor bound: it runs with --approve-serving and is granted 'approve'
    /// on that signer. On by default with --sole-approver, off otherwise. Nodes list the
    /// addresses they may name in the Flavor's spec.servingAddresses.
    #[arg(long)]
    pub approve_serving: bool,
    /// Leave out the grant that lets join tokens read Nodes (kubeflavor:get-nodes).
    /// kubeadm join needs it to check for an existing Node (it fails without it);
    /// kubeflavor join does not. Without it a token holder cannot read any Node's
    /// labels, so no flavor at all.
    #[arg(long)]
    pub no_token_node_read: bool,
    /// Also install the join-token API (`kubeflavor serve`): its own ServiceAccount and
    /// least-privilege RBAC, a Deployment of 2 replicas, a PodDisruptionBudget and a
    /// ClusterIP Service kubeflavor-serve (443). It serves the certificate of the Secret
    /// kubeflavor-serve-tls (type kubernetes.io/tls), which you create.
    #[arg(long)]
    pub serve: bool,
    /// With --serve: replicas of the join-token API (none run with --replicas 0).
    #[arg(long, value_name = "N", default_value_t = serve::DEFAULT_REPLICAS, requires = "serve", value_parser = clap::value_parser!(u16).range(1..))]
    pub serve_replicas: u16,
    /// With --serve: join tokens one caller may mint per minute on average, across all
    /// the API's replicas. Each replica keeps its own count and is given this divided by
    /// --serve-replicas, rounded down (its --rate-per-minute).
    #[arg(long, value_name = "N", default_value_t = serve::DEFAULT_RATE.per_minute, requires = "serve")]
    pub serve_rate_per_minute: u32,
    /// With --serve: join tokens one caller may mint at once, across all the API's
    /// replicas; each replica is given this divided by --serve-replicas, rounded down (its
    /// --burst).
    #[arg(long, value_name = "N", default_value_t = serve::DEFAULT_RATE.burst, requires = "serve")]
    pub serve_burst: u32,
    /// With --serve: the longest a token the join-token API's identity creates may live
    /// (its expiration after its Secret's creation), whatever a Flavor's tokenLimits allow.
    /// The API server refuses a longer one (the policy kubeflavor-serve-token-secrets), so a
    /// stolen identity cannot mint a token that outlives it by years.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "168h",
        requires = "serve"
    )]
    pub serve_max_token_ttl: TokenTtl,
    /// With --serve: the most node names a token the join-token API's identity creates may
    /// bind (its kubeflavor.io/max-nodes), whatever a Flavor's tokenLimits allow.
    #[arg(long, value_name = "N", default_value_t = token_shape::DEFAULT_CEILINGS.max_nodes.get(), requires = "serve", value_parser = clap::value_parser!(u32).range(1..))]
    pub serve_max_nodes: u32,
    /// With --serve: also serve node administrators who sign in with this OpenID Connect
    /// issuer, as ISSUER=AUDIENCE (repeat for more): the API's `serve --oidc-issuer`. A
    /// Roster decides their flavors (`kubeflavor roster add-rule`).
    #[arg(
        long = "serve-oidc-issuer",
        value_name = "ISSUER=AUDIENCE",
        requires = "serve"
    )]
    pub serve_oidc_issuers: Vec<crate::serve::oidc::IssuerConfig>,
    /// With --serve-oidc-issuer: the Roster the API reads (default: default).
    #[arg(long, value_name = "NAME", requires = "serve_oidc_issuers")]
    pub serve_roster: Option<String>,
    /// With --serve-oidc-issuer: a ConfigMap of the install namespace whose key ca.crt holds
    /// the CA certificates (PEM) the providers' TLS certificates chain to; without it the
    /// API trusts Mozilla's CAs, compiled in (the image has no system CAs).
    #[arg(long, value_name = "NAME", requires = "serve_oidc_issuers")]
    pub serve_oidc_ca_configmap: Option<String>,
    /// With --serve-oidc-issuer: also serve the node administrators' web portal at this
    /// address (https://HOST[:PORT], the one browsers use; its /callback must be a redirect
    /// URI of the issuer's client): the API's `serve --portal-url`. It reads the Secret
    /// kubeflavor-portal of this namespace, which you create, with keys client-secret (the
    /// client's secret at the provider) and session-keys (one base64 key of 32 bytes per line,
    /// newest first: `head -c 32 /dev/urandom | base64`); its pods wait in ContainerCreating
    /// until it exists.
    #[arg(long, value_name = "URL", requires = "serve_oidc_issuers")]
    pub serve_portal_url: Option<String>,
    /// With --serve-portal-url: the issuer administrators sign in with on the portal (one
    /// of --serve-oidc-issuer's; default: the only one).
    #[arg(long, value_name = "ISSUER", requires = "serve_portal_url")]
    pub serve_portal_issuer: Option<String>,
    /// Every controller replica also serves the authorization webhook that cuts revoked
    /// nodes off (port 8443, behind the Service kubeflavor-authz), with the certificate of
    /// the Secret kubeflavor-authz-tls (tls.crt, tls.key, client-ca.crt), which you create.
    /// The API server must then be told to ask it: see --authz-config.
    #[arg(long)]
    pub authz_webhook: bool,
    /// Print, instead of the install set, what the API server needs to ask the webhook: the
    /// AuthorizationConfiguration entry (webhook before Node and RBAC, matchConditions on
    /// system:nodes, timeout, caching, failurePolicy and the trade-off of each choice), its
    /// kubeconfig, and the kubeadm ClusterConfiguration that sets both.
    #[arg(long, conflicts_with = "apply")]
    pub authz_config: bool,
    /// Also install what watches kubeflavor, for clusters with the Prometheus Operator and
    /// Grafana's dashboard sidecar: a PodMonitor for /metrics of the controller and the
    /// join-token API, the alert rules as a PrometheusRule, and the Grafana dashboard as a
    /// ConfigMap labelled grafana_dashboard: "1". The same rules and dashboard are the
    /// files of the repository's monitoring/ directory.
    #[arg(long)]
    pub monitoring: bool,
    /// Run the controller (and the webhook it serves) and the join-token API only on Nodes
    /// whose kubeflavor trust-level label is N or more, instead of on control-plane Nodes
    /// (the default). Root on the node running them takes their credentials: choose a level
    /// only Flavors of nodes you administer reach.
    #[arg(long, value_name = "N", value_parser = parse_trust_level)]
    pub run_on_trust_level: Option<TrustLevel>,
    /// Also run `kubeflavor node report` on every node that runs pods: a DaemonSet
    /// kubeflavor-node-reporter (namespace <namespace>-node-reporter) on the host's
    /// network, with the kubelet's own kubeconfig and certificates (read-only from the
    /// host, where kubeadm puts them), reporting every 10 minutes and observed by the
    /// join-token API at this address (https://HOST[:PORT]; `serve --node-client-ca-file`),
    /// which must see nodes' own addresses (no NAT between them). Appliances without
    /// pods run it from systemd instead (`node report --systemd-unit`).
    #[arg(long, value_name = "URL")]
    pub node_reporter: Option<String>,
    /// With --node-reporter: a ConfigMap of the reporter's namespace whose key ca.crt holds
    /// the CA of the observer's serving certificate (default: the public roots). Its pods
    /// wait in ContainerCreating until it exists.
    #[arg(long, value_name = "NAME", requires = "node_reporter")]
    pub node_reporter_ca_configmap: Option<String>,
    /// With --node-reporter: how often each node reports and is observed again.
    #[arg(long, value_name = "DURATION", default_value = "10m", requires = "node_reporter", value_parser = crate::cli::discovery_flags::parse_duration)]
    pub node_reporter_every: std::time::Duration,
}

fn parse_trust_level(text: &str) -> std::result::Result<TrustLevel, String> {
    let n: i64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not an integer; give a trust level from 0 to 100"))?;
    TrustLevel::try_from(n).map_err(|e| e.to_string())
}

/// One object of the install set, with the comments printed above it.
pub struct Document {
    pub about: String,
    pub object: Value,
    /// For Roles and ClusterRoles: why each rule (by index) is needed.
    pub rule_notes: Vec<String>,
    /// Comments printed above fields, by key path (see [`Document::note`]).
    pub notes: Vec<(String, String)>,
    /// A top-level field printed last, as this YAML text (indented below its key) rather
    /// than as the serializer writes it: for content that must read as the file it comes
    /// from (the alert rules, the dashboard). `object` holds the same content, parsed.
    pub verbatim: Option<(&'static str, String)>,
}

impl Document {
    pub fn new(about: &str, object: &impl Serialize) -> Document {
        Document::with_rules(about, object, Vec::new())
    }

    pub fn with_rules(about: &str, object: &impl Serialize, rule_notes: Vec<String>) -> Document {
        // k8s-openapi's and kube's serializers write apiVersion and kind themselves.
        let object = serde_json::to_value(object).expect("Kubernetes objects serialize to JSON");
        Document {
            about: about.into(),
            object,
            rule_notes,
            notes: Vec::new(),
            verbatim: None,
        }
    }

    /// Prints `text` as a comment above the field at `path`: its keys joined by `.`, list
    /// items transparent (`spec.template.spec.containers.resources` is the `resources` of
    /// the first container), as [`with_notes`] places it. [`Document::render`] fails on a
    /// path the object does not have.
    pub fn note(mut self, path: &str, text: &str) -> Document {
        self.notes.push((path.into(), text.into()));
        self
    }

    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object["metadata"]["namespace"].as_str()
    }

    /// The document as YAML: the `about` text as comments, then the object with each
    /// field note above its field; each rule of a role is preceded by the comment saying
    /// why it is there.
    pub fn render(&self) -> Result<String> {
        let mut text = comment(&self.about, "");
        let mut object = self.object.clone();
        let rules = match &mut object {
            Value::Object(map) if !self.rule_notes.is_empty() => map.remove("rules"),
            _ => None,
        };
        if let (Some((key, _)), Value::Object(map)) = (&self.verbatim, &mut object) {
            map.remove(*key);
        }
        text.push_str(
            &with_notes(&output::to_yaml(&object)?, &self.notes).map_err(|path| {
                CliError::failed(
                    format!(
                        "{} {} has a note for {path}, a field it does not have",
                        self.kind(),
                        self.name()
                    ),
                    "report this as a bug",
                )
            })?,
        );
        if let Some(Value::Array(rules)) = rules {
            text.push_str("rules:\n");
            for (rule, note) in rules.iter().zip(&self.rule_notes) {
                text.push_str(&comment(note, ""));
                let yaml = output::to_yaml(rule)?;
                for (i, line) in yaml.lines().enumerate() {
                    text.push_str(if i == 0 { "- " } else { "  " });
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        if let Some((key, yaml)) = &self.verbatim {
            text.push_str(&format!("{key}:\n{yaml}"));
        }
        Ok(text)
    }
}

/// Who approves what, and what tokens may read: the choices of `install` beyond where
/// and what to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mode {
    /// The controller decides renewals (`--manage-renewals`).
    pub manage_renewals: bool,
    /// The controller also denies other tokens' CSRs (`--strict`): with
    /// `install --sole-approver`.
    pub strict: bool,
    /// The controller decides kubelet serving CSRs (`--approve-serving`): with
    /// `install --approve-serving` or `--sole-approver`.
    pub approve_serving: bool,
    /// Bootstrap tokens may read Nodes (kubeadm join's check for an existing Node).
    pub token_node_read: bool,
    /// The join-token API is installed too (`--serve`): its replicas and what each allows
    /// a caller.
    pub serve: Option<ServePlan>,
    /// The controller serves the authorization webhook (`--authz-webhook`).
    pub authz: bool,
    /// What watches kubeflavor is installed too (`--monitoring`).
    pub monitoring: bool,
    /// Where kubeflavor's pods run (`--run-on-trust-level`, control-plane Nodes by default).
    pub placement: Placement,
}

impl Mode {
    pub fn of(args: &InstallArgs) -> Result<Mode> {
        let serve = if args.serve {
            let total = MintRate {
                per_minute: args.serve_rate_per_minute,
                burst: args.serve_burst,
            };
            let plan = ServePlan::new(args.serve_replicas, total).map_err(|e| {
                CliError::refused(
                    e,
                    "give --serve-rate-per-minute and --serve-burst at least --serve-replicas, or run fewer replicas",
                )
            })?;
            let TokenTtl::Seconds(max_ttl_secs) = args.serve_max_token_ttl else {
                return Err(CliError::new(
                    ExitCode::Usage,
                    "--serve-max-token-ttl 0 would let the join-token API's identity mint tokens that never expire",
                    "give a finite duration such as 168h",
                ));
            };
            Some(ServePlan {
                ceilings: Ceilings {
                    max_ttl_secs,
                    max_nodes: NonZeroU32::new(args.serve_max_nodes).expect("clap refuses 0"),
                },
                ..plan
            })
        } else {
            None
        };
        Ok(Mode {
            manage_renewals: args.manage_renewals || args.sole_approver,
            strict: args.sole_approver,
            approve_serving: args.approve_serving || args.sole_approver,
            token_node_read: !args.no_token_node_read,
            serve,
            authz: args.authz_webhook,
            monitoring: args.monitoring,
            placement: args
                .run_on_trust_level
                .map_or(Placement::ControlPlane, Placement::TrustLevel),
        })
    }

    /// What `install` does without flags.
    pub fn default_install() -> Mode {
        Mode {
            token_node_read: true,
            ..Mode::default()
        }
    }

    /// kubeadm's auto-approval bindings this mode removes.
    fn bindings_to_remove(self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.strict {
            names.push(approvers::KUBEADM_BOOTSTRAP_BINDING);
        }
        if self.manage_renewals {
            names.push(KUBEADM_RENEWAL_BINDING);
        }
        names
    }
}

/// Every object of the install set, in apply order: CRDs, namespace, controller identity
/// and RBAC, bootstrap-token RBAC, the policy tainting kubelet-created Nodes, Deployment, and its PodDisruptionBudget when replicas
/// run; then, with `mode.serve`, the join-token API's identity, RBAC, Deployment, budget and
/// Service.
pub fn documents(namespace: &str, image: &str, replicas: u16, mode: Mode) -> Vec<Document> {
    documents_with(
        namespace,
        image,
        replicas,
        mode,
        &serve::Administrators::default(),
    )
}

/// [`documents`], with the join-token API serving node administrators as `administrators`
/// says.
pub fn documents_with(
    namespace: &str,
    image: &str,
    replicas: u16,
    mode: Mode,
    administrators: &serve::Administrators,
) -> Vec<Document> {
    let mut docs: Vec<Document> = crd::crds()
        .into_iter()
        .map(|c| {
            let about = crd_about(&c);
            Document::new(&about, &c)
        })
        .collect();
    docs.push(workload::namespace(namespace));
    docs.push(workload::service_account(namespace));
    docs.extend(trail::documents(namespace));
    docs.extend(rbac::controller(namespace, mode.approve_serving));
    docs.extend(rbac::bootstrap_tokens(mode.token_node_read));
    docs.extend(unverified::documents());
    docs.extend(applied_record::documents());
    docs.extend(node_reports::documents());
    docs.extend(revoked::documents());
    if mode.strict {
        docs.extend(sole::documents());
    }
    docs.push(workload::deployment(namespace, image, replicas, mode));
    if replicas > 0 {
        docs.push(workload::disruption_budget(namespace));
    }
    if mode.authz {
        docs.push(authz::service(namespace));
    }
    if let Some(plan) = mode.serve {
        docs.extend(serve::documents(
            namespace,
            image,
            replicas > 0,
            plan,
            mode.placement,
            administrators,
        ));
    }
    if mode.monitoring {
        docs.extend(monitoring::documents(namespace));
    }
    docs
}

fn crd_about(crd: &CustomResourceDefinition) -> String {
    match crd.spec.names.kind.as_str() {
        "Flavor" => "Flavor: what a flavor means for a node. Its label keys are checked by CEL rules here too, so \
                     `kubectl apply` of a Flavor with a label a kubelet could write is refused."
            .into(),
        "FlavorBinding" => "FlavorBinding: the record that a node name is bound to one token (and so one flavor), written by the \
              controller before it approves the node's certificate."
            .into(),
        "Site" => "Site: the owner's name for address ranges; a node observed connecting from one is labelled with the site \
                   (and its zone and region)."
            .into(),
        "NodeReport" => "NodeReport: what a node says of its network (spec, written with the node's credentials) beside what \
                         kubeflavor observed of it (status)."
            .into(),
        "Roster" => "Roster: which node administrators get a join token, and of which flavor, by their verified identity."
            .into(),
        "AdministratorLedger" => "AdministratorLedger: the join tokens one node administrator holds, how a Roster rule's \
                                  maxLiveTokens is counted."
            .into(),
        kind => format!("{kind}: one of kubeflavor's resources."),
    }
}

pub fn render_all(docs: &[Document]) -> Result<String> {
    let mut text = comment(
        &format!(
            "kubeflavor {} install set. Apply with: kubectl apply --server-side -f - (or kubeflavor install --apply).",
            env!("CARGO_PKG_VERSION")
        ),
        "",
    );
    for doc in docs {
        text.push_str("---\n");
        text.push_str(&doc.render()?);
    }
    Ok(text)
}

pub fn print(args: &InstallArgs, out: &mut dyn Write) -> Result<()> {
    validate_namespace(&args.namespace)?;
    if args.authz_config {
        out.write_all(authz::config(&args.namespace).as_bytes())?;
        return Ok(());
    }
    let image = args.image.clone().unwrap_or_else(default_image);
    let mode = Mode::of(args)?;
    let mut docs = documents_with(
        &args.namespace,
        &image,
        args.replicas,
        mode,
        &administrators_of(args),
    );
    docs.extend(node_reporter_of(args, &image)?);
    let mut remove = mode.bindings_to_remove();
    if !mode.token_node_read {
        remove.push(rbac::GET_NODES);
    }
    if !remove.is_empty() {
        out.write_all(
            comment(
                &format!(
                    "Before applying, delete what this mode removes (install --apply does): \
                     kubectl delete clusterrolebinding {}",
                    remove.join(" ")
                ),
                "",
            )
            .as_bytes(),
        )?;
    }
    out.write_all(
        comment(
            &format!(
                "The MutatingAdmissionPolicy {POLICY_NAME} and its binding need Kubernetes {} or later \
                 ({}); on an older API server leave both out (kubectl refuses them) and know that {}.",
                unverified::SINCE,
                unverified_policy::API_VERSION,
                unverified_policy::without_policy(),
            ),
            "",
        )
        .as_bytes(),
    )?;
    out.write_all(comment(&where_it_runs(mode), "").as_bytes())?;
    out.write_all(render_all(&docs)?.as_bytes())?;
    Ok(())
}

/// Where kubeflavor's pods run and why, printed above the install set and by --apply.
fn where_it_runs(mode: Mode) -> String {
    let pods = if mode.serve.is_some() {
        "The controller (and the webhook it serves) and the join-token API"
    } else {
        "The controller (and the webhook it serves)"
    };
    let text = mode.placement.describe();
    // describe() speaks of one Deployment ("Runs only on ..."); here of both.
    format!("{pods} run{}", text.strip_prefix("Runs").unwrap_or(&text))
}

fn validate_namespace(namespace: &str) -> Result<()> {
    kubeflavor_core::names::check_dns1123_subdomain_max(namespace, 63).map_err(|e| {
        CliError::refused(
            format!("namespace {namespace:?} {e}"),
            "use a DNS label such as kubeflavor",
        )
    })
}

/// The resource (plural, scope) of each kind in the install set.
fn resource_of(doc: &Document) -> Result<(ApiResource, bool)> {
    let (plural, namespaced) = match doc.kind() {
        "CustomResourceDefinition" => ("customresourcedefinitions", false),
        "Namespace" => ("namespaces", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "Deployment" => ("deployments", true),
        "PodDisruptionBudget" => ("poddisruptionbudgets", true),
        "Service" => ("services", true),
        "ValidatingAdmissionPolicy" => ("validatingadmissionpolicies", false),
        "ValidatingAdmissionPolicyBinding" => ("validatingadmissionpolicybindings", false),
        "MutatingAdmissionPolicy" => ("mutatingadmissionpolicies", false),
        "MutatingAdmissionPolicyBinding" => ("mutatingadmissionpolicybindings", false),
        "ConfigMap" => ("configmaps", true),
        "PodMonitor" => ("podmonitors", true),
        "PrometheusRule" => ("prometheusrules", true),
        other => {
            return Err(CliError::failed(
                format!("install set holds an unexpected kind {other}"),
                "report this as a bug",
            ));
        }
    };
    let (group, version) = match doc.api_version().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), doc.api_version().to_string()),
    };
    let ar = ApiResource {
        group,
        version,
        api_version: doc.api_version().into(),
        kind: doc.kind().into(),
        plural: plural.into(),
    };
    Ok((ar, namespaced))
}

/// The node reporter's namespace and DaemonSet, with `--node-reporter`.
fn node_reporter_of(args: &InstallArgs, image: &str) -> Result<Vec<Document>> {
    let Some(observer) = &args.node_reporter else {
        return Ok(Vec::new());
    };
    let url: http::Uri = observer.parse().map_err(|e| {
        CliError::new(
            ExitCode::Usage,
            format!("--node-reporter {observer:?} is not a URL: {e}"),
            "give the join-token API's address as nodes reach it, https://HOST[:PORT]",
        )
    })?;
    if url.scheme_str() != Some("https") || url.host().is_none() {
        return Err(CliError::new(
            ExitCode::Usage,
            format!("--node-reporter {observer:?} is not an https:// address"),
            "give the join-token API's address as nodes reach it, https://HOST[:PORT]",
        ));
    }
    Ok(node_reports::reporter_documents(
        &args.namespace,
        image,
        &node_reports::NodeReporter {
            observer: observer.trim_end_matches('/').to_string(),
            ca_configmap: args.node_reporter_ca_configmap.clone(),
            every_seconds: args.node_reporter_every.as_secs().max(1),
        },
    ))
}

/// The join-token API's node administrators, from the `--serve-oidc-*` flags.
fn administrators_of(args: &InstallArgs) -> serve::Administrators {
    serve::Administrators {
        issuers: args
            .serve_oidc_issuers
            .iter()
            .map(|i| format!("{}={}", i.issuer, i.audience))
            .collect(),
        roster: args.serve_roster.clone(),
        ca_configmap: args.serve_oidc_ca_configmap.clone(),
        portal_url: args.serve_portal_url.clone(),
        portal_issuer: args.serve_portal_issuer.clone(),
    }
}

/// Server-side apply of every document with field manager `kubeflavor` and force, so a
/// re-run converges to the same objects; then wait until the CRDs are served.
pub async fn apply(cluster: &Cluster, args: &InstallArgs, out: &mut dyn Write) -> Result<()> {
    validate_namespace(&args.namespace)?;
    let image = args.image.clone().unwrap_or_else(default_image);
    let mode = Mode::of(args)?;
    let mut docs = documents_with(
        &args.namespace,
        &image,
        args.replicas,
        mode,
        &administrators_of(args),
    );
    docs.extend(node_reporter_of(args, &image)?);
    if mode.monitoring {
        monitoring::refuse_without_operator(cluster).await?;
    }
    let served = unverified_policy::served(&cluster.client)
        .await
        .map_err(|e| cluster.error("ask the API server which admission APIs it serves", e))?;
    if !served {
        leave_out_unverified_policy(&mut docs, out)?;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for doc in &docs {
        let (ar, namespaced) = resource_of(doc)?;
        let api: Api<DynamicObject> = match (namespaced, doc.namespace()) {
            (true, Some(ns)) => Api::namespaced_with(cluster.client.clone(), ns, &ar),
            _ => Api::all_with(cluster.client.clone(), &ar),
        };
        api.patch(doc.name(), &params, &Patch::Apply(&doc.object))
            .await
            .map_err(|e| cluster.error(&format!("apply {} {}", doc.kind(), doc.name()), e))?;
        writeln!(out, "{} applied", shown_name(doc))?;
    }
    if !mode.token_node_read {
        // A grant an earlier install made: apply does not remove what it no longer lists.
        delete_binding(cluster, rbac::GET_NODES, "tokens cannot read Nodes", out).await?;
    }
    writeln!(out, "{}", where_it_runs(mode))?;
    hand_approvals_over(cluster, mode, out).await?;
    wait_for_crds(cluster).await
}

/// Where the API server does not serve MutatingAdmissionPolicy v1: the policy and its
/// binding are left out of `docs`, and `out` says what is lost.
fn leave_out_unverified_policy(docs: &mut Vec<Document>, out: &mut dyn Write) -> Result<()> {
    docs.retain(|d| !d.kind().starts_with("MutatingAdmissionPolicy"));
    writeln!(
        out,
        "warning: this API server does not serve MutatingAdmissionPolicy {} (Kubernetes {} and later), \
         so nothing taints kubelet-created Nodes {UNVERIFIED_TAINT}:NoSchedule on its own: {}. \
         The policy and its binding were not applied.",
        unverified_policy::API_VERSION,
        unverified::SINCE,
        unverified_policy::without_policy(),
    )?;
    Ok(())
}

/// Waits until the API server serves every CRD `install` applied.
async fn wait_for_crds(cluster: &Cluster) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    for crd in crd::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(CRD_ESTABLISHED_TIMEOUT, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(CliError::failed(
                    format!("cannot watch CRD {name}: {e}"),
                    "check 'kubectl get crd' and retry",
                ));
            }
            Err(_) => {
                return Err(CliError::failed(
                    format!(
                        "CRD {name} was not established within {}s",
                        CRD_ESTABLISHED_TIMEOUT.as_secs()
                    ),
                    "check 'kubectl describe crd' for a naming conflict and retry",
                ));
            }
        }
    }
    Ok(())
}

/// `install --apply --manage-renewals` / `--sole-approver`: deletes kubeadm's
/// auto-approval bindings the mode hands over, then asks the API server (waiting out its
/// RBAC cache) whether such CSRs are still auto-approved through another binding, and
/// refuses if so, naming it.
async fn hand_approvals_over(cluster: &Cluster, mode: Mode, out: &mut dyn Write) -> Result<()> {
    let mut kinds = Vec::new();
    if mode.strict {
        delete_binding(
            cluster,
            approvers::KUBEADM_BOOTSTRAP_BINDING,
            "bootstrap CSRs are kubeflavor's to decide",
            out,
        )
        .await?;
        kinds.push(approvers::Kind::OtherTokens);
    }
    if mode.manage_renewals {
        delete_binding(
            cluster,
            KUBEADM_RENEWAL_BINDING,
            "renewals are kubeflavor's to decide",
            out,
        )
        .await?;
        kinds.push(approvers::Kind::Renewals);
    }
    for kind in kinds {
        let answer =
            approvers::auto_approved_within(&cluster.client, kind, approvers::RBAC_PROPAGATION)
                .await
                .map_err(|e| {
                    cluster.error("ask who approves kubelet CSRs (SubjectAccessReview)", e)
                })?;
        if let Some(reason) = answer {
            return Err(CliError::refused(
                format!(
                    "kube-controller-manager still auto-approves {}: {reason}",
                    match kind {
                        approvers::Kind::Renewals => "nodes' renewals",
                        _ => "other bootstrap tokens' CSRs",
                    }
                ),
                "delete the binding named there, then run install --apply again",
            ));
        }
    }
    if mode.strict {
        writeln!(
            out,
            "note: the policy {} refuses any binding that grants bootstrap tokens the nodeclient \
             auto-approval again, kubeadm's {} included: upgrade with \
             'kubeadm upgrade apply <version> --skip-phases bootstrap-token'",
            kubeflavor_core::admission::sole_approver::POLICY_NAME,
            approvers::KUBEADM_BOOTSTRAP_BINDING,
        )?;
    }
    Ok(())
}

/// Deletes a ClusterRoleBinding (absent is fine) and says so.
async fn delete_binding(
    cluster: &Cluster,
    name: &str,
    why: &str,
    out: &mut dyn Write,
) -> Result<()> {
    let bindings: Api<ClusterRoleBinding> = Api::all(cluster.client.clone());
    let shown = format!("clusterrolebinding.rbac.authorization.k8s.io/{name}");
    match bindings.delete(name, &DeleteParams::default()).await {
        Ok(_) => writeln!(out, "{shown} deleted ({why})")?,
        Err(e) if kubeflavor_cluster::status::is_not_found(&e) => {
            writeln!(out, "{shown} not present ({why})")?
        }
        Err(e) => return Err(cluster.error(&format!("delete {shown}"), e)),
    }
    Ok(())
}

/// kubectl's `<resource>.<group>/<name>` form.
fn shown_name(doc: &Document) -> String {
    let kind = doc.kind().to_lowercase();
    let group = doc
        .api_version()
        .split_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    let prefix = if group.is_empty() {
        kind
    } else {
        format!("{kind}.{group}")
    };
    match doc.namespace() {
        Some(ns) => format!("{prefix}/{} (namespace {ns})", doc.name()),
        None => format!("{prefix}/{}", doc.name()),
    }
}

/// The metadata of an install object `name` (in `namespace`, if namespaced) of
/// `component`, carrying the install's labels.
pub fn object_meta(
    name: &str,
    namespace: Option<&str>,
    component: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels(component)),
        ..Default::default()
    }
}

/// Common labels of every object kubeflavor installs.
pub fn labels(component: &str) -> BTreeMap<String, String> {
    [
        (
            "app.kubernetes.io/name".to_string(),
            "kubeflavor".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "kubeflavor".to_string(),
        ),
    ]
    .into()
}

#[cfg(test)]
mod scheduling_tests;
#[cfg(test)]
mod tests;
