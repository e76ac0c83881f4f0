//! The Services that contribute one virtual server, sorted by name: almost always one, kept inline then.
//! The planner publishes the claimants of every virtual server several Services plan
//! ([`DesiredState::shared`](crate::proxier::desired::DesiredState::shared)): readers look the owner up.

use crate::cluster::model::ServiceName;
use crate::kernel::ipvs::IpvsServiceKey;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

/// Sorted, each name once, never empty; inline when there is one (a map entry per virtual server: a
/// `Vec` would cost an allocation each, ~0.5 MiB at 10k Services).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owners {
    One(ServiceName),
    Many(Vec<ServiceName>),
}

impl Owners {
    /// The greatest name: the Service whose virtual server is planned.
    pub fn last(&self) -> Option<&ServiceName> {
        match self {
            Owners::One(n) => Some(n),
            Owners::Many(v) => v.last(),
        }
    }

    /// Whether several Services plan this virtual server.
    pub fn is_shared(&self) -> bool {
        matches!(self, Owners::Many(v) if v.len() > 1)
    }

    /// Every claimant, in name order (the owner last).
    pub fn iter(&self) -> impl Iterator<Item = &ServiceName> {
        match self {
            Owners::One(n) => std::slice::from_ref(n).iter(),
            Owners::Many(v) => v.iter(),
        }
    }

    /// Adds `name` in order (once).
    pub fn insert(&mut self, name: &ServiceName) {
        match self {
            Owners::One(n) if n == name => {}
            Owners::One(n) => {
                let mut v = vec![n.clone(), name.clone()];
                v.sort();
                *self = Owners::Many(v);
            }
            Owners::Many(v) => {
                if let Err(i) = v.binary_search(name) {
                    v.insert(i, name.clone());
                }
            }
        }
    }

    /// Removes `name`; false when none is left (the caller drops the entry).
    pub fn remove(&mut self, name: &ServiceName) -> bool {
        match self {
            Owners::One(n) => n != name,
            Owners::Many(v) => {
                if let Ok(i) = v.binary_search(name) {
                    v.remove(i);
                }
                if let [one] = v.as_slice() {
                    *self = Owners::One(one.clone());
                }
                true
            }
        }
    }
}

/// The claimants of every virtual server claimed by more than one Service, from every claim (a Service
/// and a key it plans, in any order) of a whole plan that programs `planned` virtual servers. No map is
/// built when no key is claimed twice.
pub(super) fn shared_of<'a>(
    claims: impl Iterator<Item = (&'a ServiceName, IpvsServiceKey)> + Clone,
    planned: usize,
) -> BTreeMap<IpvsServiceKey, Owners> {
    if claims.clone().count() == planned {
        return BTreeMap::new();
    }
    let mut claimants: HashMap<IpvsServiceKey, Owners> = HashMap::new();
    for (name, key) in claims {
        match claimants.entry(key) {
            Entry::Occupied(mut o) => o.get_mut().insert(name),
            Entry::Vacant(v) => {
                v.insert(Owners::One(name.clone()));
            }
        }
    }
    claimants.retain(|_, o| o.is_shared());
    claimants.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> ServiceName {
        ServiceName {
            namespace: "ns".into(),
            name: s.into(),
        }
    }

    #[test]
    fn owners_stay_sorted_and_go_back_inline() {
        let mut o = Owners::One(n("b"));
        o.insert(&n("b"));
        assert_eq!(o, Owners::One(n("b")));
        o.insert(&n("c"));
        o.insert(&n("a"));
        assert_eq!(o, Owners::Many(vec![n("a"), n("b"), n("c")]));
        assert_eq!(o.last(), Some(&n("c")));
        assert!(o.remove(&n("c")) && o.remove(&n("x")));
        assert_eq!(o.last(), Some(&n("b")));
        assert!(o.remove(&n("a")));
        assert_eq!(o, Owners::One(n("b")));
        assert!(o.remove(&n("x")));
        assert!(!o.remove(&n("b")));
        assert!(
            std::mem::size_of::<Owners>() <= 32,
            "{}",
            std::mem::size_of::<Owners>()
        );
    }
}
