//! Minting kubeflavor join tokens: the library under `token create` and the join-token
//! API (`serve`). A token is drawn, its id checked against the bindings that still name
//! it, and its Secret created; the Flavor's rules and the join line around the token live
//! here too, so both callers mint alike.

pub mod join_line;

use jiff::Timestamp;
use std::num::NonZeroU32;

use kubeflavor_cluster::crd::rules_from_flavor;
use kubeflavor_cluster::{bindings, flavors, token_secrets};
use kubeflavor_core::flavor::input_labels::InputLabels;
use kubeflavor_core::flavor::{FlavorName, FlavorRules};
use kubeflavor_core::token::meta::Custody;
use kubeflavor_core::token::secret::{FlavorTokenMeta, TokenSecretData, TokenSecretObject};
use kubeflavor_core::token::{BootstrapToken, TokenId};

use crate::connect::Cluster;

pub use join_line::{JoinTarget, join_command_line, join_target};

/// How many fresh ids a mint tries before giving up on collisions. With 36^6 ids a
/// second collision in a row means something else is wrong.
pub const CREATE_ATTEMPTS: usize = 5;

/// Why a token could not be minted. Each caller says it in its own terms: `token create`
/// as an error line and exit code, the join-token API as a Kubernetes `Status`; a metric
/// labels it with [`MintError::metric_label`].
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The Flavor exists but its spec is not one kubeflavor can mint for.
    #[error("flavor {flavor} is invalid: {problem}")]
    InvalidFlavor { flavor: FlavorName, problem: String },
    /// A call to the API server failed; `doing` says which.
    #[error("could not {doing}: {source}")]
    Api {
        doing: String,
        #[source]
        source: kube::Error,
    },
    /// Every fresh id drawn was taken.
    #[error("{0} freshly generated token ids were all taken")]
    IdsTaken(usize),
    /// The system's random number generator failed.
    #[error("no random token could be drawn: {0}")]
    Random(String),
    /// Where nodes join could not be told (cluster-info, the kubeconfig, the CA).
    #[error("{problem}")]
    JoinTarget { problem: String, fix: &'static str },
}

impl MintError {
    pub(crate) fn api(doing: impl Into<String>) -> impl Fn(kube::Error) -> MintError {
        let doing = doing.into();
        move |source| MintError::Api {
            doing: doing.clone(),
            source,
        }
    }

    /// What failed, as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            MintError::InvalidFlavor { .. } => "invalid_flavor",
            MintError::Api { .. } => "api",
            MintError::IdsTaken(_) => "ids_taken",
            MintError::Random(_) => "random",
            MintError::JoinTarget { .. } => "join_target",
        }
    }

    /// What the person minting can do about it.
    pub fn fix(&self) -> &'static str {
        match self {
            MintError::InvalidFlavor { .. } => {
                "fix it with 'kubeflavor flavor apply -f FILE' before minting tokens for it"
            }
            MintError::Api { .. } => "check the cluster and retry",
            MintError::IdsTaken(_) => {
                "this should not happen with random ids; check the system's random number generator"
            }
            MintError::Random(_) => "retry",
            MintError::JoinTarget { fix, .. } => fix,
        }
    }
}

/// A fresh random token.
pub fn generate() -> Result<BootstrapToken, MintError> {
    BootstrapToken::generate().map_err(|e| MintError::Random(e.to_string()))
}

/// The rules of Flavor `flavor_name`, `None` when there is no such Flavor: one GET, and
/// nothing about the cluster's other flavors (the join-token API must not tell a caller
/// which exist).
pub async fn stored_flavor_rules(
    cluster: &Cluster,
    flavor_name: &FlavorName,
) -> Result<Option<FlavorRules>, MintError> {
    let Some(flavor) = flavors::get(&cluster.client, flavor_name.as_str())
        .await
        .map_err(|e| MintError::api(format!("get flavor {flavor_name}"))(e.source))?
    else {
        return Ok(None);
    };
    let (_, rules) = rules_from_flavor(&flavor).map_err(|e| MintError::InvalidFlavor {
        flavor: flavor_name.clone(),
        problem: e.to_string(),
    })?;
    Ok(Some(rules))
}

/// What a node token is minted with: its Flavor and max nodes, when it expires, its
/// custody and input labels, and, when an admin went past the Flavor's limits, the record
/// of who did.
#[derive(Debug, Clone)]
pub struct NodeTokenSpec {
    pub flavor: FlavorName,
    pub max_nodes: NonZeroU32,
    pub expiration: Option<Timestamp>,
    pub custody: Custody,
    pub input_labels: InputLabels,
    /// The limits-override record (`token create` past the Flavor's limits).
    pub limits_override: Option<String>,
}

/// A node token as minted, with what it was minted with.
pub struct Minted {
    pub token: BootstrapToken,
    pub spec: NodeTokenSpec,
}

/// Mints a node token of `spec`: the one sequence `token create` and the join-token API
/// share (kubeflavor's metadata from the spec, then a fresh id no binding names, then the
/// Secret).
pub async fn mint_node_token(cluster: &Cluster, spec: NodeTokenSpec) -> Result<Minted, MintError> {
    let mut meta = FlavorTokenMeta::new(spec.flavor.clone(), spec.max_nodes)
        .with_custody(spec.custody.clone())
        .with_input_labels(spec.input_labels.clone());
    if let Some(by) = &spec.limits_override {
        meta = meta.with_limits_override(by.clone());
    }
    let token = mint(cluster, &meta, spec.expiration, generate).await?;
    Ok(Minted { token, spec })
}

/// Store a new token Secret with kubeflavor's metadata `meta` (its flavor, max nodes,
/// custody and input labels; no bound names, no denials), drawing tokens from `next` until
/// one's id is free: a 409 AlreadyExists means another token has that id, so draw again
/// (as kubeadm does), and an id a FlavorBinding still names is skipped. One LIST and one
/// POST per attempt.
pub async fn mint(
    cluster: &Cluster,
    meta: &FlavorTokenMeta,
    expiration: Option<Timestamp>,
    next: impl FnMut() -> Result<BootstrapToken, MintError>,
) -> Result<BootstrapToken, MintError> {
    let secret = |token: &BootstrapToken| {
        let data = TokenSecretData::kubeflavor_node(token.clone(), expiration);
        TokenSecretObject::new(&data, Some(meta))
    };
    store(cluster, secret, true, next).await
}

/// Store a new control-plane join token (`token create --control-plane`): kubeadm's
/// layout with the control-plane group, plus the flavor's metadata `meta` when it has a
/// flavor, so the controller decides its kubelet's CSR by the same binding rules.
pub async fn mint_control_plane(
    cluster: &Cluster,
    expiration: Option<Timestamp>,
    meta: Option<&FlavorTokenMeta>,
) -> Result<BootstrapToken, MintError> {
    let secret = |token: &BootstrapToken| {
        TokenSecretObject::new(
            &TokenSecretData::control_plane(token.clone(), expiration),
            meta,
        )
    };
    store(cluster, secret, false, generate).await
}

/// Stores the Secret `secret` makes for tokens drawn from `next` until one's id is free
/// (and, with `skip_bound_ids`, named by no FlavorBinding).
async fn store(
    cluster: &Cluster,
    secret: impl Fn(&BootstrapToken) -> TokenSecretObject,
    skip_bound_ids: bool,
    mut next: impl FnMut() -> Result<BootstrapToken, MintError>,
) -> Result<BootstrapToken, MintError> {
    // The token is drawn before the future starts, so the future borrows nothing of
    // `next` and can be sent between threads (the join-token API mints on any worker).
    let draw = || {
        let token = next();
        let secret = &secret;
        async move {
            let token = token?;
            if skip_bound_ids && id_still_bound(cluster, token.id()).await? {
                tracing::info!(id = %token.id(), "token id still named by a FlavorBinding, drawing another");
                return Ok(None);
            }
            let object = secret(&token);
            Ok::<_, MintError>(Some((token, token_secrets::to_secret(&object))))
        }
    };
    let created = token_secrets::create_with_fresh_id(
        &cluster.client,
        CREATE_ATTEMPTS,
        draw,
        MintError::api("create the token Secret in kube-system"),
    )
    .await?;
    created
        .map(|c| c.token)
        .ok_or(MintError::IdsTaken(CREATE_ATTEMPTS))
}

/// Whether a FlavorBinding still names token id `id`: the id of a token that is gone is
/// not minted again, so a binding's token id always means one token (the binding also
/// records the Secret's uid, so a re-used id could not take the name over anyway). One
/// list call, by the binding's token-id label.
pub async fn id_still_bound(cluster: &Cluster, id: &TokenId) -> Result<bool, MintError> {
    let found = bindings::names_of_token(&cluster.client, id, Some(1))
        .await
        .map_err(MintError::api("list FlavorBindings by token id"))?;
    Ok(!found.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_core::token::meta::Custody;
    use kubeflavor_core::token::secret::flavored_token_secret;
    use std::num::NonZeroU32;

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
            json["metadata"]["labels"][kubeflavor_core::token::secret::FLAVOR_TOKEN_LABEL],
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
