//! What the API server accepts never breaks a watch (issue 13 §3): the daemon's Service,
//! EndpointSlice and Node watchers against the test API server over real HTTP list/watch, fed raw
//! JSON objects with nulls where the typed structs want values (`lastTransitionTime: null`, which
//! upstream's conformance tests write), unknown fields and odd types in fields kube-proxy does not
//! read, and objects that truly cannot be read. No list is repeated (no relist), the good objects
//! around the bad ones arrive, and each unreadable object is counted, reported to the metric and
//! published as a Warning Event.
mod common {
    pub mod apiserver;
}
#[path = "common/fixtures.rs"]
pub mod fixtures;
#[path = "common/wait.rs"]
pub mod wait;
#[path = "common/watchers.rs"]
pub mod watchers;

use common::apiserver::{Kind, TestApiServer};
use fixtures::json;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use kube_proxy_rs::cluster::listwatch::MediaTypes;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;
use wait::eventually;
use watchers::Watchers;

/// Polls of [`eventually`] before a wait fails (500 × 20 ms).
const TRIES: u32 = 500;

const NODE: &str = "node-a";

/// A condition as upstream's conformance test writes it: `lastTransitionTime: null`.
fn null_time_condition() -> Value {
    json!({"type": "Ready", "status": "True", "reason": "Test", "message": "",
           "lastTransitionTime": null, "observedGeneration": null})
}

/// A ClusterIP Service whose port number is `port`, whatever JSON that is.
fn svc(name: &str, ip: &str, port: Value) -> Value {
    let mut v = json(&fixtures::service(name, ip, 0));
    v["spec"]["ports"][0]["port"] = port;
    v
}

/// A Service full of what the API server accepts but the typed structs reject or do not know.
fn odd_svc(name: &str, ip: &str, port: i64) -> Value {
    let mut v = svc(name, ip, json!(port));
    v["metadata"]["managedFields"] = json!([{"manager": 5, "time": null, "fieldsV1": "x"}]);
    v["metadata"]["annotations"] = json!({"note": 7, "other": null});
    v["metadata"]["creationTimestamp"] = json!(null);
    v["spec"]["ipFamilyPolicy"] = json!(42);
    v["spec"]["selector"] = json!("not a map");
    v["spec"]["aFieldFromTheFuture"] = json!({"deep": [1, null]});
    v["spec"]["ports"][0]["targetPort"] = json!({"odd": true});
    v["spec"]["ports"][0]["appProtocol"] = json!(null);
    v["status"] = json!({"conditions": [null_time_condition()], "loadBalancer": {}});
    v
}

fn slice(name: &str, service: &str, ip: &str) -> Value {
    json(&fixtures::slice(name, service, ip))
}

fn odd_slice(name: &str, service: &str, ip: &str) -> Value {
    let mut v = slice(name, service, ip);
    v["metadata"]["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": null,
                                          "x": {"y": 1}});
    v["endpoints"][0]["targetRef"] = json!("odd");
    v["endpoints"][0]["deprecatedTopology"] = json!(7);
    v["endpoints"][0]["conditions"]["serving"] = json!(null);
    v["endpoints"][0]["somethingNew"] = json!([null]);
    v
}

fn node(ip: &str, label: &str) -> Value {
    json!({"metadata": {"name": NODE, "labels": {"test": label}},
           "spec": {"podCIDR": "10.244.0.0/24", "taints": [{"key": "k", "effect": null,
                                                             "timeAdded": null}]},
           "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                      "conditions": [null_time_condition()],
                      "images": "not a list", "nodeInfo": null}})
}

/// The applied Service names and ports.
fn service_ports(w: &Watchers) -> BTreeSet<(String, u16)> {
    w.services
        .values()
        .map(|p| (p.name.name.to_string(), p.port))
        .collect()
}

/// The applied endpoint IPs per Service.
fn endpoint_ips(w: &Watchers) -> BTreeSet<(String, IpAddr)> {
    w.endpoints
        .iter()
        .flat_map(|(k, eps)| eps.iter().map(move |e| (k.name.to_string(), e.ip)))
        .collect()
}

fn set(items: &[(&str, u16)]) -> BTreeSet<(String, u16)> {
    items.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

fn ips(items: &[(&str, &str)]) -> BTreeSet<(String, IpAddr)> {
    items
        .iter()
        .map(|(n, ip)| (n.to_string(), ip.parse().unwrap()))
        .collect()
}

/// Each kind was listed exactly `services`/1/1 times (the strict probe above lists Services once).
fn no_relist(api: &TestApiServer) {
    let expected = [
        (Kind::Service, 2),
        (Kind::EndpointSlice, 1),
        (Kind::Node, 1),
    ];
    for (kind, n) in expected {
        assert_eq!(api.list_requests(kind), n, "{kind:?} was listed again");
    }
}

/// Invalid* Events as (reason, count, note of the first): repeats of one reason about the Node
/// become a series (as upstream's event recorder does), counted by `series.count`.
fn invalid_events(api: &TestApiServer) -> Vec<(String, i32, String)> {
    api.events()
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Invalid"))
        })
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (
                e.reason.unwrap_or_default(),
                count,
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

fn event_count(api: &TestApiServer, reason: &str) -> i32 {
    invalid_events(api)
        .iter()
        .filter(|(r, _, _)| r == reason)
        .map(|(_, c, _)| c)
        .sum()
}

/// The Node's first InternalIP and its label `test`.
fn node_ip(w: &Watchers) -> Option<(IpAddr, String)> {
    w.node().map(|n| {
        (
            n.internal_ips[0],
            n.labels.get("test").cloned().unwrap_or_default(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_and_odd_objects_never_break_the_watch() {
    let api = TestApiServer::start("127.0.0.1:0").unwrap();
    // In the first list: good, odd-but-readable and unreadable objects of every kind.
    api.apply_value(Kind::Service, svc("good-1", "10.0.0.1", json!(80)))
        .unwrap();
    api.apply_value(Kind::Service, odd_svc("null-time", "10.0.0.2", 81))
        .unwrap();
    // Exactly what upstream's conformance test writes: a valid Service, one condition, no time.
    let mut conformance = svc("conformance", "10.0.0.6", json!(84));
    conformance["status"] = json!({"conditions": [null_time_condition()]});
    api.apply_value(Kind::Service, conformance).unwrap();
    api.apply_value(
        Kind::Service,
        svc("unreadable", "10.0.0.3", json!("eighty")),
    )
    .unwrap();
    api.apply_value(Kind::EndpointSlice, slice("good-1-a", "good-1", "10.1.0.1"))
        .unwrap();
    api.apply_value(
        Kind::EndpointSlice,
        odd_slice("null-time-a", "null-time", "10.1.0.2"),
    )
    .unwrap();
    let mut broken = slice("broken-a", "good-1", "10.1.0.3");
    broken["endpoints"][0]["addresses"] = json!("10.1.0.3");
    api.apply_value(Kind::EndpointSlice, broken).unwrap();
    api.apply_value(Kind::Node, node("192.168.0.10", "one"))
        .unwrap();

    // The defect this guards against: the typed struct alone cannot even list the Service whose
    // condition has `lastTransitionTime: null`.
    let strict = Api::<Service>::all(api.client().await.expect("client"))
        .list(&ListParams::default().fields("metadata.name=conformance"))
        .await;
    let err = strict.expect_err("the typed list fails").to_string();
    assert!(
        err.contains("invalid type: null, expected a timestamp"),
        "{err}"
    );
    assert_eq!(api.list_requests(Kind::Service), 1);

    // JSON configured: these oddities exist only in JSON (protobuf has no nulls or untyped values).
    let client = api.client().await.expect("client");
    let mut w = Watchers::reporting(client, NODE, MediaTypes::json());
    w.listed(Duration::from_secs(10)).await;
    eventually(TRIES, "the Node", || node_ip(&w).is_some()).await;
    w.apply();
    assert_eq!(
        service_ports(&w),
        set(&[("good-1", 80), ("null-time", 81), ("conformance", 84)])
    );
    assert_eq!(
        endpoint_ips(&w),
        ips(&[("good-1", "10.1.0.1"), ("null-time", "10.1.0.2")])
    );
    assert_eq!(
        node_ip(&w),
        Some(("192.168.0.10".parse().unwrap(), "one".into()))
    );
    assert_eq!(w.invalid(), 2);
    eventually(TRIES, "two Invalid* events", || {
        invalid_events(&api).len() == 2
    })
    .await;
    let events = invalid_events(&api);
    assert!(events.iter().any(|(r, c, n)| r == "InvalidService"
        && *c == 1
        && n.contains("ns/unreadable")
        && n.contains("spec.ports[0].port")));
    assert!(events.iter().any(|(r, c, n)| r == "InvalidEndpointSlice"
        && *c == 1
        && n.contains("ns/broken-a")
        && n.contains("endpoints[0].addresses")));
    no_relist(&api);

    // On the watch: more odd objects, a good object turning unreadable (treated as absent, as a
    // malformed one) and back, a new unreadable slice, a Node update and an unreadable Node.
    api.apply_value(Kind::Service, odd_svc("null-time-2", "10.0.0.4", 82))
        .unwrap();
    api.apply_value(Kind::Service, odd_svc("null-time", "10.0.0.2", 91))
        .unwrap();
    api.apply_value(Kind::Service, svc("good-1", "10.0.0.1", json!(null)))
        .unwrap();
    api.apply_value(Kind::Service, svc("good-2", "10.0.0.5", json!(83)))
        .unwrap();
    let mut broken = odd_slice("broken-b", "good-2", "10.1.0.5");
    broken["ports"] = json!({"not": "a list"});
    api.apply_value(Kind::EndpointSlice, broken).unwrap();
    api.apply_value(Kind::EndpointSlice, slice("good-2-a", "good-2", "10.1.0.6"))
        .unwrap();
    api.apply_value(Kind::Node, node("192.168.0.10", "two"))
        .unwrap();
    eventually(TRIES, "the watch events", || {
        w.apply();
        service_ports(&w)
            == set(&[
                ("null-time", 91),
                ("null-time-2", 82),
                ("good-2", 83),
                ("conformance", 84),
            ])
            && endpoint_ips(&w).contains(&("good-2".into(), "10.1.0.6".parse().unwrap()))
            && node_ip(&w).is_some_and(|(_, l)| l == "two")
    })
    .await;
    let mut unreadable_node = node("192.168.0.10", "three");
    unreadable_node["status"]["addresses"] = json!("192.168.0.99");
    api.apply_value(Kind::Node, unreadable_node).unwrap();
    api.apply_value(Kind::Service, svc("good-1", "10.0.0.1", json!(80)))
        .unwrap();
    eventually(TRIES, "good-1 back", || {
        w.apply();
        service_ports(&w).contains(&("good-1".into(), 80))
    })
    .await;
    // The unreadable Node keeps the last readable one.
    assert_eq!(
        node_ip(&w),
        Some(("192.168.0.10".parse().unwrap(), "two".into()))
    );
    assert_eq!(w.invalid(), 5);
    let text = w.metrics.encode().unwrap();
    for (kind, n) in [("Service", 2), ("EndpointSlice", 2), ("Node", 1)] {
        let line = format!("kubeproxy_rs_invalid_objects_total{{kind=\"{kind}\"}} {n}");
        assert!(text.contains(&line), "missing {line}");
    }
    eventually(TRIES, "five Invalid* events", || {
        [
            ("InvalidService", 2),
            ("InvalidEndpointSlice", 2),
            ("InvalidNode", 1),
        ]
        .iter()
        .all(|(r, n)| event_count(&api, r) == *n)
    })
    .await;
    assert!(
        invalid_events(&api)
            .iter()
            .any(|(r, _, n)| r == "InvalidNode" && n.contains("status.addresses"))
    );
    no_relist(&api);
}
