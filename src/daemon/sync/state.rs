//! The sync loop's state, shared by the files that implement its steps, and the retry delay.

use super::SyncSettings;
use super::streak::DriftStreak;
use crate::cluster::model::{EndpointsMap, ServiceMap, ServiceName};
use crate::cluster::watch::{NodeInfo, Synced, Trackers};
use crate::daemon::events::Events;
use crate::daemon::scheduler_modules::SchedulerModules;
use crate::explain::Published;
use crate::explain::metrics::StateMetrics;
use crate::metrics::Metrics;
use crate::proxier::{ConntrackHints, Proxier};
use crate::runner::RunnerHandle;
use crate::server::{ProxyHealth, ServiceHealthServer};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// Delay before retrying a sync that had failures.
pub const RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// The sync loop's state; one per process, driven by the bounded-frequency runner.
pub struct SyncLoop {
    pub(super) settings: Arc<SyncSettings>,
    pub(super) trackers: Arc<Trackers>,
    pub(super) synced: Synced,
    pub(super) node: watch::Receiver<Option<Arc<NodeInfo>>>,
    pub(super) proxier: Arc<Mutex<Proxier>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) health: Arc<ProxyHealth>,
    pub(super) service_health: Arc<ServiceHealthServer>,
    pub(super) runner: RunnerHandle,
    pub(super) events: Events,
    pub(super) published: Published,
    pub(super) state_metrics: Arc<StateMetrics>,
    pub(super) drift_streak: DriftStreak,
    pub(super) services: Arc<ServiceMap>,
    pub(super) endpoints: Arc<EndpointsMap>,
    /// Services changed since the last sync that reached the proxier (`None`: unknown, replan all).
    pub(super) pending_changed: Option<BTreeSet<ServiceName>>,
    pub(super) last_full: Option<Instant>,
    pub(super) service_total: u64,
    pub(super) endpoint_total: u64,
    /// Conntrack hints of syncs that did not get to clean conntrack (kept for the next sync).
    pub(super) pending_hints: ConntrackHints,
    /// Modules of the schedulers Services ask for by annotation (loaded on first use).
    pub(super) schedulers: Arc<Mutex<SchedulerModules>>,
}
