//! The controller's main flow on testkube through real kube-rs clients: approval, binding,
//! flavoring, and what a bootstrap identity can see (P1 hidden flavor, P2 trusted labels,
//! P3 binding).

use crate::harness::*;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_two_flavors_are_bound_and_flavored() {
    let h = Harness::start().await;
    let (sweet_f, sour_f) = (h.name("sweet"), h.name("sour"));
    let (node_a, node_b) = (h.name("node-a"), h.name("node-b"));
    let (csr_a, csr_b) = (h.name("csr-a"), h.name("csr-b"));
    h.flavor(&sweet_f, &[(TIER_KEY, "gold")], &[]).await;
    h.flavor(
        &sour_f,
        &[(TIER_KEY, "bronze")],
        &[("dedicated", "partner", "NoSchedule")],
    )
    .await;
    let ctl = h.start_controller(h.options("ctl-a"));

    let sweet = h.token(&sweet_f, 1, None).await;
    let sour = h.token(&sour_f, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&sweet).await, &csr_a, &node_a)
        .await;
    h.submit_csr(&h.bootstrap_client(&sour).await, &csr_b, &node_b)
        .await;

    for (csr, node, token, flavor) in [
        (&csr_a, &node_a, &sweet, &sweet_f),
        (&csr_b, &node_b, &sour, &sour_f),
    ] {
        let decided = h.decided(csr).await;
        assert_eq!(
            condition_type(&decided).as_deref(),
            Some("Approved"),
            "{csr}"
        );
        // P3 (binding): the binding exists once the CSR is approved, naming the token.
        let binding = h.bindings().get(node).await.expect("binding exists");
        assert_eq!(binding.spec.token_id, token.id().as_str());
        assert_eq!(&binding.spec.flavor, flavor);
        assert_eq!(&binding.spec.csr_name, csr);
        assert_eq!(h.bound_nodes(token).await, vec![node.to_string()]);
    }

    // The kubelets register, starting untrusted.
    for (csr, node) in [(&csr_a, &node_a), (&csr_b, &node_b)] {
        h.register_node(
            csr,
            node,
            &[("kubernetes.io/hostname", node)],
            &[("kubeflavor.io/unverified", "NoSchedule")],
        )
        .await;
    }
    let a = h
        .node_until(&node_a, "flavored sweet", |n| {
            label(n, FLAVOR_KEY) == Some(sweet_f.as_str())
        })
        .await;
    assert_eq!(label(&a, TIER_KEY), Some("gold"));
    assert!(
        !has_taint(&a, "kubeflavor.io/unverified"),
        "unverified taint removed"
    );
    assert!(!has_taint(&a, "dedicated"));
    let b = h
        .node_until(&node_b, "flavored sour", |n| {
            label(n, FLAVOR_KEY) == Some(sour_f.as_str()) && has_taint(n, "dedicated")
        })
        .await;
    assert_eq!(label(&b, TIER_KEY), Some("bronze"));
    assert!(!has_taint(&b, "kubeflavor.io/unverified"));
    // Labels kubeflavor does not own are untouched.
    assert_eq!(label(&b, "kubernetes.io/hostname"), Some(node_b.as_str()));

    let st = h
        .binding_until(&node_b, "status Flavored", |b| {
            b.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Flavored" && c.status == "True")
            })
        })
        .await;
    assert_eq!(
        st.status
            .unwrap()
            .applied_labels
            .get(TIER_KEY)
            .map(String::as_str),
        Some("bronze")
    );
    assert!(
        ctl.metrics
            .render()
            .contains("kubeflavor_csr_decisions_total{outcome=\"approved\",cause=\"ok\"} 2")
    );

    // Each Flavor publishes how many bindings name it.
    let third = h.name("node-c");
    h.submit_csr(
        &h.bootstrap_client(&h.token(&sweet_f, 1, None).await).await,
        &h.name("csr-c"),
        &third,
    )
    .await;
    assert_eq!(
        condition_type(&h.decided(&h.name("csr-c")).await).as_deref(),
        Some("Approved")
    );
    for (flavor, want) in [(&sweet_f, 2), (&sour_f, 1)] {
        h.flavor_until(flavor, &format!("boundNodes {want}"), |f| {
            f.status.as_ref().and_then(|s| s.bound_nodes) == Some(want)
        })
        .await;
    }
    ctl.stop().await;
}

/// A node that joins with a token minted by `token create --issued-to` ends with a binding
/// recording on whose behalf the token was minted and who minted it; `node list` and `node
/// get` show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_records_the_custody_of_its_token() {
    let h = Harness::start().await;
    let flavor = h.gold_flavor("custody").await;
    let (node, csr) = (h.name("node"), h.name("csr"));
    let ctl = h.start_controller(h.options("ctl-custody"));
    let (me, _) = crate::support::whoami(&h.admin)
        .await
        .expect("who is admin");

    let out = h
        .env
        .kf(&[
            "token",
            "create",
            "--flavor",
            &flavor,
            "--issued-to",
            "acme-corp/alice",
        ])
        .await;
    let token: kubeflavor_core::token::BootstrapToken =
        out.expect_ok().trim().parse().expect("a token");
    h.submit_csr(&h.bootstrap_client(&token).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    let binding = h.bindings().get(&node).await.expect("binding exists");
    assert_eq!(binding.spec.token_id, token.id().as_str());
    assert_eq!(binding.spec.issued_to.as_deref(), Some("acme-corp/alice"));
    assert_eq!(binding.spec.issued_by.as_deref(), Some(me.as_str()));

    // A retry of the kubelet (same token, same key) leaves the binding as it is.
    let retry = h.name("csr-retry");
    h.resubmit_csr(&h.bootstrap_client(&token).await, &retry, &node, &csr)
        .await;
    assert_eq!(h.decision(&retry).await, "Approved");
    let again = h.bindings().get(&node).await.expect("binding exists");
    assert_eq!(again.spec, binding.spec);

    let listed = h.env.kf(&["node", "list"]).await;
    let listed = listed.expect_ok();
    let column = listed
        .lines()
        .next()
        .unwrap()
        .find("ISSUED-TO")
        .expect("column");
    let row = listed.lines().find(|l| l.starts_with(&node)).expect("row");
    assert_eq!(&row[column..], "acme-corp/alice", "{listed}");
    let got = h.env.kf(&["node", "get", &node]).await;
    let got = got.expect_ok();
    let header: Vec<&str> = got.lines().next().unwrap().split_whitespace().collect();
    assert!(
        header.ends_with(&["ISSUED-BY", "IDENTITY", "INPUT-LABELS"]),
        "{got}"
    );
    assert!(
        got.contains("acme-corp/alice") && got.contains(&me),
        "{got}"
    );
    let json = h.env.kf(&["node", "get", &node, "-o", "json"]).await;
    let json: serde_json::Value = serde_json::from_str(json.expect_ok()).unwrap();
    assert_eq!(json["spec"]["issuedTo"], "acme-corp/alice");
    assert_eq!(json["spec"]["issuedBy"], me.as_str());
    ctl.stop().await;
}

/// One node joined with a `sweet` token and registered: (harness, controller, node, csr).
async fn joined_node() -> (Harness, ControllerHandle, String, String, String) {
    let h = Harness::start().await;
    let (sweet, node_a, csr_a) = (h.name("sweet"), h.name("node-a"), h.name("csr-a"));
    h.flavor(&sweet, &[(TIER_KEY, "gold")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-a"));
    let t = h.token(&sweet, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&t).await, &csr_a, &node_a)
        .await;
    h.decided(&csr_a).await;
    h.register_node(&csr_a, &node_a, &[], &[]).await;
    h.node_until(&node_a, "flavored", |n| label(n, TIER_KEY) == Some("gold"))
        .await;
    (h, ctl, sweet, node_a, csr_a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_removing_the_flavor_label_sees_it_restored() {
    let (h, ctl, sweet, node_a, _) = joined_node().await;
    // An admin drops the labels (merge patch with null).
    let patch = serde_json::json!({"metadata": {"labels": {TIER_KEY: null, FLAVOR_KEY: null}}});
    h.nodes()
        .patch(&node_a, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("admin patch");
    h.node_until(&node_a, "labels restored", |n| {
        label(n, TIER_KEY) == Some("gold") && label(n, FLAVOR_KEY) == Some(sweet.as_str())
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_flavor_reaches_its_nodes() {
    let (h, ctl, sweet, node_a, _) = joined_node().await;
    // The controller's own status writes (boundNodes) do not count as a change; a new
    // spec does.
    h.flavor_until(&sweet, "boundNodes 1", |f| {
        f.status.as_ref().and_then(|s| s.bound_nodes) == Some(1)
    })
    .await;
    let patch = serde_json::json!({"spec": {"labels": {TIER_KEY: "platinum"}}});
    Api::<kubeflavor_cluster::crd::Flavor>::all(h.admin.clone())
        .patch(&sweet, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("admin edits the flavor");
    h.node_until(&node_a, "relabelled", |n| {
        label(n, TIER_KEY) == Some("platinum") && label(n, FLAVOR_KEY) == Some(sweet.as_str())
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deleted_and_recreated_gets_its_labels_back() {
    let (h, ctl, sweet, node_a, csr_a) = joined_node().await;
    // The Node is deleted (here by an admin; a kubelet may also delete its own) and the
    // kubelet re-creates it, without the labels others had set.
    h.delete_node(&node_a).await;
    let recreated = h.register_node(&csr_a, &node_a, &[], &[]).await;
    assert_eq!(
        label(&recreated, TIER_KEY),
        None,
        "re-created without the label"
    );
    h.node_until(&node_a, "labels back after re-creation", |n| {
        label(n, TIER_KEY) == Some("gold") && label(n, FLAVOR_KEY) == Some(sweet.as_str())
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_identity_cannot_change_its_flavor_label() {
    let (h, ctl, _, node_a, csr_a) = joined_node().await;
    let node_client = h.node_client(&csr_a).await;
    let patch = serde_json::json!({"metadata": {"labels": {FLAVOR_KEY: "premium"}}});
    let err = Api::<Node>::all(node_client)
        .patch(&node_a, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("NodeRestriction forbids it");
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected a 403, got {other:?}"),
    }
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_csr_conditions_are_equal_across_flavors_and_causes() {
    let h = Harness::start().await;
    let (sweet_f, sour_f) = (h.name("sweet"), h.name("sour"));
    h.flavor(&sweet_f, &[(TIER_KEY, "gold")], &[]).await;
    h.flavor(&sour_f, &[(TIER_KEY, "bronze")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-a"));
    let sweet = h.token(&sweet_f, 1, None).await;
    let sour = h.token(&sour_f, 1, None).await;
    let sweet_client = h.bootstrap_client(&sweet).await;
    let sour_client = h.bootstrap_client(&sour).await;
    let (ok_sweet_n, ok_sour_n) = (h.name("ok-sweet"), h.name("ok-sour"));
    let (node_sweet, node_sour) = (h.name("node-sweet"), h.name("node-sour"));
    h.submit_csr(&sweet_client, &ok_sweet_n, &node_sweet).await;
    h.submit_csr(&sour_client, &ok_sour_n, &node_sour).await;
    let ok_sweet = h.decided(&ok_sweet_n).await;
    let ok_sour = h.decided(&ok_sour_n).await;

    // Two different causes: name takeover (sour asks for sweet's node) and a wrong shape.
    let (takeover_n, shape_n) = (h.name("bad-takeover"), h.name("bad-shape"));
    let sour2 = h.token(&sour_f, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&sour2).await, &takeover_n, &node_sweet)
        .await;
    let shape_token = h.token(&sweet_f, 1, None).await;
    submit_csr_with(
        &h.bootstrap_client(&shape_token).await,
        &shape_n,
        &format!("system:node:{}", h.name("node-x")),
        &["system:masters"],
    )
    .await;
    let takeover = h.decided(&takeover_n).await;
    let shape = h.decided(&shape_n).await;

    // What a bootstrap identity itself reads.
    let api = kube::Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(
        sweet_client.clone(),
    );
    let ok_sweet_seen = api
        .get(&ok_sweet_n)
        .await
        .expect("bootstrap identity reads CSRs");
    let ok_sour_seen = api
        .get(&ok_sour_n)
        .await
        .expect("bootstrap identity reads CSRs");
    let takeover_seen = api
        .get(&takeover_n)
        .await
        .expect("bootstrap identity reads CSRs");
    assert_eq!(condition_type(&ok_sweet).as_deref(), Some("Approved"));
    assert_eq!(condition_type(&ok_sour).as_deref(), Some("Approved"));
    assert_eq!(
        visible_conditions(&ok_sweet_seen),
        visible_conditions(&ok_sour_seen)
    );
    assert_eq!(condition_type(&takeover).as_deref(), Some("Denied"));
    assert_eq!(condition_type(&shape).as_deref(), Some("Denied"));
    assert_eq!(
        visible_conditions(&takeover_seen),
        visible_conditions(&shape)
    );
    let msg = format!(
        "{:?}{:?}",
        visible_conditions(&takeover),
        visible_conditions(&ok_sweet)
    );
    for word in [
        sweet_f.as_str(),
        sour_f.as_str(),
        "gold",
        "bronze",
        "takeover",
        "bound",
        "exhaust",
    ] {
        assert!(!msg.contains(word), "{word} leaks in {msg}");
    }
    ctl.stop().await;
}

/// The controller runs with exactly the permissions `install` grants its ServiceAccount:
/// on testkube as a client certificate of that ServiceAccount, on a real cluster with a
/// token the API server issues for it (TokenRequest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_works_with_the_rbac_install_grants() {
    let h = Harness::start().await;
    let sa = service_account_client(&h).await;
    let mut opts = h.options("sa-replica");
    opts.namespace = "kubeflavor".into();
    opts.leader_elect = true;
    let ctl = ControllerHandle::start(sa, opts, None);

    let (f, other) = (h.name("sweet"), h.name("sour"));
    h.flavor(&f, &[(TIER_KEY, "gold")], &[]).await;
    h.flavor(&other, &[(TIER_KEY, "bronze")], &[]).await;
    let (node, csr, bad) = (h.name("node-sa"), h.name("csr-sa"), h.name("csr-bad"));
    h.join_and_register(&f, &node, &csr).await;
    h.node_until(&node, "flavored", |n| {
        label(n, TIER_KEY) == Some("gold") && !has_taint(n, "kubeflavor.io/unverified")
    })
    .await;
    // A denial that deletes the token (P4, rejection that ends) and records an Event.
    let sour = h.token(&other, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&sour).await, &bad, &node)
        .await;
    assert_eq!(h.decision(&bad).await, "Denied");
    h.token_gone(&sour).await;
    // The admin trail lands in kube-system (the API server refuses an Event about a
    // cluster-scoped object such as a CSR in any namespace but default and kube-system),
    // written with the ServiceAccount's own grants.
    trail_names(&h, &bad, &["name_bound_to_other_token"]).await;
    // P1 (hidden flavor): the trail names causes, so no token holder and no node may read
    // it.
    let holder = h.token(&f, 1, None).await;
    for (who, client) in [
        ("a token holder", h.bootstrap_client(&holder).await),
        ("the node", h.node_client(&csr).await),
    ] {
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "kube-system");
        let params = Default::default();
        let err = crate::support::fresh(|| events.list(&params))
            .await
            .expect_err(who);
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{who}: {err}"
        );
        // Nor the bindings, which record flavors and custody (issuedTo, issuedBy).
        let bindings = Api::<kubeflavor_cluster::crd::FlavorBinding>::all(client);
        let params = Default::default();
        let err = crate::support::fresh(|| bindings.list(&params))
            .await
            .expect_err(who);
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{who}: {err}"
        );
        let err = crate::support::fresh(|| bindings.get(&node))
            .await
            .expect_err(who);
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403),
            "{who}: {err}"
        );
    }
    let errors = ctl.metrics.render();
    assert!(
        errors
            .lines()
            .filter(|l| l.starts_with("kubeflavor_reconcile_errors_total{"))
            .all(|l| l.ends_with(" 0")),
        "{errors}"
    );
    ctl.stop().await;
}

/// The controller's ServiceAccount as a client.
async fn service_account_client(h: &Harness) -> kube::Client {
    let user = "system:serviceaccount:kubeflavor:kubeflavor-controller";
    if let Some(tk) = h.testkube() {
        let groups = [
            "system:serviceaccounts",
            "system:serviceaccounts:kubeflavor",
        ];
        let (cert, key) = tk.issue_client_cert(user, &groups).expect("certificate");
        return client_from(&tk.kubeconfig_for_client_cert(&cert, &key)).await;
    }
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(Vec::new()),
            expiration_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(h.admin.clone(), "kubeflavor")
        .create_token_request("kubeflavor-controller", &Default::default(), &request)
        .await
        .expect("TokenRequest for the controller's ServiceAccount");
    let token = issued
        .status
        .and_then(|status| status.token)
        .expect("token issued");
    h.env.token_client(&token).await
}
