//! The test API server against the real kube-rs client and watcher (host-side, no UML): initial list,
//! events, selectors as kube-proxy uses them, bookmarks, reconnect after dropped watches, relist after 410,
//! pagination, Events recording, YAML loading, and use from a plain thread.
mod common {
    pub mod apiserver;
}
#[path = "common/fixtures.rs"]
pub mod fixtures;
#[path = "common/wait.rs"]
pub mod wait;

use common::apiserver::selector::{FieldSelector, LabelSelector};
use common::apiserver::{Kind, Options, TestApiServer};
use fixtures::{labels, meta, service};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wait::eventually;

/// Polls of [`eventually`] before a wait fails (750 × 20 ms).
const TRIES: u32 = 750;

/// kube-proxy's selectors for Services.
const SVC_LABELS: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
const SVC_FIELDS: &str = "spec.clusterIP!=None";

/// The fixture Service in namespace `ns` with `label_pairs`.
fn svc(ns: &str, name: &str, cluster_ip: &str, port: i32, label_pairs: &[(&str, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            labels: labels(label_pairs),
            ..meta(name)
        },
        ..service(name, cluster_ip, port)
    }
}

fn node(name: &str) -> Node {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
    )
    .unwrap()
}

/// What a watcher has seen: its converged view of Services (by ns/name) and a log of events.
#[derive(Default)]
struct Seen {
    objects: BTreeMap<String, Service>,
    log: Vec<String>,
}

fn key(s: &Service) -> String {
    format!(
        "{}/{}",
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default()
    )
}

/// Runs kube-rs's watcher on Services with kube-proxy's selectors in a task.
fn spawn_service_watcher(client: kube::Client) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    tokio::spawn(async move {
        let cfg = watcher::Config::default()
            .labels(SVC_LABELS)
            .fields(SVC_FIELDS);
        let mut stream = watcher(Api::<Service>::all(client), cfg).boxed();
        let mut buffer = BTreeMap::new();
        while let Some(ev) = stream.next().await {
            let failed = ev.is_err();
            {
                let mut s = out.lock().unwrap();
                match ev {
                    Ok(watcher::Event::Init) => {
                        buffer.clear();
                        s.log.push("init".into());
                    }
                    Ok(watcher::Event::InitApply(o)) => {
                        s.log.push(format!("initapply {}", key(&o)));
                        buffer.insert(key(&o), o);
                    }
                    Ok(watcher::Event::InitDone) => {
                        s.objects = std::mem::take(&mut buffer);
                        s.log.push("initdone".into());
                    }
                    Ok(watcher::Event::Apply(o)) => {
                        s.log.push(format!("apply {}", key(&o)));
                        s.objects.insert(key(&o), o);
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        s.log.push(format!("delete {}", key(&o)));
                        s.objects.remove(&key(&o));
                    }
                    Err(e) => s.log.push(format!("error {e}")),
                }
            }
            if failed {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    seen
}

fn names(seen: &Arc<Mutex<Seen>>) -> Vec<String> {
    seen.lock().unwrap().objects.keys().cloned().collect()
}

fn port_of(seen: &Arc<Mutex<Seen>>, k: &str) -> Option<i32> {
    let s = seen.lock().unwrap();
    Some(s.objects.get(k)?.spec.as_ref()?.ports.as_ref()?[0].port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_lists_watches_and_filters_like_kube_proxy() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    api.apply(&svc("default", "web", "10.96.0.10", 80, &[]))
        .unwrap();
    api.apply(&svc("default", "headless", "None", 80, &[]))
        .unwrap();
    api.apply(&svc(
        "default",
        "other-proxy",
        "10.96.0.11",
        80,
        &[("service.kubernetes.io/service-proxy-name", "x")],
    ))
    .unwrap();
    api.apply(&svc(
        "kube-system",
        "headless-label",
        "10.96.0.12",
        80,
        &[("service.kubernetes.io/headless", "")],
    ))
    .unwrap();
    let seen = spawn_service_watcher(api.client().await.expect("client"));
    eventually(TRIES, "initial list", || names(&seen) == ["default/web"]).await;
    assert_eq!(api.list_requests(Kind::Service), 1);
    eventually(TRIES, "watch opened", || {
        api.open_watches(Kind::Service) == 1
    })
    .await;

    // ADDED, MODIFIED, DELETED.
    api.apply(&svc("kube-system", "dns", "10.96.0.53", 53, &[]))
        .unwrap();
    eventually(TRIES, "added", || {
        names(&seen) == ["default/web", "kube-system/dns"]
    })
    .await;
    api.apply(&svc("default", "web", "10.96.0.10", 8080, &[]))
        .unwrap();
    eventually(TRIES, "modified", || {
        port_of(&seen, "default/web") == Some(8080)
    })
    .await;
    assert!(api.delete(Kind::Service, "kube-system", "dns").is_some());
    assert!(api.delete(Kind::Service, "kube-system", "dns").is_none());
    eventually(TRIES, "deleted", || names(&seen) == ["default/web"]).await;

    // Changes to filtered-out Services are never delivered; a label flip is seen as delete/add.
    api.apply(&svc("default", "headless", "None", 81, &[]))
        .unwrap();
    api.apply(&svc(
        "default",
        "web",
        "10.96.0.10",
        8080,
        &[("service.kubernetes.io/service-proxy-name", "x")],
    ))
    .unwrap();
    eventually(TRIES, "label flip hides", || names(&seen).is_empty()).await;
    api.apply(&svc("default", "web", "10.96.0.10", 9090, &[]))
        .unwrap();
    eventually(TRIES, "label flip shows", || {
        port_of(&seen, "default/web") == Some(9090)
    })
    .await;
    let log = seen.lock().unwrap().log.clone();
    assert!(
        !log.iter()
            .any(|l| l.contains("headless") || l.contains("other-proxy")),
        "{log:?}"
    );
    assert!(log.contains(&"delete default/web".to_string()), "{log:?}");
    assert_eq!(
        api.list_requests(Kind::Service),
        1,
        "no relist expected: {log:?}"
    );

    // The watch request carried kube-proxy's selectors.
    let reqs = api.requests();
    assert!(
        reqs.iter()
            .any(|r| r.contains("watch=true")
                && r.contains("labelSelector=%21service.kubernetes.io")),
        "{reqs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_resume_and_expired_history_relists() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    api.apply(&svc("default", "a", "10.96.1.1", 80, &[]))
        .unwrap();
    api.apply(&svc("default", "b", "10.96.1.2", 80, &[]))
        .unwrap();
    let seen = spawn_service_watcher(api.client().await.expect("client"));
    eventually(TRIES, "initial list", || {
        names(&seen) == ["default/a", "default/b"]
    })
    .await;
    eventually(TRIES, "watch opened", || {
        api.open_watches(Kind::Service) == 1
    })
    .await;

    // Dropped watch: the watcher re-watches from its last RV and sees what changed meanwhile, no relist.
    api.hold_watches(true);
    let watches = api.watch_requests(Kind::Service);
    api.drop_all_watches();
    eventually(TRIES, "watch closed", || {
        api.open_watches(Kind::Service) == 0
    })
    .await;
    eventually(TRIES, "re-watch sent", || {
        api.watch_requests(Kind::Service) > watches
    })
    .await;
    api.apply(&svc("default", "c", "10.96.1.3", 80, &[]))
        .unwrap();
    api.delete(Kind::Service, "default", "a");
    api.hold_watches(false);
    eventually(TRIES, "resumed", || {
        names(&seen) == ["default/b", "default/c"]
    })
    .await;
    assert_eq!(api.list_requests(Kind::Service), 1);
    assert_eq!(
        api.counters()
            .expired_watches
            .get(&Kind::Service)
            .copied()
            .unwrap_or(0),
        0
    );

    // Outage: watches dropped and requests refused with 503; the watcher retries and resumes afterwards.
    eventually(TRIES, "watch reopened", || {
        api.open_watches(Kind::Service) == 1
    })
    .await;
    api.set_unavailable(true);
    api.drop_all_watches();
    eventually(TRIES, "refused retries", || api.counters().refused >= 1).await;
    api.apply(&svc("default", "e", "10.96.1.5", 80, &[]))
        .unwrap();
    api.set_unavailable(false);
    eventually(TRIES, "resumed after outage", || {
        names(&seen) == ["default/b", "default/c", "default/e"]
    })
    .await;
    api.delete(Kind::Service, "default", "e");
    eventually(TRIES, "e deleted", || {
        names(&seen) == ["default/b", "default/c"]
    })
    .await;
    // (kube-rs retries 503 inside its client, so the watcher itself need not report an error.)
    assert_eq!(api.list_requests(Kind::Service), 1);

    // Expired history: the re-watch gets an ERROR 410, the watcher relists and converges.
    eventually(TRIES, "watch reopened", || {
        api.open_watches(Kind::Service) == 1
    })
    .await;
    api.hold_watches(true);
    let watches = api.watch_requests(Kind::Service);
    api.drop_all_watches();
    eventually(TRIES, "re-watch sent", || {
        api.watch_requests(Kind::Service) > watches
    })
    .await;
    api.apply(&svc("default", "d", "10.96.1.4", 80, &[]))
        .unwrap();
    api.delete(Kind::Service, "default", "b");
    api.expire_history();
    api.hold_watches(false);
    eventually(TRIES, "relisted", || {
        names(&seen) == ["default/c", "default/d"]
    })
    .await;
    assert_eq!(api.list_requests(Kind::Service), 2);
    assert_eq!(
        api.counters().expired_watches.get(&Kind::Service).copied(),
        Some(1)
    );
    let log = seen.lock().unwrap().log.clone();
    assert!(
        log.iter()
            .any(|l| l.starts_with("error") && l.contains("Expired")),
        "{log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_watch_bookmarks_initial_events_and_expiry() {
    let api = TestApiServer::start_with(
        "127.0.0.1:0",
        Options {
            bookmark_interval: Duration::from_millis(100),
            ..Options::default()
        },
    )
    .unwrap();
    let client = api.client().await.expect("client");
    let svcs: Api<Service> = Api::all(client);
    let rv0 = api
        .apply(&svc("default", "x", "10.96.2.1", 80, &[]))
        .unwrap();

    // From an RV: replay of newer changes, then bookmarks carrying the current RV.
    let rv1 = api
        .apply(&svc("default", "y", "10.96.2.2", 80, &[]))
        .unwrap();
    let mut stream = svcs
        .watch(&WatchParams::default(), &rv0.to_string())
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(s) => assert_eq!(s.metadata.name.as_deref(), Some("y")),
        other => panic!("expected ADDED y, got {other:?}"),
    }
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv1.to_string()),
        other => panic!("expected BOOKMARK, got {other:?}"),
    }
    drop(stream);

    // Streaming list (sendInitialEvents): ADDED for current objects, then the initial-events-end bookmark.
    let wp = WatchParams::default().initial_events();
    let mut stream = svcs.watch(&wp, "").await.unwrap().boxed();
    let mut added = Vec::new();
    loop {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(s) => added.push(s.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => {
                assert!(
                    b.metadata
                        .annotations
                        .contains_key("k8s.io/initial-events-end")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(added, ["x", "y"]);
    drop(stream);

    // timeoutSeconds ends the stream.
    let started = std::time::Instant::now();
    let mut stream = svcs
        .watch(
            &WatchParams::default().disable_bookmarks().timeout(1),
            &rv1.to_string(),
        )
        .await
        .unwrap()
        .boxed();
    assert!(stream.try_next().await.unwrap().is_none());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // Too old RV after compaction: ERROR 410 Expired.
    api.apply(&svc("default", "z", "10.96.2.3", 80, &[]))
        .unwrap();
    api.expire_history();
    let mut stream = svcs
        .watch(&WatchParams::default(), &rv1.to_string())
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected ERROR 410, got {other:?}"),
    }
    assert!(stream.try_next().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_paginate_select_and_serve_old_versions() {
    let api = TestApiServer::start_with(
        "127.0.0.1:0",
        Options {
            history_limit: 3,
            ..Options::default()
        },
    )
    .unwrap();
    let client = api.client().await.expect("client");
    for i in 0..5 {
        api.apply(&svc(
            "ns1",
            &format!("s{i}"),
            &format!("10.96.3.{i}"),
            80,
            &[],
        ))
        .unwrap();
    }
    api.apply(&svc("ns2", "other", "10.96.3.9", 80, &[]))
        .unwrap();
    let all: Api<Service> = Api::all(client.clone());

    // Pagination with limit/continue returns every object once, in key order, at one RV.
    let mut got = Vec::new();
    let mut lp = ListParams::default().limit(2);
    let mut pages = 0;
    let mut rvs = Vec::new();
    loop {
        let page = all.list(&lp).await.unwrap();
        pages += 1;
        rvs.push(page.metadata.resource_version.clone().unwrap());
        got.extend(page.items.iter().map(|s| s.metadata.name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
        if pages == 1 {
            // A change between pages does not show up in the paginated snapshot.
            api.delete(Kind::Service, "ns1", "s4");
        }
    }
    assert_eq!(got, ["s0", "s1", "s2", "s3", "s4", "other"]);
    assert_eq!(pages, 3);
    assert!(rvs.windows(2).all(|w| w[0] == w[1]), "{rvs:?}");

    // Namespaced list and a field selector.
    let ns2: Api<Service> = Api::namespaced(client.clone(), "ns2");
    let l = ns2.list(&ListParams::default()).await.unwrap();
    assert_eq!(l.items.len(), 1);
    let l = all
        .list(&ListParams::default().fields("metadata.name=s1,metadata.namespace=ns1"))
        .await
        .unwrap();
    assert_eq!(
        l.items
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["s1"]
    );

    // Exact RV lists: a retained RV gives that snapshot, a compacted one HTTP 410.
    let before = api.resource_version();
    api.delete(Kind::Service, "ns1", "s3");
    let old = all
        .list(
            &ListParams::default()
                .at(&before.to_string())
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert!(
        old.items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some("s3"))
    );
    let now = all.list(&ListParams::default()).await.unwrap();
    assert!(
        !now.items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some("s3"))
    );
    let err = all
        .list(
            &ListParams::default()
                .at("101")
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }

    // Nodes are cluster-scoped; kube-proxy watches its own node by name.
    api.apply(&node("n1")).unwrap();
    api.apply(&node("n2")).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let l = nodes
        .list(&ListParams::default().fields("metadata.name=n2"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].metadata.name.as_deref(), Some("n2"));
    assert!(l.items[0].metadata.namespace.is_none());
    assert_eq!(
        nodes.get("n1").await.unwrap().metadata.name.as_deref(),
        Some("n1")
    );
    assert!(matches!(nodes.get("nope").await, Err(kube::Error::Api(s)) if s.code == 404));
    let n: Node = api.get("", "n1").unwrap();
    assert!(n.metadata.uid.is_some() && n.metadata.resource_version.is_some());
}

const SMALL_SCENARIO: &str = r#"apiVersion: v1
kind: Node
metadata: {name: ref-node, labels: {kubernetes.io/hostname: ref-node, kubernetes.io/os: linux}}
spec: {podCIDR: 10.244.0.0/24, podCIDRs: [10.244.0.0/24]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.100.10
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: ref-harness}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
endpoints:
- {addresses: [10.244.0.11], conditions: {ready: true, serving: true, terminating: false}, nodeName: ref-node}
EOF
# trailing notes after the here-document are ignored
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_yaml_and_endpointslice_selector() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    let loaded = api.load_yaml(SMALL_SCENARIO).unwrap();
    assert_eq!(loaded.len(), 3);
    // The reference scenario's objects (committed copy of the shared reference) load as well.
    let reference = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/planner_data/small-scenario/objects.yaml"
    );
    {
        let text = std::fs::read_to_string(reference).expect("committed reference objects.yaml");
        let objs = api.load_yaml(&text).unwrap();
        assert_eq!(
            objs.iter()
                .filter(|(k, _, _)| *k == Kind::EndpointSlice)
                .count(),
            2
        );
    }
    assert!(
        api.load_yaml("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
            .is_err()
    );
    assert!(
        api.load_yaml("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: 3}\n")
            .is_err()
    );

    let client = api.client().await.expect("client");
    let slices: Api<EndpointSlice> = Api::all(client);
    let l = slices
        .list(
            &ListParams::default()
                .labels("kubernetes.io/service-name=web,!service.kubernetes.io/headless"),
        )
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    let eps = &l.items[0].endpoints;
    assert_eq!(eps[0].addresses, ["10.244.0.11"]);
    assert_eq!(eps[0].node_name.as_deref(), Some("ref-node"));
    let l = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=nope"))
        .await
        .unwrap();
    assert!(l.items.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_recorded() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    let client = api.client().await.expect("client");
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "kube-proxy".into(),
            instance: Some("n1".into()),
        },
    );
    let reference = ObjectReference {
        kind: Some("Node".into()),
        name: Some("n1".into()),
        api_version: Some("v1".into()),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Normal,
        reason: "Starting".into(),
        note: Some("Starting kube-proxy.".into()),
        action: "StartKubeProxy".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let events = api.events();
    assert_eq!(events.len(), 1, "{:?}", api.events_json());
    assert_eq!(events[0].reason.as_deref(), Some("Starting"));
    assert_eq!(
        events[0].reporting_controller.as_deref(),
        Some("kube-proxy")
    );
    assert_eq!(
        events[0].regarding.as_ref().unwrap().name.as_deref(),
        Some("n1")
    );
    assert_eq!(api.counters().event_writes, 2);
}

/// One blocking HTTP/1.0 GET; returns the body.
fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

#[test]
fn runs_from_a_plain_thread() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    api.apply(&svc("default", "plain", "10.96.4.1", 80, &[]))
        .unwrap();
    let body = http_get(api.addr(), "/api/v1/namespaces/default/services");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "ServiceList");
    assert_eq!(v["items"][0]["metadata"]["name"], "plain");
    assert_eq!(
        v["metadata"]["resourceVersion"],
        api.resource_version().to_string()
    );
    // A raw watch from RV 0 with a timeout: synthetic ADDED then end of stream.
    let body = http_get(
        api.addr(),
        "/api/v1/services?watch=1&resourceVersion=0&timeoutSeconds=1",
    );
    let lines: Vec<serde_json::Value> = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{body}");
    assert_eq!(lines[0]["type"], "ADDED");
    assert!(http_get(api.addr(), "/version").contains("gitVersion"));
    let unknown = std::thread::spawn({
        let addr = api.addr();
        move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(s, "GET /api/v1/pods HTTP/1.0\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        }
    })
    .join()
    .unwrap();
    assert!(unknown.starts_with("HTTP/1.0 404"), "{unknown}");
    assert_eq!(api.counters().unknown, 1);
}

#[test]
fn selectors_parse_and_match() {
    let o = json!({"metadata": {"name": "web", "namespace": "default", "labels": {"a": "1", "b": "x"}},
                   "spec": {"clusterIP": "None"}});
    for s in [
        "a",
        "!c",
        "a=1",
        "a==1",
        "a!=2",
        "c!=2",
        "a,b=x",
        "b in (x,y)",
        "c notin (x)",
        "",
    ] {
        assert!(LabelSelector::parse(s).unwrap().matches(&o), "{s}");
    }
    for s in ["c", "!a", "a=2", "a!=1", "a,c", "b in (y,z)", "b notin (x)"] {
        assert!(!LabelSelector::parse(s).unwrap().matches(&o), "{s}");
    }
    assert!(LabelSelector::parse("a b").is_err());
    assert!(
        !FieldSelector::parse("spec.clusterIP!=None")
            .unwrap()
            .matches(&o)
    );
    assert!(
        FieldSelector::parse("metadata.name=web,metadata.namespace=default")
            .unwrap()
            .matches(&o)
    );
    assert!(!FieldSelector::parse("metadata.name=x").unwrap().matches(&o));
    assert!(
        FieldSelector::parse("spec.missing!=None")
            .unwrap()
            .matches(&o)
    );
    assert!(FieldSelector::parse("nonsense").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_yaml_applies_only_differences() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    let r = api.sync_yaml(SMALL_SCENARIO).unwrap();
    assert_eq!((r.applied.len(), r.deleted.len(), r.unchanged), (3, 0, 0));
    let rv = api.resource_version();

    // Same text again: nothing changes, no new resourceVersion (no-op updates, as on a real API server).
    let r = api.sync_yaml(SMALL_SCENARIO).unwrap();
    assert_eq!((r.applied.len(), r.deleted.len(), r.unchanged), (0, 0, 3));
    assert_eq!(api.resource_version(), rv);

    // Port change on the Service, EndpointSlice removed: one MODIFIED and one DELETED event.
    let changed =
        SMALL_SCENARIO.replace("port: 80, targetPort: 8080", "port: 8000, targetPort: 8080");
    let without_slice: String = changed.split("---").take(2).collect::<Vec<_>>().join("---");
    let r = api.sync_yaml(&without_slice).unwrap();
    assert_eq!(
        r.applied,
        [(Kind::Service, "default".to_string(), "web".to_string())]
    );
    assert_eq!(
        r.deleted,
        [(
            Kind::EndpointSlice,
            "default".to_string(),
            "web-1".to_string()
        )]
    );
    assert_eq!(r.unchanged, 1);
    assert_eq!(api.count(Kind::EndpointSlice), 0);

    let client = api.client().await.expect("client");
    let wp = WatchParams::default().disable_bookmarks().timeout(1);
    let svc_events: Vec<_> = Api::<Service>::all(client.clone())
        .watch(&wp, &rv.to_string())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(svc_events.len(), 1);
    match &svc_events[0] {
        WatchEvent::Modified(s) => assert_eq!(
            s.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
            8000
        ),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    let slice_events: Vec<_> = Api::<EndpointSlice>::all(client)
        .watch(&wp, &rv.to_string())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(
        matches!(slice_events.as_slice(), [WatchEvent::Deleted(s)] if s.metadata.name.as_deref() == Some("web-1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_state_lists_in_pages_and_converges() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    let n = 3000;
    let started = std::time::Instant::now();
    for i in 0..n {
        let ip = format!("10.97.{}.{}", i / 250, i % 250 + 1);
        api.apply(&svc("bulk", &format!("s{i:05}"), &ip, 80, &[]))
            .unwrap();
    }
    let applied = started.elapsed();
    let seen = spawn_service_watcher(api.client().await.expect("client"));
    eventually(TRIES, "all listed", || {
        seen.lock().unwrap().objects.len() == n
    })
    .await;
    let listed = started.elapsed() - applied;
    // kube-rs pages by 500: the initial list took several pages.
    assert_eq!(api.list_requests(Kind::Service), n.div_ceil(500) as u64);
    api.delete(Kind::Service, "bulk", "s00042");
    eventually(TRIES, "delete seen", || {
        seen.lock().unwrap().objects.len() == n - 1
    })
    .await;
    println!(
        "{n} services: applied in {applied:.2?}, listed by the kube-rs watcher in {listed:.2?}"
    );
}
