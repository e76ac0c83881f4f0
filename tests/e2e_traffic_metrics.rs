//! End-to-end: `--ipvs-traffic-metrics` with the real daemon in a UML guest. Known traffic (TCP
//! connections to a ClusterIP and a NodePort, UDP datagrams to a ClusterIP) from a client namespace goes
//! through IPVS to pods; the scraped `/metrics` counters show exactly those connections and at least the
//! packets and bytes sent, per Service port and address kind. Plus the flag's parsing (off by default).
mod common;

use common::e2e::{
    ABC, E2e, Options, abc_pods, boot, client, direct_launch, ip, ipvs, real_servers, service,
    slice,
};
use common::uml::sh;
use kube_proxy_rs::config::{Invocation, parse_args};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(2);

/// TCP connections to the ClusterIP, to the NodePort, and UDP datagrams (each from a new socket).
const N_CLUSTER: u64 = 6;
const N_NODE_PORT: u64 = 4;
const M_UDP: u64 = 5;

/// Value of the series `name{labels}` in a scrape, if present.
fn series(text: &str, name: &str, labels: &str) -> Option<u64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

fn labels(service: &str, proto: &str, kind: &str) -> String {
    format!(
        "namespace=\"default\",service=\"{service}\",port_name=\"p\",protocol=\"{proto}\",address_kind=\"{kind}\""
    )
}

/// Connections, packets in/out and bytes in/out of one (Service port, kind) in a scrape.
fn counters(text: &str, l: &str) -> [u64; 5] {
    let get = |name: &str, extra: &str| {
        series(
            text,
            &format!("kubeproxy_rs_service_{name}"),
            &format!("{l}{extra}"),
        )
        .unwrap_or_else(|| panic!("no {name} for {l}:\n{text}"))
    };
    [
        get("connections_total", ""),
        get("packets_total", ",direction=\"in\""),
        get("packets_total", ",direction=\"out\""),
        get("bytes_total", ",direction=\"in\""),
        get("bytes_total", ",direction=\"out\""),
    ]
}

uml_test!(traffic_counters_per_service_port_and_kind, boot(), {
    let _pods = abc_pods();
    let c = client("client-a", "192.168.10.2", "192.168.10.1");
    let mut e = E2e::start(Options {
        launch: |e, args| {
            let mut cmd = direct_launch(e, args);
            cmd.arg("--ipvs-traffic-metrics");
            cmd
        },
        ..Options::default()
    });
    e.apply(service(
        "web",
        "10.96.0.10",
        "TCP",
        80,
        json!({"type": "NodePort",
               "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}]}),
    ));
    e.apply(slice("web", "TCP", 8080, ABC));
    e.apply(service(
        "dns",
        "10.96.0.53",
        "UDP",
        53,
        json!({"ports": [{"name": "p", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}),
    ));
    e.apply(slice("dns", "UDP", 5353, ABC));
    e.start_daemon();
    e.wait_ipvs("web and dns with 3 real servers each", |t| {
        real_servers(t, "-t", "10.96.0.10:80").len() == 3
            && real_servers(t, "-t", "10.0.0.10:30080").len() == 3
            && real_servers(t, "-u", "10.96.0.53:53").len() == 3
    });
    println!("ipvsadm -Sn:\n{}", ipvs());

    // Fresh services: every counter starts at zero.
    let before = e.metrics();
    let web_cip = labels("web", "TCP", "cluster_ip");
    let web_np = labels("web", "TCP", "node_port");
    let dns_cip = labels("dns", "UDP", "cluster_ip");
    for l in [&web_cip, &web_np, &dns_cip] {
        assert_eq!(counters(&before, l), [0; 5], "{l}:\n{before}");
    }
    // A ClusterIP service has no NodePort series.
    assert!(
        !before.contains(&labels("dns", "UDP", "node_port")),
        "{before}"
    );

    for _ in 0..N_CLUSTER {
        let r = c.tcp_request(ip("10.96.0.10"), 80, T).expect("ClusterIP");
        assert!(r.starts_with("pod-"), "{r}");
    }
    for _ in 0..N_NODE_PORT {
        let r = c.tcp_request(ip("10.0.0.10"), 30080, T).expect("NodePort");
        assert!(r.starts_with("pod-"), "{r}");
    }
    for _ in 0..M_UDP {
        let r = c
            .udp_request(ip("10.96.0.53"), 53, T)
            .expect("UDP ClusterIP");
        assert!(r.starts_with("pod-"), "{r}");
    }
    // The kernel folds its per-CPU counters into what it reports from its estimator, every 2 s: wait
    // for the counts to show up, then check them exactly.
    let want = [
        (&web_cip, N_CLUSTER),
        (&web_np, N_NODE_PORT),
        (&dns_cip, M_UDP),
    ];
    e.wait_for(
        "the counters of the traffic sent",
        Duration::from_secs(60),
        |e| {
            let m = e.metrics();
            want.iter().all(|(l, n)| counters(&m, l)[0] >= *n)
        },
    );
    println!("{}", sh("ipvsadm -Ln --stats"));

    let after = e.metrics();
    // "ping\n" each way per TCP connection: SYN, ACK and data at least in, SYN-ACK and data out.
    let [conns, pin, pout, bin, bout] = counters(&after, &web_cip);
    assert_eq!(conns, N_CLUSTER, "{after}");
    assert!(
        pin >= 3 * N_CLUSTER && pout >= 2 * N_CLUSTER,
        "{pin} {pout}\n{after}"
    );
    assert!(
        bin >= N_CLUSTER * (3 * 40 + 5) && bout >= N_CLUSTER * 5,
        "{bin} {bout}"
    );
    let [conns, pin, pout, bin, bout] = counters(&after, &web_np);
    assert_eq!(conns, N_NODE_PORT, "{after}");
    assert!(
        pin >= 3 * N_NODE_PORT && pout >= 2 * N_NODE_PORT,
        "{pin} {pout}\n{after}"
    );
    assert!(
        bin >= N_NODE_PORT * (3 * 40 + 5) && bout >= N_NODE_PORT * 5,
        "{bin} {bout}"
    );
    // One datagram each way per request; IPVS counts IP packets (28 header bytes + 4 payload).
    let [conns, pin, pout, bin, bout] = counters(&after, &dns_cip);
    assert_eq!(conns, M_UDP, "{after}");
    assert_eq!(pin, M_UDP, "{after}");
    assert!(pout >= M_UDP, "{after}");
    assert!(bin >= M_UDP * 32 && bout >= M_UDP * 28, "{bin} {bout}");
    assert!(
        after.contains("kubeproxy_rs_service_traffic_scrape_errors_total 0"),
        "{after}"
    );

    // Deleting a Service removes its series: cardinality follows the programmed Services.
    e.delete_service("dns");
    e.wait_ipvs("dns deleted", |t| !t.contains("10.96.0.53:53"));
    e.wait_for("dns series gone", Duration::from_secs(30), |e| {
        !e.metrics().contains("service=\"dns\"")
    });
    assert_eq!(counters(&e.metrics(), &web_cip)[0], N_CLUSTER);
    e.stop_daemon();
});

/// The flag is this project's own, off by default, and takes Go booleans.
#[test]
fn flag_is_off_by_default() {
    let run = |args: &[&str]| {
        let mut argv = vec!["kube-proxy", "--hostname-override=n1"];
        argv.extend_from_slice(args);
        match parse_args(argv) {
            Ok(Invocation::Run(o)) => o.ipvs_traffic_metrics,
            other => panic!("{args:?}: {other:?}"),
        }
    };
    assert!(!run(&[]));
    assert!(run(&["--ipvs-traffic-metrics"]));
    assert!(run(&["--ipvs_traffic_metrics=true"]));
    assert!(!run(&["--ipvs-traffic-metrics=false"]));
}
