//! Events cannot flood: the real daemon in a UML guest is given 5,000 Services at once whose scheduler
//! annotation is bad (`ipvs.kube-proxy-rs.io/scheduler: bogus`, 20 of them a 200 KiB value). What the
//! test API server receives is measured from its log of Event writes:
//! - in any stretch of T seconds at most the publisher's burst plus its rate × T writes arrive
//!   (25 + 1/s: not the watches' 5/s client limit);
//! - every write is accepted (the server checks the API's field limits: a note over 1 KiB is a 422);
//! - the waiting writes never exceed the queue's bound (the `kubeproxy_rs_events_queued` gauge, polled);
//!   the rest are dropped and counted (`kubeproxy_rs_events_total{result="queue_full"}`);
//! - no line of the daemon's log carries the 200 KiB value (values are cut to 128 bytes);
//! - every bad Service is still programmed with the node's scheduler and counted in
//!   `kubeproxy_rs_service_annotation_errors_total`, and an ordinary Service added while the Event
//!   backlog drains is programmed as fast as before the flood (both times printed).
//!
//! Prints the figures for the README (`cargo test --test e2e_event_flood -- --nocapture`).
mod common;

use common::apiserver::Kind;
use common::e2e::{self, ABC, E2e, Options, boot, ipvs, metric_sum, service, slice};
use common::scale::proc_stats;
use common::uml::sh;
use serde_json::json;
use std::time::{Duration, Instant};

const BAD: usize = 5000;
const HUGE: usize = 20;
const HUGE_BYTES: usize = 200 * 1024;
/// The publisher's bounds (`kube_proxy_rs::daemon::events`).
const EVENT_BURST: f64 = 25.0;
const EVENT_QPS: f64 = 1.0;
const QUEUE_BOUND: f64 = 1000.0;
/// How long the Event writes are watched after the flood.
const WINDOW: Duration = Duration::from_secs(40);

fn bad_service(i: usize) -> serde_json::Value {
    let value = if i < HUGE {
        format!("bogus-{}", "x".repeat(HUGE_BYTES))
    } else {
        "bogus".to_string()
    };
    let ip = format!("10.97.{}.{}", i / 250, i % 250 + 1);
    let mut s = service(&format!("bad-{i}"), &ip, "TCP", 80, json!({}));
    s["metadata"]["annotations"] = json!({ "ipvs.kube-proxy-rs.io/scheduler": value });
    s
}

/// Virtual servers in the kernel.
fn virtual_servers() -> usize {
    sh("ipvsadm -Sn | grep -c '^-A' || true")
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Seconds until `vip` shows up in IPVS after `apply` ran.
fn time_to_program(e: &mut E2e, name: &str, vip: &str) -> f64 {
    let start = Instant::now();
    e.apply(service(name, vip, "TCP", 80, json!({})));
    e.apply(slice(name, "TCP", 80, ABC));
    let wanted = format!("-A -t {vip}:80");
    e.wait_ipvs(&format!("{name} programmed"), |t| t.contains(&wanted));
    start.elapsed().as_secs_f64()
}

/// The largest number of writes in `writes` (seconds, sorted) minus what the token bucket allows
/// over the same stretch: positive means the bound was broken.
fn worst_excess(at: &[f64]) -> (f64, usize, usize) {
    let mut worst = (f64::MIN, 0, 0);
    for i in 0..at.len() {
        for j in i..at.len() {
            let n = (j - i + 1) as f64;
            let allowed = EVENT_BURST + EVENT_QPS * (at[j] - at[i]);
            if n - allowed > worst.0 {
                worst = (n - allowed, i, j);
            }
        }
    }
    worst
}

uml_test!(event_flood_is_bounded, boot(), {
    let mut e = E2e::start(Options::default());
    e.start_daemon();
    let pid = e.daemon_pid().expect("daemon pid");
    let before = time_to_program(&mut e, "before", "10.96.100.1");

    let flood_start = Instant::now();
    for i in 0..BAD {
        e.api
            .apply_value(Kind::Service, bad_service(i))
            .expect("apply a bad Service");
    }
    let applied_s = flood_start.elapsed().as_secs_f64();
    // Watch the queue while the flood is programmed and the Events drain.
    let mut peak_queue = 0.0f64;
    let mut programmed_s = None;
    while flood_start.elapsed() < WINDOW {
        let m = e.metrics();
        peak_queue = peak_queue.max(metric_sum(&m, "kubeproxy_rs_events_queued"));
        if programmed_s.is_none() && virtual_servers() > BAD {
            programmed_s = Some(flood_start.elapsed().as_secs_f64());
        }
        assert!(
            e.daemon_exit().is_none(),
            "daemon exited:\n{}",
            e2e::tail(&e.log(), 40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let programmed_s = programmed_s.unwrap_or_else(|| {
        e.wait_for(
            "every bad Service programmed",
            e2e::CONVERGE_TIMEOUT,
            |_| virtual_servers() > BAD,
        );
        flood_start.elapsed().as_secs_f64()
    });
    // An ordinary Service while the Event backlog drains.
    let during = time_to_program(&mut e, "during", "10.96.100.2");
    let stats = proc_stats(pid).expect("daemon /proc stats");
    let m = e.metrics();

    let writes: Vec<_> = e
        .api
        .event_writes()
        .into_iter()
        .filter(|w| w.at >= flood_start)
        .collect();
    let refused: Vec<_> = writes.iter().filter(|w| w.status >= 400).collect();
    assert!(refused.is_empty(), "Event writes refused: {refused:#?}");
    let at: Vec<f64> = writes
        .iter()
        .map(|w| (w.at - flood_start).as_secs_f64())
        .collect();
    let (excess, i, j) = worst_excess(&at);
    let span = at.last().copied().unwrap_or(0.0) - at.first().copied().unwrap_or(0.0);
    let rate = if span > 0.0 {
        (writes.len() as f64 - EVENT_BURST).max(0.0) / span
    } else {
        0.0
    };
    println!(
        "event-flood: {BAD} bad Services ({HUGE} with {} KiB values) applied in {applied_s:.1} s, \
         programmed after {programmed_s:.1} s\n\
         event-flood: Event writes in {:.0} s: {} ({} creates, {} patches), {rate:.2}/s after the \
         burst; worst stretch {:.1}-{:.1} s: {} writes\n\
         event-flood: peak queue {peak_queue} (bound {QUEUE_BOUND}); recorded {} queued, {} \
         queue_full, {} rate_limited, {} counted\n\
         event-flood: daemon peak RSS {:.1} MiB, RSS now {:.1} MiB; ordinary Service programmed in \
         {before:.2} s before the flood, {during:.2} s during the Event backlog",
        HUGE_BYTES / 1024,
        WINDOW.as_secs_f64(),
        writes.len(),
        writes.iter().filter(|w| w.method == "POST").count(),
        writes.iter().filter(|w| w.method == "PATCH").count(),
        at.get(i).copied().unwrap_or(0.0),
        at.get(j).copied().unwrap_or(0.0),
        j + 1 - i.min(j),
        metric_sum(&m, "kubeproxy_rs_events_total{result=\"queued\"}"),
        metric_sum(&m, "kubeproxy_rs_events_total{result=\"queue_full\"}"),
        metric_sum(&m, "kubeproxy_rs_events_total{result=\"rate_limited\"}"),
        metric_sum(&m, "kubeproxy_rs_events_total{result=\"counted\"}"),
        stats.peak_rss as f64 / 1048576.0,
        stats.rss as f64 / 1048576.0,
    );

    assert!(
        excess <= 1.0,
        "{} Event writes between {:.1} s and {:.1} s: more than {EVENT_BURST} + {EVENT_QPS}/s",
        j + 1 - i,
        at[i],
        at[j]
    );
    assert!(
        writes.len() >= 20,
        "hardly any Events published: {}",
        writes.len()
    );
    assert!(
        peak_queue <= QUEUE_BOUND,
        "queue above its bound: {peak_queue}"
    );
    assert!(
        metric_sum(&m, "kubeproxy_rs_events_total{result=\"queue_full\"}") > 0.0,
        "5,000 Events at once and none dropped?\n{m}"
    );
    assert!(
        metric_sum(&m, "kubeproxy_rs_service_annotation_errors_total") >= BAD as f64,
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
});
