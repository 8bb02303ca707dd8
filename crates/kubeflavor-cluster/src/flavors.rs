//! Every read and write of Flavors that is not a watch: get one, list their names, create
//! or apply one (the CLI), and write the bound-node count of its status (the node loop).

use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::crd::Flavor;
use crate::read::{self, ReadError};

/// Flavors (cluster-scoped).
pub fn api(client: &Client) -> Api<Flavor> {
    Api::all(client.clone())
}

/// The Flavor `name`, if it exists.
pub async fn get(client: &Client, name: &str) -> Result<Option<Flavor>, ReadError> {
    read::get(api(client), "Flavor", name).await
}

/// The names of every Flavor, sorted.
pub async fn names(client: &Client) -> Result<Vec<String>, kube::Error> {
    let list = api(client).list(&ListParams::default()).await?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|f| f.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// Creates `flavor`; AlreadyExists (409) when the name is taken.
pub async fn create(client: &Client, flavor: &Flavor) -> Result<Flavor, kube::Error> {
    api(client).create(&PostParams::default(), flavor).await
}

/// Applies `flavor` as `name` with server-side apply (`params` names the field manager).
pub async fn apply(
    client: &Client,
    name: &str,
    params: &PatchParams,
    flavor: &Flavor,
) -> Result<Flavor, kube::Error> {
    api(client).patch(name, params, &Patch::Apply(flavor)).await
}

/// Writes the number of nodes bound to the Flavor `name` in its status.
pub async fn write_bound_nodes(
    client: &Client,
    name: &str,
    params: &PatchParams,
    count: i64,
) -> Result<(), kube::Error> {
    let body = serde_json::json!({ "status": { "boundNodes": count } });
    api(client)
        .patch_status(name, params, &Patch::Merge(&body))
        .await
        .map(|_| ())
}
