//! The proxier: plans each family and applies the plans to the kernel through one [`Reconciler`].

use crate::cluster::model::{EndpointsMap, IpFamily, ServiceMap, ServiceName};
use crate::proxier::desired::DesiredState;
use crate::proxier::graceful::GracefulCheck;
use crate::proxier::plan::incremental::IncrementalPlanner;
use crate::proxier::plan::{NodeFacts, PlanConfig};
use crate::proxier::reconcile::{Backends, ConntrackHints, FamilyInput, Reconciler};
use crate::proxier::report::{SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// The planner function (`proxier::plan::plan` in production).
pub type PlanFn =
    Box<dyn Fn(&ServiceMap, &EndpointsMap, &NodeFacts, &PlanConfig) -> DesiredState + Send>;

/// One family's cluster snapshot and configuration (the maps are shared, not copied, per sync).
#[derive(Debug, Clone)]
pub struct FamilySnapshot {
    pub services: Arc<ServiceMap>,
    pub endpoints: Arc<EndpointsMap>,
    pub node: NodeFacts,
    pub config: PlanConfig,
}

/// Input of one sync.
#[derive(Debug, Clone, Default)]
pub struct SyncInput {
    /// One entry per family this proxier serves (one or two).
    pub families: Vec<FamilySnapshot>,
    /// Periodic sync: dump the kernel and repair drift.
    pub full: bool,
    /// UDP services / endpoints that went away, from the trackers.
    pub conntrack: ConntrackHints,
    /// Services whose Service or EndpointSlices changed since the previous sync (the trackers'
    /// `updated_services`); `None` when unknown: everything is replanned.
    pub changed: Option<BTreeSet<ServiceName>>,
}

/// Owns the kernel backends and the reconciler state of one kube-proxy process.
pub struct Proxier {
    backends: Backends,
    reconciler: Reconciler,
    planner: PlanFn,
    /// Per family incremental planners (`with_planner`): syncs then cost O(changed services).
    incremental: Option<BTreeMap<IpFamily, IncrementalPlanner>>,
    force_full: bool,
    last_desired: BTreeMap<IpFamily, DesiredState>,
}

impl Proxier {
    /// A proxier over `backends`; its first sync is full (the kernel is read, leftovers adopted).
    pub fn new(backends: Backends, planner: PlanFn) -> Self {
        Proxier {
            backends,
            reconciler: Reconciler::new(),
            planner,
            incremental: None,
            force_full: true,
            last_desired: BTreeMap::new(),
        }
    }

    /// A proxier using the real planner incrementally ([`IncrementalPlanner`]): an event-driven sync
    /// replans only `SyncInput::changed` and applies only what changed; a full sync replans the same way
    /// but compares the whole plan with the kernel.
    pub fn with_planner(backends: Backends) -> Self {
        let mut p = Self::new(backends, Box::new(crate::proxier::plan::plan));
        p.incremental = Some(BTreeMap::new());
        p
    }

    /// Plans every family and applies the plans. A full sync happens when asked, on the first sync, and
    /// after any sync that had a failure.
    pub fn sync_proxy_rules(&mut self, input: SyncInput) -> SyncReport {
        if self.incremental.is_some() {
            return self.sync_incremental(input);
        }
        let start = Instant::now();
        let plan_start = Instant::now();
        let desired: Vec<DesiredState> = input
            .families
            .iter()
            .map(|f| (self.planner)(&f.services, &f.endpoints, &f.node, &f.config))
            .collect();
        let plan_time = plan_start.elapsed();
        let inputs: Vec<FamilyInput<'_>> = desired
            .iter()
            .zip(&input.families)
            .map(|(d, f)| FamilyInput {
                desired: d,
                config: &f.config,
                node_port_ips: &f.node.node_port_ips,
            })
            .collect();
        let mut report = self.apply_inner(&inputs, input.full, &input.conntrack);
        report.add_step(SyncStep::Plan, plan_time);
        for d in desired {
            self.last_desired.insert(d.family, d);
        }
        report.duration = start.elapsed();
        report
    }

    /// `sync_proxy_rules` with the incremental planners: only changed services are replanned, and an
    /// event-driven sync hands the reconciler the delta so it looks only at changed objects.
    fn sync_incremental(&mut self, input: SyncInput) -> SyncReport {
        let start = Instant::now();
        let full = input.full || self.force_full;
        let planners = self.incremental.get_or_insert_with(BTreeMap::new);
        planners.retain(|family, _| input.families.iter().any(|f| f.config.family == *family));
        let mut changes = BTreeMap::new();
        for f in &input.families {
            let planner = planners.entry(f.config.family).or_default();
            // Only the changed services are replanned, on full syncs too: a full sync re-reads the kernel
            // and repairs it against the kept plan. Everything is replanned when the changes are unknown
            // (`None`: the first sync, or after a sync thread died) or the node facts / configuration
            // changed. Replanning all 10k+ services every syncPeriod would double the plan's memory at
            // each periodic sync for nothing: the kept plan equals a fresh one (tests/incremental_sync.rs).
            let changed = input.changed.as_ref();
            let (_, delta) = planner.update(&f.services, &f.endpoints, &f.node, &f.config, changed);
            changes.insert(f.config.family, delta);
        }
        let plan_time = start.elapsed();
        let inputs: Vec<FamilyInput<'_>> = input
            .families
            .iter()
            .filter_map(|f| {
                let desired = planners.get(&f.config.family)?.state()?;
                Some(FamilyInput {
                    desired,
                    config: &f.config,
                    node_port_ips: &f.node.node_port_ips,
                })
            })
            .collect();
        let mut report = SyncReport::default();
        self.reconciler.apply_changes(
            &mut self.backends,
            &inputs,
            changes,
            full,
            &input.conntrack,
            &mut report,
        );
        self.force_full = report.retry_needed;
        report.add_step(SyncStep::Plan, plan_time);
        for f in &input.families {
            self.last_desired.remove(&f.config.family);
        }
        report.duration = start.elapsed();
        report
    }

    /// Applies already planned states (tests and benches; `sync_proxy_rules` plans then calls this).
    pub fn apply(
        &mut self,
        families: &[FamilyInput<'_>],
        full: bool,
        hints: &ConntrackHints,
    ) -> SyncReport {
        let start = Instant::now();
        let mut report = self.apply_inner(families, full, hints);
        for f in families {
            self.last_desired
                .insert(f.desired.family, f.desired.clone());
        }
        report.duration = start.elapsed();
        report
    }

    fn apply_inner(
        &mut self,
        families: &[FamilyInput<'_>],
        full: bool,
        hints: &ConntrackHints,
    ) -> SyncReport {
        let full = full || self.force_full;
        let mut report = SyncReport::default();
        self.reconciler
            .apply(&mut self.backends, families, full, hints, &mut report);
        self.force_full = report.retry_needed;
        report
    }

    /// Deletes drained real servers; call every [`crate::proxier::graceful::CHECK_INTERVAL`].
    pub fn check_graceful(&mut self) -> GracefulCheck {
        self.reconciler.check_graceful(&mut self.backends)
    }

    /// The plan last applied for a family (health-check listeners, debugging).
    pub fn last_desired(&self, family: IpFamily) -> Option<&DesiredState> {
        self.last_desired
            .get(&family)
            .or_else(|| self.incremental.as_ref()?.get(&family)?.state())
    }

    /// The reconciler (applied state, graceful queue).
    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    /// The backends, e.g. for startup sysctls or tests.
    pub fn backends_mut(&mut self) -> &mut Backends {
        &mut self.backends
    }
}
