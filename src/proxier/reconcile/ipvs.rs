//! IPVS virtual servers and real servers.

use super::ownership::{Ownership, excluded};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::cluster::model::{IpFamily, Protocol};
use crate::kernel::KernelError;
use crate::kernel::ipvs::{FLAG_HASHED, IpvsDestination, IpvsService, IpvsServiceKey};
use crate::proxier::desired::DesiredVirtualServer;
use crate::proxier::graceful::GracefulAction;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
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
        let kernel: Option<BTreeMap<IpvsServiceKey, IpvsService>> =
            snap.services.as_ref().map(|all| {
                all.iter()
                    .filter(|s| IpFamily::of(&s.key.addr) == family)
                    .map(|s| (s.key, s.clone()))
                    .collect()
            });
        let full = kernel.is_some();
        let mut next: BTreeMap<IpvsServiceKey, DesiredVirtualServer> = BTreeMap::new();

        for (key, dvs) in &f.desired.virtual_servers {
            let prev = applied.virtual_servers.get(key);
            let current = match &kernel {
                Some(kmap) => kmap.get(key).cloned(),
                None => prev.map(|p| p.service.clone()),
            };
            let mut exists = current.is_some();
            let mut must_dump = full;
            match current {
                None => match k.ipvs.add_service(&dvs.service) {
                    Ok(()) => report.ipvs_services.added += 1,
                    Err(KernelError::Exists(_)) => {
                        // The kernel has it although we did not know: read it back and converge.
                        exists = true;
                        must_dump = true;
                        if let Err(e) = k.ipvs.update_service(&dvs.service) {
                            tracing::warn!(service = %key, error = %e, "IPVS update failed");
                            report.fail(FailureKind::IpvsService);
                            continue;
                        }
                        report.ipvs_services.updated += 1;
                    }
                    Err(e) => {
                        tracing::warn!(service = %key, error = %e, "IPVS add failed");
                        report.fail(FailureKind::IpvsService);
                        continue;
                    }
                },
                Some(c) if !same_service(&c, &dvs.service) => {
                    if let Err(e) = k.ipvs.update_service(&dvs.service) {
                        tracing::warn!(service = %key, error = %e, "IPVS update failed");
                        report.fail(FailureKind::IpvsService);
                        if let Some(p) = prev {
                            next.insert(*key, p.clone());
                        }
                        continue;
                    }
                    report.ipvs_services.updated += 1;
                }
                Some(_) => {}
            }

            // Current real servers: none for a new service, a dump on full syncs (or when needed for
            // graceful termination), else what we applied last time.
            let current_dests: Vec<IpvsDestination> = if !exists {
                Vec::new()
            } else {
                let prev_dests = prev.map(|p| &p.destinations);
                if !must_dump && prev_dests == Some(&dvs.destinations) {
                    next.insert(*key, dvs.clone());
                    continue;
                }
                let losing_tcp = key.protocol == Protocol::Tcp
                    && prev_dests
                        .is_none_or(|pd| pd.keys().any(|d| !dvs.destinations.contains_key(d)));
                if must_dump || losing_tcp {
                    match k.ipvs.destinations(key) {
                        Ok(d) => d,
                        Err(e) => {
                            tracing::warn!(service = %key, error = %e, "IPVS destination dump failed");
                            report.fail(FailureKind::KernelDump);
                            if let Some(p) = prev {
                                next.insert(*key, p.clone());
                            }
                            continue;
                        }
                    }
                } else {
                    prev_dests
                        .map(|pd| pd.values().cloned().collect())
                        .unwrap_or_default()
                }
            };
            let recorded = self.sync_destinations(k, key, dvs, &current_dests, report, udp);
            next.insert(
                *key,
                DesiredVirtualServer {
                    service: dvs.service.clone(),
                    destinations: recorded,
                },
            );
        }

        // Virtual servers that left the plan: only ours, never excluded ones.
        let candidates: Vec<IpvsServiceKey> = match &kernel {
            Some(kmap) => {
                let mut own = Ownership::default();
                if let Some(a) = &snap.addresses {
                    own.service_ips.extend(a.iter().copied());
                }
                own.service_ips.extend(applied.addresses.iter().copied());
                if let Some(sets) = &snap.ipsets {
                    own.add_sets(family, sets);
                }
                let planned_sets = f
                    .desired
                    .ipsets
                    .iter()
                    .map(|(n, s)| (n.clone(), s.entries.clone()))
                    .collect();
                own.add_sets(family, &planned_sets);
                own.add_sets(family, &applied.ipsets);
                own.node_port_ips.extend(f.node_port_ips.iter().copied());
                own.node_port_ips
                    .extend(applied.node_port_ips.iter().copied());
                own.applied.extend(applied.virtual_servers.keys().copied());
                kmap.keys()
                    .filter(|key| !f.desired.virtual_servers.contains_key(key))
                    .filter(|key| own.owns(key, &f.config.exclude_cidrs))
                    .copied()
                    .collect()
            }
            None => applied
                .virtual_servers
                .keys()
                .filter(|key| !f.desired.virtual_servers.contains_key(key))
                .filter(|key| !excluded(&key.addr, &f.config.exclude_cidrs))
                .copied()
                .collect(),
        };
        for key in candidates {
            match k.ipvs.delete_service(&key) {
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
                    if let Some(p) = applied.virtual_servers.get(&key) {
                        next.insert(key, p.clone());
                    }
                }
            }
        }

        applied.virtual_servers = next;
        applied.node_port_ips = f.node_port_ips.iter().copied().collect();
        self.applied.insert(family, applied);
    }

    /// Converges the real servers of one virtual server; returns the real servers now known to be in place.
    fn sync_destinations(
        &mut self,
        k: &mut Backends,
        key: &IpvsServiceKey,
        dvs: &DesiredVirtualServer,
        current: &[IpvsDestination],
        report: &mut SyncReport,
        udp: &mut UdpChanges,
    ) -> BTreeMap<DestKey, IpvsDestination> {
        let cur: BTreeMap<DestKey, &IpvsDestination> =
            current.iter().map(|d| ((d.addr, d.port), d)).collect();
        let mut recorded = dvs.destinations.clone();
        let mut changed = false;
        for (dk, want) in &dvs.destinations {
            let restored = self.graceful.dequeue(key, dk.0, dk.1);
            let res = match cur.get(dk) {
                None => match k.ipvs.add_destination(key, want) {
                    Err(KernelError::Exists(_)) => k.ipvs.update_destination(key, want).map(|()| 1),
                    r => r.map(|()| 0),
                },
                Some(c) if !same_dest(c, want) => k.ipvs.update_destination(key, want).map(|()| 1),
                Some(_) => Ok(2),
            };
            match res {
                Ok(0) => {
                    report.ipvs_destinations.added += 1;
                    changed = true;
                }
                Ok(1) => report.ipvs_destinations.updated += 1,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(service = %key, dest = %dk.0, port = dk.1, error = %e, "real server write failed");
                    report.fail(FailureKind::IpvsDestination);
                    recorded.remove(dk);
                    continue;
                }
            }
            if restored {
                report.graceful_restored += 1;
            }
        }
        for (dk, c) in &cur {
            if dvs.destinations.contains_key(dk) || self.graceful.contains(key, dk.0, dk.1) {
                continue;
            }
            match self.graceful.remove_destination(k.ipvs.as_mut(), key, c) {
                Ok(GracefulAction::Deleted) => {
                    report.ipvs_destinations.deleted += 1;
                    changed = true;
                }
                Ok(GracefulAction::Queued) => {
                    report.ipvs_destinations.updated += 1;
                    report.graceful_queued += 1;
                }
                Ok(GracefulAction::AlreadyDraining) => report.graceful_queued += 1,
                Err(e) => {
                    tracing::warn!(service = %key, dest = %dk.0, port = dk.1, error = %e, "real server removal failed");
                    report.fail(FailureKind::IpvsDestination);
                    recorded.insert(*dk, (*c).clone());
                }
            }
        }
        if changed && key.protocol == Protocol::Udp {
            udp.changed = true;
        }
        recorded
    }
}
