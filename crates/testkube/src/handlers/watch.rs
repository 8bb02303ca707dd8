//! Watch streams: one JSON object per line over a chunked 200 response.
//!
//! Resumption: events come from the store's bounded history. A watch from a
//! resourceVersion after which an event of its type has left the history gets HTTP 200
//! with one ERROR event (Status 410 Expired, `too old resource version`) and the stream
//! ends, as the real server answers when its watch cache (one per type) does not reach back
//! that far. Without a resourceVersion (or with "0") the
//! stream starts with a synthetic ADDED per existing object. `sendInitialEvents=true` does
//! the same and ends the initial part with a BOOKMARK annotated `k8s.io/initial-events-end`.
//! With `allowWatchBookmarks`, a BOOKMARK carrying the current global revision is sent every
//! minute.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::Cx;
use super::convert::present;
use super::read::{ListOptions, list_options, matching};
use crate::errors::{FieldError, invalid_options, status_body};
use crate::resources::ResourceInfo;
use crate::store::{EventReceiver, EventType, Store, StoreState, StoredEvent, namespace_of};
use crate::types::ApiError;

/// How often a watch with `allowWatchBookmarks` gets a bookmark (the real server: ~60 s).
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// A watch without `timeoutSeconds` ends after this long (the real server picks 30-60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// A watch ready to stream: the lines to send first, and the live feed.
pub struct WatchStart {
    info: ResourceInfo,
    opts: ListOptions,
    namespace: Option<String>,
    initial: Vec<Bytes>,
    live: Option<EventReceiver>,
    timeout: Duration,
    bookmarks: bool,
    /// `kubectl get -w` asks for Table rows (Accept `as=Table`): each event carries a
    /// one-row Table instead of the object.
    table: bool,
}

/// `{"type":...,"object":...}` and a newline, `type` first as the real server writes it.
fn framed(event_type: &str, object: &[u8]) -> Bytes {
    let mut text = Vec::with_capacity(object.len() + 32);
    text.extend_from_slice(b"{\"type\":\"");
    text.extend_from_slice(event_type.as_bytes());
    text.extend_from_slice(b"\",\"object\":");
    text.extend_from_slice(object);
    text.extend_from_slice(b"}\n");
    Bytes::from(text)
}

fn line(event_type: &str, object: &Value) -> Bytes {
    framed(event_type, &serde_json::to_vec(object).unwrap_or_default())
}

fn bookmark(info: &ResourceInfo, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata}),
    )
}

impl WatchStart {
    fn visible(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| namespace_of(obj) == ns)
            && self.opts.fields.matches(obj)
    }

    fn selected(&self, obj: &Value) -> bool {
        self.visible(obj) && self.opts.labels.matches(obj)
    }

    /// The event a watcher of this selection sees for one change: objects entering or
    /// leaving the label selection appear as ADDED or DELETED, as the watch cache does.
    fn as_table(&self, obj: &Value) -> Value {
        let shown = present(&self.info, obj);
        let rv = shown["metadata"]["resourceVersion"].clone();
        super::read::table(&self.info, &[shown], &rv, jiff::Timestamp::now())
    }

    fn render(&self, event: &StoredEvent) -> Option<Bytes> {
        let now = self.selected(&event.object);
        let before = event.old.as_ref().is_some_and(|o| self.selected(o));
        let event_type = match event.event_type {
            EventType::Added if now => "ADDED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            EventType::Deleted if before || now => "DELETED",
            _ => return None,
        };
        if self.table {
            return Some(line(event_type, &self.as_table(&event.object)));
        }
        let api_version = self.info.api_version();
        let (cached_for, object) = event.rendered.get_or_init(|| {
            let json = serde_json::to_vec(&present(&self.info, &event.object)).unwrap_or_default();
            (api_version.clone(), Bytes::from(json))
        });
        if *cached_for != api_version {
            return Some(line(event_type, &present(&self.info, &event.object)));
        }
        Some(framed(event_type, object))
    }
}

pub fn start(
    st: &mut StoreState,
    cx: &Cx<'_>,
    info: &ResourceInfo,
) -> Result<WatchStart, ApiError> {
    let send_initial = cx
        .query
        .get("sendInitialEvents")
        .map(|v| v == "true" || v == "1");
    if send_initial == Some(true) && cx.query.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(invalid_options(
            "ListOptions",
            &[FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ));
    }
    let opts = list_options(cx, info)?;
    let mut named = opts.fields.clone();
    if let Some(name) = cx.route.name.as_deref() {
        // A watch on .../<resource>/<name> is a watch with metadata.name=<name>.
        named = crate::selectors::FieldSelector::parse(&format!("metadata.name={name}"), info)?;
    }
    let namespace = if info.namespaced {
        cx.route.namespace.clone()
    } else {
        None
    };
    let timeout = cx
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);
    let bookmarks = cx.query.flag("allowWatchBookmarks");
    let mut w = WatchStart {
        info: info.clone(),
        opts: ListOptions {
            fields: named,
            ..opts
        },
        namespace,
        initial: Vec::new(),
        live: None,
        timeout,
        bookmarks,
        table: cx.wants_table(),
    };
    let from_state = match (w.opts.resource_version, send_initial) {
        (_, Some(true)) => true,
        (None, _) | (Some(0), _) => send_initial != Some(false),
        (Some(_), _) => false,
    };
    if from_state {
        for obj in matching(st, info, w.namespace.as_deref(), &w.opts) {
            if w.opts.fields.matches(obj) {
                let shown = if w.table {
                    w.as_table(obj)
                } else {
                    present(info, obj)
                };
                w.initial.push(line("ADDED", &shown));
            }
        }
        if send_initial == Some(true) && bookmarks {
            w.initial.push(bookmark(info, st.current_rv(), true));
        }
        let (_, rx) = st
            .subscribe(&info.storage, None)
            .map_err(|_| unreachable_history())?;
        w.live = Some(rx);
        return Ok(w);
    }
    let Some(since) = w.opts.resource_version.filter(|rv| *rv != 0) else {
        // sendInitialEvents=false without a resourceVersion: start at the most recent state.
        let (_, rx) = st
            .subscribe(&info.storage, None)
            .map_err(|_| unreachable_history())?;
        w.live = Some(rx);
        return Ok(w);
    };
    match st.subscribe(&info.storage, Some(since)) {
        Ok((backlog, rx)) => {
            let lines: Vec<Bytes> = backlog.iter().filter_map(|e| w.render(e)).collect();
            w.initial = lines;
            w.live = Some(rx);
        }
        Err(oldest) => {
            let gone =
                crate::errors::expired(format!("too old resource version: {since} ({oldest})"));
            w.initial.push(line("ERROR", &status_body(&gone)));
        }
    }
    Ok(w)
}

fn unreachable_history() -> ApiError {
    crate::errors::internal_error("watch registration without a resourceVersion cannot expire")
}

/// Why a watch stream ends besides its timeout: shutdown or `cut_watches()`.
pub struct StopSignals {
    pub shutdown: watch::Receiver<bool>,
    pub cut: watch::Receiver<u64>,
}

/// Stream the watch into `out` until it times out, is cut, the server shuts down, or the
/// client goes away.
pub async fn run(
    mut w: WatchStart,
    store: Arc<Store>,
    mut stop: StopSignals,
    out: mpsc::Sender<Bytes>,
) {
    for l in std::mem::take(&mut w.initial) {
        if out.send(l).await.is_err() {
            return;
        }
    }
    let Some(mut live) = w.live.take() else {
        return;
    };
    let deadline = tokio::time::Instant::now() + w.timeout;
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + BOOKMARK_INTERVAL,
        BOOKMARK_INTERVAL,
    );
    stop.cut.mark_unchanged();
    loop {
        tokio::select! {
            event = live.recv() => {
                let Some(event) = event else { return };
                if let Some(l) = w.render(&event)
                    && out.send(l).await.is_err()
                {
                    return;
                }
            }
            _ = ticker.tick(), if w.bookmarks => {
                // Everything up to the bookmark's revision is already queued for this
                // watch (events are queued under the store lock), so drain first.
                let rv = store.lock().current_rv();
                while let Ok(event) = live.try_recv() {
                    if let Some(l) = w.render(&event)
                        && out.send(l).await.is_err()
                    {
                        return;
                    }
                }
                if out.send(bookmark(&w.info, rv, false)).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
            changed = stop.cut.changed() => { let _ = changed; return; }
            changed = stop.shutdown.changed() => { let _ = changed; return; }
            _ = out.closed() => return,
        }
    }
}
