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
use kubeflavor_core::network::probe::{ROUND_TRIP_LABEL, SERVING_LABEL};
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
        "spec": {"labels": {TIER_KEY: "gold"}, "allowedSites": [lyon],
            "servingAddresses": [format!("{base}0/24")]},
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

/// A kubelet's serving endpoint at `address` (port 0: any): every connection gets the TLS
/// handshake with the certificate of the serving CSR `csr` that `node` files for `names`
/// (issued once the controller approved it), then is closed. Its port.
async fn kubelet_serving(
    h: &Harness,
    node_client: &kube::Client,
    node: &str,
    csr: &str,
    ip_names: &[&str],
    address: std::net::SocketAddr,
) -> u16 {
    let mut ask = crate::serving::Ask::kubelet(node, ip_names[0]);
    ask.ips = ip_names.to_vec();
    let (filed, key) = crate::serving::file_with_key(node_client, csr, ask).await;
    filed.expect("the serving CSR is filed");
    crate::serving::issued(h, csr).await;
    let issued = h.csrs().get(csr).await.expect("the CSR");
    let pem = issued.status.unwrap().certificate.unwrap().0;
    use rustls_pki_types::pem::PemObject;
    let chain: Vec<rustls_pki_types::CertificateDer<'static>> =
        rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .expect("a PEM chain");
    let key = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("a TLS configuration");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind(address).await.expect("bind");
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    port
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
    let mut opts = h.options("ctl");
    opts.approve_serving = true;
    let ctl = h.start_controller(opts);
    let (honest, honest_id, honest_cluster) = joined(&h, &net.flavor, "honest").await;
    let (liar, liar_id, liar_cluster) = joined(&h, &net.flavor, "liar").await;
    let (lyon_addr, paris_addr) = (format!("{}5", net.base), format!("{}20", net.base));

    // The honest node's kubelet serves at its lyon address with the certificate issued for
    // it; at the liar's paris address answers a certificate issued to the honest node for
    // that address: another node's.
    let honest_client = honest_cluster.client.clone();
    let port = kubelet_serving(
        &h,
        &honest_client,
        &honest,
        &h.name("serving-honest"),
        &[&lyon_addr],
        format!("{lyon_addr}:0").parse().unwrap(),
    )
    .await;
    kubelet_serving(
        &h,
        &honest_client,
        &honest,
        &h.name("serving-elsewhere"),
        &[&paris_addr],
        format!("{paris_addr}:{port}").parse().unwrap(),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (api, task) = https::serve_observing(
        &h.env.kubeconfig,
        "serve-observer",
        h.cluster_ca(dir.path()),
        "127.0.0.1:0".parse().unwrap(),
        port,
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

    // Registered and flavored, not yet observed: a flavor with sites keeps them off.
    for node in [&honest, &liar] {
        h.node_until(node, "flavored and kept off until observed", |n| {
            label(n, FLAVOR_KEY).is_some() && taints(n).iter().any(|t| t == SITE_NOT_ALLOWED_TAINT)
        })
        .await;
    }

    // The honest node, in lyon, says so.
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
    // Connected back to at its address, it answers with its own serving certificate.
    assert_eq!(
        label(&n, SERVING_LABEL),
        Some("verified"),
        "{:?}",
        n.metadata.labels
    );
    assert!(
        label(&n, ROUND_TRIP_LABEL).is_some(),
        "{:?}",
        n.metadata.labels
    );
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
    assert_eq!(
        observed.serving_certificate.as_deref(),
        Some("other-node"),
        "at the liar's address answers the honest node's certificate"
    );
    assert_eq!(
        observed.kubelet_endpoint.as_deref(),
        Some(format!("{paris_addr}:{port}").as_str())
    );
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

    // What the admin reads of it.
    let out = h.env.kf(&["node", "get", &liar]).await;
    let out = out.expect_ok();
    let network = out
        .lines()
        .find_map(|l| l.strip_prefix("Network:"))
        .unwrap_or_default()
        .trim();
    assert!(
        network.starts_with(&format!("observed on site {} at {paris_addr}", net.paris))
            && network.contains("serving certificate there: other-node")
            && network.contains("claims Contradicts"),
        "{out}"
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
