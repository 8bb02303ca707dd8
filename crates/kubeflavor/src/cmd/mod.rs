//! The commands. Each takes its parsed arguments, a cluster connection when it needs one,
//! and the writer for its output.

pub mod certs;
pub mod controller;
pub mod flavor;
pub mod install;
pub mod join;
pub mod node;
pub mod token;
pub mod token_revoke;

use std::io::Write;

use crate::cli::{Cli, Command, FlavorCommand, GlobalArgs, TokenCommand};
use crate::cluster::{Cluster, ClusterArgs};
use crate::error::Result;

/// Run a parsed command line.
pub async fn execute(cli: Cli, out: &mut dyn Write) -> Result<()> {
    let global = cli.global;
    match cli.command {
        Command::Token(TokenCommand::Generate) => token::generate(out),
        Command::Token(TokenCommand::Create(args)) => {
            token::create(&connect(&global).await?, &args, out).await
        }
        Command::Token(TokenCommand::List(args)) => {
            token::list(&connect(&global).await?, &args, out).await
        }
        Command::Token(TokenCommand::Delete(args)) => {
            token::delete(&connect(&global).await?, &args, out).await
        }
        Command::Token(TokenCommand::Revoke(args)) => {
            token_revoke::revoke(&connect(&global).await?, &args, out).await
        }
        Command::Controller(args) => controller::run(&connect(&global).await?, &args).await,
        Command::Node(node::NodeCommand::List(args)) => {
            node::list(&connect(&global).await?, &args, out).await
        }
        Command::Node(node::NodeCommand::Get(args)) => {
            node::get(&connect(&global).await?, &args, out).await
        }
        Command::Node(node::NodeCommand::Revoke(args)) => {
            node::revoke(&connect(&global).await?, &args, out).await
        }
        Command::Flavor(FlavorCommand::Create(args)) => {
            flavor::create(&connect(&global).await?, &args, out).await
        }
        Command::Flavor(FlavorCommand::Apply(args)) => {
            flavor::apply(&connect(&global).await?, &args, out).await
        }
        Command::Flavor(FlavorCommand::List(args)) => {
            flavor::list(&connect(&global).await?, &args, out).await
        }
        Command::Flavor(FlavorCommand::Get(args)) => {
            flavor::get(&connect(&global).await?, &args, out).await
        }
        Command::Flavor(FlavorCommand::Delete(args)) => {
            flavor::delete(&connect(&global).await?, &args, out).await
        }
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

async fn connect(global: &GlobalArgs) -> Result<Cluster> {
    Cluster::connect(&ClusterArgs {
        kubeconfig: global.kubeconfig.clone(),
        context: global.context.clone(),
    })
    .await
}
