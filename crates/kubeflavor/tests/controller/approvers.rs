//! Who else approves kubelet client CSRs, read from RBAC at start and whenever it changes:
//! kubeadm's bootstrap auto-approval re-created under a running `--strict` controller (as
//! `kubeadm upgrade apply` does), and another bootstrap group auto-approved before start.
//! These tests change who approves what cluster-wide, so they take turns
//! (`Harness::start_serial`) and remove what they made.

use crate::harness::*;
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kubeflavor::controller::approvers::{self, COMPETING_REASON, KUBEADM_BOOTSTRAP_BINDING};
use kubeflavor_cluster::ops::http;

const NODECLIENT_ROLE: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";

/// A ClusterRoleBinding of the nodeclient auto-approval to `group`, as kubeadm writes its own.
fn autoapprove(name: &str, group: &str) -> ClusterRoleBinding {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": NODECLIENT_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }))
    .expect("binding")
}

fn gauge(metrics: &kubeflavor::controller::metrics::Metrics, kind: &str, value: u8) -> bool {
    metrics.render().contains(&format!(
        "kubeflavor_competing_approvals{{kind=\"{kind}\"}} {value}"
    ))
}

/// Waits for an Event of the trail about the ClusterRoleBinding `binding`, written by the
/// controller `instance`; returns its note.
async fn event_about(h: &Harness, binding: &str, instance: &str) -> String {
    let api = Api::<Event>::namespaced(h.admin.clone(), "kube-system");
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    within(
        &format!("an Event about ClusterRoleBinding {binding}"),
        async {
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let regarding = ev.regarding.clone().unwrap_or_default();
                if kubeflavor_core::admission::trail::is_controllers(
                    ev.reporting_controller.as_deref(),
                ) && regarding.kind.as_deref() == Some("ClusterRoleBinding")
                    && regarding.name.as_deref() == Some(binding)
                    && ev.reporting_instance.as_deref() == Some(instance)
                {
                    assert_eq!(ev.reason.as_deref(), Some(COMPETING_REASON));
                    assert_eq!(ev.type_.as_deref(), Some("Warning"));
                    return ev.note.unwrap_or_default();
                }
            }
            panic!("event watch ended")
        },
    )
    .await
}

/// After `install --sole-approver` with its policy's binding gone (the controller's own
/// check is the second line), kubeadm's `kubeadm:node-autoapprove-bootstrap` comes
/// back while a `--strict` controller runs: it is not ready, the gauge says so, an Event
/// names the binding and the fix; once the binding is deleted it is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadms_bootstrap_binding_recreated_under_a_strict_controller_makes_it_not_ready() {
    let h = Harness::start_serial().await;
    h.install_sole_approver().await;
    let instance = h.name("strict");
    let mut opts = h.options(&instance);
    opts.strict = true;
    opts.manage_renewals = true;
    let ctl = h.start_controller(opts);
    within("the controller synced", ctl.health.wait_synced()).await;
    assert!(ctl.health.is_ready(), "{:?}", ctl.health.blocked());
    assert!(
        gauge(&ctl.metrics, "other_tokens", 0),
        "{}",
        ctl.metrics.render()
    );

    // What `kubeadm upgrade apply` writes again.
    h.env.made.cluster_role_binding(KUBEADM_BOOTSTRAP_BINDING);
    let crbs = Api::<ClusterRoleBinding>::all(h.admin.clone());
    crbs.create(
        &Default::default(),
        &autoapprove(KUBEADM_BOOTSTRAP_BINDING, approvers::KUBEADM_TOKEN_GROUP),
    )
    .await
    .expect("kubeadm's binding re-created");
    within("not ready", ctl.health.wait_blocked(true)).await;
    assert!(!ctl.health.is_ready());
    let readyz = http::route("/readyz", &ctl.health, &ctl.metrics);
    assert_eq!(readyz.status(), 503);
    let why = ctl.health.blocked().expect("blocked");
    assert!(why.contains("--strict has no effect"), "{why}");
    assert!(
        why.contains(&format!(
            "kubectl delete clusterrolebinding {KUBEADM_BOOTSTRAP_BINDING}"
        )),
        "{why}"
    );
    assert!(
        gauge(&ctl.metrics, "other_tokens", 1),
        "{}",
        ctl.metrics.render()
    );
    let note = event_about(&h, KUBEADM_BOOTSTRAP_BINDING, &instance).await;
    assert!(note.contains(approvers::KUBEADM_TOKEN_GROUP), "{note}");
    assert!(
        note.contains(&format!(
            "kubectl delete clusterrolebinding {KUBEADM_BOOTSTRAP_BINDING}"
        )),
        "{note}"
    );
    assert!(
        note.contains("kubeflavor install --apply --sole-approver"),
        "{note}"
    );

    crbs.delete(KUBEADM_BOOTSTRAP_BINDING, &Default::default())
        .await
        .expect("binding deleted");
    within("ready again", ctl.health.wait_blocked(false)).await;
    assert!(ctl.health.is_ready());
    assert!(
        gauge(&ctl.metrics, "other_tokens", 0),
        "{}",
        ctl.metrics.render()
    );
    ctl.stop().await;
}

/// A bootstrap group that is neither kubeadm's nor kubeflavor's, auto-approved before
/// start: `--strict` refuses to start and names the binding; without `--strict` the
/// controller runs and the gauge says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_bootstrap_group_auto_approved_stops_strict_at_start() {
    let h = Harness::start_serial().await;
    h.install_sole_approver().await;
    let binding = h.name("workers-autoapprove");
    let group = format!("system:bootstrappers:{}", h.name("workers"));
    let crbs = Api::<ClusterRoleBinding>::all(h.admin.clone());
    crbs.create(&Default::default(), &autoapprove(&binding, &group))
        .await
        .expect("binding");

    let mut strict = h.options("strict");
    strict.strict = true;
    let refused = kubeflavor::controller::run(
        kubeflavor::controller::Runtime::new(h.admin.clone(), strict),
        std::future::pending(),
    )
    .await
    .expect_err("--strict refused while another bootstrap group is auto-approved");
    let msg = refused.to_string();
    assert!(
        msg.contains(&format!("ClusterRoleBinding {binding}")),
        "{msg}"
    );
    assert!(msg.contains(&format!("Group {group}")), "{msg}");
    assert!(
        msg.contains(&format!("kubectl delete clusterrolebinding {binding}")),
        "{msg}"
    );
    assert!(msg.contains("--sole-approver"), "{msg}");

    let metrics = kubeflavor::controller::metrics::Metrics::new();
    approvers::check(&h.admin, &h.options("warned"), &metrics)
        .await
        .expect("not strict: the controller runs");
    assert!(gauge(&metrics, "other_tokens", 1), "{}", metrics.render());
    assert!(
        gauge(&metrics, "kubeflavor_tokens", 0),
        "{}",
        metrics.render()
    );
    crbs.delete(&binding, &Default::default())
        .await
        .expect("binding deleted");
}

/// With `install --sole-approver`'s policy (here a copy scoped to this run's objects, the
/// cluster being shared), re-creating kubeadm's `kubeadm:node-autoapprove-bootstrap` as
/// `kubeadm upgrade apply` does is refused (422), kube-controller-manager never gets the
/// grant, and a kubeadm token's CSR for a name kubeflavor bound is not approved: the
/// `--strict` controller denies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sole_approver_policy_refuses_kubeadms_autoapproval_and_the_bound_name_stays() {
    use kubeflavor_core::admission::sole_approver::{self, NODECLIENT_ROLE};
    let h = Harness::start_serial().await;
    let said = h.install_sole_approver().await;
    assert!(
        said.contains("'kubeadm upgrade apply <version> --skip-phases bootstrap-token'"),
        "{said}"
    );
    let copy = h.bind_sole_approver_policy_to_run().await;
    let crbs = Api::<ClusterRoleBinding>::all(h.admin.clone());
    let before = crbs
        .get_opt(KUBEADM_BOOTSTRAP_BINDING)
        .await
        .expect("read kubeadm's binding");
    assert!(before.is_none(), "install --sole-approver deleted it");

    // What `kubeadm upgrade apply` writes again (labelled for this run's policy copy).
    h.env.made.cluster_role_binding(KUBEADM_BOOTSTRAP_BINDING);
    let mut kubeadms = autoapprove(KUBEADM_BOOTSTRAP_BINDING, approvers::KUBEADM_TOKEN_GROUP);
    let (key, value) = h.run_label();
    kubeadms.metadata.labels = Some([(key, value)].into());
    assert_eq!(kubeadms.role_ref.name, NODECLIENT_ROLE);
    match crbs.create(&Default::default(), &kubeadms).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            let why = &sole_approver::rules()[0].message;
            assert!(e.message.contains(why.as_str()), "{}", e.message);
            assert!(e.message.contains(&copy), "{}", e.message);
        }
        other => panic!("kubeadm's binding re-created: {other:?}"),
    }
    assert!(
        crbs.get_opt(KUBEADM_BOOTSTRAP_BINDING)
            .await
            .expect("read")
            .is_none()
    );

    let mut strict = h.options("strict");
    strict.strict = true;
    strict.manage_renewals = true;
    let ctl = h.start_controller(strict);
    let takeover = crate::attacks::kubeadm_asks_for_a_bound_name(&h).await;
    assert_eq!(h.decision(&takeover).await, "Denied");
    ctl.stop().await;
    h.unbind_sole_approver_policy_copy(&copy).await;
}
