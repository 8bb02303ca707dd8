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
use kubeflavor::ops::http;

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
                if kubeflavor_core::trail_policy::is_controllers(ev.reporting_controller.as_deref())
                    && regarding.kind.as_deref() == Some("ClusterRoleBinding")
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

/// After `install --sole-approver`, kubeadm's `kubeadm:node-autoapprove-bootstrap` comes
/// back while a `--strict` controller runs: it is not ready, the gauge says so, an Event
/// names the binding and the fix; once the binding is deleted it is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadms_bootstrap_binding_recreated_under_a_strict_controller_makes_it_not_ready() {
    let h = Harness::start_serial().await;
    h.env
        .kf(&["install", "--apply", "--replicas", "0", "--sole-approver"])
        .await
        .expect_ok();
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
    h.env
        .kf(&["install", "--apply", "--replicas", "0", "--sole-approver"])
        .await
        .expect_ok();
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
