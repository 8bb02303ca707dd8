//! Point reads and writes of Nodes (the watches are the controller's and the webhook's):
//! get one, whole or its metadata only, and merge-patch it.

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};

use crate::read::{self, ReadError};

/// Nodes (cluster-scoped).
pub fn api(client: &Client) -> Api<Node> {
    Api::all(client.clone())
}

/// The Node `name`, if it exists.
pub async fn get(client: &Client, name: &str) -> Result<Option<Node>, ReadError> {
    read::get(api(client), "Node", name).await
}

/// The metadata of the Node `name`, if it exists.
pub async fn get_metadata(
    client: &Client,
    name: &str,
) -> Result<Option<PartialObjectMeta<Node>>, ReadError> {
    read::get_metadata(api(client), "Node", name).await
}

/// Merge-patches the Node `name` with `patch`.
pub async fn merge_patch(
    client: &Client,
    name: &str,
    params: &PatchParams,
    patch: &serde_json::Value,
) -> Result<Node, kube::Error> {
    api(client).patch(name, params, &Patch::Merge(patch)).await
}
