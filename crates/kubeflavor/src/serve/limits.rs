//! The join-token API's rate limit: a token bucket per authenticated user name (a caller's
//! rate on this replica). How many connections it holds, and for how long, is
//! `ops::connection`'s.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many callers are remembered; beyond it, callers whose buckets are full again are
/// forgotten (a full bucket is what a new caller gets anyway).
const MAX_CALLERS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// `per_minute` requests a minute per caller on average, `burst` at once, counted on this
/// server alone.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32, burst: u32) -> Self {
        RateLimiter {
            per_second: f64::from(per_minute.max(1)) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `caller`'s bucket at `now`; `Err(wait)` when it is empty,
    /// with how long until the next request would be allowed.
    pub fn check(&self, caller: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_CALLERS && !buckets.contains_key(caller) {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, b| refill(b, now, rate, burst) < burst);
        }
        let bucket = buckets.entry(caller.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let tokens = refill(bucket, now, self.per_second, self.burst);
        if tokens >= 1.0 {
            *bucket = Bucket {
                tokens: tokens - 1.0,
                at: now,
            };
            Ok(())
        } else {
            *bucket = Bucket { tokens, at: now };
            Err(Duration::from_secs_f64((1.0 - tokens) / self.per_second))
        }
    }
}

fn refill(bucket: &Bucket, now: Instant, per_second: f64, burst: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * per_second).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_gets_its_burst_then_waits_for_the_rate() {
        let limiter = RateLimiter::new(60, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check("alice", t0).is_ok());
        }
        let wait = limiter.check("alice", t0).unwrap_err();
        assert!(
            wait <= Duration::from_secs(1) && wait > Duration::ZERO,
            "{wait:?}"
        );
        assert!(limiter.check("alice", t0 + Duration::from_secs(1)).is_ok());
        assert!(limiter.check("alice", t0 + Duration::from_secs(1)).is_err());
    }

    #[test]
    fn callers_do_not_share_a_bucket() {
        let limiter = RateLimiter::new(1, 1);
        let t0 = Instant::now();
        assert!(limiter.check("alice", t0).is_ok());
        assert!(limiter.check("alice", t0).is_err());
        assert!(limiter.check("bob", t0).is_ok(), "bob has his own bucket");
    }

    #[test]
    fn an_idle_bucket_refills_only_to_the_burst() {
        let limiter = RateLimiter::new(60, 2);
        let t0 = Instant::now();
        assert!(limiter.check("a", t0).is_ok());
        let later = t0 + Duration::from_secs(3600);
        assert!(limiter.check("a", later).is_ok());
        assert!(limiter.check("a", later).is_ok());
        assert!(limiter.check("a", later).is_err(), "no more than the burst");
    }

    #[test]
    fn many_callers_stay_bounded() {
        let limiter = RateLimiter::new(600, 1);
        let t0 = Instant::now();
        for i in 0..MAX_CALLERS {
            let _ = limiter.check(&format!("caller-{i}"), t0);
        }
        // A minute later every bucket is full again and can be forgotten.
        let _ = limiter.check("newcomer", t0 + Duration::from_secs(60));
        assert!(limiter.buckets.lock().unwrap().len() < MAX_CALLERS);
    }
}
