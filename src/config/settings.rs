//! The validated configuration in the types the daemon runs with, built once at start-up: no sync reads
//! a raw string of the configuration again.

use super::features;
use super::fixes::IpvsFixes;
use super::types::ProxyConfig;
use crate::net::IpFamily;
use crate::scheduler::Scheduler;
use ipnet::IpNet;
use std::net::IpAddr;
use std::time::Duration;

/// Parsed `nodePortAddresses`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePortAddresses {
    /// CIDRs (every address of both families when the list is unset or empty).
    pub cidrs: Vec<IpNet>,
    /// Whether `primary` (the Node object's primary IPs) was listed.
    pub primary: bool,
}

impl NodePortAddresses {
    /// CIDRs of one family.
    pub fn cidrs_for(&self, family: IpFamily) -> Vec<IpNet> {
        self.cidrs
            .iter()
            .filter(|n| IpFamily::of_net(n) == family)
            .copied()
            .collect()
    }

    /// Whether NodePorts should be served on `ip`, given the node's primary IPs.
    pub fn allows(&self, ip: IpAddr, node_primary_ips: &[IpAddr]) -> bool {
        self.cidrs.iter().any(|n| n.contains(&ip))
            || (self.primary && node_primary_ips.contains(&ip))
    }
}

/// `detectLocalMode`, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalMode {
    /// Source in `clusterCIDR`.
    ClusterCidr,
    /// Source in the Node's `podCIDRs`.
    NodeCidr,
    /// Arriving on `detectLocal.bridgeInterface`.
    BridgeInterface,
    /// Arriving on an interface starting with `detectLocal.interfaceNamePrefix`.
    InterfaceNamePrefix,
}

/// How traffic from inside the cluster is recognised (`detectLocalMode` with its parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalDetection {
    /// Source in one of these `clusterCIDR` ranges.
    ClusterCidr(Vec<IpNet>),
    /// Source in the Node's `podCIDRs` (known once the Node is read).
    NodeCidr,
    /// Arriving on this bridge interface.
    BridgeInterface(String),
    /// Arriving on an interface whose name starts with this prefix.
    InterfaceNamePrefix(String),
}

impl LocalDetection {
    /// `detectLocalMode` and its parameters from a validated configuration (ClusterCIDR by default).
    pub fn from_config(c: &ProxyConfig) -> Self {
        match c.local_mode() {
            Some(LocalMode::NodeCidr) => LocalDetection::NodeCidr,
            Some(LocalMode::BridgeInterface) => {
                LocalDetection::BridgeInterface(c.detect_local.bridge_interface.clone())
            }
            Some(LocalMode::InterfaceNamePrefix) => {
                LocalDetection::InterfaceNamePrefix(c.detect_local.interface_name_prefix.clone())
            }
            Some(LocalMode::ClusterCidr) | None => LocalDetection::ClusterCidr(c.cluster_cidrs()),
        }
    }
}

/// What the daemon's syncs need of the configuration, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxySettings {
    /// The node's IPVS scheduler (`ipvs.scheduler`, `rr` when empty).
    pub scheduler: Scheduler,
    pub masquerade_all: bool,
    /// `iptables.masqueradeBit` (default 14).
    pub masquerade_bit: u32,
    /// `ipvs.excludeCIDRs`.
    pub exclude_cidrs: Vec<IpNet>,
    pub local_detection: LocalDetection,
    /// `nodePortAddresses`, parsed.
    pub node_port_addresses: NodePortAddresses,
    /// `ipvs.syncPeriod`: the longest interval between full syncs.
    pub sync_period: Duration,
    /// `ipvs.minSyncPeriod`.
    pub min_sync_period: Duration,
    /// kube-proxy-rs's fixes of upstream's IPVS-mode behaviour, each from its own flag (all off: upstream).
    pub fixes: IpvsFixes,
    /// The `AllowServiceExternalIPs` feature gate: Services' `spec.externalIPs` are programmed.
    pub external_ips: bool,
}

impl ProxySettings {
    /// The settings of a validated configuration.
    pub fn new(c: &ProxyConfig) -> Self {
        let local_detection = LocalDetection::from_config(c);
        ProxySettings {
            scheduler: c.scheduler(),
            masquerade_all: c.iptables.masquerade_all,
            masquerade_bit: c.masquerade_bit(),
            exclude_cidrs: c.exclude_cidrs(),
            local_detection,
            node_port_addresses: c.node_port_addresses(),
            sync_period: c.sync_period(),
            min_sync_period: c.min_sync_period(),
            fixes: IpvsFixes::default(),
            external_ips: features::enabled(&c.feature_gates, features::ALLOW_SERVICE_EXTERNAL_IPS),
        }
    }
}
