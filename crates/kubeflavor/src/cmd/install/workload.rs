//! The controller's Namespace, ServiceAccount, Deployment and PodDisruptionBudget.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    Namespace, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext, ServiceAccount,
    WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use super::rbac::CONTROLLER_SA;
use super::{Document, labels, object_meta};
use crate::controller::approvers::KUBEADM_RENEWAL_BINDING;

/// The controller's HTTP port: /metrics, /healthz, /readyz.
pub const HTTP_PORT: i32 = 8080;
/// An unprivileged uid/gid (distroless "nonroot").
const NONROOT: i64 = 65532;
/// The name of the Deployment and of its PodDisruptionBudget.
const CONTROLLER: &str = "kubeflavor-controller";
/// Node enrollment waits on the controller: it schedules ahead of ordinary workloads.
pub const PRIORITY_CLASS: &str = "system-cluster-critical";

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
    Document::new(
        "The controller's identity; every permission below is granted to it and to nothing else.",
        &ServiceAccount {
            metadata: object_meta(CONTROLLER_SA, Some(namespace), "controller"),
            automount_service_account_token: Some(false),
            ..Default::default()
        },
    )
    .note(
        "automountServiceAccountToken",
        "No API token in pods running as this ServiceAccount unless the pod asks for one; only \
         the controller's pod does.",
    )
}

/// The labels that select the controller's pods (Deployment and PodDisruptionBudget).
fn selector() -> BTreeMap<String, String> {
    selector_of("controller")
}

/// The labels that select the pods of one component of the install set.
pub(super) fn selector_of(component: &str) -> BTreeMap<String, String> {
    [
        (
            "app.kubernetes.io/name".to_string(),
            "kubeflavor".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
    ]
    .into()
}

pub(super) fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

pub(super) fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
        value: None,
    }
}

/// An HTTP GET of `path` on the container port named `http`.
/// Deployment `name` (component label `component`) of `replicas` pods from `template`,
/// selected by the template's labels, rolled out one extra pod at a time with at most
/// `max_unavailable` pods gone.
pub(super) fn deployment_of(
    namespace: &str,
    (name, component): (&str, &str),
    replicas: i32,
    max_unavailable: i32,
    template: PodTemplateSpec,
) -> Deployment {
    let selector = template.metadata.as_ref().and_then(|m| m.labels.clone());
    Deployment {
        metadata: object_meta(name, Some(namespace), component),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: selector,
                match_expressions: None,
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(max_unavailable)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template,
            ..Default::default()
        },
        status: None,
    }
}

/// A named TCP container port.
pub(super) fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

pub(super) fn probe(path: &str, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

/// No privilege escalation, no capabilities, non-root, read-only root filesystem.
pub(super) fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        ..Default::default()
    }
}

/// Non-root uid and gid 65532, the container runtime's default seccomp profile.
pub(super) fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(NONROOT),
        run_as_group: Some(NONROOT),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// Prefer the pods matching `selector` on different nodes.
pub(super) fn spread(selector: &BTreeMap<String, String>) -> Affinity {
    let term = WeightedPodAffinityTerm {
        weight: 100,
        pod_affinity_term: PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        },
    };
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn deployment(namespace: &str, image: &str, replicas: u16, mode: super::Mode) -> Document {
    let selector = selector();
    let affinity = spread(&selector);
    let container = Container {
        name: "controller".into(),
        image: Some(image.into()),
        args: Some(
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
            .collect(),
        ),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(vec![port("http", HTTP_PORT)]),
        liveness_probe: Some(probe("/healthz", 10)),
        readiness_probe: Some(probe("/readyz", 5)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "50m"), ("memory", "64Mi")])),
            limits: Some(quantities(&[("memory", "256Mi")])),
            ..Default::default()
        }),
        security_context: Some(container_security_context()),
        ..Default::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(selector),
            annotations: Some(
                [
                    ("prometheus.io/scrape", "true".to_string()),
                    ("prometheus.io/port", HTTP_PORT.to_string()),
                    ("prometheus.io/path", "/metrics".to_string()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            service_account_name: Some(CONTROLLER_SA.into()),
            automount_service_account_token: Some(true),
            priority_class_name: Some(PRIORITY_CLASS.into()),
            security_context: Some(pod_security_context()),
            affinity: Some(affinity),
            containers: vec![container],
            ..Default::default()
        }),
    };
    let deployment = deployment_of(
        namespace,
        (CONTROLLER, "controller"),
        i32::from(replicas),
        1,
        template,
    );
    let renewals = if mode.manage_renewals {
        format!(
            "Renewals: kubeflavor decides them (--manage-renewals: only bound, unrevoked nodes). kubeadm binds \
             system:nodes to the selfnodeclient auto-approval, so delete that binding before this runs: \
             kubectl delete clusterrolebinding {KUBEADM_RENEWAL_BINDING} (install --apply does); the controller \
             refuses to start while renewals are still auto-approved."
        )
    } else {
        format!(
            "Renewals: kubeadm binds system:nodes to the selfnodeclient auto-approval (ClusterRoleBinding \
             {KUBEADM_RENEWAL_BINDING}), so kube-controller-manager approves every renewal first. To let \
             kubeflavor decide renewals (only bound, unrevoked nodes), run install --apply --manage-renewals."
        )
    };
    let mut args_note = format!(
        "The controller with leader election, its Lease in the pod's namespace; /metrics, /healthz \
         and /readyz on port {HTTP_PORT} of the pod IP."
    );
    if mode.manage_renewals {
        args_note.push_str(
            " --manage-renewals: renewals of bound, unrevoked nodes are approved, the rest denied.",
        );
    }
    if mode.strict {
        args_note
            .push_str(" --strict: CSRs of bootstrap tokens that are not kubeflavor's are denied.");
    }
    let spec = "spec.template.spec";
    let container = "spec.template.spec.containers";
    Document::new(
        &format!(
            "The controller. Replicas elect a leader; only the Lease holder writes.\n{renewals}"
        ),
        &deployment,
    )
    .note(
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
    .note(
        "spec.template.metadata.annotations",
        &format!(
            "Scrape hints for Prometheus' common kubernetes-pods job: /metrics on port {HTTP_PORT}. \
             The port is also named http, so a PodMonitor can select it by name."
        ),
    )
    .note(
        &format!("{spec}.serviceAccountName"),
        "The identity every grant of this install set names.",
    )
    .note(
        &format!("{spec}.automountServiceAccountToken"),
        "The ServiceAccount mounts no token by default; this pod, which watches and writes \
         through the API server, opts in. The kubelet mounts a projected token that expires and is \
         rotated.",
    )
    .note(
        &format!("{spec}.priorityClassName"),
        "Nodes join only when this controller approves their kubelet certificates, so it is \
         cluster-critical: scheduled ahead of ordinary pods (preempting them if needed) and among \
         the last evicted under node pressure. An API server that admits this class only where a \
         ResourceQuota covers it (limitedResources) needs such a quota in this namespace.",
    )
    .note(
        &format!("{spec}.securityContext"),
        "Non-root uid and gid 65532 with the container runtime's default seccomp profile: what the \
         restricted Pod Security Standard this namespace enforces requires.",
    )
    .note(
        &format!("{spec}.affinity"),
        "Prefer replicas on different nodes, so losing one node does not take the leader and its \
         standby together. Preferred, not required: a one-node cluster still runs them all.",
    )
    .note(&format!("{container}.args"), &args_note)
    .note(
        &format!("{container}.env"),
        "Downward API: the pod's name is this replica's identity in the Lease, its namespace is \
         where the Lease is kept.",
    )
    .note(
        &format!("{container}.ports"),
        "http: /metrics, /healthz and /readyz, plain HTTP. No Service: nothing calls the \
         controller, Prometheus scrapes the pods.",
    )
    .note(
        &format!("{container}.livenessProbe"),
        "/healthz answers while the process serves; 3 failures 10 s apart restart the container.",
    )
    .note(
        &format!("{container}.readinessProbe"),
        "/readyz: a standby is ready (waiting for the Lease is its job), the leader once its watch \
         caches have synced, neither while shutting down. Rollouts wait for it.",
    )
    .note(
        &format!("{container}.resources"),
        "Measured peak RSS: ~26 MiB with 1,000 flavored nodes, ~30 MiB with 10,000, ~51 MiB \
         with 100,000 (about 0.26 KiB per node); CPU 2 to 3 ms per join, none at rest. The 64Mi \
         request holds 100,000 nodes; the 256Mi limit stops a leak before it starves the node. \
         No CPU limit: CFS throttling during a burst of joins would delay Lease renewals and can \
         cost the leader its Lease; 50m is what the scheduler reserves.",
    )
    .note(
        &format!("{container}.securityContext"),
        "No privilege escalation, no capabilities, non-root, read-only root filesystem: the \
         controller writes no files.",
    )
}

/// Voluntary disruptions (drains, node upgrades, scale-downs) take one controller pod at a
/// time. Only installed when replicas run.
pub fn disruption_budget(namespace: &str) -> Document {
    budget(
        namespace,
        CONTROLLER,
        "controller",
        "Voluntary disruptions (kubectl drain, node upgrades, cluster autoscaler scale-down) evict \
         the controller's pods one at a time.",
    )
}

/// A PodDisruptionBudget `name` for the pods of `component`: one at a time, never blocking
/// a drain.
pub(super) fn budget(namespace: &str, name: &str, component: &str, about: &str) -> Document {
    let budget = PodDisruptionBudget {
        metadata: object_meta(name, Some(namespace), component),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(selector_of(component)),
                match_expressions: None,
            }),
            max_unavailable: Some(IntOrString::Int(1)),
            min_available: None,
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
        }),
        status: None,
    };
    Document::new(about, &budget)
    .note("spec.selector", "The Deployment's pods.")
    .note(
        "spec.maxUnavailable",
        "1 rather than minAvailable: a drain is never blocked, even with 1 replica; with 2 \
         replicas one always runs.",
    )
    .note(
        "spec.unhealthyPodEvictionPolicy",
        "AlwaysAllow: a crash-looping or unready pod can always be evicted, so it never holds up \
         a drain.",
    )
}
