//! The decision records of the last sync, published for readers outside the sync loop (the explanation
//! on `/debug/services`, the traffic metrics' scrape). The sync loop applies each sync's changes, so
//! publishing costs O(changed services); readers take a short read lock.

use crate::cluster::model::{ServiceName, ServicePortName};
use crate::kernel::ipvs::IpvsServiceKey;
use crate::net::IpFamily;
use crate::proxier::plan::decision::{AddressKind, DecisionChanges, ServiceDecision};
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

/// Every Service's decision records as of the last sync.
#[derive(Debug, Default)]
pub struct DecisionIndex {
    services: BTreeMap<ServiceName, FamilyDecisions>,
}

impl DecisionIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one family's changes; returns the Services whose records changed.
    pub fn apply(&mut self, family: IpFamily, changes: DecisionChanges) -> BTreeSet<ServiceName> {
        let mut touched = BTreeSet::new();
        match changes {
            DecisionChanges::All(all) if self.services.is_empty() => {
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
            DecisionChanges::All(all) => {
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
            DecisionChanges::Changed(changed) => {
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

    /// The Service port and address kind each planned virtual server belongs to; when two Service ports
    /// claim the same address:port, the greater name owns it, as in the plan.
    pub fn owners(&self) -> HashMap<IpvsServiceKey, (&ServicePortName, AddressKind)> {
        let mut owners = HashMap::new();
        for d in self.services.values().flat_map(FamilyDecisions::iter) {
            for p in d.ports.iter() {
                for vs in p.virtual_servers.iter() {
                    owners.insert(vs.key, (&p.port.name, vs.kind));
                }
            }
        }
        owners
    }
}

fn slot_of(d: &FamilyDecisions, family: IpFamily) -> Option<&Arc<ServiceDecision>> {
    match family {
        IpFamily::V4 => d.v4.as_ref(),
        IpFamily::V6 => d.v6.as_ref(),
    }
}
