//! Minting kubeflavor join tokens: the library under `token create` and the join-token
//! API (`serve`). A token is drawn, its id checked against the bindings that still name
//! it, and its Secret created; the Flavor's rules and the join line around the token live
//! here too, so both callers mint alike.

pub mod join_line;

use std::num::NonZeroU32;

use jiff::Timestamp;
use kube::api::{Api, ListParams};
use kubeflavor_core::flavor::{FlavorName, FlavorRules, TokenTtl};
use kubeflavor_core::token::{BootstrapToken, TokenId};
use kubeflavor_core::token_meta::Custody;
use kubeflavor_core::token_secret::flavored_token_secret;

use crate::cluster::{Cluster, token_secrets};
use crate::crd::{BINDING_TOKEN_ID_LABEL, Flavor, FlavorBinding, rules_from_flavor};
use crate::error::{CliError, Result};

pub use join_line::{JoinTarget, join_command_line, join_target};

/// How many fresh ids a mint tries before giving up on collisions. With 36^6 ids a
/// second collision in a row means something else is wrong.
pub const CREATE_ATTEMPTS: usize = 5;

/// kubeadm's default token lifetime, used when neither `--ttl` nor the flavor sets one.
pub const DEFAULT_TTL: TokenTtl = TokenTtl::Seconds(24 * 3600);

/// The rules of Flavor `flavor_name`, `None` when there is no such Flavor: one GET, and
/// nothing about the cluster's other flavors (the join-token API must not tell a caller
/// which exist).
pub async fn stored_flavor_rules(
    cluster: &Cluster,
    flavor_name: &FlavorName,
) -> Result<Option<FlavorRules>> {
    let flavors: Api<Flavor> = Api::all(cluster.client.clone());
    let flavor = match flavors.get_opt(flavor_name.as_str()).await {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(err) => return Err(cluster.error(&format!("get flavor {}", flavor_name), err)),
    };
    let (_, rules) = rules_from_flavor(&flavor).map_err(|e| {
        CliError::refused(
            format!("flavor {} is invalid: {e}", flavor_name),
            "fix it with 'kubeflavor flavor apply -f FILE' before minting tokens for it",
        )
    })?;
    Ok(Some(rules))
}

/// Store a new token Secret of `flavor` recording `custody`, drawing tokens from `next`
/// until one's id is free: a 409 AlreadyExists means another token has that id, so draw
/// again (as kubeadm does). One POST per attempt; nothing is read first.
pub async fn mint(
    cluster: &Cluster,
    flavor: &FlavorName,
    expiration: Option<Timestamp>,
    max_nodes: NonZeroU32,
    custody: &Custody,
    mut next: impl FnMut() -> Result<BootstrapToken>,
) -> Result<BootstrapToken> {
    // The token is drawn before the future starts, so the future borrows nothing of
    // `next` and can be sent between threads (the join-token API mints on any worker).
    let draw = || {
        let token = next();
        async move {
            let token = token?;
            if id_still_bound(cluster, token.id()).await? {
                tracing::info!(id = %token.id(), "token id still named by a FlavorBinding, drawing another");
                return Ok(None);
            }
            let object = flavored_token_secret(&token, flavor, expiration, max_nodes, custody);
            Ok::<_, CliError>(Some((token, token_secrets::to_secret(&object))))
        }
    };
    let created =
        token_secrets::create_with_fresh_id(&cluster.client, CREATE_ATTEMPTS, draw, |e| {
            cluster.error("create the token Secret in kube-system", e)
        })
        .await?;
    created.map(|c| c.token).ok_or_else(|| {
        CliError::failed(
            format!("{CREATE_ATTEMPTS} freshly generated token ids were all taken"),
            "this should not happen with random ids; check the system's random number generator",
        )
    })
}

/// Whether a FlavorBinding still names token id `id`: the id of a token that is gone is
/// not minted again, so a binding's token id always means one token (the binding also
/// records the Secret's uid, so a re-used id could not take the name over anyway). One
/// list call, by the binding's token-id label.
pub async fn id_still_bound(cluster: &Cluster, id: &TokenId) -> Result<bool> {
    let bindings: Api<FlavorBinding> = Api::all(cluster.client.clone());
    let params = ListParams::default()
        .labels(&format!("{BINDING_TOKEN_ID_LABEL}={id}"))
        .limit(1);
    let found = bindings
        .list_metadata(&params)
        .await
        .map_err(|e| cluster.error("list FlavorBindings by token id", e))?;
    Ok(!found.items.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_secret_is_kubeadms_layout_with_flavor_in_metadata() {
        let token: BootstrapToken = "abcdef.0123456789abcdef".parse().unwrap();
        let flavor: FlavorName = "sweet".parse().unwrap();
        let at: Timestamp = "2026-12-01T04:11:50Z".parse().unwrap();
        let secret = token_secrets::to_secret(&flavored_token_secret(
            &token,
            &flavor,
            Some(at),
            NonZeroU32::new(2).unwrap(),
            &Custody::default(),
        ));
        let json = serde_json::to_value(&secret).unwrap();
        assert_eq!(json["metadata"]["name"], "bootstrap-token-abcdef");
        assert_eq!(json["metadata"]["namespace"], "kube-system");
        assert_eq!(json["type"], "bootstrap.kubernetes.io/token");
        assert_eq!(
            json["metadata"]["labels"][kubeflavor_core::token_secret::FLAVOR_TOKEN_LABEL],
            "sweet"
        );
        // base64 of the plain strings, as kubeadm stores them.
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
        let mut secret = token_secrets::to_secret(&flavored_token_secret(
            &token,
            &flavor,
            None,
            NonZeroU32::MIN,
            &Custody::default(),
        ));
        token_secrets::wipe(&mut secret);
        assert!(secret.data.unwrap().values().all(|v| v.0.is_empty()));
    }
}
