//! How many join tokens one caller of the join-token API may mint, and how that limit is
//! split over the API's replicas.
//!
//! Each replica of `kubeflavor serve` keeps its own bucket per caller: sharing one would
//! cost a write to the API server per mint, and the API server's own request limits would
//! then be the bottleneck. A Service without session affinity spreads a caller's
//! connections over the replicas, so a caller of N replicas that each allow `r` gets at
//! most N × `r` in all, and only `r` when its connections all land on one replica. To hold
//! a caller to a limit across the whole API, `install --serve` gives each replica that
//! limit divided by the replicas ([`MintRate::per_replica`]).

/// A caller's limit: `per_minute` mints a minute on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MintRate {
    pub per_minute: u32,
    pub burst: u32,
}

/// A limit that cannot be split so that every replica allows at least one mint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} {total} cannot be split over {replicas} replicas: each replica must allow at least 1"
)]
pub struct SplitError {
    /// Which number: "rate per minute" or "burst".
    pub what: &'static str,
    pub total: u32,
    pub replicas: u32,
}

impl MintRate {
    /// What each of `replicas` replicas (at least 1) allows a caller so that together they
    /// allow at most `self`: each number divided by the replicas, rounded down. A number
    /// smaller than the replicas cannot be split: a replica that allowed 0 would refuse
    /// every caller.
    pub fn per_replica(self, replicas: u32) -> Result<MintRate, SplitError> {
        let replicas = replicas.max(1);
        let split = |what, total: u32| {
            if total < replicas {
                Err(SplitError {
                    what,
                    total,
                    replicas,
                })
            } else {
                Ok(total / replicas)
            }
        };
        Ok(MintRate {
            per_minute: split("rate per minute", self.per_minute)?,
            burst: split("burst", self.burst)?,
        })
    }

    /// The most `replicas` replicas that each allow `self` allow one caller together.
    pub fn across(self, replicas: u32) -> MintRate {
        MintRate {
            per_minute: self.per_minute.saturating_mul(replicas),
            burst: self.burst.saturating_mul(replicas),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_minute: u32, burst: u32) -> MintRate {
        MintRate { per_minute, burst }
    }

    #[test]
    fn the_replicas_together_allow_no_more_than_the_limit() {
        for (total, replicas) in [
            (rate(60, 20), 2),
            (rate(3, 3), 3),
            (rate(7, 5), 2),
            (rate(u32::MAX, u32::MAX), 7),
        ] {
            let each = total.per_replica(replicas).unwrap();
            let all = each.across(replicas);
            assert!(
                all.per_minute <= total.per_minute && all.burst <= total.burst,
                "{total:?} over {replicas}: {all:?}"
            );
        }
        assert_eq!(rate(60, 20).per_replica(2), Ok(rate(30, 10)));
        assert_eq!(rate(3, 3).per_replica(3), Ok(rate(1, 1)));
        // Rounded down: 5 at once over 2 replicas is 2 each, 4 in all.
        assert_eq!(rate(7, 5).per_replica(2), Ok(rate(3, 2)));
        assert_eq!(rate(60, 20).per_replica(1), Ok(rate(60, 20)));
    }

    #[test]
    fn a_limit_below_the_replicas_is_refused() {
        assert_eq!(
            rate(60, 2).per_replica(3),
            Err(SplitError {
                what: "burst",
                total: 2,
                replicas: 3
            })
        );
        let err = rate(1, 10).per_replica(2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rate per minute 1 cannot be split over 2 replicas: each replica must allow at least 1"
        );
    }

    #[test]
    fn replicas_multiply_what_each_allows() {
        assert_eq!(rate(1, 1).across(3), rate(3, 3));
        assert_eq!(rate(u32::MAX, 2).across(2), rate(u32::MAX, 4));
    }
}
