//! End-to-end: `/debug/services` stays on the node and stays cheap, with the real daemon in a UML guest
//! whose metrics server listens on every address (`metricsBindAddress: 0.0.0.0:10249`, as the EKS
//! overlay and the monitoring docs set it):
//! - from a pod's network namespace `/metrics` answers, `/debug/*` is refused (403); from the node it
//!   answers, on loopback and on the node's own address; `kube-proxy explain --config` reaches it on
//!   loopback;
//! - thousands of explanation requests on loopback (listings, single Services, unknown ones; half of the
//!   clients hang up without reading) while Services change: every change is programmed, every
//!   `/healthz` probe is answered, requests beyond the few slots get 503 with `Retry-After`, and the
//!   kernel is dumped at most once a second. The sync latency and `/healthz` figures of a quiet phase and
//!   of the abuse, measured in the same boot, are printed (docs/performance.md).
mod common;

use common::e2e::{
    ABC, E2e, HEALTHZ, METRICS, NODE_IP, Options, boot, client, http_get, metric_sum, service,
    slice,
};
use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsServiceKey};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Services programmed (each with the three endpoints of [`ABC`]).
const SERVICES: usize = 1000;
/// Endpoint changes per phase, one every [`SPACING`] (the abuse lasts the whole phase).
const CHANGES: usize = 15;
const SPACING: Duration = Duration::from_secs(2);
/// Concurrent abusive clients, and the most requests they send in all.
const CLIENTS: usize = 16;
const MAX_REQUESTS: u64 = 20_000;
/// The bound every change must meet (a full sync of this state in UML takes a few seconds).
const CHANGE_BOUND: Duration = Duration::from_secs(30);

fn vip(i: usize) -> String {
    format!("10.96.{}.{}", 1 + i / 250, i % 250 + 1)
}

fn key(i: usize) -> IpvsServiceKey {
    IpvsServiceKey {
        addr: vip(i).parse().unwrap(),
        port: 80,
        protocol: Protocol::Tcp,
    }
}

/// The Services and their slices, and the metrics server on every address.
fn setup(e: &E2e) {
    let config = std::fs::read_to_string(&e.config_path).unwrap();
    let config = config.replace(
        &format!("metricsBindAddress: {METRICS}"),
        "metricsBindAddress: 0.0.0.0:10249",
    );
    assert!(config.contains("0.0.0.0:10249"), "{config}");
    std::fs::write(&e.config_path, config).unwrap();
    for i in 0..SERVICES {
        let name = format!("svc-{i}");
        e.apply(service(&name, &vip(i), "TCP", 80, json!({})));
        e.apply(slice(&name, "TCP", 8080, ABC));
    }
}

/// GET over HTTP/1.0 from the current network namespace; (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    http_get(addr.parse().unwrap(), path)
        .map(|r| (r.status, r.body))
        .unwrap_or((0, String::new()))
}

/// `/metrics` for pods, `/debug/*` for this node only.
fn check_access(e: &E2e) {
    let pod = client("client-x", "192.168.10.2", "192.168.10.1");
    let node = format!("{NODE_IP}:10249");
    let from_pod = |path: &str| pod.run_in(|| get(&node, path)).unwrap();
    assert_eq!(from_pod("/metrics").0, 200, "a pod scrapes the metrics");
    for path in [
        "/debug/services",
        "/debug/services/default/svc-1",
        "/debug/pprof/",
    ] {
        let (status, body) = from_pod(path);
        assert_eq!(status, 403, "{path} from a pod: {body}");
        assert!(body.contains("--allow-remote-debug"), "{body}");
    }
    for addr in [METRICS, node.as_str()] {
        let (status, body) = get(addr, "/debug/services/default/svc-1");
        assert_eq!(status, 200, "from the node to {addr}: {body}");
    }
    let out = std::process::Command::new(&e.bin)
        .args(["explain", "default/svc-1"])
        .arg(format!("--config={}", e.config_path.display()))
        .output()
        .expect("run kube-proxy explain");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("Service default/svc-1 on node"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = metric_sum(
        &e.metrics(),
        "kubeproxy_rs_explain_requests_total{code=\"403\"}",
    );
    assert_eq!(refused, 3.0);
}

/// `/healthz` every 100 ms until `stop`: each probe's latency, or `None` when it failed.
fn probe_healthz(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Option<Duration>>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            let ok =
                http_get(HEALTHZ.parse().unwrap(), "/healthz").is_some_and(|r| r.status == 200);
            out.push(ok.then(|| t.elapsed()));
            std::thread::sleep(Duration::from_millis(100));
        }
        out
    })
}

/// What the abusive clients got: answers by status (0: no answer read), and requests sent.
#[derive(Default)]
struct Abuse {
    statuses: Mutex<BTreeMap<u16, u64>>,
    sent: AtomicU64,
    retry_after: AtomicBool,
}

/// One abusive request: `path` on loopback; hangs up without reading when `drop_it`.
fn abuse_once(a: &Abuse, path: &str, drop_it: bool) {
    let addr: SocketAddr = METRICS.parse().unwrap();
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        *a.statuses.lock().unwrap().entry(0).or_default() += 1;
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
    a.sent.fetch_add(1, Ordering::Relaxed);
    if drop_it {
        return;
    }
    let mut head = [0u8; 512];
    let n = s.read(&mut head).unwrap_or(0);
    let head = String::from_utf8_lossy(&head[..n]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if status == 503 && head.to_ascii_lowercase().contains("retry-after: 1") {
        a.retry_after.store(true, Ordering::Relaxed);
    }
    *a.statuses.lock().unwrap().entry(status).or_default() += 1;
    // Read the rest so the server is not left writing to a full buffer.
    let _ = std::io::copy(&mut s, &mut std::io::sink());
}

/// Puts the calling thread at nice 19: on a node an abuser's CPU is another pod's, here the clients
/// share the guest's one CPU with the daemon, and what is measured is the daemon's behaviour.
fn lowest_priority() {
    // SAFETY: gettid(2) has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority(2) on the calling thread's own id; no memory is passed.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) };
}

/// Starts the abusive clients; they stop at `stop` or after [`MAX_REQUESTS`].
fn abuse(stop: Arc<AtomicBool>) -> (Arc<Abuse>, Vec<std::thread::JoinHandle<()>>) {
    let a = Arc::new(Abuse::default());
    let paths = [
        "/debug/services",
        "/debug/services?format=text",
        "/debug/services/default/svc-7",
        "/debug/services/default/nope",
    ];
    let threads = (0..CLIENTS)
        .map(|c| {
            let (a, stop) = (a.clone(), stop.clone());
            std::thread::spawn(move || {
                lowest_priority();
                let mut i = c;
                while !stop.load(Ordering::Relaxed) && a.sent.load(Ordering::Relaxed) < MAX_REQUESTS
                {
                    // Every other request is hung up on right after it is sent.
                    abuse_once(&a, paths[i % paths.len()], i.is_multiple_of(2));
                    i += 1;
                }
            })
        })
        .collect();
    (a, threads)
}

/// Applies [`CHANGES`] endpoint changes, one every [`SPACING`]; how long each took to reach the kernel.
fn changes(e: &E2e, ipvs: &mut NetlinkIpvs, round: usize) -> Vec<Duration> {
    let c = ABC[2].0.parse::<IpAddr>().unwrap();
    (0..CHANGES)
        .map(|j| {
            std::thread::sleep(SPACING);
            let i = j % SERVICES;
            // Even rounds take pod-c out of svc-0.., odd rounds put it back.
            let (eps, present) = if round.is_multiple_of(2) {
                (&ABC[..2], false)
            } else {
                (ABC, true)
            };
            let start = Instant::now();
            e.apply(slice(&format!("svc-{i}"), "TCP", 8080, eps));
            loop {
                let dests = ipvs.destinations(&key(i)).unwrap_or_default();
                let live = dests.iter().any(|d| d.addr == c && d.weight > 0);
                if live == present {
                    break start.elapsed();
                }
                assert!(
                    start.elapsed() < CHANGE_BOUND,
                    "svc-{i}: change not programmed within {CHANGE_BOUND:?}\n{}",
                    e.log()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .collect()
}

fn median_max(v: &[Duration]) -> (f64, f64) {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() - 1])
}

/// One phase: the changes, with or without abuse, and `/healthz` probed throughout.
fn phase(
    e: &E2e,
    ipvs: &mut NetlinkIpvs,
    round: usize,
    abused: bool,
) -> (Vec<Duration>, Vec<Option<Duration>>, Option<Arc<Abuse>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let prober = probe_healthz(stop.clone());
    let clients = abused.then(|| abuse(stop.clone()));
    std::thread::sleep(Duration::from_secs(1));
    let latencies = changes(e, ipvs, round);
    stop.store(true, Ordering::Relaxed);
    let probes = prober.join().unwrap();
    let abuse = clients.map(|(a, threads)| {
        for t in threads {
            t.join().unwrap();
        }
        a
    });
    (latencies, probes, abuse)
}

fn report(what: &str, latencies: &[Duration], probes: &[Option<Duration>]) {
    let (lm, lx) = median_max(latencies);
    let answered: Vec<Duration> = probes.iter().flatten().copied().collect();
    let (pm, px) = median_max(&answered);
    println!(
        "{what}: sync latency median {lm:.0} ms, max {lx:.0} ms ({} changes); /healthz median {pm:.1} ms, max {px:.1} ms ({} of {} probes answered)",
        latencies.len(),
        answered.len(),
        probes.len()
    );
}

uml_test!(explain_stays_on_the_node_and_cheap_under_abuse, boot(), {
    let _pods = common::e2e::abc_pods();
    let mut e = E2e::start(Options {
        sync_period: "10s".into(),
        ..Options::default()
    });
    setup(&e);
    e.start_daemon();
    let mut ipvs = NetlinkIpvs::new().expect("IPVS");
    e.wait_for("every Service programmed", Duration::from_secs(120), |_| {
        (0..SERVICES).all(|i| ipvs.service(&key(i)).is_ok_and(|s| s.is_some()))
    });

    let (quiet, quiet_probes, _) = phase(&e, &mut ipvs, 0, false);
    let dumps_before = metric_sum(
        &e.metrics(),
        "kubeproxy_rs_explain_kernel_reads_total{kind=\"dump\"}",
    );
    let start = Instant::now();
    let (busy, busy_probes, abuse) = phase(&e, &mut ipvs, 1, true);
    let took = start.elapsed();
    let abuse = abuse.expect("abuse ran");
    let m = e.metrics();
    let dumps =
        metric_sum(&m, "kubeproxy_rs_explain_kernel_reads_total{kind=\"dump\"}") - dumps_before;
    let gets = metric_sum(&m, "kubeproxy_rs_explain_kernel_reads_total{kind=\"get\"}");
    let refused = metric_sum(&m, "kubeproxy_rs_explain_requests_total{code=\"503\"}");
    let statuses = abuse.statuses.lock().unwrap().clone();
    report("quiet", &quiet, &quiet_probes);
    report("abuse", &busy, &busy_probes);
    println!(
        "abuse: {} requests in {:.1} s by {CLIENTS} clients (half hung up unread); answers read by status {statuses:?}; daemon: 503 {refused}, IPVS dumps {dumps}, GETs {gets}",
        abuse.sent.load(Ordering::Relaxed),
        took.as_secs_f64()
    );
    check_access(&e);
    assert!(
        abuse.sent.load(Ordering::Relaxed) >= 1000,
        "too few requests to call it abuse"
    );
    assert!(
        quiet_probes.iter().chain(&busy_probes).all(Option::is_some),
        "a /healthz probe failed"
    );
    assert!(
        refused > 0.0 && abuse.retry_after.load(Ordering::Relaxed),
        "no 503 with Retry-After beyond the slots"
    );
    assert!(
        dumps <= took.as_secs_f64().ceil() + 1.0,
        "{dumps} IPVS dumps in {took:?}: more than one a second"
    );
    assert_eq!(e.stop_daemon().code(), Some(0), "{}", e.log());
});
