//! The pure planner: cluster state and node facts in, desired kernel state out. No I/O, no clock, no
//! globals: `plan` reproduces what upstream kube-proxy's IPVS `syncProxyRules` programs for one family.

pub mod ipsets;
pub mod iptables;
pub mod ipvs;
pub mod node_ports;

use crate::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServiceName, ServicePort,
};
use crate::cluster::select::{Categorized, categorize};
use crate::proxier::desired::{
    DesiredIpSet, DesiredState, DesiredVirtualServer, HealthCheckService,
};
use ipnet::IpNet;
use ipsets::{SetKind, entry, ip_port, ip_port_ip, ip_port_net};
use ipvs::{DEFAULT_SCHEDULER, VsTemplate, destinations};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

/// How traffic from inside the cluster is recognised, for ClusterIP masquerading.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LocalDetector {
    /// No detector: masquerade by `src,dst` match only.
    #[default]
    None,
    /// Pod CIDR(s) of this family (ClusterCIDR or NodeCIDR mode).
    Cidrs(Vec<IpNet>),
    /// Traffic entering from this bridge interface is local.
    BridgeInterface(String),
    /// Traffic entering from interfaces with this name prefix is local.
    InterfaceNamePrefix(String),
}

/// Configuration the planner reads (derived from KubeProxyConfiguration by the daemon).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanConfig {
    pub family: IpFamily,
    /// IPVS scheduler; empty means `rr`.
    pub scheduler: String,
    pub masquerade_all: bool,
    /// Mark bit for masquerading (mark = 1 << bit).
    pub masquerade_bit: u32,
    pub local_detector: LocalDetector,
    /// Never program (and never delete) IPVS services inside these ranges.
    pub exclude_cidrs: Vec<IpNet>,
    /// Whether `iptables` supports `--random-fully` on MASQUERADE.
    pub random_fully: bool,
}

/// Facts about this node that the plan depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeFacts {
    pub node_name: String,
    /// Zone label of the node, for topology hints.
    pub zone: Option<String>,
    /// The node's primary IPs (from the Node object), used for LB source-range checks.
    pub node_ips: Vec<IpAddr>,
    /// IPs that get NodePort virtual servers (already filtered by nodePortAddresses and family).
    pub node_port_ips: Vec<IpAddr>,
    /// All local addresses of the node except those on kube-ipvs0 (ExternalIPs/LB IPs already local
    /// are not bound to kube-ipvs0).
    pub local_addresses: Vec<IpAddr>,
}

pub use node_ports::node_port_ips;

/// Services that fell back to cluster endpoints for lack of a local one, by traffic policy.
#[derive(Default)]
struct NoLocal {
    internal: BTreeSet<ServiceName>,
    external: BTreeSet<ServiceName>,
}

/// Picks the real servers of one virtual server (upstream's choice in `syncEndpoint`): local endpoints
/// when the traffic policy is Local and there is one, otherwise the cluster endpoints.
fn pick(
    cat: &Categorized<'_>,
    svc: &ServicePort,
    only_local: bool,
    no_local: &mut NoLocal,
) -> ipvs::Destinations {
    if !only_local {
        return destinations(&cat.cluster);
    }
    if !cat.local.is_empty() {
        return destinations(&cat.local);
    }
    if cat.has_any && svc.internal_policy_local {
        no_local.internal.insert(svc.name.service());
    }
    if cat.has_any && svc.external_policy_local() {
        no_local.external.insert(svc.name.service());
    }
    destinations(&cat.cluster)
}

/// Accumulates the plan while walking the services.
struct Builder<'a> {
    family: IpFamily,
    node: &'a NodeFacts,
    scheduler: &'a str,
    node_ip: Option<IpAddr>,
    node_port_ips: Vec<IpAddr>,
    local_addrs: HashSet<IpAddr>,
    sets: [BTreeSet<String>; 17],
    virtual_servers: BTreeMap<crate::kernel::ipvs::IpvsServiceKey, DesiredVirtualServer>,
    bound: BTreeSet<IpAddr>,
    no_local: NoLocal,
    lb_no_node_access: Vec<(IpAddr, Protocol, u16)>,
    health: BTreeMap<ServiceName, (u16, BTreeSet<IpAddr>)>,
}

impl Builder<'_> {
    fn set(&mut self, kind: SetKind, e: String) {
        self.sets[kind.index()].insert(e);
    }

    fn add_vs(&mut self, service: crate::kernel::ipvs::IpvsService, dests: ipvs::Destinations) {
        self.virtual_servers.insert(
            service.key,
            DesiredVirtualServer {
                service,
                destinations: dests,
            },
        );
    }

    fn service_port(&mut self, svc: &ServicePort, eps: &[Endpoint]) {
        let family = self.family;
        let Some(cluster_ip) = svc.cluster_ip(family) else {
            return;
        };
        let proto = svc.protocol;
        let port = svc.port;
        let node_name = self.node.node_name.as_str();

        if let Some(hc) = svc.health_check_node_port {
            let e = self
                .health
                .entry(svc.name.service())
                .or_insert_with(|| (hc, BTreeSet::new()));
            e.1.extend(
                eps.iter()
                    .filter(|ep| IpFamily::of(&ep.ip) == family && ep.ready)
                    .filter(|ep| ep.is_local(node_name))
                    .map(|ep| ep.ip),
            );
        }

        // Hairpin: every local endpoint, whatever its condition.
        for ep in eps {
            if IpFamily::of(&ep.ip) == family && ep.is_local(node_name) {
                self.set(
                    SetKind::LoopBack,
                    entry(|s| ip_port_ip(s, ep.ip, proto, ep.port, ep.ip)),
                );
            }
        }

        let cat = categorize(eps, svc, family, node_name, self.node.zone.as_deref());
        let tmpl = VsTemplate::new(svc, self.scheduler, family);
        let etp_local = svc.external_policy_local();

        self.set(
            SetKind::ClusterIp,
            entry(|s| ip_port(s, cluster_ip, proto, port)),
        );
        let d = pick(&cat, svc, svc.internal_policy_local, &mut self.no_local);
        self.add_vs(tmpl.at(cluster_ip, port), d);
        self.bound.insert(cluster_ip);

        for ext in svc.external_ips_of(family) {
            let kind = if etp_local {
                SetKind::ExternalIpLocal
            } else {
                SetKind::ExternalIp
            };
            self.set(kind, entry(|s| ip_port(s, ext, proto, port)));
            let d = pick(&cat, svc, etp_local, &mut self.no_local);
            self.add_vs(tmpl.at(ext, port), d);
            if !self.local_addrs.contains(&ext) {
                self.bound.insert(ext);
            }
        }

        for lb in svc.load_balancer_ips_of(family) {
            let e = entry(|s| ip_port(s, lb, proto, port));
            if etp_local {
                self.set(SetKind::LoadBalancerLocal, e.clone());
            }
            let ranges: Vec<IpNet> = svc
                .load_balancer_source_ranges
                .iter()
                .copied()
                .filter(|r| IpFamily::of_net(r) == family)
                .collect();
            if !ranges.is_empty() {
                self.set(SetKind::LoadBalancerFw, e.clone());
                let mut allow_from_node = false;
                for r in &ranges {
                    self.set(
                        SetKind::LoadBalancerSourceCidr,
                        entry(|s| ip_port_net(s, lb, proto, port, *r)),
                    );
                    if self.node_ip.is_some_and(|n| r.contains(&n)) {
                        allow_from_node = true;
                    }
                }
                if allow_from_node {
                    self.set(
                        SetKind::LoadBalancerSourceIp,
                        entry(|s| ip_port_ip(s, lb, proto, port, lb)),
                    );
                } else {
                    self.lb_no_node_access.push((lb, proto, port));
                }
            }
            self.set(SetKind::LoadBalancer, e);
            let d = pick(&cat, svc, etp_local, &mut self.no_local);
            self.add_vs(tmpl.at(lb, port), d);
            if !self.local_addrs.contains(&lb) {
                self.bound.insert(lb);
            }
        }

        if let Some(node_port) = svc.node_port {
            if self.node_port_ips.is_empty() {
                // Upstream skips the rest of this service port (its health-check entry included).
                return;
            }
            let (all, local) = match proto {
                Protocol::Tcp => (SetKind::NodePortTcp, SetKind::NodePortLocalTcp),
                Protocol::Udp => (SetKind::NodePortUdp, SetKind::NodePortLocalUdp),
                Protocol::Sctp => (SetKind::NodePortSctp, SetKind::NodePortLocalSctp),
            };
            let entries: Vec<String> = if proto == Protocol::Sctp {
                self.node_port_ips
                    .iter()
                    .map(|ip| entry(|s| ip_port(s, *ip, proto, node_port)))
                    .collect()
            } else {
                vec![node_port.to_string()]
            };
            if etp_local {
                for e in &entries {
                    self.set(local, e.clone());
                }
            }
            for e in entries {
                self.set(all, e);
            }
            for i in 0..self.node_port_ips.len() {
                let ip = self.node_port_ips[i];
                let d = pick(&cat, svc, etp_local, &mut self.no_local);
                self.add_vs(tmpl.at(ip, node_port), d);
            }
        }

        if let Some(hc) = svc.health_check_node_port {
            self.set(SetKind::HealthCheckNodePort, hc.to_string());
        }
    }
}

/// Computes everything upstream's IPVS proxier programs for `cfg.family` from the service and endpoint
/// maps and the node's facts. Pure: the same input always gives the same output.
pub fn plan(
    services: &ServiceMap,
    endpoints: &EndpointsMap,
    node: &NodeFacts,
    cfg: &PlanConfig,
) -> DesiredState {
    let family = cfg.family;
    let scheduler = if cfg.scheduler.is_empty() {
        DEFAULT_SCHEDULER
    } else {
        cfg.scheduler.as_str()
    };
    let mut b = Builder {
        family,
        node,
        scheduler,
        node_ip: node
            .node_ips
            .iter()
            .copied()
            .find(|ip| IpFamily::of(ip) == family),
        node_port_ips: {
            let mut v: Vec<IpAddr> = node
                .node_port_ips
                .iter()
                .copied()
                .filter(|ip| IpFamily::of(ip) == family)
                .collect();
            v.sort();
            v.dedup();
            v
        },
        local_addrs: node.local_addresses.iter().copied().collect(),
        sets: Default::default(),
        virtual_servers: BTreeMap::new(),
        bound: BTreeSet::new(),
        no_local: NoLocal::default(),
        lb_no_node_access: Vec::new(),
        health: BTreeMap::new(),
    };

    for (name, svc) in services {
        let eps = endpoints.get(name).map(|e| e.as_slice()).unwrap_or(&[]);
        b.service_port(svc, eps);
    }

    for ip in &b.bound {
        b.sets[SetKind::IpvsIps.index()].insert(ip.to_string());
    }

    let set_names: [String; 17] = SetKind::ALL.map(|k| k.name(family));
    let set_non_empty: [bool; 17] = std::array::from_fn(|i| !b.sets[i].is_empty());
    let iptables_payload = iptables::payload(&iptables::RulesInput {
        family,
        set_names: &set_names,
        set_non_empty,
        masquerade_all: cfg.masquerade_all,
        local_detector: &cfg.local_detector,
        mark: 1u32.checked_shl(cfg.masquerade_bit).unwrap_or(1 << 14),
        random_fully: cfg.random_fully,
        lb_no_node_access: &b.lb_no_node_access,
    });

    let mut ipsets = BTreeMap::new();
    for (kind, entries) in SetKind::ALL.into_iter().zip(b.sets) {
        let spec = kind.spec(family);
        ipsets.insert(spec.name.clone(), DesiredIpSet { spec, entries });
    }

    let health_checks = b
        .health
        .into_iter()
        .map(|(service, (node_port, ips))| HealthCheckService {
            service,
            node_port,
            local_endpoints: ips.len(),
        })
        .collect();

    let mut no_local_endpoints = BTreeMap::new();
    no_local_endpoints.insert("internal", b.no_local.internal.len() as u64);
    no_local_endpoints.insert("external", b.no_local.external.len() as u64);

    DesiredState {
        family,
        virtual_servers: b.virtual_servers,
        ipsets,
        iptables_payload,
        jumps: iptables::jumps(),
        bound_addresses: b.bound,
        health_checks,
        no_local_endpoints,
    }
}
