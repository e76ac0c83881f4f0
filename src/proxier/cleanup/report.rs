//! What a cleanup did ([`CleanupReport`]), and the two iptables steps every mode's cleanup shares.

use crate::kernel::iptables::Iptables;
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use std::collections::BTreeSet;

/// What cleanup removed, what failed, and what looked like ours but was not and stayed.
#[derive(Debug, Default)]
pub struct CleanupReport {
    /// Objects removed, e.g. `ipset KUBE-CLUSTER-IP`.
    pub removed: Vec<String>,
    /// Failures, each naming its object.
    pub failures: Vec<String>,
    /// Objects left in place because they are not kube-proxy's, each with the reason.
    pub kept: Vec<String>,
}

/// Some part of cleanup failed (the daemon exits non-zero).
#[derive(Debug, thiserror::Error)]
#[error("cleanup failed: {}", .0.failures.join("; "))]
pub struct CleanupError(pub CleanupReport);

impl CleanupReport {
    pub(super) fn record(&mut self, what: String, r: KernelResult<bool>) {
        match r {
            Ok(true) => self.removed.push(what),
            Ok(false) | Err(KernelError::NotFound(_)) => {}
            Err(e) => self.failures.push(format!("{what}: {e}")),
        }
    }

    /// Ok when nothing failed.
    pub fn into_result(self) -> Result<CleanupReport, CleanupError> {
        if self.failures.is_empty() {
            Ok(self)
        } else {
            Err(CleanupError(self))
        }
    }
}

/// Chain names declared in `iptables-save` output (`:NAME POLICY [..]` lines).
pub(super) fn declared_chains(save: &str) -> BTreeSet<String> {
    save.lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// Deletes the jump `-A <chain> <args>` (`args` ending with `-j <target>`) and any duplicate of it.
pub(super) fn delete_jump(
    iptables: &mut dyn Iptables,
    family: IpFamily,
    table: &str,
    chain: &str,
    args: &[&str],
    r: &mut CleanupReport,
) {
    let target = args.last().copied().unwrap_or_default();
    let what = format!("{} {table} {chain} -j {target}", family.label());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    // Bounded, in case the backend keeps answering true.
    for _ in 0..16 {
        match iptables.delete_rule(family, table, chain, &args) {
            Ok(true) => r.removed.push(what.clone()),
            Ok(false) | Err(KernelError::NotFound(_)) => break,
            Err(e) => {
                r.failures.push(format!("{what}: {e}"));
                break;
            }
        }
    }
}
