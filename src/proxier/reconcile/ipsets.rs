//! ipsets: create missing sets, grow the sets whose members outgrew them ([`super::ipset_grow`]), then
//! one `IpSets::apply` with every member change of every family (one per [`IPSET_BATCH`] changes when
//! there are more, as on a first sync at scale).

use super::diff::{Diff, Scope, StepInput};
use super::ipset_apply::{IPSET_BATCH, apply_ops};
use super::ipset_grow::{grow, needs_growing, remove_staging_leftovers};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::kernel::ipset::save::SetHeader;
use crate::kernel::ipset::{IpSetOp, IpSetSize, IpSetSpec, IpSetType, IpSets};
use crate::net::IpFamily;
use crate::proxier::report::{FailureKind, IpSetFigures, SyncReport, SyncStep};
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
    /// The kernel size of every set looked at: created, grown, or as read or last applied.
    sizes: BTreeMap<String, IpSetSize>,
}

impl Expected {
    fn new(family: IpFamily) -> Self {
        Expected {
            family,
            replaced: Members::new(),
            patches: Vec::new(),
            sizes: BTreeMap::new(),
        }
    }
}

/// What every family's step reads: the sets that could not be repaired, the dump (full syncs) and
/// whether the missing sets were created in one batch.
struct Context<'a> {
    stuck: &'a BTreeSet<String>,
    snap: &'a Snapshot,
    created_together: bool,
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
        remove_staging_leftovers(k.ipsets.as_mut(), families, snap, report);
        let snap = &*snap;
        let set_diffs = self.set_diffs(families, snap, &Members::new());
        // Missing sets of every family are created together (one process with the real backend); should
        // that fail, each set is tried on its own so one bad set cannot block the others.
        let missing: Vec<_> = families
            .iter()
            .zip(&set_diffs)
            .flat_map(|(f, d)| d.add.iter().filter_map(|n| f.desired.ipsets.get(n)))
            .map(|set| set.spec.clone())
            .collect();
        let cx = Context {
            stuck: &stuck,
            snap,
            created_together: !missing.is_empty() && k.ipsets.create_all(&missing).is_ok(),
        };
        let mut w = Writer {
            ipsets: k.ipsets.as_mut(),
            report,
            ops: Vec::new(),
            ok: true,
        };
        let expected: Vec<Expected> = families
            .iter()
            .zip(&set_diffs)
            .map(|(f, sets)| self.family_sets(f, sets, &cx, &mut w))
            .collect();
        crate::malloc::mark("ipsets: last ops built");
        let ok = w.finish();
        self.record_ipsets(families, expected, ok, report);
        report.add_shared_step(SyncStep::Ipsets, start.elapsed());
    }

    /// One family's sets: the missing ones created and filled, the others grown where their members
    /// outgrew them, and their member changes queued in `w`.
    fn family_sets(
        &self,
        f: &FamilyInput<'_>,
        sets: &Diff<String>,
        cx: &Context<'_>,
        w: &mut Writer<'_>,
    ) -> Expected {
        let no_sets = Members::new();
        let no_members = BTreeSet::new();
        let applied = self.applied.get(&f.desired.family);
        let applied_sets = applied.map(|a| &a.ipsets);
        let current = cx.snap.ipsets.as_ref().or(applied_sets).unwrap_or(&no_sets);
        let mut exp = Expected::new(f.desired.family);
        for set in sets.add.iter().filter_map(|n| f.desired.ipsets.get(n)) {
            let name = &set.spec.name;
            if !cx.created_together
                && let Err(e) = w.ipsets.create(&set.spec)
            {
                tracing::error!(ipSet = %name, error = %e, "Failed to ensure ip set");
                w.report.fail(FailureKind::Ipset);
                continue;
            }
            w.report.ipsets_created += 1;
            exp.sizes.insert(name.clone(), set.spec.size);
            // A set just created gets all its members, whatever the delta says.
            member_ops(f, name, &no_members, &Scope::All, applied_sets, w, &mut exp);
        }
        for name in sets.keep.iter().filter(|n| !cx.stuck.contains(*n)) {
            // Unknown (a header that does not show it): upstream's, what every set starts with.
            let have = match &cx.snap.ipsets {
                Some(_) => cx.snap.ipset_headers.get(name).and_then(|h| h.size),
                None => applied.and_then(|a| a.ipset_sizes.get(name).copied()),
            }
            .unwrap_or(IpSetSize::UPSTREAM);
            exp.sizes.insert(name.clone(), have);
            if let Some(set) = f.desired.ipsets.get(name)
                && needs_growing(set, have)
                && grow(w.ipsets, set, w.report)
            {
                exp.sizes.insert(name.clone(), set.spec.size);
                exp.replaced.insert(name.clone(), set.entries.clone());
                continue;
            }
            let scope = Scope::of(f.delta, |d| {
                let adds = d.set_adds.get(name).into_iter().flatten();
                adds.chain(d.set_dels.get(name).into_iter().flatten())
            });
            let members = current.get(name).unwrap_or(&no_members);
            member_ops(f, name, members, &scope, applied_sets, w, &mut exp);
        }
        exp
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

    /// Records what the sets hold after the member changes (or forgets them when the apply failed), and
    /// reports the figures of every set a full sync looked at, or an event-driven one changed.
    fn record_ipsets(
        &mut self,
        families: &[FamilyInput<'_>],
        expected: Vec<Expected>,
        ok: bool,
        report: &mut SyncReport,
    ) {
        for exp in expected {
            let applied = self.applied.entry(exp.family).or_default();
            if !ok {
                // Unknown kernel contents: forget them, so the next (full) sync compares with a dump.
                applied.ipsets.clear();
                applied.ipset_sizes.clear();
                continue;
            }
            let Some(f) = families.iter().find(|f| f.desired.family == exp.family) else {
                continue;
            };
            let planned = &f.desired.ipsets;
            let changed: BTreeSet<String> = match report.full {
                true => planned.keys().cloned().collect(),
                false => (exp.replaced.keys().cloned())
                    .chain(exp.patches.iter().map(|(n, _, _)| n.clone()))
                    .chain(
                        exp.sizes
                            .keys()
                            .filter(|n| applied.ipset_sizes.get(*n) != exp.sizes.get(*n))
                            .cloned(),
                    )
                    .collect(),
            };
            // `replaced` holds only the sets whose members changed; drop sets no longer planned.
            applied.ipsets.retain(|name, _| planned.contains_key(name));
            applied
                .ipset_sizes
                .retain(|name, _| planned.contains_key(name));
            applied.ipsets.extend(exp.replaced);
            applied.ipset_sizes.extend(exp.sizes);
            for (name, adds, dels) in exp.patches {
                let members = applied.ipsets.entry(name).or_default();
                for e in &dels {
                    members.remove(e);
                }
                members.extend(adds);
            }
            for name in changed {
                let (Some(set), Some(size)) = (planned.get(&name), applied.ipset_sizes.get(&name))
                else {
                    continue;
                };
                report.ipsets.push(IpSetFigures {
                    family: exp.family,
                    entries: set.entries.len(),
                    maxelem: size.maxelem,
                    name,
                });
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
    .changes(|_, _| true);
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
