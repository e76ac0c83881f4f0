//! The proxier: plans each family and applies the plans to the kernel through one [`Reconciler`].

use crate::cluster::model::{EndpointsMap, ServiceMap, ServiceName};
use crate::net::IpFamily;
use crate::proxier::desired::DesiredState;
use crate::proxier::graceful::GracefulCheck;
use crate::proxier::plan::decision::DecisionChanges;
use crate::proxier::plan::incremental::{DesiredDelta, IncrementalPlanner};
use crate::proxier::plan::{NodeFacts, PlanConfig};
use crate::proxier::reconcile::{Backends, ConntrackHints, FamilyInput, Reconciler};
use crate::proxier::report::{SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

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
    /// kube-ipvs0's addresses as this full sync read them for the node's facts, right before planning:
    /// the reconciler then compares with them instead of reading them again (None: it reads them).
    pub dummy_addresses: Option<Vec<std::net::IpAddr>>,
}

/// Owns the kernel backends, the per-family incremental planners and the reconciler of one kube-proxy
/// process. Tests that apply a hand-built plan use a [`Reconciler`] directly.
pub struct Proxier {
    backends: Backends,
    reconciler: Reconciler,
    /// Per family incremental planners: syncs cost O(changed services).
    planners: BTreeMap<IpFamily, IncrementalPlanner>,
    /// What the last syncs changed in each family's decision records, until taken.
    decision_changes: Vec<(IpFamily, DecisionChanges)>,
}

impl Proxier {
    /// A proxier over `backends` planning with [`IncrementalPlanner`]s: an event-driven sync replans only
    /// `SyncInput::changed` and applies only what changed; a full sync replans the same way but compares
    /// the whole plan with the kernel. Its first sync is full (the kernel is read, leftovers adopted).
    pub fn new(backends: Backends) -> Self {
        Proxier {
            backends,
            reconciler: Reconciler::new(),
            planners: BTreeMap::new(),
            decision_changes: Vec::new(),
        }
    }

    /// Plans every family and applies the plans. Only changed services are replanned; a family none of
    /// whose inputs changed (no Service or EndpointSlice changed, same node facts and configuration)
    /// reuses its last plan as is ([`SyncReport::plans_reused`]). An event-driven
    /// sync hands the reconciler each family's delta so it looks only at changed objects. A full sync
    /// happens when asked, on the first sync, and after any sync that had a failure.
    pub fn sync_proxy_rules(&mut self, input: SyncInput) -> SyncReport {
        let start = Instant::now();
        let planners = &mut self.planners;
        planners.retain(|family, _| input.families.iter().any(|f| f.config.family == *family));
        let mut deltas = BTreeMap::new();
        let mut plan_times = Vec::new();
        // No Service or EndpointSlice changed since the last sync (known, not assumed).
        let maps_unchanged = input.changed.as_ref().is_some_and(BTreeSet::is_empty);
        let mut reused = BTreeSet::new();
        for f in &input.families {
            let family_start = Instant::now();
            let planner = planners.entry(f.config.family).or_default();
            if maps_unchanged && planner.plans_for(&f.node, &f.config) {
                // Every input of the plan is as it was: the last plan is this sync's plan, and its
                // delta is empty (a full sync compares the whole plan with the kernel regardless).
                reused.insert(f.config.family);
                deltas.insert(f.config.family, DesiredDelta::default());
                plan_times.push((f.config.family, family_start.elapsed()));
                continue;
            }
            let first = planner.state().is_none();
            // Only the changed services are replanned, on full syncs too: a full sync re-reads the kernel
            // and repairs it against the kept plan. Everything is replanned when the changes are unknown
            // (`None`: the first sync, or after a sync thread died) or the node facts / configuration
            // changed. Replanning all 10k+ services every syncPeriod would double the plan's memory at
            // each periodic sync for nothing: the kept plan equals a fresh one (tests/incremental_sync.rs).
            let changed = input.changed.as_ref();
            let (state, mut delta) =
                planner.update(&f.services, &f.endpoints, &f.node, &f.config, changed);
            let decisions = if first {
                state.decision_changes()
            } else {
                delta.take_decision_changes()
            };
            self.decision_changes.push((f.config.family, decisions));
            deltas.insert(f.config.family, delta);
            plan_times.push((f.config.family, family_start.elapsed()));
        }
        crate::malloc::mark("plan");
        if input.full {
            let read = input.dummy_addresses.map(|a| a.into_iter().collect());
            self.reconciler.preset_addresses(read);
        }
        let inputs: Vec<FamilyInput<'_>> = input
            .families
            .iter()
            .filter_map(|f| {
                let desired = planners.get(&f.config.family)?.state()?;
                Some(FamilyInput {
                    desired,
                    delta: deltas.get(&f.config.family),
                    config: &f.config,
                    node_port_ips: &f.node.node_port_ips,
                })
            })
            .collect();
        let mut report =
            self.reconciler
                .sync(&mut self.backends, &inputs, input.full, &input.conntrack);
        for (family, d) in plan_times {
            report.add_family_step(SyncStep::Plan, family, d);
        }
        report.plans_reused = reused;
        report.duration = start.elapsed();
        report
    }

    /// What the syncs since the last call changed in each family's decision records, oldest first.
    pub fn take_decision_changes(&mut self) -> Vec<(IpFamily, DecisionChanges)> {
        std::mem::take(&mut self.decision_changes)
    }

    /// Deletes drained real servers; call every [`crate::proxier::graceful::CHECK_INTERVAL`].
    pub fn check_graceful(&mut self) -> GracefulCheck {
        self.reconciler.check_graceful(&mut self.backends)
    }

    /// The plan of a family as last synced (health-check listeners, metrics, debugging).
    pub fn desired(&self, family: IpFamily) -> Option<&DesiredState> {
        self.planners.get(&family)?.state()
    }

    /// Forgets every family's plan (the next sync plans from scratch); the memory bench measures what
    /// the plans hold apart from the reconciler's applied state this way.
    #[cfg(any(test, feature = "testkit"))]
    pub fn forget_plans(&mut self) {
        self.planners.clear();
    }

    /// The reconciler (applied state, graceful queue).
    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    /// Removes draining real servers after `max` even with connections left (`None`: never).
    pub fn set_max_drain(&mut self, max: Option<std::time::Duration>) {
        self.reconciler.set_max_drain(max);
    }

    /// The backends, e.g. for startup sysctls or tests.
    pub fn backends_mut(&mut self) -> &mut Backends {
        &mut self.backends
    }
}
