//! Bounded reads from the API server and compressed responses (issue 29 §3, §4), host side, over real
//! HTTP: the daemon's watchers and API client (its own transport: deadlines, size limits, gzip) against
//! the test API server and against a raw TCP server answering hostile bodies.
//!
//! - A watch frame that cannot be decoded ends the watch; the next watch starts from the last
//!   resourceVersion applied, so the change in that frame comes again (no relist), in JSON and protobuf.
//! - A JSON watch line longer than 16 MiB ends the watch with an error naming the limit; the change
//!   comes again on the next watch.
//! - Lists larger than 128 KiB come gzip-compressed when asked, as from kube-apiserver, and read the
//!   same; `disable-compression: true` in the kubeconfig stops asking.
//! - A gzip bomb on a GET, an endless error body, list metadata past its limit: each refused within its
//!   bound.
mod common;
#[path = "common/fixtures.rs"]
pub mod fixtures;
#[path = "common/wait.rs"]
pub mod wait;
#[path = "common/watchers.rs"]
pub mod watchers;

use common::apiserver::{Kind, Options, TestApiServer};
use common::scale;
use fixtures::{json, service};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, ListParams};
use kube_proxy_rs::cluster::deadline::Deadlines;
use kube_proxy_rs::cluster::listwatch::MediaTypes;
use kube_proxy_rs::cluster::listwatch::request::{RequestError, list};
use kube_proxy_rs::cluster::rate_limit::RateLimitLayer;
use kube_proxy_rs::cluster::rest_metrics::RestClientMetrics;
use kube_proxy_rs::cluster::transport::{self, Transport};
use kube_proxy_rs::cluster::watch::Notifier;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wait::eventually;
use watchers::Watchers;

/// Polls of [`eventually`] before a wait fails (1000 × 20 ms).
const TRIES: u32 = 1000;
const NODE: &str = "node-a";

/// A client of `url` built as the daemon builds its own.
fn client(url: &str, disable_compression: bool) -> kube::Client {
    let registry = prometheus::Registry::new();
    let metrics = RestClientMetrics::register(&registry).unwrap();
    let mut config = kube::Config::new(url.parse().unwrap());
    config.disable_compression = disable_compression;
    let t = Transport {
        rate_limit: RateLimitLayer::new(0.0, 1),
        deadlines: Deadlines::default(),
        metrics: &metrics,
    };
    transport::build(config, t).unwrap()
}

/// The daemon's watchers on `client`, reading `media`.
fn watchers(client: kube::Client, media: MediaTypes) -> Watchers {
    Watchers::start(client, NODE, media, Notifier::new(|| {}))
}

/// The port of Service `name`'s first port, if the trackers have it.
fn port(w: &mut Watchers, name: &str) -> Option<u16> {
    let (services, _) = w.apply();
    services
        .iter()
        .find(|(k, _)| k.name.as_str() == name)
        .map(|(_, p)| p.port)
}

/// A frame the watcher cannot decode, in the watch's framing.
fn garbage(media: &MediaTypes) -> Vec<u8> {
    if media.accept().starts_with("application/json") {
        b"{\"type\":\"MODIFIED\",\"object\":{\"metadata\": oops}}\n".to_vec()
    } else {
        // A length-prefixed frame whose field 1 has a length that runs past the frame.
        vec![0, 0, 0, 2, 0x0a, 0xff]
    }
}

/// Waits for the watcher of Services to be watching, then replaces the event of a change with
/// `frame`: the change must still be applied, from a watch that starts at the version before it.
async fn change_survives_a_replaced_frame(media: MediaTypes, frame: Vec<u8>) {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    api.set_bookmark_interval(Duration::from_secs(3600));
    api.apply_value(Kind::Service, json(&service("web", "10.96.0.10", 80)))
        .unwrap();
    api.apply_value(Kind::Node, scale::node()).unwrap();
    let mut w = watchers(client(&api.url(), false), media);
    w.listed(Duration::from_secs(30)).await;
    eventually(TRIES, "a Service watch", || {
        api.open_watches(Kind::Service) == 1
    })
    .await;
    let before = api.resource_version();
    let watches = api.watch_requests(Kind::Service);
    api.replace_next_watch_frame("/services", frame);
    api.apply_value(Kind::Service, json(&service("web", "10.96.0.10", 8080)))
        .unwrap();
    eventually(TRIES, "the replaced frame sent", || {
        api.replaced_watch_frames() == 1
    })
    .await;
    eventually(TRIES, "the change despite the lost frame", || {
        port(&mut w, "web") == Some(8080)
    })
    .await;
    assert!(api.watch_requests(Kind::Service) > watches);
    assert_eq!(api.list_requests(Kind::Service), 1, "no relist");
    let rewatch = format!("resourceVersion={before}");
    assert!(
        api.requests()
            .iter()
            .any(|r| r.contains("/services?") && r.contains("watch=true") && r.contains(&rewatch)),
        "no watch from {before}: {:?}",
        api.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_watch_frame_is_watched_again_json() {
    let media = MediaTypes::json();
    change_survives_a_replaced_frame(media.clone(), garbage(&media)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_watch_frame_is_watched_again_protobuf() {
    let media = MediaTypes::protobuf();
    change_survives_a_replaced_frame(media.clone(), garbage(&media)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_watch_line_past_16_mib_ends_the_watch() {
    // 17 MiB without a newline: the framer gives up at 16 MiB instead of buffering on.
    change_survives_a_replaced_frame(MediaTypes::json(), vec![b' '; 17 << 20]).await;
}

/// Services enough for lists well past 128 KiB in either encoding.
fn load(api: &TestApiServer, n: usize) {
    api.apply_value(Kind::Node, scale::node()).unwrap();
    for i in 0..n {
        api.apply_value(Kind::Service, scale::service(i)).unwrap();
        api.apply_value(Kind::EndpointSlice, scale::slice(i, 2, &[], None))
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_lists_come_compressed_unless_disabled() {
    let opts = Options {
        watch_cache_lists: true,
        ..Options::default()
    };
    let api = TestApiServer::start_with("127.0.0.1:0", opts).unwrap();
    load(&api, 2000);
    for media in [MediaTypes::json(), MediaTypes::protobuf()] {
        for disable in [false, true] {
            let (compressed0, traffic0) = (api.compressed(), api.traffic());
            let asked0 = api.gzip_asked();
            let mut w = watchers(client(&api.url(), disable), media.clone());
            w.listed(Duration::from_secs(30)).await;
            eventually(TRIES, "every Service", || {
                port(&mut w, "svc-1999").is_some() && w.services.len() == 2000
            })
            .await;
            let (responses, plain, gzip) = api.compressed();
            let what = format!("{} disable-compression={disable}", media.accept());
            if disable {
                assert_eq!(api.gzip_asked(), asked0, "{what}: asked for gzip");
                assert_eq!(responses, compressed0.0, "{what}: compressed");
            } else {
                // The Service and EndpointSlice lists, each one response past 128 KiB.
                assert_eq!(responses - compressed0.0, 2, "{what}");
                let (plain, gzip) = (plain - compressed0.1, gzip - compressed0.2);
                let sent = api.traffic().since(traffic0).sent;
                assert!(gzip * 4 < plain, "{what}: {gzip} of {plain}");
                assert!(sent < plain, "{what}: {sent} bytes sent for {plain} listed");
            }
        }
    }
    assert!(api.traffic().connections >= 4);
}

/// A server answering every request on `addr` with `response` (then closing the connection).
async fn canned(response: Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let response = Arc::new(response);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn.write_all(&response).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    url
}

fn http(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_are_refused_within_their_bounds() {
    // A GET answered with a gzip bomb: 32 MiB of spaces in a few KiB.
    let bomb = gzip(&vec![b' '; 32 << 20]);
    let url = canned(http("200 OK", "content-encoding: gzip\r\n", &bomb)).await;
    let nodes: Api<Node> = Api::all(client(&url, false));
    let err = nodes.get("n").await.unwrap_err().to_string();
    assert!(err.contains("exceeds the limit of 16777216 bytes"), "{err}");

    // An error answer whose body never ends (for our purposes): only its first 64 KiB are read.
    let text = "x".repeat(8 << 20);
    let url = canned(http("500 Internal Server Error", "", text.as_bytes())).await;
    let c = client(&url, false);
    let err = list::<Service>(&c, &MediaTypes::json(), &ListParams::default())
        .await
        .unwrap_err();
    match err {
        RequestError::Api(s) => {
            assert_eq!(s.code, 500);
            assert_eq!(s.message.len(), 64 << 10);
        }
        other => panic!("{other}"),
    }

    // A list whose metadata runs past its 1 MiB limit.
    let body = format!(
        r#"{{"kind":"ServiceList","metadata":{{"continue":"{}"}},"items":[]}}"#,
        "c".repeat(2 << 20)
    );
    let url = canned(http("200 OK", "", body.as_bytes())).await;
    let err = list::<Service>(
        &client(&url, false),
        &MediaTypes::json(),
        &ListParams::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("outside its items exceeds the limit"), "{err}");
}
