//! The monitoring overlay (`deploy/overlays/monitoring`), rendered by kubectl:
//! - the Service selects the DaemonSet's pods on the metrics port, the ServiceMonitor scrapes it as
//!   `job="kube-proxy"`;
//! - the PrometheusRule's alerts fire (and stay quiet) as intended: `promtool check rules` and
//!   `promtool test rules` on `tests/monitoring_data/alerts_test.yaml`, with the promtool that
//!   scripts/install-deps.sh extracts (or `$KPRS_PROMTOOL`);
//! - every query of the rules and of the Grafana dashboard parses (promtool) and names only metrics and
//!   labels the daemon exports (its own registry, every family populated).

use super::overlays::{Rendered, kubectl, render, target_dir};
use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::explain::metrics::StateMetrics;
use kube_proxy_rs::metrics::{Metrics, TrafficPolicy};
use kube_proxy_rs::proxier::reconcile::drift::{DriftKind, DriftReport, ForeignKind};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

const PROMTOOL_ENV: &str = "KPRS_PROMTOOL";
const SKIP_ENV: &str = "KPRS_SKIP_KUBECTL";
/// Labels Prometheus puts on every scraped series (the ServiceMonitor adds `node`).
const TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "node",
    "namespace",
    "pod",
    "service",
    "endpoint",
];
/// Metrics the rules query that another branch adds to the daemon (the lead's drift counter). Each must
/// still be missing from src/: once it exists, this list must shrink and [`exposition`] populate it.
const PENDING: &[(&str, &[&str])] = &[];

fn promtool() -> PathBuf {
    let path = std::env::var_os(PROMTOOL_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("tools/promtool/promtool"));
    assert!(
        path.is_file(),
        "promtool {} not found: run scripts/install-deps.sh (it extracts Debian's), set {PROMTOOL_ENV}, or \
         {SKIP_ENV}=1 to skip the overlay tests",
        path.display()
    );
    path
}

fn run_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn promtool_ok(args: &[&str], dir: &Path) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The rendered monitoring overlay; `None` when opted out of kubectl.
fn monitoring(test: &str) -> Option<Rendered> {
    let k = kubectl(test)?;
    Some(Rendered(render(
        &k,
        Path::new("deploy/overlays/monitoring"),
    )))
}

/// Every metric of a fresh registry with each family populated through the daemon's own API, as
/// name → label names (histograms as their `_bucket`, `_sum` and `_count` series).
fn exposition() -> BTreeMap<String, BTreeSet<String>> {
    let m = Metrics::new().expect("registry");
    let d = Duration::from_millis(5);
    m.init_family(IpFamily::V4);
    m.observe_sync(IpFamily::V4, d, true);
    m.observe_sync(IpFamily::V4, d, false);
    m.set_last_sync(IpFamily::V4, SystemTime::now());
    m.set_last_queued(IpFamily::V4, SystemTime::now());
    m.observe_network_programming(IpFamily::V4, d);
    m.endpoint_changes(1, 0);
    m.service_changes(1, 0);
    m.set_no_local_endpoints(IpFamily::V4, TrafficPolicy::Internal, 0);
    m.inc_iptables_restore_failure(IpFamily::V4, false);
    m.inc_iptables_restore_failure(IpFamily::V4, true);
    m.inc_healthz(200);
    m.inc_livez(200);
    m.observe_conntrack_reconcile(IpFamily::V4, d, 1);
    m.inc_kernel_write_failures("ipvs", 1);
    m.inc_invalid_object("Service");
    m.inc_annotation_error("ipvs.kube-proxy-rs.io/scheduler");
    let drains = std::sync::Arc::default();
    let state = StateMetrics::register(&m, drains).expect("explanation metrics");
    let mut drift = DriftReport::default();
    drift.add(DriftKind::VirtualServer, 1);
    let foreign = BTreeMap::from([(ForeignKind::Ipset, 1)]);
    state.observe_full_sync(&drift, Some(&foreign), 1);
    state.forced_drains(1);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in m.encode().expect("encode").lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..end].to_string()).or_default();
        if let Some(rest) = line[end..].strip_prefix('{') {
            for pair in rest.split("\",") {
                if let Some((k, _)) = pair.split_once('=') {
                    labels.insert(k.trim().to_string());
                }
            }
        }
    }
    for (name, labels) in PENDING {
        out.insert(
            name.to_string(),
            labels.iter().map(|s| s.to_string()).collect(),
        );
    }
    out
}

#[test]
fn pending_metrics_are_still_pending() {
    let bare: Vec<&str> = PENDING
        .iter()
        .map(|(n, _)| n.trim_start_matches("kubeproxy_rs_"))
        .collect();
    for f in walk(&super::root().join("src")) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for name in &bare {
            assert!(
                !text.contains(&format!("\"{name}\"")),
                "{} now defines {name}: remove it from PENDING in tests/manifests/monitoring.rs and \
                 populate it in exposition()",
                f.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// Identifiers of a PromQL expression outside string literals, with the byte after each.
fn identifiers(expr: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let (mut i, b) = (0, expr.as_bytes());
    while i < b.len() {
        let c = b[i] as char;
        if c == '"' {
            i += 1 + expr[i + 1..].find('"').expect("closed string");
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < b.len()
                && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':')
            {
                i += 1;
            }
            out.push((expr[start..i].to_string(), i));
            continue;
        }
        i += 1;
    }
    out
}

/// Checks that `expr` names only metrics the daemon exports (or `up`) and groups or matches only on their
/// labels or target labels. Returns the metric names.
fn check_names(
    expr: &str,
    known: &BTreeMap<String, BTreeSet<String>>,
    what: &str,
) -> BTreeSet<String> {
    let ids = identifiers(expr);
    let metrics: BTreeSet<String> = ids
        .iter()
        .filter(|(id, _)| id.starts_with("kubeproxy") || id == "up")
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!metrics.is_empty(), "{what}: no metric in {expr}");
    let mut allowed: BTreeSet<String> = TARGET_LABELS.iter().map(|s| s.to_string()).collect();
    for m in &metrics {
        if m == "up" {
            continue;
        }
        let labels = known
            .get(m)
            .unwrap_or_else(|| panic!("{what}: {m} is not a metric the daemon exports"));
        allowed.extend(labels.iter().cloned());
    }
    // Label names: in `by (...)`/`without (...)` lists and before a matcher operator inside `{...}`.
    let mut grouping = false;
    for (id, end) in &ids {
        let next = expr[*end..].trim_start();
        if id == "by" || id == "without" {
            grouping = true;
            continue;
        }
        let is_matcher = ["=~", "!~", "!=", "="]
            .iter()
            .any(|op| next.starts_with(op))
            && !next.starts_with("==");
        if grouping || is_matcher {
            assert!(
                allowed.contains(id),
                "{what}: label {id} is on none of {metrics:?}: {expr}"
            );
        }
        if grouping && next.starts_with(')') {
            grouping = false;
        }
    }
    metrics
}

/// The rendered PrometheusRule as a Prometheus rule file (JSON is YAML).
fn rule_file(r: &Rendered) -> Value {
    let rule = r.get("PrometheusRule", "kube-proxy-rs");
    json!({ "groups": rule["spec"]["groups"].clone() })
}

#[test]
fn alerts_fire_as_intended_under_promtool() {
    let Some(r) = monitoring("alerts") else {
        return;
    };
    let dir = run_dir("monitoring-alerts");
    let rules = rule_file(&r);
    std::fs::write(dir.join("rules.yaml"), rules.to_string()).expect("write rules");
    let tests = super::read("tests/monitoring_data/alerts_test.yaml");
    std::fs::write(dir.join("alerts_test.yaml"), &tests).expect("write tests");
    println!("{}", promtool_ok(&["check", "rules", "rules.yaml"], &dir));
    println!(
        "{}",
        promtool_ok(&["test", "rules", "alerts_test.yaml"], &dir)
    );

    // Every alert has a unit test, and the three the operator guide names are there.
    let alerts: BTreeSet<String> = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|rule| {
            rule["alert"]
                .as_str()
                .expect("alerting rules only")
                .to_string()
        })
        .collect();
    let tested: BTreeSet<String> = tests
        .lines()
        .filter_map(|l| l.trim().strip_prefix("alertname: "))
        .map(str::to_string)
        .collect();
    assert_eq!(alerts, tested, "alerts vs alerts with a promtool test");
    let known = exposition();
    let mut queried = BTreeSet::new();
    for g in rules["groups"].as_array().into_iter().flatten() {
        for rule in g["rules"].as_array().into_iter().flatten() {
            let expr = rule["expr"].as_str().expect("expr");
            assert!(
                expr.contains("job=\"kube-proxy\""),
                "scraped as job=\"kube-proxy\": {expr}"
            );
            queried.extend(check_names(
                expr,
                &known,
                rule["alert"].as_str().unwrap_or("?"),
            ));
        }
    }
    for m in [
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_rs_kernel_write_failures_total",
        "kubeproxy_rs_drift_repairs_total",
    ] {
        assert!(queried.contains(m), "no alert on {m}");
    }
}

/// Grafana's variables replaced by values PromQL accepts, for parsing.
fn without_grafana_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$node", ".*")
}

#[test]
fn dashboard_queries_parse_and_use_the_daemons_metrics() {
    let Some(r) = monitoring("dashboard") else {
        return;
    };
    let text = super::read("deploy/overlays/monitoring/dashboard.json");
    let dash: Value = serde_json::from_str(&text).expect("dashboard.json is JSON");
    let cm = r.get("ConfigMap", "kube-proxy-rs-dashboard");
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"], "1",
        "picked up by Grafana's sidecar"
    );
    assert_eq!(
        cm["data"]["kube-proxy-rs.json"],
        text.as_str(),
        "the ConfigMap carries the file"
    );
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "node"]);

    let known = exposition();
    let mut records = Vec::new();
    let mut ids = BTreeSet::new();
    for p in dash["panels"].as_array().expect("panels") {
        let title = p["title"].as_str().expect("title");
        assert!(
            ids.insert(p["id"].as_i64().expect("id")),
            "{title}: duplicate panel id"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            assert!(
                expr.contains("node=~\"$node\""),
                "{title}: the node variable: {expr}"
            );
            check_names(expr, &known, title);
            let n = records.len();
            records.push(json!({"record": format!("dashboard:query{n}"), "expr": without_grafana_variables(expr)}));
        }
    }
    let dir = run_dir("monitoring-dashboard");
    let file = json!({"groups": [{"name": "dashboard", "rules": records}]});
    std::fs::write(dir.join("queries.yaml"), file.to_string()).expect("write");
    println!("{}", promtool_ok(&["check", "rules", "queries.yaml"], &dir));
}

/// The Service selects the DaemonSet's pods on the port the daemon serves metrics on; the ServiceMonitor
/// scrapes that Service as job="kube-proxy".
#[test]
fn service_monitor_scrapes_the_daemonset_as_job_kube_proxy() {
    let Some(r) = monitoring("servicemonitor") else {
        return;
    };
    let svc = r.get("Service", "kube-proxy-rs-metrics");
    let deploy = super::load_deploy();
    let ds = super::the(&deploy.daemon_sets, "DaemonSet");
    let pod_labels = ds
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone();
    let pod_labels = serde_json::to_value(pod_labels.unwrap_or_default()).unwrap();
    for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(
            &pod_labels[k], v,
            "Service selector {k} must match the pods"
        );
    }
    let cm = super::the(&deploy.config_maps, "ConfigMap");
    let cfg = super::single_doc(&cm.data.as_ref().unwrap()["config.conf"], "config.conf");
    let metrics_port: u16 = cfg["metricsBindAddress"]
        .as_str()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .expect("metrics port");
    let port = &svc["spec"]["ports"][0];
    assert_eq!(port["port"], metrics_port);
    assert_eq!(port["targetPort"], metrics_port);
    assert_eq!(svc["spec"]["clusterIP"], "None");

    let sm = r.get("ServiceMonitor", "kube-proxy-rs");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "ServiceMonitor selects the Service"
        );
    }
    let job_label = sm["spec"]["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(
        svc["metadata"]["labels"][job_label], "kube-proxy",
        "job=\"kube-proxy\""
    );
    assert_eq!(sm["spec"]["endpoints"][0]["port"], port["name"]);
    let ns = svc["metadata"]["namespace"].clone();
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!([ns]));
}
