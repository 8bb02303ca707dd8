//! Discovery documents: legacy `/api`, `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`
//! (APIVersions, APIResourceList, APIGroupList, APIGroup), aggregated discovery v2 for
//! kubectl, and `/version`.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::errors::{not_acceptable, page_not_found};
use crate::handlers::route::Discovery;
use crate::resources::{self, ResourceInfo};
use crate::types::{ApiError, ObjectReader};

pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// A discovery answer: the JSON and, for aggregated discovery, its content type and Etag.
pub struct DiscoveryDoc {
    pub body: Value,
    pub aggregated: bool,
}

impl DiscoveryDoc {
    pub fn etag(&self) -> String {
        format!(
            "\"{}\"",
            hex::encode_upper(Sha256::digest(self.body.to_string().as_bytes()))
        )
    }
}

/// What the Accept header asks for: aggregated v2, legacy, or only something unsupported.
fn negotiate(accept: Option<&str>) -> Result<bool, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(false);
    };
    let mut legacy_ok = false;
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let base = params[0];
        let has = |p: &str| params.contains(&p);
        if has("as=APIGroupDiscoveryList") {
            if has("v=v2") && has("g=apidiscovery.k8s.io") {
                return Ok(true);
            }
            continue;
        }
        if matches!(
            base,
            "application/json" | "*/*" | "application/*" | "application/yaml"
        ) {
            legacy_ok = true;
        }
    }
    if legacy_ok {
        Ok(false)
    } else {
        Err(not_acceptable())
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn resource_entries(list: &[ResourceInfo]) -> Vec<Value> {
    let mut out = Vec::new();
    for r in list {
        let mut entry = json!({
            "name": r.resource,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if r.custom {
            entry["categories"] = json!(["all"]);
        }
        out.push(entry);
        for sub in &r.subresources {
            let (group, version, kind, verbs) = r.subresource_meta(sub);
            let mut entry = json!({
                "name": format!("{}/{sub}", r.resource),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if !group.is_empty() {
                entry["group"] = json!(group);
                entry["version"] = json!(version);
            }
            out.push(entry);
        }
    }
    out
}

fn legacy(
    reader: &dyn ObjectReader,
    which: &Discovery,
    server_address: &str,
) -> Result<Value, ApiError> {
    match which {
        Discovery::Api => Ok(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        })),
        Discovery::Apis => {
            let groups: Vec<Value> = resources::groups(reader)
                .into_iter()
                .map(|(g, vs)| group_doc(&g, &vs))
                .collect();
            Ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        Discovery::Group(group) => {
            let (g, vs) = resources::groups(reader)
                .into_iter()
                .find(|(g, _)| g == group)
                .ok_or_else(page_not_found)?;
            let mut doc = group_doc(&g, &vs);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            Ok(doc)
        }
        Discovery::GroupVersion(group, version) => {
            let list = resources::resources_in(reader, group, version);
            if list.is_empty() {
                return Err(page_not_found());
            }
            let mut doc = json!({
                "kind": "APIResourceList",
                "groupVersion": group_version(group, version),
                "resources": resource_entries(&list),
            });
            if !group.is_empty() {
                doc["apiVersion"] = json!("v1");
            }
            Ok(doc)
        }
    }
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(group, v), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs[0]})
}

fn aggregated_version(reader: &dyn ObjectReader, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = resources::resources_in(reader, group, version)
        .iter()
        .map(|r| {
            let mut entry = json!({
                "resource": r.resource,
                "responseKind": {"group": "", "version": "", "kind": r.kind},
                "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": r.singular,
                "verbs": r.verbs,
            });
            if !r.short_names.is_empty() {
                entry["shortNames"] = json!(r.short_names);
            }
            if r.custom {
                entry["categories"] = json!(["all"]);
            }
            if !r.subresources.is_empty() {
                entry["subresources"] = Value::Array(
                    r.subresources
                        .iter()
                        .map(|s| {
                            let (group, version, kind, verbs) = r.subresource_meta(s);
                            json!({
                                "subresource": s,
                                "responseKind": {"group": group, "version": version, "kind": kind},
                                "verbs": verbs,
                            })
                        })
                        .collect(),
                );
            }
            entry
        })
        .collect();
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

fn aggregated(reader: &dyn ObjectReader, which: &Discovery) -> Option<Value> {
    let items: Vec<Value> = match which {
        Discovery::Api => {
            vec![json!({"metadata": {}, "versions": [aggregated_version(reader, "", "v1")]})]
        }
        Discovery::Apis => resources::groups(reader)
            .into_iter()
            .map(|(g, vs)| {
                let versions: Vec<Value> = vs
                    .iter()
                    .map(|v| aggregated_version(reader, &g, v))
                    .collect();
                json!({"metadata": {"name": g}, "versions": versions})
            })
            .collect(),
        _ => return None,
    };
    Some(json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }))
}

pub fn document(
    reader: &dyn ObjectReader,
    which: &Discovery,
    accept: Option<&str>,
    server_address: &str,
) -> Result<DiscoveryDoc, ApiError> {
    let wants_aggregated = negotiate(accept)?;
    if wants_aggregated && let Some(body) = aggregated(reader, which) {
        return Ok(DiscoveryDoc {
            body,
            aggregated: true,
        });
    }
    Ok(DiscoveryDoc {
        body: legacy(reader, which, server_address)?,
        aggregated: false,
    })
}

/// `GET /version`: the Kubernetes version testkube imitates (v1.36).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "emulationMajor": "1",
        "emulationMinor": "36",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.2",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-11-30T00:00:00Z",
        "goVersion": "go1.26.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert!(negotiate(Some(kubectl)).unwrap());
        assert!(!negotiate(Some("application/json")).unwrap());
        assert!(!negotiate(None).unwrap());
        let only_beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(negotiate(Some(only_beta)).unwrap_err().code, 406);
    }
}
