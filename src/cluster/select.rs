//! Endpoint selection for one service port, as upstream's `CategorizeEndpoints` (pkg/proxy/topology.go):
//! which endpoints serve cluster-wide traffic, which serve node-local traffic, with topology hints and the
//! serving-terminating fallback.

use crate::cluster::model::{Endpoint, IpFamily, ServicePort};
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
/// named `node_name` in `zone`: ready endpoints first, serving+terminating ones when none is ready.
pub fn categorize<'a>(
    endpoints: &'a [Endpoint],
    svc: &ServicePort,
    family: IpFamily,
    node_name: &str,
    zone: Option<&str>,
) -> Categorized<'a> {
    let zone = zone.unwrap_or("");
    let eps = || {
        endpoints
            .iter()
            .filter(move |e| IpFamily::of(&e.ip) == family)
    };
    let mut out = Categorized::default();

    if uses_cluster_endpoints(svc, family) {
        let mode = topology_mode(eps(), node_name, zone);
        out.cluster = eps()
            .filter(|e| e.ready && available(e, mode, node_name, zone))
            .collect();
        if out.cluster.is_empty() {
            out.cluster = eps().filter(|e| e.serving && e.terminating).collect();
        }
        out.has_any = !out.cluster.is_empty();
    }

    if !uses_local_endpoints(svc, family) {
        return out;
    }

    let mut local_ready = false;
    let mut local_terminating = false;
    for e in eps() {
        let local = e.is_local(node_name);
        if e.ready {
            out.has_any = true;
            local_ready |= local;
        } else if e.serving && e.terminating {
            out.has_any = true;
            local_terminating |= local;
        }
    }
    if local_ready {
        out.local = eps().filter(|e| e.is_local(node_name) && e.ready).collect();
    } else if local_terminating {
        out.local = eps()
            .filter(|e| e.is_local(node_name) && e.serving && e.terminating)
            .collect();
    }
    out
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
