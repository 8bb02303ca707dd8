//! The Roster's status, written by the join-token API: per rule, how many tokens it granted,
//! to how many distinct administrators (the administrator's ledger says whether a grant is
//! the rule's first to them), and when last; the rules' count and the last grant overall. Grants are counted in
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

/// What one rule granted since the last write: tokens, new administrators, the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grants {
    pub tokens: i64,
    pub administrators: i64,
    pub latest: Timestamp,
}

impl Grants {
    fn add(&mut self, other: Grants) {
        self.tokens += other.tokens;
        self.administrators += other.administrators;
        self.latest = self.latest.max(other.latest);
    }
}

/// Grants not yet written, per rule.
#[derive(Debug, Default)]
pub struct Pending {
    grants: Mutex<BTreeMap<String, Grants>>,
}

impl Pending {
    /// One token granted by `rule` now; `first` when the rule had never granted this
    /// administrator one (the ledger says).
    pub fn granted(&self, rule: &str, first: bool) {
        self.keep(
            [(
                rule.to_string(),
                Grants {
                    tokens: 1,
                    administrators: i64::from(first),
                    latest: Timestamp::now(),
                },
            )]
            .into(),
        );
    }

    fn take(&self) -> BTreeMap<String, Grants> {
        std::mem::take(&mut *self.grants.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Adds counts (new ones, or ones a write did not store).
    fn keep(&self, more: BTreeMap<String, Grants>) {
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        for (rule, g) in more {
            match grants.get_mut(&rule) {
                Some(kept) => kept.add(g),
                None => {
                    grants.insert(rule, g);
                }
            }
        }
    }
}

/// `status` with `grants` added: each rule's count and latest grant, rules no longer in
/// `spec` dropped, the rules' count and the latest grant overall.
pub fn with_grants(roster: &Roster, grants: &BTreeMap<String, Grants>) -> RosterStatus {
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
        if let Some(g) = grants.get(&rule.name) {
            matches.grants += g.tokens;
            matches.administrators += g.administrators;
            matches.last_matched = matches.last_matched.max(Some(g.latest));
            status.last_matched = status.last_matched.max(Some(g.latest));
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
                    administrators: 2,
                    last_matched: Some(t1),
                },
                RuleMatches {
                    name: "gone".into(),
                    grants: 9,
                    administrators: 9,
                    last_matched: Some(t1),
                },
            ],
            ..RosterStatus::default()
        };
        let g = |tokens, administrators, latest| Grants {
            tokens,
            administrators,
            latest,
        };
        let grants = [
            ("a".to_string(), g(2, 1, t2)),
            ("b".to_string(), g(1, 1, t1)),
        ]
        .into();
        let status = with_grants(&roster(&["a", "b"], Some(stored)), &grants);
        assert_eq!(status.rules, Some(2));
        assert_eq!(status.last_matched, Some(t2));
        let got: Vec<_> = status
            .rule_matches
            .iter()
            .map(|m| (m.name.as_str(), m.grants, m.administrators, m.last_matched))
            .collect();
        assert_eq!(got, [("a", 5, 3, Some(t2)), ("b", 1, 1, Some(t1))]);
    }

    #[test]
    fn unwritten_counts_are_kept_for_the_next_try() {
        let pending = Pending::default();
        pending.granted("a", true);
        pending.granted("a", false);
        let taken = pending.take();
        assert_eq!((taken["a"].tokens, taken["a"].administrators), (2, 1));
        pending.granted("a", false);
        pending.keep(taken);
        let again = pending.take();
        assert_eq!((again["a"].tokens, again["a"].administrators), (3, 1));
        assert!(pending.take().is_empty());
    }
}
