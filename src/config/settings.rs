//! The validated configuration in the types the daemon runs with, built once at start-up: no sync reads
//! a raw string of the configuration again.

use super::features;
use super::fixes::IpvsFixes;
use super::types::ProxyConfig;
use super::validate::{NODE_PORT_PRIMARY, NODE_PORT_SHORTHANDS, parse_cidr};
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
    fn from_config(c: &ProxyConfig) -> Self {
        match local_mode(&c.detect_local_mode) {
            Some(LocalMode::NodeCidr) => LocalDetection::NodeCidr,
            Some(LocalMode::BridgeInterface) => {
                LocalDetection::BridgeInterface(c.detect_local.bridge_interface.clone())
            }
            Some(LocalMode::InterfaceNamePrefix) => {
                LocalDetection::InterfaceNamePrefix(c.detect_local.interface_name_prefix.clone())
            }
            Some(LocalMode::ClusterCidr) | None => {
                LocalDetection::ClusterCidr(cluster_cidrs(&c.cluster_cidr))
            }
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
    /// The settings of a validated configuration, each field parsed here once. Validation has refused
    /// every value these parsers cannot read (naming the field), so a value they skip or default is
    /// one a configuration that was never validated holds.
    pub fn new(c: &ProxyConfig) -> Self {
        ProxySettings {
            scheduler: Scheduler::parse_or_default(&c.ipvs.scheduler).unwrap_or_default(),
            masquerade_all: c.iptables.masquerade_all,
            masquerade_bit: masquerade_bit(c.iptables.masquerade_bit),
            exclude_cidrs: c
                .ipvs
                .exclude_cidrs
                .iter()
                .flatten()
                .filter_map(|s| parse_cidr(s))
                .collect(),
            local_detection: LocalDetection::from_config(c),
            node_port_addresses: node_port_addresses(c.node_port_addresses.as_deref()),
            sync_period: c.ipvs.sync_period.to_std(),
            min_sync_period: c.ipvs.min_sync_period.to_std(),
            fixes: IpvsFixes::default(),
            external_ips: features::enabled(&c.feature_gates, features::ALLOW_SERVICE_EXTERNAL_IPS),
        }
    }
}

/// `clusterCIDR`'s comma-separated entries (an unparsable one is skipped).
fn cluster_cidrs(list: &str) -> Vec<IpNet> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .filter_map(parse_cidr)
        .collect()
}

/// `iptables.masqueradeBit`, 14 when unset.
fn masquerade_bit(bit: Option<i32>) -> u32 {
    bit.and_then(|b| u32::try_from(b).ok()).unwrap_or(14)
}

/// `detectLocalMode` (unset means ClusterCIDR); `None` for an unknown value.
fn local_mode(mode: &str) -> Option<LocalMode> {
    match mode {
        "" | "ClusterCIDR" => Some(LocalMode::ClusterCidr),
        "NodeCIDR" => Some(LocalMode::NodeCidr),
        "BridgeInterface" => Some(LocalMode::BridgeInterface),
        "InterfaceNamePrefix" => Some(LocalMode::InterfaceNamePrefix),
        _ => None,
    }
}

/// `nodePortAddresses`: unset or empty means every local address (both families' `/0`); `primary` is
/// the Node's primary IPs; a shorthand (`localhost`) expands to its CIDRs; host bits are dropped.
fn node_port_addresses(entries: Option<&[String]>) -> NodePortAddresses {
    let mut out = NodePortAddresses::default();
    let entries = entries.unwrap_or_default();
    if entries.is_empty() {
        out.cidrs = vec![
            IpNet::V4(ipnet::Ipv4Net::default()),
            IpNet::V6(ipnet::Ipv6Net::default()),
        ];
        return out;
    }
    for entry in entries {
        if entry == NODE_PORT_PRIMARY {
            out.primary = true;
            continue;
        }
        let expanded = NODE_PORT_SHORTHANDS
            .iter()
            .find(|(k, _)| k == entry)
            .map_or_else(|| vec![entry.as_str()], |(_, cidrs)| cidrs.to_vec());
        for n in expanded.into_iter().filter_map(parse_cidr) {
            if !out.cidrs.contains(&n) {
                out.cidrs.push(n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::defaults::apply_defaults;

    fn net(s: &str) -> IpNet {
        s.parse().expect("a CIDR")
    }

    fn defaulted() -> ProxyConfig {
        let mut c = ProxyConfig::default();
        apply_defaults(&mut c);
        c
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = ProxySettings::new(&defaulted());
        assert_eq!(s.scheduler, "rr");
        assert_eq!(s.masquerade_bit, 14);
        assert_eq!(s.sync_period, Duration::from_secs(30));
        assert_eq!(s.min_sync_period, Duration::ZERO);
        assert!(s.exclude_cidrs.is_empty());
    }

    #[test]
    fn fields_are_parsed_once() {
        let mut c = defaulted();
        c.ipvs.scheduler = "mh".into();
        c.iptables.masquerade_bit = Some(15);
        c.ipvs.exclude_cidrs = Some(vec!["10.0.0.1/8".into(), "fd00::/8".into()]);
        c.cluster_cidr = "10.244.0.0/16, fd00:10:244::/56".into();
        let s = ProxySettings::new(&c);
        assert_eq!(s.scheduler, "mh");
        assert_eq!(s.masquerade_bit, 15);
        assert_eq!(s.exclude_cidrs, vec![net("10.0.0.0/8"), net("fd00::/8")]);
        assert_eq!(
            s.local_detection,
            LocalDetection::ClusterCidr(vec![net("10.244.0.0/16"), net("fd00:10:244::/56")])
        );
    }

    #[test]
    fn local_detection_follows_the_mode() {
        let mut c = defaulted();
        c.detect_local_mode = "NodeCIDR".into();
        assert_eq!(LocalDetection::from_config(&c), LocalDetection::NodeCidr);
        c.detect_local_mode = "InterfaceNamePrefix".into();
        c.detect_local.interface_name_prefix = "veth".into();
        assert_eq!(
            LocalDetection::from_config(&c),
            LocalDetection::InterfaceNamePrefix("veth".into())
        );
        assert_eq!(local_mode("Magic"), None);
        assert_eq!(local_mode(""), Some(LocalMode::ClusterCidr));
    }

    #[test]
    fn node_port_addresses_expand() {
        let all = node_port_addresses(None);
        assert_eq!(all.cidrs, vec![net("0.0.0.0/0"), net("::/0")]);
        let given = [
            "primary".to_string(),
            "localhost".into(),
            "192.168.1.7/24".into(),
        ];
        let npa = node_port_addresses(Some(&given));
        assert!(npa.primary);
        assert_eq!(
            npa.cidrs,
            vec![net("127.0.0.0/8"), net("::1/128"), net("192.168.1.0/24")]
        );
    }
}
