//! The real `kube-proxy` binary in a UML guest against API servers that stall instead of failing
//! (issue 20 §1), with the daemon's own limits (30 s request deadline, 70 s watch idle limit, TCP
//! keepalive after 15 s idle, 30 s Node wait):
//!
//! - a black hole from the start (accepts, never answers): `/healthz` and `/livez` answer at once, the
//!   Node wait gives up after 30 s, `/healthz` turns 503 once the first sync is 2 × syncPeriod late, the
//!   failed requests show in `rest_client_requests_total`; once the API server answers, the daemon reads
//!   its Node and exits to be restarted with the Node's IPs, and the restarted daemon programs the cluster
//!   and turns healthy;
//! - a watch that stops sending without closing: noticed after the idle limit, re-watched, a change made
//!   during the stall programmed;
//! - a real half-open connection: the API server in its own network namespace, every flow open at that
//!   moment dropped there by iptables (as a NAT that forgets its flows): TCP keepalive notices, the
//!   watches are re-opened on new connections, a change made meanwhile is programmed.
//!
//! Each test prints its detection times (`api-faults ...` lines in the run directory's guest-output.log).
mod common;

use common::apiserver::{Kind, TestApiServer};
use common::e2e::{ABC, CONVERGE_TIMEOUT, E2e, Options, boot, has_vs, ipvs, service, slice};
use common::netns::Pod;
use serde_json::json;
use std::time::{Duration, Instant};

/// What the daemon logs when a list or watch fails (src/cluster/watch.rs).
const WATCH_FAILED: &str = "Watch failed, backing off and retrying";

/// Sum of the samples of `name` whose labels contain `label` (e.g. `code="<error>"`).
fn metric_with(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Occurrences of `needle` in the daemon's current log.
fn log_count(e: &E2e, needle: &str) -> usize {
    e.log().matches(needle).count()
}

fn status(e: &E2e, path: &str) -> Option<u16> {
    e.healthz(path).map(|r| r.status)
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Waits for `cond` and returns how long after `since` it held.
fn timed(
    e: &mut E2e,
    since: Instant,
    what: &str,
    timeout: Duration,
    cond: impl FnMut(&E2e) -> bool,
) -> Duration {
    e.wait_for(what, timeout, cond);
    since.elapsed()
}

/// Starts the daemon on `web` and waits until it is programmed and every watch is open.
fn running(e: &mut E2e) {
    e.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
    e.apply(slice("web", "TCP", 8080, ABC));
    e.start_daemon();
    e.wait_ipvs("web programmed", |t| has_vs(t, "-t", "10.96.0.10:80"));
    e.wait_for("every watch open", CONVERGE_TIMEOUT, |e| {
        Kind::ALL.iter().all(|&k| e.api.open_watches(k) >= 1)
    });
}

/// Applies the Service `late` (10.96.0.67) and its EndpointSlice.
fn apply_late(e: &E2e) {
    e.apply(service("late", "10.96.0.67", "TCP", 80, json!({})));
    e.apply(slice("late", "TCP", 8080, ABC));
}

fn late_programmed(_: &E2e) -> bool {
    has_vs(&ipvs(), "-t", "10.96.0.67:80")
}

uml_test!(black_hole_from_the_start, boot(), {
    let mut e = E2e::start(Options {
        sync_period: "10s".into(),
        ..Options::default()
    });
    e.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
    e.apply(slice("web", "TCP", 8080, ABC));
    e.api.set_black_hole(true);
    let spawned = Instant::now();
    e.spawn_daemon();

    let served = timed(
        &mut e,
        spawned,
        "/healthz answered",
        Duration::from_secs(10),
        |e| status(e, "/healthz").is_some(),
    );
    let first = e.healthz("/healthz").expect("/healthz");
    assert_eq!(first.status, 200, "starting up: {}", first.body);
    // Health timeout = 2 × syncPeriod = 20 s from the start, then 503 until a sync succeeds.
    let unhealthy = timed(
        &mut e,
        spawned,
        "/healthz 503",
        Duration::from_secs(90),
        |e| status(e, "/healthz") == Some(503),
    );
    assert_eq!(status(&e, "/livez"), Some(200), "alive and waiting");
    let gave_up = timed(
        &mut e,
        spawned,
        "the Node wait to give up",
        Duration::from_secs(90),
        |e| e.log().contains("continuing without it"),
    );
    // The watchers start after the Node wait; their lists end at the request deadline.
    let failed = timed(
        &mut e,
        spawned,
        "a watcher's list to fail at its deadline",
        Duration::from_secs(150),
        |e| {
            e.log().lines().any(|l| {
                l.contains(WATCH_FAILED) && l.contains("no response from the API server within 30s")
            })
        },
    );
    let errors = metric_with(
        &e.metrics(),
        "rest_client_requests_total",
        "code=\"<error>\"",
    );
    assert!(
        errors >= 2.0,
        "the Node GET, the Event, a list:\n{}",
        e.metrics()
    );
    // The Node GET, the Starting Event, three lists at least.
    let swallowed = e.api.swallowed_requests();
    assert!(swallowed >= 5, "{swallowed} requests swallowed");
    assert!(!has_vs(&ipvs(), "-t", "10.96.0.10:80"));
    assert_eq!(status(&e, "/healthz"), Some(503));

    e.api.set_black_hole(false);
    let lifted = Instant::now();
    // It started without its Node's IPs (127.0.0.1); once the Node is read it exits so that the kubelet
    // restarts it with the right ones (`daemon::watch_node`), before programming anything with the wrong.
    let exited = exit_within(&mut e, Duration::from_secs(150));
    let restarted_after = lifted.elapsed();
    assert!(
        e.log().contains("node IPs changed from [] to [10.0.0.10]"),
        "{}",
        e.log()
    );
    assert_eq!(exited.code(), Some(1), "{}", e.log());
    e.kill_daemon();
    let respawned = Instant::now();
    e.start_daemon();
    let programmed = respawned.elapsed();
    assert!(has_vs(&ipvs(), "-t", "10.96.0.10:80"), "{}", ipvs());
    let healthy = timed(&mut e, respawned, "/healthz 200", CONVERGE_TIMEOUT, |e| {
        status(e, "/healthz") == Some(200)
    });
    let ok = metric_with(&e.metrics(), "rest_client_requests_total", "code=\"200\"");
    assert!(ok >= 3.0, "lists and watches counted: {}", e.metrics());
    println!(
        "api-faults black hole from the start: /healthz served {} after spawn, 503 after {}, Node wait gave up \
         after {}, watchers' first lists failed at their deadline after {}, {errors} requests counted <error>; \
         API server answering again: the daemon read its Node and exited to restart with its IPs {} later; \
         restarted: first sync done in {}, /healthz 200 in {}",
        secs(served),
        secs(unhealthy),
        secs(gave_up),
        secs(failed),
        secs(restarted_after),
        secs(programmed),
        secs(healthy)
    );
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
});

/// Waits for the daemon to exit and returns its status; panics with its log after `timeout`.
fn exit_within(e: &mut E2e, timeout: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + timeout;
    loop {
        if let Some(st) = e.daemon_exit() {
            return st;
        }
        assert!(
            Instant::now() < end,
            "the daemon did not exit within {timeout:?}:\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

uml_test!(stalled_watch_is_noticed_and_rewatched, boot(), {
    let mut e = E2e::start(Options::default());
    running(&mut e);
    let watches = e.api.watch_requests(Kind::Service);
    let lists = e.api.list_requests(Kind::Service) + e.api.list_requests(Kind::EndpointSlice);
    let idle_before = log_count(&e, "no data on the watch");

    e.api.stall_watches();
    let stalled = Instant::now();
    apply_late(&e);
    let noticed = timed(
        &mut e,
        stalled,
        "the stalled watch noticed",
        Duration::from_secs(150),
        |e| log_count(e, "no data on the watch") > idle_before,
    );
    let rewatched = timed(
        &mut e,
        stalled,
        "a new Service watch",
        Duration::from_secs(150),
        |e| e.api.watch_requests(Kind::Service) > watches,
    );
    let programmed = timed(
        &mut e,
        stalled,
        "the change made during the stall programmed",
        Duration::from_secs(150),
        late_programmed,
    );
    println!(
        "api-faults stalled watch: noticed after {}, re-watched after {}, change programmed after {}",
        secs(noticed),
        secs(rewatched),
        secs(programmed)
    );
    let lists_after = e.api.list_requests(Kind::Service) + e.api.list_requests(Kind::EndpointSlice);
    assert_eq!(
        lists_after, lists,
        "re-watched from the resourceVersion, not relisted"
    );
    assert_eq!(status(&e, "/healthz"), Some(200));
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
});

/// The client ports of the TCP connections established to `port` in the pod's namespace.
fn client_ports(pod: &Pod, port: u16) -> Vec<u16> {
    let out = pod
        .exec(&format!("ss -Htn state established '( sport = :{port} )'"))
        .expect("ss");
    out.lines()
        .filter_map(|l| {
            l.split_whitespace()
                .last()?
                .rsplit_once(':')?
                .1
                .parse()
                .ok()
        })
        .collect()
}

uml_test!(half_open_connection_is_noticed, boot(), {
    let pod = Pod::create("apisrv", "10.250.0.2", "10.250.0.1").expect("API server netns");
    let api = pod
        .run_in(|| TestApiServer::start("10.250.0.2:0"))
        .expect("enter netns")
        .expect("start the API server in its netns");
    let port = api.addr().port();
    let mut e = E2e::start_with_api(Options::default(), api);
    running(&mut e);
    let watches = e.api.watch_requests(Kind::Service);
    let failures_before = log_count(&e, WATCH_FAILED);

    // Every flow open now is dropped both ways in the API server's namespace; new connections pass.
    let ports = client_ports(&pod, port);
    assert!(ports.len() >= 3, "three watches at least: {ports:?}");
    let rules: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "iptables -I INPUT -p tcp -s 10.250.0.1 --sport {p} -j DROP && \
                 iptables -I OUTPUT -p tcp -d 10.250.0.1 --dport {p} -j DROP"
            )
        })
        .collect();
    pod.exec(&rules.join(" && ")).expect("drop the flows");
    let cut = Instant::now();
    apply_late(&e);
    let noticed = timed(
        &mut e,
        cut,
        "the dead connection noticed",
        Duration::from_secs(150),
        |e| log_count(e, WATCH_FAILED) > failures_before,
    );
    let rewatched = timed(
        &mut e,
        cut,
        "a new Service watch",
        Duration::from_secs(150),
        |e| e.api.watch_requests(Kind::Service) > watches,
    );
    let programmed = timed(
        &mut e,
        cut,
        "the change made after the cut programmed",
        Duration::from_secs(150),
        late_programmed,
    );
    let dropped = pod.exec("iptables -nvL INPUT").expect("iptables");
    println!(
        "api-faults half-open connection ({} flows dropped): noticed after {}, re-watched after {}, change \
         programmed after {}\n{dropped}",
        ports.len(),
        secs(noticed),
        secs(rewatched),
        secs(programmed)
    );
    let log = e.log();
    let why: Vec<&str> = log.lines().filter(|l| l.contains(WATCH_FAILED)).collect();
    println!("{}", why.join("\n"));
    assert!(e.daemon_exit().is_none(), "daemon died:\n{log}");
});
