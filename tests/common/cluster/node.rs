//! One node of the cluster: its network namespace, its Node object, its configuration and its daemon (the
//! built binary, started inside the namespace).
#![allow(dead_code)]

use super::topology::{CLUSTER_CIDRS, NodeAddrs};
use crate::common::e2e::{
    CONVERGE_TIMEOUT, Daemon, FIRST_SYNC_TIMEOUT, HttpResponse, KubeProxyConfig, http_get,
    metric_sum, process_stacks, read, real_servers, tail,
};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// The port of every daemon's healthz server (bound to all addresses of its node).
pub const HEALTHZ_PORT: u16 = 10256;
/// The port of every daemon's metrics server (bound to its node IP).
pub const METRICS_PORT: u16 = 10249;

/// A node: namespace `addrs.name` on the segment, and at most one daemon at a time.
pub struct Node {
    /// Its index in the cluster.
    pub index: usize,
    /// Name (Node object, namespace, `--hostname-override`) and addresses.
    pub addrs: NodeAddrs,
    /// `topology.kubernetes.io/zone` of its Node object (None: no zone label).
    pub zone: Option<String>,
    /// Directory of its config, kubeconfig and daemon logs.
    pub dir: PathBuf,
    /// The `--config` file.
    pub config_path: PathBuf,
    /// Extra flags of the daemon's next start (after `--config`, `--hostname-override` and `--v`).
    pub args: Vec<String>,
    kubeconfig: PathBuf,
    bin: PathBuf,
    daemon: Option<Daemon>,
    runs: usize,
    pods: usize,
}

impl Node {
    /// Node `index` in `zone`, its files under `dir`, its daemon `bin` reading `kubeconfig`, configured
    /// with `extra` (see [`Node::write_config`]); writes the config file now.
    pub fn new(
        index: usize,
        zone: Option<String>,
        dir: PathBuf,
        bin: PathBuf,
        kubeconfig: PathBuf,
        extra: &str,
    ) -> Node {
        let addrs = NodeAddrs::of(index);
        std::fs::create_dir_all(&dir).expect("node dir");
        let node = Node {
            index,
            config_path: dir.join("config.yaml"),
            args: Vec::new(),
            kubeconfig,
            addrs,
            zone,
            dir,
            bin,
            daemon: None,
            runs: 0,
            pods: 0,
        };
        node.write_config(extra);
        node
    }

    /// The node name.
    pub fn name(&self) -> &str {
        &self.addrs.name
    }

    /// Rewrites the config file with `extra` lines right after the `ipvs:` block (as
    /// [`KubeProxyConfig::extra`]; a running daemon exits on the change: see [`Node::restart`]).
    pub fn write_config(&self, extra: &str) {
        let metrics = format!("{}:{METRICS_PORT}", self.addrs.ip);
        let healthz = format!("0.0.0.0:{HEALTHZ_PORT}");
        // Table sizes are global sysctls, read-only in a node's namespace: left alone.
        let extra = format!("{extra}conntrack:\n  maxPerCore: 0\n");
        let config = KubeProxyConfig {
            node: "",
            kubeconfig: &self.kubeconfig,
            client_connection: "",
            healthz: &healthz,
            metrics: &metrics,
            cluster_cidr: CLUSTER_CIDRS,
            sync_period: "30s",
            extra: &extra,
        };
        std::fs::write(&self.config_path, config.yaml()).expect("write node config");
    }

    /// The Node object: InternalIPs of both families, pod CIDRs, hostname and (when set) zone labels.
    pub fn object(&self) -> Value {
        let a = &self.addrs;
        let mut labels = json!({"kubernetes.io/hostname": a.name});
        if let Some(z) = &self.zone {
            labels["topology.kubernetes.io/zone"] = json!(z);
        }
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": a.name, "labels": labels},
            "spec": {"podCIDR": a.pod_cidr, "podCIDRs": [a.pod_cidr, a.pod_cidr6]},
            "status": {"addresses": [
                {"type": "InternalIP", "address": a.ip.to_string()},
                {"type": "InternalIP", "address": a.ip6.to_string()},
                {"type": "Hostname", "address": a.name}
            ]}
        })
    }

    /// The next pod index on this node (for its addresses, [`NodeAddrs::pod_ips`]).
    pub fn next_pod(&mut self) -> usize {
        self.pods += 1;
        self.pods - 1
    }

    /// A command running `program` inside the node's namespace (legacy iptables, as UML needs; its own
    /// xtables lock, as a real node has).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.name()])
            .arg(program)
            .env("KUBE_PROXY_IPTABLES_BACKEND", "legacy")
            .env(
                "XTABLES_LOCKFILE",
                format!("/run/xtables-lock-dir/{}.lock", self.name()),
            )
            .env("NO_COLOR", "1");
        cmd
    }

    /// Starts the daemon without waiting for its first sync.
    pub fn spawn(&mut self) {
        assert!(
            self.daemon.is_none(),
            "{}: daemon already running",
            self.name()
        );
        self.runs += 1;
        let mut cmd = self.command(&self.bin);
        cmd.arg(format!("--config={}", self.config_path.display()))
            .arg(format!("--hostname-override={}", self.name()))
            .arg("--v=2")
            .args(&self.args);
        let log = self.dir.join(format!("kube-proxy-{}.log", self.runs));
        self.daemon = Some(Daemon::spawn(cmd, log));
    }

    /// Starts the daemon and waits for its first sync.
    pub fn start(&mut self) {
        self.spawn();
        self.wait_for("the first sync", FIRST_SYNC_TIMEOUT, |n| {
            n.sync_count() >= 1.0
        });
    }

    /// SIGTERM, and the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let d = self.daemon.take();
        d.unwrap_or_else(|| panic!("{}: no daemon running", self.name()))
            .terminate()
    }

    /// SIGKILL (the kernel state stays).
    pub fn kill(&mut self) {
        drop(self.daemon.take());
    }

    /// Stops the daemon (if one still runs, with SIGTERM, which must exit 0) and starts a new one, waiting
    /// for its first sync.
    pub fn restart(&mut self) {
        if self.exited().is_some() {
            self.daemon = None;
        }
        if self.daemon.is_some() {
            let st = self.stop();
            assert!(
                st.success(),
                "{}: daemon exited {st} on SIGTERM",
                self.name()
            );
        }
        self.spawn();
        self.wait_for("the first sync after a restart", FIRST_SYNC_TIMEOUT, |n| {
            n.healthz("/healthz").is_some_and(|r| r.status == 200) && n.sync_count() >= 1.0
        });
    }

    /// The daemon's pid, when one runs.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Daemon::pid)
    }

    /// The daemon's exit status, once it exited (None while it runs or when none was started).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.daemon.as_mut().and_then(Daemon::exited)
    }

    /// The log of the current (or last) daemon run.
    pub fn log(&self) -> String {
        read(&self.dir.join(format!("kube-proxy-{}.log", self.runs)))
    }

    /// Runs `sh -c cmd` in the node's namespace; stdout, or an error with stderr.
    pub fn exec(&self, cmd: &str) -> anyhow::Result<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", self.name(), "sh", "-c", cmd])
            .output()?;
        if !out.status.success() {
            anyhow::bail!(
                "{}: {cmd} failed ({}): {}",
                self.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// [`Node::exec`], panicking on failure.
    pub fn sh(&self, cmd: &str) -> String {
        self.exec(cmd).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The node's `ipvsadm -Sn`.
    pub fn ipvs(&self) -> String {
        self.sh("ipvsadm -Sn")
    }

    /// The real servers (`ip:port`) of virtual server `proto_flag` (`-t`/`-u`/`--sctp-service`) `vip_port`.
    pub fn real_servers(&self, proto_flag: &str, vip_port: &str) -> Vec<String> {
        real_servers(&self.ipvs(), proto_flag, vip_port)
    }

    /// The metrics server's address.
    pub fn metrics_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addrs.ip.into(), METRICS_PORT)
    }

    /// The daemon's `/metrics` text (empty when unreachable).
    pub fn metrics(&self) -> String {
        http_get(self.metrics_addr(), "/metrics")
            .map(|r| r.body)
            .unwrap_or_default()
    }

    /// Sum of every sample of metric `name` on this node.
    pub fn metric(&self, name: &str) -> f64 {
        metric_sum(&self.metrics(), name)
    }

    /// Syncs done so far by the running daemon.
    pub fn sync_count(&self) -> f64 {
        self.metric("kubeproxy_sync_proxy_rules_duration_seconds_count")
    }

    /// GET `path` on the daemon's healthz server at the node IP.
    pub fn healthz(&self, path: &str) -> Option<HttpResponse> {
        http_get(SocketAddr::new(self.addrs.ip.into(), HEALTHZ_PORT), path)
    }

    /// GET `/` on a health-check node port of this node, as a load balancer polls it.
    pub fn health_check(&self, port: u16) -> Option<HttpResponse> {
        http_get(SocketAddr::new(self.addrs.ip.into(), port), "/")
    }

    /// Polls `cond` every 100 ms until it holds; panics after `timeout` with the node's IPVS table and log
    /// tail, or at once when the daemon exited.
    pub fn wait_for(&mut self, what: &str, timeout: Duration, mut cond: impl FnMut(&Node) -> bool) {
        let start = Instant::now();
        while !cond(self) {
            self.check_alive(what);
            if start.elapsed() > timeout {
                panic!("{}", self.timeout_report(what, timeout));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Panics when the daemon exited (naming what was awaited).
    pub fn check_alive(&mut self, what: &str) {
        if let Some(st) = self.exited() {
            panic!(
                "{}: kube-proxy exited ({st}) while waiting for {what}\n{}",
                self.name(),
                tail(&self.log(), 60)
            );
        }
    }

    /// What a timed-out wait reports: the IPVS table, the daemon's threads and its log tail.
    pub fn timeout_report(&self, what: &str, timeout: Duration) -> String {
        format!(
            "{}: timed out after {timeout:?} waiting for {what}\n--- ipvsadm -Sn ---\n{}\n--- daemon threads ---\n{}\n--- daemon log (tail) ---\n{}",
            self.name(),
            self.exec("ipvsadm -Sn").unwrap_or_else(|e| e.to_string()),
            self.pid().map(process_stacks).unwrap_or_default(),
            tail(&self.log(), 60)
        )
    }

    /// Waits until the node's `ipvsadm -Sn` satisfies `cond`.
    pub fn wait_ipvs(&mut self, what: &str, cond: impl Fn(&str) -> bool) {
        self.wait_for(what, CONVERGE_TIMEOUT, |n| cond(&n.ipvs()));
    }
}
