//! Service addresses bound to kube-ipvs0 (only that link is ever touched).

use super::diff::{Scope, StepInput};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::kernel::link::DUMMY_DEVICE;
use crate::net::IpFamily;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::net::IpAddr;
use std::time::Instant;

impl Reconciler {
    /// Creates kube-ipvs0 if missing.
    pub(super) fn ensure_dummy(&mut self, k: &mut Backends, report: &mut SyncReport) {
        match k.links.ensure_dummy(DUMMY_DEVICE) {
            Ok(created) => {
                if created {
                    tracing::debug!(interface = DUMMY_DEVICE, "Created dummy interface");
                }
                self.dummy_ok = true;
            }
            Err(e) => {
                tracing::error!(interface = DUMMY_DEVICE, error = %e, "Failed to create dummy interface");
                report.fail(FailureKind::Address);
                self.dummy_ok = false;
            }
        }
    }

    pub(super) fn sync_addresses(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        snap: &Snapshot,
        report: &mut SyncReport,
    ) {
        let start = Instant::now();
        if !self.dummy_ok {
            self.ensure_dummy(k, report);
            if !self.dummy_ok {
                return;
            }
        }
        report.add_shared_step(SyncStep::Addresses, start.elapsed());
        for f in families {
            let start = Instant::now();
            let family = f.desired.family;
            let applied = self.applied.entry(family).or_default();
            if let Some(a) = &snap.addresses {
                // Full sync: the kernel is the truth.
                applied.addresses = a
                    .iter()
                    .copied()
                    .filter(|ip| IpFamily::of(ip) == family)
                    .collect();
            }
            let scope = Scope::of(f.delta, |d| {
                d.addresses_added.iter().chain(&d.addresses_removed)
            });
            let diff = StepInput {
                desired: &f.desired.bound_addresses,
                observed: &applied.addresses,
                scope: &scope,
            }
            .changes(|_, _| true);
            let (to_add, to_del) = (diff.add, diff.delete);
            let (quiet, plain): (Vec<IpAddr>, Vec<IpAddr>) = to_add
                .into_iter()
                .partition(|ip| f.desired.arp_quiet.contains(ip));
            let added = k.links.add_addresses(DUMMY_DEVICE, &plain);
            record_adds(applied, plain, added, false, report);
            let added = k.links.add_host_scoped(DUMMY_DEVICE, &quiet);
            record_adds(applied, quiet, added, true, report);
            let deleted = k.links.del_addresses(DUMMY_DEVICE, &to_del);
            for (ip, result) in to_del.into_iter().zip(deleted) {
                match result {
                    Ok(_) => {
                        report.addresses.deleted += 1;
                        applied.addresses.remove(&ip);
                        applied.host_scoped.remove(&ip);
                    }
                    Err(e) => {
                        tracing::error!(address = %ip, error = %e, "Failed to unbind service address from dummy interface");
                        report.fail(FailureKind::Address);
                    }
                }
            }
            self.sync_scopes(k, f, snap.addresses.is_some(), report);
            report.add_family_step(SyncStep::Addresses, family, start.elapsed());
        }
    }

    /// Addresses bound with the other scope than planned (`--ipvs-arp-per-address` switched on or off, or
    /// changed by hand): unbound and bound again with the planned one. A full sync reads the scopes
    /// first, when the option is on, something has scope host, or never read since start.
    fn sync_scopes(
        &mut self,
        k: &mut Backends,
        f: &FamilyInput<'_>,
        full: bool,
        r: &mut SyncReport,
    ) {
        let family = f.desired.family;
        let applied = self.applied.entry(family).or_default();
        let quiet = &f.desired.arp_quiet;
        if full && (!quiet.is_empty() || !applied.host_scoped.is_empty() || !applied.scopes_read) {
            match k.links.host_scoped(DUMMY_DEVICE) {
                Ok(h) => {
                    applied.host_scoped = h
                        .into_iter()
                        .filter(|ip| IpFamily::of(ip) == family)
                        .collect();
                    applied.scopes_read = true;
                }
                Err(e) => {
                    tracing::error!(error = %e, "Error listing the scopes of the addresses on the dummy interface");
                    r.fail(FailureKind::Address);
                    return;
                }
            }
        } else if !full && f.delta.is_some_and(|d| !d.full && d.arp_quiet.is_none()) {
            return;
        }
        let wrong: Vec<IpAddr> = applied
            .addresses
            .iter()
            .filter(|ip| quiet.contains(ip) != applied.host_scoped.contains(ip))
            .copied()
            .collect();
        for ip in wrong {
            let host = quiet.contains(&ip);
            let rebound = k.links.del_address(DUMMY_DEVICE, ip).and_then(|_| {
                let mut added = match host {
                    true => k.links.add_host_scoped(DUMMY_DEVICE, &[ip]),
                    false => k.links.add_addresses(DUMMY_DEVICE, &[ip]),
                };
                added.pop().unwrap_or(Ok(false))
            });
            match rebound {
                Ok(_) if host => {
                    applied.host_scoped.insert(ip);
                }
                Ok(_) => {
                    applied.host_scoped.remove(&ip);
                }
                Err(e) => {
                    tracing::error!(address = %ip, host, error = %e, "Failed to change the scope of a service address");
                    applied.addresses.remove(&ip);
                    r.fail(FailureKind::Address);
                }
            }
        }
    }
}

/// Notes the results of binding `ips` (with scope host when `host`).
fn record_adds(
    applied: &mut super::Applied,
    ips: Vec<IpAddr>,
    results: Vec<crate::kernel::KernelResult<bool>>,
    host: bool,
    report: &mut SyncReport,
) {
    for (ip, result) in ips.into_iter().zip(results) {
        match result {
            Ok(_) => {
                report.addresses.added += 1;
                applied.addresses.insert(ip);
                if host {
                    applied.host_scoped.insert(ip);
                }
            }
            Err(e) => {
                tracing::error!(address = %ip, error = %e, "Failed to bind service address to dummy device");
                report.fail(FailureKind::Address);
            }
        }
    }
}
