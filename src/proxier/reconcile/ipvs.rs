//! IPVS virtual servers and real servers, written in batches (`Ipvs::apply`: several changes per netlink
//! datagram): service adds/updates, then every real-server change, then service deletions.

use super::dest_order::{self, DestKey};
use super::diff::{Change, Diff, Scope, StepInput};
use super::ownership::{Ownership, excluded};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::cluster::model::Protocol;
use crate::kernel::ipvs::{
    FLAG_HASHED, Ipvs, IpvsDestination, IpvsOp, IpvsService, IpvsServiceKey,
};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use crate::proxier::desired::{DesiredVirtualServer, Destinations};
use crate::proxier::graceful::{GracefulTermination, Removal};
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// UDP virtual servers this sync touched, for conntrack cleanup.
#[derive(Debug, Default)]
pub(crate) struct UdpChanges {
    /// UDP virtual servers deleted.
    pub removed: BTreeSet<IpvsServiceKey>,
    /// Whether any UDP virtual server gained or lost real servers.
    pub changed: bool,
}

pub(super) fn same_service(a: &IpvsService, b: &IpvsService) -> bool {
    a.scheduler == b.scheduler
        && (a.flags & !FLAG_HASHED) == (b.flags & !FLAG_HASHED)
        && a.timeout == b.timeout
        && a.netmask == b.netmask
}

fn same_dest(a: &IpvsDestination, b: &IpvsDestination) -> bool {
    a.weight == b.weight
        && a.forward == b.forward
        && a.upper_threshold == b.upper_threshold
        && a.lower_threshold == b.lower_threshold
}

/// A planned virtual server, shared between the plan and what was applied.
type SharedVs = Arc<DesiredVirtualServer>;

/// Applies `ops` in one batch; a transport failure fails every op.
fn run_batch(ipvs: &mut dyn Ipvs, ops: &[IpvsOp]) -> Vec<KernelResult<()>> {
    if ops.is_empty() {
        return Vec::new();
    }
    match ipvs.apply(ops) {
        Ok(mut r) => {
            // Defensive: a short answer leaves the rest failed.
            while r.len() < ops.len() {
                r.push(Err(KernelError::Invalid(
                    "no answer for IPVS change".into(),
                )));
            }
            r
        }
        Err(e) => {
            tracing::error!(error = %e, ops = ops.len(), "IPVS batch failed");
            ops.iter()
                .map(|_| Err(KernelError::Invalid(format!("IPVS batch: {e}"))))
                .collect()
        }
    }
}

/// Why a real-server change was planned, to account for its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DestChange {
    Add,
    Update,
    Drain,
    Delete,
    /// Deleted to be linked again in its place ([`dest_order`]), within the same batch.
    Unlink,
    /// Added again after an [`DestChange::Unlink`].
    Relink,
}

/// One planned real-server change of one virtual server.
struct PlannedDest {
    vs: IpvsServiceKey,
    change: DestChange,
    /// The real server as the kernel has it (Drain/Delete) or as wanted (Add/Update).
    dest: IpvsDestination,
}

/// A virtual server whose attributes are in place, ready for its real servers.
struct Ready<'a> {
    key: IpvsServiceKey,
    dvs: &'a SharedVs,
    /// The kernel had it before this sync (else it has no real servers yet).
    exists: bool,
    /// Its real servers must be read from the kernel (full sync, or it existed unknown to us).
    dump: bool,
}

impl Reconciler {
    pub(super) fn sync_ipvs(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        snap: &Snapshot,
        report: &mut SyncReport,
    ) -> UdpChanges {
        let mut udp = UdpChanges::default();
        for f in families {
            let start = Instant::now();
            self.sync_ipvs_family(k, f, snap, report, &mut udp);
            report.add_family_step(SyncStep::Ipvs, f.desired.family, start.elapsed());
        }
        udp
    }

    /// One family: the virtual-server diff (kernel dump or applied state, in the delta's scope) turned
    /// into service writes, then real-server writes, then deletions of ours that left the plan.
    fn sync_ipvs_family(
        &mut self,
        k: &mut Backends,
        f: &FamilyInput<'_>,
        snap: &Snapshot,
        report: &mut SyncReport,
        udp: &mut UdpChanges,
    ) {
        let family = f.desired.family;
        // `applied.virtual_servers` is updated in place: unchanged virtual servers cost no copy.
        let mut applied = self.applied.remove(&family).unwrap_or_default();
        let kernel = kernel_services(snap, family);
        let scope = Scope::of(f.delta, |d| {
            d.vs_added
                .keys()
                .chain(d.vs_changed.keys())
                .chain(d.vs_removed.iter())
        });
        let desired = &f.desired.virtual_servers;
        let diff = match kernel {
            Some(kmap) => StepInput {
                desired,
                observed: kmap,
                scope: &scope,
            }
            .diff(|want, have| same_service(have, &want.service)),
            None => StepInput {
                desired,
                observed: &applied.virtual_servers,
                scope: &scope,
            }
            .diff(|want, have| same_service(&have.service, &want.service)),
        };
        let ready = write_services(k.ipvs.as_mut(), desired, &diff, kernel.is_some(), report);
        crate::malloc::mark("ipvs: services written");
        self.sync_destinations(k, ready, snap, &mut applied, report, udp);
        // Virtual servers that left the plan: only ours, never excluded ones.
        let exclude = &f.config.exclude_cidrs;
        let deletes: Vec<IpvsServiceKey> = match kernel {
            Some(_) if diff.delete.is_empty() => Vec::new(),
            Some(_) => {
                let own = self.ownership(f, snap, &applied);
                diff.delete
                    .into_iter()
                    .filter(|key| own.owns(key, exclude))
                    .collect()
            }
            None => diff
                .delete
                .into_iter()
                .filter(|key| !excluded(&key.addr, exclude))
                .collect(),
        };
        let failed = self.delete_services(k, &deletes, report, udp);
        // Keep what is planned (as applied) and what we failed to delete (so it is retried).
        scope.forget_removed(&mut applied.virtual_servers, desired, &failed);
        applied.node_port_ips = f.node_port_ips.iter().copied().collect();
        self.applied.insert(family, applied);
    }

    /// Real servers of the virtual servers in place: current lists (none for new services, dumps where
    /// needed, else memory), then every change in bounded batches.
    fn sync_destinations(
        &mut self,
        k: &mut Backends,
        ready: Vec<Ready<'_>>,
        snap: &Snapshot,
        applied: &mut super::Applied,
        report: &mut SyncReport,
        udp: &mut UdpChanges,
    ) {
        let view = snap.dest_view.as_ref();
        let mut planned: Vec<PlannedDest> = Vec::new();
        for mut r in ready {
            let prev = applied.virtual_servers.get(&r.key);
            // A full sync verifies the real servers of the virtual servers its slice of the view shows,
            // those the last pass missed, and those we never applied; it trusts what it applied for
            // the others (their slice comes in a later full sync).
            r.dump &= view.is_none_or(|v| v.covers(&r.key))
                || snap.unverified.contains(&r.key)
                || prev.is_none();
            // Same value as applied: keep sharing the plan's `Arc` (it may be a fresh copy).
            let unchanged = prev.is_some_and(|p| Arc::ptr_eq(p, r.dvs));
            // A queued graceful removal that is desired again must go through the plan (to leave the
            // queue), even when the view shows it as wanted.
            let queued = |(a, p): DestKey| self.graceful.contains(&r.key, a, p);
            let shown = view
                .and_then(|v| v.shown.get(&r.key))
                .filter(|_| self.graceful.is_empty() || !r.dvs.destinations.keys().any(queued));
            let (current, kernel_order) =
                match current_destinations(k.ipvs.as_mut(), &r, prev, shown, report) {
                    Ok(Some(c)) => c,
                    Ok(None) => {
                        if !unchanged {
                            applied.virtual_servers.insert(r.key, r.dvs.clone());
                        }
                        continue;
                    }
                    Err(()) => continue,
                };
            let current = Current {
                dests: &current,
                kernel_order,
            };
            plan_destinations(
                &mut self.graceful,
                &r.key,
                r.dvs,
                current,
                &mut planned,
                report,
            );
            if !unchanged {
                applied.virtual_servers.insert(r.key, r.dvs.clone());
            }
            if planned.len() >= DEST_BATCH {
                crate::malloc::mark("ipvs: real-server batch planned");
                // Bounded batches: a first sync of many virtual servers never holds every change at once.
                apply_dest_changes(
                    k.ipvs.as_mut(),
                    &mut self.graceful,
                    &planned,
                    &mut applied.virtual_servers,
                    report,
                    udp,
                );
                planned.clear();
            }
        }
        apply_dest_changes(
            k.ipvs.as_mut(),
            &mut self.graceful,
            &planned,
            &mut applied.virtual_servers,
            report,
            udp,
        );
    }

    /// Deletes virtual servers in one batch; returns those whose deletion failed.
    fn delete_services(
        &mut self,
        k: &mut Backends,
        keys: &[IpvsServiceKey],
        report: &mut SyncReport,
        udp: &mut UdpChanges,
    ) -> BTreeSet<IpvsServiceKey> {
        let ops: Vec<IpvsOp> = keys.iter().map(|k| IpvsOp::DeleteService(*k)).collect();
        let results = run_batch(k.ipvs.as_mut(), &ops);
        let mut failed = BTreeSet::new();
        for (&key, res) in keys.iter().zip(results) {
            match res {
                Ok(()) | Err(KernelError::NotFound(_)) => {
                    report.ipvs_services.deleted += 1;
                    self.graceful.forget_service(&key);
                    if key.protocol == Protocol::Udp {
                        udp.removed.insert(key);
                    }
                }
                Err(e) => {
                    tracing::error!(virtualServer = %key, error = %e, "Failed to delete service");
                    report.fail(FailureKind::IpvsService);
                    failed.insert(key);
                }
            }
        }
        failed
    }

    /// Evidence of ownership for a full sync: the kernel as dumped before this sync wrote anything, the
    /// plan, and what we applied before.
    pub(super) fn ownership(
        &self,
        f: &FamilyInput<'_>,
        snap: &Snapshot,
        applied: &super::Applied,
    ) -> Ownership {
        let family = f.desired.family;
        let mut own = Ownership::default();
        if let Some(a) = &snap.addresses {
            own.service_ips.extend(a.iter().copied());
        }
        own.service_ips.extend(applied.addresses.iter().copied());
        if let Some(sets) = &snap.ipsets {
            own.add_sets(family, sets);
        }
        own.add_sets_with(family, |name| {
            f.desired.ipsets.get(name).map(|s| &s.entries)
        });
        own.add_sets(family, &applied.ipsets);
        own.node_port_ips.extend(f.node_port_ips.iter().copied());
        own.node_port_ips
            .extend(applied.node_port_ips.iter().copied());
        own.applied.extend(applied.virtual_servers.keys().copied());
        own
    }
}

/// The family's virtual servers in the full sync's dump (None: not dumped, or the dump failed).
pub(super) fn kernel_services(
    snap: &Snapshot,
    family: IpFamily,
) -> Option<&BTreeMap<IpvsServiceKey, IpvsService>> {
    static NONE: BTreeMap<IpvsServiceKey, IpvsService> = BTreeMap::new();
    snap.services
        .as_ref()
        .map(|all| all.get(&family).unwrap_or(&NONE))
}

/// Adds and updates the diff's virtual servers in batches of [`DEST_BATCH`] (an add the kernel already
/// has converges to an update) and returns every desired virtual server in scope that is now in place.
fn write_services<'a>(
    ipvs: &mut dyn Ipvs,
    desired: &'a BTreeMap<IpvsServiceKey, SharedVs>,
    diff: &Diff<IpvsServiceKey>,
    dumped: bool,
    report: &mut SyncReport,
) -> Vec<Ready<'a>> {
    let mut batch = ServiceBatch::default();
    let mut out = Vec::new();
    for (key, change) in diff.desired_in_order() {
        let Some(dvs) = desired.get(key) else {
            continue;
        };
        let (exists, op) = match change {
            Change::Add => (false, Some(IpvsOp::AddService(dvs.service.clone()))),
            Change::Update => (true, Some(IpvsOp::UpdateService(dvs.service.clone()))),
            Change::Keep => (true, None),
        };
        let ready = Ready {
            key: *key,
            dvs,
            exists,
            dump: exists && dumped,
        };
        batch
            .todo
            .push((ready, op.is_some().then_some(batch.ops.len())));
        batch.ops.extend(op);
        if batch.ops.len() >= DEST_BATCH {
            batch.write(ipvs, &mut out, report);
        }
    }
    batch.write(ipvs, &mut out, report);
    out
}

/// Virtual-server writes on their way to the kernel, with every virtual server they precede.
#[derive(Default)]
struct ServiceBatch<'a> {
    ops: Vec<IpvsOp>,
    /// Each virtual server in order, with the index of its write in `ops` (None: nothing to write).
    todo: Vec<(Ready<'a>, Option<usize>)>,
}

impl<'a> ServiceBatch<'a> {
    /// Sends the writes and moves every virtual server now in place to `out`, in order.
    fn write(&mut self, ipvs: &mut dyn Ipvs, out: &mut Vec<Ready<'a>>, report: &mut SyncReport) {
        let mut results = run_batch(ipvs, &self.ops);
        for (mut ready, op) in self.todo.drain(..) {
            let Some(i) = op else {
                out.push(ready);
                continue;
            };
            let res = std::mem::replace(&mut results[i], Ok(()));
            match (&self.ops[i], res) {
                (IpvsOp::AddService(_), Ok(())) => report.ipvs_services.added += 1,
                (IpvsOp::UpdateService(_), Ok(())) => report.ipvs_services.updated += 1,
                (IpvsOp::AddService(_), Err(KernelError::Exists(_))) => {
                    // The kernel has it although we did not know: converge and read it back.
                    if let Err(e) = ipvs.update_service(&ready.dvs.service) {
                        tracing::error!(virtualServer = %ready.key, error = %e, "Failed to update service");
                        service_write_failed(report, e);
                        continue;
                    }
                    report.ipvs_services.updated += 1;
                    ready.exists = true;
                    ready.dump = true;
                }
                (op, Err(e)) => {
                    tracing::error!(virtualServer = %op, error = %e, "Failed to sync service");
                    // What we applied before (if anything) stays recorded: the retry compares with it.
                    service_write_failed(report, e);
                    continue;
                }
                (_, Ok(())) => {}
            }
            out.push(ready);
        }
        self.ops.clear();
    }
}

/// Counts a failed virtual-server write; a scheduler the kernel refused is reported so the next plan
/// keeps that Service on the node's scheduler.
fn service_write_failed(report: &mut SyncReport, e: KernelError) {
    if let KernelError::SchedulerNotFound { scheduler, .. } = e {
        report.refused_schedulers.insert(scheduler);
    }
    report.fail(FailureKind::IpvsService);
}

/// Whether the quick view of a virtual server's real servers (`shown`, thresholds not shown) is exactly
/// the plan: the same real servers with the same weights and forwarding, the plan sets no threshold, and
/// for a scheduler that follows the list's order, in the canonical order ([`dest_order`]).
fn shows_desired(shown: &[IpvsDestination], want: &Destinations, scheduler: &str) -> bool {
    let ordered = || dest_order::is_canonical(shown.iter().map(|d| (d.addr, d.port)));
    (!dest_order::follows_order(scheduler) || ordered())
        && shown.len() == want.len()
        && shown.iter().all(|d| {
            want.get(&(d.addr, d.port)).is_some_and(|w| {
                w.weight == d.weight
                    && w.forward == d.forward
                    && w.upper_threshold == 0
                    && w.lower_threshold == 0
            })
        })
}

/// The real servers a virtual server in place has now: none when new, a kernel read when dumping or
/// when a TCP virtual server loses real servers (graceful termination needs their connection counts),
/// else as applied; with whether the list is in the kernel's order (read from it). `Ok(None)`: already
/// as desired (as applied, or as the full sync's quick view `shown` shows it); `Err`: the read failed
/// (counted).
fn current_destinations(
    ipvs: &mut dyn Ipvs,
    r: &Ready<'_>,
    prev: Option<&SharedVs>,
    shown: Option<&Vec<IpvsDestination>>,
    report: &mut SyncReport,
) -> Result<Option<(Vec<IpvsDestination>, bool)>, ()> {
    if !r.exists {
        return Ok(Some((Vec::new(), true)));
    }
    let scheduler = &r.dvs.service.scheduler;
    if r.dump && shown.is_some_and(|s| shows_desired(s, &r.dvs.destinations, scheduler)) {
        return Ok(None);
    }
    let prev_dests = prev.map(|p| &p.destinations);
    if !r.dump && prev_dests == Some(&r.dvs.destinations) {
        return Ok(None);
    }
    let losing_tcp = r.key.protocol == Protocol::Tcp
        && prev_dests.is_none_or(|pd| pd.keys().any(|d| !r.dvs.destinations.contains_key(&d)));
    if r.dump || losing_tcp {
        return match ipvs.destinations(&r.key) {
            Ok(d) => Ok(Some((d, true))),
            Err(e) => {
                tracing::error!(virtualServer = %r.key, error = %e, "Failed to list IPVS destinations");
                report.fail(FailureKind::KernelDump);
                Err(())
            }
        };
    }
    Ok(Some((
        prev_dests
            .map(|pd| pd.values().collect())
            .unwrap_or_default(),
        false,
    )))
}

/// Virtual-server writes and real-server changes applied per batch (a batch is split into netlink
/// datagrams by the backend): a first sync at scale never holds every write at once.
const DEST_BATCH: usize = 4096;

/// Writes planned real-server changes in one batch and accounts for the results; a failed change
/// leaves `applied` as the kernel probably is, so the next sync retries it.
fn apply_dest_changes(
    ipvs: &mut dyn Ipvs,
    graceful: &mut GracefulTermination,
    planned: &[PlannedDest],
    applied: &mut BTreeMap<IpvsServiceKey, SharedVs>,
    report: &mut SyncReport,
    udp: &mut UdpChanges,
) {
    let ops: Vec<IpvsOp> = planned
        .iter()
        .map(|p| match p.change {
            DestChange::Add => IpvsOp::AddDestination(p.vs, p.dest.clone()),
            DestChange::Update => IpvsOp::UpdateDestination(p.vs, p.dest.clone()),
            DestChange::Drain => {
                let mut zero = p.dest.clone();
                zero.weight = 0;
                IpvsOp::UpdateDestination(p.vs, zero)
            }
            DestChange::Delete | DestChange::Unlink => {
                IpvsOp::DeleteDestination(p.vs, p.dest.addr, p.dest.port)
            }
            DestChange::Relink => IpvsOp::AddDestination(p.vs, p.dest.clone()),
        })
        .collect();
    let results = run_batch(ipvs, &ops);
    for (p, res) in planned.iter().zip(results) {
        let dk = (p.dest.addr, p.dest.port);
        let res = match (p.change, res) {
            (DestChange::Add | DestChange::Relink, Err(KernelError::Exists(_))) => {
                ipvs.update_destination(&p.vs, &p.dest).map(|()| true)
            }
            (DestChange::Delete | DestChange::Unlink, Err(KernelError::NotFound(_))) => Ok(false),
            (_, r) => r.map(|()| false),
        };
        match res {
            Ok(fallback_update) => {
                match p.change {
                    DestChange::Add if fallback_update => report.ipvs_destinations.updated += 1,
                    DestChange::Add => report.ipvs_destinations.added += 1,
                    DestChange::Update => report.ipvs_destinations.updated += 1,
                    DestChange::Drain => {
                        report.ipvs_destinations.updated += 1;
                        report.graceful_queued += 1;
                        graceful.enqueue(&p.vs, dk.0, dk.1);
                    }
                    DestChange::Delete => {
                        report.ipvs_destinations.deleted += 1;
                        graceful.dequeue(&p.vs, dk.0, dk.1);
                    }
                    DestChange::Unlink => {}
                    DestChange::Relink => report.ipvs_destinations.updated += 1,
                }
                if p.vs.protocol == Protocol::Udp
                    && matches!(p.change, DestChange::Add | DestChange::Delete)
                {
                    udp.changed = true;
                }
            }
            Err(e) => {
                tracing::error!(virtualServer = %p.vs, destination = %dk.0, port = dk.1, error = %e,
                    "Failed to sync endpoint for service");
                report.fail(FailureKind::IpvsDestination);
                // Remember the kernel as it probably is, so the next sync retries.
                if let Some(vs) = applied.get_mut(&p.vs) {
                    let vs = Arc::make_mut(vs);
                    match p.change {
                        DestChange::Add | DestChange::Update | DestChange::Relink => {
                            vs.destinations.remove(&dk);
                        }
                        DestChange::Drain | DestChange::Delete | DestChange::Unlink => {
                            vs.destinations.insert(p.dest.clone());
                        }
                    }
                }
            }
        }
    }
}

/// A virtual server's real servers now, and whether that list is in the kernel's order.
#[derive(Clone, Copy)]
struct Current<'a> {
    dests: &'a [IpvsDestination],
    kernel_order: bool,
}

/// Plans the real-server changes of one virtual server from its current list (the shared diff over
/// real servers; the ones leaving go through graceful termination; for a scheduler that follows the
/// list's order, the relinks that keep it canonical).
fn plan_destinations(
    graceful: &mut GracefulTermination,
    key: &IpvsServiceKey,
    dvs: &DesiredVirtualServer,
    current: Current<'_>,
    planned: &mut Vec<PlannedDest>,
    report: &mut SyncReport,
) {
    let cur: BTreeMap<DestKey, &IpvsDestination> = current
        .dests
        .iter()
        .map(|d| ((d.addr, d.port), d))
        .collect();
    let wanted: Vec<IpvsDestination> = dvs.destinations.values().collect();
    let want: BTreeMap<DestKey, &IpvsDestination> =
        wanted.iter().map(|d| ((d.addr, d.port), d)).collect();
    let diff = StepInput {
        desired: &want,
        observed: &cur,
        scope: &Scope::All,
    }
    .diff(|want, have| same_dest(have, want));
    let mut writes = Vec::new();
    for (dk, change) in diff.desired_in_order() {
        if graceful.dequeue(key, dk.0, dk.1) {
            report.graceful_restored += 1;
        }
        let change = match change {
            Change::Add => DestChange::Add,
            Change::Update => DestChange::Update,
            Change::Keep => continue,
        };
        if let Some(want) = dvs.destinations.get(dk) {
            writes.push(PlannedDest {
                vs: *key,
                change,
                dest: want,
            });
        }
    }
    if dest_order::follows_order(&dvs.service.scheduler) {
        relink(key, dvs, current, &diff, &mut writes, planned);
    }
    planned.append(&mut writes);
    for dk in &diff.delete {
        let Some(c) = cur.get(dk) else {
            continue;
        };
        if graceful.contains(key, dk.0, dk.1) {
            continue;
        }
        let change = match GracefulTermination::decide(key, c) {
            Removal::Delete => DestChange::Delete,
            Removal::Drain => DestChange::Drain,
            Removal::Queue => {
                graceful.enqueue(key, dk.0, dk.1);
                report.graceful_queued += 1;
                continue;
            }
        };
        planned.push(PlannedDest {
            vs: *key,
            change,
            dest: (*c).clone(),
        });
    }
}

/// Keeps the real-server list of a scheduler that follows its order canonical ([`dest_order`]): the
/// real servers that stay and would sit out of place are unlinked (into `planned`, before this virtual
/// server's writes) and linked again among `writes`, which end in ascending order.
fn relink(
    key: &IpvsServiceKey,
    dvs: &DesiredVirtualServer,
    current: Current<'_>,
    diff: &Diff<DestKey>,
    writes: &mut Vec<PlannedDest>,
    planned: &mut Vec<PlannedDest>,
) {
    let present: Vec<DestKey> = current
        .dests
        .iter()
        .map(|d| (d.addr, d.port))
        .filter(|k| !diff.add.contains(k) && !diff.delete.contains(k))
        .collect();
    let again = dest_order::relinks(&present, &diff.add, current.kernel_order);
    if again.is_empty() {
        return;
    }
    tracing::debug!(virtualServer = %key, relinked = again.len(), scheduler = %dvs.service.scheduler,
        "Linking real servers again in the canonical order");
    writes.retain(|w| !again.contains(&(w.dest.addr, w.dest.port)));
    for k in &again {
        let Some(want) = dvs.destinations.get(k) else {
            continue;
        };
        planned.push(PlannedDest {
            vs: *key,
            change: DestChange::Unlink,
            dest: want.clone(),
        });
        writes.push(PlannedDest {
            vs: *key,
            change: DestChange::Relink,
            dest: want,
        });
    }
    writes.sort_by_key(|w| (w.dest.addr, w.dest.port));
}
