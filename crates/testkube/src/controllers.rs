//! The loops that run the kube-controller-manager duties (the pure decisions live in
//! `kcm`) and the garbage collector, and write their results through the store so watchers
//! see them. They react to the store's event feed, like the real controllers' informers, so
//! their writes land shortly after the change that caused them (tests wait on a watch).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::gc;
use crate::kcm::{self, SigningCa};
use crate::shared::Shared;
use crate::store::{EventType, StoreState, StoredEvent, format_time, meta_str};
use crate::types::ResourceKey;

/// Which controller duties run (each on by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duties {
    /// Sign Approved kubelet client CSRs with the cluster CA (`status.certificate`).
    pub csr_signer: bool,
    /// Approve kubelet client CSRs whose requester a SubjectAccessReview allows to
    /// (csrapproving, `sarapprove.go`).
    pub csr_approver: bool,
    /// Keep `jws-kubeconfig-<id>` entries in `kube-public/cluster-info`.
    pub bootstrap_signer: bool,
    /// Delete expired bootstrap token Secrets.
    pub token_cleaner: bool,
    /// Delete dependents of deleted owners; empty terminating namespaces.
    pub garbage_collector: bool,
}

impl Default for Duties {
    fn default() -> Self {
        Duties {
            csr_signer: true,
            csr_approver: true,
            bootstrap_signer: true,
            token_cleaner: true,
            garbage_collector: true,
        }
    }
}

const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

fn csr_key() -> ResourceKey {
    ResourceKey::new("certificates.k8s.io", "certificatesigningrequests")
}

fn secrets_key() -> ResourceKey {
    ResourceKey::new("", "secrets")
}

fn configmaps_key() -> ResourceKey {
    ResourceKey::new("", "configmaps")
}

fn token_secrets(st: &StoreState) -> impl Iterator<Item = &Value> {
    st.list_objects(&secrets_key(), Some("kube-system"))
        .into_iter()
        .filter(|s| s["type"] == TOKEN_SECRET_TYPE)
}

fn touches_tokens(e: &StoredEvent) -> bool {
    let is_token =
        |o: &Value| o["type"] == TOKEN_SECRET_TYPE && meta_str(o, "namespace") == "kube-system";
    (e.key == secrets_key() && (is_token(&e.object) || e.old.as_ref().is_some_and(is_token)))
        || (e.key == configmaps_key()
            && meta_str(&e.object, "namespace") == "kube-public"
            && meta_str(&e.object, "name") == "cluster-info")
}

/// csrapproving: auto-approve the CSRs among `names` (every CSR when `None`) whose
/// requester a SubjectAccessReview allows, with the condition the real approver appends
/// (`Approved`/`True`, reason `AutoApproved`); the server fills the timestamps.
fn approve_csrs(shared: &Shared, names: Option<&[&str]>, now: Timestamp) {
    let mut st = shared.store.lock();
    let names: Vec<String> = match names {
        None => st
            .list_objects(&csr_key(), None)
            .into_iter()
            .map(|c| meta_str(c, "name").to_string())
            .collect(),
        Some(names) => names.iter().map(|n| n.to_string()).collect(),
    };
    for name in names {
        let Some(csr) = st.get_object(&csr_key(), "", &name).cloned() else {
            continue;
        };
        let Some(message) = kcm::auto_approval(&csr, &*st) else {
            continue;
        };
        let t = format_time(now);
        let approved = json!({
            "type": "Approved", "status": "True", "reason": kcm::AUTO_APPROVED,
            "message": message, "lastUpdateTime": t, "lastTransitionTime": t,
        });
        let mut updated = csr;
        match updated["status"]["conditions"].as_array_mut() {
            Some(conditions) => conditions.push(approved),
            None => updated["status"]["conditions"] = json!([approved]),
        }
        st.replace(&csr_key(), updated);
    }
}

/// Issue certificates for the Approved, unsigned CSRs among `names` (every CSR when
/// `None`). The signing itself runs without the store lock; the write only lands if the
/// CSR did not change meanwhile.
fn sign_csrs(shared: &Shared, names: Option<&[&str]>) {
    let candidates: Vec<Value> = {
        let st = shared.store.lock();
        let awaiting = |csr: &&Value| kcm::awaits_signing(csr);
        match names {
            None => st
                .list_objects(&csr_key(), None)
                .into_iter()
                .filter(awaiting)
                .cloned()
                .collect(),
            Some(names) => names
                .iter()
                .filter_map(|name| st.get_object(&csr_key(), "", name))
                .filter(awaiting)
                .cloned()
                .collect(),
        }
    };
    let ca = SigningCa {
        cert_pem: shared.ca.cert_pem(),
        key_pem: shared.ca.key_pem(),
    };
    for csr in candidates {
        let now = Timestamp::now();
        let Some(result) = kcm::sign_csr(&ca, &csr, now) else {
            continue;
        };
        let mut updated = csr.clone();
        match result {
            Ok(pem) => {
                updated["status"]["certificate"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(pem));
            }
            Err(message) => {
                let t = format_time(now);
                let failed = json!({
                    "type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                    "message": message, "lastUpdateTime": t, "lastTransitionTime": t,
                });
                match updated["status"]["conditions"].as_array_mut() {
                    Some(conditions) => conditions.push(failed),
                    None => updated["status"]["conditions"] = json!([failed]),
                }
            }
        }
        let mut st = shared.store.lock();
        let name = meta_str(&csr, "name");
        let unchanged = st.get_object(&csr_key(), "", name).is_some_and(|cur| {
            meta_str(cur, "resourceVersion") == meta_str(&csr, "resourceVersion")
        });
        if unchanged {
            st.replace(&csr_key(), updated);
        }
    }
}

/// Bring cluster-info's `jws-kubeconfig-<id>` keys in line with the token Secrets.
fn sign_cluster_info(st: &mut StoreState, now: Timestamp) {
    let Some(cm) = st
        .get_object(&configmaps_key(), "kube-public", "cluster-info")
        .cloned()
    else {
        return;
    };
    let kubeconfig = cm["data"]["kubeconfig"].as_str().unwrap_or("").to_string();
    let signatures = kcm::cluster_info_signatures(&kubeconfig, token_secrets(st), now);
    let mut data = cm["data"].as_object().cloned().unwrap_or_default();
    data.retain(|k, _| !k.starts_with("jws-kubeconfig-"));
    for (id, jws) in signatures {
        let key = if id.starts_with("jws-kubeconfig-") {
            id
        } else {
            format!("jws-kubeconfig-{id}")
        };
        data.insert(key, json!(jws));
    }
    if Value::Object(data.clone()) != cm["data"] {
        let mut updated = cm;
        updated["data"] = Value::Object(data);
        st.replace(&configmaps_key(), updated);
    }
}

/// Delete expired token Secrets among `names` (every token Secret when `None`); the
/// earliest future expiration among them is when to look again.
fn clean_tokens(st: &mut StoreState, now: Timestamp, names: Option<&[&str]>) -> Option<Timestamp> {
    let (expired, next) = match names {
        None => kcm::expired_tokens(token_secrets(st), now),
        Some(names) => kcm::expired_tokens(
            names
                .iter()
                .filter_map(|n| st.get_object(&secrets_key(), "kube-system", n)),
            now,
        ),
    };
    for name in expired {
        st.remove(&secrets_key(), "kube-system", &name);
    }
    next
}

fn run_gc(st: &mut StoreState, now: Timestamp) {
    // Each pass can make new garbage (a collected owner's dependents); a chain of owners
    // needs one pass per level.
    for _ in 0..64 {
        if !gc::collect(st, now) {
            break;
        }
    }
}

/// Run the enabled duties until shutdown.
pub async fn run(shared: Arc<Shared>, duties: Duties, mut shutdown: watch::Receiver<bool>) {
    let mut feed = shared.store.lock().subscribe_all();
    let mut next_expiry: Option<Timestamp> = None;
    let mut first = true;
    loop {
        let mut events = Vec::new();
        if !first {
            let sleep = match next_expiry {
                Some(t) => {
                    let ms = (t.as_millisecond() - Timestamp::now().as_millisecond()).max(0) as u64;
                    // The real tokencleaner acts about 0.1 s after expiry.
                    Duration::from_millis(ms + 100)
                }
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                event = feed.recv() => match event {
                    Some(e) => events.push(e),
                    None => return,
                },
                _ = tokio::time::sleep(sleep) => {}
                _ = shutdown.changed() => return,
            }
            while let Ok(e) = feed.try_recv() {
                events.push(e);
            }
        }
        let all = first;
        first = false;
        let timer = events.is_empty();
        let touched_csrs: Vec<&str> = events
            .iter()
            .filter(|e| e.key == csr_key() && e.event_type != EventType::Deleted)
            .map(|e| meta_str(&e.object, "name"))
            .collect();
        let tokens = all || timer || events.iter().any(|e| touches_tokens(e));
        if duties.csr_approver && (all || !touched_csrs.is_empty()) {
            approve_csrs(
                &shared,
                (!all).then_some(touched_csrs.as_slice()),
                Timestamp::now(),
            );
        }
        if duties.csr_signer && (all || !touched_csrs.is_empty()) {
            sign_csrs(&shared, (!all).then_some(touched_csrs.as_slice()));
        }
        let now = Timestamp::now();
        let mut st = shared.store.lock();
        if duties.token_cleaner && (all || timer) {
            next_expiry = clean_tokens(&mut st, now, None);
        } else if duties.token_cleaner && tokens {
            // Only the Secrets that changed can have a new expiration: look at them alone
            // (a full pass per change is quadratic in the number of tokens). An expiration
            // that vanished with its Secret just makes the timer fire for nothing.
            let touched: Vec<&str> = events
                .iter()
                .filter(|e| e.key == secrets_key() && e.event_type != EventType::Deleted)
                .map(|e| meta_str(&e.object, "name"))
                .collect();
            let next = clean_tokens(&mut st, now, Some(&touched));
            next_expiry = match (next_expiry, next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if duties.bootstrap_signer && tokens {
            sign_cluster_info(&mut st, now);
        }
        if duties.garbage_collector && st.gc.has_work() {
            run_gc(&mut st, now);
        }
    }
}
