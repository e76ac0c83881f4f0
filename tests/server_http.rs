//! The healthz, metrics and service health-check servers over real HTTP on loopback.

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_proxy_rs::cluster::model::{IpFamily, ServiceName};
use kube_proxy_rs::component::zpages::ZPages;
use kube_proxy_rs::config::features::{COMPONENT_FLAGZ, COMPONENT_STATUSZ, enabled};
use kube_proxy_rs::gotime::instant::format_rfc3339_nano;
use kube_proxy_rs::metrics::{Metrics, TrafficPolicy};
use kube_proxy_rs::server::{
    Clock, FakeClock, MetricsServerState, ProxyHealth, ServeError, ServiceHealthServer,
    start_healthz_server, start_metrics_server,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A parsed HTTP/1.1 response.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("bad JSON {:?}: {e}", self.body))
    }
}

/// Sends `GET path` with `Connection: close` and reads the whole answer.
async fn get(addr: SocketAddr, path: &str) -> Resp {
    get_with(addr, path, "").await
}

/// GET with extra header lines (each ending in `\r\n`).
async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect::<Vec<_>>();
    let resp = Resp {
        status,
        headers,
        body: body.to_string(),
    };
    assert!(
        resp.header("transfer-encoding").is_none(),
        "test client does not decode chunked bodies"
    );
    resp
}

async fn refused(addr: SocketAddr) -> bool {
    TcpStream::connect(addr).await.is_err()
}

fn loopback0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn start_time() -> std::time::SystemTime {
    UNIX_EPOCH + Duration::new(1_795_369_979, 250_000_000)
}

fn node(taint: Option<&str>, deleting: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("node-1".into()),
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        },
        spec: taint.map(|key| NodeSpec {
            taints: Some(vec![Taint {
                key: key.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Value of the sample line `series` (name with labels) in a text exposition.
fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map(|v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn healthz_and_livez_follow_sync_state_and_node() {
    let clock = Arc::new(FakeClock::new(start_time()));
    let metrics = Arc::new(Metrics::new().unwrap());
    // syncPeriod 30s → healthTimeout 60s.
    let health = Arc::new(ProxyHealth::new(
        Duration::from_secs(60),
        clock.clone(),
        metrics.clone(),
    ));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = start_healthz_server(loopback0(), health.clone(), true, async move {
        let _ = stopped.await;
    })
    .await
    .unwrap();
    let addr = server.local_addr.unwrap();
    let (mut ok_healthz, mut bad_healthz, mut ok_livez, mut bad_livez) = (0, 0, 0, 0);

    // Before any sync: healthy, no per-family status, lastUpdated = now.
    let r = get(addr, "/healthz").await;
    ok_healthz += 1;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let now = format_rfc3339_nano(Some(clock.now()));
    assert_eq!(now, "2026-11-22T17:52:59.25Z");
    let j = r.json();
    assert_eq!(j["lastUpdated"], now.as_str());
    assert_eq!(j["currentTime"], now.as_str());
    assert_eq!(j["nodeEligible"], true);
    assert_eq!(j["healthy"], true);
    assert!(j.get("status").is_none(), "{j}");
    assert_eq!(j.as_object().unwrap().len(), 4);
    // Field order as upstream's struct.
    let pos = |k: &str| r.body.find(&format!("\"{k}\":")).unwrap();
    assert!(pos("lastUpdated") < pos("currentTime"));
    assert!(pos("currentTime") < pos("nodeEligible"));
    assert!(pos("nodeEligible") < pos("healthy"));

    // A synced family appears in status.
    health.updated(IpFamily::V4);
    let synced_at = format_rfc3339_nano(Some(clock.now()));
    clock.advance(Duration::from_secs(100));
    let r = get(addr, "/healthz").await;
    ok_healthz += 1;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["status"]["IPv4"]["lastUpdated"], synced_at.as_str());
    assert_eq!(j["status"]["IPv4"]["healthy"], true);
    assert_eq!(j["lastUpdated"], j["currentTime"]);

    // Queued but not applied: still fine just under 2×syncPeriod, 503 at it.
    health.queued_update(IpFamily::V4);
    clock.advance(Duration::from_secs(59));
    assert_eq!(get(addr, "/healthz").await.status, 200);
    ok_healthz += 1;
    clock.advance(Duration::from_secs(1));
    let r = get(addr, "/healthz").await;
    bad_healthz += 1;
    assert_eq!(r.status, 503);
    let j = r.json();
    assert_eq!(j["healthy"], false);
    assert_eq!(j["lastUpdated"], synced_at.as_str());
    assert_eq!(
        j["currentTime"],
        format_rfc3339_nano(Some(clock.now())).as_str()
    );
    assert_eq!(j["status"]["IPv4"]["healthy"], false);
    let r = get(addr, "/livez").await;
    bad_livez += 1;
    assert_eq!(r.status, 503);
    assert!(r.json().get("nodeEligible").is_none());

    // Applied: healthy again.
    health.updated(IpFamily::V4);
    assert_eq!(get(addr, "/healthz").await.status, 200);
    ok_healthz += 1;

    // Node tainted for deletion: /healthz 503 (proxier itself healthy), /livez 200.
    health.sync_node(Some(&node(Some("ToBeDeletedByClusterAutoscaler"), false)));
    let r = get(addr, "/healthz").await;
    bad_healthz += 1;
    assert_eq!(r.status, 503);
    let j = r.json();
    assert_eq!(j["nodeEligible"], false);
    assert_eq!(j["healthy"], true);
    let r = get(addr, "/livez").await;
    ok_livez += 1;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert!(j.get("nodeEligible").is_none());
    assert_eq!(j["healthy"], true);

    // Another taint is fine; a deleting or missing Node is not.
    health.sync_node(Some(&node(Some("other"), false)));
    assert_eq!(get(addr, "/healthz").await.status, 200);
    ok_healthz += 1;
    health.sync_node(Some(&node(None, true)));
    assert_eq!(get(addr, "/healthz").await.status, 503);
    bad_healthz += 1;
    health.sync_node(None);
    assert_eq!(get(addr, "/healthz").await.status, 503);
    bad_healthz += 1;
    assert_eq!(get(addr, "/livez").await.status, 200);
    ok_livez += 1;
    assert_eq!(get(addr, "/other").await.status, 404);

    let text = metrics.encode().unwrap();
    let count = |name: &str, code: &str| {
        sample(&text, &format!("kubeproxy_{name}{{code=\"{code}\"}}")).unwrap_or(0.0)
    };
    assert_eq!(count("proxy_healthz_total", "200"), f64::from(ok_healthz));
    assert_eq!(count("proxy_healthz_total", "503"), f64::from(bad_healthz));
    assert_eq!(count("proxy_livez_total", "200"), f64::from(ok_livez));
    assert_eq!(count("proxy_livez_total", "503"), f64::from(bad_livez));

    stop.send(()).unwrap();
    server.task.await.unwrap();
    assert!(refused(addr).await);
}

/// Every upstream metric name (prefix `kubeproxy_`) and its labels, after one of each observation.
const UPSTREAM_SERIES: &[&str] = &[
    "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}",
    "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}",
    "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv6\"}",
    "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"}",
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}",
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"}",
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
    "kubeproxy_sync_proxy_rules_endpoint_changes_total",
    "kubeproxy_sync_proxy_rules_service_changes_pending",
    "kubeproxy_sync_proxy_rules_service_changes_total",
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"}",
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"}",
    "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family=\"IPv4\"}",
    "kubeproxy_proxy_healthz_total{code=\"200\"}",
    "kubeproxy_proxy_livez_total{code=\"503\"}",
    "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv6\"}",
    "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv6\"}",
    "kubeproxy_rs_kernel_write_failures_total{backend=\"ipvs\"}",
    "kubeproxy_rs_invalid_objects_total{kind=\"EndpointSlice\"}",
];

#[tokio::test]
async fn metrics_server_exposes_upstream_names_proxy_mode_and_configz() {
    let metrics = Arc::new(Metrics::new().unwrap());
    record_one_of_each(&metrics);
    let config = serde_json::json!({"mode": "ipvs", "ipvs": {"syncPeriod": "30s"}});
    let state = MetricsServerState {
        metrics: metrics.clone(),
        proxy_mode: "ipvs".into(),
        configz: config.clone(),
        explain: None,
        zpages: Arc::new(ZPages::for_process(Default::default())),
    };
    let server = start_metrics_server(loopback0(), state, true, std::future::pending())
        .await
        .unwrap();
    let addr = server.local_addr.unwrap();

    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = &r.body;
    upstream_series_follow_the_calls(text);
    types_and_help_lines(text);
    sync_buckets(text);
    network_programming_buckets(text);
    process_metrics(text);
    proxy_mode_healthz_and_configz(addr, config).await;
    server.task.abort();
}

/// Records one of each kind of observation the upstream series count.
fn record_one_of_each(metrics: &Metrics) {
    let t = start_time();
    metrics.init_family(IpFamily::V4);
    metrics.observe_sync(IpFamily::V4, Duration::from_millis(3), true);
    metrics.observe_sync(IpFamily::V4, Duration::from_millis(20), true);
    metrics.observe_sync(IpFamily::V6, Duration::from_millis(1), false);
    metrics.observe_network_programming(IpFamily::V4, Duration::from_millis(1_500));
    metrics.set_last_sync(IpFamily::V4, t);
    metrics.set_last_queued(IpFamily::V4, t - Duration::from_secs(2));
    metrics.endpoint_changes(5, 2);
    metrics.endpoint_changes(1, 0);
    metrics.service_changes(3, 1);
    metrics.set_no_local_endpoints(IpFamily::V4, TrafficPolicy::External, 4);
    metrics.inc_iptables_restore_failure(IpFamily::V4, true);
    metrics.inc_iptables_restore_failure(IpFamily::V4, false);
    metrics.inc_healthz(200);
    metrics.inc_livez(503);
    metrics.observe_conntrack_reconcile(IpFamily::V6, Duration::from_millis(7), 12);
    metrics.inc_kernel_write_failures("ipvs", 2);
    metrics.inc_invalid_object("EndpointSlice");
}

/// Every upstream series is there, with the values the calls give.
fn upstream_series_follow_the_calls(text: &str) {
    for series in UPSTREAM_SERIES {
        assert!(sample(text, series).is_some(), "missing {series}\n{text}");
    }
    // Values follow the calls.
    assert_eq!(sample(text, UPSTREAM_SERIES[0]), Some(2.0));
    assert_eq!(sample(text, UPSTREAM_SERIES[1]), Some(2.0));
    assert_eq!(
        sample(
            text,
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv6\"}"
        ),
        None
    );
    assert_eq!(
        sample(
            text,
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}"
        ),
        Some(1_795_369_979.25)
    );
    assert_eq!(
        sample(text, "kubeproxy_sync_proxy_rules_endpoint_changes_total"),
        Some(6.0)
    );
    assert_eq!(
        sample(text, "kubeproxy_sync_proxy_rules_endpoint_changes_pending"),
        Some(0.0)
    );
    assert_eq!(sample(text, UPSTREAM_SERIES[10]), Some(4.0));
    assert_eq!(sample(text, UPSTREAM_SERIES[11]), Some(2.0));
    assert_eq!(sample(text, UPSTREAM_SERIES[12]), Some(1.0));
    assert_eq!(sample(text, UPSTREAM_SERIES[16]), Some(12.0));
    assert_eq!(sample(text, UPSTREAM_SERIES[17]), Some(2.0));
    // init_family created the zero series.
    assert_eq!(
        sample(
            text,
            "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}"
        ),
        Some(0.0)
    );
}

/// Types and help lines.
fn types_and_help_lines(text: &str) {
    for (name, kind) in [
        ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
        (
            "kubeproxy_network_programming_duration_seconds",
            "histogram",
        ),
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
        (
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "gauge",
        ),
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_total",
            "counter",
        ),
        ("kubeproxy_proxy_healthz_total", "counter"),
    ] {
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
}

/// The `le` bounds of IPv4 histogram `name`'s buckets, in order.
fn bucket_bounds(text: &str, name: &str) -> Vec<String> {
    let prefix = format!("{name}_bucket{{ip_family=\"IPv4\",le=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|l| l.split('"').next().unwrap().to_string())
        .collect()
}

/// Sync buckets: 1 ms doubling to 16.384 s.
fn sync_buckets(text: &str) {
    let sync_le = bucket_bounds(text, "kubeproxy_sync_proxy_rules_duration_seconds");
    assert_eq!(
        sync_le,
        [
            "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256",
            "0.512", "1.024", "2.048", "4.096", "8.192", "16.384", "+Inf"
        ]
    );
    let bucket = |le: &str| {
        sample(
            text,
            &format!(
                "kubeproxy_sync_proxy_rules_duration_seconds_bucket{{ip_family=\"IPv4\",le=\"{le}\"}}"
            ),
        )
    };
    assert_eq!(bucket("0.002"), Some(0.0));
    assert_eq!(bucket("0.004"), Some(1.0));
    assert_eq!(bucket("0.032"), Some(2.0));
}

/// Network programming buckets: 0, 0.25, 0.5, 1..59, 60..115 by 5, 120..300 by 30, +Inf.
fn network_programming_buckets(text: &str) {
    let np_le = bucket_bounds(text, "kubeproxy_network_programming_duration_seconds");
    assert_eq!(np_le.len(), 82);
    assert_eq!(&np_le[..5], ["0", "0.25", "0.5", "1", "2"]);
    assert_eq!(&np_le[60..65], ["58", "59", "60", "65", "70"]);
    assert_eq!(&np_le[np_le.len() - 3..], ["270", "300", "+Inf"]);
}

/// Process metrics.
fn process_metrics(text: &str) {
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(sample(text, name).is_some(), "missing {name}");
    }
    assert!(sample(text, "process_resident_memory_bytes").unwrap() > 0.0);
}

/// /proxyMode, /healthz, /configz, and 404 elsewhere.
async fn proxy_mode_healthz_and_configz(addr: SocketAddr, config: serde_json::Value) {
    let r = get(addr, "/proxyMode").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "ipvs");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));

    let r = get(addr, "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));

    let r = get(addr, "/configz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        serde_json::json!({"kubeproxy.config.k8s.io": config})
    );

    assert_eq!(get(addr, "/nothing").await.status, 404);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn bind_failure_errors_with_hard_fail_and_retries_without() {
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = blocker.local_addr().unwrap();
    let state = || MetricsServerState {
        metrics: Arc::new(Metrics::new().unwrap()),
        proxy_mode: "ipvs".into(),
        configz: Value::Null,
        explain: None,
        zpages: Arc::new(ZPages::for_process(Default::default())),
    };

    let err = start_metrics_server(addr, state(), true, std::future::pending())
        .await
        .unwrap_err();
    let ServeError::Bind { source, .. } = &err;
    assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains(&addr.to_string()), "{err}");

    let server = start_metrics_server(addr, state(), false, std::future::pending())
        .await
        .unwrap();
    assert_eq!(server.local_addr, None);
    drop(blocker);
    // The retry happens 5 s later (virtual time).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let r = get(addr, "/proxyMode").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ipvs"));
    server.task.abort();
}

fn svc(ns: &str, name: &str) -> ServiceName {
    ServiceName {
        namespace: ns.into(),
        name: name.into(),
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn at(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn check_service(
    port: u16,
    service: &ServiceName,
    status: u16,
    endpoints: usize,
    proxy_healthy: bool,
) {
    let r = get(at(port), "/any/path?x=1").await;
    assert_eq!(r.status, status, "{service} on {port}: {}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.header("x-load-balancing-endpoint-weight"),
        Some(endpoints.to_string().as_str())
    );
    let j = r.json();
    assert_eq!(j["service"]["namespace"], service.namespace.as_str());
    assert_eq!(j["service"]["name"], service.name.as_str());
    assert_eq!(j["localEndpoints"], endpoints);
    assert_eq!(j["serviceProxyHealthy"], proxy_healthy);
}

#[tokio::test]
async fn service_health_listeners_follow_services_and_endpoints() {
    let clock = Arc::new(FakeClock::new(start_time()));
    let metrics = Arc::new(Metrics::new().unwrap());
    let health = Arc::new(ProxyHealth::new(
        Duration::from_secs(60),
        clock.clone(),
        metrics,
    ));
    let server = ServiceHealthServer::new(vec!["127.0.0.1".parse().unwrap()], health.clone());
    let (ab, cd, ef) = (svc("a", "b"), svc("c", "d"), svc("e", "f"));
    let (p1, p2) = (free_port(), free_port());
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p3 = blocker.local_addr().unwrap().port();

    // Nothing to do, and endpoints of unknown services are ignored.
    assert!(server.sync_services(&BTreeMap::new()).await.is_empty());
    server.sync_endpoints(&BTreeMap::from([(ab.clone(), 93)]));
    assert!(server.listening().is_empty());

    // Three services, one port already taken: reported, the other two serve.
    let failures = server
        .sync_services(&BTreeMap::from([
            (ab.clone(), p1),
            (cd.clone(), p2),
            (ef.clone(), p3),
        ]))
        .await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].service, ef);
    assert_eq!(failures[0].port, p3);
    assert_eq!(failures[0].kind, std::io::ErrorKind::AddrInUse);
    assert!(
        failures[0].message("node-1").starts_with(&format!(
            "node node-1 failed to start healthcheck \"e/f\" on port {p3}: "
        )),
        "{}",
        failures[0].message("node-1")
    );
    let listening = server.listening();
    assert_eq!(
        listening.keys().cloned().collect::<Vec<_>>(),
        [ab.clone(), cd.clone()]
    );
    assert_eq!(listening[&ab], (p1, vec![at(p1)]));

    // No endpoints yet: 503 even though the proxy is healthy.
    check_service(p1, &ab, 503, 0, true).await;
    check_service(p2, &cd, 503, 0, true).await;

    server.sync_endpoints(&BTreeMap::from([(ab.clone(), 2), (cd.clone(), 0)]));
    check_service(p1, &ab, 200, 2, true).await;
    check_service(p2, &cd, 503, 0, true).await;

    // Proxy unhealthy (update queued and late): 503 despite local endpoints.
    health.updated(IpFamily::V4);
    health.queued_update(IpFamily::V4);
    clock.advance(Duration::from_secs(61));
    check_service(p1, &ab, 503, 2, false).await;
    health.updated(IpFamily::V4);
    check_service(p1, &ab, 200, 2, true).await;
    // Node eligibility does not matter here (upstream uses the proxier health only).
    health.sync_node(None);
    check_service(p1, &ab, 200, 2, true).await;

    // c/d goes away, e/f's port is free now and is retried; a/b is left alone.
    drop(blocker);
    let failures = server
        .sync_services(&BTreeMap::from([(ab.clone(), p1), (ef.clone(), p3)]))
        .await;
    assert!(failures.is_empty(), "{failures:?}");
    assert!(refused(at(p2)).await);
    check_service(p1, &ab, 200, 2, true).await;
    check_service(p3, &ef, 503, 0, true).await;

    // Endpoints missing from the map drop to 0.
    server.sync_endpoints(&BTreeMap::from([(ef.clone(), 1)]));
    check_service(p1, &ab, 503, 0, true).await;
    check_service(p3, &ef, 200, 1, true).await;

    // a/b moves to c/d's old port: the old one closes, the new one starts with no endpoints.
    server.sync_endpoints(&BTreeMap::from([(ab.clone(), 4), (ef.clone(), 1)]));
    let failures = server
        .sync_services(&BTreeMap::from([(ab.clone(), p2), (ef.clone(), p3)]))
        .await;
    assert!(failures.is_empty(), "{failures:?}");
    assert!(refused(at(p1)).await);
    check_service(p2, &ab, 503, 0, true).await;
    check_service(p3, &ef, 200, 1, true).await;

    // A keep-alive connection left open does not keep a closed listener serving.
    let mut idle = TcpStream::connect(at(p3)).await.unwrap();
    server.shutdown().await;
    assert!(server.listening().is_empty());
    assert!(refused(at(p2)).await);
    assert!(refused(at(p3)).await);
    let mut buf = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut buf))
        .await
        .expect("idle connection closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
}

/// `/statusz` and `/flagz` on the metrics server: text by default and for `*/*`, the structured
/// `config.k8s.io` objects when asked for them, 406 for JSON without `as`/`g`/`v` (upstream 1.36).
#[tokio::test]
async fn statusz_and_flagz_negotiate_like_upstream() {
    let mut flags = BTreeMap::new();
    flags.insert("v".to_string(), "2".to_string());
    flags.insert("cleanup".to_string(), "false".to_string());
    let zpages = ZPages {
        component: "kube-proxy".into(),
        started: std::time::SystemTime::now() - Duration::from_secs(61),
        flags,
        statusz: true,
        flagz: true,
    };
    let state = MetricsServerState {
        metrics: Arc::new(Metrics::new().unwrap()),
        proxy_mode: "ipvs".into(),
        configz: Value::Null,
        zpages: Arc::new(zpages),
        explain: None,
    };
    let server = start_metrics_server(loopback0(), state, true, std::future::pending())
        .await
        .unwrap();
    let addr = server.local_addr.unwrap();

    for accept in ["", "Accept: */*\r\n", "Accept: text/plain\r\n"] {
        let r = get_with(addr, "/statusz", accept).await;
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert!(
            r.body.starts_with(
                "\nkube-proxy statusz\nWarning: This endpoint is not meant to be machine parseable"
            ),
            "{}",
            r.body
        );
        assert!(r.body.contains("\nUp"), "{}", r.body);
        assert!(r.body.contains("0 hr 01 min 0"), "{}", r.body);
    }
    let beta = "Accept: application/json;v=v1beta1;g=config.k8s.io;as=Statusz\r\n";
    let r = get_with(addr, "/statusz", beta).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("warning").is_none());
    let s = r.json();
    assert_eq!(s["kind"], "Statusz");
    assert_eq!(s["apiVersion"], "config.k8s.io/v1beta1");
    assert_eq!(s["metadata"]["name"], "kube-proxy");
    assert!(s["uptimeSeconds"].as_u64().unwrap() >= 61);
    let alpha = "Accept: application/json;v=v1alpha1;g=config.k8s.io;as=Statusz\r\n";
    let r = get_with(addr, "/statusz", alpha).await;
    assert_eq!(r.json()["apiVersion"], "config.k8s.io/v1alpha1");
    assert!(r.header("warning").unwrap().starts_with("299 - "));
    let r = get_with(addr, "/statusz", "Accept: application/json\r\n").await;
    assert_eq!(r.status, 406);
    assert_eq!(r.json()["reason"], "NotAcceptable");

    let r = get(addr, "/flagz").await;
    assert_eq!(r.status, 200);
    let lines: Vec<&str> = r.body.lines().collect();
    assert_eq!(lines[1], "kube-proxy flagz");
    assert!(
        lines[3].starts_with("cleanup") && lines[3].ends_with("false"),
        "{}",
        r.body
    );
    assert!(
        lines[4].starts_with('v') && lines[4].ends_with('2'),
        "{}",
        r.body
    );
    let flagz = "Accept: application/json;v=v1beta1;g=config.k8s.io;as=Flagz\r\n";
    let f = get_with(addr, "/flagz", flagz).await.json();
    assert_eq!(f["kind"], "Flagz");
    assert_eq!(f["flags"]["v"], "2");
    // A structured kind of the other page is not acceptable.
    assert_eq!(get_with(addr, "/flagz", beta).await.status, 406);
}

/// A page whose feature gate (`ComponentStatusz`, `ComponentFlagz`) is off is not served: 404, as
/// upstream, which does not install it; the other page and the rest of the server are unaffected.
#[tokio::test]
async fn zpages_follow_their_feature_gates() {
    for (gate, off, on) in [
        ("ComponentStatusz", "/statusz", "/flagz"),
        ("ComponentFlagz", "/flagz", "/statusz"),
    ] {
        let gates: BTreeMap<String, bool> = [(gate.to_string(), false)].into();
        let state = MetricsServerState {
            metrics: Arc::new(Metrics::new().unwrap()),
            proxy_mode: "ipvs".into(),
            configz: Value::Null,
            zpages: Arc::new(ZPages::for_process(Default::default()).with_pages(
                enabled(&gates, COMPONENT_STATUSZ),
                enabled(&gates, COMPONENT_FLAGZ),
            )),
            explain: None,
        };
        let server = start_metrics_server(loopback0(), state, true, std::future::pending())
            .await
            .unwrap();
        let addr = server.local_addr.unwrap();
        assert_eq!(get(addr, off).await.status, 404, "{gate}=false: {off}");
        assert_eq!(get(addr, on).await.status, 200, "{gate}=false: {on}");
        assert_eq!(get(addr, "/healthz").await.status, 200);
        server.task.abort();
    }
}
