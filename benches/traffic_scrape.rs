//! Cost of one `--ipvs-traffic-metrics` scrape in UML, and what it exports, at 1k and 10k Services.
//! Run with `cargo bench --bench traffic_scrape` (prints a table).
//!
//! Each Service has one TCP port with a ClusterIP; one in ten is also a NodePort on one node address, as a
//! mix of ClusterIP and NodePort Services. The virtual servers are created in a fresh network namespace
//! through our netlink client; a scrape is [`TrafficMetrics::render`]: one IPVS dump on its own socket,
//! mapping to Service ports, summing and rendering the text. `TRAFFIC_SCRAPE_SIZES` (e.g. `1000,10000`)
//! overrides the sizes.

#[path = "../tests/common/uml.rs"]
mod uml;

use kube_proxy_rs::cluster::model::{IpFamily, Protocol, ServiceMap, ServicePort, ServicePortName};
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsOp, IpvsService, IpvsServiceKey};
use kube_proxy_rs::proxier::plan::{NodeFacts, PlanConfig, plan};
use kube_proxy_rs::traffic::TrafficMetrics;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
const SCRAPES: usize = 7;

fn result_file() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("traffic_scrape-result.txt")
}

fn service_port(i: usize) -> ServicePort {
    let (hi, lo) = ((i / 250) as u8, (i % 250 + 1) as u8);
    ServicePort {
        name: ServicePortName {
            namespace: format!("ns-{}", i % 50).into(),
            name: format!("svc-{i}").into(),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
        },
        cluster_ips: vec![IpAddr::V4(Ipv4Addr::new(10, 96, hi, lo))],
        port: 80,
        protocol: Protocol::Tcp,
        node_port: i.is_multiple_of(10).then(|| 30000 + (i / 10) as u16),
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

fn add_op(addr: IpAddr, port: u16) -> IpvsOp {
    IpvsOp::AddService(IpvsService {
        key: IpvsServiceKey {
            addr,
            port,
            protocol: Protocol::Tcp,
        },
        scheduler: "rr".into(),
        flags: 0,
        timeout: 0,
        netmask: 0xffff_ffff,
    })
}

/// Runs `f` on a thread inside a fresh network namespace `ns` (its own, empty IPVS table).
fn in_new_netns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("ip netns add {ns} && ip -n {ns} link set lo up"))
        .status()
        .unwrap();
    assert!(st.success());
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: setns on an open namespace file descriptor; affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}");
            f()
        })
        .join()
        .unwrap()
    })
}

/// One row: (services, virtual servers, series, text bytes, dump-only median, scrape min, scrape median).
type Row = (usize, usize, usize, usize, Duration, Duration, Duration);

fn measure(n: usize) -> Row {
    let services: ServiceMap = (0..n)
        .map(service_port)
        .map(|p| (p.name.clone(), Arc::new(p)))
        .collect();
    let ops: Vec<IpvsOp> = services
        .values()
        .flat_map(|p| {
            let cip = add_op(p.cluster_ips[0], p.port);
            let np = p.node_port.map(|np| add_op(IpAddr::V4(NODE_IP), np));
            std::iter::once(cip).chain(np)
        })
        .collect();
    in_new_netns(&format!("scrape-{n}"), || {
        let mut load = NetlinkIpvs::new().unwrap();
        assert!(load.apply(&ops).unwrap().iter().all(|r| r.is_ok()));
        let mut dump = NetlinkIpvs::new().unwrap();
        let mut dumps = Vec::new();
        for _ in 0..SCRAPES {
            let t = Instant::now();
            assert_eq!(dump.services_with_stats().unwrap().len(), ops.len());
            dumps.push(t.elapsed());
        }
        // The index the sync loop publishes: the planner's decision records.
        let index = kube_proxy_rs::explain::shared_index();
        let node = NodeFacts::new("n1", vec![IpAddr::V4(NODE_IP)]);
        let planned = plan(
            &services,
            &Default::default(),
            &node,
            &PlanConfig::new(IpFamily::V4),
        );
        let all = planned.decision_changes();
        index.write().unwrap().apply(IpFamily::V4, all);
        let t = TrafficMetrics::new(Box::new(NetlinkIpvs::new().unwrap()), index);
        let mut times = Vec::new();
        let mut text = String::new();
        for _ in 0..SCRAPES {
            text.clear();
            let start = Instant::now();
            t.render(&mut text);
            times.push(start.elapsed());
        }
        dumps.sort();
        times.sort();
        let series = text
            .lines()
            .filter(|l| l.starts_with("kubeproxy_rs_service_") && !l.contains("scrape_errors"))
            .count();
        (
            n,
            ops.len(),
            series,
            text.len(),
            dumps[SCRAPES / 2],
            times[0],
            times[SCRAPES / 2],
        )
    })
}

fn guest_body() {
    let sizes: Vec<usize> = std::env::var("TRAFFIC_SCRAPE_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000]);
    let mut table = format!(
        "traffic scrape (--ipvs-traffic-metrics), UML {}, {SCRAPES} scrapes each\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(
        table,
        "{:>9} {:>9} {:>8} {:>11} {:>13} {:>13} {:>13}",
        "services",
        "virt.srv",
        "series",
        "text bytes",
        "dump med ms",
        "scrape min ms",
        "scrape med ms"
    );
    for n in sizes {
        let (n, vs, series, bytes, dump, min, med) = measure(n);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let row = format!(
            "{n:>9} {vs:>9} {series:>8} {bytes:>11} {:>13.1} {:>13.1} {:>13.1}\n",
            ms(dump),
            ms(min),
            ms(med)
        );
        print!("{row}");
        table.push_str(&row);
    }
    std::fs::write(result_file(), table).unwrap();
}

fn main() {
    uml::bench_main(
        "traffic_scrape",
        "1024M",
        Duration::from_secs(900),
        &result_file(),
        guest_body,
    );
}
