//! The iptables payload and the jumps from built-in chains.

use super::{Backends, FamilyInput, Reconciler};
use crate::cluster::model::IpFamily;
use crate::kernel::iptables::rules;
use crate::proxier::desired::JumpRule;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::BTreeSet;
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
            let present = present_jumps(k, family, &f.desired.jumps);
            let mut ok = true;
            for jump in &f.desired.jumps {
                if present.as_ref().is_some_and(|p| p.contains(jump)) {
                    continue;
                }
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

/// The jumps that already exist (with their target chain), read from one `iptables-save` per table instead of
/// one `-N` and one `-C` process per jump: process starts dominate a sync on a slow machine. `None` when a
/// table could not be read; the caller then checks every jump one by one.
fn present_jumps(
    k: &mut Backends,
    family: IpFamily,
    jumps: &[JumpRule],
) -> Option<BTreeSet<JumpRule>> {
    let tables: BTreeSet<&'static str> = jumps.iter().map(|j| j.table).collect();
    let mut present = BTreeSet::new();
    for table in tables {
        let saved = k.iptables.save(family, table).ok()?;
        let mut chains = BTreeSet::new();
        let mut found = BTreeSet::new();
        for line in saved.lines() {
            if let Some(decl) = line.strip_prefix(':') {
                chains.insert(
                    decl.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
            } else if line.starts_with("-A ") {
                let Ok(words) = rules::tokenize(line) else {
                    continue;
                };
                let Some(chain) = words.get(1) else { continue };
                if let Ok(norm) = rules::normalize(&words[2..], family) {
                    found.insert((chain.clone(), norm));
                }
            }
        }
        for jump in jumps.iter().filter(|j| j.table == table) {
            let Ok(want) = rules::normalize(&jump.args(), family) else {
                continue;
            };
            if chains.contains(jump.target) && found.contains(&(jump.chain.to_string(), want)) {
                present.insert(jump.clone());
            }
        }
    }
    Some(present)
}
