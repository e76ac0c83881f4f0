//! Per-service IPVS traffic counters on `/metrics` (`--ipvs-traffic-metrics`; not in upstream).
//!
//! The sync loop publishes the planner's decision records after each sync ([`crate::explain`]). A scrape
//! reads the kernel's IPVS counters with one dump on its own netlink socket (never the sync loop's), maps
//! every virtual server to the Service port and address kind the planner's records name for it, sums per
//! (Service port, kind) and renders
//! `kubeproxy_rs_service_{connections,packets,bytes}_total`. Virtual servers no Service owns (foreign ones,
//! or leftovers not yet deleted) are not exported. Cardinality is bounded by the programmed Services: one
//! series set per (Service port, address kind). The kernel refreshes the counters it reports from its
//! per-CPU ones every 2 s (its rate estimator), so a scrape lags the traffic by up to 2 s. A counter can
//! go back (e.g. a NodePort address disappears and its virtual server with it): Prometheus treats
//! that as a reset.

use crate::cluster::model::ServicePortName;
use crate::explain::SharedIndex;
use crate::kernel::ipvs::{Ipvs, IpvsServiceKey, IpvsStats};
pub use crate::proxier::plan::decision::AddressKind;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Prefix of the traffic metric names.
pub const PREFIX: &str = "kubeproxy_rs_service";

/// Counters summed per (Service port, address kind).
pub type Totals<'a> = BTreeMap<(&'a ServicePortName, AddressKind), IpvsStats>;

/// Sums the kernel's per virtual server counters per (Service port, address kind) of the planned virtual
/// servers (`owners`); a Service port kind whose virtual servers are all missing from `stats` has no entry.
pub fn totals<'a>(
    owners: &HashMap<IpvsServiceKey, (&'a ServicePortName, AddressKind)>,
    stats: &[(IpvsServiceKey, IpvsStats)],
) -> Totals<'a> {
    let mut totals = Totals::new();
    for (key, st) in stats {
        if let Some(owner) = owners.get(key) {
            *totals.entry(*owner).or_default() += *st;
        }
    }
    totals
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

/// The scrape side: its own IPVS handle and the decision records the sync loop publishes.
pub struct TrafficMetrics {
    ipvs: Mutex<Box<dyn Ipvs>>,
    index: SharedIndex,
    errors: AtomicU64,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl crate::metrics::TextCollector for TrafficMetrics {
    fn render_into(&self, out: &mut String) {
        self.render(out);
    }
}

impl TrafficMetrics {
    /// Scrapes read counters through `ipvs` (a handle of its own, not the sync loop's) and name them
    /// with `index`.
    pub fn new(ipvs: Box<dyn Ipvs>, index: SharedIndex) -> Self {
        TrafficMetrics {
            ipvs: Mutex::new(ipvs),
            index,
            errors: AtomicU64::new(0),
        }
    }

    /// Dumps the kernel's counters once and renders them; a failed dump is logged, counted in
    /// `kubeproxy_rs_service_traffic_scrape_errors_total` and exports no traffic series. Blocking.
    pub fn render(&self, out: &mut String) {
        let dump = lock(&self.ipvs).services_with_stats();
        match dump {
            Ok(stats) => {
                let index = self.index.read().unwrap_or_else(|e| e.into_inner());
                render(out, &totals(&index.owners(), &stats));
            }
            Err(e) => {
                tracing::warn!(error = %e, "Failed to read the IPVS traffic counters");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::{IpFamily, ServiceMap, ServicePort};
    use crate::cluster::model::{LoadBalancerIngress, Protocol};
    use crate::kernel::KernelError;
    use crate::kernel::ipvs::IpvsService;
    use crate::kernel::ipvs::fake::FakeIpvs;
    use crate::proxier::plan::{NodeFacts, PlanConfig, plan};
    use std::collections::BTreeSet;
    use std::net::IpAddr;
    use std::sync::Arc;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn port(name: &str, port_name: &str, proto: Protocol, cluster_ips: &[&str]) -> ServicePort {
        ServicePort {
            name: ServicePortName {
                namespace: "ns".into(),
                name: name.into(),
                port_name: port_name.into(),
                protocol: proto,
            },
            cluster_ips: cluster_ips.iter().map(|s| ip(s)).collect(),
            port: 80,
            protocol: proto,
            node_port: None,
            external_ips: vec![],
            load_balancer_ingress: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity_timeout: None,
            external_policy_local: false,
            internal_policy_local: false,
            health_check_node_port: None,
            options: None,
        }
    }

    /// ClusterIP, NodePort, external IP, LB (one proxied ingress), headless and dual-stack ports.
    fn services() -> ServiceMap {
        let mut web = port("web", "http", Protocol::Tcp, &["10.96.0.10", "fd00::10"]);
        web.node_port = Some(30080);
        web.external_ips = vec![ip("192.0.2.7")];
        web.load_balancer_ingress = vec![
            LoadBalancerIngress {
                ip: ip("198.51.100.1"),
                ip_mode_proxy: false,
            },
            LoadBalancerIngress {
                ip: ip("198.51.100.2"),
                ip_mode_proxy: true,
            },
        ];
        let dns = port("dns", "", Protocol::Udp, &["10.96.0.53"]);
        let headless = port("headless", "", Protocol::Tcp, &[]);
        [web, dns, headless]
            .into_iter()
            .map(|p| (p.name.clone(), Arc::new(p)))
            .collect()
    }

    fn node_port_ips() -> Vec<IpAddr> {
        vec![ip("192.168.1.5"), ip("192.168.2.5"), ip("fd01::5")]
    }

    /// The real planner's plan of `services()` in `family` on node `n1`.
    fn planned(family: IpFamily) -> crate::proxier::desired::DesiredState {
        let node = NodeFacts {
            node_name: "n1".into(),
            node_port_ips: node_port_ips(),
            ..Default::default()
        };
        let cfg = PlanConfig {
            random_fully: false,
            ..PlanConfig::new(family)
        };
        plan(&services(), &Default::default(), &node, &cfg)
    }

    /// The planner's decisions for both families of `services()`, as the sync loop publishes them.
    fn fill(index: &SharedIndex) {
        for family in [IpFamily::V4, IpFamily::V6] {
            let d = planned(family);
            let mut w = index.write().unwrap();
            w.apply(family, d.decision_changes());
        }
    }

    fn index() -> SharedIndex {
        let index = crate::explain::shared_index();
        fill(&index);
        index
    }

    /// The index names exactly the virtual servers the real planner programs, in both families.
    #[test]
    fn index_matches_the_planner() {
        let index = index();
        let index = index.read().unwrap();
        let owners = index.owners();
        let mut planned_keys = BTreeSet::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            planned_keys.extend(planned(family).virtual_servers.keys().copied());
        }
        let indexed: BTreeSet<IpvsServiceKey> = owners.keys().copied().collect();
        assert_eq!(indexed, planned_keys);
        // v4 web: cluster, external, LB, 2 node ports; dns; v6 web: cluster, 1 node port.
        assert_eq!(indexed.len(), 8, "{indexed:?}");
        let np = IpvsServiceKey {
            addr: ip("192.168.2.5"),
            port: 30080,
            protocol: Protocol::Tcp,
        };
        assert_eq!(owners[&np].1, AddressKind::NodePort);
        assert_eq!(owners[&np].0.name, "web");
    }

    fn key(addr: &str, port: u16, protocol: Protocol) -> IpvsServiceKey {
        IpvsServiceKey {
            addr: ip(addr),
            port,
            protocol,
        }
    }

    fn add(fake: &FakeIpvs, k: IpvsServiceKey, conns: u64) {
        let mut f = fake.clone();
        f.add_service(&IpvsService {
            key: k,
            scheduler: "rr".into(),
            flags: 0,
            timeout: 0,
            netmask: 0xffff_ffff,
        })
        .unwrap();
        let st = IpvsStats {
            conns,
            inpkts: 10 * conns,
            outpkts: 9 * conns,
            inbytes: 1000 * conns,
            outbytes: 900 * conns,
        };
        fake.set_stats(&k, st).unwrap();
    }

    fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.contains(needle)).collect()
    }

    /// One dump per scrape: NodePorts on two addresses are summed, foreign virtual servers are not
    /// exported, a failed dump exports no traffic series and is counted.
    #[test]
    fn scrape_sums_per_service_port_and_kind() {
        let fake = FakeIpvs::new();
        add(&fake, key("10.96.0.10", 80, Protocol::Tcp), 3);
        add(&fake, key("192.168.1.5", 30080, Protocol::Tcp), 2);
        add(&fake, key("192.168.2.5", 30080, Protocol::Tcp), 5);
        add(&fake, key("10.96.0.53", 80, Protocol::Udp), 0);
        add(&fake, key("10.1.1.1", 8080, Protocol::Tcp), 99); // not ours
        let index = crate::explain::shared_index();
        let t = TrafficMetrics::new(Box::new(fake.clone()), index.clone());
        let mut before = String::new();
        t.render(&mut before);
        assert!(!before.contains("connections_total"), "{before}");
        fill(&index);
        let mut out = String::new();
        t.render(&mut out);
        let web = |kind: &str| {
            format!(
                "{{namespace=\"ns\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address_kind=\"{kind}\"}}"
            )
        };
        let conns = lines_with(&out, "kubeproxy_rs_service_connections_total{");
        assert_eq!(conns.len(), 3, "{out}");
        assert!(
            conns.contains(
                &format!(
                    "kubeproxy_rs_service_connections_total{} 3",
                    web("cluster_ip")
                )
                .as_str()
            )
        );
        assert!(
            conns.contains(
                &format!(
                    "kubeproxy_rs_service_connections_total{} 7",
                    web("node_port")
                )
                .as_str()
            )
        );
        assert!(out.contains("kubeproxy_rs_service_connections_total{namespace=\"ns\",service=\"dns\",port_name=\"\",protocol=\"UDP\",address_kind=\"cluster_ip\"} 0"));
        let np_in = web("node_port").replace('}', ",direction=\"in\"}");
        assert!(
            out.contains(&format!("kubeproxy_rs_service_packets_total{np_in} 70")),
            "{out}"
        );
        assert!(
            out.contains(&format!("kubeproxy_rs_service_bytes_total{np_in} 7000")),
            "{out}"
        );
        let np_out = web("node_port").replace('}', ",direction=\"out\"}");
        assert!(
            out.contains(&format!("kubeproxy_rs_service_bytes_total{np_out} 6300")),
            "{out}"
        );
        assert!(!out.contains("99"), "{out}");
        assert!(out.contains("# TYPE kubeproxy_rs_service_bytes_total counter"));
        assert!(out.contains("kubeproxy_rs_service_traffic_scrape_errors_total 0"));

        fake.fail_next("services_with_stats", KernelError::Invalid("boom".into()));
        let mut failed = String::new();
        t.render(&mut failed);
        assert!(!failed.contains("connections_total"), "{failed}");
        assert!(failed.contains("kubeproxy_rs_service_traffic_scrape_errors_total 1"));
    }

    /// `Metrics::encode` carries the traffic series only once enabled.
    #[test]
    fn metrics_encode_includes_traffic_when_enabled() {
        let m = crate::metrics::Metrics::new().unwrap();
        assert!(!m.encode().unwrap().contains(PREFIX));
        let fake = FakeIpvs::new();
        add(&fake, key("10.96.0.53", 80, Protocol::Udp), 4);
        let t = Arc::new(TrafficMetrics::new(Box::new(fake), index()));
        m.register_collector(t);
        let text = m.encode().unwrap();
        assert!(text.contains("kubeproxy_sync_proxy_rules"), "{text}");
        assert!(
            text.contains(
                "service=\"dns\",port_name=\"\",protocol=\"UDP\",address_kind=\"cluster_ip\"} 4"
            ),
            "{text}"
        );
    }
}
