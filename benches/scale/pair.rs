//! Paired mode of the scale bench (`KPRS_BENCH_BASELINE=<kube-proxy binary>`): this build and a baseline
//! measured in the same boot, alternately, so that UML's swing between boots (up to 2× on churn CPU)
//! does not pass for a difference between builds.
//!
//! At each N, every round runs both daemons one after the other (ours first in even rounds, the
//! baseline first in odd ones): a cold start on a flushed kernel, the no-op full syncs after a warm
//! restart, and the two churn runs (minSyncPeriod 0 and 1s, the same seed). The table gives each
//! figure's median over the rounds and the ratio ours / baseline.
//!
//! Every cold start but the boot's first waits `KPRS_BENCH_PAIR_SETTLE_SECS` (default 200) after the
//! flush: IPVS keeps deleted real servers in a trash list until its timer frees them (some time after
//! `IP_VS_DEST_TRASH_PERIOD`, 120 s), and every real server added meanwhile is first looked up in that
//! whole list (`ip_vs_trash_get_dest`). Right after flushing 109k real servers, either daemon's cold start
//! took ~165 s instead of ~30 s (R9 in docs/performance.md).

use super::churn::ChurnResult;
use super::{
    EVENT_SIZES, Expected, Row, Run, churn_run, cold_start, costs, flush_kernel, mib, noop_syncs,
};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The results file of the paired mode in the run directory.
pub const RESULTS: &str = "pair-results.txt";

/// One figure of one daemon: its name (with the unit) and how to read it from a row (`None`: not
/// measured in that round).
struct Figure {
    name: &'static str,
    read: fn(&Row) -> Option<f64>,
}

/// The row's churn run with `min_sync`.
fn churn<'a>(r: &'a Row, min_sync: &str) -> Option<&'a ChurnResult> {
    r.churn.iter().find(|c| c.min_sync == min_sync)
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "cold start (s)",
        read: |r| r.cold_start,
    },
    Figure {
        name: "no-op full sync (ms)",
        read: |r| r.noop.as_ref().map(|n| n.metric_ms),
    },
    Figure {
        name: "RSS after the cold start (MiB)",
        read: |r| (r.peak_rss_cold > 0).then(|| mib(r.peak_rss_cold)),
    },
    Figure {
        name: "peak RSS over the run (MiB)",
        read: |r| Some(mib(r.peak_rss_end.max(r.peak_rss_cold))),
    },
    Figure {
        name: "heap after the cold start (MiB)",
        read: |r| r.heap.map(|b| b / (1024.0 * 1024.0)),
    },
    Figure {
        name: "churn CPU, minSyncPeriod 0 (s/min)",
        read: |r| churn(r, "0s").map(|c| c.cpu_per_min),
    },
    Figure {
        name: "churn CPU, minSyncPeriod 1s (s/min)",
        read: |r| churn(r, "1s").map(|c| c.cpu_per_min),
    },
    Figure {
        name: "churn p99, minSyncPeriod 0 (ms)",
        read: |r| churn(r, "0s").map(|c| c.p(99.0)),
    },
    Figure {
        name: "churn p99, minSyncPeriod 1s (ms)",
        read: |r| churn(r, "1s").map(|c| c.p(99.0)),
    },
    Figure {
        name: "cold: sync thread CPU (s)",
        read: |r| costs::total(&r.cold_counts, "cpu_us").map(|v| v / 1e6),
    },
    Figure {
        name: "cold: kernel calls",
        read: |r| costs::calls(&r.cold_counts),
    },
    Figure {
        name: "cold: minor faults (sync thread)",
        read: |r| costs::total(&r.cold_counts, "minflt"),
    },
    Figure {
        name: "no-op full: sync thread CPU (ms)",
        read: |r| {
            noop_counts(r)
                .and_then(|c| costs::total(c, "cpu_us"))
                .map(|v| v / 1e3)
        },
    },
    Figure {
        name: "no-op full: minor faults (sync thread)",
        read: |r| noop_counts(r).and_then(|c| costs::total(c, "minflt")),
    },
    Figure {
        name: "no-op full: kernel calls",
        read: |r| noop_counts(r).and_then(costs::calls),
    },
    Figure {
        name: "no-op full: MB from the kernel",
        read: |r| {
            noop_counts(r)
                .and_then(|c| costs::total(c, "bytes_in"))
                .map(|v| v / 1e6)
        },
    },
    Figure {
        name: "no-op full: processes started",
        read: |r| {
            noop_counts(r).map(|c| {
                let procs = c.iter().filter(|(k, _)| k.starts_with("proc."));
                procs.map(|(_, v)| v).sum()
            })
        },
    },
    Figure {
        name: "no-op full: module requests",
        read: |r| r.noop.as_ref().and_then(|n| n.module_requests),
    },
    Figure {
        name: "1 change: sync thread CPU (ms)",
        read: |r| event_total(r, 1, "cpu_us").map(|v| v / 1e3),
    },
    Figure {
        name: "10 changes: sync thread CPU (ms)",
        read: |r| event_total(r, 10, "cpu_us").map(|v| v / 1e3),
    },
    Figure {
        name: "100 changes: sync thread CPU (ms)",
        read: |r| event_total(r, 100, "cpu_us").map(|v| v / 1e3),
    },
    Figure {
        name: "100 changes: kernel calls",
        read: |r| costs::event(&r.event_counts, 100).and_then(costs::calls),
    },
];

/// The median counts of a row's no-op full syncs.
fn noop_counts(r: &Row) -> Option<&costs::Counts> {
    r.noop.as_ref().map(|n| &n.counts).filter(|c| !c.is_empty())
}

/// One count of the event-driven sync with `k` changes.
fn event_total(r: &Row, k: usize, key: &str) -> Option<f64> {
    costs::event(&r.event_counts, k).and_then(|c| costs::total(c, key))
}

/// The paired mode's settings (from `KPRS_BENCH_BASELINE`, `KPRS_BENCH_PAIR_*`).
pub struct Options {
    /// The baseline daemon (a private copy).
    pub baseline: PathBuf,
    pub rounds: usize,
    /// Only this churn run (`0s` or `1s`); both when `None`.
    pub churn: Option<String>,
    /// Only the churn runs after the first cold start (each churn run starts warm anyway).
    pub only_churn: bool,
    /// The wait after a flush before a cold start that is not the boot's first.
    pub settle: std::time::Duration,
}

/// Runs the paired rounds at N = `n` (the API server already holds the N services) and writes the
/// table; returns it.
pub fn compare(run: &mut Run, n: usize, exp: &Expected, o: &Options) -> Result<String> {
    let (baseline, rounds) = (&o.baseline, o.rounds);
    let ours = run.daemon.clone();
    let mut rows: [Vec<Row>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round.is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        };
        for which in order {
            run.daemon = if which == 0 {
                ours.clone()
            } else {
                baseline.clone()
            };
            let label = ["ours", "baseline"][which];
            run.log(&format!("pair N={n} round {round}: {label}"));
            let row = measure(run, n, exp, o);
            run.daemon = ours.clone();
            rows[which].push(row.with_context(|| format!("pair round {round}, {label}"))?);
        }
    }
    let table = table(n, &rows);
    std::fs::write(run.dir.join(RESULTS), &table)?;
    for line in table.lines() {
        run.log(line);
    }
    Ok(table)
}

/// Which churn runs a round has.
fn churn_modes(o: &Options) -> Vec<&'static str> {
    match o.churn.as_deref() {
        Some("0s") => vec!["0s"],
        Some("1s") => vec!["1s"],
        _ => vec!["0s", "1s"],
    }
}

/// One daemon's cold start, no-op full syncs and churn runs; with `only_churn`, after the first cold
/// start only the churn runs (the kernel keeps the last daemon's state; each churn run starts warm).
fn measure(run: &mut Run, n: usize, exp: &Expected, o: &Options) -> Result<Row> {
    let mut row = Row {
        n,
        floor_skipped: true,
        ..Default::default()
    };
    if !o.only_churn || run.loaded_kernel != n {
        flush_kernel()?;
        if run.loaded_kernel != 0 && !o.settle.is_zero() {
            run.log(&format!(
                "waiting {:?} for IPVS to free the deleted real servers",
                o.settle
            ));
            std::thread::sleep(o.settle);
        }
        let mut d = cold_start(run, &mut row, exp)?.context("no cold start within the cap")?;
        let st = d.stats()?;
        row.peak_rss_end = st.peak_rss;
        d.stop()?;
        noop_syncs(run, n, exp, &mut row)?;
        row.event_counts = costs::event_driven(run, n, &EVENT_SIZES)?;
        run.loaded_kernel = n;
    }
    if run.churn_secs > 0 {
        for min_sync in churn_modes(o) {
            let c = churn_run(run, n, exp, min_sync)?;
            row.peak_rss_end = row.peak_rss_end.max(c.rss_end);
            row.churn.push(c);
        }
    }
    Ok(row)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    })
}

fn fmt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "NA".into())
}

/// Medians per figure and daemon, each round's values, and the ratio.
fn table(n: usize, rows: &[Vec<Row>; 2]) -> String {
    let mut t = format!(
        "pair N={n}: medians over {} rounds, same boot (ours / baseline); each round's values in brackets\n",
        rows[0].len()
    );
    for f in FIGURES {
        let values: [Vec<f64>; 2] = [0, 1].map(|i| rows[i].iter().filter_map(f.read).collect());
        let [a, b] = [0, 1].map(|i| median(values[i].clone()));
        let ratio = a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
        let each = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            t,
            "  {:<38} ours {:>9} [{}]   baseline {:>9} [{}]   ratio {}",
            f.name,
            fmt(a),
            each(&values[0]),
            fmt(b),
            each(&values[1]),
            fmt(ratio)
        );
    }
    t
}
