//! The streak of consecutive full syncs that had to repair drift, and when it warrants a Warning Event.

use crate::proxier::drift_report::{DriftKind, DriftReport};
use std::collections::BTreeSet;

/// Consecutive full syncs with repairs that raise the Warning Event.
pub const RECURRING: u32 = 3;

/// The current streak of full syncs that had to repair drift.
#[derive(Debug, Default)]
pub struct DriftStreak {
    syncs: u32,
    kinds: BTreeSet<DriftKind>,
    /// Kinds already named in a Warning Event during this streak.
    warned: BTreeSet<DriftKind>,
}

impl DriftStreak {
    /// Adds one full sync's repairs; returns the kinds to warn about when the streak reached
    /// [`RECURRING`] and has kinds not warned about yet (a clean sync ends the streak).
    pub fn observe(&mut self, drift: &DriftReport) -> Option<BTreeSet<DriftKind>> {
        if drift.is_empty() {
            *self = DriftStreak::default();
            return None;
        }
        self.syncs += 1;
        self.kinds.extend(drift.counts.keys().copied());
        if self.syncs < RECURRING || self.kinds.is_subset(&self.warned) {
            return None;
        }
        self.warned.clone_from(&self.kinds);
        Some(self.kinds.clone())
    }

    /// Full syncs in a row that had repairs.
    pub fn syncs(&self) -> u32 {
        self.syncs
    }
}
