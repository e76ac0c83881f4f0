//! Which Services a full sync's drift repairs touched: the repaired virtual servers, kube-ipvs0
//! addresses and set members looked up in the decision records, which name every virtual server and set
//! member the planner planned for each Service port (hairpin and health-check members included).

use super::index::DecisionIndex;
use crate::cluster::model::ServiceName;
use crate::kernel::ipset::entry::IpSetEntry;
use crate::kernel::ipvs::IpvsServiceKey;
use crate::net::IpFamily;
use crate::proxier::drift_report::{DriftKind, DriftReport};
use crate::proxier::plan::decision::{AddressKind, PortDecision};
use crate::proxier::plan::ipsets::SetKind;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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

/// A member of one of our sets: the set's family and kind, and the member.
type Member = (IpFamily, SetKind, IpSetEntry);

/// The repaired members of our sets, typed by their set (a member of another set, or one that is not a
/// valid member of its set, belongs to no Service).
fn repaired_members(drift: &DriftReport) -> HashSet<Member> {
    if drift.set_members.is_empty() {
        return HashSet::new();
    }
    let sets: HashMap<String, (IpFamily, SetKind)> = [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .flat_map(|f| SetKind::ALL.into_iter().map(move |k| (k.name(f), (f, k))))
        .collect();
    drift
        .set_members
        .iter()
        .filter_map(|(set, text)| {
            let (f, k) = *sets.get(set)?;
            Some((f, k, IpSetEntry::parse(k.set_type(), f, text).ok()?))
        })
        .collect()
}

/// What of one Service port's planned state `drift` repaired, into `kinds`.
fn port_repairs(
    p: &PortDecision,
    drift: &DriftReport,
    by_key: &HashMap<IpvsServiceKey, BTreeSet<DriftKind>>,
    members: &HashSet<Member>,
    kinds: &mut BTreeSet<DriftKind>,
) {
    let member = |k: SetKind, e: IpSetEntry| members.contains(&(p.family, k, e));
    for vs in p.virtual_servers.iter() {
        if let Some(k) = by_key.get(&vs.key) {
            kinds.extend(k);
        }
        if drift.addresses.contains(&vs.key.addr) {
            kinds.insert(DriftKind::Address);
        }
        // KUBE-IPVS-IPS holds the bound addresses: every virtual server's but a node port's.
        if vs.kind != AddressKind::NodePort && member(SetKind::IpvsIps, IpSetEntry::Ip(vs.key.addr))
        {
            kinds.insert(DriftKind::IpsetMember);
        }
    }
    if p.sets.iter().any(|(k, e)| member(*k, *e)) {
        kinds.insert(DriftKind::IpsetMember);
    }
}

/// The Services each repair of `drift` touched, by the virtual servers and set members their records
/// name.
pub fn attribute(
    index: &DecisionIndex,
    drift: &DriftReport,
) -> BTreeMap<ServiceName, BTreeSet<DriftKind>> {
    let mut out: BTreeMap<ServiceName, BTreeSet<DriftKind>> = BTreeMap::new();
    if drift.is_empty() {
        return out;
    }
    let members = repaired_members(drift);
    let mut by_key: HashMap<IpvsServiceKey, BTreeSet<DriftKind>> = HashMap::new();
    for (key, kinds) in &drift.virtual_servers {
        by_key.entry(*key).or_default().extend(kinds);
    }
    for (name, decisions) in index.iter() {
        let mut kinds = BTreeSet::new();
        for p in decisions.iter().flat_map(|d| d.ports.iter()) {
            port_repairs(p, drift, &by_key, &members, &mut kinds);
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
    use crate::cluster::model::{
        Endpoint, EndpointsMap, Protocol, ServiceMap, ServicePort, ServicePortName, Topology,
    };
    use crate::proxier::plan::{NodeFacts, PlanConfig, plan};
    use std::sync::Arc;

    fn port_name(name: &str, protocol: Protocol) -> ServicePortName {
        ServicePortName {
            namespace: "ns".into(),
            name: name.into(),
            port_name: "p".into(),
            protocol,
        }
    }

    /// `web` (TCP ClusterIP 10.96.0.1:443), `dns` (UDP, node port 30053) and `hc` (TCP, node port
    /// 30080, externalTrafficPolicy=Local with health-check node port 32080, one endpoint on this node),
    /// planned on node n1 and published as the sync loop publishes them.
    fn index() -> DecisionIndex {
        let ip = |s: &str| s.parse().unwrap();
        let web = ServicePort::new(port_name("web", Protocol::Tcp), vec![ip("10.96.0.1")], 443);
        let dns = ServicePort {
            node_port: Some(30053),
            ..ServicePort::new(port_name("dns", Protocol::Udp), vec![ip("10.96.0.10")], 53)
        };
        let hc = ServicePort {
            node_port: Some(30080),
            external_policy_local: true,
            health_check_node_port: Some(32080),
            ..ServicePort::new(port_name("hc", Protocol::Tcp), vec![ip("10.96.0.20")], 80)
        };
        let local = Endpoint::new(ip("10.244.0.5"), 8080).with_topology(Topology::on_node("n1"));
        let endpoints: EndpointsMap = [(hc.name.clone(), Arc::new(vec![local]))].into();
        let services: ServiceMap = [web, dns, hc]
            .into_iter()
            .map(|p| (p.name.clone(), Arc::new(p)))
            .collect();
        let node = NodeFacts {
            node_name: "n1".into(),
            node_port_ips: vec![ip("192.168.1.5")],
            ..Default::default()
        };
        let d = plan(&services, &endpoints, &node, &PlanConfig::new(IpFamily::V4));
        let mut index = DecisionIndex::new();
        index.apply(IpFamily::V4, d.decision_changes());
        index
    }

    /// The Services `attribute` names for repairs of the set members `members` (set, member).
    fn owners(members: &[(&str, &str)]) -> Vec<String> {
        let mut drift = DriftReport::default();
        for (set, m) in members {
            drift.add(DriftKind::IpsetMember, 1);
            drift.set_members.insert((set.to_string(), m.to_string()));
        }
        let out = attribute(&index(), &drift);
        assert!(
            out.values()
                .all(|k| k == &BTreeSet::from([DriftKind::IpsetMember]))
        );
        out.keys().map(|n| n.name.to_string()).collect()
    }

    #[test]
    fn set_members_name_their_service() {
        assert_eq!(owners(&[("KUBE-CLUSTER-IP", "10.96.0.1,tcp:443")]), ["web"]);
        assert_eq!(owners(&[("KUBE-NODE-PORT-UDP", "30053")]), ["dns"]);
        assert_eq!(owners(&[("KUBE-IPVS-IPS", "10.96.0.10")]), ["dns"]);
        // A member no Service planned, one of a set not ours, and garbage: nobody's.
        assert!(owners(&[("KUBE-CLUSTER-IP", "10.96.0.1,udp:443")]).is_empty());
        assert!(owners(&[("KUBE-X", "10.96.0.1,tcp:443")]).is_empty());
        assert!(owners(&[("KUBE-CLUSTER-IP", "garbage")]).is_empty());
        // The same port number in the other protocol's bitmap set is not the Service's.
        assert!(owners(&[("KUBE-NODE-PORT-TCP", "30053")]).is_empty());
    }

    /// Hairpin (`KUBE-LOOP-BACK`) and health-check (`KUBE-HEALTH-CHECK-NODE-PORT`) members were never
    /// attributed while drift read Services back from member text: the records name them.
    #[test]
    fn hairpin_and_health_check_members_name_their_service() {
        let hairpin = ("KUBE-LOOP-BACK", "10.244.0.5,tcp:8080,10.244.0.5");
        assert_eq!(owners(&[hairpin]), ["hc"]);
        assert_eq!(owners(&[("KUBE-HEALTH-CHECK-NODE-PORT", "32080")]), ["hc"]);
        assert_eq!(owners(&[("KUBE-NODE-PORT-LOCAL-TCP", "30080")]), ["hc"]);
        assert!(owners(&[("KUBE-LOOP-BACK", "10.244.0.6,tcp:8080,10.244.0.6")]).is_empty());
        let both = owners(&[hairpin, ("KUBE-CLUSTER-IP", "10.96.0.1,tcp:443")]);
        assert_eq!(both, ["hc", "web"]);
    }
}
