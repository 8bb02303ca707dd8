//! `install --serve`: the join-token API (`kubeflavor serve`) as a Deployment of its own,
//! with an identity of its own. It faces the network, so it gets only what minting needs:
//! it cannot approve CSRs, read or delete tokens, or write anything but new token Secrets
//! and the Events that record them. RBAC cannot say which Secrets it may create, so a
//! ValidatingAdmissionPolicy makes the API server refuse every Secret of this identity that
//! is not a kubeflavor node token as `mint` writes it (`kubeflavor_core::admission::token_shape`).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec, Variable,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, PodSpec, PodTemplateSpec, SecretVolumeSource, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use kubeflavor_core::admission::token_shape::{self, Ceilings};
use kubeflavor_core::mint::rate::{MintRate, SplitError};
use kubeflavor_core::node::placement::Placement;
use kubeflavor_core::token::secret::TOKEN_SECRET_NAMESPACE;

use super::pods::{
    LIVENESS_NOTE, budget, deployment_of, field_env, placement_notes, pod_spec, port,
    probed_container, resources, selector_of,
};
use super::rbac::{
    Grantee, Rule, cluster_role_binding, granted_cluster_role, granted_role, rule,
    service_account_subject,
};
use super::{Document, object_meta};
use crate::join::fetch::{CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE};

/// The name of the ServiceAccount, Deployment, PodDisruptionBudget and Service.
pub const SERVE: &str = "kubeflavor-serve";
/// The Secret holding the serving certificate (`kubernetes.io/tls`).
pub const TLS_SECRET: &str = "kubeflavor-serve-tls";
/// Where the TLS Secret is mounted.
const TLS_DIR: &str = "/etc/kubeflavor/tls";
/// The cluster's CA as every pod sees it: kubelets' client certificates chain to it on a
/// cluster kubeadm set up (`serve --node-client-ca-file`).
const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// The HTTPS API's container port.
pub const HTTPS_PORT: i32 = 8443;
/// /metrics, /healthz and /readyz of the API (plain HTTP).
pub const SERVE_HTTP_PORT: i32 = 8081;
/// The labels' component, and the pods' selector.
const COMPONENT: &str = "serve";
/// The pod template's spec, as note paths name it.
const POD: &str = "spec.template.spec";
/// The API's container, as note paths name it.
const CONTAINER: &str = "spec.template.spec.containers";
/// Stateless replicas, each answering on its own (`--serve-replicas`).
pub const DEFAULT_REPLICAS: u16 = 2;
/// What one caller may mint across all replicas (`--serve-rate-per-minute`,
/// `--serve-burst`).
pub const DEFAULT_RATE: MintRate = MintRate {
    per_minute: 60,
    burst: 20,
};

/// How the join-token API runs: its replicas, and the caller's limit split over them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServePlan {
    pub replicas: u16,
    /// What one caller may mint across all replicas, as asked.
    pub total: MintRate,
    /// What each replica allows one caller (its `--rate-per-minute` and `--burst`).
    pub per_replica: MintRate,
    /// The most its identity may mint, whatever a Flavor allows (`--serve-max-token-ttl`,
    /// `--serve-max-nodes`): enforced by the API server, in the token policy.
    pub ceilings: Ceilings,
}

impl ServePlan {
    pub fn new(replicas: u16, total: MintRate) -> Result<ServePlan, SplitError> {
        Ok(ServePlan {
            replicas,
            total,
            per_replica: total.per_replica(u32::from(replicas))?,
            ceilings: Ceilings::default(),
        })
    }
}

impl Default for ServePlan {
    fn default() -> Self {
        ServePlan::new(DEFAULT_REPLICAS, DEFAULT_RATE).expect("the defaults split evenly")
    }
}
/// Node administrators' sign-ins (`install --serve-oidc-issuer`, `--serve-roster`,
/// `--serve-oidc-ca-configmap`): the `serve` flags they become.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Administrators {
    /// `ISSUER=AUDIENCE`, as `serve --oidc-issuer` takes them.
    pub issuers: Vec<String>,
    /// The Roster (`serve --roster`); `None`: serve's default.
    pub roster: Option<String>,
    /// A ConfigMap of this namespace whose `ca.crt` the providers' TLS certificates chain to.
    pub ca_configmap: Option<String>,
    /// The web portal's address (`serve --portal-url`); `None`: no portal.
    pub portal_url: Option<String>,
    /// The issuer the portal signs in with (`serve --portal-issuer`).
    pub portal_issuer: Option<String>,
}

/// The Secret the portal reads its client secret and session keys from, which the owner
/// creates (keys `client-secret` and `session-keys`).
pub const PORTAL_SECRET: &str = "kubeflavor-portal";
/// Where [`PORTAL_SECRET`] is mounted.
const PORTAL_DIR: &str = "/etc/kubeflavor/portal";

/// Where the providers' CA ConfigMap is mounted.
const OIDC_CA_DIR: &str = "/etc/kubeflavor/oidc-ca";

impl Administrators {
    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = self
            .issuers
            .iter()
            .map(|i| format!("--oidc-issuer={i}"))
            .collect();
        if let Some(roster) = &self.roster {
            args.push(format!("--roster={roster}"));
        }
        if self.ca_configmap.is_some() {
            args.push(format!("--oidc-ca-file={OIDC_CA_DIR}/ca.crt"));
        }
        if let Some(url) = &self.portal_url {
            args.push(format!("--portal-url={url}"));
            args.push(format!(
                "--portal-client-secret-file={PORTAL_DIR}/client-secret"
            ));
            // Read again when the Secret changes (the kubelet updates the mounted file):
            // keys rotate without a restart and without signing anyone out.
            args.push(format!(
                "--portal-session-keys-file={PORTAL_DIR}/session-keys"
            ));
            if let Some(issuer) = &self.portal_issuer {
                args.push(format!("--portal-issuer={issuer}"));
            }
        }
        args
    }
}

/// The ValidatingAdmissionPolicy (and its binding) shaping the Secrets it may create.
pub const TOKEN_POLICY: &str = "kubeflavor-serve-token-secrets";

/// Every object of the join-token API, in apply order: the policy on the Secrets it may
/// create and its binding (before the grant they shape), identity, RBAC, Deployment, its
/// PodDisruptionBudget when replicas run, Service. `run` false installs the Deployment with
/// 0 replicas (`install --replicas 0`: nothing runs in the cluster).
pub fn documents(
    namespace: &str,
    image: &str,
    run: bool,
    plan: ServePlan,
    placement: Placement,
    administrators: &Administrators,
) -> Vec<Document> {
    let mut docs = Vec::from(token_policy(namespace, &plan.ceilings));
    docs.push(service_account(namespace));
    let roster = administrators
        .roster
        .as_deref()
        .unwrap_or(kubeflavor_cluster::crd::roster::DEFAULT_ROSTER);
    docs.extend(rbac(namespace, roster));
    let replicas = if run { i32::from(plan.replicas) } else { 0 };
    docs.push(deployment(
        namespace,
        image,
        replicas,
        plan,
        placement,
        administrators,
    ));
    if run {
        docs.push(budget(
            namespace,
            SERVE,
            COMPONENT,
            "Voluntary disruptions (kubectl drain, node upgrades, cluster autoscaler scale-down) \
             evict the join-token API's pods one at a time.",
        ));
    }
    docs.push(service(namespace));
    docs
}

/// The user name of the join-token API's ServiceAccount in `namespace`.
pub fn serve_user(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{SERVE}")
}

/// The ValidatingAdmissionPolicy that lets the join-token API's identity create only
/// kubeflavor node token Secrets, and the binding that makes the API server enforce it.
fn token_policy(namespace: &str, ceilings: &Ceilings) -> [Document; 2] {
    [policy(&serve_user(namespace), ceilings), policy_binding()]
}

/// The policy on the Secrets `user` writes, with why each part is there.
fn policy(user: &str, ceilings: &Ceilings) -> Document {
    let policy = ValidatingAdmissionPolicy {
        metadata: object_meta(TOKEN_POLICY, None, COMPONENT),
        spec: Some(policy_spec(user, ceilings)),
        status: None,
    };
    let (max_ttl, max_nodes) = (ceilings.max_ttl(), ceilings.max_nodes);
    Document::new(
        &format!(
            "What the join-token API's identity ({user}) may create, enforced by the API server. \
             RBAC can grant it create on Secrets in {TOKEN_SECRET_NAMESPACE} but cannot say which \
             Secrets; unshaped, a stolen token of it could create a kubeadm token (kubeadm's \
             groups are auto-approved by kube-controller-manager, for any node name). This policy \
             refuses every Secret of that identity but a kubeflavor node token exactly as \
             kubeflavor mints it, so such a token can mint only kubeflavor tokens, which \
             kubeflavor's controller judges. No other identity is affected."
        ),
        &policy,
    )
    .note(
        "spec.failurePolicy",
        "Fail: a rule that cannot be evaluated refuses the request.",
    )
    .note(
        "spec.matchConstraints",
        "Creates and updates of Secrets. The identity has no update grant; should one appear, \
         the first rule refuses every update anyway (changing a token's secret or its \
         controller state would take a token over).",
    )
    .note(
        "spec.matchConditions",
        "Only requests of the join-token API's ServiceAccount: admins, the controller and \
         kubeadm create their Secrets as before.",
    )
    .note(
        "spec.variables",
        "The token id in the Secret's name, encoded in base64, and data.expiration decoded \
         from it: CEL sees a Secret's data values as their base64 text and Kubernetes' CEL \
         has no base64 decoder, so the rule compares the name's id with data.token-id in \
         base64, and decodes the expiration with arithmetic into the seconds it names, as \
         it does metadata.creationTimestamp (set by the API server before this policy runs).",
    )
    .note(
        "spec.validations",
        &format!(
            "Each rule with the message the API server answers when it fails (HTTP 422, reason \
         Invalid; the first failing rule is named). Data values are compared with the base64 \
         of what kubeflavor writes: the group system:bootstrappers:kubeflavor:node, usages \
         \"true\", the one description. An expiration must be present, written \
         YYYY-MM-DDTHH:MM:SSZ as kubeflavor writes it. Ceilings on what this identity mints, \
         whatever a Flavor's tokenLimits allow: an expiration at most {max_ttl} after the \
         Secret's creation (install --serve-max-token-ttl; 5m more for clocks that disagree) \
         and kubeflavor.io/max-nodes at most {max_nodes} (install --serve-max-nodes). \
         kubeflavor.io/issued-by must be this identity's own name (the caller it minted for \
         goes in kubeflavor.io/requested-by), so a token's custody never names someone who \
         did not mint it; kubeflavor.io/limits-override, an admin's override of a Flavor's \
         limits, is refused. The controller judges each token against its Flavor's own \
         tokenLimits again when its CSRs come (cause token_over_limits): this ceiling bounds \
         what a stolen identity mints, the Flavor what joins."
        ),
    )
}

/// Creates and updates of Secrets by `user`, refused unless they pass every rule of
/// [`token_shape`].
fn policy_spec(user: &str, ceilings: &Ceilings) -> ValidatingAdmissionPolicySpec {
    ValidatingAdmissionPolicySpec {
        match_conditions: Some(vec![MatchCondition {
            name: "join-token-api".into(),
            expression: token_shape::applies_to(user),
        }]),
        variables: Some(
            token_shape::variables()
                .into_iter()
                .map(|v| Variable {
                    name: v.name.into(),
                    expression: v.expression,
                })
                .collect(),
        ),
        validations: Some(super::admission::validations(
            token_shape::rules(ceilings)
                .into_iter()
                .map(|r| (r.expression, r.message)),
        )),
        ..super::admission::matching(&[""], &["v1"], &["CREATE", "UPDATE"], &["secrets"])
    }
}

fn policy_binding() -> Document {
    super::admission::deny_binding(
        TOKEN_POLICY,
        COMPONENT,
        None,
        "Makes the API server enforce the policy above on every matching request.",
    )
}

fn service_account(namespace: &str) -> Document {
    super::pods::service_account(
        namespace,
        (SERVE, COMPONENT),
        "The join-token API's identity, separate from the controller's: it faces the network, so \
         whoever takes it over must not be able to approve CSRs, read or delete tokens, or write \
         bindings. Every grant below that names it says why it is needed.",
        "the join-token API's pod",
    )
}

/// The join-token API's grants: reviewing its callers, reading flavors and bindings,
/// creating token Secrets and their Events in kube-system, reading cluster-info.
fn rbac(namespace: &str, roster: &str) -> Vec<Document> {
    let to = Grantee {
        shown: "the join-token API's ServiceAccount".into(),
        subjects: vec![service_account_subject(SERVE, namespace)],
    };
    let reviews = cluster_role_binding(
        "kubeflavor:serve:auth-delegator",
        "Lets the join-token API review its callers: the built-in system:auth-delegator role \
         (create tokenreviews: who is this bearer token; create subjectaccessreviews: may they \
         create flavors/jointoken of this flavor). Nothing else.",
        "system:auth-delegator",
        to.subjects.clone(),
    );
    let cluster_info_rules = vec![rule(
        &[""],
        &["configmaps"],
        &["get"],
        &[CLUSTER_INFO_NAME],
        "get: only the cluster-info ConfigMap (resourceNames): the API server address and CA \
         the join line names.",
    )];
    std::iter::once(reviews)
        .chain(granted_cluster_role(
            "kubeflavor:serve",
            "The join-token API's cluster-wide reads: what minting a token of a flavor needs.",
            flavor_read_rules(roster),
            &to,
        ))
        .chain(granted_role(
            "kubeflavor:serve:tokens",
            TOKEN_SECRET_NAMESPACE,
            "The join-token API's writes, in kube-system only: new token Secrets and the Events \
             that record them. Not the controller's token Role: this identity cannot read, update \
             or delete tokens.",
            token_write_rules(),
            &to,
        ))
        .chain(granted_role(
            "kubeflavor:serve:cluster-info",
            CLUSTER_INFO_NAMESPACE,
            "Reads kube-public/cluster-info for the join line. kubeadm's \
             kubeadm:bootstrap-signer-clusterinfo Role grants it to User system:anonymous only, \
             which covers unauthenticated requests where the API server allows anonymous ones, \
             not this authenticated ServiceAccount; this Role does not depend on either.",
            cluster_info_rules,
            &to,
        ))
        .collect()
}

/// Flavors for their token defaults, bindings for the token ids they still name, the Roster
/// for node administrators: reads only.
fn flavor_read_rules(roster: &str) -> Vec<Rule> {
    vec![
        rule(
            &["kubeflavor.io"],
            &["flavors"],
            &["get", "list"],
            &[],
            "get, list: a flavor's token defaults (TTL, max nodes) and that it exists. No watch, \
             no write: flavors are the admins'.",
        ),
        rule(
            &["kubeflavor.io"],
            &["flavorbindings"],
            &["list"],
            &[],
            "list: a token id still named by a binding is never minted again (P3), and a node \
             administrator's bound nodes are counted against their Roster rule's maxNodes. No \
             get, watch or write: bindings are the controller's.",
        ),
        rule(
            &["kubeflavor.io"],
            &["rosters"],
            &["get"],
            &[roster],
            "get: only the Roster that decides node administrators' flavors (resourceNames: \
             serve --roster). No list, watch or write of its rules: the roster is the owner's.",
        ),
        rule(
            &["kubeflavor.io"],
            &["administratorledgers"],
            &["get", "create", "update"],
            &[],
            "get, create, update: each node administrator's ledger of the tokens they may still \
             hold, how a rule's maxLiveTokens is counted across replicas (this identity never \
             reads token Secrets). No list or delete.",
        ),
        rule(
            &["kubeflavor.io"],
            &["rosters/status"],
            &["update"],
            &[roster],
            "update: the Roster's status (tokens each rule granted, and when last). Not its \
             spec: the status subresource writes nothing else.",
        ),
        rule(
            &["kubeflavor.io"],
            &["nodereports/status"],
            &["patch"],
            &[],
            "patch: record what this server observed of a node that connected with its own \
             client certificate (the address, when, which instance) in its NodeReport's \
             status. Not the spec: that is the node's claim.",
        ),
    ]
}

/// New token Secrets and the Events recording them: create only.
fn token_write_rules() -> Vec<Rule> {
    vec![
        rule(
            &[""],
            &["secrets"],
            &["create"],
            &[],
            "create: the new token's bootstrap-token Secret. RBAC cannot limit create by name \
             (the name is not known when the request is authorized) or by content; the \
             ValidatingAdmissionPolicy kubeflavor-serve-token-secrets refuses every Secret but a \
             kubeflavor node token as kubeflavor mints it. No get, list, watch, update or delete, \
             so no existing Secret, token or not, can be read or changed.",
        ),
        rule(
            &["events.k8s.io"],
            &["events"],
            &["create"],
            &[],
            "create: the admin trail of mints (who minted which token id of which flavor, for \
             whom), next to the controller's decisions. No read.",
        ),
    ]
}

/// The join-token API's Deployment (`replicas` pods, 0 with `install --replicas 0`) with
/// the caller's limit of `plan` split over its planned replicas, and a note on every field a
/// reviewer would ask about.
fn deployment(
    namespace: &str,
    image: &str,
    replicas: i32,
    plan: ServePlan,
    placement: Placement,
    administrators: &Administrators,
) -> Document {
    let deployment = deployment_of(
        namespace,
        (SERVE, COMPONENT),
        replicas,
        0,
        pod_template(image, plan.per_replica, placement, administrators),
    );
    let doc = Document::new(
        &format!(
            "The join-token API (kubeflavor serve): a portal POSTs /v1/flavors/<flavor>/jointokens \
             with its own Kubernetes bearer token and gets a join token of a flavor its RBAC names \
             (create on flavors/jointoken of kubeflavor.io, resourceNames: the flavors). It needs \
             the Secret {TLS_SECRET} (type kubernetes.io/tls) in this namespace: from cert-manager \
             (a Certificate for {SERVE}.{namespace}.svc with secretName {TLS_SECRET}) or \
             kubectl create secret tls {TLS_SECRET} -n {namespace} --cert=tls.crt --key=tls.key. \
             Its pods wait in ContainerCreating until it exists."
        ),
        &deployment,
    );
    container_notes(
        pod_notes(rollout_notes(doc, plan.replicas), placement),
        plan,
    )
}

/// The API's pod: its container and the serving certificate's Secret as a volume.
fn pod_template(
    image: &str,
    each: MintRate,
    placement: Placement,
    administrators: &Administrators,
) -> PodTemplateSpec {
    let selector = selector_of(COMPONENT);
    let mut container = container(image, each);
    container
        .args
        .get_or_insert_with(Vec::new)
        .extend(administrators.args());
    let mut volumes = vec![Volume {
        name: "tls".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(TLS_SECRET.into()),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let mut mount = |volume: Volume, path: &str| {
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: volume.name.clone(),
                mount_path: path.into(),
                read_only: Some(true),
                ..Default::default()
            });
        volumes.push(volume);
    };
    if let Some(configmap) = &administrators.ca_configmap {
        mount(
            Volume {
                name: "oidc-ca".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: configmap.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            OIDC_CA_DIR,
        );
    }
    if administrators.portal_url.is_some() {
        mount(
            Volume {
                name: "portal".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(PORTAL_SECRET.into()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..Default::default()
            },
            PORTAL_DIR,
        );
    }
    let pod = pod_spec(SERVE, &selector, container, placement);
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(selector),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            volumes: Some(volumes),
            ..pod
        }),
    }
}

/// `kubeflavor serve` on the mounted certificate, allowing a caller `each` per replica.
fn container(image: &str, each: MintRate) -> Container {
    Container {
        args: Some(vec![
            "serve".into(),
            format!("--tls-cert-file={TLS_DIR}/tls.crt"),
            format!("--tls-key-file={TLS_DIR}/tls.key"),
            format!("--address=0.0.0.0:{HTTPS_PORT}"),
            format!("--http-address=0.0.0.0:{SERVE_HTTP_PORT}"),
            format!("--rate-per-minute={}", each.per_minute),
            format!("--burst={}", each.burst),
            format!("--node-client-ca-file={SERVICE_ACCOUNT_CA}"),
        ]),
        env: Some(vec![field_env("POD_NAME", "metadata.name")]),
        ports: Some(vec![
            port("https", HTTPS_PORT),
            port("http", SERVE_HTTP_PORT),
        ]),
        resources: Some(resources("50m", "32Mi", "128Mi")),
        volume_mounts: Some(vec![VolumeMount {
            name: "tls".into(),
            mount_path: TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..probed_container("serve", image)
    }
}

/// Why the replicas and the rollout strategy are what they are: stateless, always answering.
fn rollout_notes(doc: Document, planned: u16) -> Document {
    doc.note(
        "spec.replicas",
        &format!(
            "install --serve-replicas ({planned}), or 0 with install --replicas 0 (nothing runs \
             in the cluster). Stateless: each replica answers on its own, no leader election; the \
             Service spreads callers over them. Each replica counts a caller's \
             mints on its own, so scaling this Deployment by hand scales what a caller may mint: \
             re-run install with --serve-replicas instead."
        ),
    )
    .note(
        "spec.strategy",
        "Rollouts start a new pod before an old one goes (none unavailable, one extra), so the \
         API keeps answering.",
    )
}

/// The pod's priority, identity, security, placement and certificate.
fn pod_notes(doc: Document, placement: Placement) -> Document {
    placement_notes(
        doc,
        POD,
        placement,
        "Among those nodes, prefer replicas on different ones, so losing one node leaves one \
         answering (preferred, not required: one such node still runs them all).",
    )
    .note(
        POD,
        "No priorityClassName: unlike the controller, which nodes need to join at all, a portal \
         API that is briefly down only delays new tokens; it should not preempt workloads or \
         outlast them under node pressure.",
    )
    .note(
        &format!("{POD}.serviceAccountName"),
        "Its own identity, not the controller's: see the ServiceAccount and its grants.",
    )
    .note(
        &format!("{POD}.automountServiceAccountToken"),
        "The ServiceAccount mounts no token by default; this pod, which reviews callers and writes \
         token Secrets through the API server, opts in. The kubelet mounts a projected token that \
         expires and is rotated.",
    )
    .note(
        &format!("{POD}.securityContext"),
        "Non-root uid and gid 65532 with the container runtime's default seccomp profile, as the \
         controller's pod: what the restricted Pod Security Standard this namespace enforces \
         requires.",
    )
    .note(
        &format!("{POD}.volumes"),
        &format!(
            "The serving certificate: Secret {TLS_SECRET}, type kubernetes.io/tls (tls.crt, \
             tls.key). The kubelet updates the mounted files when the Secret changes (cert-manager \
             renewing it) and the server loads the new certificate for new connections, without a \
             restart."
        ),
    )
}

/// The container's flags and limits, name in the trail, ports, probes, sizing, lockdown and
/// certificate mount.
fn container_notes(doc: Document, plan: ServePlan) -> Document {
    doc.note(&format!("{CONTAINER}.args"), &args_note(plan))
        .note(
            &format!("{CONTAINER}.env"),
            "Downward API: the pod's name is this replica's name in the trail's Events \
             (reportingInstance).",
        )
        .note(
            &format!("{CONTAINER}.ports"),
            "https: the join-token API, behind the Service. http: /metrics, /healthz and /readyz, \
             not in the Service.",
        )
        .note(&format!("{CONTAINER}.livenessProbe"), LIVENESS_NOTE)
        .note(
            &format!("{CONTAINER}.readinessProbe"),
            "/readyz: ready while serving, not while shutting down, so the Service stops sending \
             it callers first. Rollouts wait for it.",
        )
        .note(
            &format!("{CONTAINER}.resources"),
            "Estimates until measured: requests 50m CPU and 32Mi, a 128Mi memory limit against a \
             leak. No CPU limit: minting is short bursts of API calls, and throttling would only \
             add latency. The server caps connections (1024, each closed after 10 s without a \
             request) and reviews in flight (32).",
        )
        .note(
            &format!("{CONTAINER}.securityContext"),
            "No privilege escalation, no capabilities, non-root, read-only root filesystem: the \
             server writes no files.",
        )
        .note(
            &format!("{CONTAINER}.volumeMounts"),
            &format!("{TLS_DIR}/tls.crt and tls.key, read-only, as the args name them."),
        )
}

/// The ports the server listens on, and how the caller's limit is split over the replicas
/// (and what that makes of it when a Service spreads the caller's connections).
fn args_note(plan: ServePlan) -> String {
    let ServePlan {
        replicas: planned,
        total,
        per_replica: each,
        ceilings: _,
    } = plan;
    let most = each.across(u32::from(planned));
    format!(
        "HTTPS on port {HTTPS_PORT} with the mounted certificate; /metrics, /healthz and /readyz \
         on plain HTTP port {SERVE_HTTP_PORT}. Rate limits are per replica: a caller's {} a \
         minute and {} at once across the API (install --serve-rate-per-minute, --serve-burst) \
         divided by the {planned} replicas, rounded down: --rate-per-minute={} --burst={}. A \
         Service without session affinity spreads a caller's connections, so a caller mints \
         at most {} a minute and {} at once in all, and only one replica's share when its \
         connections all reach one replica. --node-client-ca-file: nodes whose client \
         certificate chains to the cluster's CA (the service account's ca.crt) may be observed \
         at POST /v1/observations (kubeflavor node report --observer), and are connected \
         back to on the kubelet's port (10250: the round trip, and whether their serving \
         certificate answers there); where kubelets' \
         certificates come from another signer, give its CA instead. --token-audience and the \
         connection limits \
         (--max-connections, --idle-timeout, --request-timeout) keep their defaults \
         (kubeflavor serve --help).",
        total.per_minute, total.burst, each.per_minute, each.burst, most.per_minute, most.burst,
    )
}

fn service(namespace: &str) -> Document {
    let service = Service {
        metadata: object_meta(SERVE, Some(namespace), COMPONENT),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_of(COMPONENT)),
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: 443,
                target_port: Some(IntOrString::String("https".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    Document::new(
        &format!(
            "The join-token API inside the cluster: a portal there calls \
             https://{SERVE}.{namespace}.svc/v1/flavors/<flavor>/jointokens. The certificate must \
             name {SERVE}.{namespace}.svc. To reach it from outside, put an Ingress or a \
             LoadBalancer in front (TLS passthrough keeps the certificate end to end)."
        ),
        &service,
    )
    .note(
        "spec.type",
        "ClusterIP: reachable only inside the cluster unless you expose it.",
    )
    .note("spec.selector", "The Deployment's pods, ready ones only.")
    .note(
        "spec.ports",
        &format!(
            "443, the HTTPS default, to the pods' https port ({HTTPS_PORT}). The plain-HTTP \
             metrics port is not exposed here."
        ),
    )
}

#[cfg(test)]
#[path = "serve_policy_tests.rs"]
mod policy_tests;
