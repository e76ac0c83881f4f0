//! Planner benchmark: median `plan()` time and plan size for 1k, 10k and 50k services with 10 endpoints
//! each (10% NodePort, 10% ClientIP affinity), then the incremental planner: its first (full) update and
//! the median / p99 time of an update for one endpoint change. Run with `cargo bench --bench plan`.

use kube_proxy_rs::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServicePort, ServicePortName, Topology,
};
use kube_proxy_rs::proxier::desired::DesiredState;
use kube_proxy_rs::proxier::plan::incremental::IncrementalPlanner;
use kube_proxy_rs::proxier::plan::{LocalDetector, NodeFacts, PlanConfig, plan};
use std::collections::BTreeSet;
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
            namespace: format!("ns-{}", i % 100).into(),
            name: format!("svc-{i}").into(),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
        };
        let sp = ServicePort {
            // A wide node-port range (20000-24999) keeps every node port distinct at 50k services.
            node_port: (i % 10 == 0).then(|| 20000 + (i / 10) as u16),
            session_affinity_timeout: (i % 10 == 5).then_some(10800),
            ..ServicePort::new(name.clone(), vec![v4(svc_base + i + 1)], 80)
        };
        let eps: Vec<Endpoint> = (0..10)
            .map(|k| {
                // One endpoint in ten runs on this node.
                let node = if k == 0 {
                    NODE.to_string()
                } else {
                    format!("node-{k}")
                };
                Endpoint::new(v4(pod_base + i * 10 + k), 8080)
                    .with_topology(Topology::on_node(&node))
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

/// Times the incremental planner: one full update, then `runs` updates each changing one endpoint of one
/// service (a different one each time).
fn incremental(
    sm: &ServiceMap,
    em: &mut EndpointsMap,
    node: &NodeFacts,
    cfg: &PlanConfig,
    runs: usize,
) {
    let services = sm.len();
    let mut planner = IncrementalPlanner::new();
    let t = Instant::now();
    planner.update(sm, em, node, cfg, None);
    let first = t.elapsed();
    let mut times: Vec<Duration> = Vec::with_capacity(runs);
    let mut changes = 0;
    let names: Vec<_> = em.keys().cloned().collect();
    for r in 0..runs {
        let name = names[(r * 7919) % names.len()].clone();
        let mut eps = (*em[&name]).clone();
        eps[1].ready = !eps[1].ready;
        em.insert(name.clone(), Arc::new(eps));
        let changed = BTreeSet::from([name.service()]);
        let t = Instant::now();
        let (_, delta) = planner.update(black_box(sm), black_box(em), node, cfg, Some(&changed));
        times.push(t.elapsed());
        changes += delta.len();
    }
    times.sort();
    let pct = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)].as_secs_f64() * 1e3;
    println!(
        "incremental {services:>6} services: first update {:>8.2} ms; one endpoint change: median {:.3} ms, \
         p99 {:.3} ms, max {:.3} ms over {runs} runs ({:.1} changes per delta)",
        first.as_secs_f64() * 1e3,
        pct(50),
        pct(99),
        times[times.len() - 1].as_secs_f64() * 1e3,
        changes as f64 / runs as f64,
    );
}

fn main() {
    let node = NodeFacts::new(NODE, vec![IpAddr::V4(Ipv4Addr::new(192, 168, 0, 10))]);
    let cfg = PlanConfig {
        local_detector: LocalDetector::Cidrs(vec!["10.128.0.0/9".parse().unwrap()]),
        ..PlanConfig::new(IpFamily::V4)
    };
    for (services, runs) in [(1_000u32, 21usize), (10_000, 11), (50_000, 5)] {
        let (sm, mut em) = build(services);
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
        incremental(&sm, &mut em, &node, &cfg, 200);
    }
}
