//! Change trackers: merging slices, removal, net-zero changes, UDP stale reporting, trigger times.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_proxy_rs::cluster::model::{EndpointsMap, Protocol, ServiceMap, ServicePortName};
use kube_proxy_rs::cluster::tracker::{
    EndpointsChangeTracker, ServiceChangeTracker, StaleUdpEndpoint,
};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

fn svc(name: &str, cluster_ip: &str, ports: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"clusterIP": cluster_ip, "ports": ports},
    }))
    .unwrap()
}

/// A slice of service `svc` with `ports` and ready endpoints `ips` (an IP prefixed with `!` is not ready).
fn slice(name: &str, svc: &str, ports: Value, ips: &[&str]) -> EndpointSlice {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| match ip.strip_prefix('!') {
            Some(ip) => json!({"addresses": [ip], "conditions": {"ready": false}}),
            None => json!({"addresses": [ip], "nodeName": "other"}),
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    }))
    .unwrap()
}

fn with_trigger(mut s: EndpointSlice, t: &str) -> EndpointSlice {
    s.metadata.annotations = Some(
        [(
            "endpoints.kubernetes.io/last-change-trigger-time".to_string(),
            t.to_string(),
        )]
        .into(),
    );
    s
}

fn spn(svc: &str, port: &str, protocol: Protocol) -> ServicePortName {
    ServicePortName {
        namespace: "ns".into(),
        name: svc.into(),
        port_name: port.into(),
        protocol,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ips(map: &EndpointsMap, name: &ServicePortName) -> Vec<String> {
    map.get(name)
        .map(|eps| eps.iter().map(|e| format!("{}:{}", e.ip, e.port)).collect())
        .unwrap_or_default()
}

#[test]
fn service_add_update_delete() {
    let mut t = ServiceChangeTracker::new();
    let mut map = ServiceMap::new();
    let a1 = svc(
        "a",
        "10.0.0.1",
        json!([{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]),
    );
    assert!(t.update(None, Some(&a1)).pending);
    assert_eq!(t.pending(), 1);
    let r = t.apply(&mut map);
    assert_eq!(t.pending(), 0);
    assert_eq!(map.len(), 2);
    assert_eq!(r.updated_services.len(), 1);
    assert_eq!(r.changed_ports.len(), 2);
    assert!(r.deleted_udp_cluster_ips.is_empty());

    // update: drop the UDP port, change the TCP one
    let a2 = svc("a", "10.0.0.1", json!([{"name": "http", "port": 8080}]));
    assert!(t.update(Some(&a1), Some(&a2)).pending);
    let keep = map.get(&spn("a", "http", Protocol::Tcp)).unwrap().clone();
    let r = t.apply(&mut map);
    assert_eq!(map.len(), 1);
    assert_eq!(map[&spn("a", "http", Protocol::Tcp)].port, 8080);
    assert!(!Arc::ptr_eq(&keep, &map[&spn("a", "http", Protocol::Tcp)]));
    assert_eq!(
        r.deleted_udp_cluster_ips.into_iter().collect::<Vec<_>>(),
        vec![ip("10.0.0.1")]
    );
    assert_eq!(r.changed_ports.len(), 2);

    // delete
    assert!(t.update(Some(&a2), None).pending);
    t.apply(&mut map);
    assert!(map.is_empty());
    assert_eq!(t.total(), 3);
}

#[test]
fn service_net_zero_changes_vanish_and_others_untouched() {
    let mut t = ServiceChangeTracker::new();
    let mut map = ServiceMap::new();
    let a = svc("a", "10.0.0.1", json!([{"port": 80}]));
    let b = svc("b", "10.0.0.2", json!([{"port": 80}]));
    t.update(None, Some(&a));
    t.update(None, Some(&b));
    t.apply(&mut map);
    let b_arc = map[&spn("b", "", Protocol::Tcp)].clone();

    // add then delete before a sync: nothing pending
    let c = svc("c", "10.0.0.3", json!([{"port": 80}]));
    assert!(t.update(None, Some(&c)).pending);
    assert!(!t.update(Some(&c), None).pending);
    assert_eq!(t.pending(), 0);
    // change then revert: nothing pending
    let a2 = svc("a", "10.0.0.1", json!([{"port": 81}]));
    t.update(Some(&a), Some(&a2));
    assert!(!t.update(Some(&a2), Some(&a)).pending);
    assert_eq!(t.pending(), 0);
    // a metadata-only update is not a change
    let mut a_label = a.clone();
    a_label.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    assert!(!t.update(Some(&a), Some(&a_label)).pending);
    // changing a leaves b's Arc untouched
    t.update(Some(&a), Some(&a2));
    let r = t.apply(&mut map);
    assert_eq!(r.updated_services.len(), 1);
    assert!(Arc::ptr_eq(&b_arc, &map[&spn("b", "", Protocol::Tcp)]));
}

#[test]
fn malformed_service_is_treated_as_absent() {
    let mut t = ServiceChangeTracker::new();
    let mut map = ServiceMap::new();
    let good = svc("a", "10.0.0.1", json!([{"port": 80}]));
    let other = svc("b", "10.0.0.2", json!([{"port": 80}]));
    t.update(None, Some(&good));
    t.update(None, Some(&other));
    t.apply(&mut map);
    let bad = svc("a", "10.0.0.1", json!([{"port": 80, "protocol": "ICMP"}]));
    let o = t.update(Some(&good), Some(&bad));
    let e = o.error.expect("error reported");
    assert_eq!(e.name, "a");
    assert!(o.pending);
    t.apply(&mut map);
    assert_eq!(map.len(), 1, "a's ports removed, b kept");
    assert!(map.contains_key(&spn("b", "", Protocol::Tcp)));
    // fixing it brings it back
    let o = t.update(Some(&bad), Some(&good));
    assert!(o.error.is_none() && o.pending);
    t.apply(&mut map);
    assert_eq!(map.len(), 2);
}

/// A Service carrying only namespace/name, as a keys-only watch cache passes it as `previous`.
fn bare(name: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}})).unwrap()
}

#[test]
fn service_previous_comes_from_the_applied_state_not_the_object() {
    let mut t = ServiceChangeTracker::new();
    let mut map = ServiceMap::new();
    let a1 = svc(
        "a",
        "10.0.0.1",
        json!([{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]),
    );
    t.update(None, Some(&a1));
    t.apply(&mut map);
    let http = map[&spn("a", "http", Protocol::Tcp)].clone();

    // a bare previous (only namespace/name) still yields the real diff against what was applied
    let a2 = svc("a", "10.0.0.1", json!([{"name": "http", "port": 80}]));
    assert!(t.update(Some(&bare("a")), Some(&a2)).pending);
    let r = t.apply(&mut map);
    assert_eq!(map.len(), 1);
    assert_eq!(
        r.changed_ports.into_iter().collect::<Vec<_>>(),
        vec![spn("a", "dns", Protocol::Udp)],
        "only the removed port changed"
    );
    assert_eq!(
        r.deleted_udp_cluster_ips.into_iter().collect::<Vec<_>>(),
        vec![ip("10.0.0.1")]
    );
    assert!(
        Arc::ptr_eq(&http, &map[&spn("a", "http", Protocol::Tcp)]),
        "the unchanged port keeps its shared value"
    );

    // re-adding what is already applied (e.g. a relist) is not a change
    assert!(!t.update(None, Some(&a2)).pending);
    assert!(!t.update(Some(&bare("a")), Some(&a2)).pending);
    assert_eq!(t.pending(), 0);

    // a stale previous object does not matter either: the update is a no-op against the applied state
    assert!(!t.update(Some(&a1), Some(&a2)).pending);

    // delete keyed by a bare previous; the UDP ClusterIP of a deleted UDP port is reported
    let b = svc("b", "10.0.0.2", json!([{"port": 53, "protocol": "UDP"}]));
    t.update(None, Some(&b));
    t.apply(&mut map);
    assert!(t.update(Some(&bare("b")), None).pending);
    assert!(t.update(Some(&bare("a")), None).pending);
    let r = t.apply(&mut map);
    assert!(map.is_empty());
    assert_eq!(r.updated_services.len(), 2);
    assert_eq!(
        r.deleted_udp_cluster_ips.into_iter().collect::<Vec<_>>(),
        vec![ip("10.0.0.2")]
    );

    // deleting a service that was never applied is nothing to do; re-adding after delete is an add
    assert!(!t.update(Some(&bare("zzz")), None).pending);
    assert!(t.update(None, Some(&a2)).pending);
    let r = t.apply(&mut map);
    assert_eq!(r.changed_ports.len(), 1);
    assert_eq!(map.len(), 1);
}

#[test]
fn slices_of_one_service_merge_and_dedupe() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let ports = json!([{"name": "http", "port": 8080}]);
    let s1 = slice("a-1", "a", ports.clone(), &["10.1.0.3", "10.1.0.1"]);
    let s2 = slice("a-2", "a", ports.clone(), &["10.1.0.2", "10.1.0.1"]);
    assert!(t.update(&s1, false).pending);
    assert!(t.update(&s2, false).pending);
    assert_eq!(t.pending(), 2);
    let r = t.apply(&mut map);
    assert_eq!(t.pending(), 0);
    let name = spn("a", "http", Protocol::Tcp);
    assert_eq!(
        ips(&map, &name),
        vec!["10.1.0.1:8080", "10.1.0.2:8080", "10.1.0.3:8080"]
    );
    assert_eq!(r.changed_ports.iter().collect::<Vec<_>>(), vec![&name]);

    // removing one slice removes only its endpoints (10.1.0.1 is still in a-1)
    assert!(t.update(&s2, true).pending);
    t.apply(&mut map);
    assert_eq!(ips(&map, &name), vec!["10.1.0.1:8080", "10.1.0.3:8080"]);
    // removing the last slice removes the port
    t.update(&s1, true);
    let r = t.apply(&mut map);
    assert!(map.is_empty());
    assert_eq!(r.updated_services.len(), 1);
    // removing an unknown slice is a no-op
    assert!(!t.update(&s1, true).pending);
}

#[test]
fn local_endpoint_wins_deduplication() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let mut local: EndpointSlice =
        slice("a-2", "a", json!([{"name": "", "port": 80}]), &["10.1.0.1"]);
    local.endpoints[0].node_name = Some("me".into());
    t.update(
        &slice("a-1", "a", json!([{"name": "", "port": 80}]), &["10.1.0.1"]),
        false,
    );
    t.update(&local, false);
    t.apply(&mut map);
    let eps = &map[&spn("a", "", Protocol::Tcp)];
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0].node_name(), Some("me"));
}

#[test]
fn slice_net_zero_and_unrelated_services_untouched() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let p = json!([{"name": "p", "port": 80}]);
    let a = slice("a-1", "a", p.clone(), &["10.1.0.1"]);
    let b = slice("b-1", "b", p.clone(), &["10.2.0.1"]);
    t.update(&a, false);
    t.update(&b, false);
    t.apply(&mut map);
    let b_arc = map[&spn("b", "p", Protocol::Tcp)].clone();

    let a2 = slice("a-1", "a", p.clone(), &["10.1.0.9"]);
    assert!(t.update(&a2, false).pending);
    assert!(
        t.update(&a, false).pending,
        "reverting is a change of the pending state"
    );
    assert_eq!(t.pending(), 0, "but leaves nothing pending");
    let r = t.apply(&mut map);
    assert!(r.updated_services.is_empty() && r.changed_ports.is_empty());
    // an identical resend is not a change
    assert!(!t.update(&a, false).pending);
    // add + remove before sync
    let c = slice("c-1", "c", p.clone(), &["10.3.0.1"]);
    t.update(&c, false);
    t.update(&c, true);
    assert_eq!(t.pending(), 0);

    t.update(&a2, false);
    let r = t.apply(&mut map);
    assert_eq!(r.updated_services.len(), 1);
    assert!(Arc::ptr_eq(&b_arc, &map[&spn("b", "p", Protocol::Tcp)]));
    assert_eq!(
        ips(&map, &spn("a", "p", Protocol::Tcp)),
        vec!["10.1.0.9:80"]
    );
}

#[test]
fn malformed_slice_drops_its_previous_endpoints_only() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let p = json!([{"name": "p", "port": 80}]);
    t.update(&slice("a-1", "a", p.clone(), &["10.1.0.1"]), false);
    t.update(&slice("a-2", "a", p.clone(), &["10.1.0.2"]), false);
    t.apply(&mut map);
    // a-2 loses its label: rejected, its endpoints go away, a-1's stay
    let mut bad = slice("a-2", "a", p.clone(), &["10.1.0.2"]);
    bad.metadata.labels = None;
    let o = t.update(&bad, false);
    assert_eq!(o.error.unwrap().name, "a-2");
    assert!(o.pending);
    t.apply(&mut map);
    assert_eq!(
        ips(&map, &spn("a", "p", Protocol::Tcp)),
        vec!["10.1.0.1:80"]
    );
}

#[test]
fn slice_moving_between_services() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let p = json!([{"name": "p", "port": 80}]);
    t.update(&slice("x", "a", p.clone(), &["10.1.0.1"]), false);
    t.apply(&mut map);
    t.update(&slice("x", "b", p.clone(), &["10.1.0.1"]), false);
    let r = t.apply(&mut map);
    assert_eq!(r.updated_services.len(), 2);
    assert!(!map.contains_key(&spn("a", "p", Protocol::Tcp)));
    assert!(map.contains_key(&spn("b", "p", Protocol::Tcp)));
}

#[test]
fn udp_stale_endpoints_and_newly_active_services() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let udp = json!([{"name": "dns", "port": 53, "protocol": "UDP"}]);
    let tcp = json!([{"name": "http", "port": 80}]);
    let dns = spn("d", "dns", Protocol::Udp);

    // UDP service goes from nothing to a ready endpoint: newly active
    t.update(
        &slice("d-1", "d", udp.clone(), &["10.1.0.1", "10.1.0.2"]),
        false,
    );
    t.update(&slice("w-1", "w", tcp.clone(), &["10.2.0.1"]), false);
    let r = t.apply(&mut map);
    assert_eq!(r.newly_active_udp_services, vec![dns.clone()]);
    assert!(r.deleted_udp_endpoints.is_empty());

    // one UDP endpoint removed, one becomes not ready: both stale; not newly active
    t.update(
        &slice("d-1", "d", udp.clone(), &["!10.1.0.2", "10.1.0.3"]),
        false,
    );
    // TCP endpoint removal is never reported
    t.update(&slice("w-1", "w", tcp.clone(), &[]), false);
    let r = t.apply(&mut map);
    assert_eq!(
        r.deleted_udp_endpoints,
        vec![
            StaleUdpEndpoint {
                port_name: dns.clone(),
                ip: ip("10.1.0.1"),
                port: 53
            },
            StaleUdpEndpoint {
                port_name: dns.clone(),
                ip: ip("10.1.0.2"),
                port: 53
            },
        ]
    );
    assert!(r.newly_active_udp_services.is_empty());

    // all go unready, then one comes back: newly active again
    t.update(&slice("d-1", "d", udp.clone(), &["!10.1.0.3"]), false);
    let r = t.apply(&mut map);
    assert_eq!(r.deleted_udp_endpoints.len(), 1);
    t.update(&slice("d-1", "d", udp.clone(), &["10.1.0.3"]), false);
    let r = t.apply(&mut map);
    assert_eq!(r.newly_active_udp_services, vec![dns]);
}

#[test]
fn trigger_times_are_reported_once_and_filtered() {
    let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut t = EndpointsChangeTracker::new_at("me", start);
    let mut map = EndpointsMap::new();
    let p = json!([{"name": "p", "port": 80}]);
    let s1 = with_trigger(
        slice("a-1", "a", p.clone(), &["10.1.0.1"]),
        "2026-01-01T00:00:00Z",
    );
    let s2 = with_trigger(
        slice("a-1", "a", p.clone(), &["10.1.0.2"]),
        "2026-01-01T00:00:05Z",
    );
    let old = with_trigger(
        slice("b-1", "b", p.clone(), &["10.1.0.3"]),
        "2020-01-01T00:00:00Z",
    );
    t.update(&s1, false);
    t.update(&s2, false);
    t.update(&old, false);
    // an unchanged resend does not record a time
    t.update(&s2, false);
    let r = t.apply(&mut map);
    let a = r
        .trigger_times
        .iter()
        .find(|(k, _)| k.name == "a")
        .unwrap()
        .1;
    let t0 = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    assert_eq!(a, &vec![t0, t0 + Duration::from_secs(5)]);
    assert!(
        !r.trigger_times.keys().any(|k| k.name == "b"),
        "before tracker start"
    );
    let r = t.apply(&mut map);
    assert!(r.trigger_times.is_empty());
    // a deletion drops pending times for the service
    let s3 = with_trigger(
        slice("a-1", "a", p.clone(), &["10.1.0.4"]),
        "2026-01-01T00:00:09Z",
    );
    t.update(&s3, false);
    t.update(&s3, true);
    assert!(t.apply(&mut map).trigger_times.is_empty());
}

#[test]
fn fqdn_slices_are_ignored() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut s = slice("a-1", "a", json!([{"name": "p", "port": 80}]), &[]);
    s.address_type = "FQDN".into();
    let o = t.update(&s, false);
    assert!(!o.pending && o.error.is_none());
}

#[test]
fn one_change_among_many_services_touches_only_that_service() {
    const N: usize = 10_000;
    let mut st = ServiceChangeTracker::new();
    let mut et = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut smap = ServiceMap::new();
    let mut emap = EndpointsMap::new();
    let p = json!([{"name": "p", "port": 80}]);
    let t0 = std::time::Instant::now();
    for i in 0..N {
        let name = format!("s{i}");
        let cip = format!("10.{}.{}.1", i / 256, i % 256);
        st.update(None, Some(&svc(&name, &cip, p.clone())));
        let eps = [format!("10.200.{}.{}", i / 256, i % 256)];
        let eps: Vec<&str> = eps.iter().map(String::as_str).collect();
        et.update(&slice(&format!("{name}-1"), &name, p.clone(), &eps), false);
    }
    st.apply(&mut smap);
    et.apply(&mut emap);
    let initial = t0.elapsed();
    assert_eq!((smap.len(), emap.len()), (N, N));
    let before: Vec<_> = emap.values().cloned().collect();

    let t1 = std::time::Instant::now();
    et.update(&slice("s77-1", "s77", p.clone(), &["10.201.0.1"]), false);
    let r = et.apply(&mut emap);
    let one = t1.elapsed();
    assert_eq!(r.changed_ports.len(), 1);
    let replaced = emap
        .values()
        .zip(&before)
        .filter(|(a, b)| !Arc::ptr_eq(a, b))
        .count();
    assert_eq!(replaced, 1);
    println!("tracker: {N} services+slices initial apply {initial:?}; one slice change {one:?}");
}

#[test]
fn equal_node_names_are_shared_between_endpoints() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    let p = json!([{"name": "http", "port": 8080}]);
    t.update(&slice("a-1", "a", p.clone(), &["10.1.0.1"]), false);
    t.update(&slice("b-1", "b", p.clone(), &["10.1.0.2"]), false);
    t.apply(&mut map);
    let a = &map[&spn("a", "http", Protocol::Tcp)][0];
    let b = &map[&spn("b", "http", Protocol::Tcp)][0];
    assert_eq!(a.node_name(), Some("other"));
    assert!(Arc::ptr_eq(a.topology().unwrap(), b.topology().unwrap()));
    assert!(std::ptr::eq(a.node_name().unwrap(), b.node_name().unwrap()));
    // a later slice naming the same node shares it too, after the others are gone
    t.update(&slice("a-1", "a", p.clone(), &[]), true);
    t.apply(&mut map);
    t.update(&slice("c-1", "c", p.clone(), &["10.1.0.3"]), false);
    t.apply(&mut map);
    let b = &map[&spn("b", "http", Protocol::Tcp)][0];
    let c = &map[&spn("c", "http", Protocol::Tcp)][0];
    assert!(Arc::ptr_eq(b.topology().unwrap(), c.topology().unwrap()));
    assert!(std::ptr::eq(b.node_name().unwrap(), c.node_name().unwrap()));
}

#[test]
fn single_slice_lists_match_the_merged_form() {
    let mut t = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut map = EndpointsMap::new();
    // one port, distinct addresses: endpoints carry the port, sorted by address
    let one = json!([{"name": "http", "port": 8080}]);
    t.update(
        &slice(
            "a-1",
            "a",
            one.clone(),
            &["10.1.0.9", "10.1.0.2", "!10.1.0.5"],
        ),
        false,
    );
    // one port, a duplicated address (the local copy wins, once)
    let mut dup = slice("b-1", "b", one.clone(), &["10.2.0.1", "10.2.0.1"]);
    dup.endpoints[1].node_name = Some("me".into());
    t.update(&dup, false);
    // two ports: one list per port
    let two =
        json!([{"name": "http", "port": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"}]);
    t.update(&slice("c-1", "c", two, &["10.3.0.1"]), false);
    t.apply(&mut map);
    assert_eq!(
        ips(&map, &spn("a", "http", Protocol::Tcp)),
        vec!["10.1.0.2:8080", "10.1.0.5:8080", "10.1.0.9:8080"]
    );
    assert!(!map[&spn("a", "http", Protocol::Tcp)][1].ready);
    let b = &map[&spn("b", "http", Protocol::Tcp)];
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].node_name(), Some("me"));
    assert_eq!(
        ips(&map, &spn("c", "dns", Protocol::Udp)),
        vec!["10.3.0.1:53"]
    );
    assert_eq!(
        ips(&map, &spn("c", "http", Protocol::Tcp)),
        vec!["10.3.0.1:8080"]
    );
    // an identical update is not a change
    assert!(
        !t.update(
            &slice("a-1", "a", one, &["10.1.0.2", "10.1.0.9", "!10.1.0.5"]),
            false
        )
        .pending
    );
}

#[test]
fn names_are_shared_between_maps_and_services() {
    let same = |a: &str, b: &str| std::ptr::eq(a, b);
    let mut st = ServiceChangeTracker::new();
    let mut smap = ServiceMap::new();
    let p = json!([{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]);
    st.update(None, Some(&svc("a", "10.0.0.1", p.clone())));
    st.update(None, Some(&svc("b", "10.0.0.2", p.clone())));
    st.apply(&mut smap);
    let (ka, a) = smap
        .get_key_value(&spn("a", "http", Protocol::Tcp))
        .unwrap();
    let (kb, _) = smap
        .get_key_value(&spn("b", "http", Protocol::Tcp))
        .unwrap();
    let (ka2, _) = smap.get_key_value(&spn("a", "dns", Protocol::Udp)).unwrap();
    // one namespace string per namespace, one service name per service, map key = the port's own name
    assert!(same(&ka.namespace, &kb.namespace) && same(&ka.namespace, &ka2.namespace));
    assert!(same(&ka.name, &ka2.name) && same(&ka.name, &a.name.name));
    assert!(same(&ka.port_name, &a.name.port_name));

    let mut et = EndpointsChangeTracker::new_at("me", UNIX_EPOCH);
    let mut emap = EndpointsMap::new();
    let two =
        json!([{"name": "http", "port": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"}]);
    et.update(&slice("a-1", "a", two.clone(), &["10.1.0.1"]), false);
    et.update(&slice("b-1", "b", two, &["10.1.0.2"]), false);
    et.apply(&mut emap);
    let (ea, _) = emap
        .get_key_value(&spn("a", "http", Protocol::Tcp))
        .unwrap();
    let (eb, _) = emap
        .get_key_value(&spn("b", "http", Protocol::Tcp))
        .unwrap();
    let (ea2, _) = emap.get_key_value(&spn("a", "dns", Protocol::Udp)).unwrap();
    assert!(same(&ea.namespace, &eb.namespace) && same(&ea.name, &ea2.name));
    // names compare, order and display as strings whatever their allocation
    assert_eq!(ea, ka);
    assert_eq!(ea.to_string(), "ns/a:http");
}
