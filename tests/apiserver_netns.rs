//! Pods as network namespaces in the UML guest: TCP/UDP servers reached directly from the root namespace
//! and from another pod, and through an IPVS virtual server in masquerade mode (set up with ipvsadm here).
mod common;

use common::apiserver::{Kind, TestApiServer};
use common::netns::{Pod, tcp_request, udp_request};
use common::uml::sh;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(3);

fn tally(replies: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in replies {
        *m.entry(r.clone()).or_insert(0) += 1;
    }
    m
}

uml_test!(pods_answer_directly_and_through_ipvs, {
    let a = Pod::create("pod-a", "10.244.0.11", "10.244.0.1").unwrap();
    let b = Pod::create("pod-b", "10.244.0.12", "10.244.0.1").unwrap();
    let client = Pod::create("client-with-a-long-name", "10.244.0.20", "10.244.0.1").unwrap();
    for p in [&a, &b] {
        p.serve_tcp(8080).unwrap();
        p.serve_udp(5353).unwrap();
    }
    // A second server on the same port fails to bind, and says so.
    assert!(a.serve_tcp(8080).is_err());
    let (ip_a, ip_b) = (IpAddr::V4(a.ip), IpAddr::V4(b.ip));

    // Directly from the root namespace.
    assert_eq!(tcp_request(ip_a, 8080, T).unwrap(), "pod-a");
    assert_eq!(tcp_request(ip_b, 8080, T).unwrap(), "pod-b");
    assert_eq!(udp_request(ip_a, 5353, T).unwrap(), "pod-a");
    assert_eq!(udp_request(ip_b, 5353, T).unwrap(), "pod-b");
    assert_eq!(
        sh("curl -sS --max-time 3 http://10.244.0.12:8080/"),
        "pod-b"
    );
    assert!(
        tcp_request(ip_a, 9999, T).is_err(),
        "nothing listens on 9999"
    );

    // Pod to pod: the server sees the client pod's IP as source.
    assert_eq!(client.tcp_request(ip_a, 8080, T).unwrap(), "pod-a");
    assert_eq!(client.udp_request(ip_b, 5353, T).unwrap(), "pod-b");
    assert!(
        a.peers().iter().any(|p| p.ip() == IpAddr::V4(client.ip)),
        "{:?}",
        a.peers()
    );
    assert!(
        b.peers().iter().any(|p| p.ip() == IpAddr::V4(client.ip)),
        "{:?}",
        b.peers()
    );
    let addrs = client.exec("ip -4 -o addr show dev eth0").unwrap();
    assert!(addrs.contains("10.244.0.20/32"), "{addrs}");
    assert!(client.exec("false").is_err());

    // Through IPVS (NAT), round robin over both pods, from the root namespace and from the client pod.
    sh("ip link add kprs-test-vip type dummy && ip addr add 10.96.0.10/32 dev kprs-test-vip");
    sh("ipvsadm -A -t 10.96.0.10:80 -s rr");
    sh("ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.11:8080 -m");
    sh("ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.12:8080 -m");
    sh("ipvsadm -A -u 10.96.0.10:53 -s rr");
    sh("ipvsadm -a -u 10.96.0.10:53 -r 10.244.0.11:5353 -m");
    sh("ipvsadm -a -u 10.96.0.10:53 -r 10.244.0.12:5353 -m");
    let vip: IpAddr = "10.96.0.10".parse().unwrap();
    let tcp: Vec<String> = (0..4).map(|_| tcp_request(vip, 80, T).unwrap()).collect();
    assert_eq!(
        tally(&tcp),
        BTreeMap::from([("pod-a".into(), 2), ("pod-b".into(), 2)]),
        "{tcp:?}"
    );
    let udp: Vec<String> = (0..4).map(|_| udp_request(vip, 53, T).unwrap()).collect();
    assert_eq!(
        tally(&udp),
        BTreeMap::from([("pod-a".into(), 2), ("pod-b".into(), 2)]),
        "{udp:?}"
    );
    let from_pod: Vec<String> = (0..4)
        .map(|_| client.tcp_request(vip, 80, T).unwrap())
        .collect();
    assert_eq!(
        tally(&from_pod),
        BTreeMap::from([("pod-a".into(), 2), ("pod-b".into(), 2)]),
        "{from_pod:?}"
    );
    let stats = sh("ipvsadm -Ln --stats -t 10.96.0.10:80");
    assert!(
        stats.contains("10.244.0.11:8080") && stats.contains("10.244.0.12:8080"),
        "{stats}"
    );
    sh("ipvsadm -C && ip link del kprs-test-vip");

    // IPv6: the same servers answer on the pods' IPv6 addresses, directly and through an IPv6 virtual server.
    let mut a = a;
    let mut b = b;
    let mut client = client;
    a.add_ipv6("fd00:10:244::11", "fd00:10:244::1").unwrap();
    b.add_ipv6("fd00:10:244::12", "fd00:10:244::1").unwrap();
    client
        .add_ipv6("fd00:10:244::20", "fd00:10:244::1")
        .unwrap();
    let (a6, b6): (IpAddr, IpAddr) = (
        "fd00:10:244::11".parse().unwrap(),
        "fd00:10:244::12".parse().unwrap(),
    );
    assert_eq!(tcp_request(a6, 8080, T).unwrap(), "pod-a");
    assert_eq!(udp_request(b6, 5353, T).unwrap(), "pod-b");
    assert_eq!(client.tcp_request(b6, 8080, T).unwrap(), "pod-b");
    let c6: IpAddr = "fd00:10:244::20".parse().unwrap();
    assert!(b.peers().iter().any(|p| p.ip() == c6), "{:?}", b.peers());
    sh(
        "ip link add kprs-test-vip6 type dummy && ip -6 addr add fd00:96::10/128 dev kprs-test-vip6 nodad",
    );
    sh("ipvsadm -A -t [fd00:96::10]:80 -s rr");
    sh("ipvsadm -a -t [fd00:96::10]:80 -r [fd00:10:244::11]:8080 -m");
    sh("ipvsadm -a -t [fd00:96::10]:80 -r [fd00:10:244::12]:8080 -m");
    let vip6: IpAddr = "fd00:96::10".parse().unwrap();
    let v6: Vec<String> = (0..4)
        .map(|_| client.tcp_request(vip6, 80, T).unwrap())
        .collect();
    assert_eq!(
        tally(&v6),
        BTreeMap::from([("pod-a".into(), 2), ("pod-b".into(), 2)]),
        "{v6:?}"
    );
    sh("ipvsadm -C && ip link del kprs-test-vip6");

    // The test API server works in the guest and is reachable from a pod through its gateway address.
    let api = TestApiServer::start("0.0.0.0:0").unwrap();
    api.apply_value(
        Kind::Node,
        serde_json::json!({"metadata": {"name": "uml-node"}}),
    )
    .unwrap();
    let port = api.addr().port();
    let body = client
        .exec(&format!(
            "curl -sS --max-time 3 http://10.244.0.1:{port}/api/v1/nodes"
        ))
        .unwrap();
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "uml-node", "{body}");
    drop(api);

    // Cleanup removes namespaces and host links.
    let host_if = client.host_if.clone();
    drop((a, b, client));
    let left = sh("ip netns list");
    assert!(left.trim().is_empty(), "{left}");
    let links = sh("ip -o link show");
    assert!(
        !links.contains("vp-pod-a") && !links.contains(&host_if),
        "{links}"
    );
});
