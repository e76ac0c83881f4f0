//! The desired kernel state computed by the planner for one IP family.

use crate::cluster::model::ServiceName;
use crate::kernel::ipset::IpSetSpec;
use crate::kernel::ipvs::{ForwardMethod, IpvsDestination, IpvsService, IpvsServiceKey};
use crate::net::IpFamily;
use crate::proxier::plan::decision::{DecisionChanges, ServiceDecision};
use crate::proxier::plan::ipsets::size_for;
use crate::proxier::plan::owners::Owners;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// One IPVS virtual server with the real servers it should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredVirtualServer {
    pub service: IpvsService,
    /// Real servers keyed by (address, port); weight and forwarding method in the value.
    pub destinations: Destinations,
}

/// Real servers of one virtual server, sorted by (address, port), each key once. A boxed slice of
/// compact values, not a map of [`IpvsDestination`]s: a plan holds one per virtual server, a B-tree node
/// for ten real servers costs two thirds more than the ten values, and a plan sets neither thresholds nor
/// connection counts (10k Services × 10 real servers: 1.6 MiB less than whole `IpvsDestination`s).
/// Values go in and come out as `IpvsDestination`s with those fields 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destinations(Box<[PlannedDest]>);

/// One real server as a plan sets it: 24 bytes where an `IpvsDestination` takes 40.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PlannedDest {
    addr: IpAddr,
    port: u16,
    weight: u32,
    forward: ForwardMethod,
}

impl PlannedDest {
    fn of(d: &IpvsDestination) -> Self {
        PlannedDest {
            addr: d.addr,
            port: d.port,
            weight: d.weight,
            forward: d.forward,
        }
    }

    fn key(&self) -> (IpAddr, u16) {
        (self.addr, self.port)
    }

    fn full(&self) -> IpvsDestination {
        IpvsDestination {
            forward: self.forward,
            ..IpvsDestination::masq(self.addr, self.port, self.weight)
        }
    }
}

impl Destinations {
    fn index(&self, key: &(IpAddr, u16)) -> Result<usize, usize> {
        self.0.binary_search_by(|d| d.key().cmp(key))
    }

    /// The real server at `key` (address, port).
    pub fn get(&self, key: &(IpAddr, u16)) -> Option<IpvsDestination> {
        self.index(key).ok().map(|i| self.0[i].full())
    }

    /// Whether there is a real server at `key`.
    pub fn contains_key(&self, key: &(IpAddr, u16)) -> bool {
        self.index(key).is_ok()
    }

    /// Every (address, port), in order.
    pub fn keys(&self) -> impl Iterator<Item = (IpAddr, u16)> + '_ {
        self.0.iter().map(PlannedDest::key)
    }

    /// Every real server, in key order.
    pub fn values(&self) -> impl Iterator<Item = IpvsDestination> + '_ {
        self.0.iter().map(PlannedDest::full)
    }

    /// Number of real servers.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds or replaces the real server at `dest`'s address and port (its thresholds and connection
    /// counts are not kept); returns the one replaced.
    pub fn insert(&mut self, dest: IpvsDestination) -> Option<IpvsDestination> {
        let new = PlannedDest::of(&dest);
        let mut v = std::mem::take(&mut self.0).into_vec();
        let old = match v.binary_search_by(|d| d.key().cmp(&new.key())) {
            Ok(i) => Some(std::mem::replace(&mut v[i], new).full()),
            Err(i) => {
                v.insert(i, new);
                None
            }
        };
        self.0 = v.into_boxed_slice();
        old
    }

    /// Removes the real server at `key`.
    pub fn remove(&mut self, key: &(IpAddr, u16)) -> Option<IpvsDestination> {
        let i = self.index(key).ok()?;
        let mut v = std::mem::take(&mut self.0).into_vec();
        let old = v.remove(i);
        self.0 = v.into_boxed_slice();
        Some(old.full())
    }
}

/// From (key, real server) pairs as a map would take them: the key is the real server's own address and
/// port; of equal keys the last one stays.
impl FromIterator<((IpAddr, u16), IpvsDestination)> for Destinations {
    fn from_iter<I: IntoIterator<Item = ((IpAddr, u16), IpvsDestination)>>(iter: I) -> Self {
        let map: BTreeMap<(IpAddr, u16), PlannedDest> = iter
            .into_iter()
            .map(|(k, d)| (k, PlannedDest::of(&d)))
            .collect();
        Destinations(map.into_values().collect())
    }
}

/// Members one ipset should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredIpSet {
    /// The set; its size is the one its entries need ([`size_for`]), kept so by whoever changes them.
    pub spec: IpSetSpec,
    /// Entries in `ipset save` canonical text form, e.g. `10.96.0.1,tcp:443`.
    pub entries: BTreeSet<String>,
}

impl DesiredIpSet {
    /// A set with `entries`, sized for them.
    pub fn new(spec: IpSetSpec, entries: BTreeSet<String>) -> Self {
        let mut set = DesiredIpSet { spec, entries };
        set.refresh_size();
        set
    }

    /// Sizes the spec for the entries it has now (after they changed).
    pub fn refresh_size(&mut self) {
        self.spec.size = size_for(self.entries.len());
    }
}

/// Health-check listener wanted for one externalTrafficPolicy=Local service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckService {
    pub service: ServiceName,
    pub node_port: u16,
    pub local_endpoints: usize,
}

/// Everything `sync_proxy_rules` programs for one family, as a pure value, with the decisions behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredState {
    pub family: IpFamily,
    /// The planner's decision record of every Service with a port in this family (shared values).
    pub decisions: BTreeMap<ServiceName, Arc<ServiceDecision>>,
    /// Shared values: the reconciler keeps the same `Arc`s as what it applied.
    pub virtual_servers: BTreeMap<IpvsServiceKey, Arc<DesiredVirtualServer>>,
    /// The virtual servers several Services plan, with their claimants in name order: the last owns it
    /// (its real servers are planned, as upstream's last write). Any other virtual server is owned by
    /// the one record that lists it. Usually empty.
    pub shared: BTreeMap<IpvsServiceKey, Owners>,
    /// Every ipset of this family (empty sets included: they are always created).
    pub ipsets: BTreeMap<String, DesiredIpSet>,
    /// Full `iptables-restore --noflush` payload (nat then filter, as upstream writes it), built-in-chain jumps excluded.
    pub iptables_payload: String,
    /// Jump rules that must sit at the top of built-in chains (checked, then inserted).
    pub jumps: Vec<JumpRule>,
    /// Addresses bound to kube-ipvs0 (/32 or /128).
    pub bound_addresses: BTreeSet<IpAddr>,
    /// Of those, the ones bound with scope host, for which the node answers no ARP request
    /// (`--ipvs-arp-per-address`; empty without it).
    pub arp_quiet: BTreeSet<IpAddr>,
    /// Health-check node port listeners (externalTrafficPolicy=Local services).
    pub health_checks: Vec<HealthCheckService>,
    /// Service ports that fell back to cluster endpoints because they had no local one, by traffic policy,
    /// for the no-local-endpoints metric.
    pub no_local_endpoints: BTreeMap<TrafficPolicy, u64>,
}

impl DesiredState {
    /// Everything this state publishes for readers, as the changes from nothing (records and claimants
    /// are shared values: cheap to clone).
    pub fn decision_changes(&self) -> DecisionChanges {
        DecisionChanges::All {
            records: self.decisions.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// A traffic policy set to Local (the `traffic_policy` label of
/// `sync_proxy_rules_no_local_endpoints_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TrafficPolicy {
    /// internalTrafficPolicy=Local (ClusterIP).
    Internal,
    /// externalTrafficPolicy=Local (NodePort, external IPs, load balancers).
    External,
}

impl TrafficPolicy {
    /// Both policies.
    pub const ALL: [TrafficPolicy; 2] = [TrafficPolicy::Internal, TrafficPolicy::External];

    /// Label value as upstream spells it.
    pub fn label(self) -> &'static str {
        match self {
            TrafficPolicy::Internal => "internal",
            TrafficPolicy::External => "external",
        }
    }
}

/// A jump from a built-in chain to one of ours, placed at the top of that chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JumpRule {
    pub table: &'static str,
    pub chain: &'static str,
    pub target: &'static str,
    pub comment: &'static str,
}

impl JumpRule {
    /// Rule arguments after the chain name, as passed to `iptables -I <chain>`.
    pub fn args(&self) -> Vec<String> {
        vec![
            "-m".into(),
            "comment".into(),
            "--comment".into(),
            self.comment.into(),
            "-j".into(),
            self.target.into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(a: &str, port: u16, weight: u32) -> IpvsDestination {
        IpvsDestination::masq(a.parse().unwrap(), port, weight)
    }

    fn key(a: &str, port: u16) -> (IpAddr, u16) {
        (a.parse().unwrap(), port)
    }

    #[test]
    fn destinations_behave_as_a_sorted_map() {
        let pairs = [
            dest("10.0.0.3", 80, 1),
            dest("10.0.0.1", 80, 1),
            dest("10.0.0.1", 80, 7),
            dest("10.0.0.1", 79, 1),
        ];
        let mut d: Destinations = pairs
            .iter()
            .map(|x| ((x.addr, x.port), x.clone()))
            .collect();
        // sorted, one per key, the last of equal keys kept (as a map collects)
        let keys: Vec<_> = d.keys().collect();
        assert_eq!(
            keys,
            vec![
                key("10.0.0.1", 79),
                key("10.0.0.1", 80),
                key("10.0.0.3", 80)
            ]
        );
        assert_eq!(d.get(&key("10.0.0.1", 80)).unwrap().weight, 7);
        assert!(d.contains_key(&key("10.0.0.3", 80)) && !d.contains_key(&key("10.0.0.3", 81)));
        assert_eq!(d.insert(dest("10.0.0.2", 80, 1)), None);
        assert_eq!(d.insert(dest("10.0.0.2", 80, 3)).unwrap().weight, 1);
        assert_eq!(d.len(), 4);
        assert_eq!(d.values().nth(2).unwrap().weight, 3);
        assert_eq!(d.remove(&key("10.0.0.1", 79)).unwrap().port, 79);
        assert_eq!(d.remove(&key("10.0.0.1", 79)), None);
        assert_eq!(d.keys().count(), 3);
        assert!(!d.is_empty() && Destinations::default().is_empty());
    }
}
