//! The queries of the standard kube-proxy dashboard (kubernetes-monitoring/kubernetes-mixin,
//! `dashboards/proxy.libsonnet`, main branch, 2026-08) and the series and labels each needs from
//! kube-proxy's `/metrics`. `cluster`, `job` and `instance` are Prometheus's target labels and the `up`
//! series (the "Up" panel, the variables) is Prometheus's own: neither comes from the binary.
#![allow(dead_code)]

/// One dashboard query: its panel, the PromQL as the dashboard has it (config placeholders expanded to
/// the mixin's defaults), and the metric and labels it reads.
pub struct Query {
    pub panel: &'static str,
    pub promql: &'static str,
    pub metric: &'static str,
    pub labels: &'static [&'static str],
}

/// The panels served by kube-proxy's own metrics.
pub const QUERIES: &[Query] = &[
    Query {
        panel: "Rules Sync Rate",
        promql: r#"sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval]))"#,
        metric: "kubeproxy_sync_proxy_rules_duration_seconds_count",
        labels: &[],
    },
    Query {
        panel: "Rules Sync Latency 99th Quantile",
        promql: r#"histogram_quantile(0.99,rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval]))"#,
        metric: "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        labels: &["le"],
    },
    Query {
        panel: "Network Programming Rate",
        promql: r#"sum(rate(kubeproxy_network_programming_duration_seconds_count{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval]))"#,
        metric: "kubeproxy_network_programming_duration_seconds_count",
        labels: &[],
    },
    Query {
        panel: "Network Programming Latency 99th Quantile",
        promql: r#"histogram_quantile(0.99, sum(rate(kubeproxy_network_programming_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval])) by (instance, le))"#,
        metric: "kubeproxy_network_programming_duration_seconds_bucket",
        labels: &["le"],
    },
    Query {
        panel: "Memory",
        promql: r#"process_resident_memory_bytes{cluster="$cluster", job="kube-proxy",instance=~"$instance"}"#,
        metric: "process_resident_memory_bytes",
        labels: &[],
    },
    Query {
        panel: "CPU usage",
        promql: r#"rate(process_cpu_seconds_total{cluster="$cluster", job="kube-proxy",instance=~"$instance"}[$__rate_interval])"#,
        metric: "process_cpu_seconds_total",
        labels: &[],
    },
    Query {
        panel: "Goroutines",
        promql: r#"go_goroutines{cluster="$cluster", job="kube-proxy",instance=~"$instance"}"#,
        metric: "go_goroutines",
        labels: &[],
    },
];

/// The panels served by the API client's `rest_client_*` metrics, which another branch adds: they
/// exist in the binary once that branch is merged.
pub const REST_CLIENT_QUERIES: &[Query] = &[
    Query {
        panel: "Kube API Request Rate (2xx, 3xx, 4xx, 5xx: one query per class)",
        promql: r#"sum(rate(rest_client_requests_total{cluster="$cluster",job="kube-proxy", instance=~"$instance",code=~"2.."}[$__rate_interval]))"#,
        metric: "rest_client_requests_total",
        labels: &["code"],
    },
    Query {
        panel: "Post Request Latency 99th Quantile",
        promql: r#"histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy",instance=~"$instance",verb="POST"}[$__rate_interval])) by (verb, le))"#,
        metric: "rest_client_request_duration_seconds_bucket",
        labels: &["verb", "le"],
    },
    Query {
        panel: "Get Request Latency 99th Quantile",
        promql: r#"histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance", verb="GET"}[$__rate_interval])) by (verb, le))"#,
        metric: "rest_client_request_duration_seconds_bucket",
        labels: &["verb", "le"],
    },
];

/// Whether `text` (a `/metrics` scrape) has a sample of `metric` carrying every label in `labels`.
pub fn served(text: &str, metric: &str, labels: &[&str]) -> bool {
    text.lines().filter(|l| !l.starts_with('#')).any(|l| {
        let Some(rest) = l.strip_prefix(metric) else {
            return false;
        };
        if labels.is_empty() {
            return rest.starts_with(' ') || rest.starts_with('{');
        }
        let Some(set) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) else {
            return false;
        };
        labels.iter().all(|label| {
            set.0
                .split(',')
                .any(|kv| kv.starts_with(&format!("{label}=\"")))
        })
    })
}

/// The queries of `queries` whose series `text` lacks, as `panel: metric{labels}`.
pub fn missing(text: &str, queries: &[Query]) -> Vec<String> {
    queries
        .iter()
        .filter(|q| {
            // The table names the metric each query reads: keep it honest.
            assert!(
                q.promql.contains(q.metric),
                "{} does not read {}",
                q.panel,
                q.metric
            );
            !served(text, q.metric, q.labels)
        })
        .map(|q| format!("{}: {}{:?}", q.panel, q.metric, q.labels))
        .collect()
}
