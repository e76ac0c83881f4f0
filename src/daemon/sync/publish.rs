//! After a sync: its figures as metrics, health and the health-check listeners updated, network
//! programming latency observed, and a retry scheduled when it had failures.

use super::job::Outcome;
use super::state::{RETRY_DELAY, SyncLoop};
use crate::cluster::model::{ServiceName, ports_of};
use crate::metrics::{Metrics, TrafficPolicy};
use crate::net::IpFamily;
use crate::proxier::FailureKind;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime};

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
    for s in &r.ipsets {
        metrics.set_ipset(s.family, &s.name, s.entries, s.maxelem);
    }
}

/// Where the time between a change and its programming goes (debug): waiting for this sync to start,
/// reading the node's addresses, and the sync itself.
pub fn log_timing(
    o: &Outcome,
    sync_start: SystemTime,
    trigger_times: &BTreeMap<ServiceName, Vec<SystemTime>>,
) {
    let queued = trigger_times
        .values()
        .flatten()
        .min()
        .and_then(|t| sync_start.duration_since(*t).ok());
    tracing::trace!(
        ?queued,
        local_read = ?o.local_read,
        sync = ?o.report.duration,
        total = ?sync_start.elapsed().unwrap_or_default(),
        "sync timing"
    );
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

impl SyncLoop {
    /// Publishes a sync's outcome: metrics, health, health checks; schedules a retry after failures.
    pub(super) async fn publish(
        &mut self,
        o: Outcome,
        full: bool,
        trigger_times: &BTreeMap<ServiceName, Vec<SystemTime>>,
    ) {
        self.record_metrics(&o);
        let r = &o.report;
        if r.full {
            self.observe_drift(r);
        }
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
            // Upstream's per-sync line, at V(2).
            tracing::debug!(
                elapsed = ?r.duration,
                full = r.full,
                writes = r.writes(),
                services = self.services.len(),
                "SyncProxyRules complete"
            );
        }
        // The whole report at V(4): upstream prints one line per sync at V(2), the one above.
        tracing::trace!(report = ?r, cost = %o.cost, "sync report");
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
    use crate::proxier::SyncReport;
    use std::time::Duration;

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
            decisions: Vec::new(),
            local_read: Duration::ZERO,
            cost: Default::default(),
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
