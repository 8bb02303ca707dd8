//! What every reconcile of one leadership term shares ([`Context`]), and the write
//! bracket around each of its writes: the [`Step`] hook tests stop a controller with, and
//! the end of the term, after which nothing more is written.

use std::sync::Arc;

use kube::Client;
use kubeflavor_cluster::ops::http::Health;
use kubeflavor_cluster::ops::trail::{self, Regarding};

use super::metrics::Metrics;
use super::runtime::Runtime;
use super::turns::Turns;
use super::{Error, Options, REPORTING_CONTROLLER, csr, fleet, revoked};

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
    /// What the revoked loop last saw (see `revoked`).
    pub revocations: revoked::Progress,
    /// Set once the step hook stopped this context, or its leadership term ended.
    pub halted: std::sync::atomic::AtomicBool,
    /// Turns of the CSR loop to work with the API server (`Options::concurrency`).
    pub csr_turns: Turns,
    /// Token Secret versions the CSR loop wrote (see `csr::OwnTokenWrites`).
    pub own_token_writes: csr::OwnTokenWrites,
    /// The Sites and the nodes' reports, as the node loop knows them (see `network`).
    pub network: super::network::Network,
}

impl Context {
    /// A context whose client points at a closed port: for unit tests of what a loop
    /// decides and counts, with no API server.
    #[cfg(test)]
    pub(super) fn offline() -> Self {
        crate::connect::install_crypto_provider();
        let config = kube::Config::new("https://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let rt = Runtime::new(client, Options::new("ns", "me"));
        Context::new(&rt, kube::runtime::reflector::store().0)
    }

    /// A fresh context for one leadership term over the given Flavor cache.
    pub(super) fn new(
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
            revocations: revoked::Progress::default(),
            halted: Default::default(),
            csr_turns: Turns::new(rt.opts.concurrency),
            own_token_writes: Default::default(),
            network: Default::default(),
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
