//! DNS-style rollout under continuous UDP queries (issue 32, part 1): `cargo bench --bench udp_rollout`.
//!
//! Boots ONE User-Mode Linux guest; inside it the release `kube-proxy` serves a UDP LoadBalancer Service
//! (ClusterIP, NodePort, external IP, LoadBalancer IP) with three echo pods, and ten clients query it
//! every 20 ms: on each of the five paths (ClusterIP from a pod and from the node, NodePort, external IP
//! and LoadBalancer IP from outside the node) one long-lived flow (one socket, as a caching resolver or a
//! statsd client) and one client opening a socket per query (as glibc's resolver). A rollout then replaces
//! the three endpoints one by one: the new pod becomes ready, the old one turns terminating and leaves
//! the slice 2 s later. Four rounds: minSyncPeriod 0 s and 1 s (the file's and the flags' defaults), each
//! with old pods that keep answering while terminating (a lame-duck period, as CoreDNS has) and with old
//! pods that die the moment they turn terminating. Each round prints, per client, the queries lost over
//! the rollout as time (every unanswered query counts until the next was sent), the longest outage, and
//! the same figures over an equally long quiet window just before (the guest's own noise). The target is
//! under 1 s of queries lost per client. Figures go to `udp_rollout-result.txt`; the last line of each
//! round is machine-readable: `udp-rollout: min_sync=.. pods=.. worst_client_lost_ms=.. quiet_worst_ms=..`.
#[path = "../tests/common/mod.rs"]
mod common;

use common::e2e::{E2e, Options, POD_GW, client};
use common::netns::Pod;
use common::udp_service::{DNS, Ep, KEEP, default_route, echo_pod, wait_recovered};
use common::udp_stream::{Mode, UdpStream, Window};
use common::uml;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

const EVERY: Duration = Duration::from_millis(20);
/// How long a replaced pod stays in the slice as terminating.
const DRAIN: Duration = Duration::from_secs(2);
const ENDPOINTS: usize = 3;
/// The quiet window before each rollout.
const QUIET: Duration = Duration::from_secs(10);

fn result_file() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("udp_rollout-result.txt")
}

/// How the replaced pods end.
#[derive(Clone, Copy)]
enum Exit {
    /// They keep answering while terminating, then die as they leave the slice.
    LameDuck,
    /// They die the moment they turn terminating.
    Abrupt,
}

/// Replaces `pods` one by one with new ones named `<prefix><i>` at `10.244.0.<base + i>`.
fn rollout(e: &mut E2e, pods: Vec<Pod>, prefix: &str, base: usize, exit: Exit) -> Vec<Pod> {
    let mut old: Vec<Option<Pod>> = pods.into_iter().map(Some).collect();
    let mut new: Vec<Pod> = Vec::new();
    for i in 0..old.len() {
        let slice = |new: &[Pod], old: &[Option<Pod>], draining: Option<usize>| {
            let mut eps: Vec<(&Pod, Ep)> = new.iter().map(|p| (p, Ep::Ready)).collect();
            for (j, p) in old.iter().enumerate() {
                if let Some(p) = p {
                    eps.push((
                        p,
                        if Some(j) == draining {
                            Ep::Draining
                        } else {
                            Ep::Ready
                        },
                    ));
                }
            }
            DNS.slice(&eps)
        };
        new.push(echo_pod(
            &format!("{prefix}{i}"),
            &format!("10.244.0.{}", base + i),
        ));
        e.apply(slice(&new, &old, None));
        let serving: Vec<&Pod> = new.iter().chain(old.iter().flatten()).collect();
        DNS.wait_real_servers(e, &serving);
        // The old pod turns terminating; an abrupt one dies at that moment (before the API says so).
        let draining = slice(&new, &old, Some(i));
        if matches!(exit, Exit::Abrupt) {
            drop(old[i].take());
        }
        e.apply(draining);
        std::thread::sleep(DRAIN);
        drop(old[i].take());
        e.apply(slice(&new, &old, None));
        let serving: Vec<&Pod> = new.iter().chain(old.iter().flatten()).collect();
        DNS.wait_real_servers(e, &serving);
    }
    new
}

/// The worst client's lost time, and a table of every client's figures.
fn summarize(clients: &[UdpStream], from: Duration, until: Duration) -> (Duration, String) {
    let mut text = String::new();
    let mut worst = Duration::ZERO;
    for c in clients {
        let w: Window = c.window(from, until);
        worst = worst.max(w.lost_time);
        let _ = writeln!(text, "  {:<38} {}", c.name, w.describe(from));
    }
    (worst, text)
}

/// Restarts the daemon with `ipvs.minSyncPeriod` set to `min_sync`.
fn restart_with_min_sync(e: &mut E2e, min_sync: &str) {
    if e.daemon_pid().is_some() {
        assert!(e.stop_daemon().success(), "{}", e.log());
    }
    let text = std::fs::read_to_string(&e.config_path).expect("read config");
    let mut out: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("minSyncPeriod:"))
        .collect();
    let at = out.iter().position(|l| *l == "ipvs:").expect("ipvs block") + 1;
    let line = format!("  minSyncPeriod: {min_sync}");
    out.insert(at, &line);
    std::fs::write(&e.config_path, out.join("\n") + "\n").expect("write config");
    e.start_daemon();
}

fn guest_body() {
    let inside = Pod::create("udp-client", "10.244.0.50", POD_GW).expect("client pod");
    let outside = client("outside", "192.168.10.2", "192.168.10.1");
    default_route();
    let mut e = E2e::start(Options {
        sync_period: "300s".to_string(),
        ..Options::default()
    });
    let keep = echo_pod("pod-k", "10.244.0.20");
    e.apply(KEEP.object());
    e.apply(KEEP.slice(&[(&keep, Ep::Ready)]));
    let mut pods: Vec<Pod> = (0..ENDPOINTS)
        .map(|i| echo_pod(&format!("r0-{i}"), &format!("10.244.0.{}", 100 + i)))
        .collect();
    e.apply(DNS.object());
    e.apply(DNS.slice(&pods.iter().map(|p| (p, Ep::Ready)).collect::<Vec<_>>()));
    let mut report = String::new();
    let rounds = [
        ("0s", Exit::LameDuck),
        ("0s", Exit::Abrupt),
        ("1s", Exit::LameDuck),
        ("1s", Exit::Abrupt),
    ];
    for (round, (min_sync, exit)) in rounds.into_iter().enumerate() {
        restart_with_min_sync(&mut e, min_sync);
        DNS.wait_real_servers(&mut e, &pods.iter().collect::<Vec<_>>());
        let mut clients = DNS.flows(&inside, &outside, Mode::Held, EVERY);
        clients.extend(DNS.flows(&inside, &outside, Mode::PerQuery, EVERY));
        for c in &mut clients[5..] {
            c.name = format!("{} (socket per query)", c.name);
        }
        let names: Vec<String> = pods.iter().map(|p| p.name.clone()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        wait_recovered(
            &clients,
            &names,
            clients[0].now(),
            Duration::from_secs(20),
            "start",
        );
        // A quiet window first: what the clients lose with nothing changing (the guest's own noise).
        let quiet_from = clients[0].now();
        std::thread::sleep(QUIET);
        let from = clients[0].now();
        let (quiet_worst, _) = summarize(&clients, quiet_from, from);
        pods = rollout(
            &mut e,
            pods,
            &format!("r{}-", round + 1),
            100 + 10 * (round + 1),
            exit,
        );
        std::thread::sleep(Duration::from_secs(1));
        let until = clients[0].now();
        let (worst, table) = summarize(&clients, from, until);
        let pods_kind = match exit {
            Exit::LameDuck => "lame-duck",
            Exit::Abrupt => "abrupt",
        };
        let _ = writeln!(
            report,
            "round {}: minSyncPeriod {min_sync}, old pods {pods_kind}, rollout of {ENDPOINTS} endpoints in {:.1} s (quiet window {} s before: worst client lost {} ms)\n{table}udp-rollout: min_sync={min_sync} pods={pods_kind} worst_client_lost_ms={} quiet_worst_ms={}",
            round + 1,
            (until - from).as_secs_f64(),
            QUIET.as_secs(),
            quiet_worst.as_millis(),
            worst.as_millis(),
            quiet_worst.as_millis()
        );
    }
    drop(keep);
    std::fs::write(result_file(), report).expect("write result");
}

fn main() {
    uml::bench_main(
        "udp_rollout",
        "512M",
        Duration::from_secs(900),
        &result_file(),
        guest_body,
    );
}
