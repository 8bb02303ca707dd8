//! `kubeflavor token generate|create|list|delete`.
//!
//! A token is a `kube-system/bootstrap-token-<id>` Secret in kubeadm's exact layout, built
//! by kubeflavor-core: the same auth group and description for every flavor (P1, hidden flavor),
//! the flavor, use count and custody in the Secret's label and annotations. `token create`
//! makes exactly four API calls when all goes well: GET the Flavor, POST a SelfSubjectReview
//! (who is minting: the token's issued-by), LIST the bindings still naming the new id (none),
//! POST the Secret.

use std::collections::BTreeMap;
use std::io::Write;
use std::num::NonZeroU32;

use clap::{Args, Subcommand, ValueEnum};
use jiff::Timestamp;
use kubeflavor_cluster::token_secrets;
use kubeflavor_cluster::whoami::caller_name;
use kubeflavor_core::flavor::input_labels::InputLabels;
use kubeflavor_core::flavor::{FlavorName, FlavorRules, TokenTtl};
use kubeflavor_core::token::meta::{Custody, IssuedTo};
use kubeflavor_core::token::secret::{
    NODE_GROUP, TOKEN_SECRET_NAMESPACE, format_expiration, secret_name,
};
use kubeflavor_core::token::{BootstrapToken, TokenId};
use serde::Serialize;
use zeroize::Zeroizing;

use crate::cli::{GlobalArgs, KeyValue, MaxNodes};
use crate::cmd::unknown_flavor;
use crate::connect::Cluster;
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::minting::{
    MintError, Minted, NodeTokenSpec, join_target, mint_node_token, stored_flavor_rules,
};
use crate::output::{self, Format};

mod control_plane;
mod list;
mod print;
mod revoke;

pub use control_plane::create_control_plane_token;
pub use list::{TokenInfo, list};
pub use print::print_join_command;
pub use revoke::{TokenRevokeArgs, revoke};

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
    Revoke(TokenRevokeArgs),
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
    /// On whose behalf the token is minted, as free text (e.g. acme-corp/alice): 1 to 256
    /// characters of visible text (no control or format characters such as the
    /// text-direction override U+202E or zero-width spaces, no line separators), no
    /// whitespace at either end. Recorded on the
    /// token Secret and on every FlavorBinding made with the token, with the minting user
    /// as issued-by; only admins can read either.
    #[arg(long, value_name = "TEXT", requires = "flavor")]
    pub issued_to: Option<IssuedTo>,
    /// Mint even beyond the flavor's tokenLimits (a longer TTL, more nodes, a token that
    /// never expires). Without it `token create` holds to the same limits as the
    /// join-token API and refuses more (exit 4), naming the limit. A token beyond the
    /// limits carries the annotation kubeflavor.io/limits-override (who overrode, when),
    /// without which the controller denies its CSRs.
    #[arg(long, alias = "override-limits")]
    pub override_flavor_limits: bool,
    /// An input label for the nodes that join with the token, `key=value` (repeat for
    /// more): what the node's administrator says, e.g. site=berlin. Only keys and values
    /// the flavor's spec.inputLabels allows are taken; the controller puts them on the Node
    /// as input.kubeflavor.node-restriction.kubernetes.io/<key>. Like the flavor, they are
    /// kept in the token Secret's metadata, out of the holder's sight.
    #[arg(
        long = "node-label",
        value_name = "KEY=VALUE",
        requires = "flavor",
        conflicts_with = "control_plane"
    )]
    pub node_labels: Vec<KeyValue>,
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

/// Runs one `token` command; only `generate` works without a cluster.
pub async fn execute(
    command: TokenCommand,
    global: &GlobalArgs,
    out: &mut dyn Write,
) -> Result<()> {
    match command {
        TokenCommand::Generate => generate(out),
        TokenCommand::Create(args) => create(&super::connect(global).await?, &args, out).await,
        TokenCommand::List(args) => list(&super::connect(global).await?, &args, out).await,
        TokenCommand::Delete(args) => delete(&super::connect(global).await?, &args, out).await,
        TokenCommand::Revoke(args) => revoke(&super::connect(global).await?, &args, out).await,
    }
}

pub fn generate(out: &mut dyn Write) -> Result<()> {
    let token = BootstrapToken::generate().map_err(|e| CliError::failed(e, "retry"))?;
    writeln!(out, "{}", token.expose().as_str())?;
    Ok(())
}

/// What `token create -o json|yaml` prints. It holds the token: zeroized when dropped.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CreatedToken {
    #[serde(serialize_with = "expose_str")]
    token: Zeroizing<String>,
    id: String,
    flavor: String,
    /// RFC 3339; absent when the token never expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    expiration: Option<String>,
    max_nodes: u32,
    usages: Vec<&'static str>,
    groups: Vec<&'static str>,
    /// `<namespace>/<name>` of the token Secret.
    secret_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    issued_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    issued_by: Option<String>,
    /// The input labels (keys without their prefix).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    input_labels: BTreeMap<String, String>,
}

fn expose_str<S: serde::Serializer>(value: &Zeroizing<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(value.as_str())
}

pub async fn create(cluster: &Cluster, args: &TokenCreateArgs, out: &mut dyn Write) -> Result<()> {
    if args.control_plane {
        return create_control_plane_token(cluster, args, out).await;
    }
    let Some(flavor_name) = args.flavor.as_ref() else {
        return Err(CliError::new(
            ExitCode::Usage,
            "token create needs --flavor (or --control-plane)",
            "name a flavor from 'kubeflavor flavor list'",
        ));
    };
    let rules = flavor_rules(cluster, flavor_name).await?;
    let (ttl, max_nodes) = rules.granted(args.ttl, args.max_nodes.map(|m| m.0));
    let overridden = within_flavor_limits(args, flavor_name, &rules, ttl, max_nodes)?;
    let input_labels = node_labels(args, flavor_name, &rules)?;
    let expiration = ttl.expiration(Timestamp::now());

    // --print-join-command: resolved before the token exists, so a cluster whose server or
    // CA cannot be found never gets a token nobody will see.
    let join_target = match args.print_join_command {
        true => Some(join_target(cluster).await.map_err(mint_failed(cluster))?),
        false => None,
    };
    let custody = custody(cluster, args).await;
    let spec = NodeTokenSpec {
        flavor: flavor_name.clone(),
        max_nodes,
        expiration,
        limits_override: overridden.then(|| limits_override(&custody, Timestamp::now())),
        custody,
        input_labels,
    };
    let minted = mint_node_token(cluster, spec)
        .await
        .map_err(mint_failed(cluster))?;
    if let Some(target) = &join_target {
        return print_join_command(target, &minted.token, out);
    }
    print_created(&minted, args.output, out)
}

/// The custody `token create` records: `--issued-to`, and the caller's own user name as
/// issued-by.
pub async fn custody(cluster: &Cluster, args: &TokenCreateArgs) -> Custody {
    Custody {
        issued_to: args.issued_to.clone(),
        issued_by: caller_name(&cluster.client).await,
        requested_by: None,
        identity: None,
    }
}

/// The rules of the Flavor a new token is to carry: one GET, and errors that say what to
/// do when it is missing or invalid.
pub async fn flavor_rules(cluster: &Cluster, flavor_name: &FlavorName) -> Result<FlavorRules> {
    match stored_flavor_rules(cluster, flavor_name)
        .await
        .map_err(mint_failed(cluster))?
    {
        Some(rules) => Ok(rules),
        None => Err(unknown_flavor(cluster, flavor_name).await),
    }
}

/// Refuses a token beyond the flavor's limits (kubeflavor-core's check, as the join-token
/// API applies it), unless `--override-flavor-limits`; true when the token is beyond them
/// by the admin's override, which the token must then record.
pub fn within_flavor_limits(
    args: &TokenCreateArgs,
    flavor: &FlavorName,
    rules: &FlavorRules,
    ttl: TokenTtl,
    max_nodes: NonZeroU32,
) -> Result<bool> {
    let exceeded = rules.effective_token_limits().check(ttl, max_nodes);
    if exceeded.is_empty() {
        return Ok(false);
    }
    if args.override_flavor_limits {
        return Ok(true);
    }
    let problems: Vec<String> = exceeded.iter().map(ToString::to_string).collect();
    Err(CliError::refused(
        format!(
            "flavor {flavor} does not allow this token: {}",
            problems.join("; ")
        ),
        "ask for less, raise the flavor's tokenLimits (kubeflavor flavor apply), or pass --override-flavor-limits",
    ))
}

/// What `kubeflavor.io/limits-override` records: who overrode the Flavor's limits (the
/// caller, as the SelfSubjectReview named them; `unknown` when it did not answer) and when.
pub fn limits_override(custody: &Custody, at: Timestamp) -> String {
    serde_json::json!({
        "by": custody.issued_by.as_deref().unwrap_or("unknown"),
        "at": format_expiration(at),
    })
    .to_string()
}

/// `--node-label`s as the flavor allows them; refused (exit 4) naming each key the flavor
/// does not take, with one message for an unknown key and a disallowed value (as the
/// join-token API answers). No override: the Flavor alone says what input reaches a Node.
fn node_labels(
    args: &TokenCreateArgs,
    flavor: &FlavorName,
    rules: &FlavorRules,
) -> Result<InputLabels> {
    let asked = args
        .node_labels
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect::<BTreeMap<_, _>>();
    if asked.len() < args.node_labels.len() {
        return Err(CliError::new(
            ExitCode::Usage,
            "--node-label names a key twice",
            "give each key once",
        ));
    }
    rules.input_labels().admit(&asked).map_err(|refusal| {
        CliError::refused(
            format!("flavor {flavor}: {refusal}"),
            "see the flavor's spec.inputLabels (kubeflavor flavor get NAME -o yaml) for the keys and values it takes",
        )
    })
}

/// A minting error as `token create` reports it: an API error names the server and the
/// kubeconfig, an invalid flavor is refused (the administrator must fix it first).
pub fn mint_failed(cluster: &Cluster) -> impl Fn(MintError) -> CliError + '_ {
    move |err| match err {
        MintError::Api { doing, source } => cluster.error(&doing, source),
        MintError::InvalidFlavor { .. } => CliError::refused(&err, err.fix()),
        _ => CliError::failed(&err, err.fix()),
    }
}

fn print_created(minted: &Minted, format: TokenOutput, out: &mut dyn Write) -> Result<()> {
    let (token, spec) = (&minted.token, &minted.spec);
    let view = CreatedToken {
        token: token.expose(),
        id: token.id().to_string(),
        flavor: spec.flavor.to_string(),
        expiration: spec.expiration.map(format_expiration),
        max_nodes: spec.max_nodes.get(),
        usages: vec!["authentication", "signing"],
        groups: vec![NODE_GROUP],
        secret_name: format!("{TOKEN_SECRET_NAMESPACE}/{}", secret_name(token.id())),
        issued_to: spec.custody.issued_to.as_ref().map(|t| t.to_string()),
        issued_by: spec.custody.issued_by.clone(),
        input_labels: spec.input_labels.to_map(),
    };
    let rendered: Zeroizing<String> = Zeroizing::new(match format {
        TokenOutput::Token => format!("{}\n", view.token.as_str()),
        TokenOutput::Json => serde_json::to_string_pretty(&view)
            .map(|s| s + "\n")
            .map_err(|e| {
                CliError::failed(format!("cannot render JSON: {e}"), "report this as a bug")
            })?,
        TokenOutput::Yaml => output::to_yaml(&view)?,
    });
    out.write_all(rendered.as_bytes())?;
    Ok(())
}

/// A token id, or a whole token from which only the id is kept.
fn parse_token_ref(text: &str) -> Result<TokenId> {
    let parsed = if text.contains('.') {
        text.parse::<BootstrapToken>().map(|t| t.id().clone())
    } else {
        text.parse::<TokenId>()
    };
    // The error never repeats the input: it may hold a token secret.
    parsed.map_err(|e| {
        CliError::refused(
            format!("not a token id or token: {e}"),
            "pass ids like abcdef (see 'kubeflavor token list')",
        )
    })
}

pub async fn delete(cluster: &Cluster, args: &TokenDeleteArgs, out: &mut dyn Write) -> Result<()> {
    // All ids are checked before the first deletion.
    let ids = args
        .tokens
        .iter()
        .map(|t| parse_token_ref(t))
        .collect::<Result<Vec<_>>>()?;
    let mut missing = Vec::new();
    for id in ids {
        match token_secrets::delete(&cluster.client, &id).await {
            Ok(true) => writeln!(out, "token {id} deleted")?,
            Ok(false) => missing.push(id.to_string()),
            Err(err) => return Err(cluster.error(&format!("delete token {id}"), err)),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(
            ExitCode::NotFound,
            format!("no such token: {}", missing.join(", ")),
            "see 'kubeflavor token list'",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ref_accepts_ids_and_whole_tokens() {
        assert_eq!(parse_token_ref("abcdef").unwrap().as_str(), "abcdef");
        assert_eq!(
            parse_token_ref("abcdef.0123456789abcdef").unwrap().as_str(),
            "abcdef"
        );
    }

    #[test]
    fn token_ref_error_never_repeats_the_input() {
        let bad = "abcdef.0123456789ABCDEF";
        let err = parse_token_ref(bad).unwrap_err();
        assert_eq!(err.code, ExitCode::Refused);
        assert!(!err.message.contains("0123456789"), "{err}");
    }
}
