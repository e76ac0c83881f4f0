//! End-to-end lifecycle of the real `kube-proxy` daemon in a UML guest: restart under traffic, API server
//! watch loss with expired history, and `--cleanup`.
mod common;

use common::apiserver::Kind;
use common::e2e::{
    ABC, E2e, KernelState, METRICS, NODE, Options, abc_pods, boot, client, distinct, has_vs,
    http_get, ip, ipvs, ipvs0_addrs, metric_sum, real_servers, service, slice,
};
use common::uml::sh;
use serde_json::json;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(2);

/// A varied cluster state (ClusterIP TCP+UDP, NodePort, ExternalIP, LB with source ranges, ETP=Local) so
/// that every chain and most sets are in use.
fn load_cluster(e: &E2e) {
    e.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
    e.apply(slice("web", "TCP", 8080, ABC));
    e.apply(service("dns", "10.96.0.53", "UDP", 53, json!({})));
    e.apply(slice("dns", "UDP", 5353, ABC));
    e.apply(service(
        "np",
        "10.96.0.20",
        "TCP",
        80,
        json!({"type": "NodePort", "externalIPs": ["192.168.99.10"],
               "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}]}),
    ));
    e.apply(slice("np", "TCP", 8080, ABC));
    let mut lb = service(
        "lb",
        "10.96.0.40",
        "TCP",
        80,
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 32040,
               "loadBalancerSourceRanges": ["192.168.10.0/24"],
               "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30040}]}),
    );
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.168.99.20"}]}});
    e.apply(lb);
    e.apply(slice("lb", "TCP", 8080, ABC));
}

fn converged(t: &str) -> bool {
    real_servers(t, "-t", "10.96.0.10:80").len() == 3
        && real_servers(t, "-u", "10.96.0.53:53").len() == 3
        && real_servers(t, "-t", "10.0.0.10:30080").len() == 3
        && real_servers(t, "-t", "192.168.99.10:80").len() == 3
        && real_servers(t, "-t", "192.168.99.20:80").len() == 3
}

/// A client hammering a ClusterIP from its own thread until stopped: (ok, failed, first errors).
struct Traffic {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<Vec<String>>,
}

impl Traffic {
    fn start(netns: &str, target: IpAddr, port: u16) -> Traffic {
        let (stop, ok, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, o, f) = (stop.clone(), ok.clone(), failed.clone());
        let netns = netns.to_string();
        let handle = std::thread::spawn(move || {
            common::netns::enter_netns(&netns).unwrap();
            let mut errors = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match common::netns::tcp_request(target, port, T) {
                    Ok(a) if a.starts_with("pod-") => {
                        o.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        f.fetch_add(1, Ordering::Relaxed);
                        if errors.len() < 10 {
                            errors.push(format!("{other:?}"));
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            errors
        });
        Traffic {
            stop,
            ok,
            failed,
            handle,
        }
    }

    fn finish(self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self.handle.join().unwrap();
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            errors,
        )
    }
}

// Restart under steady traffic: zero failed requests, and the kernel state after the restart equals the
// state before it.
uml_test!(restart_under_traffic_keeps_state, boot(), {
    let _pods = abc_pods();
    let _c = client("client-a", "192.168.10.2", "192.168.10.1");
    let mut e = E2e::start(Options::default());
    load_cluster(&e);
    e.start_daemon();
    e.wait_ipvs("cluster programmed", converged);
    let missing_rest_client = component_pages_and_metrics(&mut e);
    e.wait_ipvs("cluster programmed", converged);
    let before = KernelState::read();
    println!("kernel state before the restart:\n{before:#?}");

    let traffic = Traffic::start("client-a", ip("10.96.0.10"), 80);
    let nodeport = Traffic::start("client-a", ip("10.0.0.10"), 30080);
    std::thread::sleep(Duration::from_millis(500));

    let stopping = Instant::now();
    let status = e.stop_daemon();
    println!("daemon stopped {:?} after SIGTERM", stopping.elapsed());
    assert!(
        status.success(),
        "SIGTERM exit status {status}:\n{}",
        e.log()
    );
    let stopped = KernelState::read();
    assert!(
        stopped == before,
        "stopping the daemon changed the kernel state:\n{}",
        before.diff(&stopped)
    );
    std::thread::sleep(Duration::from_millis(500));

    let restarted_at = Instant::now();
    e.start_daemon();
    println!(
        "restarted: first sync done {:?} after spawn",
        restarted_at.elapsed()
    );
    // Let it run a little longer (its first sync is a full one; later ones must not change anything).
    std::thread::sleep(Duration::from_secs(2));
    let after = KernelState::read();
    assert!(
        after == before,
        "kernel state after the restart differs:\n{}",
        before.diff(&after)
    );
    std::thread::sleep(Duration::from_millis(500));
    let (ok, failed, errors) = traffic.finish();
    let (np_ok, np_failed, np_errors) = nodeport.finish();
    println!(
        "ClusterIP requests: {ok} ok, {failed} failed; NodePort: {np_ok} ok, {np_failed} failed"
    );
    assert_eq!(
        failed,
        0,
        "failed ClusterIP requests: {errors:?}\n{}",
        e.all_logs()
    );
    assert_eq!(
        np_failed,
        0,
        "failed NodePort requests: {np_errors:?}\n{}",
        e.all_logs()
    );
    assert!(ok > 20 && np_ok > 20, "too few requests: {ok}, {np_ok}");
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
    // Last, so that the checks above run in any case: the dashboard's API-client panels need the
    // rest_client_* metrics of the API-client branch.
    assert!(
        missing_rest_client.is_empty(),
        "kubernetes-mixin dashboard series missing from /metrics: {missing_rest_client:#?}"
    );
});

/// The real daemon as a Kubernetes component (issue 21 sections 3 and 4): its log lines are klog's
/// (the familiar start-up lines among them), /metrics serves every series the kubernetes-mixin
/// kube-proxy dashboard queries (an EndpointSlice change with a trigger time first, so that network
/// programming has a sample), /statusz and /flagz answer in upstream's text format. Returns the
/// dashboard's rest_client_* series still missing (asserted by the caller at the end).
fn component_pages_and_metrics(e: &mut E2e) -> Vec<String> {
    let trigger = |eps| {
        let mut s = slice("web", "TCP", 8080, eps);
        s["metadata"]["annotations"] = json!({
            "endpoints.kubernetes.io/last-change-trigger-time":
                kube_proxy_rs::gotime::instant::format_rfc3339_nano(Some(std::time::SystemTime::now()))
        });
        s
    };
    e.apply(trigger(&ABC[..2]));
    e.wait_ipvs("web down to two endpoints", |t| {
        real_servers(t, "-t", "10.96.0.10:80").len() == 2
    });
    e.apply(trigger(ABC));
    e.wait_for(
        "a network programming sample",
        Duration::from_secs(60),
        |e| {
            metric_sum(
                &e.metrics(),
                "kubeproxy_network_programming_duration_seconds_count",
            ) > 0.0
        },
    );
    let metrics = e.metrics();
    let own = common::dashboard::missing(&metrics, common::dashboard::QUERIES);
    assert!(
        own.is_empty(),
        "dashboard series missing: {own:#?}\n{metrics}"
    );
    for series in ["kubernetes_build_info{", "kubernetes_feature_enabled{"] {
        assert!(metrics.contains(series), "{series}\n{metrics}");
    }

    let statusz = http_get(METRICS.parse().unwrap(), "/statusz").expect("/statusz");
    assert_eq!(statusz.status, 200);
    assert!(
        statusz.body.starts_with("\nkube-proxy statusz\nWarning: "),
        "{}",
        statusz.body
    );
    let flagz = http_get(METRICS.parse().unwrap(), "/flagz").expect("/flagz");
    assert!(
        flagz.body.starts_with("\nkube-proxy flagz\n"),
        "{}",
        flagz.body
    );
    let config = e.config_path.display().to_string();
    let flag_value = |name: &str| {
        flagz.body.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?;
            [": ", ":", "=", " "]
                .iter()
                .find_map(|d| rest.strip_prefix(d))
        })
    };
    assert_eq!(
        flag_value("config"),
        Some(config.as_str()),
        "{}",
        flagz.body
    );
    assert_eq!(flag_value("v"), Some("2"), "{}", flagz.body);

    let log = e.log();
    let lines: Vec<common::klog::Line> = common::klog::entries(&log)
        .iter()
        .map(|l| common::klog::parse(l).unwrap_or_else(|err| panic!("{l:?}: {err}\n{log}")))
        .collect();
    for m in ["Version info", "Using ipvs Proxier", "Caches are synced"] {
        assert!(
            lines.iter().any(|l| l.message == m),
            "no {m:?} line:\n{log}"
        );
    }
    common::dashboard::missing(&metrics, common::dashboard::REST_CLIENT_QUERIES)
}

// The API server closes every watch and compacts its history while objects change: the daemon relists
// and converges to the new state.
uml_test!(relist_after_watch_loss_and_expired_history, boot(), {
    let _pods = abc_pods();
    let mut e = E2e::start(Options::default());
    load_cluster(&e);
    e.apply(service("gone", "10.96.0.66", "TCP", 80, json!({})));
    e.apply(slice("gone", "TCP", 8080, ABC));
    e.start_daemon();
    e.wait_ipvs("cluster programmed", |t| {
        converged(t) && has_vs(t, "-t", "10.96.0.66:80")
    });
    let lists_before =
        e.api.list_requests(Kind::Service) + e.api.list_requests(Kind::EndpointSlice);

    // No watch is served while the changes are made; the history they would replay is then compacted.
    e.api.hold_watches(true);
    e.api.drop_all_watches();
    std::thread::sleep(Duration::from_millis(300));
    e.apply(service("late", "10.96.0.67", "TCP", 80, json!({})));
    e.apply(slice("late", "TCP", 8080, ABC));
    e.delete_service("gone");
    e.apply(slice(
        "web",
        "TCP",
        8080,
        &[("10.244.0.11", NODE, true), ("10.244.0.12", NODE, true)],
    ));
    e.api.expire_history();
    e.api.hold_watches(false);

    e.wait_ipvs("relisted state applied", |t| {
        has_vs(t, "-t", "10.96.0.67:80")
            && real_servers(t, "-t", "10.96.0.67:80").len() == 3
            && !has_vs(t, "-t", "10.96.0.66:80")
            && real_servers(t, "-t", "10.96.0.10:80").len() == 2
    });
    let lists_after = e.api.list_requests(Kind::Service) + e.api.list_requests(Kind::EndpointSlice);
    assert!(
        lists_after > lists_before,
        "the daemon converged without relisting ({lists_before} -> {lists_after}): the test did not exercise the 410 path"
    );
    assert!(!ipvs0_addrs().contains(&"10.96.0.66/32".to_string()));
    let got: Vec<String> = (0..6)
        .map(|_| common::netns::tcp_request(ip("10.96.0.10"), 80, T).unwrap())
        .collect();
    assert_eq!(distinct(&got), vec!["pod-a", "pod-b"], "{got:?}");
    let got = common::netns::tcp_request(ip("10.96.0.67"), 80, T).unwrap();
    assert!(got.starts_with("pod-"), "{got}");

    // The watches work again afterwards: a plain change converges too.
    e.apply(slice("late", "TCP", 8080, &[("10.244.0.13", NODE, true)]));
    e.wait_ipvs("change after the relist", |t| {
        real_servers(t, "-t", "10.96.0.67:80") == vec!["10.244.0.13:8080".to_string()]
    });
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
});

/// The iptables mode's leftovers as upstream writes them (tests/cleanup_data), as a node switched from
/// that mode has them.
fn load_iptables_mode_leftovers() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cleanup_data");
    sh("modprobe -d /run/m -a xt_recent xt_statistic");
    sh(&format!(
        "iptables-restore --noflush < {data}/iptables-mode-v4.rules"
    ));
    sh(&format!(
        "ip6tables-restore --noflush < {data}/iptables-mode-v6.rules"
    ));
}

/// What upstream's cleanup leaves of the iptables mode too: kubelet's KUBE-FIREWALL (and its jumps) and
/// the monitor's KUBE-PROXY-CANARY chains.
fn left_by_upstream(line: &str) -> bool {
    line.contains("KUBE-FIREWALL") || line.contains("KUBE-PROXY-CANARY")
}

// On a node switched from the iptables mode, the daemon starts and serves without touching that mode's
// chains (as upstream, which removes them only with --cleanup). `kube-proxy --cleanup` then removes every
// KUBE- chain and set of both modes, kube-ipvs0 and the IPVS table (it flushes IPVS entirely, as upstream);
// foreign chains and sets stay; a second run on a clean node succeeds too.
uml_test!(cleanup_removes_everything_of_ours, boot(), {
    let _pods = abc_pods();
    let mut e = E2e::start(Options::default());
    load_iptables_mode_leftovers();
    load_cluster(&e);
    e.start_daemon();
    e.wait_ipvs("cluster programmed", converged);
    let nat = sh("iptables-save -t nat");
    assert!(nat.contains(":KUBE-SVC-XPGD46QRK7WJZT7O"), "{nat}");
    assert!(
        sh("iptables -S INPUT").contains("-j KUBE-EXTERNAL-SERVICES"),
        "the iptables mode's jumps are left at start"
    );
    sh(
        "iptables -N FOREIGN-CHAIN && iptables -A FOREIGN-CHAIN -j RETURN && iptables -I INPUT -j FOREIGN-CHAIN",
    );
    sh("iptables -t nat -N FOREIGN-NAT && iptables -t nat -A FOREIGN-NAT -j RETURN");
    sh("ipset create foreign-set hash:ip && ipset add foreign-set 10.1.2.3");
    sh("ipvsadm -A -t 10.55.0.1:80 -s rr");
    let status = e.stop_daemon();
    assert!(status.success(), "{status}");
    let before = KernelState::read();
    assert!(before.iptables.iter().any(|l| l.contains("KUBE-")));
    assert!(before.ipsets.iter().any(|l| l.contains("KUBE-")));

    let (status, out) = e.cleanup();
    println!("--- kube-proxy --cleanup ---\n{out}");
    assert!(status.success(), "cleanup failed ({status}):\n{out}");

    let ipt = sh("iptables-save");
    let kube: Vec<&str> = ipt
        .lines()
        .filter(|l| l.contains("KUBE-") && !left_by_upstream(l))
        .collect();
    assert!(kube.is_empty(), "KUBE- iptables left: {kube:#?}");
    let ip6t = sh("ip6tables-save");
    assert!(!ip6t.contains("KUBE-"), "{ip6t}");
    let sets = sh("ipset list -n");
    assert!(
        !sets.lines().any(|l| l.starts_with("KUBE-")),
        "KUBE- sets left: {sets}"
    );
    let links = sh("ip -o link show");
    assert!(!links.contains("kube-ipvs0"), "{links}");
    let t = ipvs();
    assert!(
        !t.lines()
            .any(|l| l.starts_with("-A") || l.starts_with("-a")),
        "IPVS not flushed:\n{t}"
    );
    // Foreign iptables and ipset objects survive.
    assert!(ipt.contains("-A INPUT -j FOREIGN-CHAIN"), "{ipt}");
    assert!(ipt.contains(":FOREIGN-NAT"), "{ipt}");
    assert!(sets.lines().any(|l| l == "foreign-set"), "{sets}");
    assert!(sh("ipset list foreign-set").contains("10.1.2.3"));

    // Idempotent.
    let (status, out) = e.cleanup();
    assert!(status.success(), "second cleanup failed ({status}):\n{out}");
});
