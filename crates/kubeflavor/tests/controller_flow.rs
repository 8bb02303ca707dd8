//! The controller's main flow on testkube through real kube-rs clients: approval, binding,
//! flavoring, and what a bootstrap identity can see (P1, P2, P3).

mod controller_support;

use controller_support::*;
use kube::ResourceExt;

const FLAVOR_KEY: &str = "kubeflavor.node-restriction.kubernetes.io/flavor";
const TIER_KEY: &str = "tier.node-restriction.kubernetes.io/class";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_two_flavors_are_bound_and_flavored() {
    let h = Harness::start().await;
    h.flavor("sweet", &[(TIER_KEY, "gold")], &[]).await;
    h.flavor(
        "sour",
        &[(TIER_KEY, "bronze")],
        &[("dedicated", "partner", "NoSchedule")],
    )
    .await;
    let ctl = h.start_controller(h.options("ctl-a"));

    let sweet = h.token("sweet", 1, None).await;
    let sour = h.token("sour", 1, None).await;
    h.submit_csr(&h.bootstrap_client(&sweet).await, "csr-a", "node-a")
        .await;
    h.submit_csr(&h.bootstrap_client(&sour).await, "csr-b", "node-b")
        .await;

    for (csr, node, token, flavor) in [
        ("csr-a", "node-a", &sweet, "sweet"),
        ("csr-b", "node-b", &sour, "sour"),
    ] {
        let decided = h.decided(csr).await;
        assert_eq!(
            condition_type(&decided).as_deref(),
            Some("Approved"),
            "{csr}"
        );
        // P3: the binding exists once the CSR is approved, naming the token.
        let binding = h
            .bindings()
            .get(node)
            .await
            .expect("binding exists before approval");
        assert_eq!(binding.spec.token_id, token.id().as_str());
        assert_eq!(binding.spec.flavor, flavor);
        assert_eq!(binding.spec.csr_name, csr);
        assert_eq!(h.bound_nodes(token).await, vec![node.to_string()]);
    }

    // The kubelets register, starting untrusted.
    for node in ["node-a", "node-b"] {
        h.register_node(
            node,
            &[("kubernetes.io/hostname", node)],
            &[("kubeflavor.io/unverified", "NoSchedule")],
        )
        .await;
    }
    let a = h
        .node_until("node-a", "flavored sweet", |n| {
            label(n, FLAVOR_KEY) == Some("sweet")
        })
        .await;
    assert_eq!(label(&a, TIER_KEY), Some("gold"));
    assert!(
        !has_taint(&a, "kubeflavor.io/unverified"),
        "unverified taint removed"
    );
    assert!(!has_taint(&a, "dedicated"));
    let b = h
        .node_until("node-b", "flavored sour", |n| {
            label(n, FLAVOR_KEY) == Some("sour")
        })
        .await;
    assert_eq!(label(&b, TIER_KEY), Some("bronze"));
    assert!(has_taint(&b, "dedicated"), "the flavor's taint is applied");
    assert!(!has_taint(&b, "kubeflavor.io/unverified"));
    // Labels kubeflavor does not own are untouched.
    assert_eq!(label(&b, "kubernetes.io/hostname"), Some("node-b"));

    let st = h
        .binding_until("node-b", "status Flavored", |b| {
            b.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Flavored" && c.status == "True")
            })
        })
        .await;
    assert_eq!(st.name_any(), "node-b");
    assert!(
        ctl.metrics
            .render()
            .contains("kubeflavor_csr_decisions_total{outcome=\"approved\",cause=\"ok\"} 2")
    );
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_removing_the_flavor_label_sees_it_restored() {
    let h = Harness::start().await;
    h.flavor("sweet", &[(TIER_KEY, "gold")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-a"));
    let t = h.token("sweet", 1, None).await;
    h.submit_csr(&h.bootstrap_client(&t).await, "csr-a", "node-a")
        .await;
    h.decided("csr-a").await;
    h.register_node("node-a", &[], &[]).await;
    let n = h
        .node_until("node-a", "flavored", |n| label(n, TIER_KEY) == Some("gold"))
        .await;

    // An admin drops the labels (merge patch with null).
    let patch = serde_json::json!({"metadata": {"labels": {TIER_KEY: null, FLAVOR_KEY: null}}});
    h.nodes()
        .patch(
            &n.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("admin patch");
    h.node_until("node-a", "labels restored", |n| {
        label(n, TIER_KEY) == Some("gold") && label(n, FLAVOR_KEY) == Some("sweet")
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deleted_and_recreated_gets_its_labels_back() {
    let h = Harness::start().await;
    h.flavor("sweet", &[(TIER_KEY, "gold")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-a"));
    let t = h.token("sweet", 1, None).await;
    h.submit_csr(&h.bootstrap_client(&t).await, "csr-a", "node-a")
        .await;
    h.decided("csr-a").await;
    h.register_node("node-a", &[], &[]).await;
    h.node_until("node-a", "flavored", |n| label(n, TIER_KEY) == Some("gold"))
        .await;

    // The kubelet deletes and re-creates its own Node, which drops labels set by others.
    let node_client = h.node_client("node-a").await;
    kube::Api::<k8s_openapi::api::core::v1::Node>::all(node_client)
        .delete("node-a", &Default::default())
        .await
        .expect("node deletes itself");
    within(
        "node deletion",
        kube::runtime::wait::await_condition(
            h.nodes(),
            "node-a",
            kube::runtime::wait::conditions::is_deleted(""),
        ),
    )
    .await
    .ok();
    let recreated = h.register_node("node-a", &[], &[]).await;
    assert_eq!(
        label(&recreated, TIER_KEY),
        None,
        "re-created without the label"
    );
    h.node_until("node-a", "labels back after re-creation", |n| {
        label(n, TIER_KEY) == Some("gold") && label(n, FLAVOR_KEY) == Some("sweet")
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_identity_cannot_change_its_flavor_label() {
    let h = Harness::start().await;
    h.flavor("sweet", &[(TIER_KEY, "gold")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-a"));
    let t = h.token("sweet", 1, None).await;
    h.submit_csr(&h.bootstrap_client(&t).await, "csr-a", "node-a")
        .await;
    h.decided("csr-a").await;
    h.register_node("node-a", &[], &[]).await;
    h.node_until("node-a", "flavored", |n| {
        label(n, FLAVOR_KEY) == Some("sweet")
    })
    .await;

    let node_client = h.node_client("node-a").await;
    let patch = serde_json::json!({"metadata": {"labels": {FLAVOR_KEY: "premium"}}});
    let err = kube::Api::<k8s_openapi::api::core::v1::Node>::all(node_client)
        .patch(
            "node-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
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
    h.flavor("sweet", &[(TIER_KEY, "gold")], &[]).await;
    h.flavor("sour", &[(TIER_KEY, "bronze")], &[]).await;
    let ctl = h.start_controller(h.options("ctl-a"));
    let sweet = h.token("sweet", 1, None).await;
    let sour = h.token("sour", 1, None).await;
    let sweet_client = h.bootstrap_client(&sweet).await;
    let sour_client = h.bootstrap_client(&sour).await;
    h.submit_csr(&sweet_client, "ok-sweet", "node-sweet").await;
    h.submit_csr(&sour_client, "ok-sour", "node-sour").await;
    let ok_sweet = h.decided("ok-sweet").await;
    let ok_sour = h.decided("ok-sour").await;

    // Two different causes: name takeover (sour asks for sweet's node) and a wrong shape.
    h.submit_csr(&sour_client, "bad-takeover", "node-sweet")
        .await;
    let shape_token = h.token("sweet", 1, None).await;
    submit_csr_with(
        &h.bootstrap_client(&shape_token).await,
        "bad-shape",
        "system:node:x",
        &["system:masters"],
    )
    .await;
    let takeover = h.decided("bad-takeover").await;
    let shape = h.decided("bad-shape").await;

    // What the bootstrap identity itself reads.
    let seen = |c: &kube::Client, n: &'static str| {
        let api = kube::Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(
            c.clone(),
        );
        async move { api.get(n).await.expect("bootstrap identity reads CSRs") }
    };
    let ok_sweet_seen = seen(&sweet_client, "ok-sweet").await;
    let ok_sour_seen = seen(&sweet_client, "ok-sour").await;
    assert_eq!(
        visible_conditions(&ok_sweet_seen)[..1],
        visible_conditions(&ok_sour_seen)[..1]
    );
    assert_eq!(
        visible_conditions(&ok_sweet)[..1],
        visible_conditions(&ok_sour)[..1]
    );
    assert_eq!(condition_type(&takeover).as_deref(), Some("Denied"));
    assert_eq!(condition_type(&shape).as_deref(), Some("Denied"));
    assert_eq!(visible_conditions(&takeover), visible_conditions(&shape));
    let msg = format!(
        "{:?}{:?}",
        visible_conditions(&takeover),
        visible_conditions(&ok_sweet)
    );
    for secret_word in ["sweet", "sour", "gold", "bronze", "takeover", "bound"] {
        assert!(!msg.contains(secret_word), "{secret_word} leaks in {msg}");
    }
    ctl.stop().await;
}
