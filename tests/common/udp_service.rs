//! One UDP Service on every path (ClusterIP, NodePort, external IP, LoadBalancer IP) with echo pods behind
//! it, for the UDP transition test and the rollout bench: the objects, the pods, the flows through each
//! path, and waiting for the kernel.
#![allow(dead_code)]

use super::e2e::{E2e, NODE, NODE_IP, POD_GW, ipvs, real_servers};
use super::netns::Pod;
use super::udp_stream::{Mode, UdpStream, Window};
use super::uml::sh;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

/// The pods' UDP port (the Services' targetPort).
pub const TARGET_PORT: u16 = 5354;

/// A UDP LoadBalancer Service: port 53 → [`TARGET_PORT`], a NodePort, one external IP, one ingress IP.
#[derive(Clone, Copy, Debug)]
pub struct UdpService {
    pub name: &'static str,
    pub cluster_ip: &'static str,
    pub external_ip: &'static str,
    pub lb_ip: &'static str,
    pub node_port: u16,
}

/// The Service under test in the UDP suites (`e2e_udp`, the `udp_rollout` bench).
pub const DNS: UdpService = UdpService {
    name: "dns",
    cluster_ip: "10.96.0.53",
    external_ip: "192.168.99.53",
    lb_ip: "192.168.99.54",
    node_port: 30053,
};
/// Another Service, unchanged: it keeps every set of ours non-empty while the one under test changes, as
/// on a real node (an emptied set drops its rules: an iptables-restore the changes would wait for).
pub const KEEP: UdpService = UdpService {
    name: "keep",
    cluster_ip: "10.96.0.54",
    external_ip: "192.168.99.55",
    lb_ip: "192.168.99.56",
    node_port: 30054,
};

/// An endpoint's state in a slice.
#[derive(Clone, Copy, Debug)]
pub enum Ep {
    /// Ready and serving.
    Ready,
    /// Terminating but still serving (a pod in its grace period).
    Draining,
}

impl UdpService {
    /// The Service object.
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": "default"},
            "spec": {
                "type": "LoadBalancer",
                "clusterIP": self.cluster_ip, "clusterIPs": [self.cluster_ip],
                "externalIPs": [self.external_ip],
                "ports": [{"name": "p", "port": 53, "targetPort": TARGET_PORT, "protocol": "UDP",
                           "nodePort": self.node_port}]
            },
            "status": {"loadBalancer": {"ingress": [{"ip": self.lb_ip}]}}
        })
    }

    /// Its EndpointSlice `<name>-1` with these pods (all on this node).
    pub fn slice(&self, eps: &[(&Pod, Ep)]) -> Value {
        let endpoints: Vec<Value> = eps
            .iter()
            .map(|(p, st)| {
                let ready = matches!(st, Ep::Ready);
                json!({"addresses": [p.ip.to_string()], "nodeName": NODE,
                       "conditions": {"ready": ready, "serving": true, "terminating": !ready}})
            })
            .collect();
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{}-1", self.name), "namespace": "default",
                         "labels": {"kubernetes.io/service-name": self.name}},
            "addressType": "IPv4",
            "ports": [{"name": "p", "port": TARGET_PORT, "protocol": "UDP"}],
            "endpoints": endpoints
        })
    }

    /// Its virtual servers (`addr:port`).
    pub fn virtual_servers(&self) -> [String; 4] {
        [
            format!("{}:53", self.cluster_ip),
            format!("{NODE_IP}:{}", self.node_port),
            format!("{}:53", self.external_ip),
            format!("{}:53", self.lb_ip),
        ]
    }

    /// Waits until every virtual server of the Service has exactly `pods` as real servers.
    pub fn wait_real_servers(&self, e: &mut E2e, pods: &[&Pod]) {
        let mut want: Vec<String> = pods
            .iter()
            .map(|p| format!("{}:{TARGET_PORT}", p.ip))
            .collect();
        want.sort();
        let vss = self.virtual_servers();
        e.wait_ipvs(&format!("{} real servers {want:?}", self.name), |t| {
            vss.iter().all(|vs| real_servers(t, "-u", vs) == want)
        });
    }

    /// One flow per path: ClusterIP from the pod `inside` and from the node, NodePort, external IP and
    /// LoadBalancer IP from the client `outside`.
    pub fn flows(
        &self,
        inside: &Pod,
        outside: &Pod,
        mode: Mode,
        every: Duration,
    ) -> Vec<UdpStream> {
        let to = |ip: &str, port: u16| -> SocketAddr { format!("{ip}:{port}").parse().unwrap() };
        let out = Some(outside.name.as_str());
        vec![
            UdpStream::start(
                "pod -> ClusterIP",
                Some(&inside.name),
                to(self.cluster_ip, 53),
                mode,
                every,
            ),
            UdpStream::start(
                "node -> ClusterIP",
                None,
                to(self.cluster_ip, 53),
                mode,
                every,
            ),
            UdpStream::start(
                "outside -> NodePort",
                out,
                to(NODE_IP, self.node_port),
                mode,
                every,
            ),
            UdpStream::start(
                "outside -> externalIP",
                out,
                to(self.external_ip, 53),
                mode,
                every,
            ),
            UdpStream::start(
                "outside -> LoadBalancer IP",
                out,
                to(self.lb_ip, 53),
                mode,
                every,
            ),
        ]
    }
}

/// A pod answering `<name> <payload>` on [`TARGET_PORT`].
pub fn echo_pod(name: &str, ip: &str) -> Pod {
    let p = Pod::create(name, ip, POD_GW).unwrap_or_else(|e| panic!("pod {name}: {e:#}"));
    p.serve_udp_echo(TARGET_PORT).expect("serve udp echo");
    p
}

/// Gives the node a default route (via `node0`, which drops what it is given): packets to a Service
/// address that is gone leave the node, as on a real node, instead of failing the route lookup. Creates
/// `node0` with the node IP first if needed (as [`E2e::start`] does).
pub fn default_route() {
    sh(&format!(
        "ip link show node0 >/dev/null 2>&1 || ip link add node0 type dummy; \
         ip addr replace {NODE_IP}/24 dev node0; ip link set node0 up; \
         ip route replace default via 10.0.0.1 dev node0"
    ));
}

/// Waits until every flow has answers from `pods` for datagrams sent after `since`; panics naming the
/// flows that stay black-holed, with the conntrack and IPVS connection tables.
pub fn wait_recovered(
    flows: &[UdpStream],
    pods: &[&str],
    since: Duration,
    within: Duration,
    what: &str,
) {
    let dead: Vec<&str> = flows
        .iter()
        .filter(|f| !f.wait_answer_from(pods, since, within))
        .map(|f| f.name.as_str())
        .collect();
    assert!(
        dead.is_empty(),
        "{what}: no answer from {pods:?} within {within:?} on {dead:?}\n--- conntrack ---\n{}\n--- ipvsadm -Lnc ---\n{}\n--- ipvsadm -Sn ---\n{}",
        sh("conntrack -L -p udp 2>&1 || true"),
        sh("ipvsadm -Lnc"),
        ipvs()
    );
}

/// One line per flow: what it lost in `[from, until)`.
pub fn report(flows: &[UdpStream], what: &str, from: Duration, until: Duration) -> Vec<Window> {
    flows
        .iter()
        .map(|f| {
            let w = f.window(from, until);
            println!("{what:<26} {:<27} {}", f.name, w.describe(from));
            w
        })
        .collect()
}
