//! Service / EndpointSlice conversion: every field and every malformed case.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_proxy_rs::cluster::convert::{
    ConvertError, InvalidReason, ObjectKind, service_ports, slice_info,
};
use kube_proxy_rs::cluster::model::{IpFamily, Protocol};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn svc(spec: Value) -> Service {
    svc_with(spec, json!({}), json!({}))
}

fn svc_with(spec: Value, status: Value, annotations: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns1", "annotations": annotations},
        "spec": spec,
        "status": status,
    }))
    .unwrap()
}

fn slice(body: Value) -> EndpointSlice {
    let mut v = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "namespace": "ns1",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [],
    });
    for (k, val) in body.as_object().unwrap() {
        v[k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn svc_err(spec: Value) -> ConvertError {
    service_ports(&svc(spec)).unwrap_err()
}

#[test]
fn cluster_ip_service_basic_fields() {
    let c = service_ports(&svc(json!({
        "type": "ClusterIP", "clusterIP": "10.96.0.10",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                  {"name": "dns", "port": 53, "protocol": "UDP"},
                  {"name": "s", "port": 9, "protocol": "SCTP"},
                  {"name": "def", "port": 8080}]
    })))
    .unwrap();
    assert!(c.warnings.is_empty());
    assert_eq!(c.name.to_string(), "ns1/web");
    assert_eq!(c.ports.len(), 4);
    let p = &c.ports[0];
    assert_eq!(p.name.to_string(), "ns1/web:http");
    assert_eq!(p.cluster_ips, vec![ip("10.96.0.10")]);
    assert_eq!(p.port, 80);
    assert_eq!(p.protocol, Protocol::Tcp);
    assert_eq!(p.node_port, None);
    assert_eq!(p.session_affinity_timeout, None);
    assert!(!p.external_policy_local && !p.internal_policy_local);
    assert_eq!(p.health_check_node_port, None);
    assert_eq!(c.ports[1].protocol, Protocol::Udp);
    assert_eq!(c.ports[1].name.protocol, Protocol::Udp);
    assert_eq!(c.ports[2].protocol, Protocol::Sctp);
    assert_eq!(
        c.ports[3].protocol,
        Protocol::Tcp,
        "protocol defaults to TCP"
    );
}

#[test]
fn dual_stack_cluster_ips() {
    let c = service_ports(&svc(json!({
        "clusterIP": "fd00::10", "clusterIPs": ["fd00::10", "10.96.0.10"],
        "ports": [{"port": 80}]
    })))
    .unwrap();
    let p = &c.ports[0];
    assert_eq!(p.cluster_ips, vec![ip("fd00::10"), ip("10.96.0.10")]);
    assert_eq!(p.cluster_ip(IpFamily::V4), Some(ip("10.96.0.10")));
    assert_eq!(p.cluster_ip(IpFamily::V6), Some(ip("fd00::10")));
    assert_eq!(p.name.port_name, "");
    assert_eq!(p.name.to_string(), "ns1/web");
}

#[test]
fn headless_external_name_and_missing_cluster_ip_yield_no_ports() {
    for spec in [
        json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        json!({"clusterIP": "", "ports": [{"port": 80}]}),
        json!({"ports": [{"port": 80}]}),
        json!({"type": "ExternalName", "externalName": "x.example", "clusterIP": "10.0.0.1", "ports": [{"port": 80}]}),
    ] {
        let c = service_ports(&svc(spec.clone())).unwrap();
        assert!(c.ports.is_empty(), "{spec}");
    }
}

#[test]
fn node_port_load_balancer_and_policies() {
    let c = service_ports(&svc_with(
        json!({
            "type": "LoadBalancer", "clusterIP": "10.96.0.20",
            "externalIPs": ["192.0.2.1", "not-an-ip", "2001:db8::1"],
            "loadBalancerSourceRanges": [" 203.0.113.0/24 ", "bogus", "2001:db8::/64"],
            "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local",
            "healthCheckNodePort": 32000,
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
            "ports": [{"name": "http", "port": 80, "nodePort": 30080}]
        }),
        json!({"loadBalancer": {"ingress": [
            {"ip": "198.51.100.1"},
            {"ip": "198.51.100.2", "ipMode": "Proxy"},
            {"ip": "198.51.100.3", "ipMode": "VIP"},
            {"hostname": "lb.example"},
            {"ip": "300.1.1.1"}
        ]}}),
        json!({}),
    ))
    .unwrap();
    let p = &c.ports[0];
    assert_eq!(p.node_port, Some(30080));
    assert_eq!(p.external_ips, vec![ip("192.0.2.1"), ip("2001:db8::1")]);
    assert_eq!(
        p.load_balancer_source_ranges,
        vec![
            "203.0.113.0/24".parse().unwrap(),
            "2001:db8::/64".parse().unwrap()
        ]
    );
    let lb: Vec<(IpAddr, bool)> = p
        .load_balancer_ingress
        .iter()
        .map(|i| (i.ip, i.ip_mode_proxy))
        .collect();
    assert_eq!(
        lb,
        vec![
            (ip("198.51.100.1"), false),
            (ip("198.51.100.2"), true),
            (ip("198.51.100.3"), false)
        ]
    );
    assert_eq!(
        p.load_balancer_ips_of(IpFamily::V4).collect::<Vec<_>>(),
        vec![ip("198.51.100.1"), ip("198.51.100.3")]
    );
    assert!(p.external_policy_local && p.internal_policy_local);
    assert_eq!(p.health_check_node_port, Some(32000));
    assert_eq!(p.session_affinity_timeout, Some(60));
    // three dropped entries, each reported with the object's name
    assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
    assert!(
        c.warnings
            .iter()
            .all(|w| w.kind == ObjectKind::Service && w.namespace == "ns1" && w.name == "web")
    );
    assert!(c.warnings[0].to_string().contains("not-an-ip"));
    assert!(c.warnings[1].message.contains("bogus"));
    assert!(c.warnings[2].message.contains("300.1.1.1"));
}

#[test]
fn affinity_default_timeout() {
    let c = service_ports(&svc(json!({
        "clusterIP": "10.96.0.1", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]
    })))
    .unwrap();
    assert_eq!(c.ports[0].session_affinity_timeout, Some(10800));
    let c = service_ports(&svc(json!({
        "clusterIP": "10.96.0.1", "sessionAffinity": "None",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}, "ports": [{"port": 80}]
    })))
    .unwrap();
    assert_eq!(c.ports[0].session_affinity_timeout, None);
}

#[test]
fn external_policy_needs_external_access() {
    // ClusterIP without externalIPs: externalTrafficPolicy is meaningless
    let c = service_ports(&svc(json!({
        "clusterIP": "10.96.0.1", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]
    })))
    .unwrap();
    assert!(!c.ports[0].external_policy_local);
    // ClusterIP with externalIPs: applies
    let c = service_ports(&svc(json!({
        "clusterIP": "10.96.0.1", "externalTrafficPolicy": "Local",
        "externalIPs": ["192.0.2.9"], "ports": [{"port": 80}]
    })))
    .unwrap();
    assert!(c.ports[0].external_policy_local);
    // NodePort Local: no health-check port (only LoadBalancer needs one)
    let c = service_ports(&svc(json!({
        "type": "NodePort", "clusterIP": "10.96.0.1", "externalTrafficPolicy": "Local",
        "healthCheckNodePort": 32000, "ports": [{"port": 80, "nodePort": 30001}]
    })))
    .unwrap();
    assert!(c.ports[0].external_policy_local);
    assert_eq!(c.ports[0].health_check_node_port, None);
    // LoadBalancer Local without healthCheckNodePort: warning, none
    let c = service_ports(&svc(json!({
        "type": "LoadBalancer", "clusterIP": "10.96.0.1", "externalTrafficPolicy": "Local",
        "ports": [{"port": 80, "nodePort": 30001}]
    })))
    .unwrap();
    assert_eq!(c.ports[0].health_check_node_port, None);
    assert_eq!(c.warnings.len(), 1);
}

#[test]
fn source_ranges_come_from_spec_only_like_upstream() {
    let c = service_ports(&svc_with(
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.1", "ports": [{"port": 80, "nodePort": 30001}]}),
        json!({}),
        json!({"service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8"}),
    ))
    .unwrap();
    assert!(c.ports[0].load_balancer_source_ranges.is_empty());
}

#[test]
fn malformed_services_are_rejected_with_name_and_reason() {
    let cases: Vec<(Value, InvalidReason)> = vec![
        (
            json!({"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}),
            InvalidReason::InvalidClusterIp("10.96.0.300".into()),
        ),
        (
            json!({"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1", "10.96.0.2"], "ports": [{"port": 80}]}),
            InvalidReason::DuplicateClusterIpFamily("IPv4"),
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 0}]}),
            InvalidReason::InvalidPort {
                port_name: "a".into(),
                value: 0,
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 65536}]}),
            InvalidReason::InvalidPort {
                port_name: "a".into(),
                value: 65536,
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": -1}]}),
            InvalidReason::InvalidPort {
                port_name: "a".into(),
                value: -1,
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 80, "nodePort": 70000}]}),
            InvalidReason::InvalidNodePort {
                port_name: "a".into(),
                value: 70000,
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 80, "protocol": "ICMP"}]}),
            InvalidReason::UnknownProtocol {
                port_name: "a".into(),
                protocol: "ICMP".into(),
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 80, "protocol": "tcp"}]}),
            InvalidReason::UnknownProtocol {
                port_name: "a".into(),
                protocol: "tcp".into(),
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}),
            InvalidReason::DuplicatePortName("a".into()),
        ),
        (
            json!({"clusterIP": "10.96.0.1", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}),
            InvalidReason::DuplicatePort {
                port: 80,
                protocol: "TCP",
            },
        ),
        (
            json!({"clusterIP": "10.96.0.1", "sessionAffinity": "ClientIP",
                   "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}, "ports": [{"port": 80}]}),
            InvalidReason::InvalidAffinityTimeout(0),
        ),
        (
            json!({"type": "LoadBalancer", "clusterIP": "10.96.0.1", "externalTrafficPolicy": "Local",
                   "healthCheckNodePort": 70000, "ports": [{"port": 80}]}),
            InvalidReason::InvalidHealthCheckNodePort(70000),
        ),
    ];
    for (spec, reason) in cases {
        let e = svc_err(spec.clone());
        assert_eq!(e.kind, ObjectKind::Service);
        assert_eq!((e.namespace.as_str(), e.name.as_str()), ("ns1", "web"));
        assert_eq!(e.reason, reason, "{spec}");
        assert!(
            e.to_string().starts_with("Service ns1/web rejected: "),
            "{e}"
        );
    }
    // same port number on different protocols is fine
    let c = service_ports(&svc(json!({"clusterIP": "10.96.0.1",
        "ports": [{"name": "t", "port": 53}, {"name": "u", "port": 53, "protocol": "UDP"}]})))
    .unwrap();
    assert_eq!(c.ports.len(), 2);
}

#[test]
fn slice_fields_and_condition_defaults() {
    let s = slice(json!({
        "metadata": {"name": "web-abc", "namespace": "ns1",
            "labels": {"kubernetes.io/service-name": "web"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-02T03:04:05Z"}},
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                  {"name": "dns", "port": 53, "protocol": "UDP"}],
        "endpoints": [
            {"addresses": ["10.244.0.12", "10.244.0.99"], "nodeName": "n1", "zone": "z1",
             "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "n1"}]}},
            {"addresses": ["10.244.0.11"], "conditions": {"ready": false}},
            {"addresses": ["10.244.0.13"], "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": []}
        ]
    }));
    let info = slice_info(&s).unwrap().unwrap();
    assert_eq!(info.service.to_string(), "ns1/web");
    assert_eq!(info.slice_name, "web-abc");
    // ports sorted by (name, protocol, port)
    assert_eq!(info.ports.len(), 2);
    assert_eq!(info.ports[0].name, "dns");
    assert_eq!(info.ports[0].protocol, Protocol::Udp);
    assert_eq!(info.ports[1].port, 8080);
    // endpoints sorted by address
    let eps = &info.endpoints;
    assert_eq!(eps.len(), 3);
    assert_eq!(eps[0].ip, ip("10.244.0.11"));
    assert!(
        !eps[0].ready && !eps[0].serving && !eps[0].terminating,
        "serving defaults to ready"
    );
    assert_eq!(eps[1].ip, ip("10.244.0.12"), "first address is used");
    assert!(
        eps[1].ready && eps[1].serving && !eps[1].terminating,
        "nil conditions"
    );
    assert_eq!(eps[1].node_name(), Some("n1"));
    assert_eq!(eps[1].zone(), Some("z1"));
    assert_eq!(eps[1].hints_for_zones(), Some(&["z1".into()][..]));
    assert_eq!(eps[1].hints_for_nodes(), Some(&["n1".into()][..]));
    assert!(!eps[2].ready && eps[2].serving && eps[2].terminating);
    assert_eq!(eps[2].hints_for_zones(), None);
    // the endpoint without address is dropped with a warning
    assert_eq!(info.warnings.len(), 1);
    // per-port view
    let http = info.ports.iter().find(|p| p.name == "http").unwrap();
    let per_port: Vec<_> = info.endpoints_for(http).map(|e| e.port).collect();
    assert_eq!(per_port, vec![8080, 8080, 8080]);
    assert_eq!(info.port_name(http).to_string(), "ns1/web:http");
    assert_eq!(
        info.trigger_time,
        Some(UNIX_EPOCH + Duration::from_secs(1767323045))
    );
}

#[test]
fn slice_ipv6_fqdn_and_odd_ports() {
    let s = slice(json!({"addressType": "IPv6",
        "ports": [{"name": "x", "port": 80}, {"port": 81}, {"name": "y"}],
        "endpoints": [{"addresses": ["fd00::1"]}]}));
    let info = slice_info(&s).unwrap().unwrap();
    assert_eq!(info.endpoints[0].ip, ip("fd00::1"));
    assert_eq!(
        info.ports.len(),
        1,
        "nil name / nil port ignored as upstream"
    );
    assert_eq!(info.ports[0].protocol, Protocol::Tcp);
    assert_eq!(info.warnings.len(), 2);
    assert_eq!(info.trigger_time, None);

    let s = slice(json!({"addressType": "FQDN", "endpoints": [{"addresses": ["a.example"]}]}));
    assert_eq!(slice_info(&s).unwrap(), None);
    let _ = SystemTime::now();
}

#[test]
fn malformed_slices_are_rejected_with_name_and_reason() {
    let no_label: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "namespace": "ns2"}, "addressType": "IPv4", "endpoints": []
    }))
    .unwrap();
    let cases: Vec<(EndpointSlice, InvalidReason)> = vec![
        (no_label, InvalidReason::MissingServiceName),
        (
            slice(json!({"endpoints": [{"addresses": ["10.1.1.256"]}]})),
            InvalidReason::InvalidAddress("10.1.1.256".into()),
        ),
        (
            slice(json!({"endpoints": [{"addresses": ["fd00::1"]}]})),
            InvalidReason::AddressFamilyMismatch {
                address: "fd00::1".into(),
                address_type: "IPv4".into(),
            },
        ),
        (
            slice(json!({"ports": [{"name": "a", "port": 0}]})),
            InvalidReason::InvalidPort {
                port_name: "a".into(),
                value: 0,
            },
        ),
        (
            slice(json!({"ports": [{"name": "a", "port": 70000}]})),
            InvalidReason::InvalidPort {
                port_name: "a".into(),
                value: 70000,
            },
        ),
        (
            slice(json!({"ports": [{"name": "a", "port": 80, "protocol": "HTTP"}]})),
            InvalidReason::UnknownProtocol {
                port_name: "a".into(),
                protocol: "HTTP".into(),
            },
        ),
        (
            slice(json!({"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]})),
            InvalidReason::DuplicatePortName("a".into()),
        ),
        (
            slice(json!({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]})),
            InvalidReason::DuplicatePort {
                port: 80,
                protocol: "TCP",
            },
        ),
        (
            slice(json!({"addressType": "IPv5"})),
            InvalidReason::UnknownAddressType("IPv5".into()),
        ),
    ];
    for (s, reason) in cases {
        let e = slice_info(&s).unwrap_err();
        assert_eq!(e.kind, ObjectKind::EndpointSlice);
        assert_eq!(e.reason, reason);
        let expect = format!(
            "EndpointSlice {}/{} rejected: ",
            s.metadata.namespace.as_deref().unwrap(),
            s.metadata.name.as_deref().unwrap()
        );
        assert!(e.to_string().starts_with(&expect), "{e}");
    }
}

#[test]
fn sloppy_ip_and_cidr_parsing_like_go() {
    use kube_proxy_rs::cluster::convert::{parse_cidr, parse_ip};
    assert_eq!(parse_ip("010.096.000.010"), Some(ip("10.96.0.10")));
    assert_eq!(parse_ip(" fd00::1 "), Some(ip("fd00::1")));
    for bad in [
        "1.2.3",
        "1.2.3.4.5",
        "256.1.1.1",
        "1.2.3.0004",
        "1..2.3",
        "a.b.c.d",
        "",
        "fd00::g",
    ] {
        assert_eq!(parse_ip(bad), None, "{bad}");
    }
    assert_eq!(
        parse_cidr("10.0.0.1/8"),
        Some("10.0.0.0/8".parse().unwrap())
    );
    assert_eq!(
        parse_cidr("010.0.0.0/08"),
        Some("10.0.0.0/8".parse().unwrap())
    );
    assert_eq!(
        parse_cidr("2001:db8::1/64"),
        Some("2001:db8::/64".parse().unwrap())
    );
    for bad in ["10.0.0.0", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "x/8"] {
        assert_eq!(parse_cidr(bad), None, "{bad}");
    }
    // a leading-zero ClusterIP from an old cluster is accepted
    let c = service_ports(&svc(
        json!({"clusterIP": "010.096.000.001", "ports": [{"port": 80}]}),
    ))
    .unwrap();
    assert_eq!(c.ports[0].cluster_ips, vec![ip("10.96.0.1")]);
}
