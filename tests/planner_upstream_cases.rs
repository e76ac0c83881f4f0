//! Cases taken from upstream pkg/proxy/ipvs/proxier_test.go (and the behaviour of syncProxyRules /
//! writeIptablesRules they pin down), replayed through the pure planner.
mod planner_support;

use kube_proxy_rs::cluster::model::{IpFamily, LoadBalancerIngress, Protocol};
use kube_proxy_rs::kernel::ipvs::{FLAG_MH_PORT, FLAG_PERSISTENT};
use kube_proxy_rs::proxier::desired::TrafficPolicy;
use kube_proxy_rs::proxier::plan::{LocalDetector, plan};
use planner_support::*;
use std::collections::BTreeMap;

fn vs(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    list.iter()
        .map(|(k, v)| {
            let mut d: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            d.sort();
            (k.to_string(), d)
        })
        .collect()
}

fn strs(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

// TestNodePortIPv4 "1 service with node port, has 2 endpoints" and TestNodePortIPv6 counterparts.
#[test]
fn node_port_tcp_per_family() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.node_port = Some(3001);
    let name = s.name.clone();
    let (sm, em) = maps(
        vec![s],
        vec![(
            name,
            vec![ep("10.180.0.1", 80, None), ep("1002:ab8::2:10", 80, None)],
        )],
    );
    let n = node(&["100.101.102.103", "2001:db8::1:1"]);
    let d = plan(&sm, &em, &n, &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("10.20.30.41:80/TCP", &["10.180.0.1:80"]),
            ("100.101.102.103:3001/TCP", &["10.180.0.1:80"]),
        ])
    );
    assert_eq!(entries(&d, "KUBE-NODE-PORT-TCP"), strs(&["3001"]));
    assert_eq!(
        entries(&d, "KUBE-CLUSTER-IP"),
        strs(&["10.20.30.41,tcp:80"])
    );
    // The IPv6 proxier does nothing for an IPv4-only service.
    let d6 = plan(&sm, &em, &n, &cfg(IpFamily::V6));
    assert!(d6.virtual_servers.is_empty());
    assert!(non_empty_sets(&d6).is_empty());

    // Same service with an IPv6 ClusterIP.
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "2020::1", 80);
    s.node_port = Some(3001);
    let name = s.name.clone();
    let (sm, em) = maps(
        vec![s],
        vec![(
            name,
            vec![ep("10.180.0.1", 80, None), ep("1002:ab8::2:10", 80, None)],
        )],
    );
    let d6 = plan(&sm, &em, &n, &cfg(IpFamily::V6));
    assert_eq!(
        vs_summary(&d6),
        vs(&[
            ("[2001:db8::1:1]:3001/TCP", &["[1002:ab8::2:10]:80"]),
            ("[2020::1]:80/TCP", &["[1002:ab8::2:10]:80"]),
        ])
    );
    assert!(
        d6.virtual_servers
            .values()
            .all(|v| v.service.netmask == 128)
    );
    assert_eq!(entries(&d6, "KUBE-6-NODE-PORT-TCP"), strs(&["3001"]));
    assert_eq!(entries(&d6, "KUBE-6-CLUSTER-IP"), strs(&["2020::1,tcp:80"]));
    assert_eq!(entries(&d6, "KUBE-6-IPVS-IPS"), strs(&["2020::1"]));
}

// TestNodePortIPv4 "1 UDP service with node port, has endpoints".
#[test]
fn node_port_udp_sets_and_chains() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Udp, "10.20.30.41", 80);
    s.node_port = Some(3001);
    let name = s.name.clone();
    let (sm, em) = maps(vec![s], vec![(name, vec![ep("10.180.0.1", 80, None)])]);
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("10.20.30.41:80/UDP", &["10.180.0.1:80"]),
            ("100.101.102.103:3001/UDP", &["10.180.0.1:80"]),
        ])
    );
    assert_eq!(entries(&d, "KUBE-NODE-PORT-UDP"), strs(&["3001"]));
    assert!(entries(&d, "KUBE-NODE-PORT-TCP").is_empty());
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-NODE-PORT"),
        vec![j("KUBE-MARK-MASQ", "KUBE-NODE-PORT-UDP")]
    );
    assert_eq!(
        chain(&d, "nat", "KUBE-NODE-PORT"),
        vec![
            "-A KUBE-NODE-PORT -p udp -m comment --comment \"Kubernetes nodeport UDP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ"
        ]
    );
    assert_eq!(
        chain_jumps(&d, "filter", "KUBE-NODE-PORT"),
        vec![j("ACCEPT", "KUBE-HEALTH-CHECK-NODE-PORT")]
    );
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-SERVICES"),
        vec![
            j("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            j("KUBE-NODE-PORT", ""),
            j("ACCEPT", "KUBE-CLUSTER-IP"),
        ]
    );
}

// TestNodePortIPv4 "service has node port but no endpoints".
#[test]
fn node_port_without_endpoints() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.node_port = Some(3001);
    let (sm, em) = maps(vec![s], vec![]);
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("10.20.30.41:80/TCP", &[]),
            ("100.101.102.103:3001/TCP", &[])
        ])
    );
}

// TestNodePortIPv4/IPv6 "node port service with protocol sctp on a node with multiple nodeIPs".
#[test]
fn node_port_sctp_multiple_node_ips() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Sctp, "10.20.30.41", 80);
    s.node_port = Some(3001);
    let name = s.name.clone();
    let (sm, em) = maps(vec![s], vec![(name, vec![ep("10.180.0.1", 80, None)])]);
    let n = node(&[
        "100.101.102.103",
        "100.101.102.104",
        "100.101.102.105",
        "2001:db8::1:1",
        "2001:db8::1:2",
        "2001:db8::1:3",
    ]);
    let d = plan(&sm, &em, &n, &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("10.20.30.41:80/SCTP", &["10.180.0.1:80"]),
            ("100.101.102.103:3001/SCTP", &["10.180.0.1:80"]),
            ("100.101.102.104:3001/SCTP", &["10.180.0.1:80"]),
            ("100.101.102.105:3001/SCTP", &["10.180.0.1:80"]),
        ])
    );
    assert_eq!(
        entries(&d, "KUBE-NODE-PORT-SCTP-HASH"),
        strs(&[
            "100.101.102.103,sctp:3001",
            "100.101.102.104,sctp:3001",
            "100.101.102.105,sctp:3001"
        ])
    );
    assert_eq!(
        chain(&d, "nat", "KUBE-NODE-PORT"),
        vec![
            "-A KUBE-NODE-PORT -p sctp -m comment --comment \"Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'\" -m set --match-set KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ"
        ]
    );

    let mut s = svc("ns1", "svc1", "p80", Protocol::Sctp, "2020::1", 80);
    s.node_port = Some(3001);
    let name = s.name.clone();
    let (sm, em) = maps(vec![s], vec![(name, vec![ep("2001::1", 80, None)])]);
    let n = node(&["2001:db8::1:1", "2001:db8::1:2"]);
    let d6 = plan(&sm, &em, &n, &cfg(IpFamily::V6));
    assert_eq!(
        vs_summary(&d6),
        vs(&[
            ("[2001:db8::1:1]:3001/SCTP", &["[2001::1]:80"]),
            ("[2001:db8::1:2]:3001/SCTP", &["[2001::1]:80"]),
            ("[2020::1]:80/SCTP", &["[2001::1]:80"]),
        ])
    );
    assert_eq!(
        entries(&d6, "KUBE-6-NODE-PORT-SCTP-HASH"),
        strs(&["2001:db8::1:1,sctp:3001", "2001:db8::1:2,sctp:3001"])
    );
}

// TestNodePortIPv4 "node port service with protocol sctp and externalTrafficPolicy local".
#[test]
fn node_port_sctp_external_local() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Sctp, "10.20.30.41", 80);
    s.node_port = Some(3001);
    s.external_policy_local = true;
    let name = s.name.clone();
    let (sm, em) = maps(
        vec![s],
        vec![(
            name,
            vec![
                ep("10.180.0.1", 80, Some(HOST)),
                ep("10.180.1.1", 80, Some("otherHost")),
            ],
        )],
    );
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("10.20.30.41:80/SCTP", &["10.180.0.1:80", "10.180.1.1:80"]),
            ("100.101.102.103:3001/SCTP", &["10.180.0.1:80"]),
        ])
    );
    assert_eq!(
        entries(&d, "KUBE-NODE-PORT-SCTP-HASH"),
        strs(&["100.101.102.103,sctp:3001"])
    );
    assert_eq!(
        entries(&d, "KUBE-NODE-PORT-LOCAL-SCTP-HASH"),
        strs(&["100.101.102.103,sctp:3001"])
    );
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-NODE-PORT"),
        vec![
            j("RETURN", "KUBE-NODE-PORT-LOCAL-SCTP-HASH"),
            j("KUBE-MARK-MASQ", "KUBE-NODE-PORT-SCTP-HASH"),
        ]
    );
    assert_eq!(
        entries(&d, "KUBE-LOOP-BACK"),
        strs(&["10.180.0.1,sctp:80,10.180.0.1"])
    );
}

// TestIPv4Proxier / TestIPv6Proxier: each proxier only handles its family.
#[test]
fn proxier_handles_only_its_family() {
    let a = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    let b = svc("ns2", "svc2", "p8080", Protocol::Tcp, "1002:ab8::2:1", 8080);
    let (an, bn) = (a.name.clone(), b.name.clone());
    let (sm, em) = maps(
        vec![a, b],
        vec![
            (an, vec![ep("10.180.0.1", 80, None)]),
            (bn, vec![ep("1009:ab8::5:6", 8080, None)]),
        ],
    );
    let d4 = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d4),
        vs(&[("10.20.30.41:80/TCP", &["10.180.0.1:80"])])
    );
    let d6 = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V6));
    assert_eq!(
        vs_summary(&d6),
        vs(&[("[1002:ab8::2:1]:8080/TCP", &["[1009:ab8::5:6]:8080"])])
    );
}

// TestMasqueradeRule: --random-fully only when iptables supports it.
#[test]
fn masquerade_rule_random_fully() {
    let (sm, em) = maps(vec![], vec![]);
    for rf in [false, true] {
        let mut c = cfg(IpFamily::V4);
        c.random_fully = rf;
        let d = plan(&sm, &em, &node(&[]), &c);
        let r = chain(&d, "nat", "KUBE-POSTROUTING");
        let masq = r.iter().find(|l| l.contains("-j MASQUERADE")).unwrap();
        assert_eq!(masq.ends_with("--random-fully"), rf);
    }
}

// TestExternalIPs / TestOnlyLocalExternalIPs.
#[test]
fn external_ips_cluster_and_local() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.external_ips = vec![ip("50.60.70.81"), ip("2012::51"), ip("127.0.0.1")];
    let name = s.name.clone();
    let eps = vec![
        ep("10.180.0.1", 80, Some(HOST)),
        ep("10.180.1.1", 80, Some("other")),
    ];
    let (sm, em) = maps(vec![s.clone()], vec![(name.clone(), eps.clone())]);
    let n = node(&["100.101.102.103"]);
    let d = plan(&sm, &em, &n, &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("10.20.30.41:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
            ("50.60.70.81:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
            ("127.0.0.1:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
        ])
    );
    assert_eq!(
        entries(&d, "KUBE-EXTERNAL-IP"),
        strs(&["50.60.70.81,tcp:80", "127.0.0.1,tcp:80"])
    );
    let c = "Kubernetes service external ip + port for masquerade and filter purpose";
    let svcs = chain(&d, "nat", "KUBE-SERVICES");
    let base = format!(
        "-A KUBE-SERVICES -m comment --comment \"{c}\" -m set --match-set KUBE-EXTERNAL-IP dst,dst"
    );
    assert!(svcs.contains(&format!("{base} -j KUBE-MARK-MASQ")));
    assert!(svcs.contains(&format!(
        "{base} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT"
    )));
    assert!(svcs.contains(&format!("{base} -m addrtype --dst-type LOCAL -j ACCEPT")));
    assert!(d.bound_addresses.contains(&ip("50.60.70.81")));

    // externalTrafficPolicy: Local: the -LOCAL set, no masquerade rule, local endpoints only; an
    // external IP that is already a node address is not bound to kube-ipvs0.
    s.external_policy_local = true;
    let mut n = node(&["100.101.102.103"]);
    n.local_addresses.push(ip("50.60.70.81"));
    let (sm, em) = maps(vec![s], vec![(name, eps)]);
    let d = plan(&sm, &em, &n, &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d)["50.60.70.81:80/TCP"],
        strs(&["10.180.0.1:80"])
    );
    assert_eq!(
        vs_summary(&d)["10.20.30.41:80/TCP"],
        strs(&["10.180.0.1:80", "10.180.1.1:80"])
    );
    assert!(entries(&d, "KUBE-EXTERNAL-IP").is_empty());
    assert_eq!(
        entries(&d, "KUBE-EXTERNAL-IP-LOCAL"),
        strs(&["50.60.70.81,tcp:80", "127.0.0.1,tcp:80"])
    );
    let svcs = chain_jumps(&d, "nat", "KUBE-SERVICES");
    assert_eq!(
        svcs,
        vec![
            j("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            j("ACCEPT", "KUBE-EXTERNAL-IP-LOCAL"),
            j("ACCEPT", "KUBE-EXTERNAL-IP-LOCAL"),
            j("KUBE-NODE-PORT", ""),
            j("ACCEPT", "KUBE-CLUSTER-IP"),
        ]
    );
    assert!(!d.bound_addresses.contains(&ip("50.60.70.81")));
    assert!(d.bound_addresses.contains(&ip("127.0.0.1")));
}

// TestLoadBalancerSourceRanges, plus a range that covers the node IP (KUBE-LOAD-BALANCER-SOURCE-IP)
// and the KUBE-IPVS-OUT-FILTER drop when none does (kubernetes#119656).
#[test]
fn load_balancer_source_ranges() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.load_balancer_ingress = lb(&["1.2.3.4"]);
    s.load_balancer_source_ranges = vec!["10.0.0.0/8".parse().unwrap()];
    let name = s.name.clone();
    let eps = vec![ep("10.180.0.1", 80, None)];
    let (sm, em) = maps(vec![s.clone()], vec![(name.clone(), eps.clone())]);
    let n = node(&["100.101.102.103"]);
    let d = plan(&sm, &em, &n, &cfg(IpFamily::V4));
    assert_eq!(d.virtual_servers.len(), 2);
    assert_eq!(vs_summary(&d)["1.2.3.4:80/TCP"], strs(&["10.180.0.1:80"]));
    assert_eq!(
        non_empty_sets(&d)
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().collect::<Vec<_>>()))
            .collect::<BTreeMap<_, _>>(),
        BTreeMap::from([
            ("KUBE-CLUSTER-IP".to_string(), strs(&["10.20.30.41,tcp:80"])),
            (
                "KUBE-IPVS-IPS".to_string(),
                strs(&["1.2.3.4", "10.20.30.41"])
            ),
            ("KUBE-LOAD-BALANCER".to_string(), strs(&["1.2.3.4,tcp:80"])),
            (
                "KUBE-LOAD-BALANCER-FW".to_string(),
                strs(&["1.2.3.4,tcp:80"])
            ),
            (
                "KUBE-LOAD-BALANCER-SOURCE-CIDR".to_string(),
                strs(&["1.2.3.4,tcp:80,10.0.0.0/8"])
            ),
        ])
    );
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-SERVICES"),
        vec![
            j("KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER"),
            j("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            j("KUBE-NODE-PORT", ""),
            j("ACCEPT", "KUBE-CLUSTER-IP"),
            j("ACCEPT", "KUBE-LOAD-BALANCER"),
        ]
    );
    assert_eq!(
        chain_jumps(&d, "filter", "KUBE-PROXY-FIREWALL"),
        vec![j("KUBE-SOURCE-RANGES-FIREWALL", "KUBE-LOAD-BALANCER-FW")]
    );
    assert_eq!(
        chain_jumps(&d, "filter", "KUBE-SOURCE-RANGES-FIREWALL"),
        vec![j("RETURN", "KUBE-LOAD-BALANCER-SOURCE-CIDR"), j("DROP", "")]
    );
    assert_eq!(
        chain(&d, "filter", "KUBE-IPVS-OUT-FILTER"),
        vec![
            "-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4/32 -m ipvs --vproto 6 --vaddr 1.2.3.4 --vport 80 -j DROP"
        ]
    );

    // A range covering the node IP lets the node in through KUBE-LOAD-BALANCER-SOURCE-IP.
    s.load_balancer_source_ranges = vec![
        "10.0.0.0/8".parse().unwrap(),
        "100.101.0.0/16".parse().unwrap(),
    ];
    let (sm, em) = maps(vec![s], vec![(name, eps)]);
    let d = plan(&sm, &em, &n, &cfg(IpFamily::V4));
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-SOURCE-IP"),
        strs(&["1.2.3.4,tcp:80,1.2.3.4"])
    );
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
        strs(&["1.2.3.4,tcp:80,10.0.0.0/8", "1.2.3.4,tcp:80,100.101.0.0/16"])
    );
    assert_eq!(
        chain_jumps(&d, "filter", "KUBE-SOURCE-RANGES-FIREWALL"),
        vec![
            j("RETURN", "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
            j("RETURN", "KUBE-LOAD-BALANCER-SOURCE-IP"),
            j("DROP", "")
        ]
    );
    assert!(chain(&d, "filter", "KUBE-IPVS-OUT-FILTER").is_empty());
}

// TestAcceptIPVSTraffic.
#[test]
fn accept_ipvs_traffic() {
    let mut a = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.40", 80);
    a.external_ips = vec![ip("5.6.7.8")];
    let mut b = svc("ns1", "svc2", "p80", Protocol::Tcp, "10.20.30.41", 80);
    b.node_port = Some(80);
    b.load_balancer_ingress = lb(&["1.2.3.4"]);
    let mut c = svc("ns1", "svc3", "p80", Protocol::Tcp, "10.20.30.42", 80);
    c.node_port = Some(80);
    let (sm, em) = maps(vec![a, b, c], vec![]);
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-SERVICES"),
        vec![
            j("KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER"),
            j("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
            j("KUBE-MARK-MASQ", "KUBE-EXTERNAL-IP"),
            j("ACCEPT", "KUBE-EXTERNAL-IP"),
            j("ACCEPT", "KUBE-EXTERNAL-IP"),
            j("KUBE-NODE-PORT", ""),
            j("ACCEPT", "KUBE-CLUSTER-IP"),
            j("ACCEPT", "KUBE-LOAD-BALANCER"),
        ]
    );
}

// TestOnlyLocalLoadBalancing.
#[test]
fn only_local_load_balancing() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.node_port = Some(3001);
    s.load_balancer_ingress = lb(&["1.2.3.4"]);
    s.external_policy_local = true;
    let name = s.name.clone();
    let (sm, em) = maps(
        vec![s],
        vec![(
            name,
            vec![
                ep("10.180.0.1", 80, Some(HOST)),
                ep("10.180.1.1", 80, Some("other-hostname")),
            ],
        )],
    );
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("1.2.3.4:80/TCP", &["10.180.0.1:80"]),
            ("10.20.30.41:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
            ("100.101.102.103:3001/TCP", &["10.180.0.1:80"]),
        ])
    );
    assert_eq!(entries(&d, "KUBE-LOAD-BALANCER"), strs(&["1.2.3.4,tcp:80"]));
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-LOCAL"),
        strs(&["1.2.3.4,tcp:80"])
    );
    assert_eq!(entries(&d, "KUBE-NODE-PORT-LOCAL-TCP"), strs(&["3001"]));
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-LOAD-BALANCER"),
        vec![
            j("RETURN", "KUBE-LOAD-BALANCER-LOCAL"),
            j("KUBE-MARK-MASQ", "")
        ]
    );
    assert_eq!(
        chain_jumps(&d, "nat", "KUBE-NODE-PORT"),
        vec![
            j("RETURN", "KUBE-NODE-PORT-LOCAL-TCP"),
            j("KUBE-MARK-MASQ", "KUBE-NODE-PORT-TCP"),
        ]
    );
}

// LoadBalancer ingress with ipMode: Proxy is not programmed (KEP-1860).
#[test]
fn load_balancer_ip_mode_proxy_skipped() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.load_balancer_ingress = vec![
        LoadBalancerIngress {
            ip: ip("1.2.3.4"),
            ip_mode_proxy: true,
        },
        LoadBalancerIngress {
            ip: ip("5.6.7.8"),
            ip_mode_proxy: false,
        },
    ];
    let (sm, em) = maps(vec![s], vec![]);
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert!(vs_summary(&d).contains_key("5.6.7.8:80/TCP"));
    assert!(!vs_summary(&d).contains_key("1.2.3.4:80/TCP"));
    assert_eq!(entries(&d, "KUBE-LOAD-BALANCER"), strs(&["5.6.7.8,tcp:80"]));
    assert!(!d.bound_addresses.contains(&ip("1.2.3.4")));
}

// Health check node port (TestHealthCheckNodePortWhenTerminating: only ready local endpoints count,
// one per IP across ports).
#[test]
fn health_check_node_port() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "172.20.1.1", 80);
    s.node_port = Some(30001);
    s.load_balancer_ingress = lb(&["1.2.3.4"]);
    s.external_policy_local = true;
    s.health_check_node_port = Some(30000);
    let mut s2 = s.clone();
    s2.name.port_name = "p443".into();
    s2.port = 443;
    s2.node_port = Some(30002);
    let (n1, n2) = (s.name.clone(), s2.name.clone());
    let (sm, em) = maps(
        vec![s.clone(), s2],
        vec![
            (
                n1.clone(),
                vec![
                    ep("10.0.1.1", 80, Some(HOST)),
                    ep("10.0.1.2", 80, Some(HOST)),
                    ep("10.0.1.3", 80, None),
                    cond(ep("10.0.1.4", 80, Some(HOST)), false, false, false),
                ],
            ),
            (n2, vec![ep("10.0.1.1", 443, Some(HOST))]),
        ],
    );
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(entries(&d, "KUBE-HEALTH-CHECK-NODE-PORT"), strs(&["30000"]));
    assert_eq!(d.health_checks.len(), 1);
    assert_eq!(d.health_checks[0].service.to_string(), "ns1/svc1");
    assert_eq!(d.health_checks[0].node_port, 30000);
    assert_eq!(d.health_checks[0].local_endpoints, 2);

    // Only terminating local endpoints: the health check reports none.
    let (sm, em) = maps(
        vec![s],
        vec![(
            n1,
            vec![
                cond(ep("10.0.1.1", 80, Some(HOST)), false, true, true),
                cond(ep("10.0.1.2", 80, Some(HOST)), false, true, true),
            ],
        )],
    );
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(d.health_checks[0].local_endpoints, 0);
    // ... while IPVS still uses them (serving-terminating fallback).
    assert_eq!(
        vs_summary(&d)["1.2.3.4:80/TCP"],
        strs(&["10.0.1.1:80", "10.0.1.2:80"])
    );
}

// A NodePort service on a node with no NodePort address: upstream skips the rest of that port,
// health-check set entry included (but keeps the health check server).
#[test]
fn node_port_without_node_ips_skips_rest() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "172.20.1.1", 80);
    s.node_port = Some(30001);
    s.external_policy_local = true;
    s.health_check_node_port = Some(30000);
    let (sm, em) = maps(vec![s], vec![]);
    let d = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V4));
    assert_eq!(d.virtual_servers.len(), 1);
    assert!(entries(&d, "KUBE-NODE-PORT-TCP").is_empty());
    assert!(entries(&d, "KUBE-HEALTH-CHECK-NODE-PORT").is_empty());
    assert_eq!(d.health_checks.len(), 1);
}

// TestSessionAffinity: ClientIP affinity = persistence with the timeout on every virtual server.
#[test]
fn session_affinity() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    s.external_ips = vec![ip("50.60.70.81")];
    s.node_port = Some(3001);
    s.session_affinity_timeout = Some(10800);
    let (sm, em) = maps(vec![s], vec![]);
    let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
    assert_eq!(d.virtual_servers.len(), 3);
    for v in d.virtual_servers.values() {
        assert_eq!(v.service.flags, FLAG_PERSISTENT);
        assert_eq!(v.service.timeout, 10800);
        assert_eq!(v.service.scheduler, "rr");
    }
}

// Scheduler mh sets the mh-port flag (source hash with port), alongside persistence.
#[test]
fn mh_scheduler_flag() {
    let a = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    let mut b = svc("ns1", "svc2", "p80", Protocol::Tcp, "10.20.30.42", 80);
    b.session_affinity_timeout = Some(60);
    let (sm, em) = maps(vec![a, b], vec![]);
    let mut c = cfg(IpFamily::V4);
    c.scheduler = kube_proxy_rs::scheduler::Scheduler::Mh;
    let d = plan(&sm, &em, &node(&[]), &c);
    let flags: Vec<(u32, u32, String)> = d
        .virtual_servers
        .values()
        .map(|v| {
            (
                v.service.flags,
                v.service.timeout,
                v.service.scheduler.clone(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        vec![
            (FLAG_MH_PORT, 0, "mh".to_string()),
            (FLAG_MH_PORT | FLAG_PERSISTENT, 60, "mh".to_string())
        ]
    );
}

// TestTestInternalTrafficPolicyE2E.
#[test]
fn internal_traffic_policy() {
    // (ITP Local, endpoints (ip, node), KUBE-LOOP-BACK size, real servers)
    type Case<'a> = (bool, &'a [(&'a str, &'a str)], usize, &'a [&'a str]);
    let cases: [Case; 4] = [
        (
            false,
            &[
                ("10.0.1.1", HOST),
                ("10.0.1.2", "host1"),
                ("10.0.1.3", "host2"),
            ],
            1,
            &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"],
        ),
        (
            false,
            &[
                ("10.0.1.1", "host0"),
                ("10.0.1.2", "host1"),
                ("10.0.1.3", "host2"),
            ],
            0,
            &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"],
        ),
        (
            true,
            &[
                ("10.0.1.1", HOST),
                ("10.0.1.2", "host1"),
                ("10.0.1.3", "host2"),
            ],
            1,
            &["10.0.1.1:80"],
        ),
        (
            true,
            &[
                ("10.0.1.1", "host0"),
                ("10.0.1.2", "host1"),
                ("10.0.1.3", "host2"),
            ],
            0,
            &[],
        ),
    ];
    for (local, eps, loopback, dests) in cases {
        let mut s = svc("ns1", "svc1", "", Protocol::Tcp, "172.20.1.1", 80);
        s.internal_policy_local = local;
        let name = s.name.clone();
        let eps = eps.iter().map(|(a, h)| ep(a, 80, Some(h))).collect();
        let (sm, em) = maps(vec![s], vec![(name, eps)]);
        let d = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V4));
        assert_eq!(entries(&d, "KUBE-LOOP-BACK").len(), loopback);
        assert_eq!(vs_summary(&d)["172.20.1.1:80/TCP"], strs(dests));
        // No usable local endpoint with ITP Local counts as "internal" even without a fallback.
        let want = u64::from(local && loopback == 0);
        assert_eq!(d.no_local_endpoints[&TrafficPolicy::Internal], want);
        assert_eq!(d.no_local_endpoints[&TrafficPolicy::External], 0);
    }
}

// ITP Local on an externally reachable service falls back to cluster endpoints for its ClusterIP
// (kubernetes#97081) and counts it; TestNoEndpointsMetric's cases.
#[test]
fn no_local_endpoints_fallback_and_metric() {
    // (itp local, etp local, local endpoint present, any endpoint, want internal, want external)
    let cases = [
        (true, false, true, true, 0, 0),
        (false, true, true, true, 0, 0),
        (true, true, true, true, 0, 0),
        (true, false, false, true, 1, 0),
        (false, true, false, true, 0, 1),
        (true, true, false, true, 1, 1),
        (true, true, false, false, 0, 0),
    ];
    for (itp, etp, has_local, any, want_int, want_ext) in cases {
        let mut s = svc("ns1", "svc1", "p80", Protocol::Tcp, "172.20.1.1", 80);
        s.node_port = Some(30000);
        s.internal_policy_local = itp;
        s.external_policy_local = etp;
        let name = s.name.clone();
        let mut eps = vec![];
        if any {
            eps.push(ep("10.0.1.1", 80, Some("host1")));
            eps.push(ep(
                "10.0.1.2",
                80,
                Some(if has_local { HOST } else { "host2" }),
            ));
        }
        let (sm, em) = maps(vec![s], vec![(name, eps)]);
        let d = plan(&sm, &em, &node(&["100.101.102.103"]), &cfg(IpFamily::V4));
        assert_eq!(
            (
                d.no_local_endpoints[&TrafficPolicy::Internal],
                d.no_local_endpoints[&TrafficPolicy::External]
            ),
            (want_int, want_ext),
            "itp={itp} etp={etp} local={has_local} any={any}"
        );
        let cluster_ip = &vs_summary(&d)["172.20.1.1:80/TCP"];
        let node_port = &vs_summary(&d)["100.101.102.103:30000/TCP"];
        let all = strs(&["10.0.1.1:80", "10.0.1.2:80"]);
        let local = strs(&["10.0.1.2:80"]);
        if !any {
            assert!(cluster_ip.is_empty() && node_port.is_empty());
        } else if has_local {
            assert_eq!(cluster_ip, if itp { &local } else { &all });
            assert_eq!(node_port, if etp { &local } else { &all });
        } else {
            // IPVS falls back to cluster endpoints when no local one exists.
            assert_eq!(cluster_ip, &all);
            assert_eq!(node_port, &all);
        }
    }
}

// Test_EndpointSliceReadyAndTerminatingCluster / ...Local / OnlyTerminatingCluster / OnlyTerminatingLocal.
#[test]
fn ready_and_terminating_endpoints() {
    let eps = vec![
        ep("10.0.1.1", 80, Some(HOST)),
        ep("10.0.1.2", 80, Some(HOST)),
        cond(ep("10.0.1.3", 80, Some(HOST)), false, true, true),
        cond(ep("10.0.1.4", 80, Some(HOST)), false, false, true),
        ep("10.0.1.5", 80, Some("another-host")),
    ];
    for etp in [false, true] {
        let mut s = svc("ns1", "svc1", "", Protocol::Tcp, "172.20.1.1", 80);
        s.external_ips = vec![ip("1.2.3.4")];
        s.external_policy_local = etp;
        let name = s.name.clone();
        let (sm, em) = maps(vec![s], vec![(name, eps.clone())]);
        let d = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V4));
        assert_eq!(
            entries(&d, "KUBE-LOOP-BACK"),
            strs(&[
                "10.0.1.1,tcp:80,10.0.1.1",
                "10.0.1.2,tcp:80,10.0.1.2",
                "10.0.1.3,tcp:80,10.0.1.3",
                "10.0.1.4,tcp:80,10.0.1.4"
            ])
        );
        assert_eq!(
            vs_summary(&d)["172.20.1.1:80/TCP"],
            strs(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"])
        );
        let want = if etp {
            strs(&["10.0.1.1:80", "10.0.1.2:80"])
        } else {
            strs(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"])
        };
        assert_eq!(vs_summary(&d)["1.2.3.4:80/TCP"], want);
    }

    // Only terminating endpoints: serving ones are used (cluster-wide and local independently).
    let eps = vec![
        cond(ep("10.0.1.1", 80, Some(HOST)), false, true, true),
        cond(ep("10.0.1.2", 80, Some(HOST)), false, true, true),
        cond(ep("10.0.1.3", 80, Some(HOST)), false, false, true),
        cond(ep("10.0.1.4", 80, Some("another-host")), false, true, true),
        cond(
            ep("10.0.1.5", 80, Some("another-host")),
            false,
            false,
            false,
        ),
    ];
    for etp in [false, true] {
        let mut s = svc("ns1", "svc1", "", Protocol::Tcp, "172.20.1.1", 80);
        s.external_ips = vec![ip("1.2.3.4")];
        s.external_policy_local = etp;
        let name = s.name.clone();
        let (sm, em) = maps(vec![s], vec![(name, eps.clone())]);
        let d = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V4));
        assert_eq!(
            vs_summary(&d)["172.20.1.1:80/TCP"],
            strs(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.4:80"])
        );
        let want = if etp {
            strs(&["10.0.1.1:80", "10.0.1.2:80"])
        } else {
            strs(&["10.0.1.1:80", "10.0.1.2:80", "10.0.1.4:80"])
        };
        assert_eq!(vs_summary(&d)["1.2.3.4:80/TCP"], want);
    }
}

// Topology hints through the whole plan (upstream TestTopologyHints in the ipvs proxier).
#[test]
fn topology_hints() {
    let zoned = |a: &str, zones: &[&str]| {
        let mut e = ep(a, 80, None);
        e.hints_for_zones = Some(zones.iter().map(|z| (*z).into()).collect());
        e
    };
    let s = svc("ns1", "svc1", "", Protocol::Tcp, "10.20.30.41", 80);
    let name = s.name.clone();
    let run = |eps: Vec<kube_proxy_rs::cluster::model::Endpoint>, zone: Option<&str>| {
        let (sm, em) = maps(vec![s.clone()], vec![(name.clone(), eps)]);
        let mut n = node(&[]);
        n.zone = zone.map(String::from);
        vs_summary(&plan(&sm, &em, &n, &cfg(IpFamily::V4)))["10.20.30.41:80/TCP"].clone()
    };
    // Every endpoint hinted, some for this zone.
    let eps = vec![
        zoned("10.1.2.3", &["zone-a"]),
        zoned("10.1.2.4", &["zone-b"]),
        zoned("10.1.2.5", &["zone-c"]),
        zoned("10.1.2.6", &["zone-a"]),
    ];
    assert_eq!(
        run(eps.clone(), Some("zone-a")),
        strs(&["10.1.2.3:80", "10.1.2.6:80"])
    );
    // No zone label on the node: hints ignored.
    assert_eq!(run(eps, None).len(), 4);
    // One endpoint without hints: hints ignored.
    let eps = vec![zoned("10.1.2.3", &["zone-a"]), ep("10.1.2.4", 80, None)];
    assert_eq!(run(eps, Some("zone-a")).len(), 2);
    // Node hints win when every ready endpoint has one and one names this node.
    let mut a = zoned("10.1.2.3", &["zone-a"]);
    a.hints_for_nodes = Some([HOST.into()].into());
    let mut b = zoned("10.1.2.4", &["zone-a"]);
    b.hints_for_nodes = Some(["other".into()].into());
    assert_eq!(run(vec![a, b], Some("zone-a")), strs(&["10.1.2.3:80"]));
}

// masqueradeAll and each LocalDetector mode on the ClusterIP masquerade rule.
#[test]
fn cluster_ip_masquerade_modes() {
    let s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    let (sm, em) = maps(vec![s], vec![]);
    let c = "\"Kubernetes service cluster ip + port for masquerade purpose\"";
    let rule = |masq_all: bool, det: LocalDetector| {
        let mut cf = cfg(IpFamily::V4);
        cf.masquerade_all = masq_all;
        cf.local_detector = det;
        let d = plan(&sm, &em, &node(&[]), &cf);
        chain(&d, "nat", "KUBE-SERVICES")
            .into_iter()
            .find(|r| r.ends_with("-j KUBE-MARK-MASQ"))
            .unwrap()
    };
    assert_eq!(
        rule(false, LocalDetector::None),
        format!(
            "-A KUBE-SERVICES -m comment --comment {c} -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ"
        )
    );
    assert_eq!(
        rule(
            false,
            LocalDetector::Cidrs(vec!["10.0.0.0/24".parse().unwrap()])
        ),
        format!(
            "-A KUBE-SERVICES ! -s 10.0.0.0/24 -m comment --comment {c} -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
        )
    );
    assert_eq!(
        rule(false, LocalDetector::BridgeInterface("cbr0".into())),
        format!(
            "-A KUBE-SERVICES ! -i cbr0 -m comment --comment {c} -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
        )
    );
    assert_eq!(
        rule(false, LocalDetector::InterfaceNamePrefix("veth".into())),
        format!(
            "-A KUBE-SERVICES ! -i veth+ -m comment --comment {c} -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
        )
    );
    assert_eq!(
        rule(
            true,
            LocalDetector::Cidrs(vec!["10.0.0.0/24".parse().unwrap()])
        ),
        format!(
            "-A KUBE-SERVICES -m comment --comment {c} -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
        )
    );
}

// The masquerade mark follows masqueradeBit.
#[test]
fn masquerade_bit() {
    let (sm, em) = maps(vec![], vec![]);
    let mut c = cfg(IpFamily::V4);
    c.masquerade_bit = 0;
    let d = plan(&sm, &em, &node(&[]), &c);
    assert_eq!(
        chain(&d, "nat", "KUBE-MARK-MASQ"),
        vec!["-A KUBE-MARK-MASQ -j MARK --set-xmark 0x1/0x1"]
    );
    assert!(chain(&d, "filter", "KUBE-FORWARD")[0].contains("-m mark --mark 0x1/0x1 -j ACCEPT"));
}

// IPv6: KUBE-6- names (truncated to 31 characters), /128 netmask, ::1/128, icmp6 REJECT, IPv6 entries.
#[test]
fn ipv6_everything() {
    let mut s = svc("ns1", "svc1", "p80", Protocol::Sctp, "fd00:96::10", 80);
    s.node_port = Some(30080);
    s.external_policy_local = true;
    s.external_ips = vec![ip("2001:db8:e::1"), ip("203.0.113.1")];
    s.load_balancer_ingress = lb(&["2001:db8:1b::1", "198.51.100.1"]);
    s.load_balancer_source_ranges = vec![
        "2001:db8:5::/48".parse().unwrap(),
        "2001:db8:6::7/128".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    ];
    let name = s.name.clone();
    let (sm, em) = maps(
        vec![s],
        vec![(
            name,
            vec![
                ep("fd00:244::5", 8080, Some(HOST)),
                ep("10.244.0.5", 8080, Some(HOST)),
            ],
        )],
    );
    let n = node(&["2001:db8:a::10", "10.0.0.10"]);
    let mut c = cfg(IpFamily::V6);
    c.local_detector = LocalDetector::Cidrs(vec![
        "10.244.0.0/16".parse().unwrap(),
        "fd00:244::/64".parse().unwrap(),
    ]);
    let d = plan(&sm, &em, &n, &c);
    assert_eq!(
        vs_summary(&d),
        vs(&[
            ("[2001:db8:1b::1]:80/SCTP", &["[fd00:244::5]:8080"]),
            ("[2001:db8:a::10]:30080/SCTP", &["[fd00:244::5]:8080"]),
            ("[2001:db8:e::1]:80/SCTP", &["[fd00:244::5]:8080"]),
            ("[fd00:96::10]:80/SCTP", &["[fd00:244::5]:8080"]),
        ])
    );
    assert!(d.virtual_servers.values().all(|v| v.service.netmask == 128));
    let sets: BTreeMap<String, Vec<String>> = non_empty_sets(&d)
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect();
    let want = BTreeMap::from([
        (
            "KUBE-6-CLUSTER-IP".to_string(),
            strs(&["fd00:96::10,sctp:80"]),
        ),
        (
            "KUBE-6-EXTERNAL-IP-LOCAL".to_string(),
            strs(&["2001:db8:e::1,sctp:80"]),
        ),
        (
            "KUBE-6-IPVS-IPS".to_string(),
            strs(&["2001:db8:1b::1", "2001:db8:e::1", "fd00:96::10"]),
        ),
        (
            "KUBE-6-LOAD-BALANCER".to_string(),
            strs(&["2001:db8:1b::1,sctp:80"]),
        ),
        (
            "KUBE-6-LOAD-BALANCER-FW".to_string(),
            strs(&["2001:db8:1b::1,sctp:80"]),
        ),
        (
            "KUBE-6-LOAD-BALANCER-LOCAL".to_string(),
            strs(&["2001:db8:1b::1,sctp:80"]),
        ),
        (
            "KUBE-6-LOAD-BALANCER-SOURCE-CID".to_string(),
            strs(&[
                "2001:db8:1b::1,sctp:80,2001:db8:5::/48",
                "2001:db8:1b::1,sctp:80,2001:db8:6::7",
            ]),
        ),
        (
            "KUBE-6-LOOP-BACK".to_string(),
            strs(&["fd00:244::5,sctp:8080,fd00:244::5"]),
        ),
        (
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS".to_string(),
            strs(&["2001:db8:a::10,sctp:30080"]),
        ),
        (
            "KUBE-6-NODE-PORT-SCTP-HASH".to_string(),
            strs(&["2001:db8:a::10,sctp:30080"]),
        ),
    ]);
    assert_eq!(sets, want);
    for set in d.ipsets.values() {
        assert!(set.spec.name.starts_with("KUBE-6-") && set.spec.name.len() <= 31);
        assert_eq!(set.spec.family, IpFamily::V6);
    }
    let p = &d.iptables_payload;
    assert!(p.contains("-A KUBE-SERVICES -s ::1/128 -j RETURN\n"));
    assert!(p.contains(
        "--match-set KUBE-6-IPVS-IPS dst -j REJECT --reject-with icmp6-port-unreachable\n"
    ));
    assert!(p.contains("-A KUBE-SERVICES ! -s fd00:244::/64 -m comment"));
    assert!(p.contains(
        "-A KUBE-IPVS-OUT-FILTER -s 2001:db8:1b::1/128 -m ipvs --vproto 132 --vaddr 2001:db8:1b::1 --vport 80 -j DROP\n"
    ));
    assert!(p.contains("--match-set KUBE-6-LOAD-BALANCER-SOURCE-CID dst,dst,src -j RETURN\n"));
    assert!(p.contains("--match-set KUBE-6-NODE-PORT-LOCAL-SCTP-HAS dst,dst -j RETURN\n"));
    assert!(!p.contains("KUBE-LOAD-BALANCER-SOURCE-CIDR") && !p.contains("127.0.0.0/8"));
}

// excludeCIDRs only protect foreign virtual servers from deletion: planned services stay planned.
#[test]
fn exclude_cidrs_do_not_filter_planned_services() {
    let s = svc("ns1", "svc1", "p80", Protocol::Tcp, "10.20.30.41", 80);
    let (sm, em) = maps(vec![s], vec![]);
    let mut c = cfg(IpFamily::V4);
    c.exclude_cidrs = vec!["10.20.0.0/16".parse().unwrap()];
    let d = plan(&sm, &em, &node(&[]), &c);
    assert!(vs_summary(&d).contains_key("10.20.30.41:80/TCP"));
}

// The built-in chain jumps, in upstream's iptablesJumpChain order.
#[test]
fn jumps_in_upstream_order() {
    let (sm, em) = maps(vec![], vec![]);
    let d = plan(&sm, &em, &node(&[]), &cfg(IpFamily::V4));
    let got: Vec<String> = d
        .jumps
        .iter()
        .map(|j| format!("{} {} {} {}", j.table, j.chain, j.target, j.comment))
        .collect();
    assert_eq!(
        got,
        vec![
            "nat OUTPUT KUBE-SERVICES kubernetes service portals",
            "nat PREROUTING KUBE-SERVICES kubernetes service portals",
            "nat POSTROUTING KUBE-POSTROUTING kubernetes postrouting rules",
            "filter FORWARD KUBE-FORWARD kubernetes forwarding rules",
            "filter INPUT KUBE-NODE-PORT kubernetes health check rules",
            "filter INPUT KUBE-PROXY-FIREWALL kube-proxy firewall rules",
            "filter FORWARD KUBE-PROXY-FIREWALL kube-proxy firewall rules",
            "filter INPUT KUBE-IPVS-FILTER kubernetes ipvs access filter",
            "filter OUTPUT KUBE-IPVS-OUT-FILTER kubernetes ipvs access filter",
        ]
    );
}
