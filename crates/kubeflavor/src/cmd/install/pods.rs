//! What the controller's and the join-token API's workloads share: a ServiceAccount that
//! mounts no token by default, a Deployment rolled out one extra pod at a time, a pod spread
//! over nodes running as non-root under the runtime's default seccomp profile, one
//! locked-down container probed on its `http` port, and a PodDisruptionBudget that never
//! blocks a drain. Both pods meet the restricted Pod Security Standard the namespace
//! enforces.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector,
    PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecurityContext, ServiceAccount, Toleration,
    WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeflavor_core::node::placement::Placement;

use super::{Document, object_meta};

/// An unprivileged uid/gid (distroless "nonroot").
const NONROOT: i64 = 65532;

/// The note on both containers' liveness probe.
pub(super) const LIVENESS_NOTE: &str =
    "/healthz answers while the process serves; 3 failures 10 s apart restart the container.";

/// The ServiceAccount `name` of `component`, which mounts no API token unless a pod asks for
/// one; `pod` names the only pod that does.
pub(super) fn service_account(
    namespace: &str,
    (name, component): (&str, &str),
    about: &str,
    pod: &str,
) -> Document {
    Document::new(
        about,
        &ServiceAccount {
            metadata: object_meta(name, Some(namespace), component),
            automount_service_account_token: Some(false),
            ..Default::default()
        },
    )
    .note(
        "automountServiceAccountToken",
        &format!(
            "No API token in pods running as this ServiceAccount unless the pod asks for one; \
             only {pod} does."
        ),
    )
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

/// The pod both Deployments run: `container` alone, as `service_account` with its API
/// token mounted (the ServiceAccount mounts none by default), non-root under the runtime's
/// default seccomp profile, only on the nodes `placement` names, spread over them like the
/// other pods `selector` matches.
pub(super) fn pod_spec(
    service_account: &str,
    selector: &BTreeMap<String, String>,
    container: Container,
    placement: Placement,
) -> PodSpec {
    PodSpec {
        service_account_name: Some(service_account.into()),
        automount_service_account_token: Some(true),
        security_context: Some(pod_security_context()),
        affinity: Some(Affinity {
            node_affinity: Some(trusted_nodes(placement)),
            ..spread(selector)
        }),
        tolerations: Some(tolerations(placement)).filter(|t| !t.is_empty()),
        containers: vec![container],
        ..Default::default()
    }
}

/// Required during scheduling: the one requirement of `placement` (core decides it).
fn trusted_nodes(placement: Placement) -> NodeAffinity {
    let requirement = placement.requirement();
    NodeAffinity {
        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: requirement.key.into(),
                    operator: requirement.operator.into(),
                    values: (!requirement.values.is_empty()).then_some(requirement.values),
                }]),
                match_fields: None,
            }],
        }),
        preferred_during_scheduling_ignored_during_execution: None,
    }
}

/// The tolerations `placement` needs (Exists, one effect each), and no other.
fn tolerations(placement: Placement) -> Vec<Toleration> {
    placement
        .tolerations()
        .into_iter()
        .map(|t| Toleration {
            key: Some(t.key.into()),
            operator: Some("Exists".into()),
            effect: Some(t.effect.as_str().into()),
            ..Default::default()
        })
        .collect()
}

/// The notes on both pods' placement, at `pod` (the template's spec): the affinity says
/// where they run and why (then `spread`, why replicas prefer different nodes), the
/// tolerations (when there are any) why those.
pub(super) fn placement_notes(
    doc: Document,
    pod: &str,
    placement: Placement,
    spread: &str,
) -> Document {
    let doc = doc.note(
        &format!("{pod}.affinity"),
        &format!("{} {spread}", placement.describe()),
    );
    match placement {
        Placement::ControlPlane => doc.note(
            &format!("{pod}.tolerations"),
            "kubeadm taints control-plane Nodes node-role.kubernetes.io/control-plane:NoSchedule; \
             this is the only taint tolerated.",
        ),
        Placement::TrustLevel(_) => doc,
    }
}

/// Container `name` of `image`, probed on its port named `http` (/healthz for liveness,
/// /readyz for readiness) and locked down; the caller adds what it runs and needs.
pub(super) fn probed_container(name: &str, image: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        liveness_probe: Some(probe("/healthz", 10)),
        readiness_probe: Some(probe("/readyz", 5)),
        security_context: Some(container_security_context()),
        ..Default::default()
    }
}

/// Requests of `cpu` and `memory`, a `memory_limit`, and no CPU limit.
pub(super) fn resources(cpu: &str, memory: &str, memory_limit: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", cpu), ("memory", memory)])),
        limits: Some(quantities(&[("memory", memory_limit)])),
        ..Default::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// The environment variable `name` holding the pod's field `path` (downward API).
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

/// A named TCP container port.
pub(super) fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// An HTTP GET of `path` on the container port named `http`.
fn probe(path: &str, period: i32) -> Probe {
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
fn container_security_context() -> SecurityContext {
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
fn pod_security_context() -> PodSecurityContext {
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
fn spread(selector: &BTreeMap<String, String>) -> Affinity {
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
            "AlwaysAllow: a crash-looping or unready pod can always be evicted, so it never \
             holds up a drain.",
        )
}
