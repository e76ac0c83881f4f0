//! Reconciler and proxier tests over an in-memory kernel (test-local fake with one ordered call log).

use crate::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServicePort, ServicePortName, Topology,
};
use crate::kernel::conntrack::ConntrackFlow;
use crate::kernel::ipset::{IpSetOp, IpSetSpec, IpSetType, IpSets};
use crate::kernel::iptables::Iptables;
use crate::kernel::ipvs::Ipvs;
use crate::kernel::ipvs::{IpvsDestination, IpvsService, IpvsServiceKey};
use crate::kernel::link::DUMMY_DEVICE;
use crate::kernel::link::Links;
use crate::proxier::desired::{
    DesiredIpSet, DesiredState, DesiredVirtualServer, JumpRule, TrafficPolicy,
};
use crate::proxier::plan::{NodeFacts, PlanConfig};
use crate::proxier::reconcile::{ConntrackHints, FamilyInput};
use crate::proxier::report::{FailureKind, SyncReport};
use crate::proxier::sync::{FamilySnapshot, Proxier, SyncInput};
use crate::proxier::testkit::{Applier, Kit};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

const NODE: &str = "10.0.0.10";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn key(addr: &str, port: u16, protocol: Protocol) -> IpvsServiceKey {
    IpvsServiceKey {
        addr: ip(addr),
        port,
        protocol,
    }
}

fn config() -> PlanConfig {
    PlanConfig {
        scheduler: crate::scheduler::Scheduler::Rr,
        ..PlanConfig::new(IpFamily::V4)
    }
}

fn set(name: &str, t: IpSetType, entries: &[&str]) -> (String, DesiredIpSet) {
    (
        name.to_string(),
        DesiredIpSet {
            spec: IpSetSpec {
                name: name.into(),
                set_type: t,
                family: IpFamily::V4,
                comment: format!("{name} comment"),
            },
            entries: entries.iter().map(|s| s.to_string()).collect(),
        },
    )
}

/// A hand-built plan: services (vip, port, proto, [(endpoint, port)]) plus NodePort ports on NODE.
/// (vip, port, protocol, endpoints).
type Svc<'a> = (&'a str, u16, Protocol, &'a [(&'a str, u16)]);

fn desired(services: &[Svc<'_>], node_ports: &[u16]) -> DesiredState {
    let mut vs = BTreeMap::new();
    let mut bound = BTreeSet::new();
    let mut cluster = Vec::new();
    let mut add = |addr: &str, port: u16, proto: Protocol, eps: &[(&str, u16)]| {
        let k = key(addr, port, proto);
        vs.insert(
            k,
            DesiredVirtualServer {
                service: IpvsService {
                    key: k,
                    scheduler: "rr".into(),
                    flags: 0,
                    timeout: 0,
                    netmask: 0xffff_ffff,
                },
                destinations: eps
                    .iter()
                    .map(|(a, p)| ((ip(a), *p), IpvsDestination::masq(ip(a), *p, 1)))
                    .collect(),
            },
        );
    };
    for (addr, port, proto, eps) in services {
        add(addr, *port, *proto, eps);
        bound.insert(ip(addr));
        cluster.push(format!("{addr},{}:{port}", proto.as_lower()));
    }
    for np in node_ports {
        let eps = EPS;
        add(NODE, *np, Protocol::Tcp, eps);
    }
    let ipsets = plan_sets(&cluster, &bound, node_ports);
    let payload = format!(
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-POSTROUTING - [0:0]\n-A KUBE-POSTROUTING -j MASQUERADE\n\
         -A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n# {} services\nCOMMIT\n",
        services.len()
    );
    DesiredState {
        family: IpFamily::V4,
        decisions: Default::default(),
        virtual_servers: vs.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
        ipsets,
        iptables_payload: payload,
        jumps: vec![
            JumpRule {
                table: "nat",
                chain: "PREROUTING",
                target: "KUBE-SERVICES",
                comment: "kubernetes service portals",
            },
            JumpRule {
                table: "nat",
                chain: "POSTROUTING",
                target: "KUBE-POSTROUTING",
                comment: "kubernetes postrouting rules",
            },
        ],
        bound_addresses: bound,
        health_checks: vec![],
        no_local_endpoints: BTreeMap::new(),
    }
}

/// The hand-built plan's sets: cluster IPs, bound addresses, NodePorts.
fn plan_sets(
    cluster: &[String],
    bound: &BTreeSet<IpAddr>,
    node_ports: &[u16],
) -> BTreeMap<String, DesiredIpSet> {
    let ipvs_ips: Vec<String> = bound.iter().map(|i| i.to_string()).collect();
    let np: Vec<String> = node_ports.iter().map(|p| p.to_string()).collect();
    [
        ("KUBE-CLUSTER-IP", IpSetType::HashIpPort, cluster.to_vec()),
        ("KUBE-IPVS-IPS", IpSetType::HashIp, ipvs_ips),
        ("KUBE-NODE-PORT-TCP", IpSetType::BitmapPort, np),
        ("KUBE-NODE-PORT-UDP", IpSetType::BitmapPort, vec![]),
    ]
    .into_iter()
    .map(|(name, t, e)| set(name, t, &e.iter().map(String::as_str).collect::<Vec<_>>()))
    .collect()
}

const EPS: &[(&str, u16)] = &[("10.244.0.11", 8080), ("10.244.0.12", 8080)];

fn small() -> DesiredState {
    desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, EPS),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
        ],
        &[30080],
    )
}

fn proxier(k: &Kit) -> Applier {
    k.applier()
}

fn node_ips() -> Vec<IpAddr> {
    vec![ip(NODE)]
}

fn apply_cfg(p: &mut Applier, d: &DesiredState, cfg: &PlanConfig, full: bool) -> SyncReport {
    let nips = node_ips();
    p.apply(
        &[FamilyInput {
            desired: d,
            delta: None,
            config: cfg,
            node_port_ips: &nips,
        }],
        full,
        &ConntrackHints::default(),
    )
}

fn apply(p: &mut Applier, d: &DesiredState, full: bool) -> SyncReport {
    apply_cfg(p, d, &config(), full)
}

/// The IPVS batches the kit saw (`B ipvs.batch <ops>`), in order.
fn ipvs_batches(k: &Kit) -> Vec<String> {
    k.log
        .lock()
        .unwrap()
        .calls
        .iter()
        .filter(|c| c.starts_with("B ipvs.batch"))
        .cloned()
        .collect()
}

fn pos(log: &[String], prefix: &str) -> usize {
    log.iter()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {log:#?}"))
}

fn svc(addr: &str, port: u16, protocol: Protocol, scheduler: &str) -> IpvsService {
    IpvsService {
        key: key(addr, port, protocol),
        scheduler: scheduler.into(),
        flags: 0,
        timeout: 0,
        netmask: 0xffff_ffff,
    }
}

/// Adds a virtual server straight into the fake kernel (as another tool or an earlier run would).
fn seed_vs(k: &Kit, addr: &str, port: u16, scheduler: &str) {
    let mut ipvs = k.ipvs.clone();
    ipvs.add_service(&svc(addr, port, Protocol::Tcp, scheduler))
        .unwrap();
}

fn seed_chain(k: &Kit, table: &str, chain: &str, rule: &[&str]) {
    let mut t = k.iptables.clone();
    t.ensure_chain(IpFamily::V4, table, chain).unwrap();
    let args: Vec<String> = rule.iter().map(|s| s.to_string()).collect();
    t.ensure_rule_first(IpFamily::V4, table, chain, &args)
        .unwrap();
}

fn jump_args(comment: &str, target: &str) -> Vec<String> {
    ["-m", "comment", "--comment", comment, "-j", target]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn first_sync_programs_everything_rules_before_ipvs() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let d = small();
    let r = apply(&mut p, &d, false);
    assert!(r.full, "first sync is full");
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert!(!r.retry_needed);
    assert_eq!(r.ipvs_services.added, 4);
    assert_eq!(r.ipvs_destinations.added, 7);
    assert_eq!(r.addresses.added, 3);
    assert_eq!(r.iptables_restores, 1);
    assert_eq!(r.jumps_inserted, 2);
    assert_eq!(r.ipsets_created, 4);
    assert_eq!(k.services().len(), 4);
    assert_eq!(k.addrs(DUMMY_DEVICE).len(), 3);
    assert_eq!(
        k.ipsets.members("KUBE-NODE-PORT-TCP"),
        BTreeSet::from(["30080".to_string()])
    );
    assert_eq!(k.ipsets.members("KUBE-IPVS-IPS").len(), 3);
    assert_eq!(
        k.iptables
            .rules(IpFamily::V4, "nat", "PREROUTING")
            .unwrap()
            .len(),
        1
    );
    let w = k.writes();
    // k/k #133773: sets and SNAT rules exist before any VIP is served.
    assert!(pos(&w, "ipset.apply") < pos(&w, "iptables.restore"));
    assert!(pos(&w, "iptables.restore") < pos(&w, "ipvs.add_service"));
    // The jumps travel in the same restore as the payload: no -C / -I process per jump.
    assert!(
        !w.iter().any(|l| l.starts_with("iptables.insert_rule")),
        "{w:#?}"
    );
    assert_eq!(
        w.iter()
            .filter(|l| l.starts_with("iptables.restore"))
            .count(),
        1
    );
    assert!(pos(&w, "ipvs.add_service") < pos(&w, "link.add_address"));
    assert_eq!(w.iter().filter(|l| l.starts_with("ipset.apply")).count(), 1);
    // IPVS writes go in two batches: services, then real servers (no deletions).
    let batches = ipvs_batches(&k);
    assert_eq!(
        batches,
        vec!["B ipvs.batch 4".to_string(), "B ipvs.batch 7".to_string()]
    );
}

#[test]
fn many_real_server_changes_go_in_bounded_batches_and_share_the_plan() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let vips: Vec<String> = (0..500)
        .map(|i| format!("10.96.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let eps: Vec<Vec<(String, u16)>> = (0..500)
        .map(|i| {
            (0..10)
                .map(|j| (format!("10.1.{}.{}", i / 25, (i % 25) * 10 + j + 1), 8080))
                .collect()
        })
        .collect();
    let eps_ref: Vec<Vec<(&str, u16)>> = eps
        .iter()
        .map(|v| v.iter().map(|(a, p)| (a.as_str(), *p)).collect())
        .collect();
    let svcs: Vec<Svc<'_>> = vips
        .iter()
        .zip(&eps_ref)
        .map(|(v, e)| (v.as_str(), 80, Protocol::Tcp, e.as_slice()))
        .collect();
    let d = desired(&svcs, &[]);
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.added, 500);
    assert_eq!(r.ipvs_destinations.added, 5000);
    // services in one batch, then real servers in batches of whole virtual servers (>= 4096 changes)
    let batches = ipvs_batches(&k);
    assert_eq!(
        batches,
        vec![
            "B ipvs.batch 500".to_string(),
            "B ipvs.batch 4100".to_string(),
            "B ipvs.batch 900".to_string()
        ]
    );
    for (key, vs) in &d.virtual_servers {
        let planned: BTreeMap<(IpAddr, u16), IpvsDestination> = vs
            .destinations
            .values()
            .map(|d| ((d.addr, d.port), d.clone()))
            .collect();
        assert_eq!(k.dests(key).unwrap(), planned, "{key}");
    }
    // the reconciler keeps the plan's values, not copies
    let applied = p.reconciler().applied(IpFamily::V4).unwrap();
    assert_eq!(applied.virtual_servers.len(), 500);
    assert!(
        d.virtual_servers
            .iter()
            .all(|(key, vs)| Arc::ptr_eq(vs, &applied.virtual_servers[key]))
    );
    // an equal plan built anew is adopted without writes
    let d2 = desired(&svcs, &[]);
    let r = apply(&mut p, &d2, false);
    assert_eq!(r.ipvs_destinations.added + r.ipvs_destinations.updated, 0);
    let applied = p.reconciler().applied(IpFamily::V4).unwrap();
    assert!(
        d2.virtual_servers
            .iter()
            .all(|(key, vs)| Arc::ptr_eq(vs, &applied.virtual_servers[key]))
    );
}

#[test]
fn identical_syncs_write_nothing_and_event_syncs_do_not_dump() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let d = small();
    apply(&mut p, &d, true);
    k.clear_logs();
    let r = apply(&mut p, &d, false);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(k.writes().is_empty(), "{:?}", k.writes());
    assert!(
        k.reads().is_empty(),
        "event-driven sync read the kernel: {:?}",
        k.reads()
    );

    // A full sync dumps once per kind, reads the tables, and writes nothing when the kernel already
    // holds the rules (drift would be repaired: see full_sync_repairs_drift).
    let r = apply(&mut p, &d, true);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(k.writes().is_empty(), "{:?}", k.writes());
    let reads = k.reads();
    let count = |p: &str| reads.iter().filter(|l| l.starts_with(p)).count();
    assert_eq!(count("ipvs.services"), 1);
    assert_eq!(count("ipset.dump"), 1);
    assert_eq!(count("link.addresses"), 1);
    // Real servers: one quick view of them all; no virtual server differs, so none is dumped.
    assert_eq!(count("ipvs.destination_view"), 1);
    assert_eq!(count("ipvs.destinations"), 0, "{reads:?}");
    // Jumps already in place are seen in one save per table: no per-jump `-N` / `-C` processes.
    let tables: BTreeSet<&str> = d.jumps.iter().map(|j| j.table).collect();
    assert!(!tables.is_empty());
    assert_eq!(count("iptables.save"), tables.len(), "{reads:?}");
    assert_eq!(count("iptables.check_rule"), 0, "{reads:?}");
    assert_eq!(count("iptables.ensure_chain"), 0, "{reads:?}");

    // The next full sync finds the tables' fingerprint unchanged since that save: no save at all.
    k.clear_logs();
    let r = apply(&mut p, &d, true);
    assert_eq!(r.writes(), 0, "{r:?}");
    assert!(k.writes().is_empty(), "{:?}", k.writes());
    assert_eq!(
        k.reads()
            .iter()
            .filter(|l| l.starts_with("iptables.save"))
            .count(),
        0
    );
}

#[test]
fn event_sync_touches_only_the_changed_service() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    k.clear_logs();
    let three: &[(&str, u16)] = &[
        ("10.244.0.11", 8080),
        ("10.244.0.12", 8080),
        ("10.244.0.13", 8080),
    ];
    // One endpoint added to 10.96.100.10:80 (additions only: no dump needed).
    let d = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, three),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
        ],
        &[30080],
    );
    let r = apply(&mut p, &d, false);
    assert_eq!(
        k.writes(),
        vec!["ipvs.add_destination 10.96.100.10:80/TCP 10.244.0.13:8080".to_string()]
    );
    assert!(k.reads().is_empty(), "{:?}", k.reads());
    assert_eq!(r.ipvs_destinations.added, 1);

    // A new service: set members, the payload (its text changed), one service, its real server, one address.
    k.clear_logs();
    let d2 = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, three),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
            ("10.96.100.30", 53, Protocol::Udp, &[("10.244.0.20", 53)]),
        ],
        &[30080],
    );
    let r = apply(&mut p, &d2, false);
    assert_eq!(r.ipvs_services.added, 1);
    assert_eq!(r.ipvs_destinations.added, 1);
    assert_eq!(r.addresses.added, 1);
    assert_eq!(r.ipset_entries.added, 2);
    assert_eq!(
        r.ipvs_services.deleted + r.ipvs_destinations.deleted + r.addresses.deleted,
        0
    );
    assert!(
        !k.reads()
            .iter()
            .any(|l| l.starts_with("ipvs.") || l.starts_with("ipset.") || l.starts_with("link.")),
        "{:?}",
        k.reads()
    );

    // Removing it again deletes exactly its objects.
    let r = apply(&mut p, &d, false);
    assert_eq!(r.ipvs_services.deleted, 1);
    assert_eq!(r.addresses.deleted, 1);
    assert_eq!(r.ipset_entries.deleted, 2);
    assert!(
        !k.services()
            .contains(&key("10.96.100.30", 53, Protocol::Udp))
    );
}

/// Populates objects another tool owns, plus leftovers of ours from a previous run.
fn seed_foreign_and_leftovers(k: &Kit) {
    // keepalived VIP on eth0, kube-vip on the node IP at a port that is not a NodePort of ours.
    seed_vs(k, "192.168.1.100", 80, "wlc");
    seed_vs(k, NODE, 8443, "wlc");
    // Ours from a previous run: a ClusterIP bound on kube-ipvs0 and a NodePort recorded in our set.
    seed_vs(k, "10.96.55.5", 80, "rr");
    seed_vs(k, NODE, 30099, "rr");
    k.links
        .add_link("eth0", "ether", true, &[ip(NODE), ip("192.168.1.100")]);
    k.links
        .add_link(DUMMY_DEVICE, "dummy", false, &[ip("10.96.55.5")]);
    k.ipsets.insert_set(
        "KUBE-NODE-PORT-TCP",
        IpSetType::BitmapPort,
        IpFamily::V4,
        ["30099"],
    );
    k.ipsets.insert_set(
        "keepalived-set",
        IpSetType::HashIp,
        IpFamily::V4,
        ["1.2.3.4"],
    );
    seed_chain(k, "filter", "FOREIGN", &["-j", "ACCEPT"]);
}

#[test]
fn foreign_objects_survive_and_our_leftovers_go() {
    let k = Kit::new();
    seed_foreign_and_leftovers(&k);
    let mut p = proxier(&k);
    let r = apply(&mut p, &small(), false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    let s = k.services();
    assert!(
        s.contains(&key("192.168.1.100", 80, Protocol::Tcp)),
        "keepalived VS deleted"
    );
    assert!(
        s.contains(&key(NODE, 8443, Protocol::Tcp)),
        "kube-vip VS deleted"
    );
    assert!(
        !s.contains(&key("10.96.55.5", 80, Protocol::Tcp)),
        "stale ClusterIP VS kept"
    );
    assert!(
        !s.contains(&key(NODE, 30099, Protocol::Tcp)),
        "stale NodePort VS kept"
    );
    assert_eq!(k.addrs("eth0").len(), 2, "foreign addresses touched");
    assert!(!k.addrs(DUMMY_DEVICE).contains(&ip("10.96.55.5")));
    assert!(k.ipsets.set("keepalived-set").is_some());
    assert_eq!(
        k.iptables.rules(IpFamily::V4, "filter", "FOREIGN").unwrap(),
        vec!["-j ACCEPT".to_string()]
    );

    // An empty plan (all services gone) still leaves them alone, over event-driven and full syncs.
    let empty = desired(&[], &[]);
    apply(&mut p, &empty, false);
    apply(&mut p, &empty, true);
    assert_eq!(
        k.services(),
        BTreeSet::from([
            key(NODE, 8443, Protocol::Tcp),
            key("192.168.1.100", 80, Protocol::Tcp)
        ])
    );
    assert!(k.addrs(DUMMY_DEVICE).is_empty());
    assert_eq!(k.addrs("eth0").len(), 2);
    assert!(k.ipsets.set("keepalived-set").is_some());
}

#[test]
fn exclude_cidrs_are_never_deleted() {
    let excluded = key("10.96.200.1", 80, Protocol::Tcp);
    let seed = |k: &Kit| {
        seed_vs(k, "10.96.200.1", 80, "rr");
        // Bound to kube-ipvs0, it looks like ours.
        k.links
            .add_link(DUMMY_DEVICE, "dummy", false, &[ip("10.96.200.1")]);
    };
    let k = Kit::new();
    seed(&k);
    let mut cfg = config();
    cfg.exclude_cidrs = vec!["10.96.200.0/24".parse().unwrap()];
    let mut p = proxier(&k);
    apply_cfg(&mut p, &small(), &cfg, true);
    apply_cfg(&mut p, &small(), &cfg, true);
    assert!(k.services().contains(&excluded));

    // Without the exclusion the same kernel state is ours and goes.
    let k2 = Kit::new();
    seed(&k2);
    let mut p2 = proxier(&k2);
    apply(&mut p2, &small(), true);
    assert!(!k2.services().contains(&excluded));
}

fn set_conns(k: &Kit, vs: &IpvsServiceKey, addr: &str, port: u16, active: u32, inactive: u32) {
    k.ipvs
        .set_conns(vs, ip(addr), port, active, inactive)
        .unwrap();
}

/// Whether the fake kernel holds real server `addr:port` under `vs`.
fn has_dest(k: &Kit, vs: &IpvsServiceKey, addr: &str, port: u16) -> bool {
    k.dests(vs).unwrap().contains_key(&(ip(addr), port))
}

#[test]
fn graceful_termination_drains_tcp_deletes_udp_and_restores() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    let udp = key("10.96.100.53", 53, Protocol::Udp);
    let idle = key("10.96.100.11", 80, Protocol::Tcp);
    let two = [("10.244.0.11", 8080), ("10.244.0.12", 8080)];
    let both = desired(
        &[
            ("10.96.100.10", 80, Protocol::Tcp, &two),
            (
                "10.96.100.53",
                53,
                Protocol::Udp,
                &[("10.244.0.11", 53), ("10.244.0.12", 53)],
            ),
            ("10.96.100.11", 80, Protocol::Tcp, &two),
        ],
        &[],
    );
    apply(&mut p, &both, true);
    set_conns(&k, &tcp, "10.244.0.12", 8080, 3, 1);
    set_conns(&k, &udp, "10.244.0.12", 53, 0, 5);
    let one = [("10.244.0.11", 8080)];
    let without = desired(
        &[
            ("10.96.100.10", 80, Protocol::Tcp, &one),
            ("10.96.100.53", 53, Protocol::Udp, &[("10.244.0.11", 53)]),
            ("10.96.100.11", 80, Protocol::Tcp, &one),
        ],
        &[],
    );
    let r = apply(&mut p, &without, false);
    assert_eq!(r.graceful_queued, 1, "{r:?}");
    // TCP with connections: weight 0, kept. UDP: gone. TCP without connections: gone.
    assert_eq!(k.dests(&tcp).unwrap()[&(ip("10.244.0.12"), 8080)].weight, 0);
    assert!(!has_dest(&k, &udp, "10.244.0.12", 53));
    assert!(!has_dest(&k, &idle, "10.244.0.12", 8080));
    assert!(
        p.reconciler()
            .graceful()
            .contains(&tcp, ip("10.244.0.12"), 8080)
    );

    // Identical event-driven and full syncs leave the draining server alone.
    k.clear_logs();
    apply(&mut p, &without, false);
    apply(&mut p, &without, true);
    assert!(
        !k.writes().iter().any(|w| w.starts_with("ipvs.")),
        "{:?}",
        k.writes()
    );

    // Still connected: check keeps it.
    let c = p.check_graceful();
    assert_eq!((c.deleted, c.pending), (0, 1));
    // The endpoint comes back: weight 1, dequeued.
    let r = apply(&mut p, &both, false);
    assert_eq!(r.graceful_restored, 1, "{r:?}");
    assert_eq!(k.dests(&tcp).unwrap()[&(ip("10.244.0.12"), 8080)].weight, 1);
    assert!(p.reconciler().graceful().is_empty());

    // Removed again, then connections drain: the check deletes it.
    apply(&mut p, &without, false);
    assert_eq!(k.dests(&tcp).unwrap()[&(ip("10.244.0.12"), 8080)].weight, 0);
    set_conns(&k, &tcp, "10.244.0.12", 8080, 0, 0);
    let c = p.check_graceful();
    assert_eq!((c.deleted, c.pending, c.failures), (1, 0, 0));
    assert!(!has_dest(&k, &tcp, "10.244.0.12", 8080));
}

#[test]
fn restart_adopts_draining_real_servers() {
    let k = Kit::new();
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    {
        let mut p = proxier(&k);
        apply(&mut p, &small(), true);
    }
    // A previous process left a weight-0 real server with connections, and one without.
    let mut ipvs = k.ipvs.clone();
    for a in ["10.244.0.99", "10.244.0.98"] {
        ipvs.add_destination(&tcp, &IpvsDestination::masq(ip(a), 8080, 0))
            .unwrap();
    }
    set_conns(&k, &tcp, "10.244.0.99", 8080, 2, 0);
    k.clear_logs();
    let mut p = proxier(&k);
    let r = apply(&mut p, &small(), false);
    assert_eq!(r.graceful_queued, 1);
    assert_eq!(r.ipvs_destinations.deleted, 1);
    assert!(
        p.reconciler()
            .graceful()
            .contains(&tcp, ip("10.244.0.99"), 8080)
    );
    assert!(
        !k.writes()
            .iter()
            .any(|w| w.starts_with("ipvs.update_destination")),
        "weight already 0"
    );
    set_conns(&k, &tcp, "10.244.0.99", 8080, 0, 0);
    assert_eq!(p.check_graceful().deleted, 1);
    assert!(!has_dest(&k, &tcp, "10.244.0.99", 8080));
}

#[test]
fn failed_restore_on_cold_start_withholds_ipvs_and_retries() {
    let k = Kit::new();
    // Rules already in the kernel (from before) must not be flushed by a failed restore.
    seed_chain(&k, "nat", "KUBE-SERVICES", &["-j", "RETURN"]);
    k.set_fail("iptables.restore", true);
    let mut p = proxier(&k);
    let d = small();
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failures_of(FailureKind::IptablesRestore), 1);
    assert!(r.retry_needed);
    assert_eq!(r.ipvs_withheld, 1);
    assert!(
        k.services().is_empty(),
        "served a VIP without its SNAT rule"
    );
    assert!(k.addrs(DUMMY_DEVICE).is_empty());
    assert_eq!(
        k.iptables
            .rules(IpFamily::V4, "nat", "KUBE-SERVICES")
            .unwrap(),
        vec!["-j RETURN".to_string()]
    );
    assert!(
        !k.writes()
            .iter()
            .any(|w| w.contains("flush") || w.contains("delete_chain"))
    );
    // Fixed: the retry (forced full) programs everything.
    k.set_fail("iptables.restore", false);
    let r = apply(&mut p, &d, false);
    assert!(r.full, "a sync after a failure is full");
    assert_eq!(r.failure_count(), 0);
    assert_eq!(r.ipvs_services.added, 4);
    assert!(!r.retry_needed);
}

#[test]
fn failed_restore_later_keeps_old_rules_and_still_syncs_ipvs() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let old_rules = k.iptables.save_all(IpFamily::V4);
    // The fake's own whole-restore failure (as iptables-restore exiting 1): nothing applied.
    k.iptables
        .fail_next_restore("iptables-restore: line 3 failed");
    let mut d = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, EPS),
        ],
        &[],
    );
    // A payload whose rules differ (a changed comment line alone is already in the kernel).
    d.iptables_payload = d.iptables_payload.replace(
        "-A KUBE-POSTROUTING -j MASQUERADE\n",
        "-A KUBE-POSTROUTING -j MASQUERADE\n-A KUBE-POSTROUTING -j RETURN\n",
    );
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failures_of(FailureKind::IptablesRestore), 1);
    assert!(r.retry_needed);
    assert_eq!(r.ipvs_withheld, 0);
    assert_eq!(r.ipvs_services.deleted, 2);
    assert_eq!(k.iptables.save_all(IpFamily::V4), old_rules);
    // The next sync retries the restore (full), and succeeds.
    let r = apply(&mut p, &d, false);
    assert!(r.full);
    assert_eq!(r.iptables_restores, 1);
    assert_eq!(k.restored().last().unwrap().1, d.iptables_payload);
    // And then it settles.
    let r = apply(&mut p, &d, false);
    assert_eq!(r.writes(), 0);
}

#[test]
fn failed_ipvs_write_is_counted_and_retried() {
    let k = Kit::new();
    let mut p = proxier(&k);
    k.set_fail("ipvs.add_destination", true);
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failures_of(FailureKind::IpvsDestination), 7);
    assert!(r.retry_needed);
    k.set_fail("ipvs.add_destination", false);
    let r = apply(&mut p, &small(), false);
    assert!(r.full);
    assert_eq!(r.ipvs_destinations.added, 7);
    assert_eq!(apply(&mut p, &small(), false).writes(), 0);
}

#[test]
fn failed_dump_requests_a_retry_without_deleting() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    k.set_fail("ipvs.services", true);
    k.clear_logs();
    let r = apply(&mut p, &desired(&[], &[]), true);
    assert!(r.retry_needed);
    assert_eq!(r.failures_of(FailureKind::KernelDump), 1);
    // Without a dump it still removes what it knows it applied.
    assert_eq!(r.ipvs_services.deleted, 4);
    k.set_fail("ipvs.services", false);
}

#[test]
fn full_sync_sees_real_server_drift_in_the_quick_view() {
    // The full sync reads every real server through the backend's quick view and dumps only the
    // virtual servers it shows differing: a weight changed behind our back is put back.
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    let (a, port) = EPS[0];
    let mut changed = IpvsDestination::masq(ip(a), port, 1);
    changed.weight = 7;
    k.ipvs.clone().update_destination(&tcp, &changed).unwrap();
    k.clear_logs();
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_destinations.updated, 1, "{r:?}");
    let reads = k.reads();
    let dumps: Vec<&String> = reads
        .iter()
        .filter(|l| l.starts_with("ipvs.destinations"))
        .collect();
    assert_eq!(
        dumps.len(),
        1,
        "only the differing virtual server: {reads:?}"
    );
    assert_eq!(k.dests(&tcp).unwrap()[&(ip(a), port)].weight, 1);
}

#[test]
fn full_sync_repairs_drift() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let tcp = key("10.96.100.10", 80, Protocol::Tcp);
    // Someone else breaks things.
    let mut ipvs = k.ipvs.clone();
    ipvs.delete_service(&key("10.96.0.1", 443, Protocol::Tcp))
        .unwrap();
    for (a, port) in EPS {
        ipvs.delete_destination(&tcp, ip(a), *port).unwrap();
    }
    let mut sets = k.ipsets.clone();
    let ops: Vec<IpSetOp> = k
        .ipsets
        .members("KUBE-CLUSTER-IP")
        .into_iter()
        .map(|entry| IpSetOp::Del {
            set: "KUBE-CLUSTER-IP".into(),
            entry,
        })
        .collect();
    sets.apply(&ops).unwrap();
    sets.destroy("KUBE-NODE-PORT-UDP").unwrap();
    let mut links = k.links.clone();
    for a in k.addrs(DUMMY_DEVICE) {
        links.del_address(DUMMY_DEVICE, a).unwrap();
    }
    let mut ipt = k.iptables.clone();
    assert!(
        ipt.delete_rule(
            IpFamily::V4,
            "nat",
            "PREROUTING",
            &jump_args("kubernetes service portals", "KUBE-SERVICES"),
        )
        .unwrap()
    );
    // An event-driven sync trusts its memory: no dumps, no writes.
    assert_eq!(apply(&mut p, &small(), false).writes(), 0);
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.added, 1);
    assert_eq!(r.ipvs_destinations.added, 3);
    assert_eq!(r.ipsets_created, 1);
    assert_eq!(r.ipset_entries.added, 3);
    assert_eq!(r.addresses.added, 3);
    assert_eq!(r.jumps_inserted, 1);
    assert_eq!(
        apply(&mut p, &small(), true).writes(),
        0,
        "repaired: the next periodic sync writes nothing"
    );
    // A foreign rule added to one of our chains is drift too: the payload is restored again.
    seed_chain(
        &k,
        "nat",
        "KUBE-SERVICES",
        &["-s", "10.9.9.9/32", "-j", "RETURN"],
    );
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.iptables_restores, 1, "{r:?}");
    assert_eq!(k.restored().last().unwrap().1, small().iptables_payload);
}

#[test]
fn full_sync_recreates_our_sets_of_the_wrong_type() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    let want = k.ipsets.set("KUBE-NODE-PORT-TCP").unwrap();
    // Another tool destroys two of our (unreferenced) sets and re-creates them with another type or
    // family, and owns a set of its own.
    let port_set = IpSetType::HashIpPort;
    k.ipsets.insert_set(
        "KUBE-NODE-PORT-TCP",
        port_set,
        IpFamily::V4,
        ["1.2.3.4,tcp:80"],
    );
    k.ipsets.insert_set(
        "KUBE-IPVS-IPS",
        IpSetType::HashIp,
        IpFamily::V6,
        ["fd00::1"],
    );
    k.ipsets.insert_set(
        "FOREIGN",
        IpSetType::HashIpPort,
        IpFamily::V4,
        ["1.2.3.4,tcp:80"],
    );
    // An event-driven sync trusts its memory; the next full sync repairs both.
    assert_eq!(apply(&mut p, &small(), false).writes(), 0);
    k.clear_logs();
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipsets_created, 2, "{r:?}");
    assert_eq!(k.ipsets.set("KUBE-NODE-PORT-TCP").unwrap(), want);
    let ipvs_ips = k.ipsets.set("KUBE-IPVS-IPS").unwrap();
    assert_eq!(ipvs_ips.family, IpFamily::V4);
    assert_eq!(ipvs_ips.members, small().ipsets["KUBE-IPVS-IPS"].entries);
    let foreign = k.ipsets.set("FOREIGN").unwrap();
    assert_eq!(foreign.set_type, IpSetType::HashIpPort);
    assert_eq!(foreign.members.len(), 1);
    let writes = k.writes();
    let destroyed: Vec<_> = writes
        .iter()
        .filter(|w| w.contains("ipset.destroy"))
        .collect();
    assert_eq!(destroyed.len(), 2, "{writes:?}");
    assert_eq!(apply(&mut p, &small(), true).writes(), 0, "repaired");

    // A wrong-type set in use cannot be destroyed: counted, left alone, retried on the next sync.
    k.ipsets.insert_set(
        "KUBE-NODE-PORT-UDP",
        IpSetType::HashIp,
        IpFamily::V4,
        ["10.1.1.1"],
    );
    k.ipsets.pin("KUBE-NODE-PORT-UDP", true);
    let r = apply(&mut p, &small(), true);
    assert_eq!(r.failures_of(FailureKind::Ipset), 1, "{r:?}");
    assert!(r.retry_needed);
    let stuck = k.ipsets.set("KUBE-NODE-PORT-UDP").unwrap();
    assert_eq!(
        (stuck.set_type, stuck.members.len()),
        (IpSetType::HashIp, 1)
    );
    k.ipsets.pin("KUBE-NODE-PORT-UDP", false);
    let r = apply(&mut p, &small(), false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert!(r.full, "the sync after a failure is full");
    let fixed = k.ipsets.set("KUBE-NODE-PORT-UDP").unwrap();
    assert_eq!(
        (fixed.set_type, fixed.members.len()),
        (IpSetType::BitmapPort, 0)
    );
}

#[test]
fn udp_conntrack_cleanup_removes_stale_flows_only() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let dns = |eps: &'static [(&'static str, u16)]| {
        desired(
            &[
                ("10.96.0.10", 53, Protocol::Udp, eps),
                ("10.96.0.11", 53, Protocol::Udp, eps),
            ],
            &[],
        )
    };
    apply(
        &mut p,
        &dns(&[("10.244.0.5", 53), ("10.244.0.6", 53)]),
        true,
    );
    let flow = |sport: u16, dst: &str, rs: &str| ConntrackFlow {
        orig_src: ip("10.244.0.50"),
        orig_sport: sport,
        orig_dst: ip(dst),
        orig_dport: 53,
        reply_src: ip(rs),
        reply_sport: 53,
    };
    let keep = flow(40001, "10.96.0.10", "10.244.0.5");
    let foreign = flow(40004, "8.8.8.8", "8.8.8.8");
    for f in [
        keep,
        flow(40002, "10.96.0.10", "10.244.0.6"),
        flow(40003, "10.96.0.11", "10.244.0.6"),
        foreign,
    ] {
        k.conntrack.add_flow(f);
    }
    // Endpoint 10.244.0.6 goes away.
    let r = apply(&mut p, &dns(&[("10.244.0.5", 53)]), false);
    assert_eq!(r.conntrack_deleted, 2, "{r:?}");
    assert_eq!(k.conntrack.flows(), vec![keep, foreign]);
    // Service 10.96.0.10 removed: its flows go, others stay.
    let only11 = desired(
        &[("10.96.0.11", 53, Protocol::Udp, &[("10.244.0.5", 53)])],
        &[],
    );
    let r = apply(&mut p, &only11, false);
    assert_eq!(r.conntrack_deleted, 1);
    assert_eq!(k.conntrack.flows(), vec![foreign]);
    // Nothing changed: no conntrack dump on an event-driven sync.
    k.clear_logs();
    apply(&mut p, &only11, false);
    assert!(!k.reads().iter().any(|r| r.starts_with("conntrack")));
}

/// One externalTrafficPolicy=Local NodePort service whose only endpoint is on another node.
fn local_policy_cluster() -> (ServiceMap, EndpointsMap) {
    let name = ServicePortName {
        namespace: "default".into(),
        name: "web".into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
    };
    let port = ServicePort {
        name: name.clone(),
        cluster_ips: vec![ip("10.96.0.10")],
        port: 80,
        protocol: Protocol::Tcp,
        node_port: Some(30080),
        external_ips: vec![],
        load_balancer_ingress: vec![],
        load_balancer_source_ranges: vec![],
        session_affinity_timeout: None,
        external_policy_local: true,
        internal_policy_local: false,
        health_check_node_port: Some(31000),
        options: None,
    };
    let endpoint = Endpoint::new(ip("10.244.1.5"), 8080).with_topology(Topology::on_node("other"));
    (
        ServiceMap::from([(name.clone(), Arc::new(port))]),
        EndpointsMap::from([(name, Arc::new(vec![endpoint]))]),
    )
}

#[test]
fn sync_proxy_rules_plans_each_family() {
    let k = Kit::new();
    let mut p = Proxier::new(k.backends());
    let (services, endpoints) = local_policy_cluster();
    let snap = FamilySnapshot {
        services: Arc::new(services),
        endpoints: Arc::new(endpoints),
        node: NodeFacts {
            node_name: "n".into(),
            node_ips: vec![ip(NODE)],
            node_port_ips: vec![ip(NODE)],
            ..Default::default()
        },
        config: config(),
    };
    let input = SyncInput {
        families: vec![snap],
        full: false,
        conntrack: ConntrackHints::default(),
        changed: None,
    };
    let r = p.sync_proxy_rules(input.clone());
    let planned = p.desired(IpFamily::V4).expect("the family was planned");
    // The ClusterIP and the NodePort on the node IP.
    assert_eq!(planned.virtual_servers.len(), 2);
    assert_eq!(r.ipvs_services.added, 2);
    assert_eq!(
        k.services(),
        planned.virtual_servers.keys().copied().collect()
    );
    assert_eq!(r.no_local_endpoints[&TrafficPolicy::External], 1);
    assert_eq!(r.no_local_endpoints[&TrafficPolicy::Internal], 0);
    assert!(p.desired(IpFamily::V6).is_none());
    assert_eq!(p.sync_proxy_rules(input).writes(), 0);
}

#[test]
fn cleanup_removes_only_ours() {
    let k = Kit::new();
    seed_foreign_and_leftovers(&k);
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    // A foreign jump in a built-in chain to a foreign chain.
    seed_chain(&k, "nat", "FOREIGN-NAT", &["-j", "RETURN"]);
    seed_chain(&k, "nat", "PREROUTING", &["-j", "FOREIGN-NAT"]);
    let mut b = k.backends();
    let r = crate::proxier::cleanup::cleanup_leftovers(
        b.ipvs.as_mut(),
        b.links.as_mut(),
        b.iptables.as_mut(),
        b.ipsets.as_mut(),
        &[IpFamily::V4],
    )
    .expect("cleanup failed");
    assert!(
        r.removed.iter().any(|x| x == "ipset KUBE-CLUSTER-IP"),
        "{:?}",
        r.removed
    );
    // The IPVS flush is the one exception, as upstream.
    assert!(k.services().is_empty());
    assert!(k.links.link(DUMMY_DEVICE).is_none());
    assert_eq!(k.addrs("eth0").len(), 2);
    assert_eq!(k.ipsets.names(), vec!["keepalived-set".to_string()]);
    for table in ["nat", "filter"] {
        let chains = k.iptables.chains(IpFamily::V4, table);
        assert!(chains.iter().all(|c| !c.starts_with("KUBE-")), "{chains:?}");
    }
    assert!(
        k.iptables
            .chains(IpFamily::V4, "filter")
            .contains(&"FOREIGN".to_string())
    );
    assert_eq!(
        k.iptables.rules(IpFamily::V4, "nat", "PREROUTING").unwrap(),
        vec!["-j FOREIGN-NAT".to_string()]
    );
}

#[test]
fn cleanup_reports_failures() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    k.set_fail("ipset.destroy", true);
    let mut b = k.backends();
    let e = crate::proxier::cleanup::cleanup_leftovers(
        b.ipvs.as_mut(),
        b.links.as_mut(),
        b.iptables.as_mut(),
        b.ipsets.as_mut(),
        &[IpFamily::V4],
    )
    .expect_err("cleanup must fail");
    assert_eq!(e.0.failures.len(), 34, "{:?}", e.0.failures);
    assert!(e.to_string().contains("KUBE-CLUSTER-IP"));
    // Everything else was still cleaned.
    assert!(k.services().is_empty());
    assert!(k.links.link(DUMMY_DEVICE).is_none());
}

#[test]
fn rejected_ipset_entries_are_counted_not_retried_every_sync() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let mut d = small();
    d.ipsets
        .get_mut("KUBE-CLUSTER-IP")
        .unwrap()
        .entries
        .insert("not-an-entry".into());
    let r = apply(&mut p, &d, true);
    assert_eq!(r.failures_of(FailureKind::IpsetRejected), 1, "{r:?}");
    assert!(
        !r.retry_needed,
        "an invalid entry is not a transient failure"
    );
    assert_eq!(apply(&mut p, &d, false).writes(), 0);
}

mod startup {
    use crate::daemon::prepare::{
        ConntrackHashsize, ConntrackSettings, StartupConfig, conntrack_max,
        needs_conn_reuse_mode_0, prepare_node,
    };
    use crate::kernel::KernelResult;
    use crate::kernel::ipvs::IpvsTimeouts;
    use crate::kernel::sysctl::fake::FakeSysctl;
    use std::time::Duration;

    struct Hash(i64, bool);
    impl ConntrackHashsize for Hash {
        fn get(&mut self) -> KernelResult<i64> {
            Ok(self.0)
        }
        fn set(&mut self, v: i64) -> KernelResult<()> {
            if self.1 {
                return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied).into());
            }
            self.0 = v;
            Ok(())
        }
    }

    fn defaults() -> ConntrackSettings {
        ConntrackSettings {
            max_per_core: Some(32768),
            min: Some(131072),
            tcp_established_timeout: Some(Duration::from_secs(86400)),
            tcp_close_wait_timeout: Some(Duration::from_secs(3600)),
            ..Default::default()
        }
    }

    #[test]
    fn conntrack_max_rules() {
        assert_eq!(conntrack_max(&defaults(), 1), 131072);
        assert_eq!(conntrack_max(&defaults(), 8), 262144);
        let off = ConntrackSettings {
            max_per_core: Some(0),
            ..defaults()
        };
        assert_eq!(conntrack_max(&off, 8), 0);
        assert!(needs_conn_reuse_mode_0("5.4.0-150-generic"));
        assert!(needs_conn_reuse_mode_0("4.1.0"));
        assert!(!needs_conn_reuse_mode_0("5.9.0"));
        assert!(!needs_conn_reuse_mode_0("6.1.0-18-amd64"));
        assert!(!needs_conn_reuse_mode_0("4.0.9"));
    }

    #[test]
    fn prepare_node_sets_what_upstream_sets() {
        let sys = FakeSysctl::with_defaults();
        sys.insert("net/ipv4/ip_forward", 1);
        let mut s = sys.clone();
        let mut ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
        let mut h = Hash(16384, false);
        let cfg = StartupConfig {
            strict_arp: false,
            ipvs_timeouts: IpvsTimeouts::default(),
            conntrack: defaults(),
            kernel_release: "6.1.0".into(),
            cpus: 1,
        };
        let r = prepare_node(&mut s, &mut h, &mut ipvs, &cfg).unwrap();
        let v = |p: &str| sys.value(p).unwrap();
        assert_eq!(v("net/ipv4/vs/conntrack"), 1);
        assert_eq!(v("net/ipv4/vs/expire_nodest_conn"), 1);
        assert_eq!(v("net/ipv4/vs/expire_quiescent_template"), 1);
        assert_eq!(
            v("net/ipv4/vs/conn_reuse_mode"),
            1,
            "6.1 keeps conn_reuse_mode"
        );
        assert_eq!(v("net/ipv4/conf/all/arp_ignore"), 0);
        assert_eq!(v("net/netfilter/nf_conntrack_max"), 131072);
        assert_eq!(h.0, 32768);
        // Never lowered: 5 days stays; close_wait raised to 1h.
        assert_eq!(
            v("net/netfilter/nf_conntrack_tcp_timeout_established"),
            432000
        );
        assert_eq!(v("net/netfilter/nf_conntrack_tcp_timeout_close_wait"), 3600);
        assert!(ipvs.ops().is_empty(), "no IPVS timeouts configured");
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert!(
            !sys.writes().iter().any(|(p, _)| p == "net/ipv4/ip_forward"),
            "unchanged value rewritten"
        );
        assert!(
            r.changed
                .iter()
                .any(|(p, old, new)| p == "net/netfilter/nf_conntrack_max"
                    && *old == 65536
                    && *new == 131072)
        );
    }

    #[test]
    fn strict_arp_old_kernel_timeouts_and_high_existing_max() {
        let sys = FakeSysctl::with_defaults();
        sys.insert("net/netfilter/nf_conntrack_max", 1_000_000);
        let mut s = sys.clone();
        let ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
        let mut h = Hash(16384, true);
        let cfg = StartupConfig {
            strict_arp: true,
            ipvs_timeouts: IpvsTimeouts {
                tcp: 900,
                tcp_fin: 60,
                udp: 0,
            },
            conntrack: defaults(),
            kernel_release: "5.4.0".into(),
            cpus: 2,
        };
        let r = prepare_node(&mut s, &mut h, &mut ipvs.clone(), &cfg).unwrap();
        let v = |p: &str| sys.value(p).unwrap();
        assert_eq!(v("net/ipv4/vs/conn_reuse_mode"), 0);
        assert_eq!(v("net/ipv4/conf/all/arp_ignore"), 1);
        assert_eq!(v("net/ipv4/conf/all/arp_announce"), 2);
        assert_eq!(v("net/netfilter/nf_conntrack_max"), 1_000_000, "lowered");
        assert_eq!(ipvs.timeouts().tcp_fin, 60);
        // The hash table should grow to 131072/4 but sysfs is read-only: a warning, not an error.
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("hashsize"), "{:?}", r.warnings);
    }

    #[test]
    fn missing_br_netfilter_is_a_warning() {
        let sys = FakeSysctl::with_defaults();
        sys.insert("net/bridge/bridge-nf-call-iptables", 0);
        let mut s = sys.clone();
        let mut ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
        let mut h = Hash(1 << 20, false);
        let cfg = StartupConfig {
            kernel_release: "6.1.0".into(),
            cpus: 1,
            ..Default::default()
        };
        let r = prepare_node(&mut s, &mut h, &mut ipvs, &cfg).unwrap();
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("bridge-nf-call-iptables"));
        assert_eq!(
            sys.value("net/bridge/bridge-nf-call-iptables"),
            Some(0),
            "only checked"
        );
    }

    #[test]
    fn required_sysctl_failure_is_an_error() {
        let sys = FakeSysctl::with_defaults();
        sys.make_read_only("net/ipv4/vs/conntrack");
        let mut s = sys.clone();
        let mut ipvs = crate::kernel::ipvs::fake::FakeIpvs::new();
        let mut h = Hash(1 << 20, false);
        let cfg = StartupConfig {
            kernel_release: "6.1.0".into(),
            cpus: 1,
            ..Default::default()
        };
        let e = prepare_node(&mut s, &mut h, &mut ipvs, &cfg).unwrap_err();
        assert!(e.to_string().contains("net/ipv4/vs/conntrack"), "{e}");
    }
}

/// An IPv6 plan: one ClusterIP service with KUBE-6- sets.
/// (vip, port, endpoints) of a TCP service.
type Svc6<'a> = (&'a str, u16, &'a [(&'a str, u16)]);

fn desired_v6(services: &[Svc6<'_>]) -> DesiredState {
    let mut d = desired(&[], &[]);
    d.family = IpFamily::V6;
    d.ipsets.clear();
    let mut ips = BTreeSet::new();
    for (vip, port, eps) in services {
        let k = key(vip, *port, Protocol::Tcp);
        let mut service = svc(vip, *port, Protocol::Tcp, "rr");
        service.netmask = 128;
        d.virtual_servers.insert(
            k,
            Arc::new(DesiredVirtualServer {
                service,
                destinations: eps
                    .iter()
                    .map(|(a, p)| ((ip(a), *p), IpvsDestination::masq(ip(a), *p, 1)))
                    .collect(),
            }),
        );
        d.bound_addresses.insert(ip(vip));
        ips.insert(vip.to_string());
    }
    let mut set = set("KUBE-6-IPVS-IPS", IpSetType::HashIp, &[]);
    set.1.spec.family = IpFamily::V6;
    set.1.entries = ips;
    d.ipsets.insert(set.0, set.1);
    d.iptables_payload =
        "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n".into();
    d
}

#[test]
fn dual_stack_shares_ipvs_and_kube_ipvs0_without_crosstalk() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let v4 = small();
    let v6 = desired_v6(&[("fd00::10", 80, &[("fd01::11", 8080)])]);
    let (c4, mut c6) = (config(), config());
    c6.family = IpFamily::V6;
    let nips = node_ips();
    let both = |p: &mut Applier, v4: &DesiredState, v6: &DesiredState, full: bool| {
        p.apply(
            &[
                FamilyInput {
                    desired: v4,
                    delta: None,
                    config: &c4,
                    node_port_ips: &nips,
                },
                FamilyInput {
                    desired: v6,
                    delta: None,
                    config: &c6,
                    node_port_ips: &[],
                },
            ],
            full,
            &ConntrackHints::default(),
        )
    };
    let r = both(&mut p, &v4, &v6, true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.added, 5);
    assert_eq!(r.iptables_restores, 2);
    assert_eq!(k.addrs(DUMMY_DEVICE).len(), 4);
    assert!(
        k.iptables
            .rules(IpFamily::V6, "nat", "KUBE-SERVICES")
            .is_some()
    );
    // One dump of IPVS / sets / addresses serves both families.
    k.clear_logs();
    let r = both(&mut p, &v4, &v6, true);
    assert_eq!(r.writes(), 0, "{r:?}");
    let reads = k.reads();
    assert_eq!(
        reads
            .iter()
            .filter(|l| l.starts_with("ipvs.services"))
            .count(),
        1
    );
    assert_eq!(
        reads
            .iter()
            .filter(|l| l.starts_with("link.addresses"))
            .count(),
        1
    );
    // Emptying the IPv6 plan removes only IPv6 objects, and the reverse.
    let empty6 = desired_v6(&[]);
    let r = both(&mut p, &v4, &empty6, true);
    assert_eq!(r.ipvs_services.deleted, 1);
    assert_eq!(r.addresses.deleted, 1);
    assert_eq!(k.services().len(), 4);
    let r = both(&mut p, &desired(&[], &[]), &v6, true);
    assert_eq!(r.ipvs_services.deleted, 4);
    assert_eq!(r.ipvs_services.added, 1);
    assert_eq!(
        k.services(),
        BTreeSet::from([key("fd00::10", 80, Protocol::Tcp)])
    );
    assert_eq!(k.addrs(DUMMY_DEVICE), vec![ip("fd00::10")]);
}

#[test]
fn event_sync_converges_a_service_that_appeared_behind_its_back() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    // Someone created the next service's virtual server, with a stray real server and another scheduler.
    let mut ipvs = k.ipvs.clone();
    ipvs.add_service(&svc("10.96.100.30", 80, Protocol::Tcp, "wlc"))
        .unwrap();
    ipvs.add_destination(
        &key("10.96.100.30", 80, Protocol::Tcp),
        &IpvsDestination::masq(ip("10.244.9.9"), 8080, 1),
    )
    .unwrap();
    let d = desired(
        &[
            ("10.96.0.1", 443, Protocol::Tcp, &[(NODE, 6443)]),
            ("10.96.100.10", 80, Protocol::Tcp, EPS),
            ("10.96.100.20", 80, Protocol::Tcp, EPS),
            ("10.96.100.30", 80, Protocol::Tcp, EPS),
        ],
        &[30080],
    );
    let r = apply(&mut p, &d, false);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.ipvs_services.updated, 1);
    let snap = k.ipvs.snapshot();
    let (s, dests) = &snap[&key("10.96.100.30", 80, Protocol::Tcp)];
    assert_eq!(s.scheduler, "rr");
    let got: BTreeSet<IpAddr> = dests.iter().map(|d| d.addr).collect();
    assert_eq!(got, BTreeSet::from([ip("10.244.0.11"), ip("10.244.0.12")]));
    assert_eq!(apply(&mut p, &d, false).writes(), 0);
}

#[test]
fn proxier_can_move_to_a_blocking_thread() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<Proxier>();
    let k = Kit::new();
    let mut p = proxier(&k);
    let r = std::thread::spawn(move || apply(&mut p, &small(), false))
        .join()
        .unwrap();
    assert_eq!(r.ipvs_services.added, 4);
}

#[test]
fn non_canonical_planned_entry_never_ends_missing() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let mut d = small();
    let (name, mut set) = set(
        "KUBE-LOAD-BALANCER-SOURCE-CIDR",
        IpSetType::HashIpPortNet,
        &["1.2.3.4,tcp:80,10.1.2.3/32"],
    );
    set.entries.insert("1.2.3.4,tcp:80,10.1.2.3/32".into());
    d.ipsets.insert(name.clone(), set);
    apply(&mut p, &d, true);
    assert_eq!(
        k.ipsets.members(&name),
        BTreeSet::from(["1.2.3.4,tcp:80,10.1.2.3".to_string()])
    );
    // The periodic sync sees the kernel's spelling differ from the plan's: it must not lose the member.
    apply(&mut p, &d, true);
    assert_eq!(
        k.ipsets.members(&name),
        BTreeSet::from(["1.2.3.4,tcp:80,10.1.2.3".to_string()])
    );
}

#[test]
fn conntrack_hints_merge() {
    let mut h = ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("10.96.0.10")]),
        stale_endpoint_ips: BTreeSet::from([ip("10.244.0.6")]),
    };
    h.merge(ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("10.96.0.11")]),
        ..Default::default()
    });
    assert_eq!(h.stale_service_ips.len(), 2);
    assert_eq!(h.stale_endpoint_ips.len(), 1);
    assert!(!h.is_empty());
    assert!(ConntrackHints::default().is_empty());
}

#[test]
fn hinted_removed_service_flows_are_deleted_even_without_ipvs_changes() {
    let k = Kit::new();
    let mut p = proxier(&k);
    apply(&mut p, &small(), true);
    // A UDP service that this process never programmed (e.g. removed while it restarted).
    let stale = ConntrackFlow {
        orig_src: ip("10.244.0.50"),
        orig_sport: 40000,
        orig_dst: ip("10.96.0.10"),
        orig_dport: 53,
        reply_src: ip("10.244.0.6"),
        reply_sport: 53,
    };
    k.conntrack.add_flow(stale);
    let nips = node_ips();
    let d = small();
    let r = p.apply(
        &[FamilyInput {
            desired: &d,
            delta: None,
            config: &config(),
            node_port_ips: &nips,
        }],
        false,
        &ConntrackHints {
            stale_service_ips: BTreeSet::from([ip("10.96.0.10")]),
            ..Default::default()
        },
    );
    assert_eq!(r.conntrack_deleted, 1, "{r:?}");
    assert!(k.conntrack.flows().is_empty());
}

#[test]
fn jumps_never_pile_up_when_the_save_cannot_be_read_back() {
    let k = Kit::new();
    // A save format the reconciler cannot read back (as a differently printing iptables build might).
    k.iptables.hide_builtin_rules_in_save(true);
    let mut p = proxier(&k);
    let d = small();
    let r = apply(&mut p, &d, true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(r.jumps_inserted, d.jumps.len());
    // Every later full sync sees the jumps "missing" again; `-C` finds them, nothing is added.
    for _ in 0..3 {
        let r = apply(&mut p, &d, true);
        assert_eq!(r.failure_count(), 0, "{r:?}");
        assert_eq!(r.jumps_inserted, 0, "{r:?}");
    }
    for jump in &d.jumps {
        let rules = k
            .iptables
            .rules(IpFamily::V4, jump.table, jump.chain)
            .unwrap();
        assert_eq!(rules.len(), 1, "{} {}: {rules:?}", jump.table, jump.chain);
    }
}

#[test]
fn dual_stack_reports_each_familys_own_figures() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let mut v4 = small();
    let v6 = desired_v6(&[("fd00::10", 80, &[("fd01::11", 8080)])]);
    let (c4, mut c6) = (config(), config());
    c6.family = IpFamily::V6;
    let nips = node_ips();
    let both = |p: &mut Applier, v4: &DesiredState, hints: &ConntrackHints| {
        let input = |desired, config, node_port_ips| FamilyInput {
            desired,
            delta: None,
            config,
            node_port_ips,
        };
        p.apply(&[input(v4, &c4, &nips), input(&v6, &c6, &[])], false, hints)
    };
    let r = both(&mut p, &v4, &ConntrackHints::default());
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(
        r.families.keys().copied().collect::<Vec<_>>(),
        vec![IpFamily::V4, IpFamily::V6]
    );
    let own: std::time::Duration = r.families.values().map(|f| f.duration).sum();
    assert!(own <= r.duration, "{own:?} > {:?}", r.duration);

    // Only v4's payload changes and its restore fails; a stale flow of a removed v6 UDP service.
    v4.iptables_payload =
        v4.iptables_payload
            .replacen("COMMIT", "-A KUBE-POSTROUTING -j RETURN\nCOMMIT", 1);
    k.set_fail("iptables.restore", true);
    k.conntrack.add_flow(ConntrackFlow {
        orig_src: ip("fd01::50"),
        orig_sport: 40000,
        orig_dst: ip("fd00::53"),
        orig_dport: 53,
        reply_src: ip("fd01::6"),
        reply_sport: 53,
    });
    let hints = ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("fd00::53")]),
        ..Default::default()
    };
    let r = both(&mut p, &v4, &hints);
    let (f4, f6) = (&r.families[&IpFamily::V4], &r.families[&IpFamily::V6]);
    assert_eq!(r.failures_of(FailureKind::IptablesRestore), 1, "{r:?}");
    assert_eq!(f4.iptables_restore_failures, 1, "{r:?}");
    assert_eq!(f6.iptables_restore_failures, 0, "{r:?}");
    assert_eq!(r.conntrack_deleted, 1, "{r:?}");
    assert_eq!(
        (f4.conntrack_deleted, f6.conntrack_deleted),
        (0, 1),
        "{r:?}"
    );
    assert!(f4.conntrack_duration.is_some() && f6.conntrack_duration.is_some());
    let own: std::time::Duration = r.families.values().map(|f| f.duration).sum();
    assert!(own <= r.duration, "{own:?} > {:?}", r.duration);
}

/// A full sync counts what changed behind its back by kind (measured against what it applied, not the
/// plan), names the virtual servers, and counts the foreign objects it leaves alone.
#[test]
fn full_sync_counts_drift_by_kind_and_foreign_objects() {
    use crate::proxier::reconcile::drift::{DriftKind, ForeignKind};
    let k = Kit::new();
    let mut p = proxier(&k);
    let first = apply(&mut p, &small(), true);
    assert!(first.drift.is_empty(), "adopting is not drift: {first:?}");
    let quiet = apply(&mut p, &small(), true);
    assert!(quiet.drift.is_empty(), "{quiet:?}");
    let foreign = |r: &SyncReport, kind| r.foreign.as_ref().and_then(|f| f.get(&kind)).copied();
    assert_eq!(foreign(&quiet, ForeignKind::VirtualServer), Some(0));
    assert_eq!(foreign(&quiet, ForeignKind::Ipset), Some(0));

    let member = break_behind_its_back(&k);
    let api = key("10.96.0.1", 443, Protocol::Tcp);
    let web = key("10.96.100.10", 80, Protocol::Tcp);
    let web2 = key("10.96.100.20", 80, Protocol::Tcp);
    // An event-driven sync trusts its memory: it neither sees nor counts anything.
    assert!(apply(&mut p, &small(), false).drift.is_empty());
    let r = apply(&mut p, &small(), true);
    let want = BTreeMap::from([
        (DriftKind::VirtualServer, 1),
        (DriftKind::RealServer, 1),
        (DriftKind::Weight, 1),
        (DriftKind::Scheduler, 1),
        (DriftKind::IpsetMember, 1),
        (DriftKind::IptablesRule, 1),
        (DriftKind::Address, 1),
    ]);
    assert_eq!(r.drift.counts, want, "{r:?}");
    let kinds = |key| {
        r.drift
            .virtual_servers
            .get(&key)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(kinds(api), BTreeSet::from([DriftKind::VirtualServer]));
    assert_eq!(kinds(web), BTreeSet::from([DriftKind::RealServer]));
    assert_eq!(
        kinds(web2),
        BTreeSet::from([DriftKind::Weight, DriftKind::Scheduler])
    );
    assert_eq!(r.drift.addresses, BTreeSet::from([ip("10.96.100.10")]));
    assert!(
        r.drift
            .set_members
            .contains(&("KUBE-CLUSTER-IP".into(), member))
    );
    assert_eq!(foreign(&r, ForeignKind::VirtualServer), Some(1));
    assert_eq!(foreign(&r, ForeignKind::Ipset), Some(1));
    // Repaired: the next full sync finds nothing.
    assert!(apply(&mut p, &small(), true).drift.is_empty());
}

/// Another tool changes one object of each kind of ours (and adds a foreign virtual server and set);
/// returns the member it deleted from KUBE-CLUSTER-IP.
fn break_behind_its_back(k: &Kit) -> String {
    let api = key("10.96.0.1", 443, Protocol::Tcp);
    let web = key("10.96.100.10", 80, Protocol::Tcp);
    let web2 = key("10.96.100.20", 80, Protocol::Tcp);
    let mut ipvs = k.ipvs.clone();
    ipvs.delete_service(&api).unwrap();
    ipvs.delete_destination(&web, ip(EPS[0].0), EPS[0].1)
        .unwrap();
    let reweighted = IpvsDestination::masq(ip(EPS[1].0), EPS[1].1, 5);
    ipvs.update_destination(&web2, &reweighted).unwrap();
    ipvs.update_service(&svc("10.96.100.20", 80, Protocol::Tcp, "wrr"))
        .unwrap();
    seed_vs(k, "10.1.1.1", 8080, "rr");
    let mut sets = k.ipsets.clone();
    let member = k
        .ipsets
        .members("KUBE-CLUSTER-IP")
        .into_iter()
        .next()
        .unwrap();
    let del = IpSetOp::Del {
        set: "KUBE-CLUSTER-IP".into(),
        entry: member.clone(),
    };
    sets.apply(&[del]).unwrap();
    let spec = IpSetSpec {
        name: "FOREIGN".into(),
        set_type: IpSetType::HashIp,
        family: IpFamily::V4,
        comment: String::new(),
    };
    sets.create(&spec).unwrap();
    let mut links = k.links.clone();
    links.del_address(DUMMY_DEVICE, ip("10.96.100.10")).unwrap();
    let mut ipt = k.iptables.clone();
    let jump = jump_args("kubernetes service portals", "KUBE-SERVICES");
    assert!(
        ipt.delete_rule(IpFamily::V4, "nat", "PREROUTING", &jump)
            .unwrap()
    );

    member
}

/// `d` with every virtual server on scheduler `name`.
fn with_scheduler(mut d: DesiredState, name: &str) -> DesiredState {
    for vs in d.virtual_servers.values_mut() {
        Arc::make_mut(vs).service.scheduler = name.into();
    }
    d
}

/// The real servers of `vip:80` as the fake kernel lists them (head first, as IPVS does).
fn kernel_order(k: &Kit, vip: &str) -> Vec<String> {
    let mut ipvs = k.ipvs.clone();
    let dests = ipvs.destinations(&key(vip, 80, Protocol::Tcp)).unwrap();
    dests.iter().map(|d| d.addr.to_string()).collect()
}

#[test]
fn hash_schedulers_get_one_real_server_order_whatever_the_history() {
    let k = Kit::new();
    let mut p = proxier(&k);
    let two: &[(&str, u16)] = &[("10.244.0.10", 8080), ("10.244.0.30", 8080)];
    let three: &[(&str, u16)] = &[
        ("10.244.0.10", 8080),
        ("10.244.0.20", 8080),
        ("10.244.0.30", 8080),
    ];
    let plan = |eps, sched| {
        with_scheduler(
            desired(&[("10.96.0.1", 80, Protocol::Tcp, eps)], &[]),
            sched,
        )
    };
    let canonical = ["10.244.0.30", "10.244.0.20", "10.244.0.10"];
    // rr: IPVS keeps the history (the later addition at the head), nothing is relinked.
    apply(&mut p, &plan(two, "rr"), true);
    let r = apply(&mut p, &plan(three, "rr"), false);
    assert_eq!(r.ipvs_destinations.added, 1);
    assert_eq!(
        kernel_order(&k, "10.96.0.1"),
        ["10.244.0.20", "10.244.0.30", "10.244.0.10"]
    );
    // The same list under mh: the full sync reads the kernel's order and relinks every real server.
    let r = apply(&mut p, &plan(three, "mh"), true);
    assert_eq!(r.failure_count(), 0, "{r:?}");
    assert_eq!(kernel_order(&k, "10.96.0.1"), canonical);
    assert_eq!(r.ipvs_destinations.updated, 3, "{r:?}");
    // Then identical syncs write nothing.
    let before = ipvs_batches(&k).len();
    apply(&mut p, &plan(three, "mh"), true);
    apply(&mut p, &plan(three, "mh"), false);
    assert_eq!(ipvs_batches(&k).len(), before, "{:#?}", ipvs_batches(&k));
    // An event-driven addition below others: those above it are unlinked first and linked after it.
    let k2 = Kit::new();
    let mut p2 = proxier(&k2);
    apply(&mut p2, &plan(two, "mh"), true);
    k2.log.lock().unwrap().calls.clear();
    apply(&mut p2, &plan(three, "mh"), false);
    assert_eq!(kernel_order(&k2, "10.96.0.1"), canonical);
    let calls = k2.log.lock().unwrap().calls.clone();
    let unlink = pos(
        &calls,
        "W ipvs.delete_destination 10.96.0.1:80/TCP 10.244.0.30:8080",
    );
    let added = pos(
        &calls,
        "W ipvs.add_destination 10.96.0.1:80/TCP 10.244.0.20:8080",
    );
    let relinked = pos(
        &calls,
        "W ipvs.add_destination 10.96.0.1:80/TCP 10.244.0.30:8080",
    );
    assert!(unlink < added && added < relinked, "{calls:#?}");
}
