//! The iptables payload and the jumps from built-in chains.

use super::{Backends, FamilyInput, Reconciler};
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::time::Instant;

impl Reconciler {
    /// Restores the payload when it changed (or on a full sync), then ensures the jumps. Returns whether IPVS
    /// services of this family may be programmed: false only when no payload was ever restored.
    pub(super) fn sync_iptables(
        &mut self,
        k: &mut Backends,
        f: &FamilyInput<'_>,
        full: bool,
        report: &mut SyncReport,
    ) -> bool {
        let start = Instant::now();
        let family = f.desired.family;
        let applied = self.applied.entry(family).or_default();
        let payload = &f.desired.iptables_payload;
        let changed = applied.iptables_payload.as_deref() != Some(payload.as_str());
        if full || changed {
            match k.iptables.restore(family, payload) {
                Ok(()) => {
                    report.iptables_restores += 1;
                    applied.iptables_payload = Some(payload.clone());
                }
                Err(e) => {
                    // The kernel keeps the rules it had: nothing is flushed.
                    tracing::warn!(family = family.label(), error = %e, "iptables-restore failed");
                    report.fail(FailureKind::IptablesRestore);
                }
            }
        }
        let serve = applied.iptables_payload.is_some();
        if full || changed || !applied.jumps_ok {
            let mut ok = true;
            for jump in &f.desired.jumps {
                let res = k
                    .iptables
                    .ensure_chain(family, jump.table, jump.target)
                    .and_then(|()| {
                        k.iptables
                            .ensure_rule_first(family, jump.table, jump.chain, &jump.args())
                    });
                match res {
                    Ok(true) => report.jumps_inserted += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(family = family.label(), chain = jump.chain, target = jump.target,
                            error = %e, "jump rule failed");
                        report.fail(FailureKind::IptablesJump);
                        ok = false;
                    }
                }
            }
            applied.jumps_ok = ok;
        }
        report.add_step(SyncStep::Iptables, start.elapsed());
        serve
    }
}
