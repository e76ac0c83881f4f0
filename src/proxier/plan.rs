//! The pure planner: cluster state and node facts in, desired kernel state out. No I/O.

use crate::cluster::model::IpFamily;
use ipnet::IpNet;
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
