//! `kubeflavor node list|get|revoke`: the FlavorBindings, i.e. which node joined with which
//! token and flavor, and revocation. Revoking marks the binding (its `Revoked` condition);
//! the controller then removes the flavor labels, adds the NoExecute taint
//! `kubeflavor.io/revoked` and denies the node's renewals.

use std::io::Write;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use kube::ResourceExt;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::node_state::Revocation;

use crate::cluster::{Cluster, bindings};
use crate::crd::FlavorBinding;
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::output::{self, Format, Table};

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List bound nodes: NODE, FLAVOR, TOKEN, BOUND, STATUS, ISSUED-TO.
    List(NodeListArgs),
    /// Show one node's binding, with on whose behalf its token was minted and by whom.
    Get(NodeGetArgs),
    /// Revoke a node: the controller strips its flavor, taints it NoExecute
    /// `kubeflavor.io/revoked`, and denies its certificate renewals.
    Revoke(NodeRevokeArgs),
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

/// The table of `node list`, and of `node get` (`single`), which adds ISSUED-BY.
fn table(bindings: &[FlavorBinding], now: Timestamp, single: bool) -> String {
    let mut header = vec!["NODE", "FLAVOR", "TOKEN", "BOUND", "STATUS", "ISSUED-TO"];
    if single {
        header.push("ISSUED-BY");
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
        Format::Table | Format::Wide => {
            if bindings.is_empty() {
                writeln!(out, "No bound nodes.")?;
            } else {
                write!(out, "{}", table(bindings, Timestamp::now(), single))?;
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
    match bindings::api(&cluster.client).get_opt(name).await {
        Ok(Some(b)) => print(out, &[b], args.output, true),
        Ok(None) => Err(CliError::not_found(
            format!("node {name} has no FlavorBinding"),
            "see 'kubeflavor node list'",
        )),
        Err(e) => Err(cluster.error(&format!("get FlavorBinding {name}"), e)),
    }
}

pub async fn revoke(cluster: &Cluster, args: &NodeRevokeArgs, out: &mut dyn Write) -> Result<()> {
    let name = args.name.as_str();
    match bindings::revoke(&cluster.client, name, &Revocation::ByAdmin).await {
        Ok(true) => {
            writeln!(out, "node {name} revoked")?;
            Ok(())
        }
        Ok(false) => {
            writeln!(out, "node {name} was already revoked")?;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => Err(CliError::new(
            ExitCode::NotFound,
            format!("node {name} has no FlavorBinding"),
            "see 'kubeflavor node list'",
        )),
        Err(e) => Err(cluster.error(&format!("revoke node {name}"), e)),
    }
}
