//! ipsets: create missing sets, then one `IpSets::apply` with every member change of every family (one
//! per [`IPSET_BATCH`] changes when there are more, as on a first sync at scale).

use super::diff::{Diff, Scope, StepInput};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::kernel::ipset::save::SetHeader;
use crate::kernel::ipset::{IpSetOp, IpSetSpec, IpSetType, IpSets};
use crate::net::IpFamily;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

type Members = BTreeMap<String, BTreeSet<String>>;

/// What one family's sets hold once the member changes are applied.
#[derive(Debug)]
struct Expected {
    family: IpFamily,
    /// Sets compared in full whose members differ from what was applied: their new members.
    replaced: Members,
    /// Sets compared in a delta's scope: (set, added, deleted).
    patches: Vec<(String, Vec<String>, Vec<String>)>,
}

impl Reconciler {
    pub(super) fn sync_ipsets(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        snap: &mut Snapshot,
        report: &mut SyncReport,
    ) {
        let start = Instant::now();
        let stuck = repair_set_types(k.ipsets.as_mut(), families, snap, report);
        let snap = &*snap;
        let no_sets = Members::new();
        let no_members = BTreeSet::new();
        let set_diffs = self.set_diffs(families, snap, &no_sets);
        // Missing sets of every family are created together (one process with the real backend); should
        // that fail, each set is tried on its own so one bad set cannot block the others.
        let missing: Vec<_> = families
            .iter()
            .zip(&set_diffs)
            .flat_map(|(f, d)| d.add.iter().filter_map(|n| f.desired.ipsets.get(n)))
            .map(|set| set.spec.clone())
            .collect();
        let created_together = !missing.is_empty() && k.ipsets.create_all(&missing).is_ok();
        let mut w = Writer {
            ipsets: k.ipsets.as_mut(),
            report,
            ops: Vec::new(),
            ok: true,
        };
        let mut expected = Vec::new();
        for (f, sets) in families.iter().zip(&set_diffs) {
            let applied = self.applied.get(&f.desired.family).map(|a| &a.ipsets);
            let current = snap.ipsets.as_ref().or(applied).unwrap_or(&no_sets);
            let mut exp = Expected {
                family: f.desired.family,
                replaced: Members::new(),
                patches: Vec::new(),
            };
            for name in &sets.add {
                if let Some(set) = f.desired.ipsets.get(name) {
                    let res = match created_together {
                        true => Ok(()),
                        false => w.ipsets.create(&set.spec),
                    };
                    if let Err(e) = res {
                        tracing::error!(ipSet = %name, error = %e, "Failed to ensure ip set");
                        w.report.fail(FailureKind::Ipset);
                        continue;
                    }
                    w.report.ipsets_created += 1;
                    // A set just created gets all its members, whatever the delta says.
                    member_ops(f, name, &no_members, &Scope::All, applied, &mut w, &mut exp);
                }
            }
            for name in sets.keep.iter().filter(|n| !stuck.contains(*n)) {
                let scope = Scope::of(f.delta, |d| {
                    let adds = d.set_adds.get(name).into_iter().flatten();
                    adds.chain(d.set_dels.get(name).into_iter().flatten())
                });
                let members = current.get(name).unwrap_or(&no_members);
                member_ops(f, name, members, &scope, applied, &mut w, &mut exp);
            }
            expected.push(exp);
        }
        crate::malloc::mark("ipsets: last ops built");
        let ok = w.finish();
        self.record_ipsets(families, expected, ok);
        report.add_shared_step(SyncStep::Ipsets, start.elapsed());
    }

    /// Per family, the sets to create (`add`) and to look into (`keep`): observed = the dump on full
    /// syncs, else what was applied.
    fn set_diffs(
        &self,
        families: &[FamilyInput<'_>],
        snap: &Snapshot,
        no_sets: &Members,
    ) -> Vec<Diff<String>> {
        families
            .iter()
            .map(|f| {
                let applied = self.applied.get(&f.desired.family).map(|a| &a.ipsets);
                StepInput {
                    desired: &f.desired.ipsets,
                    observed: snap.ipsets.as_ref().or(applied).unwrap_or(no_sets),
                    scope: &Scope::All,
                }
                .diff(|_, _| true)
            })
            .collect()
    }

    /// Records what the sets hold after the member changes (or forgets them when the apply failed).
    fn record_ipsets(&mut self, families: &[FamilyInput<'_>], expected: Vec<Expected>, ok: bool) {
        for exp in expected {
            let applied = self.applied.entry(exp.family).or_default();
            if !ok {
                // Unknown kernel contents: forget them, so the next (full) sync compares with a dump.
                applied.ipsets.clear();
                continue;
            }
            // `replaced` holds only the sets whose members changed; drop sets no longer planned.
            let planned: BTreeSet<&String> = families
                .iter()
                .filter(|f| f.desired.family == exp.family)
                .flat_map(|f| f.desired.ipsets.keys())
                .collect();
            applied.ipsets.retain(|name, _| planned.contains(name));
            applied.ipsets.extend(exp.replaced);
            for (name, adds, dels) in exp.patches {
                let members = applied.ipsets.entry(name).or_default();
                for e in &dels {
                    members.remove(e);
                }
                members.extend(adds);
            }
        }
    }
}

/// Full syncs: destroys every planned set whose kernel type or family differs from its spec (another tool
/// re-created it), and drops it from the dump so it is created and filled as missing. Returns the sets
/// that could not be destroyed (in use): counted as failures and left alone until the next sync.
fn repair_set_types(
    ipsets: &mut dyn IpSets,
    families: &[FamilyInput<'_>],
    snap: &mut Snapshot,
    report: &mut SyncReport,
) -> BTreeSet<String> {
    let mut stuck = BTreeSet::new();
    let Some(members) = snap.ipsets.as_mut() else {
        return stuck;
    };
    let planned = families.iter().flat_map(|f| f.desired.ipsets.values());
    for set in planned {
        let spec = &set.spec;
        let Some(header) = snap.ipset_headers.get(&spec.name) else {
            continue;
        };
        if header_matches(header, spec) {
            continue;
        }
        let family = header.family.map(|f| format!("{f:?}"));
        tracing::warn!(
            set = %spec.name,
            kernel_type = %header.type_name,
            kernel_family = ?family,
            wanted_type = spec.set_type.as_str(),
            wanted_family = ?spec.family,
            "ipset has the wrong type, re-creating it"
        );
        match ipsets.destroy(&spec.name) {
            Ok(()) => {
                members.remove(&spec.name);
            }
            Err(e) => {
                tracing::error!(ipSet = %spec.name, error = %e, "Failed to destroy an ip set of the wrong type");
                report.fail(FailureKind::Ipset);
                stuck.insert(spec.name.clone());
            }
        }
    }
    stuck
}

/// Whether an existing set has the spec's type and (hash sets) family; an unknown family is accepted.
fn header_matches(header: &SetHeader, spec: &IpSetSpec) -> bool {
    let family_ok =
        spec.set_type == IpSetType::BitmapPort || header.family.is_none_or(|f| f == spec.family);
    header.set_type == Some(spec.set_type) && family_ok
}

/// Member changes on their way to the kernel: applied whenever [`IPSET_BATCH`] of them are held.
struct Writer<'k> {
    ipsets: &'k mut dyn IpSets,
    /// Where the applies are counted (the sync's report, borrowed while the changes are built).
    report: &'k mut SyncReport,
    ops: Vec<IpSetOp>,
    /// Every apply so far succeeded.
    ok: bool,
}

/// Most member changes held at once: beyond, they are applied before more are built (a first sync's
/// changes are the sets' whole contents, ~110 bytes each).
const IPSET_BATCH: usize = 8192;

impl Writer<'_> {
    fn push(&mut self, op: IpSetOp) {
        self.ops.push(op);
        if self.ops.len() >= IPSET_BATCH {
            self.ok &= apply_ops(self.ipsets, &self.ops, self.report);
            self.ops.clear();
        }
    }

    /// Applies what is left; false if any apply failed.
    fn finish(mut self) -> bool {
        self.ok &= apply_ops(self.ipsets, &self.ops, self.report);
        self.ok
    }
}

/// The member diff of one set turned into ops (deletions first: should a planned entry ever differ in
/// text from the kernel's form of the same member, the member ends up present, never missing), and
/// what the set holds afterwards.
fn member_ops(
    f: &FamilyInput<'_>,
    name: &str,
    members: &BTreeSet<String>,
    scope: &Scope<String>,
    applied: Option<&Members>,
    w: &mut Writer<'_>,
    exp: &mut Expected,
) {
    let Some(set) = f.desired.ipsets.get(name) else {
        return;
    };
    let diff = StepInput {
        desired: &set.entries,
        observed: members,
        scope,
    }
    .diff(|_, _| true);
    let op = |add: bool, entry: String| match add {
        true => IpSetOp::Add {
            set: name.to_string(),
            entry,
        },
        false => IpSetOp::Del {
            set: name.to_string(),
            entry,
        },
    };
    if scope.is_all() {
        // The diff's own copies of the entries become the ops (a first sync's diff is every member).
        for e in diff.delete {
            w.push(op(false, e));
        }
        for e in diff.add {
            w.push(op(true, e));
        }
        if applied.and_then(|a| a.get(name)) != Some(&set.entries) {
            exp.replaced.insert(name.to_string(), set.entries.clone());
        }
        return;
    }
    for e in &diff.delete {
        w.push(op(false, e.clone()));
    }
    for e in &diff.add {
        w.push(op(true, e.clone()));
    }
    if !diff.is_empty() {
        exp.patches.push((name.to_string(), diff.add, diff.delete));
    }
}

/// Applies member changes in one call and counts the results; false if the call failed.
fn apply_ops(ipsets: &mut dyn IpSets, ops: &[IpSetOp], report: &mut SyncReport) -> bool {
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
