//! Growing a set of ours whose planned members need a larger `maxelem` than its kernel set has.
//!
//! Upstream creates every hash set with `maxelem 65536` and fails to add past it (kubernetes#129389);
//! the planner sizes each set from its members instead ([`size_for`]). The kernel cannot change the size
//! of a set, and a set that iptables rules match cannot be destroyed, so the set is rebuilt beside the
//! old one and swapped in: a staging set ([`staging_name`]) is created at the planned size and filled
//! with every planned member, `ipset swap` exchanges the two names in one kernel step, and the old set,
//! now under the staging name, is destroyed. Rules refer to a set by its slot in the kernel's table and
//! the swap exchanges what the slots hold, under the kernel's lock: every packet is matched against
//! either the old set or the new one, and both hold every member the old one held that the plan still
//! wants, so no packet ever misses its match.
//!
//! A failure before the swap leaves the old set untouched (the staging set is destroyed): the sync then
//! applies to it what fits, counts the failure, and the next (full) sync tries again. A staging set left
//! by a process that stopped mid-grow is destroyed by the next full sync.
//!
//! [`size_for`]: crate::proxier::plan::ipsets::size_for

use super::FamilyInput;
use super::Snapshot;
use super::ipset_apply::{IPSET_BATCH, apply_ops};
use crate::kernel::KernelError;
use crate::kernel::ipset::{IpSetOp, IpSetSize, IpSetSpec, IpSetType, IpSets};
use crate::proxier::desired::DesiredIpSet;
use crate::proxier::plan::ipsets::staging_name;
use crate::proxier::report::{FailureKind, SyncReport};

/// Whether the planned set needs more room than its kernel set, of size `kernel`, has (sets never
/// shrink: a set larger than planned stays as it is).
pub(super) fn needs_growing(set: &DesiredIpSet, kernel: IpSetSize) -> bool {
    set.spec.set_type != IpSetType::BitmapPort && kernel.maxelem < set.spec.size.maxelem
}

/// Grows `set` to its planned size, holding its planned members; true when it now does. A failure is
/// logged and counted in `report`, and leaves the kernel's set as it was.
pub(super) fn grow(ipsets: &mut dyn IpSets, set: &DesiredIpSet, report: &mut SyncReport) -> bool {
    let name = &set.spec.name;
    let staging = IpSetSpec {
        name: staging_name(name),
        ..set.spec.clone()
    };
    tracing::info!(
        ipSet = %name,
        members = set.entries.len(),
        maxelem = staging.size.maxelem,
        hashsize = staging.size.hashsize,
        "Growing ip set: filling a larger one and swapping it in"
    );
    if let Err(e) = discard(ipsets, &staging.name) {
        tracing::error!(ipSet = %staging.name, error = %e, "Failed to destroy a staging ip set");
        report.fail(FailureKind::Ipset);
        return false;
    }
    let filled = match ipsets.create(&staging) {
        Ok(()) => fill(ipsets, &staging.name, set, report),
        Err(e) => {
            tracing::error!(ipSet = %staging.name, error = %e, "Failed to create a staging ip set");
            report.fail(FailureKind::Ipset);
            false
        }
    };
    let swapped = filled
        && ipsets.swap(name, &staging.name).map_or_else(
            |e| {
                tracing::error!(ipSet = %name, error = %e, "Failed to swap a grown ip set in");
                report.fail(FailureKind::Ipset);
                false
            },
            |()| true,
        );
    // After the swap the staging name holds the old set; before it, the unfinished new one.
    if let Err(e) = discard(ipsets, &staging.name) {
        tracing::error!(ipSet = %staging.name, error = %e, "Failed to destroy a staging ip set");
        report.fail(FailureKind::Ipset);
    }
    if swapped {
        report.ipsets_grown += 1;
    }
    swapped
}

/// Adds every planned member of `set` to the staging set `staging`, [`IPSET_BATCH`] at a time; false
/// when an apply failed (counted). Entries the kernel refuses are counted and would be refused by the
/// old set as well.
fn fill(ipsets: &mut dyn IpSets, staging: &str, set: &DesiredIpSet, r: &mut SyncReport) -> bool {
    let mut ops = Vec::with_capacity(IPSET_BATCH.min(set.entries.len()));
    for e in &set.entries {
        ops.push(IpSetOp::Add {
            set: staging.to_string(),
            entry: e.clone(),
        });
        if ops.len() == IPSET_BATCH {
            if !apply_ops(ipsets, &ops, r) {
                return false;
            }
            ops.clear();
        }
    }
    apply_ops(ipsets, &ops, r)
}

/// Destroys set `name` if it exists.
fn discard(ipsets: &mut dyn IpSets, name: &str) -> Result<(), KernelError> {
    match ipsets.destroy(name) {
        Ok(()) | Err(KernelError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Full syncs: destroys the staging sets of planned sets that the dump shows (a process stopped
/// mid-grow), and drops them from the dump.
pub(super) fn remove_staging_leftovers(
    ipsets: &mut dyn IpSets,
    families: &[FamilyInput<'_>],
    snap: &mut Snapshot,
    report: &mut SyncReport,
) {
    let Some(members) = snap.ipsets.as_mut() else {
        return;
    };
    let planned = families.iter().flat_map(|f| f.desired.ipsets.keys());
    for staging in planned.map(|n| staging_name(n)) {
        if !snap.ipset_headers.contains_key(&staging) {
            continue;
        }
        tracing::warn!(ipSet = %staging, "Destroying a staging ip set left by an unfinished grow");
        match discard(ipsets, &staging) {
            Ok(()) => {
                members.remove(&staging);
                snap.ipset_headers.remove(&staging);
            }
            Err(e) => {
                tracing::error!(ipSet = %staging, error = %e, "Failed to destroy a staging ip set");
                report.fail(FailureKind::Ipset);
            }
        }
    }
}

#[cfg(test)]
#[path = "ipset_grow_tests.rs"]
mod tests;
