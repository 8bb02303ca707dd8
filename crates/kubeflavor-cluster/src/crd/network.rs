//! What kubeflavor knows of the nodes' networks (P9, observed is not claimed):
//! - `Site` (`sites.kubeflavor.io`): the owner names a site by its address ranges, and may
//!   give it a zone and region; a node observed at an address of those ranges is on that
//!   site (`kubeflavor_core::network`).
//! - `NodeReport` (`nodereports.kubeflavor.io`, named after its node): `spec` is what the
//!   node's reporter says of its network (claims, written with the node's own credentials;
//!   an admission policy ties the report to the node that writes it), `status.observed` what
//!   kubeflavor's join-token API saw of the node's TLS connection (its source address, the
//!   node's client certificate), `status.site` and `status.claim` the controller's reading.

use jiff::Timestamp;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use kubeflavor_core::flavor::cidr::Cidr;
use kubeflavor_core::network::{Claim, SiteEntry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, schema};

/// A site: the address ranges its nodes connect from.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "Site",
    plural = "sites",
    singular = "site",
    category = "kubeflavor",
    derive = "Default",
    derive = "PartialEq",
    doc = "A site of the owner's network: the address ranges a node's connections come from when it runs there. kubeflavor labels each node it observes with its site (observed.kubeflavor.node-restriction.kubernetes.io/site), and with the site's zone and region.",
    printcolumn = r#"{"name":"Ranges","type":"string","jsonPath":".spec.ranges"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".spec.zone"}"#,
    printcolumn = r#"{"name":"Region","type":"string","jsonPath":".spec.region"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SiteSpec {
    /// The IP ranges of the site (`10.20.0.0/16`, `2001:db8:20::/48`). The most specific
    /// range of all Sites holding an address decides its site; a range two Sites both name
    /// belongs to neither.
    #[schemars(schema_with = "schema::site_ranges")]
    pub ranges: Vec<String>,
    /// The `topology.kubernetes.io/zone` of nodes observed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::label_name")]
    pub zone: Option<String>,
    /// The `topology.kubernetes.io/region` of nodes observed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::label_name")]
    pub region: Option<String>,
}

impl Site {
    /// The site as core reads it.
    pub fn entry(&self) -> SiteEntry<'_> {
        SiteEntry {
            name: self.metadata.name.as_deref().unwrap_or(""),
            ranges: &self.spec.ranges,
            zone: self.spec.zone.as_deref(),
            region: self.spec.region.as_deref(),
        }
    }
}

/// One node's network: what it says (spec) and what kubeflavor observed (status).
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "kubeflavor.io",
    version = "v1alpha1",
    kind = "NodeReport",
    plural = "nodereports",
    singular = "nodereport",
    category = "kubeflavor",
    status = "NodeReportStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "What a node reports of its own network (spec: claims, written by the node's reporter with the node's credentials; an admission policy refuses a report for another node) and what kubeflavor observed of it (status). Named after the node.",
    printcolumn = r#"{"name":"Observed Address","type":"string","jsonPath":".status.observed.address"}"#,
    printcolumn = r#"{"name":"Site","type":"string","jsonPath":".status.site"}"#,
    printcolumn = r#"{"name":"Claim","type":"string","jsonPath":".status.claim.verdict"}"#,
    printcolumn = r#"{"name":"Observed","type":"date","jsonPath":".status.observed.at"}"#,
    printcolumn = r#"{"name":"Observer","type":"string","jsonPath":".status.observed.observer","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeReportSpec {
    /// The node's interfaces, as it lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub interfaces: Vec<ReportedInterface>,
    /// Its default gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_gateway: Option<ReportedGateway>,
    /// The domain its DHCP server (or resolver configuration) gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub dhcp_domain: Option<String>,
    /// The system name its LLDP neighbour announces, when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub lldp_neighbor: Option<String>,
    /// When the reporter wrote this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub reported_at: Option<Timestamp>,
}

/// One interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportedInterface {
    #[schemars(length(max = 64))]
    pub name: String,
    /// Its MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub mac: Option<String>,
    /// Its addresses with their prefix length (`10.20.5.9/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 64)))]
    pub addresses: Vec<String>,
    /// It is a macvlan interface (of a pod's or the host's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub macvlan: bool,
}

/// The default gateway, and its MAC as the neighbour table has it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportedGateway {
    #[schemars(length(max = 64))]
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub mac: Option<String>,
}

/// Written by kubeflavor: the join-token API's observation, the controller's reading.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeReportStatus {
    /// The last observation of the node from outside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<Observation>,
    /// The site the observed address is on (`unknown` when no Site holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// How the spec's claims compare with the observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimReading>,
    /// `ClaimConsistent`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// One observation: evidence for audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    /// The source address of the node's TLS connection.
    pub address: String,
    /// How the node was known: `tls-client-certificate` (its kubelet client certificate,
    /// `system:node:<name>`, verified against the cluster's CA).
    pub method: String,
    /// Who observed (the join-token API's instance).
    pub observer: String,
    #[schemars(schema_with = "schema::date_time")]
    pub at: Timestamp,
    /// Where the observer connected back to (the address above, the kubelet's port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_endpoint: Option<String>,
    /// What answered there: `verified` (a certificate the cluster's CA issued for that
    /// address, naming this node), `unverified`, `other-node` or `no-answer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_certificate: Option<String>,
    /// The TCP handshake's time when connecting back (the round trip), in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trip_microseconds: Option<u64>,
}

/// The controller's reading of the claims.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimReading {
    /// `Consistent` or `Contradicts`.
    pub verdict: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The reason `method` of an observation made over the node's client certificate.
pub const OBSERVED_BY_CLIENT_CERTIFICATE: &str = "tls-client-certificate";
/// The NodeReport condition saying whether the claims agree with the observation.
pub const CONDITION_CLAIM_CONSISTENT: &str = "ClaimConsistent";

impl NodeReport {
    /// The observed address, when there is one that reads.
    pub fn observed_address(&self) -> Option<std::net::IpAddr> {
        self.status
            .as_ref()?
            .observed
            .as_ref()?
            .address
            .parse()
            .ok()
    }

    /// What connecting back to the node gave: the verdict and the round trip, when the
    /// observer probed it.
    pub fn probe(&self) -> Option<(kubeflavor_core::network::probe::ServingVerdict, Option<u64>)> {
        let observed = self.status.as_ref()?.observed.as_ref()?;
        let verdict = kubeflavor_core::network::probe::ServingVerdict::parse(
            observed.serving_certificate.as_deref()?,
        )?;
        Some((verdict, observed.round_trip_microseconds))
    }

    /// The spec's claims as core reads them: addresses that do not read are left out (the
    /// report stays as written, for audit).
    pub fn claim(&self) -> Claim {
        let spec = &self.spec;
        Claim {
            prefixes: spec
                .interfaces
                .iter()
                .flat_map(|i| i.addresses.iter())
                .filter_map(|a| a.parse::<Cidr>().ok())
                .collect(),
            gateway: spec
                .default_gateway
                .as_ref()
                .and_then(|g| g.address.parse().ok()),
            gateway_mac: spec.default_gateway.as_ref().and_then(|g| g.mac.clone()),
            dhcp_domain: spec.dhcp_domain.clone(),
            lldp_neighbor: spec.lldp_neighbor.clone(),
        }
    }
}

/// `sites.kubeflavor.io`, with its name rule.
pub fn site_crd() -> CustomResourceDefinition {
    let mut crd = Site::crd();
    schema::add_root_rules(&mut crd, schema::site_root_rules());
    crd
}

/// `nodereports.kubeflavor.io`.
pub fn node_report_crd() -> CustomResourceDefinition {
    NodeReport::crd()
}
