//! End-to-end: the feature gates that change what the real `kube-proxy` binary does, in a UML guest
//! against the test API server. One boot, four daemon runs:
//!
//! 1. `AllowServiceExternalIPs: false` (and `ComponentStatusz: false`): a Service's `spec.externalIPs`
//!    get no virtual server, no `kube-ipvs0` address and no `KUBE-EXTERNAL-IP` entry, and do not answer,
//!    while its ClusterIP and a LoadBalancer's ingress IP are programmed; `/statusz` is not served,
//!    `/flagz` is.
//! 2. The gate at its default (on): the external IP is programmed and answers.
//! 3. Off again: the restart removes what run 2 programmed for the external IP (it is ours).
//! 4. `KubeProxyIPVS: false`: the binary refuses to start, naming the gate, and changes nothing.
mod common;

use common::e2e::{
    ABC, E2e, KernelState, METRICS, Options, abc_pods, answers, client, distinct, has_vs, http_get,
    ip, ipvs, ipvs0_addrs, real_servers, service, set_members, slice,
};
use serde_json::json;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(2);
const EXT: &str = "192.168.99.10";
const EXT_VS: &str = "192.168.99.10:80";

/// The kernel objects of the external IP: (virtual server, kube-ipvs0 address, set entry).
fn external_ip_state() -> (bool, bool, bool) {
    (
        has_vs(&ipvs(), "-t", EXT_VS),
        ipvs0_addrs().contains(&format!("{EXT}/32")),
        set_members("KUBE-EXTERNAL-IP").contains(&format!("{EXT},tcp:80")),
    )
}

/// Rewrites the fixture's configuration with `gates` as its `featureGates` (none when empty).
fn set_gates(e: &E2e, gates: &str) {
    let text = std::fs::read_to_string(&e.config_path).expect("read config");
    let base = text
        .split("featureGates:")
        .next()
        .unwrap_or(&text)
        .to_string();
    let gates = if gates.is_empty() {
        String::new()
    } else {
        format!("featureGates:\n{gates}")
    };
    std::fs::write(&e.config_path, format!("{base}{gates}")).expect("write config");
}

uml_test!(
    gates_change_what_the_binary_programs,
    common::e2e::boot(),
    {
        let _pods = abc_pods();
        let outside = client("client-b", "192.168.20.2", "192.168.20.1");
        let mut e = E2e::start(Options::default());
        set_gates(
            &e,
            "  AllowServiceExternalIPs: false\n  ComponentStatusz: false\n",
        );
        let mut lb = service(
            "lb",
            "10.96.0.40",
            "TCP",
            80,
            json!({"type": "LoadBalancer"}),
        );
        lb["spec"]["ports"][0]["nodePort"] = json!(30040);
        lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.168.99.20"}]}});
        for o in [
            service(
                "ext",
                "10.96.0.30",
                "TCP",
                80,
                json!({"externalIPs": [EXT]}),
            ),
            slice("ext", "TCP", 8080, ABC),
            lb,
            slice("lb", "TCP", 8080, ABC),
        ] {
            e.apply(o);
        }

        // Run 1: the gate off.
        e.start_daemon();
        let programmed = ["10.96.0.30:80", "192.168.99.20:80", "10.0.0.10:30040"];
        e.wait_ipvs("ClusterIP, LB and NodePort virtual servers", |t| {
            programmed
                .iter()
                .all(|vs| real_servers(t, "-t", vs).len() == 3)
        });
        assert_eq!(external_ip_state(), (false, false, false), "{}", ipvs());
        let started = Instant::now();
        let refused = outside.tcp_request(ip(EXT), 80, Duration::from_secs(1));
        assert!(
            refused.is_err(),
            "the external IP answered with AllowServiceExternalIPs off: {refused:?}"
        );
        println!(
            "external IP with the gate off: {refused:?} after {:?}",
            started.elapsed()
        );
        let got = answers(3, "LoadBalancer", || {
            outside.tcp_request(ip("192.168.99.20"), 80, T)
        });
        assert_eq!(got.len(), 3);
        let metrics: std::net::SocketAddr = METRICS.parse().unwrap();
        assert_eq!(http_get(metrics, "/statusz").map(|r| r.status), Some(404));
        assert_eq!(http_get(metrics, "/flagz").map(|r| r.status), Some(200));
        let log = e.log();
        assert!(
        log.contains(
            "Setting deprecated feature gate AllowServiceExternalIPs=false. It will be removed in a future release."
        ),
        "{log}"
    );
        assert!(e.stop_daemon().success());

        // Run 2: the gate at its default (on in 1.36-1.39).
        set_gates(&e, "");
        e.start_daemon();
        e.wait_for(
            "the external IP's virtual server",
            Duration::from_secs(90),
            |_| external_ip_state() == (true, true, true),
        );
        e.wait_ipvs("3 real servers on the external IP", |t| {
            real_servers(t, "-t", EXT_VS).len() == 3
        });
        let got = answers(6, "external IP", || outside.tcp_request(ip(EXT), 80, T));
        assert_eq!(distinct(&got).len(), 3, "external IP answers {got:?}");
        assert_eq!(http_get(metrics, "/statusz").map(|r| r.status), Some(200));
        assert!(e.stop_daemon().success());

        // Run 3: off again; the start-up sync removes the external IP's objects, and only those.
        set_gates(&e, "  AllowServiceExternalIPs: false\n");
        e.start_daemon();
        e.wait_for(
            "the external IP's objects removed",
            Duration::from_secs(90),
            |_| external_ip_state() == (false, false, false),
        );
        let t = ipvs();
        assert!(
            programmed
                .iter()
                .all(|vs| real_servers(&t, "-t", vs).len() == 3),
            "{t}"
        );
        assert!(e.stop_daemon().success());

        // Run 4: KubeProxyIPVS off refuses to start, naming the gate; the kernel is left as it was.
        set_gates(&e, "  KubeProxyIPVS: false\n");
        let before = KernelState::read();
        e.spawn_daemon();
        let end = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = e.daemon_exit() {
                break st;
            }
            assert!(Instant::now() < end, "still running:\n{}", e.log());
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = e.log();
        assert_eq!(status.code(), Some(1), "{log}");
        assert!(
            log.contains("featureGates") && log.contains("the KubeProxyIPVS feature gate is off"),
            "{log}"
        );
        let after = KernelState::read();
        assert!(before == after, "{}", before.diff(&after));
    }
);
