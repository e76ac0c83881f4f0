//! Planner test helpers: model builders with the upstream tests' defaults, the small reference scenario,
//! and parsers for the plan's payload and kernel dumps.
#![allow(dead_code)]

use kube_proxy_rs::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, LoadBalancerIngress, Protocol, ServiceMap, ServicePort,
    ServicePortName, Topology,
};
use kube_proxy_rs::proxier::desired::DesiredState;
use kube_proxy_rs::proxier::plan::{LocalDetector, NodeFacts, PlanConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// The node name of upstream's proxier tests.
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
    ServicePort::new(port_name(ns, name, port, proto), vec![ip(cip)], p)
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
    Endpoint::new(ip(addr), port).with_topology(Topology {
        node_name: node.map(Into::into),
        ..Topology::default()
    })
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

/// The planner's defaults for `family` (rr, masquerade bit 14, no detector, `--random-fully`).
pub fn cfg(family: IpFamily) -> PlanConfig {
    PlanConfig::new(family)
}

/// Node [`HOST`] whose addresses are `node_ips` (NodePort and local addresses alike).
pub fn node(node_ips: &[&str]) -> NodeFacts {
    NodeFacts::new(HOST, node_ips.iter().map(|s| ip(s)).collect())
}

/// The small reference scenario's node (tests/planner_data/small-scenario, captured from upstream).
pub const REF_NODE: &str = "ref-node";
/// Its IPv4 address.
pub const REF_NODE_V4: &str = "10.0.0.10";

/// The objects of the small scenario's objects.yaml plus the apiserver's own default/kubernetes
/// service, built by hand.
pub fn small_scenario() -> (ServiceMap, EndpointsMap) {
    let tcp = Protocol::Tcp;
    let kubernetes = svc("default", "kubernetes", "https", tcp, "10.96.0.1", 443);
    let web_http = svc("default", "web", "http", tcp, "10.96.100.10", 80);
    let web_alt = svc("default", "web", "alt", tcp, "10.96.100.10", 81);
    let mut web_np = svc("default", "web-np", "http", tcp, "10.96.100.20", 80);
    web_np.node_port = Some(30080);
    let pods = |port| {
        vec![
            ep("10.244.0.11", port, Some(REF_NODE)),
            ep("10.244.0.12", port, Some(REF_NODE)),
        ]
    };
    let eps = vec![
        (kubernetes.name.clone(), vec![ep(REF_NODE_V4, 6443, None)]),
        (web_http.name.clone(), pods(8080)),
        (web_alt.name.clone(), pods(8081)),
        (web_np.name.clone(), pods(8080)),
    ];
    maps(vec![kubernetes, web_http, web_alt, web_np], eps)
}

/// The small scenario's node facts (one address per family).
pub fn small_scenario_node() -> NodeFacts {
    NodeFacts::new(REF_NODE, vec![ip(REF_NODE_V4), ip("fd00:10::10")])
}

/// Defaults of the reference run: `--cluster-cidr=10.244.0.0/16`, masquerade bit 14, rr, random-fully.
pub fn small_scenario_cfg(family: IpFamily) -> PlanConfig {
    PlanConfig {
        local_detector: match family {
            IpFamily::V4 => LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().unwrap()]),
            IpFamily::V6 => LocalDetector::None,
        },
        ..PlanConfig::new(family)
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
