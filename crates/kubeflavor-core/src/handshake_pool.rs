//! Which pending TLS handshakes a server of kubeflavor keeps when connections arrive faster
//! than they finish (the authorization webhook, the join-token API).
//!
//! Anyone who reaches the port may open a connection and send one byte of a TLS record, or
//! nothing: no credential is checked before the handshake ends. If such connections held
//! the server's connection slots, the API server's own new connection would wait behind
//! them, its 2 s timeout would pass and its failurePolicy (NoOpinion) would let a revoked
//! node through. So pending handshakes get their own bounded pool, and:
//!
//! - a source (an IP address) holds at most `per_source` of them: its newest connection
//!   pushes out its own oldest, so one source, however fast it connects, never pushes out
//!   another's handshake;
//! - when the whole pool is full, the newest connection pushes out the oldest pending
//!   handshake of all: a legitimate handshake takes a few milliseconds, so it is lost only
//!   if a whole pool's worth of connections from other sources arrives during them, while
//!   a flooder's connections are always the oldest and are the ones dropped.
//!
//! A handshake that finishes leaves the pool (its connection then takes one of the
//! server's connection slots, or is closed if the client is not the one the server
//! answers). The deadline of a handshake is the server's; this only decides who stays.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};

/// The source a connection from `ip` counts against: the IPv4 address (IPv4-mapped IPv6
/// included), or the IPv6 /64 prefix, since one host is commonly handed a whole /64 and
/// could otherwise take a fresh share from each of its addresses.
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// A pending handshake's place in the pool (admission order: lower is older).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// The pool's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Pending handshakes at once, all sources together (at least 1).
    pub total: usize,
    /// Pending handshakes at once from one source (at least 1, at most `total`).
    pub per_source: usize,
}

/// The pending handshakes, by source.
#[derive(Debug)]
pub struct Pool<S> {
    bounds: Bounds,
    next: u64,
    pending: BTreeMap<Ticket, S>,
    by_source: HashMap<S, BTreeMap<Ticket, ()>>,
}

impl<S: Copy + Eq + Hash> Pool<S> {
    pub fn new(bounds: Bounds) -> Pool<S> {
        let total = bounds.total.max(1);
        Pool {
            bounds: Bounds {
                total,
                per_source: bounds.per_source.clamp(1, total),
            },
            next: 0,
            pending: BTreeMap::new(),
            by_source: HashMap::new(),
        }
    }

    /// Admits a new handshake from `source`; returns its ticket and the tickets pushed out
    /// to make room (their connections must be closed now).
    pub fn admit(&mut self, source: S) -> (Ticket, Vec<Ticket>) {
        let mut evicted = Vec::new();
        let own = self.by_source.get(&source).map_or(0, BTreeMap::len);
        if own >= self.bounds.per_source {
            let oldest_own = self.by_source[&source]
                .keys()
                .next()
                .copied()
                .expect("a source with pending handshakes");
            self.leave(oldest_own);
            evicted.push(oldest_own);
        } else if self.pending.len() >= self.bounds.total {
            let oldest = *self.pending.keys().next().expect("a full pool");
            self.leave(oldest);
            evicted.push(oldest);
        }
        let ticket = Ticket(self.next);
        self.next += 1;
        self.pending.insert(ticket, source);
        self.by_source.entry(source).or_default().insert(ticket, ());
        (ticket, evicted)
    }

    /// The handshake of `ticket` left the pool (finished, failed or timed out). False if
    /// it had already been pushed out: its connection must not be served.
    pub fn leave(&mut self, ticket: Ticket) -> bool {
        let Some(source) = self.pending.remove(&ticket) else {
            return false;
        };
        if let Some(own) = self.by_source.get_mut(&source) {
            own.remove(&ticket);
            if own.is_empty() {
                self.by_source.remove(&source);
            }
        }
        true
    }

    /// Pending handshakes now.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Pending handshakes of `source` now.
    pub fn of(&self, source: S) -> usize {
        self.by_source.get(&source).map_or(0, BTreeMap::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(total: usize, per_source: usize) -> Pool<u8> {
        Pool::new(Bounds { total, per_source })
    }

    #[test]
    fn a_full_pool_pushes_out_the_oldest_handshake_for_the_newest() {
        let mut p = pool(3, 3);
        let (a, _) = p.admit(1);
        let (b, _) = p.admit(2);
        let (c, _) = p.admit(3);
        let (d, evicted) = p.admit(4);
        assert_eq!(evicted, vec![a]);
        assert_eq!(p.len(), 3);
        assert!(!p.leave(a), "a pushed-out handshake is not served");
        for t in [b, c, d] {
            assert!(p.leave(t));
        }
        assert!(p.is_empty());
    }

    #[test]
    fn one_source_pushes_out_only_its_own_handshakes() {
        let mut p = pool(10, 2);
        let (api_server, _) = p.admit(9);
        let (f1, _) = p.admit(1);
        let (f2, _) = p.admit(1);
        // A flood from source 1: each new connection replaces 1's own oldest, never 9's.
        let mut previous = vec![f1, f2];
        for _ in 0..1000 {
            let (t, evicted) = p.admit(1);
            assert_eq!(evicted, vec![previous.remove(0)]);
            previous.push(t);
        }
        assert_eq!(p.of(1), 2);
        assert!(p.leave(api_server), "the other source's handshake survived");
    }

    #[test]
    fn many_sources_push_out_the_oldest_of_all() {
        let mut p = pool(4, 2);
        let (old, _) = p.admit(9);
        for s in 1..=3 {
            assert!(p.admit(s).1.is_empty());
        }
        let (_, evicted) = p.admit(4);
        assert_eq!(evicted, vec![old]);
        // Then the oldest flooder, not the newest arrival.
        let (young, _) = p.admit(9);
        assert_eq!(p.of(1), 0, "source 1's handshake was the oldest");
        assert!(p.leave(young));
    }

    #[test]
    fn a_finished_handshake_leaves_and_frees_its_place() {
        let mut p = pool(1, 1);
        let (a, _) = p.admit(1);
        assert!(p.leave(a));
        let (_, evicted) = p.admit(2);
        assert!(evicted.is_empty());
        assert!(!p.leave(a), "leaving twice is a no-op");
    }

    #[test]
    fn an_ipv6_64_is_one_source_and_ipv4_mapped_is_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_of(a), source_of(b));
        assert_ne!(source_of(a), source_of(c));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(source_of(mapped), "10.0.0.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn bounds_are_at_least_one_and_per_source_at_most_total() {
        let mut p = pool(0, 0);
        let (a, _) = p.admit(1);
        assert_eq!(p.admit(1).1, vec![a]);
        let p2 = pool(2, 5);
        assert_eq!(p2.bounds.per_source, 2);
    }
}
