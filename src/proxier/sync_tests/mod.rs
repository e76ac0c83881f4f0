//! Reconciler and proxier tests over an in-memory kernel (test-local fake with one ordered call log), one
//! file a feature; the plan builders and kit helpers they share are here.

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
use crate::proxier::drift_report::DriftKind;
use crate::proxier::plan::{NodeFacts, PlanConfig};
use crate::proxier::reconcile::{ConntrackHints, FamilyInput};
use crate::proxier::report::{FailureKind, SyncReport};
use crate::proxier::sync::{FamilySnapshot, Proxier, SyncInput};
use crate::proxier::testkit::{Applier, Kit};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

mod conntrack;
mod drift;
mod dual_stack;
mod failures;
mod graceful;
mod ownership;
mod programming;
mod startup;

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
        DesiredIpSet::new(
            IpSetSpec {
                comment: format!("{name} comment"),
                ..IpSetSpec::new(name, t, IpFamily::V4)
            },
            entries.iter().map(|s| s.to_string()).collect(),
        ),
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
        shared: Default::default(),
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
        arp_quiet: BTreeSet::new(),
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
