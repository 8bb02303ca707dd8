//! `kubeflavor token create --control-plane`: the join tokens that may read the
//! certificates `certs upload` stores (P5, certificate hand-off).

use std::io::Write;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kubeflavor_core::flavor::TokenTtl;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token_meta::FlavorTokenMeta;
use kubeflavor_core::token_secret::{
    AuthGroup, CONTROL_PLANE_GROUP, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE, TokenSecretData,
    format_expiration, secret_name,
};
use zeroize::Zeroize;

use super::{TokenCreateArgs, TokenOutput, custody, flavor_rules, max_nodes, within_flavor_limits};
use crate::cluster::{Cluster, token_secrets};
use crate::error::CliError;
use crate::minting::{CREATE_ATTEMPTS, JoinTarget, join_command_line, join_target};

/// Default lifetime of a control-plane join token: the lifetime of the kubeadm-certs
/// Secret it exists to read (`certs upload --ttl`).
pub const CONTROL_PLANE_TOKEN_TTL: TokenTtl = TokenTtl::Seconds(2 * 3600);
const CONTROL_PLANE_TOKEN_DESCRIPTION: &str = "kubeflavor control-plane join token";

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
        true => Some(join_target(cluster).await?),
        false => None,
    };
    // The flavor (if any) first: no token for a flavor that does not exist.
    // The custody is recorded with the flavor's metadata, so only on flavored tokens
    // (`--issued-to` needs `--flavor`).
    let ttl = args.ttl.unwrap_or(CONTROL_PLANE_TOKEN_TTL);
    let meta = match &args.flavor {
        Some(flavor) => {
            let rules = flavor_rules(cluster, flavor).await?;
            let max_nodes = max_nodes(args, &rules);
            within_flavor_limits(args, flavor, &rules, ttl, max_nodes)?;
            Some(
                FlavorTokenMeta::new(flavor.clone(), max_nodes)
                    .with_custody(custody(cluster, args).await),
            )
        }
        None => None,
    };
    let expiration = ttl.expiration(Timestamp::now());
    let token = store(cluster, expiration, meta.as_ref()).await?;
    match &join_target {
        Some(target) => print_join_line(target, &token, out),
        None => print_token(&token, expiration, meta.as_ref(), args.output, out),
    }
}

/// Stores the token Secret under a fresh id.
async fn store(
    cluster: &Cluster,
    expiration: Option<Timestamp>,
    meta: Option<&FlavorTokenMeta>,
) -> Result<BootstrapToken, CliError> {
    let group: AuthGroup = CONTROL_PLANE_GROUP
        .parse()
        .map_err(|e| CliError::failed(e, "report this bug"))?;
    let draw = async || -> Result<Option<(BootstrapToken, Secret)>, CliError> {
        let token = BootstrapToken::generate().map_err(|e| CliError::failed(e, "retry"))?;
        let secret = token_secret(&token, expiration, group.clone(), meta);
        Ok(Some((token, secret)))
    };
    let created =
        token_secrets::create_with_fresh_id(&cluster.client, CREATE_ATTEMPTS, draw, |e| {
            cluster.error("create the token Secret in kube-system", e)
        })
        .await?;
    created.map(|c| c.token).ok_or_else(|| {
        CliError::failed(
            format!("{CREATE_ATTEMPTS} freshly generated token ids were all taken"),
            "check the system's random number generator",
        )
    })
}

/// kubeadm's token layout with both usages and the control-plane group, plus the flavor's
/// metadata when there is one.
fn token_secret(
    token: &BootstrapToken,
    expiration: Option<Timestamp>,
    group: AuthGroup,
    meta: Option<&FlavorTokenMeta>,
) -> Secret {
    let data = TokenSecretData {
        token: token.clone(),
        expiration,
        usage_authentication: true,
        usage_signing: true,
        extra_groups: vec![group],
        description: Some(CONTROL_PLANE_TOKEN_DESCRIPTION.to_owned()),
    };
    let mut string_data = data.to_string_data();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(token.id())),
            namespace: Some(TOKEN_SECRET_NAMESPACE.to_owned()),
            labels: meta.map(FlavorTokenMeta::labels),
            annotations: meta.map(FlavorTokenMeta::annotations),
            ..ObjectMeta::default()
        },
        type_: Some(TOKEN_SECRET_TYPE.to_owned()),
        data: Some(
            string_data
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    string_data.values_mut().for_each(Zeroize::zeroize);
    secret
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
