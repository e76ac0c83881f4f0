//! The daemon's API client against a test API server that stalls instead of failing (issue 20 §1),
//! host-side over real HTTP with short limits (1 s request deadline, 2 s watch idle limit; the daemon
//! uses 30 s and 70 s, exercised with the real binary in `tests/e2e_api_faults.rs`):
//!
//! - black hole (accepts, never answers): every request fails at its deadline and is counted as
//!   `rest_client_requests_total{code="<error>"}`; requests work again once it is lifted;
//! - a stalled watch (stops sending without closing) is noticed after the idle limit and re-watched from
//!   its resourceVersion: a change made during the stall reaches the trackers, with no relist;
//! - the request metrics carry component-base's names, labels and buckets.
mod common {
    pub mod apiserver;
}
#[path = "common/fixtures.rs"]
pub mod fixtures;

use common::apiserver::{Kind, Options, TestApiServer};
use fixtures::{json, service};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use kube_proxy_rs::cluster::deadline::Deadlines;
use kube_proxy_rs::cluster::model::{EndpointsMap, ServiceMap};
use kube_proxy_rs::cluster::rate_limit::RateLimitLayer;
use kube_proxy_rs::cluster::rest_metrics::RestClientMetrics;
use kube_proxy_rs::cluster::transport::{self, Transport};
use kube_proxy_rs::cluster::watch::{Notifier, Trackers, start};
use prometheus::{Encoder, Registry, TextEncoder};
use std::time::{Duration, Instant};

const SHORT: Deadlines = Deadlines {
    request: Duration::from_secs(1),
    watch_idle: Duration::from_secs(2),
};

fn client(api: &TestApiServer, registry: &Registry) -> kube::Client {
    let metrics = RestClientMetrics::register(registry).unwrap();
    let config = kube::Config::new(api.url().parse().unwrap());
    let t = Transport {
        rate_limit: RateLimitLayer::new(0.0, 1),
        deadlines: SHORT,
        metrics: &metrics,
    };
    transport::build(config, t).unwrap()
}

fn scrape(registry: &Registry) -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .unwrap();
    String::from_utf8(buf).unwrap()
}

/// The value of the sample `series` (name with labels in the text's order), 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn black_hole_requests_fail_at_their_deadline_and_are_counted() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    api.apply_value(Kind::Service, json(&service("a", "10.96.0.1", 80)))
        .unwrap();
    let registry = Registry::new();
    let services: Api<Service> = Api::all(client(&api, &registry));
    let host = format!("127.0.0.1:{}", api.addr().port());

    api.set_black_hole(true);
    let start = Instant::now();
    let params = ListParams::default();
    let listed = tokio::time::timeout(Duration::from_secs(10), services.list(&params));
    let err = listed.await.expect("the request never ended").unwrap_err();
    let took = start.elapsed();
    println!("black-holed list failed after {took:?}: {err}");
    assert!(
        took >= SHORT.request && took < SHORT.request * 3,
        "failed after {took:?}, deadline {:?}",
        SHORT.request
    );
    assert!(
        err.to_string()
            .contains("no response from the API server within 1s"),
        "{err}"
    );
    assert_eq!(api.swallowed_requests(), 1);
    let text = scrape(&registry);
    let errors =
        format!("rest_client_requests_total{{code=\"<error>\",host=\"{host}\",method=\"GET\"}}");
    assert_eq!(sample(&text, &errors), 1.0, "{text}");

    api.set_black_hole(false);
    let list = services.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let text = scrape(&registry);
    let ok = format!("rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"GET\"}}");
    assert_eq!(sample(&text, &ok), 1.0, "{text}");
    let count =
        format!("rest_client_request_duration_seconds_count{{host=\"{host}\",verb=\"GET\"}}");
    assert_eq!(sample(&text, &count), 2.0, "{text}");
    // component-base's buckets, the black-holed request in the 1-2 s one.
    let bucket = |le: &str| {
        sample(
            &text,
            &format!(
                "rest_client_request_duration_seconds_bucket{{host=\"{host}\",verb=\"GET\",le=\"{le}\"}}"
            ),
        )
    };
    let les = [
        "0.005", "0.025", "0.1", "0.25", "0.5", "1", "2", "4", "8", "15", "30", "60", "+Inf",
    ];
    for le in les {
        assert!(
            text.contains(&format!("verb=\"GET\",le=\"{le}\"}}")),
            "bucket {le} missing:\n{text}"
        );
    }
    assert_eq!(bucket("1") + 1.0, bucket("2"), "{text}");
}

#[tokio::test]
async fn stalled_watch_is_noticed_and_rewatched() {
    // Bookmarks well within the idle limit, as a real API server sends them (about once a minute).
    let bookmarks = Duration::from_millis(500);
    let opts = Options {
        bookmark_interval: bookmarks,
        ..Options::default()
    };
    let api = TestApiServer::start_with("127.0.0.1:0", opts).unwrap();
    api.apply_value(Kind::Service, json(&service("a", "10.96.0.1", 80)))
        .unwrap();
    let registry = Registry::new();
    let trackers = Trackers::new("node-a");
    let (stores, mut synced) = start(
        client(&api, &registry),
        "node-a",
        trackers.clone(),
        Notifier::new(|| {}),
    );
    tokio::time::timeout(Duration::from_secs(10), synced.wait_proxy_ready())
        .await
        .expect("initial lists");
    let (mut services, mut endpoints) = (ServiceMap::default(), EndpointsMap::default());
    trackers.apply(&mut services, &mut endpoints);
    assert_eq!(services.len(), 1);
    assert!(
        api.wait_until_async(Duration::from_secs(5), |a| a.open_watches(Kind::Service)
            == 1)
            .await
    );
    let watches = api.watch_requests(Kind::Service);
    let lists = api.list_requests(Kind::Service);
    // A quiet watch that gets its bookmarks is never taken for a dead one.
    tokio::time::sleep(SHORT.watch_idle * 2).await;
    assert_eq!(api.watch_requests(Kind::Service), watches);

    api.stall_watches();
    let stalled = Instant::now();
    api.apply_value(Kind::Service, json(&service("b", "10.96.0.2", 80)))
        .unwrap();
    let mut arrived = None;
    while stalled.elapsed() < Duration::from_secs(20) {
        trackers.apply(&mut services, &mut endpoints);
        if services.len() == 2 {
            arrived = Some(stalled.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let arrived = arrived.expect("the change made during the stall never arrived");
    println!(
        "stalled watch: change arrived {arrived:?} after the stall (idle limit {:?})",
        SHORT.watch_idle
    );
    assert!(
        arrived >= SHORT.watch_idle - bookmarks,
        "arrived before the idle limit: {arrived:?}"
    );
    assert!(api.watch_requests(Kind::Service) > watches);
    assert_eq!(
        api.list_requests(Kind::Service),
        lists,
        "re-watched from its resourceVersion, no relist"
    );
    stores.abort();
}
