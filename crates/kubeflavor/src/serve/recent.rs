//! What a mint reads that seldom changes (a Flavor's rules, where nodes join), kept for at
//! most [`READ_AT_MOST_EVERY`] so a burst of mints reads each once instead of once per mint.
//!
//! Why a second of staleness gives nothing away: a Flavor edited to stricter limits may
//! still see tokens minted within that second under its old ones, and the controller
//! judges every token against its Flavor's limits again when the token's CSRs come (a
//! token over them gets no certificate); the API server's policy on this identity's token
//! Secrets holds the install's ceilings whatever the cache says. A Flavor deleted may
//! still be minted for within that second; the CSRs of such a token are denied (its
//! Flavor does not exist). Errors and "no such Flavor" are never kept, so a Flavor just
//! created is found at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kubeflavor_cluster::crd;
use kubeflavor_core::flavor::{FlavorName, FlavorRules};
use kubeflavor_core::mint::roster::{RosterTokens, Rule};

use crate::connect::Cluster;
use crate::minting::{JoinTarget, MintError, join_target, stored_flavor_rules};

/// How long a read is used again.
pub const READ_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// More Flavors than this kept at once and the oldest half are forgotten (a caller naming
/// many Flavors cannot grow the map; SubjectAccessReview already refused unknown ones it
/// may not mint).
const MAX_FLAVORS: usize = 1024;

/// Reads kept for [`READ_AT_MOST_EVERY`].
#[derive(Debug, Default)]
pub struct Recent {
    flavors: Mutex<HashMap<FlavorName, (Instant, FlavorRules)>>,
    target: Mutex<Option<(Instant, JoinTarget)>>,
    roster: Mutex<Option<(Instant, Option<Roster>)>>,
}

/// A Roster as the join-token API uses it: its rules and what its tokens are minted with.
#[derive(Debug, Clone)]
pub struct Roster {
    pub rules: Vec<Rule>,
    pub tokens: RosterTokens,
}

impl Recent {
    /// The Flavor's rules as read within the last second, else read now; `None` when it
    /// does not exist.
    pub async fn flavor_rules(
        &self,
        cluster: &Cluster,
        flavor: &FlavorName,
        now: Instant,
    ) -> Result<Option<FlavorRules>, MintError> {
        if let Some(rules) = fresh(&lock(&self.flavors).get(flavor).cloned(), now) {
            return Ok(Some(rules));
        }
        let read = stored_flavor_rules(cluster, flavor).await?;
        if let Some(rules) = &read {
            let mut kept = lock(&self.flavors);
            if kept.len() >= MAX_FLAVORS {
                let mut ages: Vec<Instant> = kept.values().map(|(at, _)| *at).collect();
                ages.sort();
                let cut = ages[ages.len() / 2];
                kept.retain(|_, (at, _)| *at > cut);
            }
            kept.insert(flavor.clone(), (now, rules.clone()));
        }
        Ok(read)
    }

    /// The Roster `name` as read within the last second, else read now; `None` when it does
    /// not exist. A Roster that cannot be used is an error (logged: the owner must fix it)
    /// and is not kept.
    pub async fn roster(
        &self,
        cluster: &Cluster,
        name: &str,
        now: Instant,
    ) -> Result<Option<Roster>, String> {
        if let Some(roster) = fresh(&lock(&self.roster).clone(), now) {
            return Ok(roster);
        }
        let api: kube::Api<crd::roster::Roster> = kube::Api::all(cluster.client.clone());
        let read = match api
            .get_opt(name)
            .await
            .map_err(|e| format!("could not read Roster {name}: {e}"))?
        {
            None => None,
            Some(stored) => {
                let rules = crd::roster::rules_from_roster(&stored.spec)
                    .map_err(|e| format!("Roster {name}: {e}"))?;
                let tokens = crd::roster::roster_tokens(&stored.spec)
                    .map_err(|e| format!("Roster {name}: {e}"))?;
                Some(Roster { rules, tokens })
            }
        };
        *lock(&self.roster) = Some((now, read.clone()));
        Ok(read)
    }

    /// Where nodes join, as read within the last second, else read now.
    pub async fn join_target(
        &self,
        cluster: &Cluster,
        now: Instant,
    ) -> Result<JoinTarget, MintError> {
        if let Some(target) = fresh(&lock(&self.target).clone(), now) {
            return Ok(target);
        }
        let target = join_target(cluster).await?;
        *lock(&self.target) = Some((now, target.clone()));
        Ok(target)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The value, when it was read less than [`READ_AT_MOST_EVERY`] before `now`.
fn fresh<T: Clone>(kept: &Option<(Instant, T)>, now: Instant) -> Option<T> {
    kept.as_ref()
        .filter(|(at, _)| now.saturating_duration_since(*at) < READ_AT_MOST_EVERY)
        .map(|(_, v)| v.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_is_used_for_a_second_and_not_after() {
        let at = Instant::now();
        let kept = Some((at, 7));
        assert_eq!(fresh(&kept, at), Some(7));
        assert_eq!(
            fresh(&kept, at + READ_AT_MOST_EVERY - Duration::from_millis(1)),
            Some(7)
        );
        assert_eq!(fresh(&kept, at + READ_AT_MOST_EVERY), None);
        assert_eq!(fresh::<u8>(&None, at), None);
    }
}
