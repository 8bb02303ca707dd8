//! Token lifetimes as `kubeadm token create --ttl` spells them.

use std::fmt;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// Token TTL when neither the command line nor the flavor sets one (kubeadm's default).
pub const DEFAULT_TOKEN_TTL: TokenTtl = TokenTtl::Seconds(24 * 3600);
/// Control-plane join token TTL when the command line sets none: the lifetime of the
/// control-plane certificate Secret it exists to read (`certs upload --ttl`).
pub const CONTROL_PLANE_TOKEN_TTL: TokenTtl = TokenTtl::Seconds(2 * 3600);
/// The longest token TTL accepted (ten years): beyond it a typo is likelier than intent.
pub const MAX_TOKEN_TTL_SECS: u64 = 10 * 366 * 24 * 3600;

/// How long a token lives. Follows `kubeadm token create --ttl`: Go-style durations of
/// hours, minutes and seconds (`24h`, `90m`, `1h30m`, `45s`), and `0` meaning the token
/// never expires (its Secret has no `expiration` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TokenTtl {
    Never,
    /// A positive number of seconds, at most [`MAX_TOKEN_TTL_SECS`].
    Seconds(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    #[error("TTL must not be empty; use a duration such as 24h, 90m or 1h30m, or 0 for never")]
    Empty,
    #[error(
        "TTL {0:?} is negative; a token cannot expire in the past: use a positive duration such as 24h, or 0 for never"
    )]
    Negative(String),
    #[error(
        "TTL {0:?} does not parse; use numbers followed by h, m or s (e.g. 24h, 90m, 1h30m), or 0 for never"
    )]
    Syntax(String),
    #[error(
        "TTL {0:?} is longer than ten years; use a shorter TTL, or 0 for a token that never expires"
    )]
    TooLong(String),
}

impl TokenTtl {
    /// The expiration of a token minted at `now`, truncated to whole seconds because the
    /// Secret's `expiration` is RFC 3339 without fractions. `None` = never expires.
    pub fn expiration(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            TokenTtl::Never => None,
            TokenTtl::Seconds(secs) => {
                let secs = i64::try_from(secs).expect("bounded by MAX_TOKEN_TTL_SECS");
                let at = now
                    .checked_add(SignedDuration::from_secs(secs))
                    .expect("now + at most ten years is a valid timestamp");
                Some(Timestamp::from_second(at.as_second()).expect("in range"))
            }
        }
    }
}

impl FromStr for TokenTtl {
    type Err = TtlError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.is_empty() {
            return Err(TtlError::Empty);
        }
        if t.starts_with('-') {
            return Err(TtlError::Negative(s.to_owned()));
        }
        let body = t.strip_prefix('+').unwrap_or(t);
        if body.bytes().all(|b| b == b'0') {
            return Ok(TokenTtl::Never);
        }
        let syntax = || TtlError::Syntax(s.to_owned());
        let too_long = || TtlError::TooLong(s.to_owned());
        let mut total: u64 = 0;
        let mut rest = body;
        // Units must appear at most once each and in decreasing order, as Go prints them.
        let mut last_unit_rank = u8::MAX;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(syntax());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| too_long())?;
            rest = &rest[digits..];
            let (unit_secs, rank) = match rest.as_bytes().first() {
                Some(b'h') => (3600, 2),
                Some(b'm') if !rest.starts_with("ms") => (60, 1),
                Some(b's') => (1, 0),
                _ => return Err(syntax()),
            };
            if rank >= last_unit_rank {
                return Err(syntax());
            }
            last_unit_rank = rank;
            rest = &rest[1..];
            total = n
                .checked_mul(unit_secs)
                .and_then(|v| v.checked_add(total))
                .ok_or_else(too_long)?;
        }
        if total > MAX_TOKEN_TTL_SECS {
            return Err(too_long());
        }
        Ok(if total == 0 {
            TokenTtl::Never
        } else {
            TokenTtl::Seconds(total)
        })
    }
}

impl fmt::Display for TokenTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TokenTtl::Never => f.write_str("0"),
            TokenTtl::Seconds(secs) => {
                let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
                if h > 0 {
                    write!(f, "{h}h")?;
                }
                if m > 0 {
                    write!(f, "{m}m")?;
                }
                if s > 0 {
                    write!(f, "{s}s")?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for TokenTtl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TokenTtl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ttl_parses_go_style_durations() {
        let p = |s: &str| s.parse::<TokenTtl>();
        assert_eq!(p("24h"), Ok(TokenTtl::Seconds(86_400)));
        assert_eq!(p("90m"), Ok(TokenTtl::Seconds(5_400)));
        assert_eq!(p("1h30m"), Ok(TokenTtl::Seconds(5_400)));
        assert_eq!(p("1h0m30s"), Ok(TokenTtl::Seconds(3_630)));
        assert_eq!(p("45s"), Ok(TokenTtl::Seconds(45)));
        assert_eq!(p("0"), Ok(TokenTtl::Never));
        assert_eq!(p("0s"), Ok(TokenTtl::Never));
    }

    #[test]
    fn ttl_refuses_negative_malformed_and_huge_values() {
        let p = |s: &str| s.parse::<TokenTtl>();
        assert!(matches!(p("-1h"), Err(TtlError::Negative(_))));
        assert!(p("-1h").unwrap_err().to_string().contains("negative"));
        for bad in [
            "1d", "h", "1", "1h 30m", "30m1h", "1h1h", "1.5h", "10ms", "abc",
        ] {
            assert!(matches!(p(bad), Err(TtlError::Syntax(_))), "{bad}");
        }
        assert_eq!(p(""), Err(TtlError::Empty));
        assert!(matches!(p("100000h"), Err(TtlError::TooLong(_))));
        assert!(matches!(
            p("99999999999999999999h"),
            Err(TtlError::TooLong(_))
        ));
    }

    #[test]
    fn ttl_expiration_is_whole_seconds_in_the_future() {
        let now: Timestamp = "2026-11-30T04:00:00.75Z".parse().unwrap();
        let ttl: TokenTtl = "24h".parse().unwrap();
        assert_eq!(
            ttl.expiration(now),
            Some("2026-12-01T04:00:00Z".parse().unwrap())
        );
        assert_eq!(TokenTtl::Never.expiration(now), None);
    }

    proptest! {
        #[test]
        fn ttl_display_parses_back(secs in 1u64..=MAX_TOKEN_TTL_SECS) {
            let ttl = TokenTtl::Seconds(secs);
            prop_assert_eq!(ttl.to_string().parse::<TokenTtl>(), Ok(ttl));
        }

    }
}
