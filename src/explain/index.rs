//! The decision records of the last sync, published for readers outside the sync loop (the explanation
//! on `/debug/services`, the traffic metrics' scrape). The sync loop applies each sync's changes, so
//! publishing costs O(changed services); readers take a short read lock.

use crate::cluster::model::{ServiceName, ServicePortName};
use crate::kernel::ipvs::IpvsServiceKey;
use crate::net::IpFamily;
use crate::proxier::plan::decision::{AddressKind, DecisionChanges, ServiceDecision};
use crate::proxier::plan::owners::Owners;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// One Service's decision records, per family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyDecisions {
    pub v4: Option<Arc<ServiceDecision>>,
    pub v6: Option<Arc<ServiceDecision>>,
}

impl FamilyDecisions {
    fn slot(&mut self, family: IpFamily) -> &mut Option<Arc<ServiceDecision>> {
        match family {
            IpFamily::V4 => &mut self.v4,
            IpFamily::V6 => &mut self.v6,
        }
    }

    /// The records present, IPv4 first.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ServiceDecision>> {
        self.v4.iter().chain(self.v6.iter())
    }

    /// Every annotation problem of the Service (both families' records, without repeats).
    pub fn problems(&self) -> Vec<crate::cluster::service_options::AnnotationError> {
        let mut out = Vec::new();
        for d in self.iter() {
            for p in d.problems() {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }
}

/// Every Service's decision records as of the last sync, and the claimants of the virtual servers
/// several Services plan, as the planner published them.
#[derive(Debug, Default)]
pub struct DecisionIndex {
    services: BTreeMap<ServiceName, FamilyDecisions>,
    /// Both families' (their keys differ by address); usually empty.
    shared: BTreeMap<IpvsServiceKey, Owners>,
}

impl DecisionIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one family's changes; returns the Services whose records changed.
    pub fn apply(&mut self, family: IpFamily, changes: DecisionChanges) -> BTreeSet<ServiceName> {
        match changes {
            DecisionChanges::All { records, shared } => {
                self.shared.retain(|k, _| IpFamily::of(&k.addr) != family);
                self.shared.extend(shared);
                self.apply_records(family, RecordChanges::All(records))
            }
            DecisionChanges::Changed { records, shared } => {
                for (k, o) in shared {
                    match o {
                        Some(o) => self.shared.insert(k, o),
                        None => self.shared.remove(&k),
                    };
                }
                self.apply_records(family, RecordChanges::Changed(records))
            }
        }
    }

    /// Applies one family's record changes; returns the Services whose records changed.
    fn apply_records(&mut self, family: IpFamily, changes: RecordChanges) -> BTreeSet<ServiceName> {
        let mut touched = BTreeSet::new();
        match changes {
            RecordChanges::All(all) if self.services.is_empty() => {
                // Built from the sorted records in one go: packed nodes (one insert at a time in order
                // leaves a B-tree about half full).
                touched = all.keys().cloned().collect();
                self.services = all
                    .into_iter()
                    .map(|(name, d)| {
                        let mut f = FamilyDecisions::default();
                        *f.slot(family) = Some(d);
                        (name, f)
                    })
                    .collect();
            }
            RecordChanges::All(all) => {
                let stale: Vec<ServiceName> = self
                    .services
                    .iter()
                    .filter(|(n, d)| !all.contains_key(*n) && slot_of(d, family).is_some())
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in stale {
                    self.set(family, &name, None);
                    touched.insert(name);
                }
                for (name, d) in all {
                    if self.set(family, &name, Some(d)) {
                        touched.insert(name);
                    }
                }
            }
            RecordChanges::Changed(changed) => {
                for (name, d) in changed {
                    if self.set(family, &name, d) {
                        touched.insert(name);
                    }
                }
            }
        }
        touched
    }

    /// Sets one record; true when it changed.
    fn set(
        &mut self,
        family: IpFamily,
        name: &ServiceName,
        d: Option<Arc<ServiceDecision>>,
    ) -> bool {
        let entry = self.services.entry(name.clone()).or_default();
        let slot = entry.slot(family);
        if *slot == d {
            return false;
        }
        *slot = d;
        if entry.v4.is_none() && entry.v6.is_none() {
            self.services.remove(name);
        }
        true
    }

    /// One Service's records.
    pub fn get(&self, name: &ServiceName) -> Option<&FamilyDecisions> {
        self.services.get(name)
    }

    /// Every Service with a record, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&ServiceName, &FamilyDecisions)> {
        self.services.iter()
    }

    /// Number of Services with a record.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// Whether no Service has a record.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The claimants of virtual server `key` when several Services plan it, as the planner published
    /// them (in name order, the owner last); `None` when one Service or none does.
    pub fn claimants(&self, key: &IpvsServiceKey) -> Option<&Owners> {
        self.shared.get(key)
    }

    /// Whether `name`'s virtual server `key` is the one planned: `name` is its only claimant, or the
    /// owner the planner published.
    pub fn owns(&self, name: &ServiceName, key: &IpvsServiceKey) -> bool {
        self.shared.get(key).is_none_or(|o| o.last() == Some(name))
    }

    /// The Service port and address kind each planned virtual server belongs to, keyed for a scrape's
    /// lookups; of several Services planning one, its owner's (looked up, not decided here).
    pub fn owners(&self) -> HashMap<IpvsServiceKey, (&ServicePortName, AddressKind)> {
        let mut owners = HashMap::new();
        for (name, f) in &self.services {
            for p in f.iter().flat_map(|d| d.ports.iter()) {
                for vs in p.virtual_servers.iter() {
                    if self.owns(name, &vs.key) {
                        owners.insert(vs.key, (&p.port.name, vs.kind));
                    }
                }
            }
        }
        owners
    }
}

/// One family's record changes (see [`DecisionChanges`]).
enum RecordChanges {
    All(BTreeMap<ServiceName, Arc<ServiceDecision>>),
    Changed(BTreeMap<ServiceName, Option<Arc<ServiceDecision>>>),
}

fn slot_of(d: &FamilyDecisions, family: IpFamily) -> Option<&Arc<ServiceDecision>> {
    match family {
        IpFamily::V4 => d.v4.as_ref(),
        IpFamily::V6 => d.v6.as_ref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::{EndpointsMap, Protocol, ServiceMap, ServicePort};
    use crate::proxier::plan::incremental::IncrementalPlanner;
    use crate::proxier::plan::{NodeFacts, PlanConfig};
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn name(n: &str) -> ServiceName {
        ServiceName {
            namespace: "ns".into(),
            name: n.into(),
        }
    }

    /// Service `n`'s port 80: its own ClusterIP and the external IP every Service here shares.
    fn port(n: &str, cluster_ip: &str) -> (ServicePortName, Arc<ServicePort>) {
        let spn = ServicePortName::tcp("ns", n, "");
        let sp = ServicePort {
            external_ips: vec![ip("203.0.113.9")],
            ..ServicePort::new(spn.clone(), vec![ip(cluster_ip)], 80)
        };
        (spn, Arc::new(sp))
    }

    /// The sync loop's planner and the published index, driven one Service change at a time.
    struct Loop {
        sm: ServiceMap,
        planner: IncrementalPlanner,
        index: DecisionIndex,
    }

    impl Loop {
        /// Adds (`Some(cluster IP)`) or deletes Service `n`, replans it alone and publishes the delta.
        fn change(&mut self, n: &str, cluster_ip: Option<&str>) {
            let (spn, sp) = port(n, cluster_ip.unwrap_or("10.96.0.99"));
            match cluster_ip {
                Some(_) => self.sm.insert(spn, sp),
                None => self.sm.remove(&spn),
            };
            let changed = BTreeSet::from([name(n)]);
            let node = NodeFacts::new("n1", vec![ip("192.168.0.10")]);
            let cfg = PlanConfig::new(IpFamily::V4);
            let em = EndpointsMap::new();
            let (_, mut delta) = self
                .planner
                .update(&self.sm, &em, &node, &cfg, Some(&changed));
            assert!(!delta.full, "{n}: replanned alone");
            self.index
                .apply(IpFamily::V4, delta.take_decision_changes());
        }

        /// The published claimants of the shared virtual server, and the Service its traffic names.
        fn shared(&self) -> (Vec<&str>, String) {
            let key = IpvsServiceKey {
                addr: ip("203.0.113.9"),
                port: 80,
                protocol: Protocol::Tcp,
            };
            let claimants = self.index.claimants(&key);
            let names = claimants.iter().flat_map(|o| o.iter());
            let owners = self.index.owners();
            let owner = owners.get(&key).map(|(p, _)| p.name.to_string());
            (names.map(|n| &*n.name).collect(), owner.unwrap_or_default())
        }
    }

    #[test]
    fn published_owner_follows_services_as_they_come_and_go() {
        let mut sm = ServiceMap::new();
        let (spn, sp) = port("b", "10.96.0.2");
        sm.insert(spn, sp);
        let mut planner = IncrementalPlanner::new();
        let node = NodeFacts::new("n1", vec![ip("192.168.0.10")]);
        let (state, _) = planner.update(
            &sm,
            &EndpointsMap::new(),
            &node,
            &PlanConfig::new(IpFamily::V4),
            None,
        );
        let mut index = DecisionIndex::new();
        index.apply(IpFamily::V4, state.decision_changes());
        let mut l = Loop { sm, planner, index };
        assert_eq!(l.shared(), (vec![], "b".into()), "one claimant: no list");
        l.change("a", Some("10.96.0.1"));
        assert_eq!(l.shared(), (vec!["a", "b"], "b".into()));
        l.change("c", Some("10.96.0.3"));
        assert_eq!(l.shared(), (vec!["a", "b", "c"], "c".into()));
        l.change("c", None);
        assert_eq!(
            l.shared(),
            (vec!["a", "b"], "b".into()),
            "the runner-up owns it"
        );
        l.change("b", None);
        assert_eq!(l.shared(), (vec![], "a".into()));
        l.change("b", Some("10.96.0.2"));
        assert_eq!(l.shared(), (vec!["a", "b"], "b".into()));
        l.change("a", None);
        l.change("b", None);
        assert_eq!(l.shared(), (vec![], String::new()), "no claimant: no owner");
        assert!(l.index.is_empty());
    }
}
