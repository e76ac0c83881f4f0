//! Endpoint selection for one service port, as upstream's `CategorizeEndpoints` (pkg/proxy/topology.go):
//! which endpoints serve cluster-wide traffic, which serve node-local traffic, with topology hints and the
//! serving-terminating fallback.

use crate::cluster::model::{Endpoint, ServicePort};
use crate::net::IpFamily;
use std::sync::Arc;

/// The usable endpoints of one service port on this node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Categorized<'a> {
    /// Endpoints for Cluster traffic policy (topology-filtered); empty when the port never uses them.
    pub cluster: Vec<&'a Endpoint>,
    /// Endpoints on this node for Local traffic policy; empty when the port never uses them.
    pub local: Vec<&'a Endpoint>,
    /// Whether the service has any usable endpoint anywhere in the cluster.
    pub has_any: bool,
    /// Every endpoint's verdict in both sets, in input order (other families included).
    pub verdicts: Vec<Verdict>,
}

/// How one endpoint fared in one endpoint set (cluster-wide or node-local).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Pick {
    /// In the set.
    Selected,
    /// The port never uses this set (e.g. no Local policy: no node-local set).
    #[default]
    Unused,
    /// An address of the other IP family.
    OtherFamily,
    /// Not ready (and not serving while terminating).
    NotReady,
    /// Serving while terminating: used only when no ready endpoint exists.
    TerminatingFallbackOnly,
    /// Topology hints name other zones than this node's.
    TopologyOtherZone,
    /// Topology hints name other nodes than this one.
    TopologyOtherNode,
    /// On another node (the node-local set).
    OtherNode,
}

impl Pick {
    /// The explanation's reason code (empty when selected).
    pub fn code(self) -> &'static str {
        match self {
            Pick::Selected => "",
            Pick::Unused => "Unused",
            Pick::OtherFamily => "OtherFamily",
            Pick::NotReady => "NotReady",
            Pick::TerminatingFallbackOnly => "TerminatingFallbackOnly",
            Pick::TopologyOtherZone => "TopologyHintsOtherZone",
            Pick::TopologyOtherNode => "TopologyHintsOtherNode",
            Pick::OtherNode => "OtherNodeLocalPolicy",
        }
    }

    /// The reason for people.
    pub fn text(self) -> &'static str {
        match self {
            Pick::Selected => "",
            Pick::Unused => "not used by any virtual server of this port",
            Pick::OtherFamily => "address of the other IP family",
            Pick::NotReady => "not ready",
            Pick::TerminatingFallbackOnly => {
                "terminating: used only as a fallback when no endpoint is ready"
            }
            Pick::TopologyOtherZone => "topology hints assign it to another zone",
            Pick::TopologyOtherNode => "topology hints assign it to another node",
            Pick::OtherNode => "on another node, and the traffic policy is Local",
        }
    }
}

/// One endpoint's picks in both sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    pub cluster: Pick,
    pub local: Pick,
}

/// Which hint kind restricts the cluster endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopologyMode {
    All,
    SameNode,
    SameZone,
}

/// Whether the port accepts traffic from outside (NodePort, ExternalIPs or LB IPs of `family`).
pub fn externally_accessible(svc: &ServicePort, family: IpFamily) -> bool {
    svc.node_port.is_some()
        || svc.external_ips_of(family).next().is_some()
        || svc.load_balancer_ips_of(family).next().is_some()
}

/// Whether the port ever uses cluster-wide endpoints (ITP Cluster, or any external access).
pub fn uses_cluster_endpoints(svc: &ServicePort, family: IpFamily) -> bool {
    !svc.internal_policy_local || externally_accessible(svc, family)
}

/// Whether the port ever uses node-local endpoints (ITP Local, or ETP Local with external access).
pub fn uses_local_endpoints(svc: &ServicePort, family: IpFamily) -> bool {
    svc.internal_policy_local || (svc.external_policy_local() && externally_accessible(svc, family))
}

fn has_hint(hints: Option<&[Arc<str>]>, want: &str) -> bool {
    hints.is_some_and(|h| h.iter().any(|x| &**x == want))
}

fn hint_count(hints: Option<&[Arc<str>]>) -> usize {
    hints.map_or(0, <[_]>::len)
}

fn topology_mode<'a>(
    endpoints: impl Iterator<Item = &'a Endpoint>,
    node_name: &str,
    zone: &str,
) -> TopologyMode {
    let mut all_node_hints = true;
    let mut for_node = false;
    let mut all_zone_hints = true;
    let mut for_zone = false;
    for ep in endpoints.filter(|e| e.ready) {
        if hint_count(ep.hints_for_nodes()) == 0 {
            all_node_hints = false;
        } else if has_hint(ep.hints_for_nodes(), node_name) {
            for_node = true;
        }
        if hint_count(ep.hints_for_zones()) == 0 {
            all_zone_hints = false;
        } else if has_hint(ep.hints_for_zones(), zone) {
            for_zone = true;
        }
    }
    if all_node_hints && for_node {
        TopologyMode::SameNode
    } else if all_zone_hints && for_zone {
        TopologyMode::SameZone
    } else {
        TopologyMode::All
    }
}

fn available(ep: &Endpoint, mode: TopologyMode, node_name: &str, zone: &str) -> bool {
    match mode {
        TopologyMode::All => true,
        TopologyMode::SameNode => has_hint(ep.hints_for_nodes(), node_name),
        TopologyMode::SameZone => has_hint(ep.hints_for_zones(), zone),
    }
}

/// Splits the endpoints of `svc` (only those of `family` count) into cluster and local sets for a node
/// named `node_name` in `zone`: ready endpoints first, serving+terminating ones when none is ready. Every
/// endpoint's verdict in both sets is recorded (the decision record's source).
pub fn categorize<'a>(
    endpoints: &'a [Endpoint],
    svc: &ServicePort,
    family: IpFamily,
    node_name: &str,
    zone: Option<&str>,
) -> Categorized<'a> {
    let zone = zone.unwrap_or("");
    let mut out = Categorized {
        verdicts: vec![Verdict::default(); endpoints.len()],
        ..Categorized::default()
    };
    for (e, v) in endpoints.iter().zip(out.verdicts.iter_mut()) {
        if IpFamily::of(&e.ip) != family {
            *v = Verdict {
                cluster: Pick::OtherFamily,
                local: Pick::OtherFamily,
            };
        }
    }
    if uses_cluster_endpoints(svc, family) {
        cluster_set(endpoints, family, node_name, zone, &mut out);
    }
    if uses_local_endpoints(svc, family) {
        local_set(endpoints, family, node_name, &mut out);
    }
    out
}

/// Whether `e` is serving while terminating (a fallback endpoint).
fn fallback(e: &Endpoint) -> bool {
    e.serving && e.terminating
}

/// The cluster-wide set: ready endpoints the topology hints leave for this node, else the serving
/// terminating ones.
fn cluster_set<'a>(
    endpoints: &'a [Endpoint],
    family: IpFamily,
    node_name: &str,
    zone: &str,
    out: &mut Categorized<'a>,
) {
    let of_family = || endpoints.iter().filter(|e| IpFamily::of(&e.ip) == family);
    let mode = topology_mode(of_family(), node_name, zone);
    for (e, v) in endpoints.iter().zip(out.verdicts.iter_mut()) {
        if v.cluster == Pick::OtherFamily {
            continue;
        }
        v.cluster = if e.ready && available(e, mode, node_name, zone) {
            out.cluster.push(e);
            Pick::Selected
        } else if e.ready {
            match mode {
                TopologyMode::SameNode => Pick::TopologyOtherNode,
                _ => Pick::TopologyOtherZone,
            }
        } else if fallback(e) {
            Pick::TerminatingFallbackOnly
        } else {
            Pick::NotReady
        };
    }
    if out.cluster.is_empty() {
        for (e, v) in endpoints.iter().zip(out.verdicts.iter_mut()) {
            if v.cluster == Pick::TerminatingFallbackOnly {
                out.cluster.push(e);
                v.cluster = Pick::Selected;
            }
        }
    }
    out.has_any = !out.cluster.is_empty();
}

/// The node-local set: local ready endpoints, else local serving terminating ones.
fn local_set<'a>(
    endpoints: &'a [Endpoint],
    family: IpFamily,
    node_name: &str,
    out: &mut Categorized<'a>,
) {
    let mut local_ready = false;
    let mut local_terminating = false;
    for e in endpoints.iter().filter(|e| IpFamily::of(&e.ip) == family) {
        let local = e.is_local(node_name);
        if e.ready {
            out.has_any = true;
            local_ready |= local;
        } else if fallback(e) {
            out.has_any = true;
            local_terminating |= local;
        }
    }
    for (e, v) in endpoints.iter().zip(out.verdicts.iter_mut()) {
        if v.local == Pick::OtherFamily {
            continue;
        }
        let selected = if local_ready { e.ready } else { fallback(e) };
        v.local = if !e.is_local(node_name) {
            Pick::OtherNode
        } else if selected && (local_ready || local_terminating) {
            out.local.push(e);
            Pick::Selected
        } else if fallback(e) {
            Pick::TerminatingFallbackOnly
        } else {
            Pick::NotReady
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::{Protocol, ServicePortName, Topology};

    fn svc(itp_local: bool, etp_local: bool, node_port: Option<u16>) -> ServicePort {
        let name = ServicePortName {
            namespace: "ns1".into(),
            name: "svc1".into(),
            port_name: "p80".into(),
            protocol: Protocol::Tcp,
        };
        ServicePort {
            node_port,
            external_policy_local: etp_local,
            internal_policy_local: itp_local,
            ..ServicePort::new(name, vec!["172.30.1.1".parse().unwrap()], 80)
        }
    }

    fn ep(ip: &str, ready: bool, serving: bool, terminating: bool, node: &str) -> Endpoint {
        let mut e = Endpoint::new(ip.parse().unwrap(), 80).with_topology(Topology::on_node(node));
        e.ready = ready;
        e.serving = serving;
        e.terminating = terminating;
        e
    }

    fn zoned(mut e: Endpoint, zones: &[&str]) -> Endpoint {
        e.edit_topology(|t| {
            t.hints_for_zones = Some(zones.iter().map(|z| Arc::from(*z)).collect())
        });
        e
    }

    fn noded(mut e: Endpoint, nodes: &[&str]) -> Endpoint {
        e.edit_topology(|t| {
            t.hints_for_nodes = Some(nodes.iter().map(|z| Arc::from(*z)).collect())
        });
        e
    }

    fn ips(v: &[&Endpoint]) -> Vec<String> {
        let mut out: Vec<String> = v.iter().map(|e| e.ip.to_string()).collect();
        out.sort();
        out
    }

    // Cases from upstream pkg/proxy/topology_test.go (TestCategorizeEndpoints).
    #[test]
    fn hints_enabled_zone_hints_for_this_zone() {
        let eps = vec![
            zoned(ep("10.1.2.3", true, true, false, "n1"), &["zone-a"]),
            zoned(ep("10.1.2.4", true, true, false, "n2"), &["zone-b"]),
            zoned(ep("10.1.2.5", true, true, false, "n3"), &["zone-c"]),
            zoned(ep("10.1.2.6", true, true, false, "n4"), &["zone-a"]),
        ];
        let c = categorize(
            &eps,
            &svc(false, false, None),
            IpFamily::V4,
            "n9",
            Some("zone-a"),
        );
        assert_eq!(ips(&c.cluster), vec!["10.1.2.3", "10.1.2.6"]);
        assert!(c.local.is_empty());
        assert!(c.has_any);
    }

    #[test]
    fn partial_zone_hints_are_ignored() {
        let eps = vec![
            zoned(ep("10.1.2.3", true, true, false, "n1"), &["zone-a"]),
            ep("10.1.2.4", true, true, false, "n2"),
        ];
        let c = categorize(
            &eps,
            &svc(false, false, None),
            IpFamily::V4,
            "n9",
            Some("zone-a"),
        );
        assert_eq!(ips(&c.cluster), vec!["10.1.2.3", "10.1.2.4"]);
    }

    #[test]
    fn zone_hints_without_match_are_ignored() {
        let eps = vec![
            zoned(ep("10.1.2.3", true, true, false, "n1"), &["zone-b"]),
            zoned(ep("10.1.2.4", true, true, false, "n2"), &["zone-c"]),
        ];
        let c = categorize(
            &eps,
            &svc(false, false, None),
            IpFamily::V4,
            "n9",
            Some("zone-a"),
        );
        assert_eq!(ips(&c.cluster), vec!["10.1.2.3", "10.1.2.4"]);
        // Node without a zone label: zone hints cannot match.
        let c = categorize(&eps, &svc(false, false, None), IpFamily::V4, "n9", None);
        assert_eq!(ips(&c.cluster), vec!["10.1.2.3", "10.1.2.4"]);
    }

    #[test]
    fn node_hints_win_over_zone_hints() {
        let eps = vec![
            noded(
                zoned(ep("10.1.2.3", true, true, false, "n1"), &["zone-a"]),
                &["node-1"],
            ),
            noded(
                zoned(ep("10.1.2.4", true, true, false, "n2"), &["zone-a"]),
                &["node-2"],
            ),
        ];
        let c = categorize(
            &eps,
            &svc(false, false, None),
            IpFamily::V4,
            "node-1",
            Some("zone-a"),
        );
        assert_eq!(ips(&c.cluster), vec!["10.1.2.3"]);
        // Not every ready endpoint has a node hint: fall back to zone hints.
        let mut eps2 = eps.clone();
        eps2[1].edit_topology(|t| t.hints_for_nodes = None);
        let c = categorize(
            &eps2,
            &svc(false, false, None),
            IpFamily::V4,
            "node-1",
            Some("zone-a"),
        );
        assert_eq!(ips(&c.cluster), vec!["10.1.2.3", "10.1.2.4"]);
    }

    #[test]
    fn terminating_fallback_cluster_and_local() {
        let eps = vec![
            ep("10.0.0.1", false, true, true, "host"),
            ep("10.0.0.2", false, true, true, "other"),
            ep("10.0.0.3", false, false, true, "host"),
            ep("10.0.0.4", false, false, false, "host"),
        ];
        let c = categorize(
            &eps,
            &svc(false, true, Some(30000)),
            IpFamily::V4,
            "host",
            None,
        );
        assert_eq!(ips(&c.cluster), vec!["10.0.0.1", "10.0.0.2"]);
        assert_eq!(ips(&c.local), vec!["10.0.0.1"]);
        assert!(c.has_any);
    }

    #[test]
    fn ready_preferred_over_terminating() {
        let eps = vec![
            ep("10.0.0.1", true, true, false, "other"),
            ep("10.0.0.2", false, true, true, "host"),
        ];
        let c = categorize(
            &eps,
            &svc(false, true, Some(30000)),
            IpFamily::V4,
            "host",
            None,
        );
        assert_eq!(ips(&c.cluster), vec!["10.0.0.1"]);
        // No local ready endpoint: local serving-terminating ones are used.
        assert_eq!(ips(&c.local), vec!["10.0.0.2"]);
    }

    #[test]
    fn internal_local_only_has_no_cluster_endpoints() {
        let eps = vec![
            ep("10.0.0.1", true, true, false, "other"),
            ep("10.0.0.2", true, true, false, "host"),
        ];
        let c = categorize(&eps, &svc(true, false, None), IpFamily::V4, "host", None);
        assert!(c.cluster.is_empty());
        assert_eq!(ips(&c.local), vec!["10.0.0.2"]);
        assert!(c.has_any);
        let eps = vec![ep("10.0.0.1", true, true, false, "other")];
        let c = categorize(&eps, &svc(true, false, None), IpFamily::V4, "host", None);
        assert!(c.local.is_empty());
        assert!(c.has_any);
    }

    #[test]
    fn other_family_endpoints_are_ignored() {
        let eps = vec![
            ep("10.0.0.1", true, true, false, "host"),
            ep("fd00::1", true, true, false, "host"),
        ];
        let c = categorize(&eps, &svc(false, false, None), IpFamily::V6, "host", None);
        assert_eq!(ips(&c.cluster), vec!["fd00::1"]);
    }

    #[test]
    fn nothing_usable() {
        let eps = vec![ep("10.0.0.1", false, false, false, "host")];
        let c = categorize(
            &eps,
            &svc(false, true, Some(30000)),
            IpFamily::V4,
            "host",
            None,
        );
        assert!(c.cluster.is_empty() && c.local.is_empty() && !c.has_any);
    }
}
