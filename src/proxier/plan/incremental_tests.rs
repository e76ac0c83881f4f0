//! Equivalence of the incremental planner with the full plan over pseudo-random change sequences.

use super::*;
use crate::cluster::model::{Endpoint, LoadBalancerIngress, Protocol, ServicePort, Topology};
use crate::cluster::service_options::{SchedulerRequest, ServiceOptions};
use crate::proxier::plan::{LocalDetector, plan};
use std::sync::Arc;

/// Small deterministic generator (xorshift64*), so failures replay from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize].clone()
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const NODE: &str = "node-0";

fn node_facts(variant: u64) -> NodeFacts {
    let mut node_port_ips = vec![ip("192.168.0.10"), ip("fd00::10")];
    if variant % 2 == 1 {
        node_port_ips.push(ip("192.168.1.10"));
    }
    NodeFacts {
        zone: Some("zone-a".into()),
        node_port_ips,
        // One shared external IP is already local: it must not be bound.
        local_addresses: vec![ip("192.168.0.10"), ip("fd00::10"), ip("203.0.113.1")],
        ..NodeFacts::new(NODE, vec![ip("192.168.0.10"), ip("fd00::10")])
    }
}

fn config(family: IpFamily) -> PlanConfig {
    PlanConfig {
        local_detector: LocalDetector::Cidrs(vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd10::/64".parse().unwrap(),
        ]),
        ..PlanConfig::new(family)
    }
}

/// [`config`] with kube-proxy-rs's planner options on.
fn config_with_fixes(family: IpFamily) -> PlanConfig {
    PlanConfig {
        lb_source_ranges_for_node: true,
        arp_per_address: true,
        ..config(family)
    }
}

/// No annotation (half the time), or an annotated `sh` or `mh` with flags: a service switching
/// scheduler is replanned like any other change.
fn random_scheduler(rng: &mut Rng) -> Option<Arc<ServiceOptions>> {
    let request = |scheduler, flags, source| {
        let scheduler = Some(SchedulerRequest {
            scheduler,
            flags,
            source,
        });
        Some(Arc::new(ServiceOptions {
            scheduler,
            ..Default::default()
        }))
    };
    rng.pick(&[
        None,
        None,
        request(
            crate::scheduler::Scheduler::Sh,
            0x10,
            "ipvs.kube-proxy-rs.io/scheduler",
        ),
        request(
            crate::scheduler::Scheduler::Mh,
            0x8,
            "kube-router.io/service.scheduler",
        ),
    ])
}

/// A random service with 1-2 ports drawing from small pools, so services collide on external IPs,
/// LB IPs, node ports and even virtual servers.
fn random_service(rng: &mut Rng, name: &ServiceName, id: u64) -> Vec<ServicePort> {
    let ext_pool = [
        ip("203.0.113.1"),
        ip("203.0.113.2"),
        ip("2001:db8::1"),
        ip("203.0.113.3"),
    ];
    let lb_pool = [ip("198.51.100.1"), ip("198.51.100.2"), ip("2001:db8:1::1")];
    let ranges: [ipnet::IpNet; 3] = [
        "192.168.0.0/16".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
        "2001:db8::/32".parse().unwrap(),
    ];
    let family_mode = rng.below(3); // v4, v6, dual
    let mut cluster_ips = Vec::new();
    // Occasionally two services share a ClusterIP (an invalid cluster, but the plan must still agree).
    let cid = if rng.chance(5) { 1 } else { id + 2 };
    if family_mode != 1 {
        cluster_ips.push(ip(&format!("10.96.{}.{}", cid / 250, cid % 250 + 1)));
    }
    if family_mode != 0 {
        cluster_ips.push(ip(&format!("fd00:96::{:x}", cid + 1)));
    }
    let etp_local = rng.chance(30);
    let itp_local = rng.chance(15);
    let affinity = rng.chance(20).then_some(10800);
    let has_np = rng.chance(50);
    let hc = (etp_local && has_np && rng.chance(70)).then(|| 30000 + rng.below(3) as u16);
    let ports = 1 + rng.below(2);
    let mut out = Vec::new();
    for p in 0..ports {
        let protocol = rng.pick(&[Protocol::Tcp, Protocol::Tcp, Protocol::Udp, Protocol::Sctp]);
        let port_name = if ports == 1 {
            String::new()
        } else {
            format!("p{p}")
        };
        let mut external_ips = Vec::new();
        if rng.chance(30) {
            external_ips.push(rng.pick(&ext_pool));
            if rng.chance(30) {
                external_ips.push(rng.pick(&ext_pool));
            }
        }
        let mut load_balancer_ingress = Vec::new();
        let mut source_ranges = Vec::new();
        if rng.chance(25) {
            load_balancer_ingress.push(LoadBalancerIngress {
                ip: rng.pick(&lb_pool),
                ip_mode_proxy: rng.chance(10),
            });
            if rng.chance(50) {
                source_ranges.push(rng.pick(&ranges));
                if rng.chance(30) {
                    source_ranges.push(rng.pick(&ranges));
                }
            }
        }
        let spn = ServicePortName {
            namespace: name.namespace.clone(),
            name: name.name.clone(),
            port_name: port_name.into(),
            protocol,
        };
        let port = rng.pick(&[80, 443, 53]);
        out.push(ServicePort {
            options: random_scheduler(rng),
            node_port: has_np.then(|| 30080 + rng.below(4) as u16),
            external_ips,
            load_balancer_ingress,
            load_balancer_source_ranges: source_ranges,
            session_affinity_timeout: affinity,
            external_policy_local: etp_local,
            internal_policy_local: itp_local,
            health_check_node_port: hc,
            ..ServicePort::new(spn, cluster_ips.clone(), port)
        });
    }
    out
}

fn random_endpoints(rng: &mut Rng) -> Vec<Endpoint> {
    let n = rng.below(5);
    let mut eps: Vec<Endpoint> = (0..n)
        .map(|_| {
            let k = rng.below(12);
            let ip = if rng.chance(30) {
                ip(&format!("fd10::{:x}", k + 1))
            } else {
                ip(&format!("10.244.0.{}", k + 1))
            };
            let ready = rng.chance(75);
            let mut ep = Endpoint::new(ip, rng.pick(&[8080, 8443]));
            ep.ready = ready;
            ep.serving = ready || rng.chance(50);
            ep.terminating = !ready && rng.chance(50);
            ep.with_topology(Topology {
                node_name: match rng.below(3) {
                    0 => Some(NODE.into()),
                    1 => Some("node-1".into()),
                    _ => None,
                },
                zone: rng.chance(50).then(|| "zone-a".into()),
                hints_for_nodes: None,
                hints_for_zones: rng.chance(10).then(|| ["zone-a".into()].into()),
            })
        })
        .collect();
    eps.sort();
    eps.dedup();
    eps
}

fn remove_service(sm: &mut ServiceMap, em: &mut EndpointsMap, name: &ServiceName) {
    sm.retain(|k, _| !same_service(k, name));
    em.retain(|k, _| !same_service(k, name));
}

/// Runs `steps` random changes, checking after each that both families' incremental states (with and
/// without kube-proxy-rs's planner options) equal the full plan and that the returned delta is exactly the difference from the previous state.
fn run(seed: u64, steps: usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let names: Vec<ServiceName> = (0..24)
        .map(|i| ServiceName {
            namespace: format!("ns-{}", i % 3).into(),
            name: format!("svc-{i}").into(),
        })
        .collect();
    let mut sm = ServiceMap::new();
    let mut em = EndpointsMap::new();
    let mut planners = [
        (IncrementalPlanner::new(), config(IpFamily::V4)),
        (IncrementalPlanner::new(), config(IpFamily::V6)),
        (IncrementalPlanner::new(), config_with_fixes(IpFamily::V4)),
        (IncrementalPlanner::new(), config_with_fixes(IpFamily::V6)),
    ];
    let mut prev: [Option<DesiredState>; 4] = [None, None, None, None];
    let mut node_variant = 0;
    for step in 0..steps {
        let changed = random_changes(&mut rng, &names, &mut sm, &mut em);
        if rng.chance(3) {
            node_variant += 1;
        }
        let node = node_facts(node_variant);
        // Sometimes the caller asks for everything.
        let everything = rng.chance(3);
        for (f, (planner, cfg)) in planners.iter_mut().enumerate() {
            let (state, delta) =
                planner.update(&sm, &em, &node, cfg, (!everything).then_some(&changed));
            let full = plan(&sm, &em, &node, cfg);
            let at = format!("seed {seed} step {step} family {f}");
            check_update(&at, state, &delta, &full, prev[f].as_ref(), cfg.family);
            prev[f] = Some(full);
        }
    }
}

/// One to three random changes (service added or updated, deleted, or one port's endpoints changed);
/// returns the services they touched.
fn random_changes(
    rng: &mut Rng,
    names: &[ServiceName],
    sm: &mut ServiceMap,
    em: &mut EndpointsMap,
) -> BTreeSet<ServiceName> {
    let mut changed = BTreeSet::new();
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(names.len() as u64);
        let name = &names[i as usize];
        changed.insert(name.clone());
        match rng.below(10) {
            // New or updated service (ports replaced), with fresh endpoints.
            0..=3 => {
                remove_service(sm, em, name);
                for sp in random_service(rng, name, i) {
                    if rng.chance(85) {
                        em.insert(sp.name.clone(), Arc::new(random_endpoints(rng)));
                    }
                    sm.insert(sp.name.clone(), Arc::new(sp));
                }
            }
            // Service deleted.
            4 => remove_service(sm, em, name),
            // Endpoints of one port changed or removed.
            _ => {
                let ports: Vec<ServicePortName> = sm
                    .keys()
                    .filter(|k| same_service(k, name))
                    .cloned()
                    .collect();
                if ports.is_empty() {
                    continue;
                }
                let p = rng.pick(&ports);
                if rng.chance(15) {
                    em.remove(&p);
                } else {
                    em.insert(p, Arc::new(random_endpoints(rng)));
                }
            }
        }
    }
    changed
}

/// The incremental `state` equals the `full` plan, and `delta` is exactly the difference from `prev`.
fn check_update(
    at: &str,
    state: &DesiredState,
    delta: &DesiredDelta,
    full: &DesiredState,
    prev: Option<&DesiredState>,
    family: IpFamily,
) {
    assert_eq!(state, full, "{at}: incremental state differs from plan()");
    let mut expected = match prev {
        Some(p) => DesiredDelta::between(Some(p), state),
        None => DesiredDelta::default(),
    };
    expected.full = delta.full;
    assert_eq!(*delta, expected, "{at}: delta is not the exact difference");
    let applied = match prev {
        Some(p) => {
            let mut a = p.clone();
            delta.apply(&mut a);
            a
        }
        // The first delta is empty: `between` gives what it would be from an empty state.
        None => {
            assert!(delta.full && delta.is_empty());
            let mut e = empty_state(family);
            DesiredDelta::between(None, state).apply(&mut e);
            e
        }
    };
    assert_eq!(applied, *full, "{at}: previous state + delta != new state");
}

#[test]
fn incremental_equals_full_plan_over_random_changes() {
    for seed in 1..=6 {
        run(seed, 200);
    }
}

#[test]
fn shared_external_ip_stays_bound_until_last_user_goes() {
    let cfg = config(IpFamily::V4);
    let node = node_facts(0);
    let mut sm = ServiceMap::new();
    let em = EndpointsMap::new();
    let mk = |name: &str, cip: &str| {
        let spn = ServicePortName::tcp("default", name, "");
        let sp = ServicePort {
            node_port: Some(30080),
            external_ips: vec![ip("203.0.113.9")],
            ..ServicePort::new(spn.clone(), vec![ip(cip)], 80)
        };
        (spn, Arc::new(sp))
    };
    let (a, sa) = mk("a", "10.96.0.1");
    let (b, sb) = mk("b", "10.96.0.2");
    sm.insert(a.clone(), sa);
    sm.insert(b.clone(), sb);
    let mut p = IncrementalPlanner::new();
    let (state, d) = p.update(&sm, &em, &node, &cfg, None);
    assert!(d.full);
    assert!(state.bound_addresses.contains(&ip("203.0.113.9")));

    sm.remove(&a);
    let changed = BTreeSet::from([a.service()]);
    let (state, d) = p.update(&sm, &em, &node, &cfg, Some(&changed));
    assert!(!d.full);
    // The shared ExternalIP, its set entry and the node-port bitmap entry are still used by b.
    assert!(state.bound_addresses.contains(&ip("203.0.113.9")));
    assert_eq!(
        d.addresses_removed,
        BTreeSet::from([ip("10.96.0.1")]),
        "only a's ClusterIP goes"
    );
    assert!(!d.set_dels.contains_key("KUBE-NODE-PORT-TCP"));
    assert!(!d.set_dels.contains_key("KUBE-EXTERNAL-IP"));
    // The shared ExternalIP virtual server now belongs to b alone: unchanged, not removed.
    assert_eq!(d.vs_removed.len(), 1);
    assert!(d.iptables_payload.is_none());

    sm.remove(&b);
    let changed = BTreeSet::from([b.service()]);
    let (state, d) = p.update(&sm, &em, &node, &cfg, Some(&changed));
    assert!(state.bound_addresses.is_empty());
    assert!(d.addresses_removed.contains(&ip("203.0.113.9")));
    assert_eq!(
        d.set_dels.get("KUBE-NODE-PORT-TCP"),
        Some(&BTreeSet::from(["30080".to_string()]))
    );
    // Sets became empty: the payload loses their rules.
    assert!(d.iptables_payload.is_some());
}

#[test]
fn endpoint_change_touches_only_that_service() {
    let cfg = config(IpFamily::V4);
    let node = node_facts(0);
    let mut sm = ServiceMap::new();
    let mut em = EndpointsMap::new();
    let mut rng = Rng(7);
    let names: Vec<ServiceName> = (0..50)
        .map(|i| ServiceName {
            namespace: "default".into(),
            name: format!("s{i}").into(),
        })
        .collect();
    for (i, n) in names.iter().enumerate() {
        for mut sp in random_service(&mut rng, n, i as u64) {
            sp.cluster_ips = vec![ip(&format!("10.96.1.{}", i + 1))];
            sp.external_ips.clear();
            sp.load_balancer_ingress.clear();
            em.insert(sp.name.clone(), Arc::new(random_endpoints(&mut rng)));
            sm.insert(sp.name.clone(), Arc::new(sp));
        }
    }
    let mut p = IncrementalPlanner::new();
    p.update(&sm, &em, &node, &cfg, None);
    let port = sm.keys().find(|k| k.name == "s10").unwrap().clone();
    let ep = Endpoint::new(ip("10.244.9.9"), 9999).with_topology(Topology::on_node("node-1"));
    em.insert(port.clone(), Arc::new(vec![ep]));
    let changed = BTreeSet::from([port.service()]);
    let (_, d) = p.update(&sm, &em, &node, &cfg, Some(&changed));
    assert!(!d.vs_changed.is_empty());
    let cip = sm[&port].cluster_ips[0];
    assert!(
        d.vs_changed
            .keys()
            .chain(d.vs_added.keys())
            .all(|k| k.addr == cip || sm[&port].node_port == Some(k.port)),
        "{d:?}"
    );
    assert!(d.vs_removed.is_empty() && d.vs_added.is_empty());
    // Nothing else changes: replanning nothing gives an empty delta.
    let (_, d) = p.update(&sm, &em, &node, &cfg, Some(&BTreeSet::new()));
    assert!(d.is_empty());
}

#[test]
fn full_replan_keeps_unchanged_virtual_servers_shared() {
    let mut rng = Rng(7);
    let (mut sm, mut em) = (ServiceMap::new(), EndpointsMap::new());
    for i in 0..20 {
        let name = ServiceName {
            namespace: "ns".into(),
            name: format!("s{i}").into(),
        };
        for sp in random_service(&mut rng, &name, i) {
            em.insert(sp.name.clone(), Arc::new(random_endpoints(&mut rng)));
            sm.insert(sp.name.clone(), Arc::new(sp));
        }
    }
    let (node, cfg) = (node_facts(0), config(IpFamily::V4));
    let mut p = IncrementalPlanner::new();
    let before = p
        .update(&sm, &em, &node, &cfg, None)
        .0
        .virtual_servers
        .clone();
    assert!(!before.is_empty());
    // change one service's endpoints, then replan everything
    let port = sm.keys().next().unwrap().clone();
    em.insert(port.clone(), Arc::new(Vec::new()));
    let (after, d) = p.update(&sm, &em, &node, &cfg, None);
    assert!(d.full);
    let mut shared = 0;
    for (k, v) in &after.virtual_servers {
        match before.get(k) {
            Some(old) if old == v => {
                assert!(Arc::ptr_eq(old, v), "{k}: equal value not shared");
                shared += 1;
            }
            _ => assert!(d.vs_added.contains_key(k) || d.vs_changed.contains_key(k)),
        }
    }
    assert!(shared > 0);
}
