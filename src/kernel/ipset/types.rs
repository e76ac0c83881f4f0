//! What a backend knows about existing sets (type and family, or a foreign type name), and the check of
//! one op against it: the same validation for the CLI and the netlink backends.

use super::entry::IpSetEntry;
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
    pub fn check(&self, op: &IpSetOp) -> Result<IpSetEntry, String> {
        let (IpSetOp::Add { set, entry } | IpSetOp::Del { set, entry }) = op;
        match self.known.get(set) {
            Some((t, fam)) => IpSetEntry::parse(*t, fam.unwrap_or(IpFamily::V4), entry),
            None => match self.foreign.get(set) {
                Some(t) => Err(format!(
                    "set {set} has type {t}, which kube-proxy does not manage"
                )),
                None => Err(format!("The set with the given name does not exist: {set}")),
            },
        }
    }
}
