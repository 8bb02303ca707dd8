//! The authorization webhook's own metrics: its answers by kind, how long each took, and
//! the connections it closed unserved (`server="authz"`, see `crate::dropped_connections`).
//! Every replica answers, leader or not; the controller's runtime registers the families on
//! its /metrics (`controller::metrics::Metrics::with_families`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::dropped_connections::DroppedConnections;

/// Buckets from 20 µs to about 0.3 s: the webhook answers from memory.
fn answer_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00002, 2.0, 15))
}

/// Every answer kind of the authorization webhook (`AnswerLabels::answer`).
pub const AUTHZ_ANSWERS: [&str; 7] = [
    "denied_revoked",
    "no_opinion",
    "bad_request",
    "not_found",
    "not_synced",
    "stale",
    "too_large",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabels {
    /// The authorization webhook's answer: denied_revoked, no_opinion, or an error kind
    /// (bad_request, not_found, not_synced, stale, too_large).
    pub answer: &'static str,
}

/// The webhook's families; clones share them.
#[derive(Clone)]
pub struct AuthzMetrics {
    answers: Family<AnswerLabels, Counter>,
    answer_duration: Family<AnswerLabels, Histogram, fn() -> Histogram>,
    /// Connections closed before they were served (a flood shows here).
    pub connections: DroppedConnections,
}

impl Default for AuthzMetrics {
    fn default() -> Self {
        AuthzMetrics {
            answers: Family::default(),
            answer_duration: Family::new_with_constructor(answer_histogram as fn() -> Histogram),
            connections: DroppedConnections::new("authz"),
        }
    }
}

impl std::fmt::Debug for AuthzMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthzMetrics").finish_non_exhaustive()
    }
}

impl AuthzMetrics {
    /// Registers the families in `r`, every answer kind at 0 so a dashboard shows none
    /// rather than no data.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "authz_answers",
            "Answers of the authorization webhook by kind",
            self.answers.clone(),
        );
        r.register(
            "authz_answer_duration_seconds",
            "Time from a review's headers to its answer, by answer kind",
            self.answer_duration.clone(),
        );
        for answer in AUTHZ_ANSWERS {
            let _ = self.answers.get_or_create(&AnswerLabels { answer });
            let _ = self.answer_duration.get_or_create(&AnswerLabels { answer });
        }
        self.connections.register(r);
    }

    /// One answer of the authorization webhook and how long it took.
    pub fn answer(&self, answer: &'static str, seconds: f64) {
        let labels = AnswerLabels { answer };
        self.answers.get_or_create(&labels).inc();
        self.answer_duration.get_or_create(&labels).observe(seconds);
    }

    /// The families alone, in the text format, as /metrics shows them (for a webhook that
    /// runs without the controller's registry: tests and benchmarks).
    pub fn render(&self) -> String {
        let mut registry = Registry::with_prefix("kubeflavor");
        self.register(&mut registry);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_webhook_answer_is_exposed_from_the_start() {
        let text = AuthzMetrics::default().render();
        for answer in AUTHZ_ANSWERS {
            let line = format!("kubeflavor_authz_answers_total{{answer=\"{answer}\"}} 0");
            assert!(text.contains(&line), "{line}");
        }
    }
}
