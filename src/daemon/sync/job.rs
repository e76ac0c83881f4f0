//! The blocking part of one sync: load the scheduler modules Services ask for, read the node's
//! addresses, plan and apply, and collect what the servers, metrics and reports need.

use super::settings::SyncSettings;
use super::snapshot::{Maps, local_addresses, snapshots};
use super::usage::{CostMeter, SyncCost};
use crate::cluster::model::{EndpointsMap, ServiceMap, ServiceName};
use crate::cluster::watch::NodeInfo;
use crate::daemon::scheduler_modules::SchedulerModules;
use crate::explain::Published;
use crate::kernel::KernelError;
use crate::metrics::TrafficPolicy;
use crate::net::IpFamily;
use crate::proxier::plan::decision::DecisionChanges;
use crate::proxier::{ConntrackHints, Proxier, SyncInput, SyncReport};
use crate::scheduler::Scheduler;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Locks `m`, taking over a poisoned lock (a panicked sync leaves consistent data behind).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the blocking part of a sync hands back.
pub struct Outcome {
    pub report: SyncReport,
    /// service → (healthCheckNodePort, local endpoints), over all families.
    pub health_checks: BTreeMap<ServiceName, (u16, usize)>,
    /// Per family, the no-local-endpoints counts by policy.
    pub no_local: BTreeMap<IpFamily, BTreeMap<TrafficPolicy, u64>>,
    /// What this sync changed in each family's decision records.
    pub decisions: Vec<(IpFamily, DecisionChanges)>,
    /// Time spent reading the node's addresses before planning.
    pub local_read: Duration,
    /// What the sync cost its thread, and its kernel I/O.
    pub cost: SyncCost,
}

/// One sync's input, moved to a blocking thread.
pub struct SyncJob {
    pub proxier: Arc<Mutex<Proxier>>,
    pub settings: Arc<SyncSettings>,
    pub node: Option<Arc<NodeInfo>>,
    pub services: Arc<ServiceMap>,
    pub endpoints: Arc<EndpointsMap>,
    pub full: bool,
    pub hints: ConntrackHints,
    pub changed: Option<BTreeSet<ServiceName>>,
    pub schedulers: Arc<Mutex<SchedulerModules>>,
    /// Annotated schedulers of the Services changed since the last sync (their modules are loaded).
    pub wanted: BTreeSet<Scheduler>,
    /// Where the draining real servers are published after the sync.
    pub published: Published,
}

/// Why a sync job planned nothing.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The node's local addresses could not be read.
    #[error("listing local addresses: {0}")]
    LocalAddresses(#[source] KernelError),
}

impl SyncJob {
    /// Runs the sync; an error when the node's addresses cannot be read (nothing was planned).
    pub fn run(self) -> Result<Outcome, JobError> {
        let meter = CostMeter::start();
        let unavailable = {
            let mut m = lock(&self.schedulers);
            m.load(&self.wanted, self.full);
            m.unavailable()
        };
        let mut p = lock(&self.proxier);
        let read_start = Instant::now();
        let local =
            local_addresses(&mut p, &self.settings, self.full).map_err(JobError::LocalAddresses)?;
        let local_read = read_start.elapsed();
        let maps = Maps {
            services: &self.services,
            endpoints: &self.endpoints,
        };
        let mut families = snapshots(&self.settings, self.node.as_deref(), &local, maps);
        for f in &mut families {
            f.config.unavailable_schedulers.clone_from(&unavailable);
        }
        // A full sync read every address, kube-ipvs0's included: the reconciler compares with those.
        let dummy_addresses = self.full.then_some(local.1);
        let report = p.sync_proxy_rules(SyncInput {
            families,
            full: self.full,
            conntrack: self.hints,
            changed: self.changed,
            dummy_addresses,
        });
        let (health_checks, no_local) = health_and_no_local(&p, &self.settings.families);
        self.published.set_drains(p.reconciler().graceful().queue());
        Ok(Outcome {
            report,
            health_checks,
            no_local,
            decisions: p.take_decision_changes(),
            local_read,
            cost: meter.stop(),
        })
    }
}

type HealthChecks = BTreeMap<ServiceName, (u16, usize)>;
type NoLocal = BTreeMap<IpFamily, BTreeMap<TrafficPolicy, u64>>;

/// The health-check listeners (local endpoints summed over the families) and no-local counts planned.
fn health_and_no_local(p: &Proxier, families: &[IpFamily]) -> (HealthChecks, NoLocal) {
    let mut health_checks = HealthChecks::new();
    let mut no_local = NoLocal::new();
    for &family in families {
        if let Some(d) = p.desired(family) {
            for hc in &d.health_checks {
                let e = health_checks
                    .entry(hc.service.clone())
                    .or_insert((hc.node_port, 0));
                e.1 += hc.local_endpoints;
            }
            no_local.insert(family, d.no_local_endpoints.clone());
        }
    }
    (health_checks, no_local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn a_job_error_keeps_the_kernel_error() {
        let e = JobError::LocalAddresses(KernelError::Unsupported("rtnetlink".into()));
        assert_eq!(
            e.to_string(),
            "listing local addresses: unsupported: rtnetlink"
        );
        assert!(e.source().is_some_and(|c| c.is::<KernelError>()));
    }
}
