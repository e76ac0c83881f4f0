//! The sync loop: each run takes the tracker changes, plans and applies them on a blocking thread
//! ([`job`]), publishes the planner's decision records ([`crate::explain`]) and reports the annotation
//! problems they state, then publishes the outcome (metrics, health, service health checks) and
//! schedules a retry on failure ([`publish`]).

mod drift;
mod job;
mod publish;
mod settings;
mod snapshot;
mod state;
mod streak;
mod usage;

pub use job::Outcome;
pub use publish::failure_backend;
pub use settings::SyncSettings;
pub use snapshot::{LocalAddresses, Maps, selectable, snapshots, split_dummy};
pub use state::{RETRY_DELAY, SyncLoop};
pub use usage::{CostMeter, ProcessUsage, SyncCost};

use super::annotations;
use super::events::Events;
use super::scheduler_modules::{self, SchedulerModules};
use crate::cluster::model::ServiceName;
use crate::cluster::tracker::{EndpointsUpdateResult, ServiceUpdateResult};
use crate::cluster::watch::{NodeInfo, Synced, Trackers};
use crate::explain::Published;
use crate::explain::metrics::StateMetrics;
use crate::kernel::modules::Modprobe;
use crate::metrics::Metrics;
use crate::proxier::{ConntrackHints, FailureKind, Proxier};
use crate::runner::RunnerHandle;
use crate::server::{ProxyHealth, ServiceHealthServer};
use job::{SyncJob, lock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use streak::DriftStreak;
use tokio::sync::watch;

/// Everything the sync loop works with, handed over once at start-up.
pub struct SyncParts {
    pub settings: SyncSettings,
    pub trackers: Arc<Trackers>,
    pub synced: Synced,
    pub node: watch::Receiver<Option<Arc<NodeInfo>>>,
    pub proxier: Arc<Mutex<Proxier>>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<ProxyHealth>,
    pub service_health: Arc<ServiceHealthServer>,
    pub runner: RunnerHandle,
    pub events: Events,
    /// Where the decision records, drift and drains are published.
    pub published: Published,
    pub state_metrics: Arc<StateMetrics>,
}

/// What a sync keeps on its side while the job runs: to hand back on failure, and to publish after.
struct Kept {
    hints: ConntrackHints,
    changed: Option<BTreeSet<ServiceName>>,
    /// Services the trackers reported updated (their annotation problems are reported again).
    updated: BTreeSet<ServiceName>,
    trigger_times: BTreeMap<ServiceName, Vec<SystemTime>>,
    full: bool,
}

/// The conntrack hints in the trackers' results (removed UDP ClusterIPs, removed or unready UDP endpoints).
pub fn conntrack_hints(
    services: &ServiceUpdateResult,
    endpoints: &EndpointsUpdateResult,
) -> ConntrackHints {
    ConntrackHints {
        stale_service_ips: services.deleted_udp_cluster_ips.clone(),
        stale_endpoint_ips: endpoints
            .deleted_udp_endpoints
            .iter()
            .map(|e| e.ip)
            .collect(),
    }
}

impl SyncLoop {
    /// A loop over empty maps.
    pub fn new(p: SyncParts) -> SyncLoop {
        let node_scheduler = p.settings.plan.values().next().map(|c| c.scheduler);
        let modules = SchedulerModules::new(
            Box::new(Modprobe::default()),
            node_scheduler.unwrap_or_default(),
        );
        SyncLoop {
            settings: Arc::new(p.settings),
            trackers: p.trackers,
            synced: p.synced,
            node: p.node,
            proxier: p.proxier,
            metrics: p.metrics,
            health: p.health,
            service_health: p.service_health,
            runner: p.runner,
            events: p.events,
            published: p.published,
            state_metrics: p.state_metrics,
            drift_streak: DriftStreak::default(),
            services: Arc::default(),
            endpoints: Arc::default(),
            pending_changed: None,
            last_full: None,
            service_total: 0,
            endpoint_total: 0,
            pending_hints: ConntrackHints::default(),
            schedulers: Arc::new(Mutex::new(modules)),
        }
    }

    /// One run of the loop (called by the runner).
    pub async fn sync(&mut self) {
        if !self.synced.proxy_ready() {
            tracing::debug!("not syncing until Services and EndpointSlices have been listed");
            return;
        }
        let sync_start = SystemTime::now();
        if self.last_full.is_none() {
            // Marks the end of the initial list in the log, for cold-start breakdowns.
            tracing::info!(
                usage = %ProcessUsage::now(),
                "starting the first sync (Services and EndpointSlices listed)"
            );
        }
        let (job, kept) = self.job();
        let result = tokio::task::spawn_blocking(move || job.run()).await;
        let Some(mut outcome) = self.settle(result, &kept) else {
            return;
        };
        self.publish_decisions(std::mem::take(&mut outcome.decisions), &kept.updated);
        publish::log_timing(&outcome, sync_start, &kept.trigger_times);
        if self.last_full.is_none() {
            tracing::info!(usage = %ProcessUsage::now(), "first sync done");
        }
        self.publish(outcome, kept.full, &kept.trigger_times).await;
    }

    /// Folds the tracker changes in and prepares this sync's job.
    fn job(&mut self) -> (SyncJob, Kept) {
        let (svc, eps) = self.apply_trackers();
        let mut hints = conntrack_hints(&svc, &eps);
        hints.merge(std::mem::take(&mut self.pending_hints));
        let changed = self.pending_changed.take().map(|mut c| {
            c.extend(svc.updated_services.iter().cloned());
            c.extend(eps.updated_services.iter().cloned());
            c
        });
        let full = self
            .last_full
            .is_none_or(|t| t.elapsed() >= self.settings.sync_period);
        let job = SyncJob {
            proxier: self.proxier.clone(),
            settings: self.settings.clone(),
            node: self.node.borrow().clone(),
            services: self.services.clone(),
            endpoints: self.endpoints.clone(),
            full,
            hints: hints.clone(),
            changed: changed.clone(),
            schedulers: self.schedulers.clone(),
            wanted: scheduler_modules::wanted(&self.services, &svc.updated_services),
            published: self.published.clone(),
        };
        // The rest of the trackers' results is dropped before the sync (at the first sync the changed
        // ports of both trackers and the Services with new endpoints name every Service: ~5 MiB at 10k).
        let kept = Kept {
            hints,
            changed,
            updated: svc.updated_services,
            trigger_times: eps.trigger_times,
            full,
        };
        (job, kept)
    }

    /// The outcome of a job that ran; after a failure, what the sync took is handed to the next one
    /// (scheduled soon) and `None` is returned.
    fn settle(
        &mut self,
        result: Result<Result<Outcome, job::JobError>, tokio::task::JoinError>,
        kept: &Kept,
    ) -> Option<Outcome> {
        let outcome = match result {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "sync failed");
                self.pending_hints = kept.hints.clone();
                // The proxier never saw these changes: hand them to the next sync.
                self.pending_changed = kept.changed.clone();
                self.runner.retry_after(RETRY_DELAY);
                return None;
            }
            Err(e) => {
                tracing::error!(error = %e, "sync thread panicked");
                self.pending_hints = kept.hints.clone();
                // Unknown how far the proxier got: the next sync replans everything.
                self.pending_changed = None;
                self.runner.retry_after(RETRY_DELAY);
                return None;
            }
        };
        self.pending_changed = Some(BTreeSet::new());
        // Planned as unavailable from the next sync on (this one had a failure: it is retried soon).
        lock(&self.schedulers).refused_by_kernel(&outcome.report.refused_schedulers);
        if outcome.report.failures_of(FailureKind::Conntrack) > 0 {
            self.pending_hints = kept.hints.clone();
        }
        Some(outcome)
    }

    /// Applies the sync's decision changes to the published index and reports the annotation problems
    /// they bring (each once per change of its Service).
    fn publish_decisions(
        &mut self,
        changes: Vec<(
            crate::net::IpFamily,
            crate::proxier::plan::decision::DecisionChanges,
        )>,
        updated: &BTreeSet<ServiceName>,
    ) {
        let reports = {
            let index = self.published.index.write();
            let mut index = index.unwrap_or_else(|p| p.into_inner());
            // Collected, not extended one at a time: packed sets (the first sync names every Service).
            let names: BTreeSet<ServiceName> =
                changes.iter().flat_map(|(_, c)| c.names()).collect();
            let before = annotations::problems_of(&index, &names);
            drop(names);
            let mut touched = BTreeSet::new();
            for (family, c) in changes {
                touched.append(&mut index.apply(family, c));
            }
            let after = annotations::problems_of(&index, &touched);
            annotations::to_report(&before, after, updated)
        };
        for (service, p) in &reports {
            annotations::report(service, p, &self.events, &self.metrics);
        }
    }

    /// Folds the trackers' pending changes into the maps and records the change metrics.
    fn apply_trackers(&mut self) -> (ServiceUpdateResult, EndpointsUpdateResult) {
        let (svc, svc_pending, svc_total) = {
            let mut t = lock(&self.trackers.services);
            // The previous sync dropped its reference: no copy.
            let r = t.apply(Arc::make_mut(&mut self.services));
            (r, t.pending(), t.total())
        };
        let (eps, eps_pending, eps_total) = {
            let mut t = lock(&self.trackers.endpoints);
            let r = t.apply(Arc::make_mut(&mut self.endpoints));
            (r, t.pending(), t.total())
        };
        self.metrics.service_changes(
            svc_total.saturating_sub(self.service_total),
            i64::try_from(svc_pending).unwrap_or(i64::MAX),
        );
        self.metrics.endpoint_changes(
            eps_total.saturating_sub(self.endpoint_total),
            i64::try_from(eps_pending).unwrap_or(i64::MAX),
        );
        self.service_total = svc_total;
        self.endpoint_total = eps_total;
        (svc, eps)
    }
}

#[cfg(test)]
mod tests;
