//! What every sync is planned with, fixed for the life of the process: built once from the typed
//! configuration, the node's IPs, the families served and iptables' capabilities.

use crate::config::{LocalDetection, ProxySettings};
use crate::net::IpFamily;
use crate::proxier::plan::{LocalDetector, PlanConfig, node_port_cidrs};
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// Configuration-derived settings of every sync.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub node_name: String,
    /// Node IPs, primary first.
    pub node_ips: Vec<IpAddr>,
    pub families: Vec<IpFamily>,
    /// `nodePortAddresses` resolved for this node (`primary` replaced by its IPs); empty: every address.
    pub node_port_cidrs: Vec<IpNet>,
    /// `PlanConfig` per family; its local detector is filled in at each sync when it depends on the
    /// Node's podCIDRs.
    pub plan: BTreeMap<IpFamily, PlanConfig>,
    local_detection: LocalDetection,
    /// Full sync (kernel dump, drift repair) at least this often.
    pub sync_period: Duration,
}

impl SyncSettings {
    /// Settings from the typed configuration, the node IPs, the families and iptables' `--random-fully`
    /// support.
    pub fn new(
        settings: &ProxySettings,
        node_name: &str,
        node_ips: Vec<IpAddr>,
        families: Vec<IpFamily>,
        random_fully: bool,
    ) -> SyncSettings {
        let npa = &settings.node_port_addresses;
        let node_port_cidrs = node_port_cidrs(&npa.cidrs, npa.primary, &node_ips);
        let detection = &settings.local_detection;
        let plan = families
            .iter()
            .map(|&family| {
                let config = PlanConfig {
                    family,
                    scheduler: settings.scheduler,
                    masquerade_all: settings.masquerade_all,
                    masquerade_bit: settings.masquerade_bit,
                    local_detector: local_detector(detection, family, &[]),
                    exclude_cidrs: settings
                        .exclude_cidrs
                        .iter()
                        .copied()
                        .filter(|n| IpFamily::of_net(n) == family)
                        .collect(),
                    random_fully,
                    unavailable_schedulers: BTreeMap::new(),
                    lb_source_ranges_for_node: settings.fixes.lb_source_ranges_for_node,
                    arp_per_address: settings.fixes.arp_per_address,
                    etp_local_node_masquerade: settings.fixes.etp_local_node_masquerade,
                    external_ips: settings.external_ips,
                };
                (family, config)
            })
            .collect();
        SyncSettings {
            node_name: node_name.to_string(),
            node_ips,
            families,
            node_port_cidrs,
            plan,
            local_detection: detection.clone(),
            sync_period: settings.sync_period,
        }
    }

    /// The plan configuration of `family` for a Node with `pod_cidrs` (used in NodeCIDR mode).
    pub fn plan_config(&self, family: IpFamily, pod_cidrs: &[IpNet]) -> Option<PlanConfig> {
        let mut config = self.plan.get(&family)?.clone();
        if self.local_detection == LocalDetection::NodeCidr {
            config.local_detector = local_detector(&self.local_detection, family, pod_cidrs);
        }
        Some(config)
    }

    /// Whether `nodePortAddresses` selects every address (a zero-length CIDR such as `all`'s).
    pub fn node_ports_everywhere(&self) -> bool {
        self.node_port_cidrs.iter().any(|n| n.prefix_len() == 0)
    }
}

/// The planner's local-traffic detector for `family` under `detection` (`detectLocalMode` with its
/// parameters); `node_pod_cidrs` are the Node's podCIDRs (NodeCIDR mode). No CIDR of the family gives
/// [`LocalDetector::None`].
fn local_detector(
    detection: &LocalDetection,
    family: IpFamily,
    node_pod_cidrs: &[IpNet],
) -> LocalDetector {
    let of_family = |nets: &[IpNet]| {
        let nets: Vec<IpNet> = nets
            .iter()
            .copied()
            .filter(|n| IpFamily::of_net(n) == family)
            .collect();
        if nets.is_empty() {
            LocalDetector::None
        } else {
            LocalDetector::Cidrs(nets)
        }
    };
    match detection {
        LocalDetection::ClusterCidr(nets) => of_family(nets),
        LocalDetection::NodeCidr => of_family(node_pod_cidrs),
        LocalDetection::BridgeInterface(i) => LocalDetector::BridgeInterface(i.clone()),
        LocalDetection::InterfaceNamePrefix(p) => LocalDetector::InterfaceNamePrefix(p.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().expect("a CIDR")
    }

    /// ClusterCIDR keeps the configured ranges of the family (none: no detector); NodeCIDR takes the
    /// Node's podCIDRs of the family; the interface modes do not depend on the family.
    #[test]
    fn the_detector_follows_the_mode_and_family() {
        let both = LocalDetection::ClusterCidr(vec![net("10.244.0.0/16"), net("fd00:10:244::/56")]);
        assert_eq!(
            local_detector(&both, IpFamily::V6, &[]),
            LocalDetector::Cidrs(vec![net("fd00:10:244::/56")])
        );
        let v4 = LocalDetection::ClusterCidr(vec![net("10.244.0.0/16")]);
        assert_eq!(local_detector(&v4, IpFamily::V6, &[]), LocalDetector::None);
        let pod_cidrs = [net("10.244.3.0/24"), net("fd00::/64")];
        assert_eq!(
            local_detector(&LocalDetection::NodeCidr, IpFamily::V4, &pod_cidrs),
            LocalDetector::Cidrs(vec![net("10.244.3.0/24")])
        );
        assert_eq!(
            local_detector(&LocalDetection::NodeCidr, IpFamily::V4, &[]),
            LocalDetector::None
        );
        let bridge = LocalDetection::BridgeInterface("cbr0".into());
        assert_eq!(
            local_detector(&bridge, IpFamily::V4, &[]),
            LocalDetector::BridgeInterface("cbr0".into())
        );
    }
}
