//! Every read and write of FlavorBindings that is not a watch: read one (alone or with the
//! Node of its name), create one, write its status, revoke one, and find those of a token
//! or of a flavor. What a binding holds, and
//! what core makes of it, is `crd::binding`'s; this module only moves bindings to and from
//! the API server.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeflavor_core::flavor::FlavorName;
use kubeflavor_core::node::state::Revocation;
use kubeflavor_core::token::TokenId;

use crate::crd::{BINDING_TOKEN_ID_LABEL, FlavorBinding, FlavorBindingStatus};
use crate::nodes;
use crate::read::{self, ReadError};

/// FlavorBindings (cluster-scoped).
pub fn api(client: &Client) -> Api<FlavorBinding> {
    Api::all(client.clone())
}

/// The binding `name`, if it exists.
pub async fn get(client: &Client, name: &str) -> Result<Option<FlavorBinding>, ReadError> {
    read::get(api(client), "FlavorBinding", name).await
}

/// The metadata of the binding `name`, if it exists (its resourceVersion says whether it
/// changed).
pub async fn get_metadata(
    client: &Client,
    name: &str,
) -> Result<Option<PartialObjectMeta<FlavorBinding>>, ReadError> {
    read::get_metadata(api(client), "FlavorBinding", name).await
}

/// The binding `name` and the Node of the same name, read together (two GETs in flight at
/// once), each `None` when it does not exist.
pub async fn with_node(
    client: &Client,
    name: &str,
) -> Result<(Option<FlavorBinding>, Option<Node>), ReadError> {
    tokio::try_join!(get(client, name), nodes::get(client, name))
}

/// Creates `binding`; AlreadyExists (409) when its name is bound already.
pub async fn create(
    client: &Client,
    binding: &FlavorBinding,
) -> Result<FlavorBinding, kube::Error> {
    api(client).create(&PostParams::default(), binding).await
}

/// Writes `status` on the binding `name` as it was read at `resource_version` (a merge
/// patch replaces the whole conditions list, so the resourceVersion makes it fail with 409
/// instead of dropping a condition written meanwhile). Returns the binding's new
/// resourceVersion.
pub async fn write_status(
    client: &Client,
    name: &str,
    resource_version: &str,
    status: &FlavorBindingStatus,
) -> Result<String, kube::Error> {
    let body = serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "status": status,
    });
    let written = api(client)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    Ok(written.resource_version().unwrap_or_default())
}

/// Revokes the binding `name` (its Revoked condition, `why`): `false` when it was revoked
/// already. A conflict with the controller's own status writes reads it again and retries.
pub async fn revoke(client: &Client, name: &str, why: &Revocation) -> Result<bool, kube::Error> {
    change_status(client, name, |b| b.revoked_status(why)).await
}

/// Writes the status `next` makes of the binding `name`, read fresh each try: `false` when
/// `next` has nothing to change. A conflict with another status write reads it again.
async fn change_status(
    client: &Client,
    name: &str,
    next: impl Fn(&FlavorBinding) -> Option<FlavorBindingStatus>,
) -> Result<bool, kube::Error> {
    loop {
        let binding = api(client).get(name).await?;
        let Some(status) = next(&binding) else {
            return Ok(false);
        };
        let rv = binding.resource_version().unwrap_or_default();
        match write_status(client, name, &rv, &status).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The names of the bindings of token `id` (by the token-id label every binding carries),
/// at most `limit` of them when given.
pub async fn names_of_token(
    client: &Client,
    id: &TokenId,
    limit: Option<u32>,
) -> Result<Vec<String>, kube::Error> {
    let mut params = ListParams::default().labels(&format!("{BINDING_TOKEN_ID_LABEL}={id}"));
    if let Some(limit) = limit {
        params = params.limit(limit);
    }
    let found = api(client).list_metadata(&params).await?;
    Ok(found.items.into_iter().map(|b| b.name_any()).collect())
}

/// Every binding, sorted by name.
pub async fn list(client: &Client) -> Result<Vec<FlavorBinding>, kube::Error> {
    let mut items = api(client).list(&ListParams::default()).await?.items;
    items.sort_by_key(|b| b.name_any());
    Ok(items)
}

/// The names of the bindings of `flavor`, sorted. Bindings carry no flavor label (a
/// binding's flavor is its spec), so every binding is listed.
pub async fn names_of_flavor(
    client: &Client,
    flavor: &FlavorName,
) -> Result<Vec<String>, kube::Error> {
    Ok(list(client)
        .await?
        .into_iter()
        .filter(|b| b.spec.flavor == flavor.as_str())
        .map(|b| b.name_any())
        .collect())
}

/// Sets condition `type_` True on the binding `name` (a revocation step's record):
/// `false` when it was True already; NotFound when there is no binding.
pub async fn set_condition(
    client: &Client,
    name: &str,
    type_: &str,
    reason: &str,
    message: &str,
) -> Result<bool, kube::Error> {
    change_status(client, name, |b| b.with_condition(type_, reason, message)).await
}
