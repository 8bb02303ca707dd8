//! P9, observed is not claimed, end to end: two nodes of one flavor report their networks
//! and are observed by the join-token API from two different addresses (loopback
//! addresses of two Sites made for this run); each gets its own observed site (and the
//! site's zone), the one whose report lies about its prefix gets its claim refused (not
//! copied, an Event, the Site the flavor does not allow taints it), a node cannot write
//! another node's report nor the status of its own, and a connection without a node's
//! certificate, or from a revoked node, is not observed.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeflavor::connect::Cluster;
use kubeflavor::report::{self, Identity, Observer};
use kubeflavor_cluster::crd::network::{
    NodeReport, NodeReportSpec, ReportedGateway, ReportedInterface, Site,
};
use kubeflavor_core::network::{CLAIMED_PREFIX, SITE_LABEL, SITE_NOT_ALLOWED_TAINT, ZONE_LABEL};

use crate::harness::*;
use crate::support::https;

/// The flavor, with its Sites: `lyon` (allowed, zone `lyon-a`) and `paris`, each a /28 of a
/// loopback /24 chosen at random for this run, so runs side by side have their own.
struct Network {
    flavor: String,
    lyon: String,
    paris: String,
    /// The run's loopback /24, as `127.a.b.`.
    base: String,
}

async fn sites(h: &Harness) -> Network {
    let bytes = loopback_pair(&h.env.run_id);
    let base = format!("127.{}.{}.", bytes.0, bytes.1);
    let (lyon, paris) = (h.name("lyon"), h.name("paris"));
    let sites: Api<Site> = Api::all(h.admin.clone());
    for (name, range, zone) in [
        (&lyon, format!("{base}0/28"), Some("lyon-a")),
        (&paris, format!("{base}16/28"), None),
    ] {
        let site: Site = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Site",
            "metadata": {"name": name},
            "spec": {"ranges": [range], "zone": zone},
        }))
        .unwrap();
        sites
            .create(&PostParams::default(), &site)
            .await
            .expect("site created");
    }
    let flavor = h.name("placed");
    let object: kubeflavor_cluster::crd::Flavor = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "Flavor",
        "metadata": {"name": flavor},
        "spec": {"labels": {TIER_KEY: "gold"}, "allowedSites": [lyon]},
    }))
    .unwrap();
    Api::<kubeflavor_cluster::crd::Flavor>::all(h.admin.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("flavor created");
    Network {
        flavor,
        lyon,
        paris,
        base,
    }
}

/// Two bytes in 1..=254 (the second and third of a loopback address) from the run's id,
/// which is random: runs side by side get their own /24.
fn loopback_pair(run_id: &str) -> (u8, u8) {
    let hash = run_id
        .bytes()
        .fold(17u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    ((hash % 254 + 1) as u8, ((hash / 254) % 254 + 1) as u8)
}

/// A node of `flavor` that joined and registered: its name, its identity and its client.
async fn joined(h: &Harness, flavor: &str, base: &str) -> (String, Identity, Cluster) {
    let node = h.name(&format!("node-{base}"));
    let csr = h.name(&format!("csr-{base}"));
    h.join_and_register(flavor, &node, &csr).await;
    let (identity, cluster) = h.node_reporter(&csr, &node).await;
    (node, identity, cluster)
}

/// A report claiming `address/28`, its gateway the first address of that /28.
fn claim(address: &str, gateway: &str) -> NodeReportSpec {
    NodeReportSpec {
        interfaces: vec![ReportedInterface {
            name: "ens3".into(),
            mac: Some("52:54:00:12:34:56".into()),
            addresses: vec![format!("{address}/28")],
            macvlan: false,
        }],
        default_gateway: Some(ReportedGateway {
            address: gateway.into(),
            mac: Some("52:54:00:00:00:01".into()),
        }),
        dhcp_domain: Some("lab.example".into()),
        ..NodeReportSpec::default()
    }
}

fn taints(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_gets_the_site_it_was_observed_on_and_a_lying_claim_is_refused() {
    let h = Harness::start().await;
    let net = sites(&h).await;
    let ctl = h.start_controller(h.options("ctl"));
    let dir = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (api, task) = https::serve_observing(
        &h.env.kubeconfig,
        "serve-observer",
        h.cluster_ca(dir.path()),
        "127.0.0.1:0".parse().unwrap(),
        async {
            let _ = stopped.await;
        },
    )
    .await
    .expect("serve binds");
    let observer = |source: &str| Observer {
        url: format!("https://{}", api.addr()),
        ca_pem: Some(api.pem().as_bytes().to_vec()),
        source: Some(source.parse().unwrap()),
    };

    // Not a node's certificate: not observed.
    let (code, answer) = api.post("/v1/observations", None, None, b"").await;
    assert_eq!(code, 401, "{answer}");

    let (honest, honest_id, honest_cluster) = joined(&h, &net.flavor, "honest").await;
    let (liar, liar_id, liar_cluster) = joined(&h, &net.flavor, "liar").await;
    // Registered and flavored, not yet observed: a flavor with sites keeps them off.
    for node in [&honest, &liar] {
        h.node_until(node, "flavored and kept off until observed", |n| {
            label(n, FLAVOR_KEY).is_some() && taints(n).iter().any(|t| t == SITE_NOT_ALLOWED_TAINT)
        })
        .await;
    }

    // The honest node, in lyon, says so.
    let lyon_addr = format!("{}5", net.base);
    let done = report::report(
        &honest_cluster,
        &honest_id,
        &claim(&lyon_addr, &format!("{}1", net.base)),
        Some(&observer(&lyon_addr)),
    )
    .await
    .expect("the honest node reports");
    assert_eq!(done.node, honest);
    assert_eq!(done.observed.as_deref(), Some(lyon_addr.as_str()));
    let n = h
        .node_until(&honest, "its site, zone and claims", |n| {
            label(n, SITE_LABEL) == Some(net.lyon.as_str())
                && label(n, &format!("{CLAIMED_PREFIX}site")).is_some()
        })
        .await;
    assert_eq!(label(&n, ZONE_LABEL), Some("lyon-a"));
    assert_eq!(
        label(&n, &format!("{CLAIMED_PREFIX}site")),
        Some(net.lyon.as_str())
    );
    assert_eq!(
        label(&n, &format!("{CLAIMED_PREFIX}gateway-mac")),
        Some("52-54-00-00-00-01")
    );
    let n = h
        .node_until(&honest, "allowed on its site", |n| {
            !taints(n).iter().any(|t| t == SITE_NOT_ALLOWED_TAINT)
        })
        .await;
    assert_eq!(label(&n, FLAVOR_KEY), Some(net.flavor.as_str()));

    // The liar connects from paris and claims a lyon prefix.
    let paris_addr = format!("{}20", net.base);
    report::report(
        &liar_cluster,
        &liar_id,
        &claim(&lyon_addr, &format!("{}1", net.base)),
        Some(&observer(&paris_addr)),
    )
    .await
    .expect("the liar's report is written, and it is observed");
    let reports: Api<NodeReport> = Api::all(h.admin.clone());
    let read = within(
        "the liar's claim judged",
        kube::runtime::wait::await_condition(reports.clone(), &liar, |r: Option<&NodeReport>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(|s| s.claim.as_ref())
                .is_some()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    let status = read.status.unwrap();
    assert_eq!(status.site.as_deref(), Some(net.paris.as_str()));
    assert_eq!(status.claim.as_ref().unwrap().verdict, "Contradicts");
    let observed = status.observed.expect("the observation is recorded");
    assert_eq!(observed.address, paris_addr);
    assert_eq!(observed.observer, "serve-observer");
    let n = h
        .node_until(&liar, "observed in paris", |n| {
            label(n, SITE_LABEL) == Some(net.paris.as_str())
        })
        .await;
    assert!(
        n.metadata
            .labels
            .as_ref()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with(CLAIMED_PREFIX)),
        "a contradicting claim is not copied: {:?}",
        n.metadata.labels
    );
    assert!(label(&n, ZONE_LABEL).is_none(), "paris names no zone");
    assert!(
        taints(&n).iter().any(|t| t == SITE_NOT_ALLOWED_TAINT),
        "the flavor allows lyon only"
    );
    let event = trail_event(
        &h,
        kubeflavor_core::admission::trail::CONTROLLER_REPORTER,
        &liar,
        &["but was observed on site"],
    )
    .await;
    assert_eq!(event.reason.as_deref(), Some("ClaimContradicted"));
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(&net.paris),
        "{event:?}"
    );

    // A node writes its own report only, and never its status.
    let as_liar: Api<NodeReport> = Api::all(liar_cluster.client.clone());
    let forged = serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1", "kind": "NodeReport",
        "metadata": {"name": honest},
        "spec": {"dhcpDomain": "forged.example"},
    });
    let err = as_liar
        .patch(
            &honest,
            &PatchParams::apply("forger").force(),
            &Patch::Apply(&forged),
        )
        .await
        .expect_err("a node may not write another node's report");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 || s.code == 422),
        "{err}"
    );
    let own_status = serde_json::json!({"status": {"site": net.lyon, "observed": {
        "address": lyon_addr, "method": "tls-client-certificate", "observer": "me", "at": "2026-12-03T00:00:00Z"}}});
    let err = as_liar
        .patch_status(&liar, &PatchParams::default(), &Patch::Merge(&own_status))
        .await
        .expect_err("a node may not write what kubeflavor observed");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    assert!(
        as_liar.get(&honest).await.is_err(),
        "a node may not read another node's report"
    );

    // A revoked node is observed no more.
    h.env.kf(&["node", "revoke", &liar]).await.expect_ok();
    let refused = report::observe(&observer(&paris_addr), &liar_id)
        .await
        .expect_err("a revoked node is not observed");
    assert!(
        refused.contains("403") && refused.contains("revoked"),
        "{refused}"
    );

    let _ = stop.send(());
    let _ = task.await;
    ctl.stop().await;
    for name in [&net.lyon, &net.paris] {
        let _ = Api::<Site>::all(h.admin.clone())
            .delete(name, &Default::default())
            .await;
    }
    for name in [&honest, &liar] {
        let _ = reports.delete(name, &Default::default()).await;
    }
}
