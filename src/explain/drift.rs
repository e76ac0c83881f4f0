//! Which Services a full sync's drift repairs touched: the repaired virtual servers, kube-ipvs0
//! addresses and set members mapped back to the Services whose decision records name them.

use super::index::DecisionIndex;
use crate::cluster::model::{Protocol, ServiceName};
use crate::kernel::ipvs::IpvsServiceKey;
use crate::proxier::plan::decision::AddressKind;
use crate::proxier::reconcile::drift::{DriftKind, DriftReport};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::SystemTime;

/// The last full sync's repairs per Service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftMarks {
    /// When the last full sync ran (`None`: none yet).
    pub at: Option<SystemTime>,
    /// Services whose kernel state it repaired, with what it repaired.
    pub services: BTreeMap<ServiceName, BTreeSet<DriftKind>>,
    /// Everything it repaired, by kind (iptables rules belong to no single Service).
    pub counts: BTreeMap<DriftKind, u64>,
}

/// The (address, protocol, port) at the start of a set member (`10.96.0.1,tcp:443[,...]`), or the
/// port of a bitmap member (`30080`, with the protocol its set is for).
fn member_target(set: &str, member: &str) -> Option<(Option<IpAddr>, Protocol, u16)> {
    if let Ok(port) = member.parse::<u16>() {
        let proto = if set.contains("UDP") {
            Protocol::Udp
        } else {
            Protocol::Tcp
        };
        return Some((None, proto, port));
    }
    let mut parts = member.split(',');
    let addr = parts.next()?.parse::<IpAddr>().ok()?;
    let (proto, port) = parts.next()?.split_once(':')?;
    let proto = match proto {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        _ => return None,
    };
    Some((Some(addr), proto, port.parse().ok()?))
}

/// The Services each repair of `drift` touched, by the virtual servers their records name.
pub fn attribute(
    index: &DecisionIndex,
    drift: &DriftReport,
) -> BTreeMap<ServiceName, BTreeSet<DriftKind>> {
    let mut out: BTreeMap<ServiceName, BTreeSet<DriftKind>> = BTreeMap::new();
    if drift.is_empty() {
        return out;
    }
    let members: Vec<(Option<IpAddr>, Protocol, u16)> = drift
        .set_members
        .iter()
        .filter_map(|(set, m)| member_target(set, m))
        .collect();
    let mut by_key: HashMap<IpvsServiceKey, BTreeSet<DriftKind>> = HashMap::new();
    for (key, kinds) in &drift.virtual_servers {
        by_key.entry(*key).or_default().extend(kinds);
    }
    for (name, decisions) in index.iter() {
        let vss = decisions
            .iter()
            .flat_map(|d| d.ports.iter())
            .flat_map(|p| p.virtual_servers.iter());
        let mut kinds = BTreeSet::new();
        for vs in vss {
            let key = vs.key;
            let node_port = vs.kind == AddressKind::NodePort;
            if let Some(k) = by_key.get(&key) {
                kinds.extend(k);
            }
            if drift.addresses.contains(&key.addr) {
                kinds.insert(DriftKind::Address);
            }
            // A bitmap member (no address) is a node port.
            let member = |(addr, proto, port): &(Option<IpAddr>, Protocol, u16)| {
                let at = addr.map_or(node_port, |a| a == key.addr);
                *proto == key.protocol && *port == key.port && at
            };
            if members.iter().any(member) {
                kinds.insert(DriftKind::IpsetMember);
            }
        }
        if !kinds.is_empty() {
            out.insert(name.clone(), kinds);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_members_name_their_virtual_server() {
        assert_eq!(
            member_target("KUBE-CLUSTER-IP", "10.96.0.1,tcp:443"),
            Some((Some("10.96.0.1".parse().unwrap()), Protocol::Tcp, 443))
        );
        assert_eq!(
            member_target("KUBE-LOOP-BACK", "10.244.0.5,udp:53,10.244.0.5"),
            Some((Some("10.244.0.5".parse().unwrap()), Protocol::Udp, 53))
        );
        assert_eq!(
            member_target("KUBE-NODE-PORT-UDP", "30053"),
            Some((None, Protocol::Udp, 30053))
        );
        assert_eq!(member_target("KUBE-X", "garbage"), None);
    }
}
