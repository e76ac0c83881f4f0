//! Planner benchmark: median `plan()` time and plan size for 1k, 10k and 50k services with 10 endpoints
//! each (10% NodePort, 10% ClientIP affinity). Run with `cargo bench --bench plan`.

use kube_proxy_rs::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServicePort, ServicePortName,
};
use kube_proxy_rs::proxier::desired::DesiredState;
use kube_proxy_rs::proxier::plan::{LocalDetector, NodeFacts, PlanConfig, plan};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODE: &str = "node-0";

fn v4(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n))
}

fn build(services: u32) -> (ServiceMap, EndpointsMap) {
    let mut sm = ServiceMap::new();
    let mut em = EndpointsMap::new();
    let svc_base = u32::from(Ipv4Addr::new(10, 96, 0, 0));
    let pod_base = u32::from(Ipv4Addr::new(10, 128, 0, 0));
    for i in 0..services {
        let name = ServicePortName {
            namespace: format!("ns-{}", i % 100),
            name: format!("svc-{i}"),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
        };
        let sp = ServicePort {
            name: name.clone(),
            cluster_ips: vec![v4(svc_base + i + 1)],
            port: 80,
            protocol: Protocol::Tcp,
            // A wide node-port range (20000-24999) keeps every node port distinct at 50k services.
            node_port: (i % 10 == 0).then(|| 20000 + (i / 10) as u16),
            external_ips: vec![],
            load_balancer_ingress: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity_timeout: (i % 10 == 5).then_some(10800),
            external_policy_local: false,
            internal_policy_local: false,
            health_check_node_port: None,
        };
        let eps: Vec<Endpoint> = (0..10)
            .map(|k| Endpoint {
                ip: v4(pod_base + i * 10 + k),
                port: 8080,
                ready: true,
                serving: true,
                terminating: false,
                // One endpoint in ten runs on this node.
                node_name: Some(if k == 0 {
                    NODE.to_string()
                } else {
                    format!("node-{k}")
                }),
                zone: None,
                hints_for_nodes: None,
                hints_for_zones: None,
            })
            .collect();
        sm.insert(name.clone(), Arc::new(sp));
        em.insert(name, Arc::new(eps));
    }
    (sm, em)
}

fn size(d: &DesiredState) -> (usize, usize, usize, usize) {
    let vs = d.virtual_servers.len();
    let rs: usize = d
        .virtual_servers
        .values()
        .map(|v| v.destinations.len())
        .sum();
    let entries: usize = d.ipsets.values().map(|s| s.entries.len()).sum();
    (vs, rs, entries, d.iptables_payload.len())
}

fn main() {
    let node = NodeFacts {
        node_name: NODE.into(),
        zone: None,
        node_ips: vec![v4(u32::from(Ipv4Addr::new(192, 168, 0, 10)))],
        node_port_ips: vec![v4(u32::from(Ipv4Addr::new(192, 168, 0, 10)))],
        local_addresses: vec![v4(u32::from(Ipv4Addr::new(192, 168, 0, 10)))],
    };
    let cfg = PlanConfig {
        family: IpFamily::V4,
        scheduler: String::new(),
        masquerade_all: false,
        masquerade_bit: 14,
        local_detector: LocalDetector::Cidrs(vec!["10.128.0.0/9".parse().unwrap()]),
        exclude_cidrs: vec![],
        random_fully: true,
    };
    for (services, runs) in [(1_000u32, 21usize), (10_000, 11), (50_000, 5)] {
        let (sm, em) = build(services);
        let mut times: Vec<Duration> = Vec::with_capacity(runs);
        let mut last = None;
        for _ in 0..runs {
            let t = Instant::now();
            let d = plan(black_box(&sm), black_box(&em), &node, &cfg);
            times.push(t.elapsed());
            last = Some(d);
        }
        times.sort();
        let median = times[times.len() / 2];
        let (vs, rs, entries, payload) = size(last.as_ref().unwrap());
        println!(
            "plan {services:>6} services x 10 endpoints: median {:>9.2} ms over {runs} runs \
             (min {:.2} ms, max {:.2} ms); {vs} virtual servers, {rs} real servers, \
             {entries} ipset entries, {payload} B iptables payload",
            median.as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3,
        );
    }
}
