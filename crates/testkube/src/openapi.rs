//! Just enough OpenAPI v3 for kubectl: the root index of group-versions and, per
//! group-version, the PATCH operations tagged with their GroupVersionKind and the
//! `fieldValidation` query parameter. kubectl (`--validate=strict`, its default) then leaves
//! validation to the server (`?fieldValidation=Strict`) instead of downloading OpenAPI v2
//! schemas, which testkube does not serve. No object schemas are published.

use serde_json::{Value, json};

use crate::resources;
use crate::types::ObjectReader;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`.
pub fn root(reader: &dyn ObjectReader) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs = vec![(String::new(), "v1".to_string())];
    for (group, versions) in resources::groups(reader) {
        gvs.extend(versions.into_iter().map(|v| (group.clone(), v)));
    }
    for (group, version) in gvs {
        let path = gv_path(&group, &version);
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}")}),
        );
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/<api/v1 | apis/<group>/<version>>`, or `None` for an unknown one.
pub fn group_version(reader: &dyn ObjectReader, path: &str) -> Option<Value> {
    let (group, version) = match path
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", version] => (String::new(), version.to_string()),
        ["apis", group, version] => (group.to_string(), version.to_string()),
        _ => return None,
    };
    let list = resources::resources_in(reader, &group, &version);
    if list.is_empty() {
        return None;
    }
    let prefix = format!("/{}", gv_path(&group, &version));
    let mut paths = serde_json::Map::new();
    for r in list.iter().filter(|r| r.verbs.contains(&"patch")) {
        let item = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.resource)
        } else {
            format!("{prefix}/{}/{{name}}", r.resource)
        };
        paths.insert(
            item,
            json!({"patch": {
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                ],
            }}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.2"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
