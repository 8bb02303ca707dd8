//! The controller's Namespace, ServiceAccount and Deployment.

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
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use super::rbac::CONTROLLER_SA;
use super::{Document, labels};
use crate::controller::approvers::KUBEADM_RENEWAL_BINDING;

/// The controller's HTTP port: /metrics, /healthz, /readyz.
pub const HTTP_PORT: i32 = 8080;
/// An unprivileged uid/gid (distroless "nonroot").
const NONROOT: i64 = 65532;

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
            metadata: ObjectMeta {
                name: Some(CONTROLLER_SA.into()),
                namespace: Some(namespace.into()),
                labels: Some(labels("controller")),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn field_env(name: &str, path: &str) -> EnvVar {
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

pub fn deployment(namespace: &str, image: &str, replicas: u16, mode: super::Mode) -> Document {
    let selector: BTreeMap<String, String> = [
        (
            "app.kubernetes.io/name".to_string(),
            "kubeflavor".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "controller".to_string(),
        ),
    ]
    .into();
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
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: HTTP_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        liveness_probe: Some(probe("/healthz", 10)),
        readiness_probe: Some(probe("/readyz", 5)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "50m"), ("memory", "64Mi")])),
            limits: Some(quantities(&[("memory", "256Mi")])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let spread = WeightedPodAffinityTerm {
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
    let deployment = Deployment {
        metadata: ObjectMeta {
            name: Some("kubeflavor-controller".into()),
            namespace: Some(namespace.into()),
            labels: Some(labels("controller")),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(i32::from(replicas)),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(1)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(selector),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(CONTROLLER_SA.into()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(NONROOT),
                        run_as_group: Some(NONROOT),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    affinity: Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                spread,
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    };
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
    Document::new(
        &format!(
            "The controller, with leader election: only the Lease holder writes, another replica takes over within the lease duration \
             (`install --replicas N` sets how many run; 0 runs none). \
             probes on /healthz and /readyz, non-root with a read-only root filesystem and no capabilities.\n{renewals}"
        ),
        &deployment,
    )
}
