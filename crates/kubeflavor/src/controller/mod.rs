//! `kubeflavor controller`: approves or denies kubelet client CSRs for kubeflavor tokens,
//! binds node names to tokens, and keeps each flavor's labels and taints on its Nodes.
//!
//! Shape (controller-rs): a [`Context`] shared by the reconcilers, a thiserror [`Error`]
//! with `metric_label()`, metrics in their own module. Each reconciler reads as stages
//! (stackable): gather facts (reads) -> decide (kubeflavor-core, pure) -> apply (writes).
//! No policy lives here: every approve/deny/flavor decision is a core function.
//!
//! Every write is re-derivable from API state, so a controller stopped between any two
//! writes is finished by the next run (P6, nothing lost): the token's `bound-nodes` annotation, the
//! FlavorBinding and the CSR condition are each checked again before the next step.

pub mod approvers;
pub mod cache;
pub mod census;
pub mod csr;
pub mod fleet;
pub mod leader;
pub mod metrics;
pub mod node;
pub mod queue;
pub mod revoked;
pub mod unverified;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::Client;
use kubeflavor_cluster::ops::http::{self, Health};
use kubeflavor_cluster::ops::trail::{self, Regarding};
use kubeflavor_cluster::read::ReadError;
use tokio::sync::watch;

use self::leader::{LeaderElector, LeaseConfig};
use self::metrics::Metrics;
use crate::authz::metrics::AuthzMetrics;

/// The signer of kubelet client certificates.
pub use kubeflavor_core::csr::client::KUBELET_CLIENT_SIGNER;
/// Where bootstrap token Secrets live: kube-apiserver's bootstrap token authenticator
/// reads them from kube-system only.
pub use kubeflavor_core::token::secret::TOKEN_SECRET_NAMESPACE as TOKEN_NAMESPACE;
/// The Lease the replicas compete for.
/// Who writes the controller's Events (`reportingController`); a policy `install` ships
/// refuses such Events from anyone else (kubeflavor_core::admission::trail).
pub const REPORTING_CONTROLLER: &str = kubeflavor_core::admission::trail::CONTROLLER_REPORTER;

pub const LEASE_NAME: &str = "kubeflavor-controller";

/// The field manager of the controller's patches, so a Node's `managedFields` show which
/// labels and taints the controller set (and not the kubelet or an admin).
pub const FIELD_MANAGER: &str = "kubeflavor-controller";

/// Patch parameters naming the controller as the field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// What the operator chose on the command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// The controller's own namespace: its Lease and its Events live there.
    pub namespace: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Compete for the Lease; off means "I am the only replica".
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Deny kubelet client CSRs from tokens that are not kubeflavor's.
    pub strict: bool,
    /// Approve `system:node:<name>` renewals for bound, unrevoked nodes; deny the rest.
    pub manage_renewals: bool,
    /// Denials of one token after which its Secret is deleted (P4, rejection that ends).
    pub denial_limit: u32,
    /// Decide kubelet serving CSRs (`kubernetes.io/kubelet-serving`) of the nodes
    /// kubeflavor bound (`--approve-serving`).
    pub approve_serving: bool,
    /// With `approve_serving`: deny serving CSRs of nodes kubeflavor never bound, instead
    /// of leaving them to other approvers (`--deny-unbound-serving`).
    pub deny_unbound_serving: bool,
    /// Where /metrics, /healthz and /readyz are served; None to serve nothing.
    pub ops_addr: Option<SocketAddr>,
    /// Parallel reconciles per loop (the rest wait their turn, first come first served).
    pub concurrency: u16,
    /// The Lease the replicas compete for (in `namespace`).
    pub lease_name: String,
    /// Serve only node and flavor names that end in this suffix; `None` serves all.
    /// Several controllers then share one cluster without touching each other's work
    /// (the end-to-end suites run one controller per test on one real cluster). Every
    /// controller of a cluster must agree on how names are split between them.
    pub scope: Option<String>,
}

impl Options {
    /// The switches that change core's CSR decisions.
    pub fn policy(&self) -> kubeflavor_core::approval::client::PolicyOptions {
        kubeflavor_core::approval::client::PolicyOptions {
            strict: self.strict,
            manage_renewals: self.manage_renewals,
            denial_limit: std::num::NonZeroU32::new(self.denial_limit),
        }
    }

    /// The switches that change core's serving-CSR decisions.
    pub fn serving_policy(&self) -> kubeflavor_core::approval::serving::ServingOptions {
        kubeflavor_core::approval::serving::ServingOptions {
            deny_unbound: self.deny_unbound_serving,
        }
    }

    pub fn new(namespace: &str, identity: &str) -> Self {
        Options {
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            strict: false,
            manage_renewals: false,
            denial_limit: 5,
            approve_serving: false,
            deny_unbound_serving: false,
            ops_addr: None,
            concurrency: 16,
            lease_name: LEASE_NAME.to_string(),
            scope: None,
        }
    }

    /// Whether a node or flavor name is this controller's to serve (see `scope`).
    pub fn serves(&self, name: &str) -> bool {
        self.scope
            .as_deref()
            .is_none_or(|suffix| name.ends_with(suffix))
    }
}

/// The writes of the CSR and node flows, in order. Tests use them to stop a controller
/// between two writes and check the next run finishes the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The node name was added to the token's `kubeflavor.io/bound-nodes`.
    Reserved,
    /// The FlavorBinding was created.
    Bound,
    /// The CSR got its Approved condition.
    Approved,
    /// The token Secret was deleted after a denial (P4, rejection that ends).
    TokenDeleted,
    /// The CSR got its Denied condition.
    Denied,
    /// The token's denial count was raised.
    DenialCounted,
    /// The Node was patched to its desired labels and taints.
    NodePatched,
    /// The FlavorBinding status was written.
    StatusWritten,
    /// A used-up token (every use bound, every bound Node registered) was deleted.
    TokenRetired,
}

impl Step {
    /// The loop whose write this is, as a metric label.
    pub fn controller(self) -> &'static str {
        match self {
            Step::NodePatched | Step::StatusWritten | Step::TokenRetired => "node",
            _ => "csr",
        }
    }
}

/// Called after every write with the object name and the step just done. Returning
/// `Break` makes the reconciler stop right there, as if the process had died.
pub type StepHook = Arc<dyn Fn(&str, Step) -> std::ops::ControlFlow<()> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {what} failed: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("reserving a use of token {token} for node {node} failed: {source}")]
    Reserve {
        token: String,
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating FlavorBinding {node} failed: {source}")]
    Bind {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the decision on CSR {csr} failed: {source}")]
    Decide {
        csr: String,
        #[source]
        source: kube::Error,
    },
    #[error("updating token Secret {token} after a denial failed: {source}")]
    TokenAfterDenial {
        token: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting the used-up token Secret {token} failed: {source}")]
    RetireToken {
        token: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching Node {node} failed: {source}")]
    PatchNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of FlavorBinding {node} failed: {source}")]
    BindingStatus {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("the binding or Node of {node} changed before CSR {csr} was approved; deciding again")]
    Changed { csr: String, node: String },
    #[error("halted by the step hook after {0:?}")]
    Halted(Step),
}

impl From<ReadError> for Error {
    fn from(ReadError { what, source }: ReadError) -> Self {
        Error::Read { what, source }
    }
}

impl Error {
    /// Every stage [`Error::metric_label`] names but `halted` (a test's step hook): the
    /// label values of `reconcile_errors` and `reconcile_conflicts`.
    pub const STAGES: [&'static str; 9] = [
        "read",
        "reserve",
        "bind",
        "decide",
        "token_after_denial",
        "retire_token",
        "patch_node",
        "binding_status",
        "changed_before_approval",
    ];

    /// The stage that failed, as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::Reserve { .. } => "reserve",
            Error::Bind { .. } => "bind",
            Error::Decide { .. } => "decide",
            Error::TokenAfterDenial { .. } => "token_after_denial",
            Error::RetireToken { .. } => "retire_token",
            Error::PatchNode { .. } => "patch_node",
            Error::BindingStatus { .. } => "binding_status",
            Error::Changed { .. } => "changed_before_approval",
            Error::Halted(_) => "halted",
        }
    }

    fn source_kube(&self) -> Option<&kube::Error> {
        match self {
            Error::Read { source, .. }
            | Error::Reserve { source, .. }
            | Error::Bind { source, .. }
            | Error::Decide { source, .. }
            | Error::TokenAfterDenial { source, .. }
            | Error::RetireToken { source, .. }
            | Error::PatchNode { source, .. }
            | Error::BindingStatus { source, .. } => Some(source),
            Error::Changed { .. } | Error::Halted(_) => None,
        }
    }

    /// The object the write was for is gone (404).
    pub fn is_not_found(&self) -> bool {
        matches!(self.source_kube(), Some(kube::Error::Api(s)) if s.is_not_found())
    }

    /// Lost an optimistic-concurrency race (409 Conflict or AlreadyExists, or facts that
    /// changed before an approval): re-read and decide again soon.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Changed { .. })
            || matches!(self.source_kube(), Some(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists())
    }
}

/// Shared by every reconcile of one leadership term.
pub struct Context {
    pub client: Client,
    pub opts: Options,
    pub metrics: Metrics,
    pub health: Arc<Health>,
    pub hook: Option<StepHook>,
    /// Flavors as watched (a reflector store).
    pub flavors: kube::runtime::reflector::Store<kubeflavor_cluster::crd::Flavor>,
    /// What the node loop knows of every node name (see `fleet`).
    pub fleet: fleet::Fleet,
    /// Set once the step hook stopped this context, or its leadership term ended.
    pub halted: std::sync::atomic::AtomicBool,
    /// Turns of the CSR loop to work with the API server (`Options::concurrency`).
    pub csr_turns: Turns,
    /// Token Secret versions the CSR loop wrote (see `csr::OwnTokenWrites`).
    pub own_token_writes: csr::OwnTokenWrites,
}

/// A fair limit on parallel reconciles: waiters are served in arrival order.
///
/// kube-runtime's own limit (`Config::concurrency`) parks the requests it cannot run yet in
/// a hash set and picks from it in no particular order, so under a steady stream of new
/// CSRs an early one can wait for seconds while later ones go first. The CSR loop therefore
/// lets kube-runtime start every reconcile and take a turn here (tokio's semaphore queues
/// waiters first in, first out) before it talks to the API server. (The node loop, whose
/// triggers grow with the fleet, has its own first-in first-out work queue, `queue`.)
pub struct Turns(tokio::sync::Semaphore);

impl Turns {
    pub fn new(parallel: u16) -> Self {
        Turns(tokio::sync::Semaphore::new(usize::from(parallel.max(1))))
    }

    /// Waits for a turn; the turn ends when the guard is dropped. The wait is recorded as
    /// the `queue` stage of `controller`.
    pub async fn take(
        &self,
        metrics: &Metrics,
        controller: &str,
    ) -> tokio::sync::SemaphorePermit<'_> {
        let started = std::time::Instant::now();
        let turn = self.0.acquire().await.expect("the turns are never closed");
        metrics.stage(controller, "queue", started.elapsed().as_secs_f64());
        turn
    }
}

impl Context {
    /// A fresh context for one leadership term over the given Flavor cache.
    fn new(
        rt: &Runtime,
        flavors: kube::runtime::reflector::Store<kubeflavor_cluster::crd::Flavor>,
    ) -> Context {
        Context {
            client: rt.client.clone(),
            opts: rt.opts.clone(),
            metrics: rt.metrics.clone(),
            health: rt.health.clone(),
            hook: rt.hook.clone(),
            flavors,
            fleet: fleet::Fleet::new(),
            halted: Default::default(),
            csr_turns: Turns::new(rt.opts.concurrency),
            own_token_writes: Default::default(),
        }
    }

    /// Runs the step hook, if any: `Err(Halted)` means stop here, and from then on this
    /// context refuses every write (see [`Context::may_write`]), like a dead process.
    pub fn step(&self, name: &str, step: Step) -> Result<(), Error> {
        match &self.hook {
            Some(hook) if hook(name, step).is_break() => {
                self.halted.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(Error::Halted(step))
            }
            _ => Ok(()),
        }
    }

    /// Checked before every write: a context halted by the step hook, or whose
    /// leadership term has ended, writes nothing more.
    pub fn may_write(&self, next: Step) -> Result<(), Error> {
        if self.halted.load(std::sync::atomic::Ordering::SeqCst) {
            Err(Error::Halted(next))
        } else {
            Ok(())
        }
    }

    /// Called right before a write is sent: refused once this context may write no more
    /// (see [`Context::may_write`]), otherwise counted in the write metrics.
    pub fn begin_write(&self, next: Step) -> Result<(), Error> {
        self.may_write(next)?;
        self.metrics.write_started();
        Ok(())
    }

    /// One write of a reconcile, bracketed: refused once this context may write no more
    /// (see [`Context::may_write`]), and recorded as `step` of object `name` once done (see
    /// [`Context::step`]). `write` is not started when refused.
    pub async fn write<T>(
        &self,
        name: &str,
        step: Step,
        write: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        self.begin_write(step)?;
        let started = std::time::Instant::now();
        let written = write.await;
        self.metrics
            .stage(step.controller(), "write", started.elapsed().as_secs_f64());
        let written = written?;
        self.step(name, step)?;
        Ok(written)
    }

    /// Records an Event in the admin trail; `what` is (type, action, reason). Failures are
    /// logged, never fatal: the decision itself already happened and the log line and
    /// metric carry the same facts.
    pub async fn record(&self, regarding: Regarding<'_>, what: (&str, &str, &str), note: &str) {
        // A record is a write like any other: none once this replica's term has ended.
        if self.begin_write(Step::Denied).is_err() {
            return;
        }
        let event = trail::event(
            REPORTING_CONTROLLER,
            &self.opts.identity,
            regarding,
            what,
            note,
        );
        trail::post(&self.client, &event).await;
    }
}

type Stop = Shared<BoxFuture<'static, ()>>;

fn stop_when(rx: watch::Receiver<bool>, want: bool) -> Stop {
    async move {
        let mut rx = rx;
        let _ = rx.wait_for(|v| *v == want).await;
    }
    .boxed()
    .shared()
}

/// Drives a kube-runtime controller future until it ends, or until `until` resolves and
/// then for at most a grace period. kube-runtime's applier waits for its store to become
/// ready before it starts, and never notices a graceful shutdown requested before that:
/// a term that ends before the first list completes would otherwise hang.
async fn with_grace<K: kube::Resource + Clone + Send + Sync + 'static>(
    fut: impl std::future::Future<Output = ()>,
    until: Stop,
    store: kube::runtime::reflector::Store<K>,
) where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    const GRACE: Duration = Duration::from_secs(10);
    let deadline = async {
        until.await;
        if store.wait_until_ready().now_or_never().is_some() {
            tokio::time::sleep(GRACE).await;
        }
    };
    tokio::select! {
        _ = fut => {}
        _ = deadline => tracing::warn!("a loop did not stop in time; dropping it"),
    }
}

/// Everything `run` needs besides the options: the client and, in tests, a step hook.
pub struct Runtime {
    pub client: Client,
    pub opts: Options,
    pub metrics: Metrics,
    /// The authorization webhook's families, on this runtime's /metrics whether the
    /// webhook runs in this process or not (a dashboard shows none rather than no data).
    pub authz_metrics: AuthzMetrics,
    pub health: Arc<Health>,
    pub hook: Option<StepHook>,
}

impl Runtime {
    pub fn new(client: Client, opts: Options) -> Self {
        let authz_metrics = AuthzMetrics::default();
        Runtime {
            client,
            opts,
            metrics: Metrics::with_families(|r| authz_metrics.register(r)),
            authz_metrics,
            health: Arc::new(Health::default()),
            hook: None,
        }
    }
}

/// Runs the controller until `shutdown` resolves: the operations endpoint, the leader
/// election and, while leading, the CSR and node loops.
pub async fn run(
    rt: Runtime,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (shut_tx, shut_rx) = watch::channel(false);
    let stopping = stop_when(shut_rx.clone(), true);
    let approvers = watch_approvers(&rt, stopping.clone()).await?;
    unverified::check(&rt.client, &rt.metrics).await;
    // Nothing is spawned detached: aborting the task that runs this future stops every
    // part of the controller at once, which is what a crash looks like to the cluster.
    let forward = async move {
        shutdown.await;
        let _ = shut_tx.send(true);
    };
    let listener = bind_ops(&rt.opts).await?;
    let ops = serve_ops(&rt, listener, stopping.clone());
    let work = async {
        if rt.opts.leader_elect {
            lead(&rt, stopping.clone(), shut_rx).await;
            return;
        }
        rt.health.set_leading(true);
        rt.metrics.leader.set(1);
        run_loops(&rt, stopping.clone()).await;
        rt.health.set_stopping();
    };
    tokio::join!(forward, ops, work, approvers);
    tracing::info!(identity = %rt.opts.identity, "controller stopped");
    Ok(())
}

/// Who else approves kubelet CSRs: read from RBAC at start (refusing to run where that
/// defeats kubeflavor or the options), then kept current for the controller's whole life
/// by the task returned, until `stopping`.
async fn watch_approvers(
    rt: &Runtime,
    stopping: Stop,
) -> anyhow::Result<impl std::future::Future<Output = ()> + use<>> {
    let rbac_changed = Arc::new(tokio::sync::Notify::new());
    let (rbac, mut rbac_feed) = approvers::watch_rbac(rt.client.clone(), rbac_changed.clone());
    let baseline = tokio::select! {
        checked = approvers::check_with(&rt.client, &rt.opts, &rt.metrics, &rbac) => checked?,
        _ = &mut rbac_feed => anyhow::bail!("the watches of ClusterRoles and ClusterRoleBindings ended"),
    };
    let keeper = approvers::Keeper {
        client: rt.client.clone(),
        opts: rt.opts.clone(),
        metrics: rt.metrics.clone(),
        health: rt.health.clone(),
        view: rbac,
        changed: rbac_changed,
    };
    Ok(async move {
        tokio::select! {
            _ = rbac_feed => {}
            _ = keeper.run(baseline) => {}
            _ = stopping => {}
        }
    })
}

/// Serves /metrics and the probes on `listener`, if there is one, until `stopping`.
async fn serve_ops(rt: &Runtime, listener: Option<tokio::net::TcpListener>, stopping: Stop) {
    let Some(listener) = listener else { return };
    let served = http::serve(
        listener,
        rt.health.clone(),
        Arc::new(rt.metrics.clone()),
        stopping,
    );
    if let Err(e) = served.await {
        tracing::warn!(error = %e, "operations endpoint failed");
    }
}

/// Binds the address for /metrics and the probes, if one was asked for.
async fn bind_ops(opts: &Options) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = opts.ops_addr else {
        return Ok(None);
    };
    let listener = http::bind(addr).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {addr} for /metrics and probes: {e} (choose another --http-address)"
        )
    })?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics /healthz /readyz");
    Ok(Some(listener))
}

/// Competes for the Lease until `stopping` resolves, and runs the loops for each
/// leadership term won. Not ready from the moment the last term ended.
async fn lead(rt: &Runtime, stopping: Stop, shut_rx: watch::Receiver<bool>) {
    let (lead_tx, lead_rx) = watch::channel(false);
    let mut cfg = LeaseConfig::new(&rt.opts.namespace, &rt.opts.lease_name, &rt.opts.identity);
    cfg.lease_duration = rt.opts.lease_duration;
    cfg.renew_deadline = rt.opts.renew_deadline;
    cfg.retry_period = rt.opts.retry_period;
    let election = LeaderElector::new(rt.client.clone(), cfg).run(lead_tx, stopping.clone());
    let terms = async {
        loop {
            let mut rx = lead_rx.clone();
            tokio::select! {
                _ = stopping.clone() => break,
                r = rx.wait_for(|v| *v) => if r.is_err() { break },
            }
            term(rt, stop_when(lead_rx.clone(), false), stopping.clone()).await;
            if *shut_rx.borrow() {
                break;
            }
        }
        rt.health.set_stopping();
    };
    tokio::join!(election, terms);
}

/// One leadership term, until leadership is `lost` or the controller is `stopping`.
async fn term(rt: &Runtime, lost: Stop, stopping: Stop) {
    rt.health.set_leading(true);
    rt.metrics.leader.set(1);
    let until = futures::future::select(lost, stopping)
        .map(|_| ())
        .boxed()
        .shared();
    run_loops(rt, until).await;
    tracing::debug!(identity = %rt.opts.identity, "leadership term ended");
    rt.metrics.leader.set(0);
    rt.health.set_synced(false);
    rt.health.set_leading(false);
}

/// The term's context and the node loop's feeds, with the leader's census registered.
fn term_context(rt: &Runtime) -> (Arc<Context>, node::Feeds, Arc<tokio::sync::Notify>) {
    let counts_changed = Arc::new(tokio::sync::Notify::new());
    let scope = &rt.opts;
    let (flavors, flavor_events) =
        node::flavor_store(rt.client.clone(), scope, counts_changed.clone());
    let ctx = Arc::new(Context::new(rt, flavors));
    let feeds = node::Feeds {
        nodes: node::node_events(rt.client.clone(), scope),
        bindings: census::note_revocations(
            ctx.clone(),
            node::binding_events(rt.client.clone(), scope),
        ),
        flavors: flavor_events,
        counts_changed: counts_changed.clone(),
    };
    let fleet_census: Arc<dyn metrics::FleetCensus> = ctx.clone();
    rt.metrics.set_census(Some(Arc::downgrade(&fleet_census)));
    (ctx, feeds, counts_changed)
}

/// Marks the replica synced once the fleet index and the Flavor store have listed.
async fn mark_synced(ctx: Arc<Context>, until: Stop) {
    let ready = async {
        ctx.fleet.wait_synced().await;
        let _ = ctx.flavors.wait_until_ready().await;
        ctx.health.set_synced(true);
    };
    tokio::select! {
        _ = ready => {}
        _ = until => {}
    }
}

/// One leadership term: both loops (and the bound-node counts) until `until` resolves.
async fn run_loops(rt: &Runtime, until: Stop) {
    let (ctx, feeds, counts_changed) = term_context(rt);
    let node_loop = node::run(ctx.clone(), feeds, until.clone());
    let counts = node::keep_bound_counts(ctx.clone(), counts_changed, until.clone());
    let synced = mark_synced(ctx.clone(), until.clone());
    let csr_loop = csr::run(ctx.clone(), until.clone());
    let serving_until = until.clone();
    let csr_loop = async {
        let serving_loop = async {
            if rt.opts.approve_serving {
                csr::serving::run(ctx.clone(), serving_until).await;
                tracing::debug!("serving csr loop ended");
            }
        };
        tokio::join!(csr_loop, serving_loop);
        tracing::debug!("csr loop ended");
    };
    let node_loop = async {
        node_loop.await;
        tracing::debug!("node loop ended");
    };
    let revoked_until = until.clone();
    let revoked_loop = async {
        Box::pin(revoked::run(ctx.clone(), revoked_until)).await;
        tracing::debug!("revoked loop ended");
    };
    let term_end = halt_at_term_end(&ctx, until.clone());
    // Work of an ended term that still waits (a request into a partition may hang for
    // minutes) is dropped after a grace period, so a next term can start.
    let work = async {
        tokio::join!(csr_loop, node_loop, revoked_loop, counts, synced);
    };
    let drained = async {
        until.await;
        tokio::time::sleep(TERM_GRACE).await;
    };
    let bounded = async {
        tokio::select! {
            _ = work => {}
            _ = drained => tracing::warn!("work of the ended term did not stop in time; dropping it"),
        }
    };
    tokio::join!(bounded, term_end);
    rt.metrics.set_census(None);
}

/// How long the work of an ended term may take to stop before it is dropped.
const TERM_GRACE: Duration = Duration::from_secs(15);

/// Once the term ends (leadership lost, shutdown), reconciles still running or waiting for
/// a turn write nothing more: only the leader writes, and the next one finishes whatever
/// was half done (P6, nothing lost). The replica says at once that it no longer leads.
async fn halt_at_term_end(ctx: &Context, until: Stop) {
    until.await;
    ctx.halted.store(true, std::sync::atomic::Ordering::SeqCst);
    ctx.metrics.leader.set(0);
    ctx.health.set_leading(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_controller_serves_only_its_names() {
        let mut opts = Options::new("ns", "me");
        assert!(opts.serves("anything"), "unscoped: every name");
        opts.scope = Some("-abc123".into());
        assert!(opts.serves("node-1-abc123"));
        assert!(!opts.serves("node-1-zzz999"));
        assert!(!opts.serves("abc123-node"));
    }

    #[tokio::test]
    async fn turns_are_served_in_arrival_order() {
        let turns = Arc::new(Turns::new(1));
        let metrics = Metrics::new();
        let first = turns.take(&metrics, "csr").await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for i in 0..8 {
            let (turns, tx, metrics) = (turns.clone(), tx.clone(), metrics.clone());
            waiters.push(tokio::spawn(async move {
                let _turn = turns.take(&metrics, "csr").await;
                tx.send(i).expect("receiver alive");
            }));
            // Let waiter i queue up before waiter i + 1 arrives.
            tokio::task::yield_now().await;
        }
        drop(first);
        for w in waiters {
            w.await.expect("waiter");
        }
        drop(tx);
        let mut served = Vec::new();
        while let Some(i) = rx.recv().await {
            served.push(i);
        }
        assert_eq!(served, (0..8).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_term_that_ended_writes_nothing_more() {
        crate::connect::install_crypto_provider();
        let config = kube::Config::new("https://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let rt = Runtime::new(client, Options::new("ns", "me"));
        let ctx = Context::new(&rt, kube::runtime::reflector::store().0);
        let (tx, rx) = watch::channel(false);
        let term = halt_at_term_end(&ctx, stop_when(rx, true));
        let sent = std::sync::atomic::AtomicUsize::new(0);
        let send = || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, Error>(())
        };
        let check = async {
            assert!(ctx.may_write(Step::Reserved).is_ok(), "the term is on");
            ctx.write("csr-1", Step::Reserved, send())
                .await
                .expect("a write inside the term");
            tx.send(true).expect("term receiver");
        };
        tokio::join!(term, check);
        assert!(matches!(
            ctx.may_write(Step::Bound),
            Err(Error::Halted(Step::Bound))
        ));
        let refused = ctx.write("csr-1", Step::Bound, send()).await;
        assert!(matches!(refused, Err(Error::Halted(Step::Bound))));
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the write after the term was never sent"
        );
        assert_eq!(
            ctx.metrics.writes.get(),
            1,
            "only the write inside the term counts"
        );
        let last = ctx.metrics.last_write.get();
        assert!(last > 0.0, "the write inside the term is timestamped");
    }
}
