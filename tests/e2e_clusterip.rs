//! End to end, inside a UML guest: the real `kube-proxy` binary against the test API server serves a
//! ClusterIP TCP+UDP service backed by pods in network namespaces, follows scaling (graceful termination
//! of a removed TCP real server with an open connection), serves /healthz and /metrics, leaves its rules
//! in place on SIGTERM, and removes them with `--cleanup`.
mod common;

use common::apiserver::{Kind, TestApiServer};
use common::netns::{Pod, serve_hold, tcp_request, udp_request};
use common::uml::{BootOptions, sh};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(3);
const NODE: &str = "e2e-node";
const NODE_IP: &str = "10.0.0.10";
const VIP: &str = "10.96.0.50";
const HEALTHZ: &str = "127.0.0.1:10256";
const METRICS: &str = "127.0.0.1:10249";
/// Service port 81 → pod port 9090: a server that keeps connections open and answers every line.
const HOLD_PORT: u16 = 9090;

/// The daemon process; killed when dropped so no test leaves it running.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

/// Where the host stashes the binary under test before booting the guest: the target directory is
/// shared with concurrent builds of other branches, which may replace `CARGO_BIN_EXE_kube-proxy` at any
/// time, so it is copied the moment the test starts (right after cargo built it).
fn stash_path() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-clusterip-kube-proxy")
}

/// Whether `path` is a daemon build (it contains the daemon's hidden environment variable name).
fn is_daemon_binary(path: &Path) -> bool {
    let marker = b"KUBE_PROXY_RS_GRACEFUL_CHECK_INTERVAL";
    std::fs::read(path).is_ok_and(|bytes| bytes.windows(marker.len()).any(|w| w == marker))
}

fn assert_daemon_binary(path: &Path) {
    assert!(
        is_daemon_binary(path),
        "{} is not a daemon build (replaced by a concurrent build of another branch?); rerun the test",
        path.display()
    );
}

/// The binary under test. In a target directory shared by several checkouts, the uplifted
/// `CARGO_BIN_EXE_kube-proxy` may be another checkout's build (cargo does not re-link a fresh binary);
/// then the newest daemon build among `deps/kube_proxy-*` is used.
fn binary_under_test() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_kube-proxy"));
    if is_daemon_binary(&exe) {
        return exe;
    }
    let deps = exe.parent().unwrap().join("deps");
    let newest = std::fs::read_dir(&deps)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("kube_proxy-") && !n.contains('.'))
        })
        .filter(|p| is_daemon_binary(p))
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    let found = newest.unwrap_or(exe);
    println!("binary under test: {}", found.display());
    found
}

/// The guest's private copy of the stashed binary.
fn binary(dir: &Path) -> PathBuf {
    let copy = dir.join("kube-proxy");
    std::fs::copy(stash_path(), &copy).unwrap();
    assert_daemon_binary(&copy);
    copy
}

impl Daemon {
    fn spawn(bin: &Path, args: &[String], log: &Path) -> Daemon {
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .env("KUBE_PROXY_RS_GRACEFUL_CHECK_INTERVAL", "1s")
            .env("KUBE_PROXY_IPTABLES_BACKEND", "legacy")
            .env("KUBE_PROXY_LOG", "info,kube_proxy_rs=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn kube-proxy");
        Daemon {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `what` (false on timeout); panics if the daemon exits meanwhile.
    fn wait_log(&mut self, timeout: Duration, what: &str) -> bool {
        wait_for(timeout, || {
            self.assert_running();
            self.log().contains(what)
        })
    }

    fn assert_running(&mut self) {
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            panic!("kube-proxy exited early ({status}):\n{}", self.log());
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("daemon already stopped");
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("kube-proxy did not exit after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `cond` every 500 ms until it holds or `timeout` passes (the guest has one slow CPU: polling
/// harder would starve the daemon of process spawns).
fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `ipvsadm -Sn` (run directly, without a shell).
fn ipvs_save() -> String {
    let out = Command::new("ipvsadm").arg("-Sn").output().unwrap();
    assert!(out.status.success(), "ipvsadm -Sn failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Real servers of one virtual server from `ipvsadm -Sn`: (address:port, weight).
fn real_servers(proto: &str, vs: &str) -> Vec<(String, u32)> {
    let prefix = format!("-a {proto} {vs} -r ");
    ipvs_save()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let mut it = rest.split_whitespace();
            let addr = it.next().unwrap_or_default().to_string();
            let weight = rest
                .split_once("-w ")
                .and_then(|(_, w)| w.split_whitespace().next())
                .and_then(|w| w.parse().ok())
                .unwrap_or(1);
            (addr, weight)
        })
        .collect()
}

/// The names that answered `n` requests.
fn answers(n: usize, f: impl Fn() -> anyhow::Result<String>) -> BTreeSet<String> {
    (0..n)
        .map(|i| f().unwrap_or_else(|e| panic!("request {i} failed: {e:#}")))
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// GET over HTTP/1.1: (status code, body).
fn try_http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(T))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// A connection to the hold port through the VIP; `ask` sends a line and returns the answering pod.
struct Held {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Held {
    fn open() -> Held {
        let w = TcpStream::connect_timeout(&format!("{VIP}:81").parse().unwrap(), T).unwrap();
        w.set_read_timeout(Some(T)).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Held { w, r }
    }

    fn ask(&mut self) -> anyhow::Result<String> {
        writeln!(self.w, "hello")?;
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        Ok(line.trim().to_string())
    }

    /// Closes with a RST (SO_LINGER 0): IPVS moves the connection to CLOSE (10 s) instead of TIME_WAIT (2 min).
    fn reset(self) {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on an open socket with a correctly sized linger struct.
        unsafe {
            libc::setsockopt(
                self.w.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

fn slice(pods: &[&Pod]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|p| {
            json!({
                "addresses": [p.ip.to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": NODE,
                "targetRef": {"kind": "Pod", "namespace": "default", "name": p.name},
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "web-e2e",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "web"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": now_rfc3339()},
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "dns", "port": 5353, "protocol": "UDP"},
            {"name": "hold", "port": HOLD_PORT, "protocol": "TCP"},
        ],
    })
}

/// A LoadBalancer service with externalTrafficPolicy Local (so a health-check node port).
fn lb_service(name: &str, cluster_ip: &str, node_port: u16, health_port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": cluster_ip,
            "clusterIPs": [cluster_ip],
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": health_port,
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": node_port}],
        },
    })
}

fn config_file(path: &Path, kubeconfig: &Path, extra: &str) {
    std::fs::write(
        path,
        format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n\
             clientConnection:\n  kubeconfig: {}\nhostnameOverride: {NODE}\nclusterCIDR: 10.244.0.0/16\n\
             healthzBindAddress: {HEALTHZ}\nmetricsBindAddress: {METRICS}\nipvs:\n  syncPeriod: 5m\n{extra}",
            kubeconfig.display()
        ),
    )
    .unwrap();
}

/// Waits for the daemon to exit on its own; its status.
fn wait_exit(daemon: &mut Daemon, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    let child = daemon.child.as_mut()?;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            daemon.child = None;
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn metric_value(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn clusterip_tcp_udp_scaling_graceful_sigterm_cleanup() {
    if !common::uml::in_guest() {
        std::fs::copy(binary_under_test(), stash_path()).unwrap();
        assert_daemon_binary(&stash_path());
    }
    common::uml::run(
        "clusterip_tcp_udp_scaling_graceful_sigterm_cleanup",
        BootOptions {
            mem: "512M",
            timeout: Duration::from_secs(480),
        },
        clusterip_body,
    );
}

fn clusterip_body() {
    {
        let dir = common::uml::guest_run_dir().unwrap();
        let bin = binary(&dir);
        // The node's own address.
        sh(&format!(
            "ip link add node0 type dummy && ip link set node0 up && ip addr add {NODE_IP}/24 dev node0"
        ));

        // --init-only: sysctls and IPVS timeouts, then exit 0 without touching services.
        let out = Command::new(&bin)
            .args([
                "--init-only",
                "--hostname-override=e2e-node",
                "--ipvs-tcp-timeout=901s",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "--init-only failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sh("cat /proc/sys/net/ipv4/vs/conntrack").trim(), "1");
        assert_eq!(sh("cat /proc/sys/net/ipv4/ip_forward").trim(), "1");
        let timeouts = sh("ipvsadm -L --timeout");
        assert!(timeouts.contains("901"), "{timeouts}");
        assert!(!sh("ip link").contains("kube-ipvs0"));

        let pods: Vec<Pod> = ["pod-a", "pod-b", "pod-c", "pod-d"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let p = Pod::create(name, &format!("10.244.1.{}", 11 + i), "10.244.1.1").unwrap();
                p.serve_tcp(8080).unwrap();
                p.serve_udp(5353).unwrap();
                serve_hold(&p, HOLD_PORT);
                p
            })
            .collect();
        let (a, b, c, d) = (&pods[0], &pods[1], &pods[2], &pods[3]);

        let api = TestApiServer::start("127.0.0.1:0").unwrap();
        api.apply_value(
            Kind::Node,
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
                "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
                "status": {"addresses": [
                    {"type": "InternalIP", "address": NODE_IP},
                    {"type": "Hostname", "address": NODE},
                ]},
            }),
        )
        .unwrap();
        api.apply_value(
            Kind::Service,
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": VIP,
                    "clusterIPs": [VIP],
                    "ports": [
                        {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                        {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"},
                        {"name": "hold", "port": 81, "targetPort": HOLD_PORT, "protocol": "TCP"},
                    ],
                },
            }),
        )
        .unwrap();
        api.apply_value(Kind::EndpointSlice, slice(&[a, b, c]))
            .unwrap();
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();

        let args: Vec<String> = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--hostname-override={NODE}"),
            "--proxy-mode=ipvs".into(),
            "--cluster-cidr=10.244.0.0/16".into(),
            format!("--healthz-bind-address={HEALTHZ}"),
            format!("--metrics-bind-address={METRICS}"),
            // Process spawns cost ~0.5 s in this guest, so a full sync takes many seconds: keep the
            // periodic full sync out of the way of the event-driven ones.
            "--ipvs-sync-period=5m".into(),
        ];
        // Cost of one iptables process in this guest (the sync's dominant cost here), for the log.
        let t0 = Instant::now();
        for _ in 0..10 {
            let _ = Command::new("iptables")
                .args(["-w", "5", "-t", "nat", "-C", "OUTPUT", "-j", "ACCEPT"])
                .output();
        }
        println!("10 iptables -C from the test: {:?}", t0.elapsed());
        let started = Instant::now();
        let mut daemon = Daemon::spawn(&bin, &args, &dir.join("kube-proxy.log"));

        // 1. Three pods behind the ClusterIP, TCP and UDP.
        let vip: IpAddr = VIP.parse().unwrap();
        let ready = wait_for(Duration::from_secs(90), || {
            daemon.assert_running();
            real_servers("-u", &format!("{VIP}:53")).len() == 3
                && real_servers("-t", &format!("{VIP}:80")).len() == 3
        });
        println!("service programmed after {:?}", started.elapsed());
        assert!(
            ready,
            "IPVS never showed the service:\n{}\n--- log ---\n{}",
            sh("ipvsadm -Sn"),
            daemon.log()
        );
        let addrs = sh("ip -4 -o addr show dev kube-ipvs0");
        assert!(addrs.contains(&format!("{VIP}/32")), "{addrs}");
        assert_eq!(
            answers(9, || tcp_request(vip, 80, T)),
            set(&["pod-a", "pod-b", "pod-c"])
        );
        assert_eq!(
            answers(9, || udp_request(vip, 53, T)),
            set(&["pod-a", "pod-b", "pod-c"])
        );

        // The guest kernel has IPv6, so the IPv6 proxier runs too (as upstream's dual-stack proxier does),
        // sharing the IPVS handle and kube-ipvs0.
        assert!(sh("ip6tables-save -t nat").contains(":KUBE-SERVICES"));
        assert!(sh("ipset list -n").contains("KUBE-6-CLUSTER-IP"));

        // 2. HTTP endpoints.
        let (code, body) = http_get(HEALTHZ, "/healthz");
        assert_eq!(code, 200, "{body}");
        assert!(
            body.contains("\"healthy\":true") || body.contains("\"healthy\": true"),
            "{body}"
        );
        let (code, mode) = http_get(METRICS, "/proxyMode");
        assert_eq!((code, mode.trim()), (200, "ipvs"));
        let (code, metrics) = http_get(METRICS, "/metrics");
        assert_eq!(code, 200);
        let count = metric_value(
            &metrics,
            "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}",
        )
        .unwrap_or_else(|| panic!("no sync duration metric:\n{metrics}"));
        assert!(count >= 1.0, "{count}");
        // The allocator's bytes in use, read at scrape time (glibc): the daemon holds at least its caches.
        let heap = metric_value(&metrics, "kubeproxy_rs_heap_inuse_bytes")
            .unwrap_or_else(|| panic!("no heap gauge:\n{metrics}"));
        assert!(heap > 1_000_000.0, "heap in use {heap}");

        // 3. Scale to four: the new pod gets traffic.
        api.apply_value(Kind::EndpointSlice, slice(&[a, b, c, d]))
            .unwrap();
        assert!(
            wait_for(Duration::from_secs(45), || real_servers(
                "-t",
                &format!("{VIP}:80")
            )
            .len()
                == 4),
            "pod-d never added:\n{}",
            sh("ipvsadm -Sn")
        );
        assert_eq!(
            answers(12, || tcp_request(vip, 80, T)),
            set(&["pod-a", "pod-b", "pod-c", "pod-d"])
        );
        let (_, metrics) = http_get(METRICS, "/metrics");
        let programmed = metric_value(
            &metrics,
            "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"}",
        )
        .unwrap_or(0.0);
        assert!(
            programmed >= 1.0,
            "no network programming latency:\n{metrics}"
        );

        // 3b. An invalid Service is skipped with a Warning event and a metric; health-check node ports of
        // externalTrafficPolicy=Local services answer with the local endpoint count, and a port that
        // cannot be opened gives a Warning event.
        let mut broken = lb_service("broken", "999.1.2.3", 30097, 31997);
        broken["spec"]["type"] = json!("ClusterIP");
        api.apply_value(Kind::Service, broken).unwrap();
        let _busy = TcpListener::bind("0.0.0.0:31999").unwrap();
        api.apply_value(
            Kind::Service,
            lb_service("lb-busy", "10.96.0.61", 30099, 31999),
        )
        .unwrap();
        api.apply_value(Kind::Service, lb_service("lb", "10.96.0.60", 30098, 31998))
            .unwrap();
        let mut lb_slice = slice(&[a]);
        lb_slice["metadata"]["name"] = json!("lb-e2e");
        lb_slice["metadata"]["labels"]["kubernetes.io/service-name"] = json!("lb");
        api.apply_value(Kind::EndpointSlice, lb_slice).unwrap();
        let mut hc = (0, String::new());
        assert!(
            wait_for(Duration::from_secs(45), || {
                hc = try_http_get("127.0.0.1:31998", "/healthz").unwrap_or((0, String::new()));
                hc.0 == 200
            }),
            "health check never healthy: {hc:?}\n{}",
            daemon.log()
        );
        assert!(hc.1.contains("\"localEndpoints\": 1"), "{}", hc.1);
        assert!(
            wait_for(Duration::from_secs(20), || {
                let ev = api.events_json();
                ev.iter().any(|e| {
                    e["reason"] == "FailedToStartServiceHealthcheck" && e["type"] == "Warning"
                }) && ev
                    .iter()
                    .any(|e| e["reason"] == "InvalidService" && e["type"] == "Warning")
            }),
            "missing warning events: {:#?}",
            api.events_json()
        );
        let (_, metrics) = http_get(METRICS, "/metrics");
        let invalid = metric_value(
            &metrics,
            "kubeproxy_rs_invalid_objects_total{kind=\"Service\"}",
        )
        .unwrap_or(0.0);
        assert!(invalid >= 1.0, "{metrics}");
        assert!(
            ipvs_save().contains("-A -t 10.0.0.10:30098"),
            "NodePort virtual server on the node IP:\n{}",
            ipvs_save()
        );

        // 4. Open a long-lived connection that lands on pod-c, then scale down to two.
        let mut held = None;
        for _ in 0..8 {
            let mut conn = Held::open();
            if conn.ask().unwrap() == "pod-c" {
                held = Some(conn);
                break;
            }
        }
        let mut held = held.expect("no connection reached pod-c");
        api.apply_value(Kind::EndpointSlice, slice(&[a, b]))
            .unwrap();
        let c_hold = format!("{}:{HOLD_PORT}", c.ip);
        assert!(
            wait_for(Duration::from_secs(45), || {
                real_servers("-u", &format!("{VIP}:53")).len() == 2
            }),
            "UDP real servers not removed at once:\n{}",
            sh("ipvsadm -Sn")
        );
        let hold_rs = real_servers("-t", &format!("{VIP}:81"));
        assert!(
            hold_rs.contains(&(c_hold.clone(), 0)),
            "pod-c with an open connection should drain at weight 0: {hold_rs:?}"
        );
        // The open connection keeps working; new connections only reach the remaining pods.
        assert_eq!(held.ask().unwrap(), "pod-c");
        assert_eq!(
            answers(8, || tcp_request(vip, 80, T)),
            set(&["pod-a", "pod-b"])
        );
        // Once the connection is gone (RST: IPVS forgets it after its 10 s CLOSE state), the drained real
        // server is deleted by the graceful-termination check.
        held.reset();
        assert!(
            wait_for(Duration::from_secs(40), || {
                !real_servers("-t", &format!("{VIP}:81"))
                    .iter()
                    .any(|(addr, _)| *addr == c_hold)
            }),
            "drained real server never deleted:\n{}",
            sh("ipvsadm -Sn")
        );
        daemon.assert_running();

        // 5. Events: Starting, regarding the Node, from kube-proxy.
        let events = api.events_json();
        assert!(
            events.iter().any(|e| e["reason"] == "Starting"
                && e["reportingController"] == "kube-proxy"
                && e["regarding"]["kind"] == "Node"
                && e["regarding"]["name"] == NODE),
            "{events:#?}"
        );

        // 6. SIGTERM: clean exit 0, rules stay.
        let status = daemon.terminate(Duration::from_secs(15));
        assert!(status.success(), "exit {status}:\n{}", daemon.log());
        // pod-c and pod-d may still drain at weight 0 (their earlier connections sit in TIME_WAIT).
        let serving: BTreeSet<String> = real_servers("-t", &format!("{VIP}:80"))
            .into_iter()
            .filter(|(_, w)| *w > 0)
            .map(|(addr, _)| addr)
            .collect();
        assert_eq!(serving, set(&["10.244.1.11:8080", "10.244.1.12:8080"]));
        assert!(sh("ip -4 -o addr show dev kube-ipvs0").contains(VIP));
        assert_eq!(
            answers(4, || tcp_request(vip, 80, T)),
            set(&["pod-a", "pod-b"]),
            "traffic keeps flowing while kube-proxy is down"
        );

        // 7. A restart (from a config file) adopts the rules in place and keeps serving.
        let cfg = dir.join("config.yaml");
        config_file(&cfg, &kubeconfig, "");
        let cfg_args = vec![format!("--config={}", cfg.display())];
        let mut daemon = Daemon::spawn(&bin, &cfg_args, &dir.join("kube-proxy-2.log"));
        assert!(
            daemon.wait_log(Duration::from_secs(90), "SyncProxyRules complete"),
            "restarted daemon never synced:\n{}",
            daemon.log()
        );
        assert_eq!(
            answers(4, || tcp_request(vip, 80, T)),
            set(&["pod-a", "pod-b"])
        );

        // 8. The Node's IP changes: kube-proxy exits non-zero so that it restarts with the new IP.
        api.apply_value(
            Kind::Node,
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
                "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
                "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.11"}]},
            }),
        )
        .unwrap();
        let status = wait_exit(&mut daemon, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("no exit on node IP change:\n{}", daemon.log()));
        assert!(!status.success(), "{status}");
        assert!(
            daemon.log().contains("node IPs changed"),
            "{}",
            daemon.log()
        );

        // 9. The config file changes: kube-proxy exits non-zero (upstream's behaviour).
        let mut daemon = Daemon::spawn(&bin, &cfg_args, &dir.join("kube-proxy-3.log"));
        assert!(
            daemon.wait_log(Duration::from_secs(60), "Using ipvs Proxier"),
            "{}",
            daemon.log()
        );
        config_file(&cfg, &kubeconfig, "# edited\n");
        let status = wait_exit(&mut daemon, Duration::from_secs(90))
            .unwrap_or_else(|| panic!("no exit on config change:\n{}", daemon.log()));
        assert!(!status.success(), "{status}");
        assert!(
            daemon.log().contains("configuration file was updated"),
            "{}",
            daemon.log()
        );

        // 10. --cleanup removes everything and exits 0.
        let out = Command::new(&bin)
            .arg("--cleanup")
            .arg(format!("--hostname-override={NODE}"))
            .env("KUBE_PROXY_IPTABLES_BACKEND", "legacy")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cleanup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!sh("ipvsadm -Sn").contains(VIP));
        assert!(!sh("ip link").contains("kube-ipvs0"));
        assert!(!sh("iptables-save").contains("KUBE-"));
        assert!(!sh("ipset list -n").contains("KUBE-"));
    }
}
