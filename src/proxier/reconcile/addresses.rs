//! Service addresses bound to kube-ipvs0 (only that link is ever touched).

use super::diff::{Scope, StepInput};
use super::{Backends, FamilyInput, Reconciler, Snapshot};
use crate::kernel::link::DUMMY_DEVICE;
use crate::net::IpFamily;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
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
            .diff(|_, _| true);
            let (to_add, to_del) = (diff.add, diff.delete);
            let added = k.links.add_addresses(DUMMY_DEVICE, &to_add);
            for (ip, result) in to_add.into_iter().zip(added) {
                match result {
                    Ok(_) => {
                        report.addresses.added += 1;
                        applied.addresses.insert(ip);
                    }
                    Err(e) => {
                        tracing::error!(address = %ip, error = %e, "Failed to bind service address to dummy device");
                        report.fail(FailureKind::Address);
                    }
                }
            }
            let deleted = k.links.del_addresses(DUMMY_DEVICE, &to_del);
            for (ip, result) in to_del.into_iter().zip(deleted) {
                match result {
                    Ok(_) => {
                        report.addresses.deleted += 1;
                        applied.addresses.remove(&ip);
                    }
                    Err(e) => {
                        tracing::error!(address = %ip, error = %e, "Failed to unbind service address from dummy interface");
                        report.fail(FailureKind::Address);
                    }
                }
            }
            report.add_family_step(SyncStep::Addresses, family, start.elapsed());
        }
    }
}
