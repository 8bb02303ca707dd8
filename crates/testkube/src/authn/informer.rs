//! The bootstrap-token authenticator's view of `kube-system` Secrets.
//!
//! The real authenticator reads token Secrets from an informer cache, so a token used right
//! after its Secret's 201 can get the ordinary 401 for a millisecond or two (longer under
//! load);
//! the cache trails deletions and updates the same way. This cache imitates that: a task
//! follows the store's changes and applies each to the authenticator's copy `lag` after it
//! happened. Request handling never sleeps; it just reads a copy that is a little behind.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::TOKEN_SECRET_NAMESPACE;
use crate::store::{EventType, Store, StoredEvent, meta_str};
use crate::types::{ObjectReader, ResourceKey};

/// kube-system Secrets as the bootstrap-token authenticator sees them.
#[derive(Debug)]
pub struct TokenSecretCache {
    lag: Duration,
    secrets: RwLock<BTreeMap<String, Value>>,
    /// The store revision up to which every change is in the copy (tests wait on it
    /// instead of retrying a 401: [`TokenSecretCache::caught_up`]).
    applied: watch::Sender<u64>,
}

/// A read view of the cache (an [`ObjectReader`] of kube-system Secrets only).
pub struct CacheView<'a>(RwLockReadGuard<'a, BTreeMap<String, Value>>);

fn secrets_key() -> ResourceKey {
    ResourceKey::new("", "secrets")
}

impl TokenSecretCache {
    pub fn new(lag: Duration) -> Self {
        TokenSecretCache {
            lag,
            secrets: RwLock::new(BTreeMap::new()),
            applied: watch::Sender::new(0),
        }
    }

    /// Resolves once every change the store made up to revision `rv` is in the copy the
    /// authenticator reads (at once without lag).
    pub async fn caught_up(&self, rv: u64) {
        if self.lag.is_zero() {
            return;
        }
        let mut applied = self.applied.subscribe();
        let _ = applied.wait_for(|done| *done >= rv).await;
    }

    pub fn lag(&self) -> Duration {
        self.lag
    }

    /// The lagged view, or `None` when there is no lag (then the authenticator reads the
    /// store itself).
    pub fn view(&self) -> Option<CacheView<'_>> {
        if self.lag.is_zero() {
            return None;
        }
        Some(CacheView(
            self.secrets.read().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    fn apply(&self, event: &StoredEvent) {
        let name = meta_str(&event.object, "name").to_string();
        let mut secrets = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        match event.event_type {
            EventType::Deleted => {
                secrets.remove(&name);
            }
            EventType::Added | EventType::Modified => {
                secrets.insert(name, event.object.clone());
            }
        }
    }

    /// Seed the copy from the store and subscribe to its changes now; the returned future
    /// then applies each kube-system Secret change `lag` after it happened, until shutdown.
    /// Without lag there is nothing to follow and the future ends at once.
    pub fn follow(
        self: Arc<Self>,
        store: &Store,
        mut shutdown: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let feed = (!self.lag.is_zero()).then(|| {
            let mut st = store.lock();
            let mut secrets = self.secrets.write().unwrap_or_else(|p| p.into_inner());
            for secret in st.list_objects(&secrets_key(), Some(TOKEN_SECRET_NAMESPACE)) {
                secrets.insert(meta_str(secret, "name").to_string(), secret.clone());
            }
            // Everything up to now is in the copy.
            self.applied.send_replace(st.current_rv());
            // The controllers' kind of feed: it does not count as an open watch.
            st.subscribe_all()
        });
        async move {
            let Some(mut feed) = feed else { return };
            let mut pending: VecDeque<(Instant, Arc<StoredEvent>)> = VecDeque::new();
            // The newest revision seen: once nothing is pending, the copy has it all.
            let mut seen = *self.applied.borrow();
            loop {
                let due = pending.front().map(|(at, _)| *at);
                tokio::select! {
                    event = feed.recv() => match event {
                        Some(e) => {
                            seen = seen.max(e.rv);
                            if e.key == secrets_key()
                                && meta_str(&e.object, "namespace") == TOKEN_SECRET_NAMESPACE
                            {
                                // Stamped when seen here, never earlier than the write: the
                                // window is at least `lag` (longer when this task is slow,
                                // as the real cache is under load).
                                pending.push_back((Instant::now() + self.lag, e));
                            } else if pending.is_empty() {
                                self.applied.send_replace(seen);
                            }
                        }
                        None => return,
                    },
                    _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                        let now = Instant::now();
                        while pending.front().is_some_and(|(at, _)| *at <= now) {
                            if let Some((_, e)) = pending.pop_front() {
                                self.apply(&e);
                                self.applied.send_replace(e.rv);
                            }
                        }
                        if pending.is_empty() {
                            self.applied.send_replace(seen);
                        }
                    }
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

impl ObjectReader for CacheView<'_> {
    fn get(&self, key: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<&Value> {
        (*key == secrets_key() && namespace == Some(TOKEN_SECRET_NAMESPACE))
            .then(|| self.0.get(name))
            .flatten()
    }

    fn list(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<&Value> {
        if *key != secrets_key() || namespace.is_some_and(|ns| ns != TOKEN_SECRET_NAMESPACE) {
            return Vec::new();
        }
        self.0.values().collect()
    }
}
