//! Plan reuse: a sync none of whose plan inputs changed reuses the last plan (the planner does not run)
//! and a full sync still verifies the kernel against it; a change to any input replans.

use crate::cluster::model::{
    Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServiceName, ServicePort,
    ServicePortName, Topology,
};
use crate::cluster::service_options::{SCHEDULER, ServiceOptions};
use crate::kernel::ipvs::IpvsServiceKey;
use crate::proxier::drift_report::DriftKind;
use crate::proxier::plan::decision::Unavailable;
use crate::proxier::plan::{LocalDetector, NodeFacts, PlanConfig};
use crate::proxier::reconcile::ConntrackHints;
use crate::proxier::report::SyncReport;
use crate::proxier::sync::{FamilySnapshot, Proxier, SyncInput};
use crate::proxier::testkit::Kit;
use crate::scheduler::Scheduler;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

const NODE: &str = "10.0.0.10";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn port_name(svc: &str) -> ServicePortName {
    ServicePortName::tcp("ns", svc, "http")
}

fn key(addr: &str, port: u16) -> IpvsServiceKey {
    IpvsServiceKey {
        addr: ip(addr),
        port,
        protocol: Protocol::Tcp,
    }
}

/// An endpoint on node `n2` that topology hints give to `zone`.
fn hinted(addr: &str, zone: &str) -> Endpoint {
    let mut e = Endpoint::new(ip(addr), 8080).with_topology(Topology::on_node("n2"));
    e.edit_topology(|t| t.hints_for_zones = Some(Arc::from([Arc::from(zone)])));
    e
}

/// One proxier over the in-memory kernel and the inputs of its single (IPv4) family.
struct Rig {
    kit: Kit,
    proxier: Proxier,
    services: ServiceMap,
    endpoints: EndpointsMap,
    node: NodeFacts,
    config: PlanConfig,
}

impl Rig {
    /// Service `web` (ClusterIP 10.96.0.10:80, NodePort 30080, ExternalIP 192.168.9.9, scheduler `sh`
    /// by annotation) with two endpoints hinted for zones z1 and z2; the node is in z1. Synced once.
    fn new() -> Rig {
        let name = port_name("web");
        let map = [(SCHEDULER.to_string(), "sh".to_string())].into();
        let port = ServicePort {
            node_port: Some(30080),
            external_ips: vec![ip("192.168.9.9")],
            options: ServiceOptions::from_annotations(Some(&map)),
            ..ServicePort::new(name.clone(), vec![ip("10.96.0.10")], 80)
        };
        let eps = vec![hinted("10.244.1.1", "z1"), hinted("10.244.2.1", "z2")];
        let kit = Kit::new();
        let mut rig = Rig {
            proxier: Proxier::new(kit.backends()),
            kit,
            services: [(name.clone(), Arc::new(port))].into(),
            endpoints: [(name, Arc::new(eps))].into(),
            node: NodeFacts {
                zone: Some("z1".into()),
                ..NodeFacts::new("n1", vec![ip(NODE)])
            },
            config: PlanConfig {
                scheduler: Scheduler::Rr,
                ..PlanConfig::new(IpFamily::V4)
            },
        };
        let first = rig.sync(true, None);
        assert!(first.plans_reused.is_empty(), "nothing to reuse yet");
        rig
    }

    /// One sync with these inputs; `changed`: the Services the trackers reported changed.
    fn sync(&mut self, full: bool, changed: Option<&[&str]>) -> SyncReport {
        let changed = changed.map(|names| {
            let names = names.iter().map(|n| port_name(n).service());
            names.collect::<BTreeSet<ServiceName>>()
        });
        let report = self.proxier.sync_proxy_rules(SyncInput {
            families: vec![FamilySnapshot {
                services: Arc::new(self.services.clone()),
                endpoints: Arc::new(self.endpoints.clone()),
                node: self.node.clone(),
                config: self.config.clone(),
            }],
            full,
            conntrack: ConntrackHints::default(),
            changed,
            dummy_addresses: None,
        });
        assert_eq!(report.failure_count(), 0, "{report:?}");
        report
    }

    /// A sync with no Service or EndpointSlice changed, which must replan (another input changed).
    fn replans(&mut self) -> SyncReport {
        let r = self.sync(false, Some(&[]));
        assert!(r.plans_reused.is_empty(), "an input changed: replanned");
        r
    }

    /// Real servers planned for `key`.
    fn planned_dests(&self, key: &IpvsServiceKey) -> Vec<IpAddr> {
        let d = self.proxier.desired(IpFamily::V4).expect("planned");
        let vs = d.virtual_servers.get(key);
        vs.map(|v| v.destinations.keys().map(|(a, _)| a).collect())
            .unwrap_or_default()
    }

    fn bound(&self) -> BTreeSet<IpAddr> {
        let d = self.proxier.desired(IpFamily::V4).expect("planned");
        d.bound_addresses.clone()
    }
}

#[test]
fn unchanged_inputs_reuse_the_plan_and_full_syncs_still_repair_drift() {
    let mut rig = Rig::new();
    let cluster_ip = key("10.96.0.10", 80);
    assert_eq!(rig.planned_dests(&cluster_ip), vec![ip("10.244.1.1")]);
    for full in [true, false] {
        let r = rig.sync(full, Some(&[]));
        assert_eq!(r.plans_reused, BTreeSet::from([IpFamily::V4]), "{r:?}");
        assert_eq!(r.writes(), 0);
    }
    // Tampering behind our back: the reused plan is what the full sync verifies the kernel against.
    rig.kit.backends().ipvs.delete_service(&cluster_ip).unwrap();
    let r = rig.sync(true, Some(&[]));
    assert_eq!(r.plans_reused, BTreeSet::from([IpFamily::V4]));
    assert_eq!(r.drift.counts.get(&DriftKind::VirtualServer), Some(&1));
    assert!(rig.kit.services().contains(&cluster_ip), "repaired");
}

#[test]
fn unknown_changes_replan() {
    let mut rig = Rig::new();
    let r = rig.sync(true, None);
    assert!(r.plans_reused.is_empty());
}

#[test]
fn a_changed_service_replans() {
    let mut rig = Rig::new();
    let name = port_name("api");
    let port = ServicePort::new(name.clone(), vec![ip("10.96.0.20")], 443);
    rig.services.insert(name, Arc::new(port));
    let r = rig.sync(false, Some(&["api"]));
    assert!(r.plans_reused.is_empty());
    assert!(rig.kit.services().contains(&key("10.96.0.20", 443)));
}

#[test]
fn a_changed_endpoint_slice_replans() {
    let mut rig = Rig::new();
    let eps = vec![hinted("10.244.1.1", "z1"), hinted("10.244.1.2", "z1")];
    rig.endpoints.insert(port_name("web"), Arc::new(eps));
    let r = rig.sync(false, Some(&["web"]));
    assert!(r.plans_reused.is_empty());
    let want = vec![ip("10.244.1.1"), ip("10.244.1.2")];
    assert_eq!(rig.planned_dests(&key("10.96.0.10", 80)), want);
}

#[test]
fn a_node_zone_change_replans() {
    let mut rig = Rig::new();
    rig.node.zone = Some("z2".into());
    rig.replans();
    let dests = rig.planned_dests(&key("10.96.0.10", 80));
    assert_eq!(dests, vec![ip("10.244.2.1")], "the z2 endpoint now");
}

#[test]
fn a_node_port_address_change_replans() {
    let mut rig = Rig::new();
    assert!(rig.kit.services().contains(&key(NODE, 30080)));
    rig.node.node_port_ips.push(ip("10.0.0.11"));
    rig.replans();
    assert!(rig.kit.services().contains(&key("10.0.0.11", 30080)));
}

#[test]
fn a_local_address_change_replans() {
    let mut rig = Rig::new();
    assert!(rig.bound().contains(&ip("192.168.9.9")));
    // The ExternalIP is now an address of the node: it is not bound to kube-ipvs0 any more.
    rig.node.local_addresses.push(ip("192.168.9.9"));
    rig.replans();
    assert!(!rig.bound().contains(&ip("192.168.9.9")));
}

#[test]
fn a_primary_node_ip_change_replans() {
    let mut rig = Rig::new();
    rig.node.node_ips = vec![ip("10.0.0.12")];
    rig.replans();
}

#[test]
fn an_unavailable_scheduler_replans() {
    let mut rig = Rig::new();
    let scheduler = |rig: &Rig| {
        let d = rig.proxier.desired(IpFamily::V4).expect("planned");
        d.virtual_servers[&key("10.96.0.10", 80)]
            .service
            .scheduler
            .clone()
    };
    assert_eq!(scheduler(&rig), "sh");
    let why = Unavailable::RefusedByKernel("no such scheduler".into());
    rig.config.unavailable_schedulers = BTreeMap::from([(Scheduler::Sh, why)]);
    rig.replans();
    assert_eq!(scheduler(&rig), "rr", "back to the node's scheduler");
}

#[test]
fn a_pod_cidr_change_replans() {
    let mut rig = Rig::new();
    let payload = |rig: &Rig| {
        let d = rig.proxier.desired(IpFamily::V4).expect("planned");
        d.iptables_payload.clone()
    };
    assert!(!payload(&rig).contains("10.244.0.0/24"));
    rig.config.local_detector = LocalDetector::Cidrs(vec!["10.244.0.0/24".parse().unwrap()]);
    rig.replans();
    assert!(payload(&rig).contains("10.244.0.0/24"));
}
