//! Every read and write of the revocation list, the ConfigMap
//! `kube-system/kubeflavor-revoked-nodes` (`kubeflavor_core::node::revocation_list`): add a name,
//! remove one, read the names. Writes carry the resourceVersion read, and a conflict reads
//! again and retries, so two revocations never drop each other's name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use kubeflavor_core::node::revocation_list::{self, Entry, NAME, NAMESPACE};

/// The field manager of the list's entries: not install's, so re-applying the install
/// (which ships the list empty) never removes them.
pub const FIELD_MANAGER: &str = "kubeflavor-revoke";

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The ConfigMaps of the list's namespace.
pub fn api(client: &Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// An empty list, as `install` creates it.
pub fn empty() -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The listed names with their records; `None` when the ConfigMap does not exist.
pub async fn read(client: &Client) -> Result<Option<BTreeMap<String, String>>, kube::Error> {
    Ok(api(client)
        .get_opt(NAME)
        .await?
        .map(|cm| cm.data.unwrap_or_default()))
}

/// Whether `node` is listed (false when there is no list).
pub async fn is_listed(client: &Client, node: &str) -> Result<bool, kube::Error> {
    Ok(read(client)
        .await?
        .is_some_and(|d| revocation_list::is_listed(&d, node)))
}

/// Adds `node` with `entry`: `false` when it was listed already. Creates the ConfigMap when
/// it is missing (an install older than the list, or an admin who deleted it).
pub async fn add(client: &Client, node: &str, entry: &Entry) -> Result<bool, kube::Error> {
    loop {
        let Some(mut cm) = api(client).get_opt(NAME).await? else {
            let mut cm = empty();
            cm.data = Some(BTreeMap::from([(node.to_string(), entry.to_value())]));
            match api(client).create(&post_params(), &cm).await {
                Ok(_) => return Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e),
            }
        };
        let data = cm.data.take().unwrap_or_default();
        let Some(data) = revocation_list::with_node(&data, node, entry) else {
            return Ok(false);
        };
        if replace(client, cm, data).await? {
            return Ok(true);
        }
    }
}

/// Removes `node`: `false` when it was not listed (or there is no list).
pub async fn remove(client: &Client, node: &str) -> Result<bool, kube::Error> {
    loop {
        let Some(mut cm) = api(client).get_opt(NAME).await? else {
            return Ok(false);
        };
        let data = cm.data.take().unwrap_or_default();
        let Some(data) = revocation_list::without_node(&data, node) else {
            return Ok(false);
        };
        if replace(client, cm, data).await? {
            return Ok(true);
        }
    }
}

/// Writes `data` into `cm` as it was read (its resourceVersion): `false` on a conflict.
async fn replace(
    client: &Client,
    mut cm: ConfigMap,
    data: BTreeMap<String, String>,
) -> Result<bool, kube::Error> {
    cm.data = Some(data);
    match api(client)
        .replace(&cm.name_any(), &post_params(), &cm)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}
