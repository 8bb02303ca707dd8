//! P6 (nothing lost): a controller stopped between any two writes, API errors (409, 500)
//! and cut watches. The next run (or the retry) finishes the job: no token use lost or
//! doubled, no approved node without a binding, no approved node left unflavored.

use crate::harness::*;
use kubeflavor::controller::Step;

/// The CSR is approved and its node bound to the token.
async fn assert_approved_and_bound(
    h: &Harness,
    token: &kubeflavor_core::token::BootstrapToken,
    csr: &str,
    node: &str,
) {
    assert_eq!(h.decision(csr).await, "Approved");
    let binding = h
        .bindings()
        .get(node)
        .await
        .expect("an approved node has a binding");
    assert_eq!(binding.spec.token_id, token.id().as_str());
}

/// The end state every scenario must reach for one join.
async fn assert_joined_once(
    h: &Harness,
    token: &kubeflavor_core::token::BootstrapToken,
    csr: &str,
    node: &str,
) {
    assert_approved_and_bound(h, token, csr, node).await;
    assert_eq!(
        h.bound_nodes(token).await,
        vec![node.to_string()],
        "exactly one use spent"
    );
}

/// The end state once the node registered and was flavored: approved once, bound to the
/// token, and the single-use token retired as used up (the controller retires a token only
/// when its bound names are exactly the ones with Nodes, so a use spent twice would keep
/// it).
async fn assert_joined_and_retired(
    h: &Harness,
    token: &kubeflavor_core::token::BootstrapToken,
    csr: &str,
    node: &str,
) {
    assert_approved_and_bound(h, token, csr, node).await;
    h.token_gone(token).await;
}

/// Runs one join with a controller frozen right after `step`, then a fresh controller.
async fn crash_after(step: Step) {
    let h = Harness::start().await;
    let f = h.name("sweet");
    let (node, csr) = (h.name("node-c"), h.name("csr-c"));
    h.flavor(&f, &[(TIER_KEY, "gold")], &[]).await;
    let t = h.token(&f, 1, None).await;
    let (hook, frozen) = freeze_after(step);
    let first = ControllerHandle::start(h.admin.clone(), h.options("first"), Some(hook));
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    let registered_first = matches!(
        step,
        Step::NodePatched | Step::TokenRetired | Step::StatusWritten
    );
    if registered_first {
        h.decided(&csr).await;
        h.register_node(
            &csr,
            &node,
            &[],
            &[("kubeflavor.io/unverified", "NoSchedule")],
        )
        .await;
    }
    within(
        &format!("the first controller to stop after {step:?}"),
        frozen,
    )
    .await
    .expect("hook fired");
    first.stop().await;

    let second = h.start_controller(h.options("second"));
    if !registered_first {
        assert_joined_once(&h, &t, &csr, &node).await;
        h.register_node(
            &csr,
            &node,
            &[],
            &[("kubeflavor.io/unverified", "NoSchedule")],
        )
        .await;
    }
    h.node_until(&node, "flavored by the next run", |n| {
        label(n, TIER_KEY) == Some("gold") && !has_taint(n, "kubeflavor.io/unverified")
    })
    .await;
    h.binding_until(&node, "status Flavored", |b| {
        b.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Flavored" && c.status == "True")
        })
    })
    .await;
    assert_joined_and_retired(&h, &t, &csr, &node).await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_reservation_and_binding_is_finished_by_the_next_run() {
    crash_after(Step::Reserved).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_binding_and_approval_is_finished_by_the_next_run() {
    crash_after(Step::Bound).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_approval_and_flavoring_is_finished_by_the_next_run() {
    crash_after(Step::Approved).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_node_patch_and_binding_status_is_finished_by_the_next_run() {
    crash_after(Step::NodePatched).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_token_retirement_and_binding_status_is_finished_by_the_next_run() {
    crash_after(Step::TokenRetired).await;
}

/// Faults injected into testkube (skipped on a real cluster, where they cannot be).
async fn with_fault(inject: impl FnOnce(&testkube::TestCluster)) {
    let h = Harness::start().await;
    let Some(tk) = h.env.testkube_or_skip("needs testkube's fault injection") else {
        return;
    };
    let f = h.name("sweet");
    let (node, csr) = (h.name("node-f"), h.name("csr-f"));
    h.flavor(&f, &[(TIER_KEY, "gold")], &[]).await;
    let t = h.token(&f, 1, None).await;
    let ctl = h.start_controller(h.options("ctl"));
    inject(tk);
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &node)
        .await;
    assert_joined_once(&h, &t, &csr, &node).await;
    h.register_node(&csr, &node, &[], &[]).await;
    h.node_until(&node, "flavored despite the faults", |n| {
        label(n, TIER_KEY) == Some("gold")
    })
    .await;
    assert_joined_and_retired(&h, &t, &csr, &node).await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_on_the_reservation_are_retried_without_a_double_use() {
    with_fault(|tk| tk.faults().fail_next(2, "update", "secrets", 409)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_on_binding_approval_and_node_patch_are_retried() {
    with_fault(|tk| {
        tk.faults().fail_next(1, "create", "flavorbindings", 500);
        tk.faults()
            .fail_next(1, "update", "certificatesigningrequests/approval", 500);
        tk.faults().fail_next(1, "patch", "nodes", 500);
        tk.faults()
            .fail_next(1, "patch", "flavorbindings/status", 500);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_on_node_patch_and_approval_are_retried() {
    with_fault(|tk| {
        tk.faults()
            .fail_next(1, "update", "certificatesigningrequests/approval", 409);
        tk.faults().fail_next(2, "patch", "nodes", 409);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_watches_do_not_lose_a_join() {
    let h = Harness::start().await;
    let Some(tk) = h.env.testkube_or_skip("needs testkube's fault injection") else {
        return;
    };
    let f = h.gold_flavor("sweet").await;
    let ctl = h.start_controller(h.options("ctl"));
    let t = h.token(&f, 2, None).await;
    let client = h.bootstrap_client(&t).await;
    let (n1, c1) = (h.name("node-1"), h.name("csr-1"));
    h.submit_csr(&client, &c1, &n1).await;
    h.decided(&c1).await;
    tk.faults().cut_watches();
    let (n2, c2) = (h.name("node-2"), h.name("csr-2"));
    h.submit_csr(&client, &c2, &n2).await;
    assert_eq!(h.decision(&c2).await, "Approved");
    tk.faults().cut_watches();
    h.register_node(&c2, &n2, &[], &[]).await;
    h.node_until(&n2, "flavored after cut watches", |n| {
        label(n, TIER_KEY) == Some("gold")
    })
    .await;
    let mut bound = h.bound_nodes(&t).await;
    bound.sort();
    let mut want = vec![n1, n2];
    want.sort();
    assert_eq!(bound, want);
    ctl.stop().await;
}
