//! The deterministic counts of each sync kind, from the daemon's own "sync report" log lines: its
//! `cost` field holds the sync thread's CPU (`cpu_us`) and minor page faults (`minflt`) and the kernel
//! I/O the sync did (system calls by kind, bytes and netlink messages each way per backend, processes
//! started; `kube_proxy_rs::kernel::io_counts`). A daemon without that field (a build before it) gives
//! no counts. The event-driven kinds come from a phase of their own ([`event_driven`]): k changes
//! applied at once while the runner waits out its minimum interval, so that they land in one sync.

use super::{Daemon, M, Run, cold_start_cap, unix};
use anyhow::{Context, Result, bail};
use common::apiserver::Kind;
use common::scale;
use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsServiceKey};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::common;

/// One sync's counts by key (`cpu_us`, `minflt`, `ipvs.recv`, `proc.iptables-restore`, ...).
pub type Counts = BTreeMap<String, f64>;

/// One "sync report" line of a daemon log: whether it was full, the real servers it added, its counts.
#[derive(Debug, Clone)]
pub struct Report {
    pub ts: f64,
    pub full: bool,
    pub dests_added: u64,
    pub counts: Counts,
}

/// Every "sync report" line of a daemon log that carries a `cost` field.
pub fn reports(log: &Path) -> Vec<Report> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("sync report"))
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let cost = v["cost"].as_str()?;
            let report = v["report"].as_str().unwrap_or_default();
            Some(Report {
                ts: v["ts"].as_f64()? / 1e3,
                full: report.contains("full: true"),
                dests_added: dests_added(report),
                counts: parse(cost),
            })
        })
        .collect()
}

/// `key=value` tokens.
fn parse(cost: &str) -> Counts {
    cost.split_whitespace()
        .filter_map(|t| {
            let (k, v) = t.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// `ipvs_destinations: ObjectCounts { added: N` in a report's debug text.
fn dests_added(report: &str) -> u64 {
    report
        .split_once("ipvs_destinations: ObjectCounts { added: ")
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The median of each key over `reports` (a key missing from a report counts as 0 there).
pub fn median(reports: &[&Report]) -> Counts {
    let mut keys: Vec<&String> = reports.iter().flat_map(|r| r.counts.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let mut v: Vec<f64> = reports
                .iter()
                .map(|r| r.counts.get(k).copied().unwrap_or(0.0))
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            (k.clone(), v[v.len() / 2])
        })
        .collect()
}

/// The counts in one line, grouped: thread CPU and faults, then the rest in key order.
pub fn line(c: &Counts) -> String {
    if c.is_empty() {
        return "no counts (the daemon does not report them)".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k}={v:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Counts of the event-driven syncs: (changes applied at once, syncs that programmed them, the counts
/// of that sync, or the sum over them when there were several).
pub type EventCounts = Vec<(usize, usize, Counts)>;

/// A warm restart with minSyncPeriod 10 s (syncPeriod 1 h: no periodic sync in the phase); for k in
/// `sizes`, two single changes, each waited for (the token bucket is then empty), then k changes at once
/// (each one more endpoint in another plain ClusterIP Service), which wait for the next token and land
/// in one sync; then the Services are put back.
pub fn event_driven(run: &mut Run, n: usize, sizes: &[usize]) -> Result<EventCounts> {
    let log = run.dir.join(format!("kube-proxy-{n}-events.log"));
    let mut d = Daemon::spawn(&run.daemon, &run.kubeconfig, ("1h", "10s"), &log)?;
    let started = unix(d.started);
    d.wait_synced_after(started, cold_start_cap(n))?
        .context("events: warm restart did not sync")?;
    let mut out = Vec::new();
    let mut next = 0usize;
    for &k in sizes {
        for _ in 0..2 {
            apply(run, &mut d, n, &mut next, 1)?;
        }
        let from = unix(std::time::SystemTime::now());
        apply(run, &mut d, n, &mut next, k)?;
        let after: Vec<Report> = reports(&d.log)
            .into_iter()
            .filter(|r| r.ts >= from && r.dests_added > 0)
            .collect();
        let mut sum = Counts::new();
        for r in &after {
            for (key, v) in &r.counts {
                *sum.entry(key.clone()).or_default() += v;
            }
        }
        run.log(&format!(
            "N={n}: {k} changes at once: {} sync(s): {}",
            after.len(),
            line(&sum)
        ));
        out.push((k, after.len(), sum));
    }
    restore(run, next)?;
    let want = scale::Expected::compute(n, M, 0).destinations;
    let deadline = Instant::now() + Duration::from_secs(600);
    while scale::ipvs_counts()?.1 != want {
        d.check_alive()?;
        if Instant::now() > deadline {
            bail!("N={n}: the event-driven changes were not undone within 600 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    d.stop()?;
    Ok(out)
}

/// Applies `k` one-endpoint additions (changes `next..next + k`) and waits until IPVS has them all.
fn apply(run: &mut Run, d: &mut Daemon, n: usize, next: &mut usize, k: usize) -> Result<()> {
    let changes: Vec<usize> = (*next..*next + k).collect();
    *next += k;
    for &c in &changes {
        let (i, extra) = target(n, c);
        run.api
            .apply_value(Kind::EndpointSlice, scale::slice(i, M, &[extra], None))?;
    }
    let mut ipvs = NetlinkIpvs::new().context("open IPVS netlink")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    for &c in &changes {
        let (i, extra) = target(n, c);
        let key = IpvsServiceKey {
            addr: IpAddr::V4(scale::cluster_ip(i)),
            port: scale::PORT,
            protocol: Protocol::Tcp,
        };
        loop {
            let dests = ipvs.destinations(&key)?;
            if dests.iter().any(|x| x.addr == IpAddr::V4(extra)) {
                break;
            }
            d.check_alive()?;
            if Instant::now() > deadline {
                bail!("event-driven change {c}: {extra} not in IPVS within 120 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Service and extra endpoint of change `c`: distinct plain ClusterIP Services, addresses apart from
/// the other phases'.
fn target(n: usize, c: usize) -> (usize, std::net::Ipv4Addr) {
    let groups = (n / 10).max(1);
    let i = ((97 * c + 31) % groups) * 10 + 7;
    (i, scale::extra_ip(10_000 + c))
}

/// Puts the Services of changes `0..count` back.
fn restore(run: &mut Run, count: usize) -> Result<()> {
    for c in 0..count {
        let (i, _) = target(run.loaded, c);
        run.api
            .apply_value(Kind::EndpointSlice, scale::slice(i, M, &[], None))?;
    }
    Ok(())
}

/// The sum of the counts whose key ends with `suffix` (`.recv`, `bytes_in`, ...; `""`: none), or the
/// count named `suffix` itself (`cpu_us`, `minflt`).
pub fn total(c: &Counts, suffix: &str) -> Option<f64> {
    if c.is_empty() {
        return None;
    }
    if let Some(v) = c.get(suffix) {
        return Some(*v);
    }
    Some(
        c.iter()
            .filter(|(k, _)| k.ends_with(suffix))
            .map(|(_, v)| v)
            .sum(),
    )
}

/// Every system call to the kernel's interfaces in `c` (netlink send and recv, reads, getsockopts).
pub fn calls(c: &Counts) -> Option<f64> {
    let keys = [".send", ".recv", ".read", ".getsockopt"];
    let parts: Vec<f64> = keys.iter().filter_map(|k| total(c, k)).collect();
    (!parts.is_empty()).then(|| parts.iter().sum())
}

/// The counts of the event-driven sync with `k` changes.
pub fn event(r: &[(usize, usize, Counts)], k: usize) -> Option<&Counts> {
    r.iter().find(|(n, _, _)| *n == k).map(|(_, _, c)| c)
}
