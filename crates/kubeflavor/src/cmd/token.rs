//! `kubeflavor token generate|create|list|delete`.
//!
//! A token is a `kube-system/bootstrap-token-<id>` Secret in kubeadm's exact layout, built
//! by kubeflavor-core: the same auth group and description for every flavor (P1), the
//! flavor and use count in the Secret's label and annotations. `token create` makes exactly
//! two API calls when all goes well: GET the Flavor, POST the Secret.

use std::collections::BTreeMap;
use std::io::Write;
use std::num::NonZeroU32;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kubeflavor_core::flavor::{DEFAULT_MAX_NODES, FlavorName, TokenTtl};
use kubeflavor_core::token::{BootstrapToken, TokenId};
use kubeflavor_core::token_record::{Expiration, SecretView, TokenRecord, TokenRecordError};
use kubeflavor_core::token_secret::{
    FLAVOR_TOKEN_LABEL, KEY_AUTH_EXTRA_GROUPS, KEY_DESCRIPTION, KEY_TOKEN_SECRET, NODE_GROUP,
    TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE, TokenSecretObject, flavored_token_secret,
    format_expiration, secret_name,
};
use serde::Serialize;
use zeroize::{Zeroize, Zeroizing};

use crate::cli::{TokenCreateArgs, TokenDeleteArgs, TokenListArgs, TokenOutput};
use crate::cluster::{Cluster, is_api_reason, is_not_found};
use crate::cmd::flavor::{created, unknown_flavor};
use crate::crd::{Flavor, rules_from_flavor};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::output::{self, Format, List, Table};

/// kubeadm's default token lifetime, used when neither `--ttl` nor the flavor sets one.
pub const DEFAULT_TTL: TokenTtl = TokenTtl::Seconds(24 * 3600);

/// How many fresh ids `token create` tries before giving up on collisions. With 36^6 ids a
/// second collision in a row means something else is wrong.
const CREATE_ATTEMPTS: usize = 5;

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
    secret: String,
}

fn expose_str<S: serde::Serializer>(value: &Zeroizing<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(value.as_str())
}

pub async fn create(cluster: &Cluster, args: &TokenCreateArgs, out: &mut dyn Write) -> Result<()> {
    let Some(flavor_name) = args.flavor.as_ref() else {
        return crate::cmd::certs::create_control_plane_token(cluster, args.ttl, args.output, out)
            .await;
    };
    let flavors: Api<Flavor> = Api::all(cluster.client.clone());
    let flavor = match flavors.get(flavor_name.as_str()).await {
        Ok(f) => f,
        Err(err) if is_not_found(&err) => return Err(unknown_flavor(cluster, flavor_name).await),
        Err(err) => return Err(cluster.error(&format!("get flavor {}", flavor_name), err)),
    };
    let (_, rules) = rules_from_flavor(&flavor).map_err(|e| {
        CliError::refused(
            format!("flavor {} is invalid: {e}", flavor_name),
            "fix it with 'kubeflavor flavor apply -f FILE' before minting tokens for it",
        )
    })?;
    let ttl = args.ttl.or(rules.token_ttl()).unwrap_or(DEFAULT_TTL);
    let max_nodes = args
        .max_nodes
        .map(|m| m.0)
        .or(rules.max_nodes())
        .unwrap_or(DEFAULT_MAX_NODES);
    let expiration = ttl.expiration(Timestamp::now());

    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), TOKEN_SECRET_NAMESPACE);
    for _ in 0..CREATE_ATTEMPTS {
        let token = BootstrapToken::generate().map_err(|e| CliError::failed(e, "retry"))?;
        let mut secret = to_secret(&flavored_token_secret(
            &token,
            flavor_name,
            expiration,
            max_nodes,
        ));
        let result = secrets.create(&PostParams::default(), &secret).await;
        zeroize_secret(&mut secret);
        match result {
            Ok(mut stored) => {
                zeroize_secret(&mut stored);
                return print_created(&token, flavor_name, expiration, max_nodes, args.output, out);
            }
            // Another token already has this id: draw a new one (kubeadm does the same).
            Err(err) if is_api_reason(&err, "AlreadyExists") => {
                tracing::info!(id = %token.id(), "token id already taken, generating another");
            }
            Err(err) => return Err(cluster.error("create the token Secret in kube-system", err)),
        }
    }
    Err(CliError::failed(
        format!("{CREATE_ATTEMPTS} freshly generated token ids were all taken"),
        "this should not happen with random ids; check the system's random number generator",
    ))
}

fn print_created(
    token: &BootstrapToken,
    flavor: &FlavorName,
    expiration: Option<Timestamp>,
    max_nodes: NonZeroU32,
    format: TokenOutput,
    out: &mut dyn Write,
) -> Result<()> {
    let view = CreatedToken {
        token: token.expose(),
        id: token.id().to_string(),
        flavor: flavor.to_string(),
        expiration: expiration.map(format_expiration),
        max_nodes: max_nodes.get(),
        usages: vec!["authentication", "signing"],
        groups: vec![NODE_GROUP],
        secret: format!("{TOKEN_SECRET_NAMESPACE}/{}", secret_name(token.id())),
    };
    let rendered: Zeroizing<String> = Zeroizing::new(match format {
        TokenOutput::Token => format!("{}\n", view.token.as_str()),
        TokenOutput::Json => serde_json::to_string_pretty(&view)
            .map(|s| s + "\n")
            .unwrap_or_default(),
        TokenOutput::Yaml => output::to_yaml(&view)?,
    });
    out.write_all(rendered.as_bytes())?;
    Ok(())
}

/// The Secret object the API takes (`data` is base64 on the wire; k8s-openapi encodes it).
fn to_secret(object: &TokenSecretObject) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(object.name.clone()),
            namespace: Some(object.namespace.to_string()),
            labels: Some(object.labels.clone()),
            annotations: Some(object.annotations.clone()),
            ..Default::default()
        },
        type_: Some(object.type_.to_string()),
        data: Some(
            object
                .string_data
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn zeroize_secret(secret: &mut Secret) {
    for value in secret.data.iter_mut().flat_map(|d| d.values_mut()) {
        value.0.zeroize();
    }
    for value in secret.string_data.iter_mut().flat_map(|d| d.values_mut()) {
        value.zeroize();
    }
}

/// One token as `token list` shows it: everything but the secret.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenInfo {
    pub id: String,
    /// `None` for a plain kubeadm token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
    pub bound_nodes: Vec<String>,
    /// RFC 3339, `never`, or the unparsable value as stored.
    pub expiration: String,
    #[serde(skip)]
    expires_at: Expiration,
    pub usages: Vec<&'static str>,
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the API server would accept the token now; otherwise why not.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<Timestamp>,
    /// Passes every check of the authenticator that does not depend on time.
    #[serde(skip)]
    standing_ok: bool,
}

impl TokenInfo {
    /// The API server authenticates this token right now.
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.standing_ok && self.expires_at.check(now).is_ok()
    }
}

pub type TokenSecretList = Vec<TokenInfo>;

/// Every bootstrap token Secret in kube-system (only those of `flavor` when given), read
/// without keeping any token secret.
pub async fn list_token_secrets(
    cluster: &Cluster,
    flavor: Option<&FlavorName>,
) -> Result<TokenSecretList> {
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), TOKEN_SECRET_NAMESPACE);
    let params = match flavor {
        Some(f) => ListParams::default().labels(&format!("{FLAVOR_TOKEN_LABEL}={f}")),
        None => ListParams::default(),
    };
    let list = secrets
        .list(&params)
        .await
        .map_err(|e| cluster.error("list the token Secrets in kube-system", e))?;
    let now = Timestamp::now();
    let mut tokens: Vec<TokenInfo> = list
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some(TOKEN_SECRET_TYPE))
        .filter_map(|mut s| {
            let info = token_info(&s, now);
            zeroize_secret(&mut s);
            info
        })
        .collect();
    tokens.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(tokens)
}

fn token_info(secret: &Secret, now: Timestamp) -> Option<TokenInfo> {
    let empty = BTreeMap::new();
    let name = secret.metadata.name.as_deref().unwrap_or("");
    let mut data: BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    let view = SecretView {
        namespace: secret
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(TOKEN_SECRET_NAMESPACE),
        name,
        type_: secret.type_.as_deref().unwrap_or(""),
        being_deleted: secret.metadata.deletion_timestamp.is_some(),
        data: &data,
        labels: secret.metadata.labels.as_ref().unwrap_or(&empty),
        annotations: secret.metadata.annotations.as_ref().unwrap_or(&empty),
    };
    let record = TokenRecord::from_secret(&view);
    let description = data.get(KEY_DESCRIPTION).cloned();
    let groups: Vec<String> = data
        .get(KEY_AUTH_EXTRA_GROUPS)
        .map(|g| {
            g.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let info = match record {
        Err(TokenRecordError::NotATokenSecret(_)) => None,
        Err(TokenRecordError::Metadata { problem, .. }) => Some(TokenInfo {
            id: name.trim_start_matches("bootstrap-token-").to_string(),
            flavor: view.labels.get(FLAVOR_TOKEN_LABEL).cloned(),
            max_nodes: None,
            bound_nodes: Vec::new(),
            expiration: String::new(),
            expires_at: Expiration::Never,
            usages: Vec::new(),
            groups,
            description,
            status: format!("invalid kubeflavor metadata: {problem}"),
            created: created(&secret.metadata),
            standing_ok: false,
        }),
        Ok(record) => {
            let auth = record.authentication_at(now);
            let mut usages = Vec::new();
            if data
                .get("usage-bootstrap-authentication")
                .map(String::as_str)
                == Some("true")
            {
                usages.push("authentication");
            }
            if record.usage_signing {
                usages.push("signing");
            }
            let meta = record.kubeflavor.as_ref();
            Some(TokenInfo {
                id: record.id.to_string(),
                flavor: meta.map(|m| m.flavor.to_string()),
                max_nodes: meta.map(|m| m.max_nodes.get()),
                bound_nodes: meta
                    .map(|m| m.bound_nodes.iter().map(|n| n.to_string()).collect())
                    .unwrap_or_default(),
                expiration: match &record.expiration {
                    Expiration::Never => "never".into(),
                    Expiration::At(at) => format_expiration(*at),
                    Expiration::Unparseable(s) => s.clone(),
                },
                expires_at: record.expiration.clone(),
                usages,
                groups,
                description,
                status: match &auth {
                    Ok(_) => "valid".into(),
                    Err(why) => why.to_string(),
                },
                created: created(&secret.metadata),
                standing_ok: auth.is_ok() || auth.as_ref().is_err_and(|e| e.is_expiry()),
            })
        }
    };
    if let Some(secret) = data.get_mut(KEY_TOKEN_SECRET) {
        secret.zeroize();
    }
    info
}

pub async fn list(cluster: &Cluster, args: &TokenListArgs, out: &mut dyn Write) -> Result<()> {
    let tokens = list_token_secrets(cluster, args.flavor.as_ref()).await?;
    let now = Timestamp::now();
    match args.output.unwrap_or_default() {
        Format::Json => output::write_json(out, &List::of(&tokens)),
        Format::Yaml => output::write_yaml(out, &List::of(&tokens)),
        Format::Name => {
            for t in &tokens {
                writeln!(out, "token/{}", t.id)?;
            }
            Ok(())
        }
        Format::Table | Format::Wide => {
            if tokens.is_empty() {
                writeln!(out, "No tokens found.")?;
                return Ok(());
            }
            let wide = args.output == Some(Format::Wide);
            let mut header = vec!["id", "flavor", "bound/max", "expires", "age"];
            if wide {
                header.extend(["expiration", "usages", "status", "bound nodes"]);
            }
            let mut table = Table::new(&header);
            for t in &tokens {
                let mut row = vec![
                    t.id.clone(),
                    t.flavor.clone().unwrap_or_else(|| "<none>".into()),
                    match t.max_nodes {
                        Some(max) => format!("{}/{max}", t.bound_nodes.len()),
                        None => "-".into(),
                    },
                    expires_in(&t.expires_at, now),
                    output::age(t.created, now),
                ];
                if wide {
                    row.push(if t.expiration.is_empty() {
                        "<unknown>".into()
                    } else {
                        t.expiration.clone()
                    });
                    row.push(if t.usages.is_empty() {
                        "<none>".into()
                    } else {
                        t.usages.join(",")
                    });
                    row.push(t.status.clone());
                    row.push(if t.bound_nodes.is_empty() {
                        "<none>".into()
                    } else {
                        t.bound_nodes.join(",")
                    });
                }
                table.row(row);
            }
            out.write_all(table.render().as_bytes())?;
            Ok(())
        }
    }
}

/// The EXPIRES column: time left (`23h`), `<never>`, `<expired>`, or `<invalid>` for an
/// expiration the API server cannot read (which it treats as expired).
fn expires_in(expiration: &Expiration, now: Timestamp) -> String {
    match expiration {
        Expiration::Never => "<never>".into(),
        Expiration::At(at) if *at > now => output::human_duration(at.duration_since(now)),
        Expiration::At(_) => "<expired>".into(),
        Expiration::Unparseable(_) => "<invalid>".into(),
    }
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
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), TOKEN_SECRET_NAMESPACE);
    let mut missing = Vec::new();
    for id in ids {
        match secrets
            .delete(&secret_name(&id), &DeleteParams::default())
            .await
        {
            Ok(_) => writeln!(out, "token {id} deleted")?,
            Err(err) if is_not_found(&err) => missing.push(id.to_string()),
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

    #[test]
    fn created_secret_is_kubeadms_layout_with_flavor_in_metadata() {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let flavor: FlavorName = "sweet".parse().unwrap();
        let at: Timestamp = "2026-12-01T04:11:50Z".parse().unwrap();
        let secret = to_secret(&flavored_token_secret(
            &token,
            &flavor,
            Some(at),
            NonZeroU32::new(2).unwrap(),
        ));
        let json = serde_json::to_value(&secret).unwrap();
        assert_eq!(json["metadata"]["name"], "bootstrap-token-abcdef");
        assert_eq!(json["metadata"]["namespace"], "kube-system");
        assert_eq!(json["type"], "bootstrap.kubernetes.io/token");
        assert_eq!(json["metadata"]["labels"][FLAVOR_TOKEN_LABEL], "sweet");
        // base64 of the plain strings, as in capture 44.
        assert_eq!(json["data"]["token-id"], "YWJjZGVm");
        assert_eq!(json["data"]["expiration"], "MjAyNi0xMi0wMVQwNDoxMTo1MFo=");
        assert_eq!(json["data"]["usage-bootstrap-authentication"], "dHJ1ZQ==");
        assert_eq!(json["data"]["usage-bootstrap-signing"], "dHJ1ZQ==");
        assert!(json["data"].get("auth-extra-groups").is_some());
    }

    #[test]
    fn zeroize_clears_every_data_value() {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let flavor: FlavorName = "sweet".parse().unwrap();
        let mut secret = to_secret(&flavored_token_secret(
            &token,
            &flavor,
            None,
            NonZeroU32::MIN,
        ));
        zeroize_secret(&mut secret);
        assert!(secret.data.unwrap().values().all(|v| v.0.is_empty()));
    }
}
