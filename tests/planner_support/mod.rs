//! Helpers shared by the planner tests: model builders and parsers for kernel dumps.
#![allow(dead_code)]

use kube_proxy_rs::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, LoadBalancerIngress, Protocol, ServiceMap, ServicePort,
    ServicePortName,
};
use kube_proxy_rs::proxier::desired::DesiredState;
use kube_proxy_rs::proxier::plan::{LocalDetector, NodeFacts, PlanConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

pub const HOST: &str = "test-hostname";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn port_name(ns: &str, name: &str, port: &str, proto: Protocol) -> ServicePortName {
    ServicePortName {
        namespace: ns.into(),
        name: name.into(),
        port_name: port.into(),
        protocol: proto,
    }
}

/// A ClusterIP service port with nothing else set.
pub fn svc(ns: &str, name: &str, port: &str, proto: Protocol, cip: &str, p: u16) -> ServicePort {
    ServicePort {
        name: port_name(ns, name, port, proto),
        cluster_ips: vec![ip(cip)],
        port: p,
        protocol: proto,
        node_port: None,
        external_ips: vec![],
        load_balancer_ingress: vec![],
        load_balancer_source_ranges: vec![],
        session_affinity_timeout: None,
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: None,
    }
}

pub fn lb(ips: &[&str]) -> Vec<LoadBalancerIngress> {
    ips.iter()
        .map(|s| LoadBalancerIngress {
            ip: ip(s),
            ip_mode_proxy: false,
        })
        .collect()
}

/// A ready endpoint, on `node` if given.
pub fn ep(addr: &str, port: u16, node: Option<&str>) -> Endpoint {
    Endpoint {
        ip: ip(addr),
        port,
        ready: true,
        serving: true,
        terminating: false,
        node_name: node.map(Into::into),
        zone: None,
        hints_for_nodes: None,
        hints_for_zones: None,
    }
}

pub fn cond(mut e: Endpoint, ready: bool, serving: bool, terminating: bool) -> Endpoint {
    e.ready = ready;
    e.serving = serving;
    e.terminating = terminating;
    e
}

/// Service and endpoints maps; endpoints are attached to the service port with the same name.
pub fn maps(
    services: Vec<ServicePort>,
    endpoints: Vec<(ServicePortName, Vec<Endpoint>)>,
) -> (ServiceMap, EndpointsMap) {
    let s = services
        .into_iter()
        .map(|s| (s.name.clone(), Arc::new(s)))
        .collect();
    let e = endpoints
        .into_iter()
        .map(|(n, mut v)| {
            v.sort();
            v.dedup();
            (n, Arc::new(v))
        })
        .collect();
    (s, e)
}

pub fn cfg(family: IpFamily) -> PlanConfig {
    PlanConfig {
        family,
        scheduler: kube_proxy_rs::scheduler::Scheduler::default(),
        masquerade_all: false,
        masquerade_bit: 14,
        local_detector: LocalDetector::None,
        exclude_cidrs: vec![],
        random_fully: true,
    }
}

pub fn node(node_ips: &[&str]) -> NodeFacts {
    let ips: Vec<IpAddr> = node_ips.iter().map(|s| ip(s)).collect();
    NodeFacts {
        node_name: HOST.into(),
        zone: None,
        node_ips: ips.clone(),
        node_port_ips: ips.clone(),
        local_addresses: ips,
    }
}

/// Virtual server `addr:port/proto` → sorted `ip:port` real servers.
pub fn vs_summary(d: &DesiredState) -> BTreeMap<String, Vec<String>> {
    d.virtual_servers
        .iter()
        .map(|(k, v)| {
            let dests = v
                .destinations
                .values()
                .map(|x| {
                    assert_eq!(x.weight, 1);
                    match x.addr {
                        IpAddr::V4(a) => format!("{a}:{}", x.port),
                        IpAddr::V6(a) => format!("[{a}]:{}", x.port),
                    }
                })
                .collect();
            (k.to_string(), dests)
        })
        .collect()
}

pub fn entries(d: &DesiredState, set: &str) -> Vec<String> {
    d.ipsets
        .get(set)
        .unwrap_or_else(|| panic!("no set {set}"))
        .entries
        .iter()
        .cloned()
        .collect()
}

/// Every set that has members, with its members.
pub fn non_empty_sets(d: &DesiredState) -> BTreeMap<String, BTreeSet<String>> {
    d.ipsets
        .iter()
        .filter(|(_, s)| !s.entries.is_empty())
        .map(|(n, s)| (n.clone(), s.entries.clone()))
        .collect()
}

/// Rewrites upstream's mark targets as iptables-save prints them.
pub fn normalize_marks(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        match (words[i], words.get(i + 1)) {
            ("--or-mark", Some(m)) => {
                out.push("--set-xmark".to_string());
                out.push(format!("{m}/{m}"));
                i += 2;
            }
            ("--xor-mark", Some(m)) => {
                out.push("--set-xmark".to_string());
                out.push(format!("{m}/0x0"));
                i += 2;
            }
            (w, _) => {
                out.push(w.to_string());
                i += 1;
            }
        }
    }
    out.join(" ")
}

/// A restore payload or iptables-save dump split per table: declared chains and `-A` rules by chain.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub chains: BTreeMap<String, Vec<String>>,
    pub rules: BTreeMap<(String, String), Vec<String>>,
    /// Tables in the order they appear.
    pub order: Vec<String>,
}

pub fn parse_tables(text: &str) -> Tables {
    let mut t = Tables::default();
    let mut table = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.to_string();
            t.order.push(table.clone());
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split(' ').next().unwrap().to_string();
            t.chains.entry(table.clone()).or_default().push(chain);
        } else if line.starts_with("-A ") {
            let chain = line.split(' ').nth(1).unwrap().to_string();
            // iptables-save >= 1.8.8 escapes single quotes inside quoted comments.
            t.rules
                .entry((table.clone(), chain))
                .or_default()
                .push(normalize_marks(&line.replace("\\'", "'")));
        }
    }
    t
}

/// Rules of one chain in the payload, mark syntax normalized.
pub fn chain(d: &DesiredState, table: &str, chain: &str) -> Vec<String> {
    parse_tables(&d.iptables_payload)
        .rules
        .remove(&(table.to_string(), chain.to_string()))
        .unwrap_or_default()
}

/// `(target, match-set)` of each rule of a chain, like upstream's checkIptables; the loopback RETURN
/// rule that carries neither is left out.
pub fn chain_jumps(d: &DesiredState, table: &str, ch: &str) -> Vec<(String, String)> {
    chain(d, table, ch)
        .iter()
        .filter(|r| !r.contains(" -s 127.0.0.0/8 ") && !r.contains(" -s ::1/128 "))
        .map(|r| {
            let w: Vec<&str> = r.split(' ').collect();
            let target = w
                .iter()
                .position(|x| *x == "-j")
                .map(|i| w[i + 1].to_string())
                .unwrap_or_default();
            let set = w
                .iter()
                .position(|x| *x == "--match-set")
                .map(|i| w[i + 1].to_string())
                .unwrap_or_default();
            (target, set)
        })
        .collect()
}

pub fn j(target: &str, set: &str) -> (String, String) {
    (target.to_string(), set.to_string())
}
