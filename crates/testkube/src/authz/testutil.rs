//! An in-memory [`ObjectReader`] for the policy modules' unit tests.

use serde_json::{Value, json};

use crate::types::{IdentityKind, ObjectReader, ResourceKey, UserInfo};

#[derive(Default)]
pub struct MemReader {
    objects: Vec<(ResourceKey, Value)>,
}

impl MemReader {
    pub fn new() -> Self {
        MemReader::default()
    }

    pub fn with(mut self, group: &str, resource: &str, object: Value) -> Self {
        self.objects
            .push((ResourceKey::new(group, resource), object));
        self
    }

    /// The store seeded with the default bootstrap policy, as at server start.
    pub fn with_defaults() -> Self {
        MemReader {
            objects: crate::authz::default_objects(),
        }
    }
}

fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

impl ObjectReader for MemReader {
    fn get(&self, key: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|(k, o)| {
                k == key && meta(o, "namespace") == namespace && meta(o, "name") == Some(name)
            })
            .map(|(_, o)| o)
    }

    fn list(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|(k, o)| k == key && (namespace.is_none() || meta(o, "namespace") == namespace))
            .map(|(_, o)| o)
            .collect()
    }
}

pub fn user(kind: IdentityKind, name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        kind,
        name: name.into(),
        uid: String::new(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        extra: Default::default(),
    }
}

pub fn node_user(node: &str) -> UserInfo {
    user(
        IdentityKind::ClientCert,
        &format!("system:node:{node}"),
        &["system:nodes", "system:authenticated"],
    )
}

pub fn admin() -> UserInfo {
    user(
        IdentityKind::ClientCert,
        "kubernetes-admin",
        &["system:masters", "system:authenticated"],
    )
}

pub fn bootstrap_user(id: &str) -> UserInfo {
    user(
        IdentityKind::BootstrapToken,
        &format!("system:bootstrap:{id}"),
        &[
            "system:bootstrappers",
            "system:bootstrappers:kubeadm:default-node-token",
            "system:authenticated",
        ],
    )
}

/// A token Secret as the store holds it (base64 data), from plain string values.
pub fn token_secret(name: &str, namespace: &str, type_: &str, data: &[(&str, &str)]) -> Value {
    use base64::Engine;
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Value::from(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
        "type": type_,
        "data": data,
    })
}
