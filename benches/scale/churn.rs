//! Churn mode of the scale bench: steady EndpointSlice changes at a fixed rate over random services, with
//! the daemon's CPU, syncs and programming latency measured from outside.
//!
//! Change `k` replaces the slice of a random service `i` with its M endpoints plus one extra endpoint
//! `scale::churn_ip(k)` (so the service's previous extra endpoint leaves in the same update). One change in
//! [`SAMPLE_EVERY`] is sampled: the time from the API apply until the new real server is in the IPVS
//! virtual server of the service's ClusterIP (polled over netlink every [`POLL`]).

use crate::common::apiserver::{Kind, TestApiServer};
use crate::common::scale;
use anyhow::{Context, Result, bail};
use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsServiceKey};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

/// One change in this many is sampled for latency.
pub const SAMPLE_EVERY: usize = 5;
/// How often outstanding samples are looked up in IPVS.
const POLL: Duration = Duration::from_millis(5);
/// A sample not visible after this long fails the run.
const SAMPLE_CAP: Duration = Duration::from_secs(60);

/// What one churn run measured.
#[derive(Debug, Clone, Default)]
pub struct ChurnResult {
    /// The daemon's `--ipvs-min-sync-period`.
    pub min_sync: String,
    pub seconds: f64,
    pub changes: usize,
    /// Daemon user+sys CPU seconds per minute (its own threads).
    pub cpu_per_min: f64,
    /// CPU seconds per minute of the daemon's reaped children (iptables-save and friends).
    pub child_cpu_per_min: f64,
    pub syncs_per_min: f64,
    pub full_syncs: f64,
    /// Sampled API apply → real server visible, sorted, milliseconds.
    pub latencies_ms: Vec<f64>,
    pub rss_end: u64,
    /// Steps of the last event-driven sync (the daemon's report).
    pub last_steps: String,
}

impl ChurnResult {
    /// Percentile of the latency samples (ms).
    pub fn p(&self, q: f64) -> f64 {
        scale::percentile(&self.latencies_ms, q)
    }
}

/// A sampled change waiting to show up in IPVS.
struct Pending {
    key: IpvsServiceKey,
    ip: IpAddr,
    applied: Instant,
}

/// The churn loop's state.
pub struct Churn<'a> {
    pub api: &'a mut TestApiServer,
    pub n: usize,
    pub m: usize,
    /// Changes per second.
    pub rate: f64,
    pub duration: Duration,
    pub seed: u64,
}

impl Churn<'_> {
    /// Applies changes at `rate` for `duration` and samples their latency; returns the sorted samples, the
    /// number of changes and the services touched (their slices still carry an extra endpoint).
    /// `alive` is called between changes and fails the run when the daemon died.
    pub fn drive(
        &mut self,
        mut alive: impl FnMut() -> Result<()>,
    ) -> Result<(Vec<f64>, usize, BTreeSet<usize>)> {
        let mut ipvs = NetlinkIpvs::new().context("open IPVS netlink")?;
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let interval = Duration::from_secs_f64(1.0 / self.rate.max(0.01));
        let start = Instant::now();
        let mut pending: Vec<Pending> = Vec::new();
        let mut samples = Vec::new();
        let mut touched = BTreeSet::new();
        let mut k = 0;
        while start.elapsed() < self.duration || !pending.is_empty() {
            let due = start + interval * k as u32;
            if start.elapsed() < self.duration && Instant::now() >= due {
                // A service with a sample still pending is left alone: a second change could replace the
                // sampled endpoint before it is ever programmed.
                let mut i = rng.usize(0..self.n);
                while pending
                    .iter()
                    .any(|p| p.key.addr == IpAddr::V4(scale::cluster_ip(i)))
                {
                    i = rng.usize(0..self.n);
                }
                let ip = scale::churn_ip(k);
                let obj = scale::slice(i, self.m, &[ip], Some(SystemTime::now()));
                let applied = Instant::now();
                self.api.apply_value(Kind::EndpointSlice, obj)?;
                touched.insert(i);
                if k % SAMPLE_EVERY == 0 {
                    let key = IpvsServiceKey {
                        addr: IpAddr::V4(scale::cluster_ip(i)),
                        port: scale::PORT,
                        protocol: Protocol::Tcp,
                    };
                    pending.push(Pending {
                        key,
                        ip: IpAddr::V4(ip),
                        applied,
                    });
                }
                k += 1;
                alive()?;
                continue;
            }
            poll(&mut ipvs, &mut pending, &mut samples)?;
            std::thread::sleep(POLL);
        }
        samples.sort_by(|a, b| a.total_cmp(b));
        Ok((samples, k, touched))
    }

    /// Puts the touched services' slices back to their M endpoints.
    pub fn restore(&mut self, touched: &BTreeSet<usize>) -> Result<()> {
        for &i in touched {
            self.api
                .apply_value(Kind::EndpointSlice, scale::slice(i, self.m, &[], None))?;
        }
        Ok(())
    }
}

/// Looks up every pending sample once; the visible ones become latency samples.
fn poll(ipvs: &mut NetlinkIpvs, pending: &mut Vec<Pending>, samples: &mut Vec<f64>) -> Result<()> {
    let mut i = 0;
    while i < pending.len() {
        let p = &pending[i];
        let seen = ipvs
            .destinations(&p.key)
            .with_context(|| format!("list real servers of {}", p.key))?
            .iter()
            .any(|d| d.addr == p.ip && d.weight > 0);
        if seen {
            samples.push(p.applied.elapsed().as_secs_f64() * 1e3);
            pending.swap_remove(i);
            continue;
        }
        if p.applied.elapsed() > SAMPLE_CAP {
            bail!(
                "churn: {} not in IPVS service {} after {SAMPLE_CAP:?}",
                p.ip,
                p.key
            );
        }
        i += 1;
    }
    Ok(())
}
