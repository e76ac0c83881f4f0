//! The decision records: every reason an endpoint is left out, where each scheduler came from, health
//! checks, and kube-router's `service.local`.

use super::decision::{AddressKind, EndpointSet, Pick, Refused, SchedulerSource, Unavailable};
use super::*;
use crate::cluster::model::{ServicePortName, Topology};
use crate::cluster::service_options::{KUBE_ROUTER_LOCAL, SCHEDULER, ServiceOptions};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn name(svc: &str) -> ServicePortName {
    ServicePortName::tcp("ns", svc, "http")
}

fn ep(addr: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Endpoint {
    let mut e = Endpoint::new(ip(addr), 8080).with_topology(Topology::on_node(node));
    e.ready = ready;
    e.serving = serving;
    e.terminating = terminating;
    e
}

fn zoned(mut e: Endpoint, zone: &str) -> Endpoint {
    e.edit_topology(|t| t.hints_for_zones = Some(Arc::from([Arc::from(zone)])));
    e
}

fn options(pairs: &[(&str, &str)]) -> Option<Arc<ServiceOptions>> {
    let map = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ServiceOptions::from_annotations(Some(&map))
}

/// The decision record of the only port of `svc`, planned on node `n1` in zone `z1`.
fn decide(svc: ServicePort, eps: Vec<Endpoint>, cfg: &PlanConfig) -> decision::PortDecision {
    let n = svc.name.clone();
    let services: ServiceMap = [(n.clone(), Arc::new(svc))].into();
    let endpoints: EndpointsMap = [(n.clone(), Arc::new(eps))].into();
    let node = NodeFacts {
        zone: Some("z1".into()),
        ..NodeFacts::new("n1", vec![ip("192.168.0.10"), ip("fd00::10")])
    };
    let d = plan(&services, &endpoints, &node, cfg);
    let mut ports = d.decisions[&n.service()].ports.to_vec();
    assert_eq!(ports.len(), 1);
    ports.remove(0)
}

/// (address, selected or the reason code) of every endpoint.
fn verdicts(p: &decision::PortDecision) -> Vec<(String, &'static str)> {
    p.endpoints()
        .map(|(e, v)| {
            let r = p.selection(v).err().map_or("selected", Pick::code);
            (e.ip.to_string(), r)
        })
        .collect()
}

fn v4() -> PlanConfig {
    PlanConfig::new(IpFamily::V4)
}

#[test]
fn local_policy_without_a_local_endpoint_falls_back_and_says_so() {
    let svc = ServicePort {
        node_port: Some(30080),
        external_policy_local: true,
        health_check_node_port: Some(32000),
        ..ServicePort::new(name("web"), vec![ip("10.96.0.10")], 80)
    };
    let eps = vec![ep("10.244.2.5", "n2", true, true, false)];
    let p = decide(svc, eps, &v4());
    let kinds: Vec<(AddressKind, EndpointSet)> = p
        .virtual_servers
        .iter()
        .map(|v| (v.kind, v.endpoints))
        .collect();
    assert_eq!(
        kinds,
        [
            (AddressKind::ClusterIp, EndpointSet::Cluster),
            (AddressKind::NodePort, EndpointSet::ClusterNoLocal),
        ]
    );
    // Selected (for the ClusterIP); in the node-local set it is on another node.
    assert_eq!(verdicts(&p), [("10.244.2.5".into(), "selected")]);
    let (_, v) = p.endpoints().next().unwrap();
    assert_eq!(v.local, Pick::OtherNode);
    let hc = p.health_check.unwrap();
    assert_eq!((hc.node_port, hc.local_endpoints), (32000, 0));
}

#[test]
fn every_reason_an_endpoint_is_left_out() {
    // internalTrafficPolicy Local: only the node-local set is used.
    let svc = ServicePort {
        internal_policy_local: true,
        ..ServicePort::new(name("itp"), vec![ip("10.96.0.11")], 80)
    };
    let eps = vec![
        ep("10.244.1.1", "n1", true, true, false),
        ep("10.244.1.2", "n1", false, false, false),
        ep("10.244.1.3", "n1", false, true, true),
        ep("10.244.2.1", "n2", true, true, false),
        ep("fd10::1", "n1", true, true, false),
    ];
    let p = decide(svc, eps, &v4());
    assert_eq!(
        verdicts(&p),
        [
            ("10.244.1.1".into(), "selected"),
            ("10.244.1.2".into(), "NotReady"),
            ("10.244.1.3".into(), "TerminatingFallbackOnly"),
            ("10.244.2.1".into(), "OtherNodeLocalPolicy"),
            ("fd10::1".into(), "OtherFamily"),
        ]
    );
    // No ready endpoint at all: the serving terminating one is the fallback, and selected.
    let svc = ServicePort::new(name("term"), vec![ip("10.96.0.12")], 80);
    let eps = vec![
        ep("10.244.1.3", "n1", false, true, true),
        ep("10.244.1.4", "n2", false, false, true),
    ];
    let p = decide(svc, eps, &v4());
    assert_eq!(
        verdicts(&p),
        [
            ("10.244.1.3".into(), "selected"),
            ("10.244.1.4".into(), "NotReady"),
        ]
    );
}

#[test]
fn topology_hints_leave_out_other_zones() {
    let svc = ServicePort::new(name("hints"), vec![ip("10.96.0.13")], 80);
    let eps = vec![
        zoned(ep("10.244.1.1", "n1", true, true, false), "z1"),
        zoned(ep("10.244.2.1", "n2", true, true, false), "z2"),
    ];
    let p = decide(svc, eps, &v4());
    assert_eq!(
        verdicts(&p),
        [
            ("10.244.1.1".into(), "selected"),
            ("10.244.2.1".into(), "TopologyHintsOtherZone"),
        ]
    );
}

#[test]
fn scheduler_sources() {
    let with = |o| ServicePort {
        options: o,
        ..ServicePort::new(name("s"), vec![ip("10.96.0.14")], 80)
    };
    let source = |p: decision::PortDecision| p.scheduler.source;
    assert_eq!(
        source(decide(with(None), vec![], &v4())),
        SchedulerSource::Node
    );
    let sh = options(&[(SCHEDULER, "sh")]);
    let p = decide(with(sh.clone()), vec![], &v4());
    assert_eq!(p.scheduler.scheduler, Scheduler::Sh);
    assert_eq!(p.scheduler.source, SchedulerSource::Annotation(SCHEDULER));
    let bad = options(&[(SCHEDULER, "fancy")]);
    let p = decide(with(bad), vec![], &v4());
    assert_eq!(
        p.scheduler.source,
        SchedulerSource::AnnotationRejected(SCHEDULER)
    );
    assert_eq!(p.scheduler.scheduler, Scheduler::Rr);
    for why in [
        Unavailable::ModuleNotLoaded("modprobe failed".into()),
        Unavailable::RefusedByKernel("refused".into()),
    ] {
        let cfg = PlanConfig {
            unavailable_schedulers: BTreeMap::from([(Scheduler::Sh, why.clone())]),
            ..v4()
        };
        let p = decide(with(sh.clone()), vec![], &cfg);
        assert_eq!(p.scheduler.scheduler, Scheduler::Rr);
        let want = SchedulerSource::Unavailable(Box::new(Refused {
            annotation: SCHEDULER,
            scheduler: Scheduler::Sh,
            why,
        }));
        assert_eq!(p.scheduler.source, want);
    }
}

#[test]
fn kube_router_local_means_external_local_internal_cluster() {
    // As kube-router reads it: externalTrafficPolicy Local, internalTrafficPolicy Cluster, whatever the
    // spec says (the conversion applies it, so the planner and its records see the policies).
    use crate::cluster::decode::Decoded;
    use k8s_openapi::api::core::v1::Service;
    let v = serde_json::json!({
        "metadata": {"name": "kr", "namespace": "ns", "annotations": {KUBE_ROUTER_LOCAL: "true"}},
        "spec": {"type": "NodePort", "clusterIP": "10.96.0.15", "internalTrafficPolicy": "Local",
                 "ports": [{"name": "http", "port": 80, "nodePort": 30081}]},
    });
    let svc = Decoded::<Service>::from_value(v).object().cloned().unwrap();
    let port = crate::cluster::convert::service_ports(&svc)
        .unwrap()
        .ports
        .remove(0);
    assert!(port.external_policy_local() && !port.internal_policy_local);
    let eps = vec![
        ep("10.244.1.1", "n1", true, true, false),
        ep("10.244.2.1", "n2", true, true, false),
    ];
    let p = decide(port, eps, &v4());
    let sets: Vec<EndpointSet> = p.virtual_servers.iter().map(|v| v.endpoints).collect();
    assert_eq!(sets, [EndpointSet::Cluster, EndpointSet::Local]);
    // The remote endpoint serves the ClusterIP only.
    let (_, remote) = p.endpoints().nth(1).unwrap();
    assert_eq!(
        (remote.cluster, remote.local),
        (Pick::Selected, Pick::OtherNode)
    );
}

#[test]
fn annotation_problems_are_reported_from_the_record() {
    let svc = ServicePort {
        options: options(&[
            (SCHEDULER, "fancy"),
            ("kube-router.io/service.dsr", "tunnel"),
        ]),
        ..ServicePort::new(name("p"), vec![ip("10.96.0.16")], 80)
    };
    let n = svc.name.service();
    let services: ServiceMap = [(svc.name.clone(), Arc::new(svc))].into();
    let cfg = PlanConfig {
        scheduler: Scheduler::Wlc,
        ..v4()
    };
    let d = plan(
        &services,
        &EndpointsMap::new(),
        &NodeFacts::new("n1", vec![]),
        &cfg,
    );
    let problems = d.decisions[&n].problems();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].to_string().contains("\"wlc\""),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].to_string().contains("not supported"),
        "{}",
        problems[1]
    );
}

/// `AllowServiceExternalIPs` off: a Service is planned as if it had no external IPs, as upstream does:
/// no virtual server, set entry or kube-ipvs0 address for them, and its endpoints picked as for a
/// Service without external access (internalTrafficPolicy Local alone decides).
#[test]
fn external_ips_are_ignored_when_the_gate_is_off() {
    let svc = ServicePort {
        external_ips: vec![ip("192.0.2.7")],
        internal_policy_local: true,
        ..ServicePort::new(name("ext"), vec![ip("10.96.0.30")], 80)
    };
    let n = svc.name.clone();
    let services: ServiceMap = [(n.clone(), Arc::new(svc))].into();
    let endpoints: EndpointsMap = [(
        n.clone(),
        Arc::new(vec![ep("10.244.2.5", "n2", true, true, false)]),
    )]
    .into();
    let node = NodeFacts::new("n1", vec![ip("192.168.0.10")]);
    let key = |addr: &str| crate::kernel::ipvs::IpvsServiceKey {
        addr: ip(addr),
        port: 80,
        protocol: Protocol::Tcp,
    };
    let on = plan(&services, &endpoints, &node, &v4());
    let off_cfg = PlanConfig {
        external_ips: false,
        ..v4()
    };
    let off = plan(&services, &endpoints, &node, &off_cfg);
    let ext_set = |d: &DesiredState| d.ipsets["KUBE-EXTERNAL-IP"].entries.len();

    assert!(on.virtual_servers.contains_key(&key("192.0.2.7")));
    assert!(on.bound_addresses.contains(&ip("192.0.2.7")));
    assert_eq!(ext_set(&on), 1);
    // Externally reachable: the endpoint on another node serves the external IP.
    assert_eq!(on.virtual_servers[&key("192.0.2.7")].destinations.len(), 1);

    assert!(!off.virtual_servers.contains_key(&key("192.0.2.7")));
    assert!(!off.bound_addresses.contains(&ip("192.0.2.7")));
    assert_eq!(ext_set(&off), 0);
    assert!(off.virtual_servers.contains_key(&key("10.96.0.30")));
    // Not externally reachable: internalTrafficPolicy Local leaves the other node's endpoint out.
    assert!(
        off.virtual_servers[&key("10.96.0.30")]
            .destinations
            .is_empty()
    );
    let p = &off.decisions[&n.service()].ports[0];
    assert!(p.port.external_ips.is_empty());
    assert_eq!(verdicts(p), [("10.244.2.5".into(), "Unused")]);
    let (_, v) = p.endpoints().next().unwrap();
    assert_eq!(v.local, Pick::OtherNode);
}
