//! Per-service IPVS traffic counters on `/metrics` (`--ipvs-traffic-metrics`; not in upstream).
//!
//! The sync loop publishes what it last programmed ([`TrafficIndex`]: the service maps and NodePort
//! addresses per family, shared `Arc`s, no copy) after each sync. A scrape reads the kernel's IPVS
//! counters with one dump on its own netlink socket (never the sync loop's), maps every virtual server to
//! the Service port and address kind the planner created it for, sums per (Service port, kind) and renders
//! `kubeproxy_rs_service_{connections,packets,bytes}_total`. Virtual servers no Service owns (foreign ones,
//! or leftovers not yet deleted) are not exported. Cardinality is bounded by the programmed Services: one
//! series set per (Service port, address kind).

use crate::cluster::model::{IpFamily, ServiceMap, ServicePort, ServicePortName};
use crate::kernel::ipvs::{Ipvs, IpvsServiceKey, IpvsStats};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Prefix of the traffic metric names.
pub const PREFIX: &str = "kubeproxy_rs_service";

/// Which address of a Service port a virtual server listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressKind {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl AddressKind {
    /// Value of the `address_kind` label.
    pub fn label(self) -> &'static str {
        match self {
            AddressKind::ClusterIp => "cluster_ip",
            AddressKind::NodePort => "node_port",
            AddressKind::ExternalIp => "external_ip",
            AddressKind::LoadBalancer => "load_balancer",
        }
    }
}

/// The services one family's last sync planned, and the addresses that got NodePort virtual servers.
#[derive(Debug, Clone)]
pub struct FamilyServices {
    pub family: IpFamily,
    pub services: Arc<ServiceMap>,
    pub node_port_ips: Vec<IpAddr>,
}

/// What the last sync programmed, as the scrape needs it to name virtual servers.
#[derive(Debug, Clone, Default)]
pub struct TrafficIndex {
    pub families: Vec<FamilyServices>,
}

/// The virtual servers the planner creates for one Service port in `family` (the same addresses as
/// `proxier::plan`: nothing without a cluster IP of the family; NodePorts on every NodePort address).
pub fn virtual_servers(
    svc: &ServicePort,
    family: IpFamily,
    node_port_ips: &[IpAddr],
) -> Vec<(IpvsServiceKey, AddressKind)> {
    let Some(cluster_ip) = svc.cluster_ip(family) else {
        return Vec::new();
    };
    let key = |addr, port| IpvsServiceKey {
        addr,
        port,
        protocol: svc.protocol,
    };
    let mut out = vec![(key(cluster_ip, svc.port), AddressKind::ClusterIp)];
    out.extend(
        svc.external_ips_of(family)
            .map(|ip| (key(ip, svc.port), AddressKind::ExternalIp)),
    );
    out.extend(
        svc.load_balancer_ips_of(family)
            .map(|ip| (key(ip, svc.port), AddressKind::LoadBalancer)),
    );
    if let Some(np) = svc.node_port {
        out.extend(
            node_port_ips
                .iter()
                .filter(|ip| IpFamily::of(ip) == family)
                .map(|ip| (key(*ip, np), AddressKind::NodePort)),
        );
    }
    out
}

/// Counters summed per (Service port, address kind).
pub type Totals<'a> = BTreeMap<(&'a ServicePortName, AddressKind), IpvsStats>;

impl TrafficIndex {
    /// Owner of every virtual server the indexed services program; when two Service ports claim the same
    /// address:port, the later one owns it, as in the planner.
    pub fn owners(&self) -> HashMap<IpvsServiceKey, (&ServicePortName, AddressKind)> {
        let mut owners = HashMap::new();
        for f in &self.families {
            for (name, svc) in f.services.iter() {
                for (key, kind) in virtual_servers(svc, f.family, &f.node_port_ips) {
                    owners.insert(key, (name, kind));
                }
            }
        }
        owners
    }

    /// Sums the kernel's per virtual server counters per (Service port, address kind). A Service port
    /// kind whose virtual servers are all missing from `stats` has no entry.
    pub fn totals(&self, stats: &[(IpvsServiceKey, IpvsStats)]) -> Totals<'_> {
        let owners = self.owners();
        let mut totals = Totals::new();
        for (key, st) in stats {
            if let Some(owner) = owners.get(key) {
                *totals.entry(*owner).or_default() += *st;
            }
        }
        totals
    }
}

/// Escapes a label value for the text exposition format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(name: &ServicePortName, kind: AddressKind) -> String {
    format!(
        "namespace=\"{}\",service=\"{}\",port_name=\"{}\",protocol=\"{}\",address_kind=\"{}\"",
        escape(&name.namespace),
        escape(&name.name),
        escape(&name.port_name),
        name.protocol.as_upper(),
        kind.label()
    )
}

fn header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {PREFIX}_{name} {help}");
    let _ = writeln!(out, "# TYPE {PREFIX}_{name} counter");
}

/// Renders the traffic counters in the Prometheus text format (nothing when `totals` is empty).
pub fn render(out: &mut String, totals: &Totals<'_>) {
    if totals.is_empty() {
        return;
    }
    let labels: Vec<(String, &IpvsStats)> = totals
        .iter()
        .map(|((name, kind), st)| (labels(name, *kind), st))
        .collect();
    header(
        out,
        "connections_total",
        "Connections IPVS scheduled for a Service port since its virtual servers were created, by address kind.",
    );
    for (l, st) in &labels {
        let _ = writeln!(out, "{PREFIX}_connections_total{{{l}}} {}", st.conns);
    }
    header(
        out,
        "packets_total",
        "Packets IPVS forwarded for a Service port, by address kind and direction (in: from clients).",
    );
    for (l, st) in &labels {
        let _ = writeln!(
            out,
            "{PREFIX}_packets_total{{{l},direction=\"in\"}} {}",
            st.inpkts
        );
        let _ = writeln!(
            out,
            "{PREFIX}_packets_total{{{l},direction=\"out\"}} {}",
            st.outpkts
        );
    }
    header(
        out,
        "bytes_total",
        "Bytes IPVS forwarded for a Service port, by address kind and direction (in: from clients).",
    );
    for (l, st) in &labels {
        let _ = writeln!(
            out,
            "{PREFIX}_bytes_total{{{l},direction=\"in\"}} {}",
            st.inbytes
        );
        let _ = writeln!(
            out,
            "{PREFIX}_bytes_total{{{l},direction=\"out\"}} {}",
            st.outbytes
        );
    }
}

/// The scrape side: its own IPVS handle and the index the sync loop last published.
pub struct TrafficMetrics {
    ipvs: Mutex<Box<dyn Ipvs>>,
    index: Mutex<Arc<TrafficIndex>>,
    errors: AtomicU64,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TrafficMetrics {
    /// Scrapes read counters through `ipvs` (a handle of its own, not the sync loop's).
    pub fn new(ipvs: Box<dyn Ipvs>) -> Self {
        TrafficMetrics {
            ipvs: Mutex::new(ipvs),
            index: Mutex::new(Arc::default()),
            errors: AtomicU64::new(0),
        }
    }

    /// Replaces the index (the sync loop, after each sync). Cheap: the maps are shared.
    pub fn publish(&self, index: TrafficIndex) {
        *lock(&self.index) = Arc::new(index);
    }

    /// Dumps the kernel's counters once and renders them; a failed dump is logged, counted in
    /// `kubeproxy_rs_service_traffic_scrape_errors_total` and exports no traffic series. Blocking.
    pub fn render(&self, out: &mut String) {
        let index = lock(&self.index).clone();
        let dump = lock(&self.ipvs).services_with_stats();
        match dump {
            Ok(stats) => render(out, &index.totals(&stats)),
            Err(e) => {
                tracing::warn!(error = %e, "reading IPVS traffic counters");
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        header(
            out,
            "traffic_scrape_errors_total",
            "Scrapes whose IPVS counter dump failed (--ipvs-traffic-metrics).",
        );
        let n = self.errors.load(Ordering::Relaxed);
        let _ = writeln!(out, "{PREFIX}_traffic_scrape_errors_total {n}");
    }
}
