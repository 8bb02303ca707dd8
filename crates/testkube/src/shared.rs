//! The state every connection of one cluster shares (the store, the CA, the authenticators'
//! inputs, faults and counters): what the request handlers read, apart from the server that
//! accepts the connections, so handlers and server do not import each other.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::counters::Counters;
use crate::faults::Faults;
use crate::pki::Ca;
use crate::store::{Store, StoreState};
use crate::types::{ObjectReader, UserInfo};
use crate::{authn, authz};

/// State shared by every connection of one cluster.
pub struct Shared {
    pub store: Arc<Store>,
    pub ca: Ca,
    pub static_tokens: RwLock<BTreeMap<String, UserInfo>>,
    pub faults: Faults,
    pub counters: Counters,
    pub shutdown: watch::Receiver<bool>,
    /// `127.0.0.1:<port>`, as `/api` reports it.
    pub server_address: String,
    /// The bootstrap-token authenticator's lagged view of kube-system Secrets.
    pub token_cache: Arc<authn::TokenSecretCache>,
    /// Issues (TokenRequest) and checks service-account tokens.
    pub sa_issuer: authn::ServiceAccountIssuer,
    /// The authorization webhook asked before Node and RBAC, when one is configured.
    pub authz_webhook: RwLock<Option<Arc<authz::webhook::AuthorizationWebhook>>>,
}

impl Shared {
    /// Run `f` with the bearer-token authenticators as they stand, over the locked store.
    pub fn with_token_authenticators<R>(
        &self,
        st: &StoreState,
        f: impl FnOnce(&authn::TokenAuthenticators<'_>) -> R,
    ) -> R {
        let static_tokens = self.static_tokens.read().unwrap_or_else(|p| p.into_inner());
        let cache = self.token_cache.view();
        let token_secrets: &dyn ObjectReader = match &cache {
            Some(view) => view,
            None => st,
        };
        f(&authn::TokenAuthenticators {
            static_tokens: &static_tokens,
            token_secrets,
            service_accounts: Some(&self.sa_issuer),
            store: st,
        })
    }
}
