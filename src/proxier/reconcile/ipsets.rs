//! ipsets: create missing sets, then one `IpSets::apply` with every member change of every family.

use super::{FamilyInput, Reconciler, Snapshot};
use crate::kernel::ipset::IpSetOp;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

impl Reconciler {
    pub(super) fn sync_ipsets(
        &mut self,
        k: &mut super::Backends,
        families: &[FamilyInput<'_>],
        snap: &Snapshot,
        report: &mut SyncReport,
    ) {
        let start = Instant::now();
        let empty = BTreeSet::new();
        let mut ops = Vec::new();
        // Per family, the member lists we expect once `ops` are applied.
        // Event-driven syncs with a delta patch the applied members instead (set, adds, dels).
        type Patch = (String, Vec<String>, Vec<String>);
        type Expected = (
            crate::cluster::model::IpFamily,
            BTreeMap<String, BTreeSet<String>>,
            Vec<Patch>,
        );
        let mut expected: Vec<Expected> = Vec::new();
        // Missing sets of every family are created together (one process with the real backend); should
        // that fail, each set is tried on its own below so one bad set cannot block the others.
        let missing: Vec<_> = families
            .iter()
            .flat_map(|f| {
                let current = snap
                    .ipsets
                    .as_ref()
                    .or_else(|| self.applied.get(&f.desired.family).map(|a| &a.ipsets));
                f.desired
                    .ipsets
                    .iter()
                    .filter(move |(name, _)| current.is_none_or(|c| !c.contains_key(*name)))
                    .map(|(_, set)| set.spec.clone())
            })
            .collect();
        let created_together = !missing.is_empty() && k.ipsets.create_all(&missing).is_ok();
        for f in families {
            let applied = self.applied.entry(f.desired.family).or_default();
            let scope = match snap.ipsets {
                Some(_) => None,
                None => self.changes.get(&f.desired.family).filter(|c| !c.full),
            };
            let current = snap.ipsets.as_ref().unwrap_or(&applied.ipsets);
            let mut next = BTreeMap::new();
            let mut patches = Vec::new();
            for (name, set) in &f.desired.ipsets {
                let members = match current.get(name) {
                    Some(m) => m,
                    None => {
                        let res = if created_together {
                            Ok(())
                        } else {
                            k.ipsets.create(&set.spec)
                        };
                        if let Err(e) = res {
                            tracing::warn!(set = %name, error = %e, "ipset create failed");
                            report.fail(FailureKind::Ipset);
                            continue;
                        }
                        report.ipsets_created += 1;
                        &empty
                    }
                };
                // A set just created gets all its members below, whatever the delta says.
                if let Some(c) = scope.filter(|_| current.contains_key(name)) {
                    let dels: Vec<String> = c
                        .set_dels
                        .get(name)
                        .into_iter()
                        .flatten()
                        .filter(|e| members.contains(*e))
                        .cloned()
                        .collect();
                    let adds: Vec<String> = c
                        .set_adds
                        .get(name)
                        .into_iter()
                        .flatten()
                        .filter(|e| !members.contains(*e))
                        .cloned()
                        .collect();
                    for e in &dels {
                        ops.push(IpSetOp::Del {
                            set: name.clone(),
                            entry: e.clone(),
                        });
                    }
                    for e in &adds {
                        ops.push(IpSetOp::Add {
                            set: name.clone(),
                            entry: e.clone(),
                        });
                    }
                    if !adds.is_empty() || !dels.is_empty() {
                        patches.push((name.clone(), adds, dels));
                    }
                    continue;
                }
                // Deletions first: should a planned entry ever differ in text from the kernel's form of the
                // same member, the member ends up present (deleted, then re-added), never missing.
                for e in members.difference(&set.entries) {
                    ops.push(IpSetOp::Del {
                        set: name.clone(),
                        entry: e.clone(),
                    });
                }
                for e in set.entries.difference(members) {
                    ops.push(IpSetOp::Add {
                        set: name.clone(),
                        entry: e.clone(),
                    });
                }
                if applied.ipsets.get(name) != Some(&set.entries) {
                    next.insert(name.clone(), set.entries.clone());
                }
            }
            expected.push((f.desired.family, next, patches));
        }
        let ok = if ops.is_empty() {
            true
        } else {
            match k.ipsets.apply(&ops) {
                Ok(r) => {
                    for op in &ops {
                        match op {
                            IpSetOp::Add { .. } => report.ipset_entries.added += 1,
                            IpSetOp::Del { .. } => report.ipset_entries.deleted += 1,
                        }
                    }
                    report.ipset_entries.added -= r
                        .rejected
                        .iter()
                        .filter(|(op, _)| matches!(op, IpSetOp::Add { .. }))
                        .count();
                    report.ipset_entries.deleted -= r
                        .rejected
                        .iter()
                        .filter(|(op, _)| matches!(op, IpSetOp::Del { .. }))
                        .count();
                    for (op, why) in &r.rejected {
                        tracing::warn!(?op, reason = %why, "ipset entry rejected");
                    }
                    // Invalid entries stay invalid: counted, not retried before the next full sync.
                    *report
                        .failures
                        .entry(FailureKind::IpsetRejected)
                        .or_default() += r.rejected.len();
                    true
                }
                Err(e) => {
                    tracing::warn!(error = %e, ops = ops.len(), "ipset apply failed");
                    report.fail(FailureKind::Ipset);
                    false
                }
            }
        };
        for (family, sets, patches) in expected {
            let applied = self.applied.entry(family).or_default();
            if ok {
                // `sets` holds only the sets whose members changed; drop sets no longer planned.
                let planned: BTreeSet<&String> = families
                    .iter()
                    .filter(|f| f.desired.family == family)
                    .flat_map(|f| f.desired.ipsets.keys())
                    .collect();
                applied.ipsets.retain(|name, _| planned.contains(name));
                applied.ipsets.extend(sets);
                for (name, adds, dels) in patches {
                    let members = applied.ipsets.entry(name).or_default();
                    for e in &dels {
                        members.remove(e);
                    }
                    members.extend(adds);
                }
            } else {
                // Unknown kernel contents: forget them, so the next (full) sync compares with a dump.
                applied.ipsets.clear();
            }
        }
        report.add_step(SyncStep::Ipsets, start.elapsed());
    }
}
