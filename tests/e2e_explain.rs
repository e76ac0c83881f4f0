//! End-to-end: the explanation (`/debug/services`, `kube-proxy explain`), drift counters and drain gauges
//! with the real daemon in a UML guest, real traffic and real kernel state:
//! - a Service with externalTrafficPolicy Local and no local endpoint: its NodePort virtual server uses
//!   the cluster endpoints (`clusterNoLocal`), its health check counts 0 local endpoints; with
//!   internalTrafficPolicy Local the remote endpoint is left out (`OtherNodeLocalPolicy`) and traffic only
//!   reaches the local pod;
//! - a rejected scheduler annotation (`annotationRejected`, the problem named), a terminating endpoint
//!   (`TerminatingFallbackOnly`) and endpoints excluded by topology hints (`TopologyHintsOtherZone`);
//! - `kube-proxy explain` prints the text form through the metrics server; with `--allow-remote-debug`
//!   a pod gets the explanation from the node's address too;
//! - `ipvsadm -D` and `ipset del` behind the daemon's back move `kubeproxy_rs_drift_repairs_total` and
//!   mark the Service; repeated, they raise the `RecurringDrift` Warning Event on the Node;
//! - a TCP connection held to an endpoint that goes away: the drain gauges count it and its age, the
//!   explanation shows the real server draining, and `--ipvs-max-drain-time` removes it.
mod common;

use common::e2e::{
    ABC, E2e, METRICS, NODE, NODE_IP, Options, abc_pods, boot, client, direct_launch, http_get, ip,
    metric_sum, node_json, service, slice,
};
use common::netns::{Held, Pod, serve_hold};
use common::uml::sh;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(3);
/// Drained real servers are removed after this long, connections or not.
const MAX_DRAIN: Duration = Duration::from_secs(25);
const HOLD_PORT: u16 = 9090;
const HOLD_VIP: &str = "10.96.0.90";

/// The daemon with a 1 s graceful-termination check, the maximum drain time set and `/debug/*` open to
/// other hosts.
fn launch(e: &E2e, args: &[&str]) -> std::process::Command {
    let mut cmd = direct_launch(e, args);
    cmd.arg(format!("--ipvs-max-drain-time={}s", MAX_DRAIN.as_secs()))
        .arg("--allow-remote-debug")
        .env("KUBE_PROXY_RS_GRACEFUL_CHECK_INTERVAL", "1s");
    cmd
}

/// The metrics server on every address (loopback included), as the EKS overlay sets it.
fn metrics_everywhere(e: &E2e) {
    let config = std::fs::read_to_string(&e.config_path).unwrap();
    let config = config.replace(
        &format!("metricsBindAddress: {METRICS}"),
        "metricsBindAddress: 0.0.0.0:10249",
    );
    std::fs::write(&e.config_path, config).unwrap();
}

/// With `--allow-remote-debug`, a pod gets the explanation too.
fn check_remote(c: &Pod) {
    let addr = format!("{NODE_IP}:10249");
    let r = c
        .run_in(|| http_get(addr.parse().unwrap(), "/debug/services/default/hints"))
        .unwrap()
        .expect("an answer from the pod");
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The JSON explanation of `default/<name>` (panics when the server does not answer 200).
fn explain(name: &str) -> Value {
    let r = http_get(
        METRICS.parse().unwrap(),
        &format!("/debug/services/default/{name}"),
    )
    .expect("metrics server answers");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

/// The only port of an explanation.
fn port(x: &Value) -> &Value {
    let ports = x["ports"].as_array().expect("ports");
    assert_eq!(ports.len(), 1, "{x:#}");
    &ports[0]
}

/// The endpoint at `addr` in a port's explanation.
fn endpoint<'a>(p: &'a Value, addr: &str) -> &'a Value {
    p["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|e| e["address"] == addr)
        .unwrap_or_else(|| panic!("no endpoint {addr} in {p:#}"))
}

/// The virtual server of `kind` in a port's explanation.
fn vs<'a>(p: &'a Value, kind: &str) -> &'a Value {
    p["virtualServers"]
        .as_array()
        .expect("virtualServers")
        .iter()
        .find(|v| v["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} virtual server in {p:#}"))
}

/// An EndpointSlice `<svc>-1` for port `p` = 8080/TCP with raw endpoint objects.
fn raw_slice(svc: &str, endpoints: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-1"), "namespace": "default",
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    })
}

fn ep(addr: &str, node: &str, conditions: Value, hints: Option<&str>) -> Value {
    let mut e = json!({"addresses": [addr], "nodeName": node, "conditions": conditions});
    if let Some(zone) = hints {
        e["zone"] = json!(zone);
        e["hints"] = json!({"forZones": [{"name": zone}]});
    }
    e
}

fn ready() -> Value {
    json!({"ready": true, "serving": true, "terminating": false})
}

/// The five Services of the explanation checks, and the Node in zone `z1`.
fn apply_services(e: &E2e) {
    let mut node = node_json(NODE, NODE_IP);
    node["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("z1");
    e.apply(node);
    // externalTrafficPolicy Local, the only endpoint on another node.
    e.apply(service(
        "etp-local",
        "10.96.0.80",
        "TCP",
        80,
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 32080,
               "ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP",
                          "nodePort": 30080}]}),
    ));
    e.apply(slice(
        "etp-local",
        "TCP",
        8080,
        &[("10.244.9.9", "other-node", true)],
    ));
    // internalTrafficPolicy Local: one local endpoint, one remote.
    e.apply(service(
        "itp-local",
        "10.96.0.81",
        "TCP",
        80,
        json!({"internalTrafficPolicy": "Local"}),
    ));
    let itp = [
        ("10.244.0.11", NODE, true),
        ("10.244.9.9", "other-node", true),
    ];
    e.apply(slice("itp-local", "TCP", 8080, &itp));
    // A scheduler annotation the daemon rejects.
    let mut bad = service("bad-annotation", "10.96.0.82", "TCP", 80, json!({}));
    bad["metadata"]["annotations"] = json!({"ipvs.kube-proxy-rs.io/scheduler": "fancy"});
    e.apply(bad);
    e.apply(slice("bad-annotation", "TCP", 8080, ABC));
    // One ready endpoint and one terminating (still serving).
    e.apply(service("terminating", "10.96.0.83", "TCP", 80, json!({})));
    let serving = json!({"ready": false, "serving": true, "terminating": true});
    let eps = json!([
        ep("10.244.0.11", NODE, ready(), None),
        ep("10.244.0.12", NODE, serving, None)
    ]);
    e.apply(raw_slice("terminating", eps));
    // Zone hints: one endpoint for this node's zone, one for another zone.
    e.apply(service("hints", "10.96.0.84", "TCP", 80, json!({})));
    let eps = json!([
        ep("10.244.0.11", NODE, ready(), Some("z1")),
        ep("10.244.0.13", NODE, ready(), Some("z2"))
    ]);
    e.apply(raw_slice("hints", eps));
}

/// The reasons of each case, as the JSON names them.
fn check_reasons(e: &mut E2e) {
    e.wait_for(
        "the hints Service explained with the node's zone",
        Duration::from_secs(60),
        |_| {
            http_get(METRICS.parse().unwrap(), "/debug/services/default/hints")
                .is_some_and(|r| r.status == 200 && r.body.contains("TopologyHintsOtherZone"))
        },
    );
    let x = explain("etp-local");
    println!("etp-local:\n{x:#}");
    let p = port(&x);
    assert_eq!(p["externalTrafficPolicy"], "Local");
    assert_eq!(vs(p, "nodePort")["endpointSet"], "clusterNoLocal");
    assert_eq!(vs(p, "clusterIP")["endpointSet"], "cluster");
    assert_eq!(p["healthCheckNodePort"], 32080);
    assert_eq!(p["localEndpoints"], 0);
    assert_eq!(vs(p, "clusterIP")["programmed"], true);

    let p = port(&explain("itp-local")).clone();
    let remote = endpoint(&p, "10.244.9.9");
    assert_eq!(
        (&remote["selected"], &remote["reason"]),
        (&json!(false), &json!("OtherNodeLocalPolicy"))
    );
    assert_eq!(endpoint(&p, "10.244.0.11")["selected"], true);
    assert_eq!(endpoint(&p, "10.244.0.11")["reason"], "");
    let rs = vs(&p, "clusterIP")["realServers"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rs.len(), 1, "{rs:?}");
    assert_eq!(rs[0]["address"], "10.244.0.11");

    let x = explain("bad-annotation");
    assert_eq!(
        vs(port(&x), "clusterIP")["schedulerSource"],
        "annotationRejected"
    );
    assert_eq!(vs(port(&x), "clusterIP")["scheduler"], "rr");
    let problem = &x["problems"][0];
    assert_eq!(problem["annotation"], "ipvs.kube-proxy-rs.io/scheduler");
    assert_eq!(problem["value"], "fancy");

    let p = port(&explain("terminating")).clone();
    assert_eq!(
        endpoint(&p, "10.244.0.12")["reason"],
        "TerminatingFallbackOnly"
    );
    assert_eq!(endpoint(&p, "10.244.0.12")["terminating"], true);
    assert_eq!(endpoint(&p, "10.244.0.11")["selected"], true);

    let p = port(&explain("hints")).clone();
    assert_eq!(
        endpoint(&p, "10.244.0.13")["reason"],
        "TopologyHintsOtherZone"
    );
    assert_eq!(endpoint(&p, "10.244.0.11")["selected"], true);
    let rs = vs(&p, "clusterIP")["realServers"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rs.len(), 1, "{rs:?}");
}

/// Real traffic agrees with the explanation: internalTrafficPolicy Local only reaches the local pod.
fn check_traffic() {
    let answers: Vec<String> = (0..6)
        .map(|_| common::netns::tcp_request(ip("10.96.0.81"), 80, T).expect("itp-local ClusterIP"))
        .collect();
    assert!(answers.iter().all(|a| a == "pod-a"), "{answers:?}");
}

/// The listing, the text form and `kube-proxy explain`.
fn check_listing_and_cli(e: &E2e) {
    let r = http_get(METRICS.parse().unwrap(), "/debug/services").expect("listing");
    let all: Value = serde_json::from_str(&r.body).unwrap();
    let names: Vec<&str> = all["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["service"]["name"].as_str())
        .collect();
    for n in [
        "etp-local",
        "itp-local",
        "bad-annotation",
        "terminating",
        "hints",
        "hold",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let missing = http_get(METRICS.parse().unwrap(), "/debug/services/default/nope").unwrap();
    assert_eq!(missing.status, 404);
    let out = std::process::Command::new(&e.bin)
        .args(["explain", "default/bad-annotation", "--server", METRICS])
        .output()
        .expect("run kube-proxy explain");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("kube-proxy explain default/bad-annotation:\n{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Service default/bad-annotation on node e2e-node"),
        "{text}"
    );
    assert!(
        text.contains("ignored annotation ipvs.kube-proxy-rs.io/scheduler=\"fancy\""),
        "{text}"
    );
    assert!(text.contains("-> 10.244.0.11:8080  weight 1"), "{text}");
    let out = std::process::Command::new(&e.bin)
        .args(["explain", "default/etp-local", "--server", METRICS])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("kube-proxy explain default/etp-local:\n{text}");
    assert!(
        text.contains("no endpoint on this node (Local policy)"),
        "{text}"
    );
    for svc in ["default/hints", "default/itp-local", "default/terminating"] {
        let out = std::process::Command::new(&e.bin)
            .args(["explain", svc, "--server", METRICS])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        println!("kube-proxy explain {svc}:\n{text}");
        assert!(text.contains("left out: "), "{text}");
    }
}

/// `ipvsadm -D` and `ipset del` behind the daemon's back: counted by kind at the next full sync, the
/// Service marked; three full syncs in a row with repairs raise the Warning Event on the Node.
fn check_drift(e: &mut E2e) {
    let repairs = |e: &E2e, kind: &str| {
        metric_sum(
            &e.metrics(),
            &format!("kubeproxy_rs_drift_repairs_total{{kind=\"{kind}\"}}"),
        )
    };
    let vs_before = repairs(e, "virtual_server");
    let set_before = repairs(e, "ipset_member");
    sh("ipvsadm -D -t 10.96.0.83:80");
    // A ClusterIP member, a hairpin member only `hold` plans (its endpoints' port) and etp-local's
    // health-check node port, in one command: repaired by the same full sync.
    sh("ipset del KUBE-CLUSTER-IP 10.96.0.84,tcp:80 \
        && ipset del KUBE-LOOP-BACK 10.244.0.11,tcp:9090,10.244.0.11 \
        && ipset del KUBE-HEALTH-CHECK-NODE-PORT 32080");
    e.wait_for("the drift counted", Duration::from_secs(60), |e| {
        repairs(e, "virtual_server") > vs_before && repairs(e, "ipset_member") >= set_before + 3.0
    });
    let x = explain("terminating");
    assert_eq!(x["drift"]["repaired"], json!(["virtual_server"]), "{x:#}");
    assert!(!x["drift"]["lastFullSync"].as_str().unwrap_or("").is_empty());
    let x = explain("hints");
    assert_eq!(x["drift"]["repaired"], json!(["ipset_member"]), "{x:#}");
    // Hairpin and health-check members are attributed to the Service that planned them.
    for svc in ["hold", "etp-local"] {
        let x = explain(svc);
        assert_eq!(
            x["drift"]["repaired"],
            json!(["ipset_member"]),
            "{svc}: {x:#}"
        );
    }
    // Two more full syncs with repairs: the third in a row raises the Event.
    for _ in 0..2 {
        let before = repairs(e, "virtual_server");
        sh("ipvsadm -D -t 10.96.0.83:80");
        e.wait_for("the drift counted again", Duration::from_secs(60), |e| {
            repairs(e, "virtual_server") > before
        });
    }
    e.wait_for("the RecurringDrift Event", Duration::from_secs(30), |e| {
        e.api.events().iter().any(|ev| {
            ev.reason.as_deref() == Some("RecurringDrift")
                && ev.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Node")
                && ev
                    .note
                    .as_deref()
                    .is_some_and(|n| n.contains("virtual_server"))
        })
    });
}

/// The draining real server in the gauges and the explanation, then removed at the maximum drain time.
fn check_drain(e: &mut E2e, c: &Pod) {
    let mut held = Held::open(c, format!("{HOLD_VIP}:81").parse().unwrap(), T);
    let pod = held.ask();
    let addr = match pod.as_str() {
        "pod-a" => "10.244.0.11",
        "pod-b" => "10.244.0.12",
        "pod-c" => "10.244.0.13",
        other => panic!("unexpected answer {other:?}"),
    };
    let rest: Vec<(&str, &str, bool)> =
        ABC.iter().copied().filter(|(a, _, _)| *a != addr).collect();
    let removed_at = Instant::now();
    e.apply(slice("hold", "TCP", HOLD_PORT, &rest));
    let gauge = |e: &E2e, name: &str| {
        metric_sum(
            &e.metrics(),
            &format!("kubeproxy_rs_{name}{{ip_family=\"IPv4\"}}"),
        )
    };
    e.wait_for("the draining gauge", Duration::from_secs(60), |e| {
        gauge(e, "draining_real_servers") == 1.0 && gauge(e, "draining_oldest_seconds") >= 2.0
    });
    let x = explain("hold");
    let rs = vs(port(&x), "clusterIP")["realServers"]
        .as_array()
        .unwrap()
        .clone();
    let draining: Vec<&Value> = rs.iter().filter(|r| r["draining"] == true).collect();
    assert_eq!(draining.len(), 1, "{rs:?}");
    assert_eq!(draining[0]["address"], addr);
    assert_eq!(draining[0]["weight"], 0);
    assert_eq!(draining[0]["activeConns"], 1);
    assert_eq!(
        held.ask(),
        pod,
        "the held connection still works while draining"
    );
    e.wait_for(
        "the maximum drain time",
        MAX_DRAIN + Duration::from_secs(60),
        |e| gauge(e, "draining_real_servers") == 0.0,
    );
    let drained = removed_at.elapsed();
    assert!(
        drained >= MAX_DRAIN,
        "removed after {drained:?}, before the maximum drain time"
    );
    let forced = metric_sum(&e.metrics(), "kubeproxy_rs_drain_forced_removals_total");
    assert_eq!(forced, 1.0);
    let x = explain("hold");
    let rs = vs(port(&x), "clusterIP")["realServers"]
        .as_array()
        .unwrap()
        .clone();
    assert!(rs.iter().all(|r| r["address"] != addr), "{rs:?}");
    println!("drained real server removed {drained:?} after its endpoint left (max {MAX_DRAIN:?})");
}

uml_test!(explanation_drift_and_drain_end_to_end, boot(), {
    let pods = abc_pods();
    for p in &pods {
        serve_hold(p, HOLD_PORT);
    }
    let c = client("client-x", "192.168.10.2", "192.168.10.1");
    let mut e = E2e::start(Options {
        sync_period: "5s".into(),
        launch,
        ..Options::default()
    });
    apply_services(&e);
    e.apply(service(
        "hold",
        HOLD_VIP,
        "TCP",
        81,
        json!({"ports": [{"name": "p", "port": 81,
        "targetPort": HOLD_PORT, "protocol": "TCP"}]}),
    ));
    e.apply(slice("hold", "TCP", HOLD_PORT, ABC));
    metrics_everywhere(&e);
    e.start_daemon();
    check_reasons(&mut e);
    check_remote(&c);
    check_traffic();
    check_listing_and_cli(&e);
    check_drift(&mut e);
    check_drain(&mut e, &c);
    assert_eq!(e.stop_daemon().code(), Some(0), "{}", e.log());
});
