//! The Kubernetes objects of kubeadm's copy-certs (`kubeadm init phase upload-certs`), built
//! exactly as kubeadm builds them so each side reads what the other writes, and the
//! create-or-replace calls that make `certs upload` idempotent.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use kubeflavor_cluster::token_secrets;
use kubeflavor_core::token::BootstrapToken;
use kubeflavor_core::token::secret::{TokenSecretData, TokenSecretObject};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use kubeflavor_core::crypto::copycerts::{
    OWNER_TOKEN_DESCRIPTION as PROXY_TOKEN_DESCRIPTION, RBAC_NAME, SECRET_NAME,
    SECRET_NAMESPACE as NAMESPACE,
};
/// The group of every default kubeadm token (workers included: that is kubeadm's weakness).
pub const KUBEADM_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The group of tokens minted by `kubeflavor token create --control-plane`.
pub use kubeflavor_core::token::secret::CONTROL_PLANE_GROUP as CONTROL_PLANE_TOKEN_GROUP;
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Who may read `kube-system/kubeadm-certs` (P5, certificate hand-off).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReadableBy {
    /// Only tokens from `kubeflavor token create --control-plane`.
    #[default]
    ControlPlane,
    /// kubeadm's default token group, for `kubeadm join --control-plane`: every default
    /// kubeadm token, worker tokens included, may then read the ciphertext.
    Kubeadm,
}

impl ReadableBy {
    pub fn group(self) -> &'static str {
        match self {
            ReadableBy::ControlPlane => CONTROL_PLANE_TOKEN_GROUP,
            ReadableBy::Kubeadm => KUBEADM_TOKEN_GROUP,
        }
    }
}

/// The TTL-proxy token Secret, in kubeadm's exact layout (core's
/// [`TokenSecretData::ttl_proxy`]): no usages and no groups, so the token can never
/// authenticate; it exists only so that tokencleaner deletes it at `expiration` and garbage
/// collection then deletes the Secret it owns.
pub fn proxy_token_secret(token: &BootstrapToken, expiration: jiff::Timestamp) -> Secret {
    let data = TokenSecretData::ttl_proxy(token.clone(), expiration);
    token_secrets::to_secret(&TokenSecretObject::new(&data, None))
}

/// The ownerReference kubeadm puts on the Secret (`metav1.NewControllerRef`).
pub fn owner_reference(owner: &Secret) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Secret".to_owned(),
        name: owner.metadata.name.clone()?,
        uid: owner.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// `kube-system/kubeadm-certs` holding `data` (already sealed values), owned by the token.
pub fn certs_secret(data: BTreeMap<String, Vec<u8>>, owner: OwnerReference) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(SECRET_NAME.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Secret::default()
    }
}

/// `get` on exactly one Secret, as kubeadm grants it.
pub fn reader_role() -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(RBAC_NAME.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".to_owned()]),
            resource_names: Some(vec![SECRET_NAME.to_owned()]),
            verbs: vec!["get".to_owned()],
            ..PolicyRule::default()
        }]),
    }
}

/// Binds [`reader_role`] to exactly one token group.
pub fn reader_binding(readable_by: ReadableBy) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(RBAC_NAME.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "Role".to_owned(),
            name: RBAC_NAME.to_owned(),
        },
        subjects: Some(vec![Subject {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "Group".to_owned(),
            name: readable_by.group().to_owned(),
            namespace: None,
        }]),
    }
}

/// The groups and users a RoleBinding grants, as `Group:<name>` / `User:<name>` strings.
pub fn binding_subjects(binding: &RoleBinding) -> Vec<String> {
    binding
        .subjects
        .iter()
        .flatten()
        .map(|s| format!("{}:{}", s.kind, s.name))
        .collect()
}

/// Creates `obj`, or replaces the existing object of that name with it (kubeadm's
/// `CreateOrUpdate*`). Replacement carries the current resourceVersion, so a concurrent
/// writer makes this fail with a 409 rather than being silently overwritten.
pub async fn create_or_replace<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let name = obj.meta().name.clone().unwrap_or_default();
            let current = api.get(&name).await?;
            let mut replacement = obj.clone();
            replacement.meta_mut().resource_version = current.meta().resource_version.clone();
            api.replace(&name, &PostParams::default(), &replacement)
                .await
        }
        other => other,
    }
}

/// Removes the ownerReference-based link to a superseded proxy token by deleting that token,
/// once the Secret no longer names it as owner. Only tokens in kubeadm's proxy layout are
/// deleted: never a token someone could authenticate with.
pub async fn delete_if_proxy_token(client: &kube::Client, name: &str) -> Result<bool, kube::Error> {
    let token = match token_secrets::get_named(client, name).await? {
        Some(t) => t,
        None => return Ok(false),
    };
    if !token_secrets::is_authless_with_description(&token, PROXY_TOKEN_DESCRIPTION) {
        return Ok(false);
    }
    token_secrets::delete_instance(client, name, token.metadata.uid.clone(), None).await?;
    Ok(true)
}

/// Turns a failed API call into the line the user sees, naming what was being done.
pub fn api_error(doing: &str, err: kube::Error) -> super::CertsError {
    use super::CertsError;
    match &err {
        kube::Error::Api(s) if s.code == 401 => CertsError::Forbidden(format!(
            "{doing}: the API server did not accept these credentials (check the token or the kubeconfig)"
        )),
        kube::Error::Api(s) if s.code == 403 => CertsError::Forbidden(format!(
            "{doing}: {} (this identity lacks that permission; use the admin kubeconfig, or for reading the Secret a token from 'kubeflavor token create --control-plane')",
            s.message
        )),
        kube::Error::Api(s) => CertsError::Other(format!(
            "{doing}: the API server answered {} {}: {} (retry; if it persists, check the API server)",
            s.code, s.reason, s.message
        )),
        _ => CertsError::Cluster(format!(
            "{doing}: cannot reach the cluster: {err} (check the server address and that it is up)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn token(id: &str) -> BootstrapToken {
        format!("{id}.0123456789abcdef").parse().unwrap()
    }

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn proxy_token_has_kubeadm_layout_and_cannot_authenticate() {
        let s = proxy_token_secret(&token("012q3l"), ts("2026-11-30T06:27:54Z"));
        let v = serde_json::to_value(&s).unwrap();
        // The layout of the proxy token `kubeadm init phase upload-certs` makes: no usages,
        // no groups, kubeadm's description.
        assert_eq!(v["metadata"]["name"], "bootstrap-token-012q3l");
        assert_eq!(v["metadata"]["namespace"], "kube-system");
        assert_eq!(v["type"], "bootstrap.kubernetes.io/token");
        let keys: Vec<&str> = v["data"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["description", "expiration", "token-id", "token-secret"]
        );
        let desc = &s.data.as_ref().unwrap()["description"].0;
        assert_eq!(desc, b"Proxy for managing TTL for the kubeadm-certs secret");
        assert_eq!(
            token_secrets::expiration(&s).unwrap().unwrap().to_string(),
            "2026-11-30T06:27:54Z"
        );
    }

    #[test]
    fn certs_secret_is_owned_like_kubeadm_does_it() {
        let mut owner = proxy_token_secret(&token("abcdef"), ts("2026-11-30T06:27:54Z"));
        owner.metadata.uid = Some("baf2463d-8c31-4d4c-b9d2-1c54729e37d2".into());
        let s = certs_secret(
            BTreeMap::from([("ca.crt".to_owned(), vec![1, 2])]),
            owner_reference(&owner).unwrap(),
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["metadata"]["ownerReferences"],
            json!([{
                "apiVersion": "v1",
                "kind": "Secret",
                "name": "bootstrap-token-abcdef",
                "uid": "baf2463d-8c31-4d4c-b9d2-1c54729e37d2",
                "controller": true,
                "blockOwnerDeletion": true
            }])
        );
        assert_eq!(v["type"], "Opaque");
        assert_eq!(v["metadata"]["name"], "kubeadm-certs");
    }

    #[test]
    fn an_owner_without_uid_gives_no_reference() {
        let owner = proxy_token_secret(&token("abcdef"), ts("2030-01-01T00:00:00Z"));
        assert!(owner_reference(&owner).is_none());
    }

    #[test]
    fn role_grants_get_on_the_one_secret_only() {
        let v = serde_json::to_value(reader_role()).unwrap();
        assert_eq!(
            v["rules"],
            json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["kubeadm-certs"], "verbs": ["get"]}])
        );
        assert_eq!(v["metadata"]["name"], "kubeadm:kubeadm-certs");
    }

    #[test]
    fn binding_defaults_to_control_plane_tokens_only() {
        let b = reader_binding(ReadableBy::default());
        assert_eq!(
            binding_subjects(&b),
            ["Group:system:bootstrappers:kubeflavor:control-plane"]
        );
        let k = reader_binding(ReadableBy::Kubeadm);
        assert_eq!(
            binding_subjects(&k),
            ["Group:system:bootstrappers:kubeadm:default-node-token"]
        );
        assert_eq!(k.role_ref.kind, "Role");
        assert_eq!(k.role_ref.name, RBAC_NAME);
    }

    #[test]
    fn unparsable_expiration_is_reported_as_such() {
        let mut s = proxy_token_secret(&token("abcdef"), ts("2030-01-01T00:00:00Z"));
        s.data.as_mut().unwrap().insert(
            "expiration".into(),
            ByteString(b"2030-01-01 00:00:00".to_vec()),
        );
        assert_eq!(
            token_secrets::expiration(&s),
            Err("2030-01-01 00:00:00".to_owned())
        );
    }
}
