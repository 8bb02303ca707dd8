//! The command tree and its commands, kubeadm-style: each command (in its own module, with
//! its flags) parses, connects and prints, and calls the libraries (`certs`, `join`,
//! `cluster`) that know nothing of the command line.

pub mod certs;
pub mod controller;
pub mod flavor;
pub mod install;
pub mod join;
pub mod node;
pub mod revoke_steps;
pub mod roster;
pub mod serve;
pub mod token;

use std::io::Write;

use clap::{Parser, Subcommand};

use kubeflavor_cluster::flavors;
use kubeflavor_core::flavor::FlavorName;

use crate::cli::GlobalArgs;
use crate::connect::Cluster;
use crate::error::{CliError, Result};

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mint, list and delete flavored bootstrap tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Define what a flavor means for a node (Flavor objects).
    #[command(subcommand)]
    Flavor(flavor::FlavorCommand),
    /// Print (or apply) the CRDs, RBAC and controller Deployment kubeflavor needs.
    Install(install::InstallArgs),
    /// Join this machine as a node, as `kubeadm join` does: discovery from cluster-info
    /// (token signature and CA pin), bootstrap-kubelet.conf, a kubelet configuration file
    /// and the kubelet flags to use them, and with --tls-bootstrap the kubelet's
    /// certificate request itself. Files and exit codes are listed in `join --help`.
    Join(join::JoinArgs),
    /// Run the controller: approve or deny kubelet CSRs of kubeflavor tokens, bind nodes
    /// to tokens, and keep each flavor's labels and taints on its Nodes.
    Controller(controller::ControllerArgs),
    /// List, show and revoke bound nodes (FlavorBindings).
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// The owner's list of node administrators (a Roster): which flavor each gets when
    /// they sign in to the join-token API.
    #[command(subcommand)]
    Roster(roster::RosterCommand),
    /// Serve the join-token API: an HTTPS endpoint where a portal, authenticated by its
    /// Kubernetes token and authorized per flavor, mints join tokens without access to
    /// Secrets.
    Serve(serve::ServeArgs),
    /// Move control-plane CA material between machines, kubeadm-compatible: certificate
    /// key, CA set generation, encrypted upload to kube-system/kubeadm-certs, download,
    /// inspection.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
}

/// Run a parsed command line.
pub async fn execute(cli: Cli, out: &mut dyn Write) -> Result<()> {
    let global = cli.global;
    match cli.command {
        Command::Token(command) => token::execute(command, &global, out).await,
        Command::Controller(args) => controller::run(&connect(&global).await?, &args).await,
        Command::Serve(args) => serve::run(connect(&global).await?, &args).await,
        Command::Node(node::NodeCommand::List(args)) => {
            node::list(&connect(&global).await?, &args, out).await
        }
        Command::Node(node::NodeCommand::Get(args)) => {
            node::get(&connect(&global).await?, &args, out).await
        }
        Command::Node(node::NodeCommand::Revoke(args)) => {
            node::revoke(&connect(&global).await?, &args, out).await
        }
        Command::Node(node::NodeCommand::Forget(args)) => {
            node::forget(&connect(&global).await?, &args, out).await
        }
        Command::Node(node::NodeCommand::Report(args)) => node::report(&global, &args, out).await,
        Command::Flavor(command) => flavor::execute(command, &connect(&global).await?, out).await,
        Command::Roster(command) => roster::execute(command, &connect(&global).await?, out).await,
        Command::Certs(command) => certs::execute(command, &global, out).await,
        Command::Install(args) => {
            if args.apply {
                install::apply(&connect(&global).await?, &args, out).await
            } else {
                install::print(&args, out)
            }
        }
        Command::Join(args) => join::run(&args, out).await,
    }
}

/// The admin connection of the commands that talk to a cluster.
pub(crate) async fn connect(global: &GlobalArgs) -> Result<Cluster> {
    Cluster::connect(&global.cluster()).await
}

/// The error for a flavor that does not exist, listing those that do.
pub async fn unknown_flavor(cluster: &Cluster, name: &FlavorName) -> CliError {
    let existing = match flavors::names(&cluster.client).await {
        Ok(names) => {
            if names.is_empty() {
                "there are none yet: create one with 'kubeflavor flavor create NAME'".to_string()
            } else {
                format!("existing flavors: {}", names.join(", "))
            }
        }
        Err(err) => return cluster.error(&format!("list flavors (looking for {name})"), err),
    };
    CliError::not_found(format!("flavor {name} does not exist"), existing)
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
