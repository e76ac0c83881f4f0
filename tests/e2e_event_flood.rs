//! Events cannot flood: the real daemon in a UML guest is given 5,000 Services at once whose scheduler
//! annotation is bad (`ipvs.kube-proxy-rs.io/scheduler: bogus`, 20 of them a 200 KiB value), then the
//! first 1,000 again with another bad value (the same Events again). What the test API server receives is
//! measured from its log of Event writes:
//! - in any stretch of T seconds at most the publisher's burst plus its rate × T writes arrive
//!   (25 + 1/s; the watches' client allowed 10 + 5/s);
//! - every write is accepted (the server checks the API's field limits: a note over 1 KiB is a 422);
//! - the waiting writes never exceed the queue's bound (the `kubeproxy_rs_events_queued` gauge,
//!   polled); the rest are dropped and counted (`kubeproxy_rs_events_total{result="queue_full"}`), and
//!   repeats are counted into their series (`result="counted"`), not created again;
//! - no line of the daemon's log carries the 200 KiB value (values are cut to 128 bytes);
//! - every bad Service is still programmed with the node's scheduler and counted in
//!   `kubeproxy_rs_service_annotation_errors_total`, and ordinary Services added while the Event
//!   backlog drains are programmed (median time printed beside the one before the flood).
//!
//! Prints the figures for the README (`cargo test --test e2e_event_flood -- --nocapture`, then the
//! `event-flood:` lines of the run directory's `guest-output.log`).
mod common;

use common::apiserver::Kind;
use common::apiserver::event_log::EventWrite;
use common::e2e::{self, ABC, E2e, Options, boot, ipvs, metric_sum, service, slice};
use common::scale::proc_stats;
use common::uml::sh;
use serde_json::json;
use std::time::{Duration, Instant};

const BAD: usize = 5000;
const HUGE: usize = 20;
const HUGE_BYTES: usize = 200 * 1024;
/// The first this many bad Services are applied again with another bad value.
const AGAIN: usize = 1000;
/// The publisher's bounds (`kube_proxy_rs::daemon::events`).
const EVENT_BURST: f64 = 25.0;
const EVENT_QPS: f64 = 1.0;
const QUEUE_BOUND: f64 = 1000.0;
/// How long the Event writes are watched after the flood starts.
const WINDOW: Duration = Duration::from_secs(40);

fn bad_service(i: usize, round: u32) -> serde_json::Value {
    let value = if i < HUGE {
        format!("bogus{round}-{}", "x".repeat(HUGE_BYTES))
    } else {
        format!("bogus{round}")
    };
    let ip = format!("10.97.{}.{}", i / 250, i % 250 + 1);
    let mut s = service(&format!("bad-{i}"), &ip, "TCP", 80, json!({}));
    s["metadata"]["annotations"] = json!({ "ipvs.kube-proxy-rs.io/scheduler": value });
    s
}

fn apply_bad(e: &E2e, range: std::ops::Range<usize>, round: u32) {
    for i in range {
        e.api
            .apply_value(Kind::Service, bad_service(i, round))
            .expect("apply a bad Service");
    }
}

/// Virtual servers in the kernel.
fn virtual_servers() -> usize {
    sh("ipvsadm -Sn | grep -c '^-A' || true")
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Seconds until `vip` shows up in IPVS after the Service is applied.
fn time_to_program(e: &mut E2e, name: &str, vip: &str) -> f64 {
    let start = Instant::now();
    e.apply(service(name, vip, "TCP", 80, json!({})));
    e.apply(slice(name, "TCP", 80, ABC));
    // One virtual server asked for: a dump of 5,000 would take longer than the programming.
    let probe = format!("ipvsadm -Ln -t {vip}:80 >/dev/null 2>&1 && echo yes || true");
    e.wait_for(&format!("{name} programmed"), e2e::CONVERGE_TIMEOUT, |_| {
        sh(&probe).trim() == "yes"
    });
    start.elapsed().as_secs_f64()
}

/// Median seconds to program three ordinary Services, one after the other.
fn median_time_to_program(e: &mut E2e, tag: &str, net: u8) -> f64 {
    let mut t: Vec<f64> = (1..=3)
        .map(|i| time_to_program(e, &format!("{tag}-{i}"), &format!("10.96.{net}.{i}")))
        .collect();
    t.sort_by(f64::total_cmp);
    t[1]
}

/// The stretch of writes (seconds since the flood, sorted) that most exceeds what a token bucket of
/// [`EVENT_BURST`] + [`EVENT_QPS`]/s allows: (excess, first index, last index).
fn worst_excess(at: &[f64]) -> (f64, usize, usize) {
    let mut worst = (f64::MIN, 0, 0);
    for i in 0..at.len() {
        for j in i..at.len() {
            let n = (j - i + 1) as f64;
            let excess = n - (EVENT_BURST + EVENT_QPS * (at[j] - at[i]));
            if excess > worst.0 {
                worst = (excess, i, j);
            }
        }
    }
    worst
}

/// What the flood produced.
struct Flood {
    applied_s: f64,
    programmed_s: f64,
    peak_queue: f64,
}

/// Applies the flood, then polls the queue gauge until [`WINDOW`] has passed and every bad Service
/// is programmed; then applies the first [`AGAIN`] bad Services again.
fn flood(e: &mut E2e, start: Instant) -> Flood {
    apply_bad(e, 0..BAD, 1);
    let applied_s = start.elapsed().as_secs_f64();
    let mut peak_queue = 0.0f64;
    let mut programmed_s = None;
    while start.elapsed() < WINDOW || programmed_s.is_none() {
        let m = e.metrics();
        peak_queue = peak_queue.max(metric_sum(&m, "kubeproxy_rs_events_queued"));
        if programmed_s.is_none() && virtual_servers() > BAD {
            programmed_s = Some(start.elapsed().as_secs_f64());
            apply_bad(e, 0..AGAIN, 2);
        }
        assert!(
            e.daemon_exit().is_none(),
            "daemon exited:\n{}",
            e2e::tail(&e.log(), 40)
        );
        assert!(
            start.elapsed() < WINDOW + e2e::CONVERGE_TIMEOUT,
            "flood not programmed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Flood {
        applied_s,
        programmed_s: programmed_s.unwrap_or(f64::NAN),
        peak_queue,
    }
}

/// A metric's value (0 when absent).
fn metric(m: &str, name: &str) -> f64 {
    metric_sum(m, name) + 0.0
}

fn result(m: &str, r: &str) -> f64 {
    metric(m, &format!("kubeproxy_rs_events_total{{result=\"{r}\"}}"))
}

uml_test!(event_flood_is_bounded, boot(), {
    // No periodic full sync inside the measurement: the programming times compare event-driven syncs.
    let mut e = E2e::start(Options {
        sync_period: "600s".to_string(),
        ..Options::default()
    });
    e.start_daemon();
    let pid = e.daemon_pid().expect("daemon pid");
    let before = median_time_to_program(&mut e, "before", 100);
    let start = Instant::now();
    let f = flood(&mut e, start);
    let syncs = |e: &E2e| {
        let m = e.metrics();
        let name = "kubeproxy_sync_proxy_rules_duration_seconds";
        (
            metric(&m, &format!("{name}_sum")),
            metric(&m, &format!("{name}_count")),
        )
    };
    let (sum0, n0) = syncs(&e);
    let during = median_time_to_program(&mut e, "during", 101);
    let (sum1, n1) = syncs(&e);
    let sync_s = (sum1 - sum0) / (n1 - n0).max(1.0);
    let stats = proc_stats(pid).expect("daemon /proc stats");
    let m = e.metrics();
    let writes: Vec<EventWrite> = e
        .api
        .event_writes()
        .into_iter()
        .filter(|w| w.at >= start)
        .collect();
    let refused = writes.iter().filter(|w| w.status >= 400).count();
    let at: Vec<f64> = writes
        .iter()
        .map(|w| (w.at - start).as_secs_f64())
        .collect();
    let (excess, i, j) = worst_excess(&at);
    let span = at.last().copied().unwrap_or(0.0);
    let method = |x: &str| writes.iter().filter(|w| w.method == x).count();
    println!(
        "event-flood: {BAD} bad Services ({HUGE} with {} KiB values) applied in {:.1} s, programmed \
         after {:.1} s, the first {AGAIN} applied again\n\
         event-flood: {} Event writes in {span:.0} s ({} creates, {} patches, {refused} refused): \
         {:.2}/s after the burst; worst stretch {:.1}-{:.1} s: {} writes\n\
         event-flood: peak queue {} (bound {QUEUE_BOUND}); recorded {} queued, {} queue_full, {} \
         rate_limited, {} counted\n\
         event-flood: daemon peak RSS {:.1} MiB, now {:.1} MiB; ordinary Service programmed in \
         {before:.2} s before the flood, {during:.2} s during the Event backlog (medians of 3; \
         its syncs took {:.1} ms on average)",
        HUGE_BYTES / 1024,
        f.applied_s,
        f.programmed_s,
        writes.len(),
        method("POST"),
        method("PATCH"),
        (writes.len() as f64 - EVENT_BURST).max(0.0) / span.max(1.0),
        at.get(i).copied().unwrap_or(0.0),
        at.get(j).copied().unwrap_or(0.0),
        j + 1 - i,
        f.peak_queue,
        result(&m, "queued"),
        result(&m, "queue_full"),
        result(&m, "rate_limited"),
        result(&m, "counted"),
        stats.peak_rss as f64 / 1048576.0,
        stats.rss as f64 / 1048576.0,
        sync_s * 1000.0,
    );
    check(&e, &m, &writes, excess, f.peak_queue);
});

/// The assertions, after the figures are printed.
fn check(e: &E2e, m: &str, writes: &[EventWrite], excess: f64, peak_queue: f64) {
    let refused: Vec<&EventWrite> = writes.iter().filter(|w| w.status >= 400).collect();
    assert!(refused.is_empty(), "Event writes refused: {refused:#?}");
    assert!(writes.len() >= 20, "hardly any Events: {}", writes.len());
    assert!(
        excess <= 1.0,
        "more Event writes than {EVENT_BURST} + {EVENT_QPS}/s allow"
    );
    assert!(
        peak_queue <= QUEUE_BOUND,
        "queue above its bound: {peak_queue}"
    );
    assert!(
        result(m, "queue_full") > 0.0,
        "5,000 Events at once and none dropped?\n{m}"
    );
    assert!(
        result(m, "counted") >= 1.0,
        "no repeated Event counted into its series"
    );
    assert!(
        metric(m, "kubeproxy_rs_service_annotation_errors_total") >= BAD as f64,
        "not every bad Service reported"
    );
    let log = e.log();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a log line of {longest} bytes");
    assert!(
        !log.contains(&"x".repeat(1000)),
        "the huge value reached the log"
    );
    assert!(
        ipvs().contains("-A -t 10.97.0.1:80"),
        "a bad Service is not programmed"
    );
}
