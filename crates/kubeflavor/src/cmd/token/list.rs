//! `kubeflavor token list`. Token Secrets are read through [`token_secrets`], which keeps
//! no token secret; each becomes a [`TokenInfo`].

use std::io::Write;

use jiff::Timestamp;
use kubeflavor_cluster::token_secrets::{self, StoredToken};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::token::record::{Expiration, TokenRecord, TokenRecordError};
use kubeflavor_core::token::secret::{FLAVOR_TOKEN_LABEL, format_expiration};
use serde::Serialize;

use super::TokenListArgs;
use crate::connect::Cluster;
use crate::error::Result;
use crate::output::created;
use crate::output::{self, Format, List, Table};

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
    /// On whose behalf the token was minted (`token create --issued-to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_to: Option<String>,
    /// The user name that minted the token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_by: Option<String>,
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

/// Every bootstrap token Secret in kube-system (only those of `flavor` when given), read
/// without keeping any token secret, sorted by id.
pub async fn list_tokens(cluster: &Cluster, flavor: Option<&FlavorName>) -> Result<Vec<TokenInfo>> {
    let stored = token_secrets::list(&cluster.client, flavor)
        .await
        .map_err(|e| cluster.error("list the token Secrets in kube-system", e))?;
    let now = Timestamp::now();
    let mut tokens: Vec<TokenInfo> = stored
        .into_iter()
        .filter_map(|t| token_info(t, now))
        .collect();
    tokens.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(tokens)
}

/// One token's line: `None` for a Secret not named like a token Secret.
fn token_info(stored: StoredToken, now: Timestamp) -> Option<TokenInfo> {
    match &stored.record {
        Err(TokenRecordError::NotATokenSecret(_)) => None,
        Err(TokenRecordError::Metadata { problem, .. }) => {
            Some(invalid_metadata(&stored, &problem.to_string()))
        }
        Ok(record) => Some(from_record(record, &stored, now)),
    }
}

/// A token whose kubeflavor metadata is malformed: listed with the problem, never live.
fn invalid_metadata(stored: &StoredToken, problem: &str) -> TokenInfo {
    let name = stored.metadata.name.as_deref().unwrap_or("");
    TokenInfo {
        id: token_secrets::id_of(name).unwrap_or(name).to_string(),
        flavor: stored
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(FLAVOR_TOKEN_LABEL).cloned()),
        max_nodes: None,
        bound_nodes: Vec::new(),
        expiration: String::new(),
        expires_at: Expiration::Never,
        usages: Vec::new(),
        groups: Vec::new(),
        description: stored.description.clone(),
        status: format!("invalid kubeflavor metadata: {problem}"),
        created: created(&stored.metadata),
        issued_to: None,
        issued_by: None,
        standing_ok: false,
    }
}

/// A readable token: its flavor and use count, and the API server's verdict at `now`.
fn from_record(record: &TokenRecord, stored: &StoredToken, now: Timestamp) -> TokenInfo {
    let auth = record.authentication_at(now);
    let meta = record.kubeflavor.as_ref();
    TokenInfo {
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
        usages: usages(record),
        groups: record.extra_groups.clone(),
        description: stored.description.clone(),
        status: match &auth {
            Ok(_) => "valid".into(),
            Err(why) => why.to_string(),
        },
        created: created(&stored.metadata),
        issued_to: meta.and_then(|m| m.custody.issued_to.as_ref().map(|t| t.to_string())),
        issued_by: meta.and_then(|m| m.custody.issued_by.clone()),
        standing_ok: auth.is_ok() || auth.as_ref().is_err_and(|e| e.is_expiry()),
    }
}

fn usages(record: &TokenRecord) -> Vec<&'static str> {
    [
        (record.usage_authentication, "authentication"),
        (record.usage_signing, "signing"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect()
}

pub async fn list(cluster: &Cluster, args: &TokenListArgs, out: &mut dyn Write) -> Result<()> {
    let tokens = list_tokens(cluster, args.flavor.as_ref()).await?;
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
            let mut header = vec!["id", "flavor", "bound/max", "expires", "age", "issued-to"];
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
                    t.issued_to.clone().unwrap_or_else(|| "<none>".into()),
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

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ObjectMeta;
    use kubeflavor_core::token::secret::TOKEN_SECRET_TYPE;

    use super::*;

    fn token_info(secret: &Secret, now: Timestamp) -> Option<TokenInfo> {
        super::token_info(StoredToken::read(secret), now)
    }

    const SECRET: &str = "0123456789abcdef";

    fn secret(
        id: &str,
        data: &[(&str, &str)],
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Secret {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut all: Vec<(&str, &str)> = vec![("token-id", id), ("token-secret", SECRET)];
        all.extend_from_slice(data);
        Secret {
            metadata: ObjectMeta {
                name: Some(kubeflavor_core::token::secret::secret_name(
                    &id.parse().unwrap(),
                )),
                namespace: Some("kube-system".into()),
                labels: Some(map(labels)),
                annotations: Some(map(annotations)),
                ..Default::default()
            },
            type_: Some(TOKEN_SECRET_TYPE.into()),
            data: Some(
                all.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn now() -> Timestamp {
        "2026-11-30T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn flavored_token_shows_flavor_and_bound_count_but_no_secret() {
        let s = secret(
            "abcdef",
            &[
                ("usage-bootstrap-authentication", "true"),
                ("expiration", "2026-12-01T12:00:00Z"),
            ],
            &[(FLAVOR_TOKEN_LABEL, "sweet")],
            &[
                ("kubeflavor.io/max-nodes", "3"),
                ("kubeflavor.io/bound-nodes", "a,b"),
            ],
        );
        let info = token_info(&s, now()).unwrap();
        assert_eq!(info.flavor.as_deref(), Some("sweet"));
        assert_eq!(info.issued_to, None);
        assert_eq!((info.bound_nodes.len(), info.max_nodes), (2, Some(3)));
        assert_eq!(info.status, "valid");
        assert!(info.is_live(now()));
        assert_eq!(expires_in(&info.expires_at, now()), "24h");
        let json = serde_json::to_string(&info).unwrap();
        assert!(!json.contains(SECRET), "{json}");
    }

    #[test]
    fn custody_is_listed() {
        let s = secret(
            "abcdef",
            &[("usage-bootstrap-authentication", "true")],
            &[(FLAVOR_TOKEN_LABEL, "sweet")],
            &[
                ("kubeflavor.io/issued-to", "acme-corp/alice"),
                ("kubeflavor.io/issued-by", "kubernetes-admin"),
            ],
        );
        let info = token_info(&s, now()).unwrap();
        assert_eq!(info.issued_to.as_deref(), Some("acme-corp/alice"));
        assert_eq!(info.issued_by.as_deref(), Some("kubernetes-admin"));
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["issuedTo"], "acme-corp/alice");
        assert_eq!(json["issuedBy"], "kubernetes-admin");
    }

    #[test]
    fn broken_issued_to_is_listed_with_the_problem() {
        let s = secret(
            "abcdef",
            &[("usage-bootstrap-authentication", "true")],
            &[(FLAVOR_TOKEN_LABEL, "sweet")],
            &[("kubeflavor.io/issued-to", " alice")],
        );
        let info = token_info(&s, now()).unwrap();
        assert!(info.status.contains("issued-to"), "{}", info.status);
        assert!(!info.is_live(now()));
    }

    #[test]
    fn kubeadm_token_has_no_flavor() {
        let s = secret(
            "ghijkl",
            &[("usage-bootstrap-authentication", "true")],
            &[],
            &[],
        );
        let info = token_info(&s, now()).unwrap();
        assert_eq!(info.flavor, None);
        assert_eq!(expires_in(&info.expires_at, now()), "<never>");
    }

    #[test]
    fn expired_and_unusable_tokens_are_not_live() {
        let expired = secret(
            "mnopqr",
            &[
                ("usage-bootstrap-authentication", "true"),
                ("expiration", "2026-11-30T11:00:00Z"),
            ],
            &[],
            &[],
        );
        let info = token_info(&expired, now()).unwrap();
        assert!(!info.is_live(now()));
        assert_eq!(expires_in(&info.expires_at, now()), "<expired>");
        // Still live an hour earlier: expiry is judged at the time asked.
        assert!(info.is_live("2026-11-30T10:00:00Z".parse().unwrap()));

        let no_auth = secret("stuvwx", &[("usage-bootstrap-signing", "true")], &[], &[]);
        let info = token_info(&no_auth, now()).unwrap();
        assert!(!info.is_live(now()));
        assert!(
            info.status.contains("usage-bootstrap-authentication"),
            "{}",
            info.status
        );
    }

    #[test]
    fn broken_kubeflavor_metadata_is_listed_with_the_problem() {
        let s = secret(
            "abcdef",
            &[],
            &[(FLAVOR_TOKEN_LABEL, "sweet")],
            &[("kubeflavor.io/max-nodes", "zero")],
        );
        let info = token_info(&s, now()).unwrap();
        assert!(info.status.contains("max-nodes"), "{}", info.status);
        assert!(!info.is_live(now()));
    }

    #[test]
    fn secrets_not_named_like_tokens_are_skipped() {
        let mut s = secret("abcdef", &[], &[], &[]);
        s.metadata.name = Some("something-else".into());
        assert!(token_info(&s, now()).is_none());
    }
}
