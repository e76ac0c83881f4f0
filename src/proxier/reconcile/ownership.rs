//! Which kernel objects are ours, so that a sync deletes nothing another tool owns.
//!
//! An IPVS virtual server not in the plan is deleted only if it is ours: its address is bound to kube-ipvs0
//! or listed in KUBE-IPVS-IPS (kernel now, or as last applied), or it is a node-IP:port entry on a node IP we
//! planned NodePorts on whose port is recorded in our node-port sets; and never when its address falls in
//! `excludeCIDRs`. Upstream deletes every service of its family it did not create (k/k #134147); we don't.

use crate::cluster::model::Protocol;
use crate::kernel::ipvs::IpvsServiceKey;
use crate::net::IpFamily;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Longest ipset name the kernel accepts.
pub const MAX_SET_NAME: usize = 31;

/// The kernel name of one of our sets for a family: `KUBE-<base>` (v4) or `KUBE-6-<base>` cut to 31 chars.
pub fn set_name(family: IpFamily, base: &str) -> String {
    match family {
        IpFamily::V4 => format!("KUBE-{base}"),
        IpFamily::V6 => {
            let mut n = format!("KUBE-6-{base}");
            n.truncate(MAX_SET_NAME);
            n
        }
    }
}

/// Every set kube-proxy creates (base names), for cleanup.
pub const SET_BASES: &[&str] = &[
    "LOOP-BACK",
    "CLUSTER-IP",
    "EXTERNAL-IP",
    "EXTERNAL-IP-LOCAL",
    "LOAD-BALANCER",
    "LOAD-BALANCER-FW",
    "LOAD-BALANCER-LOCAL",
    "LOAD-BALANCER-SOURCE-IP",
    "LOAD-BALANCER-SOURCE-CIDR",
    "NODE-PORT-TCP",
    "NODE-PORT-LOCAL-TCP",
    "NODE-PORT-UDP",
    "NODE-PORT-LOCAL-UDP",
    "NODE-PORT-SCTP-HASH",
    "NODE-PORT-LOCAL-SCTP-HASH",
    "HEALTH-CHECK-NODE-PORT",
    "IPVS-IPS",
];

/// Whether `ip` lies in one of `cidrs`.
pub fn excluded(ip: &IpAddr, cidrs: &[IpNet]) -> bool {
    cidrs.iter().any(|c| c.contains(ip))
}

/// Evidence of what is ours, gathered from the kernel before this sync changed it and from the last
/// applied state.
#[derive(Debug, Default)]
pub struct Ownership {
    /// Addresses on kube-ipvs0 or in KUBE-IPVS-IPS.
    pub service_ips: BTreeSet<IpAddr>,
    /// Node IPs NodePorts were planned on.
    pub node_port_ips: BTreeSet<IpAddr>,
    /// (protocol, port) recorded in our node-port sets; SCTP entries also carry the node IP.
    pub node_ports: BTreeSet<(Protocol, u16)>,
    pub sctp_node_ports: BTreeSet<(IpAddr, u16)>,
    /// Virtual servers we applied ourselves.
    pub applied: BTreeSet<IpvsServiceKey>,
}

impl Ownership {
    /// Adds the evidence carried by a set dump (`sets` = name → members) for a family.
    pub fn add_sets(&mut self, family: IpFamily, sets: &BTreeMap<String, BTreeSet<String>>) {
        self.add_sets_with(family, |name| sets.get(name));
    }

    /// Like [`add_sets`](Self::add_sets), with the members of a set by name from `members` (no copy).
    pub fn add_sets_with<'a>(
        &mut self,
        family: IpFamily,
        members: impl Fn(&str) -> Option<&'a BTreeSet<String>>,
    ) {
        if let Some(m) = members(&set_name(family, "IPVS-IPS")) {
            self.service_ips
                .extend(m.iter().filter_map(|e| e.parse::<IpAddr>().ok()));
        }
        for (base, proto) in [
            ("NODE-PORT-TCP", Protocol::Tcp),
            ("NODE-PORT-UDP", Protocol::Udp),
        ] {
            if let Some(m) = members(&set_name(family, base)) {
                self.node_ports.extend(
                    m.iter()
                        .filter_map(|e| e.parse::<u16>().ok().map(|p| (proto, p))),
                );
            }
        }
        if let Some(m) = members(&set_name(family, "NODE-PORT-SCTP-HASH")) {
            self.sctp_node_ports
                .extend(m.iter().filter_map(|e| parse_ip_proto_port(e)));
        }
    }

    /// Whether a virtual server that is not planned may be deleted.
    pub fn owns(&self, key: &IpvsServiceKey, exclude: &[IpNet]) -> bool {
        if excluded(&key.addr, exclude) {
            return false;
        }
        if self.applied.contains(key) || self.service_ips.contains(&key.addr) {
            return true;
        }
        if !self.node_port_ips.contains(&key.addr) {
            return false;
        }
        match key.protocol {
            Protocol::Sctp => self.sctp_node_ports.contains(&(key.addr, key.port)),
            p => self.node_ports.contains(&(p, key.port)),
        }
    }
}

/// [`Ownership`] gathered on first use: a full sync that finds only virtual servers it applied itself
/// never parses the sets and addresses that are the evidence.
pub struct LazyOwnership<'a> {
    cell: std::cell::OnceCell<Ownership>,
    gather: Box<dyn Fn() -> Ownership + 'a>,
}

impl<'a> LazyOwnership<'a> {
    /// Evidence `gather` gives when first asked for.
    pub fn new(gather: impl Fn() -> Ownership + 'a) -> Self {
        LazyOwnership {
            cell: std::cell::OnceCell::new(),
            gather: Box::new(gather),
        }
    }

    /// The evidence, gathered now if not yet.
    pub fn get(&self) -> &Ownership {
        self.cell.get_or_init(|| (self.gather)())
    }
}

/// Parses `ip,proto:port` (hash:ip,port member text).
fn parse_ip_proto_port(e: &str) -> Option<(IpAddr, u16)> {
    let (ip, rest) = e.split_once(',')?;
    let (_, port) = rest.split_once(':')?;
    Some((ip.parse().ok()?, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v6_names_are_truncated() {
        assert_eq!(set_name(IpFamily::V4, "CLUSTER-IP"), "KUBE-CLUSTER-IP");
        assert_eq!(
            set_name(IpFamily::V6, "LOAD-BALANCER-SOURCE-CIDR"),
            "KUBE-6-LOAD-BALANCER-SOURCE-CID"
        );
        assert_eq!(
            set_name(IpFamily::V6, "NODE-PORT-LOCAL-SCTP-HASH"),
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"
        );
    }

    #[test]
    fn node_port_entries_need_a_recorded_port() {
        let node: IpAddr = "10.0.0.10".parse().unwrap();
        let mut o = Ownership::default();
        o.node_port_ips.insert(node);
        let mut sets = BTreeMap::new();
        sets.insert(
            "KUBE-NODE-PORT-TCP".to_string(),
            BTreeSet::from(["30080".to_string()]),
        );
        sets.insert(
            "KUBE-NODE-PORT-SCTP-HASH".to_string(),
            BTreeSet::from(["10.0.0.10,sctp:30090".to_string()]),
        );
        o.add_sets(IpFamily::V4, &sets);
        let key = |port, protocol| IpvsServiceKey {
            addr: node,
            port,
            protocol,
        };
        assert!(o.owns(&key(30080, Protocol::Tcp), &[]));
        assert!(!o.owns(&key(30081, Protocol::Tcp), &[]));
        assert!(!o.owns(&key(30080, Protocol::Udp), &[]));
        assert!(o.owns(&key(30090, Protocol::Sctp), &[]));
        assert!(!o.owns(
            &key(30080, Protocol::Tcp),
            &["10.0.0.0/24".parse().unwrap()]
        ));
    }
}
