//! Drift: what a full sync finds changed in the kernel behind the reconciler's back, by kind, measured
//! before it writes anything. The kernel as dumped is compared with what this reconciler last applied
//! (not with the plan: a plan change is not drift), so it counts only once a family has been synced
//! before; what differs is what the sync repairs. Objects that are not ours are counted apart, as the
//! foreign objects left alone.

use super::ownership::{LazyOwnership, SET_BASES, set_name};
use super::{Applied, Snapshot};
use crate::kernel::ipvs::{IpvsDestination, IpvsServiceKey};
use crate::net::IpFamily;
use crate::proxier::desired::Destinations;
pub use crate::proxier::drift_report::{DriftKind, DriftReport, ForeignKind};
use crate::proxier::graceful::GracefulTermination;
use crate::proxier::plan::ipsets::staging_name;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// One family's applied state against the kernel as dumped, with what decides ownership.
pub(super) struct Measure<'a> {
    pub family: IpFamily,
    pub applied: &'a Applied,
    pub snap: &'a Snapshot,
    pub graceful: &'a GracefulTermination,
    /// Gathered only when a virtual server we did not apply is in the kernel.
    pub own: &'a LazyOwnership<'a>,
    pub exclude: &'a [IpNet],
}

impl Measure<'_> {
    /// Adds what drifted in this family to `out`.
    pub fn drift(&self, out: &mut DriftReport) {
        self.virtual_servers(out);
        self.set_members(out);
        self.addresses(out);
    }

    /// Virtual servers missing or added, attributes changed, real servers missing, added or reweighted.
    fn virtual_servers(&self, out: &mut DriftReport) {
        let Some(kernel) = super::ipvs::kernel_services(self.snap, self.family) else {
            return;
        };
        for (key, dvs) in &self.applied.virtual_servers {
            match kernel.get(key) {
                None => out.add_virtual_server(*key, DriftKind::VirtualServer),
                Some(k) => {
                    if !super::ipvs::same_service(k, &dvs.service) {
                        out.add_virtual_server(*key, DriftKind::Scheduler);
                    }
                    self.real_servers(key, &dvs.destinations, out);
                }
            }
        }
        for key in self.strangers(kernel) {
            if self.own.get().owns(key, self.exclude) {
                out.add_virtual_server(*key, DriftKind::VirtualServer);
            }
        }
    }

    /// Virtual servers in the kernel that we did not apply (or applied in an excluded range): only
    /// these need the evidence of ownership, which is then gathered.
    fn strangers<'k>(
        &self,
        kernel: &'k BTreeMap<IpvsServiceKey, crate::kernel::ipvs::IpvsService>,
    ) -> impl Iterator<Item = &'k IpvsServiceKey> {
        let applied = &self.applied.virtual_servers;
        kernel.keys().filter(move |key| {
            !applied.contains_key(key) || super::ownership::excluded(&key.addr, self.exclude)
        })
    }

    /// One virtual server's real servers in the quick view against the applied ones (draining ones
    /// aside: the reconciler set them to weight 0 itself).
    fn real_servers(&self, key: &IpvsServiceKey, applied: &Destinations, out: &mut DriftReport) {
        // Verified in the slice of a later full sync.
        let Some(view) = self.snap.dest_view.as_ref().filter(|v| v.covers(key)) else {
            return;
        };
        let list = view.shown.get(key).map(Vec::as_slice).unwrap_or_default();
        if shows_applied(list, applied) {
            return;
        }
        let shown: BTreeMap<(IpAddr, u16), &IpvsDestination> =
            list.iter().map(|d| ((d.addr, d.port), d)).collect();
        let mut wanted = BTreeSet::new();
        for d in applied.values() {
            wanted.insert((d.addr, d.port));
            match shown.get(&(d.addr, d.port)) {
                None => out.add_virtual_server(*key, DriftKind::RealServer),
                Some(k) if k.weight != d.weight => out.add_virtual_server(*key, DriftKind::Weight),
                Some(_) => {}
            }
        }
        for (addr, port) in shown.keys() {
            if !wanted.contains(&(*addr, *port)) && !self.graceful.contains(key, *addr, *port) {
                out.add_virtual_server(*key, DriftKind::RealServer);
            }
        }
    }

    /// Members of our sets deleted or added (a set destroyed counts each member it had).
    fn set_members(&self, out: &mut DriftReport) {
        let Some(kernel) = &self.snap.ipsets else {
            return;
        };
        let empty = BTreeSet::new();
        for (name, members) in &self.applied.ipsets {
            let have = kernel.get(name).unwrap_or(&empty);
            for m in members.symmetric_difference(have) {
                out.add(DriftKind::IpsetMember, 1);
                out.set_members.insert((name.clone(), m.clone()));
            }
        }
    }

    /// kube-ipvs0 addresses of this family deleted or added.
    fn addresses(&self, out: &mut DriftReport) {
        let Some(kernel) = &self.snap.addresses else {
            return;
        };
        let of_family = |a: &&IpAddr| IpFamily::of(a) == self.family;
        let kernel: BTreeSet<IpAddr> = kernel.iter().filter(of_family).copied().collect();
        let applied: BTreeSet<IpAddr> = self
            .applied
            .addresses
            .iter()
            .filter(of_family)
            .copied()
            .collect();
        for a in applied.symmetric_difference(&kernel) {
            out.add(DriftKind::Address, 1);
            out.addresses.insert(*a);
        }
    }

    /// Foreign objects of this family: virtual servers that are not ours.
    pub fn foreign_virtual_servers(&self) -> u64 {
        let Some(kernel) = super::ipvs::kernel_services(self.snap, self.family) else {
            return 0;
        };
        let foreign = self
            .strangers(kernel)
            .filter(|key| !self.own.get().owns(key, self.exclude));
        foreign.count() as u64
    }
}

/// Whether the view of a virtual server's real servers (`shown`, as the kernel lists them: each real
/// server once) is exactly what was applied, with the same weights: what every real server of a no-op
/// full sync finds, told without building a map of either side.
fn shows_applied(shown: &[IpvsDestination], applied: &Destinations) -> bool {
    shown.len() == applied.len()
        && shown.iter().all(|s| {
            let d = applied.get(&(s.addr, s.port));
            d.is_some_and(|d| d.weight == s.weight)
        })
}

/// ipsets in the dump that are none of ours (either family).
pub(super) fn foreign_sets(snap: &Snapshot) -> u64 {
    // A staging set (a grow in progress when a process stopped) is ours too.
    let ours: BTreeSet<String> = [IpFamily::V4, IpFamily::V6]
        .iter()
        .flat_map(|f| SET_BASES.iter().map(|b| set_name(*f, b)))
        .flat_map(|n| [staging_name(&n), n])
        .collect();
    let names = snap.ipset_headers.keys();
    names.filter(|n| !ours.contains(n.as_str())).count() as u64
}
