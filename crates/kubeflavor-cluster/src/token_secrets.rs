//! Every read and write of bootstrap token Secrets (`kube-system/bootstrap-token-<id>`):
//! decoding one into kubeflavor-core's [`TokenRecord`], listing them, creating one under a
//! fresh id (built by [`to_secret`] only), the controller's writes (reserve a use, count a
//! denial, delete by uid) and rereads, deleting one. The layout and the rules are the core's
//! ([`kubeflavor_core::token::secret`], [`kubeflavor_core::token::record`]); this module only
//! moves Secrets to and from the API server, and wipes every copy of a token secret it made
//! once it is no longer needed.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kubeflavor_core::approval::client::TokenInstance;
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::names::NodeName;
use kubeflavor_core::token::record::{SecretView, TokenRecord, TokenRecordError};
use kubeflavor_core::token::secret::{
    FLAVOR_TOKEN_LABEL, FlavorTokenMeta, KEY_AUTH_EXTRA_GROUPS, KEY_DESCRIPTION, KEY_EXPIRATION,
    TOKEN_SECRET_NAME_PREFIX, TOKEN_SECRET_NAMESPACE, TOKEN_SECRET_TYPE, TokenSecretObject,
    USAGE_KEY_PREFIX, secret_name,
};
use kubeflavor_core::token::{BootstrapToken, TokenId};
use zeroize::Zeroize;

use crate::status::{is_api_reason, is_not_found};

/// The `expiration` of a token Secret, if it has one that parses. A value that does not
/// parse counts as expired for the API server's bootstrap token authenticator: `Err`
/// carries it.
pub fn expiration(token: &Secret) -> Result<Option<jiff::Timestamp>, String> {
    let Some(raw) = token.data.as_ref().and_then(|d| d.get(KEY_EXPIRATION)) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&raw.0).into_owned();
    text.parse::<jiff::Timestamp>().map(Some).map_err(|_| text)
}

/// A token Secret with exactly this `description` that nobody can authenticate or sign
/// with (no `usage-bootstrap-*`, no extra groups): kubeadm's layout for the proxy token
/// that owns the certificate Secret.
pub fn is_authless_with_description(token: &Secret, description: &str) -> bool {
    let Some(data) = token.data.as_ref() else {
        return false;
    };
    token.type_.as_deref() == Some(TOKEN_SECRET_TYPE)
        && data
            .get(KEY_DESCRIPTION)
            .is_some_and(|d| d.0 == description.as_bytes())
        && !data
            .keys()
            .any(|k| k.starts_with(USAGE_KEY_PREFIX) || k == KEY_AUTH_EXTRA_GROUPS)
}

/// The field selector of token Secrets (for a watch of them alone).
pub fn type_selector() -> String {
    format!("type={TOKEN_SECRET_TYPE}")
}

/// The token Secrets of the namespace the API server reads them from.
pub fn api(client: &Client) -> Api<Secret> {
    Api::namespaced(client.clone(), TOKEN_SECRET_NAMESPACE)
}

/// The token id in a token Secret's name (`bootstrap-token-<id>` -> `<id>`), unchecked.
pub fn id_of(secret_name: &str) -> Option<&str> {
    secret_name.strip_prefix(TOKEN_SECRET_NAME_PREFIX)
}

/// The name of the token Secret of token id `id` (`<id>` -> `bootstrap-token-<id>`),
/// unchecked: an id that is not six of `a-z0-9` names a Secret that cannot exist.
pub fn name_of(id: &str) -> String {
    format!("{TOKEN_SECRET_NAME_PREFIX}{id}")
}

/// Reads a token Secret as the core's [`TokenRecord`]. The data values are decoded to
/// strings for the core and wiped as soon as it has read them. A Secret without a
/// namespace is in none (the API server always sets it), so it is no token Secret.
pub fn record(secret: &Secret) -> Result<TokenRecord, TokenRecordError> {
    let data = decoded_data(secret);
    TokenRecord::from_secret(&view(secret, &data))
}

/// The flavor a token Secret's label names (set on every kubeflavor token), unchecked.
pub fn flavor_of(secret: &Secret) -> Option<&str> {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(FLAVOR_TOKEN_LABEL))
        .map(String::as_str)
}

/// Which Secret this is (uid, creation time): a token re-created under its name is
/// another token.
pub fn instance_of(secret: &Secret) -> Option<TokenInstance> {
    Some(TokenInstance {
        uid: secret.metadata.uid.clone()?,
        created: secret.metadata.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// kubeflavor's metadata on a token Secret, when it is a readable kubeflavor token.
pub fn kubeflavor_meta(secret: &Secret) -> Option<FlavorTokenMeta> {
    record(secret).ok().and_then(|r| r.kubeflavor)
}

/// The Secret with its kubeflavor metadata replaced by `meta`.
fn with_meta(secret: &Secret, meta: &FlavorTokenMeta) -> Secret {
    let mut s = secret.clone();
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(meta.annotations());
    s
}

/// The Secret with `node` added to its bound names (the reservation), or `None` when it is
/// not a readable kubeflavor token.
pub fn with_reservation(secret: &Secret, node: &NodeName) -> Option<Secret> {
    let meta = kubeflavor_meta(secret)?;
    Some(with_meta(secret, &meta.with_bound_node(node)))
}

/// The Secret with its denial count raised by one, or `None` when it is not a readable
/// kubeflavor token.
pub fn with_denial(secret: &Secret) -> Option<Secret> {
    let meta = kubeflavor_meta(secret)?;
    Some(with_meta(secret, &meta.with_denial()))
}

/// PUTs `updated` (an edit of a Secret as read: [`with_reservation`], [`with_denial`]) with
/// the resourceVersion it was read at, so a concurrent write makes this a 409. Returns the
/// Secret as written.
pub async fn replace(client: &Client, updated: &Secret) -> Result<Secret, kube::Error> {
    let name = updated.metadata.name.clone().unwrap_or_default();
    api(client)
        .replace(&name, &PostParams::default(), updated)
        .await
}

/// Deletes the Secret `name` only if it is still the token `uid` (and, when given, still
/// at `resource_version`): never a token re-created under the same name, nor one written
/// since it was judged. A failed precondition is a 409.
pub async fn delete_instance(
    client: &Client,
    name: &str,
    uid: Option<String>,
    resource_version: Option<String>,
) -> Result<(), kube::Error> {
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..DeleteParams::default()
    };
    api(client).delete(name, &dp).await.map(|_| ())
}

/// The token Secret of id `id` (unchecked: see [`name_of`]), if there is one.
pub async fn get(client: &Client, id: &str) -> Result<Option<Secret>, kube::Error> {
    get_named(client, &name_of(id)).await
}

/// The token Secret named `name` (as an ownerReference names it), if there is one.
pub async fn get_named(client: &Client, name: &str) -> Result<Option<Secret>, kube::Error> {
    api(client).get_opt(name).await
}

/// The token Secret as it is now, if it is still the one that was read (same uid).
pub async fn reread(client: &Client, secret: &Secret) -> Result<Option<Secret>, kube::Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let fresh = api(client).get_opt(&name).await?;
    Ok(fresh.filter(|s| s.metadata.uid == secret.metadata.uid))
}

/// One token Secret of a [`list`]: its metadata, description and record. The token
/// secret is not kept.
#[derive(Debug, Clone)]
pub struct StoredToken {
    pub metadata: ObjectMeta,
    /// The token's `description`, as stored.
    pub description: Option<String>,
    pub record: Result<TokenRecord, TokenRecordError>,
}

/// Every bootstrap token Secret (only those of `flavor` when given), decoded at once; the
/// Secrets as received are wiped before this returns.
pub async fn list(
    client: &Client,
    flavor: Option<&FlavorName>,
) -> Result<Vec<StoredToken>, kube::Error> {
    let params = match flavor {
        Some(f) => ListParams::default().labels(&format!("{FLAVOR_TOKEN_LABEL}={f}")),
        None => ListParams::default(),
    };
    let list = api(client).list(&params).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some(TOKEN_SECRET_TYPE))
        .map(|mut secret| {
            let stored = StoredToken::read(&secret);
            wipe(&mut secret);
            stored
        })
        .collect())
}

impl StoredToken {
    /// Reads one token Secret; the caller still holds (and wipes) the Secret itself.
    pub fn read(secret: &Secret) -> Self {
        let data = decoded_data(secret);
        StoredToken {
            metadata: secret.metadata.clone(),
            description: data.get(KEY_DESCRIPTION).map(|d| d.to_string()),
            record: TokenRecord::from_secret(&view(secret, &data)),
        }
    }
}

/// The Secret's data as strings, wiped when dropped.
fn decoded_data(secret: &Secret) -> Wiped {
    Wiped(
        secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
            .collect(),
    )
}

/// Decoded Secret data that is zeroized on drop.
struct Wiped(BTreeMap<String, String>);

impl std::ops::Deref for Wiped {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for Wiped {
    fn drop(&mut self) {
        self.0.values_mut().for_each(Zeroize::zeroize);
    }
}

fn view<'a>(secret: &'a Secret, data: &'a BTreeMap<String, String>) -> SecretView<'a> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    SecretView {
        namespace: secret.metadata.namespace.as_deref().unwrap_or(""),
        name: secret.metadata.name.as_deref().unwrap_or(""),
        type_: secret.type_.as_deref().unwrap_or(""),
        being_deleted: secret.metadata.deletion_timestamp.is_some(),
        data,
        labels: secret.metadata.labels.as_ref().unwrap_or(&EMPTY),
        annotations: secret.metadata.annotations.as_ref().unwrap_or(&EMPTY),
    }
}

/// The Secret object the API takes for the core's token Secret (`data` is base64 on the
/// wire; k8s-openapi encodes it). Every token Secret kubeflavor creates is made here.
pub fn to_secret(object: &TokenSecretObject) -> Secret {
    let map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
    Secret {
        metadata: ObjectMeta {
            name: Some(object.name.clone()),
            namespace: Some(object.namespace.to_string()),
            labels: map(&object.labels),
            annotations: map(&object.annotations),
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

/// Zeroizes every data value of a Secret (the token secret among them).
pub fn wipe(secret: &mut Secret) {
    for value in secret.data.iter_mut().flat_map(|d| d.values_mut()) {
        value.0.zeroize();
    }
    for value in secret.string_data.iter_mut().flat_map(|d| d.values_mut()) {
        value.zeroize();
    }
}

/// A token Secret one of [`create_with_fresh_id`]'s attempts stored.
pub struct Created {
    pub token: BootstrapToken,
    /// The Secret as the API server returned it, data wiped (its name and uid remain).
    pub stored: Secret,
}

/// Stores a token Secret under a fresh id. `draw` gives each attempt's token and Secret,
/// or `None` to skip a token (an id still in use elsewhere); a 409 AlreadyExists means
/// another token has that id, so the next attempt draws again, as kubeadm does. One POST
/// per attempt, nothing read first. `None` when every attempt's id was taken.
pub async fn create_with_fresh_id<E, F>(
    client: &Client,
    attempts: usize,
    mut draw: impl FnMut() -> F,
    api_error: impl Fn(kube::Error) -> E,
) -> Result<Option<Created>, E>
where
    F: std::future::Future<Output = Result<Option<(BootstrapToken, Secret)>, E>>,
{
    let secrets = api(client);
    for _ in 0..attempts {
        let Some((token, mut secret)) = draw().await? else {
            continue;
        };
        let result = secrets.create(&PostParams::default(), &secret).await;
        wipe(&mut secret);
        match result {
            Ok(mut stored) => {
                wipe(&mut stored);
                return Ok(Some(Created { token, stored }));
            }
            Err(err) if is_taken(&err) => {
                tracing::info!(id = %token.id(), "token id already taken, drawing another");
            }
            Err(err) => return Err(api_error(err)),
        }
    }
    Ok(None)
}

fn is_taken(err: &kube::Error) -> bool {
    is_api_reason(err, "AlreadyExists") || matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// Deletes token `id`'s Secret: `false` when there was none.
pub async fn delete(client: &Client, id: &TokenId) -> Result<bool, kube::Error> {
    match api(client)
        .delete(&secret_name(id), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(err) if is_not_found(&err) => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::flavored_secret;

    fn token_secret(namespace: Option<&str>) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": namespace},
            "type": "bootstrap.kubernetes.io/token",
            "data": {
                "token-id": "YWJjZGVm",
                "token-secret": "MDEyMzQ1Njc4OWFiY2RlZg==",
                "usage-bootstrap-authentication": "dHJ1ZQ==",
                "description": "ZA=="
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_secret_decodes_to_its_record_and_its_id() {
        let record = record(&token_secret(Some("kube-system"))).unwrap();
        assert_eq!(record.id.as_str(), "abcdef");
        assert!(record.usage_authentication);
        assert_eq!(id_of("bootstrap-token-abcdef"), Some("abcdef"));
        assert_eq!(id_of("kubeadm-certs"), None);
    }

    #[test]
    fn a_listed_token_keeps_its_description_but_not_its_secret() {
        let stored = StoredToken::read(&token_secret(Some("kube-system")));
        assert_eq!(stored.description.as_deref(), Some("d"));
        assert!(stored.record.is_ok());
        let mut secret = token_secret(Some("kube-system"));
        wipe(&mut secret);
        let data = secret.data.unwrap();
        assert!(data["token-secret"].0.is_empty());
    }

    #[test]
    fn reservation_adds_the_name_and_keeps_the_resource_version() {
        let node: NodeName = "b-node".parse().unwrap();
        let s = with_reservation(&flavored_secret("c-node"), &node).expect("a kubeflavor token");
        // The read's resourceVersion is what makes the PUT fail on a concurrent reservation.
        assert_eq!(s.metadata.resource_version.as_deref(), Some("42"));
        let ann = s.metadata.annotations.unwrap();
        assert_eq!(ann["kubeflavor.io/bound-nodes"], "b-node,c-node");
        assert_eq!(ann["kubeflavor.io/max-nodes"], "3");
    }

    #[test]
    fn a_plain_kubeadm_token_is_never_reserved_or_counted() {
        let mut s = flavored_secret("");
        s.metadata.labels = None;
        let node: NodeName = "a".parse().unwrap();
        assert!(with_reservation(&s, &node).is_none());
        assert!(with_denial(&s).is_none());
    }
}
