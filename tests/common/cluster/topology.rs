//! The address plan of a multi-node cluster and the namespaces, links and routes that carry it.
#![allow(dead_code)]

use crate::common::netns::{Pod, write_sysctl};
use crate::common::uml::sh;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The L2 segment: a bridge in the root namespace, which holds the control plane (the test API server).
pub const BRIDGE: &str = "kpseg";
/// The root namespace's address on the segment (the test API server listens there).
pub const CONTROL_IP: &str = "10.0.0.1";
/// Its IPv6 address.
pub const CONTROL_IP6: &str = "fd00:10::1";
/// The router's address on the segment (every node's default gateway).
pub const ROUTER_IP: &str = "10.0.0.254";
/// Its IPv6 address.
pub const ROUTER_IP6: &str = "fd00:10::fe";
/// The router's network namespace.
pub const ROUTER: &str = "router";
/// The outside client inside the `loadBalancerSourceRanges` CIDR [`ALLOWED_CIDR`].
pub const CLIENT_IN: &str = "client-in";
/// Its address and gateway (on the router).
pub const CLIENT_IN_IP: (&str, &str) = ("192.168.10.2", "192.168.10.1");
/// Its IPv6 address and gateway.
pub const CLIENT_IN_IP6: (&str, &str) = ("fd00:c1::2", "fd00:c1::1");
/// The outside client outside [`ALLOWED_CIDR`].
pub const CLIENT_OUT: &str = "client-out";
/// Its address and gateway (on the router).
pub const CLIENT_OUT_IP: (&str, &str) = ("192.168.20.2", "192.168.20.1");
/// Its IPv6 address and gateway.
pub const CLIENT_OUT_IP6: (&str, &str) = ("fd00:c2::2", "fd00:c2::1");
/// The CIDR `client-in` is in and `client-out` is not (for `loadBalancerSourceRanges`).
pub const ALLOWED_CIDR: &str = "192.168.10.0/24";
/// The daemons' `clusterCIDR` (every node's pod CIDR is inside).
pub const CLUSTER_CIDRS: &str = "10.244.0.0/16,fd00:10:244::/56";
/// Node names, in order (a cluster has at most this many nodes).
pub const NODE_NAMES: [&str; 6] = ["node-a", "node-b", "node-c", "node-d", "node-e", "node-f"];

/// The addresses of node `i` (0-based).
#[derive(Clone, Debug)]
pub struct NodeAddrs {
    /// Node (and network namespace) name.
    pub name: String,
    /// Address on the segment (`eth0`), 10.0.0.11 + i.
    pub ip: Ipv4Addr,
    /// IPv6 address on the segment.
    pub ip6: Ipv6Addr,
    /// Pod CIDR, 10.244.(i+1).0/24.
    pub pod_cidr: String,
    /// IPv6 pod CIDR, fd00:10:244:(i+1)::/64.
    pub pod_cidr6: String,
    /// Gateway of this node's pods (on each pod's host-side veth).
    pub pod_gw: Ipv4Addr,
    /// IPv6 gateway of this node's pods.
    pub pod_gw6: Ipv6Addr,
}

impl NodeAddrs {
    /// The plan for node `i`.
    pub fn of(i: usize) -> NodeAddrs {
        let n = i + 1;
        NodeAddrs {
            name: NODE_NAMES[i].to_string(),
            ip: Ipv4Addr::new(10, 0, 0, 11 + i as u8),
            ip6: format!("fd00:10::{}", 11 + i).parse().expect("node IPv6"),
            pod_cidr: format!("10.244.{n}.0/24"),
            pod_cidr6: format!("fd00:10:244:{n}::/64"),
            pod_gw: Ipv4Addr::new(10, 244, n as u8, 1),
            pod_gw6: format!("fd00:10:244:{n}::1")
                .parse()
                .expect("pod IPv6 gateway"),
        }
    }

    /// The `k`-th pod's addresses on this node: 10.244.(i+1).(10+k) and fd00:10:244:(i+1)::(10+k).
    pub fn pod_ips(&self, k: usize) -> (Ipv4Addr, Ipv6Addr) {
        let [a, b, c, _] = self.pod_gw.octets();
        let v4 = Ipv4Addr::new(a, b, c, 10 + k as u8);
        let prefix = self
            .pod_cidr6
            .trim_end_matches("/64")
            .trim_end_matches("::");
        let v6 = format!("{prefix}::{}", 10 + k).parse().expect("pod IPv6");
        (v4, v6)
    }

    /// The node's address of `family` ("IPv4"/"IPv6").
    pub fn ip_of(&self, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(self.ip6)
        } else {
            IpAddr::V4(self.ip)
        }
    }
}

/// Runs `ip -n ns -batch -` with `lines`, panicking with the output on failure.
pub fn ip_batch(ns: Option<&str>, lines: &[String]) {
    let target = ns.map(|n| format!("-n {n} ")).unwrap_or_default();
    sh(&format!(
        "ip {target}-batch - <<'EOF'\n{}\nEOF",
        lines.join("\n")
    ));
}

/// Loads the bridge module and hmac (SCTP listeners sign cookies with hmac(md5); the kernel cannot load
/// it by itself in the guest), which are not in every guest's list, and makes the segment with the
/// control address.
pub fn make_segment() {
    sh("modprobe -a -d /run/m bridge hmac");
    ip_batch(
        None,
        &[
            format!("link add {BRIDGE} type bridge"),
            format!("link set {BRIDGE} up"),
            format!("addr add {CONTROL_IP}/24 dev {BRIDGE}"),
            format!("addr add {CONTROL_IP6}/64 dev {BRIDGE} nodad"),
        ],
    );
}

/// Creates namespace `ns` with `eth0` on the segment at `ip`/24 and `ip6`/64 (no DAD), forwarding on.
fn attach(ns: &str, ip: &str, ip6: &str) {
    let host = format!("sg-{ns}");
    sh(&format!("ip netns add {ns}"));
    for key in [
        "net/ipv6/conf/all/accept_dad",
        "net/ipv6/conf/default/accept_dad",
    ] {
        write_sysctl(Some(ns), key, "0").expect("accept_dad");
    }
    ip_batch(
        None,
        &[
            format!("link add {host} type veth peer name eth0 netns {ns}"),
            format!("link set {host} master {BRIDGE}"),
            format!("link set {host} up"),
        ],
    );
    ip_batch(
        Some(ns),
        &[
            "link set lo up".to_string(),
            "link set eth0 up".to_string(),
            format!("addr add {ip}/24 dev eth0"),
            format!("addr add {ip6}/64 dev eth0 nodad"),
        ],
    );
    write_sysctl(Some(ns), "net/ipv4/ip_forward", "1").expect("ip_forward");
    write_sysctl(Some(ns), "net/ipv6/conf/all/forwarding", "1").expect("IPv6 forwarding");
}

/// Makes node `me`'s namespace on the segment: default routes via the router, a route to every other
/// node's pod CIDRs via that node (a flat, routed CNI).
pub fn make_node(me: &NodeAddrs, all: &[NodeAddrs]) {
    attach(&me.name, &me.ip.to_string(), &me.ip6.to_string());
    let mut routes = vec![
        format!("route add default via {ROUTER_IP}"),
        format!("route add ::/0 via {ROUTER_IP6}"),
    ];
    for other in all.iter().filter(|o| o.name != me.name) {
        routes.push(format!("route add {} via {}", other.pod_cidr, other.ip));
        routes.push(format!("route add {} via {}", other.pod_cidr6, other.ip6));
    }
    ip_batch(Some(&me.name), &routes);
}

/// Routes to every node's pod CIDRs via that node, in namespace `ns` (None: the root namespace).
fn pod_routes(ns: Option<&str>, all: &[NodeAddrs]) {
    let routes: Vec<String> = all
        .iter()
        .flat_map(|n| {
            [
                format!("route add {} via {}", n.pod_cidr, n.ip),
                format!("route add {} via {}", n.pod_cidr6, n.ip6),
            ]
        })
        .collect();
    ip_batch(ns, &routes);
}

/// Makes the router on the segment with the two outside clients behind it (each a [`Pod`] whose host
/// side is the router), and routes to the pod CIDRs in the router and the root namespace.
pub fn make_router(all: &[NodeAddrs]) -> (Pod, Pod) {
    attach(ROUTER, ROUTER_IP, ROUTER_IP6);
    pod_routes(Some(ROUTER), all);
    pod_routes(None, all);
    ip_batch(
        None,
        &[
            format!("route add 192.168.0.0/16 via {ROUTER_IP}"),
            format!("route add fd00:c1::/64 via {ROUTER_IP6}"),
            format!("route add fd00:c2::/64 via {ROUTER_IP6}"),
        ],
    );
    let client = |name: &str, v4: (&str, &str), v6: (&str, &str)| {
        let mut c = Pod::create_in(Some(ROUTER), name, v4.0, v4.1)
            .unwrap_or_else(|e| panic!("client {name}: {e:#}"));
        c.add_ipv6(v6.0, v6.1)
            .unwrap_or_else(|e| panic!("client {name} IPv6: {e:#}"));
        c
    };
    (
        client(CLIENT_IN, CLIENT_IN_IP, CLIENT_IN_IP6),
        client(CLIENT_OUT, CLIENT_OUT_IP, CLIENT_OUT_IP6),
    )
}

/// Points the router's route to `vip` (a /32 or /128) at `nodes`: one next hop, or ECMP over several.
pub fn route_vip(vip: IpAddr, nodes: &[&NodeAddrs]) {
    let (flag, len) = if vip.is_ipv6() {
        ("-6 ", 128)
    } else {
        ("", 32)
    };
    let hops: Vec<String> = nodes
        .iter()
        .map(|n| format!("nexthop via {}", n.ip_of(vip.is_ipv6())))
        .collect();
    let route = match hops.as_slice() {
        [one] => one.trim_start_matches("nexthop ").to_string(),
        _ => hops.join(" "),
    };
    sh(&format!(
        "ip -n {ROUTER} {flag}route replace {vip}/{len} {route}"
    ));
}
