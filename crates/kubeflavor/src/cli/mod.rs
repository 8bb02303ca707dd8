//! The command-line interface: the clap tree, global flags and the parsed values of each
//! command. Values are parsed once here, into kubeflavor-core's types, so the commands
//! never see an unchecked string.

mod values;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kubeflavor_core::flavor::{FlavorName, Taint, TokenTtl};

pub use values::{FlavorLabel, MaxNodes, TrustLevelArg};

use crate::output::Format;

const LONG_ABOUT: &str = "\
kubeflavor makes node enrollment trustworthy when nodes are run by third parties.

A cluster owner mints bootstrap tokens of a hidden flavor (labels, taints, a trust level). A
node joins with an ordinary kubeadm/kubelet TLS bootstrap; kubeflavor's controller, never the
kubelet, decides whether the node gets its certificate, binds the node to the token it used,
and puts the flavor on the Node under label keys the kubelet cannot change.

Cluster access follows kubectl: --kubeconfig, then KUBECONFIG, then ~/.kube/config, then the
in-cluster service account; --context picks a context.

Also usable as the kubectl plugin `kubectl flavor` (the same binary named kubectl-flavor).

The controller (`kubeflavor controller`) approves or denies kubelet CSRs; `node list|get|revoke`
and `token revoke` show and revoke what it bound. `join` is the node side: kubeadm-compatible
discovery and TLS bootstrap. `certs` moves control-plane CA material between machines,
kubeadm-compatible (`upload`, then `join --control-plane --certificate-key` or `certs download`).

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 refused (invalid or unsafe input, object in
use), 5 cluster unreachable, 6 forbidden or unauthorized; `join` adds 10-16 (see `join --help`).
`certs`: 20 malformed certificate key, 21 wrong certificate key, 22 tampered Secret entry, 23
swapped or mismatched entries, 24 missing entry, 25 kubeadm-certs Secret missing or expired, 26
unreadable PKI file, 27 inconsistent PKI files, 28 unwritable target, 29 existing files differ
(--force), 30 wrong key or tampered entry (a Secret kubeadm wrote, without kubeflavor's key check),
31 a Secret without kubeflavor's key check (--accept-kubeadm-secret).";

#[derive(Debug, Parser)]
#[command(
    name = "kubeflavor",
    version,
    about = "Flavored bootstrap tokens and trusted node labels for Kubernetes",
    long_about = LONG_ABOUT,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file to use (only this file, as with kubectl).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current-context.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// More log output on stderr (-v info, -vv debug, -vvv trace). Secrets are never logged.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How logs on stderr look: `text` for people, `json` for log collectors (one JSON
    /// object per line: timestamp, level, target, message and fields). Text is coloured
    /// only when stderr is a terminal and NO_COLOR is unset or empty (https://no-color.org);
    /// JSON never is. RUST_LOG, if set, chooses what is logged, as -v does otherwise.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
}

/// The format of the log lines on stderr (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event; coloured only on a terminal without NO_COLOR.
    #[default]
    Text,
    /// One JSON object per line, never coloured.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mint, list and delete flavored bootstrap tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Define what a flavor means for a node (Flavor objects).
    #[command(subcommand)]
    Flavor(FlavorCommand),
    /// Print (or apply) the CRDs, RBAC and controller Deployment kubeflavor needs.
    Install(InstallArgs),
    /// Join this machine as a node, as `kubeadm join` does: discovery from cluster-info
    /// (token signature and CA pin), bootstrap-kubelet.conf, a kubelet configuration file
    /// and the kubelet flags to use them, and with --tls-bootstrap the kubelet's
    /// certificate request itself. Files and exit codes are listed in `join --help`.
    Join(crate::cmd::join::JoinArgs),
    /// Run the controller: approve or deny kubelet CSRs of kubeflavor tokens, bind nodes
    /// to tokens, and keep each flavor's labels and taints on its Nodes.
    Controller(crate::cmd::controller::ControllerArgs),
    /// List, show and revoke bound nodes (FlavorBindings).
    #[command(subcommand)]
    Node(crate::cmd::node::NodeCommand),
    /// Move control-plane CA material between machines, kubeadm-compatible: certificate
    /// key, CA set generation, encrypted upload to kube-system/kubeadm-certs, download,
    /// inspection.
    #[command(subcommand)]
    Certs(crate::cmd::certs::CertsCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh random token (kubeadm's format and algorithm). Touches no cluster.
    Generate,
    /// Create a token of a flavor and print it.
    ///
    /// The token is stored as an ordinary kubeadm bootstrap token Secret: the same auth
    /// group and description for every flavor, so nothing the token's holder can see
    /// reveals its flavor. The flavor is kept in the Secret's metadata.
    Create(TokenCreateArgs),
    /// List bootstrap tokens (never their secrets). kubeadm's own tokens show as <none>.
    List(TokenListArgs),
    /// Delete tokens by id (or by the whole token). A deleted token can no longer join nodes.
    Delete(TokenDeleteArgs),
    /// Revoke a token (delete its Secret); with --nodes also revoke the nodes bound to it.
    Revoke(crate::cmd::token_revoke::TokenRevokeArgs),
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// The Flavor of the new token (see `kubeflavor flavor list`).
    #[arg(long, value_name = "NAME", required_unless_present = "control_plane")]
    pub flavor: Option<FlavorName>,
    /// Mint a control-plane join token instead of a node token: group
    /// system:bootstrappers:kubeflavor:control-plane, the only tokens that may read the
    /// certificates `kubeflavor certs upload` stores. Default TTL 2h. With --flavor the
    /// joining control-plane node's kubelet gets its certificate by the same rules as any
    /// node (one name per use, no takeover) and the flavor's labels, e.g. a flavor with
    /// node-role.kubernetes.io/control-plane; without it the token only downloads the
    /// certificates and kubeflavor denies its kubelet's CSR.
    #[arg(long)]
    pub control_plane: bool,
    /// How long the token stays valid: 24h, 90m, 1h30m, or 0 for never. Default: the
    /// flavor's tokenDefaults.ttl, else 24h.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub ttl: Option<TokenTtl>,
    /// How many distinct node names the token may bind. Default: the flavor's
    /// tokenDefaults.maxNodes, else 1.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_nodes: Option<MaxNodes>,
    /// What to print: the token alone, or a description of it as JSON or YAML.
    #[arg(short, long, value_enum, default_value_t = TokenOutput::Token)]
    pub output: TokenOutput,
    /// Print the whole join line instead of the token:
    /// `kubeadm join <server> --token <token> --discovery-token-ca-cert-hash sha256:<pin>`
    /// (server and CA from kube-public/cluster-info, else from the kubeconfig).
    #[arg(long, conflicts_with = "output")]
    pub print_join_command: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenOutput {
    /// `<id>.<secret>` on one line.
    Token,
    Json,
    Yaml,
}

#[derive(Debug, Args)]
pub struct TokenListArgs {
    /// Only the tokens of this flavor.
    #[arg(long, value_name = "NAME")]
    pub flavor: Option<FlavorName>,
    /// Output format (default: a table).
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct TokenDeleteArgs {
    /// Token ids (`abcdef`) or whole tokens (`abcdef.0123456789abcdef`).
    #[arg(required = true, value_name = "ID")]
    pub tokens: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum FlavorCommand {
    /// Create a Flavor from flags.
    Create(FlavorCreateArgs),
    /// Create or update Flavors from a YAML/JSON file (`-` for stdin), server-side applied.
    Apply(FlavorApplyArgs),
    /// List Flavors.
    List(FlavorListArgs),
    /// Show one Flavor.
    Get(FlavorGetArgs),
    /// Delete a Flavor. Refused while live tokens or node bindings use it, unless --force.
    Delete(FlavorDeleteArgs),
}

#[derive(Debug, Args)]
pub struct FlavorCreateArgs {
    /// The Flavor's name (a DNS name of at most 63 characters; it becomes a label value).
    pub name: FlavorName,
    /// A node label `key=value`. The key must be one a kubelet cannot write, e.g.
    /// `kubeflavor.node-restriction.kubernetes.io/tier=gold` or `node-role.kubernetes.io/edge=`.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<FlavorLabel>,
    /// A node taint `key=value:Effect` or `key:Effect` (NoSchedule, PreferNoSchedule, NoExecute).
    #[arg(long = "taint", value_name = "KEY=VALUE:EFFECT")]
    pub taints: Vec<Taint>,
    /// Trust level 0..=100, published on nodes as the label
    /// kubeflavor.node-restriction.kubernetes.io/trust-level.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub trust_level: Option<TrustLevelArg>,
    /// Default TTL of this flavor's tokens (24h, 90m, 0 for never).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub ttl: Option<TokenTtl>,
    /// Default number of node names one token of this flavor may bind.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_nodes: Option<MaxNodes>,
}

#[derive(Debug, Args)]
pub struct FlavorApplyArgs {
    /// A file of Flavor objects (YAML documents separated by `---`, or JSON); `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct FlavorListArgs {
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct FlavorGetArgs {
    pub name: FlavorName,
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

#[derive(Debug, Args)]
pub struct FlavorDeleteArgs {
    pub name: FlavorName,
    /// Delete even if live tokens or node bindings still use the flavor (their nodes lose
    /// nothing now, but the controller can no longer restore their labels).
    #[arg(long)]
    pub force: bool,
}

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
    /// controller (to run `kubeflavor controller` elsewhere).
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
    /// --apply deletes kubeadm's kubeadm:node-autoapprove-bootstrap binding. Only then does
    /// a node name bind to exactly one token whatever other tokens exist; kubeadm's own
    /// tokens can no longer join nodes.
    #[arg(long)]
    pub sole_approver: bool,
    /// Leave out the grant that lets join tokens read Nodes (kubeflavor:get-nodes).
    /// kubeadm join needs it to check for an existing Node (it fails without it);
    /// kubeflavor join does not. Without it a token holder cannot read any Node's
    /// labels, so no flavor at all.
    #[arg(long)]
    pub no_token_node_read: bool,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn clap_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_lists_built_and_planned_commands() {
        let help = Cli::command().render_long_help().to_string();
        for built in ["token", "flavor", "install"] {
            assert!(help.contains(built), "{built} missing from --help");
        }
        for planned in ["controller", "node list", "token revoke", "join", "certs"] {
            assert!(
                help.contains(planned),
                "planned {planned} missing from --help"
            );
        }
    }

    #[test]
    fn unbuilt_commands_are_not_accepted() {
        for args in [["kubeflavor", "join"], ["kubeflavor", "certs"]] {
            assert!(
                Cli::try_parse_from(args).is_err(),
                "{args:?} must not pretend to work"
            );
        }
    }
}
