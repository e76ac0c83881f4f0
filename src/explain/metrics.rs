//! Metrics of what the explanation shows, `kubeproxy_rs_*` (no upstream equivalent): drift repaired by
//! full syncs, foreign objects left alone, and real servers draining (read from the published drain
//! queue when scraped, so the age of the oldest is current).

use crate::metrics::{EXTRA_NAMESPACE, Metrics, MetricsError};
use crate::net::IpFamily;
use crate::proxier::drift_report::{DriftKind, DriftReport, ForeignKind};
use crate::proxier::graceful::DrainQueue;
use prometheus::core::Collector;
use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The drift, foreign-object and drain metrics of one process.
pub struct StateMetrics {
    drift_repairs: IntCounterVec,
    drift_streak: IntGauge,
    foreign: IntGaugeVec,
    forced_drains: IntCounter,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(EXTRA_NAMESPACE)
}

impl StateMetrics {
    /// Registers the metrics in `metrics`' registry; the drain gauges read `drains` when scraped.
    pub fn register(
        metrics: &Metrics,
        drains: Arc<Mutex<DrainQueue>>,
    ) -> Result<StateMetrics, MetricsError> {
        let r = metrics.registry();
        let drift_repairs = IntCounterVec::new(
            opts(
                "drift_repairs_total",
                "Kernel state changed behind kube-proxy's back that full syncs repaired, by kind",
            ),
            &["kind"],
        )?;
        let drift_streak = IntGauge::with_opts(opts(
            "drift_consecutive_syncs",
            "Consecutive full syncs that had to repair drift (0 after a clean one)",
        ))?;
        let foreign = IntGaugeVec::new(
            opts(
                "foreign_objects",
                "Objects of other tools the last full sync found and left alone, by kind",
            ),
            &["kind"],
        )?;
        let forced_drains = IntCounter::with_opts(opts(
            "drain_forced_removals_total",
            "Draining real servers removed at --ipvs-max-drain-time with connections left",
        ))?;
        r.register(Box::new(drift_repairs.clone()))?;
        r.register(Box::new(drift_streak.clone()))?;
        r.register(Box::new(foreign.clone()))?;
        r.register(Box::new(forced_drains.clone()))?;
        r.register(Box::new(DrainCollector::new(drains)?))?;
        for k in DriftKind::ALL {
            drift_repairs.with_label_values(&[k.label()]);
        }
        Ok(StateMetrics {
            drift_repairs,
            drift_streak,
            foreign,
            forced_drains,
        })
    }

    /// Records a full sync's repairs and foreign objects, and the current streak of syncs with drift.
    pub fn observe_full_sync(
        &self,
        drift: &DriftReport,
        foreign: Option<&BTreeMap<ForeignKind, u64>>,
        streak: u32,
    ) {
        for (kind, n) in &drift.counts {
            self.drift_repairs
                .with_label_values(&[kind.label()])
                .inc_by(*n);
        }
        self.drift_streak.set(i64::from(streak));
        for (kind, n) in foreign.into_iter().flatten() {
            let n = i64::try_from(*n).unwrap_or(i64::MAX);
            self.foreign.with_label_values(&[kind.label()]).set(n);
        }
    }

    /// Counts real servers removed at the maximum drain time.
    pub fn forced_drains(&self, n: u64) {
        self.forced_drains.inc_by(n);
    }
}

/// `kubeproxy_rs_draining_real_servers{ip_family}` and `kubeproxy_rs_draining_oldest_seconds{ip_family}`,
/// from the drain queue as last published.
#[derive(Clone)]
struct DrainCollector {
    drains: Arc<Mutex<DrainQueue>>,
    count: IntGaugeVec,
    oldest: GaugeVec,
}

impl DrainCollector {
    fn new(drains: Arc<Mutex<DrainQueue>>) -> Result<Self, prometheus::Error> {
        let count = IntGaugeVec::new(
            opts(
                "draining_real_servers",
                "Real servers at weight 0 still draining their connections",
            ),
            &["ip_family"],
        )?;
        let oldest = GaugeVec::new(
            opts(
                "draining_oldest_seconds",
                "How long the longest-draining real server has been draining, in seconds",
            ),
            &["ip_family"],
        )?;
        Ok(DrainCollector {
            drains,
            count,
            oldest,
        })
    }
}

impl Collector for DrainCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut d = self.count.desc();
        d.extend(self.oldest.desc());
        d
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut per: BTreeMap<IpFamily, (i64, f64)> =
            [IpFamily::V4, IpFamily::V6].map(|f| (f, (0, 0.0))).into();
        let queue = self.drains.lock().unwrap_or_else(|p| p.into_inner());
        for (vs, dests) in queue.iter() {
            let e = per.entry(IpFamily::of(&vs.addr)).or_default();
            for since in dests.values() {
                e.0 += 1;
                e.1 = e.1.max(since.elapsed().as_secs_f64());
            }
        }
        drop(queue);
        for (f, (n, age)) in per {
            self.count.with_label_values(&[f.label()]).set(n);
            self.oldest.with_label_values(&[f.label()]).set(age);
        }
        let mut out = self.count.collect();
        out.extend(self.oldest.collect());
        out
    }
}

/// What the explanation endpoints cost: `kubeproxy_rs_explain_requests_total{code}` (every answer to
/// `/debug/*` by HTTP status, refusals included) and `kubeproxy_rs_explain_kernel_reads_total{kind}`
/// (`dump`: the whole IPVS table, for the listing; `get`: one virtual server, for one Service).
#[derive(Clone)]
pub struct ExplainMetrics {
    requests: IntCounterVec,
    kernel_reads: IntCounterVec,
}

impl ExplainMetrics {
    /// The metrics, not registered anywhere (tests, or before a registry exists).
    pub fn unregistered() -> Result<ExplainMetrics, prometheus::Error> {
        let requests = IntCounterVec::new(
            opts(
                "explain_requests_total",
                "Requests to /debug/* on the metrics server, by HTTP status of the answer",
            ),
            &["code"],
        )?;
        let kernel_reads = IntCounterVec::new(
            opts(
                "explain_kernel_reads_total",
                "IPVS reads made to explain Services: dump (the whole table) or get (one virtual server)",
            ),
            &["kind"],
        )?;
        for kind in ["dump", "get"] {
            kernel_reads.with_label_values(&[kind]);
        }
        Ok(ExplainMetrics {
            requests,
            kernel_reads,
        })
    }

    /// The metrics, registered in `metrics`' registry.
    pub fn register(metrics: &Metrics) -> Result<ExplainMetrics, MetricsError> {
        let m = ExplainMetrics::unregistered()?;
        let r = metrics.registry();
        r.register(Box::new(m.requests.clone()))?;
        r.register(Box::new(m.kernel_reads.clone()))?;
        Ok(m)
    }

    /// Counts one answer with HTTP status `code`.
    pub fn answered(&self, code: u16) {
        self.requests.with_label_values(&[&code.to_string()]).inc();
    }

    /// Counts `n` kernel reads of `kind` (`dump` or `get`).
    pub fn kernel_reads(&self, kind: &str, n: u64) {
        self.kernel_reads.with_label_values(&[kind]).inc_by(n);
    }

    /// Requests answered with `code` so far.
    pub fn answers(&self, code: u16) -> u64 {
        self.requests.with_label_values(&[&code.to_string()]).get()
    }

    /// Kernel reads of `kind` so far.
    pub fn reads(&self, kind: &str) -> u64 {
        self.kernel_reads.with_label_values(&[kind]).get()
    }
}
