//! The alerts and the dashboard of `monitoring/` read only what the binaries expose: after
//! a walkthrough-sized run (two flavors, three joins, one of them through the join-token
//! API, a takeover attempt, a portal refused a flavor, a caller without a token), the
//! controller's and the join-token API's /metrics are scraped over HTTP as a reader without
//! OpenMetrics gets them, and every metric, label and label value the rules and the
//! dashboard name must be among them.
//!
//! With `KUBEFLAVOR_MONITORING_OUT=DIR` the scrapes and the dashboard's expressions (as
//! recording rules) are written there, for `promtool check metrics` and `promtool check
//! rules` (CI does), and `timeline.json`: both scrapes after each step of the run, from
//! which `monitoring/picture.py` draws the dashboard's picture.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use kube::Api;
use kube::api::PostParams;
use kubeflavor::connect::{Cluster, ClusterArgs};
use kubeflavor::serve::{self, ConnectionLimits, TlsSource};
use kubeflavor_cluster::crd::Flavor;
use kubeflavor_core::token::BootstrapToken;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;
use crate::promql::{Scrape, reads};
use crate::support::https::HttpsClient;

const RULES: &str = include_str!("../../../../monitoring/kubeflavor-rules.yaml");
const DASHBOARD: &str = include_str!("../../../../monitoring/kubeflavor-dashboard.json");
/// Labels Prometheus adds to every scraped series: not the binaries' to expose.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// GET `path` over plain HTTP/1.1, as a scraper that does not ask for OpenMetrics does;
/// the Content-Type and the body.
async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (content_type, body.to_string())
}

/// Both scrapes after each step of the run, kept only when they are to be written out.
struct Timeline {
    out: Option<std::path::PathBuf>,
    ops: [SocketAddr; 2],
    steps: Vec<Value>,
}

impl Timeline {
    /// Keeps both scrapes once the controller's shows the step: each sample named in
    /// `settled` (a sample line up to its value) at least at its value. Some counters are
    /// written just after what the test waits for (a CSR's Denied condition, a Node's
    /// labels), so a scrape right then could show the step's metrics one step late; only
    /// the picture waits for them, none of the test's checks does.
    async fn step(&mut self, what: &str, settled: &[(&str, f64)]) {
        if self.out.is_none() {
            return;
        }
        let shows = |text: &str| {
            settled.iter().all(|(sample, at_least)| {
                text.lines().any(|l| {
                    l.strip_prefix(sample)
                        .and_then(|v| v.strip_prefix(' '))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .is_some_and(|v| v >= *at_least)
                })
            })
        };
        let controller = within(&format!("the scrape to show {what:?}"), async {
            loop {
                let (_, text) = get(self.ops[0], "/metrics").await;
                if shows(&text) {
                    return text;
                }
                // A scrape announces no change: this paces a poll bounded by `within`,
                // run only to draw the picture (KUBEFLAVOR_MONITORING_OUT); no assertion
                // waits on it.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        let (_, serve) = get(self.ops[1], "/metrics").await;
        self.steps
            .push(json!({"step": what, "controller": controller, "serve": serve}));
    }
}

const FLAVORED: &str = "kubeflavor_flavored_nodes";

/// Every PromQL expression of the rules (with the alert's name and its annotations) and
/// of the dashboard (with the panel's title).
fn expressions() -> Vec<(String, String, String)> {
    let rules: Value = serde_saphyr::from_str(RULES).expect("rules YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            out.push((
                format!("alert {}", rule["alert"].as_str().unwrap_or("?")),
                rule["expr"].as_str().expect("expr").to_string(),
                rule["annotations"].to_string(),
            ));
        }
    }
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("dashboard JSON");
    fn panels(v: &Value, out: &mut Vec<(String, String, String)>) {
        for p in v.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push((
                    format!("panel {:?}", p["title"].as_str().unwrap_or("?")),
                    t["expr"].as_str().expect("expr").to_string(),
                    String::new(),
                ));
            }
            panels(&p["panels"], out);
        }
    }
    panels(&dashboard["panels"], &mut out);
    out
}

/// What `expr` (of `what`) reads that `scrape` does not have, one line each.
fn missing(scrape: &Scrape, what: &str, expr: &str, annotations: &str) -> Vec<String> {
    let r = reads(expr);
    let mut problems = Vec::new();
    let mut labels_read: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    for sel in &r.selectors {
        let Some(labels) = scrape.series.get(&sel.metric) else {
            problems.push(format!("{what}: metric {} is not exposed", sel.metric));
            continue;
        };
        labels_read.extend(labels.keys().cloned());
        for m in &sel.matchers {
            let Some(values) = labels.get(&m.label) else {
                problems.push(format!("{what}: {} has no label {}", sel.metric, m.label));
                continue;
            };
            let plain = m
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_|".contains(c));
            // Values an equality selects must exist; a negative matcher's need not (a run
            // need not meet every value it leaves out).
            let named: Vec<&str> = match m.op.as_str() {
                "=" => vec![m.value.as_str()],
                "=~" if plain => m.value.split('|').collect(),
                _ => Vec::new(), // a pattern such as 5..: nothing to look up
            };
            for v in named {
                if !values.contains(v) {
                    problems.push(format!(
                        "{what}: {}{{{}}} never has the value {v:?} (it has {values:?})",
                        sel.metric, m.label
                    ));
                }
            }
        }
    }
    for label in &r.grouping {
        if !labels_read.contains(label) {
            problems.push(format!(
                "{what}: groups by {label}, which none of its metrics has"
            ));
        }
    }
    // Annotations may name only labels the alert's expression keeps.
    for part in annotations.split("$labels.").skip(1) {
        let label: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !r.grouping.contains(&label) && !r.selectors.is_empty() {
            problems.push(format!(
                "{what}: its annotations name $labels.{label}, which its expression drops"
            ));
        }
    }
    problems
}

#[test]
fn the_check_fails_on_a_metric_label_or_value_no_binary_exposes() {
    let scrape = Scrape::read("kubeflavor_x_total{cause=\"a\"} 1\n");
    assert!(
        missing(
            &scrape,
            "ok",
            r#"sum by (cause) (rate(kubeflavor_x_total{cause="a"}[5m]))"#,
            "$labels.cause"
        )
        .is_empty()
    );
    for (expr, annotations) in [
        (r#"rate(kubeflavor_y_total[5m])"#, ""),
        (r#"rate(kubeflavor_x_total{kind="a"}[5m])"#, ""),
        (r#"rate(kubeflavor_x_total{cause=~"a|typo"}[5m])"#, ""),
        (r#"sum by (flavor) (kubeflavor_x_total)"#, ""),
        (r#"sum(kubeflavor_x_total)"#, "{{ $labels.cause }}"),
    ] {
        assert!(
            !missing(&scrape, "bad", expr, annotations).is_empty(),
            "{expr} passed"
        );
    }
}

/// The run's Flavor `name` with a trust level.
async fn flavor(h: &Harness, name: &str, tier: &str, trust: u8) {
    let flavor: Flavor = serde_json::from_value(json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Flavor",
        "metadata": {"name": name},
        "spec": {"labels": {TIER_KEY: tier}, "trustLevel": trust},
    }))
    .expect("a Flavor");
    Api::<Flavor>::all(h.admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("Flavor created");
}

/// Files a CSR for `node` with `token`, waits for its approval, registers the Node and
/// waits until it carries `flavor`.
async fn join(h: &Harness, token: &BootstrapToken, node: &str, flavor: &str) {
    let csr = format!("csr-{node}");
    h.submit_csr(&h.bootstrap_client(token).await, &csr, node)
        .await;
    assert_eq!(
        condition_type(&h.decided(&csr).await).as_deref(),
        Some("Approved"),
        "{csr}"
    );
    h.register_node(
        &csr,
        node,
        &[],
        &[("kubeflavor.io/unverified", "NoSchedule")],
    )
    .await;
    h.node_until(node, "flavored", |n| label(n, FLAVOR_KEY) == Some(flavor))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_alerts_and_the_dashboard_read_is_exposed_after_a_walkthrough() {
    let h = Harness::start().await;
    let (sweet, sour) = (h.name("sweet"), h.name("sour"));
    flavor(&h, &sweet, "gold", 80).await;
    flavor(&h, &sour, "bronze", 20).await;
    // As `install --sole-approver` runs it: serving CSRs decided too, so the census of
    // competing serving approvers is taken.
    let mut opts = h.options("ctl");
    opts.approve_serving = true;
    let ctl = h.start_controller(opts);
    // The controller's /metrics, served as `controller --http-address` serves it.
    let listener = kubeflavor_cluster::ops::http::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let ctl_addr = listener.local_addr().unwrap();
    let (stop_ops, ops_stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(kubeflavor_cluster::ops::http::serve(
        listener,
        ctl.health.clone(),
        Arc::new(ctl.metrics.clone()),
        async {
            let _ = ops_stopped.await;
        },
    ));
    // The join-token API, with its /metrics, observing nodes.
    let ca_dir = tempfile::tempdir().expect("a temporary directory");
    let cluster = Cluster::connect(&ClusterArgs {
        kubeconfig: Some(h.env.kubeconfig.clone()),
        context: None,
    })
    .await
    .expect("admin kubeconfig");
    let bound = serve::bind(
        cluster,
        serve::Options {
            address: "127.0.0.1:0".parse().unwrap(),
            tls: TlsSource::SelfSigned {
                names: vec!["127.0.0.1".into()],
            },
            ops_address: Some("127.0.0.1:0".parse().unwrap()),
            per_minute: 60,
            burst: 10,
            audience: None,
            instance: h.name("serve"),
            connections: ConnectionLimits::default(),
            administrators: None,
            portal: None,
            observing: Some(serve::Observing {
                node_client_ca: h.cluster_ca(ca_dir.path()),
                kubelet_port: 0,
            }),
        },
    )
    .await
    .expect("the API binds");
    let serve_ops = bound.ops_addr().expect("ops address");
    let api = HttpsClient::new(
        bound.local_addr().unwrap(),
        bound.self_signed_pem.as_deref().expect("self-signed"),
    );
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.serve(async {
        let _ = api_stopped.await;
    }));

    let out = std::env::var_os("KUBEFLAVOR_MONITORING_OUT").map(std::path::PathBuf::from);
    let mut timeline = Timeline {
        out: out.clone(),
        ops: [ctl_addr, serve_ops],
        steps: Vec::new(),
    };
    timeline.step("start", &[("kubeflavor_leader", 1.0)]).await;

    // The owner's joins.
    let (node_a, node_b) = (h.name("node-a"), h.name("node-b"));
    join(&h, &h.token(&sweet, 1, None).await, &node_a, &sweet).await;
    timeline.step("sweet node joins", &[(FLAVORED, 1.0)]).await;
    // It reports its network and is observed (from an address no Site holds: unknown).
    let (identity, node_cluster) = h.node_reporter(&format!("csr-{node_a}"), &node_a).await;
    let observer = kubeflavor::report::Observer {
        url: format!("https://{}", api.addr()),
        ca_pem: Some(api.pem().as_bytes().to_vec()),
        source: None,
    };
    kubeflavor::report::report(
        &node_cluster,
        &identity,
        &Default::default(),
        Some(&observer),
    )
    .await
    .expect("the sweet node reports and is observed");
    h.node_until(&node_a, "labelled with its observed site", |n| {
        label(n, kubeflavor_core::network::SITE_LABEL).is_some()
    })
    .await;
    timeline
        .step(
            "sweet node observed",
            &[(r#"kubeflavor_nodes_by_observed_site{site="unknown"}"#, 1.0)],
        )
        .await;
    let sour_token = h.token(&sour, 2, None).await;
    join(&h, &sour_token, &node_b, &sour).await;
    timeline.step("sour node joins", &[(FLAVORED, 2.0)]).await;
    // A sour token holder asks for the sweet node's name: a takeover, denied.
    let takeover = h.name("csr-takeover");
    h.submit_csr(&h.bootstrap_client(&sour_token).await, &takeover, &node_a)
        .await;
    assert_eq!(
        condition_type(&h.decided(&takeover).await).as_deref(),
        Some("Denied")
    );
    timeline
        .step(
            "takeover denied",
            &[(
                r#"kubeflavor_csr_decisions_total{outcome="denied",cause="name_bound_to_other_token"}"#,
                1.0,
            )],
        )
        .await;
    // A partner's portal mints sour, is refused sweet; a caller without a token is refused.
    let portal =
        crate::support::portal::portal(&h.admin, "default", &h.name("portal"), &[&sour]).await;
    let path = |f: &str| format!("/v1/flavors/{f}/jointokens");
    let (code, minted) = api
        .post(
            &path(&sour),
            Some(&portal),
            None,
            br#"{"issuedTo": "acme-corp/alice", "ttl": "1h"}"#,
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{minted}");
    timeline.step("portal mints sour", &[]).await;
    let (code, _) = api.post(&path(&sweet), Some(&portal), None, b"{}").await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    timeline.step("portal refused sweet", &[]).await;
    let (code, _) = api.post(&path(&sour), None, None, b"{}").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    timeline.step("no token: refused", &[]).await;
    let minted: BootstrapToken = minted["token"]
        .as_str()
        .expect("a token")
        .parse()
        .expect("a token");
    join(&h, &minted, &h.name("node-c"), &sour).await;
    timeline
        .step("portal's node joins", &[(FLAVORED, 3.0)])
        .await;

    let (ctl_type, ctl_text) = get(ctl_addr, "/metrics").await;
    let (serve_type, serve_text) = get(serve_ops, "/metrics").await;
    for t in [&ctl_type, &serve_type] {
        assert!(t.starts_with("text/plain; version=0.0.4"), "{t}");
    }
    let mut scrape = Scrape::read(&ctl_text);
    scrape.extend(Scrape::read(&serve_text));
    let bound_flavors = &scrape.series["kubeflavor_bound_nodes"]["flavor"];
    assert!(
        bound_flavors.contains(&sweet) && bound_flavors.contains(&sour),
        "{ctl_text}"
    );

    let mut problems = Vec::new();
    let exprs = expressions();
    assert!(exprs.len() > 30, "{} expressions", exprs.len());
    for (what, expr, annotations) in &exprs {
        problems.extend(missing(&scrape, what, expr, annotations));
    }
    assert!(
        problems.is_empty(),
        "the rules or the dashboard read what no binary exposes:\n{}\n\ncontroller:\n{ctl_text}\nserve:\n{serve_text}",
        problems.join("\n")
    );

    if let Some(dir) = &out {
        std::fs::create_dir_all(dir).expect("output directory");
        let run = json!({"run_id": h.env.run_id, "steps": timeline.steps});
        std::fs::write(dir.join("timeline.json"), run.to_string()).unwrap();
        std::fs::write(dir.join("controller.prom"), &ctl_text).unwrap();
        std::fs::write(dir.join("serve.prom"), &serve_text).unwrap();
        let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
        for (i, (_, expr, _)) in exprs
            .iter()
            .filter(|(w, _, _)| w.starts_with("panel"))
            .enumerate()
        {
            let expr = expr.replace("$__rate_interval", "5m");
            rules.push_str(&format!(
                "      - record: dashboard:expr{i}\n        expr: {}\n",
                serde_json::to_string(&expr).unwrap()
            ));
        }
        std::fs::write(dir.join("dashboard-exprs.rules.yaml"), rules).unwrap();
    }
    let _ = stop_api.send(());
    let _ = stop_ops.send(());
    ctl.stop().await;
}
