//! Protobuf lists and watches (issue 22), host side, over real HTTP against the test API server:
//! the daemon's watchers read the same objects to the same state in protobuf and in JSON; protobuf
//! is what they ask for by default and JSON what they get when configured or when the server does not
//! offer protobuf; wire-level oddities never break a protobuf list or watch (unknown fields, wrong
//! wire types in unread fields, invalid UTF-8), while an object that truly cannot be read is skipped
//! with a warning, the metric and an Event; dropped watches resume and expired history relists in
//! protobuf as in JSON.
mod common;
#[path = "common/fixtures.rs"]
pub mod fixtures;
#[path = "common/wait.rs"]
pub mod wait;
#[path = "common/watchers.rs"]
pub mod watchers;

use common::apiserver::proto::{APPEND_ANNOTATION, Wire};
use common::apiserver::{Kind, Options, TestApiServer};
use common::scale;
use fixtures::{json, service};
use kube_proxy_rs::cluster::listwatch::MediaTypes;
use kube_proxy_rs::cluster::proto::wire::{put_bytes, put_varint};
use serde_json::{Value, json};
use std::time::Duration;
use wait::eventually;
use watchers::Watchers;

/// Polls of [`eventually`] before a wait fails (1000 × 20 ms).
const TRIES: u32 = 1000;

const NODE: &str = "node-a";

/// The daemon's watchers on `api` reading `media`, reporting unreadable objects as the daemon does.
async fn watchers(api: &TestApiServer, media: MediaTypes) -> Watchers {
    Watchers::reporting(api.client().await.expect("client"), NODE, media)
}

/// Objects with most of what kube-proxy reads and much it does not: managed fields, conditions
/// (one without a time), load-balancer ingress, dual stack, topology hints, terminating endpoints.
fn rich_objects() -> Vec<(Kind, Value)> {
    let managed = json!([{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
        "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:ports": {}}}}]);
    let svc = json!({"metadata": {"name": "rich", "namespace": "ns", "managedFields": managed,
            "labels": {"app": "rich"}, "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
            "kube-router.io/service.scheduler": "lc"}, "uid": "u-1", "generation": 3},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7", "fd00::7"],
            "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
            "externalIPs": ["192.0.2.7"], "loadBalancerSourceRanges": ["198.51.100.0/24"],
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
            "internalTrafficPolicy": "Local", "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "selector": {"app": "rich"},
            "ports": [{"name": "http", "port": 80, "targetPort": "web", "nodePort": 31000, "protocol": "TCP",
                       "appProtocol": "http"},
                      {"name": "dns", "port": 53, "targetPort": 5353, "nodePort": 31001, "protocol": "UDP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ipMode": "Proxy",
                "ports": [{"port": 80, "protocol": "TCP"}]}, {"hostname": "lb.example"}]},
            "conditions": [{"type": "Ready", "status": "True", "reason": "x", "message": "",
                "lastTransitionTime": null}]}});
    let endpoint = |ip: &str, node: &str, ready: bool, zone: &str| {
        json!({"addresses": [ip], "conditions": {"ready": ready, "serving": true, "terminating": !ready},
               "nodeName": node, "zone": zone, "hints": {"forZones": [{"name": zone}], "forNodes": [{"name": node}]},
               "targetRef": {"kind": "Pod", "namespace": "ns", "name": format!("pod-{ip}")}})
    };
    let slice = |name: &str, family: &str, ips: [&str; 2]| {
        json!({"metadata": {"name": name, "namespace": "ns", "managedFields": managed,
                "labels": {"kubernetes.io/service-name": "rich"},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-02T03:04:05Z"}},
            "addressType": family,
            "endpoints": [endpoint(ips[0], NODE, true, "z1"), endpoint(ips[1], "node-b", false, "z2")],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"},
                      {"name": "dns", "port": 5353, "protocol": "UDP"}]})
    };
    let node = json!({"metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24", "fd01::/64"],
            "taints": [{"key": "k", "value": "v", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.10"},
                {"type": "InternalIP", "address": "fd02::10"}, {"type": "Hostname", "address": NODE}],
            "capacity": {"cpu": "2"}, "conditions": [{"type": "Ready", "status": "True",
                "lastHeartbeatTime": "2026-01-02T03:04:05Z"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "architecture": "amd64"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
    vec![
        (Kind::Service, svc),
        (
            Kind::EndpointSlice,
            slice("rich-4", "IPv4", ["10.1.7.1", "10.1.7.2"]),
        ),
        (
            Kind::EndpointSlice,
            slice("rich-6", "IPv6", ["fd03::1", "fd03::2"]),
        ),
        (Kind::Node, node),
    ]
}

fn load_everything(api: &TestApiServer) {
    for (kind, v) in rich_objects() {
        api.apply_value(kind, v).unwrap();
    }
    let reference = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/planner_data/small-scenario/objects.yaml"
    );
    api.load_yaml(&std::fs::read_to_string(reference).unwrap())
        .unwrap();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo-cluster.yaml");
    let demo = std::fs::read_to_string(demo).unwrap();
    // The demo's Node is another node; its Services and slices join the set.
    let docs = common::apiserver::parse_yaml(&demo).unwrap();
    for (kind, v) in docs.into_iter().filter(|(k, _)| *k != Kind::Node) {
        api.apply_value(kind, v).unwrap();
    }
    for i in 0..600 {
        api.apply_value(Kind::Service, scale::service(i)).unwrap();
        api.apply_value(Kind::EndpointSlice, scale::slice(i, 3, &[], None))
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_objects_read_the_same_in_protobuf_and_json() {
    // A page size below the object count: several protobuf and JSON pages.
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    load_everything(&api);
    let mut proto = watchers(&api, MediaTypes::default()).await;
    let mut json = watchers(&api, MediaTypes::json()).await;
    proto.listed(Duration::from_secs(20)).await;
    json.listed(Duration::from_secs(20)).await;
    eventually(TRIES, "both Nodes", || {
        proto.node().is_some() && json.node().is_some()
    })
    .await;
    let (ps, pe) = proto.apply();
    let (ps, pe) = (ps.clone(), pe.clone());
    let (js, je) = json.apply();
    assert!(
        ps.len() > 600 && pe.len() > 600,
        "{} {}",
        ps.len(),
        pe.len()
    );
    assert_eq!(&ps, js);
    assert_eq!(&pe, je);
    assert_eq!(proto.node(), json.node());
    let node = proto.node().unwrap();
    assert_eq!(node.internal_ips.len(), 2);
    assert_eq!(node.pod_cidrs.len(), 2);
    assert_eq!((proto.invalid(), json.invalid()), (0, 0));
    // Each side was answered in its own encoding, pages included (500 per page, >600 objects).
    for kind in [Kind::Service, Kind::EndpointSlice, Kind::Node] {
        assert!(api.responses(kind, Wire::Protobuf) >= 2, "{kind:?}");
        assert!(api.responses(kind, Wire::Json) >= 2, "{kind:?}");
    }
    assert!(api.responses(Kind::Service, Wire::Protobuf) >= 3);

    // Changes on the watches: an edited slice, a deleted and a new Service, a Node update.
    let mut edited = scale::slice(7, 3, &[scale::extra_ip(1)], None);
    edited["endpoints"][0]["conditions"]["ready"] = json!(false);
    api.apply_value(Kind::EndpointSlice, edited).unwrap();
    api.delete(Kind::Service, scale::NAMESPACE, &scale::service_name(8));
    api.apply_value(Kind::Service, scale::service(400)).unwrap();
    api.apply_value(Kind::EndpointSlice, scale::slice(400, 2, &[], None))
        .unwrap();
    let mut node = rich_objects().pop().unwrap().1;
    node["metadata"]["labels"]["extra"] = json!("yes");
    api.apply_value(Kind::Node, node).unwrap();
    // Every change seen: the Node label, svc-400 and its slice, svc-8 gone, and svc-7's edited slice
    // (its endpoint not ready any more).
    let converged = |w: &mut Watchers| {
        let labelled = w.node().is_some_and(|n| n.labels.contains_key("extra"));
        let (s, e) = w.apply();
        let svc400 = s.keys().any(|k| k.name.as_str() == "svc-400");
        let eps400 = e.keys().any(|k| k.name.as_str() == "svc-400");
        let edited = e
            .iter()
            .filter(|(k, _)| k.name.as_str() == "svc-7")
            .any(|(_, eps)| eps.iter().any(|ep| !ep.ready));
        labelled && svc400 && eps400 && edited && !s.keys().any(|k| k.name.as_str() == "svc-8")
    };
    eventually(TRIES, "protobuf watchers converge", || {
        converged(&mut proto)
    })
    .await;
    eventually(TRIES, "JSON watchers converge", || converged(&mut json)).await;
    let (ps, pe) = proto.apply();
    let (ps, pe) = (ps.clone(), pe.clone());
    let (js, je) = json.apply();
    assert_eq!(&ps, js);
    assert_eq!(&pe, je);
    assert_eq!(proto.node(), json.node());
    let text = proto.metrics.encode().unwrap();
    assert!(!text.contains("invalid_objects_total{"), "{text}");
}

/// `tag` as a length-delimited field holding `inner`.
fn msg(tag: u32, inner: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, tag, inner);
    out
}

/// `tag` as a varint field.
fn var(tag: u32, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, u64::from(tag) << 3);
    put_varint(&mut out, v);
    out
}

/// A stored object whose protobuf encoding gets `extra` appended (merged by protobuf).
fn with_wire(mut v: Value, extra: &[u8]) -> Value {
    let hex: String = extra.iter().map(|b| format!("{b:02x}")).collect();
    v["metadata"]["annotations"][APPEND_ANNOTATION] = json!(hex);
    v
}

fn node(label: &str) -> Value {
    json!({"metadata": {"name": NODE, "labels": {"test": label}},
           "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.10"}]}})
}

// Field numbers of k8s.io/api's generated.proto, for the appended oddities: Service {spec 2,
// status 3}, ServiceSpec {ports 1, selector 2}, ServicePort {port 3}, ObjectMeta {labels 11},
// EndpointSlice {endpoints 2}, Endpoint {addresses 1}, Node {status 3}, NodeStatus {addresses 5},
// NodeAddress {address 2}.

/// Readable: an unknown top-level field, an unknown field and a wrong wire type in unread spec
/// fields (the selector as a number).
fn odd_but_readable() -> Vec<u8> {
    let mut spec = msg(900, b"from the future");
    spec.extend(var(2, 5));
    let mut out = var(99, 7);
    out.extend(msg(2, &spec));
    out
}

/// Unreadable: a port (a number) sent as bytes.
fn port_as_bytes() -> Vec<u8> {
    msg(2, &msg(1, &msg(3, b"x")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_oddities_never_break_the_watch() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    api.apply_value(Kind::Service, json(&service("good-1", "10.0.0.1", 80)))
        .unwrap();
    api.apply_value(
        Kind::Service,
        with_wire(json(&service("odd", "10.0.0.2", 81)), &odd_but_readable()),
    )
    .unwrap();
    api.apply_value(
        Kind::Service,
        with_wire(
            json(&service("unreadable", "10.0.0.3", 82)),
            &port_as_bytes(),
        ),
    )
    .unwrap();
    // A field whose length runs past the end of the object: its metadata still names it.
    api.apply_value(
        Kind::Service,
        with_wire(
            json(&service("truncated", "10.0.0.4", 83)),
            &[(3 << 3) | 2, 0x7f],
        ),
    )
    .unwrap();
    api.apply_value(
        Kind::EndpointSlice,
        json(&fixtures::slice("good-1-a", "good-1", "10.1.0.1")),
    )
    .unwrap();
    api.apply_value(
        Kind::EndpointSlice,
        with_wire(
            json(&fixtures::slice("broken-a", "good-1", "10.1.0.3")),
            &msg(2, &var(1, 7)),
        ),
    )
    .unwrap();
    // A label value with invalid UTF-8 reads as Go's JSON encoder writes it: U+FFFD.
    let mut label = Vec::new();
    put_bytes(&mut label, 1, b"test");
    put_bytes(&mut label, 2, &[b'o', 0xff, b'k']);
    api.apply_value(
        Kind::Node,
        with_wire(node("one"), &msg(1, &msg(11, &label))),
    )
    .unwrap();

    let mut w = watchers(&api, MediaTypes::default()).await;
    w.listed(Duration::from_secs(20)).await;
    eventually(TRIES, "the Node", || w.node().is_some()).await;
    let names = |w: &mut Watchers| {
        let (s, e) = w.apply();
        let svcs: Vec<String> = s.keys().map(|k| k.name.to_string()).collect();
        let eps: Vec<String> = e
            .iter()
            .flat_map(|(k, v)| {
                v.iter()
                    .map(move |ep| format!("{}={}", k.name.as_str(), ep.ip))
            })
            .collect();
        (svcs, eps)
    };
    assert_eq!(
        names(&mut w),
        (
            vec!["good-1".to_string(), "odd".to_string()],
            vec!["good-1=10.1.0.1".to_string()]
        )
    );
    assert_eq!(w.node().unwrap().labels["test"], "o\u{fffd}k");
    assert_eq!(w.invalid(), 3);
    assert!(api.responses(Kind::Service, Wire::Protobuf) >= 1);
    assert_eq!(api.responses(Kind::Service, Wire::Json), 0);
    // Events about the Node of one reason form a series (as upstream's recorder does).
    eventually(TRIES, "three Invalid* events", || invalid_count(&api) == 3).await;
    let notes = invalid_notes(&api);
    // The series keeps the first note: one of the two Services, each naming what was wrong.
    assert!(
        notes.iter().any(|(r, n)| r == "InvalidService"
            && ((n.contains("ns/unreadable") && n.contains("ServicePort.port"))
                || (n.contains("ns/truncated") && n.contains("field 3 is truncated")))),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|(r, n)| r == "InvalidEndpointSlice" && n.contains("ns/broken-a")),
        "{notes:?}"
    );

    // On the watch: a good Service turning unreadable and back, an unreadable Node (the last
    // readable one stays), a new odd-but-readable Service.
    api.apply_value(
        Kind::Service,
        with_wire(json(&service("good-1", "10.0.0.1", 80)), &port_as_bytes()),
    )
    .unwrap();
    api.apply_value(
        Kind::Service,
        with_wire(json(&service("odd-2", "10.0.0.5", 84)), &odd_but_readable()),
    )
    .unwrap();
    let bad_address = msg(3, &msg(5, &var(2, 5)));
    api.apply_value(Kind::Node, with_wire(node("two"), &bad_address))
        .unwrap();
    eventually(TRIES, "good-1 gone, odd-2 there", || {
        let (svcs, _) = names(&mut w);
        svcs == ["odd", "odd-2"]
    })
    .await;
    api.apply_value(Kind::Service, json(&service("good-1", "10.0.0.1", 80)))
        .unwrap();
    eventually(TRIES, "good-1 back", || {
        names(&mut w).0 == ["good-1", "odd", "odd-2"]
    })
    .await;
    eventually(TRIES, "the unreadable Node counted", || w.invalid() == 5).await;
    assert_eq!(w.node().unwrap().labels["test"], "o\u{fffd}k");
    let text = w.metrics.encode().unwrap();
    for (kind, n) in [("Service", 3), ("EndpointSlice", 1), ("Node", 1)] {
        let line = format!("kubeproxy_rs_invalid_objects_total{{kind=\"{kind}\"}} {n}");
        assert!(text.contains(&line), "missing {line}");
    }
    // Never a relist: one list per kind.
    for kind in [Kind::Service, Kind::EndpointSlice, Kind::Node] {
        assert_eq!(api.list_requests(kind), 1, "{kind:?} was listed again");
    }
}

/// Invalid* Events as (reason, note), with each series' later notes.
fn invalid_notes(api: &TestApiServer) -> Vec<(String, String)> {
    api.events()
        .into_iter()
        .filter_map(|e| {
            let reason = e.reason.filter(|r| r.starts_with("Invalid"))?;
            Some((reason, e.note.unwrap_or_default()))
        })
        .collect()
}

/// Invalid* Events counted with their series.
fn invalid_count(api: &TestApiServer) -> i32 {
    api.events()
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Invalid"))
        })
        .map(|e| e.series.map_or(1, |s| s.count))
        .sum()
}

fn load_small(api: &TestApiServer) {
    api.apply_value(Kind::Node, node("n")).unwrap();
    for i in 0..20 {
        api.apply_value(Kind::Service, scale::service(i)).unwrap();
        api.apply_value(Kind::EndpointSlice, scale::slice(i, 2, &[], None))
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_when_configured_or_when_protobuf_is_not_offered() {
    // A server that speaks JSON only: the default (protobuf, JSON as fallback) reads JSON.
    let opts = Options {
        protobuf: false,
        ..Options::default()
    };
    let api = TestApiServer::start_with("127.0.0.1:0", opts).unwrap();
    load_small(&api);
    let mut w = watchers(&api, MediaTypes::default()).await;
    w.listed(Duration::from_secs(20)).await;
    assert_eq!(w.apply().0.len(), 20);
    assert!(api.responses(Kind::Service, Wire::Json) >= 1);
    assert_eq!(api.responses(Kind::Service, Wire::Protobuf), 0);
    // Both JSON watches open before protobuf is offered: a watch request still in flight when the
    // watches are dropped would start after the drop, in JSON, and never be dropped (seen under load).
    eventually(TRIES, "JSON watches open", || {
        api.open_watches(Kind::Service) >= 1 && api.open_watches(Kind::EndpointSlice) >= 1
    })
    .await;
    // The server starts offering protobuf: the next watch is read in protobuf.
    api.set_protobuf(true);
    api.drop_all_watches();
    eventually(TRIES, "protobuf watches", || {
        api.responses(Kind::Service, Wire::Protobuf) >= 1
            && api.responses(Kind::EndpointSlice, Wire::Protobuf) >= 1
    })
    .await;
    api.apply_value(Kind::Service, scale::service(20)).unwrap();
    eventually(TRIES, "the new Service over protobuf", || {
        w.apply().0.len() == 21
    })
    .await;
    assert_eq!(api.list_requests(Kind::Service), 1);
    assert_eq!(api.counters().not_acceptable, 0);

    // JSON configured: JSON although protobuf is offered.
    let before = (
        api.responses(Kind::Service, Wire::Json),
        api.responses(Kind::Service, Wire::Protobuf),
    );
    let mut j = watchers(&api, MediaTypes::json()).await;
    j.listed(Duration::from_secs(20)).await;
    assert_eq!(j.apply().0.len(), 21);
    let after = (
        api.responses(Kind::Service, Wire::Json),
        api.responses(Kind::Service, Wire::Protobuf),
    );
    assert!(after.0 > before.0, "{before:?} {after:?}");
    assert_eq!(after.1, before.1);

    // Protobuf only (acceptContentTypes) from a JSON-only server: 406, nothing listed, no crash.
    api.set_protobuf(false);
    let only = MediaTypes::from_config("", "application/vnd.kubernetes.protobuf").unwrap();
    let mut p = watchers(&api, only).await;
    eventually(TRIES, "406 answers", || api.counters().not_acceptable >= 2).await;
    assert!(!p.synced.proxy_ready());
    assert!(p.apply().0.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_watches_resume_and_relist() {
    let opts = Options {
        bookmark_interval: Duration::from_millis(200),
        ..Options::default()
    };
    let api = TestApiServer::start_with("127.0.0.1:0", opts).unwrap();
    load_small(&api);
    let mut w = watchers(&api, MediaTypes::default()).await;
    w.listed(Duration::from_secs(20)).await;
    assert_eq!(w.apply().0.len(), 20);
    // Bookmarks move the resourceVersion on; a dropped watch resumes from it without a relist.
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.drop_all_watches();
    api.apply_value(Kind::Service, scale::service(20)).unwrap();
    eventually(TRIES, "resumed", || w.apply().0.len() == 21).await;
    assert_eq!(api.list_requests(Kind::Service), 1);
    let bookmark_watch = api
        .requests()
        .iter()
        .any(|r| r.contains("watch=true") && r.contains("allowWatchBookmarks=true"));
    assert!(bookmark_watch);
    // Compacted history while no watch is open: 410 on the re-watch, then a relist that also sees
    // the deletion made meanwhile.
    api.hold_watches(true);
    api.drop_all_watches();
    api.delete(Kind::Service, scale::NAMESPACE, &scale::service_name(0));
    api.expire_history();
    api.hold_watches(false);
    eventually(TRIES, "relisted", || api.list_requests(Kind::Service) == 2).await;
    eventually(TRIES, "svc-0 gone", || w.apply().0.len() == 20).await;
    assert!(
        api.counters()
            .expired_watches
            .get(&Kind::Service)
            .is_some_and(|n| *n >= 1)
    );
    assert_eq!(api.responses(Kind::Service, Wire::Json), 0);
}
