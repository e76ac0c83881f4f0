//! Chaos soak of the real daemon on a real (UML) kernel: random Service churn, continuous traffic to
//! stable Services, and faults at seeded random times, with the kernel state checked after every fault.
//!
//! Shared by `benches/soak.rs` (long runs, figures) and `tests/soak_short.rs` (a short fixed-seed run in
//! the test command). Everything runs inside the guest, around the [`E2e`] fixture.
//!
//! **Oracle.** Each round: churn for a few seconds, then pause churn and wait until the daemon has synced
//! every queued change (`last_queued_timestamp <= last_timestamp`, both after the last change) and two reads
//! of the kernel state agree; that state is the *baseline*. The fault is injected while churn is paused, so
//! the objects do not change and the kernel must come back to exactly the baseline (normalized
//! `ipvsadm -Sn`, `ipset save`, `iptables-save` and `ip6tables-save` (rule order within a chain kept),
//! kube-ipvs0 addresses; foreign objects filtered out) within
//! syncPeriod + margin. The baseline itself is checked from scratch by the `kill9` fault: a freshly started
//! daemon computes the state from the API objects alone and must reproduce the baseline the incremental
//! daemon built, so drift of the incremental path shows up as a failed recovery. API faults (watch cut,
//! 410 Gone, API server down) additionally move a marker Service while the daemon cannot see it; recovery
//! is the marker's new virtual server in IPVS (and, for 410, a relist counted by the API server), and the
//! baseline must hold while the API server is down (no flush). The held wrong-type set (`set_in_use`)
//! checks `/healthz` and the failure counters while every sync fails, then the baseline (marker aside).
//!
//! **Dual stack.** The guest has IPv6, so the daemon runs both families; every fifth churned Service is
//! single-stack IPv6 (all kinds), and one stable IPv6 Service gets traffic from the client's IPv6
//! address like the IPv4 ones.
#![allow(dead_code)]

use super::apiserver::Kind;
use super::e2e::{self, ABC, E2e, KernelState, NODE, Options};
use super::netns;
use super::scale;
use super::uml::sh;
use anyhow::{Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The daemon's `ipvs.syncPeriod` during the soak, seconds.
pub const SYNC_PERIOD_S: u64 = 10;
/// Allowed recovery time beyond one syncPeriod: a full sync of a few hundred Services takes 10-35 s in UML.
pub const MARGIN: Duration = Duration::from_secs(60);
/// Churn operations per round (a count, not a time, so that a seed replays the same operations).
const CHURN_OPS: usize = 50;
/// Pause between two churn operations.
const CHURN_EVERY: Duration = Duration::from_millis(100);
/// Longest wait for the daemon to apply everything queued before a fault.
const SETTLE_CAP: Duration = Duration::from_secs(120);

/// Soak parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Soak duration (faults keep being injected until it has passed).
    pub minutes: f64,
    /// Seed of every random choice (churn, fault kinds, targets, durations).
    pub seed: u64,
    /// Number of churned Services.
    pub services: usize,
    /// Keep going past `minutes` until at least this many faults were injected.
    pub min_faults: usize,
    /// Faults injected first, in this order, before the seeded deck (the short soak's must-haves).
    pub first_faults: Vec<Fault>,
}

/// A small seeded RNG (splitmix64): the same seed gives the same run.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    /// A random element of `v`.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            v.get(self.below(v.len()))
        }
    }
}

/// The kinds of fault, in order of value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    Kill9,
    WatchCut,
    Gone410,
    ApiDown,
    IpvsDelVs,
    IpvsDelRs,
    IpsetFlush,
    IpsetDel,
    IptablesDelJump,
    AddrDel,
    IpvsSched,
    ForeignAdd,
    WrongTypeSet,
    SetInUse,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 14] = [
        Fault::Kill9,
        Fault::WatchCut,
        Fault::Gone410,
        Fault::ApiDown,
        Fault::IpvsDelVs,
        Fault::IpvsDelRs,
        Fault::IpsetFlush,
        Fault::IpsetDel,
        Fault::IptablesDelJump,
        Fault::AddrDel,
        Fault::IpvsSched,
        Fault::ForeignAdd,
        Fault::WrongTypeSet,
        Fault::SetInUse,
    ];

    /// Short name used in the figures.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill9 => "kill9",
            Fault::WatchCut => "watch_cut",
            Fault::Gone410 => "gone_410",
            Fault::ApiDown => "api_down",
            Fault::IpvsDelVs => "ipvsadm_-D",
            Fault::IpvsDelRs => "ipvsadm_-d",
            Fault::IpsetFlush => "ipset_flush",
            Fault::IpsetDel => "ipset_del",
            Fault::IptablesDelJump => "iptables_-D_jump",
            Fault::AddrDel => "ip_addr_del",
            Fault::IpvsSched => "ipvsadm_-E_sched",
            Fault::ForeignAdd => "foreign_add",
            Fault::WrongTypeSet => "wrong_type_set",
            Fault::SetInUse => "wrong_type_set_held",
        }
    }

    /// Faults that may drop requests to a stable Service by design: another tool removed or changed the
    /// very kernel object that carries it, and traffic fails until the daemon repairs it (next sync).
    pub fn may_drop_traffic(self) -> bool {
        matches!(
            self,
            Fault::IpvsDelVs
                | Fault::IpvsDelRs
                | Fault::IpsetFlush
                | Fault::IpsetDel
                | Fault::IptablesDelJump
                | Fault::AddrDel
                | Fault::WrongTypeSet
        )
    }
}

/// Results of a soak.
#[derive(Debug, Default)]
pub struct Report {
    pub minutes: f64,
    pub seed: u64,
    /// Recovery times (seconds) per fault kind, of the faults that recovered.
    pub recovered: BTreeMap<&'static str, Vec<f64>>,
    /// Faults per kind that did not recover within syncPeriod + margin.
    pub unrecovered: BTreeMap<&'static str, usize>,
    pub requests_sent: u64,
    /// Failed requests per label (fault kind active at the time, or "none").
    pub requests_failed: BTreeMap<String, u64>,
    /// First failed request per label (and the last one), with the guest uptime.
    pub request_errors: BTreeMap<String, String>,
    pub churn_ops: u64,
    pub syncs: f64,
    pub cpu_seconds: f64,
    pub peak_rss: u64,
    pub foreign_touched: usize,
    /// Every failed check, with what was wrong.
    pub failures: Vec<String>,
}

impl Report {
    /// Faults injected.
    pub fn faults(&self) -> usize {
        self.recovered.values().map(Vec::len).sum::<usize>()
            + self.unrecovered.values().sum::<usize>()
    }
    /// Faults recovered.
    pub fn recovered_count(&self) -> usize {
        self.recovered.values().map(Vec::len).sum()
    }
    /// Requests failed in all.
    pub fn failed(&self) -> u64 {
        self.requests_failed.values().sum()
    }
    /// Requests failed while no fault was active or during a fault that must not drop traffic.
    pub fn failed_unexpectedly(&self) -> u64 {
        self.requests_failed
            .iter()
            .filter(|(l, _)| {
                !Fault::ALL
                    .iter()
                    .any(|f| f.name() == l.as_str() && f.may_drop_traffic())
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// The figures table; its last line is machine-readable.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\n{:<18} | {:>6} | {:>9} | {:>12} | {:>10} | {:>10}",
            "fault", "count", "recovered", "median [s]", "max [s]", "req failed"
        );
        for f in Fault::ALL {
            let mut v = self.recovered.get(f.name()).cloned().unwrap_or_default();
            let bad = self.unrecovered.get(f.name()).copied().unwrap_or(0);
            if v.is_empty() && bad == 0 {
                continue;
            }
            v.sort_by(|a, b| a.total_cmp(b));
            let _ = writeln!(
                t,
                "{:<18} | {:>6} | {:>9} | {:>12.1} | {:>10.1} | {:>10}",
                f.name(),
                v.len() + bad,
                v.len(),
                scale::percentile(&v, 50.0),
                v.last().copied().unwrap_or(f64::NAN),
                self.requests_failed.get(f.name()).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(
            t,
            "requests: sent {}, failed {} (outside any fault: {}; during faults that must not drop: {})",
            self.requests_sent,
            self.failed(),
            self.requests_failed.get("none").copied().unwrap_or(0),
            self.failed_unexpectedly() - self.requests_failed.get("none").copied().unwrap_or(0)
        );
        let _ = writeln!(
            t,
            "churn operations {}, syncs {}, daemon CPU {:.1} s, peak RSS {:.1} MiB, failed checks {}",
            self.churn_ops,
            self.syncs,
            self.cpu_seconds,
            self.peak_rss as f64 / 1048576.0,
            self.failures.len()
        );
        for (l, e) in &self.request_errors {
            let _ = writeln!(t, "  request error ({l}): {e}");
        }
        for f in &self.failures {
            let _ = writeln!(t, "  FAILED CHECK: {f}");
        }
        let _ = writeln!(
            t,
            "soak: minutes {} seed {} faults {} recovered {} requests_sent {} requests_failed {} foreign_touched {}",
            self.minutes,
            self.seed,
            self.faults(),
            self.recovered_count(),
            self.requests_sent,
            self.failed(),
            self.foreign_touched
        );
        t
    }
}

// ---------------------------------------------------------------------------------------------------
// Load: the churned Services.

/// Kinds of churned Service.
const KINDS: usize = 8;
/// Every `V6_EVERY`-th churned Service (index `V6_EVERY - 1`, ...) is single-stack IPv6, for its whole life.
const V6_EVERY: usize = 5;
const KIND_NAMES: [&str; KINDS] = [
    "ClusterIP/TCP",
    "ClusterIP/UDP",
    "NodePort",
    "externalIPs",
    "LoadBalancer+sourceRanges",
    "LoadBalancer ETP=Local",
    "ITP=Local",
    "ClientIP affinity",
];

#[derive(Clone, Copy, Debug)]
struct Ep {
    host: usize,
    ready: bool,
    terminating: bool,
    local: bool,
}

#[derive(Clone, Debug)]
struct Svc {
    kind: usize,
    /// IPv6 (cluster IP, endpoints, external and load-balancer IPs), else IPv4.
    v6: bool,
    alt_port: bool,
    ip_gen: usize,
    eps: Vec<Ep>,
    split: bool,
    present: bool,
}

fn random_eps(rng: &mut Rng) -> Vec<Ep> {
    let n = rng.below(5);
    let mut hosts: Vec<usize> = (1..=5).collect();
    (0..n)
        .map(|_| {
            let host = hosts.remove(rng.below(hosts.len()));
            let ready = rng.chance(0.8);
            Ep {
                host,
                ready,
                terminating: !ready && rng.chance(0.5),
                local: rng.chance(0.6),
            }
        })
        .collect()
}

fn cluster_ip(i: usize, gen_: usize, n: usize, v6: bool) -> String {
    let slot = (i + gen_ * n) % 3750;
    if v6 {
        format!("fd00:10:96::1:{:x}", 1 + slot)
    } else {
        format!("10.96.{}.{}", 1 + slot / 250, 1 + slot % 250)
    }
}

fn ep_ip(i: usize, host: usize, v6: bool) -> String {
    if v6 {
        format!("fd00:10:244::1:{:x}", i * 8 + host)
    } else {
        format!("10.244.{}.{}", 1 + i / 50, (i % 50) * 5 + host)
    }
}

/// External (`base` 97) or load-balancer (`base` 98) IP of churned Service `i`.
fn outside_ip(base: u8, i: usize, v6: bool) -> String {
    if v6 {
        format!("fd00:10:{base}::{:x}", 1 + i)
    } else {
        format!("10.{base}.{}.{}", i / 250, 1 + i % 250)
    }
}

fn service_json(i: usize, s: &Svc, n: usize) -> Value {
    let name = format!("churn-{i}");
    let proto = if s.kind == 1 { "UDP" } else { "TCP" };
    let port = if s.alt_port { 8080 } else { 80 };
    let mut p = json!({"name": "p", "port": port, "targetPort": 8080, "protocol": proto});
    let mut spec = json!({});
    let ingress = json!({"loadBalancer": {"ingress": [{"ip": outside_ip(98, i, s.v6)}]}});
    match s.kind {
        2 => {
            spec["type"] = json!("NodePort");
            p["nodePort"] = json!(30100 + i);
        }
        3 => spec["externalIPs"] = json!([outside_ip(97, i, s.v6)]),
        4 => {
            spec["type"] = json!("LoadBalancer");
            p["nodePort"] = json!(30100 + i);
            spec["loadBalancerSourceRanges"] = if s.v6 {
                json!(["fd00:10:244::/64"])
            } else {
                json!(["192.168.10.0/24", "172.16.0.0/16"])
            };
        }
        5 => {
            spec["type"] = json!("LoadBalancer");
            p["nodePort"] = json!(30100 + i);
            spec["externalTrafficPolicy"] = json!("Local");
            spec["healthCheckNodePort"] = json!(32300 + i);
        }
        6 => spec["internalTrafficPolicy"] = json!("Local"),
        7 => {
            spec["sessionAffinity"] = json!("ClientIP");
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 300}});
        }
        _ => {}
    }
    spec["ports"] = json!([p]);
    let mut svc = e2e::service(&name, &cluster_ip(i, s.ip_gen, n, s.v6), proto, port, spec);
    if s.kind == 4 || s.kind == 5 {
        svc["status"] = ingress;
    }
    svc
}

fn slice_json(i: usize, s: &Svc, part: usize, eps: &[Ep]) -> Value {
    let proto = if s.kind == 1 { "UDP" } else { "TCP" };
    let eps: Vec<Value> = eps
        .iter()
        .map(|e| {
            json!({"addresses": [ep_ip(i, e.host, s.v6)],
                   "nodeName": if e.local { NODE } else { "other-node" },
                   "conditions": {"ready": e.ready, "serving": e.ready || e.terminating,
                                  "terminating": e.terminating}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("churn-{i}-{part}"), "namespace": "default",
                     "labels": {"kubernetes.io/service-name": format!("churn-{i}")}},
        "addressType": if s.v6 { "IPv6" } else { "IPv4" },
        "ports": [{"name": "p", "port": 8080, "protocol": proto}],
        "endpoints": eps
    })
}

/// The churned Services and the API server they live in.
struct Load {
    svcs: Vec<Svc>,
    ops: u64,
}

impl Load {
    fn new(n: usize, rng: &mut Rng) -> Load {
        let svcs = (0..n)
            .map(|i| Svc {
                kind: i % KINDS,
                v6: i % V6_EVERY == V6_EVERY - 1,
                alt_port: false,
                ip_gen: 0,
                eps: random_eps(rng),
                split: rng.chance(0.2),
                present: true,
            })
            .collect();
        Load { svcs, ops: 0 }
    }

    /// Writes Service `i` (and its slices) as the model has it.
    fn write(&self, e: &E2e, i: usize) -> Result<()> {
        let s = &self.svcs[i];
        let name = format!("churn-{i}");
        if !s.present {
            e.api.delete(Kind::Service, "default", &name);
            e.api
                .delete(Kind::EndpointSlice, "default", &format!("{name}-1"));
            e.api
                .delete(Kind::EndpointSlice, "default", &format!("{name}-2"));
            return Ok(());
        }
        e.api
            .apply_value(Kind::Service, service_json(i, s, self.svcs.len()))?;
        if s.split {
            let half = s.eps.len() / 2;
            e.api
                .apply_value(Kind::EndpointSlice, slice_json(i, s, 1, &s.eps[..half]))?;
            e.api
                .apply_value(Kind::EndpointSlice, slice_json(i, s, 2, &s.eps[half..]))?;
        } else {
            e.api
                .apply_value(Kind::EndpointSlice, slice_json(i, s, 1, &s.eps))?;
            e.api
                .delete(Kind::EndpointSlice, "default", &format!("{name}-2"));
        }
        Ok(())
    }

    /// One random change: endpoints, readiness, port, type, delete/re-create (same or new IP),
    /// slice split/merge.
    fn churn_one(&mut self, e: &E2e, rng: &mut Rng) -> Result<()> {
        let i = rng.below(self.svcs.len());
        let s = &mut self.svcs[i];
        match rng.below(8) {
            0 => s.eps = random_eps(rng),
            1 => {
                if let Some(k) = (!s.eps.is_empty()).then(|| rng.below(s.eps.len())) {
                    let ep = &mut s.eps[k];
                    ep.ready = !ep.ready;
                    ep.terminating = !ep.ready && rng.chance(0.5);
                } else {
                    s.eps = random_eps(rng);
                }
            }
            2 => s.alt_port = !s.alt_port,
            3 => s.kind = rng.below(KINDS),
            4 | 5 => {
                // Delete, then re-create: with a new cluster IP half the time, else the same one.
                let keep = s.present;
                s.present = false;
                self.write(e, i)?;
                let s = &mut self.svcs[i];
                s.present = true;
                if !keep || rng.chance(0.5) {
                    s.ip_gen += 1;
                }
            }
            6 => s.split = !s.split,
            _ => s.present = !s.present || rng.chance(0.3),
        }
        self.ops += 1;
        self.write(e, i)
    }
}

// ---------------------------------------------------------------------------------------------------
// Traffic to the stable Services.

const STABLE_TCP: (&str, u16) = ("10.96.0.10", 80);
const STABLE_UDP: (&str, u16) = ("10.96.0.11", 53);
const STABLE_NODEPORT: (&str, u16) = (e2e::NODE_IP, 30080);
const CLIENT: (&str, &str, &str) = ("soak-client", "192.168.10.2", "192.168.10.1");
/// The IPv6 stable Service (single-stack) and the IPv6 addresses of the pods and the client.
const STABLE_TCP6: (&str, u16) = ("fd00:10:96::10", 80);
const POD6_GW: &str = "fd00:10:244::1";
const ABC6: [&str; 3] = ["fd00:10:244::11", "fd00:10:244::12", "fd00:10:244::13"];
const CLIENT6: &str = "fd00:10:244::20";

#[derive(Default)]
struct TrafficState {
    label: String,
    sent: u64,
    failed: BTreeMap<String, u64>,
    last_error: String,
    first_errors: BTreeMap<String, String>,
}

/// A thread in the client netns sending requests to the stable Services until stopped.
struct Traffic {
    state: Arc<Mutex<TrafficState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Traffic {
    /// A traffic handle with no thread (before the daemon programmed the stable Services).
    fn idle() -> Traffic {
        Traffic {
            state: Arc::new(Mutex::new(TrafficState::default())),
            stop: Arc::new(AtomicBool::new(true)),
            thread: None,
        }
    }

    fn start() -> Traffic {
        let state = Arc::new(Mutex::new(TrafficState {
            label: "none".into(),
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            if let Err(e) = netns::enter_netns(CLIENT.0) {
                lock(&st).last_error = format!("{e:#}");
                return;
            }
            // 3 s: a request answered later than that counts as failed (UML under a loaded host is slow).
            let t = Duration::from_secs(3);
            let ip = |s: &str| -> IpAddr { s.parse().unwrap_or(IpAddr::from([0u8, 0, 0, 0])) };
            while !sp.load(Ordering::Relaxed) {
                for k in 0..4 {
                    let label = lock(&st).label.clone();
                    let r = match k {
                        0 => netns::tcp_request(ip(STABLE_TCP.0), STABLE_TCP.1, t),
                        1 => netns::udp_request(ip(STABLE_UDP.0), STABLE_UDP.1, t),
                        2 => netns::tcp_request(ip(STABLE_TCP6.0), STABLE_TCP6.1, t),
                        _ => netns::tcp_request(ip(STABLE_NODEPORT.0), STABLE_NODEPORT.1, t),
                    };
                    let r = r.and_then(|a| {
                        if a.starts_with("pod-") {
                            Ok(a)
                        } else {
                            bail!("unexpected answer {a:?}")
                        }
                    });
                    let mut g = lock(&st);
                    g.sent += 1;
                    if let Err(e) = r {
                        let msg = format!("[{:.1}s] {e:#}", uptime());
                        *g.failed.entry(label.clone()).or_default() += 1;
                        g.first_errors.entry(label).or_insert_with(|| msg.clone());
                        g.last_error = msg;
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Traffic {
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn label(&self, l: &str) {
        lock(&self.state).label = l.to_string();
    }

    fn finish(mut self) -> (u64, BTreeMap<String, u64>, BTreeMap<String, String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let g = lock(&self.state);
        let mut errors = g.first_errors.clone();
        if !g.last_error.is_empty() {
            errors.insert("last".into(), g.last_error.clone());
        }
        (g.sent, g.failed.clone(), errors)
    }
}

// ---------------------------------------------------------------------------------------------------
// Kernel state, foreign objects, metrics.

/// Lines that belong to foreign objects (added by the soak as "another tool") or the marker's old IPs.
fn is_foreign(l: &str) -> bool {
    ["FOREIGN", "foreign", "10.55.", "198.51.100."]
        .iter()
        .any(|m| l.contains(m))
}

/// The kernel state kube-proxy owns, foreign objects filtered out.
fn owned_state() -> KernelState {
    let mut k = KernelState::read();
    k.iptables.extend(
        ip6tables_save_clean()
            .into_iter()
            .map(|l| format!("{V6_MARK}{l}")),
    );
    for v in [&mut k.ipvs, &mut k.ipsets, &mut k.iptables, &mut k.addrs] {
        v.retain(|l| !is_foreign(l));
    }
    // A set's hash seed (`initval`) is random: a set re-created with the same definition differs only there.
    for l in &mut k.ipsets {
        if let Some(i) = l.find(" initval ") {
            let rest = &l[i + 9..];
            let end = rest.find(' ').map(|e| i + 9 + e).unwrap_or(l.len());
            l.replace_range(i..end, "");
        }
    }
    k
}

/// Prefix of the `ip6tables-save` lines in [`KernelState::iptables`] (after the `iptables-save` ones).
const V6_MARK: &str = "v6|";

/// `ip6tables-save` without comments and counters, rule order kept.
fn ip6tables_save_clean() -> Vec<String> {
    sh("ip6tables-save")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.rfind(" [") {
            Some(i) if l.starts_with(':') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect()
}

/// Adds foreign object set number `k`: an IPVS virtual server with a real server, an ipset with a member,
/// a nat chain with a rule, a filter INPUT rule and an address on `node0`.
fn add_foreign(k: usize) {
    sh(&format!(
        "ipvsadm -A -t 10.55.0.{a}:80 -s rr && ipvsadm -a -t 10.55.0.{a}:80 -r 10.244.0.11:8080 -m && \
         ipset create foreign-set-{k} hash:ip && ipset add foreign-set-{k} 198.51.100.{a} && \
         iptables -t nat -N FOREIGN-{k} && iptables -t nat -A FOREIGN-{k} -s 198.51.100.{a}/32 -j RETURN && \
         iptables -A INPUT -s 198.51.100.{a}/32 -j ACCEPT && ip addr add 198.51.100.{a}/32 dev node0",
        a = k + 1
    ));
}

/// How many of the foreign objects 0..count are missing or changed.
fn foreign_missing(count: usize) -> Vec<String> {
    let ipvs = e2e::ipvs();
    let sets = sh("ipset save");
    let ipt = sh("iptables-save");
    let addrs = sh("ip -o addr show dev node0");
    let mut bad = Vec::new();
    for k in 0..count {
        let a = k + 1;
        let want = [
            (
                ipvs.contains(&format!("-A -t 10.55.0.{a}:80 -s rr")),
                "virtual server",
            ),
            (
                ipvs.contains(&format!("-a -t 10.55.0.{a}:80 -r 10.244.0.11:8080 -m")),
                "real server",
            ),
            (
                sets.contains(&format!("add foreign-set-{k} 198.51.100.{a}")),
                "ipset member",
            ),
            (
                ipt.contains(&format!("-A FOREIGN-{k} -s 198.51.100.{a}/32 -j RETURN")),
                "nat chain rule",
            ),
            (
                ipt.contains(&format!("-A INPUT -s 198.51.100.{a}/32 -j ACCEPT")),
                "INPUT rule",
            ),
            (
                addrs.contains(&format!("198.51.100.{a}/32")),
                "node0 address",
            ),
        ];
        for (ok, what) in want {
            if !ok {
                bad.push(format!("foreign object {k}: {what} gone"));
            }
        }
    }
    bad
}

/// Values of metric `name` (one per label set).
fn metric_values(text: &str, name: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// True when the daemon finished a sync after `since` and nothing is queued since.
fn synced_since(e: &E2e, since: f64) -> bool {
    let m = e.metrics();
    let last = metric_values(&m, "kubeproxy_sync_proxy_rules_last_timestamp_seconds");
    let queued = metric_values(
        &m,
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    );
    let (Some(last), Some(queued)) = (
        last.iter().copied().reduce(f64::min),
        queued.iter().copied().reduce(f64::max),
    ) else {
        return false;
    };
    last > since && last >= queued
}

/// The daemon's counter of failed kernel writes, labelled by backend.
const KERNEL_WRITE_FAILURES: &str = "kubeproxy_rs_kernel_write_failures_total";

/// Failed ipset writes counted so far (`backend="ipset"`).
fn ipset_write_failures(e: &E2e) -> f64 {
    let series = format!("{KERNEL_WRITE_FAILURES}{{backend=\"ipset\"}} ");
    e.metrics()
        .lines()
        .filter_map(|l| l.strip_prefix(series.as_str())?.trim().parse::<f64>().ok())
        .sum()
}

/// Failure counters of kernel writes.
fn write_failures(e: &E2e) -> f64 {
    let m = e.metrics();
    [
        KERNEL_WRITE_FAILURES,
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
    ]
    .iter()
    .map(|n| e2e::metric_sum(&m, n))
    .sum()
}

// ---------------------------------------------------------------------------------------------------
// The run.

/// State of a running soak.
struct Soak {
    e: E2e,
    rng: Rng,
    load: Load,
    traffic: Traffic,
    report: Report,
    foreign: usize,
    marker: usize,
    /// Unix time of the last change written to the API server.
    last_change: f64,
    /// CPU seconds and syncs of daemon runs that were killed.
    cpu_before: f64,
    syncs_before: f64,
    log: std::fs::File,
}

impl Soak {
    fn say(&mut self, line: &str) {
        use std::io::Write as _;
        let stamp = format!("[{:>7.1}s] {line}", uptime());
        println!("{stamp}");
        let _ = writeln!(self.log, "{stamp}");
    }

    /// Samples the daemon's CPU time and peak RSS.
    fn sample_stats(&mut self) -> f64 {
        let Some(st) = self.e.daemon_pid().and_then(|p| scale::proc_stats(p).ok()) else {
            return 0.0;
        };
        self.report.peak_rss = self.report.peak_rss.max(st.peak_rss);
        st.cpu_seconds
    }

    fn fail(&mut self, what: String) {
        self.say(&format!("FAILED CHECK: {what}"));
        self.report.failures.push(what);
    }

    /// Moves the marker Service to its next cluster IP; returns the `-A -t vip:80` line to wait for.
    fn move_marker(&mut self) -> Result<String> {
        self.marker += 1;
        let vip = format!("10.96.250.{}", 1 + self.marker % 250);
        self.e.api.apply_value(
            Kind::Service,
            e2e::service("soak-marker", &vip, "TCP", 80, json!({})),
        )?;
        self.last_change = unix_now();
        Ok(format!("-A -t {vip}:80 "))
    }

    /// Waits until every queued change is applied and two reads of the kernel state agree.
    fn settle(&mut self) -> Result<KernelState> {
        let t0 = Instant::now();
        let since = self.last_change;
        loop {
            if let Some(st) = self.e.daemon_exit() {
                bail!("daemon exited ({st})\n{}", e2e::tail(&self.e.log(), 40));
            }
            if synced_since(&self.e, since) {
                let a = owned_state();
                std::thread::sleep(Duration::from_millis(300));
                if synced_since(&self.e, since) && owned_state() == a {
                    return Ok(a);
                }
            }
            if t0.elapsed() > SETTLE_CAP {
                bail!("the daemon did not apply the queued changes within {SETTLE_CAP:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls `ok` until it holds or syncPeriod + margin passed; returns the time it took.
    fn wait_recovered(&mut self, mut ok: impl FnMut(&mut Soak) -> bool) -> Option<f64> {
        let t0 = Instant::now();
        let cap = Duration::from_secs(SYNC_PERIOD_S) + MARGIN;
        loop {
            if ok(self) {
                return Some(t0.elapsed().as_secs_f64());
            }
            if t0.elapsed() > cap || self.e.daemon_exit().is_some() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The stable Services (TCP, UDP, NodePort, IPv6 TCP; endpoints the three pods, always ready) and the
/// marker's EndpointSlice.
fn apply_stable(e: &E2e) {
    e.apply(e2e::service(
        "stable-tcp",
        STABLE_TCP.0,
        "TCP",
        STABLE_TCP.1,
        json!({}),
    ));
    e.apply(e2e::slice("stable-tcp", "TCP", 8080, ABC));
    let udp_port = json!({"ports": [{"name": "p", "port": STABLE_UDP.1, "targetPort": 5353, "protocol": "UDP"}]});
    e.apply(e2e::service(
        "stable-udp",
        STABLE_UDP.0,
        "UDP",
        STABLE_UDP.1,
        udp_port,
    ));
    e.apply(e2e::slice("stable-udp", "UDP", 5353, ABC));
    let np = json!({"type": "NodePort", "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": STABLE_NODEPORT.1}]});
    e.apply(e2e::service("stable-np", "10.96.0.12", "TCP", 80, np));
    e.apply(e2e::slice("stable-np", "TCP", 8080, ABC));
    e.apply(e2e::slice("soak-marker", "TCP", 8080, ABC));
    e.apply(e2e::service(
        "stable-tcp6",
        STABLE_TCP6.0,
        "TCP",
        STABLE_TCP6.1,
        json!({}),
    ));
    let abc6: Vec<(&str, &str, bool)> = ABC6.iter().map(|a| (*a, NODE, true)).collect();
    let mut slice6 = e2e::slice("stable-tcp6", "TCP", 8080, &abc6);
    slice6["addressType"] = json!("IPv6");
    e.apply(slice6);
}

/// Sets up pods, client, API objects, foreign objects and the daemon.
fn setup(p: &Params) -> Result<(Soak, Vec<netns::Pod>)> {
    let mut pods = e2e::abc_pods();
    pods.push(e2e::client(CLIENT.0, CLIENT.1, CLIENT.2));
    for (pod, ip6) in pods.iter_mut().zip(ABC6.iter().chain([&CLIENT6])) {
        pod.add_ipv6(ip6, POD6_GW)?;
    }
    let e = E2e::start(Options {
        sync_period: format!("{SYNC_PERIOD_S}s"),
        ..Options::default()
    });
    apply_stable(&e);
    let mut rng = Rng::new(p.seed);
    let load = Load::new(p.services, &mut rng);
    for i in 0..p.services {
        load.write(&e, i)?;
    }
    let log = std::fs::File::create(e.dir.join("soak-log.txt"))?;
    let mut s = Soak {
        e,
        rng,
        load,
        traffic: Traffic::idle(),
        report: Report {
            minutes: p.minutes,
            seed: p.seed,
            ..Default::default()
        },
        foreign: 0,
        marker: 0,
        last_change: 0.0,
        cpu_before: 0.0,
        syncs_before: 0.0,
        log,
    };
    add_foreign(0);
    s.foreign = 1;
    s.move_marker()?;
    let t = Instant::now();
    s.e.start_daemon();
    s.say(&format!(
        "daemon synced {} Services ({} churned: {}; every {V6_EVERY}th IPv6) in {:.1?}",
        p.services + 5,
        p.services,
        KIND_NAMES.join(", "),
        t.elapsed()
    ));
    let mut stable = [STABLE_TCP, STABLE_NODEPORT]
        .map(|(ip, port)| format!("-a -t {ip}:{port} -r "))
        .to_vec();
    stable.push(format!("-a -t [{}]:{} -r ", STABLE_TCP6.0, STABLE_TCP6.1));
    let udp = format!("-a -u {}:{} -r ", STABLE_UDP.0, STABLE_UDP.1);
    s.e.wait_ipvs("the stable Services' real servers", |t| {
        stable
            .iter()
            .chain([&udp])
            .all(|p| t.lines().filter(|l| l.starts_with(p.as_str())).count() == 3)
    });
    s.traffic = Traffic::start();
    Ok((s, pods))
}

/// Runs the soak (inside the guest) and returns its figures; failed checks are in `Report::failures`.
pub fn run(p: &Params) -> Result<Report> {
    let (mut s, _pods) = setup(p)?;
    let end = Instant::now() + Duration::from_secs_f64(p.minutes * 60.0);
    let mut deck: Vec<Fault> = Vec::new();
    let mut firsts = p.first_faults.clone();
    while Instant::now() < end || s.report.faults() < p.min_faults {
        // Churn.
        s.traffic.label("none");
        for _ in 0..CHURN_OPS {
            let (load, e, rng) = (&mut s.load, &s.e, &mut s.rng);
            load.churn_one(e, rng)?;
            s.last_change = unix_now();
            std::thread::sleep(CHURN_EVERY);
        }
        let baseline = match s.settle() {
            Ok(b) => b,
            Err(err) => {
                s.fail(format!("settle after churn: {err:#}"));
                if s.e.daemon_exit().is_some() || s.report.failures.len() > 20 {
                    break;
                }
                continue;
            }
        };
        // The next fault from a seeded shuffled deck: every kind once before any repeats.
        if deck.is_empty() && firsts.is_empty() {
            deck = Fault::ALL.to_vec();
            for k in (1..deck.len()).rev() {
                deck.swap(k, s.rng.below(k + 1));
            }
        }
        let fault = if firsts.is_empty() {
            deck.pop().unwrap_or(Fault::Kill9)
        } else {
            firsts.remove(0)
        };
        one_fault(&mut s, fault, &baseline)?;
    }
    finish(s)
}

fn finish(mut s: Soak) -> Result<Report> {
    let cpu = s.sample_stats();
    s.report.cpu_seconds = s.cpu_before + cpu;
    s.report.syncs = s.syncs_before + s.e.sync_count();
    s.report.churn_ops = s.load.ops;
    let (sent, failed, errors) = s.traffic.finish();
    s.report.requests_sent = sent;
    s.report.requests_failed = failed;
    s.report.request_errors = errors;
    let missing = foreign_missing(s.foreign);
    s.report.foreign_touched = missing.len();
    for m in missing {
        s.report.failures.push(m);
    }
    let table = s.report.table();
    let _ = std::fs::write(s.e.dir.join("soak-results.txt"), &table);
    Ok(s.report)
}

/// Injects one fault, waits for recovery and checks the kernel, foreign objects, health and counters.
fn one_fault(s: &mut Soak, fault: Fault, baseline: &KernelState) -> Result<()> {
    s.traffic.label(fault.name());
    let failures0 = write_failures(&s.e);
    let t0 = Instant::now();
    let outcome = inject(s, fault, baseline)?;
    let took = match outcome {
        Outcome::Skipped(why) => {
            s.say(&format!("{}: skipped ({why})", fault.name()));
            s.traffic.label("none");
            return Ok(());
        }
        Outcome::Recovered(d) => Some(d),
        Outcome::Baseline => s.wait_recovered(|_| owned_state() == *baseline),
        Outcome::BaselineAfterSync => {
            s.wait_recovered(|s| s.e.sync_count() >= 1.0 && owned_state() == *baseline)
        }
        Outcome::Failed(why) => {
            s.fail(format!("{}: {why}", fault.name()));
            None
        }
    };
    // Requests right after recovery still count for the fault for 1 s (connections in flight).
    std::thread::sleep(Duration::from_secs(1));
    s.traffic.label("none");
    match took {
        Some(d) => {
            s.say(&format!("{}: recovered in {d:.1} s", fault.name()));
            s.report.recovered.entry(fault.name()).or_default().push(d);
        }
        None => {
            let now = owned_state();
            s.fail(format!(
                "{}: kernel not back to the expected state within {:?} (injected {:.1?} ago); diff (- expected, + found):\n{}",
                fault.name(),
                Duration::from_secs(SYNC_PERIOD_S) + MARGIN,
                t0.elapsed(),
                baseline.diff(&now)
            ));
            *s.report.unrecovered.entry(fault.name()).or_default() += 1;
        }
    }
    after_checks(s, fault, failures0)
}

/// Checks run after every fault: daemon alive, foreign objects intact, /healthz healthy, counters.
fn after_checks(s: &mut Soak, fault: Fault, failures0: f64) -> Result<()> {
    if let Some(st) = s.e.daemon_exit() {
        let tail = e2e::tail(&s.e.log(), 40);
        s.fail(format!("{}: daemon exited ({st})\n{tail}", fault.name()));
        bail!("daemon died");
    }
    for m in foreign_missing(s.foreign) {
        s.fail(format!("{}: {m}", fault.name()));
    }
    let h = s.e.healthz("/healthz").map(|r| r.status);
    if h != Some(200) {
        s.fail(format!(
            "{}: /healthz answered {h:?} after recovery",
            fault.name()
        ));
    }
    if fault == Fault::WrongTypeSet {
        // A free set of the wrong type is destroyed and re-created without a failed write; a write into it
        // before the repair (a partial sync adding a member) fails and is counted.
        let n = write_failures(&s.e) - failures0;
        s.say(&format!("wrong_type_set: {n} failed kernel writes counted"));
    }
    Ok(())
}

/// What an injected fault leaves to check.
enum Outcome {
    /// The kernel must come back to the baseline.
    Baseline,
    /// The daemon (restarted) must sync, and the kernel be the baseline.
    BaselineAfterSync,
    /// Recovery already measured (seconds).
    Recovered(f64),
    /// The fault could not be injected (no target).
    Skipped(String),
    /// A check failed during the fault.
    Failed(String),
}

fn inject(s: &mut Soak, fault: Fault, b: &KernelState) -> Result<Outcome> {
    Ok(match fault {
        Fault::Kill9 => kill9(s),
        Fault::WatchCut | Fault::Gone410 | Fault::ApiDown => api_fault(s, fault, b)?,
        Fault::ForeignAdd => {
            add_foreign(s.foreign);
            s.foreign += 1;
            // One full sync must pass over it: wait a syncPeriod plus a sync.
            let t = unix_now() + SYNC_PERIOD_S as f64;
            let ok = s.wait_recovered(|s| synced_since(&s.e, t));
            match ok {
                Some(_) => Outcome::Baseline,
                None => Outcome::Failed("no full sync after the foreign objects were added".into()),
            }
        }
        Fault::WrongTypeSet => wrong_type_set(s, b),
        Fault::SetInUse => set_in_use(s, b)?,
        _ => tamper(s, fault, b),
    })
}

/// kill -9 and restart: the new daemon must rebuild exactly the baseline from the API objects.
fn kill9(s: &mut Soak) -> Outcome {
    s.cpu_before += s.sample_stats();
    s.syncs_before += s.e.sync_count();
    s.e.kill_daemon();
    s.e.spawn_daemon();
    Outcome::BaselineAfterSync
}

/// Watch cut, 410 Gone or API server down, with the marker moved while the daemon cannot see it.
fn api_fault(s: &mut Soak, fault: Fault, b: &KernelState) -> Result<Outcome> {
    let lists0 = s.e.api.list_requests(Kind::Service);
    let want = match fault {
        Fault::WatchCut => {
            s.e.api.drop_all_watches();
            s.move_marker()?
        }
        Fault::Gone410 => {
            s.e.api.hold_watches(true);
            s.e.api.drop_all_watches();
            let w = s.move_marker()?;
            s.e.api.expire_history();
            s.e.api.hold_watches(false);
            w
        }
        _ => {
            s.e.api.set_unavailable(true);
            s.e.api.drop_all_watches();
            let w = s.move_marker()?;
            let down = Duration::from_secs(3 + s.rng.below(8) as u64);
            std::thread::sleep(down);
            let during = owned_state();
            s.e.api.set_unavailable(false);
            if during != *b {
                return Ok(Outcome::Failed(format!(
                    "kernel changed while the API server was down {down:?}:\n{}",
                    b.diff(&during)
                )));
            }
            w
        }
    };
    let t0 = Instant::now();
    let ok = s.wait_recovered(|_| e2e::ipvs().contains(&want));
    if fault == Fault::Gone410 && s.e.api.list_requests(Kind::Service) <= lists0 {
        return Ok(Outcome::Failed(
            "no relist of Services after 410 Gone".into(),
        ));
    }
    Ok(match ok {
        Some(_) => Outcome::Recovered(t0.elapsed().as_secs_f64()),
        None => Outcome::Failed(format!("marker {want:?} not in IPVS in time")),
    })
}

/// Another tool changes one of our kernel objects, picked at random from the baseline.
fn tamper(s: &mut Soak, fault: Fault, b: &KernelState) -> Outcome {
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let pick = |rng: &mut Rng, v: &[String], pre: &str| -> Option<Vec<String>> {
        let c: Vec<&String> = v.iter().filter(|l| l.starts_with(pre)).collect();
        rng.pick(&c).map(|l| words(l))
    };
    let cmd = match fault {
        Fault::IpvsDelVs => {
            pick(&mut s.rng, &b.ipvs, "-A ").map(|w| format!("ipvsadm -D {} {}", w[1], w[2]))
        }
        Fault::IpvsDelRs => pick(&mut s.rng, &b.ipvs, "-a ")
            .map(|w| format!("ipvsadm -d {} {} -r {}", w[1], w[2], w[4])),
        Fault::IpvsSched => {
            pick(&mut s.rng, &b.ipvs, "-A ").map(|w| format!("ipvsadm -E {} {} -s wrr", w[1], w[2]))
        }
        Fault::IpsetFlush => {
            pick(&mut s.rng, &b.ipsets, "add ").map(|w| format!("ipset flush {}", w[1]))
        }
        Fault::IpsetDel => {
            pick(&mut s.rng, &b.ipsets, "add ").map(|w| format!("ipset del {} {}", w[1], w[2]))
        }
        Fault::AddrDel => s
            .rng
            .pick(&b.addrs)
            .map(|a| format!("ip addr del {a} dev kube-ipvs0")),
        Fault::IptablesDelJump => jump_rule(&mut s.rng, &b.iptables),
        _ => None,
    };
    let Some(cmd) = cmd else {
        return Outcome::Skipped("no target".into());
    };
    s.say(&format!("{}: {cmd}", fault.name()));
    match std::process::Command::new("bash")
        .arg("-c")
        .arg(&cmd)
        .output()
    {
        Ok(o) if o.status.success() => Outcome::Baseline,
        Ok(o) => Outcome::Failed(format!(
            "`{cmd}` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Outcome::Failed(format!("`{cmd}`: {e}")),
    }
}

/// `iptables -t T -D ...` (or `ip6tables`) of a random jump from a built-in chain into one of ours.
fn jump_rule(rng: &mut Rng, lines: &[String]) -> Option<String> {
    let mut table = "";
    let mut c = Vec::new();
    for l in lines {
        let (tool, l) = match l.strip_prefix(V6_MARK) {
            Some(rest) => ("ip6tables", rest),
            None => ("iptables", l.as_str()),
        };
        if let Some(t) = l.strip_prefix('*') {
            table = t;
        }
        let builtin = ["PREROUTING", "OUTPUT", "POSTROUTING", "INPUT", "FORWARD"]
            .iter()
            .any(|ch| l.starts_with(&format!("-A {ch} ")));
        if builtin && l.contains("-j KUBE-") {
            c.push(format!("{tool} -t {table} -D {}", &l[3..]));
        }
    }
    rng.pick(&c).cloned()
}

/// One of our sets replaced by a set of another type (while our rules do not reference it).
fn wrong_type_set(s: &mut Soak, b: &KernelState) -> Outcome {
    match replace_set(s, b, |_| true, |_| String::new()) {
        Some((name, ty, other)) => {
            s.say(&format!(
                "wrong_type_set: {name} ({ty}) replaced by {other}"
            ));
            Outcome::Baseline
        }
        None => Outcome::Skipped("every set of ours is referenced by a rule".into()),
    }
}

/// Destroys a random set of the baseline accepted by `which` and not referenced by a rule, and creates
/// one of another type under its name, followed in the same shell command by `then(name)` (a shell
/// suffix such as ` && …`); returns (name, old type, new type).
fn replace_set(
    s: &mut Soak,
    b: &KernelState,
    which: impl Fn(&str) -> bool,
    then: impl Fn(&str) -> String,
) -> Option<(String, String, String)> {
    let mut sets: Vec<(String, String)> = b
        .ipsets
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"create") && which(w[1]))
                .then(|| (w[1].to_string(), w[2].to_string()))
        })
        .collect();
    for k in (1..sets.len()).rev() {
        sets.swap(k, s.rng.below(k + 1));
    }
    for (name, ty) in sets {
        let other = if ty == "bitmap:port" {
            "hash:ip"
        } else {
            "bitmap:port range 0-65535"
        };
        let cmd = format!(
            "ipset destroy {name} 2>/dev/null && ipset create {name} {other}{}",
            then(&name)
        );
        if sh(&format!("{cmd} && echo ok || true")).trim() == "ok" {
            return Some((name, ty, other.to_string()));
        }
    }
    None
}

/// The chain of the foreign rule that holds a set in [`set_in_use`].
const HOLD_CHAIN: &str = "FOREIGN-HOLD";
/// How long after the health timeout `/healthz` may take to turn unhealthy (polling, a sync in flight).
const UNHEALTHY_SLACK: Duration = Duration::from_secs(15);

/// A set of ours replaced by one of another type that another tool's rule references, so the daemon
/// cannot destroy it: every sync fails until the rule goes. Checks, in order: the failure is counted
/// (`kubeproxy_kernel_write_failures_total` moves); `/healthz` stays 200 while nothing is queued; after
/// a change is queued (the marker moves) it turns 503 once the change is pending for the health timeout
/// (2 × syncPeriod, upstream's rule) and not before; once the rule is removed the daemon re-creates the
/// set and `/healthz` is 200 again. Recovery is timed from the rule's removal.
fn set_in_use(s: &mut Soak, b: &KernelState) -> Result<Outcome> {
    let failures0 = ipset_write_failures(&s.e);
    let release = format!("iptables -F {HOLD_CHAIN}; iptables -X {HOLD_CHAIN}");
    // The hold goes in right after the replacement (one shell command), so that a full sync of the
    // daemon rarely repairs the set in between; if one did, the hold holds our own set: try again.
    let mut replaced = None;
    for _ in 0..3 {
        sh(&format!("iptables -N {HOLD_CHAIN}"));
        // IPv4 sets only: the hold is an iptables (not ip6tables) rule.
        let r = replace_set(
            s,
            b,
            |n| !n.starts_with("KUBE-6-"),
            |n| format!(" && iptables -A {HOLD_CHAIN} -m set --match-set {n} src -j RETURN"),
        );
        let Some((name, ty, other)) = r else {
            sh(&format!("{release} 2>/dev/null || true"));
            return Ok(Outcome::Skipped(
                "every IPv4 set of ours is referenced".into(),
            ));
        };
        let now = sh(&format!("ipset list -t {name}"));
        let want = format!("Type: {}", other.split(' ').next().unwrap_or_default());
        if now.contains(&want) {
            replaced = Some((name, ty, other));
            break;
        }
        s.say(&format!(
            "wrong_type_set_held: the daemon repaired {name} before the hold: again"
        ));
        sh(&format!("{release} 2>/dev/null || true"));
    }
    let Some((name, ty, other)) = replaced else {
        return Ok(Outcome::Failed(
            "could not hold a set of the wrong type".into(),
        ));
    };
    s.say(&format!(
        "wrong_type_set_held: {name} ({ty}) replaced by {other}, held by a rule in {HOLD_CHAIN}"
    ));
    let held = hold_checks(s, failures0);
    sh(&release);
    let t0 = Instant::now();
    let want = match held {
        Ok(want) => want,
        Err(why) => {
            // Let the daemon repair before the next round's baseline.
            let _ = s.wait_recovered(|s| s.e.healthz("/healthz").map(|r| r.status) == Some(200));
            return Ok(Outcome::Failed(why));
        }
    };
    let recovered = s.wait_recovered(|s| {
        s.e.healthz("/healthz").map(|r| r.status) == Some(200)
            && e2e::ipvs().contains(&want)
            && without_marker(&owned_state()) == without_marker(b)
    });
    Ok(match recovered {
        Some(_) => Outcome::Recovered(t0.elapsed().as_secs_f64()),
        None => Outcome::Failed(format!(
            "after the hold on {name} was removed: not healthy with the set repaired and the marker {want:?} \
             programmed within {:?}; diff (- expected, + found, marker lines left out):\n{}",
            Duration::from_secs(SYNC_PERIOD_S) + MARGIN,
            without_marker(b).diff(&without_marker(&owned_state()))
        )),
    })
}

/// The checks of [`set_in_use`] while the set is held; returns the marker line to wait for.
fn hold_checks(s: &mut Soak, failures0: f64) -> Result<String, String> {
    let counted = s.wait_recovered(|s| ipset_write_failures(&s.e) > failures0);
    let Some(after) = counted else {
        let m = s.e.metrics();
        let lines: Vec<&str> = m.lines().filter(|l| l.contains("failures")).collect();
        return Err(format!(
            "{KERNEL_WRITE_FAILURES}{{backend=\"ipset\"}} did not move from {failures0} while our set was \
             held; failure metrics:\n{}",
            lines.join("\n")
        ));
    };
    s.say(&format!(
        "wrong_type_set_held: {KERNEL_WRITE_FAILURES}{{backend=\"ipset\"}} moved after {after:.1} s"
    ));
    let status = |s: &Soak| s.e.healthz("/healthz").map(|r| r.status);
    if status(s) != Some(200) {
        return Err(format!(
            "/healthz answered {:?} with a failing sync but nothing queued",
            status(s)
        ));
    }
    let want = s.move_marker().map_err(|e| format!("{e:#}"))?;
    let queued = Instant::now();
    let timeout = Duration::from_secs(2 * SYNC_PERIOD_S);
    let unhealthy = loop {
        let st = status(s);
        if st != Some(200) {
            break Some((queued.elapsed(), st));
        }
        if queued.elapsed() > timeout + UNHEALTHY_SLACK {
            break None;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    match unhealthy {
        // One polling step of tolerance for the start of the clock.
        Some((t, _)) if t + Duration::from_millis(500) < timeout => Err(format!(
            "/healthz unhealthy {t:.1?} after the change was queued, before the health timeout {timeout:?}"
        )),
        Some((t, Some(503))) => {
            s.say(&format!(
                "wrong_type_set_held: /healthz 503 {:.1} s after a change was queued (health timeout {timeout:?})",
                t.as_secs_f64()
            ));
            Ok(want)
        }
        Some((t, st)) => Err(format!("/healthz answered {st:?} after {t:.1?}, not 503")),
        None => Err(format!(
            "/healthz still 200 {:?} after a change was queued that could not be applied",
            timeout + UNHEALTHY_SLACK
        )),
    }
}

/// The state without the marker Service's lines (its cluster IPs are 10.96.250.x).
fn without_marker(k: &KernelState) -> KernelState {
    let keep = |v: &Vec<String>| -> Vec<String> {
        v.iter()
            .filter(|l| !l.contains("10.96.250."))
            .cloned()
            .collect()
    };
    KernelState {
        ipvs: keep(&k.ipvs),
        ipsets: keep(&k.ipsets),
        iptables: keep(&k.iptables),
        addrs: keep(&k.addrs),
    }
}
