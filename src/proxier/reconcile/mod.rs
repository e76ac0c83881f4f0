//! Applies a [`DesiredState`] per family to the kernel, writing only differences.
//!
//! Order inside one sync (upstream bug k/k #133773): ipsets, then the iptables payload and built-in-chain
//! jumps, then IPVS virtual/real servers, then kube-ipvs0 addresses, then UDP conntrack cleanup. A family
//! whose payload never restored successfully gets no IPVS services (a VIP never serves without its SNAT rule).
//!
//! Every keyed step (IPVS virtual and real servers, ipset members, addresses) has one input — the desired
//! state, the observed state and a scope — and the one shared [`diff`] turns it into add / update / delete
//! lists; the step turns those into kernel operations and counts the results. A full sync observes the
//! kernel (dumped once per object kind) and compares everything, repairing drift. An event-driven sync
//! observes what this reconciler last applied (no dump, except destination dumps of TCP virtual servers
//! losing real servers, for graceful termination) and compares only the keys its family's
//! [`DesiredDelta`] names, or everything without one. Only objects that are ours are ever deleted (see
//! [`ownership`]).

mod addresses;
mod conntrack;
mod dest_order;
pub mod diff;
pub mod drift;
mod ipset_apply;
mod ipset_grow;
mod ipsets;
mod iptables;
mod iptables_jumps;
mod ipvs;
pub mod ownership;
mod services_read;

use crate::kernel::conntrack::Conntrack;
use crate::kernel::ipset::save::SetHeader;
use crate::kernel::ipset::{IpSetSize, IpSets};
use crate::kernel::iptables::Iptables;
use crate::kernel::ipvs::procfs::ViewSlice;
use crate::kernel::ipvs::{Ipvs, IpvsService, IpvsServiceKey};
use crate::kernel::link::Links;
use crate::net::IpFamily;
use crate::proxier::desired::{DesiredState, DesiredVirtualServer, JumpRule};
use crate::proxier::graceful::{GracefulCheck, GracefulTermination};
use crate::proxier::plan::PlanConfig;
use crate::proxier::plan::incremental::DesiredDelta;
use crate::proxier::report::SyncReport;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// The kernel backends one proxier drives (shared by both families).
pub struct Backends {
    pub ipvs: Box<dyn Ipvs>,
    pub ipsets: Box<dyn IpSets>,
    pub iptables: Box<dyn Iptables>,
    pub links: Box<dyn Links>,
    pub conntrack: Box<dyn Conntrack>,
}

/// Hints from the cluster trackers about UDP services and endpoints that went away since the last sync;
/// they make an event-driven sync look at conntrack even when no UDP virtual server changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConntrackHints {
    /// Service IPs (ClusterIP, external, LB) of UDP service ports that were deleted.
    pub stale_service_ips: BTreeSet<IpAddr>,
    /// Endpoint IPs removed from UDP service ports.
    pub stale_endpoint_ips: BTreeSet<IpAddr>,
}

impl ConntrackHints {
    /// Adds hints gathered since (for syncs that were coalesced).
    pub fn merge(&mut self, other: ConntrackHints) {
        self.stale_service_ips.extend(other.stale_service_ips);
        self.stale_endpoint_ips.extend(other.stale_endpoint_ips);
    }

    /// Whether there is nothing to look at.
    pub fn is_empty(&self) -> bool {
        self.stale_service_ips.is_empty() && self.stale_endpoint_ips.is_empty()
    }
}

/// One family's input to [`Reconciler::sync`].
#[derive(Debug, Clone, Copy)]
pub struct FamilyInput<'a> {
    pub desired: &'a DesiredState,
    /// What changed since the desired state this reconciler applied last (the incremental planner's
    /// delta): an event-driven sync then compares only what it names. `None` (or a delta marked `full`)
    /// compares everything; full syncs ignore it.
    pub delta: Option<&'a DesiredDelta>,
    pub config: &'a PlanConfig,
    /// Node IPs NodePort virtual servers were planned on (NodeFacts::node_port_ips).
    pub node_port_ips: &'a [IpAddr],
}

/// What the reconciler believes it last wrote for one family.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The same `Arc`s as the desired state applied (no copy).
    pub virtual_servers: BTreeMap<IpvsServiceKey, Arc<DesiredVirtualServer>>,
    /// Members of our sets, by set name.
    pub ipsets: BTreeMap<String, BTreeSet<String>>,
    /// Kernel size of our sets, by set name: as created, grown, or read by the last full sync.
    pub ipset_sizes: BTreeMap<String, IpSetSize>,
    /// Last payload restored successfully (None: never, i.e. cold start).
    pub iptables_payload: Option<String>,
    /// All built-in-chain jumps were in place after the last attempt.
    pub jumps_ok: bool,
    /// Jumps this reconciler inserted through `iptables-restore`. One that reads as missing again is
    /// checked with `iptables -C` before any new insert, so a save format we misread can never make
    /// the jumps pile up.
    pub jumps_restored: BTreeSet<JumpRule>,
    pub addresses: BTreeSet<IpAddr>,
    /// Of `addresses`, those bound with scope host (`--ipvs-arp-per-address`).
    pub host_scoped: BTreeSet<IpAddr>,
    /// Whether `host_scoped` was read from the kernel since start (the first full sync reads it, so that
    /// addresses left with scope host by a run with the option go back to global without it).
    pub scopes_read: bool,
    pub node_port_ips: BTreeSet<IpAddr>,
    /// The tables as last read and found to hold the payload and every jump, as a backend fingerprint
    /// (None: not verified since, or the backend has no fingerprint).
    pub tables_verified: Option<TablesVerified>,
}

/// Evidence that the iptables tables held the payload: which tables, with which jumps, and their
/// fingerprint right before and after the save that showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesVerified {
    pub tables: Vec<String>,
    pub jumps: Vec<JumpRule>,
    pub fingerprint: u64,
}

/// Kernel state read at the start of a full sync (None: not dumped, or the dump failed).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub ipsets: Option<BTreeMap<String, BTreeSet<String>>>,
    /// Type and family of every set, from the same dump as `ipsets`.
    pub ipset_headers: BTreeMap<String, SetHeader>,
    /// Every virtual server by family and key.
    pub services: Option<BTreeMap<IpFamily, BTreeMap<IpvsServiceKey, IpvsService>>>,
    /// Real servers from the backend's quick view: the whole table, or this sync's slice of it (None:
    /// no view, or it failed).
    pub dest_view: Option<ViewSlice>,
    /// Virtual servers of ours that the pass over the view that this slice ended never showed (their
    /// positions shifted as others came and went): their real servers are dumped one by one.
    pub unverified: BTreeSet<IpvsServiceKey>,
    pub addresses: Option<BTreeSet<IpAddr>>,
    /// `services` holds the IPv6 virtual servers (else it holds none: they were not read).
    pub ipv6_read: bool,
}

/// Virtual servers by family and key.
fn by_family(all: Vec<IpvsService>) -> BTreeMap<IpFamily, BTreeMap<IpvsServiceKey, IpvsService>> {
    let mut out: BTreeMap<IpFamily, BTreeMap<IpvsServiceKey, IpvsService>> = BTreeMap::new();
    for s in all {
        out.entry(IpFamily::of(&s.key.addr))
            .or_default()
            .insert(s.key, s);
    }
    out
}

/// Applies desired states and remembers what it applied.
#[derive(Debug)]
pub struct Reconciler {
    applied: BTreeMap<IpFamily, Applied>,
    graceful: GracefulTermination,
    dummy_ok: bool,
    /// The next sync must be full: the first one, and any after a sync that had a failure.
    needs_full: bool,
    /// Families a full sync has applied before: a later full sync measures their drift.
    baseline: BTreeSet<IpFamily>,
    /// Virtual servers a full sync reads the real servers of through the quick view, at least ([`VIEW_SLICE`]).
    view_slice: usize,
    /// Virtual servers the slices of the current pass over the view showed.
    view_pass: BTreeSet<IpvsServiceKey>,
    /// kube-ipvs0's addresses as the caller read them for this full sync ([`Reconciler::preset_addresses`]).
    preset_addresses: Option<BTreeSet<IpAddr>>,
    /// IPv6 virtual servers between the full syncs that read them ([`services_read`]).
    ipv6: services_read::Ipv6Watch,
}

/// Virtual servers whose real servers one full sync reads, at least: a full sync reads the next slice of
/// the kernel's quick view (`/proc/net/ip_vs`), so that on a node with more virtual servers than this the
/// real servers of all of them are verified over `ceil(virtual servers / VIEW_SLICE)` full syncs (the
/// pass), and no sync pays for the whole table, whose read costs the kernel more than linear time (each
/// `read` walks the table from its start). Virtual servers themselves (missing, added, scheduler and
/// flags) are verified by every full sync; the first full sync of a family reads the whole view.
pub const VIEW_SLICE: usize = 2048;

impl Default for Reconciler {
    fn default() -> Self {
        Reconciler {
            applied: BTreeMap::new(),
            graceful: GracefulTermination::default(),
            dummy_ok: false,
            needs_full: true,
            baseline: BTreeSet::new(),
            view_slice: VIEW_SLICE,
            view_pass: BTreeSet::new(),
            preset_addresses: None,
            ipv6: services_read::Ipv6Watch::default(),
        }
    }
}

impl Reconciler {
    /// A reconciler that has applied nothing yet (its first sync is full).
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies every family's desired state and reports what it did. The sync is full (the kernel is
    /// dumped and drift repaired) when `full` asks for it, on the first sync, and after any sync that
    /// had a failure.
    pub fn sync(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        full: bool,
        hints: &ConntrackHints,
    ) -> SyncReport {
        let start = std::time::Instant::now();
        let mut report = SyncReport::default();
        self.apply(k, families, full || self.needs_full, hints, &mut report);
        self.needs_full = report.retry_needed;
        report.duration = start.elapsed();
        report
    }

    /// Sets how many virtual servers' real servers a full sync reads at least ([`VIEW_SLICE`]; tests use
    /// small slices to cover passes of several syncs).
    pub fn set_view_slice(&mut self, n: usize) {
        self.view_slice = n.max(1);
    }

    /// kube-ipvs0's addresses as the caller read them right before the next (full) sync, which then
    /// compares with them instead of reading them again; `None` makes it read them.
    pub fn preset_addresses(&mut self, addresses: Option<BTreeSet<IpAddr>>) {
        self.preset_addresses = addresses;
    }

    /// Last applied state of a family.
    pub fn applied(&self, family: IpFamily) -> Option<&Applied> {
        self.applied.get(&family)
    }

    /// The graceful-termination queue.
    pub fn graceful(&self) -> &GracefulTermination {
        &self.graceful
    }

    /// Removes draining real servers after `max` even with connections left (`None`: never).
    pub fn set_max_drain(&mut self, max: Option<std::time::Duration>) {
        self.graceful.set_max_drain(max);
    }

    /// Deletes drained real servers (production calls this every [`crate::proxier::graceful::CHECK_INTERVAL`]).
    pub fn check_graceful(&mut self, k: &mut Backends) -> GracefulCheck {
        self.graceful.check(k.ipvs.as_mut())
    }

    /// Applies every family's desired state in order: ipsets, iptables, IPVS, addresses, conntrack.
    /// `full` dumps the kernel and repairs drift (deltas are then ignored).
    fn apply(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        full: bool,
        hints: &ConntrackHints,
        report: &mut SyncReport,
    ) {
        report.full |= full;
        // The scope each step may rely on: a delta only on event-driven syncs, and only a partial one.
        let families: Vec<FamilyInput<'_>> = families
            .iter()
            .map(|f| FamilyInput {
                delta: f.delta.filter(|d| !full && !d.full),
                ..*f
            })
            .collect();
        let families = families.as_slice();
        for f in families {
            self.applied.entry(f.desired.family).or_default();
            report.family_mut(f.desired.family);
            for (policy, n) in &f.desired.no_local_endpoints {
                *report.no_local_endpoints.entry(*policy).or_default() += n;
            }
        }
        let mut snap = if full {
            self.snapshot(k, families, report)
        } else {
            Snapshot::default()
        };
        crate::malloc::mark("dumps");
        if full {
            self.measure_drift(families, &snap, report);
        }

        self.sync_ipsets(k, families, &mut snap, report);
        crate::malloc::mark("ipsets");

        let mut serve = Vec::new();
        for f in families {
            if self.sync_iptables(k, f, full, report) {
                serve.push(*f);
            } else {
                report.ipvs_withheld += 1;
            }
        }
        crate::malloc::mark("iptables");

        let removed_udp = self.sync_ipvs(k, &serve, &snap, report);
        crate::malloc::mark("ipvs");
        self.sync_addresses(k, &serve, &snap, report);
        crate::malloc::mark("addresses");
        self.sync_conntrack(k, &serve, full, &removed_udp, hints, report);
        drop(snap);
        crate::malloc::mark("conntrack");
        if full {
            self.baseline.extend(serve.iter().map(|f| f.desired.family));
        }
    }

    /// What changed behind our back in each family synced before, and the foreign objects left alone,
    /// from the full sync's dumps (before anything is written).
    fn measure_drift(
        &mut self,
        families: &[FamilyInput<'_>],
        snap: &Snapshot,
        report: &mut SyncReport,
    ) {
        use drift::{ForeignKind, Measure};
        let mut foreign = BTreeMap::from([(ForeignKind::Ipset, drift::foreign_sets(snap))]);
        let mut ipv6_foreign = None;
        for f in families {
            let family = f.desired.family;
            let Some(applied) = self.applied.get(&family) else {
                continue;
            };
            let own = ownership::LazyOwnership::new(|| self.ownership(f, snap, applied));
            let m = Measure {
                family,
                applied,
                snap,
                graceful: &self.graceful,
                own: &own,
                exclude: &f.config.exclude_cidrs,
            };
            let counted = match family == IpFamily::V6 && !snap.ipv6_read {
                true => self.ipv6.foreign,
                false => m.foreign_virtual_servers(),
            };
            *foreign.entry(ForeignKind::VirtualServer).or_default() += counted;
            if family == IpFamily::V6 && snap.ipv6_read {
                ipv6_foreign = Some(counted);
            }
            if self.baseline.contains(&family) {
                m.drift(&mut report.drift);
            }
        }
        if let Some(n) = ipv6_foreign {
            self.ipv6.foreign = n;
        }
        report.foreign = Some(foreign);
    }

    /// This full sync's part of the real-server view: the whole table while a family has no baseline (a
    /// first sync: every virtual server is compared), else the next slice. At the end of a pass, the
    /// virtual servers we applied that no slice of it showed are `unverified`.
    fn read_view(&mut self, k: &mut Backends, families: &[FamilyInput<'_>], snap: &mut Snapshot) {
        let whole = families
            .iter()
            .any(|f| !self.baseline.contains(&f.desired.family));
        let read = match whole {
            true => k.ipvs.destination_view().map(|v| v.map(ViewSlice::whole)),
            false => k.ipvs.destination_slice(self.view_slice),
        };
        // A failed view only costs speed: every virtual server's real servers are then dumped.
        snap.dest_view = read.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "IPVS real-server view failed; dumping each virtual server");
            None
        });
        let Some(view) = &snap.dest_view else {
            return;
        };
        if view.from_start {
            self.view_pass.clear();
        }
        self.view_pass.extend(view.shown.keys().copied());
        self.ipv6.observe(view);
        if view.at_end && !view.is_whole() {
            let applied = self.applied.values().flat_map(|a| a.virtual_servers.keys());
            snap.unverified = applied
                .filter(|key| !self.view_pass.contains(key))
                .copied()
                .collect();
            if !snap.unverified.is_empty() {
                tracing::debug!(
                    count = snap.unverified.len(),
                    "virtual servers no slice of the view showed: dumping their real servers"
                );
            }
        }
    }

    /// What decides whether this full sync reads the IPv6 virtual servers.
    fn ipv6_inputs(&self, families: &[FamilyInput<'_>]) -> services_read::Ipv6Inputs {
        let v6 = families.iter().find(|f| f.desired.family == IpFamily::V6);
        services_read::Ipv6Inputs {
            synced: v6.is_some(),
            read_before: self.baseline.contains(&IpFamily::V6),
            planned: v6.is_some_and(|f| !f.desired.virtual_servers.is_empty()),
            applied: self
                .applied
                .get(&IpFamily::V6)
                .is_some_and(|a| !a.virtual_servers.is_empty()),
        }
    }

    fn snapshot(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        report: &mut SyncReport,
    ) -> Snapshot {
        use crate::proxier::report::FailureKind;
        use crate::proxier::report::SyncStep;
        let mut snap = Snapshot::default();
        let t = std::time::Instant::now();
        match k.ipsets.dump() {
            Ok(s) => {
                snap.ipsets = Some(s.members);
                snap.ipset_headers = s.headers;
            }
            Err(e) => {
                tracing::error!(error = %e, "Failed to list ip sets");
                report.fail(FailureKind::KernelDump);
            }
        }
        report.add_shared_step(SyncStep::DumpIpsets, t.elapsed());
        // The view first: a slice that shows an IPv6 virtual server makes this sync read them.
        let t = std::time::Instant::now();
        self.read_view(k, families, &mut snap);
        report.add_shared_step(SyncStep::DumpIpvsView, t.elapsed());
        let t = std::time::Instant::now();
        let ipv6 = self.ipv6.needed(&self.ipv6_inputs(families));
        let has_v4 = families.iter().any(|f| f.desired.family == IpFamily::V4);
        match services_read::read_services(k.ipvs.as_mut(), has_v4, ipv6) {
            Ok(read) => {
                snap.services = Some(by_family(read.services));
                snap.ipv6_read = read.ipv6_read;
                self.ipv6.read(read.ipv6_read);
            }
            Err(e) => {
                tracing::error!(error = %e, "Failed to get IPVS services");
                report.fail(FailureKind::KernelDump);
            }
        }
        report.add_shared_step(SyncStep::DumpIpvs, t.elapsed());
        let t = std::time::Instant::now();
        self.ensure_dummy(k, report);
        let preset = self.preset_addresses.take();
        if self.dummy_ok && preset.is_some() {
            snap.addresses = preset;
        } else if self.dummy_ok {
            match k.links.addresses(crate::kernel::link::DUMMY_DEVICE) {
                Ok(a) => snap.addresses = Some(a.into_iter().collect()),
                Err(e) => {
                    tracing::error!(error = %e, "Error listing addresses binded to dummy interface");
                    report.fail(FailureKind::KernelDump);
                }
            }
        }
        report.add_shared_step(SyncStep::DumpAddresses, t.elapsed());
        snap
    }
}
