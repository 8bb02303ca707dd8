//! Prometheus metrics of the controller (prometheus-client, OpenMetrics text on /metrics).
//!
//! The exact denial cause is a label here on purpose: /metrics is an admin-only surface,
//! unlike the CSR conditions a bootstrap identity can read (P1, hidden flavor).

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use kubeflavor_core::approval::client::DenyCause;
use kubeflavor_core::approval::serving::ServingDenyCause;
use kubeflavor_core::node::revocation_list::Step;

/// Buckets from 1 ms to about 16 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// approved, denied or ignored.
    pub outcome: String,
    /// The DenyCause's metric label, the ignore reason, or `ok`.
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Which loop failed: csr, node.
    pub controller: String,
    /// The error's `metric_label()`: the stage that failed.
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// Which loop: csr, node.
    pub controller: String,
    /// queue (waiting for a turn), read (the API reads of one reconcile), write (one API
    /// write).
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// A revocation step: list, binding, taint, pods, token.
    pub step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// A Flavor's name: bounded by the Flavor objects an admin made (a binding keeps the
/// name of a Flavor deleted since; nothing a node or a portal sends becomes one).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlavorLabels {
    flavor: String,
}

/// An observed site: a Site object's name, or `unknown` (nothing a node sends becomes one).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteLabels {
    site: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlavorInfoLabels {
    flavor: String,
    /// The Flavor's `spec.trustLevel` (0 to 100), or `none`.
    trust_level: String,
}

/// What the leader knows of the fleet, read when /metrics is: the bindings per flavor, the
/// Flavors' trust levels, Nodes left without their flavor, and the revocations. Only a
/// leader has one (the node loop's index and the revoked loop's view live for a leadership
/// term), so a standby shows none of these.
pub trait FleetCensus: Send + Sync {
    fn bound_per_flavor(&self) -> Vec<(String, i64)>;
    fn revoked(&self) -> usize;
    /// Names on the revocation list.
    fn listed(&self) -> usize;
    /// Names listed or with a revoked binding whose revocation this term has not finished.
    fn unfinished_revocations(&self) -> usize;
    /// The Flavors as watched, with their trust levels.
    fn trust_levels(&self) -> Vec<(String, Option<u8>)>;
    fn oldest_unflavored(&self) -> Option<Duration>;
    /// Nodes per observed site (their NodeReport's, as the node loop last read it).
    fn nodes_per_site(&self) -> Vec<(String, i64)>;
    /// Nodes whose reported claims contradict what was observed.
    fn contradicting_claims(&self) -> usize;
}

/// The census of the current leadership term, if this replica leads.
type CensusSlot = Arc<Mutex<Option<Weak<dyn FleetCensus>>>>;

/// Encodes the census on each scrape (a prometheus-client collector).
struct CensusCollector(CensusSlot);

impl std::fmt::Debug for CensusCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CensusCollector").finish_non_exhaustive()
    }
}

impl Collector for CensusCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let census = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(Weak::upgrade);
        let Some(census) = census else {
            return Ok(());
        };
        let bound = Family::<FlavorLabels, Gauge>::default();
        for (flavor, n) in census.bound_per_flavor() {
            bound.get_or_create(&FlavorLabels { flavor }).set(n);
        }
        bound.encode(encoder.encode_descriptor(
            "bound_nodes",
            "FlavorBindings per flavor (revoked ones included), as the leader's node loop sees them",
            None,
            bound.metric_type(),
        )?)?;
        let info = Family::<FlavorInfoLabels, Gauge>::default();
        for (flavor, level) in census.trust_levels() {
            let trust_level = level.map_or_else(|| "none".to_string(), |l| l.to_string());
            info.get_or_create(&FlavorInfoLabels {
                flavor,
                trust_level,
            })
            .set(1);
        }
        info.encode(encoder.encode_descriptor(
            "flavor_info",
            "1 for each Flavor, labelled with its trust level (join on flavor to count the fleet by trust level)",
            None,
            info.metric_type(),
        )?)?;
        let revoked = ConstGauge::new(i64::try_from(census.revoked()).unwrap_or(i64::MAX));
        revoked.encode(encoder.encode_descriptor(
            "revoked_bindings",
            "FlavorBindings whose Revoked condition is True",
            None,
            revoked.metric_type(),
        )?)?;
        let listed = ConstGauge::new(i64::try_from(census.listed()).unwrap_or(i64::MAX));
        listed.encode(encoder.encode_descriptor(
            "revocation_list_names",
            "Names on the revocation list kube-system/kubeflavor-revoked-nodes, as the leader's revoked loop sees it",
            None,
            listed.metric_type(),
        )?)?;
        let unfinished =
            ConstGauge::new(i64::try_from(census.unfinished_revocations()).unwrap_or(i64::MAX));
        unfinished.encode(encoder.encode_descriptor(
            "unfinished_revocations",
            "Names listed or with a revoked binding whose revocation the leader has not finished this term: a step failed (kubeflavor_revocation_step_failures_total says which), retried on the next change of a binding or the list",
            None,
            unfinished.metric_type(),
        )?)?;
        let sites = Family::<SiteLabels, Gauge>::default();
        for (site, n) in census.nodes_per_site() {
            sites.get_or_create(&SiteLabels { site }).set(n);
        }
        sites.encode(encoder.encode_descriptor(
            "nodes_by_observed_site",
            "Nodes per site they were observed on (the address of their connection to the join-token API, mapped by the Sites; unknown: no Site holds it)",
            None,
            sites.metric_type(),
        )?)?;
        let contradicting =
            ConstGauge::new(i64::try_from(census.contradicting_claims()).unwrap_or(i64::MAX));
        contradicting.encode(encoder.encode_descriptor(
            "contradicting_network_claims",
            "Nodes whose NodeReport claims an address on another site than the one they were observed on (their claims are not copied to the Node)",
            None,
            contradicting.metric_type(),
        )?)?;
        let oldest = ConstGauge::new(census.oldest_unflavored().map_or(0.0, |d| d.as_secs_f64()));
        oldest.encode(encoder.encode_descriptor(
            "oldest_unflavored_node_age_seconds",
            "How long the bound, registered, unrevoked Node that has gone longest without its flavor's labels and taints has been so (0: every such Node carries its flavor)",
            None,
            oldest.metric_type(),
        )?)?;
        Ok(())
    }
}

/// All metrics, cheap to clone (every field is an Arc inside).
#[derive(Clone)]
pub struct Metrics {
    pub decisions: Family<DecisionLabels, Counter>,
    pub serving_decisions: Family<DecisionLabels, Counter>,
    pub decision_duration: Histogram,
    pub flavoring_duration: Histogram,
    pub flavored_nodes: Gauge<i64, AtomicI64>,
    pub errors: Family<ErrorLabels, Counter>,
    pub conflicts: Family<ErrorLabels, Counter>,
    pub tokens_deleted: Counter,
    pub contradicted_claims: Counter,
    pub node_patches: Counter,
    pub revoked_pods_deleted: Counter,
    pub revocation_failures: Family<StepLabels, Counter>,
    pub leader: Gauge<i64, AtomicI64>,
    pub writes: Counter,
    pub last_write: Gauge<f64, AtomicU64>,
    pub competing_approvals: Family<KindLabels, Gauge<i64, AtomicI64>>,
    pub unverified_policy_enforced: Gauge<i64, AtomicI64>,
    pub stages: Family<StageLabels, Histogram, fn() -> Histogram>,
    census: CensusSlot,
    registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl kubeflavor_cluster::ops::http::Exposition for Metrics {
    fn render(&self) -> String {
        Metrics::render(self)
    }
}

impl Metrics {
    /// Every metric of the controller, registered under the `kubeflavor_` prefix in the
    /// order /metrics lists them.
    pub fn new() -> Self {
        Self::with_families(|_| {})
    }

    /// The controller's metrics and, after them, the families another feature served on
    /// the same /metrics registers (the authorization webhook's).
    pub fn with_families(register: impl FnOnce(&mut Registry)) -> Self {
        let metrics = Metrics {
            decisions: Family::default(),
            serving_decisions: Family::default(),
            decision_duration: duration_histogram(),
            flavoring_duration: duration_histogram(),
            flavored_nodes: Gauge::default(),
            errors: Family::default(),
            conflicts: Family::default(),
            tokens_deleted: Counter::default(),
            contradicted_claims: Counter::default(),
            node_patches: Counter::default(),
            revoked_pods_deleted: Counter::default(),
            revocation_failures: Family::default(),
            leader: Gauge::default(),
            writes: Counter::default(),
            last_write: Gauge::default(),
            competing_approvals: Family::default(),
            unverified_policy_enforced: Gauge::default(),
            stages: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            census: Arc::default(),
            registry: Arc::default(),
        };
        let mut registry = Registry::with_prefix("kubeflavor");
        metrics.register_outcomes(&mut registry);
        metrics.register_failures(&mut registry);
        metrics.register_cleanups(&mut registry);
        metrics.register_revocations(&mut registry);
        metrics.register_leadership(&mut registry);
        metrics.register_diagnostics(&mut registry);
        register(&mut registry);
        registry.register_collector(Box::new(CensusCollector(metrics.census.clone())));
        metrics.start_at_zero();
        Metrics {
            registry: Arc::new(registry),
            ..metrics
        }
    }

    /// Every series an alert fires on at its first increase exists from the start, at 0:
    /// Prometheus' `increase()` sees no increase in a series whose first sample is
    /// already 1, so a first takeover attempt would otherwise go unnoticed. The errors start
    /// at 0 too, so a dashboard shows none rather than no data.
    fn start_at_zero(&self) {
        for cause in DenyCause::ALL {
            let _ = self.decisions.get_or_create(&DecisionLabels {
                outcome: "denied".into(),
                cause: cause.as_str().into(),
            });
        }
        for cause in ServingDenyCause::ALL {
            let _ = self.serving_decisions.get_or_create(&DecisionLabels {
                outcome: "denied".into(),
                cause: cause.as_str().into(),
            });
        }
        for controller in ["csr", "node"] {
            for stage in super::Error::STAGES {
                let labels = ErrorLabels {
                    controller: controller.into(),
                    error: stage.into(),
                };
                let _ = self.errors.get_or_create(&labels);
                let _ = self.conflicts.get_or_create(&labels);
            }
        }
        for step in Step::ALL {
            let _ = self.revocation_failures.get_or_create(&StepLabels {
                step: step.name().into(),
            });
        }
    }

    /// What the controller is for: CSR decisions, flavored Nodes, and how long each takes.
    fn register_outcomes(&self, r: &mut Registry) {
        r.register(
            "csr_decisions",
            "CSR decisions by outcome and exact cause",
            self.decisions.clone(),
        );
        r.register(
            "serving_csr_decisions",
            "Kubelet serving CSR decisions (--approve-serving) by outcome and exact cause",
            self.serving_decisions.clone(),
        );
        r.register(
            "csr_decision_duration_seconds",
            "Time to decide and apply one CSR decision (reads and writes included)",
            self.decision_duration.clone(),
        );
        r.register(
            "node_flavoring_duration_seconds",
            "Time to bring one Node to its binding's desired labels and taints",
            self.flavoring_duration.clone(),
        );
        r.register(
            "flavored_nodes",
            "Nodes whose labels and taints match their binding",
            self.flavored_nodes.clone(),
        );
    }

    /// Reconciles that failed, and writes that lost a race and were decided again.
    fn register_failures(&self, r: &mut Registry) {
        r.register(
            "reconcile_errors",
            "Reconcile failures by controller and stage",
            self.errors.clone(),
        );
        r.register(
            "reconcile_conflicts",
            "Writes that lost an optimistic-concurrency race (409) and were decided again at once, by controller and stage: normal when others write the same objects (kube-controller-manager edits new Nodes), not an error",
            self.conflicts.clone(),
        );
    }

    /// Writes that undo what a denial or drift left behind: deleted tokens, patched Nodes.
    fn register_cleanups(&self, r: &mut Registry) {
        r.register(
            "network_claims_contradicted",
            "Times a node's NodeReport came to claim an address on another site than the one it was observed on (an Event ClaimContradicted on the Node says which)",
            self.contradicted_claims.clone(),
        );
        r.register(
            "tokens_deleted",
            "Token Secrets deleted after a denial so the kubelet stops retrying",
            self.tokens_deleted.clone(),
        );
        r.register(
            "node_patches",
            "Node patches written to restore or apply a flavor",
            self.node_patches.clone(),
        );
    }

    /// What the leader's revoked loop does beyond the revocations' own runs: the steps that
    /// failed, and the pods it deleted off revoked nodes.
    fn register_revocations(&self, r: &mut Registry) {
        r.register(
            "revocation_step_failures",
            "Revocation steps (list, binding, taint, pods, token) the leader's revoked loop ran and failed, by step; retried on the next change of a binding or the list",
            self.revocation_failures.clone(),
        );
        r.register(
            "revoked_node_pods_deleted",
            "Pods the leader's revoked loop deleted because it saw them bound to a revoked node (admission refuses new ones; the pods a revocation's own pods step deletes are not counted)",
            self.revoked_pods_deleted.clone(),
        );
    }

    /// The leader Lease, and the writes only its holder may start (a check that no two
    /// replicas wrote in the same term).
    fn register_leadership(&self, r: &mut Registry) {
        r.register(
            "leader",
            "1 while this replica holds the leader Lease",
            self.leader.clone(),
        );
        r.register(
            "api_writes",
            "API writes this replica started, each one allowed only inside a leadership term",
            self.writes.clone(),
        );
        r.register(
            "last_api_write_timestamp_seconds",
            "Unix time at which this replica last started an API write (0: never); a replica whose term ended stays below the next holder's acquire time",
            self.last_write.clone(),
        );
    }

    /// Who else approves kubelet CSRs, and where reconciles spend their time.
    fn register_diagnostics(&self, r: &mut Registry) {
        r.register(
            "competing_approvals",
            "1 while RBAC lets kube-controller-manager auto-approve this kind of kubelet client CSR before kubeflavor decides (kind: kubeflavor_tokens, other_tokens, renewals, other_requesters), read at start and after every RBAC change",
            self.competing_approvals.clone(),
        );
        r.register(
            "unverified_policy_enforced",
            "1 when the API server taints every kubelet-created Node kubeflavor.io/unverified:NoSchedule (MutatingAdmissionPolicy admissionregistration.k8s.io/v1 served, kubeflavor's policy and binding installed), 0 when not or unknown; read at start",
            self.unverified_policy_enforced.clone(),
        );
        r.register(
            "stage_duration_seconds",
            "Where reconciles spend their time, by controller and stage: waiting for a turn (queue), the API reads of one reconcile (read), one API write (write)",
            self.stages.clone(),
        );
    }

    pub fn decision(&self, outcome: &str, cause: &str) {
        self.decisions
            .get_or_create(&DecisionLabels {
                outcome: outcome.to_string(),
                cause: cause.to_string(),
            })
            .inc();
    }

    pub fn serving_decision(&self, outcome: &str, cause: &str) {
        self.serving_decisions
            .get_or_create(&DecisionLabels {
                outcome: outcome.to_string(),
                cause: cause.to_string(),
            })
            .inc();
    }

    pub fn error(&self, controller: &str, error: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_string(),
                error: error.to_string(),
            })
            .inc();
    }

    /// A revocation step the revoked loop ran failed.
    pub fn revocation_failed(&self, step: Step) {
        self.revocation_failures
            .get_or_create(&StepLabels {
                step: step.name().into(),
            })
            .inc();
    }

    pub fn competing_approval(&self, kind: &str, present: bool) {
        self.competing_approvals
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .set(i64::from(present));
    }

    /// Counts one API write about to be sent, and when.
    pub fn write_started(&self) {
        self.writes.inc();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.last_write.set(now.as_secs_f64());
    }

    pub fn conflict(&self, controller: &str, stage: &str) {
        self.conflicts
            .get_or_create(&ErrorLabels {
                controller: controller.to_string(),
                error: stage.to_string(),
            })
            .inc();
    }

    /// Records `seconds` spent in `stage` of `controller`'s reconciles.
    pub fn stage(&self, controller: &str, stage: &str, seconds: f64) {
        self.stages
            .get_or_create(&StageLabels {
                controller: controller.to_string(),
                stage: stage.to_string(),
            })
            .observe(seconds);
    }

    /// The census /metrics shows from now on (`None`: none, at the end of a leadership
    /// term). Held weakly: the term's context owns it.
    pub fn set_census(&self, census: Option<Weak<dyn FleetCensus>>) {
        *self.census.lock().unwrap_or_else(|e| e.into_inner()) = census;
    }

    /// Records the elapsed time into `histogram` when dropped (controller-rs' measurer).
    pub fn measure(histogram: &Histogram) -> Measurer {
        Measurer {
            start: Instant::now(),
            histogram: histogram.clone(),
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

pub struct Measurer {
    start: Instant,
    histogram: Histogram,
}

impl Drop for Measurer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_exposed_with_outcome_and_cause() {
        let m = Metrics::new();
        m.decision("denied", "token_exhausted");
        m.decision("denied", "token_exhausted");
        m.decision("approved", "ok");
        let text = m.render();
        assert!(
            text.contains(
                "kubeflavor_csr_decisions_total{outcome=\"denied\",cause=\"token_exhausted\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("kubeflavor_csr_decisions_total{outcome=\"approved\",cause=\"ok\"} 1")
        );
    }

    struct Census;

    impl FleetCensus for Census {
        fn bound_per_flavor(&self) -> Vec<(String, i64)> {
            vec![("sweet".into(), 3)]
        }
        fn revoked(&self) -> usize {
            1
        }
        fn listed(&self) -> usize {
            2
        }
        fn unfinished_revocations(&self) -> usize {
            1
        }
        fn trust_levels(&self) -> Vec<(String, Option<u8>)> {
            vec![("sweet".into(), Some(80)), ("sour".into(), None)]
        }
        fn oldest_unflavored(&self) -> Option<Duration> {
            Some(Duration::from_secs(7))
        }
        fn nodes_per_site(&self) -> Vec<(String, i64)> {
            vec![("lyon".into(), 4), ("unknown".into(), 1)]
        }
        fn contradicting_claims(&self) -> usize {
            1
        }
    }

    #[test]
    fn the_census_shows_while_a_term_holds_it_and_not_after() {
        let m = Metrics::new();
        assert!(!m.render().contains("kubeflavor_bound_nodes"), "a standby");
        let census: Arc<dyn FleetCensus> = Arc::new(Census);
        m.set_census(Some(Arc::downgrade(&census)));
        let text = m.render();
        for line in [
            "kubeflavor_bound_nodes{flavor=\"sweet\"} 3",
            "kubeflavor_flavor_info{flavor=\"sweet\",trust_level=\"80\"} 1",
            "kubeflavor_flavor_info{flavor=\"sour\",trust_level=\"none\"} 1",
            "kubeflavor_revoked_bindings 1",
            "kubeflavor_revocation_list_names 2",
            "kubeflavor_unfinished_revocations 1",
            "kubeflavor_oldest_unflavored_node_age_seconds 7.0",
            "kubeflavor_nodes_by_observed_site{site=\"lyon\"} 4",
            "kubeflavor_nodes_by_observed_site{site=\"unknown\"} 1",
            "kubeflavor_contradicting_network_claims 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        drop(census);
        assert!(
            !m.render().contains("kubeflavor_bound_nodes"),
            "the term's context is gone"
        );
    }

    #[test]
    fn every_denial_cause_is_exposed_from_the_start() {
        let text = Metrics::new().render();
        for cause in DenyCause::ALL {
            let line = format!(
                "kubeflavor_csr_decisions_total{{outcome=\"denied\",cause=\"{}\"}} 0",
                cause.as_str()
            );
            assert!(text.contains(&line), "{line}");
        }
        assert!(text.contains(
            "kubeflavor_serving_csr_decisions_total{outcome=\"denied\",cause=\"address_not_allowed\"} 0"
        ));
    }

    #[test]
    fn revocation_failures_are_counted_by_step_every_step_from_zero() {
        let m = Metrics::new();
        m.revocation_failed(Step::Pods);
        m.revoked_pods_deleted.inc();
        let text = m.render();
        for line in [
            "kubeflavor_revocation_step_failures_total{step=\"pods\"} 1",
            "kubeflavor_revocation_step_failures_total{step=\"list\"} 0",
            "kubeflavor_revocation_step_failures_total{step=\"token\"} 0",
            "kubeflavor_revoked_node_pods_deleted_total 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn measurer_observes_on_drop() {
        let m = Metrics::new();
        drop(Metrics::measure(&m.decision_duration));
        assert!(
            m.render()
                .contains("kubeflavor_csr_decision_duration_seconds_count 1")
        );
    }
}
