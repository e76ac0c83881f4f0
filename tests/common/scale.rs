//! Scale scenario for `benches/scale.rs`: a deterministic generator of N Services × M endpoints, the
//! kernel state upstream kube-proxy (IPVS mode) programs for them (as counts), and cheap readers of the
//! kernel state, the daemon's Prometheus metrics and a process's resource usage.
//!
//! Service `i` (0-based, namespace `bench`, name `svc-<i>`) has ClusterIP `10.96.0.0 + 1 + i`, one TCP port
//! 80 → 8080, and one EndpointSlice with M ready endpoints `10.128.0.0 + 1 + i*M + j`. Every tenth service
//! (`i % 10 == 1`) is type NodePort (nodePort `30000 + i/10`); of those, every hundredth (`i % 100 == 1`) is
//! a LoadBalancer (no ingress) with externalTrafficPolicy Local and a healthCheckNodePort
//! (`40000 + i/100`). Services with `i % 10 == 2` have ClientIP session affinity (10800 s). Endpoint 0 is on
//! this node for `i % 20 == 0` and for the Local services; every other endpoint is on another node.
//! NodePorts are served on the node IP only (`nodePortAddresses` = the node's /24).
#![allow(dead_code)]

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::SystemTime;

/// Namespace of every generated object.
pub const NAMESPACE: &str = "bench";
/// This node's name.
pub const NODE: &str = "bench-node";
/// This node's IP (on a dummy link `node0`).
pub const NODE_IP: &str = "10.0.0.10";
/// CIDR given as `nodePortAddresses`.
pub const NODE_PORT_CIDR: &str = "10.0.0.0/24";
/// Cluster (pod) CIDR.
pub const CLUSTER_CIDR: &str = "10.128.0.0/9";
/// Service port.
pub const PORT: u16 = 80;
/// Endpoint (target) port.
pub const TARGET_PORT: u16 = 8080;
/// Trigger-time annotation read by kube-proxy's network-programming latency metric.
pub const TRIGGER_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

fn ip_add(base: Ipv4Addr, n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + n)
}

/// ClusterIP of service `i`.
pub fn cluster_ip(i: usize) -> Ipv4Addr {
    ip_add(Ipv4Addr::new(10, 96, 0, 0), 1 + i as u32)
}

/// IP of endpoint `j` of service `i`.
pub fn pod_ip(i: usize, j: usize, m: usize) -> Ipv4Addr {
    ip_add(Ipv4Addr::new(10, 128, 0, 0), 1 + (i * m + j) as u32)
}

/// An extra endpoint IP (outside the generated pool), for change tests.
pub fn extra_ip(c: usize) -> Ipv4Addr {
    ip_add(Ipv4Addr::new(10, 250, 0, 0), 1 + c as u32)
}

/// The extra endpoint of churn change `k` (outside the generated pools and the change tests' extra IPs).
pub fn churn_ip(k: usize) -> Ipv4Addr {
    ip_add(Ipv4Addr::new(10, 251, 0, 0), 1 + k as u32)
}

/// Service `i` is a NodePort (or LoadBalancer) service.
pub fn has_node_port(i: usize) -> bool {
    i % 10 == 1
}

/// Service `i` is a LoadBalancer with externalTrafficPolicy Local and a health-check node port.
pub fn is_local_lb(i: usize) -> bool {
    i % 100 == 1
}

/// Service `i` has ClientIP session affinity.
pub fn has_affinity(i: usize) -> bool {
    i % 10 == 2
}

/// Endpoint `j` of service `i` runs on this node.
pub fn is_local_endpoint(i: usize, j: usize) -> bool {
    j == 0 && (i.is_multiple_of(20) || is_local_lb(i))
}

/// Name of service `i`.
pub fn service_name(i: usize) -> String {
    format!("svc-{i}")
}

/// The Node object of this node.
pub fn node() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        "spec": {"podCIDR": "10.128.0.0/24", "podCIDRs": ["10.128.0.0/24"]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": NODE}
            ],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

/// Service `i`.
pub fn service(i: usize) -> Value {
    let mut port =
        json!({"name": "http", "protocol": "TCP", "port": PORT, "targetPort": TARGET_PORT});
    let mut spec = json!({
        "type": "ClusterIP",
        "clusterIP": cluster_ip(i).to_string(),
        "clusterIPs": [cluster_ip(i).to_string()],
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "selector": {"app": service_name(i)},
        "sessionAffinity": "None",
    });
    if has_node_port(i) {
        port["nodePort"] = json!(30000 + i / 10);
        spec["type"] = json!("NodePort");
        spec["externalTrafficPolicy"] = json!("Cluster");
        if is_local_lb(i) {
            spec["type"] = json!("LoadBalancer");
            spec["externalTrafficPolicy"] = json!("Local");
            spec["healthCheckNodePort"] = json!(40000 + i / 100);
        }
    }
    if has_affinity(i) {
        spec["sessionAffinity"] = json!("ClientIP");
        spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
    }
    spec["ports"] = json!([port]);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(i), "namespace": NAMESPACE},
        "spec": spec,
    })
}

fn endpoint(ip: Ipv4Addr, node: &str) -> Value {
    json!({
        "addresses": [ip.to_string()],
        "conditions": {"ready": true, "serving": true, "terminating": false},
        "nodeName": node,
    })
}

/// The EndpointSlice of service `i` with its `m` endpoints plus `extra` ones, stamped with a
/// last-change-trigger-time when `trigger` is given.
pub fn slice(i: usize, m: usize, extra: &[Ipv4Addr], trigger: Option<SystemTime>) -> Value {
    let mut eps: Vec<Value> = (0..m)
        .map(|j| {
            let node = if is_local_endpoint(i, j) {
                NODE.to_string()
            } else {
                format!("node-{}", (i + j) % 100)
            };
            endpoint(pod_ip(i, j, m), &node)
        })
        .collect();
    eps.extend(extra.iter().map(|ip| endpoint(*ip, "node-extra")));
    let mut md = json!({
        "name": format!("{}-x1", service_name(i)),
        "namespace": NAMESPACE,
        "labels": {
            "kubernetes.io/service-name": service_name(i),
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"
        },
    });
    if let Some(t) = trigger {
        let ts = k8s_openapi::jiff::Timestamp::try_from(t)
            .map(|t| t.to_string())
            .unwrap_or_default();
        md["annotations"] = json!({ TRIGGER_ANNOTATION: ts });
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": md,
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "protocol": "TCP", "port": TARGET_PORT}],
    })
}

/// The kernel state upstream kube-proxy programs for services `0..n` with `m` endpoints each, as counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// IPVS virtual servers.
    pub virtual_servers: usize,
    /// IPVS real servers summed over all virtual servers.
    pub destinations: usize,
    /// Virtual servers with persistence (session affinity).
    pub persistent: usize,
    /// Addresses on kube-ipvs0.
    pub ipvs0_addresses: usize,
    /// Member counts of the ipsets we check.
    pub ipsets: BTreeMap<&'static str, usize>,
}

impl Expected {
    /// Counts for `n` services with `m` endpoints, `extra` services having one extra (non-local) endpoint.
    pub fn compute(n: usize, m: usize, extra: usize) -> Expected {
        let mut e = Expected {
            virtual_servers: n,
            destinations: n * m + extra,
            ipvs0_addresses: n,
            ..Default::default()
        };
        let (mut node_ports, mut local, mut loopback) = (0, 0, 0);
        for i in 0..n {
            if has_affinity(i) {
                e.persistent += 1;
            }
            loopback += (0..m).filter(|&j| is_local_endpoint(i, j)).count();
            if has_node_port(i) {
                node_ports += 1;
                e.virtual_servers += 1;
                if is_local_lb(i) {
                    local += 1;
                    e.destinations += (0..m).filter(|&j| is_local_endpoint(i, j)).count();
                } else {
                    e.destinations += m;
                }
            }
        }
        e.ipsets.insert("KUBE-CLUSTER-IP", n);
        e.ipsets.insert("KUBE-IPVS-IPS", n);
        e.ipsets.insert("KUBE-NODE-PORT-TCP", node_ports);
        e.ipsets.insert("KUBE-NODE-PORT-LOCAL-TCP", local);
        e.ipsets.insert("KUBE-HEALTH-CHECK-NODE-PORT", local);
        e.ipsets.insert("KUBE-LOOP-BACK", loopback);
        e
    }
}

/// Counts read from the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// IPVS virtual servers.
    pub virtual_servers: usize,
    /// IPVS real servers.
    pub destinations: usize,
    /// Persistent virtual servers.
    pub persistent: usize,
    /// Addresses on kube-ipvs0 (0 when the link is absent).
    pub ipvs0_addresses: usize,
    /// Member count of every ipset.
    pub ipsets: BTreeMap<String, usize>,
    /// Rules in the nat table's KUBE-SERVICES chain (0 when absent).
    pub kube_services_rules: usize,
}

/// Counts virtual servers, real servers and persistent virtual servers in `/proc/net/ip_vs`.
pub fn ipvs_counts() -> Result<(usize, usize, usize)> {
    let text = std::fs::read_to_string("/proc/net/ip_vs").context("read /proc/net/ip_vs")?;
    let (mut vs, mut dst, mut persistent) = (0, 0, 0);
    for l in text.lines() {
        if l.starts_with("TCP ")
            || l.starts_with("UDP ")
            || l.starts_with("SCTP ")
            || l.starts_with("FWM ")
        {
            vs += 1;
            if l.contains(" persistent ") {
                persistent += 1;
            }
        } else if l.starts_with("  -> ") && !l.starts_with("  -> RemoteAddress") {
            dst += 1;
        }
    }
    Ok((vs, dst, persistent))
}

/// Member counts of every ipset (from `ipset list -t` headers).
pub fn ipset_counts() -> Result<BTreeMap<String, usize>> {
    let out = run_ok("ipset list -t")?;
    let mut sets = BTreeMap::new();
    let mut name = None;
    for l in out.lines() {
        if let Some(n) = l.strip_prefix("Name: ") {
            name = Some(n.trim().to_string());
        } else if let Some(c) = l.strip_prefix("Number of entries: ")
            && let Some(n) = name.take()
        {
            sets.insert(n, c.trim().parse().context("ipset entry count")?);
        }
    }
    Ok(sets)
}

/// Reads every count of [`Observed`] from the kernel.
pub fn observe() -> Result<Observed> {
    let (virtual_servers, destinations, persistent) = ipvs_counts()?;
    let addrs = run_ok("ip -o -4 addr show dev kube-ipvs0 2>/dev/null || true")?;
    let nat = run_ok("iptables-save -t nat")?;
    Ok(Observed {
        virtual_servers,
        destinations,
        persistent,
        ipvs0_addresses: addrs.lines().filter(|l| l.contains(" inet ")).count(),
        ipsets: ipset_counts()?,
        kube_services_rules: nat
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SERVICES "))
            .count(),
    })
}

/// Differences between what the kernel holds and what is expected (empty when it matches).
pub fn mismatches(exp: &Expected, obs: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |what: &str, want: usize, got: usize| {
        if want != got {
            out.push(format!("{what}: expected {want}, kernel has {got}"));
        }
    };
    check(
        "IPVS virtual servers",
        exp.virtual_servers,
        obs.virtual_servers,
    );
    check("IPVS real servers", exp.destinations, obs.destinations);
    check("persistent virtual servers", exp.persistent, obs.persistent);
    check(
        "kube-ipvs0 addresses",
        exp.ipvs0_addresses,
        obs.ipvs0_addresses,
    );
    for (set, want) in &exp.ipsets {
        let got = obs.ipsets.get(*set).copied();
        match got {
            Some(g) => check(&format!("ipset {set} members"), *want, g),
            None => check(&format!("ipset {set} (absent) members"), *want, usize::MAX),
        }
    }
    if obs.kube_services_rules == 0 {
        check("rules in the nat KUBE-SERVICES chain", 1, 0);
    }
    out
}

/// Runs a shell command; its stdout, or an error with stderr.
pub fn run_ok(cmd: &str) -> Result<String> {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .with_context(|| format!("spawn {cmd}"))?;
    if !out.status.success() {
        bail!(
            "`{cmd}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One Prometheus text exposition, parsed into (series, value) pairs.
#[derive(Clone, Debug, Default)]
pub struct Metrics(pub Vec<(String, f64)>);

impl Metrics {
    /// Parses the text format (comments skipped).
    pub fn parse(text: &str) -> Metrics {
        Metrics(
            text.lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    Some((series.to_string(), value.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    /// Sum of the series named `name` (any labels) whose labels contain every `filters` text.
    pub fn sum(&self, name: &str, filters: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(s, _)| {
                let base = s.split('{').next().unwrap_or_default();
                base == name && filters.iter().all(|f| s.contains(f))
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// The value of the unlabelled series `name`; None when the exposition lacks it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|(s, _)| s == name).map(|(_, v)| *v)
    }

    /// `(sum, count)` of a histogram for the IPv4 family.
    pub fn histogram_v4(&self, name: &str) -> (f64, f64) {
        let f = ["ip_family=\"IPv4\""];
        (
            self.sum(&format!("{name}_sum"), &f),
            self.sum(&format!("{name}_count"), &f),
        )
    }
}

/// GETs `http://addr/path` with a plain HTTP/1.1 request; the body.
pub fn http_get(addr: &str, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .context("malformed HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    // The metrics server may answer chunked; strip chunk sizes if so.
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut plain = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).context("chunk size")?;
            if n == 0 || tail.len() < n {
                break;
            }
            plain.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
        return Ok(plain);
    }
    Ok(body.to_string())
}

/// Resource usage of a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStats {
    /// Peak resident set size (VmHWM), bytes.
    pub peak_rss: u64,
    /// Current resident set size (VmRSS), bytes.
    pub rss: u64,
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// User + system CPU time of the process's waited-for children, seconds.
    pub child_cpu_seconds: f64,
}

/// Reads VmHWM/VmRSS from `/proc/<pid>/status` and utime+stime (and cutime+cstime) from `/proc/<pid>/stat`.
pub fn proc_stats(pid: u32) -> Result<ProcStats> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed stat")?;
    let f: Vec<&str> = after.split_whitespace().collect();
    // After the comm field: state is field 3 (index 0 here); utime/stime are fields 14/15.
    let ticks = |idx: usize| -> f64 { f.get(idx).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ProcStats {
        peak_rss: kb("VmHWM:"),
        rss: kb("VmRSS:"),
        cpu_seconds: (ticks(11) + ticks(12)) / hz.max(1.0),
        child_cpu_seconds: (ticks(13) + ticks(14)) / hz.max(1.0),
    })
}

/// Percentile (0..=100) of sorted samples (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
