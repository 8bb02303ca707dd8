//! Watches through kube-rs: event types, resumption from a resourceVersion, the 410 path,
//! label-selection transitions, kube-runtime's watcher (list+watch and streaming lists),
//! cut_watches and shutdown.

use crate::support::{admin, watch_from_now, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent,
    WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;
use testkube::TestCluster;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v1"}}),
    )
    .unwrap()
}

fn describe(e: &WatchEvent<ConfigMap>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Bookmark(_) => "BOOKMARK".into(),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

#[tokio::test]
async fn watch_from_a_resource_version_sees_each_change_once() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let before = cms
        .create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let rv = before.metadata.resource_version.unwrap();

    let mut stream = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("w", json!({})))
        .await
        .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    cms.delete("w", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let e = within("three events", stream.try_next())
            .await
            .unwrap()
            .expect("stream open");
        seen.push(describe(&e));
    }
    assert_eq!(seen, vec!["ADDED w", "MODIFIED w", "DELETED w"]);

    // Resuming from the RV of the first event replays only what came after it.
    let resumed: Vec<String> = {
        let mut s = cms
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        let mut out = Vec::new();
        while out.len() < 3 {
            out.push(describe(
                &within("replay", s.try_next()).await.unwrap().unwrap(),
            ));
        }
        out
    };
    assert_eq!(resumed, seen);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_resource_version_older_than_the_history_gets_410() {
    let cluster = TestCluster::builder()
        .watch_history(5)
        .start()
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut stream = cms
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match within("the ERROR event", stream.try_next()).await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version: 1 ("),
                "{}",
                status.message
            );
        }
        other => panic!("expected an ERROR 410 event, got {other:?}"),
    }
    assert!(
        within("end of stream", stream.try_next())
            .await
            .unwrap()
            .is_none(),
        "the stream ends after the 410"
    );

    let exact = ListParams::default().at("1").matching(VersionMatch::Exact);
    match cms.list(&exact).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert_eq!(
                s.message,
                "The resourceVersion for the provided list is too old."
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn objects_leaving_a_label_selection_are_deleted_for_that_watch() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let mut stream = watch_from_now(&cms, &WatchParams::default().labels("team=a")).await;
    cms.create(&PostParams::default(), &cm("x", json!({"team": "b"})))
        .await
        .unwrap();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "c"}}})),
    )
    .await
    .unwrap();
    let first = describe(
        &within("entering", stream.try_next())
            .await
            .unwrap()
            .unwrap(),
    );
    let second = describe(&within("leaving", stream.try_next()).await.unwrap().unwrap());
    assert_eq!((first.as_str(), second.as_str()), ("ADDED x", "DELETED x"));
    cluster.shutdown().await;
}

async fn next_names(
    stream: &mut (
             impl futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin
         ),
    until_init_done: bool,
) -> Vec<String> {
    let mut names = Vec::new();
    loop {
        match within("watcher event", stream.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            watcher::Event::InitApply(o) => {
                names.push(format!("init {}", o.metadata.name.unwrap()))
            }
            watcher::Event::InitDone if until_init_done => return names,
            watcher::Event::Apply(o) => {
                names.push(format!("apply {}", o.metadata.name.unwrap()));
                return names;
            }
            watcher::Event::Delete(o) => {
                names.push(format!("delete {}", o.metadata.name.unwrap()));
                return names;
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

#[tokio::test]
async fn kube_runtime_watcher_lists_then_watches_in_both_modes() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    cms.create(&PostParams::default(), &cm("pre", json!({})))
        .await
        .unwrap();
    for config in [
        watcher::Config::default(),
        watcher::Config::default().streaming_lists(),
    ] {
        let mut stream = watcher(cms.clone(), config).boxed();
        assert_eq!(next_names(&mut stream, true).await, vec!["init pre"]);
        cms.create(&PostParams::default(), &cm("live", json!({})))
            .await
            .unwrap();
        assert_eq!(next_names(&mut stream, false).await, vec!["apply live"]);
        cms.delete("live", &DeleteParams::default()).await.unwrap();
        assert_eq!(next_names(&mut stream, false).await, vec!["delete live"]);
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn cut_watches_ends_streams_and_the_watcher_recovers() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let mut raw = watch_from_now(&cms, &WatchParams::default()).await;
    let mut runtime = watcher(cms.clone(), watcher::Config::default()).boxed();
    next_names(&mut runtime, true).await;
    // An event through each stream proves both watches are open.
    cms.create(&PostParams::default(), &cm("before-cut", json!({})))
        .await
        .unwrap();
    assert_eq!(
        next_names(&mut runtime, false).await,
        vec!["apply before-cut"]
    );
    assert_eq!(
        describe(&within("raw event", raw.try_next()).await.unwrap().unwrap()),
        "ADDED before-cut"
    );
    assert_eq!(cluster.open_watches(), 2);

    cluster.faults().cut_watches();
    assert!(
        within("raw stream end", raw.try_next())
            .await
            .unwrap()
            .is_none(),
        "the cut stream ends cleanly"
    );
    // kube-runtime re-establishes its watch (re-listing if needed) and keeps delivering.
    cms.create(&PostParams::default(), &cm("after-cut", json!({})))
        .await
        .unwrap();
    let names = next_names(&mut runtime, false).await;
    assert_eq!(
        names.last().map(String::as_str),
        Some("apply after-cut"),
        "{names:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_open_watches() {
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let mut stream = watch_from_now(&cms, &WatchParams::default()).await;
    within("watch registered", async {
        while cluster.open_watches() < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    cluster.shutdown().await;
    let end = within("stream end after shutdown", stream.next()).await;
    assert!(
        !matches!(end, Some(Ok(_))),
        "no event after shutdown, got {end:?}"
    );
}

#[tokio::test]
async fn a_watch_whose_client_went_away_ends_without_waiting_for_an_event() {
    // The real API server cancels a watch's context when its client disconnects (Go's
    // net/http reads the connection in the background); a watch that sees no event of its
    // selection must not stay registered until its timeout, or every change would be fanned
    // out to every client that ever watched.
    let cluster = TestCluster::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin(&cluster).await, "default");
    let params = WatchParams::default().fields("metadata.name=nobody-writes-this");
    let stream = watch_from_now(&cms, &params).await;
    within("watch registered", async {
        while cluster.open_watches() < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    drop(stream);
    within("the abandoned watch ends", async {
        while cluster.open_watches() > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    cluster.shutdown().await;
}
