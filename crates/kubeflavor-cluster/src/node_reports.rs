//! Point reads and writes of NodeReports (the watch is the controller's): get one, and
//! merge-patch its status (the join-token API's observation, the controller's reading).

use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::crd::network::NodeReport;
use crate::read::{self, ReadError};

/// NodeReports (cluster-scoped).
pub fn api(client: &Client) -> Api<NodeReport> {
    Api::all(client.clone())
}

/// The NodeReport `name`, if it exists.
pub async fn get(client: &Client, name: &str) -> Result<Option<NodeReport>, ReadError> {
    read::get(api(client), "NodeReport", name).await
}

/// Merge-patches the status of the NodeReport `name` with `patch` (`{"status": ...}`).
pub async fn patch_status(
    client: &Client,
    name: &str,
    params: &PatchParams,
    patch: &serde_json::Value,
) -> Result<NodeReport, kube::Error> {
    api(client)
        .patch_status(name, params, &Patch::Merge(patch))
        .await
}
