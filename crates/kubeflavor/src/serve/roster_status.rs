//! The Roster's status, written by the join-token API: per rule, how many tokens it granted
//! and when last; the rules' count and the last grant overall. Grants are counted in
//! memory and added to the stored counts at most once per [`WRITE_EVERY`]: a read and a
//! write carrying its resourceVersion, so replicas add up instead of overwriting one
//! another, and a write refused as stale is tried again with the counts kept.
//!
//! Only the Roster's own readers (admins) see it; a node administrator never does.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kubeflavor_cluster::crd::roster::{Roster, RosterStatus, RuleMatches};

use crate::connect::Cluster;

/// How often the counts kept are written.
pub const WRITE_EVERY: Duration = Duration::from_secs(5);

/// Grants not yet written: per rule, how many and the latest.
#[derive(Debug, Default)]
pub struct Pending {
    grants: Mutex<BTreeMap<String, (i64, Timestamp)>>,
}

impl Pending {
    /// One token granted by `rule` now.
    pub fn granted(&self, rule: &str) {
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        let entry = grants
            .entry(rule.to_string())
            .or_insert((0, Timestamp::UNIX_EPOCH));
        entry.0 += 1;
        entry.1 = Timestamp::now();
    }

    fn take(&self) -> BTreeMap<String, (i64, Timestamp)> {
        std::mem::take(&mut *self.grants.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Puts back counts a write did not store.
    fn keep(&self, unwritten: BTreeMap<String, (i64, Timestamp)>) {
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        for (rule, (n, at)) in unwritten {
            let entry = grants.entry(rule).or_insert((0, at));
            entry.0 += n;
            entry.1 = entry.1.max(at);
        }
    }
}

/// `status` with `grants` added: each rule's count and latest grant, rules no longer in
/// `spec` dropped, the rules' count and the latest grant overall.
pub fn with_grants(roster: &Roster, grants: &BTreeMap<String, (i64, Timestamp)>) -> RosterStatus {
    let old = roster.status.clone().unwrap_or_default();
    let mut status = RosterStatus {
        rules: Some(roster.spec.rules.len() as i64),
        last_matched: old.last_matched,
        rule_matches: Vec::new(),
    };
    for rule in &roster.spec.rules {
        let before = old.rule_matches.iter().find(|m| m.name == rule.name);
        let mut matches = before.cloned().unwrap_or(RuleMatches {
            name: rule.name.clone(),
            ..RuleMatches::default()
        });
        if let Some((n, at)) = grants.get(&rule.name) {
            matches.grants += n;
            matches.last_matched = matches.last_matched.max(Some(*at));
            status.last_matched = status.last_matched.max(Some(*at));
        }
        status.rule_matches.push(matches);
    }
    status
}

/// Writes what is pending every [`WRITE_EVERY`], for ever (the server's task ends it).
pub async fn write_loop(cluster: Cluster, roster: String, pending: std::sync::Arc<Pending>) {
    let api: Api<Roster> = Api::all(cluster.client.clone());
    let mut tick = tokio::time::interval(WRITE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let grants = pending.take();
        if grants.is_empty() {
            continue;
        }
        let written = async {
            let mut stored = api.get(&roster).await?;
            stored.status = Some(with_grants(&stored, &grants));
            api.replace_status(&roster, &PostParams::default(), &stored)
                .await
                .map(|_| ())
        }
        .await;
        if let Err(e) = written {
            tracing::debug!(roster = %roster, error = %e, "the Roster's status was not written; kept for the next try");
            pending.keep(grants);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflavor_cluster::crd::roster::{RosterRule, RosterSpec};

    fn roster(rules: &[&str], status: Option<RosterStatus>) -> Roster {
        let mut r = Roster::new(
            "default",
            RosterSpec {
                rules: rules
                    .iter()
                    .map(|n| RosterRule {
                        name: (*n).into(),
                        ..RosterRule::default()
                    })
                    .collect(),
                ..RosterSpec::default()
            },
        );
        r.status = status;
        r
    }

    #[test]
    fn grants_add_to_what_is_stored_and_removed_rules_go() {
        let t1: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let t2: Timestamp = "2026-12-02T00:00:00Z".parse().unwrap();
        let stored = RosterStatus {
            rule_matches: vec![
                RuleMatches {
                    name: "a".into(),
                    grants: 3,
                    last_matched: Some(t1),
                },
                RuleMatches {
                    name: "gone".into(),
                    grants: 9,
                    last_matched: Some(t1),
                },
            ],
            ..RosterStatus::default()
        };
        let grants = [("a".to_string(), (2, t2)), ("b".to_string(), (1, t1))].into();
        let status = with_grants(&roster(&["a", "b"], Some(stored)), &grants);
        assert_eq!(status.rules, Some(2));
        assert_eq!(status.last_matched, Some(t2));
        let got: Vec<_> = status
            .rule_matches
            .iter()
            .map(|m| (m.name.as_str(), m.grants, m.last_matched))
            .collect();
        assert_eq!(got, [("a", 5, Some(t2)), ("b", 1, Some(t1))]);
    }

    #[test]
    fn unwritten_counts_are_kept_for_the_next_try() {
        let pending = Pending::default();
        pending.granted("a");
        pending.granted("a");
        let taken = pending.take();
        assert_eq!(taken["a"].0, 2);
        pending.granted("a");
        pending.keep(taken);
        assert_eq!(pending.take()["a"].0, 3);
        assert!(pending.take().is_empty());
    }
}
