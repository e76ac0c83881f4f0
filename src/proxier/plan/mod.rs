//! The pure planner: cluster state and node facts in, desired kernel state out. No I/O, no clock, no
//! globals: `plan` reproduces what upstream kube-proxy's IPVS `syncProxyRules` programs for one family.

pub mod decision;
pub mod incremental;
pub mod ipsets;
pub mod iptables;
pub mod ipvs;
pub mod node_ports;
pub mod owners;

use crate::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServiceName, ServicePort,
    SharedEndpoints,
};
use crate::cluster::select::{Categorized, categorize};
use crate::kernel::ipset::entry::IpSetEntry;
use crate::proxier::desired::{
    DesiredIpSet, DesiredState, DesiredVirtualServer, HealthCheckService, TrafficPolicy,
};
use crate::scheduler::{SCHED_FLAGS_MASK, Scheduler};
use decision::{
    AddressKind, EndpointSet, HealthCheckDecision, PortDecision, Refused, SchedulerDecision,
    SchedulerSource, ServiceDecision, Unavailable, VsDecision,
};
use ipnet::IpNet;
use ipsets::{PerSet, SetKind};
use iptables::LbNodeAccess;
use ipvs::{VsTemplate, destinations};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

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
    /// The node's IPVS scheduler.
    pub scheduler: Scheduler,
    pub masquerade_all: bool,
    /// Mark bit for masquerading (mark = 1 << bit).
    pub masquerade_bit: u32,
    pub local_detector: LocalDetector,
    /// Never program (and never delete) IPVS services inside these ranges.
    pub exclude_cidrs: Vec<IpNet>,
    /// Whether `iptables` supports `--random-fully` on MASQUERADE.
    pub random_fully: bool,
    /// Schedulers the kernel cannot use, and why: Services asking for one of these by annotation stay
    /// on `scheduler`.
    pub unavailable_schedulers: BTreeMap<Scheduler, Unavailable>,
    /// `--ipvs-lb-source-ranges-for-node` (not upstream): every connection the node itself makes to a
    /// LoadBalancer address with `loadBalancerSourceRanges` is checked against them, whatever its source
    /// address; off (upstream): only those sourced from the LB address are, and dropped when no range
    /// covers the node IP.
    pub lb_source_ranges_for_node: bool,
    /// `--ipvs-arp-per-address` (not upstream): the ClusterIPs and LoadBalancer IPs bound to kube-ipvs0
    /// are bound with scope host (`DesiredState::arp_quiet`), so that the node answers no ARP request
    /// for them; external IPs keep scope global.
    pub arp_per_address: bool,
    /// `--ipvs-etp-local-node-masquerade` (not upstream): the node's own connections to the LoadBalancer
    /// and external IPs of `externalTrafficPolicy: Local` Services are masqueraded, so that an endpoint on
    /// another node answers the node, not the Service address that node also holds.
    pub etp_local_node_masquerade: bool,
    /// Whether Services' `spec.externalIPs` are programmed (the `AllowServiceExternalIPs` feature gate).
    /// Off, a Service is planned as if it had none, as upstream does.
    pub external_ips: bool,
}

impl PlanConfig {
    /// The configuration for `family` with kube-proxy's defaults: the `rr` scheduler, masquerade bit 14, no
    /// masqueradeAll, no local detector, no excluded ranges, `--random-fully` (iptables >= 1.6.2), every
    /// scheduler available and external IPs programmed. Set the rest with struct update syntax (`PlanConfig { masquerade_all: true, ..PlanConfig::new(…) }`).
    pub fn new(family: IpFamily) -> Self {
        PlanConfig {
            family,
            scheduler: Scheduler::default(),
            masquerade_all: false,
            masquerade_bit: 14,
            local_detector: LocalDetector::None,
            exclude_cidrs: Vec::new(),
            random_fully: true,
            unavailable_schedulers: BTreeMap::new(),
            lb_source_ranges_for_node: false,
            arp_per_address: false,
            etp_local_node_masquerade: false,
            external_ips: true,
        }
    }
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

impl NodeFacts {
    /// Node `node_name` whose addresses (of both families: each plan takes its own) are its primary IPs,
    /// its NodePort addresses and its only local addresses; no zone.
    pub fn new(node_name: &str, ips: Vec<IpAddr>) -> Self {
        NodeFacts {
            node_name: node_name.to_string(),
            zone: None,
            node_ips: ips.clone(),
            node_port_ips: ips.clone(),
            local_addresses: ips,
        }
    }
}

pub use node_ports::{node_port_cidrs, node_port_ips};

/// Services that fell back to cluster endpoints for lack of a local one, by traffic policy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
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
) -> (ipvs::Destinations, EndpointSet) {
    if !only_local {
        return (destinations(&cat.cluster), EndpointSet::Cluster);
    }
    if !cat.local.is_empty() {
        return (destinations(&cat.local), EndpointSet::Local);
    }
    if cat.has_any && svc.internal_policy_local {
        no_local.internal.insert(svc.name.service());
    }
    if cat.has_any && svc.external_policy_local() {
        no_local.external.insert(svc.name.service());
    }
    (destinations(&cat.cluster), EndpointSet::ClusterNoLocal)
}

/// The node facts and configuration every service port is planned against, prepared once per plan.
#[derive(Debug, Clone)]
struct Context {
    family: IpFamily,
    node_name: String,
    zone: Option<String>,
    scheduler: Scheduler,
    unavailable_schedulers: BTreeMap<Scheduler, Unavailable>,
    /// The node's primary IP of this family (LB source-range checks).
    node_ip: Option<IpAddr>,
    /// NodePort addresses of this family, sorted and deduplicated.
    node_port_ips: Vec<IpAddr>,
    local_addrs: HashSet<IpAddr>,
    /// [`PlanConfig::lb_source_ranges_for_node`].
    lb_source_ranges_for_node: bool,
    /// [`PlanConfig::external_ips`].
    external_ips: bool,
}

/// What some service ports add to the plan. The full plan accumulates every service port into one;
/// the incremental planner keeps one per service and aggregates them with reference counts.
#[derive(Debug, Default, Clone)]
struct Contribution {
    /// Members per set (duplicates allowed; `IpvsIps` is derived from `bound` at the end).
    sets: PerSet<Vec<IpSetEntry>>,
    /// Virtual servers; a later service port writing the same key wins, as upstream.
    virtual_servers: BTreeMap<crate::kernel::ipvs::IpvsServiceKey, Arc<DesiredVirtualServer>>,
    bound: BTreeSet<IpAddr>,
    no_local: NoLocal,
    /// The node's own access to LB addresses with source ranges (OUT-FILTER rules), in service-port order.
    lb_node_access: Vec<LbNodeAccess>,
    /// Health-check node port and ready local endpoint IPs per ETP=Local service.
    health: BTreeMap<ServiceName, (u16, BTreeSet<IpAddr>)>,
    /// The decision record of every service port planned, in planning order.
    decisions: Vec<PortDecision>,
}

impl Contribution {
    /// An empty contribution for one service: room for one port's decision record (most services have
    /// one port), so it is neither regrown nor shrunk when boxed.
    fn for_one_service() -> Self {
        Contribution {
            decisions: Vec::with_capacity(1),
            ..Default::default()
        }
    }

    fn set(&mut self, kind: SetKind, e: IpSetEntry) {
        self.sets[kind].push(e);
    }

    fn add_vs(&mut self, service: crate::kernel::ipvs::IpvsService, dests: ipvs::Destinations) {
        self.virtual_servers.insert(
            service.key,
            Arc::new(DesiredVirtualServer {
                service,
                destinations: dests,
            }),
        );
    }
}

impl Context {
    fn new(node: &NodeFacts, cfg: &PlanConfig) -> Self {
        let family = cfg.family;
        let mut node_port_ips: Vec<IpAddr> = node
            .node_port_ips
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(ip) == family)
            .collect();
        node_port_ips.sort();
        node_port_ips.dedup();
        Context {
            family,
            node_name: node.node_name.clone(),
            zone: node.zone.clone(),
            scheduler: cfg.scheduler,
            unavailable_schedulers: cfg.unavailable_schedulers.clone(),
            node_ip: node
                .node_ips
                .iter()
                .copied()
                .find(|ip| IpFamily::of(ip) == family),
            node_port_ips,
            local_addrs: node.local_addresses.iter().copied().collect(),
            lb_source_ranges_for_node: cfg.lb_source_ranges_for_node,
            external_ips: cfg.external_ips,
        }
    }

    /// Adds what one service port programs to `acc`, and its decision record. The only place that
    /// decides per service port.
    fn service_port(
        &self,
        acc: &mut Contribution,
        svc: &Arc<ServicePort>,
        endpoints: Option<&SharedEndpoints>,
    ) {
        let Some(cluster_ip) = svc.cluster_ip(self.family) else {
            return;
        };
        let without_external_ips;
        let svc = if self.external_ips || svc.external_ips.is_empty() {
            svc
        } else {
            // AllowServiceExternalIPs off: as if the Service had none (its endpoint selection included).
            without_external_ips = Arc::new(ServicePort {
                external_ips: Vec::new(),
                ..ServicePort::clone(svc)
            });
            &without_external_ips
        };
        let eps = endpoints.map_or(&[][..], |e| e.as_slice());
        let before = acc.sets.map(Vec::len);
        let health_check = self.health_endpoints(acc, svc, eps);
        self.hairpin(acc, svc, eps);
        let (tmpl, scheduler) = self.template(svc);
        let mut port = Port {
            svc,
            cat: categorize(eps, svc, self.family, &self.node_name, self.zone.as_deref()),
            tmpl,
            etp_local: svc.external_policy_local(),
            // Most ports have one virtual server (the ClusterIP): boxed without a shrink.
            vs: Vec::with_capacity(1),
        };
        self.addresses(acc, &mut port, cluster_ip);
        acc.decisions.push(PortDecision {
            family: self.family,
            port: svc.clone(),
            endpoints: endpoints.cloned(),
            verdicts: std::mem::take(&mut port.cat.verdicts).into(),
            virtual_servers: port.vs.into(),
            scheduler,
            health_check,
            sets: planned_since(&acc.sets, &before),
        });
    }

    /// Every address of one service port: ClusterIP, external IPs, load balancers, node ports.
    fn addresses(&self, acc: &mut Contribution, port: &mut Port<'_>, cluster_ip: IpAddr) {
        let svc = port.svc;
        port.cluster_ip(acc, cluster_ip);
        self.external_ips(acc, port);
        self.load_balancers(acc, port);
        if let Some(node_port) = svc.node_port {
            if self.node_port_ips.is_empty() {
                // Upstream skips the rest of this service port (its health-check entry included).
                return;
            }
            self.node_ports(acc, port, node_port);
        }
        if let Some(hc) = svc.health_check_node_port {
            acc.set(SetKind::HealthCheckNodePort, IpSetEntry::Port(hc));
        }
    }

    /// The virtual-server template of `svc` and the scheduler decision: its annotated scheduler and flags
    /// if valid and available, else the node's scheduler.
    fn template(&self, svc: &ServicePort) -> (VsTemplate<'static>, SchedulerDecision) {
        let options = svc.options.as_deref();
        let request = options.and_then(|o| o.scheduler);
        let (tmpl, scheduler, source) = match request {
            Some(r) => match self.unavailable_schedulers.get(&r.scheduler) {
                None => (
                    VsTemplate::new(svc, r.scheduler, self.family).with_scheduler_flags(r.flags),
                    r.scheduler,
                    SchedulerSource::Annotation(r.source),
                ),
                Some(why) => (
                    VsTemplate::new(svc, self.scheduler, self.family),
                    self.scheduler,
                    SchedulerSource::Unavailable(Box::new(Refused {
                        annotation: r.source,
                        scheduler: r.scheduler,
                        why: why.clone(),
                    })),
                ),
            },
            None => {
                let rejected = options
                    .and_then(|o| o.problems.iter().find(|p| is_scheduler_key(p.annotation)));
                let source = match rejected {
                    Some(p) => SchedulerSource::AnnotationRejected(p.annotation),
                    None => SchedulerSource::Node,
                };
                (
                    VsTemplate::new(svc, self.scheduler, self.family),
                    self.scheduler,
                    source,
                )
            }
        };
        let flags = tmpl.flags & SCHED_FLAGS_MASK;
        (
            tmpl,
            SchedulerDecision {
                scheduler,
                flags,
                source,
            },
        )
    }

    /// Records the health-check node port and the ready local endpoints of an ETP=Local service; returns
    /// this port's part of it.
    fn health_endpoints(
        &self,
        acc: &mut Contribution,
        svc: &ServicePort,
        eps: &[Endpoint],
    ) -> Option<HealthCheckDecision> {
        let hc = svc.health_check_node_port?;
        let e = acc
            .health
            .entry(svc.name.service())
            .or_insert_with(|| (hc, BTreeSet::new()));
        let local = eps
            .iter()
            .filter(|ep| IpFamily::of(&ep.ip) == self.family && ep.ready)
            .filter(|ep| ep.is_local(&self.node_name));
        let mut n = 0u32;
        for ep in local {
            e.1.insert(ep.ip);
            n += 1;
        }
        Some(HealthCheckDecision {
            node_port: hc,
            local_endpoints: n,
        })
    }

    /// Hairpin: every local endpoint, whatever its condition.
    fn hairpin(&self, acc: &mut Contribution, svc: &ServicePort, eps: &[Endpoint]) {
        for ep in eps {
            if IpFamily::of(&ep.ip) == self.family && ep.is_local(&self.node_name) {
                acc.set(
                    SetKind::LoopBack,
                    IpSetEntry::IpPortIp(ep.ip, svc.protocol, ep.port, ep.ip),
                );
            }
        }
    }

    /// ExternalIPs of this family: their set, a virtual server each, bound unless already local.
    fn external_ips(&self, acc: &mut Contribution, port: &mut Port<'_>) {
        let svc = port.svc;
        let kind = if port.etp_local {
            SetKind::ExternalIpLocal
        } else {
            SetKind::ExternalIp
        };
        for ext in svc.external_ips_of(self.family) {
            acc.set(kind, IpSetEntry::IpPort(ext, svc.protocol, svc.port));
            port.external_vs(acc, AddressKind::ExternalIp, ext, svc.port);
            if !self.local_addrs.contains(&ext) {
                acc.bound.insert(ext);
            }
        }
    }

    /// LoadBalancer ingress IPs of this family, with their source-range sets and rules.
    fn load_balancers(&self, acc: &mut Contribution, port: &mut Port<'_>) {
        let svc = port.svc;
        let ranges: Vec<IpNet> = svc
            .load_balancer_source_ranges
            .iter()
            .copied()
            .filter(|r| IpFamily::of_net(r) == self.family)
            .collect();
        for lb in svc.load_balancer_ips_of(self.family) {
            let e = IpSetEntry::IpPort(lb, svc.protocol, svc.port);
            if port.etp_local {
                acc.set(SetKind::LoadBalancerLocal, e);
            }
            if !ranges.is_empty() {
                acc.set(SetKind::LoadBalancerFw, e);
                self.source_ranges(acc, svc, lb, &ranges);
            }
            acc.set(SetKind::LoadBalancer, e);
            port.external_vs(acc, AddressKind::LoadBalancer, lb, svc.port);
            if !self.local_addrs.contains(&lb) {
                acc.bound.insert(lb);
            }
        }
    }

    /// Source ranges of one LB address: a set entry each, and either the node's own way in
    /// (`LoadBalancerSourceIp`) when a range covers the node IP, or an OUT-FILTER drop; with
    /// `lb_source_ranges_for_node`, OUT-FILTER rules checking every node-originated connection.
    fn source_ranges(
        &self,
        acc: &mut Contribution,
        svc: &ServicePort,
        lb: IpAddr,
        ranges: &[IpNet],
    ) {
        let (proto, port) = (svc.protocol, svc.port);
        let mut allow_from_node = false;
        for r in ranges {
            acc.set(
                SetKind::LoadBalancerSourceCidr,
                IpSetEntry::ip_port_net(lb, proto, port, *r),
            );
            if self.node_ip.is_some_and(|n| r.contains(&n)) {
                allow_from_node = true;
            }
        }
        if allow_from_node {
            acc.set(
                SetKind::LoadBalancerSourceIp,
                IpSetEntry::IpPortIp(lb, proto, port, lb),
            );
        }
        if !allow_from_node || self.lb_source_ranges_for_node {
            let ranges = match self.lb_source_ranges_for_node {
                true => ranges.iter().map(IpNet::trunc).collect(),
                false => Box::default(),
            };
            acc.lb_node_access.push(LbNodeAccess {
                lb,
                proto,
                port,
                node_allowed: allow_from_node,
                ranges,
            });
        }
    }

    /// The node port on every NodePort address: bitmap ports (TCP/UDP) or `ip,sctp:port` entries.
    fn node_ports(&self, acc: &mut Contribution, port: &mut Port<'_>, node_port: u16) {
        let proto = port.svc.protocol;
        let (all, local) = match proto {
            Protocol::Tcp => (SetKind::NodePortTcp, SetKind::NodePortLocalTcp),
            Protocol::Udp => (SetKind::NodePortUdp, SetKind::NodePortLocalUdp),
            Protocol::Sctp => (SetKind::NodePortSctp, SetKind::NodePortLocalSctp),
        };
        let entries: Vec<IpSetEntry> = if proto == Protocol::Sctp {
            self.node_port_ips
                .iter()
                .map(|ip| IpSetEntry::IpPort(*ip, proto, node_port))
                .collect()
        } else {
            vec![IpSetEntry::Port(node_port)]
        };
        if port.etp_local {
            for e in &entries {
                acc.set(local, *e);
            }
        }
        for e in entries {
            acc.set(all, e);
        }
        for ip in &self.node_port_ips {
            port.external_vs(acc, AddressKind::NodePort, *ip, node_port);
        }
    }
}

/// Whether `annotation` is one of the scheduler option's keys.
fn is_scheduler_key(annotation: &str) -> bool {
    use crate::cluster::service_options as o;
    [
        o::SCHEDULER,
        o::SCHEDULER_FLAGS,
        o::KUBE_ROUTER_SCHEDULER,
        o::KUBE_ROUTER_SCHEDULER_FLAGS,
    ]
    .contains(&annotation)
}

/// One service port being planned: what all its virtual servers share.
struct Port<'a> {
    svc: &'a ServicePort,
    cat: Categorized<'a>,
    tmpl: VsTemplate<'a>,
    /// Whether external traffic prefers node-local endpoints.
    etp_local: bool,
    /// The virtual servers planned so far, for the decision record.
    vs: Vec<VsDecision>,
}

impl Port<'_> {
    /// The ClusterIP: its set entry, virtual server (internal traffic policy) and bound address.
    fn cluster_ip(&mut self, acc: &mut Contribution, cluster_ip: IpAddr) {
        let svc = self.svc;
        acc.set(
            SetKind::ClusterIp,
            IpSetEntry::IpPort(cluster_ip, svc.protocol, svc.port),
        );
        let only_local = svc.internal_policy_local;
        self.add_vs(
            acc,
            AddressKind::ClusterIp,
            cluster_ip,
            svc.port,
            only_local,
        );
        acc.bound.insert(cluster_ip);
    }

    /// A virtual server reached from outside (external traffic policy) at `addr:port`.
    fn external_vs(&mut self, acc: &mut Contribution, kind: AddressKind, addr: IpAddr, port: u16) {
        self.add_vs(acc, kind, addr, port, self.etp_local);
    }

    /// The virtual server at `addr:port` with its real servers, and its decision record.
    fn add_vs(
        &mut self,
        acc: &mut Contribution,
        kind: AddressKind,
        addr: IpAddr,
        port: u16,
        only_local: bool,
    ) {
        let (d, endpoints) = pick(&self.cat, self.svc, only_local, &mut acc.no_local);
        let service = self.tmpl.at(addr, port);
        self.vs.push(VsDecision {
            kind,
            key: service.key,
            endpoints,
        });
        acc.add_vs(service, d);
    }
}

/// The members added to `sets` since they had the lengths `before`, sorted, each once.
fn planned_since(
    sets: &PerSet<Vec<IpSetEntry>>,
    before: &PerSet<usize>,
) -> Box<[(SetKind, IpSetEntry)]> {
    let mut out: Vec<(SetKind, IpSetEntry)> = SetKind::ALL
        .into_iter()
        .flat_map(|k| {
            sets[k]
                .get(before[k]..)
                .unwrap_or(&[])
                .iter()
                .map(move |e| (k, *e))
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out.into_boxed_slice()
}

/// Kernel names of this family's sets.
fn set_names(family: IpFamily) -> PerSet<String> {
    PerSet::from_fn(|k| k.name(family))
}

/// The iptables payload: it depends only on the configuration, which sets have members and the LB
/// addresses the node may not reach.
fn rules_payload(
    cfg: &PlanConfig,
    set_names: &PerSet<String>,
    set_non_empty: PerSet<bool>,
    lb_node_access: &[LbNodeAccess],
) -> String {
    iptables::payload(&iptables::RulesInput {
        family: cfg.family,
        set_names,
        set_non_empty,
        masquerade_all: cfg.masquerade_all,
        local_detector: &cfg.local_detector,
        mark: 1u32.checked_shl(cfg.masquerade_bit).unwrap_or(1 << 14),
        random_fully: cfg.random_fully,
        lb_node_access,
        etp_local_node_masquerade: cfg.etp_local_node_masquerade,
    })
}

/// Health-check listener of one service from its accumulated node port and local endpoint IPs.
fn health_check(service: ServiceName, hc: &(u16, BTreeSet<IpAddr>)) -> HealthCheckService {
    HealthCheckService {
        service,
        node_port: hc.0,
        local_endpoints: hc.1.len(),
    }
}

/// The no-local-endpoints metric values.
fn no_local_counts(internal: usize, external: usize) -> BTreeMap<TrafficPolicy, u64> {
    BTreeMap::from([
        (TrafficPolicy::Internal, internal as u64),
        (TrafficPolicy::External, external as u64),
    ])
}

/// The decision records of planned service ports, grouped per service (ports come in map order, so a
/// service's ports are consecutive and the records come out sorted).
fn service_decisions(ports: Vec<PortDecision>) -> BTreeMap<ServiceName, Arc<ServiceDecision>> {
    let mut out: Vec<(ServiceName, Arc<ServiceDecision>)> = Vec::new();
    let mut ports = ports.into_iter().peekable();
    while let Some(first) = ports.next() {
        let name = first.port.name.service();
        let mut group = vec![first];
        while let Some(p) = ports.next_if(|p| incremental::same_service(&p.port.name, &name)) {
            group.push(p);
        }
        let d = ServiceDecision {
            ports: group.into(),
        };
        out.push((name, Arc::new(d)));
    }
    // Sorted input: the map is built in bulk.
    out.into_iter().collect()
}

/// Every (Service, virtual server) pair the records list.
fn claims(
    records: &BTreeMap<ServiceName, Arc<ServiceDecision>>,
) -> impl Iterator<Item = (&ServiceName, crate::kernel::ipvs::IpvsServiceKey)> + Clone {
    records.iter().flat_map(|(name, d)| {
        d.ports
            .iter()
            .flat_map(|p| p.virtual_servers.iter())
            .map(move |vs| (name, vs.key))
    })
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
    let ctx = Context::new(node, cfg);
    let mut b = Contribution::default();
    b.decisions.reserve(services.len());

    // Both maps are sorted by service port name: walk them together instead of looking each one up.
    let mut eps_iter = endpoints.iter().peekable();
    for (name, svc) in services {
        while eps_iter.next_if(|(k, _)| *k < name).is_some() {}
        let eps = eps_iter.next_if(|(k, _)| *k == name).map(|(_, e)| e);
        ctx.service_port(&mut b, svc, eps);
    }

    for ip in &b.bound {
        b.sets[SetKind::IpvsIps].push(IpSetEntry::Ip(*ip));
    }

    let set_names = set_names(family);
    let set_non_empty = b.sets.map(|s| !s.is_empty());
    let iptables_payload = rules_payload(cfg, &set_names, set_non_empty, &b.lb_node_access);
    let arp_quiet = match cfg.arp_per_address {
        true => arp_quiet(&b.bound, EXTERNAL_SETS.iter().flat_map(|k| &b.sets[*k])),
        false => BTreeSet::new(),
    };

    let mut ipsets = BTreeMap::new();
    for (kind, entries) in b.sets {
        let spec = kind.spec(family);
        let entries: BTreeSet<String> = entries.iter().map(IpSetEntry::to_string).collect();
        ipsets.insert(spec.name.clone(), DesiredIpSet::new(spec, entries));
    }

    let health_checks = b
        .health
        .iter()
        .map(|(service, hc)| health_check(service.clone(), hc))
        .collect();

    let decisions = service_decisions(std::mem::take(&mut b.decisions));
    DesiredState {
        family,
        shared: owners::shared_of(claims(&decisions), b.virtual_servers.len()),
        decisions,
        virtual_servers: b.virtual_servers,
        ipsets,
        iptables_payload,
        jumps: iptables::jumps(),
        bound_addresses: b.bound,
        arp_quiet,
        health_checks,
        no_local_endpoints: no_local_counts(b.no_local.internal.len(), b.no_local.external.len()),
    }
}

/// The sets of external IPs (`KUBE-EXTERNAL-IP`, `KUBE-EXTERNAL-IP-LOCAL`).
const EXTERNAL_SETS: [SetKind; 2] = [SetKind::ExternalIp, SetKind::ExternalIpLocal];

/// The bound addresses the node answers no ARP request for (`--ipvs-arp-per-address`): all but the
/// external IPs (the addresses of the `external` set members).
/// ClusterIPs are never reached by ARP, and a LoadBalancer IP is announced by whatever gave it (the cloud,
/// MetalLB's speaker, kube-vip), not by every node; external IPs are the cluster administrator's to route,
/// and some networks reach them through the nodes' answers, as upstream gives them.
pub(super) fn arp_quiet<'a>(
    bound: &BTreeSet<IpAddr>,
    external: impl Iterator<Item = &'a IpSetEntry>,
) -> BTreeSet<IpAddr> {
    let external: HashSet<IpAddr> = external.filter_map(IpSetEntry::addr).collect();
    bound
        .iter()
        .copied()
        .filter(|ip| !external.contains(ip))
        .collect()
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod scheduler_tests;

#[cfg(test)]
#[path = "decision_tests.rs"]
mod decision_tests;
