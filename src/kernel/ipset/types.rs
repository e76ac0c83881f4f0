//! What a backend knows about existing sets (type and family, or a foreign type name), and the check of
//! one op against it: the same validation for the CLI and the netlink backends.

use super::entry::{EntryError, IpSetEntry};
use super::save::parse_type;
use super::{IpSetOp, IpSetSpec, IpSetType};
use crate::net::IpFamily;
use std::collections::BTreeMap;

/// Sets seen so far (created, saved or listed).
#[derive(Debug, Clone, Default)]
pub struct SetTypes {
    /// Type and family of sets kube-proxy can manage; bitmap sets have no family.
    pub known: BTreeMap<String, (IpSetType, Option<IpFamily>)>,
    /// Sets whose type kube-proxy does not use (entries for them are rejected), with that type's name.
    pub foreign: BTreeMap<String, String>,
}

/// Moves the value under `a` to `b` and the one under `b` to `a`.
fn swap_keys<V>(map: &mut BTreeMap<String, V>, a: &str, b: &str) {
    let (va, vb) = (map.remove(a), map.remove(b));
    if let Some(v) = va {
        map.insert(b.to_string(), v);
    }
    if let Some(v) = vb {
        map.insert(a.to_string(), v);
    }
}

/// The set an op targets.
pub fn op_set(op: &IpSetOp) -> &str {
    let (IpSetOp::Add { set, .. } | IpSetOp::Del { set, .. }) = op;
    set
}

impl SetTypes {
    /// Records a set of type `type_name` (as ipset names it) and family.
    pub fn learn(&mut self, name: &str, type_name: &str, family: Option<IpFamily>) {
        match parse_type(type_name) {
            Some(t) => {
                let family = (t != IpSetType::BitmapPort).then_some(family).flatten();
                self.foreign.remove(name);
                self.known.insert(name.to_string(), (t, family));
            }
            None => {
                self.known.remove(name);
                self.foreign.insert(name.to_string(), type_name.to_string());
            }
        }
    }

    /// Records a set just created from `spec`.
    pub fn learn_spec(&mut self, spec: &IpSetSpec) {
        let family = (spec.set_type != IpSetType::BitmapPort).then_some(spec.family);
        self.foreign.remove(&spec.name);
        self.known
            .insert(spec.name.clone(), (spec.set_type, family));
    }

    /// Records that sets `a` and `b` exchanged names.
    pub fn swap(&mut self, a: &str, b: &str) {
        swap_keys(&mut self.known, a, b);
        swap_keys(&mut self.foreign, a, b);
    }

    /// Forgets a set (destroyed or vanished).
    pub fn forget(&mut self, name: &str) {
        self.known.remove(name);
        self.foreign.remove(name);
    }

    /// Whether some op targets a set not known to be ours.
    pub fn any_unknown(&self, ops: &[IpSetOp]) -> bool {
        ops.iter().any(|op| !self.known.contains_key(op_set(op)))
    }

    /// The op's entry parsed for its set's type and family, or why the kernel would refuse it.
    pub fn check(&self, op: &IpSetOp) -> Result<IpSetEntry, CheckError> {
        let (IpSetOp::Add { set, entry } | IpSetOp::Del { set, entry }) = op;
        match self.known.get(set) {
            Some((t, fam)) => Ok(IpSetEntry::parse(*t, fam.unwrap_or(IpFamily::V4), entry)?),
            None => match self.foreign.get(set) {
                Some(t) => Err(CheckError::Foreign {
                    set: set.clone(),
                    type_name: t.clone(),
                }),
                None => Err(CheckError::NoSuchSet(set.clone())),
            },
        }
    }
}

/// Why an op was refused before it reached the kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The member does not fit the set's type and family.
    #[error(transparent)]
    Entry(#[from] EntryError),
    /// The set has a type kube-proxy does not use.
    #[error("set {set} has type {type_name}, which kube-proxy does not manage")]
    Foreign { set: String, type_name: String },
    /// No such set (the kernel's wording).
    #[error("The set with the given name does not exist: {0}")]
    NoSuchSet(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn check_errors_keep_the_entry_error_and_its_cause() {
        let mut types = SetTypes::default();
        types.known.insert(
            "KUBE-CLUSTER-IP".into(),
            (IpSetType::HashIpPort, Some(IpFamily::V4)),
        );
        types.foreign.insert("theirs".into(), "list:set".into());
        let op = |set: &str, entry: &str| IpSetOp::Add {
            set: set.into(),
            entry: entry.into(),
        };
        let e = types
            .check(&op("KUBE-CLUSTER-IP", "10.0.0.1,tcp:99999"))
            .unwrap_err();
        assert_eq!(e.to_string(), "port 99999 out of range 0-65535");
        assert!(matches!(e, CheckError::Entry(EntryError::PortRange { .. })));
        assert!(
            e.source()
                .is_some_and(|c| c.is::<std::num::ParseIntError>())
        );
        let e = types.check(&op("theirs", "x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "set theirs has type list:set, which kube-proxy does not manage"
        );
        let e = types.check(&op("gone", "x")).unwrap_err();
        assert_eq!(e, CheckError::NoSuchSet("gone".into()));
    }
}
