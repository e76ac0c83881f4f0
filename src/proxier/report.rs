//! What one sync did: timings, object counts and failures, for the daemon to turn into metrics and logs.

use crate::net::IpFamily;
use crate::proxier::desired::TrafficPolicy;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Kind of kernel write that failed during a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    /// `iptables-restore` of the payload (the `sync_proxy_rules_iptables_restore_failures_total` metric).
    IptablesRestore,
    /// Creating a chain or inserting a built-in-chain jump.
    IptablesJump,
    /// Reading iptables / ipset / IPVS / address state.
    KernelDump,
    /// Creating a set or applying set members.
    Ipset,
    /// Set entries the ipset tool rejected as invalid.
    IpsetRejected,
    /// Adding/updating/deleting a virtual server.
    IpvsService,
    /// Adding/updating/deleting a real server.
    IpvsDestination,
    /// Creating kube-ipvs0 or binding/unbinding an address.
    Address,
    /// Dumping or deleting conntrack flows.
    Conntrack,
}

/// Added / updated / deleted counts for one kind of kernel object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    pub added: usize,
    pub updated: usize,
    pub deleted: usize,
}

impl ObjectCounts {
    /// Total number of writes.
    pub fn total(&self) -> usize {
        self.added + self.updated + self.deleted
    }
}

/// Step of a sync, for per-step durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SyncStep {
    /// Full syncs: reading our ipsets back (`ipset save`).
    DumpIpsets,
    /// Full syncs: reading the IPVS virtual servers back.
    DumpIpvs,
    /// Full syncs: reading every real server's quick view (`/proc/net/ip_vs`).
    DumpIpvsView,
    /// Full syncs: reading kube-ipvs0's addresses back.
    DumpAddresses,
    Plan,
    Ipsets,
    Iptables,
    Ipvs,
    Addresses,
    Conntrack,
}

/// Members and size of one of our sets after a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSetFigures {
    pub family: IpFamily,
    pub name: String,
    /// Members planned (and applied).
    pub entries: usize,
    /// The kernel set's `maxelem` (65,536 for bitmap:port sets, their range).
    pub maxelem: u32,
}

/// One family's own figures in a sync (the per-family metrics of a dual-stack node).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FamilyReport {
    /// Time spent on this family: its planning and its own steps, plus an even share of the work done
    /// for all families at once (kernel dumps, the one ipset batch).
    pub duration: Duration,
    /// Time of this family's conntrack cleanup, when that step ran.
    pub conntrack_duration: Option<Duration>,
    /// Conntrack flows deleted for this family.
    pub conntrack_deleted: usize,
    /// Failed `iptables-restore` runs of this family.
    pub iptables_restore_failures: usize,
}

/// Result of one `sync_proxy_rules` (all families).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncReport {
    /// Whether the kernel was dumped and drift repaired.
    pub full: bool,
    /// Wall time of the whole sync.
    pub duration: Duration,
    /// Wall time per step (summed over families).
    pub step_durations: BTreeMap<SyncStep, Duration>,
    pub ipvs_services: ObjectCounts,
    pub ipvs_destinations: ObjectCounts,
    /// Set members added/deleted.
    pub ipset_entries: ObjectCounts,
    /// Sets created.
    pub ipsets_created: usize,
    /// Sets grown (rebuilt larger and swapped in) because their members outgrew them.
    pub ipsets_grown: usize,
    /// Members and kernel size of every set a full sync looked at, or an event-driven sync changed.
    pub ipsets: Vec<IpSetFigures>,
    pub addresses: ObjectCounts,
    /// Payload restores performed (0 when the payload was unchanged on an event-driven sync).
    pub iptables_restores: usize,
    /// Jump rules inserted into built-in chains.
    pub jumps_inserted: usize,
    /// Real servers set to weight 0 and queued for graceful deletion.
    pub graceful_queued: usize,
    /// Queued real servers restored because their endpoint came back.
    pub graceful_restored: usize,
    /// Conntrack flows deleted.
    pub conntrack_deleted: usize,
    /// Failed kernel operations by kind.
    pub failures: BTreeMap<FailureKind, usize>,
    /// Service ports without local endpoints by traffic policy, all families.
    pub no_local_endpoints: BTreeMap<TrafficPolicy, u64>,
    /// Some step failed: the caller should schedule another (full) sync soon.
    pub retry_needed: bool,
    /// Families whose IPVS services were not programmed because their rules never restored (cold start).
    pub ipvs_withheld: usize,
    /// Each family's own figures.
    pub families: BTreeMap<IpFamily, FamilyReport>,
    /// Schedulers the kernel refused in IPVS service writes (no such scheduler): the daemon plans
    /// them as unavailable from the next sync on.
    pub refused_schedulers: BTreeSet<String>,
    /// What a full sync found changed behind its back (empty on event-driven syncs and first syncs).
    pub drift: crate::proxier::drift_report::DriftReport,
    /// Foreign objects a full sync found and left alone, by kind (`None`: not a full sync).
    pub foreign: Option<BTreeMap<crate::proxier::drift_report::ForeignKind, u64>>,
    /// Families whose last plan was reused as is: none of its inputs changed since (no Service or
    /// EndpointSlice changed, same node facts and configuration), so the planner did not run.
    pub plans_reused: BTreeSet<IpFamily>,
}

impl SyncReport {
    /// Counts one failure of `kind` and asks for a retry.
    pub fn fail(&mut self, kind: FailureKind) {
        *self.failures.entry(kind).or_default() += 1;
        self.retry_needed = true;
    }

    /// Failures of one kind.
    pub fn failures_of(&self, kind: FailureKind) -> usize {
        self.failures.get(&kind).copied().unwrap_or(0)
    }

    /// Total failed operations.
    pub fn failure_count(&self) -> usize {
        self.failures.values().sum()
    }

    /// Total kernel writes (objects added/updated/deleted, restores, jumps, flows deleted).
    pub fn writes(&self) -> usize {
        self.ipvs_services.total()
            + self.ipvs_destinations.total()
            + self.ipset_entries.total()
            + self.ipsets_created
            + self.ipsets_grown
            + self.addresses.total()
            + self.iptables_restores
            + self.jumps_inserted
            + self.conntrack_deleted
    }

    pub(crate) fn add_step(&mut self, step: SyncStep, d: Duration) {
        *self.step_durations.entry(step).or_default() += d;
    }

    /// One family's figures.
    pub(crate) fn family_mut(&mut self, family: IpFamily) -> &mut FamilyReport {
        self.families.entry(family).or_default()
    }

    /// Adds a step done for every family at once (a dump, the one ipset batch): each family of this
    /// sync gets an even share of its time.
    pub(crate) fn add_shared_step(&mut self, step: SyncStep, d: Duration) {
        self.add_step(step, d);
        let n = u32::try_from(self.families.len())
            .unwrap_or(u32::MAX)
            .max(1);
        for f in self.families.values_mut() {
            f.duration += d / n;
        }
    }

    /// Adds one family's part of a step.
    pub(crate) fn add_family_step(&mut self, step: SyncStep, family: IpFamily, d: Duration) {
        self.add_step(step, d);
        self.family_mut(family).duration += d;
    }
}
