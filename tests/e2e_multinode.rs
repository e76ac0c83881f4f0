//! Many nodes, one cluster (issue 28): a daemon per node in its own network namespace of one UML guest,
//! all watching one test API server, with traffic crossing nodes (`tests/common/cluster/`). Every traffic
//! assertion is on what the receiving pod saw: its name and the client address it observed.
mod common;

use common::apiserver::Kind;
use common::cluster::{self, Cluster, Spec};
use common::e2e::{distinct, ip, service};
use serde_json::json;
use std::net::IpAddr;

/// `n` TCP requests from `from` to `vip:port`: (answering pod, client address it saw) of each.
fn tcp_n(from: &common::netns::Pod, vip: IpAddr, port: u16, n: usize) -> Vec<(String, IpAddr)> {
    (0..n)
        .map(|i| {
            let s = cluster::tcp(from, vip, port)
                .unwrap_or_else(|e| panic!("{} -> {vip}:{port}: request {i}: {e:#}", from.name));
            (s.pod, s.client)
        })
        .collect()
}

fn pods_of(seen: &[(String, IpAddr)]) -> Vec<String> {
    distinct(&seen.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>())
}

// The harness itself: three nodes, a ClusterIP on node-a reaching pods on node-b and node-c, one API server
// serving every daemon's watches at once.
uml_test!(cluster_smoke, cluster::boot(3), {
    let mut c = Cluster::build(Spec::default());
    let a1 = c.add_pod(0, "a1");
    c.add_pod(1, "b1");
    c.add_pod(2, "c1");
    c.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
    c.apply(c.slice("web", "TCP", &["b1", "c1"]));
    c.start_all();
    for kind in [Kind::Service, Kind::EndpointSlice, Kind::Node] {
        assert_eq!(c.api.open_watches(kind), 3, "open {kind:?} watches");
    }
    c.wait_all("web with two real servers", |n| {
        n.real_servers("-t", "10.96.0.10:80").len() == 2
    });
    let seen = tcp_n(c.pod("a1"), ip("10.96.0.10"), 80, 8);
    assert_eq!(pods_of(&seen), vec!["b1", "c1"], "{seen:?}");
    assert!(seen.iter().all(|(_, client)| *client == a1.0), "{seen:?}");
    c.check_alive();
});
