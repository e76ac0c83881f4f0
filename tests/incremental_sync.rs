//! Event-driven syncs through the incremental planner over the in-memory backends: one changed service
//! costs only its own kernel writes, a periodic sync still repairs drift, and (printed, not asserted) the
//! time of a one-endpoint sync at 10k services. Figures: `cargo test --release --test incremental_sync --
//! --nocapture`.

use kube_proxy_rs::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServiceName, ServicePort,
    ServicePortName,
};
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsServiceKey};
use kube_proxy_rs::proxier::plan::{LocalDetector, NodeFacts, PlanConfig, plan};
use kube_proxy_rs::proxier::testkit::Kit;
use kube_proxy_rs::proxier::{FamilySnapshot, Proxier, SyncInput};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODE: &str = "node-0";

fn v4(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n))
}

fn port_name(i: u32) -> ServicePortName {
    ServicePortName {
        namespace: format!("ns-{}", i % 10),
        name: format!("svc-{i}"),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
    }
}

fn endpoints(i: u32, n: u32) -> Vec<Endpoint> {
    let pod_base = u32::from(Ipv4Addr::new(10, 128, 0, 0));
    (0..n)
        .map(|k| Endpoint {
            ip: v4(pod_base + i * 16 + k),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node_name: Some(format!("node-{}", k % 3)),
            zone: None,
            hints_for_nodes: None,
            hints_for_zones: None,
        })
        .collect()
}

/// `services` ClusterIP services with 3 endpoints; every 10th has a NodePort.
fn cluster(services: u32) -> (ServiceMap, EndpointsMap) {
    let mut sm = ServiceMap::new();
    let mut em = EndpointsMap::new();
    let svc_base = u32::from(Ipv4Addr::new(10, 96, 0, 0));
    for i in 0..services {
        let name = port_name(i);
        sm.insert(
            name.clone(),
            Arc::new(ServicePort {
                name: name.clone(),
                cluster_ips: vec![v4(svc_base + i + 1)],
                port: 80,
                protocol: Protocol::Tcp,
                node_port: (i % 10 == 0).then(|| 20000 + (i / 10) as u16),
                external_ips: vec![],
                load_balancer_ingress: vec![],
                load_balancer_source_ranges: vec![],
                session_affinity_timeout: None,
                external_policy_local: false,
                internal_policy_local: false,
                health_check_node_port: None,
            }),
        );
        em.insert(name, Arc::new(endpoints(i, 3)));
    }
    (sm, em)
}

fn node() -> NodeFacts {
    let ip = v4(u32::from(Ipv4Addr::new(192, 168, 0, 10)));
    NodeFacts {
        node_name: NODE.into(),
        zone: None,
        node_ips: vec![ip],
        node_port_ips: vec![ip],
        local_addresses: vec![ip],
    }
}

fn config() -> PlanConfig {
    PlanConfig {
        family: IpFamily::V4,
        scheduler: String::new(),
        masquerade_all: false,
        masquerade_bit: 14,
        local_detector: LocalDetector::Cidrs(vec!["10.128.0.0/9".parse().unwrap()]),
        exclude_cidrs: vec![],
        random_fully: true,
    }
}

fn input(
    sm: &Arc<ServiceMap>,
    em: &Arc<EndpointsMap>,
    full: bool,
    changed: Option<BTreeSet<ServiceName>>,
) -> SyncInput {
    SyncInput {
        families: vec![FamilySnapshot {
            services: sm.clone(),
            endpoints: em.clone(),
            node: node(),
            config: config(),
        }],
        full,
        changed,
        ..Default::default()
    }
}

#[test]
fn event_driven_sync_writes_only_the_changed_service() {
    let kit = Kit::new();
    let mut p = Proxier::with_planner(kit.backends());
    let (sm, mut em) = cluster(200);
    let sm = Arc::new(sm);
    let r = p.sync_proxy_rules(input(&sm, &Arc::new(em.clone()), true, None));
    assert_eq!(r.failure_count(), 0, "{r:?}");
    // 200 ClusterIP + 20 NodePort virtual servers.
    assert_eq!(kit.services().len(), 220);

    // Service 7 (no NodePort) gains an endpoint on this node: one real server and its hairpin ipset
    // entry are added, nothing else is written, nothing is read.
    let name = port_name(7);
    em.insert(name.clone(), Arc::new(endpoints(7, 4)));
    kit.clear_logs();
    let changed = BTreeSet::from([name.service()]);
    let r = p.sync_proxy_rules(input(&sm, &Arc::new(em.clone()), false, Some(changed)));
    assert_eq!(r.failure_count(), 0, "{r:?}");
    let writes = kit.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[0], "ipset.apply 1 ops", "{writes:?}");
    assert!(writes[1].contains("10.128.0.115"), "{writes:?}");
    assert_eq!(r.ipvs_destinations.added, 1);
    assert_eq!(r.ipset_entries.added, 1);
    assert!(kit.reads().is_empty(), "{:?}", kit.reads());

    // The kernel matches the complete plan of the new state.
    let want = plan(&sm, &em, &node(), &config());
    assert_eq!(
        kit.services(),
        want.virtual_servers.keys().copied().collect()
    );
    for (k, vs) in &want.virtual_servers {
        assert_eq!(kit.dests(k).unwrap().len(), vs.destinations.len(), "{k}");
    }

    // Service 10 (NodePort) is deleted: its two virtual servers, ClusterIP address and set entries go.
    let mut sm2 = (*sm).clone();
    let name = port_name(10);
    sm2.remove(&name);
    em.remove(&name);
    kit.clear_logs();
    let changed = BTreeSet::from([name.service()]);
    let sm2 = Arc::new(sm2);
    let r = p.sync_proxy_rules(input(&sm2, &Arc::new(em.clone()), false, Some(changed)));
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.deleted, 2, "{r:?}");
    assert_eq!(r.addresses.deleted, 1, "{r:?}");
    // ClusterIP, IPVS-IPS, node-port and (its endpoint on this node) hairpin entries.
    assert_eq!(r.ipset_entries.deleted, 4, "{r:?}");
    assert_eq!(kit.services().len(), 218);
}

#[test]
fn periodic_sync_repairs_drift_the_event_path_does_not_see() {
    let kit = Kit::new();
    let mut p = Proxier::with_planner(kit.backends());
    let (sm, em) = cluster(50);
    let (sm, em) = (Arc::new(sm), Arc::new(em));
    p.sync_proxy_rules(input(&sm, &em, true, None));
    // Someone deletes one of our virtual servers behind our back.
    let key = IpvsServiceKey {
        addr: v4(u32::from(Ipv4Addr::new(10, 96, 0, 4))),
        port: 80,
        protocol: Protocol::Tcp,
    };
    let mut ipvs = kit.ipvs.clone();
    ipvs.delete_service(&key).unwrap();
    // An event-driven sync for another service does not look at it.
    let changed = BTreeSet::from([port_name(1).service()]);
    let r = p.sync_proxy_rules(input(&sm, &em, false, Some(changed)));
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(!kit.services().contains(&key));
    // The periodic sync dumps the kernel and puts it back.
    let r = p.sync_proxy_rules(input(&sm, &em, true, None));
    assert_eq!(r.ipvs_services.added, 1, "{r:?}");
    assert!(kit.services().contains(&key));
    assert_eq!(kit.dests(&key).unwrap().len(), 3);
}

fn percentile(times: &[Duration], p: usize) -> f64 {
    times[(times.len() * p / 100).min(times.len() - 1)].as_secs_f64() * 1e3
}

#[test]
fn one_endpoint_change_at_10k_services_figures() {
    const SERVICES: u32 = 10_000;
    const RUNS: u32 = 100;
    let kit = Kit::new();
    let mut p = Proxier::with_planner(kit.backends());
    let (sm, mut em) = cluster(SERVICES);
    let sm = Arc::new(sm);
    let t = Instant::now();
    let r = p.sync_proxy_rules(input(&sm, &Arc::new(em.clone()), true, None));
    let first = t.elapsed();
    assert_eq!(r.failure_count(), 0);
    let mut em = Arc::new(std::mem::take(&mut em));
    let mut times = Vec::new();
    for run in 0..RUNS {
        let i = (run * 97 + 1) % SERVICES;
        let name = port_name(i);
        // Copy-on-write: only the changed entry's vector is new (as the trackers do).
        Arc::make_mut(&mut em).insert(name.clone(), Arc::new(endpoints(i, 3 + run % 2 + 1)));
        kit.clear_logs();
        let changed = BTreeSet::from([name.service()]);
        let t = Instant::now();
        let r = p.sync_proxy_rules(input(&sm, &em, false, Some(changed)));
        times.push(t.elapsed());
        assert_eq!(r.failure_count(), 0);
        assert!(r.writes() >= 1 && r.writes() <= 6, "{r:?}");
    }
    let t = Instant::now();
    let r = p.sync_proxy_rules(input(&sm, &em, true, None));
    let periodic = t.elapsed();
    assert_eq!(r.failure_count(), 0);
    times.sort();
    println!(
        "{SERVICES} services x 3 endpoints, fake backends: first full sync {:.1} ms; one endpoint change \
         (event-driven sync, plan + apply): median {:.3} ms, p99 {:.3} ms, max {:.3} ms over {RUNS} runs; \
         periodic full sync {:.1} ms",
        first.as_secs_f64() * 1e3,
        percentile(&times, 50),
        percentile(&times, 99),
        times[times.len() - 1].as_secs_f64() * 1e3,
        periodic.as_secs_f64() * 1e3,
    );
}
