//! When a replica of the authorization webhook may answer from its in-memory index.
//!
//! The index is only as current as its watches. A replica cut off from the API server
//! (a partition, a watch that dropped and is reconnecting) would otherwise keep answering
//! "no opinion" for a node revoked since, for as long as it is cut off. So the index
//! carries the last moment it was confirmed current (both watches listed since their last
//! failure, and the API server answered a probe), and past a stated bound the replica
//! answers an error instead: the API server then applies its failurePolicy, and with
//! NoOpinion the revocation list's admission policy and the revoked node's deleted pods
//! leave the node nothing of use (README, "Cutting revoked nodes off").

use std::time::Duration;

/// Whether an index last confirmed current `age` ago (`None`: never) may be answered
/// from, under the bound `max_staleness`.
pub fn may_answer(age: Option<Duration>, max_staleness: Duration) -> bool {
    age.is_some_and(|age| age <= max_staleness)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_older_than_the_bound_is_not_answered_from() {
        let bound = Duration::from_secs(3);
        assert!(may_answer(Some(Duration::ZERO), bound));
        assert!(may_answer(Some(bound), bound));
        assert!(!may_answer(Some(bound + Duration::from_millis(1)), bound));
        assert!(
            !may_answer(None, bound),
            "never confirmed: never answered from"
        );
    }
}
