//! Applies a [`DesiredState`] per family to the kernel, writing only differences.
//!
//! Order inside one sync (upstream bug k/k #133773): ipsets, then the iptables payload and built-in-chain
//! jumps, then IPVS virtual/real servers, then kube-ipvs0 addresses, then UDP conntrack cleanup. A family
//! whose payload never restored successfully gets no IPVS services (a VIP never serves without its SNAT rule).
//!
//! An event-driven sync diffs the desired state against what this reconciler last applied and does not dump
//! the kernel (except destination dumps of TCP virtual servers losing real servers, for graceful
//! termination). A full sync dumps the kernel once per object kind and repairs drift. Only objects that are
//! ours are ever deleted (see [`ownership`]).

mod addresses;
mod conntrack;
mod ipsets;
mod iptables;
mod ipvs;
pub mod ownership;

use crate::cluster::model::IpFamily;
use crate::kernel::conntrack::Conntrack;
use crate::kernel::ipset::IpSets;
use crate::kernel::iptables::Iptables;
use crate::kernel::ipvs::{Ipvs, IpvsService, IpvsServiceKey};
use crate::kernel::link::Links;
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
    /// The hints in the trackers' results (removed UDP ClusterIPs, removed or unready UDP endpoints).
    pub fn from_updates(
        services: &crate::cluster::tracker::ServiceUpdateResult,
        endpoints: &crate::cluster::tracker::EndpointsUpdateResult,
    ) -> Self {
        ConntrackHints {
            stale_service_ips: services.deleted_udp_cluster_ips.clone(),
            stale_endpoint_ips: endpoints
                .deleted_udp_endpoints
                .iter()
                .map(|e| e.ip)
                .collect(),
        }
    }

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

/// One family's input to [`Reconciler::apply`].
#[derive(Debug, Clone, Copy)]
pub struct FamilyInput<'a> {
    pub desired: &'a DesiredState,
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
    /// Last payload restored successfully (None: never, i.e. cold start).
    pub iptables_payload: Option<String>,
    /// All built-in-chain jumps were in place after the last attempt.
    pub jumps_ok: bool,
    /// Jumps this reconciler inserted through `iptables-restore`. One that reads as missing again is
    /// checked with `iptables -C` before any new insert, so a save format we misread can never make
    /// the jumps pile up.
    pub jumps_restored: BTreeSet<JumpRule>,
    pub addresses: BTreeSet<IpAddr>,
    pub node_port_ips: BTreeSet<IpAddr>,
}

/// Kernel state read at the start of a full sync (None: not dumped, or the dump failed).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub ipsets: Option<BTreeMap<String, BTreeSet<String>>>,
    pub services: Option<Vec<IpvsService>>,
    pub addresses: Option<BTreeSet<IpAddr>>,
}

/// Applies desired states and remembers what it applied.
#[derive(Debug, Default)]
pub struct Reconciler {
    applied: BTreeMap<IpFamily, Applied>,
    graceful: GracefulTermination,
    dummy_ok: bool,
    /// During [`Reconciler::apply_changes`]: per family, what changed since the desired state applied
    /// last; the event-driven steps then look only at these objects.
    changes: BTreeMap<IpFamily, DesiredDelta>,
}

impl Reconciler {
    /// A reconciler that has applied nothing yet (its first sync should be full).
    pub fn new() -> Self {
        Self::default()
    }

    /// Last applied state of a family.
    pub fn applied(&self, family: IpFamily) -> Option<&Applied> {
        self.applied.get(&family)
    }

    /// The graceful-termination queue.
    pub fn graceful(&self) -> &GracefulTermination {
        &self.graceful
    }

    /// Deletes drained real servers (production calls this every [`crate::proxier::graceful::CHECK_INTERVAL`]).
    pub fn check_graceful(&mut self, k: &mut Backends) -> GracefulCheck {
        self.graceful.check(k.ipvs.as_mut())
    }

    /// Like [`Reconciler::apply`], but an event-driven sync only looks at what `changes` lists for a
    /// family (the difference between the desired state applied last and `families`' one), so its cost
    /// is O(changes). Families without an entry, and full syncs, compare everything.
    pub fn apply_changes(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        changes: BTreeMap<IpFamily, DesiredDelta>,
        full: bool,
        hints: &ConntrackHints,
        report: &mut SyncReport,
    ) {
        if !full {
            self.changes = changes;
        }
        self.apply(k, families, full, hints, report);
        self.changes.clear();
    }

    /// The changes an event-driven step may rely on for `family` (never during full syncs).
    fn scope(&self, family: IpFamily) -> Option<&DesiredDelta> {
        self.changes.get(&family).filter(|d| !d.full)
    }

    /// Applies every family's desired state. `full` dumps the kernel and repairs drift.
    pub fn apply(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        full: bool,
        hints: &ConntrackHints,
        report: &mut SyncReport,
    ) {
        report.full |= full;
        for f in families {
            self.applied.entry(f.desired.family).or_default();
            for (policy, n) in &f.desired.no_local_endpoints {
                *report.no_local_endpoints.entry(policy).or_default() += n;
            }
        }
        let snap = if full {
            self.snapshot(k, report)
        } else {
            Snapshot::default()
        };

        self.sync_ipsets(k, families, &snap, report);

        let mut serve = Vec::new();
        for f in families {
            if self.sync_iptables(k, f, full, report) {
                serve.push(*f);
            } else {
                report.ipvs_withheld += 1;
            }
        }

        let removed_udp = self.sync_ipvs(k, &serve, &snap, report);
        self.sync_addresses(k, &serve, &snap, report);
        self.sync_conntrack(k, &serve, full, &removed_udp, hints, report);
    }

    fn snapshot(&mut self, k: &mut Backends, report: &mut SyncReport) -> Snapshot {
        use crate::proxier::report::FailureKind;
        use crate::proxier::report::SyncStep;
        let mut snap = Snapshot::default();
        let t = std::time::Instant::now();
        match k.ipsets.save_all() {
            Ok(s) => snap.ipsets = Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "ipset save failed");
                report.fail(FailureKind::KernelDump);
            }
        }
        report.add_step(SyncStep::DumpIpsets, t.elapsed());
        let t = std::time::Instant::now();
        match k.ipvs.services() {
            Ok(s) => snap.services = Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "IPVS service dump failed");
                report.fail(FailureKind::KernelDump);
            }
        }
        report.add_step(SyncStep::DumpIpvs, t.elapsed());
        let t = std::time::Instant::now();
        self.ensure_dummy(k, report);
        if self.dummy_ok {
            match k.links.addresses(crate::kernel::link::DUMMY_DEVICE) {
                Ok(a) => snap.addresses = Some(a.into_iter().collect()),
                Err(e) => {
                    tracing::warn!(error = %e, "kube-ipvs0 address dump failed");
                    report.fail(FailureKind::KernelDump);
                }
            }
        }
        report.add_step(SyncStep::DumpAddresses, t.elapsed());
        snap
    }
}
