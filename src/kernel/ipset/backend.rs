//! The backend trait every ipset backend implements, and what an apply reports.

use super::save;
use super::spec::{IpSetOp, IpSetSpec};
use crate::kernel::KernelResult;
use std::collections::{BTreeMap, BTreeSet};

/// What an apply did: entries rejected before writing are reported, the rest applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub applied: usize,
    /// (op, reason) for every op skipped as invalid.
    pub rejected: Vec<(IpSetOp, String)>,
}

/// The kernel's ipsets.
pub trait IpSets: Send {
    /// Creates the set if missing (`-exist`).
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()>;
    /// Creates every set in `specs` if missing; the default creates them one by one, the real backends in
    /// one batch (one datagram, or one `ipset restore -exist`). On error, some of the sets may exist.
    fn create_all(&mut self, specs: &[IpSetSpec]) -> KernelResult<()> {
        specs.iter().try_for_each(|spec| self.create(spec))
    }
    /// Every set's header (type and family) and members, as `ipset save` shows them (one dump).
    fn dump(&mut self) -> KernelResult<save::SavedSets>;
    /// Every set with its members, as `ipset save` shows them (one dump).
    fn save_all(&mut self) -> KernelResult<BTreeMap<String, BTreeSet<String>>> {
        Ok(self.dump()?.members)
    }
    /// Applies all ops in one batch with `-exist` semantics; invalid or refused entries are reported, the
    /// rest applied.
    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport>;
    /// Destroys one set.
    fn destroy(&mut self, name: &str) -> KernelResult<()>;
    /// Exchanges the names of sets `a` and `b` in one kernel step (`ipset swap`): rules that match `a`
    /// match the other set from then on, with no moment where they match neither. Both sets must have the
    /// same type and family; their sizes may differ.
    fn swap(&mut self, a: &str, b: &str) -> KernelResult<()>;
}
