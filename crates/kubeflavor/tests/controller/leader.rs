//! High availability: replicas compete for a coordination.k8s.io/v1 Lease; one leads, a
//! standby takes over when the leader stops (cleanly or by crashing).

use std::time::Duration;

use crate::harness::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::wait::await_condition;
use kubeflavor::controller::Options;

fn ha_options(h: &Harness, identity: &str) -> Options {
    let mut o = h.options(identity);
    o.leader_elect = true;
    o.lease_duration = Duration::from_secs(2);
    o.renew_deadline = Duration::from_millis(1500);
    o.retry_period = Duration::from_millis(200);
    o
}

async fn holder_becomes(h: &Harness, want: &'static str) -> Lease {
    let leases: Api<Lease> = Api::namespaced(h.admin.clone(), "kube-system");
    within(
        &format!("the Lease to be held by {want}"),
        await_condition(
            leases,
            &h.options("").lease_name,
            move |l: Option<&Lease>| {
                l.and_then(|l| l.spec.as_ref())
                    .and_then(|s| s.holder_identity.as_deref())
                    == Some(want)
            },
        ),
    )
    .await
    .expect("watch works")
    .expect("lease exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_after_the_leader_crashes() {
    let h = Harness::start().await;
    let a = h.start_controller(ha_options(&h, "replica-a"));
    let first = holder_becomes(&h, "replica-a").await;
    let b = h.start_controller(ha_options(&h, "replica-b"));

    // A crash: no release, the Lease must expire first.
    a.kill();
    let taken = holder_becomes(&h, "replica-b").await;
    let spec = taken.spec.expect("spec");
    assert_eq!(
        spec.lease_transitions.unwrap_or(0),
        first.spec.and_then(|s| s.lease_transitions).unwrap_or(0) + 1
    );
    // MicroTime with exactly six fractional digits (the real server refuses others).
    if let Some(tk) = h.testkube() {
        let raw = tk
            .get_object(
                "coordination.k8s.io",
                "leases",
                "kube-system",
                &h.options("").lease_name,
            )
            .expect("stored lease");
        let renew = raw["spec"]["renewTime"].as_str().expect("renewTime");
        assert_eq!(renew.split('.').nth(1).map(str::len), Some(7), "{renew}");
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_shutdown_releases_the_lease_to_the_standby() {
    let h = Harness::start().await;
    // A lease so long that only a release (not expiry) can hand it over in this test.
    let slow = |id| {
        let mut o = ha_options(&h, id);
        o.lease_duration = Duration::from_secs(3600);
        o.renew_deadline = Duration::from_secs(3000);
        o
    };
    let a = h.start_controller(slow("replica-a"));
    holder_becomes(&h, "replica-a").await;
    let b = h.start_controller(slow("replica-b"));
    a.stop().await;
    holder_becomes(&h, "replica-b").await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_decides() {
    let h = Harness::start().await;
    let f = h.name("sweet");
    h.flavor(
        &f,
        &[("tier.node-restriction.kubernetes.io/class", "gold")],
        &[],
    )
    .await;
    let a = h.start_controller(ha_options(&h, "replica-a"));
    holder_becomes(&h, "replica-a").await;
    let b = h.start_controller(ha_options(&h, "replica-b"));
    let t = h.token(&f, 1, None).await;
    let csr = h.name("csr-ha");
    h.submit_csr(&h.bootstrap_client(&t).await, &csr, &h.name("node-ha"))
        .await;
    assert_eq!(h.decision(&csr).await, "Approved");
    assert!(
        b.metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("kubeflavor_csr_decisions_total{"))
            .all(|l| l.ends_with(" 0")),
        "the standby decided nothing"
    );
    assert!(b.metrics.render().contains("kubeflavor_leader 0"));
    a.stop().await;
    b.stop().await;
}

/// A leader whose Lease renewals hang (a partition: the request sent, no answer ever)
/// steps down by its renew deadline, without waiting for the request: otherwise it would
/// go on writing after a standby took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_hang_steps_down() {
    let h = Harness::start().await;
    let Some(tk) = h
        .env
        .testkube_or_skip("needs testkube's fault injection to hang requests")
    else {
        return;
    };
    let a = h.start_controller(ha_options(&h, "replica-a"));
    holder_becomes(&h, "replica-a").await;
    within("replica-a to lead", a.health.wait_leading(true)).await;
    // Every Lease update from now on is answered only after an hour.
    tk.faults()
        .delay_next(1000, "update", "leases", Duration::from_secs(3600));
    within(
        "replica-a to step down while its renewal hangs",
        a.health.wait_leading(false),
    )
    .await;
    assert_eq!(a.metrics.leader.get(), 0, "the leader gauge follows");
    a.kill();
}
