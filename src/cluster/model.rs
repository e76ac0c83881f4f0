//! Service and endpoint models: the proxier's view of the cluster, decoupled from the API types.

use ipnet::IpNet;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use super::service_options::ServiceOptions;
pub use crate::net::{IpFamily, Protocol};

/// An immutable, shared string (a namespace, service or port name): clones are reference-count bumps, so
/// the many maps keyed by service (port) names share one copy of each name. Orders, compares, hashes,
/// displays and debug-prints as the `str` it holds.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

/// The one empty name every `Name::default()` shares.
static EMPTY_NAME: LazyLock<Name> = LazyLock::new(|| Name(Arc::from("")));

impl Name {
    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether no other `Name` shares this one's string.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }
}

impl Default for Name {
    /// The empty name (shared, no allocation).
    fn default() -> Self {
        EMPTY_NAME.clone()
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        if s.is_empty() {
            Name::default()
        } else {
            Name(Arc::from(s))
        }
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Name::from(s.as_str())
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Self {
        Name::from(s.as_str())
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Identifies one port of one service: namespace/name:portName plus protocol (as upstream's ServicePortName).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    pub namespace: Name,
    pub name: Name,
    pub port_name: Name,
    pub protocol: Protocol,
}

#[cfg(test)]
impl ServicePortName {
    /// Port `port_name` (TCP) of Service `namespace/name`: the unit tests' usual fixture.
    pub(crate) fn tcp(namespace: &str, name: &str, port_name: &str) -> Self {
        ServicePortName {
            namespace: namespace.into(),
            name: name.into(),
            port_name: port_name.into(),
            protocol: Protocol::Tcp,
        }
    }
}

impl ServicePortName {
    /// Namespace/name of the owning service.
    pub fn service(&self) -> ServiceName {
        ServiceName {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port_name.is_empty() {
            write!(f, "{}/{}", self.namespace, self.name)
        } else {
            write!(f, "{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }
}

/// Whether `s` can be a namespace or a Service name: an RFC 1123 label (1 to 63 lowercase letters,
/// digits and `-`, starting and ending with a letter or digit). Kubernetes 1.37 validates Service names
/// so (`RelaxedServiceNameValidation`: a digit may lead); before, they were RFC 1035 labels, a subset.
pub fn is_rfc1123_label(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter().all(|&c| alnum(c) || c == b'-')
        && b.first().is_some_and(|&c| alnum(c))
        && b.last().is_some_and(|&c| alnum(c))
}

/// Namespace/name of a service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceName {
    pub namespace: Name,
    pub name: Name,
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One load-balancer ingress address of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerIngress {
    pub ip: IpAddr,
    /// `ipMode: Proxy`: the load balancer proxies, so kube-proxy does not program this address.
    pub ip_mode_proxy: bool,
}

/// Everything the proxier needs to know about one service port (upstream's ServicePort interface).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    pub name: ServicePortName,
    /// ClusterIPs, at most one per family.
    pub cluster_ips: Vec<IpAddr>,
    pub port: u16,
    pub protocol: Protocol,
    /// NodePort, if allocated (type NodePort or LoadBalancer).
    pub node_port: Option<u16>,
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_ingress: Vec<LoadBalancerIngress>,
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// Session affinity ClientIP with its timeout in seconds; `None` for no affinity.
    pub session_affinity_timeout: Option<u32>,
    /// externalTrafficPolicy: Local (only meaningful for NodePort / LoadBalancer / ExternalIPs).
    pub external_policy_local: bool,
    /// internalTrafficPolicy: Local.
    pub internal_policy_local: bool,
    pub health_check_node_port: Option<u16>,
    /// What the Service's annotations ask for (`service_options`), shared by its ports; `None`: nothing.
    pub options: Option<Arc<ServiceOptions>>,
}

impl ServicePort {
    /// A ClusterIP service port `name` (its protocol included) at `port` with nothing else set: no node
    /// port, external addresses, source ranges, affinity or health check, Cluster traffic policies. Set
    /// the rest with struct update syntax (`ServicePort { node_port: Some(30080), ..ServicePort::new(…) }`).
    pub fn new(name: ServicePortName, cluster_ips: Vec<IpAddr>, port: u16) -> Self {
        ServicePort {
            protocol: name.protocol,
            name,
            cluster_ips,
            port,
            node_port: None,
            external_ips: Vec::new(),
            load_balancer_ingress: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            session_affinity_timeout: None,
            external_policy_local: false,
            internal_policy_local: false,
            health_check_node_port: None,
            options: None,
        }
    }

    /// The ClusterIP of `family`, if the service has one.
    pub fn cluster_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.cluster_ips
            .iter()
            .copied()
            .find(|ip| IpFamily::of(ip) == family)
    }

    /// External IPs of `family`.
    pub fn external_ips_of(&self, family: IpFamily) -> impl Iterator<Item = IpAddr> + '_ {
        self.external_ips
            .iter()
            .copied()
            .filter(move |ip| IpFamily::of(ip) == family)
    }

    /// LoadBalancer ingress IPs of `family` that kube-proxy programs (ipMode Proxy skipped).
    pub fn load_balancer_ips_of(&self, family: IpFamily) -> impl Iterator<Item = IpAddr> + '_ {
        self.load_balancer_ingress
            .iter()
            .filter(move |i| !i.ip_mode_proxy && IpFamily::of(&i.ip) == family)
            .map(|i| i.ip)
    }

    /// Whether external traffic (NodePort, ExternalIP, LB) prefers node-local endpoints.
    pub fn external_policy_local(&self) -> bool {
        self.external_policy_local
            && (self.node_port.is_some()
                || !self.external_ips.is_empty()
                || !self.load_balancer_ingress.is_empty())
    }
}

/// Where an endpoint runs and which nodes/zones its hints name. Endpoints with equal values share one
/// (the endpoints tracker interns them), so an [`Endpoint`] carries a single pointer for all four.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Topology {
    /// Node the endpoint runs on.
    pub node_name: Option<Arc<str>>,
    pub zone: Option<Arc<str>>,
    /// `hints.forNodes` names, if the slice carries them.
    pub hints_for_nodes: Option<Arc<[Arc<str>]>>,
    /// `hints.forZones` names, if the slice carries them.
    pub hints_for_zones: Option<Arc<[Arc<str>]>>,
}

impl Topology {
    /// Only a node name: no zone, no hints.
    pub fn on_node(node: &str) -> Self {
        Topology {
            node_name: Some(node.into()),
            ..Topology::default()
        }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Topology::default()
    }
}

/// One endpoint address:port of a service port, from an EndpointSlice.
///
/// The node, zone and hints sit behind one shared [`Topology`] (absent when all four are), read with
/// [`node_name`](Self::node_name), [`zone`](Self::zone), [`hints_for_nodes`](Self::hints_for_nodes) and
/// [`hints_for_zones`](Self::hints_for_zones); order, equality and hash are those of the five fields and
/// then the four topology values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `None` when node, zone and hints are all absent (so equal endpoints compare equal).
    topology: Option<Arc<Topology>>,
}

impl Endpoint {
    /// A ready, serving, not terminating endpoint `ip`:`port` without node, zone or hints.
    pub fn new(ip: IpAddr, port: u16) -> Self {
        Endpoint {
            ip,
            port,
            ready: true,
            serving: true,
            terminating: false,
            topology: None,
        }
    }

    /// This endpoint with `topology` in place of its own.
    pub fn with_topology(mut self, topology: Topology) -> Self {
        self.set_topology(Arc::new(topology));
        self
    }

    /// Replaces the topology with `topology` (shared as is; an empty one is dropped).
    pub fn set_topology(&mut self, topology: Arc<Topology>) {
        self.topology = (!topology.is_empty()).then_some(topology);
    }

    /// Changes the topology with `f`, on a copy: endpoints sharing the old value keep it.
    pub fn edit_topology(&mut self, f: impl FnOnce(&mut Topology)) {
        let mut topology = self.topology.as_deref().cloned().unwrap_or_default();
        f(&mut topology);
        self.set_topology(Arc::new(topology));
    }

    /// The shared topology value, if any field of it is set.
    pub fn topology(&self) -> Option<&Arc<Topology>> {
        self.topology.as_ref()
    }

    /// Node the endpoint runs on.
    pub fn node_name(&self) -> Option<&str> {
        self.topology.as_ref()?.node_name.as_deref()
    }

    /// Zone the endpoint runs in.
    pub fn zone(&self) -> Option<&str> {
        self.topology.as_ref()?.zone.as_deref()
    }

    /// `hints.forNodes` names, if the slice carries them.
    pub fn hints_for_nodes(&self) -> Option<&[Arc<str>]> {
        self.topology.as_ref()?.hints_for_nodes.as_deref()
    }

    /// `hints.forZones` names, if the slice carries them.
    pub fn hints_for_zones(&self) -> Option<&[Arc<str>]> {
        self.topology.as_ref()?.hints_for_zones.as_deref()
    }

    /// Whether the endpoint runs on `node`.
    pub fn is_local(&self, node: &str) -> bool {
        self.node_name() == Some(node)
    }
}

/// Service ports by name; shared values so snapshots are cheap.
pub type ServiceMap = BTreeMap<ServicePortName, Arc<ServicePort>>;

/// Endpoints of every service port (all slices merged, sorted, deduplicated).
pub type EndpointsMap = BTreeMap<ServicePortName, SharedEndpoints>;

/// One service port's endpoints as the map holds them: shared, so a plan or a decision record can keep
/// them without a copy (a `Vec` inside, because the trackers edit them in place through `Arc::make_mut`).
pub type SharedEndpoints = Arc<Vec<Endpoint>>;

/// The entries of `service`'s ports in a map keyed by port name: one range scan, as a service's ports sort
/// together (namespace and name first; the empty port name and TCP sort lowest).
pub fn ports_of<'a, V>(
    map: &'a BTreeMap<ServicePortName, V>,
    service: &'a ServiceName,
) -> impl Iterator<Item = (&'a ServicePortName, &'a V)> + 'a {
    let start = ServicePortName {
        namespace: service.namespace.clone(),
        name: service.name.clone(),
        port_name: Name::default(),
        protocol: Protocol::Tcp,
    };
    map.range(start..)
        .take_while(move |(k, _)| k.namespace == service.namespace && k.name == service.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ip: &str, topology: Topology) -> Endpoint {
        Endpoint::new(ip.parse().expect("ip"), 80).with_topology(topology)
    }

    #[test]
    fn a_name_behaves_as_its_string() {
        use std::hash::{BuildHasher, RandomState};
        let words = ["", "a", "a-b", "B", "b", "ns1", "ns10", "ns2", "é"];
        let mut names: Vec<Name> = words.iter().rev().map(|w| Name::from(*w)).collect();
        names.sort();
        let mut strings: Vec<String> = words.iter().rev().map(|w| w.to_string()).collect();
        strings.sort();
        assert_eq!(names, strings);
        let hasher = RandomState::new();
        for (n, s) in names.iter().zip(&strings) {
            assert_eq!(format!("{n} {n:?}"), format!("{s} {s:?}"));
            assert_eq!(hasher.hash_one(n), hasher.hash_one(s));
            assert!(*n == **s && n == s && n.as_str() == s);
        }
        // clones and empty names share one allocation
        let n = Name::from("svc");
        assert!(std::ptr::eq(n.as_str(), n.clone().as_str()));
        assert!(std::ptr::eq(
            Name::from("").as_str(),
            Name::default().as_str()
        ));
    }

    #[test]
    fn service_names_display_as_upstream() {
        let port = ServicePortName {
            namespace: "ns".into(),
            name: "svc".into(),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
        };
        assert_eq!(port.to_string(), "ns/svc:http");
        let unnamed = ServicePortName {
            port_name: Name::default(),
            ..port.clone()
        };
        assert_eq!(unnamed.to_string(), "ns/svc");
        assert_eq!(port.service().to_string(), "ns/svc");
        assert!(unnamed < port);
    }

    #[test]
    fn an_endpoint_is_at_most_32_bytes() {
        assert!(
            std::mem::size_of::<Endpoint>() <= 32,
            "{}",
            std::mem::size_of::<Endpoint>()
        );
    }

    #[test]
    fn an_empty_topology_is_no_topology() {
        let plain = Endpoint::new("10.0.0.1".parse().expect("ip"), 80);
        let emptied = ep("10.0.0.1", Topology::default());
        assert!(emptied.topology().is_none());
        assert_eq!(plain, emptied);
        let mut edited = ep("10.0.0.1", Topology::on_node("n1"));
        edited.edit_topology(|t| t.node_name = None);
        assert_eq!(edited, plain);
        assert_eq!(edited.cmp(&plain), std::cmp::Ordering::Equal);
    }

    #[test]
    fn order_is_fields_then_node_zone_hints() {
        let zone = |z: &str| Topology {
            zone: Some(z.into()),
            ..Topology::default()
        };
        let hinted = Topology {
            hints_for_zones: Some(["a".into()].into()),
            ..Topology::default()
        };
        // as the flat fields compared: absent before present, node before zone before hints
        let sorted = [
            ep("10.0.0.1", Topology::default()),
            ep("10.0.0.1", hinted.clone()),
            ep("10.0.0.1", zone("a")),
            ep("10.0.0.1", zone("b")),
            ep("10.0.0.1", Topology::on_node("a")),
            ep(
                "10.0.0.1",
                Topology {
                    zone: Some("a".into()),
                    ..Topology::on_node("a")
                },
            ),
            ep("10.0.0.2", Topology::default()),
        ];
        assert!(sorted.windows(2).all(|w| w[0] < w[1]), "{sorted:?}");
        let e = &sorted[5];
        assert_eq!((e.node_name(), e.zone()), (Some("a"), Some("a")));
        assert_eq!(sorted[1].hints_for_zones(), Some(&["a".into()][..]));
        assert_eq!(sorted[1].hints_for_nodes(), None);
        assert!(sorted[4].is_local("a") && !sorted[4].is_local("b") && !sorted[0].is_local("a"));
    }
}
