//! Nodes report their own network only: RBAC lets every node create and patch
//! `nodereports.kubeflavor.io` (never read them: one node's report is none of another's
//! business), and a ValidatingAdmissionPolicy (and its binding) refuses a node's write of
//! a report not named after it (`kubeflavor_core::admission::node_report`).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
};
use kubeflavor_cluster::crd::GROUP;
use kubeflavor_core::admission::node_report::{self, NODES_GROUP, POLICY_NAME, VALIDATION};

use super::{Document, object_meta, rbac};

const COMPONENT: &str = "node-reports";
/// The ClusterRole (and its binding) letting nodes write reports.
pub const REPORTER_ROLE: &str = "kubeflavor:node-reporter";

/// The nodes' role and binding, the policy and its binding.
pub fn documents() -> Vec<Document> {
    vec![role(), role_binding(), policy(), binding()]
}

fn role() -> Document {
    rbac::cluster_role(
        REPORTER_ROLE,
        "What a node's reporter (`kubeflavor node report`, with the node's own credentials) \
         may do with NodeReports.",
        vec![rbac::rule(
            &[GROUP],
            &["nodereports"],
            &["create", "patch"],
            &[],
            "create, patch: write its own report (the policy below refuses another node's). No get, list or watch (another node's report is none of its business), no status (what kubeflavor observed), no delete.",
        )],
    )
}

fn role_binding() -> Document {
    rbac::cluster_role_binding(
        REPORTER_ROLE,
        "Every node's identity (group system:nodes) gets the reporter's role; the policy \
         below keeps each node to its own report.",
        REPORTER_ROLE,
        vec![rbac::group_subject(NODES_GROUP)],
    )
}

fn policy() -> Document {
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(POLICY_NAME, None, COMPONENT),
        spec: Some(ValidatingAdmissionPolicySpec {
            match_conditions: Some(vec![MatchCondition {
                name: "requested-by-a-node".into(),
                expression: node_report::applies_to(),
            }]),
            validations: Some(super::admission::validations([(
                VALIDATION.into(),
                node_report::refusal(),
            )])),
            ..super::admission::matching(
                &[GROUP],
                &["*"],
                &["CREATE", "UPDATE", "DELETE"],
                &["nodereports", "nodereports/status"],
            )
        }),
        status: None,
    };
    Document::new(
        "A node writes only its own NodeReport. RBAC lets every node write reports but cannot \
         say which; this policy refuses a node identity's write of a report not named after \
         it.",
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: a rule that cannot be evaluated refuses the request.",
    )
    .note(
        "spec.matchConditions",
        "Writes by a node's identity (group system:nodes) only; kubeflavor's own writes of \
         the status are RBAC's to allow.",
    )
}

fn binding() -> Document {
    super::admission::deny_binding(
        POLICY_NAME,
        COMPONENT,
        None,
        "Makes the API server enforce the policy above on every matching request.",
    )
}

/// `install --node-reporter`: `kubeflavor node report` on every node that runs pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReporter {
    /// The join-token API the nodes are observed by (`node report --observer`).
    pub observer: String,
    /// A ConfigMap of the reporter's namespace whose `ca.crt` the observer's serving
    /// certificate chains to; `None`: the public roots.
    pub ca_configmap: Option<String>,
    /// How often each node reports (`node report --every`).
    pub every_seconds: u64,
}

/// The reporter's DaemonSet and its namespace.
pub const REPORTER: &str = "kubeflavor-node-reporter";
const REPORTER_COMPONENT: &str = "node-reporter";
/// The kubelet's kubeconfig and client certificates on a node kubeadm set up, mounted at
/// the same paths (the kubeconfig names the certificate by its path).
const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
const KUBELET_PKI: &str = "/var/lib/kubelet/pki";
const OBSERVER_CA_DIR: &str = "/etc/kubeflavor/observer-ca";

/// The namespace (`<install namespace>-node-reporter`) and the DaemonSet.
pub fn reporter_documents(namespace: &str, image: &str, reporter: &NodeReporter) -> Vec<Document> {
    let ns = format!("{namespace}-node-reporter");
    vec![reporter_namespace(&ns), daemon_set(&ns, image, reporter)]
}

fn reporter_namespace(name: &str) -> Document {
    use k8s_openapi::api::core::v1::Namespace;
    let mut meta = object_meta(name, None, REPORTER_COMPONENT);
    meta.labels.get_or_insert_with(Default::default).insert(
        "pod-security.kubernetes.io/enforce".into(),
        "privileged".into(),
    );
    Document::new(
        "The node reporter's namespace, apart from the controller's: its pods use the host's \
         network and read the kubelet's credentials from the host, which the restricted and \
         baseline Pod Security Standards forbid, so it enforces privileged and holds nothing \
         else.",
        &Namespace {
            metadata: meta,
            ..Default::default()
        },
    )
}

fn daemon_set(namespace: &str, image: &str, reporter: &NodeReporter) -> Document {
    use k8s_openapi::api::apps::v1::{
        DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
    };
    use k8s_openapi::api::core::v1::{
        Capabilities, ConfigMapVolumeSource, Container, HostPathVolumeSource, PodSecurityContext,
        PodSpec, PodTemplateSpec, SeccompProfile, SecurityContext, Toleration, Volume, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let selector = super::pods::selector_of(REPORTER_COMPONENT);
    let mut args = vec![
        "node".to_string(),
        "report".into(),
        format!("--kubeconfig={KUBELET_CONF}"),
        format!("--observer={}", reporter.observer),
        format!("--every={}s", reporter.every_seconds),
    ];
    let host_path = |name: &str, path: &str, kind: &str| Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource {
            path: path.into(),
            type_: Some(kind.into()),
        }),
        ..Default::default()
    };
    let mount = |name: &str, path: &str| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..Default::default()
    };
    let mut volumes = vec![
        host_path("kubelet-conf", KUBELET_CONF, "File"),
        host_path("kubelet-pki", KUBELET_PKI, "Directory"),
    ];
    let mut mounts = vec![
        mount("kubelet-conf", KUBELET_CONF),
        mount("kubelet-pki", KUBELET_PKI),
    ];
    if let Some(configmap) = &reporter.ca_configmap {
        args.push(format!("--observer-ca-file={OBSERVER_CA_DIR}/ca.crt"));
        volumes.push(Volume {
            name: "observer-ca".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: configmap.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(mount("observer-ca", OBSERVER_CA_DIR));
    }
    let container = Container {
        name: "report".into(),
        image: Some(image.into()),
        args: Some(args),
        resources: Some(super::pods::resources("5m", "16Mi", "64Mi")),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    let daemon_set = DaemonSet {
        metadata: object_meta(REPORTER, Some(namespace), REPORTER_COMPONENT),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            },
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    max_unavailable: Some(IntOrString::String("10%".into())),
                    max_surge: None,
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    labels: Some(selector),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    host_network: Some(true),
                    dns_policy: Some("ClusterFirstWithHostNet".into()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    priority_class_name: Some("system-node-critical".into()),
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".into()),
                        ..Default::default()
                    }]),
                    security_context: Some(PodSecurityContext {
                        run_as_user: Some(0),
                        run_as_group: Some(0),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        status: None,
    };
    Document::new(
        &format!(
            "kubeflavor node report on every node that runs pods, as the node itself: every {} s \
             it writes the node's NodeReport with the kubelet's own credentials and has the node \
             observed by {} with its client certificate.",
            reporter.every_seconds, reporter.observer
        ),
        &daemon_set,
    )
    .note(
        "spec.template.spec.hostNetwork",
        "The host's network: the interfaces it reports are the node's, and the observer sees \
         the node's own address (a pod address would say nothing of where the node is).",
    )
    .note(
        "spec.template.spec.automountServiceAccountToken",
        "No ServiceAccount token: it acts as the node (group system:nodes), whose RBAC and \
         admission policy keep it to its own report, never with an identity of its own.",
    )
    .note(
        "spec.template.spec.volumes",
        "The kubelet's kubeconfig and client certificate directory, read-only at the paths \
         kubeadm writes them (the kubeconfig names the rotating certificate by its path). \
         Whoever may change this DaemonSet holds every node's kubelet credentials: keep its \
         namespace to cluster administrators.",
    )
    .note(
        "spec.template.spec.securityContext",
        "root (uid 0) to read the kubelet's key, which is root's and 0600; no capabilities, \
         no privilege escalation, read-only root filesystem, the runtime's seccomp profile.",
    )
    .note(
        "spec.template.spec.tolerations",
        "Every taint: a node kept off by kubeflavor (unverified, site-not-allowed) must still \
         report and be observed to be judged again.",
    )
}
