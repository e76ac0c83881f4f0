//! The watchers against a tiny in-test API server: selectors sent, list + watch events reach the
//! trackers, "listed once" flags, a failing list is retried, invalid objects are counted, Node store.

#[path = "common/fixtures.rs"]
pub mod fixtures;
#[path = "common/wait.rs"]
pub mod wait;

use fixtures::json;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kube_proxy_rs::cluster::model::{EndpointsMap, ServiceMap};
use kube_proxy_rs::cluster::watch::{Notifier, Trackers, start};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Default)]
struct ServerState {
    uris: Mutex<Vec<String>>,
    slice_lists: AtomicUsize,
}

type Body = BoxBody<Bytes, Infallible>;

fn full(v: Value) -> Body {
    let stream = futures::stream::once(async move {
        Ok::<_, Infallible>(Frame::data(Bytes::from(v.to_string())))
    });
    BodyExt::boxed(StreamBody::new(stream))
}

/// A watch response: the given events, then the connection stays open.
fn watch_body(events: Vec<Value>) -> Body {
    let frames = futures::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, Infallible>(Frame::data(Bytes::from(format!("{e}\n"))))),
    )
    .chain(futures::stream::pending());
    BodyExt::boxed(StreamBody::new(frames))
}

/// The fixture Service, with the resource version lists and watches need.
fn svc(name: &str, ip: &str, port: i32) -> Value {
    let mut s = fixtures::service(name, ip, port);
    s.metadata.resource_version = Some("1".into());
    json(&s)
}

/// The fixture EndpointSlice, with the resource version lists and watches need.
fn slice(name: &str, service: &str, ip: &str) -> Value {
    let mut s = fixtures::slice(name, service, ip);
    s.metadata.resource_version = Some("1".into());
    json(&s)
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items})
}

async fn handle(
    state: Arc<ServerState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let uri = req.uri().to_string();
    state.uris.lock().unwrap().push(uri.clone());
    let path = req.uri().path().to_string();
    let watching = uri.contains("watch=true");
    let resp = match (path.as_str(), watching) {
        ("/api/v1/services", false) => full(list(
            "ServiceList",
            "v1",
            vec![svc("a", "10.0.0.1", 80), svc("bad", "10.0.0.2", 0)],
        )),
        ("/api/v1/services", true) => watch_body(vec![
            json!({"type": "ADDED", "object": svc("b", "10.0.0.3", 81)}),
        ]),
        ("/apis/discovery.k8s.io/v1/endpointslices", false) => {
            if state.slice_lists.fetch_add(1, Ordering::SeqCst) == 0 {
                return Ok(Response::builder()
                    .status(500)
                    .header("content-type", "application/json")
                    .body(full(
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "message": "boom", "reason": "InternalError", "code": 500}),
                    ))
                    .unwrap());
            }
            full(list(
                "EndpointSliceList",
                "discovery.k8s.io/v1",
                vec![slice("a-1", "a", "10.1.0.1")],
            ))
        }
        ("/apis/discovery.k8s.io/v1/endpointslices", true) => watch_body(vec![]),
        ("/api/v1/nodes", false) => full(list(
            "NodeList",
            "v1",
            vec![json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": "n1", "resourceVersion": "1",
                                     "labels": {"topology.kubernetes.io/zone": "z9"}},
                        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.10"}]}})],
        )),
        ("/api/v1/nodes", true) => watch_body(vec![]),
        _ => {
            return Ok(Response::builder()
                .status(404)
                .body(full(json!({})))
                .unwrap());
        }
    };
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(resp)
        .unwrap())
}

async fn serve(state: Arc<ServerState>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn watchers_feed_trackers() {
    let state = Arc::new(ServerState::default());
    let url = serve(state.clone()).await;
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let trackers = Trackers::new("n1");
    let syncs = Arc::new(AtomicUsize::new(0));
    let invalid_names = Arc::new(Mutex::new(Vec::new()));
    let s = syncs.clone();
    let inv = invalid_names.clone();
    let notifier = Notifier::new(move || {
        s.fetch_add(1, Ordering::SeqCst);
    })
    .on_invalid(move |e| inv.lock().unwrap().push(e.name.clone()));

    let (stores, mut synced) = start(client, "n1", trackers.clone(), notifier);
    tokio::time::timeout(Duration::from_secs(20), synced.wait_proxy_ready())
        .await
        .expect("services and slices listed");
    assert!(synced.proxy_ready());

    // the failed slice list was retried
    assert!(state.slice_lists.load(Ordering::SeqCst) >= 2);
    // the watch event for b arrives after the list
    let mut smap = ServiceMap::new();
    wait::eventually(300, "service b from the watch", || {
        trackers.services.lock().unwrap().apply(&mut smap);
        smap.len() == 2
    })
    .await;
    let names: Vec<String> = smap.keys().map(|k| k.name.to_string()).collect();
    assert_eq!(names, vec!["a", "b"]);
    assert_eq!(*invalid_names.lock().unwrap(), vec!["bad".to_string()]);
    assert_eq!(stores.invalid_objects.load(Ordering::SeqCst), 1);

    let mut emap = EndpointsMap::new();
    assert_eq!(trackers.pending(), (0, 1));
    let (s, e) = trackers.apply(&mut smap, &mut emap);
    assert!(s.updated_services.is_empty());
    assert_eq!(e.updated_services.len(), 1);
    assert_eq!(emap.len(), 1);
    assert_eq!(trackers.pending(), (0, 0));
    let (svc_total, eps_total) = trackers.totals();
    assert!(svc_total >= 3 && eps_total >= 1, "{svc_total} {eps_total}");
    assert!(syncs.load(Ordering::SeqCst) >= 3);

    let mut node_rx = stores.node.clone();
    let node = tokio::time::timeout(Duration::from_secs(10), node_rx.wait_for(|n| n.is_some()))
        .await
        .unwrap()
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(node.zone.as_deref(), Some("z9"));
    assert_eq!(
        node.internal_ips,
        vec!["10.0.0.10".parse::<std::net::IpAddr>().unwrap()]
    );

    // the selectors went over the wire
    let uris = state.uris.lock().unwrap().clone();
    let svc_list = uris
        .iter()
        .find(|u| u.starts_with("/api/v1/services?") && !u.contains("watch=true"))
        .unwrap();
    assert!(
        svc_list.contains("fieldSelector=spec.clusterIP%21%3DNone"),
        "{svc_list}"
    );
    assert!(
        svc_list.contains(
            "labelSelector=%21service.kubernetes.io%2Fservice-proxy-name%2C%21service.kubernetes.io%2Fheadless"
        ),
        "{svc_list}"
    );
    let node_list = uris
        .iter()
        .find(|u| u.starts_with("/api/v1/nodes?"))
        .unwrap();
    assert!(
        node_list.contains("fieldSelector=metadata.name%3Dn1"),
        "{node_list}"
    );
    stores.abort();
}
