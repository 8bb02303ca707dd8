//! Fault injection for tests: make the next N matching requests fail with a given status or
//! wait a given time, and cut every open watch stream.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::errors::{conflict_stale_plain, internal_error, too_many_requests};
use crate::types::ApiError;

#[derive(Clone, Debug)]
enum Action {
    Fail(u16),
    Delay(Duration),
}

#[derive(Clone, Debug)]
struct Rule {
    remaining: usize,
    verb: String,
    resource: String,
    action: Action,
}

impl Rule {
    fn matches(&self, verb: &str, resource: &str, subresource: &str) -> bool {
        let verb_ok = self.verb == "*" || self.verb == verb;
        let resource_ok = self.resource == "*"
            || self.resource == resource
            || (!subresource.is_empty() && self.resource == format!("{resource}/{subresource}"));
        verb_ok && resource_ok
    }
}

/// What the server does with one request because of an injected fault.
#[derive(Debug, Default)]
pub struct Injected {
    pub delay: Option<Duration>,
    pub error: Option<ApiError>,
}

/// The fault hooks of one cluster (`TestCluster::faults()`).
#[derive(Debug)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    cut: watch::Sender<u64>,
    /// How many requests an injected fault has hit so far, for tests to wait on.
    fired: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            cut: watch::channel(0).0,
            fired: watch::channel(0).0,
        }
    }
}

impl Faults {
    /// The next `n` requests with this verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`, or `*`) on this resource (plural such as
    /// `secrets`, `resource/subresource` such as `certificatesigningrequests/approval`, or
    /// `*`) fail with `status`: 500 (InternalError), 409 (Conflict) or 429
    /// (TooManyRequests, with `Retry-After: 1`); any other code gets a Status with that code.
    pub fn fail_next(&self, n: usize, verb: &str, resource: &str, status: u16) {
        self.push(n, verb, resource, Action::Fail(status));
    }

    /// The next `n` matching requests wait `delay` before they are served.
    pub fn delay_next(&self, n: usize, verb: &str, resource: &str, delay: Duration) {
        self.push(n, verb, resource, Action::Delay(delay));
    }

    /// End every watch stream open right now (the clients see the response end cleanly,
    /// as when an API server restarts or a load balancer drops the connection).
    pub fn cut_watches(&self) {
        self.cut.send_modify(|generation| *generation += 1);
    }

    /// Wait until injected faults have hit at least `n` requests in all (a delayed request
    /// counts as soon as it reaches the server, before its delay). Tests wait on this
    /// instead of polling.
    pub async fn fired(&self, n: u64) {
        let mut rx = self.fired.subscribe();
        // The sender lives as long as `self`, so this cannot fail while we borrow it.
        let _ = rx.wait_for(|count| *count >= n).await;
    }

    /// Forget every pending rule.
    pub fn clear(&self) {
        self.lock().clear();
    }

    pub(crate) fn cut_signal(&self) -> watch::Receiver<u64> {
        self.cut.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, n: usize, verb: &str, resource: &str, action: Action) {
        if n == 0 {
            return;
        }
        self.lock().push(Rule {
            remaining: n,
            verb: verb.into(),
            resource: resource.into(),
            action,
        });
    }

    /// Consume the rules matching one request: every matching delay adds up, the first
    /// matching failure wins.
    pub(crate) fn take(
        &self,
        verb: &str,
        resource: &str,
        subresource: &str,
        name: &str,
    ) -> Injected {
        let mut out = Injected::default();
        let mut rules = self.lock();
        for rule in rules
            .iter_mut()
            .filter(|r| r.matches(verb, resource, subresource))
        {
            match rule.action {
                Action::Delay(d) => {
                    rule.remaining -= 1;
                    out.delay = Some(out.delay.unwrap_or_default() + d);
                }
                Action::Fail(code) if out.error.is_none() => {
                    rule.remaining -= 1;
                    out.error = Some(injected_error(code, resource, name));
                }
                Action::Fail(_) => {}
            }
        }
        rules.retain(|r| r.remaining > 0);
        drop(rules);
        if out.delay.is_some() || out.error.is_some() {
            self.fired.send_modify(|count| *count += 1);
        }
        out
    }
}

fn injected_error(code: u16, resource: &str, name: &str) -> ApiError {
    match code {
        500 => internal_error("injected fault"),
        409 => conflict_stale_plain(resource, name),
        429 => too_many_requests(
            "injected fault: too many requests, please try again later",
            1,
        ),
        other => ApiError::new(other, "", format!("injected fault: status {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_fires_exactly_n_times_and_only_when_it_matches() {
        let faults = Faults::default();
        faults.fail_next(2, "create", "secrets", 500);
        assert!(faults.take("create", "configmaps", "", "x").error.is_none());
        assert_eq!(
            faults
                .take("create", "secrets", "", "x")
                .error
                .unwrap()
                .code,
            500
        );
        assert_eq!(
            faults
                .take("create", "secrets", "", "x")
                .error
                .unwrap()
                .code,
            500
        );
        assert!(faults.take("create", "secrets", "", "x").error.is_none());
    }

    #[test]
    fn subresource_rules_and_retry_after() {
        let faults = Faults::default();
        faults.fail_next(1, "update", "certificatesigningrequests/approval", 429);
        assert!(
            faults
                .take("update", "certificatesigningrequests", "", "c")
                .error
                .is_none()
        );
        let err = faults
            .take("update", "certificatesigningrequests", "approval", "c")
            .error
            .unwrap();
        assert_eq!(err.code, 429);
        assert!(
            err.headers
                .iter()
                .any(|(k, v)| k == "Retry-After" && v == "1")
        );
    }
}
