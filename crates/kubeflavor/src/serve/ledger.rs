//! Each grant to a node administrator, and a rule's `maxLiveTokens`: the administrator's
//! ledger (an AdministratorLedger per Roster
//! and identity) is read, pruned of tokens expired or used up (their bindings reached the
//! Roster's max nodes), checked against the limit and given a reservation, all in one
//! write carrying the resourceVersion read: two replicas minting for one administrator at
//! once cannot both pass the last free place. The reservation expires with the token it
//! stands for; once minted it is renamed to the token's id (for the used-up check), and if
//! that write fails the reservation still counts until then.
//!
//! The join-token API's identity may read token Secrets never: this is how it knows what an
//! administrator holds.

use std::collections::BTreeSet;
use std::num::NonZeroU32;

use jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kubeflavor_cluster::crd::roster::{
    AdministratorLedger, AdministratorLedgerSpec, LedgerToken, ledger_name,
};
use kubeflavor_cluster::crd::{BINDING_TOKEN_ID_LABEL, FlavorBinding};
use kubeflavor_core::mint::roster::{
    IdentityLimitError, IdentityLimits, RESERVATION_PREFIX, live_tokens, within_identity_limits,
};

use crate::connect::Cluster;

/// How many times a write refused as stale is tried again.
const ATTEMPTS: usize = 5;

/// Why no place was reserved.
#[derive(Debug)]
pub enum LedgerError {
    Limit(IdentityLimitError),
    Api(String),
}

/// A place held in a ledger for a token being minted.
pub struct Reservation {
    name: String,
    id: String,
}

/// What [`record`] wrote.
pub struct Recorded {
    /// The place held for the token, when the rule limits live tokens.
    pub reservation: Option<Reservation>,
    /// The rule had never granted this administrator a token.
    pub first_for_rule: bool,
}

/// A grant of `rule` to `identity` under `roster`, in the administrator's ledger, before the
/// token is minted: the rule among those that granted them (for the Roster's count of
/// distinct administrators), and when the rule limits live tokens or nodes, the ledger
/// pruned, checked against `limits` (with `bound_nodes` the nodes bound so far, each token
/// binding up to `max_nodes`) and holding a reservation that expires at `expires`. One
/// read and one write, so replicas cannot both pass the last place.
pub async fn record(
    cluster: &Cluster,
    roster: &str,
    (issuer, subject): (&str, &str),
    rule: &str,
    (limits, bound_nodes): (&IdentityLimits, u32),
    max_nodes: NonZeroU32,
    expires: Timestamp,
) -> Result<Recorded, LedgerError> {
    // Tokens are kept whenever a limit counts them: maxLiveTokens, and maxNodes (which
    // counts what unused tokens can still bind).
    let tracked = limits.live_tokens.is_some() || limits.bound_nodes.is_some();
    let api: Api<AdministratorLedger> = Api::all(cluster.client.clone());
    let name = ledger_name(roster, issuer, subject);
    let id = format!(
        "{RESERVATION_PREFIX}{}",
        kubeflavor_core::token::BootstrapToken::generate()
            .map_err(|e| LedgerError::Api(e.to_string()))?
            .id()
    );
    for _ in 0..ATTEMPTS {
        let stored = api
            .get_opt(&name)
            .await
            .map_err(|e| LedgerError::Api(e.to_string()))?;
        let mut ledger = stored.clone().unwrap_or_else(|| AdministratorLedger {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            spec: AdministratorLedgerSpec {
                roster: roster.to_string(),
                issuer: issuer.to_string(),
                subject: subject.to_string(),
                tokens: Vec::new(),
                rules: Vec::new(),
            },
        });
        let entries: Vec<(String, Timestamp)> = ledger
            .spec
            .tokens
            .iter()
            .map(|t| (t.id.clone(), t.expires))
            .collect();
        let spent = spent(cluster, &entries, max_nodes).await?;
        let live: Vec<(String, Timestamp)> = live_tokens(&entries, Timestamp::now(), &spent)
            .into_iter()
            .cloned()
            .collect();
        within_identity_limits(
            limits,
            u32::try_from(live.len()).unwrap_or(u32::MAX),
            bound_nodes,
            max_nodes,
        )
        .map_err(LedgerError::Limit)?;
        ledger.spec.tokens = live
            .into_iter()
            .map(|(id, expires)| LedgerToken { id, expires })
            .collect();
        if tracked {
            ledger.spec.tokens.push(LedgerToken {
                id: id.clone(),
                expires,
            });
        }
        let first_for_rule = !ledger.spec.rules.iter().any(|r| r == rule);
        if first_for_rule {
            ledger.spec.rules.push(rule.to_string());
        }
        let written = match stored {
            None => api.create(&PostParams::default(), &ledger).await,
            Some(_) => api.replace(&name, &PostParams::default(), &ledger).await,
        };
        match written {
            Ok(_) => {
                return Ok(Recorded {
                    reservation: tracked.then_some(Reservation { name, id }),
                    first_for_rule,
                });
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(LedgerError::Api(e.to_string())),
        }
    }
    Err(LedgerError::Api(format!(
        "AdministratorLedger {name} kept changing ({ATTEMPTS} writes refused as stale)"
    )))
}

/// Ids among `entries` whose bindings reached `max_nodes` (used up). Reservations have
/// none. One list per token: at most the rule's limit of them.
async fn spent(
    cluster: &Cluster,
    entries: &[(String, Timestamp)],
    max_nodes: NonZeroU32,
) -> Result<BTreeSet<String>, LedgerError> {
    let bindings: Api<FlavorBinding> = Api::all(cluster.client.clone());
    let mut spent = BTreeSet::new();
    for (id, _) in entries {
        if id.starts_with(RESERVATION_PREFIX) {
            continue;
        }
        let bound = bindings
            .list_metadata(&ListParams::default().labels(&format!("{BINDING_TOKEN_ID_LABEL}={id}")))
            .await
            .map_err(|e| LedgerError::Api(e.to_string()))?
            .items
            .len();
        if bound >= max_nodes.get() as usize {
            spent.insert(id.clone());
        }
    }
    Ok(spent)
}

impl Reservation {
    /// The reservation becomes the minted token `token_id` (best effort: when this cannot
    /// be written, the reservation counts until the token expires anyway).
    pub async fn minted(self, cluster: &Cluster, token_id: &str) {
        self.rewrite(cluster, Some(token_id)).await;
    }

    /// The reservation is given back: nothing was minted (best effort, as above).
    pub async fn release(self, cluster: &Cluster) {
        self.rewrite(cluster, None).await;
    }

    async fn rewrite(self, cluster: &Cluster, token_id: Option<&str>) {
        let api: Api<AdministratorLedger> = Api::all(cluster.client.clone());
        for _ in 0..ATTEMPTS {
            let Ok(mut ledger) = api.get(&self.name).await else {
                return;
            };
            match token_id {
                Some(token) => ledger
                    .spec
                    .tokens
                    .iter_mut()
                    .filter(|t| t.id == self.id)
                    .for_each(|t| t.id = token.to_string()),
                None => ledger.spec.tokens.retain(|t| t.id != self.id),
            }
            match api
                .replace(&self.name, &PostParams::default(), &ledger)
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => {
                    tracing::warn!(ledger = %self.name, error = %e, "an AdministratorLedger was not updated; its reservation counts until the token expires");
                    return;
                }
            }
        }
    }
}
