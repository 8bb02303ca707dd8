//! How current a replica's index is known to be (`kubeflavor_core::node::index_freshness`).
//!
//! The clock moves only while the three watches (FlavorBindings, Nodes, the revocation
//! list) have listed since their last failure and the
//! API server answers a cheap probe (GET /version, every second): a watch that fails, or a
//! probe that fails, stops it until the watches are started again and have listed
//! everything anew. A watch resumed after a silent partition would otherwise be believed
//! current while it delivers nothing. What this cannot see: one watch stream that stalls
//! while the probe succeeds raises no error; kube-runtime's watcher ends it once it has
//! been silent for its timeout (290 s, plus 5 s) and watches again from where it was, which
//! bounds that case (README, "A stale replica does not answer").

use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

/// How often the API server is probed, and how long a probe may take.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Clock {
    /// Each watch (bindings, nodes, the revocation list) has listed since it last started.
    listed: [bool; 3],
    confirmed: Option<Instant>,
}

/// The last moment the index was confirmed current.
#[derive(Debug, Default)]
pub struct Freshness(Mutex<Clock>);

/// One of the three marks of a cut-off name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// FlavorBindings with Revoked=True.
    Binding,
    /// Nodes tainted `kubeflavor.io/revoked`.
    Node,
    /// Names in the revocation list.
    Listed,
}

fn slot(mark: Mark) -> usize {
    match mark {
        Mark::Binding => 0,
        Mark::Node => 1,
        Mark::Listed => 2,
    }
}

impl Freshness {
    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The watches are (re)starting: nothing confirms the index until all have listed.
    pub fn watches_down(&self) {
        self.clock().listed = [false; 3];
    }

    /// The watch of `mark` finished listing at `at`; once all have, the index is current.
    pub fn listed(&self, mark: Mark, at: Instant) {
        let mut clock = self.clock();
        clock.listed[slot(mark)] = true;
        if clock.listed == [true; 3] {
            clock.confirmed = Some(at);
        }
    }

    /// The API server answered a probe sent at `at`: current then, if every watch is up.
    pub fn confirm(&self, at: Instant) {
        let mut clock = self.clock();
        if clock.listed == [true; 3] {
            clock.confirmed = clock.confirmed.max(Some(at));
        }
    }

    /// How long ago the index was last confirmed current (`None`: never).
    pub fn age(&self, now: Instant) -> Option<Duration> {
        self.clock()
            .confirmed
            .map(|at| now.saturating_duration_since(at))
    }
}

/// Probes the API server every [`PROBE_EVERY`] and confirms `freshness` after each answer;
/// returns why, at the first probe that fails.
pub async fn probe(client: &Client, freshness: &Freshness) -> String {
    let mut every = tokio::time::interval(PROBE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let sent = Instant::now();
        match tokio::time::timeout(PROBE_EVERY, client.apiserver_version()).await {
            Ok(Ok(_)) => freshness.confirm(sent),
            Ok(Err(e)) => return format!("the API server did not answer a probe: {e}"),
            Err(_) => {
                return format!("the API server did not answer a probe within {PROBE_EVERY:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_only_while_every_watch_has_listed() {
        let f = Freshness::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(f.age(at(0)), None, "never listed: never current");
        f.listed(Mark::Binding, at(0));
        f.listed(Mark::Listed, at(0));
        f.confirm(at(1));
        assert_eq!(f.age(at(1)), None, "two watches of three confirm nothing");
        f.listed(Mark::Node, at(2));
        assert_eq!(f.age(at(3)), Some(Duration::from_secs(1)));
        f.confirm(at(4));
        assert_eq!(f.age(at(5)), Some(Duration::from_secs(1)));
        // A watch fails: probes that succeed no longer move the clock; it ages.
        f.watches_down();
        f.confirm(at(6));
        f.confirm(at(9));
        assert_eq!(f.age(at(10)), Some(Duration::from_secs(6)));
        // All list again: current from then.
        f.listed(Mark::Node, at(11));
        f.listed(Mark::Listed, at(11));
        f.listed(Mark::Binding, at(12));
        assert_eq!(f.age(at(12)), Some(Duration::ZERO));
    }

    #[test]
    fn a_late_probe_answer_never_moves_the_clock_back() {
        let f = Freshness::default();
        let t0 = Instant::now();
        f.listed(Mark::Binding, t0);
        f.listed(Mark::Listed, t0);
        f.listed(Mark::Node, t0 + Duration::from_secs(5));
        f.confirm(t0 + Duration::from_secs(4));
        assert_eq!(f.age(t0 + Duration::from_secs(5)), Some(Duration::ZERO));
    }
}
