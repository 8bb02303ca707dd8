//! Who else approves kubelet client CSRs. kube-controller-manager's approver
//! (sarapprove.go) approves a kubelet client CSR when its requester may create
//! `certificatesigningrequests/nodeclient` (a bootstrap CSR) or `.../selfnodeclient` (a
//! node renewing its own certificate), within milliseconds, before kubeflavor sees it.
//! `kubeadm init` grants both: `kubeadm:node-autoapprove-bootstrap` to its token group,
//! `kubeadm:node-autoapprove-certificate-rotation` to `system:nodes`; `kubeadm upgrade
//! apply` grants them again.
//!
//! The controller watches every ClusterRole and ClusterRoleBinding for its whole life and
//! reads from them (`kubeflavor_core::approval::approvers`, pure) which requesters RBAC lets be
//! auto-approved, and through which binding. At start it:
//! - refuses to start when kubeflavor's own tokens are auto-approved (then any token
//!   holder gets any node name, and nothing kubeflavor decides holds);
//! - refuses `--strict` while other tokens' CSRs are auto-approved, and
//!   `--manage-renewals` while renewals are: both flags would silently do nothing;
//! - otherwise warns.
//!
//! While it runs, a grant that would have stopped it at start makes it not ready
//! (`/readyz`), logs an error and writes a Warning Event about the binding naming the fix;
//! once the grant is gone it is ready again. `kubeflavor_competing_approvals{kind}` is 1
//! while a kind of competing approval exists, 0 otherwise.
//!
//! RBAC is not the only authorizer a cluster may have (a webhook, ABAC): at start the
//! controller also asks the API server (SubjectAccessReviews, the whole authorizer chain)
//! about kubeflavor's token groups, kubeadm's token group and a node, and refuses on a yes
//! that the RBAC reading does not explain, like on a grant it found.
//!
//! `install --apply --sole-approver` (and `--manage-renewals` for renewals alone) hands the
//! approvals over by deleting kubeadm's bindings.
//!
//! With `--approve-serving` the start-up check also names everyone else RBAC lets approve
//! kubelet serving CSRs (`approve` on the signer `kubernetes.io/kubelet-serving`): a
//! warning and `kubeflavor_competing_approvals{kind="serving_approvers"}`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1 as rbac;
use kube::api::{ListParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use kubeflavor_cluster::ops::http::Health;
use kubeflavor_cluster::ops::trail;
use kubeflavor_core::approval::approvers::{self as core, Grant};
use kubeflavor_core::token::secret::{BOOTSTRAPPERS_GROUP, CONTROL_PLANE_GROUP, NODE_GROUP};
use tokio::sync::Notify;

pub use kubeflavor_core::approval::approvers::Kind;

use super::Options;
use super::metrics::Metrics;

/// kubeadm's binding of its token group to the nodeclient auto-approval.
pub const KUBEADM_BOOTSTRAP_BINDING: &str = "kubeadm:node-autoapprove-bootstrap";
/// kubeadm's binding of `system:nodes` to the selfnodeclient auto-approval.
pub const KUBEADM_RENEWAL_BINDING: &str = "kubeadm:node-autoapprove-certificate-rotation";
/// kubeadm's token group.
pub const KUBEADM_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The ServiceAccount `install` runs the controller as (in its namespace): its own
/// approvals are not a competitor's.
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "kubeflavor-controller";
/// The reason of the Event written when a competing approval appears.
pub const COMPETING_REASON: &str = "CompetingApprover";

/// How long a "still auto-approved" answer is asked again before it counts: the RBAC
/// authorizer reads an informer cache, so a binding deleted a moment ago can still allow
/// the request for a while (seen on a real v1.36 API server right after
/// `install --apply --manage-renewals`).
pub const RBAC_PROPAGATION: Duration = Duration::from_secs(10);

// ---- reading RBAC ----

fn rule_of(r: &rbac::PolicyRule) -> core::Rule {
    core::Rule {
        verbs: r.verbs.clone(),
        api_groups: r.api_groups.clone().unwrap_or_default(),
        resources: r.resources.clone().unwrap_or_default(),
        resource_names: r.resource_names.clone().unwrap_or_default(),
    }
}

fn selector_of(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> core::Selector {
    core::Selector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| core::Requirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// A ClusterRole as the core reads it.
pub fn role_of(r: &rbac::ClusterRole) -> core::ClusterRole {
    core::ClusterRole {
        name: r.name_any(),
        labels: r.labels().clone(),
        rules: r.rules.iter().flatten().map(rule_of).collect(),
        aggregation: r.aggregation_rule.as_ref().map(|a| {
            a.cluster_role_selectors
                .iter()
                .flatten()
                .map(selector_of)
                .collect()
        }),
    }
}

/// A ClusterRoleBinding as the core reads it (a ServiceAccount's namespace is required on
/// a ClusterRoleBinding; an empty one applies to nobody).
pub fn binding_of(b: &rbac::ClusterRoleBinding) -> core::ClusterRoleBinding {
    let subjects = b
        .subjects
        .iter()
        .flatten()
        .map(|s| match s.kind.as_str() {
            "User" => core::Subject::User(s.name.clone()),
            "Group" => core::Subject::Group(s.name.clone()),
            "ServiceAccount" => match s.namespace.as_deref() {
                Some(ns) if !ns.is_empty() => {
                    core::Subject::ServiceAccount(ns.into(), s.name.clone())
                }
                _ => core::Subject::Other(s.kind.clone(), s.name.clone()),
            },
            other => core::Subject::Other(other.into(), s.name.clone()),
        })
        .collect();
    core::ClusterRoleBinding {
        name: b.name_any(),
        role_kind: b.role_ref.kind.clone(),
        role_name: b.role_ref.name.clone(),
        subjects,
    }
}

/// ClusterRoles and ClusterRoleBindings as watched.
#[derive(Clone)]
pub struct RbacView {
    roles: Store<rbac::ClusterRole>,
    bindings: Store<rbac::ClusterRoleBinding>,
}

impl RbacView {
    /// Every auto-approval the watched RBAC grants.
    pub fn grants(&self) -> Vec<Grant> {
        let (roles, bindings) = self.core_view();
        core::competing_approvals(&roles, &bindings)
    }

    /// Everyone but `own` the watched RBAC lets approve kubelet serving CSRs.
    pub fn serving_approvers(&self, own: &core::Subject) -> Vec<core::ServingApprover> {
        let (roles, bindings) = self.core_view();
        core::serving_approvers(&roles, &bindings, own)
    }

    /// The watched ClusterRoles and ClusterRoleBindings as core reads them.
    fn core_view(&self) -> (Vec<core::ClusterRole>, Vec<core::ClusterRoleBinding>) {
        let roles = self.roles.state().iter().map(|r| role_of(r)).collect();
        let bindings = self
            .bindings
            .state()
            .iter()
            .map(|b| binding_of(b))
            .collect();
        (roles, bindings)
    }

    /// Resolves once both watches have listed.
    pub async fn wait_ready(&self) {
        let _ = self.roles.wait_until_ready().await;
        let _ = self.bindings.wait_until_ready().await;
    }

    fn binding_uid(&self, name: &str) -> Option<String> {
        self.bindings
            .get(&reflector::ObjectRef::new(name))
            .and_then(|b| b.uid())
    }
}

/// Starts watching ClusterRoles and ClusterRoleBindings: the view, and the future that
/// keeps it current and notifies `changed` after every change (it never ends by itself).
pub fn watch_rbac(
    client: kube::Client,
    changed: Arc<Notify>,
) -> (RbacView, BoxFuture<'static, ()>) {
    let (roles, roles_writer) = reflector::store();
    let (bindings, bindings_writer) = reflector::store();
    let logged = |what: &'static str| {
        move |e: &Result<(), watcher::Error>| {
            if let Err(e) = e {
                tracing::warn!(error = %e, "watching {what} failed; retrying (who else approves kubelet CSRs is not current meanwhile)");
            }
        }
    };
    let role_events = watcher(
        Api::<rbac::ClusterRole>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(roles_writer)
    .map(|e| e.map(|_| ()))
    .inspect(logged("ClusterRoles"));
    let binding_events = watcher(
        Api::<rbac::ClusterRoleBinding>::all(client),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(bindings_writer)
    .map(|e| e.map(|_| ()))
    .inspect(logged("ClusterRoleBindings"));
    let feed = futures::stream::select(role_events, binding_events)
        .for_each(move |_| {
            changed.notify_one();
            std::future::ready(())
        })
        .boxed();
    (RbacView { roles, bindings }, feed)
}

// ---- the start-up check ----

/// Lists both kinds once, so a controller installed without list/watch on them says so at
/// once instead of waiting for a watch that never starts.
async fn may_read_rbac(client: &kube::Client) -> anyhow::Result<()> {
    let one = ListParams::default().limit(1);
    let roles = Api::<rbac::ClusterRole>::all(client.clone())
        .list_metadata(&one)
        .await;
    let bindings = Api::<rbac::ClusterRoleBinding>::all(client.clone())
        .list_metadata(&one)
        .await;
    roles.and(bindings).map(|_| ()).map_err(|e| {
        anyhow::anyhow!(
            "cannot read who else approves kubelet CSRs: listing ClusterRoles and ClusterRoleBindings failed: {e} \
             (the controller needs list and watch on them: run 'kubeflavor install --apply' of this version)"
        )
    })
}

/// Why the controller must not run with these grants, naming each binding and its fix.
fn refusal(blocking: &[&Grant]) -> String {
    let lines: Vec<String> = blocking
        .iter()
        .map(|g| {
            let what = match g.kind {
                Kind::KubeflavorTokens => {
                    "kubeflavor decides nothing here: any holder of a kubeflavor token gets any node name"
                }
                Kind::OtherTokens => {
                    "--strict has no effect here: another token can take a node name bound to a kubeflavor token"
                }
                Kind::Renewals => "--manage-renewals has no effect here: revoked nodes keep renewing",
                Kind::OtherRequesters => "they can take any node name",
            };
            format!("{what}, because {} (run: {})", core::describe(g), core::fix(g))
        })
        .collect();
    lines.join("; ")
}

/// The start-up check on a watch of its own (see [`check_with`]).
pub async fn check(
    client: &kube::Client,
    opts: &Options,
    metrics: &Metrics,
) -> anyhow::Result<Vec<Grant>> {
    let (view, mut feed) = watch_rbac(client.clone(), Arc::new(Notify::new()));
    tokio::select! {
        checked = check_with(client, opts, metrics, &view) => checked,
        _ = &mut feed => anyhow::bail!("the watches of ClusterRoles and ClusterRoleBindings ended"),
    }
}

/// The start-up check (see the module documentation): an error when the controller must
/// not run with these options; warnings and the `competing_approvals` gauge otherwise.
/// Returns the grants found, the baseline the watch compares with.
pub async fn check_with(
    client: &kube::Client,
    opts: &Options,
    metrics: &Metrics,
    view: &RbacView,
) -> anyhow::Result<Vec<Grant>> {
    may_read_rbac(client).await?;
    view.wait_ready().await;
    let grants = view.grants();
    publish(metrics, &grants);
    let blocking = core::blocking(&grants, opts.strict, opts.manage_renewals);
    if !blocking.is_empty() {
        return Err(anyhow::anyhow!("{}", refusal(&blocking)));
    }
    for g in &grants {
        report_allowed(g);
    }
    if opts.approve_serving {
        report_serving_approvers(opts, metrics, view);
    }
    cross_check(client, opts, &grants).await?;
    Ok(grants)
}

/// With `--approve-serving`: warns about everyone else RBAC lets approve kubelet serving
/// CSRs (they can approve what kubeflavor denies), and publishes
/// `competing_approvals{kind="serving_approvers"}`. A warning, not a refusal: unlike
/// kube-controller-manager's client approvals, no serving approver is there by default,
/// and one an admin installed is that admin's choice.
fn report_serving_approvers(opts: &Options, metrics: &Metrics, view: &RbacView) {
    let own = core::Subject::ServiceAccount(
        opts.namespace.clone(),
        CONTROLLER_SERVICE_ACCOUNT.to_string(),
    );
    let approvers = view.serving_approvers(&own);
    metrics.competing_approval("serving_approvers", !approvers.is_empty());
    for a in &approvers {
        tracing::warn!(binding = %a.binding, "{a}");
    }
}

/// Logs a grant the options allow: other tokens (a takeover risk) as a warning, the rest
/// as information.
fn report_allowed(g: &Grant) {
    match g.kind {
        Kind::OtherTokens => tracing::warn!(
            binding = %g.binding,
            "{}: such a token can take a node name bound to a kubeflavor token. Make kubeflavor the only approver with \
             'kubeflavor install --apply --sole-approver'", core::describe(g)
        ),
        Kind::Renewals => tracing::info!(
            binding = %g.binding,
            "{} (a revoked node keeps renewing); 'kubeflavor install --apply --manage-renewals' hands them to kubeflavor",
            core::describe(g)
        ),
        _ => tracing::info!(binding = %g.binding, "{}", core::describe(g)),
    }
}

/// The SubjectAccessReview cross-check: for each kind that would stop the controller and
/// that the RBAC reading found no grant for, ask the API server's whole authorizer chain
/// about a known requester of that kind; a yes (still there once the RBAC cache had time
/// to forget a deleted binding) is refused like a grant.
async fn cross_check(
    client: &kube::Client,
    opts: &Options,
    grants: &[Grant],
) -> anyhow::Result<()> {
    for kind in [Kind::KubeflavorTokens, Kind::OtherTokens, Kind::Renewals] {
        if !kind.blocks(opts.strict, opts.manage_renewals) || grants.iter().any(|g| g.kind == kind)
        {
            continue;
        }
        let answer = auto_approved_within(client, kind, RBAC_PROPAGATION)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot check who else approves kubelet CSRs: {e} (the controller needs create on \
                     subjectaccessreviews: run 'kubeflavor install --apply' of this version)"
                )
            })?;
        if let Some(reason) = answer {
            return Err(anyhow::anyhow!(
                "kube-controller-manager approves the kubelet client CSRs of {} before kubeflavor decides, \
                 allowed by an authorizer besides the RBAC kubeflavor reads ({reason}) (remove that grant; for \
                 kubeadm's bindings run 'kubeflavor install --apply --sole-approver' or '--manage-renewals')",
                kind.whose()
            ));
        }
    }
    Ok(())
}

/// Sets `kubeflavor_competing_approvals` for every kind: 1 while any grant of it exists.
fn publish(metrics: &Metrics, grants: &[Grant]) {
    for kind in Kind::ALL {
        metrics.competing_approval(kind.as_str(), grants.iter().any(|g| g.kind == kind));
    }
}

// ---- while running ----

/// What the watch needs besides the view.
pub struct Keeper {
    pub client: kube::Client,
    pub opts: Options,
    pub metrics: Metrics,
    pub health: Arc<Health>,
    pub view: RbacView,
    pub changed: Arc<Notify>,
}

/// The key of a grant for telling new ones from known ones.
fn key(g: &Grant) -> (String, Kind) {
    (g.binding.clone(), g.kind)
}

impl Keeper {
    /// Reads RBAC again after every change, forever: keeps the gauge current, makes the
    /// controller not ready while a grant stops it (and ready again once none does), and
    /// reports each grant when it appears (an error and an Event when it stops the
    /// controller) and when it goes.
    pub async fn run(self, baseline: Vec<Grant>) {
        let mut known: BTreeSet<(String, Kind)> = baseline.iter().map(key).collect();
        loop {
            self.changed.notified().await;
            let grants = self.view.grants();
            publish(&self.metrics, &grants);
            let now: BTreeSet<(String, Kind)> = grants.iter().map(key).collect();
            let blocking = core::blocking(&grants, self.opts.strict, self.opts.manage_renewals);
            self.health.set_blocked(match blocking.is_empty() {
                true => None,
                false => Some(refusal(&blocking)),
            });
            for g in grants.iter().filter(|g| !known.contains(&key(g))) {
                if g.kind.blocks(self.opts.strict, self.opts.manage_renewals) {
                    self.appeared(g).await;
                } else {
                    report_allowed(g);
                }
            }
            for (binding, kind) in known.difference(&now) {
                tracing::info!(%binding, kind = kind.as_str(), "kube-controller-manager no longer auto-approves these kubelet CSRs through this binding");
            }
            known = now;
        }
    }

    /// A grant that stops the controller appeared: error log and Warning Event.
    async fn appeared(&self, g: &Grant) {
        let note = format!(
            "{}; the controller is not ready while it exists. Fix: {}",
            core::describe(g),
            core::fix(g)
        );
        tracing::error!(binding = %g.binding, kind = g.kind.as_str(), "{note}");
        let uid = self.view.binding_uid(&g.binding);
        let event = trail::event(
            super::REPORTING_CONTROLLER,
            &self.opts.identity,
            trail::Regarding {
                api_version: "rbac.authorization.k8s.io/v1",
                kind: "ClusterRoleBinding",
                name: &g.binding,
                uid: uid.as_deref(),
            },
            ("Warning", "NotReady", COMPETING_REASON),
            &note,
        );
        trail::post(&self.client, &event).await;
    }
}

// ---- the SubjectAccessReview questions ----

/// The requesters kube-controller-manager's approver would review for `kind`, and the
/// subresource it reviews them for (none for requesters that are not tokens or nodes).
fn requesters(kind: Kind) -> (Vec<(String, Vec<&'static str>)>, &'static str) {
    let bootstrap = |group: &'static str| {
        (
            "system:bootstrap:kfchck".to_string(),
            vec![BOOTSTRAPPERS_GROUP, group, "system:authenticated"],
        )
    };
    match kind {
        Kind::KubeflavorTokens => (
            vec![bootstrap(NODE_GROUP), bootstrap(CONTROL_PLANE_GROUP)],
            "nodeclient",
        ),
        Kind::OtherTokens => (vec![bootstrap(KUBEADM_TOKEN_GROUP)], "nodeclient"),
        Kind::Renewals => (
            vec![(
                "system:node:kubeflavor-renewal-check".to_string(),
                vec!["system:nodes", "system:authenticated"],
            )],
            "selfnodeclient",
        ),
        Kind::OtherRequesters => (vec![], "nodeclient"),
    }
}

fn review(user: &str, groups: &[&str], subresource: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `Some(reason)` when the API server's authorizers let a known requester of `kind` be
/// auto-approved (the reason is the authorizer's: which binding allows it).
pub async fn auto_approved(
    client: &kube::Client,
    kind: Kind,
) -> Result<Option<String>, kube::Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let (requesters, subresource) = requesters(kind);
    for (user, groups) in requesters {
        let answer = api
            .create(&PostParams::default(), &review(&user, &groups, subresource))
            .await?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            return Ok(Some(status.reason.unwrap_or_else(|| "allowed".into())));
        }
    }
    Ok(None)
}

/// [`auto_approved`], asked again (with growing pauses) while it says yes, for at most
/// `within`: the answer once a deleted binding has left the authorizer's cache.
pub async fn auto_approved_within(
    client: &kube::Client,
    kind: Kind,
    within: Duration,
) -> Result<Option<String>, kube::Error> {
    kubeflavor_cluster::cache_lag::until_settled(
        within,
        || auto_approved(client, kind),
        |answer| !matches!(answer, Ok(Some(_))),
    )
    .await
}
