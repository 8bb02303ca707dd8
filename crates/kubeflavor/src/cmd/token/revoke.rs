//! `kubeflavor token revoke ID [--nodes]`: delete the token Secret (the token stops
//! authenticating at once: the API server's bootstrap token authenticator looks the Secret
//! up on every request) and, with `--nodes`, revoke every node bound to it: every step of
//! `node revoke` (list, binding, taints, pods; the token is spent already).

use std::io::Write;

use clap::Args;
use kubeflavor_cluster::{bindings, token_secrets};
use kubeflavor_core::node::state::Revocation;
use kubeflavor_core::token::TokenId;

use crate::connect::Cluster;
use crate::error::{CliError, Result};

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token id (the 6 characters before the dot).
    pub id: TokenId,
    /// Also revoke every node bound to this token.
    #[arg(long)]
    pub nodes: bool,
}

pub async fn revoke(cluster: &Cluster, args: &TokenRevokeArgs, out: &mut dyn Write) -> Result<()> {
    let id = &args.id;
    let deleted = token_secrets::delete(&cluster.client, id)
        .await
        .map_err(|e| cluster.error(&format!("delete token {id}"), e))?;
    if deleted {
        writeln!(out, "token {id} revoked (its Secret is deleted)")?;
    } else {
        writeln!(out, "token {id} no longer exists")?;
    }
    if !args.nodes {
        return Ok(());
    }
    let bound = bindings::names_of_token(&cluster.client, id, None)
        .await
        .map_err(|e| cluster.error("list FlavorBindings", e))?;
    let why = Revocation::TokenRevoked(id.clone());
    for name in &bound {
        crate::cmd::revoke_steps::run(cluster, name, &why, out).await?;
        writeln!(out, "node {name} revoked")?;
    }
    if bound.is_empty() && !deleted {
        return Err(CliError::not_found(
            format!("no token {id} and no node bound to it"),
            "see 'kubeflavor token list' and 'kubeflavor node list'",
        ));
    }
    Ok(())
}
