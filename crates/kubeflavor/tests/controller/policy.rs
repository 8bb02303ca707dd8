//! Denials and their admin trail (P1 hidden flavor, P3 binding, P4 rejection that ends),
//! the single-use race, token expiry mid-join, and revocation, on testkube (or a real
//! cluster) through real kube-rs clients.

use crate::harness::*;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{ListParams, PostParams};

/// Waits until the token Secret's denial count reads `count`.
async fn denials_counted(h: &Harness, token: &kubeflavor_core::token::BootstrapToken, count: &str) {
    let name = name_of(token);
    within(
        &format!("the token's denial count to read {count}"),
        kube::runtime::wait::await_condition(
            Api::<Secret>::namespaced(h.admin.clone(), "kube-system"),
            &name,
            |s: Option<&Secret>| {
                s.and_then(|s| s.metadata.annotations.as_ref())
                    .and_then(|a| a.get("kubeflavor.io/denials"))
                    .is_some_and(|v| v == count)
            },
        ),
    )
    .await
    .expect("watch works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_takeover_is_denied_and_the_token_deleted() {
    let h = Harness::start().await;
    let (sweet_f, sour_f, node) = (h.name("sweet"), h.name("sour"), h.name("node-x"));
    h.flavor(&sweet_f, &[(TIER_KEY, "gold")], &[]).await;
    h.flavor(&sour_f, &[(TIER_KEY, "bronze")], &[]).await;
    let ctl = h.start_controller(h.options("ctl"));
    let sweet = h.token(&sweet_f, 1, None).await;
    let sour = h.token(&sour_f, 3, None).await;
    let (ok, bad) = (h.name("csr-sweet"), h.name("csr-sour"));
    h.submit_csr(&h.bootstrap_client(&sweet).await, &ok, &node)
        .await;
    assert_eq!(h.decision(&ok).await, "Approved");

    h.submit_csr(&h.bootstrap_client(&sour).await, &bad, &node)
        .await;
    assert_eq!(h.decision(&bad).await, "Denied");
    // The binding still names the first token, and the sour token has no use spent.
    let binding = h.bindings().get(&node).await.expect("binding");
    assert_eq!(binding.spec.token_id, sweet.id().as_str());
    // P4 (rejection that ends): a takeover attempt is misuse: the token goes, the kubelet's
    // retries end.
    h.token_gone(&sour).await;
    trail_names(&h, &bad, &["name_bound_to_other_token"]).await;
    // The metric follows the CSR write; a stopped controller has finished its reconciles.
    let metrics = ctl.metrics.clone();
    ctl.stop().await;
    assert!(
        metrics
            .render()
            .contains("cause=\"name_bound_to_other_token\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_token_is_denied_and_deleted() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let ctl = h.start_controller(h.options("ctl"));
    let t = h.token(&f, 1, None).await;
    let client = h.bootstrap_client(&t).await;
    let (c1, c2) = (h.name("csr-1"), h.name("csr-2"));
    h.submit_csr(&client, &c1, &h.name("node-1")).await;
    assert_eq!(h.decision(&c1).await, "Approved");
    h.submit_csr(&client, &c2, &h.name("node-2")).await;
    assert_eq!(h.decision(&c2).await, "Denied");
    h.token_gone(&t).await;
    assert!(
        h.bindings()
            .get_opt(&h.name("node-2"))
            .await
            .unwrap()
            .is_none()
    );
    trail_names(&h, &c2, &["token_exhausted"]).await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_flavor_existing_node_and_wrong_shape_are_denied_with_their_causes() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let ctl = h.start_controller(h.options("ctl"));

    // A token whose Flavor does not exist.
    let orphan = h.token(&h.name("ghost"), 1, None).await;
    let c_flavor = h.name("csr-flavor");
    h.submit_csr(
        &h.bootstrap_client(&orphan).await,
        &c_flavor,
        &h.name("node-f"),
    )
    .await;

    // A Node that joined some other way (no binding): no takeover of its name.
    let existing = h.name("node-e");
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": existing}})).unwrap();
    h.nodes()
        .create(&PostParams::default(), &node)
        .await
        .expect("admin creates a node");
    let t = h.token(&f, 1, None).await;
    let c_node = h.name("csr-node");
    h.submit_csr(&h.bootstrap_client(&t).await, &c_node, &existing)
        .await;

    // Not a kubelet client CSR: organization system:masters.
    let t2 = h.token(&f, 1, None).await;
    let c_shape = h.name("csr-shape");
    submit_csr_with(
        &h.bootstrap_client(&t2).await,
        &c_shape,
        &format!("system:node:{}", h.name("node-x")),
        &["system:masters"],
    )
    .await;

    for (csr, cause) in [
        (&c_flavor, "flavor_missing"),
        (&c_node, "node_exists_without_binding"),
        (&c_shape, "not_kubelet_client_shape"),
    ] {
        let decided = h.decided(csr).await;
        assert_eq!(condition_type(&decided).as_deref(), Some("Denied"), "{csr}");
        trail_names(&h, csr, &[cause]).await;
    }
    assert!(h.bindings().get_opt(&existing).await.unwrap().is_none());
    // Denials for a wrong shape are counted on the token (P4, rejection that ends: a token
    // refused too often goes); the count is written right after the denial.
    denials_counted(&h, &t2, "1").await;
    // The metric follows the CSR write; a stopped controller has finished its reconciles.
    let metrics = ctl.metrics.clone();
    ctl.stop().await;
    for cause in [
        "flavor_missing",
        "node_exists_without_binding",
        "not_kubelet_client_shape",
    ] {
        assert!(
            metrics.render().contains(&format!("cause=\"{cause}\"")),
            "{cause}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_of_one_token_decided_together_are_all_counted() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let t = h.token(&f, 1, None).await;
    // Wrong-shape CSRs of one token, all filed before the controller starts so it decides
    // them at once: each denial reads the token at the same resourceVersion, and each
    // must still be counted (P4, rejection that ends), not lost to the 409 of the one
    // counted first.
    let csrs = h.wrong_shape_csrs(&t, "csr-shape", 3).await;
    let ctl = h.start_controller(h.options("ctl"));
    h.all_denied(&csrs).await;
    denials_counted(&h, &t, "3").await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_csrs_racing_for_a_single_use_token_get_exactly_one_approval() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let t = h.token(&f, 1, None).await;
    let client = h.bootstrap_client(&t).await;
    let (c1, c2) = (h.name("race-1"), h.name("race-2"));
    // Both CSRs exist before the controller starts, so it sees them at once.
    h.submit_csr(&client, &c1, &h.name("node-1")).await;
    h.submit_csr(&client, &c2, &h.name("node-2")).await;
    let ctl = h.start_controller(h.options("ctl"));
    let d1 = condition_type(&h.decided(&c1).await);
    let d2 = condition_type(&h.decided(&c2).await);
    let mut outcomes = [d1.unwrap(), d2.unwrap()];
    outcomes.sort();
    assert_eq!(outcomes, ["Approved".to_string(), "Denied".to_string()]);
    let bindings: Vec<_> = h
        .bindings()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| b.spec.token_id == t.id().as_str())
        .collect();
    assert_eq!(bindings.len(), 1, "exactly one binding for the token");
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_expiring_mid_join_is_denied_without_spending_a_use() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let t = h.token(&f, 1, None).await;
    let csr = h.name("csr-late");
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &h.name("node-late"))
        .await;
    // The token expires after the CSR was filed and before the controller decides.
    let secrets: Api<Secret> = Api::namespaced(h.admin.clone(), "kube-system");
    let name = name_of(&t);
    let patch = serde_json::json!({"stringData": {"expiration": "2000-01-01T00:00:00Z"}});
    secrets
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("expire the token");
    let ctl = h.start_controller(h.options("ctl"));
    assert_eq!(h.decision(&csr).await, "Denied");
    assert!(
        h.bindings()
            .get_opt(&h.name("node-late"))
            .await
            .unwrap()
            .is_none()
    );
    // Expired tokens are removed by kube-controller-manager; if it is still there, no
    // use was spent on it.
    if h.token_secret(&t).await.is_some() {
        assert!(h.bound_nodes(&t).await.is_empty());
    }
    trail_names(&h, &csr, &["token_expired", "token_missing"]).await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_node_loses_its_flavor_gets_the_noexecute_taint_and_no_renewal() {
    let h = Harness::start_serial().await;
    let f = h.name("sweet");
    let (node, csr) = (h.name("node-r"), h.name("csr-r"));
    h.flavor(&f, &[(TIER_KEY, "gold")], &[]).await;
    // A kubeadm cluster auto-approves renewals (its node-autoapprove-certificate-rotation
    // binding): hand them to kubeflavor.
    h.env
        .kf(&["install", "--apply", "--replicas", "0", "--manage-renewals"])
        .await
        .expect_ok();
    let mut opts = h.options("ctl");
    opts.manage_renewals = true;
    let ctl = h.start_controller(opts);
    let t = h.token(&f, 1, None).await;
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    h.decided(&csr).await;
    h.register_node(&csr, &node, &[], &[]).await;
    h.node_until(&node, "flavored", |n| label(n, TIER_KEY) == Some("gold"))
        .await;

    // A renewal while bound: approved (manage_renewals).
    let node_client = h.node_client(&csr).await;
    let renew_ok = h.name("renew-ok");
    h.submit_csr(&node_client, &renew_ok, &node).await;
    assert_eq!(h.decision(&renew_ok).await, "Approved");

    let out = h.env.kf(&["node", "revoke", &node]).await;
    out.expect_ok();
    // `node revoke` taints the Node itself; the controller then takes the flavor away.
    let revoked = h
        .node_until(&node, "revoked and stripped", |n| {
            has_taint(n, "kubeflavor.io/revoked") && label(n, FLAVOR_KEY).is_none()
        })
        .await;
    assert_eq!(label(&revoked, TIER_KEY), None);
    assert_eq!(label(&revoked, FLAVOR_KEY), None);
    let list = h.env.kf(&["node", "list"]).await;
    let line = list
        .expect_ok()
        .lines()
        .find(|l| l.starts_with(node.as_str()))
        .expect("node listed")
        .to_string();
    assert!(
        line.contains("Revoked") && line.contains(t.id().as_str()),
        "{line}"
    );

    // Renewals of a revoked node are refused: by the API server's admission where it reads
    // the revocation list (the kubelet of a listed node may write nothing), else filed and
    // denied by the controller.
    let renew_bad = h.name("renew-bad");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let filed = csr_object(
        &renew_bad,
        &format!("system:node:{node}"),
        &["system:nodes"],
        &key,
    );
    match Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(
        node_client.clone(),
    )
    .create(&PostParams::default(), &filed)
    .await
    {
        Err(kube::Error::Api(s)) if s.code == 422 => {
            assert!(s.message.contains("kubeflavor-revoked-nodes"), "{s:?}")
        }
        Ok(_) => assert_eq!(h.decision(&renew_bad).await, "Denied"),
        Err(e) => panic!("a revoked node's renewal: {e:?}"),
    }
    ctl.stop().await;
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mode_denies_other_tokens_without_deleting_them() {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    let h = Harness::start_serial().await;
    // --strict needs kubeflavor to be the only approver (kubeadm's clusters auto-approve
    // kubeadm's tokens): the controller refuses to start otherwise.
    h.install_sole_approver().await;
    // A token of another tool, in a group of its own with the RBAC kubeadm gives its
    // tokens to file CSRs (kubeadm's own group also has the nodeclient auto-approval, so
    // kube-controller-manager would approve its CSRs before any other approver).
    let group = format!("system:bootstrappers:other:{}", h.env.run_id);
    let group = group.as_str();
    let crb = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(h.name("other-bootstrap")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "system:node-bootstrapper".into(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".into(),
            name: group.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(h.admin.clone())
        .create(&PostParams::default(), &crb)
        .await
        .expect("binding");
    let token = kubeflavor_core::token::BootstrapToken::generate().unwrap();
    TokenSecret::plain(&token, group).create(&h.env).await;
    let mut opts = h.options("ctl");
    opts.strict = true;
    let ctl = h.start_controller(opts);
    let csr = h.name("csr-other");
    h.submit_csr(&h.bootstrap_client(&token).await, &csr, &h.name("node-k"))
        .await;
    assert_eq!(h.decision(&csr).await, "Denied");
    trail_names(&h, &csr, &["not_kubeflavor_token"]).await;
    // Other tools' tokens are not kubeflavor's to delete or annotate.
    let kept = h.token_secret(&token).await.expect("token kept");
    assert!(kept.metadata.annotations.unwrap_or_default().is_empty());
    ctl.stop().await;
}

/// On a kubeadm cluster kube-controller-manager approves every renewal before kubeflavor
/// sees it (kubeadm binds `system:nodes` to self-node-client approval): `--manage-renewals`
/// would silently do nothing, so the controller refuses to start and names the fix;
/// `install --apply --manage-renewals` hands renewals over in one step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manage_renewals_is_refused_while_renewals_are_auto_approved() {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    let h = Harness::start_serial().await;
    // The auto-approval kubeadm sets up, under a name of this run (a shared cluster may
    // have had kubeadm's own binding removed by an earlier run).
    let crb = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(h.name("renewal-autoapprove")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient".into(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".into(),
            name: "system:nodes".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    let crbs = Api::<ClusterRoleBinding>::all(h.admin.clone());
    crbs.create(&PostParams::default(), &crb)
        .await
        .expect("binding");
    let mut opts = h.options("ctl");
    opts.manage_renewals = true;
    let refused = kubeflavor::controller::run(
        kubeflavor::controller::Runtime::new(h.admin.clone(), opts.clone()),
        std::future::pending(),
    )
    .await
    .expect_err("refused while renewals are auto-approved");
    let msg = refused.to_string();
    assert!(msg.contains("selfnodeclient"), "{msg}");
    assert!(msg.contains("install --apply --manage-renewals"), "{msg}");
    crbs.delete(&h.name("renewal-autoapprove"), &Default::default())
        .await
        .expect("binding deleted");

    // One step hands renewals over; then the controller starts.
    let out = h
        .env
        .kf(&["install", "--apply", "--replicas", "0", "--manage-renewals"])
        .await;
    assert!(
        out.expect_ok()
            .contains("kubeadm:node-autoapprove-certificate-rotation"),
        "{out:?}"
    );
    assert_eq!(
        kubeflavor::controller::approvers::auto_approved(
            &h.admin,
            kubeflavor::controller::approvers::Kind::Renewals
        )
        .await
        .expect("review"),
        None
    );
    let ctl = h.start_controller(opts);
    ctl.stop().await;
}
