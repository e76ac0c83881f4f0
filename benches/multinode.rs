//! Many nodes under the same churn (issue 28), one UML boot per cluster size (3 and 5 nodes,
//! `tests/common/cluster/`): each node's daemon programs the same Services while the test API server
//! changes one EndpointSlice at a time. Reports per daemon its CPU seconds and RSS over the churn, the time
//! from each EndpointSlice change to the first and the last node programmed (p50/p99, read from every
//! node's IPVS table over netlink every 5 ms), and the API server's body bytes per node.
//!
//! `cargo bench --bench multinode` (about 6 minutes). The UML guest has one CPU: every daemon's sync
//! competes for it, so the time to the last node grows with the node count by construction; the per-node
//! figures (CPU, RSS, bytes) are the ones that must not.
#[path = "../tests/common/mod.rs"]
mod common;

use common::apiserver::Kind;
use common::cluster::{Cluster, Spec};
use common::e2e::{service, slice_named};
use common::scale::{percentile, proc_stats};
use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsServiceKey};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Services (ClusterIP, 3 endpoints each, spread over the nodes).
const SERVICES: usize = 60;
/// EndpointSlice changes, one at a time.
const CHANGES: usize = 60;
/// Time between the starts of two changes.
const INTERVAL: Duration = Duration::from_millis(700);
/// Cluster sizes, one boot each.
const SIZES: [usize; 2] = [3, 5];

fn result_file(nodes: usize) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("multinode-{nodes}-result.txt"))
}

fn vip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 97, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// The endpoints of Service `i` after `round` changes: three addresses in three nodes' pod CIDRs.
fn endpoints(i: usize, round: usize, nodes: usize) -> Vec<(String, String)> {
    (0..3)
        .map(|j| {
            let node = (i + j) % nodes;
            let host = 20 + (i * 3 + j + round * 7) % 200;
            let ip = format!("10.244.{}.{host}", node + 1);
            (ip, common::cluster::topology::NODE_NAMES[node].to_string())
        })
        .collect()
}

fn slice(i: usize, round: usize, nodes: usize) -> Value {
    let eps = endpoints(i, round, nodes);
    let eps: Vec<(&str, &str, bool)> = eps
        .iter()
        .map(|(a, n)| (a.as_str(), n.as_str(), true))
        .collect();
    let name = format!("churn-{i}");
    slice_named(&format!("{name}-1"), &name, "IPv4", "TCP", 8080, &eps)
}

/// A netlink IPVS socket in each node's namespace (a socket stays in the namespace it was made in).
fn node_sockets(c: &Cluster) -> Vec<NetlinkIpvs> {
    c.nodes
        .iter()
        .map(|n| {
            common::netns::in_netns(n.name(), NetlinkIpvs::new)
                .expect("enter the node")
                .expect("IPVS netlink socket")
        })
        .collect()
}

/// Whether the node's virtual server `key` has a real server at `addr`.
fn has_dest(ipvs: &mut NetlinkIpvs, key: &IpvsServiceKey, addr: IpAddr) -> bool {
    ipvs.destinations(key)
        .is_ok_and(|d| d.iter().any(|d| d.addr == addr))
}

/// Applies `CHANGES` EndpointSlice changes; for each, the time until the first and the last node
/// programmed its new endpoint.
fn churn(c: &Cluster, socks: &mut [NetlinkIpvs], nodes: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for k in 0..CHANGES {
        let i = k % SERVICES;
        let round = k / SERVICES + 1;
        let key = IpvsServiceKey {
            addr: IpAddr::V4(vip(i)),
            port: 80,
            protocol: Protocol::Tcp,
        };
        let new: IpAddr = endpoints(i, round, nodes)[0].0.parse().expect("endpoint");
        let start = Instant::now();
        c.apply(slice(i, round, nodes));
        let mut done = vec![None; socks.len()];
        while done.iter().any(Option::is_none) && start.elapsed() < Duration::from_secs(60) {
            for (d, s) in done.iter_mut().zip(socks.iter_mut()) {
                if d.is_none() && has_dest(s, &key, new) {
                    *d = Some(start.elapsed().as_secs_f64());
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let times: Vec<f64> = done.iter().map(|d| d.unwrap_or(f64::INFINITY)).collect();
        first.push(times.iter().copied().fold(f64::INFINITY, f64::min));
        last.push(times.iter().copied().fold(0.0, f64::max));
        std::thread::sleep(INTERVAL.saturating_sub(start.elapsed()));
    }
    first.sort_by(f64::total_cmp);
    last.sort_by(f64::total_cmp);
    (first, last)
}

/// Body bytes the API server sent (lists and watches, every kind and encoding).
fn api_bytes(c: &Cluster) -> u64 {
    let k = c.api.counters();
    k.list_bytes.values().sum::<u64>() + k.watch_bytes.values().sum::<u64>()
}

fn bench(nodes: usize) {
    let mut c = Cluster::build(Spec {
        nodes,
        ..Spec::default()
    });
    for i in 0..SERVICES {
        c.apply(service(
            &format!("churn-{i}"),
            &vip(i).to_string(),
            "TCP",
            80,
            json!({}),
        ));
        c.apply(slice(i, 0, nodes));
    }
    c.start_all();
    let last_vip = format!("{}:80", vip(SERVICES - 1));
    c.wait_all("every Service programmed", |n| {
        n.real_servers("-t", &last_vip).len() == 3
    });
    std::thread::sleep(Duration::from_secs(5));
    let mut socks = node_sockets(&c);
    let pids: Vec<u32> = c.nodes.iter().map(|n| n.pid().expect("daemon")).collect();
    let before: Vec<_> = pids
        .iter()
        .map(|&p| proc_stats(p).expect("stats"))
        .collect();
    let bytes_before = api_bytes(&c);
    let t = Instant::now();
    let (first, last) = churn(&c, &mut socks, nodes);
    let took = t.elapsed();
    let after: Vec<_> = pids
        .iter()
        .map(|&p| proc_stats(p).expect("stats"))
        .collect();
    let bytes = api_bytes(&c) - bytes_before;
    c.check_alive();
    let mut out = format!(
        "multinode bench: {nodes} nodes, {SERVICES} Services, {CHANGES} EndpointSlice changes in {took:.1?} \
         (one every {INTERVAL:?} at most)\n"
    );
    let ms = |v: &[f64], p: f64| percentile(v, p) * 1000.0;
    let _ = writeln!(
        out,
        "  change -> first node programmed: p50 {:.0} ms  p99 {:.0} ms",
        ms(&first, 50.0),
        ms(&first, 99.0)
    );
    let _ = writeln!(
        out,
        "  change -> last node programmed:  p50 {:.0} ms  p99 {:.0} ms",
        ms(&last, 50.0),
        ms(&last, 99.0)
    );
    let mut cpu = Vec::new();
    for (n, (b, a)) in c.nodes.iter().zip(before.iter().zip(&after)) {
        let s = (a.cpu_seconds + a.child_cpu_seconds) - (b.cpu_seconds + b.child_cpu_seconds);
        cpu.push(s);
        let _ = writeln!(
            out,
            "  {}: CPU {s:.2} s over the churn (children included), RSS {:.1} MiB, peak {:.1} MiB",
            n.name(),
            a.rss as f64 / 1048576.0,
            a.peak_rss as f64 / 1048576.0
        );
    }
    let mean = cpu.iter().sum::<f64>() / cpu.len() as f64;
    let _ = writeln!(
        out,
        "  per daemon: CPU mean {mean:.2} s; API server bytes per node {:.0} KiB (total {:.0} KiB)",
        bytes as f64 / nodes as f64 / 1024.0,
        bytes as f64 / 1024.0
    );
    let watches = c.api.open_watches(Kind::EndpointSlice);
    let _ = writeln!(out, "  open EndpointSlice watches at the end: {watches}");
    print!("{out}");
    std::fs::write(result_file(nodes), out).expect("write result");
}

fn main() {
    if common::uml::in_guest() {
        // The guest runs this binary with the boot's name among its arguments.
        let args: Vec<String> = std::env::args().collect();
        let nodes = SIZES
            .iter()
            .copied()
            .find(|n| args.iter().any(|a| *a == format!("multinode-{n}")));
        bench(nodes.expect("the boot's name"));
        return;
    }
    for nodes in SIZES {
        let name = format!("multinode-{nodes}");
        let opts = common::cluster::boot(nodes);
        common::uml::bench_main(
            &name,
            opts.mem,
            Duration::from_secs(1200),
            &result_file(nodes),
            || {},
        );
    }
}
