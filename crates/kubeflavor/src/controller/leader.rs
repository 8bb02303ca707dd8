//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! kube-rs has no leader election of its own, so this follows client-go's `leaderelection`
//! package: every candidate tries to acquire or renew the Lease every `retry_period` with
//! a `resourceVersion`-guarded PUT, so two candidates can never both win the same round
//! (the loser gets 409 Conflict). A Lease held by someone else is considered expired only
//! after it has been seen unchanged for `lease_duration` on the LOCAL clock, which makes the
//! decision independent of clock skew between replicas. A leader that cannot renew for
//! `renew_deadline` (shorter than `lease_duration`) steps down before anyone may take over.
//!
//! The Lease's reads and writes are the cluster crate's (`leases`); this module decides
//! which to make when.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kubeflavor_cluster::leases::{Holder, NamedLease};
use tokio::sync::watch;
use tokio::time::Instant;

/// Timing and identity of one candidate.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Unique per replica (the pod name plus a random suffix in a Deployment).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        LeaseConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "reading Lease {namespace}/{name} failed: {source} (check the controller's RBAC on leases)"
    )]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "writing Lease {namespace}/{name} failed: {source} (check the controller's RBAC on leases)"
    )]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "no answer about Lease {namespace}/{name} within {after:?} (is the API server reachable?)"
    )]
    Timeout {
        namespace: String,
        name: String,
        after: Duration,
    },
}

/// What a candidate should do with the Lease it just read: the pure part of one round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// No Lease yet: create it holding it.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Someone else held it and it expired, or it was released: take it over.
    TakeOver,
    /// Someone else holds a live Lease.
    Wait { holder: String },
}

/// Decides one round. `observed_unchanged_for` is how long (local clock) the Lease has been
/// seen with the same holder and renew time; `None` if it just changed or was just read.
pub fn lease_step(
    lease: Option<&LeaseSpec>,
    identity: &str,
    observed_unchanged_for: Duration,
) -> LeaseStep {
    let Some(spec) = lease else {
        return LeaseStep::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return LeaseStep::Renew;
    }
    if holder.is_empty() {
        return LeaseStep::TakeOver;
    }
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
    if observed_unchanged_for >= duration {
        LeaseStep::TakeOver
    } else {
        LeaseStep::Wait {
            holder: holder.to_string(),
        }
    }
}

/// One candidate. `run` drives it until shutdown and publishes leadership on a channel.
/// The holder and renew time of a Lease as last read.
type LeaseRecord = (Option<String>, Option<MicroTime>);

pub struct LeaderElector {
    lease: NamedLease,
    holder: Holder,
    cfg: LeaseConfig,
    /// The record last seen and when (local clock) it was first seen like that.
    observed: Option<(LeaseRecord, Instant)>,
}

impl LeaderElector {
    pub fn new(client: kube::Client, cfg: LeaseConfig) -> Self {
        let lease = NamedLease::new(client, &cfg.namespace, &cfg.name);
        let holder = Holder {
            identity: cfg.identity.clone(),
            lease_duration: cfg.lease_duration,
        };
        LeaderElector {
            lease,
            holder,
            cfg,
            observed: None,
        }
    }

    fn read_err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Read {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
            source,
        }
    }

    fn timeout_err(&self, after: Duration) -> LeaderError {
        LeaderError::Timeout {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
            after,
        }
    }

    fn write_err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Write {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
            source,
        }
    }

    /// One round: returns whether we hold the Lease afterwards. A 409 (another candidate
    /// wrote first) is a lost round, not an error.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let current = self.lease.get().await.map_err(|e| self.read_err(e))?;
        let unchanged_for = self.observe(current.as_ref());
        let step = lease_step(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.cfg.identity,
            unchanged_for,
        );
        tracing::debug!(identity = %self.cfg.identity, ?step, ?unchanged_for, "lease round");
        let result = match (step, current) {
            (LeaseStep::Wait { .. }, _) => return Ok(false),
            (LeaseStep::Create, _) | (_, None) => self.lease.create(&self.holder).await,
            (step, Some(lease)) => {
                let take_over = step == LeaseStep::TakeOver;
                self.lease.hold(lease, &self.holder, take_over).await
            }
        };
        match result {
            Ok(lease) => {
                let spec = lease.spec.unwrap_or_default();
                self.observed = Some(((spec.holder_identity, spec.renew_time), Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists() => Ok(false),
            Err(e) => Err(self.write_err(e)),
        }
    }

    /// How long (local clock) the Lease has been seen with the same holder and renew time;
    /// zero when it just changed or there is none.
    fn observe(&mut self, current: Option<&Lease>) -> Duration {
        let Some(lease) = current else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let spec = lease.spec.clone().unwrap_or_default();
        let key = (spec.holder_identity, spec.renew_time);
        match &self.observed {
            Some((seen, since)) if *seen == key => now.duration_since(*since),
            _ => {
                self.observed = Some((key, now));
                Duration::ZERO
            }
        }
    }

    /// Gives the Lease up so a standby takes over at its next round instead of waiting for
    /// expiry (client-go's ReleaseOnCancel). Only clears it if we still hold it.
    pub async fn release(&mut self) -> Result<(), LeaderError> {
        let Some(lease) = self.lease.get().await.map_err(|e| self.read_err(e))? else {
            return Ok(());
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        match self.lease.release(lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(()),
            Err(e) => Err(self.write_err(e)),
        }
    }

    /// Runs rounds until `shutdown` resolves, publishing `true` while leading. A leader
    /// whose renewals keep failing steps down once `renew_deadline` has passed since its
    /// last successful renewal. On shutdown a leader releases the Lease.
    pub async fn run(
        mut self,
        leading: watch::Sender<bool>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut last_renewal: Option<Instant> = None;
        loop {
            // A round gets no more time than is left of the renew deadline: a request that
            // hangs (a partition: sent, never answered) must not keep a leader leading past
            // it. Renewal is counted from the moment the round started, before the Lease
            // could have been written, never later than the others count it.
            let started = Instant::now();
            let budget = match last_renewal {
                Some(t) if *leading.borrow() => self.cfg.renew_deadline.saturating_sub(t.elapsed()),
                _ => self.cfg.renew_deadline,
            };
            let round = tokio::time::timeout(budget, self.try_acquire_or_renew())
                .await
                .unwrap_or_else(|_| Err(self.timeout_err(budget)));
            match round {
                Ok(true) => {
                    last_renewal = Some(started);
                    if !*leading.borrow() {
                        tracing::info!(identity = %self.cfg.identity, lease = %self.cfg.name, "became leader");
                        leading.send_replace(true);
                    }
                }
                Ok(false) => {
                    last_renewal = None;
                    if *leading.borrow() {
                        tracing::warn!(identity = %self.cfg.identity, "lost the lease to another replica");
                        leading.send_replace(false);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election round failed");
                    let expired =
                        last_renewal.is_none_or(|t| t.elapsed() >= self.cfg.renew_deadline);
                    if *leading.borrow() && expired {
                        tracing::warn!(identity = %self.cfg.identity, "could not renew the lease in time: stepping down");
                        leading.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
            }
        }
        if *leading.borrow() {
            leading.send_replace(false);
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "releasing the lease failed; a standby takes over after it expires");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(secs),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn missing_lease_is_created() {
        assert_eq!(lease_step(None, "a", Duration::ZERO), LeaseStep::Create);
    }

    #[test]
    fn own_lease_is_renewed_even_if_old() {
        let s = spec(Some("a"), 15);
        assert_eq!(
            lease_step(Some(&s), "a", Duration::from_secs(100)),
            LeaseStep::Renew
        );
    }

    #[test]
    fn live_lease_of_another_is_respected() {
        let s = spec(Some("b"), 15);
        assert_eq!(
            lease_step(Some(&s), "a", Duration::from_secs(14)),
            LeaseStep::Wait { holder: "b".into() }
        );
    }

    #[test]
    fn lease_unchanged_for_its_duration_is_taken_over() {
        let s = spec(Some("b"), 15);
        assert_eq!(
            lease_step(Some(&s), "a", Duration::from_secs(15)),
            LeaseStep::TakeOver
        );
    }

    #[test]
    fn released_lease_is_taken_at_once() {
        let s = spec(None, 1);
        assert_eq!(
            lease_step(Some(&s), "a", Duration::ZERO),
            LeaseStep::TakeOver
        );
        let s = spec(Some(""), 15);
        assert_eq!(
            lease_step(Some(&s), "a", Duration::ZERO),
            LeaseStep::TakeOver
        );
    }
}
