//! A point read that failed, named by what it read (`FlavorBinding n1`, `Node n1`), so a
//! reconciler reports and counts it without naming the object again at every call; and the
//! two point reads every kind's module makes with it.

use kube::api::{Api, PartialObjectMeta};
use kube::core::Resource;
use serde::de::DeserializeOwned;

/// Reading `what` failed.
#[derive(Debug, thiserror::Error)]
#[error("reading {what} failed: {source}")]
pub struct ReadError {
    pub what: String,
    #[source]
    pub source: kube::Error,
}

/// The object `name` of `kind`, if it exists.
pub(crate) async fn get<K>(api: Api<K>, kind: &str, name: &str) -> Result<Option<K>, ReadError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.map_err(|source| ReadError {
        what: format!("{kind} {name}"),
        source,
    })
}

/// The metadata of the object `name` of `kind`, if it exists.
pub(crate) async fn get_metadata<K>(
    api: Api<K>,
    kind: &str,
    name: &str,
) -> Result<Option<PartialObjectMeta<K>>, ReadError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_metadata_opt(name)
        .await
        .map_err(|source| ReadError {
            what: format!("{kind} {name}"),
            source,
        })
}
