//! Attacks on the binding rules (P3 binding, P4 rejection that ends): a recycled token id,
//! a Node or a revocation that appears between the controller's read and its approval, a
//! burst of bad CSRs against the denial limit, and renewals of nodes kubeflavor never
//! bound. On testkube or a real cluster, through real kube-rs clients.

use crate::harness::*;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kubeflavor::controller::Step;
use kubeflavor_core::token::BootstrapToken;

/// A token id can be minted again once its token is gone (random collision, or an
/// admin choosing it). The new token must not inherit the old one's names, nor be taken
/// for it by `token create`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recycled_token_id_inherits_no_name() {
    let h = Harness::start().await;
    let (sweet, sour) = (h.name("sweet"), h.name("sour"));
    h.flavor(&sweet, &[(TIER_KEY, "gold")], &[]).await;
    h.flavor(&sour, &[(TIER_KEY, "bronze")], &[]).await;
    let ctl = h.start_controller(h.options("ctl"));
    let victim = h.name("victim");
    let old = h.token(&sweet, 1, None).await;
    let first = h.name("csr-old");
    h.submit_csr(&h.bootstrap_client(&old).await, &first, &victim)
        .await;
    assert_eq!(h.decision(&first).await, "Approved");

    // The old token goes; a new one of another flavor gets the same id.
    Api::<Secret>::namespaced(h.admin.clone(), "kube-system")
        .delete(&name_of(&old), &Default::default())
        .await
        .expect("old token deleted");
    h.token_gone(&old).await;
    let secret = BootstrapToken::generate().expect("randomness");
    let same_id: BootstrapToken = format!("{}.{}", old.id().as_str(), secret.secret().expose())
        .parse()
        .expect("token");
    let new = h.token_as(same_id, &sour, 1, None).await;
    let takeover = h.name("csr-new");
    h.submit_csr(&h.bootstrap_client(&new).await, &takeover, &victim)
        .await;
    assert_eq!(h.decision(&takeover).await, "Denied");
    trail_names(&h, &takeover, &["name_bound_to_other_token"]).await;
    h.token_gone(&new).await;
    let binding = h.bindings().get(&victim).await.expect("binding kept");
    assert_eq!(binding.spec.csr_name, first);

    // token create never mints an id a binding still names.
    let cluster = kubeflavor::connect::Cluster::connect(&kubeflavor::connect::ClusterArgs {
        kubeconfig: Some(h.env.kubeconfig.clone()),
        context: None,
    })
    .await
    .expect("cluster");
    let bound_id: BootstrapToken = format!("{}.0123456789abcdef", old.id().as_str())
        .parse()
        .expect("token");
    let mut draws = vec![BootstrapToken::generate().unwrap(), bound_id]
        .into_iter()
        .rev();
    let meta = kubeflavor_core::token::secret::FlavorTokenMeta::new(
        sour.parse().unwrap(),
        std::num::NonZeroU32::MIN,
    );
    let minted = kubeflavor::minting::mint(&cluster, &meta, None, || {
        Ok(draws.next().expect("at most two draws"))
    })
    .await
    .expect("the second draw is minted");
    h.env.made.token(&minted);
    assert_ne!(minted.id(), old.id());
    ctl.stop().await;
}

/// A Node of the name that appears after the facts were read (a kubelet that joined
/// another way, an admin) must not be taken over: the CSR is denied, and the Node does
/// not get the token's flavor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_appearing_before_the_approval_is_not_taken_over() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let node = h.name("node-late");
    let (admin, name) = (h.admin.clone(), node.clone());
    let hook = act_after(Step::Bound, move || {
        let (admin, name) = (admin.clone(), name.clone());
        async move { create_node(&admin, &name).await }
    });
    let ctl = ControllerHandle::start(h.admin.clone(), h.options("ctl"), Some(hook));
    let t = h.token(&f, 1, None).await;
    let csr = h.name("csr-late");
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Denied");
    trail_names(&h, &csr, &["node_exists_without_binding"]).await;
    ctl.stop().await;
    let after = h.nodes().get(&node).await.expect("node kept");
    assert_eq!(
        label(&after, FLAVOR_KEY),
        None,
        "flavored someone else's Node"
    );
    assert_eq!(label(&after, TIER_KEY), None);
}

/// A revocation between the binding and the approval: the revoked binding must not
/// lead to an approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_before_the_approval_is_not_ignored() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let node = h.name("node-rev");
    let (kubeconfig, name) = (h.env.kubeconfig.clone(), node.clone());
    let hook = act_after(Step::Bound, move || {
        let argv = [
            "kubeflavor".to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "node".into(),
            "revoke".into(),
            name.clone(),
        ];
        async move {
            let mut out = Vec::new();
            kubeflavor::run(argv.to_vec(), &mut out)
                .await
                .expect("node revoke");
        }
    });
    let ctl = ControllerHandle::start(h.admin.clone(), h.options("ctl"), Some(hook));
    let t = h.token(&f, 1, None).await;
    let csr = h.name("csr-rev");
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_eq!(h.decision(&csr).await, "Denied");
    // `node revoke` also spends the token: the controller finds the binding revoked, or
    // the token gone, whichever it reads first.
    trail_names(&h, &csr, &["binding_revoked", "token_missing"]).await;
    ctl.stop().await;
    h.env.kf(&["node", "forget", &node]).await.expect_ok();
}

/// A burst of bad CSRs from one token, decided at once, against a denial limit of
/// 3: the limit holds (the token is deleted) and no CSR of it is approved afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_denial_limit_holds_under_a_burst() {
    let h = Harness::start().await;
    let f = h.gold_flavor("sweet").await;
    let t = h.token(&f, 1, None).await;
    let csrs = h.wrong_shape_csrs(&t, "burst", 12).await;
    let mut opts = h.options("ctl");
    opts.denial_limit = 3;
    let ctl = h.start_controller(opts);
    h.all_denied(&csrs).await;
    h.token_gone(&t).await;
    let metrics = ctl.metrics.clone();
    ctl.stop().await;
    assert!(
        metrics
            .render()
            .contains("kubeflavor_tokens_deleted_total 1"),
        "{}",
        metrics.render()
    );
}

/// With `--manage-renewals`, nodes kubeflavor never bound (control-plane nodes,
/// nodes joined with kubeadm's tokens) keep renewing: kube-controller-manager's
/// selfnodeclient approval is gone, and kubeflavor takes its place for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_kubeflavor_never_bound_keep_renewing() {
    let h = Harness::start_serial().await;
    h.env
        .kf(&["install", "--apply", "--replicas", "0", "--manage-renewals"])
        .await
        .expect_ok();
    let mut opts = h.options("ctl");
    opts.manage_renewals = true;
    let ctl = h.start_controller(opts);
    // A node identity kubeflavor never bound: the admin files its first CSR, which
    // kube-controller-manager approves (system:masters passes the nodeclient review).
    let node = h.name("kubeadm-node");
    let first = h.name("csr-admin");
    h.submit_csr(&h.admin, &first, &node).await;
    let node_client = h.node_client(&first).await;
    let renewal = h.name("renew-unbound");
    h.submit_csr(&node_client, &renewal, &node).await;
    let decided = h.decided(&renewal).await;
    assert_eq!(condition_type(&decided).as_deref(), Some("Approved"));
    assert_eq!(
        visible_conditions(&decided)[0].2.as_deref(),
        Some(kubeflavor_core::approval::client::APPROVED_CONDITION.reason)
    );
    ctl.stop().await;
}

/// With kubeadm's nodeclient auto-approval, a kubeadm token could take a name bound
/// to a kubeflavor token (kube-controller-manager approves first). The controller says so
/// at start, refuses `--strict` while it holds, and `install --sole-approver` hands the
/// approval over in one step; then such a CSR is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadm_tokens_cannot_take_a_bound_name_once_kubeflavor_is_the_sole_approver() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kubeflavor::controller::approvers::{self, Kind};
    let h = Harness::start_serial().await;
    // kubeadm's auto-approval of its token group, under a name of this run (a shared
    // cluster may have had kubeadm's own binding removed by an earlier run).
    let crb: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": h.name("bootstrap-autoapprove")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": approvers::KUBEADM_TOKEN_GROUP}],
    }))
    .unwrap();
    let crbs = Api::<ClusterRoleBinding>::all(h.admin.clone());
    crbs.create(&Default::default(), &crb)
        .await
        .expect("binding");
    // Not strict: the controller's start-up check lets it run, and publishes it.
    let metrics = kubeflavor::controller::metrics::Metrics::new();
    approvers::check(&h.admin, &h.options("warned"), &metrics)
        .await
        .expect("not strict: the controller runs");
    assert!(
        metrics
            .render()
            .contains("kubeflavor_competing_approvals{kind=\"other_tokens\"} 1"),
        "{}",
        metrics.render()
    );
    // Strict: refused, naming the one step that fixes it.
    let mut strict = h.options("strict");
    strict.strict = true;
    let refused = kubeflavor::controller::run(
        kubeflavor::controller::Runtime::new(h.admin.clone(), strict.clone()),
        std::future::pending(),
    )
    .await
    .expect_err("--strict refused while kubeadm tokens are auto-approved");
    assert!(refused.to_string().contains("--sole-approver"), "{refused}");
    crbs.delete(&h.name("bootstrap-autoapprove"), &Default::default())
        .await
        .expect("binding deleted");

    h.install_sole_approver().await;
    assert_eq!(
        approvers::auto_approved(&h.admin, Kind::OtherTokens)
            .await
            .expect("review"),
        None
    );
    strict.manage_renewals = true;
    let ctl = h.start_controller(strict);
    let takeover = kubeadm_asks_for_a_bound_name(&h).await;
    assert_eq!(h.decision(&takeover).await, "Denied");
    trail_names(&h, &takeover, &["not_kubeflavor_token"]).await;
    ctl.stop().await;
}

/// A kubeflavor token binds a name (with a controller running); then a kubeadm token (its
/// group may still file CSRs) files a CSR for that name. Returns that CSR's name.
pub(crate) async fn kubeadm_asks_for_a_bound_name(h: &Harness) -> String {
    let f = h.gold_flavor("sweet").await;
    let node = h.name("node-bound");
    let t = h.token(&f, 1, None).await;
    let bound = h.name("csr-bound");
    h.submit_csr(&h.bootstrap_client(&t).await, &bound, &node)
        .await;
    assert_eq!(h.decision(&bound).await, "Approved");
    let kubeadm = BootstrapToken::generate().unwrap();
    TokenSecret::plain(
        &kubeadm,
        kubeflavor::controller::approvers::KUBEADM_TOKEN_GROUP,
    )
    .create(&h.env)
    .await;
    ensure_kubeadm_can_file_csrs(h).await;
    let takeover = h.name("csr-kubeadm");
    h.submit_csr(&h.bootstrap_client(&kubeadm).await, &takeover, &node)
        .await;
    takeover
}

/// kubeadm's `kubeadm:kubelet-bootstrap` (its token group may create CSRs), under a name of
/// this run in case the cluster lacks it.
pub(crate) async fn ensure_kubeadm_can_file_csrs(h: &Harness) {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let crb: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": h.name("kubeadm-kubelet-bootstrap")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": kubeflavor::controller::approvers::KUBEADM_TOKEN_GROUP}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(h.admin.clone())
        .create(&Default::default(), &crb)
        .await
        .expect("binding");
}

/// A bootstrap identity files a well-formed CSR as large as the API server stores (a
/// megabyte of extension): the controller refuses it without parsing it, the token is
/// counted like any malformed request, and the next node of the same flavor still joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csr_as_large_as_the_api_server_stores_is_denied_and_enrollment_goes_on() {
    let h = Harness::start().await;
    let flavor = h.gold_flavor("gold").await;
    let ctl = h.start_controller(h.options("ctl"));
    let attacker = h.token(&flavor, 1, None).await;
    let client = h.bootstrap_client(&attacker).await;

    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(
        rcgen::DnType::CommonName,
        format!("system:node:{}", h.name("huge")),
    );
    params.distinguished_name = dn;
    // A private, non-critical extension of 1 MB: the CSR still parses for the API server.
    params
        .custom_extensions
        .push(rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 99999, 1],
            vec![0x04; 1_000_000],
        ));
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    assert!(pem.len() > 1_000_000);
    let huge = h.name("csr-huge");
    let object = kubeflavor::join::tls_bootstrap::kubelet_csr_object(Some(&huge), &pem);
    let api = Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(client);
    let params = kube::api::PostParams::default();
    crate::support::fresh(|| api.create(&params, &object))
        .await
        .expect("the API server stores the CSR");
    assert_eq!(h.decision(&huge).await, "Denied");
    trail_names(&h, &huge, &["malformed_csr"]).await;

    let honest = h.token(&flavor, 1, None).await;
    let node = h.name("next");
    h.submit_csr(&h.bootstrap_client(&honest).await, &node, &node)
        .await;
    assert_eq!(h.decision(&node).await, "Approved");
    ctl.stop().await;
}

/// A join line copied into a cloud-init file, a portal log or a shell history is still
/// valid after its node joined. Whoever finds it must not get a certificate of their own
/// for that node: a CSR with the same token and a new key is denied as a re-key and counted
/// on the token; the node's own kubelet, retrying with its key, is still approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_line_cannot_rekey_a_joined_node() {
    let h = Harness::start().await;
    let f = h.gold_flavor("rekey").await;
    let ctl = h.start_controller(h.options("ctl"));
    let node = h.name("node-rekey");
    // Room for a second node, so the token is still there after the first joined.
    let t = h.token(&f, 2, None).await;
    let first = h.name("csr-first");
    h.submit_csr(&h.bootstrap_client(&t).await, &first, &node)
        .await;
    assert_eq!(h.decision(&first).await, "Approved");
    h.register_node(&first, &node, &[], &[]).await;
    h.node_until(&node, "flavored", |n| label(n, TIER_KEY) == Some("gold"))
        .await;

    let rekey = h.name("csr-rekey");
    h.submit_csr(&h.bootstrap_client(&t).await, &rekey, &node)
        .await;
    assert_eq!(h.decision(&rekey).await, "Denied");
    trail_names(&h, &rekey, &["rekey_attempt"]).await;
    let secret = h
        .token_secret(&t)
        .await
        .expect("token kept below the limit");
    let denials = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(kubeflavor_core::token::secret::DENIALS_ANNOTATION))
        .cloned();
    assert_eq!(denials.as_deref(), Some("1"), "the re-key is counted");
    let binding = h.bindings().get(&node).await.expect("binding kept");
    assert_eq!(binding.spec.csr_name, first, "the binding is unchanged");

    let retry = h.name("csr-retry");
    h.resubmit_csr(&h.bootstrap_client(&t).await, &retry, &node, &first)
        .await;
    assert_eq!(h.decision(&retry).await, "Approved");
    ctl.stop().await;
}

/// A deleted FlavorBinding must not leave its Node trusted: the Node loses the flavor
/// kubeflavor gave it and is tainted unverified again, also when the binding went while no
/// controller ran. A binding's identity (token, uid, CSR, key, time) cannot be edited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_binding_leaves_no_trusted_node_and_bindings_cannot_be_edited() {
    use kube::api::{Patch, PatchParams};
    let h = Harness::start().await;
    let f = h.gold_flavor("released").await;
    let ctl = h.start_controller(h.options("ctl"));
    let (live, offline) = (h.name("node-live"), h.name("node-offline"));
    for node in [&live, &offline] {
        let t = h.token(&f, 1, None).await;
        let csr = h.name(&format!("csr-{node}"));
        h.submit_csr(&h.bootstrap_client(&t).await, &csr, node)
            .await;
        assert_eq!(h.decision(&csr).await, "Approved");
        h.register_node(
            &csr,
            node,
            &[],
            &[("kubeflavor.io/unverified", "NoSchedule")],
        )
        .await;
        h.node_until(node, "flavored", |n| {
            label(n, TIER_KEY) == Some("gold") && !has_taint(n, "kubeflavor.io/unverified")
        })
        .await;
    }

    for (field, value) in [
        ("tokenId", serde_json::json!("zzzzzz")),
        ("tokenUid", serde_json::json!("another-secret")),
        ("csrName", serde_json::json!("csr-someone-else")),
        ("publicKeySha256", serde_json::json!("ab".repeat(32))),
        ("boundAt", serde_json::json!("2020-01-01T00:00:00Z")),
    ] {
        let patch = serde_json::json!({"spec": {field: value}});
        let err = h
            .bindings()
            .patch(&live, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err("identity fields are immutable");
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 422),
            "{field}: {err}"
        );
    }

    // Deleted while the controller runs.
    h.bindings()
        .delete(&live, &Default::default())
        .await
        .expect("binding deleted");
    let released = |n: &k8s_openapi::api::core::v1::Node| {
        label(n, TIER_KEY).is_none()
            && label(n, FLAVOR_KEY).is_none()
            && has_taint(n, "kubeflavor.io/unverified")
    };
    h.node_until(&live, "released", released).await;

    // Deleted while no controller runs: the next one releases the Node.
    ctl.stop().await;
    h.bindings()
        .delete(&offline, &Default::default())
        .await
        .expect("binding deleted");
    let ctl = h.start_controller(h.options("ctl-next"));
    h.node_until(&offline, "released", released).await;
    ctl.stop().await;
}

/// A token whose every use is bound and whose nodes all registered has no further use:
/// the controller deletes it, and a copy of its join line then authenticates nobody. A
/// token with a use left stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_token_is_retired_once_its_nodes_joined() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let h = Harness::start().await;
    let f = h.gold_flavor("used-up").await;
    let ctl = h.start_controller(h.options("ctl"));
    let (single, spare) = (h.token(&f, 1, None).await, h.token(&f, 2, None).await);
    let copy = h.bootstrap_client(&single).await;
    for (t, node) in [
        (&single, h.name("node-single")),
        (&spare, h.name("node-spare")),
    ] {
        let csr = h.name(&format!("csr-{node}"));
        h.submit_csr(&h.bootstrap_client(t).await, &csr, &node)
            .await;
        assert_eq!(h.decision(&csr).await, "Approved");
        assert!(
            h.token_secret(t).await.is_some(),
            "kept until its node joined"
        );
        h.register_node(&csr, &node, &[], &[]).await;
        h.node_until(&node, "flavored", |n| label(n, TIER_KEY) == Some("gold"))
            .await;
    }
    h.token_gone(&single).await;
    // The API server keeps a token's successful authentication for a while (about 10 s
    // measured on a real v1.36 server, whose authenticator also reads an informer cache of
    // token Secrets): ask until it refuses (there is no event to wait on).
    let reviews = Api::<SelfSubjectReview>::all(copy);
    let (params, review) = (Default::default(), SelfSubjectReview::default());
    let answer = kubeflavor_cluster::cache_lag::until_settled(
        std::time::Duration::from_secs(30),
        || reviews.create(&params, &review),
        |answer| answer.is_err(),
    )
    .await;
    assert!(
        matches!(&answer, Err(kube::Error::Api(s)) if s.code == 401),
        "the join line authenticates nobody: {answer:?}"
    );
    assert!(
        h.token_secret(&spare).await.is_some(),
        "a token with a use left stays"
    );
    ctl.stop().await;
}
