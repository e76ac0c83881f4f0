//! Member changes applied to the kernel in batches and counted: shared by the ipset reconciler and the
//! grow-and-swap of a set that outgrew its size.

use crate::kernel::ipset::{IpSetOp, IpSets};
use crate::proxier::report::{FailureKind, SyncReport};

/// Most member changes held at once: beyond, they are applied before more are built (a first sync's
/// changes are the sets' whole contents, ~110 bytes each).
pub(super) const IPSET_BATCH: usize = 8192;

/// Applies member changes in one call and counts the results; false if the call failed.
pub(super) fn apply_ops(ipsets: &mut dyn IpSets, ops: &[IpSetOp], report: &mut SyncReport) -> bool {
    if ops.is_empty() {
        return true;
    }
    match ipsets.apply(ops) {
        Ok(r) => {
            let is_add = |op: &IpSetOp| matches!(op, IpSetOp::Add { .. });
            let adds = ops.iter().filter(|op| is_add(op)).count();
            let rejected_adds = r.rejected.iter().filter(|(op, _)| is_add(op)).count();
            report.ipset_entries.added += adds - rejected_adds;
            report.ipset_entries.deleted += (ops.len() - adds) - (r.rejected.len() - rejected_adds);
            for (op, why) in &r.rejected {
                tracing::error!(?op, reason = %why, "Error adding entry to ipset");
            }
            // Invalid entries stay invalid: counted, not retried before the next full sync.
            *report
                .failures
                .entry(FailureKind::IpsetRejected)
                .or_default() += r.rejected.len();
            true
        }
        Err(e) => {
            tracing::error!(error = %e, ops = ops.len(), "Failed to apply ipset changes");
            report.fail(FailureKind::Ipset);
            false
        }
    }
}
