//! TEMPORARY stand-in for the CLI branch's crd.rs (Flavor, FlavorBinding), only so the
//! controller compiles before that branch lands. Replaced by the real file at merge.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "Flavor",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct FlavorSpec {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<FlavorTaint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_level: Option<u8>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct FlavorTaint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
}

#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "FlavorBinding",
    status = "FlavorBindingStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct FlavorBindingSpec {
    pub node: String,
    pub flavor: String,
    pub token_id: String,
    #[serde(default)]
    pub csr_name: String,
    #[serde(default)]
    pub public_key_sha256: String,
    #[serde(default)]
    pub bound_at: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FlavorBindingStatus {
    #[serde(default)]
    pub conditions: Vec<BindingCondition>,
    #[serde(default)]
    pub applied_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub applied_taints: Vec<FlavorTaint>,
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BindingCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub last_transition_time: Option<String>,
}
