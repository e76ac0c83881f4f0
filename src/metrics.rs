//! Prometheus metrics with upstream kube-proxy's names (`kubeproxy_*`), labels and buckets, plus a few
//! `kubeproxy_rs_*` extras where upstream has no equivalent.
//!
//! Every [`Metrics`] owns its own [`Registry`] (no global statics), so tests can use a fresh one. Methods
//! take plain values; the sync loop calls them, the metrics server renders [`Metrics::encode`].

use crate::net::IpFamily;
use prometheus::core::Collector;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Prefix of every upstream metric name.
pub const NAMESPACE: &str = "kubeproxy";
/// Prefix of our own metrics that have no upstream equivalent.
pub const EXTRA_NAMESPACE: &str = "kubeproxy_rs";

/// Errors building the registry or rendering the exposition.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("prometheus: {0}")]
    Prometheus(#[from] prometheus::Error),
    #[error("metrics exposition is not UTF-8: {0}")]
    Utf8(#[from] std::string::FromUtf8Error),
}

pub use crate::proxier::desired::TrafficPolicy;

/// Upstream's sync-duration buckets: 1 ms doubling 15 times (last finite bound 16.384 s).
pub fn sync_duration_buckets() -> Vec<f64> {
    (0..15).map(|i| 0.001 * f64::from(1u32 << i)).collect()
}

/// Upstream's network-programming buckets: 0 s, 0.25 s, 0.5 s, then 1..59 s by 1, 60..115 s by 5 and
/// 120..300 s by 30 (upstream merges the ranges after a leading zero bound).
pub fn network_programming_buckets() -> Vec<f64> {
    let mut b = vec![0.0, 0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// All kube-proxy metrics of one process, in one registry.
pub struct Metrics {
    registry: Registry,
    sync_duration: HistogramVec,
    sync_full_duration: HistogramVec,
    sync_partial_duration: HistogramVec,
    network_programming: HistogramVec,
    last_sync_timestamp: GaugeVec,
    last_queued_timestamp: GaugeVec,
    endpoint_changes_pending: IntGauge,
    endpoint_changes_total: IntCounter,
    service_changes_pending: IntGauge,
    service_changes_total: IntCounter,
    no_local_endpoints: IntGaugeVec,
    iptables_restore_failures: IntCounterVec,
    iptables_partial_restore_failures: IntCounterVec,
    healthz_total: IntCounterVec,
    livez_total: IntCounterVec,
    conntrack_sync_duration: HistogramVec,
    conntrack_deleted_entries: IntCounterVec,
    kernel_write_failures: IntCounterVec,
    invalid_objects: IntCounterVec,
    annotation_errors: IntCounterVec,
    events: IntCounterVec,
    event_writes: IntCounterVec,
    events_queued: IntGauge,
    ipset_entries: IntGaugeVec,
    ipset_maxelem: IntGaugeVec,
    /// Series their owners render at scrape time, after the registry's ([`Metrics::register_collector`]).
    collectors: std::sync::RwLock<Vec<std::sync::Arc<dyn TextCollector>>>,
}

/// Series rendered at scrape time by their owner (e.g. the per-Service IPVS traffic counters, which read
/// the kernel): registered with [`Metrics::register_collector`], appended after the registry's series.
pub trait TextCollector: Send + Sync {
    /// Appends this collector's series, in the Prometheus text format, to `out`.
    fn render_into(&self, out: &mut String);
}

/// Name (without namespace) and help text of one metric.
#[derive(Debug, Clone, Copy)]
struct Desc {
    name: &'static str,
    help: &'static str,
}

const SYNC_DURATION: Desc = Desc {
    name: "sync_proxy_rules_duration_seconds",
    help: "Time one sync of the proxy rules took, in seconds",
};

const SYNC_FULL_DURATION: Desc = Desc {
    name: "sync_full_proxy_rules_duration_seconds",
    help: "Time one full sync of the proxy rules (kernel state re-read) took, in seconds",
};

const SYNC_PARTIAL_DURATION: Desc = Desc {
    name: "sync_partial_proxy_rules_duration_seconds",
    help: "Time one incremental sync of the proxy rules took, in seconds",
};

const NETWORK_PROGRAMMING: Desc = Desc {
    name: "network_programming_duration_seconds",
    help: "Seconds from a Service or endpoint change (EndpointSlice last-change-trigger-time) to its rules being programmed",
};

const LAST_SYNC_TIMESTAMP: Desc = Desc {
    name: "sync_proxy_rules_last_timestamp_seconds",
    help: "Unix time of the last successful sync of the proxy rules",
};

const LAST_QUEUED_TIMESTAMP: Desc = Desc {
    name: "sync_proxy_rules_last_queued_timestamp_seconds",
    help: "Unix time a sync of the proxy rules was last requested",
};

const ENDPOINT_CHANGES_PENDING: Desc = Desc {
    name: "sync_proxy_rules_endpoint_changes_pending",
    help: "Endpoint changes received but not yet programmed",
};

const ENDPOINT_CHANGES_TOTAL: Desc = Desc {
    name: "sync_proxy_rules_endpoint_changes_total",
    help: "Endpoint changes received since start",
};

const SERVICE_CHANGES_PENDING: Desc = Desc {
    name: "sync_proxy_rules_service_changes_pending",
    help: "Service changes received but not yet programmed",
};

const SERVICE_CHANGES_TOTAL: Desc = Desc {
    name: "sync_proxy_rules_service_changes_total",
    help: "Service changes received since start",
};

const NO_LOCAL_ENDPOINTS: Desc = Desc {
    name: "sync_proxy_rules_no_local_endpoints_total",
    help: "Service ports with a Local traffic policy but no local endpoint in the last sync",
};

const IPTABLES_RESTORE_FAILURES: Desc = Desc {
    name: "sync_proxy_rules_iptables_restore_failures_total",
    help: "Failed iptables-restore runs since start",
};

const IPTABLES_PARTIAL_RESTORE_FAILURES: Desc = Desc {
    name: "sync_proxy_rules_iptables_partial_restore_failures_total",
    help: "Failed incremental iptables-restore runs that forced a full resync, since start",
};

const HEALTHZ_TOTAL: Desc = Desc {
    name: "proxy_healthz_total",
    help: "Answers of the /healthz endpoint by HTTP status code",
};

const LIVEZ_TOTAL: Desc = Desc {
    name: "proxy_livez_total",
    help: "Answers of the /livez endpoint by HTTP status code",
};

const CONNTRACK_SYNC_DURATION: Desc = Desc {
    name: "conntrack_reconciler_sync_duration_seconds",
    help: "Time one pass removing stale conntrack flows took, in seconds",
};

const CONNTRACK_DELETED_ENTRIES: Desc = Desc {
    name: "conntrack_reconciler_deleted_entries_total",
    help: "Stale conntrack flows deleted since start",
};

const KERNEL_WRITE_FAILURES: Desc = Desc {
    name: "kernel_write_failures_total",
    help: "Failed kernel writes since start, by backend (ipvs, ipset, iptables, link, conntrack, sysctl)",
};

const HEAP_INUSE: Desc = Desc {
    name: "heap_inuse_bytes",
    help: "Bytes the C allocator (glibc malloc) has handed out and not taken back, read at scrape time",
};

const HEAP_FREE: Desc = Desc {
    name: "heap_free_bytes",
    help: "Bytes the C allocator (glibc malloc) holds free for reuse (resident until trimmed), read at scrape time",
};

/// `kubeproxy_rs_heap_inuse_bytes` and `kubeproxy_rs_heap_free_bytes`: the allocator's statistics,
/// read when scraped (glibc only).
#[derive(Clone)]
struct HeapCollector {
    in_use: IntGauge,
    free: IntGauge,
}

impl HeapCollector {
    fn new() -> Result<HeapCollector, prometheus::Error> {
        let gauge =
            |d: Desc| IntGauge::with_opts(Opts::new(d.name, d.help).namespace(EXTRA_NAMESPACE));
        Ok(HeapCollector {
            in_use: gauge(HEAP_INUSE)?,
            free: gauge(HEAP_FREE)?,
        })
    }
}

impl Collector for HeapCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut d = self.in_use.desc();
        d.extend(self.free.desc());
        d
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let Some(s) = crate::malloc::stats() else {
            return Vec::new();
        };
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.in_use.set(int(s.in_use));
        self.free.set(int(s.free));
        let mut families = self.in_use.collect();
        families.extend(self.free.collect());
        families
    }
}

const KERNEL_CALLS: Desc = Desc {
    name: "kernel_calls_total",
    help: "System calls to the kernel's interfaces since start, by backend and call (send, recv: netlink datagrams; read: /proc/net/ip_vs; getsockopt: x_tables reads)",
};

const KERNEL_BYTES: Desc = Desc {
    name: "kernel_bytes_total",
    help: "Bytes moved through those calls since start, by backend and direction (out: to the kernel, in: from it)",
};

const NETLINK_MESSAGES: Desc = Desc {
    name: "netlink_messages_total",
    help: "Netlink messages since start, by backend and direction (out: requests, in: answers, acknowledgements and notifications)",
};

const PROCESSES_STARTED: Desc = Desc {
    name: "processes_started_total",
    help: "Processes the daemon started since start, by program (iptables-restore, ipset, modprobe, ...)",
};

/// `kubeproxy_rs_kernel_calls_total`, `_kernel_bytes_total`, `_netlink_messages_total` and
/// `_processes_started_total`: the [`io_counts`](crate::kernel::io_counts) atomics, read when scraped.
#[derive(Clone)]
struct KernelIoCollector {
    templates: [IntCounterVec; 4],
}

impl KernelIoCollector {
    fn vecs() -> Result<[IntCounterVec; 4], prometheus::Error> {
        let vec = |d: Desc, labels: &[&str]| {
            IntCounterVec::new(Opts::new(d.name, d.help).namespace(EXTRA_NAMESPACE), labels)
        };
        Ok([
            vec(KERNEL_CALLS, &["backend", "call"])?,
            vec(KERNEL_BYTES, &["backend", "direction"])?,
            vec(NETLINK_MESSAGES, &["backend", "direction"])?,
            vec(PROCESSES_STARTED, &["program"])?,
        ])
    }
}

impl Collector for KernelIoCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.templates.iter().flat_map(|t| t.desc()).collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        use crate::kernel::io_counts::{Backend, Call, Direction, IoCounts, PROGRAMS};
        let Ok([calls, bytes, messages, processes]) = Self::vecs() else {
            return Vec::new();
        };
        let now = IoCounts::now();
        for b in Backend::ALL {
            for c in Call::ALL {
                let n = now.calls(b, c);
                calls.with_label_values(&[b.label(), c.label()]).inc_by(n);
            }
            for d in Direction::ALL {
                let l = [b.label(), d.label()];
                bytes.with_label_values(&l).inc_by(now.bytes(b, d));
                messages.with_label_values(&l).inc_by(now.messages(b, d));
            }
        }
        for p in PROGRAMS {
            processes.with_label_values(&[p]).inc_by(now.processes(p));
        }
        [calls, bytes, messages, processes]
            .iter()
            .flat_map(|v| v.collect())
            .collect()
    }
}

const INVALID_OBJECTS: Desc = Desc {
    name: "invalid_objects_total",
    help: "Malformed API objects skipped since start, by kind",
};

const ANNOTATION_ERRORS: Desc = Desc {
    name: "service_annotation_errors_total",
    help: "Service annotation values ignored since start (the Service keeps the node's setting), by annotation",
};

const EVENTS: Desc = Desc {
    name: "events_total",
    help: "Kubernetes Events recorded since start, by what became of them (queued, counted into a series, rate_limited, queue_full)",
};

const EVENT_WRITES: Desc = Desc {
    name: "event_writes_total",
    help: "Event writes to the API server since start, by result (created, patched, retry, failed)",
};

const EVENTS_QUEUED: Desc = Desc {
    name: "events_queued",
    help: "Event writes waiting for the API server",
};

const IPSET_ENTRIES: Desc = Desc {
    name: "ipset_entries",
    help: "Members of each of kube-proxy's ipsets after the last sync that changed or read them",
};

const IPSET_MAXELEM: Desc = Desc {
    name: "ipset_maxelem",
    help: "Most members each of kube-proxy's ipsets accepts (its kernel maxelem; 65536 as upstream until the members need more, then grown)",
};

/// Creates metrics and registers them in one registry.
struct Builder<'a>(&'a Registry);

impl Builder<'_> {
    fn register<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.0.register(Box::new(c.clone()))?;
        Ok(c)
    }

    /// A histogram per `ip_family`.
    fn histogram(&self, d: Desc, buckets: Vec<f64>) -> Result<HistogramVec, prometheus::Error> {
        let o = HistogramOpts::new(d.name, d.help)
            .namespace(NAMESPACE)
            .buckets(buckets);
        self.register(HistogramVec::new(o, &["ip_family"])?)
    }

    fn gauge_vec(&self, d: Desc, labels: &[&str]) -> Result<GaugeVec, prometheus::Error> {
        self.register(GaugeVec::new(opts(d), labels)?)
    }

    fn int_gauge_vec(&self, d: Desc, labels: &[&str]) -> Result<IntGaugeVec, prometheus::Error> {
        self.register(IntGaugeVec::new(opts(d), labels)?)
    }

    fn int_gauge(&self, d: Desc) -> Result<IntGauge, prometheus::Error> {
        self.register(IntGauge::with_opts(opts(d))?)
    }

    fn int_counter(&self, d: Desc) -> Result<IntCounter, prometheus::Error> {
        self.register(IntCounter::with_opts(opts(d))?)
    }

    fn counter_vec(&self, d: Desc, labels: &[&str]) -> Result<IntCounterVec, prometheus::Error> {
        self.register(IntCounterVec::new(opts(d), labels)?)
    }

    /// A gauge of ours (`kubeproxy_rs_*`, no upstream equivalent).
    fn extra_int_gauge(&self, d: Desc) -> Result<IntGauge, prometheus::Error> {
        let o = Opts::new(d.name, d.help).namespace(EXTRA_NAMESPACE);
        self.register(IntGauge::with_opts(o)?)
    }

    /// A gauge of ours with labels (`kubeproxy_rs_*`, no upstream equivalent).
    fn extra_int_gauge_vec(
        &self,
        d: Desc,
        labels: &[&str],
    ) -> Result<IntGaugeVec, prometheus::Error> {
        let o = Opts::new(d.name, d.help).namespace(EXTRA_NAMESPACE);
        self.register(IntGaugeVec::new(o, labels)?)
    }

    /// A counter of ours (`kubeproxy_rs_*`, no upstream equivalent).
    fn extra_counter_vec(
        &self,
        d: Desc,
        labels: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        let o = Opts::new(d.name, d.help).namespace(EXTRA_NAMESPACE);
        self.register(IntCounterVec::new(o, labels)?)
    }
}

fn opts(d: Desc) -> Opts {
    Opts::new(d.name, d.help).namespace(NAMESPACE)
}

fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

impl Metrics {
    /// Builds every metric in a fresh registry, with the process collector (`process_*`) on Linux and
    /// `kubeproxy_rs_heap_inuse_bytes` where the allocator is glibc's.
    pub fn new() -> Result<Metrics, MetricsError> {
        let registry = Registry::new();
        let b = Builder(&registry);
        let m = Metrics {
            sync_duration: b.histogram(SYNC_DURATION, sync_duration_buckets())?,
            sync_full_duration: b.histogram(SYNC_FULL_DURATION, sync_duration_buckets())?,
            sync_partial_duration: b.histogram(SYNC_PARTIAL_DURATION, sync_duration_buckets())?,
            network_programming: b.histogram(NETWORK_PROGRAMMING, network_programming_buckets())?,
            last_sync_timestamp: b.gauge_vec(LAST_SYNC_TIMESTAMP, &["ip_family"])?,
            last_queued_timestamp: b.gauge_vec(LAST_QUEUED_TIMESTAMP, &["ip_family"])?,
            endpoint_changes_pending: b.int_gauge(ENDPOINT_CHANGES_PENDING)?,
            endpoint_changes_total: b.int_counter(ENDPOINT_CHANGES_TOTAL)?,
            service_changes_pending: b.int_gauge(SERVICE_CHANGES_PENDING)?,
            service_changes_total: b.int_counter(SERVICE_CHANGES_TOTAL)?,
            no_local_endpoints: b
                .int_gauge_vec(NO_LOCAL_ENDPOINTS, &["ip_family", "traffic_policy"])?,
            iptables_restore_failures: b.counter_vec(IPTABLES_RESTORE_FAILURES, &["ip_family"])?,
            iptables_partial_restore_failures: b
                .counter_vec(IPTABLES_PARTIAL_RESTORE_FAILURES, &["ip_family"])?,
            healthz_total: b.counter_vec(HEALTHZ_TOTAL, &["code"])?,
            livez_total: b.counter_vec(LIVEZ_TOTAL, &["code"])?,
            conntrack_sync_duration: b
                .histogram(CONNTRACK_SYNC_DURATION, sync_duration_buckets())?,
            conntrack_deleted_entries: b.counter_vec(CONNTRACK_DELETED_ENTRIES, &["ip_family"])?,
            kernel_write_failures: b.extra_counter_vec(KERNEL_WRITE_FAILURES, &["backend"])?,
            invalid_objects: b.extra_counter_vec(INVALID_OBJECTS, &["kind"])?,
            annotation_errors: b.extra_counter_vec(ANNOTATION_ERRORS, &["annotation"])?,
            events: b.extra_counter_vec(EVENTS, &["result"])?,
            event_writes: b.extra_counter_vec(EVENT_WRITES, &["result"])?,
            events_queued: b.extra_int_gauge(EVENTS_QUEUED)?,
            ipset_entries: b.extra_int_gauge_vec(IPSET_ENTRIES, &["ip_family", "set"])?,
            ipset_maxelem: b.extra_int_gauge_vec(IPSET_MAXELEM, &["ip_family", "set"])?,
            registry,
            collectors: std::sync::RwLock::default(),
        };
        #[cfg(target_os = "linux")]
        m.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        if crate::malloc::stats().is_some() {
            m.registry.register(Box::new(HeapCollector::new()?))?;
        }
        m.registry.register(Box::new(KernelIoCollector {
            templates: KernelIoCollector::vecs()?,
        }))?;
        Ok(m)
    }

    /// The registry, to register further collectors.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Creates the per-family series of the counters at 0, so rates work from the first scrape.
    pub fn init_family(&self, family: IpFamily) {
        let f = family.label();
        self.iptables_restore_failures.with_label_values(&[f]);
        self.iptables_partial_restore_failures
            .with_label_values(&[f]);
        self.conntrack_deleted_entries.with_label_values(&[f]);
        for p in [TrafficPolicy::Internal, TrafficPolicy::External] {
            self.no_local_endpoints.with_label_values(&[f, p.label()]);
        }
    }

    /// Records one sync of `family` that took `duration`; `full` selects the full or partial histogram.
    pub fn observe_sync(&self, family: IpFamily, duration: Duration, full: bool) {
        let f = [family.label()];
        let secs = duration.as_secs_f64();
        self.sync_duration.with_label_values(&f).observe(secs);
        if full {
            self.sync_full_duration.with_label_values(&f).observe(secs);
        } else {
            self.sync_partial_duration
                .with_label_values(&f)
                .observe(secs);
        }
    }

    /// Sets the last-successful-sync timestamp of `family`.
    pub fn set_last_sync(&self, family: IpFamily, at: SystemTime) {
        self.last_sync_timestamp
            .with_label_values(&[family.label()])
            .set(unix_seconds(at));
    }

    /// Sets the last-queued-sync timestamp of `family`.
    pub fn set_last_queued(&self, family: IpFamily, at: SystemTime) {
        self.last_queued_timestamp
            .with_label_values(&[family.label()])
            .set(unix_seconds(at));
    }

    /// Records one network-programming latency (trigger time to programmed) for `family`.
    pub fn observe_network_programming(&self, family: IpFamily, latency: Duration) {
        self.network_programming
            .with_label_values(&[family.label()])
            .observe(latency.as_secs_f64());
    }

    /// Counts `received` endpoint changes and sets the number still pending.
    pub fn endpoint_changes(&self, received: u64, pending: i64) {
        self.endpoint_changes_total.inc_by(received);
        self.endpoint_changes_pending.set(pending);
    }

    /// Counts `received` service changes and sets the number still pending.
    pub fn service_changes(&self, received: u64, pending: i64) {
        self.service_changes_total.inc_by(received);
        self.service_changes_pending.set(pending);
    }

    /// Sets the number of service ports of `family` with a Local `policy` and no local endpoint.
    pub fn set_no_local_endpoints(&self, family: IpFamily, policy: TrafficPolicy, count: u64) {
        self.no_local_endpoints
            .with_label_values(&[family.label(), policy.label()])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Counts one failed iptables-restore of `family`; `partial` also counts it as a partial-restore failure.
    pub fn inc_iptables_restore_failure(&self, family: IpFamily, partial: bool) {
        self.iptables_restore_failures
            .with_label_values(&[family.label()])
            .inc();
        if partial {
            self.iptables_partial_restore_failures
                .with_label_values(&[family.label()])
                .inc();
        }
    }

    /// Counts one answer of `/healthz` with HTTP status `code`.
    pub fn inc_healthz(&self, code: u16) {
        self.healthz_total
            .with_label_values(&[&code.to_string()])
            .inc();
    }

    /// Counts one answer of `/livez` with HTTP status `code`.
    pub fn inc_livez(&self, code: u16) {
        self.livez_total
            .with_label_values(&[&code.to_string()])
            .inc();
    }

    /// Records one conntrack cleanup pass of `family`: its duration and the flows it deleted.
    pub fn observe_conntrack_reconcile(&self, family: IpFamily, duration: Duration, deleted: u64) {
        let f = [family.label()];
        self.conntrack_sync_duration
            .with_label_values(&f)
            .observe(duration.as_secs_f64());
        self.conntrack_deleted_entries
            .with_label_values(&f)
            .inc_by(deleted);
    }

    /// Sets the members and `maxelem` of one of our ipsets.
    pub fn set_ipset(&self, family: IpFamily, set: &str, entries: usize, maxelem: u32) {
        let labels = [family.label(), set];
        self.ipset_entries
            .with_label_values(&labels)
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
        self.ipset_maxelem
            .with_label_values(&labels)
            .set(i64::from(maxelem));
    }

    /// Counts `n` failed kernel writes of `backend` (`ipvs`, `ipset`, `iptables`, `link`, `conntrack`, ...).
    pub fn inc_kernel_write_failures(&self, backend: &str, n: u64) {
        self.kernel_write_failures
            .with_label_values(&[backend])
            .inc_by(n);
    }

    /// Counts one malformed API object of `kind` (`Service`, `EndpointSlice`, `Node`) that was skipped.
    pub fn inc_invalid_object(&self, kind: &str) {
        self.invalid_objects.with_label_values(&[kind]).inc();
    }

    /// Counts one ignored value of Service annotation `annotation`.
    pub fn inc_annotation_error(&self, annotation: &str) {
        self.annotation_errors
            .with_label_values(&[annotation])
            .inc();
    }

    /// Counts one recorded Event by what became of it (`queued`, `counted`, `rate_limited`, `queue_full`).
    pub fn inc_event(&self, result: &str) {
        self.events.with_label_values(&[result]).inc();
    }

    /// Counts one Event write by its result (`created`, `patched`, `retry`, `failed`).
    pub fn inc_event_write(&self, result: &str) {
        self.event_writes.with_label_values(&[result]).inc();
    }

    /// Event writes waiting now.
    pub fn set_events_queued(&self, n: usize) {
        self.events_queued.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Renders every metric in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> Result<String, MetricsError> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        let mut text = String::from_utf8(buf)?;
        let collectors = self.collectors.read().unwrap_or_else(|p| p.into_inner());
        for c in collectors.iter() {
            c.render_into(&mut text);
        }
        Ok(text)
    }

    /// Adds `collector`'s series to [`Metrics::encode`] (a collector that reads the kernel makes
    /// `encode` blocking: call it off the async runtime).
    pub fn register_collector(&self, collector: std::sync::Arc<dyn TextCollector>) {
        let mut collectors = self.collectors.write().unwrap_or_else(|p| p.into_inner());
        collectors.push(collector);
    }

    /// Content type of [`Metrics::encode`]'s output.
    pub fn content_type(&self) -> &'static str {
        prometheus::TEXT_FORMAT
    }
}

// Metrics every Kubernetes component exposes (component-base), kept apart from kube-proxy's own: see
// `crate::component`.
impl Metrics {
    /// Registers `kubernetes_build_info` and `go_goroutines` (tasks alive on the tokio runtime);
    /// `kubernetes_feature_enabled` is registered by the daemon from the configuration
    /// (`crate::config::features::register`).
    pub fn register_component(&self) -> Result<(), MetricsError> {
        crate::component::build_info::register(&self.registry)?;
        self.registry
            .register(Box::new(crate::component::runtime::TasksCollector::new()?))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_buckets_double_from_one_millisecond() {
        let b = sync_duration_buckets();
        assert_eq!(b.len(), 15);
        assert_eq!(b[0], 0.001);
        assert!((b[14] - 16.384).abs() < 1e-9);
        assert!(b.windows(2).all(|w| (w[1] / w[0] - 2.0).abs() < 1e-9));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn heap_inuse_gauge_is_read_at_scrape_time() {
        let m = Metrics::new().unwrap();
        let read = |text: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with("kubeproxy_rs_heap_inuse_bytes "))
                .unwrap_or_else(|| panic!("no heap gauge in:\n{text}"));
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        let before = read(&m.encode().unwrap());
        let block = vec![1u8; 48 << 20];
        let during = read(&m.encode().unwrap());
        drop(std::hint::black_box(block));
        assert!(before > 0.0, "heap in use {before}");
        assert!(
            during >= before + f64::from(40u32 << 20),
            "gauge {during} with 48 MiB more allocated than at {before}"
        );
    }

    #[test]
    fn network_programming_buckets_match_upstream_ranges() {
        let b = network_programming_buckets();
        assert_eq!(b.len(), 81);
        assert_eq!(&b[..4], &[0.0, 0.25, 0.5, 1.0]);
        assert_eq!(b[61], 59.0);
        assert_eq!(b[62], 60.0);
        assert_eq!(b[73], 115.0);
        assert_eq!(b[74], 120.0);
        assert_eq!(*b.last().unwrap(), 300.0);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
    }
}
