//! `kubeflavor token create --control-plane`: the join tokens that may read the
//! certificates `certs upload` stores (P5, certificate hand-off).

use std::io::Write;

use jiff::Timestamp;
use kubeflavor_core::flavor::ttl::CONTROL_PLANE_TOKEN_TTL;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::meta::FlavorTokenMeta;
use kubeflavor_core::token::secret::{CONTROL_PLANE_GROUP, format_expiration};

use super::{
    TokenCreateArgs, TokenOutput, custody, flavor_rules, limits_override, mint_failed,
    within_flavor_limits,
};
use crate::connect::Cluster;
use crate::error::CliError;
use crate::minting::{JoinTarget, join_command_line, join_target, mint_control_plane};

/// What `token create --control-plane -o json|yaml` prints (it holds the token).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ControlPlaneToken<'a> {
    token: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expiration: Option<String>,
    usages: [&'static str; 2],
    groups: [&'static str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    flavor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_nodes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    issued_to: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    issued_by: Option<&'a str>,
}

/// `token create --control-plane`: a bootstrap token in the one group allowed to read
/// kube-system/kubeadm-certs (P5, certificate hand-off), with kubeadm's usages so `join
/// --control-plane` can run discovery with it. With `--flavor` it also carries the flavor's
/// metadata, as a node token does, so the controller decides its kubelet's CSR by the same binding
/// rules.
pub async fn create_control_plane_token(
    cluster: &Cluster,
    args: &TokenCreateArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    // Resolved before the token exists, as for node tokens: no token nobody will see.
    let join_target = match args.print_join_command {
        true => Some(join_target(cluster).await.map_err(mint_failed(cluster))?),
        false => None,
    };
    // The flavor (if any) first: no token for a flavor that does not exist.
    // The custody is recorded with the flavor's metadata, so only on flavored tokens
    // (`--issued-to` needs `--flavor`).
    let ttl = args.ttl.unwrap_or(CONTROL_PLANE_TOKEN_TTL);
    let meta = match &args.flavor {
        Some(flavor) => {
            let rules = flavor_rules(cluster, flavor).await?;
            let (_, max_nodes) = rules.granted(None, args.max_nodes.map(|m| m.0));
            let overridden = within_flavor_limits(args, flavor, &rules, ttl, max_nodes)?;
            let custody = custody(cluster, args).await;
            let meta = FlavorTokenMeta::new(flavor.clone(), max_nodes);
            Some(
                match overridden {
                    true => meta.with_limits_override(limits_override(&custody, Timestamp::now())),
                    false => meta,
                }
                .with_custody(custody),
            )
        }
        None => None,
    };
    let expiration = ttl.expiration(Timestamp::now());
    let token = mint_control_plane(cluster, expiration, meta.as_ref())
        .await
        .map_err(mint_failed(cluster))?;
    match &join_target {
        Some(target) => print_join_line(target, &token, out),
        None => print_token(&token, expiration, meta.as_ref(), args.output, out),
    }
}

/// The control-plane join line, with the certificate key in a file: on a command line
/// every user of the node would read it in the process list, and kubeadm has no flag for a
/// file, so the line is kubeflavor's (with kubeadm: `kubeadm join ... --control-plane
/// --certificate-key KEY`).
fn print_join_line(
    target: &JoinTarget,
    token: &BootstrapToken,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let line = join_command_line(target, token);
    let args = line
        .trim_end()
        .strip_prefix("kubeadm join ")
        .unwrap_or(line.trim_end());
    let line = zeroize::Zeroizing::new(format!(
        "kubeflavor join {args} --control-plane --certificate-key-file <file holding the key printed by 'kubeflavor certs upload'>"
    ));
    writeln!(out, "{}", line.as_str())?;
    Ok(())
}

/// The token alone, or its description as JSON or YAML (with the token).
fn print_token(
    token: &BootstrapToken,
    expiration: Option<Timestamp>,
    meta: Option<&FlavorTokenMeta>,
    output: TokenOutput,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let exposed = token.expose();
    let view = ControlPlaneToken {
        token: exposed.as_str(),
        id: token.id().as_str(),
        expiration: expiration.map(format_expiration),
        usages: ["authentication", "signing"],
        groups: [CONTROL_PLANE_GROUP],
        flavor: meta.map(|m| m.flavor.as_str()),
        max_nodes: meta.map(|m| m.max_nodes.get()),
        issued_to: meta.and_then(|m| m.custody.issued_to.as_ref().map(|t| t.as_str())),
        issued_by: meta.and_then(|m| m.custody.issued_by.as_deref()),
    };
    let text = match output {
        TokenOutput::Token => exposed.to_string(),
        TokenOutput::Json => serde_json::to_string_pretty(&view)
            .map_err(|e| CliError::failed(e, "report this bug"))?,
        TokenOutput::Yaml => {
            serde_saphyr::to_string(&view).map_err(|e| CliError::failed(e, "report this bug"))?
        }
    };
    writeln!(out, "{}", text.trim_end())?;
    Ok(())
}
