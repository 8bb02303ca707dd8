//! The controller's Namespace, ServiceAccount, Deployment and PodDisruptionBudget.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, PodTemplateSpec};
use kube::api::ObjectMeta;

use super::pods::{
    LIVENESS_NOTE, budget, deployment_of, field_env, placement_notes, pod_spec, port,
    probed_container, resources, selector_of,
};
use super::rbac::CONTROLLER_SA;
use super::{Document, Mode, labels};
use crate::controller::approvers::KUBEADM_RENEWAL_BINDING;
use kubeflavor_core::node::placement::Placement;

/// The controller's HTTP port: /metrics, /healthz, /readyz.
pub const HTTP_PORT: i32 = 8080;
/// The name of the Deployment and of its PodDisruptionBudget.
const CONTROLLER: &str = "kubeflavor-controller";
/// The labels' component, and the pods' selector.
const COMPONENT: &str = "controller";
/// Node enrollment waits on the controller: it schedules ahead of ordinary workloads.
pub const PRIORITY_CLASS: &str = "system-cluster-critical";
/// The pod template's spec, as note paths name it.
const POD: &str = "spec.template.spec";
/// The controller's container, as note paths name it.
const CONTAINER: &str = "spec.template.spec.containers";

pub fn default_image() -> String {
    format!(
        "ghcr.io/kubeflavor/kubeflavor:{}",
        env!("CARGO_PKG_VERSION")
    )
}

pub fn namespace(name: &str) -> Document {
    let mut namespace_labels = labels("namespace");
    // The controller's pod meets the "restricted" Pod Security Standard; enforcing it keeps
    // anything else placed in this namespace (next to a token-deleting identity) as tight.
    namespace_labels.insert(
        "pod-security.kubernetes.io/enforce".into(),
        "restricted".into(),
    );
    Document::new(
        "The controller's namespace, enforcing the restricted Pod Security Standard.",
        &Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(namespace_labels),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

pub fn service_account(namespace: &str) -> Document {
    super::pods::service_account(
        namespace,
        (CONTROLLER_SA, COMPONENT),
        "The controller's identity; every permission below is granted to it and to nothing else.",
        "the controller's pod",
    )
}

/// The controller's Deployment: `replicas` pods electing a leader, with the flags `mode`
/// asks for, and a note on every field a reviewer would ask about.
pub fn deployment(namespace: &str, image: &str, replicas: u16, mode: Mode) -> Document {
    let deployment = deployment_of(
        namespace,
        (CONTROLLER, COMPONENT),
        i32::from(replicas),
        1,
        pod_template(image, mode),
    );
    let about = format!(
        "The controller. Replicas elect a leader; only the Lease holder writes.\n{}",
        renewals_about(mode)
    );
    let doc = Document::new(&about, &deployment);
    container_notes(pod_notes(rollout_notes(doc), mode.placement), mode)
}

/// The controller's pod: scraped by Prometheus, scheduled as cluster-critical.
fn pod_template(image: &str, mode: Mode) -> PodTemplateSpec {
    let selector = selector_of(COMPONENT);
    let pod = pod_spec(
        CONTROLLER_SA,
        &selector,
        container(image, mode),
        mode.placement,
    );
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(selector),
            annotations: Some(scrape_annotations()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            priority_class_name: Some(PRIORITY_CLASS.into()),
            volumes: mode.authz.then(|| vec![super::authz::volume()]),
            ..pod
        }),
    }
}

/// Prometheus' `prometheus.io/*` hints: /metrics on the HTTP port.
fn scrape_annotations() -> BTreeMap<String, String> {
    [
        ("prometheus.io/scrape", "true".to_string()),
        ("prometheus.io/port", HTTP_PORT.to_string()),
        ("prometheus.io/path", "/metrics".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn container(image: &str, mode: Mode) -> Container {
    Container {
        args: Some(args(mode)),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(
            std::iter::once(port("http", HTTP_PORT))
                .chain(mode.authz.then(|| port("authz", super::authz::AUTHZ_PORT)))
                .collect(),
        ),
        volume_mounts: mode.authz.then(|| vec![super::authz::mount()]),
        resources: Some(resources("50m", "64Mi", "256Mi")),
        ..probed_container("controller", image)
    }
}

/// `kubeflavor controller` with leader election, and the approval flags of `mode`.
fn args(mode: Mode) -> Vec<String> {
    [
        "controller".into(),
        "--leader-elect".into(),
        "--lease-namespace=$(POD_NAMESPACE)".into(),
        format!("--http-address=0.0.0.0:{HTTP_PORT}"),
    ]
    .into_iter()
    .chain(
        mode.manage_renewals
            .then(|| "--manage-renewals".to_string()),
    )
    .chain(mode.strict.then(|| "--strict".to_string()))
    .chain(
        mode.approve_serving
            .then(|| "--approve-serving".to_string()),
    )
    .chain(mode.authz.then(super::authz::args).into_iter().flatten())
    .collect()
}

/// Who approves renewals in this mode, and what the admin must do about kubeadm's binding.
fn renewals_about(mode: Mode) -> String {
    if mode.manage_renewals {
        format!(
            "Renewals: kubeflavor decides them (--manage-renewals: only bound, unrevoked nodes). \
             kubeadm binds system:nodes to the selfnodeclient auto-approval, so delete that \
             binding before this runs: kubectl delete clusterrolebinding {KUBEADM_RENEWAL_BINDING} \
             (install --apply does); the controller refuses to start while renewals are still \
             auto-approved."
        )
    } else {
        format!(
            "Renewals: kubeadm binds system:nodes to the selfnodeclient auto-approval \
             (ClusterRoleBinding {KUBEADM_RENEWAL_BINDING}), so kube-controller-manager approves \
             every renewal first. To let kubeflavor decide renewals (only bound, unrevoked \
             nodes), run install --apply --manage-renewals."
        )
    }
}

/// Why the replicas and the rollout strategy are what they are: leader election.
fn rollout_notes(doc: Document) -> Document {
    doc.note(
        "spec.replicas",
        "Replicas compete for the Lease kubeflavor-controller in this namespace: only the holder \
         writes, a standby takes over within the lease duration (15 s). install --replicas N sets \
         the count; 0 runs no controller here.",
    )
    .note(
        "spec.strategy",
        "Rollouts replace one pod at a time (at most one unavailable, one extra): with 2 replicas a \
         standby is there to take the Lease when the leader's pod goes.",
    )
}

/// The pod's scrape hints, identity, priority, security and placement.
fn pod_notes(doc: Document, placement: Placement) -> Document {
    placement_notes(
        doc,
        POD,
        placement,
        "Among those nodes, prefer replicas on different ones, so losing one node does not take \
         the leader and its standby together (preferred, not required: one such node still runs \
         them all).",
    )
    .note(
        "spec.template.metadata.annotations",
        &format!(
            "Scrape hints for Prometheus' common kubernetes-pods job: /metrics on port {HTTP_PORT}. \
             The port is also named http, so a PodMonitor can select it by name."
        ),
    )
    .note(
        &format!("{POD}.serviceAccountName"),
        "The identity every grant of this install set names.",
    )
    .note(
        &format!("{POD}.automountServiceAccountToken"),
        "The ServiceAccount mounts no token by default; this pod, which watches and writes \
         through the API server, opts in. The kubelet mounts a projected token that expires and is \
         rotated.",
    )
    .note(
        &format!("{POD}.priorityClassName"),
        "Nodes join only when this controller approves their kubelet certificates, so it is \
         cluster-critical: scheduled ahead of ordinary pods (preempting them if needed) and among \
         the last evicted under node pressure. An API server that admits this class only where a \
         ResourceQuota covers it (limitedResources) needs such a quota in this namespace.",
    )
    .note(
        &format!("{POD}.securityContext"),
        "Non-root uid and gid 65532 with the container runtime's default seccomp profile: what the \
         restricted Pod Security Standard this namespace enforces requires.",
    )
}

/// The container's flags, identity in the Lease, port, probes, sizing and lockdown.
fn container_notes(doc: Document, mode: Mode) -> Document {
    doc.note(&format!("{CONTAINER}.args"), &args_note(mode))
        .note(
            &format!("{CONTAINER}.env"),
            "Downward API: the pod's name is this replica's identity in the Lease, its namespace \
             is where the Lease is kept.",
        )
        .note(
            &format!("{CONTAINER}.ports"),
            "http: /metrics, /healthz and /readyz, plain HTTP. No Service: nothing calls the \
             controller, Prometheus scrapes the pods.",
        )
        .note(&format!("{CONTAINER}.livenessProbe"), LIVENESS_NOTE)
        .note(
            &format!("{CONTAINER}.readinessProbe"),
            "/readyz: a standby is ready (waiting for the Lease is its job), the leader once its \
             watch caches have synced, neither while shutting down. Rollouts wait for it.",
        )
        .note(
            &format!("{CONTAINER}.resources"),
            "Measured peak RSS: ~26 MiB with 1,000 flavored nodes, ~30 MiB with 10,000, ~51 MiB \
             with 100,000 (about 0.26 KiB per node); CPU 2 to 3 ms per join, none at rest. The \
             64Mi request holds 100,000 nodes; the 256Mi limit stops a leak before it starves the \
             node. No CPU limit: CFS throttling during a burst of joins would delay Lease renewals \
             and can cost the leader its Lease; 50m is what the scheduler reserves.",
        )
        .note(
            &format!("{CONTAINER}.securityContext"),
            "No privilege escalation, no capabilities, non-root, read-only root filesystem: the \
             controller writes no files.",
        )
}

/// What the controller's flags do in this mode.
fn args_note(mode: Mode) -> String {
    let mut note = format!(
        "The controller with leader election, its Lease in the pod's namespace; /metrics, /healthz \
         and /readyz on port {HTTP_PORT} of the pod IP."
    );
    if mode.manage_renewals {
        note.push_str(
            " --manage-renewals: renewals of bound, unrevoked nodes are approved, the rest denied.",
        );
    }
    if mode.strict {
        note.push_str(" --strict: CSRs of bootstrap tokens that are not kubeflavor's are denied.");
    }
    if mode.approve_serving {
        note.push_str(
            " --approve-serving: kubelet serving CSRs of bound, unrevoked nodes are approved when \
             they name only the node and addresses in the Flavor's spec.servingAddresses; the rest \
             of those nodes' serving CSRs are denied, other nodes' left alone.",
        );
    }
    if mode.authz {
        note.push_str(&super::authz::args_note());
    }
    note
}

/// Voluntary disruptions (drains, node upgrades, scale-downs) take one controller pod at a
/// time. Only installed when replicas run.
pub fn disruption_budget(namespace: &str) -> Document {
    budget(
        namespace,
        CONTROLLER,
        COMPONENT,
        "Voluntary disruptions (kubectl drain, node upgrades, cluster autoscaler scale-down) evict \
         the controller's pods one at a time.",
    )
}
