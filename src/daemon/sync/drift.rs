//! After each full sync: its drift repairs counted by kind, attributed to the Services they touched
//! (published for the explanation), and a Warning Event on the Node when repairs recur in
//! [`RECURRING`](super::streak::RECURRING) consecutive full syncs: another tool is fighting kube-proxy on this node.

use super::state::SyncLoop;
use crate::explain::drift::attribute;
use crate::proxier::SyncReport;
use crate::proxier::drift_report::DriftKind;
use std::collections::BTreeSet;
use std::time::SystemTime;

/// Reason of the Warning Event on the Node.
pub const EVENT_REASON: &str = "RecurringDrift";

/// The Event's note for repairs of `kinds` recurring over `syncs` full syncs.
pub fn note(kinds: &BTreeSet<DriftKind>, syncs: u32) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.label()).collect();
    format!(
        "{syncs} consecutive full syncs repaired kernel state changed behind kube-proxy's back ({}): \
         another tool is changing IPVS, ipsets, iptables rules or kube-ipvs0 addresses on this node",
        names.join(", ")
    )
}

impl SyncLoop {
    /// Publishes what a full sync repaired and raises the recurring-drift Event.
    pub(super) fn observe_drift(&mut self, r: &SyncReport) {
        let services = {
            let index = self
                .published
                .index
                .read()
                .unwrap_or_else(|p| p.into_inner());
            attribute(&index, &r.drift)
        };
        if !r.drift.is_empty() {
            tracing::info!(repairs = ?r.drift.counts, services = services.len(),
                "full sync repaired drift");
        }
        {
            let mut marks = self
                .published
                .drift
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            marks.at = Some(SystemTime::now());
            marks.services = services;
            marks.counts = r.drift.counts.clone();
        }
        let warn = self.drift_streak.observe(&r.drift);
        let syncs = self.drift_streak.syncs();
        self.state_metrics
            .observe_full_sync(&r.drift, r.foreign.as_ref(), syncs);
        if let Some(kinds) = warn {
            let note = note(&kinds, syncs);
            tracing::warn!("{note}");
            self.events.warning(EVENT_REASON, "Sync", Some(note));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::streak::DriftStreak;
    use super::*;
    use crate::proxier::drift_report::DriftReport;

    fn drift(kinds: &[DriftKind]) -> DriftReport {
        let mut d = DriftReport::default();
        for k in kinds {
            d.add(*k, 1);
        }
        d
    }

    #[test]
    fn repairs_in_three_consecutive_full_syncs_warn_once_per_new_kind() {
        let mut s = DriftStreak::default();
        let vs = drift(&[DriftKind::VirtualServer]);
        assert_eq!(s.observe(&vs), None);
        assert_eq!(s.observe(&drift(&[DriftKind::Scheduler])), None);
        let warned = s.observe(&vs).expect("third sync in a row warns");
        assert_eq!(
            warned,
            BTreeSet::from([DriftKind::VirtualServer, DriftKind::Scheduler])
        );
        assert_eq!(s.syncs(), 3);
        // Same kinds again: no new Event.
        assert_eq!(s.observe(&vs), None);
        // A new kind in the same streak: warned again.
        assert!(s.observe(&drift(&[DriftKind::Address])).is_some());
        // A clean sync ends the streak.
        assert_eq!(s.observe(&DriftReport::default()), None);
        assert_eq!(s.syncs(), 0);
        assert_eq!(s.observe(&vs), None);
        let n = note(&BTreeSet::from([DriftKind::IpsetMember]), 3);
        assert!(
            n.contains("3 consecutive") && n.contains("ipset_member"),
            "{n}"
        );
    }
}
