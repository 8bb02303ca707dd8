//! Request counters by identity kind, verb and resource, so tests and benchmarks can report
//! API calls per operation.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::types::IdentityKind;

/// One counter key. `resource` is the plural (with `/subresource` when there is one); for
/// non-resource requests (discovery, `/version`) it is the path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterKey {
    /// How the caller authenticated.
    pub identity: IdentityKind,
    /// The request verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`...
    pub verb: String,
    /// The resource plural (`secrets`, `certificatesigningrequests/approval`) or the path.
    pub resource: String,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Requests per key; keys never seen are absent.
    pub counts: BTreeMap<CounterKey, u64>,
}

impl CounterSnapshot {
    /// Requests with exactly this identity kind, verb and resource.
    pub fn get(&self, identity: IdentityKind, verb: &str, resource: &str) -> u64 {
        let key = CounterKey {
            identity,
            verb: verb.into(),
            resource: resource.into(),
        };
        self.counts.get(&key).copied().unwrap_or(0)
    }

    /// Requests by any identity with this verb and resource.
    pub fn by_verb_resource(&self, verb: &str, resource: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.verb == verb && k.resource == resource)
            .map(|(_, v)| v)
            .sum()
    }

    /// Requests made with one kind of identity.
    pub fn by_identity(&self, identity: IdentityKind) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.identity == identity)
            .map(|(_, v)| v)
            .sum()
    }

    /// Every request counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// The request counters of one cluster (`TestCluster::counters()`).
#[derive(Debug, Default)]
pub struct Counters {
    counts: Mutex<BTreeMap<CounterKey, u64>>,
}

impl Counters {
    pub(crate) fn record(&self, identity: IdentityKind, verb: &str, resource: &str) {
        let key = CounterKey {
            identity,
            verb: verb.into(),
            resource: resource.into(),
        };
        *self.lock().entry(key).or_insert(0) += 1;
    }

    /// A copy of the counts so far.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            counts: self.lock().clone(),
        }
    }

    /// Start counting from zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<CounterKey, u64>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}
