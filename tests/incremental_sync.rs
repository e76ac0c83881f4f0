//! Event-driven syncs through the incremental planner over the in-memory backends: one changed service
//! costs only its own kernel writes, a periodic sync still repairs drift, and (printed, not asserted) the
//! time of a one-endpoint sync at 10k services. Figures: `cargo test --release --test incremental_sync --
//! --nocapture`.

use kube_proxy_rs::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServiceName, ServicePort,
    ServicePortName, Topology,
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
        namespace: format!("ns-{}", i % 10).into(),
        name: format!("svc-{i}").into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
    }
}

fn endpoints(i: u32, n: u32) -> Vec<Endpoint> {
    let pod_base = u32::from(Ipv4Addr::new(10, 128, 0, 0));
    (0..n)
        .map(|k| {
            Endpoint::new(v4(pod_base + i * 16 + k), 8080)
                .with_topology(Topology::on_node(&format!("node-{}", k % 3)))
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
                node_port: (i % 10 == 0).then(|| 20000 + (i / 10) as u16),
                ..ServicePort::new(name.clone(), vec![v4(svc_base + i + 1)], 80)
            }),
        );
        em.insert(name, Arc::new(endpoints(i, 3)));
    }
    (sm, em)
}

fn node() -> NodeFacts {
    NodeFacts::new(NODE, vec![IpAddr::V4(Ipv4Addr::new(192, 168, 0, 10))])
}

fn config() -> PlanConfig {
    PlanConfig {
        local_detector: LocalDetector::Cidrs(vec!["10.128.0.0/9".parse().unwrap()]),
        ..PlanConfig::new(IpFamily::V4)
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
    let mut p = Proxier::new(kit.backends());
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
    let mut p = Proxier::new(kit.backends());
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

/// CPU time of this thread (wall-clock outliers on a loaded machine are mostly preemption).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn percentile(times: &[Duration], p: usize) -> f64 {
    times[(times.len() * p / 100).min(times.len() - 1)].as_secs_f64() * 1e3
}

#[test]
fn one_endpoint_change_at_10k_services_figures() {
    const SERVICES: u32 = 10_000;
    const RUNS: u32 = 1000;
    let kit = Kit::new();
    let mut p = Proxier::new(kit.backends());
    let (sm, mut em) = cluster(SERVICES);
    let sm = Arc::new(sm);
    let t = Instant::now();
    let r = p.sync_proxy_rules(input(&sm, &Arc::new(em.clone()), true, None));
    let first = t.elapsed();
    assert_eq!(r.failure_count(), 0);
    let mut em = Arc::new(std::mem::take(&mut em));
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    for run in 0..RUNS {
        let i = (run * 97 + 1) % SERVICES;
        let name = port_name(i);
        // Copy-on-write: only the changed entry's vector is new (as the trackers do).
        Arc::make_mut(&mut em).insert(name.clone(), Arc::new(endpoints(i, 3 + run % 2 + 1)));
        kit.clear_logs();
        let changed = BTreeSet::from([name.service()]);
        let (t, c) = (Instant::now(), thread_cpu());
        let r = p.sync_proxy_rules(input(&sm, &em, false, Some(changed)));
        times.push(t.elapsed());
        cpu.push(thread_cpu() - c);
        assert_eq!(r.failure_count(), 0);
        assert!(r.writes() >= 1 && r.writes() <= 6, "{r:?}");
    }
    let t = Instant::now();
    let r = p.sync_proxy_rules(input(&sm, &em, true, None));
    let periodic = t.elapsed();
    assert_eq!(r.failure_count(), 0);
    let first_event = times[0];
    times.sort();
    cpu.sort();
    println!(
        "{SERVICES} services x 3 endpoints, fake backends: first full sync {:.1} ms; one endpoint change \
         (event-driven sync, plan + apply) over {RUNS} runs: wall median {:.3} ms, p99 {:.3} ms, max {:.3} ms \
         (first {:.3} ms); thread CPU median {:.3} ms, p99 {:.3} ms, max {:.3} ms; periodic full sync {:.1} ms",
        first.as_secs_f64() * 1e3,
        percentile(&times, 50),
        percentile(&times, 99),
        times[times.len() - 1].as_secs_f64() * 1e3,
        first_event.as_secs_f64() * 1e3,
        percentile(&cpu, 50),
        percentile(&cpu, 99),
        cpu[cpu.len() - 1].as_secs_f64() * 1e3,
        periodic.as_secs_f64() * 1e3,
    );
}

/// Small deterministic generator (xorshift64), so failures replay.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A random variant of service `i`: shared ExternalIPs, NodePorts, LB with source ranges, ETP Local,
/// UDP, and 0-4 endpoints (some on this node).
fn random_service(rng: &mut Rng, i: u32) -> (ServicePort, Vec<Endpoint>) {
    let name = port_name(i);
    let protocol = if rng.below(4) == 0 {
        Protocol::Udp
    } else {
        Protocol::Tcp
    };
    let name = ServicePortName { protocol, ..name };
    let ext = ["203.0.113.1", "203.0.113.2"];
    let external_ips = match rng.below(4) {
        0 => vec![ext[rng.below(2) as usize].parse().unwrap()],
        _ => vec![],
    };
    let lb = rng.below(5) == 0;
    let sp = ServicePort {
        node_port: (rng.below(3) == 0).then(|| 30000 + rng.below(4) as u16),
        external_ips,
        load_balancer_ingress: if lb {
            vec![kube_proxy_rs::cluster::model::LoadBalancerIngress {
                ip: "198.51.100.1".parse().unwrap(),
                ip_mode_proxy: false,
            }]
        } else {
            vec![]
        },
        load_balancer_source_ranges: if lb && rng.below(2) == 0 {
            vec!["10.0.0.0/8".parse().unwrap()]
        } else {
            vec![]
        },
        session_affinity_timeout: (rng.below(5) == 0).then_some(10800),
        external_policy_local: rng.below(3) == 0,
        ..ServicePort::new(
            name.clone(),
            vec![v4(u32::from(Ipv4Addr::new(10, 96, 0, 0)) + i + 1)],
            80,
        )
    };
    let n = rng.below(5) as u32;
    let eps = endpoints(i + 100 * rng.below(3) as u32, n);
    (sp, eps)
}

/// Asserts the fake kernel holds exactly what the complete plan of `sm`/`em` wants.
fn assert_kernel_matches_plan(kit: &Kit, sm: &ServiceMap, em: &EndpointsMap, step: usize) {
    let want = plan(sm, em, &node(), &config());
    assert_eq!(
        kit.services(),
        want.virtual_servers.keys().copied().collect(),
        "step {step}: virtual servers"
    );
    for (k, vs) in &want.virtual_servers {
        let got: BTreeSet<(IpAddr, u16, u32)> = kit
            .dests(k)
            .unwrap()
            .values()
            .map(|d| (d.addr, d.port, d.weight))
            .collect();
        let wanted: BTreeSet<(IpAddr, u16, u32)> = vs
            .destinations
            .values()
            .map(|d| (d.addr, d.port, d.weight))
            .collect();
        assert_eq!(got, wanted, "step {step}: real servers of {k}");
    }
    for (name, set) in &want.ipsets {
        assert_eq!(
            kit.ipsets.members(name),
            set.entries,
            "step {step}: set {name}"
        );
    }
    let addrs: BTreeSet<IpAddr> = kit.addrs("kube-ipvs0").into_iter().collect();
    assert_eq!(addrs, want.bound_addresses, "step {step}: kube-ipvs0");
    // The last restore carried the plan's payload (the first one also the `-I` jumps from built-in
    // chains); later syncs restore only when it changed.
    let restored = kit.restored();
    let last: Option<String> = restored.last().map(|(_, p)| {
        p.lines()
            .filter(|l| !l.starts_with("-I "))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    assert_eq!(
        last.as_deref(),
        Some(want.iptables_payload.as_str()),
        "step {step}: iptables payload"
    );
}

#[test]
fn random_event_driven_syncs_keep_the_kernel_equal_to_the_full_plan() {
    let kit = Kit::new();
    let mut p = Proxier::new(kit.backends());
    let mut rng = Rng(0x5eed_1234_abcd);
    let mut sm = ServiceMap::new();
    let mut em = EndpointsMap::new();
    for i in 0..30 {
        let (sp, eps) = random_service(&mut rng, i);
        em.insert(sp.name.clone(), Arc::new(eps));
        sm.insert(sp.name.clone(), Arc::new(sp));
    }
    let r = p.sync_proxy_rules(input(
        &Arc::new(sm.clone()),
        &Arc::new(em.clone()),
        true,
        None,
    ));
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_kernel_matches_plan(&kit, &sm, &em, 0);
    for step in 1..150 {
        let mut changed = BTreeSet::new();
        for _ in 0..1 + rng.below(2) {
            let i = rng.below(30) as u32;
            let svc = port_name(i).service();
            let ports: Vec<ServicePortName> = sm
                .keys()
                .filter(|k| k.namespace == svc.namespace && k.name == svc.name)
                .cloned()
                .collect();
            for k in &ports {
                sm.remove(k);
                em.remove(k);
            }
            // Replaced (new spec and endpoints) or, one time in five, deleted.
            if rng.below(5) != 0 {
                let (sp, eps) = random_service(&mut rng, i);
                em.insert(sp.name.clone(), Arc::new(eps));
                sm.insert(sp.name.clone(), Arc::new(sp));
            }
            changed.insert(svc);
        }
        let r = p.sync_proxy_rules(input(
            &Arc::new(sm.clone()),
            &Arc::new(em.clone()),
            false,
            Some(changed),
        ));
        assert_eq!(r.failure_count(), 0, "step {step}: {r:?}");
        assert!(!r.full, "step {step}");
        assert_kernel_matches_plan(&kit, &sm, &em, step);
    }
}
