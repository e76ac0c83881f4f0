//! Watch parameters, Node extraction and the event cache that feeds the trackers.
#[path = "common/fixtures.rs"]
pub mod fixtures;

use fixtures::{meta, service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::runtime::watcher::Event;
use kube_proxy_rs::cluster::model::ServiceMap;
use kube_proxy_rs::cluster::watch::{
    EventCache, Trackers, node_info, node_watch_config, service_watch_config, slice_watch_config,
};
use serde_json::json;

#[test]
fn selectors_match_upstream() {
    let s = service_watch_config();
    assert_eq!(
        s.label_selector.as_deref(),
        Some("!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless")
    );
    assert_eq!(s.field_selector.as_deref(), Some("spec.clusterIP!=None"));
    let e = slice_watch_config();
    assert_eq!(e.label_selector, s.label_selector);
    assert_eq!(e.field_selector, None);
    let n = node_watch_config("node-a");
    assert_eq!(n.field_selector.as_deref(), Some("metadata.name=node-a"));
    assert_eq!(n.label_selector, None);
}

#[test]
fn node_fields() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"},
                     "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24", "fd00:10::/64"],
                 "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]},
        "status": {"addresses": [
            {"type": "Hostname", "address": "n1"},
            {"type": "InternalIP", "address": "10.0.0.10"},
            {"type": "InternalIP", "address": "fd00::10"},
            {"type": "ExternalIP", "address": "203.0.113.5"},
            {"type": "InternalIP", "address": "garbage"}
        ]}
    }))
    .unwrap();
    let info = node_info(&node);
    assert_eq!(info.name, "n1");
    assert_eq!(
        info.internal_ips,
        vec![
            "10.0.0.10".parse::<std::net::IpAddr>().unwrap(),
            "fd00::10".parse().unwrap()
        ]
    );
    assert_eq!(
        info.external_ips,
        vec!["203.0.113.5".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(info.zone.as_deref(), Some("z1"));
    assert_eq!(
        info.pod_cidrs,
        vec![
            "10.244.0.0/24".parse().unwrap(),
            "fd00:10::/64".parse().unwrap()
        ]
    );
    assert!(info.deleting && info.to_be_deleted && !info.eligible());

    let plain: Node = serde_json::from_value(json!({
        "metadata": {"name": "n2"}, "spec": {"podCIDR": "10.244.1.0/24"}
    }))
    .unwrap();
    let info = node_info(&plain);
    assert_eq!(info.pod_cidrs, vec!["10.244.1.0/24".parse().unwrap()]);
    assert!(info.eligible() && info.zone.is_none() && info.internal_ips.is_empty());
}

/// The fixture Service with managed fields, which the cache strips.
fn svc(name: &str, ip: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("x".into()),
                ..Default::default()
            }]),
            ..meta(name)
        },
        ..service(name, ip, 80)
    }
}

/// Feeds events through the cache into a tracker, returning the number of recorded changes.
fn feed(cache: &mut EventCache<Service>, trackers: &Trackers, ev: Event<Service>) -> usize {
    let mut n = 0;
    cache.handle(ev, |prev, cur| {
        if let Some(c) = cur {
            assert!(
                c.metadata.managed_fields.is_none(),
                "managedFields stripped"
            );
        }
        if trackers.services.lock().unwrap().update(prev, cur).pending {
            n += 1;
        }
    });
    n
}

#[test]
fn relist_deletes_vanished_objects_and_keeps_previous() {
    relist_deletes_vanished_objects(EventCache::<Service>::default());
}

#[test]
fn keys_only_cache_relists_and_deletes() {
    relist_deletes_vanished_objects(EventCache::<Service>::keys_only());
}

#[test]
fn keys_only_cache_passes_namespace_and_name_as_previous() {
    let mut cache = EventCache::<Service>::keys_only();
    let mut seen = Vec::new();
    let mut record = |cache: &mut EventCache<Service>, ev| {
        cache.handle(ev, |prev: Option<&Service>, cur: Option<&Service>| {
            seen.push((
                prev.map(|p| {
                    (
                        p.metadata.namespace.clone(),
                        p.metadata.name.clone(),
                        p.spec.is_some(),
                    )
                }),
                cur.is_some(),
            ))
        })
    };
    record(&mut cache, Event::Apply(svc("a", "10.0.0.1")));
    record(&mut cache, Event::Apply(svc("a", "10.0.0.2")));
    record(&mut cache, Event::Init);
    record(&mut cache, Event::InitDone);
    let key = Some((Some("ns".to_string()), Some("a".to_string()), false));
    assert_eq!(seen, vec![(None, true), (key.clone(), true), (key, false)]);
    assert!(cache.is_empty());
}

fn relist_deletes_vanished_objects(mut cache: EventCache<Service>) {
    let trackers = Trackers::new("me");
    let mut map = ServiceMap::new();
    assert!(!cache.listed());
    feed(&mut cache, &trackers, Event::Init);
    feed(
        &mut cache,
        &trackers,
        Event::InitApply(svc("a", "10.0.0.1")),
    );
    feed(
        &mut cache,
        &trackers,
        Event::InitApply(svc("b", "10.0.0.2")),
    );
    assert!(!cache.listed());
    feed(&mut cache, &trackers, Event::InitDone);
    assert!(cache.listed());
    trackers.services.lock().unwrap().apply(&mut map);
    assert_eq!(map.len(), 2);

    // an update passes the cached previous object: changing a's IP replaces its port
    assert_eq!(
        feed(&mut cache, &trackers, Event::Apply(svc("a", "10.0.0.9"))),
        1
    );
    let r = trackers.services.lock().unwrap().apply(&mut map);
    assert_eq!(r.updated_services.len(), 1);
    assert_eq!(map.len(), 2);

    // relist after a watch error: b vanished meanwhile, a unchanged → only b deleted
    feed(&mut cache, &trackers, Event::Init);
    feed(
        &mut cache,
        &trackers,
        Event::InitApply(svc("a", "10.0.0.9")),
    );
    let n = feed(&mut cache, &trackers, Event::InitDone);
    assert_eq!(n, 1);
    assert_eq!(cache.len(), 1);
    let r = trackers.services.lock().unwrap().apply(&mut map);
    assert_eq!(
        r.updated_services
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        vec!["b"]
    );
    assert_eq!(map.len(), 1);

    // delete
    feed(&mut cache, &trackers, Event::Delete(svc("a", "10.0.0.9")));
    trackers.services.lock().unwrap().apply(&mut map);
    assert!(map.is_empty() && cache.is_empty());
}

#[test]
fn slimmed_slice_cache_still_deletes() {
    use kube_proxy_rs::cluster::watch::slim_slice;
    slice_cache_still_deletes(EventCache::with_slim(slim_slice));
}

#[test]
fn keys_only_slice_cache_still_deletes() {
    slice_cache_still_deletes(EventCache::keys_only());
}

fn slice_cache_still_deletes(
    mut cache: EventCache<k8s_openapi::api::discovery::v1::EndpointSlice>,
) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube_proxy_rs::cluster::model::EndpointsMap;
    let trackers = Trackers::new("me");
    let mut map = EndpointsMap::new();
    let s = |name: &str, ip: &str| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {"kubernetes.io/service-name": "a"}},
            "addressType": "IPv4",
            "ports": [{"name": "p", "port": 80}],
            "endpoints": [{"addresses": [ip]}],
        }))
        .unwrap()
    };
    let feed = |cache: &mut EventCache<EndpointSlice>, ev| {
        cache.handle(ev, |prev, cur| {
            let mut t = trackers.endpoints.lock().unwrap();
            match (prev, cur) {
                (_, Some(c)) => t.update(c, false),
                (Some(p), None) => t.update(p, true),
                _ => unreachable!(),
            };
        })
    };
    feed(&mut cache, Event::Apply(s("a-1", "10.0.0.1")));
    feed(&mut cache, Event::Apply(s("a-2", "10.0.0.2")));
    trackers.endpoints.lock().unwrap().apply(&mut map);
    assert_eq!(map.values().next().unwrap().len(), 2);
    // relist without a-2: its endpoints go, using only the slimmed cached copy
    feed(&mut cache, Event::Init);
    feed(&mut cache, Event::InitApply(s("a-1", "10.0.0.1")));
    feed(&mut cache, Event::InitDone);
    trackers.endpoints.lock().unwrap().apply(&mut map);
    let eps = map.values().next().unwrap();
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0].ip.to_string(), "10.0.0.1");
    // delete event for a-1 empties the map
    feed(&mut cache, Event::Delete(s("a-1", "10.0.0.1")));
    trackers.endpoints.lock().unwrap().apply(&mut map);
    assert!(map.is_empty());
}
