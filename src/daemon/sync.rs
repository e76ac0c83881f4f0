//! One run of the sync loop: take the tracker changes, compute the node facts and plan configuration per
//! family, call `sync_proxy_rules` on a blocking thread, then publish the outcome (metrics, health,
//! service health checks, events) and schedule a retry on failure.

use super::events::Events;
use super::schedulers::{self, SchedulerModules, Unavailable};
use crate::cluster::model::{EndpointsMap, IpFamily, ServiceMap, ServiceName, ports_of};
use crate::cluster::tracker::{EndpointsUpdateResult, ServiceUpdateResult};
use crate::cluster::watch::{NodeInfo, Synced, Trackers};
use crate::config::Options;
use crate::kernel::modules::Modprobe;
use crate::metrics::{Metrics, TrafficPolicy};
use crate::proxier::plan::{NodeFacts, PlanConfig, node_port_ips};
use crate::proxier::{ConntrackHints, FailureKind, FamilySnapshot, Proxier, SyncInput, SyncReport};
use crate::runner::RunnerHandle;
use crate::scheduler::Scheduler;
use crate::server::{ProxyHealth, ServiceHealthServer};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Delay before retrying a sync that had failures.
pub const RETRY_DELAY: Duration = Duration::from_secs(5);

/// Configuration-derived settings of every sync (fixed for the life of the process).
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub node_name: String,
    /// Node IPs, primary first.
    pub node_ips: Vec<IpAddr>,
    pub families: Vec<IpFamily>,
    /// `nodePortAddresses` in the planner helper's form (CIDRs, or `["primary"]`).
    pub node_port_addresses: Vec<String>,
    /// `PlanConfig` per family, without the local detector (it depends on the Node's podCIDRs).
    pub plan: BTreeMap<IpFamily, PlanConfig>,
    /// Full sync (kernel dump, drift repair) at least this often.
    pub sync_period: Duration,
}

impl SyncSettings {
    /// Settings from the options, the node IPs, the families and iptables' `--random-fully` support.
    pub fn new(
        options: &Options,
        node_ips: Vec<IpAddr>,
        families: Vec<IpFamily>,
        random_fully: bool,
    ) -> SyncSettings {
        let c = &options.config;
        let npa = c.node_port_addresses();
        let mut node_port_addresses: Vec<String> =
            npa.cidrs.iter().map(|n| n.to_string()).collect();
        if npa.primary {
            if node_port_addresses.is_empty() {
                node_port_addresses.push("primary".to_string());
            } else {
                node_port_addresses.extend(
                    node_ips
                        .iter()
                        .map(|ip| ipnet::IpNet::from(*ip).to_string()),
                );
            }
        }
        let exclude = c.exclude_cidrs();
        let plan = families
            .iter()
            .map(|&family| {
                (
                    family,
                    PlanConfig {
                        family,
                        scheduler: c.scheduler(),
                        masquerade_all: c.iptables.masquerade_all,
                        masquerade_bit: c.masquerade_bit(),
                        local_detector: Default::default(),
                        exclude_cidrs: exclude
                            .iter()
                            .copied()
                            .filter(|n| IpFamily::of_net(n) == family)
                            .collect(),
                        random_fully,
                        unavailable_schedulers: BTreeSet::new(),
                    },
                )
            })
            .collect();
        SyncSettings {
            node_name: options.node_name.clone(),
            node_ips,
            families,
            node_port_addresses,
            plan,
            sync_period: c.sync_period(),
        }
    }
}

/// The sync loop's state; one per process, driven by the bounded-frequency runner.
pub struct SyncLoop {
    pub settings: SyncSettings,
    pub options: Arc<Options>,
    pub trackers: Arc<Trackers>,
    pub synced: Synced,
    pub node: watch::Receiver<Option<Arc<NodeInfo>>>,
    pub proxier: Arc<Mutex<Proxier>>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<ProxyHealth>,
    pub service_health: Arc<ServiceHealthServer>,
    pub runner: RunnerHandle,
    pub events: Events,
    services: Arc<ServiceMap>,
    endpoints: Arc<EndpointsMap>,
    /// Services changed since the last sync that reached the proxier (`None`: unknown, replan all).
    pending_changed: Option<BTreeSet<ServiceName>>,
    last_full: Option<Instant>,
    service_total: u64,
    endpoint_total: u64,
    /// Conntrack hints of syncs that did not get to clean conntrack (kept for the next sync).
    pending_hints: ConntrackHints,
    /// Modules of the schedulers Services ask for by annotation (loaded on first use).
    schedulers: Arc<Mutex<SchedulerModules>>,
    /// The unavailable schedulers as of the last sync (Services asking for one were reported).
    unavailable: Unavailable,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the blocking part of a sync hands back.
struct Outcome {
    report: SyncReport,
    /// service → (healthCheckNodePort, local endpoints), over all families.
    health_checks: BTreeMap<ServiceName, (u16, usize)>,
    /// Per family, the no-local-endpoints counts by policy.
    no_local: BTreeMap<IpFamily, BTreeMap<TrafficPolicy, u64>>,
    /// Time spent reading the node's addresses before planning.
    local_read: Duration,
}

/// The blocking part of one sync: read the node's addresses, plan and apply, collect what the servers
/// and metrics need.
struct SyncJob {
    proxier: Arc<Mutex<Proxier>>,
    settings: SyncSettings,
    options: Arc<Options>,
    node: Option<Arc<NodeInfo>>,
    services: Arc<ServiceMap>,
    endpoints: Arc<EndpointsMap>,
    full: bool,
    hints: ConntrackHints,
    changed: Option<BTreeSet<ServiceName>>,
    /// Where to publish what this sync programmed (`--ipvs-traffic-metrics`).
    traffic: Option<Arc<crate::traffic::TrafficMetrics>>,
    schedulers: Arc<Mutex<SchedulerModules>>,
    /// Annotated schedulers of the Services changed since the last sync (their modules are loaded).
    wanted: BTreeSet<Scheduler>,
}

impl SyncJob {
    fn run(self) -> Result<Outcome, String> {
        let unavailable = {
            let mut m = lock(&self.schedulers);
            m.load(&self.wanted, self.full);
            m.unavailable()
        };
        let mut p = lock(&self.proxier);
        let read_start = Instant::now();
        let local = local_addresses(&mut p, &self.settings.families, self.full)
            .map_err(|e| format!("listing local addresses: {e}"))?;
        let local_read = read_start.elapsed();
        let mut families = snapshots_split(
            &self.settings,
            &self.options,
            self.node.as_deref(),
            &local.0,
            &local.1,
            &self.services,
            &self.endpoints,
        );
        for f in &mut families {
            f.config.unavailable_schedulers = unavailable.keys().copied().collect();
        }
        let traffic_index = self.traffic.is_some().then(|| traffic_index(&families));
        let report = p.sync_proxy_rules(SyncInput {
            families,
            full: self.full,
            conntrack: self.hints,
            changed: self.changed,
        });
        if let (Some(t), Some(index)) = (&self.traffic, traffic_index) {
            t.publish(index);
        }
        let mut health_checks: BTreeMap<ServiceName, (u16, usize)> = BTreeMap::new();
        let mut no_local = BTreeMap::new();
        for &family in &self.settings.families {
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
        Ok(Outcome {
            report,
            health_checks,
            no_local,
            local_read,
        })
    }
}

/// Records one sync's figures: each family's own duration, no-local-endpoints counts, conntrack
/// cleanup and restore failures under its own `ip_family` label; kernel write failures by backend.
fn record_sync_metrics(metrics: &Metrics, families: &[IpFamily], o: &Outcome) {
    let r = &o.report;
    for &f in families {
        let own = r.families.get(&f);
        // A family the proxier did not report on (none today) gets the whole sync's duration.
        let duration = own.map_or(r.duration, |fr| fr.duration);
        metrics.observe_sync(f, duration, r.full);
        let nl = o.no_local.get(&f);
        for policy in TrafficPolicy::ALL {
            let n = nl.and_then(|m| m.get(&policy)).copied().unwrap_or(0);
            metrics.set_no_local_endpoints(f, policy, n);
        }
        let Some(own) = own else {
            continue;
        };
        if let Some(d) = own.conntrack_duration {
            metrics.observe_conntrack_reconcile(f, d, own.conntrack_deleted as u64);
        }
        for _ in 0..own.iptables_restore_failures {
            metrics.inc_iptables_restore_failure(f, false);
        }
    }
    let mut by_backend: BTreeMap<&str, u64> = BTreeMap::new();
    for (kind, n) in &r.failures {
        *by_backend.entry(failure_backend(*kind)).or_default() += *n as u64;
    }
    for (backend, n) in by_backend {
        metrics.inc_kernel_write_failures(backend, n);
    }
}

/// Where the time between a change and its programming goes (debug): waiting for this sync to start,
/// reading the node's addresses, and the sync itself.
fn log_timing(
    o: &Outcome,
    sync_start: SystemTime,
    trigger_times: &BTreeMap<ServiceName, Vec<SystemTime>>,
) {
    let queued = trigger_times
        .values()
        .flatten()
        .min()
        .and_then(|t| sync_start.duration_since(*t).ok());
    tracing::debug!(
        ?queued,
        local_read = ?o.local_read,
        sync = ?o.report.duration,
        total = ?sync_start.elapsed().unwrap_or_default(),
        "sync timing"
    );
}

/// The process's CPU time and page faults so far (`getrusage`), for the cold-start breakdown in the log.
struct ProcessUsage(libc::rusage);

impl ProcessUsage {
    fn now() -> Self {
        ProcessUsage(rusage(libc::RUSAGE_SELF))
    }
}

impl std::fmt::Display for ProcessUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // CPU seconds of waited-for children: the iptables processes.
        let children = rusage(libc::RUSAGE_CHILDREN);
        write!(
            f,
            "user {:.3} s, sys {:.3} s, minor faults {}, children {:.3} s",
            secs(self.0.ru_utime),
            secs(self.0.ru_stime),
            self.0.ru_minflt,
            secs(children.ru_utime) + secs(children.ru_stime),
        )
    }
}

/// `getrusage(who)`: the process's (`RUSAGE_SELF`) or its waited-for children's usage.
fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a valid out pointer.
    unsafe { libc::getrusage(who, &mut u) };
    u
}

fn secs(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
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

/// Backend label of the kernel-write-failures metric for a failure kind.
pub fn failure_backend(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::IptablesRestore | FailureKind::IptablesJump => "iptables",
        FailureKind::KernelDump => "dump",
        FailureKind::Ipset | FailureKind::IpsetRejected => "ipset",
        FailureKind::IpvsService | FailureKind::IpvsDestination => "ipvs",
        FailureKind::Address => "link",
        FailureKind::Conntrack => "conntrack",
    }
}

/// The node's addresses: (link, address) for every link but kube-ipvs0, and kube-ipvs0's.
type LocalAddresses = (Vec<(String, IpAddr)>, Vec<IpAddr>);

/// The node's addresses. A full sync reads them all from the kernel. An event-driven sync reads every
/// link but kube-ipvs0 (cached by the backend until a link or address changes) and takes kube-ipvs0's
/// from the last plan (the addresses this proxier keeps there), so its cost does not grow with the
/// number of services.
fn local_addresses(
    p: &mut Proxier,
    families: &[IpFamily],
    full: bool,
) -> crate::kernel::KernelResult<LocalAddresses> {
    let dummy = crate::kernel::link::DUMMY_DEVICE;
    if full {
        return Ok(split_dummy(p.backends_mut().links.local_addresses()?));
    }
    let others = p.backends_mut().links.local_addresses_except(dummy)?;
    let mut on_dummy = Vec::new();
    for &family in families {
        if let Some(d) = p.desired(family) {
            on_dummy.extend(d.bound_addresses.iter().copied());
        }
    }
    Ok((others, on_dummy))
}

/// Splits (link, address) pairs into the other links' and kube-ipvs0's addresses.
fn split_dummy(local: Vec<(String, IpAddr)>) -> LocalAddresses {
    let dummy = crate::kernel::link::DUMMY_DEVICE;
    let (on_dummy, others): (Vec<_>, Vec<_>) =
        local.into_iter().partition(|(link, _)| link == dummy);
    (others, on_dummy.into_iter().map(|(_, a)| a).collect())
}

/// Node facts and plan configuration of every family, from one dump of the local addresses.
pub fn snapshots(
    settings: &SyncSettings,
    options: &Options,
    node: Option<&NodeInfo>,
    local: &[(String, IpAddr)],
    services: &Arc<ServiceMap>,
    endpoints: &Arc<EndpointsMap>,
) -> Vec<FamilySnapshot> {
    let (others, on_dummy) = split_dummy(local.to_vec());
    snapshots_split(
        settings, options, node, &others, &on_dummy, services, endpoints,
    )
}

/// [`snapshots`] with kube-ipvs0's addresses apart from the other links'.
#[allow(clippy::too_many_arguments)]
fn snapshots_split(
    settings: &SyncSettings,
    options: &Options,
    node: Option<&NodeInfo>,
    others: &[(String, IpAddr)],
    on_dummy: &[IpAddr],
    services: &Arc<ServiceMap>,
    endpoints: &Arc<EndpointsMap>,
) -> Vec<FamilySnapshot> {
    let mut by_iface: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    for (iface, ip) in others {
        by_iface.entry(iface.clone()).or_default().push(*ip);
    }
    let local_addresses: Vec<IpAddr> = by_iface.values().flatten().copied().collect();
    let pod_cidrs = node.map(|n| n.pod_cidrs.clone()).unwrap_or_default();
    settings
        .families
        .iter()
        .filter_map(|&family| {
            let mut config = settings.plan.get(&family)?.clone();
            config.local_detector = options.config.local_detector(family, &pod_cidrs);
            let facts = NodeFacts {
                node_name: settings.node_name.clone(),
                zone: node.and_then(|n| n.zone.clone()),
                node_ips: settings.node_ips.clone(),
                node_port_ips: node_port_ips(
                    &by_iface,
                    on_dummy,
                    &settings.node_port_addresses,
                    &settings.node_ips,
                    family,
                ),
                local_addresses: local_addresses.clone(),
            };
            Some(FamilySnapshot {
                services: services.clone(),
                endpoints: endpoints.clone(),
                node: facts,
                config,
            })
        })
        .collect()
}

/// The part of the trackers' results read after a sync: the updated Services and the trigger times. The
/// rest is dropped before the sync (at the first sync the changed ports of both trackers and the Services
/// with new endpoints name every Service: ~5 MiB at 10k).
fn kept_across_sync(
    svc: ServiceUpdateResult,
    eps: EndpointsUpdateResult,
) -> (
    BTreeSet<ServiceName>,
    BTreeMap<ServiceName, Vec<SystemTime>>,
) {
    (svc.updated_services, eps.trigger_times)
}

/// What the traffic counters need from a sync's input (shared maps: no copy).
fn traffic_index(families: &[FamilySnapshot]) -> crate::traffic::TrafficIndex {
    crate::traffic::TrafficIndex {
        families: families
            .iter()
            .map(|f| crate::traffic::FamilyServices {
                family: f.config.family,
                services: f.services.clone(),
                node_port_ips: f.node.node_port_ips.clone(),
            })
            .collect(),
    }
}

impl SyncLoop {
    /// A loop over empty maps.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: SyncSettings,
        options: Arc<Options>,
        trackers: Arc<Trackers>,
        synced: Synced,
        node: watch::Receiver<Option<Arc<NodeInfo>>>,
        proxier: Arc<Mutex<Proxier>>,
        metrics: Arc<Metrics>,
        health: Arc<ProxyHealth>,
        service_health: Arc<ServiceHealthServer>,
        runner: RunnerHandle,
        events: Events,
    ) -> SyncLoop {
        SyncLoop {
            settings,
            trackers,
            synced,
            node,
            proxier,
            metrics,
            health,
            service_health,
            runner,
            events,
            services: Arc::default(),
            endpoints: Arc::default(),
            pending_changed: None,
            last_full: None,
            service_total: 0,
            endpoint_total: 0,
            pending_hints: ConntrackHints::default(),
            schedulers: Arc::new(Mutex::new(SchedulerModules::new(
                Box::new(Modprobe::default()),
                options.config.scheduler(),
            ))),
            unavailable: Unavailable::new(),
            options,
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
        let (svc, eps) = self.apply_trackers();
        let mut hints = conntrack_hints(&svc, &eps);
        hints.merge(std::mem::take(&mut self.pending_hints));
        let kept_hints = hints.clone();
        let changed = self.pending_changed.take().map(|mut c| {
            c.extend(svc.updated_services.iter().cloned());
            c.extend(eps.updated_services.iter().cloned());
            c
        });
        let kept_changed = changed.clone();
        let full = self
            .last_full
            .is_none_or(|t| t.elapsed() >= self.settings.sync_period);
        let job = SyncJob {
            proxier: self.proxier.clone(),
            settings: self.settings.clone(),
            options: self.options.clone(),
            node: self.node.borrow().clone(),
            services: self.services.clone(),
            endpoints: self.endpoints.clone(),
            full,
            hints,
            changed,
            traffic: self.metrics.traffic().cloned(),
            schedulers: self.schedulers.clone(),
            wanted: schedulers::wanted(&self.services, &svc.updated_services),
        };
        let (updated_services, trigger_times) = kept_across_sync(svc, eps);
        let result = tokio::task::spawn_blocking(move || job.run()).await;
        if let Ok(Ok(o)) = &result {
            // Planned as unavailable from the next sync on (this one failed: it is retried soon).
            lock(&self.schedulers).refused_by_kernel(&o.report.refused_schedulers);
        }
        self.report_ignored_annotations(&updated_services);
        let outcome = match result {
            Ok(Ok(o)) => {
                self.pending_changed = Some(BTreeSet::new());
                o
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "sync failed");
                self.pending_hints = kept_hints;
                // The proxier never saw these changes: hand them to the next sync.
                self.pending_changed = kept_changed;
                self.runner.retry_after(RETRY_DELAY);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "sync thread panicked");
                self.pending_hints = kept_hints;
                // Unknown how far the proxier got: the next sync replans everything.
                self.pending_changed = None;
                self.runner.retry_after(RETRY_DELAY);
                return;
            }
        };
        if outcome.report.failures_of(FailureKind::Conntrack) > 0 {
            self.pending_hints = kept_hints;
        }
        log_timing(&outcome, sync_start, &trigger_times);
        if self.last_full.is_none() {
            tracing::info!(usage = %ProcessUsage::now(), "first sync done");
        }
        self.publish(outcome, full, &trigger_times).await;
    }

    /// Reports the Services whose scheduler annotation is ignored (Event, metric), each once per change.
    fn report_ignored_annotations(&mut self, updated: &BTreeSet<ServiceName>) {
        let now = lock(&self.schedulers).unavailable();
        let node = self.options.config.scheduler();
        for i in
            schedulers::ignored_annotations(&self.services, updated, &self.unavailable, &now, node)
        {
            schedulers::report(&i, &self.events, &self.metrics);
        }
        self.unavailable = now;
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

    async fn publish(
        &mut self,
        o: Outcome,
        full: bool,
        trigger_times: &BTreeMap<ServiceName, Vec<SystemTime>>,
    ) {
        self.record_metrics(&o);
        let r = &o.report;
        let families = self.settings.families.clone();
        if r.retry_needed {
            tracing::warn!(
                failures = ?r.failures,
                withheld = r.ipvs_withheld,
                duration = ?r.duration,
                "sync had failures, retrying in {RETRY_DELAY:?}"
            );
            self.runner.retry_after(RETRY_DELAY);
        } else {
            let now = SystemTime::now();
            for &f in &families {
                self.health.updated(f);
                self.metrics.set_last_sync(f, now);
            }
            if full {
                // Measured from the end: a full sync slower than syncPeriod must not make every later sync
                // full as well (event-driven syncs would never get their cheap path).
                self.last_full = Some(Instant::now());
            }
            self.observe_programming(trigger_times, now);
            tracing::info!(
                full = r.full,
                duration = ?r.duration,
                writes = r.writes(),
                services = self.services.len(),
                "synced proxy rules"
            );
        }
        tracing::debug!(report = ?r, "sync report");
        self.publish_health_checks(&o).await;
    }

    /// The sync's figures as metrics.
    fn record_metrics(&self, o: &Outcome) {
        record_sync_metrics(&self.metrics, &self.settings.families, o);
    }

    /// Health-check listeners and their local endpoint counts to the service health server.
    async fn publish_health_checks(&self, o: &Outcome) {
        let ports: BTreeMap<ServiceName, u16> = o
            .health_checks
            .iter()
            .map(|(s, (port, _))| (s.clone(), *port))
            .collect();
        let counts: BTreeMap<ServiceName, usize> = o
            .health_checks
            .iter()
            .map(|(s, (_, n))| (s.clone(), *n))
            .collect();
        for failure in self.service_health.sync_services(&ports).await {
            // The health server already logged the failure; this only raises the Event (retried each sync).
            let note = failure.message(&self.settings.node_name);
            tracing::debug!("{note}");
            self.events
                .warning("FailedToStartServiceHealthcheck", "Listen", Some(note));
        }
        self.service_health.sync_endpoints(&counts);
    }

    /// Network programming latency: from each applied EndpointSlice trigger time to now, per family of
    /// the service's cluster IPs.
    fn observe_programming(
        &self,
        trigger_times: &BTreeMap<ServiceName, Vec<SystemTime>>,
        now: SystemTime,
    ) {
        for (svc, times) in trigger_times {
            let families: BTreeSet<IpFamily> = ports_of(&self.services, svc)
                .flat_map(|(_, p)| p.cluster_ips.iter().map(IpFamily::of))
                .filter(|f| self.settings.families.contains(f))
                .collect();
            for t in times {
                if let Ok(latency) = now.duration_since(*t) {
                    for &f in &families {
                        self.metrics.observe_network_programming(f, latency);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Invocation, parse_args};
    use crate::proxier::plan::LocalDetector;

    fn options(args: &[&str]) -> Options {
        let mut argv = vec!["kube-proxy", "--hostname-override=n1"];
        argv.extend_from_slice(args);
        match parse_args(argv).unwrap() {
            Invocation::Run(o) => *o,
            other => panic!("{other:?}"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn local() -> Vec<(String, IpAddr)> {
        vec![
            ("lo".into(), ip("127.0.0.1")),
            ("eth0".into(), ip("10.0.0.10")),
            ("eth0".into(), ip("fd00::10")),
            ("eth1".into(), ip("192.168.5.1")),
            ("kube-ipvs0".into(), ip("10.96.0.1")),
        ]
    }

    #[test]
    fn settings_follow_the_configuration() {
        let o = options(&[
            "--ipvs-scheduler=wrr",
            "--masquerade-all",
            "--iptables-masquerade-bit=10",
            "--ipvs-exclude-cidrs=10.200.0.0/16,fd99::/64",
            "--nodeport-addresses=10.0.0.0/24",
        ]);
        let s = SyncSettings::new(
            &o,
            vec![ip("10.0.0.10")],
            vec![IpFamily::V4, IpFamily::V6],
            true,
        );
        let v4 = &s.plan[&IpFamily::V4];
        assert_eq!(v4.scheduler, "wrr");
        assert!(v4.masquerade_all && v4.random_fully);
        assert_eq!(v4.masquerade_bit, 10);
        assert_eq!(v4.exclude_cidrs, vec!["10.200.0.0/16".parse().unwrap()]);
        assert_eq!(
            s.plan[&IpFamily::V6].exclude_cidrs,
            vec!["fd99::/64".parse().unwrap()]
        );
        assert_eq!(s.node_port_addresses, vec!["10.0.0.0/24".to_string()]);

        let p = SyncSettings::new(
            &options(&["--nodeport-addresses=primary"]),
            vec![ip("10.0.0.10")],
            vec![IpFamily::V4],
            false,
        );
        assert_eq!(p.node_port_addresses, vec!["primary".to_string()]);
        assert_eq!(p.plan[&IpFamily::V4].scheduler, "rr");
    }

    #[test]
    fn snapshots_split_local_addresses_and_pick_node_port_ips() {
        let o = options(&["--cluster-cidr=10.244.0.0/16,fd10::/56"]);
        let s = SyncSettings::new(
            &o,
            vec![ip("10.0.0.10"), ip("fd00::10")],
            vec![IpFamily::V4, IpFamily::V6],
            true,
        );
        let snaps = snapshots(&s, &o, None, &local(), &Arc::default(), &Arc::default());
        assert_eq!(snaps.len(), 2);
        let v4 = &snaps[0];
        assert_eq!(v4.config.family, IpFamily::V4);
        assert_eq!(
            v4.config.local_detector,
            LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().unwrap()])
        );
        // All local addresses of the family except loopback and kube-ipvs0 (nodePortAddresses unset).
        assert_eq!(
            v4.node.node_port_ips,
            vec![ip("10.0.0.10"), ip("192.168.5.1")]
        );
        assert!(!v4.node.local_addresses.contains(&ip("10.96.0.1")));
        assert!(v4.node.local_addresses.contains(&ip("10.0.0.10")));
        assert_eq!(snaps[1].node.node_port_ips, vec![ip("fd00::10")]);
        assert_eq!(
            snaps[1].config.local_detector,
            LocalDetector::Cidrs(vec!["fd10::/56".parse().unwrap()])
        );
    }

    #[test]
    fn node_cidr_mode_uses_the_node_pod_cidrs() {
        let o = options(&["--detect-local-mode=NodeCIDR"]);
        let s = SyncSettings::new(&o, vec![ip("10.0.0.10")], vec![IpFamily::V4], true);
        let node = NodeInfo {
            pod_cidrs: vec!["10.244.3.0/24".parse().unwrap()],
            zone: Some("z1".into()),
            ..Default::default()
        };
        let snaps = snapshots(
            &s,
            &o,
            Some(&node),
            &local(),
            &Arc::default(),
            &Arc::default(),
        );
        assert_eq!(
            snaps[0].config.local_detector,
            LocalDetector::Cidrs(vec!["10.244.3.0/24".parse().unwrap()])
        );
        assert_eq!(snaps[0].node.zone.as_deref(), Some("z1"));
        assert_eq!(snaps[0].node.node_name, "n1");
    }

    #[test]
    fn conntrack_hints_from_tracker_results() {
        use crate::cluster::model::{Protocol, ServicePortName};
        use crate::cluster::tracker::StaleUdpEndpoint;
        let svc = ServiceUpdateResult {
            deleted_udp_cluster_ips: BTreeSet::from([ip("10.96.0.10")]),
            ..Default::default()
        };
        let eps = EndpointsUpdateResult {
            deleted_udp_endpoints: vec![StaleUdpEndpoint {
                port_name: ServicePortName {
                    namespace: "kube-system".into(),
                    name: "dns".into(),
                    port_name: "dns".into(),
                    protocol: Protocol::Udp,
                },
                ip: ip("10.244.0.6"),
                port: 53,
            }],
            ..Default::default()
        };
        let mut h = conntrack_hints(&svc, &eps);
        assert_eq!(h.stale_service_ips, BTreeSet::from([ip("10.96.0.10")]));
        assert_eq!(h.stale_endpoint_ips, BTreeSet::from([ip("10.244.0.6")]));
        h.merge(ConntrackHints {
            stale_service_ips: BTreeSet::from([ip("10.96.0.11")]),
            ..Default::default()
        });
        assert_eq!(h.stale_service_ips.len(), 2);
        assert!(!h.is_empty());
        assert!(ConntrackHints::default().is_empty());
    }

    #[test]
    fn each_family_reports_its_own_figures() {
        use crate::proxier::report::FamilyReport;
        let mut report = SyncReport {
            duration: Duration::from_secs(4),
            ..Default::default()
        };
        report.families.insert(
            IpFamily::V4,
            FamilyReport {
                duration: Duration::from_secs(1),
                conntrack_duration: Some(Duration::from_millis(500)),
                conntrack_deleted: 2,
                iptables_restore_failures: 1,
            },
        );
        report.families.insert(
            IpFamily::V6,
            FamilyReport {
                duration: Duration::from_secs(3),
                ..Default::default()
            },
        );
        let outcome = Outcome {
            report,
            health_checks: BTreeMap::new(),
            no_local: BTreeMap::from([(
                IpFamily::V6,
                BTreeMap::from([(TrafficPolicy::External, 5)]),
            )]),
            local_read: Duration::ZERO,
        };
        let metrics = Metrics::new().unwrap();
        for f in [IpFamily::V4, IpFamily::V6] {
            metrics.init_family(f);
        }
        record_sync_metrics(&metrics, &[IpFamily::V4, IpFamily::V6], &outcome);
        let text = metrics.encode().unwrap();
        let has = |line: &str| text.lines().any(|l| l == line);
        for line in [
            "kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family=\"IPv6\"} 3",
            "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} 2",
            "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv6\"} 0",
            "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 0",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 0",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv6\",traffic_policy=\"external\"} 5",
        ] {
            assert!(has(line), "{line} missing in:\n{text}");
        }
        assert!(
            !text.contains("conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv6\"}")
        );
    }

    #[test]
    fn every_failure_kind_maps_to_a_backend_label() {
        for (kind, label) in [
            (FailureKind::IptablesRestore, "iptables"),
            (FailureKind::Ipset, "ipset"),
            (FailureKind::IpvsDestination, "ipvs"),
            (FailureKind::Address, "link"),
            (FailureKind::Conntrack, "conntrack"),
        ] {
            assert_eq!(failure_backend(kind), label);
        }
    }
}
