//! Many nodes, one cluster, in one UML guest: a network namespace per node on one L2 segment, a router with
//! two outside clients, pods behind each node, and one real daemon per node against one test API server.
//!
//! ```text
//!                     root namespace: test API server on 10.0.0.1 (control plane)
//!                                   │ bridge kpseg 10.0.0.0/24, fd00:10::/64
//!        ┌──────────────────┬───────┴──────────┬──────────────────┬───────────────────┐
//!   node-a 10.0.0.11   node-b 10.0.0.12   node-c 10.0.0.13    (node-d, node-e)    router 10.0.0.254
//!   kube-proxy         kube-proxy         kube-proxy                                 │          │
//!   pods 10.244.1.0/24 pods 10.244.2.0/24 pods 10.244.3.0/24                     client-in   client-out
//!   (routed veths, routes to the other nodes' pod CIDRs)                    192.168.10.2  192.168.20.2
//! ```
//!
//! Each node's namespace has its own IPVS table, iptables, ipsets, conntrack, `kube-ipvs0` and `net.*`
//! sysctls; its daemon (the built binary, started with `ip netns exec`, `--hostname-override` and its own
//! `--config`) serves healthz on `0.0.0.0:10256` and metrics on `<node IP>:10249`, reached from the test
//! (root namespace) over the segment. Nodes route to the other nodes' pod CIDRs (a flat CNI) and default
//! to the router, which routes VIPs to one node or ECMP over several ([`Cluster::route_vip`]). Every pod
//! answers TCP 8080, UDP 5353 and SCTP 9999 with "`name` `client-ip`" ([`crate::common::netns::Seen`]).
//! Node objects carry both families' InternalIPs, the pod CIDRs and a zone label per node (`zone-a`, ...).
//!
//! ```ignore
//! let mut c = Cluster::build(Spec::default());         // 3 nodes, daemons not started
//! c.add_pod(0, "a1");                                   // a pod on node-a
//! c.add_pod(1, "b1");                                   // and one on node-b
//! c.apply(service("web", "10.96.0.10", "TCP", 80, json!({})));
//! c.apply(c.slice("web", "TCP", &["b1"]));
//! c.start_all();
//! c.wait_all("web programmed", |n| n.real_servers("-t", "10.96.0.10:80").len() == 1);
//! let seen = cluster::tcp(c.pod("a1"), ip("10.96.0.10"), 80)?;   // seen.pod == "b1", seen.client == a1's IP
//! ```
#![allow(dead_code)]

pub mod node;
pub mod topology;

pub use node::Node;
pub use topology::NodeAddrs;

use crate::common::apiserver::{Kind, TestApiServer};
use crate::common::e2e::{CONVERGE_TIMEOUT, FIRST_SYNC_TIMEOUT, kube_proxy_bin, slice_named};
use crate::common::netns::{Pod, Seen};
use crate::common::uml::{BootOptions, guest_run_dir};
use serde_json::Value;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Port every pod serves TCP on.
pub const TCP_PORT: u16 = 8080;
/// Port every pod serves UDP on.
pub const UDP_PORT: u16 = 5353;
/// Port every pod serves SCTP on.
pub const SCTP_PORT: u16 = 9999;
/// Environment variable (`1`) skipping the SCTP paths when the kernel lacks SCTP.
pub const SKIP_SCTP_ENV: &str = "KPRS_SKIP_SCTP";
/// Timeout of one request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Boot options for a cluster of `nodes`: 256M plus 128M per node, 600 s for the boot.
pub fn boot(nodes: usize) -> BootOptions {
    let mem = match nodes {
        0..=3 => "640M",
        4 => "768M",
        _ => "896M",
    };
    BootOptions {
        mem,
        timeout: Duration::from_secs(600),
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Number of nodes (at most [`topology::NODE_NAMES`]'s length).
    pub nodes: usize,
    /// Zone label per node (None: no label); nodes past the list get `zone-<letter>`.
    pub zones: Vec<Option<String>>,
    /// Lines after every node's `ipvs:` block (see [`Node::write_config`]).
    pub extra_config: String,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            nodes: 3,
            zones: Vec::new(),
            extra_config: String::new(),
        }
    }
}

/// The cluster. Dropping it kills every daemon and removes pods and clients.
pub struct Cluster {
    // Dropped in this order: the daemons first, the API server they watch last.
    /// The nodes, in order (`node-a` first).
    pub nodes: Vec<Node>,
    pods: Vec<(usize, Pod)>,
    /// The outside client inside [`topology::ALLOWED_CIDR`].
    pub client_in: Pod,
    /// The outside client outside it.
    pub client_out: Pod,
    /// The test API server every daemon watches (on the segment's control address).
    pub api: TestApiServer,
    /// Directory of the cluster's files (under the guest's run directory).
    pub dir: PathBuf,
}

impl Cluster {
    /// Builds the segment, the nodes, the router and its clients; starts the test API server with a Node
    /// object per node and writes every node's config. No daemon runs yet ([`Cluster::start_all`]).
    pub fn build(spec: Spec) -> Cluster {
        assert!(
            (1..=topology::NODE_NAMES.len()).contains(&spec.nodes),
            "{} nodes",
            spec.nodes
        );
        let dir = guest_run_dir()
            .expect("the cluster runs inside the UML guest")
            .join("cluster");
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let addrs: Vec<NodeAddrs> = (0..spec.nodes).map(NodeAddrs::of).collect();
        topology::make_segment();
        for a in &addrs {
            topology::make_node(a, &addrs);
        }
        let (client_in, client_out) = topology::make_router(&addrs);
        let api = TestApiServer::start((topology::CONTROL_IP, 0)).expect("start test API server");
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        // A private copy: another build in the shared target dir cannot swap the binary mid-test.
        let bin = dir.join("kube-proxy");
        std::fs::copy(kube_proxy_bin(), &bin).expect("copy the kube-proxy binary");
        let nodes: Vec<Node> = (0..spec.nodes)
            .map(|i| {
                let zone = match spec.zones.get(i) {
                    Some(z) => z.clone(),
                    None => Some(format!("zone-{}", (b'a' + i as u8) as char)),
                };
                let node_dir = dir.join(topology::NODE_NAMES[i]);
                Node::new(
                    i,
                    zone,
                    node_dir,
                    bin.clone(),
                    kubeconfig.clone(),
                    &spec.extra_config,
                )
            })
            .collect();
        for n in &nodes {
            api.apply_value(Kind::Node, n.object()).expect("apply Node");
        }
        Cluster {
            nodes,
            pods: Vec::new(),
            client_in,
            client_out,
            api,
            dir,
        }
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Node `i`, mutable (start, stop, restart its daemon).
    pub fn node_mut(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i]
    }

    /// Starts every daemon at once and waits for each one's first sync.
    pub fn start_all(&mut self) {
        for n in &mut self.nodes {
            n.spawn();
        }
        for n in &mut self.nodes {
            n.wait_for("the first sync", FIRST_SYNC_TIMEOUT, |n| {
                n.sync_count() >= 1.0
            });
        }
    }

    /// Creates pod `name` on node `node` with both families' addresses, serving TCP [`TCP_PORT`], UDP
    /// [`UDP_PORT`] and SCTP [`SCTP_PORT`] (unless [`SKIP_SCTP_ENV`]`=1`), each answering with its name and
    /// the client address it saw. Returns its IPv4 and IPv6 addresses.
    pub fn add_pod(&mut self, node: usize, name: &str) -> (IpAddr, IpAddr) {
        let n = &mut self.nodes[node];
        let k = n.next_pod();
        let (v4, v6) = n.addrs.pod_ips(k);
        let mut pod = Pod::create_in(
            Some(n.name()),
            name,
            &v4.to_string(),
            &n.addrs.pod_gw.to_string(),
        )
        .unwrap_or_else(|e| panic!("pod {name}: {e:#}"))
        .reporting_peers();
        pod.add_ipv6(&v6.to_string(), &n.addrs.pod_gw6.to_string())
            .unwrap_or_else(|e| panic!("pod {name} IPv6: {e:#}"));
        pod.serve_tcp(TCP_PORT).expect("serve tcp");
        pod.serve_udp(UDP_PORT).expect("serve udp");
        if !skip_sctp() {
            pod.serve_sctp(SCTP_PORT).unwrap_or_else(|e| {
                panic!("pod {name}: SCTP server: {e:#} (set {SKIP_SCTP_ENV}=1 where the kernel lacks SCTP)")
            });
        }
        self.pods.push((node, pod));
        (v4.into(), v6.into())
    }

    /// Pod `name` (panics when there is none).
    pub fn pod(&self, name: &str) -> &Pod {
        self.pods
            .iter()
            .find(|(_, p)| p.name == name)
            .map(|(_, p)| p)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// Deletes pod `name` (its namespace and host-side link).
    pub fn remove_pod(&mut self, name: &str) {
        self.pods.retain(|(_, p)| p.name != name);
    }

    /// The node pod `name` runs on.
    pub fn node_of(&self, pod: &str) -> &Node {
        let (i, _) = self
            .pods
            .iter()
            .find(|(_, p)| p.name == pod)
            .unwrap_or_else(|| panic!("no pod {pod}"));
        &self.nodes[*i]
    }

    /// The IPv4 EndpointSlice `<service>-1` with the pods `pods` (ready, each with its node's name) on
    /// the pods' port for `proto` ([`pod_port`]).
    pub fn slice(&self, service: &str, proto: &str, pods: &[&str]) -> Value {
        self.slice_of(&format!("{service}-1"), service, false, proto, pods)
    }

    /// The IPv6 EndpointSlice `<service>-v6` of the pods `pods`, as [`Cluster::slice`].
    pub fn slice_v6(&self, service: &str, proto: &str, pods: &[&str]) -> Value {
        self.slice_of(&format!("{service}-v6"), service, true, proto, pods)
    }

    fn slice_of(&self, name: &str, service: &str, v6: bool, proto: &str, pods: &[&str]) -> Value {
        let eps: Vec<(String, String)> = pods
            .iter()
            .map(|pod| {
                let p = self.pod(pod);
                let ip = match (v6, p.ipv6) {
                    (true, Some((a, _))) => a.to_string(),
                    _ => p.ip.to_string(),
                };
                (ip, self.node_of(pod).name().to_string())
            })
            .collect();
        let eps: Vec<(&str, &str, bool)> = eps
            .iter()
            .map(|(a, n)| (a.as_str(), n.as_str(), true))
            .collect();
        let family = if v6 { "IPv6" } else { "IPv4" };
        slice_named(name, service, family, proto, pod_port(proto), &eps)
    }

    /// Creates or replaces an object given as JSON (its kind from its `kind` field).
    pub fn apply(&self, obj: Value) -> u64 {
        let kind = obj["kind"].as_str().expect("object kind").to_string();
        let kind = Kind::from_kind(&kind).unwrap_or_else(|| panic!("unserved kind {kind}"));
        self.api.apply_value(kind, obj).expect("apply")
    }

    /// Points the router's route to `vip` at `nodes` (one, or ECMP over several).
    pub fn route_vip(&self, vip: IpAddr, nodes: &[usize]) {
        let addrs: Vec<&NodeAddrs> = nodes.iter().map(|&i| &self.nodes[i].addrs).collect();
        topology::route_vip(vip, &addrs);
    }

    /// Polls until `cond` holds on every node (each node checked until it holds, then the next); panics
    /// after [`CONVERGE_TIMEOUT`] with that node's report, or when a daemon exits.
    pub fn wait_all(&mut self, what: &str, cond: impl Fn(&Node) -> bool) {
        self.wait_nodes(what, &(0..self.nodes.len()).collect::<Vec<_>>(), cond);
    }

    /// [`Cluster::wait_all`] over the nodes `which` only.
    pub fn wait_nodes(&mut self, what: &str, which: &[usize], cond: impl Fn(&Node) -> bool) {
        let start = Instant::now();
        for &i in which {
            let n = &mut self.nodes[i];
            while !cond(n) {
                n.check_alive(what);
                if start.elapsed() > CONVERGE_TIMEOUT {
                    panic!("{}", n.timeout_report(what, CONVERGE_TIMEOUT));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Panics naming the first daemon that exited.
    pub fn check_alive(&mut self) {
        for n in &mut self.nodes {
            n.check_alive("the end of the test");
        }
    }
}

/// The port pods serve `proto` ("TCP", "UDP", "SCTP") on.
pub fn pod_port(proto: &str) -> u16 {
    match proto {
        "UDP" => UDP_PORT,
        "SCTP" => SCTP_PORT,
        _ => TCP_PORT,
    }
}

/// Whether [`SKIP_SCTP_ENV`]`=1` is set.
pub fn skip_sctp() -> bool {
    std::env::var(SKIP_SCTP_ENV).is_ok_and(|v| v.trim() == "1")
}

/// A request's answer as a [`Seen`] (who answered, and the client address it saw).
pub fn seen(reply: anyhow::Result<String>) -> anyhow::Result<Seen> {
    reply.and_then(|r| Seen::parse(&r))
}

/// A TCP request from `from` (a pod or client) to `addr:port`, and what the answering pod saw.
pub fn tcp(from: &Pod, addr: IpAddr, port: u16) -> anyhow::Result<Seen> {
    seen(from.tcp_request(addr, port, REQUEST_TIMEOUT))
}

/// A UDP request from `from` to `addr:port`, and what the answering pod saw.
pub fn udp(from: &Pod, addr: IpAddr, port: u16) -> anyhow::Result<Seen> {
    seen(from.udp_request(addr, port, REQUEST_TIMEOUT))
}

/// An SCTP request from `from` to `addr:port`, and what the answering pod saw.
pub fn sctp(from: &Pod, addr: IpAddr, port: u16) -> anyhow::Result<Seen> {
    let r = from.run_in(|| crate::common::netns::sctp_request(addr, port, REQUEST_TIMEOUT));
    seen(r.and_then(|r| r))
}

/// A TCP request from the node `node`'s own namespace (source: a node address).
pub fn tcp_from_node(node: &Node, addr: IpAddr, port: u16) -> anyhow::Result<Seen> {
    let r = crate::common::netns::in_netns(node.name(), || {
        crate::common::netns::tcp_request(addr, port, REQUEST_TIMEOUT)
    });
    seen(r.and_then(|r| r))
}
