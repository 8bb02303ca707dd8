//! `install --monitoring`: what the Prometheus Operator and Grafana need to watch
//! kubeflavor: a PodMonitor for the controller's and the join-token API's /metrics, the
//! alert rules as a PrometheusRule, and the dashboard as a ConfigMap Grafana's dashboard
//! sidecar loads (label `grafana_dashboard: "1"`). The rules and the dashboard are the
//! repository's `monitoring/` files, embedded and printed byte for byte: a cluster without
//! the operator loads the same files as they are.

use serde_json::{Value, json};

use super::{Document, labels, object_meta};
use crate::connect::Cluster;
use crate::error::{CliError, Result};

/// The alert rules (a Prometheus rules file: `groups:`).
pub const RULES: &str = include_str!("../../../../../monitoring/kubeflavor-rules.yaml");
/// The Grafana dashboard (JSON).
pub const DASHBOARD: &str = include_str!("../../../../../monitoring/kubeflavor-dashboard.json");
/// The dashboard's key in the ConfigMap: the file Grafana's sidecar writes.
pub const DASHBOARD_KEY: &str = "kubeflavor.json";
/// The name of every monitoring object.
const NAME: &str = "kubeflavor";
const COMPONENT: &str = "monitoring";

/// The PodMonitor, the PrometheusRule and the dashboard's ConfigMap.
pub fn documents(namespace: &str) -> Vec<Document> {
    vec![
        pod_monitor(namespace),
        rules(namespace),
        dashboard(namespace),
    ]
}

/// Scrapes the port named `http` (/metrics) of the controller's and the join-token API's
/// pods: no Service needed, and every replica is scraped (each answers on its own: the
/// leader's census, every replica's webhook answers).
fn pod_monitor(namespace: &str) -> Document {
    let object = json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": object_meta(NAME, Some(namespace), COMPONENT),
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "kubeflavor"},
                "matchExpressions": [{
                    "key": "app.kubernetes.io/component",
                    "operator": "In",
                    "values": ["controller", "serve"],
                }],
            },
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "30s"}],
        },
    });
    Document::new(
        "PodMonitor: the Prometheus Operator scrapes /metrics of every controller and \
         join-token API pod. A Prometheus selects PodMonitors by label \
         (spec.podMonitorSelector): add the label yours selects (kube-prometheus-stack: \
         release: <its release name>) or let it select all.",
        &object,
    )
    .note(
        "spec.podMetricsEndpoints",
        "The pods' port named http: /metrics, /healthz and /readyz on plain HTTP.",
    )
}

/// The alert rules, as the PrometheusRule's spec.
fn rules(namespace: &str) -> Document {
    let spec: Value =
        serde_saphyr::from_str(RULES).expect("monitoring/kubeflavor-rules.yaml is YAML");
    let object = json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": object_meta(NAME, Some(namespace), COMPONENT),
        "spec": spec,
    });
    let mut doc = Document::new(
        "PrometheusRule: kubeflavor's alerts (attacks on enrollment, drift, the join-token API, \
         the authorization webhook); the README's Monitoring section says what each means and \
         what to do. The spec is monitoring/kubeflavor-rules.yaml as it is; without the \
         operator, load that file with rule_files. A Prometheus selects rules by label \
         (spec.ruleSelector): add the label yours selects.",
        &object,
    );
    doc.verbatim = Some(("spec", indent(RULES, 2)));
    doc
}

/// The dashboard in a ConfigMap labelled for Grafana's dashboard sidecar.
fn dashboard(namespace: &str) -> Document {
    let mut meta = object_meta("kubeflavor-dashboard", Some(namespace), COMPONENT);
    let mut l = labels(COMPONENT);
    l.insert("grafana_dashboard".into(), "1".into());
    meta.labels = Some(l);
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {DASHBOARD_KEY: DASHBOARD},
    });
    let mut doc = Document::new(
        "ConfigMap: the kubeflavor Grafana dashboard (monitoring/kubeflavor-dashboard.json as \
         it is). Grafana's dashboard sidecar (kube-prometheus-stack's default) loads \
         ConfigMaps labelled grafana_dashboard: \"1\" from the namespaces it watches; without \
         it, import the file in Grafana. It asks for a Prometheus data source.",
        &object,
    );
    doc.verbatim = Some((
        "data",
        format!("  {DASHBOARD_KEY}: |\n{}", indent(DASHBOARD, 4)),
    ));
    doc
}

/// The Prometheus Operator's API, and the kinds `--monitoring` applies from it.
const OPERATOR_API: &str = "monitoring.coreos.com/v1";
const OPERATOR_KINDS: [&str; 2] = ["podmonitors", "prometheusrules"];

/// `install --apply --monitoring` refuses, before applying anything, on an API server
/// that does not serve the operator's PodMonitor and PrometheusRule: they would be
/// refused halfway through the install set.
pub async fn refuse_without_operator(cluster: &Cluster) -> Result<()> {
    let served = match cluster.client.list_api_group_resources(OPERATOR_API).await {
        Ok(list) => OPERATOR_KINDS
            .iter()
            .all(|kind| list.resources.iter().any(|r| r.name == *kind)),
        // The group is not served: a 404, as a Status or as plain text.
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => {
            return Err(cluster.error(
                &format!("ask the API server whether it serves {OPERATOR_API}"),
                e,
            ));
        }
    };
    if served {
        return Ok(());
    }
    Err(CliError::failed(
        format!(
            "this API server does not serve the Prometheus Operator's PodMonitor and PrometheusRule ({OPERATOR_API}); nothing was applied"
        ),
        "install the Prometheus Operator first, or leave out --monitoring: load monitoring/kubeflavor-rules.yaml with rule_files and import monitoring/kubeflavor-dashboard.json in Grafana",
    ))
}

/// `text` with every non-empty line indented by `by` spaces.
fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("{pad}{l}\n")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_files_are_json_and_a_rules_file() {
        let dashboard: Value = serde_json::from_str(DASHBOARD).expect("dashboard JSON");
        assert_eq!(dashboard["uid"], "kubeflavor");
        let rules: Value = serde_saphyr::from_str(RULES).expect("rules YAML");
        assert!(!rules["groups"].as_array().expect("groups").is_empty());
    }

    #[test]
    fn indent_leaves_empty_lines_empty() {
        assert_eq!(indent("a:\n\n  b\n", 2), "  a:\n\n    b\n");
    }
}
