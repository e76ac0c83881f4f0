//! Unit tests of the sync loop's settings, snapshots and conntrack hints.

use super::*;
use crate::cluster::model::{EndpointsMap, ServiceMap};
use crate::config::{Invocation, Options, parse_args};
use crate::net::IpFamily;
use crate::proxier::plan::LocalDetector;
use std::net::IpAddr;

fn options(args: &[&str]) -> Options {
    let mut argv = vec!["kube-proxy", "--hostname-override=n1"];
    argv.extend_from_slice(args);
    match parse_args(argv).unwrap() {
        Invocation::Run(o) => *o,
        other => panic!("{other:?}"),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn settings(o: &Options, ips: Vec<IpAddr>, families: Vec<IpFamily>, random: bool) -> SyncSettings {
    SyncSettings::new(&o.settings, &o.node_name, ips, families, random)
}

fn local_split() -> LocalAddresses {
    split_dummy(local())
}

fn maps<'a>(s: &'a Arc<ServiceMap>, e: &'a Arc<EndpointsMap>) -> Maps<'a> {
    Maps {
        services: s,
        endpoints: e,
    }
}

fn local() -> Vec<(String, IpAddr)> {
    vec![
        ("lo".into(), ip("127.0.0.1")),
        ("eth0".into(), ip("10.0.0.10")),
        ("eth0".into(), ip("fd00::10")),
        ("eth1".into(), ip("192.168.5.1")),
        ("kube-ipvs0".into(), ip("10.96.0.1")),
    ]
}

#[test]
fn settings_follow_the_configuration() {
    let o = options(&[
        "--ipvs-scheduler=wrr",
        "--masquerade-all",
        "--iptables-masquerade-bit=10",
        "--ipvs-exclude-cidrs=10.200.0.0/16,fd99::/64",
        "--nodeport-addresses=10.0.0.0/24",
    ]);
    let s = settings(
        &o,
        vec![ip("10.0.0.10")],
        vec![IpFamily::V4, IpFamily::V6],
        true,
    );
    let v4 = &s.plan[&IpFamily::V4];
    assert_eq!(v4.scheduler, "wrr");
    assert!(v4.masquerade_all && v4.random_fully);
    assert_eq!(v4.masquerade_bit, 10);
    assert_eq!(v4.exclude_cidrs, vec!["10.200.0.0/16".parse().unwrap()]);
    assert_eq!(
        s.plan[&IpFamily::V6].exclude_cidrs,
        vec!["fd99::/64".parse().unwrap()]
    );
    assert_eq!(s.node_port_cidrs, vec!["10.0.0.0/24".parse().unwrap()]);

    let p = settings(
        &options(&["--nodeport-addresses=primary"]),
        vec![ip("10.0.0.10")],
        vec![IpFamily::V4],
        false,
    );
    // `primary`: the node's primary IP.
    assert_eq!(p.node_port_cidrs, vec!["10.0.0.10/32".parse().unwrap()]);
    assert_eq!(p.plan[&IpFamily::V4].scheduler, "rr");
}

#[test]
fn snapshots_split_local_addresses_and_pick_node_port_ips() {
    let o = options(&["--cluster-cidr=10.244.0.0/16,fd10::/56"]);
    let s = settings(
        &o,
        vec![ip("10.0.0.10"), ip("fd00::10")],
        vec![IpFamily::V4, IpFamily::V6],
        true,
    );
    let (sm, em) = (Arc::default(), Arc::default());
    let snaps = snapshots(&s, None, &local_split(), maps(&sm, &em));
    assert_eq!(snaps.len(), 2);
    let v4 = &snaps[0];
    assert_eq!(v4.config.family, IpFamily::V4);
    assert_eq!(
        v4.config.local_detector,
        LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().unwrap()])
    );
    // All local addresses of the family except loopback and kube-ipvs0 (nodePortAddresses unset).
    assert_eq!(
        v4.node.node_port_ips,
        vec![ip("10.0.0.10"), ip("192.168.5.1")]
    );
    assert!(!v4.node.local_addresses.contains(&ip("10.96.0.1")));
    assert!(v4.node.local_addresses.contains(&ip("10.0.0.10")));
    assert_eq!(snaps[1].node.node_port_ips, vec![ip("fd00::10")]);
    assert_eq!(
        snaps[1].config.local_detector,
        LocalDetector::Cidrs(vec!["fd10::/56".parse().unwrap()])
    );
}

#[test]
fn event_driven_syncs_keep_only_the_kube_ipvs0_addresses_node_ports_can_pick() {
    let bound = [
        ip("10.96.0.1"),
        ip("10.0.0.200"),
        ip("fd00::99"),
        ip("fd99::1"),
    ];
    let cidrs = vec!["10.0.0.0/24".parse().unwrap(), "fd00::/64".parse().unwrap()];
    let kept: Vec<IpAddr> = selectable(&bound, &cidrs).collect();
    assert_eq!(kept, vec![ip("10.0.0.200"), ip("fd00::99")]);
    // Without nodePortAddresses CIDRs no kube-ipvs0 address is a node-port address.
    assert_eq!(selectable(&bound, &[]).count(), 0);
    // Whatever node_port_ips picks from the whole list, it picks from the kept ones.
    let by_iface = BTreeMap::from([("eth0".to_string(), vec![ip("10.0.0.10")])]);
    for family in [IpFamily::V4, IpFamily::V6] {
        let all = crate::proxier::plan::node_port_ips(&by_iface, &bound, &cidrs, family);
        let from_kept = crate::proxier::plan::node_port_ips(&by_iface, &kept, &cidrs, family);
        assert_eq!(all, from_kept, "{family:?}");
    }
}

#[test]
fn node_cidr_mode_uses_the_node_pod_cidrs() {
    let o = options(&["--detect-local-mode=NodeCIDR"]);
    let s = settings(&o, vec![ip("10.0.0.10")], vec![IpFamily::V4], true);
    let node = NodeInfo {
        pod_cidrs: vec!["10.244.3.0/24".parse().unwrap()],
        zone: Some("z1".into()),
        ..Default::default()
    };
    let (sm, em) = (Arc::default(), Arc::default());
    let snaps = snapshots(&s, Some(&node), &local_split(), maps(&sm, &em));
    assert_eq!(
        snaps[0].config.local_detector,
        LocalDetector::Cidrs(vec!["10.244.3.0/24".parse().unwrap()])
    );
    assert_eq!(snaps[0].node.zone.as_deref(), Some("z1"));
    assert_eq!(snaps[0].node.node_name, "n1");
}

#[test]
fn conntrack_hints_from_tracker_results() {
    use crate::cluster::model::{Protocol, ServicePortName};
    use crate::cluster::tracker::StaleUdpEndpoint;
    let svc = ServiceUpdateResult {
        deleted_udp_cluster_ips: BTreeSet::from([ip("10.96.0.10")]),
        ..Default::default()
    };
    let eps = EndpointsUpdateResult {
        deleted_udp_endpoints: vec![StaleUdpEndpoint {
            port_name: ServicePortName {
                namespace: "kube-system".into(),
                name: "dns".into(),
                port_name: "dns".into(),
                protocol: Protocol::Udp,
            },
            ip: ip("10.244.0.6"),
            port: 53,
        }],
        ..Default::default()
    };
    let mut h = conntrack_hints(&svc, &eps);
    assert_eq!(h.stale_service_ips, BTreeSet::from([ip("10.96.0.10")]));
    assert_eq!(h.stale_endpoint_ips, BTreeSet::from([ip("10.244.0.6")]));
    h.merge(ConntrackHints {
        stale_service_ips: BTreeSet::from([ip("10.96.0.11")]),
        ..Default::default()
    });
    assert_eq!(h.stale_service_ips.len(), 2);
    assert!(!h.is_empty());
    assert!(ConntrackHints::default().is_empty());
}
