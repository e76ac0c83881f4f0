//! Which local addresses get NodePort virtual servers (upstream's `nodePortAddresses` handling in the
//! IPVS proxier).

use crate::net::IpFamily;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// The dummy interface holding service addresses.
pub const DUMMY_DEVICE: &str = "kube-ipvs0";

fn is_v6_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

/// Addresses of `family` on every interface except kube-ipvs0, without loopback and IPv6 link-local ones
/// (upstream's `GetAllLocalAddressesExcept(kube-ipvs0)`).
pub fn node_addresses(
    local_addrs_by_iface: &BTreeMap<String, Vec<IpAddr>>,
    family: IpFamily,
) -> BTreeSet<IpAddr> {
    local_addrs_by_iface
        .iter()
        .filter(|(iface, _)| iface.as_str() != DUMMY_DEVICE)
        .flat_map(|(_, addrs)| addrs.iter().copied())
        .filter(|ip| IpFamily::of(ip) == family && !ip.is_loopback() && !is_v6_link_local(ip))
        .collect()
}

/// `nodePortAddresses` resolved once for a node: its CIDRs plus, when `primary` is listed, the node's
/// primary IPs as host CIDRs (loopback ones left out).
pub fn node_port_cidrs(cidrs: &[IpNet], primary: bool, primary_node_ips: &[IpAddr]) -> Vec<IpNet> {
    let mut out = cidrs.to_vec();
    if primary {
        out.extend(
            primary_node_ips
                .iter()
                .filter(|ip| !ip.is_loopback())
                .map(|ip| IpNet::from(*ip)),
        );
    }
    out
}

/// The IPs that get NodePort virtual servers, sorted.
///
/// `node_port_cidrs` is the resolved `nodePortAddresses` ([`node_port_cidrs`]): no CIDR of `family` (or a
/// zero CIDR) selects every local address of the family except those on kube-ipvs0 and loopback ones;
/// CIDRs select the matching addresses of every interface (kube-ipvs0's `kube_ipvs0_addrs` included, as
/// upstream does), loopback excluded.
pub fn node_port_ips(
    local_addrs_by_iface: &BTreeMap<String, Vec<IpAddr>>,
    kube_ipvs0_addrs: &[IpAddr],
    node_port_cidrs: &[IpNet],
    family: IpFamily,
) -> Vec<IpAddr> {
    let cidrs: Vec<IpNet> = node_port_cidrs
        .iter()
        .copied()
        .filter(|c| IpFamily::of_net(c) == family)
        .collect();
    if cidrs.is_empty() || cidrs.iter().any(|c| c.prefix_len() == 0) {
        return node_addresses(local_addrs_by_iface, family)
            .into_iter()
            .collect();
    }
    let all = local_addrs_by_iface
        .values()
        .flat_map(|v| v.iter())
        .chain(kube_ipvs0_addrs.iter());
    let picked: BTreeSet<IpAddr> = all
        .copied()
        .filter(|ip| !ip.is_loopback() && cidrs.iter().any(|c| c.contains(ip)))
        .collect();
    picked.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifaces(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<IpAddr>> {
        list.iter()
            .map(|(n, a)| {
                (
                    n.to_string(),
                    a.iter().map(|s| s.parse().unwrap()).collect(),
                )
            })
            .collect()
    }

    fn strs(v: Vec<IpAddr>) -> Vec<String> {
        v.into_iter().map(|i| i.to_string()).collect()
    }

    /// A configured `nodePortAddresses` list (CIDRs or `primary`) resolved as the daemon resolves it.
    fn resolved(cfg: &[String], primary_ips: &[IpAddr]) -> Vec<IpNet> {
        let primary = cfg.iter().any(|s| s == "primary");
        let cidrs: Vec<IpNet> = cfg.iter().filter_map(|s| s.parse().ok()).collect();
        node_port_cidrs(&cidrs, primary, primary_ips)
    }

    // Cases from upstream proxier_test.go TestGetNodeIPs (all addresses, kube-ipvs0 excluded).
    #[test]
    fn match_all_excludes_dummy_loopback_link_local() {
        let m = ifaces(&[("eth0", &["1.2.3.4"]), ("lo", &["127.0.0.1"])]);
        assert_eq!(strs(node_port_ips(&m, &[], &[], IpFamily::V4)), ["1.2.3.4"]);
        let m = ifaces(&[
            ("encap0", &["10.20.30.40", "fe80::200:ff:fe01:1"]),
            ("lo", &["127.0.0.1", "::1"]),
            ("docker0", &["172.17.0.1"]),
        ]);
        assert_eq!(
            strs(node_port_ips(&m, &[], &[], IpFamily::V4)),
            ["10.20.30.40", "172.17.0.1"]
        );
        let m = ifaces(&[
            ("kube-ipvs0", &["2000::", "1.2.3.4"]),
            ("lo", &["127.0.0.1", "::1"]),
            ("encap7", &["1000::", "10.20.30.31"]),
        ]);
        assert_eq!(
            strs(node_port_ips(&m, &[], &[], IpFamily::V4)),
            ["10.20.30.31"]
        );
        let m = ifaces(&[
            ("ipvs0", &["1.2.3.4", "1000::"]),
            ("lo", &["127.0.0.1", "::1"]),
            ("encap7", &["10.20.30.31", "2000::", "fe80::200:ff:fe01:1"]),
            ("kube-ipvs0", &["1.2.3.4", "2.3.4.5", "2000::"]),
        ]);
        // 2000:: is also on encap7, so it stays (upstream excludes by interface, not by address).
        assert_eq!(
            strs(node_port_ips(&m, &[], &[], IpFamily::V6)),
            ["1000::", "2000::"]
        );
        let zero = vec!["0.0.0.0/0".to_string()];
        assert_eq!(
            strs(node_port_ips(&m, &[], &resolved(&zero, &[]), IpFamily::V4)),
            ["1.2.3.4", "10.20.30.31"]
        );
    }

    #[test]
    fn cidrs_select_matching_non_loopback() {
        let m = ifaces(&[
            ("eth0", &["10.0.0.10", "192.168.1.5"]),
            ("lo", &["127.0.0.1"]),
        ]);
        let cfg = vec!["10.0.0.0/8".to_string(), "127.0.0.0/8".to_string()];
        assert_eq!(
            strs(node_port_ips(&m, &[], &resolved(&cfg, &[]), IpFamily::V4)),
            ["10.0.0.10"]
        );
        // A CIDR list with no entry of this family selects everything of this family.
        let cfg = vec!["fd00::/64".to_string()];
        assert_eq!(
            strs(node_port_ips(&m, &[], &resolved(&cfg, &[]), IpFamily::V4)),
            ["10.0.0.10", "192.168.1.5"]
        );
        // kube-ipvs0 addresses inside the CIDR are picked, as upstream's GetNodeIPs does.
        let cfg = vec!["10.96.0.0/12".to_string()];
        let dummy: Vec<IpAddr> = vec!["10.96.0.1".parse().unwrap()];
        assert_eq!(
            strs(node_port_ips(
                &m,
                &dummy,
                &resolved(&cfg, &[]),
                IpFamily::V4
            )),
            ["10.96.0.1"]
        );
    }

    #[test]
    fn primary_uses_node_ips() {
        let m = ifaces(&[("eth0", &["10.0.0.10", "192.168.1.5", "fd00::10"])]);
        let cfg = vec!["primary".to_string()];
        let primary: Vec<IpAddr> = vec!["192.168.1.5".parse().unwrap()];
        assert_eq!(
            strs(node_port_ips(
                &m,
                &[],
                &resolved(&cfg, &primary),
                IpFamily::V4
            )),
            ["192.168.1.5"]
        );
        // No primary IPv6: the IPv6 side matches all its addresses.
        assert_eq!(
            strs(node_port_ips(
                &m,
                &[],
                &resolved(&cfg, &primary),
                IpFamily::V6
            )),
            ["fd00::10"]
        );
    }
}
