//! The Event publisher (`daemon::events`) against the test API server over real HTTP, which checks
//! every Event against the API's field limits and logs every write:
//! - a repeated Event is one object whose `series.count` is patched, not a new object;
//! - a note of 5 KiB arrives cut to the API's 1 KiB (the server would answer 422 otherwise);
//! - Service Events land in the Service's namespace, Node Events in `default`;
//! - the publisher keeps its own rate: in any stretch of T seconds at most burst + qps × T writes;
//! - the queue is bounded: what does not fit is dropped, and what was queued is all published.
mod common {
    pub mod apiserver;
}
#[path = "common/wait.rs"]
pub mod wait;

use common::apiserver::TestApiServer;
use common::apiserver::event_log::EventWrite;
use kube_proxy_rs::cluster::model::ServiceName;
use kube_proxy_rs::daemon::events::{Events, Limits, Settings};
use std::time::Duration;
use wait::within;

fn service(ns: &str, name: &str) -> ServiceName {
    ServiceName {
        namespace: ns.into(),
        name: name.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_are_one_series_and_notes_are_cut() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    let settings = Settings {
        qps: 100.0,
        burst: 100,
        ..Settings::default()
    };
    let events = Events::start_with(api.client().await.unwrap(), "n1", settings);
    events.warning("Overloaded", "Sync", Some("x".repeat(5000)));
    within(Duration::from_secs(10), "the Event", || {
        api.events().len() == 1
    })
    .await;
    // The second occurrence patches the series at once; the third is only counted (written when
    // the series is refreshed or ends).
    events.warning("Overloaded", "Sync", Some("again".into()));
    let series_of = |api: &TestApiServer| {
        api.events()
            .iter()
            .find_map(|e| e.series.as_ref().map(|s| s.count))
    };
    within(Duration::from_secs(10), "the series", || {
        series_of(&api) == Some(2)
    })
    .await;
    events.warning("Overloaded", "Sync", Some("and again".into()));
    events.service_warning(
        &service("shop", "web"),
        "InvalidAnnotation",
        "Sync",
        "bad".into(),
    );
    within(Duration::from_secs(10), "the Service Event", || {
        api.events().len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(series_of(&api), Some(2));

    let all = api.events();
    let node = all
        .iter()
        .find(|e| e.reason.as_deref() == Some("Overloaded"))
        .unwrap();
    let note = node.note.as_deref().unwrap_or_default();
    assert!(
        note.len() <= 1024 && note.starts_with("xxx"),
        "{} bytes",
        note.len()
    );
    assert!(note.ends_with("…(5000 bytes)"), "{note}");
    assert_eq!(node.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(node.type_.as_deref(), Some("Warning"));
    let svc = all
        .iter()
        .find(|e| e.reason.as_deref() == Some("InvalidAnnotation"))
        .unwrap();
    assert_eq!(svc.metadata.namespace.as_deref(), Some("shop"));
    let regarding = svc.regarding.as_ref().unwrap();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("Service"), Some("web"))
    );
    // One create and one patch for the Node Event, one create for the Service's.
    let writes = api.event_writes();
    let methods: Vec<(&str, Option<i64>, u16)> = writes
        .iter()
        .map(|w| (w.method.as_str(), w.series_count, w.status))
        .collect();
    assert_eq!(writes.len(), 3, "{methods:?}");
    assert!(writes.iter().all(|w| w.status < 300), "{methods:?}");
    assert!(methods.contains(&("PATCH", Some(2), 200)), "{methods:?}");
    assert_eq!(events.queued(), 0);
}

/// The stretch of `writes` that most exceeds `burst` + `qps` × its length.
fn worst_excess(writes: &[EventWrite], burst: f64, qps: f64) -> f64 {
    let mut worst = f64::MIN;
    for (i, a) in writes.iter().enumerate() {
        for (j, b) in writes.iter().enumerate().skip(i) {
            let allowed = burst + qps * (b.at - a.at).as_secs_f64();
            worst = worst.max((j - i + 1) as f64 - allowed);
        }
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publisher_keeps_its_own_rate_and_a_bounded_queue() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    let settings = Settings {
        qps: 10.0,
        burst: 5,
        limits: Limits {
            queue: 30,
            ..Limits::default()
        },
    };
    let events = Events::start_with(api.client().await.unwrap(), "n1", settings);
    for i in 0..200 {
        let svc = service("default", &format!("s{i}"));
        events.service_warning(&svc, "InvalidAnnotation", "Sync", format!("bad {i}"));
    }
    assert!(events.queued() <= 30, "{}", events.queued());
    // The 30 that fit (a few more if the publisher took some while they were recorded) take about
    // (30 - 5) / 10 s; the rest are dropped, not queued.
    within(Duration::from_secs(20), "30 Events", || {
        api.events().len() >= 30
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes = api.event_writes();
    assert!((30..=35).contains(&writes.len()), "{} writes", writes.len());
    assert_eq!(events.queued(), 0);
    let span = (writes[29].at - writes[0].at).as_secs_f64();
    assert!(
        span >= 2.0,
        "30 writes in {span:.2} s: faster than 5 + 10/s"
    );
    let excess = worst_excess(&writes, 5.0, 10.0);
    assert!(excess <= 1.0, "{excess} writes over the bound");
}
