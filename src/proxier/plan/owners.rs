//! The Services that contribute one virtual server, sorted by name: almost always one, kept inline then.

use crate::cluster::model::ServiceName;

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
