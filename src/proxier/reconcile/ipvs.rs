//! IPVS virtual servers and real servers, written in batches (`Ipvs::apply`: several changes per netlink
//! datagram): service adds/updates, then every real-server change, then service deletions.

use super::ownership::{Ownership, excluded};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::cluster::model::{IpFamily, Protocol};
use crate::kernel::ipvs::{
    FLAG_HASHED, Ipvs, IpvsDestination, IpvsOp, IpvsService, IpvsServiceKey,
};
use crate::kernel::{KernelError, KernelResult};
use crate::proxier::desired::DesiredVirtualServer;
use crate::proxier::graceful::{GracefulTermination, Removal};
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
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

fn same_service(a: &IpvsService, b: &IpvsService) -> bool {
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

type DestKey = (IpAddr, u16);

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
            tracing::warn!(error = %e, ops = ops.len(), "IPVS batch failed");
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
}

/// One planned real-server change of one virtual server.
struct PlannedDest {
    vs: IpvsServiceKey,
    change: DestChange,
    /// The real server as the kernel has it (Drain/Delete) or as wanted (Add/Update).
    dest: IpvsDestination,
}

impl Reconciler {
    pub(super) fn sync_ipvs(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        snap: &Snapshot,
        report: &mut SyncReport,
    ) -> UdpChanges {
        let start = Instant::now();
        let mut udp = UdpChanges::default();
        for f in families {
            self.sync_ipvs_family(k, f, snap, report, &mut udp);
        }
        report.add_step(SyncStep::Ipvs, start.elapsed());
        udp
    }

    fn sync_ipvs_family(
        &mut self,
        k: &mut Backends,
        f: &FamilyInput<'_>,
        snap: &Snapshot,
        report: &mut SyncReport,
        udp: &mut UdpChanges,
    ) {
        let family = f.desired.family;
        let mut applied = self.applied.remove(&family).unwrap_or_default();
        let kernel: Option<BTreeMap<IpvsServiceKey, &IpvsService>> =
            snap.services.as_ref().map(|all| {
                all.iter()
                    .filter(|s| IpFamily::of(&s.key.addr) == family)
                    .map(|s| (s.key, s))
                    .collect()
            });
        let full = kernel.is_some();
        // Event-driven with a delta: only the virtual servers it names (added/changed, removed).
        let scope: Option<(Vec<IpvsServiceKey>, Vec<IpvsServiceKey>)> = if full {
            None
        } else {
            self.scope(family).map(|c| {
                (
                    c.vs_added
                        .keys()
                        .chain(c.vs_changed.keys())
                        .copied()
                        .collect(),
                    c.vs_removed.iter().copied().collect(),
                )
            })
        };
        let wanted: Vec<(&IpvsServiceKey, &SharedVs)> = match &scope {
            Some((upserts, _)) => upserts
                .iter()
                .filter_map(|k| f.desired.virtual_servers.get_key_value(k))
                .collect(),
            None => f.desired.virtual_servers.iter().collect(),
        };
        // `applied.virtual_servers` is updated in place: unchanged virtual servers cost no copy.
        let mut failed_deletes: BTreeSet<IpvsServiceKey> = BTreeSet::new();

        // 1. Virtual servers: add the missing, update the changed.
        let mut ops = Vec::new();
        // (key, exists in the kernel, kernel contents unknown, index of its op)
        let mut todo: Vec<(&IpvsServiceKey, &SharedVs, bool, bool, Option<usize>)> = Vec::new();
        for (key, dvs) in wanted {
            let current = match &kernel {
                Some(kmap) => kmap.get(key).copied(),
                None => applied.virtual_servers.get(key).map(|p| &p.service),
            };
            match current {
                None => {
                    todo.push((key, dvs, false, false, Some(ops.len())));
                    ops.push(IpvsOp::AddService(dvs.service.clone()));
                }
                Some(c) if !same_service(c, &dvs.service) => {
                    todo.push((key, dvs, true, full, Some(ops.len())));
                    ops.push(IpvsOp::UpdateService(dvs.service.clone()));
                }
                Some(_) => todo.push((key, dvs, true, full, None)),
            }
        }
        let mut results = run_batch(k.ipvs.as_mut(), &ops);
        let mut ready: Vec<(IpvsServiceKey, &SharedVs, bool, bool)> = Vec::new();
        for (&key, dvs, mut exists, mut dump, op) in todo {
            let Some(i) = op else {
                ready.push((key, dvs, exists, dump));
                continue;
            };
            let res = std::mem::replace(&mut results[i], Ok(()));
            match (&ops[i], res) {
                (IpvsOp::AddService(_), Ok(())) => report.ipvs_services.added += 1,
                (IpvsOp::UpdateService(_), Ok(())) => report.ipvs_services.updated += 1,
                (IpvsOp::AddService(_), Err(KernelError::Exists(_))) => {
                    // The kernel has it although we did not know: converge and read it back.
                    if let Err(e) = k.ipvs.update_service(&dvs.service) {
                        tracing::warn!(service = %key, error = %e, "IPVS update failed");
                        report.fail(FailureKind::IpvsService);
                        continue;
                    }
                    report.ipvs_services.updated += 1;
                    exists = true;
                    dump = true;
                }
                (op, Err(e)) => {
                    tracing::warn!(%op, error = %e, "IPVS service write failed");
                    // What we applied before (if anything) stays recorded: the retry compares with it.
                    report.fail(FailureKind::IpvsService);
                    continue;
                }
                (_, Ok(())) => {}
            }
            ready.push((key, dvs, exists, dump));
        }

        // 2. Real servers: current lists (none for new services, dumps where needed, else memory), then
        //    every change of every virtual server in one batch.
        let mut planned: Vec<PlannedDest> = Vec::new();
        for (key, dvs, exists, dump) in ready {
            let prev = applied.virtual_servers.get(&key);
            // Same value as applied: keep sharing the plan's `Arc` (it may be a fresh copy).
            let unchanged = prev.is_some_and(|p| Arc::ptr_eq(p, dvs));
            let current: Vec<IpvsDestination> = if !exists {
                Vec::new()
            } else {
                let prev_dests = prev.map(|p| &p.destinations);
                if !dump && prev_dests == Some(&dvs.destinations) {
                    if !unchanged {
                        applied.virtual_servers.insert(key, dvs.clone());
                    }
                    continue;
                }
                let losing_tcp = key.protocol == Protocol::Tcp
                    && prev_dests
                        .is_none_or(|pd| pd.keys().any(|d| !dvs.destinations.contains_key(d)));
                if dump || losing_tcp {
                    match k.ipvs.destinations(&key) {
                        Ok(d) => d,
                        Err(e) => {
                            tracing::warn!(service = %key, error = %e, "IPVS destination dump failed");
                            report.fail(FailureKind::KernelDump);
                            continue;
                        }
                    }
                } else {
                    prev_dests
                        .map(|pd| pd.values().cloned().collect())
                        .unwrap_or_default()
                }
            };
            plan_destinations(
                &mut self.graceful,
                &key,
                dvs,
                &current,
                &mut planned,
                report,
            );
            if !unchanged {
                applied.virtual_servers.insert(key, dvs.clone());
            }
            if planned.len() >= DEST_BATCH {
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

        // 3. Virtual servers that left the plan: only ours, never excluded ones.
        let candidates: Vec<IpvsServiceKey> = match &kernel {
            Some(kmap) => {
                let own = self.ownership(f, snap, &applied);
                kmap.keys()
                    .filter(|key| !f.desired.virtual_servers.contains_key(key))
                    .filter(|key| own.owns(key, &f.config.exclude_cidrs))
                    .copied()
                    .collect()
            }
            None if scope.is_some() => scope
                .iter()
                .flat_map(|(_, removed)| removed)
                .filter(|key| applied.virtual_servers.contains_key(key))
                .filter(|key| !f.desired.virtual_servers.contains_key(key))
                .filter(|key| !excluded(&key.addr, &f.config.exclude_cidrs))
                .copied()
                .collect(),
            None => applied
                .virtual_servers
                .keys()
                .filter(|key| !f.desired.virtual_servers.contains_key(key))
                .filter(|key| !excluded(&key.addr, &f.config.exclude_cidrs))
                .copied()
                .collect(),
        };
        let ops: Vec<IpvsOp> = candidates
            .iter()
            .map(|k| IpvsOp::DeleteService(*k))
            .collect();
        let results = run_batch(k.ipvs.as_mut(), &ops);
        for (key, res) in candidates.into_iter().zip(results) {
            match res {
                Ok(()) | Err(KernelError::NotFound(_)) => {
                    report.ipvs_services.deleted += 1;
                    self.graceful.forget_service(&key);
                    if key.protocol == Protocol::Udp {
                        udp.removed.insert(key);
                    }
                }
                Err(e) => {
                    tracing::warn!(service = %key, error = %e, "IPVS delete failed");
                    report.fail(FailureKind::IpvsService);
                    failed_deletes.insert(key);
                }
            }
        }

        // Keep what is planned (as applied) and what we failed to delete (so it is retried).
        match &scope {
            // Only removed virtual servers can have left the plan.
            Some((_, removed)) => {
                for key in removed {
                    if !f.desired.virtual_servers.contains_key(key) && !failed_deletes.contains(key)
                    {
                        applied.virtual_servers.remove(key);
                    }
                }
            }
            None => applied.virtual_servers.retain(|key, _| {
                f.desired.virtual_servers.contains_key(key) || failed_deletes.contains(key)
            }),
        }
        applied.node_port_ips = f.node_port_ips.iter().copied().collect();
        self.applied.insert(family, applied);
    }

    /// Evidence of ownership for a full sync: the kernel as dumped before this sync wrote anything, the
    /// plan, and what we applied before.
    fn ownership(
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

/// Real-server changes applied per batch (a batch is split into netlink datagrams by the backend).
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
            DestChange::Delete => IpvsOp::DeleteDestination(p.vs, p.dest.addr, p.dest.port),
        })
        .collect();
    let results = run_batch(ipvs, &ops);
    for (p, res) in planned.iter().zip(results) {
        let dk = (p.dest.addr, p.dest.port);
        let res = match (p.change, res) {
            (DestChange::Add, Err(KernelError::Exists(_))) => {
                ipvs.update_destination(&p.vs, &p.dest).map(|()| true)
            }
            (DestChange::Delete, Err(KernelError::NotFound(_))) => Ok(false),
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
                }
                if p.vs.protocol == Protocol::Udp
                    && matches!(p.change, DestChange::Add | DestChange::Delete)
                {
                    udp.changed = true;
                }
            }
            Err(e) => {
                tracing::warn!(service = %p.vs, dest = %dk.0, port = dk.1, error = %e,
                    "real server write failed");
                report.fail(FailureKind::IpvsDestination);
                // Remember the kernel as it probably is, so the next sync retries.
                if let Some(vs) = applied.get_mut(&p.vs) {
                    let vs = Arc::make_mut(vs);
                    match p.change {
                        DestChange::Add | DestChange::Update => {
                            vs.destinations.remove(&dk);
                        }
                        DestChange::Drain | DestChange::Delete => {
                            vs.destinations.insert(dk, p.dest.clone());
                        }
                    }
                }
            }
        }
    }
}

/// Plans the real-server changes of one virtual server from its current list.
fn plan_destinations(
    graceful: &mut GracefulTermination,
    key: &IpvsServiceKey,
    dvs: &DesiredVirtualServer,
    current: &[IpvsDestination],
    planned: &mut Vec<PlannedDest>,
    report: &mut SyncReport,
) {
    let cur: BTreeMap<DestKey, &IpvsDestination> =
        current.iter().map(|d| ((d.addr, d.port), d)).collect();
    for (dk, want) in &dvs.destinations {
        if graceful.dequeue(key, dk.0, dk.1) {
            report.graceful_restored += 1;
        }
        let change = match cur.get(dk) {
            None => DestChange::Add,
            Some(c) if !same_dest(c, want) => DestChange::Update,
            Some(_) => continue,
        };
        planned.push(PlannedDest {
            vs: *key,
            change,
            dest: want.clone(),
        });
    }
    for (dk, c) in &cur {
        if dvs.destinations.contains_key(dk) || graceful.contains(key, dk.0, dk.1) {
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
