//! End-to-end fixture: inside the UML guest, a node address, a test API server, and the REAL `kube-proxy`
//! binary talking to it.
//!
//! [`E2e::start`] gives the guest a node IP on a dummy link `node0`, starts the [`TestApiServer`] with the
//! Node object, writes a kubeconfig and a `KubeProxyConfiguration` into the run directory and can then start
//! and stop the daemon ([`E2e::start_daemon`], [`E2e::stop_daemon`]), run `kube-proxy --cleanup`, read its
//! metrics and health endpoints on loopback, wait for the kernel to converge, and snapshot the kernel state.
//! Each daemon run logs to its own file in the run directory; the daemon is killed when the fixture drops.
//! Everything here panics on failure with the daemon's log tail: it is test code.
#![allow(dead_code)]

use super::apiserver::{Kind, TestApiServer};
use super::uml::{BootOptions, sh};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Boot options of a group of e2e scenarios: a 512M guest, 420 s for the whole boot.
pub fn boot() -> BootOptions {
    BootOptions {
        mem: "512M",
        timeout: Duration::from_secs(420),
    }
}

/// Three ready endpoints on this node (the pods at .11, .12 and .13).
pub const ABC: &[(&str, &str, bool)] = &[
    ("10.244.0.11", NODE, true),
    ("10.244.0.12", NODE, true),
    ("10.244.0.13", NODE, true),
];

/// The three pods behind [`ABC`]: `pod-a`, `pod-b` and `pod-c` at .11, .12 and .13.
pub fn abc_pods() -> Vec<super::netns::Pod> {
    pods(&[
        ("pod-a", "10.244.0.11"),
        ("pod-b", "10.244.0.12"),
        ("pod-c", "10.244.0.13"),
    ])
}

/// An IP literal of the test scenario.
pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Node name used by the tests.
pub const NODE: &str = "e2e-node";
/// The node's IP (on the dummy link `node0`).
pub const NODE_IP: &str = "10.0.0.10";
/// Cluster CIDR given to the daemon; pods use 10.244.0.0/24 with gateway 10.244.0.1.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Pod gateway on the root-namespace side of every pod veth.
pub const POD_GW: &str = "10.244.0.1";
/// How long the daemon may take to finish its first sync. A full sync in UML takes ~20 s on a loaded
/// host (up to ~35 s seen), most of it spawning iptables and ipset processes (~0.2-0.4 s each in the guest).
pub const FIRST_SYNC_TIMEOUT: Duration = Duration::from_secs(150);
/// How long a change may take to reach the kernel (it may queue behind a full sync).
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the daemon may take to exit after SIGTERM (it finishes the sync in progress).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(120);
/// Loopback healthz address of the daemon.
pub const HEALTHZ: &str = "127.0.0.1:10256";
/// Loopback metrics address of the daemon.
pub const METRICS: &str = "127.0.0.1:10249";

/// The kube-proxy binary: cargo's `CARGO_BIN_EXE_kube-proxy` for integration tests, else (examples)
/// `kube-proxy` next to the `examples/` directory holding the running binary.
pub fn kube_proxy_bin() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_kube-proxy") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe dir");
    let dir = if dir.ends_with("examples") {
        dir.parent().expect("profile dir")
    } else {
        dir
    };
    dir.join("kube-proxy")
}

/// Fixture options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Node name (the Node object and `hostnameOverride`).
    pub node: String,
    /// Node IP, put on `node0` as /24 and into the Node's status.
    pub node_ip: String,
    /// Extra YAML lines appended to the KubeProxyConfiguration right after its `ipvs:` block: indent them by
    /// two spaces to add `ipvs` fields (`"  excludeCIDRs: [10.200.0.0/16]\n"`), not at all for top-level ones.
    pub extra_config: String,
    /// `ipvs.syncPeriod`.
    pub sync_period: String,
    /// Extra YAML lines inside `clientConnection:` (indented by two spaces), e.g.
    /// `"  contentType: application/json\n"`.
    pub client_connection: String,
    /// Whether the test API server offers protobuf (the real one does for every served kind).
    pub api_protobuf: bool,
    /// Sub-directory of the guest run directory (or a directory of its own) for files and logs.
    pub dir: Option<PathBuf>,
    /// The daemon binary.
    pub bin: PathBuf,
    /// How the daemon and `--cleanup` are started: given kube-proxy's arguments after `--config`
    /// (`--v=2`, `--cleanup`), a command ready to spawn. [`direct_launch`] by default; the image tests start
    /// the image's kube-proxy through a container runtime instead.
    pub launch: fn(&E2e, &[&str]) -> Command,
}

/// Runs this fixture's copy of the binary with its config file (legacy iptables, as UML needs).
pub fn direct_launch(e: &E2e, args: &[&str]) -> Command {
    let mut cmd = Command::new(&e.bin);
    cmd.arg(format!("--config={}", e.config_path.display()))
        .args(args)
        .env("KUBE_PROXY_IPTABLES_BACKEND", "legacy")
        .env("NO_COLOR", "1");
    cmd
}

impl Default for Options {
    fn default() -> Self {
        Options {
            node: NODE.to_string(),
            node_ip: NODE_IP.to_string(),
            extra_config: String::new(),
            sync_period: "30s".to_string(),
            client_connection: String::new(),
            api_protobuf: true,
            dir: None,
            bin: kube_proxy_bin(),
            launch: direct_launch,
        }
    }
}

/// A running daemon process with its log file; killed when dropped (shared by [`E2e`] and the
/// multi-node cluster's nodes).
pub struct Daemon {
    child: Child,
    /// The file holding its stdout and stderr.
    pub log: PathBuf,
}

impl Daemon {
    /// Spawns `cmd` with stdout and stderr into a new file `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Daemon {
        let file = std::fs::File::create(&log).expect("daemon log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Daemon { child, log }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait daemon")
    }

    /// Sends SIGTERM and waits up to [`STOP_TIMEOUT`] for the exit (panics with the log tail after that).
    pub fn terminate(self) -> ExitStatus {
        // The daemon finishes a sync in progress before it exits; a full sync takes tens of seconds in UML.
        self.terminate_within(STOP_TIMEOUT)
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit (panics with the log tail after that).
    pub fn terminate_within(mut self, timeout: Duration) -> ExitStatus {
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        self.wait_exit(timeout).unwrap_or_else(|| {
            panic!(
                "daemon did not stop within {timeout:?} of SIGTERM\n{}",
                tail(&read(&self.log), 40)
            )
        })
    }

    /// Waits up to `timeout` for the process to exit on its own; its status, or None if it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.exited() {
                return Some(st);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// Panics with the log when the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(st) = self.exited() {
            panic!("kube-proxy exited early ({st}):\n{}", self.log());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a test's `KubeProxyConfiguration` varies; [`KubeProxyConfig::yaml`] writes the file.
#[derive(Clone, Debug)]
pub struct KubeProxyConfig<'a> {
    /// `hostnameOverride` (empty: not written).
    pub node: &'a str,
    /// `clientConnection.kubeconfig`.
    pub kubeconfig: &'a Path,
    /// Extra lines inside `clientConnection:` (indented by two spaces).
    pub client_connection: &'a str,
    /// `healthzBindAddress`.
    pub healthz: &'a str,
    /// `metricsBindAddress`.
    pub metrics: &'a str,
    /// `clusterCIDR`.
    pub cluster_cidr: &'a str,
    /// `ipvs.syncPeriod`.
    pub sync_period: &'a str,
    /// Lines appended right after the `ipvs:` block (see [`Options::extra_config`]).
    pub extra: &'a str,
}

impl KubeProxyConfig<'_> {
    /// The configuration file's text (mode ipvs).
    pub fn yaml(&self) -> String {
        let host = if self.node.is_empty() {
            String::new()
        } else {
            format!("hostnameOverride: {}\n", self.node)
        };
        format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
             kind: KubeProxyConfiguration\n\
             mode: ipvs\n\
             {host}\
             clientConnection:\n  kubeconfig: {kc}\n{cc}\
             healthzBindAddress: {hz}\n\
             metricsBindAddress: {m}\n\
             clusterCIDR: {cidr}\n\
             ipvs:\n  syncPeriod: {sp}\n{extra}",
            kc = self.kubeconfig.display(),
            cc = self.client_connection,
            hz = self.healthz,
            m = self.metrics,
            cidr = self.cluster_cidr,
            sp = self.sync_period,
            extra = self.extra,
        )
    }
}

/// The end-to-end fixture.
pub struct E2e {
    /// The test API server the daemon watches.
    pub api: TestApiServer,
    /// Directory of the kubeconfig, config file and daemon logs.
    pub dir: PathBuf,
    /// Fixture options.
    pub opts: Options,
    /// Copy of the daemon binary used for every run of this fixture.
    pub bin: PathBuf,
    /// The config file passed with `--config`.
    pub config_path: PathBuf,
    daemon: Option<Daemon>,
    runs: usize,
}

impl E2e {
    /// Sets up the node address, starts the API server with the Node object and writes the config files.
    pub fn start(opts: Options) -> E2e {
        let api_opts = super::apiserver::Options {
            protobuf: opts.api_protobuf,
            ..Default::default()
        };
        let api =
            TestApiServer::start_with("127.0.0.1:0", api_opts).expect("start test API server");
        E2e::start_with_api(opts, api)
    }

    /// Like [`E2e::start`], with an API server started by the caller (e.g. in another network namespace).
    pub fn start_with_api(opts: Options, api: TestApiServer) -> E2e {
        let dir = match &opts.dir {
            Some(d) => d.clone(),
            None => super::uml::guest_run_dir()
                .expect("E2e runs inside the UML guest")
                .join("e2e"),
        };
        std::fs::create_dir_all(&dir).expect("create e2e dir");
        sh(&format!(
            "ip link show node0 >/dev/null 2>&1 || ip link add node0 type dummy; \
             ip addr replace {}/24 dev node0; ip link set node0 up",
            opts.node_ip
        ));
        // A private copy: another build in the shared target dir cannot swap the binary mid-test.
        let bin = dir.join("kube-proxy");
        std::fs::copy(&opts.bin, &bin)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", opts.bin.display(), bin.display()));
        api.apply_value(Kind::Node, node_json(&opts.node, &opts.node_ip))
            .expect("apply Node");
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let config_path = dir.join("config.yaml");
        let config = KubeProxyConfig {
            node: &opts.node,
            kubeconfig: &kubeconfig,
            client_connection: &opts.client_connection,
            healthz: HEALTHZ,
            metrics: METRICS,
            cluster_cidr: CLUSTER_CIDR,
            sync_period: &opts.sync_period,
            extra: &opts.extra_config,
        };
        std::fs::write(&config_path, config.yaml()).expect("write config");
        E2e {
            api,
            dir,
            opts,
            bin,
            config_path,
            daemon: None,
            runs: 0,
        }
    }

    /// Starts the daemon and waits until it has synced at least once.
    pub fn start_daemon(&mut self) {
        self.spawn_daemon();
        self.wait_for("the daemon's first sync", FIRST_SYNC_TIMEOUT, |e| {
            e.sync_count() >= 1.0
        });
    }

    /// Starts the daemon without waiting.
    pub fn spawn_daemon(&mut self) {
        assert!(self.daemon.is_none(), "daemon already running");
        self.runs += 1;
        let log = self.dir.join(format!("kube-proxy-{}.log", self.runs));
        self.daemon = Some(Daemon::spawn((self.opts.launch)(self, &["--v=2"]), log));
    }

    /// Sends SIGTERM, waits for the exit and returns its status.
    pub fn stop_daemon(&mut self) -> ExitStatus {
        self.daemon.take().expect("no daemon running").terminate()
    }

    /// Kills the daemon with SIGKILL (no cleanup, kernel state stays) and reaps it.
    pub fn kill_daemon(&mut self) {
        drop(self.daemon.take());
    }

    /// The pid of the running daemon (None when none runs).
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Daemon::pid)
    }

    /// Whether the daemon process is still running (None when none was started).
    pub fn daemon_exit(&mut self) -> Option<ExitStatus> {
        self.daemon.as_mut().and_then(Daemon::exited)
    }

    /// Runs `kube-proxy --cleanup` (same config file) and returns (status, combined output).
    pub fn cleanup(&self) -> (ExitStatus, String) {
        let out = (self.opts.launch)(self, &["--cleanup"])
            .output()
            .expect("run kube-proxy --cleanup");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status, text)
    }

    /// The log of the current (or last) daemon run.
    pub fn log(&self) -> String {
        read(&self.dir.join(format!("kube-proxy-{}.log", self.runs)))
    }

    /// The logs of every daemon run so far.
    pub fn all_logs(&self) -> String {
        (1..=self.runs)
            .map(|i| {
                format!(
                    "--- kube-proxy run {i} ---\n{}",
                    read(&self.dir.join(format!("kube-proxy-{i}.log")))
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Polls `cond` every 50 ms until it holds; panics after `timeout` with the daemon log tail and the
    /// kernel state. Also fails at once when the daemon exited.
    pub fn wait_for(&mut self, what: &str, timeout: Duration, mut cond: impl FnMut(&E2e) -> bool) {
        let start = Instant::now();
        loop {
            if cond(self) {
                return;
            }
            if let Some(st) = self.daemon_exit() {
                panic!(
                    "kube-proxy exited ({st}) while waiting for {what} (if it exited 0 at once, {} may be \
                     another worktree's build: the target dir is shared)\n{}",
                    self.opts.bin.display(),
                    tail(&self.log(), 60)
                );
            }
            if start.elapsed() > timeout {
                let stacks = self.daemon_stacks();
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n--- ipvsadm -Sn ---\n{}\n--- processes ---\n{}\n--- daemon threads ---\n{stacks}\n--- daemon log (tail) ---\n{}",
                    ipvs(),
                    sh(
                        "ps -eLo pid,tid,ppid,stat,wchan:24,etime,comm,args | grep -v ' \\[' || true"
                    ),
                    tail(&self.log(), 60)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Backtraces of the daemon's threads (gdb, when installed), for diagnosing a stuck daemon.
    pub fn daemon_stacks(&self) -> String {
        self.daemon
            .as_ref()
            .map(|d| process_stacks(d.pid()))
            .unwrap_or_default()
    }

    /// Waits until `ipvsadm -Sn` satisfies `cond`.
    pub fn wait_ipvs(&mut self, what: &str, cond: impl Fn(&str) -> bool) {
        self.wait_for(what, CONVERGE_TIMEOUT, |_| cond(&ipvs()));
    }

    /// Waits for at least `n` more syncs than `since` (a value of [`E2e::sync_count`]).
    pub fn wait_syncs(&mut self, since: f64, n: u32) {
        let target = since + f64::from(n);
        self.wait_for(
            &format!("{n} more sync(s) after {since}"),
            CONVERGE_TIMEOUT,
            |e| e.sync_count() >= target,
        );
    }

    /// The daemon's `/metrics` text (empty when unreachable).
    pub fn metrics(&self) -> String {
        http_get(METRICS.parse().expect("addr"), "/metrics")
            .map(|r| r.body)
            .unwrap_or_default()
    }

    /// Syncs done so far (sum of `kubeproxy_sync_proxy_rules_duration_seconds_count` over families).
    pub fn sync_count(&self) -> f64 {
        metric_sum(
            &self.metrics(),
            "kubeproxy_sync_proxy_rules_duration_seconds_count",
        )
    }

    /// GET on the daemon's healthz server.
    pub fn healthz(&self, path: &str) -> Option<HttpResponse> {
        http_get(HEALTHZ.parse().expect("addr"), path)
    }

    /// Creates or replaces an object given as JSON (`kind` from its `kind` field).
    pub fn apply(&self, obj: Value) -> u64 {
        let kind = obj["kind"].as_str().expect("object kind");
        let kind = Kind::from_kind(kind).unwrap_or_else(|| panic!("unserved kind {kind}"));
        self.api.apply_value(kind, obj).expect("apply")
    }

    /// Deletes a Service and its EndpointSlice `<name>-1` (as made by [`slice`]).
    pub fn delete_service(&self, name: &str) {
        self.api.delete(Kind::Service, "default", name);
        self.api
            .delete(Kind::EndpointSlice, "default", &format!("{name}-1"));
    }
}

/// Backtraces of the threads of process `pid` (gdb, when installed), for diagnosing a stuck daemon.
pub fn process_stacks(pid: u32) -> String {
    if !Path::new("/usr/bin/gdb").exists() {
        return "(gdb not installed)".to_string();
    }
    let out = Command::new("timeout")
        .args(["20", "gdb", "-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "set pagination off", "-ex", "thread apply all bt 25"])
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("Thread") || l.starts_with('#'))
            .map(|l| l.chars().take(160).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("gdb: {e}"),
    }
}

/// A Node object with an InternalIP.
pub fn node_json(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]}
    })
}

/// A Service in `default` with one port `p` (`port` → `target`, protocol `proto`); `spec` is merged in.
pub fn service(name: &str, cluster_ip: &str, proto: &str, port: u16, spec: Value) -> Value {
    let mut s = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
            "ports": [{"name": "p", "port": port, "targetPort": 8080, "protocol": proto}]
        }
    });
    merge(&mut s["spec"], spec);
    s
}

/// Merges `patch` into `target` (objects recursively, anything else replaced).
pub fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

/// The EndpointSlice `<service>-1` with port `p` = `port`/`proto` and endpoints (ip, nodeName, ready).
pub fn slice(service: &str, proto: &str, port: u16, endpoints: &[(&str, &str, bool)]) -> Value {
    let name = format!("{service}-1");
    slice_named(&name, service, "IPv4", proto, port, endpoints)
}

/// The EndpointSlice `name` of `service` with `addressType` `address_type` ("IPv4" or "IPv6"), port `p` =
/// `port`/`proto` and endpoints (ip, nodeName, ready).
pub fn slice_named(
    name: &str,
    service: &str,
    address_type: &str,
    proto: &str,
    port: u16,
    endpoints: &[(&str, &str, bool)],
) -> Value {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(ip, node, ready)| {
            json!({"addresses": [ip], "nodeName": node,
                   "conditions": {"ready": ready, "serving": ready, "terminating": !ready}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": address_type,
        "ports": [{"name": "p", "port": port, "protocol": proto}],
        "endpoints": eps
    })
}

/// `ipvsadm -Sn`.
pub fn ipvs() -> String {
    sh("ipvsadm -Sn")
}

/// The real servers (`ip:port`) of one virtual server (`-t`/`-u` + `vip:port`) in `ipvsadm -Sn` text.
pub fn real_servers(ipvs_text: &str, proto_flag: &str, vip_port: &str) -> Vec<String> {
    let mut v: Vec<String> = real_server_weights(ipvs_text, proto_flag, vip_port)
        .into_iter()
        .map(|(addr, _)| addr)
        .collect();
    v.sort();
    v
}

/// The real servers of one virtual server with their weights (`-w`, 1 when absent), in listed order.
pub fn real_server_weights(
    ipvs_text: &str,
    proto_flag: &str,
    vip_port: &str,
) -> Vec<(String, u32)> {
    let prefix = format!("-a {proto_flag} {vip_port} -r ");
    ipvs_text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let addr = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            let weight = rest
                .split_once("-w ")
                .and_then(|(_, w)| w.split_whitespace().next())
                .and_then(|w| w.parse().ok())
                .unwrap_or(1);
            (addr, weight)
        })
        .collect()
}

/// Whether `ipvsadm -Sn` text has the virtual server `-t`/`-u` `vip:port`.
pub fn has_vs(ipvs_text: &str, proto_flag: &str, vip_port: &str) -> bool {
    let prefix = format!("-A {proto_flag} {vip_port} ");
    ipvs_text.lines().any(|l| l.starts_with(&prefix))
}

/// Addresses on kube-ipvs0 (`ip/prefix`), sorted; empty when the link is absent.
pub fn ipvs0_addrs() -> Vec<String> {
    let out = sh("ip -o addr show dev kube-ipvs0 2>/dev/null || true");
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            it.find(|w| *w == "inet" || *w == "inet6")?;
            it.next().map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

/// Members of one ipset (empty when it does not exist).
pub fn set_members(set: &str) -> Vec<String> {
    let out = sh(&format!("ipset list {set} 2>/dev/null || true"));
    let mut v: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("Members:"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect();
    v.sort();
    v
}

/// The kernel state kube-proxy owns, in comparable form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelState {
    /// `ipvsadm -Sn`, lines sorted.
    pub ipvs: Vec<String>,
    /// `ipset save`, lines sorted.
    pub ipsets: Vec<String>,
    /// `iptables-save` without comments and counters (rule order kept).
    pub iptables: Vec<String>,
    /// kube-ipvs0 addresses.
    pub addrs: Vec<String>,
}

impl KernelState {
    /// Reads the current state.
    pub fn read() -> KernelState {
        let sorted = |s: String| {
            let mut v: Vec<String> = s.lines().map(str::to_string).collect();
            v.sort();
            v
        };
        KernelState {
            ipvs: sorted(ipvs()),
            ipsets: sorted(sh("ipset save")),
            iptables: iptables_save_clean(),
            addrs: ipvs0_addrs(),
        }
    }

    /// A line-level diff against `other`, for assertion messages.
    pub fn diff(&self, other: &KernelState) -> String {
        let mut out = String::new();
        for (what, a, b) in [
            ("ipvs", &self.ipvs, &other.ipvs),
            ("ipsets", &self.ipsets, &other.ipsets),
            ("iptables", &self.iptables, &other.iptables),
            ("kube-ipvs0", &self.addrs, &other.addrs),
        ] {
            for l in a.iter().filter(|l| !b.contains(l)) {
                out.push_str(&format!("{what} - {l}\n"));
            }
            for l in b.iter().filter(|l| !a.contains(l)) {
                out.push_str(&format!("{what} + {l}\n"));
            }
            if a != b && out.is_empty() {
                out.push_str(&format!("{what}: same lines, different order\n"));
            }
        }
        out
    }
}

/// `iptables-save` with comment lines dropped and chain counters removed.
pub fn iptables_save_clean() -> Vec<String> {
    sh("iptables-save")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            if l.starts_with(':') {
                // ":CHAIN POLICY [packets:bytes]"
                match l.rfind(" [") {
                    Some(i) => l[..i].to_string(),
                    None => l.to_string(),
                }
            } else {
                l.to_string()
            }
        })
        .collect()
}

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A plain HTTP/1.0 GET with a 2 s timeout; None when the connection or the response fails.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    let timeout = Duration::from_secs(2);
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(HttpResponse {
        status,
        headers,
        body: body.to_string(),
    })
}

/// Sum of every sample of metric `name` (any labels) in Prometheus text.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Reads a file (empty when missing).
pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// Creates pods (netns) `(name, ip)` behind gateway [`POD_GW`], each answering its name on TCP 8080 and
/// UDP 5353.
pub fn pods(specs: &[(&str, &str)]) -> Vec<super::netns::Pod> {
    specs
        .iter()
        .map(|(name, ip)| {
            let p = super::netns::Pod::create(name, ip, POD_GW)
                .unwrap_or_else(|e| panic!("pod {name}: {e:#}"));
            p.serve_tcp(8080).expect("serve tcp");
            p.serve_udp(5353).expect("serve udp");
            p
        })
        .collect()
}

/// A client namespace "outside" the node: `ip`/32 routed from the root namespace, default route via `gw`.
pub fn client(name: &str, ip: &str, gw: &str) -> super::netns::Pod {
    super::netns::Pod::create(name, ip, gw).unwrap_or_else(|e| panic!("client {name}: {e:#}"))
}

/// `n` TCP requests to `ip:port` through `f` (e.g. a client's `tcp_request`); panics on a failed request.
pub fn answers(n: usize, what: &str, mut f: impl FnMut() -> anyhow::Result<String>) -> Vec<String> {
    (0..n)
        .map(|i| f().unwrap_or_else(|e| panic!("{what}: request {i} failed: {e:#}")))
        .collect()
}

/// The distinct values of `v`, sorted.
pub fn distinct(v: &[String]) -> Vec<String> {
    let mut d: Vec<String> = v.to_vec();
    d.sort();
    d.dedup();
    d
}
