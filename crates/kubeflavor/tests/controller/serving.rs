//! Kubelet serving CSRs (`--approve-serving`): a joined, flavored node gets its serving
//! certificate for its own name and the addresses its Flavor allows; every other shape is
//! denied with its exact cause in the admin trail, a revoked node gets nothing, and a node
//! kubeflavor never bound is left to others.

use std::net::IpAddr;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use kubeflavor_cluster::crd::Flavor;
use kubeflavor_core::csr::serving::KUBELET_SERVING_SIGNER;

use crate::harness::*;

/// How a test serving CSR is made.
pub struct Ask<'a> {
    cn: String,
    orgs: &'a [&'a str],
    dns: Vec<String>,
    pub ips: Vec<&'a str>,
    usages: &'a [&'a str],
    key: &'static rcgen::SignatureAlgorithm,
}

impl<'a> Ask<'a> {
    /// What a kubelet named `node` at `ip` asks for.
    pub fn kubelet(node: &str, ip: &'a str) -> Ask<'a> {
        Ask {
            cn: format!("system:node:{node}"),
            orgs: &["system:nodes"],
            dns: vec![node.to_string()],
            ips: vec![ip],
            usages: &["digital signature", "server auth"],
            key: &rcgen::PKCS_ECDSA_P256_SHA256,
        }
    }
}

/// Files the serving CSR `name` as `client`; the API server's answer.
async fn file(
    client: &Client,
    name: &str,
    ask: Ask<'_>,
) -> Result<CertificateSigningRequest, kube::Error> {
    file_with_key(client, name, ask).await.0
}

/// [`file`], with the key the CSR asks a certificate for.
pub async fn file_with_key(
    client: &Client,
    name: &str,
    ask: Ask<'_>,
) -> (
    Result<CertificateSigningRequest, kube::Error>,
    rcgen::KeyPair,
) {
    let key = rcgen::KeyPair::generate_for(ask.key).expect("key");
    let mut params = rcgen::CertificateParams::new(ask.dns.clone()).expect("names");
    for ip in &ask.ips {
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(ip.parse::<IpAddr>().expect("ip")));
    }
    for o in ask.orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *o);
    }
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ask.cn.clone());
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    let csr: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64_of(&pem),
            "signerName": KUBELET_SERVING_SIGNER,
            "usages": ask.usages,
        },
    }))
    .expect("a CSR object");
    let filed = Api::<CertificateSigningRequest>::all(client.clone())
        .create(&PostParams::default(), &csr)
        .await;
    (filed, key)
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The Flavor `name` allowing serving certificates for `ranges`.
async fn serving_flavor(h: &Harness, name: &str, ranges: &[&str]) {
    let flavor: Flavor = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflavor.io/v1alpha1",
        "kind": "Flavor",
        "metadata": {"name": name},
        "spec": {"labels": {TIER_KEY: "gold"}, "servingAddresses": ranges},
    }))
    .expect("flavor object");
    Api::<Flavor>::all(h.admin.clone())
        .create(&PostParams::default(), &flavor)
        .await
        .expect("flavor created");
}

/// Joins `node` with a token of `flavor` and returns its node identity.
async fn joined(h: &Harness, flavor: &str, node: &str) -> Client {
    let t = h.token(flavor, 1, None).await;
    let csr = h.name(&format!("client-{node}"));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    h.node_client(&csr).await
}

/// Waits until the CSR carries a certificate (kube-controller-manager signs approved
/// kubelet-serving CSRs on a real cluster).
pub async fn issued(h: &Harness, csr: &str) {
    let cond = |obj: Option<&CertificateSigningRequest>| {
        obj.and_then(|c| c.status.as_ref())
            .and_then(|s| s.certificate.as_ref())
            .is_some_and(|c| !c.0.is_empty())
    };
    within(
        &format!("serving CSR {csr} to be signed"),
        await_condition(h.csrs(), csr, cond),
    )
    .await
    .expect("watch works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flavored_nodes_serving_csr_is_approved_only_as_its_flavor_allows() {
    let h = Harness::start().await;
    let f = h.name("serving");
    serving_flavor(&h, &f, &["10.77.0.0/16"]).await;
    let mut opts = h.options("ctl");
    opts.approve_serving = true;
    let ctl = h.start_controller(opts);
    let node = h.name("node-s");
    let as_node = joined(&h, &f, &node).await;

    let ok = h.name("serving-ok");
    file(&as_node, &ok, Ask::kubelet(&node, "10.77.0.5"))
        .await
        .expect("filed");
    assert_eq!(h.decision(&ok).await, "Approved");
    issued(&h, &ok).await;

    let evil_dns = h.name("serving-dns");
    let mut ask = Ask::kubelet(&node, "10.77.0.5");
    ask.dns.push("evil.example".into());
    file(&as_node, &evil_dns, ask).await.expect("filed");
    let outside = h.name("serving-ip");
    file(&as_node, &outside, Ask::kubelet(&node, "192.0.2.7"))
        .await
        .expect("filed");
    let usages = h.name("serving-usages");
    file(
        &as_node,
        &usages,
        Ask {
            usages: &["digital signature", "client auth"],
            ..Ask::kubelet(&node, "10.77.0.5")
        },
    )
    .await
    .expect("filed");
    let rsa_usage_on_ec = h.name("serving-ke");
    file(
        &as_node,
        &rsa_usage_on_ec,
        Ask {
            usages: &["digital signature", "key encipherment", "server auth"],
            ..Ask::kubelet(&node, "10.77.0.5")
        },
    )
    .await
    .expect("filed");
    let key = h.name("serving-key");
    file(
        &as_node,
        &key,
        Ask {
            key: &rcgen::PKCS_ED25519,
            ..Ask::kubelet(&node, "10.77.0.5")
        },
    )
    .await
    .expect("filed");
    // The client-CSR corpus's wrong organization, aimed at the serving signer.
    let masters = h.name("serving-org");
    file(
        &as_node,
        &masters,
        Ask {
            orgs: &["system:masters"],
            ..Ask::kubelet(&node, "10.77.0.5")
        },
    )
    .await
    .expect("filed");
    for (csr, cause) in [
        (&evil_dns, "dns_name_not_node_name"),
        (&outside, "address_not_allowed"),
        (&usages, "not_kubelet_serving_shape"),
        (&rsa_usage_on_ec, "not_kubelet_serving_shape"),
        (&key, "key_not_allowed"),
        (&masters, "not_kubelet_serving_shape"),
    ] {
        assert_eq!(h.decision(csr).await, "Denied", "{csr}");
        let note = trail_names(&h, csr, &[cause]).await;
        assert!(
            !note.contains(&f),
            "the trail names the cause, not the flavor: {note}"
        );
        let decided = h.csrs().get(csr).await.expect("csr");
        let reasons: Vec<_> = decided
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.reason, c.message))
            .collect();
        assert_eq!(
            reasons,
            [(
                Some("KubeflavorDenied".to_string()),
                Some("Denied by kubeflavor. Ask the cluster administrator.".to_string())
            )],
            "one generic reason on the CSR"
        );
    }

    // Another node's name: NodeRestriction refuses the CSR before anyone decides.
    let other = h.name("node-other");
    let refused = file(
        &as_node,
        &h.name("serving-other"),
        Ask::kubelet(&other, "10.77.0.5"),
    )
    .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );

    // Revoked: the node's next serving CSR is denied.
    h.env.kf(&["node", "revoke", &node]).await.expect_ok();
    h.binding_until(&node, "revoked", |b| b.is_revoked()).await;
    let after = h.name("serving-revoked");
    let judged_revoked = match file(&as_node, &after, Ask::kubelet(&node, "10.77.0.5")).await {
        // Where the API server's admission reads the revocation list, a revoked kubelet
        // files nothing at all.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            assert!(s.message.contains("kubeflavor-revoked-nodes"), "{s:?}");
            false
        }
        Ok(_) => {
            assert_eq!(h.decision(&after).await, "Denied");
            trail_names(&h, &after, &["binding_revoked"]).await;
            // Its binding deleted, the Node keeps the revoked taint: still denied, not left
            // alone as a node kubeflavor never bound.
            h.register_node(&h.name(&format!("client-{node}")), &node, &[], &[])
                .await;
            h.delete_revoked_binding(&node).await;
            let unbound = h.name("serving-unbound");
            file(&as_node, &unbound, Ask::kubelet(&node, "10.77.0.5"))
                .await
                .expect("filed");
            assert_eq!(h.decision(&unbound).await, "Denied");
            trail_names(&h, &unbound, &["binding_revoked"]).await;
            true
        }
        Err(e) => panic!("a revoked node's serving CSR: {e:?}"),
    };

    let metrics = ctl.metrics.clone();
    ctl.stop().await;
    let text = metrics.render();
    for cause in [
        "ok",
        "dns_name_not_node_name",
        "address_not_allowed",
        "not_kubelet_serving_shape",
        "key_not_allowed",
        "binding_revoked",
    ] {
        if cause == "binding_revoked" && !judged_revoked {
            continue;
        }
        assert!(
            text.lines()
                .any(|l| l.starts_with("kubeflavor_serving_csr_decisions_total{")
                    && l.contains(&format!("cause=\"{cause}\""))
                    && !l.ends_with(" 0")),
            "{cause}: {text}"
        );
    }
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
}

/// `node get` shows a node judged (Flavored, the unverified taint gone), not revoked, not
/// cut off, and its latest serving CSR and its state (no authorization webhook here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_get_shows_the_node_judged_and_its_serving_certificate() {
    let h = Harness::start().await;
    let f = h.name("serving-get");
    serving_flavor(&h, &f, &["10.78.0.0/16"]).await;
    let mut opts = h.options("ctl");
    opts.approve_serving = true;
    let ctl = h.start_controller(opts);
    let node = h.name("node-g");
    let t = h.token(&f, 1, None).await;
    let csr = h.name("client-g");
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");

    // Bound, no Node yet: not judged, no serving CSR.
    let out = h.env.kf(&["node", "get", &node]).await;
    let out = out.expect_ok();
    assert!(standing_line(out, "Judged:").starts_with("no ("), "{out}");
    assert!(
        standing_line(out, "Judged:").ends_with(&format!("no Node {node})")),
        "{out}"
    );
    assert_eq!(standing_line(out, "Serving:"), "none", "{out}");

    h.register_node(
        &csr,
        &node,
        &[],
        &[("kubeflavor.io/unverified", "NoSchedule")],
    )
    .await;
    h.binding_until(&node, "flavored", |b| b.is_flavored())
        .await;
    h.node_until(&node, "judged", |n| {
        !has_taint(n, "kubeflavor.io/unverified")
    })
    .await;
    let as_node = h.node_client(&csr).await;
    let serving = h.name("serving-g");
    file(&as_node, &serving, Ask::kubelet(&node, "10.78.0.9"))
        .await
        .expect("filed");
    assert_eq!(h.decision(&serving).await, "Approved");
    issued(&h, &serving).await;
    let want_state = "Issued";

    let out = h.env.kf(&["node", "get", &node]).await;
    let out = out.expect_ok();
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert!(
        header.ends_with(&["ISSUED-BY", "IDENTITY", "INPUT-LABELS"]),
        "{out}"
    );
    let judged = standing_line(out, "Judged:");
    assert!(judged.starts_with("yes ("), "{out}");
    assert!(
        judged.ends_with("the Node does not carry kubeflavor.io/unverified)"),
        "{out}"
    );
    assert_eq!(standing_line(out, "Revoked:"), "no", "{out}");
    assert_eq!(standing_line(out, "Cut off:"), "no (not revoked)", "{out}");
    let line = standing_line(out, "Serving:");
    assert!(
        line.starts_with(&format!("{serving} {want_state} (")),
        "{out}"
    );
    // -o yaml stays the binding object alone.
    let yaml: serde_json::Value = serde_saphyr::from_str(
        h.env
            .kf(&["node", "get", &node, "-o", "yaml"])
            .await
            .expect_ok(),
    )
    .unwrap();
    assert_eq!(yaml["kind"], "FlavorBinding");

    Api::<k8s_openapi::api::core::v1::Node>::all(h.admin.clone())
        .delete(&node, &Default::default())
        .await
        .unwrap();
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_kubeflavor_never_bound_is_left_alone_unless_configured() {
    let h = Harness::start().await;
    // A node identity kubeflavor never bound: a client CSR the admin files, which
    // kube-controller-manager approves (the admin may create nodeclient CSRs) and the
    // scoped controller leaves alone (its requester is no bootstrap token).
    let node = h.name("node-u");
    let client_csr = h.name("client-u");
    h.submit_csr(&h.admin, &client_csr, &node).await;
    let as_node = h.node_client(&client_csr).await;

    let mut opts = h.options("ctl");
    opts.approve_serving = true;
    opts.deny_unbound_serving = true;
    let ctl = h.start_controller(opts);
    let denied = h.name("serving-unbound");
    file(&as_node, &denied, Ask::kubelet(&node, "10.77.0.5"))
        .await
        .expect("filed");
    assert_eq!(h.decision(&denied).await, "Denied");
    trail_names(&h, &denied, &["never_bound"]).await;
    ctl.stop().await;

    // Without --deny-unbound-serving the CSR is left pending for other approvers: the
    // controller records it as ignored, and writes nothing.
    let mut opts = h.options("ctl2");
    opts.approve_serving = true;
    let ctl = h.start_controller(opts);
    let left = h.name("serving-left");
    file(&as_node, &left, Ask::kubelet(&node, "10.77.0.5"))
        .await
        .expect("filed");
    let metrics = ctl.metrics.clone();
    within("the CSR to be seen and left alone", async {
        loop {
            if metrics
                .render()
                .contains("outcome=\"ignored\",cause=\"never_bound\"")
            {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    ctl.stop().await;
    let still = h.csrs().get(&left).await.expect("csr");
    assert_eq!(condition_type(&still), None, "left pending");
}
