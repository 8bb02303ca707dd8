//! What a token of a flavor may be minted with: the flavor's `tokenLimits` (a longest TTL,
//! a largest `maxNodes`, whether a token may never expire), and the one check every minting
//! path applies (the join-token API always; `token create` unless the admin overrides it).
//!
//! A limit the flavor leaves out is not "no limit": a caller may ask for at most the
//! flavor's own defaults (TTL `tokenDefaults.ttl` when it is finite, else 24h; `maxNodes`
//! `tokenDefaults.maxNodes`, else 1), and never for a token that never expires. So a portal
//! holding the right to mint a flavor gets, without more words from the admin, what
//! `token create --flavor` gives by default and nothing beyond.

use std::fmt;
use std::num::NonZeroU32;

use crate::flavor::ttl::{DEFAULT_TOKEN_TTL, TokenTtl};

/// `max_nodes` when neither the token nor its flavor sets one: one token, one node name
/// (P3, binding).
pub const DEFAULT_MAX_NODES: NonZeroU32 = NonZeroU32::MIN;

/// The field names of `spec.tokenLimits` of a Flavor, as errors name them.
pub const MAX_TTL_FIELD: &str = "tokenLimits.maxTTL";
pub const MAX_NODES_FIELD: &str = "tokenLimits.maxNodes";
pub const ALLOW_NEVER_EXPIRING_FIELD: &str = "tokenLimits.allowNeverExpiring";

/// A flavor's `tokenLimits` as it states them (validated: a maximum TTL is a positive
/// duration, a maximum `maxNodes` at least 1). `None`: not stated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenLimits {
    /// The longest TTL, in seconds (never 0: a token that never expires is
    /// `allow_never_expiring`'s question).
    pub max_ttl_secs: Option<u64>,
    pub max_nodes: Option<NonZeroU32>,
    pub allow_never_expiring: Option<bool>,
}

/// The limits in force for a flavor: its stated [`TokenLimits`], the rest from its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveLimits {
    pub max_ttl_secs: u64,
    pub max_nodes: NonZeroU32,
    pub allow_never_expiring: bool,
    /// Whether `max_ttl_secs` / `max_nodes` were stated (else derived from the defaults),
    /// so a refusal can say where its number comes from.
    pub max_ttl_stated: bool,
    pub max_nodes_stated: bool,
}

impl TokenLimits {
    /// The limits in force, given the flavor's token defaults (`tokenDefaults.ttl`,
    /// `tokenDefaults.maxNodes`).
    pub fn effective(
        &self,
        default_ttl: Option<TokenTtl>,
        default_max_nodes: Option<NonZeroU32>,
    ) -> EffectiveLimits {
        let default_ttl_secs = match default_ttl.unwrap_or(DEFAULT_TOKEN_TTL) {
            TokenTtl::Seconds(secs) => secs,
            // A flavor whose default never expires still gets a finite ceiling for the
            // finite TTLs a caller asks for: kubeadm's 24h.
            TokenTtl::Never => match DEFAULT_TOKEN_TTL {
                TokenTtl::Seconds(secs) => secs,
                TokenTtl::Never => unreachable!("the default TTL is finite"),
            },
        };
        EffectiveLimits {
            max_ttl_secs: self.max_ttl_secs.unwrap_or(default_ttl_secs),
            max_nodes: self
                .max_nodes
                .or(default_max_nodes)
                .unwrap_or(DEFAULT_MAX_NODES),
            allow_never_expiring: self.allow_never_expiring.unwrap_or(false),
            max_ttl_stated: self.max_ttl_secs.is_some(),
            max_nodes_stated: self.max_nodes.is_some(),
        }
    }
}

/// One limit a token would break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitExceeded {
    /// A token that never expires, where the flavor does not allow one.
    NeverExpiring,
    /// A TTL longer than the flavor's maximum.
    Ttl {
        asked_secs: u64,
        max_secs: u64,
        stated: bool,
    },
    /// More node names than the flavor's maximum.
    MaxNodes {
        asked: NonZeroU32,
        max: NonZeroU32,
        stated: bool,
    },
}

impl LimitExceeded {
    /// The field of the request (and of `token create`'s flags, as `--ttl`/`--max-nodes`).
    pub fn field(&self) -> &'static str {
        match self {
            LimitExceeded::NeverExpiring | LimitExceeded::Ttl { .. } => "ttl",
            LimitExceeded::MaxNodes { .. } => "maxNodes",
        }
    }

    /// The Flavor field that sets the limit.
    pub fn limit(&self) -> &'static str {
        match self {
            LimitExceeded::NeverExpiring => ALLOW_NEVER_EXPIRING_FIELD,
            LimitExceeded::Ttl { .. } => MAX_TTL_FIELD,
            LimitExceeded::MaxNodes { .. } => MAX_NODES_FIELD,
        }
    }
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.limit();
        match *self {
            LimitExceeded::NeverExpiring => write!(
                f,
                "ttl 0 (a token that never expires) is not allowed: the flavor's {limit} is not true; ask for a finite ttl such as 24h"
            ),
            LimitExceeded::Ttl {
                asked_secs,
                max_secs,
                stated,
            } => write!(
                f,
                "ttl {} is longer than the flavor allows: {limit} is {}{}; ask for at most that",
                TokenTtl::Seconds(asked_secs),
                TokenTtl::Seconds(max_secs),
                if stated {
                    ""
                } else {
                    " (not set, so the flavor's default TTL, else 24h)"
                },
            ),
            LimitExceeded::MaxNodes { asked, max, stated } => write!(
                f,
                "maxNodes {asked} is more than the flavor allows: {limit} is {max}{}; ask for at most that",
                if stated {
                    ""
                } else {
                    " (not set, so the flavor's default maxNodes, else 1)"
                },
            ),
        }
    }
}

impl EffectiveLimits {
    /// Every limit a token of `ttl` and `max_nodes` would break; empty when it may be
    /// minted.
    pub fn check(&self, ttl: TokenTtl, max_nodes: NonZeroU32) -> Vec<LimitExceeded> {
        let mut exceeded = Vec::new();
        match ttl {
            TokenTtl::Never if !self.allow_never_expiring => {
                exceeded.push(LimitExceeded::NeverExpiring)
            }
            TokenTtl::Seconds(asked_secs) if asked_secs > self.max_ttl_secs => {
                exceeded.push(LimitExceeded::Ttl {
                    asked_secs,
                    max_secs: self.max_ttl_secs,
                    stated: self.max_ttl_stated,
                })
            }
            _ => {}
        }
        if max_nodes > self.max_nodes {
            exceeded.push(LimitExceeded::MaxNodes {
                asked: max_nodes,
                max: self.max_nodes,
                stated: self.max_nodes_stated,
            });
        }
        exceeded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(v: u32) -> NonZeroU32 {
        NonZeroU32::new(v).unwrap()
    }

    const HOUR: u64 = 3600;

    #[test]
    fn without_limits_a_caller_gets_at_most_the_defaults_and_never_a_token_that_never_expires() {
        let none = TokenLimits::default();
        let limits = none.effective(None, None);
        assert_eq!(
            (
                limits.max_ttl_secs,
                limits.max_nodes,
                limits.allow_never_expiring
            ),
            (24 * HOUR, n(1), false)
        );
        assert_eq!(limits.check(TokenTtl::Seconds(24 * HOUR), n(1)), []);
        assert_eq!(
            limits.check(TokenTtl::Never, n(u32::MAX)),
            [
                LimitExceeded::NeverExpiring,
                LimitExceeded::MaxNodes {
                    asked: n(u32::MAX),
                    max: n(1),
                    stated: false
                }
            ]
        );
        assert_eq!(
            limits.check(TokenTtl::Seconds(24 * HOUR + 1), n(1)),
            [LimitExceeded::Ttl {
                asked_secs: 24 * HOUR + 1,
                max_secs: 24 * HOUR,
                stated: false
            }]
        );
        // The flavor's own defaults raise the ceiling to themselves.
        let limits = none.effective(Some(TokenTtl::Seconds(72 * HOUR)), Some(n(3)));
        assert_eq!((limits.max_ttl_secs, limits.max_nodes), (72 * HOUR, n(3)));
        // A default that never expires does not make never-expiring tokens allowed.
        let limits = none.effective(Some(TokenTtl::Never), None);
        assert_eq!(limits.max_ttl_secs, 24 * HOUR);
        assert_eq!(
            limits.check(TokenTtl::Never, n(1)),
            [LimitExceeded::NeverExpiring]
        );
    }

    #[test]
    fn stated_limits_win_over_the_defaults() {
        let stated = TokenLimits {
            max_ttl_secs: Some(48 * HOUR),
            max_nodes: Some(n(5)),
            allow_never_expiring: Some(true),
        };
        let limits = stated.effective(Some(TokenTtl::Seconds(HOUR)), Some(n(1)));
        assert_eq!(limits.check(TokenTtl::Never, n(5)), []);
        assert_eq!(limits.check(TokenTtl::Seconds(48 * HOUR), n(5)), []);
        let over = limits.check(TokenTtl::Seconds(49 * HOUR), n(6));
        assert_eq!(
            over.iter()
                .map(|e| (e.field(), e.limit()))
                .collect::<Vec<_>>(),
            [("ttl", MAX_TTL_FIELD), ("maxNodes", MAX_NODES_FIELD)]
        );
        assert_eq!(
            over[0].to_string(),
            "ttl 49h is longer than the flavor allows: tokenLimits.maxTTL is 48h; ask for at most that"
        );
        assert_eq!(
            over[1].to_string(),
            "maxNodes 6 is more than the flavor allows: tokenLimits.maxNodes is 5; ask for at most that"
        );
        let never = TokenLimits {
            allow_never_expiring: Some(false),
            ..stated
        };
        let message = never.effective(None, None).check(TokenTtl::Never, n(1))[0].to_string();
        assert!(message.contains(ALLOW_NEVER_EXPIRING_FIELD), "{message}");
    }

    fn ttls() -> impl Strategy<Value = TokenTtl> {
        prop_oneof![
            Just(TokenTtl::Never),
            (1u64..=crate::flavor::ttl::MAX_TOKEN_TTL_SECS).prop_map(TokenTtl::Seconds),
        ]
    }

    fn limits() -> impl Strategy<Value = TokenLimits> {
        (
            proptest::option::of(1u64..=crate::flavor::ttl::MAX_TOKEN_TTL_SECS),
            proptest::option::of(1u32..),
            proptest::option::of(any::<bool>()),
        )
            .prop_map(|(ttl, nodes, never)| TokenLimits {
                max_ttl_secs: ttl,
                max_nodes: nodes.and_then(NonZeroU32::new),
                allow_never_expiring: never,
            })
    }

    proptest! {
        /// Whatever the flavor says and the caller asks, an accepted token is within the
        /// limits in force: finite and no longer than the maximum TTL, or never-expiring
        /// only where allowed; no more node names than the maximum.
        #[test]
        fn an_accepted_token_is_within_the_limits(
            stated in limits(),
            default_ttl in proptest::option::of(ttls()),
            default_nodes in proptest::option::of(1u32..),
            ttl in ttls(),
            nodes in 1u32..,
        ) {
            let limits = stated.effective(default_ttl, default_nodes.and_then(NonZeroU32::new));
            let nodes = n(nodes);
            let exceeded = limits.check(ttl, nodes);
            let ttl_ok = match ttl {
                TokenTtl::Never => limits.allow_never_expiring && stated.allow_never_expiring == Some(true),
                TokenTtl::Seconds(s) => s <= limits.max_ttl_secs,
            };
            let nodes_ok = nodes <= limits.max_nodes;
            prop_assert_eq!(exceeded.is_empty(), ttl_ok && nodes_ok);
            prop_assert_eq!(exceeded.iter().any(|e| e.field() == "ttl"), !ttl_ok);
            prop_assert_eq!(exceeded.iter().any(|e| e.field() == "maxNodes"), !nodes_ok);
        }

        /// The flavor's defaults are always mintable under limits it does not state, except
        /// a default that never expires.
        #[test]
        fn unstated_limits_admit_the_defaults(
            default_ttl in proptest::option::of(ttls()),
            default_nodes in proptest::option::of(1u32..),
        ) {
            let default_nodes = default_nodes.and_then(NonZeroU32::new);
            let limits = TokenLimits::default().effective(default_ttl, default_nodes);
            let ttl = default_ttl.unwrap_or(DEFAULT_TOKEN_TTL);
            let exceeded = limits.check(ttl, default_nodes.unwrap_or(DEFAULT_MAX_NODES));
            if ttl == TokenTtl::Never {
                prop_assert_eq!(exceeded, vec![LimitExceeded::NeverExpiring]);
            } else {
                prop_assert!(exceeded.is_empty());
            }
        }
    }
}
