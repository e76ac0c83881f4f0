//! End-to-end: the real `kube-proxy` daemon in a UML guest, fed by the test API server, serving traffic
//! between network-namespace clients and pods. One boot per group of independent scenarios.
mod common;

use common::e2e::{
    ABC, E2e, NODE, Options, abc_pods, answers, boot, client, distinct, has_vs, http_get, ip, ipvs,
    ipvs0_addrs, metric_sum, pods, real_servers, service, set_members, slice,
};
use common::uml::sh;
use serde_json::json;
use std::net::TcpListener;
use std::time::Duration;

const T: Duration = Duration::from_secs(2);

const POD_NAMES: [&str; 3] = ["pod-a", "pod-b", "pod-c"];

fn all_pods() -> Vec<String> {
    POD_NAMES.iter().map(|s| s.to_string()).collect()
}

// NodePort, ExternalIP, LoadBalancer with source ranges, ipMode=Proxy, session affinity and the
// KUBE-IPVS-FILTER rejection of host services on a ClusterIP.
uml_test!(external_traffic_paths, boot(), {
    let _pods = abc_pods();
    let allowed = client("client-a", "192.168.10.2", "192.168.10.1");
    let other = client("client-b", "192.168.20.2", "192.168.20.1");
    let mut e = E2e::start(Options::default());
    let tcp = |port: u16, node_port: u16| json!({"ports": [{"name": "p", "port": port, "targetPort": 8080, "protocol": "TCP", "nodePort": node_port}]});
    let objects = vec![
        service("web", "10.96.0.10", "TCP", 80, json!({})),
        slice("web", "TCP", 8080, ABC),
        service("np", "10.96.0.20", "TCP", 80, {
            let mut s = tcp(80, 30080);
            s["type"] = json!("NodePort");
            s
        }),
        slice("np", "TCP", 8080, ABC),
        service(
            "ext",
            "10.96.0.30",
            "TCP",
            80,
            json!({"externalIPs": ["192.168.99.10"]}),
        ),
        slice("ext", "TCP", 8080, ABC),
        {
            let mut s = service("lb", "10.96.0.40", "TCP", 80, {
                let mut s = tcp(80, 30040);
                s["type"] = json!("LoadBalancer");
                s["loadBalancerSourceRanges"] = json!(["192.168.10.0/24"]);
                s
            });
            s["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.168.99.20"}]}});
            s
        },
        slice("lb", "TCP", 8080, ABC),
        {
            let mut s = service("lb-proxy", "10.96.0.41", "TCP", 80, {
                let mut s = tcp(80, 30041);
                s["type"] = json!("LoadBalancer");
                s
            });
            s["status"] = json!({"loadBalancer": {"ingress": [
                {"ip": "192.168.99.30", "ipMode": "Proxy"},
                {"ip": "192.168.99.31", "ipMode": "VIP"}
            ]}});
            s
        },
        slice("lb-proxy", "TCP", 8080, ABC),
        service(
            "sticky",
            "10.96.0.50",
            "TCP",
            80,
            json!({"sessionAffinity": "ClientIP",
                   "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}}}),
        ),
        slice("sticky", "TCP", 8080, ABC),
    ];
    for o in objects {
        e.apply(o);
    }
    e.start_daemon();
    let wanted = [
        "10.96.0.10:80",
        "10.0.0.10:30080",
        "192.168.99.10:80",
        "192.168.99.20:80",
        "10.96.0.41:80",
        "192.168.99.31:80",
        "10.96.0.50:80",
    ];
    e.wait_ipvs("every virtual server with 3 real servers", |t| {
        wanted.iter().all(|vs| real_servers(t, "-t", vs).len() == 3)
    });
    let table = ipvs();
    println!("ipvsadm -Sn after the first syncs:\n{table}");

    // ClusterIP from a client outside the node: round robin over the three pods.
    let got = answers(9, "ClusterIP", || {
        allowed.tcp_request(ip("10.96.0.10"), 80, T)
    });
    assert_eq!(distinct(&got), all_pods(), "ClusterIP answers {got:?}");

    // NodePort on the node IP.
    let got = answers(9, "NodePort", || {
        allowed.tcp_request(ip("10.0.0.10"), 30080, T)
    });
    assert_eq!(distinct(&got), all_pods(), "NodePort answers {got:?}");
    assert!(
        set_members("KUBE-NODE-PORT-TCP").contains(&"30080".to_string()),
        "{:?}",
        set_members("KUBE-NODE-PORT-TCP")
    );

    // ExternalIP: bound to kube-ipvs0 (not a local address), reachable from another client.
    assert!(
        ipvs0_addrs().contains(&"192.168.99.10/32".to_string()),
        "{:?}",
        ipvs0_addrs()
    );
    let got = answers(6, "ExternalIP", || {
        other.tcp_request(ip("192.168.99.10"), 80, T)
    });
    assert_eq!(distinct(&got), all_pods(), "ExternalIP answers {got:?}");

    // LoadBalancer with loadBalancerSourceRanges: the allowed client passes, the other is dropped.
    let got = answers(6, "LB from allowed source", || {
        allowed.tcp_request(ip("192.168.99.20"), 80, T)
    });
    assert_eq!(distinct(&got), all_pods(), "LB answers {got:?}");
    let denied = other.tcp_request(ip("192.168.99.20"), 80, Duration::from_secs(1));
    let err = format!(
        "{:#}",
        denied.expect_err("a client outside loadBalancerSourceRanges got through")
    );
    assert!(
        err.contains("timed out")
            || err.contains("WouldBlock")
            || err.contains("Resource temporarily"),
        "expected the packets to be dropped (timeout), got: {err}"
    );
    assert!(
        set_members("KUBE-LOAD-BALANCER-FW").contains(&"192.168.99.20,tcp:80".to_string()),
        "{:?}",
        set_members("KUBE-LOAD-BALANCER-FW")
    );
    assert!(
        set_members("KUBE-LOAD-BALANCER-SOURCE-CIDR")
            .contains(&"192.168.99.20,tcp:80,192.168.10.0/24".to_string()),
        "{:?}",
        set_members("KUBE-LOAD-BALANCER-SOURCE-CIDR")
    );
    // The allowed client still passes after the denied attempt.
    allowed
        .tcp_request(ip("192.168.99.20"), 80, T)
        .expect("allowed client after a denied one");

    // ipMode=Proxy ingress: not programmed; the VIP-mode ingress of the same Service is.
    assert!(!has_vs(&table, "-t", "192.168.99.30:80"), "{table}");
    assert!(
        !ipvs0_addrs().contains(&"192.168.99.30/32".to_string()),
        "{:?}",
        ipvs0_addrs()
    );
    let got = answers(3, "LB VIP-mode ingress", || {
        allowed.tcp_request(ip("192.168.99.31"), 80, T)
    });
    assert_eq!(got.len(), 3);

    // Session affinity ClientIP: persistence in IPVS, one client always reaches the same pod.
    let sticky_line = table
        .lines()
        .find(|l| l.starts_with("-A -t 10.96.0.50:80 "))
        .unwrap_or_default();
    assert!(sticky_line.contains("-p 600"), "{sticky_line}");
    for c in [&allowed, &other] {
        let got = answers(10, "sticky", || c.tcp_request(ip("10.96.0.50"), 80, T));
        assert_eq!(distinct(&got).len(), 1, "{} reached {got:?}", c.name);
    }

    // A host service on a ClusterIP's other port is rejected (KUBE-IPVS-FILTER); the same host service
    // answers on the node IP.
    let host = TcpListener::bind("0.0.0.0:9999").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    host.set_nonblocking(true).unwrap();
    let stop2 = stop.clone();
    let server = std::thread::spawn(move || {
        use std::io::Write;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            match host.accept() {
                Ok((mut c, _)) => {
                    // Read the request line first: closing with unread data would reset the connection.
                    use std::io::Read;
                    let _ = c.set_nonblocking(false);
                    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
                    let mut buf = [0u8; 64];
                    let _ = c.read(&mut buf);
                    let _ = c.write_all(b"host");
                    let _ = c.shutdown(std::net::Shutdown::Both);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    assert_eq!(
        allowed.tcp_request(ip("10.0.0.10"), 9999, T).unwrap(),
        "host"
    );
    let filtered = allowed.tcp_request(ip("10.96.0.10"), 9999, T);
    let err = format!(
        "{:#}",
        filtered.expect_err("host service reachable on a ClusterIP")
    );
    assert!(err.contains("refused"), "expected a REJECT, got: {err}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();

    let iptables = sh("iptables-save -t filter");
    assert!(
        iptables.contains("-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT"),
        "{iptables}"
    );
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
});

// externalTrafficPolicy=Local (health-check node port, local-only NodePort/LB real servers) and
// internalTrafficPolicy=Local.
uml_test!(traffic_policies, boot(), {
    let _pods = abc_pods();
    let outside = client("client-a", "192.168.10.2", "192.168.10.1");
    let mut e = E2e::start(Options::default());
    let mixed: &[(&str, &str, bool)] = &[
        ("10.244.0.11", NODE, true),
        ("10.244.0.12", NODE, true),
        ("10.244.0.13", "other-node", true),
    ];
    let lb = |name: &str, cip: &str, lb_ip: &str, np: u16, hc: u16| {
        let mut s = service(
            name,
            cip,
            "TCP",
            80,
            json!({
                "type": "LoadBalancer",
                "externalTrafficPolicy": "Local",
                "healthCheckNodePort": hc,
                "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": np}]
            }),
        );
        s["status"] = json!({"loadBalancer": {"ingress": [{"ip": lb_ip}]}});
        s
    };
    e.apply(lb("etp", "10.96.0.70", "192.168.99.40", 30050, 32050));
    e.apply(slice("etp", "TCP", 8080, mixed));
    e.apply(lb(
        "etp-remote",
        "10.96.0.71",
        "192.168.99.41",
        30051,
        32051,
    ));
    e.apply(slice(
        "etp-remote",
        "TCP",
        8080,
        &[("10.244.0.13", "other-node", true)],
    ));
    e.apply(service(
        "itp",
        "10.96.0.60",
        "TCP",
        80,
        json!({"internalTrafficPolicy": "Local"}),
    ));
    e.apply(slice(
        "itp",
        "TCP",
        8080,
        &[
            ("10.244.0.11", NODE, true),
            ("10.244.0.13", "other-node", true),
        ],
    ));
    e.start_daemon();
    e.wait_ipvs("ETP/ITP services programmed", |t| {
        real_servers(t, "-t", "10.0.0.10:30050").len() == 2
            && real_servers(t, "-t", "10.96.0.70:80").len() == 3
            && has_vs(t, "-t", "10.0.0.10:30051")
            && has_vs(t, "-t", "10.96.0.60:80")
    });
    let table = ipvs();
    println!("ipvsadm -Sn:\n{table}");
    let local = vec![
        "10.244.0.11:8080".to_string(),
        "10.244.0.12:8080".to_string(),
    ];
    assert_eq!(real_servers(&table, "-t", "10.0.0.10:30050"), local);
    assert_eq!(real_servers(&table, "-t", "192.168.99.40:80"), local);
    // ClusterIP of an ETP=Local service uses every endpoint.
    assert_eq!(real_servers(&table, "-t", "10.96.0.70:80").len(), 3);
    // No local endpoint: IPVS mode falls back to the cluster endpoints.
    assert_eq!(
        real_servers(&table, "-t", "10.0.0.10:30051"),
        vec!["10.244.0.13:8080".to_string()]
    );
    // ITP=Local: only the local endpoint behind the ClusterIP.
    assert_eq!(
        real_servers(&table, "-t", "10.96.0.60:80"),
        vec!["10.244.0.11:8080".to_string()]
    );

    // Traffic: NodePort of the ETP=Local service reaches only local pods.
    let got = answers(8, "ETP NodePort", || {
        outside.tcp_request(ip("10.0.0.10"), 30050, T)
    });
    assert_eq!(distinct(&got), vec!["pod-a", "pod-b"], "{got:?}");
    let got = answers(6, "ITP ClusterIP", || {
        common::netns::tcp_request(ip("10.96.0.60"), 80, T)
    });
    assert_eq!(distinct(&got), vec!["pod-a"], "{got:?}");

    // Health-check node ports.
    let hc = |port: u16| {
        let addr = format!("10.0.0.10:{port}").parse().unwrap();
        let mut last = None;
        for _ in 0..100 {
            last = http_get(addr, "/any/path");
            if last.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        last.unwrap_or_else(|| panic!("health check node port {port} does not answer"))
    };
    let r = hc(32050);
    assert_eq!(r.status, 200, "{r:?}");
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("health body JSON");
    assert_eq!(body["localEndpoints"], 2, "{body}");
    assert_eq!(body["service"]["name"], "etp", "{body}");
    assert_eq!(body["service"]["namespace"], "default", "{body}");
    assert_eq!(
        r.header("X-Load-Balancing-Endpoint-Weight"),
        Some("2"),
        "{r:?}"
    );
    let r = hc(32051);
    assert_eq!(r.status, 503, "{r:?}");
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("health body JSON");
    assert_eq!(body["localEndpoints"], 0, "{body}");
    assert!(
        set_members("KUBE-HEALTH-CHECK-NODE-PORT").contains(&"32050".to_string()),
        "{:?}",
        set_members("KUBE-HEALTH-CHECK-NODE-PORT")
    );
    let m = e.metrics();
    assert!(
        metric_sum(&m, "kubeproxy_sync_proxy_rules_no_local_endpoints_total") >= 1.0,
        "no-local-endpoints metric not counted:\n{}",
        m.lines()
            .filter(|l| l.contains("no_local"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // A local endpoint appears for etp-remote: the health check turns 200 and the NodePort goes local.
    e.apply(slice(
        "etp-remote",
        "TCP",
        8080,
        &[
            ("10.244.0.12", NODE, true),
            ("10.244.0.13", "other-node", true),
        ],
    ));
    e.wait_for(
        "etp-remote health check 200",
        common::e2e::CONVERGE_TIMEOUT,
        |_| http_get("10.0.0.10:32051".parse().unwrap(), "/").is_some_and(|r| r.status == 200),
    );
    let r = hc(32051);
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["localEndpoints"], 1, "{body}");
    e.wait_ipvs("etp-remote NodePort local only", |t| {
        real_servers(t, "-t", "10.0.0.10:30051") == vec!["10.244.0.12:8080".to_string()]
    });
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
});

// Deleting a Service, a malformed Service next to good ones, a foreign IPVS service, excludeCIDRs.
uml_test!(object_lifecycle_and_ownership, boot(), {
    let _pods = pods(&[("pod-a", "10.244.0.11"), ("pod-b", "10.244.0.12")]);
    let mut e = E2e::start(Options {
        extra_config: "  excludeCIDRs: [10.200.0.0/16]\n".to_string(),
        ..Options::default()
    });
    let ab: &[(&str, &str, bool)] = &[("10.244.0.11", NODE, true), ("10.244.0.12", NODE, true)];
    e.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
    e.apply(slice("web", "TCP", 8080, ab));
    e.apply(service(
        "doomed",
        "10.96.0.90",
        "TCP",
        80,
        json!({"type": "NodePort",
               "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30090}]}),
    ));
    e.apply(slice("doomed", "TCP", 8080, ab));
    e.start_daemon();
    e.wait_ipvs("web and doomed programmed", |t| {
        real_servers(t, "-t", "10.96.0.10:80").len() == 2
            && real_servers(t, "-t", "10.96.0.90:80").len() == 2
            && has_vs(t, "-t", "10.0.0.10:30090")
    });
    assert!(ipvs0_addrs().contains(&"10.96.0.90/32".to_string()));
    assert!(set_members("KUBE-CLUSTER-IP").contains(&"10.96.0.90,tcp:80".to_string()));
    assert!(set_members("KUBE-NODE-PORT-TCP").contains(&"30090".to_string()));

    // Hand-made IPVS services: a foreign one, one in excludeCIDRs on a kube-ipvs0 address, and one on a
    // kube-ipvs0 address outside excludeCIDRs (which looks like a leftover of ours).
    sh("ipvsadm -A -t 10.55.0.1:80 -s rr && ipvsadm -a -t 10.55.0.1:80 -r 10.244.0.11:8080 -m");
    sh("ip addr add 10.200.0.5/32 dev kube-ipvs0 && ipvsadm -A -t 10.200.0.5:80 -s rr");
    sh("ip addr add 10.96.0.77/32 dev kube-ipvs0 && ipvsadm -A -t 10.96.0.77:80 -s rr");

    // Delete a Service: its virtual servers, address and set entries go.
    e.delete_service("doomed");
    e.wait_ipvs("doomed removed", |t| {
        !has_vs(t, "-t", "10.96.0.90:80") && !has_vs(t, "-t", "10.0.0.10:30090")
    });
    e.wait_for(
        "doomed's address and set entries removed",
        common::e2e::CONVERGE_TIMEOUT,
        |_| {
            !ipvs0_addrs().contains(&"10.96.0.90/32".to_string())
                && !set_members("KUBE-CLUSTER-IP").contains(&"10.96.0.90,tcp:80".to_string())
                && !set_members("KUBE-NODE-PORT-TCP").contains(&"30090".to_string())
                && !set_members("KUBE-IPVS-IPS").contains(&"10.96.0.90".to_string())
        },
    );

    // A malformed Service next to good ones.
    e.apply(service("broken", "10.96.0.300", "TCP", 80, json!({})));
    e.apply(slice("broken", "TCP", 8080, ab));
    e.apply(service("after-broken", "10.96.0.95", "TCP", 80, json!({})));
    e.apply(slice("after-broken", "TCP", 8080, ab));
    e.wait_ipvs("after-broken programmed", |t| {
        real_servers(t, "-t", "10.96.0.95:80").len() == 2
    });
    let got = answers(4, "web next to a broken Service", || {
        common::netns::tcp_request(ip("10.96.0.10"), 80, T)
    });
    assert_eq!(distinct(&got), vec!["pod-a", "pod-b"]);
    e.wait_for(
        "the log to name the broken Service",
        common::e2e::CONVERGE_TIMEOUT,
        |e| e.log().contains("default/broken"),
    );
    e.wait_for(
        "a warning Event naming the broken Service",
        common::e2e::CONVERGE_TIMEOUT,
        |e| {
            e.api.events_json().iter().any(|ev| {
                let t = ev.to_string();
                t.contains("Warning") && t.contains("broken")
            })
        },
    );

    // After a full sync: the one on a kube-ipvs0 address outside excludeCIDRs was deleted (as upstream
    // does), the foreign and the excluded ones are still there.
    e.wait_ipvs("leftover-looking 10.96.0.77:80 deleted", |t| {
        !has_vs(t, "-t", "10.96.0.77:80")
    });
    let t = ipvs();
    assert!(
        has_vs(&t, "-t", "10.55.0.1:80"),
        "foreign service gone:\n{t}"
    );
    assert_eq!(
        real_servers(&t, "-t", "10.55.0.1:80"),
        vec!["10.244.0.11:8080".to_string()],
        "{t}"
    );
    assert!(
        has_vs(&t, "-t", "10.200.0.5:80"),
        "service in excludeCIDRs gone:\n{t}"
    );
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
});
