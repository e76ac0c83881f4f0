//! The planner's output for kube-proxy-rs's fixes of upstream IPVS-mode behaviour (issue 32), each off by
//! default (upstream's output, as `planner_upstream_cases.rs` checks) and on with its option. The kernel
//! side of each fix is tested end to end (`e2e_semantics.rs`).
mod common {
    pub mod planner;
}

use common::planner::{cfg, chain, ep, lb, maps, node, svc};
use kube_proxy_rs::cluster::model::{IpFamily, Protocol};
use kube_proxy_rs::proxier::plan::{PlanConfig, plan};

/// ns1/svc1: LoadBalancer 1.2.3.4:80/TCP with the source ranges given, one endpoint elsewhere.
fn source_ranges_plan(ranges: &[&str], lb_source_ranges_for_node: bool) -> Vec<String> {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.load_balancer_ingress = lb(&["1.2.3.4"]);
    s.load_balancer_source_ranges = ranges.iter().map(|r| r.parse().unwrap()).collect();
    let name = s.name.clone();
    let (services, endpoints) = maps(vec![s], vec![(name, vec![ep("10.180.0.1", 80, None)])]);
    let config = PlanConfig {
        lb_source_ranges_for_node,
        ..cfg(IpFamily::V4)
    };
    let d = plan(&services, &endpoints, &node(&["100.101.102.103"]), &config);
    chain(&d, "filter", "KUBE-IPVS-OUT-FILTER")
}

#[test]
fn lb_source_ranges_for_node_off_is_upstreams_drop_of_lb_sourced_traffic() {
    assert_eq!(
        source_ranges_plan(&["10.0.0.0/8"], false),
        [
            "-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4/32 -m ipvs --vproto 6 --vaddr 1.2.3.4 --vport 80 -j DROP"
        ]
    );
    // A range covering the node: no rule (the node comes in through KUBE-LOAD-BALANCER-SOURCE-IP).
    assert!(source_ranges_plan(&["100.101.0.0/16"], false).is_empty());
}

#[test]
fn lb_source_ranges_for_node_checks_every_source() {
    let vs = "-m ipvs --vproto 6 --vaddr 1.2.3.4 --vport 80";
    assert_eq!(
        source_ranges_plan(&["10.0.0.0/8", "192.168.7.9/32"], true),
        [
            format!("-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4/32 {vs} -j DROP"),
            format!("-A KUBE-IPVS-OUT-FILTER -s 10.0.0.0/8 {vs} -j RETURN"),
            format!("-A KUBE-IPVS-OUT-FILTER -s 192.168.7.9/32 {vs} -j RETURN"),
            format!("-A KUBE-IPVS-OUT-FILTER {vs} -j DROP"),
        ]
    );
    // Covering the node: its LB-sourced connections return first; a range written with host bits
    // is written as its network, as iptables-save prints it.
    assert_eq!(
        source_ranges_plan(&["100.101.7.7/16"], true),
        [
            format!("-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4/32 {vs} -j RETURN"),
            format!("-A KUBE-IPVS-OUT-FILTER -s 100.101.0.0/16 {vs} -j RETURN"),
            format!("-A KUBE-IPVS-OUT-FILTER {vs} -j DROP"),
        ]
    );
}

/// Two LoadBalancer Services: ns1/a (ClusterIP, external IP, LB IP) and ns1/b whose LB IP is a's external
/// IP.
fn arp_plan(arp_per_address: bool) -> kube_proxy_rs::proxier::desired::DesiredState {
    let mut a = svc("ns1", "a", "p80", Protocol::Tcp, "10.96.0.10", 80);
    a.external_ips = vec!["192.168.99.10".parse().unwrap()];
    a.load_balancer_ingress = lb(&["192.168.99.20"]);
    let mut b = svc("ns1", "b", "p80", Protocol::Tcp, "10.96.0.11", 81);
    b.load_balancer_ingress = lb(&["192.168.99.10"]);
    let (services, endpoints) = maps(vec![a, b], vec![]);
    let config = PlanConfig {
        arp_per_address,
        ..cfg(IpFamily::V4)
    };
    plan(&services, &endpoints, &node(&["100.101.102.103"]), &config)
}

#[test]
fn arp_per_address_quiets_cluster_and_lb_ips_not_external_ips() {
    let ips = |v: &[&str]| -> std::collections::BTreeSet<std::net::IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    };
    let off = arp_plan(false);
    assert!(off.arp_quiet.is_empty());
    let on = arp_plan(true);
    assert_eq!(on.bound_addresses, off.bound_addresses);
    assert_eq!(
        on.arp_quiet,
        ips(&["10.96.0.10", "10.96.0.11", "192.168.99.20"])
    );
}

/// ns1/svc1: LoadBalancer 1.2.3.4:80/TCP with external IP 5.6.7.8, externalTrafficPolicy Local.
fn etp_local_nat(etp_local_node_masquerade: bool) -> (Vec<String>, Vec<String>) {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.load_balancer_ingress = lb(&["1.2.3.4"]);
    s.external_ips = vec!["5.6.7.8".parse().unwrap()];
    s.external_policy_local = true;
    s.node_port = Some(30080);
    let (services, endpoints) = maps(vec![s], vec![]);
    let config = PlanConfig {
        etp_local_node_masquerade,
        ..cfg(IpFamily::V4)
    };
    let d = plan(&services, &endpoints, &node(&["100.101.102.103"]), &config);
    (
        chain(&d, "nat", "KUBE-LOAD-BALANCER"),
        chain(&d, "nat", "KUBE-SERVICES"),
    )
}

#[test]
fn etp_local_node_masquerade_marks_local_sources_first() {
    let masq = "-A KUBE-LOAD-BALANCER -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ";
    let (lb_off, svc_off) = etp_local_nat(false);
    let (lb_on, svc_on) = etp_local_nat(true);
    assert!(!lb_off.iter().any(|r| r == masq), "{lb_off:?}");
    assert_eq!(lb_on.first().map(String::as_str), Some(masq), "{lb_on:?}");
    assert_eq!(&lb_on[1..], &lb_off[..]);
    let ext = |rules: &[String]| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.contains("KUBE-EXTERNAL-IP-LOCAL"))
            .cloned()
            .collect()
    };
    let (off, on) = (ext(&svc_off), ext(&svc_on));
    assert_eq!(on.len(), off.len() + 1, "{on:?}");
    assert!(
        on[0].ends_with("dst,dst -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"),
        "{on:?}"
    );
    assert_eq!(&on[1..], &off[..]);
}
