//! The daemon's API connections against a test API server over TLS (issue 29 §4), host-side over real
//! HTTP/2 and HTTP/1.1 with the daemon's own clients (`build_clients`' shape: the watchers' client and the
//! Event publisher's on one `Connections`):
//!
//! - a server offering `h2` by ALPN gets one connection for every list, watch and Event write, as
//!   client-go's shared transport makes; a TLS server offering only `http/1.1` still works, on one
//!   connection per concurrent request;
//! - a peer that stops answering (its connection frozen: TCP still acknowledges, nothing is read or
//!   written) is noticed by the HTTP/2 health pings (1 s + 1 s here, client-go's 30 s + 15 s in the
//!   daemon), well before the watch idle limit, and the watches resume on a new connection from their
//!   resourceVersion.
mod common {
    pub mod apiserver;
}
#[path = "common/fixtures.rs"]
pub mod fixtures;

use common::apiserver::tls::Alpn;
use common::apiserver::{Kind, Options, TestApiServer};
use fixtures::{json, service};
use kube_proxy_rs::cluster::deadline::Deadlines;
use kube_proxy_rs::cluster::http2::Http2;
use kube_proxy_rs::cluster::model::{EndpointsMap, ServiceMap};
use kube_proxy_rs::cluster::rate_limit::RateLimitLayer;
use kube_proxy_rs::cluster::rest_metrics::RestClientMetrics;
use kube_proxy_rs::cluster::transport::{Connections, Transport};
use kube_proxy_rs::cluster::watch::{Notifier, Stores, Trackers, start};
use kube_proxy_rs::daemon::events::Events;
use prometheus::Registry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Far beyond how long the tests wait, so that only the pings can notice a frozen connection.
const DEADLINES: Deadlines = Deadlines {
    request: Duration::from_secs(30),
    watch_idle: Duration::from_secs(60),
};

fn server(alpn: Alpn) -> TestApiServer {
    let opts = Options {
        tls: Some(alpn),
        bookmark_interval: Duration::from_millis(500),
        ..Options::default()
    };
    let api = TestApiServer::start_with("127.0.0.1:0", opts).expect("test API server");
    api.apply_value(Kind::Service, json(&service("a", "10.96.0.1", 80)))
        .unwrap();
    api
}

/// The watchers' and the Event publisher's clients on one pool, as the daemon builds them.
async fn clients(api: &TestApiServer, http2: Http2) -> (kube::Client, kube::Client) {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&api.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let metrics = RestClientMetrics::register(&Registry::new()).unwrap();
    let connections = Connections::new(config, http2).unwrap();
    let client = |rate_limit| {
        connections
            .client(Transport {
                rate_limit,
                deadlines: DEADLINES,
                metrics: &metrics,
            })
            .unwrap()
    };
    (
        client(RateLimitLayer::new(0.0, 1)),
        client(RateLimitLayer::new(0.0, 1)),
    )
}

/// Starts the watchers and waits for their first lists and their three watches.
async fn watch(api: &TestApiServer, client: kube::Client) -> (Stores, Arc<Trackers>) {
    let trackers = Trackers::new("node-a");
    let (stores, mut synced) = start(client, "node-a", trackers.clone(), Notifier::new(|| {}));
    tokio::time::timeout(Duration::from_secs(10), synced.wait_proxy_ready())
        .await
        .expect("initial lists");
    let watching = |a: &TestApiServer| {
        [Kind::Service, Kind::EndpointSlice, Kind::Node]
            .iter()
            .all(|k| a.open_watches(*k) >= 1)
    };
    assert!(
        api.wait_until_async(Duration::from_secs(10), watching)
            .await
    );
    (stores, trackers)
}

/// How long until the trackers hold `n` Services (`None`: not within `limit`).
async fn services_within(trackers: &Trackers, n: usize, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let (mut services, mut endpoints) = (ServiceMap::default(), EndpointsMap::default());
    while start.elapsed() < limit {
        trackers.apply(&mut services, &mut endpoints);
        if services.len() == n {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Lists, three watches and an Event write; returns the connections the server accepted.
async fn connections_for_everything(alpn: Alpn) -> u64 {
    let api = server(alpn);
    let (main, events) = clients(&api, Http2::default()).await;
    let (stores, trackers) = watch(&api, main).await;
    let publisher = Events::start(events, "node-a");
    publisher.normal("Starting", "StartKubeProxy", None);
    assert!(
        api.wait_until_async(Duration::from_secs(10), |a| !a.event_writes().is_empty())
            .await,
        "the Event was not written"
    );
    api.apply_value(Kind::Service, json(&service("b", "10.96.0.2", 80)))
        .unwrap();
    assert!(
        services_within(&trackers, 2, Duration::from_secs(10))
            .await
            .is_some()
    );
    stores.abort();
    let t = api.traffic();
    println!("{alpn:?}: {t:?}");
    t.connections
}

#[tokio::test]
async fn h2_carries_lists_watches_and_events_on_one_connection() {
    assert_eq!(connections_for_everything(Alpn::H2).await, 1);
}

#[tokio::test]
async fn a_server_without_h2_gets_http1_connections() {
    // Three watches open at once need three connections, and the lists and the Event more.
    assert!(connections_for_everything(Alpn::Http1).await >= 4);
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_dropped_and_watches_resume() {
    let api = server(Alpn::H2);
    let pings = Http2 {
        read_idle: Some(Duration::from_secs(1)),
        ping_timeout: Duration::from_secs(1),
        ..Http2::default()
    };
    let (main, _events) = clients(&api, pings).await;
    let (stores, trackers) = watch(&api, main).await;
    assert_eq!(api.traffic().connections, 1);
    let lists = api.list_requests(Kind::Service);

    api.freeze_connections();
    api.apply_value(Kind::Service, json(&service("b", "10.96.0.2", 80)))
        .unwrap();
    let arrived = services_within(&trackers, 2, Duration::from_secs(20))
        .await
        .expect("the change made after the freeze never arrived");
    println!("frozen connection: change arrived after {arrived:?} (pings 1 s + 1 s)");
    assert!(arrived < DEADLINES.watch_idle / 2, "{arrived:?}");
    assert_eq!(api.traffic().connections, 2, "one new connection");
    assert_eq!(
        api.list_requests(Kind::Service),
        lists,
        "re-watched from its resourceVersion, no relist"
    );
    stores.abort();
}
