//! End to end, inside a UML guest: the real `kube-proxy` binary against the test API server serves a
//! ClusterIP TCP+UDP service backed by pods in network namespaces, follows scaling (graceful termination
//! of a removed TCP real server with an open connection), serves /healthz and /metrics, leaves its rules
//! in place on SIGTERM, and removes them with `--cleanup`.
mod common;

use common::apiserver::{Kind, TestApiServer};
use common::e2e::{
    Daemon, HEALTHZ, KubeProxyConfig, METRICS, NODE, NODE_IP, answers, distinct, http_get, ipvs,
    kube_proxy_bin, merge, node_json, real_server_weights,
};
use common::netns::{Held, Pod, serve_hold, tcp_request, udp_request};
use common::uml::{BootOptions, sh};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(3);
const VIP: &str = "10.96.0.50";
/// Service port 81 → pod port 9090: a server that keeps connections open and answers every line.
const HOLD_PORT: u16 = 9090;

/// What every step of the scenario shares: the binary's copy, the run directory, the API server and the
/// four pods (`pod-a` … `pod-d` at 10.244.1.11 … 14).
struct Scene {
    bin: PathBuf,
    dir: PathBuf,
    kubeconfig: PathBuf,
    api: TestApiServer,
    pods: Vec<Pod>,
}

impl Scene {
    /// The pods, and the API server with the Node, the Service `web` and its slice of pods a, b and c.
    fn new(bin: PathBuf, dir: PathBuf) -> Scene {
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
        let api = TestApiServer::start("127.0.0.1:0").unwrap();
        api.apply_value(Kind::Node, node(NODE_IP)).unwrap();
        api.apply_value(Kind::Service, web_service()).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        let scene = Scene {
            bin,
            dir,
            kubeconfig,
            api,
            pods,
        };
        scene.endpoints(3);
        scene
    }

    /// The slice of `web` with the first `n` pods.
    fn endpoints(&self, n: usize) {
        let pods: Vec<&Pod> = self.pods[..n].iter().collect();
        self.api
            .apply_value(Kind::EndpointSlice, slice(&pods))
            .unwrap();
    }

    /// Starts the daemon with `args`, logging to `log` in the run directory.
    fn daemon(&self, args: &[String], log: &str) -> Daemon {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("KUBE_PROXY_RS_GRACEFUL_CHECK_INTERVAL", "1s")
            .env("KUBE_PROXY_IPTABLES_BACKEND", "legacy")
            .env("KUBE_PROXY_LOG", "info,kube_proxy_rs=debug");
        Daemon::spawn(cmd, self.dir.join(log))
    }

    /// Writes the configuration file (the flags of the first run as fields, plus `extra`); its path.
    fn config_file(&self, extra: &str) -> PathBuf {
        let path = self.dir.join("config.yaml");
        let config = KubeProxyConfig {
            node: NODE,
            kubeconfig: &self.kubeconfig,
            client_connection: "",
            healthz: HEALTHZ,
            metrics: METRICS,
            cluster_cidr: "10.244.0.0/16",
            sync_period: "5m",
            extra,
        };
        std::fs::write(&path, config.yaml()).unwrap();
        path
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

/// Waits until the daemon's log contains `what` (false on timeout); panics if the daemon exits meanwhile.
fn wait_log(daemon: &mut Daemon, timeout: Duration, what: &str) -> bool {
    wait_for(timeout, || {
        daemon.assert_running();
        daemon.log().contains(what)
    })
}

/// Real servers of one virtual server of the VIP: (address:port, weight).
fn real_servers(proto: &str, port: u16) -> Vec<(String, u32)> {
    real_server_weights(&ipvs(), proto, &format!("{VIP}:{port}"))
}

/// The distinct pods that answered `n` requests through `f`.
fn answered(n: usize, f: impl Fn() -> anyhow::Result<String>) -> Vec<String> {
    distinct(&answers(n, VIP, f))
}

/// GET on the daemon's loopback servers: (status, body), panicking when it fails.
fn get(addr: &str, path: &str) -> (u16, String) {
    let r = http_get(addr.parse().unwrap(), path)
        .unwrap_or_else(|| panic!("GET http://{addr}{path} failed"));
    (r.status, r.body)
}

/// The value of the sample `name_and_labels` in Prometheus text.
fn metric_value(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn vip() -> IpAddr {
    VIP.parse().unwrap()
}

/// The Node with InternalIP `ip` and pod CIDR 10.244.1.0/24.
fn node(ip: &str) -> Value {
    let mut n = node_json(NODE, ip);
    merge(
        &mut n["spec"],
        json!({"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}),
    );
    n
}

/// `web`: TCP 80 → 8080, UDP 53 → 5353 and TCP 81 → the hold port.
fn web_service() -> Value {
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
    })
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

#[test]
fn clusterip_tcp_udp_scaling_graceful_sigterm_cleanup() {
    common::uml::run(
        "clusterip_tcp_udp_scaling_graceful_sigterm_cleanup",
        BootOptions {
            mem: "512M",
            timeout: Duration::from_secs(480),
        },
        clusterip_body,
    );
}

/// The scenario, one step a function, in order: each leaves the kernel and the daemon as the next needs.
fn clusterip_body() {
    let dir = common::uml::guest_run_dir().unwrap();
    // A private copy: another build in the target directory cannot swap the binary mid-test.
    let bin = dir.join("kube-proxy");
    std::fs::copy(kube_proxy_bin(), &bin).unwrap();
    // The node's own address.
    sh(&format!(
        "ip link add node0 type dummy && ip link set node0 up && ip addr add {NODE_IP}/24 dev node0"
    ));
    init_only_sets_sysctls_and_timeouts(&bin);
    let scene = Scene::new(bin, dir);
    let mut daemon = start_from_flags(&scene);
    three_pods_behind_the_vip(&mut daemon);
    health_and_metrics_endpoints();
    scale_to_four(&scene);
    let _busy = invalid_service_and_health_check_ports(&scene, &daemon);
    scale_down_drains_a_held_connection(&scene, &mut daemon);
    starting_event_names_the_node(&scene);
    sigterm_exits_cleanly_and_rules_stay(daemon);
    let cfg = scene.config_file("");
    let daemon = restart_adopts_the_rules(&scene, &cfg);
    node_ip_change_exits_non_zero(&scene, daemon);
    config_change_exits_non_zero(&scene, &cfg);
    cleanup_removes_everything(&scene.bin);
}

/// `--init-only`: sysctls and IPVS timeouts, then exit 0 without touching services.
fn init_only_sets_sysctls_and_timeouts(bin: &Path) {
    let out = Command::new(bin)
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
}

/// The first run, configured by flags only.
fn start_from_flags(scene: &Scene) -> Daemon {
    let args: Vec<String> = vec![
        format!("--kubeconfig={}", scene.kubeconfig.display()),
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
    scene.daemon(&args, "kube-proxy.log")
}

/// Step 1: Three pods behind the ClusterIP, TCP and UDP; the IPv6 proxier runs too.
fn three_pods_behind_the_vip(daemon: &mut Daemon) {
    let started = Instant::now();
    let ready = wait_for(Duration::from_secs(90), || {
        daemon.assert_running();
        real_servers("-u", 53).len() == 3 && real_servers("-t", 80).len() == 3
    });
    println!("service programmed after {:?}", started.elapsed());
    assert!(
        ready,
        "IPVS never showed the service:\n{}\n--- log ---\n{}",
        ipvs(),
        daemon.log()
    );
    let addrs = sh("ip -4 -o addr show dev kube-ipvs0");
    assert!(addrs.contains(&format!("{VIP}/32")), "{addrs}");
    let abc = ["pod-a", "pod-b", "pod-c"];
    assert_eq!(answered(9, || tcp_request(vip(), 80, T)), abc);
    assert_eq!(answered(9, || udp_request(vip(), 53, T)), abc);
    // The guest kernel has IPv6, so the IPv6 proxier runs too (as upstream's dual-stack proxier does),
    // sharing the IPVS handle and kube-ipvs0.
    assert!(sh("ip6tables-save -t nat").contains(":KUBE-SERVICES"));
    assert!(sh("ipset list -n").contains("KUBE-6-CLUSTER-IP"));
}

/// Step 2: /healthz, /proxyMode and /metrics (a sync counted, the heap gauge).
fn health_and_metrics_endpoints() {
    let (code, body) = get(HEALTHZ, "/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("\"healthy\":true") || body.contains("\"healthy\": true"),
        "{body}"
    );
    let (code, mode) = get(METRICS, "/proxyMode");
    assert_eq!((code, mode.trim()), (200, "ipvs"));
    let (code, metrics) = get(METRICS, "/metrics");
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
}

/// Step 3: Scale to four: the new pod gets traffic, and the change's programming latency is measured.
fn scale_to_four(scene: &Scene) {
    scene.endpoints(4);
    assert!(
        wait_for(Duration::from_secs(45), || real_servers("-t", 80).len()
            == 4),
        "pod-d never added:\n{}",
        ipvs()
    );
    assert_eq!(
        answered(12, || tcp_request(vip(), 80, T)),
        ["pod-a", "pod-b", "pod-c", "pod-d"]
    );
    let (_, metrics) = get(METRICS, "/metrics");
    let programmed = metric_value(
        &metrics,
        "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"}",
    )
    .unwrap_or(0.0);
    assert!(
        programmed >= 1.0,
        "no network programming latency:\n{metrics}"
    );
}

/// Step 3b: An invalid Service is skipped with a Warning event and a metric; health-check node ports of
/// externalTrafficPolicy=Local services answer with the local endpoint count, and a port that cannot be
/// opened gives a Warning event. Returns the listener that keeps that port busy.
fn invalid_service_and_health_check_ports(scene: &Scene, daemon: &Daemon) -> TcpListener {
    let api = &scene.api;
    let mut broken = lb_service("broken", "999.1.2.3", 30097, 31997);
    broken["spec"]["type"] = json!("ClusterIP");
    api.apply_value(Kind::Service, broken).unwrap();
    let busy = TcpListener::bind("0.0.0.0:31999").unwrap();
    api.apply_value(
        Kind::Service,
        lb_service("lb-busy", "10.96.0.61", 30099, 31999),
    )
    .unwrap();
    api.apply_value(Kind::Service, lb_service("lb", "10.96.0.60", 30098, 31998))
        .unwrap();
    let mut lb_slice = slice(&[&scene.pods[0]]);
    lb_slice["metadata"]["name"] = json!("lb-e2e");
    lb_slice["metadata"]["labels"]["kubernetes.io/service-name"] = json!("lb");
    api.apply_value(Kind::EndpointSlice, lb_slice).unwrap();
    let health: SocketAddr = "127.0.0.1:31998".parse().unwrap();
    let mut hc = (0, String::new());
    assert!(
        wait_for(Duration::from_secs(45), || {
            hc = http_get(health, "/healthz").map_or((0, String::new()), |r| (r.status, r.body));
            hc.0 == 200
        }),
        "health check never healthy: {hc:?}\n{}",
        daemon.log()
    );
    assert!(hc.1.contains("\"localEndpoints\": 1"), "{}", hc.1);
    assert!(
        wait_for(Duration::from_secs(20), || {
            let ev = api.events_json();
            ev.iter()
                .any(|e| e["reason"] == "FailedToStartServiceHealthcheck" && e["type"] == "Warning")
                && ev
                    .iter()
                    .any(|e| e["reason"] == "InvalidService" && e["type"] == "Warning")
        }),
        "missing warning events: {:#?}",
        api.events_json()
    );
    let (_, metrics) = get(METRICS, "/metrics");
    let invalid = metric_value(
        &metrics,
        "kubeproxy_rs_invalid_objects_total{kind=\"Service\"}",
    )
    .unwrap_or(0.0);
    assert!(invalid >= 1.0, "{metrics}");
    assert!(
        ipvs().contains("-A -t 10.0.0.10:30098"),
        "NodePort virtual server on the node IP:\n{}",
        ipvs()
    );
    busy
}

/// Step 4: A long-lived connection lands on pod-c, then the Service scales down to two: UDP goes at once,
/// pod-c drains at weight 0 while its connection works, and goes once the connection does.
fn scale_down_drains_a_held_connection(scene: &Scene, daemon: &mut Daemon) {
    let hold_vip: SocketAddr = format!("{VIP}:81").parse().unwrap();
    let mut held = (0..8)
        .map(|_| Held::connect(hold_vip, T))
        .find_map(|mut conn| (conn.ask() == "pod-c").then_some(conn))
        .expect("no connection reached pod-c");
    scene.endpoints(2);
    let c_hold = format!("{}:{HOLD_PORT}", scene.pods[2].ip);
    assert!(
        wait_for(Duration::from_secs(45), || real_servers("-u", 53).len()
            == 2),
        "UDP real servers not removed at once:\n{}",
        ipvs()
    );
    let hold_rs = real_servers("-t", 81);
    assert!(
        hold_rs.contains(&(c_hold.clone(), 0)),
        "pod-c with an open connection should drain at weight 0: {hold_rs:?}"
    );
    // The open connection keeps working; new connections only reach the remaining pods.
    assert_eq!(held.ask(), "pod-c");
    assert_eq!(
        answered(8, || tcp_request(vip(), 80, T)),
        ["pod-a", "pod-b"]
    );
    // Once the connection is gone (RST: IPVS forgets it after its 10 s CLOSE state), the drained real
    // server is deleted by the graceful-termination check.
    held.reset();
    assert!(
        wait_for(Duration::from_secs(40), || {
            !real_servers("-t", 81)
                .iter()
                .any(|(addr, _)| *addr == c_hold)
        }),
        "drained real server never deleted:\n{}",
        ipvs()
    );
    daemon.assert_running();
}

/// Step 5: Events: Starting, regarding the Node, from kube-proxy.
fn starting_event_names_the_node(scene: &Scene) {
    let events = scene.api.events_json();
    assert!(
        events.iter().any(|e| e["reason"] == "Starting"
            && e["reportingController"] == "kube-proxy"
            && e["regarding"]["kind"] == "Node"
            && e["regarding"]["name"] == NODE),
        "{events:#?}"
    );
}

/// Step 6: SIGTERM: clean exit 0, the rules stay and traffic keeps flowing.
fn sigterm_exits_cleanly_and_rules_stay(daemon: Daemon) {
    let log = daemon.log.clone();
    let status = daemon.terminate_within(Duration::from_secs(15));
    assert!(
        status.success(),
        "exit {status}:\n{}",
        common::e2e::read(&log)
    );
    // pod-c and pod-d may still drain at weight 0 (their earlier connections sit in TIME_WAIT).
    let serving: Vec<String> = real_servers("-t", 80)
        .into_iter()
        .filter(|(_, w)| *w > 0)
        .map(|(addr, _)| addr)
        .collect();
    assert_eq!(distinct(&serving), ["10.244.1.11:8080", "10.244.1.12:8080"]);
    assert!(sh("ip -4 -o addr show dev kube-ipvs0").contains(VIP));
    assert_eq!(
        answered(4, || tcp_request(vip(), 80, T)),
        ["pod-a", "pod-b"],
        "traffic keeps flowing while kube-proxy is down"
    );
}

/// Step 7: A restart (from a config file) adopts the rules in place and keeps serving.
fn restart_adopts_the_rules(scene: &Scene, cfg: &Path) -> Daemon {
    let mut daemon = scene.daemon(&[format!("--config={}", cfg.display())], "kube-proxy-2.log");
    assert!(
        wait_log(
            &mut daemon,
            Duration::from_secs(90),
            "SyncProxyRules complete"
        ),
        "restarted daemon never synced:\n{}",
        daemon.log()
    );
    assert_eq!(
        answered(4, || tcp_request(vip(), 80, T)),
        ["pod-a", "pod-b"]
    );
    daemon
}

/// Step 8: The Node's IP changes: kube-proxy exits non-zero so that it restarts with the new IP.
fn node_ip_change_exits_non_zero(scene: &Scene, daemon: Daemon) {
    scene
        .api
        .apply_value(Kind::Node, node("10.0.0.11"))
        .unwrap();
    exits_non_zero_saying(daemon, Duration::from_secs(60), "node IPs changed");
}

/// Step 9: The config file changes: kube-proxy exits non-zero (upstream's behaviour).
fn config_change_exits_non_zero(scene: &Scene, cfg: &Path) {
    let mut daemon = scene.daemon(&[format!("--config={}", cfg.display())], "kube-proxy-3.log");
    assert!(
        wait_log(&mut daemon, Duration::from_secs(60), "Using ipvs Proxier"),
        "{}",
        daemon.log()
    );
    scene.config_file("# edited\n");
    exits_non_zero_saying(
        daemon,
        Duration::from_secs(90),
        "configuration file was updated",
    );
}

/// Waits up to `timeout` for the daemon to exit on its own, non-zero, with `why` in its log.
fn exits_non_zero_saying(mut daemon: Daemon, timeout: Duration, why: &str) {
    let status = daemon
        .wait_exit(timeout)
        .unwrap_or_else(|| panic!("no exit ({why}):\n{}", daemon.log()));
    assert!(!status.success(), "{status}");
    assert!(daemon.log().contains(why), "{}", daemon.log());
}

/// Step 10: `--cleanup` removes everything and exits 0.
fn cleanup_removes_everything(bin: &Path) {
    let out = Command::new(bin)
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
    assert!(!ipvs().contains(VIP));
    assert!(!sh("ip link").contains("kube-ipvs0"));
    assert!(!sh("iptables-save").contains("KUBE-"));
    assert!(!sh("ipset list -n").contains("KUBE-"));
}
