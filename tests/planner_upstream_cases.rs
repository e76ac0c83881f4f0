//! Cases taken from upstream pkg/proxy/ipvs/proxier_test.go (and the behaviour of syncProxyRules /
//! writeIptablesRules they pin down), replayed through the pure planner: one table of cases ([`CASES`],
//! each naming the upstream test it replays) and one runner.
mod common {
    pub mod planner;
}

use common::planner::{
    HOST, chain, chain_jumps, entries, ip, maps, node, non_empty_sets, port_name, vs_summary,
};
use kube_proxy_rs::cluster::model::{
    Endpoint, IpFamily, LoadBalancerIngress, Protocol, ServicePort,
};
use kube_proxy_rs::kernel::ipvs::{FLAG_MH_PORT, FLAG_PERSISTENT};
use kube_proxy_rs::proxier::desired::{DesiredState, TrafficPolicy};
use kube_proxy_rs::proxier::plan::{LocalDetector, PlanConfig, plan};
use std::collections::BTreeMap;

const TCP: Protocol = Protocol::Tcp;
const UDP: Protocol = Protocol::Udp;
const SCTP: Protocol = Protocol::Sctp;
const V4: IpFamily = IpFamily::V4;
const V6: IpFamily = IpFamily::V6;

/// Virtual server `addr:port/PROTO` with its real servers `ip:port`.
type Vs = (&'static str, &'static [&'static str]);
/// Set name with its members.
type Set = (&'static str, &'static [&'static str]);
/// `(table, chain, rules)`.
type Rules = (&'static str, &'static str, &'static [&'static str]);
/// `(table, chain, (target, match-set) of each rule)`, like upstream's checkIptables.
type Jumps = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// An endpoint of a case's service port (ready, serving, not terminating unless [`cond`] says otherwise).
#[derive(Clone, Copy)]
struct Ep {
    ip: &'static str,
    port: u16,
    node: Option<&'static str>,
    ready: bool,
    serving: bool,
    terminating: bool,
    hints_for_zones: Option<&'static [&'static str]>,
    hints_for_nodes: Option<&'static [&'static str]>,
}

const fn ep(ip: &'static str, port: u16, node: Option<&'static str>) -> Ep {
    Ep {
        ip,
        port,
        node,
        ready: true,
        serving: true,
        terminating: false,
        hints_for_zones: None,
        hints_for_nodes: None,
    }
}

const fn cond(e: Ep, ready: bool, serving: bool, terminating: bool) -> Ep {
    Ep {
        ready,
        serving,
        terminating,
        ..e
    }
}

/// An endpoint at port 80 with zone hints.
const fn zoned(ip: &'static str, zones: &'static [&'static str]) -> Ep {
    Ep {
        hints_for_zones: Some(zones),
        ..ep(ip, 80, None)
    }
}

/// A service port of a case: a ClusterIP service port and whatever the case adds.
#[derive(Clone, Copy)]
struct Svc {
    ns: &'static str,
    name: &'static str,
    port_name: &'static str,
    proto: Protocol,
    cluster_ip: &'static str,
    port: u16,
    node_port: Option<u16>,
    external_ips: &'static [&'static str],
    /// LoadBalancer ingress IPs with `ipMode: Proxy`, listed before [`Svc::lb`].
    lb_proxy: &'static [&'static str],
    lb: &'static [&'static str],
    source_ranges: &'static [&'static str],
    affinity: Option<u32>,
    etp_local: bool,
    itp_local: bool,
    health_check_node_port: Option<u16>,
    /// Its endpoints; `None`: no endpoints entry at all.
    eps: Option<&'static [Ep]>,
}

const fn svc(
    ns: &'static str,
    name: &'static str,
    port_name: &'static str,
    proto: Protocol,
    cluster_ip: &'static str,
    port: u16,
) -> Svc {
    Svc {
        ns,
        name,
        port_name,
        proto,
        cluster_ip,
        port,
        node_port: None,
        external_ips: &[],
        lb_proxy: &[],
        lb: &[],
        source_ranges: &[],
        affinity: None,
        etp_local: false,
        itp_local: false,
        health_check_node_port: None,
        eps: None,
    }
}

/// What a case expects of the plan; every field left at [`NONE`] is not checked.
struct Want {
    /// Every virtual server with its real servers.
    vs: Option<&'static [Vs]>,
    /// Some virtual servers with their real servers.
    vs_some: &'static [Vs],
    /// Virtual servers that exist / do not exist.
    vs_present: &'static [&'static str],
    vs_absent: &'static [&'static str],
    vs_count: Option<usize>,
    /// Netmask of every virtual server.
    netmask: Option<u32>,
    /// `(flags, timeout, scheduler)` of each virtual server in key order.
    vs_attrs: Option<&'static [(u32, u32, &'static str)]>,
    /// Members of some sets (an empty list: the set is empty).
    sets: &'static [Set],
    /// Number of members of some sets.
    set_sizes: &'static [(&'static str, usize)],
    /// Every set that has members, with its members.
    non_empty_sets: Option<&'static [Set]>,
    jumps: &'static [Jumps],
    /// Every rule of some chains.
    rules: &'static [Rules],
    /// Some rules of some chains.
    rules_have: &'static [Rules],
    /// The ClusterIP masquerade rule (the first KUBE-SERVICES rule jumping to KUBE-MARK-MASQ).
    masq_rule: Option<&'static str>,
    payload_has: &'static [&'static str],
    payload_lacks: &'static [&'static str],
    bound: &'static [&'static str],
    unbound: &'static [&'static str],
    /// `(service, node port, local endpoints)` of every health check.
    health: Option<&'static [(&'static str, u16, usize)]>,
    /// No-local-endpoints counts `(internal, external)`.
    no_local: Option<(u64, u64)>,
    /// Assertions particular to one case.
    check: Option<fn(&DesiredState)>,
}

const NONE: Want = Want {
    vs: None,
    vs_some: &[],
    vs_present: &[],
    vs_absent: &[],
    vs_count: None,
    netmask: None,
    vs_attrs: None,
    sets: &[],
    set_sizes: &[],
    non_empty_sets: None,
    jumps: &[],
    rules: &[],
    rules_have: &[],
    masq_rule: None,
    payload_has: &[],
    payload_lacks: &[],
    bound: &[],
    unbound: &[],
    health: None,
    no_local: None,
    check: None,
};

/// One upstream case: services (with their endpoints), node, configuration, and what the plan must hold.
struct Case {
    /// The upstream test (and case) replayed.
    name: &'static str,
    services: &'static [Svc],
    /// The node's IPs (NodePort and local addresses alike).
    node_ips: &'static [&'static str],
    /// Further local addresses of the node.
    local: &'static [&'static str],
    zone: Option<&'static str>,
    family: IpFamily,
    /// Changes to the default configuration.
    config: fn(&mut PlanConfig),
    want: Want,
}

const fn case(
    name: &'static str,
    services: &'static [Svc],
    node_ips: &'static [&'static str],
) -> Case {
    Case {
        name,
        services,
        node_ips,
        local: &[],
        zone: None,
        family: V4,
        config: |_| {},
        want: NONE,
    }
}

#[test]
fn upstream_cases() {
    for c in CASES {
        let d = plan_case(c);
        check_vs(c.name, &c.want, &d);
        check_sets(c.name, &c.want, &d);
        check_rules(c.name, &c.want, &d);
        check_rest(c.name, &c.want, &d);
        if let Some(check) = c.want.check {
            check(&d);
        }
    }
}

// Upstream test names must stay unique, so a failure names one case.
#[test]
fn case_names_are_unique() {
    let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CASES.len());
}

fn endpoint(e: &Ep) -> Endpoint {
    let mut x = common::planner::cond(
        common::planner::ep(e.ip, e.port, e.node),
        e.ready,
        e.serving,
        e.terminating,
    );
    x.edit_topology(|t| {
        t.hints_for_zones = e
            .hints_for_zones
            .map(|z| z.iter().map(|z| (*z).into()).collect());
        t.hints_for_nodes = e
            .hints_for_nodes
            .map(|n| n.iter().map(|n| (*n).into()).collect());
    });
    x
}

fn service_port(s: &Svc) -> ServicePort {
    let lb = |ips: &'static [&'static str], proxy| {
        ips.iter().map(move |a| LoadBalancerIngress {
            ip: ip(a),
            ip_mode_proxy: proxy,
        })
    };
    ServicePort {
        node_port: s.node_port,
        external_ips: s.external_ips.iter().map(|a| ip(a)).collect(),
        load_balancer_ingress: lb(s.lb_proxy, true).chain(lb(s.lb, false)).collect(),
        load_balancer_source_ranges: s.source_ranges.iter().map(|r| r.parse().unwrap()).collect(),
        session_affinity_timeout: s.affinity,
        external_policy_local: s.etp_local,
        internal_policy_local: s.itp_local,
        health_check_node_port: s.health_check_node_port,
        ..ServicePort::new(
            port_name(s.ns, s.name, s.port_name, s.proto),
            vec![ip(s.cluster_ip)],
            s.port,
        )
    }
}

fn plan_case(c: &Case) -> DesiredState {
    let services = c.services.iter().map(service_port).collect::<Vec<_>>();
    let endpoints = c
        .services
        .iter()
        .zip(&services)
        .filter_map(|(s, sp)| Some((sp.name.clone(), s.eps?.iter().map(endpoint).collect())))
        .collect();
    let (sm, em) = maps(services, endpoints);
    let mut n = node(c.node_ips);
    n.local_addresses.extend(c.local.iter().map(|a| ip(a)));
    n.zone = c.zone.map(String::from);
    let mut cfg = PlanConfig::new(c.family);
    (c.config)(&mut cfg);
    plan(&sm, &em, &n, &cfg)
}

/// Sorted strings.
fn strs(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn vs_map(list: &[Vs]) -> BTreeMap<String, Vec<String>> {
    list.iter().map(|(k, v)| (k.to_string(), strs(v))).collect()
}

fn check_vs(case: &str, w: &Want, d: &DesiredState) {
    let got = vs_summary(d);
    if let Some(vs) = w.vs {
        assert_eq!(got, vs_map(vs), "{case}: virtual servers");
    }
    for (k, dests) in w.vs_some {
        assert_eq!(got.get(*k), Some(&strs(dests)), "{case}: {k}");
    }
    for k in w.vs_present {
        assert!(got.contains_key(*k), "{case}: {k} missing");
    }
    for k in w.vs_absent {
        assert!(!got.contains_key(*k), "{case}: {k} planned");
    }
    if let Some(n) = w.vs_count {
        assert_eq!(d.virtual_servers.len(), n, "{case}: virtual server count");
    }
    if let Some(mask) = w.netmask {
        assert!(
            d.virtual_servers
                .values()
                .all(|v| v.service.netmask == mask),
            "{case}: netmask"
        );
    }
    if let Some(attrs) = w.vs_attrs {
        let got: Vec<(u32, u32, String)> = d
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
        let want: Vec<(u32, u32, String)> = attrs
            .iter()
            .map(|(f, t, s)| (*f, *t, s.to_string()))
            .collect();
        assert_eq!(got, want, "{case}: flags, timeout, scheduler");
    }
}

fn check_sets(case: &str, w: &Want, d: &DesiredState) {
    for (set, members) in w.sets {
        assert_eq!(entries(d, set), strs(members), "{case}: {set}");
    }
    for (set, n) in w.set_sizes {
        assert_eq!(entries(d, set).len(), *n, "{case}: size of {set}");
    }
    if let Some(sets) = w.non_empty_sets {
        let got: BTreeMap<String, Vec<String>> = non_empty_sets(d)
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().collect()))
            .collect();
        assert_eq!(got, vs_map(sets), "{case}: non-empty sets");
    }
    for a in w.bound {
        assert!(d.bound_addresses.contains(&ip(a)), "{case}: {a} not bound");
    }
    for a in w.unbound {
        assert!(!d.bound_addresses.contains(&ip(a)), "{case}: {a} bound");
    }
}

fn check_rules(case: &str, w: &Want, d: &DesiredState) {
    for (table, ch, want) in w.jumps {
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(t, s)| (t.to_string(), s.to_string()))
            .collect();
        assert_eq!(chain_jumps(d, table, ch), want, "{case}: {table} {ch}");
    }
    for (table, ch, want) in w.rules {
        assert_eq!(chain(d, table, ch), *want, "{case}: {table} {ch}");
    }
    for (table, ch, want) in w.rules_have {
        let rules = chain(d, table, ch);
        for r in *want {
            assert!(
                rules.iter().any(|x| x == r),
                "{case}: {table} {ch} lacks {r}"
            );
        }
    }
    if let Some(want) = w.masq_rule {
        let rules = chain(d, "nat", "KUBE-SERVICES");
        let got = rules.iter().find(|r| r.ends_with("-j KUBE-MARK-MASQ"));
        assert_eq!(
            got.map(String::as_str),
            Some(want),
            "{case}: masquerade rule"
        );
    }
    for p in w.payload_has {
        assert!(d.iptables_payload.contains(p), "{case}: payload lacks {p}");
    }
    for p in w.payload_lacks {
        assert!(!d.iptables_payload.contains(p), "{case}: payload has {p}");
    }
}

fn check_rest(case: &str, w: &Want, d: &DesiredState) {
    if let Some(health) = w.health {
        let got: Vec<(String, u16, usize)> = d
            .health_checks
            .iter()
            .map(|h| (h.service.to_string(), h.node_port, h.local_endpoints))
            .collect();
        let want: Vec<(String, u16, usize)> = health
            .iter()
            .map(|(s, p, n)| (s.to_string(), *p, *n))
            .collect();
        assert_eq!(got, want, "{case}: health checks");
    }
    if let Some((internal, external)) = w.no_local {
        let got = (
            d.no_local_endpoints[&TrafficPolicy::Internal],
            d.no_local_endpoints[&TrafficPolicy::External],
        );
        assert_eq!(got, (internal, external), "{case}: no local endpoints");
    }
}

/// Node port 3001 on ns1/svc1:p80.
const fn np3001(proto: Protocol, cluster_ip: &'static str, eps: &'static [Ep]) -> Svc {
    Svc {
        node_port: Some(3001),
        eps: Some(eps),
        ..svc("ns1", "svc1", "p80", proto, cluster_ip, 80)
    }
}

const TWO_FAMILY_EPS: &[Ep] = &[ep("10.180.0.1", 80, None), ep("1002:ab8::2:10", 80, None)];
const ONE_EP: &[Ep] = &[ep("10.180.0.1", 80, None)];
const NODE_IP: &[&str] = &["100.101.102.103"];

/// A TestTestInternalTrafficPolicyE2E case: ITP Local or not, the endpoints, the size of
/// KUBE-LOOP-BACK, the ClusterIP's real servers and the expected internal no-local count.
macro_rules! itp_case {
    ($name:expr, $local:expr, $eps:expr, $loop_back:expr, $dests:expr, $internal:expr) => {
        Case {
            want: Want {
                set_sizes: &[("KUBE-LOOP-BACK", $loop_back)],
                vs_some: &[("172.20.1.1:80/TCP", $dests)],
                no_local: Some(($internal, 0)),
                ..NONE
            },
            ..case($name, &[itp($local, $eps)], &[])
        }
    };
}

/// A ready-and-terminating case: ETP Local or not, the endpoints, sets to check, and the real servers
/// of the ClusterIP and of the ExternalIP.
macro_rules! terminating_case {
    ($name:expr, $etp:expr, $eps:expr, $sets:expr, $cluster_ip:expr, $external_ip:expr) => {
        Case {
            want: Want {
                sets: $sets,
                vs_some: &[
                    ("172.20.1.1:80/TCP", $cluster_ip),
                    ("1.2.3.4:80/TCP", $external_ip),
                ],
                ..NONE
            },
            ..case($name, &[external($etp, $eps)], &[])
        }
    };
}

/// A topology hints case: the node's zone, the endpoints and the ClusterIP's real servers.
macro_rules! topology_case {
    ($name:expr, $zone:expr, $eps:expr, $dests:expr) => {
        Case {
            zone: $zone,
            want: Want {
                vs_some: &[("10.20.30.41:80/TCP", $dests)],
                ..NONE
            },
            ..case($name, &[hinted($eps)], &[])
        }
    };
}

/// A ClusterIP masquerade rule case (writeIptablesRules): configuration change and the rule.
macro_rules! masq_case {
    ($name:expr, $config:expr, $rule:expr) => {
        Case {
            config: $config,
            want: Want {
                masq_rule: Some($rule),
                ..NONE
            },
            ..case($name, ONE_SERVICE, &[])
        }
    };
}

/// A TestNoEndpointsMetric case: ITP and ETP Local or not, the endpoints, the expected no-local counts
/// `(internal, external)` and the ClusterIP's and NodePort's real servers.
macro_rules! policy_case {
    ($name:expr, $itp:expr, $etp:expr, $eps:expr, $no_local:expr, $cluster_ip:expr, $node_port:expr) => {
        Case {
            want: Want {
                no_local: Some($no_local),
                vs_some: &[
                    ("172.20.1.1:80/TCP", $cluster_ip),
                    ("100.101.102.103:30000/TCP", $node_port),
                ],
                ..NONE
            },
            ..case(
                $name,
                &[Svc {
                    node_port: Some(30000),
                    itp_local: $itp,
                    etp_local: $etp,
                    eps: Some($eps),
                    ..svc("ns1", "svc1", "p80", TCP, "172.20.1.1", 80)
                }],
                NODE_IP,
            )
        }
    };
}

const CASES: &[Case] = &[
    Case {
        want: Want {
            vs: Some(&[
                ("10.20.30.41:80/TCP", &["10.180.0.1:80"]),
                ("100.101.102.103:3001/TCP", &["10.180.0.1:80"]),
            ]),
            sets: &[
                ("KUBE-NODE-PORT-TCP", &["3001"]),
                ("KUBE-CLUSTER-IP", &["10.20.30.41,tcp:80"]),
            ],
            ..NONE
        },
        ..case(
            "TestNodePortIPv4: 1 service with node port, has 2 endpoints",
            &[np3001(TCP, "10.20.30.41", TWO_FAMILY_EPS)],
            &["100.101.102.103", "2001:db8::1:1"],
        )
    },
    // The IPv6 proxier does nothing for an IPv4-only service.
    Case {
        family: V6,
        want: Want {
            vs: Some(&[]),
            non_empty_sets: Some(&[]),
            ..NONE
        },
        ..case(
            "TestNodePortIPv6: IPv4 service ignored by the IPv6 proxier",
            &[np3001(TCP, "10.20.30.41", TWO_FAMILY_EPS)],
            &["100.101.102.103", "2001:db8::1:1"],
        )
    },
    Case {
        family: V6,
        want: Want {
            vs: Some(&[
                ("[2001:db8::1:1]:3001/TCP", &["[1002:ab8::2:10]:80"]),
                ("[2020::1]:80/TCP", &["[1002:ab8::2:10]:80"]),
            ]),
            netmask: Some(128),
            sets: &[
                ("KUBE-6-NODE-PORT-TCP", &["3001"]),
                ("KUBE-6-CLUSTER-IP", &["2020::1,tcp:80"]),
                ("KUBE-6-IPVS-IPS", &["2020::1"]),
            ],
            ..NONE
        },
        ..case(
            "TestNodePortIPv6: 1 service with node port, has 2 endpoints",
            &[np3001(TCP, "2020::1", TWO_FAMILY_EPS)],
            &["100.101.102.103", "2001:db8::1:1"],
        )
    },
    Case {
        want: Want {
            vs: Some(&[
                ("10.20.30.41:80/UDP", &["10.180.0.1:80"]),
                ("100.101.102.103:3001/UDP", &["10.180.0.1:80"]),
            ]),
            sets: &[
                ("KUBE-NODE-PORT-UDP", &["3001"]),
                ("KUBE-NODE-PORT-TCP", &[]),
            ],
            jumps: &[
                (
                    "nat",
                    "KUBE-NODE-PORT",
                    &[("KUBE-MARK-MASQ", "KUBE-NODE-PORT-UDP")],
                ),
                (
                    "filter",
                    "KUBE-NODE-PORT",
                    &[("ACCEPT", "KUBE-HEALTH-CHECK-NODE-PORT")],
                ),
                (
                    "nat",
                    "KUBE-SERVICES",
                    &[
                        ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
                        ("KUBE-NODE-PORT", ""),
                        ("ACCEPT", "KUBE-CLUSTER-IP"),
                    ],
                ),
            ],
            rules: &[(
                "nat",
                "KUBE-NODE-PORT",
                &[
                    "-A KUBE-NODE-PORT -p udp -m comment --comment \"Kubernetes nodeport UDP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ",
                ],
            )],
            ..NONE
        },
        ..case(
            "TestNodePortIPv4: 1 UDP service with node port, has endpoints",
            &[np3001(UDP, "10.20.30.41", ONE_EP)],
            NODE_IP,
        )
    },
    Case {
        want: Want {
            vs: Some(&[
                ("10.20.30.41:80/TCP", &[]),
                ("100.101.102.103:3001/TCP", &[]),
            ]),
            ..NONE
        },
        ..case(
            "TestNodePortIPv4: service has node port but no endpoints",
            &[Svc {
                eps: None,
                ..np3001(TCP, "10.20.30.41", &[])
            }],
            NODE_IP,
        )
    },
    Case {
        want: Want {
            vs: Some(&[
                ("10.20.30.41:80/SCTP", &["10.180.0.1:80"]),
                ("100.101.102.103:3001/SCTP", &["10.180.0.1:80"]),
                ("100.101.102.104:3001/SCTP", &["10.180.0.1:80"]),
                ("100.101.102.105:3001/SCTP", &["10.180.0.1:80"]),
            ]),
            sets: &[(
                "KUBE-NODE-PORT-SCTP-HASH",
                &[
                    "100.101.102.103,sctp:3001",
                    "100.101.102.104,sctp:3001",
                    "100.101.102.105,sctp:3001",
                ],
            )],
            rules: &[(
                "nat",
                "KUBE-NODE-PORT",
                &[
                    "-A KUBE-NODE-PORT -p sctp -m comment --comment \"Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'\" -m set --match-set KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ",
                ],
            )],
            ..NONE
        },
        ..case(
            "TestNodePortIPv4: node port service with protocol sctp on a node with multiple nodeIPs",
            &[np3001(SCTP, "10.20.30.41", ONE_EP)],
            &[
                "100.101.102.103",
                "100.101.102.104",
                "100.101.102.105",
                "2001:db8::1:1",
                "2001:db8::1:2",
                "2001:db8::1:3",
            ],
        )
    },
    Case {
        family: V6,
        want: Want {
            vs: Some(&[
                ("[2001:db8::1:1]:3001/SCTP", &["[2001::1]:80"]),
                ("[2001:db8::1:2]:3001/SCTP", &["[2001::1]:80"]),
                ("[2020::1]:80/SCTP", &["[2001::1]:80"]),
            ]),
            sets: &[(
                "KUBE-6-NODE-PORT-SCTP-HASH",
                &["2001:db8::1:1,sctp:3001", "2001:db8::1:2,sctp:3001"],
            )],
            ..NONE
        },
        ..case(
            "TestNodePortIPv6: node port service with protocol sctp on a node with multiple nodeIPs",
            &[np3001(SCTP, "2020::1", &[ep("2001::1", 80, None)])],
            &["2001:db8::1:1", "2001:db8::1:2"],
        )
    },
    Case {
        want: Want {
            vs: Some(&[
                ("10.20.30.41:80/SCTP", &["10.180.0.1:80", "10.180.1.1:80"]),
                ("100.101.102.103:3001/SCTP", &["10.180.0.1:80"]),
            ]),
            sets: &[
                ("KUBE-NODE-PORT-SCTP-HASH", &["100.101.102.103,sctp:3001"]),
                (
                    "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
                    &["100.101.102.103,sctp:3001"],
                ),
                ("KUBE-LOOP-BACK", &["10.180.0.1,sctp:80,10.180.0.1"]),
            ],
            jumps: &[(
                "nat",
                "KUBE-NODE-PORT",
                &[
                    ("RETURN", "KUBE-NODE-PORT-LOCAL-SCTP-HASH"),
                    ("KUBE-MARK-MASQ", "KUBE-NODE-PORT-SCTP-HASH"),
                ],
            )],
            ..NONE
        },
        ..case(
            "TestNodePortIPv4: node port service with protocol sctp and externalTrafficPolicy local",
            &[Svc {
                etp_local: true,
                ..np3001(
                    SCTP,
                    "10.20.30.41",
                    &[
                        ep("10.180.0.1", 80, Some(HOST)),
                        ep("10.180.1.1", 80, Some("otherHost")),
                    ],
                )
            }],
            NODE_IP,
        )
    },
    // TestIPv4Proxier / TestIPv6Proxier: each proxier only handles its family.
    Case {
        want: Want {
            vs: Some(&[("10.20.30.41:80/TCP", &["10.180.0.1:80"])]),
            ..NONE
        },
        ..case("TestIPv4Proxier", TWO_FAMILY_SERVICES, &[])
    },
    Case {
        family: V6,
        want: Want {
            vs: Some(&[("[1002:ab8::2:1]:8080/TCP", &["[1009:ab8::5:6]:8080"])]),
            ..NONE
        },
        ..case("TestIPv6Proxier", TWO_FAMILY_SERVICES, &[])
    },
    // TestMasqueradeRule: --random-fully only when iptables supports it.
    Case {
        config: |c| c.random_fully = false,
        want: Want {
            check: Some(|d| assert!(!masquerade(d).ends_with("--random-fully"))),
            ..NONE
        },
        ..case("TestMasqueradeRule: without --random-fully", &[], &[])
    },
    Case {
        config: |c| c.random_fully = true,
        want: Want {
            check: Some(|d| assert!(masquerade(d).ends_with("--random-fully"))),
            ..NONE
        },
        ..case("TestMasqueradeRule: with --random-fully", &[], &[])
    },
    Case {
        want: Want {
            vs: Some(&[
                ("10.20.30.41:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
                ("50.60.70.81:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
                ("127.0.0.1:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
            ]),
            sets: &[(
                "KUBE-EXTERNAL-IP",
                &["50.60.70.81,tcp:80", "127.0.0.1,tcp:80"],
            )],
            rules_have: &[(
                "nat",
                "KUBE-SERVICES",
                &[
                    "-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -j KUBE-MARK-MASQ",
                    "-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT",
                    "-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -m addrtype --dst-type LOCAL -j ACCEPT",
                ],
            )],
            bound: &["50.60.70.81"],
            ..NONE
        },
        ..case("TestExternalIPs", &[EXTERNAL_IPS], NODE_IP)
    },
    // externalTrafficPolicy: Local: the -LOCAL set, no masquerade rule, local endpoints only; an
    // external IP that is already a node address is not bound to kube-ipvs0.
    Case {
        local: &["50.60.70.81"],
        want: Want {
            vs_some: &[
                ("50.60.70.81:80/TCP", &["10.180.0.1:80"]),
                ("10.20.30.41:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
            ],
            sets: &[
                ("KUBE-EXTERNAL-IP", &[]),
                (
                    "KUBE-EXTERNAL-IP-LOCAL",
                    &["50.60.70.81,tcp:80", "127.0.0.1,tcp:80"],
                ),
            ],
            jumps: &[(
                "nat",
                "KUBE-SERVICES",
                &[
                    ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
                    ("ACCEPT", "KUBE-EXTERNAL-IP-LOCAL"),
                    ("ACCEPT", "KUBE-EXTERNAL-IP-LOCAL"),
                    ("KUBE-NODE-PORT", ""),
                    ("ACCEPT", "KUBE-CLUSTER-IP"),
                ],
            )],
            unbound: &["50.60.70.81"],
            bound: &["127.0.0.1"],
            ..NONE
        },
        ..case(
            "TestOnlyLocalExternalIPs",
            &[Svc {
                etp_local: true,
                ..EXTERNAL_IPS
            }],
            NODE_IP,
        )
    },
    // TestLoadBalancerSourceRanges, plus the KUBE-IPVS-OUT-FILTER drop when no range covers the node
    // IP (kubernetes#119656).
    Case {
        want: Want {
            vs_count: Some(2),
            vs_some: &[("1.2.3.4:80/TCP", &["10.180.0.1:80"])],
            non_empty_sets: Some(&[
                ("KUBE-CLUSTER-IP", &["10.20.30.41,tcp:80"]),
                ("KUBE-IPVS-IPS", &["1.2.3.4", "10.20.30.41"]),
                ("KUBE-LOAD-BALANCER", &["1.2.3.4,tcp:80"]),
                ("KUBE-LOAD-BALANCER-FW", &["1.2.3.4,tcp:80"]),
                (
                    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                    &["1.2.3.4,tcp:80,10.0.0.0/8"],
                ),
            ]),
            jumps: &[
                (
                    "nat",
                    "KUBE-SERVICES",
                    &[
                        ("KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER"),
                        ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
                        ("KUBE-NODE-PORT", ""),
                        ("ACCEPT", "KUBE-CLUSTER-IP"),
                        ("ACCEPT", "KUBE-LOAD-BALANCER"),
                    ],
                ),
                (
                    "filter",
                    "KUBE-PROXY-FIREWALL",
                    &[("KUBE-SOURCE-RANGES-FIREWALL", "KUBE-LOAD-BALANCER-FW")],
                ),
                (
                    "filter",
                    "KUBE-SOURCE-RANGES-FIREWALL",
                    &[("RETURN", "KUBE-LOAD-BALANCER-SOURCE-CIDR"), ("DROP", "")],
                ),
            ],
            rules: &[(
                "filter",
                "KUBE-IPVS-OUT-FILTER",
                &[
                    "-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4/32 -m ipvs --vproto 6 --vaddr 1.2.3.4 --vport 80 -j DROP",
                ],
            )],
            ..NONE
        },
        ..case("TestLoadBalancerSourceRanges", &[SOURCE_RANGES], NODE_IP)
    },
    // A range covering the node IP lets the node in through KUBE-LOAD-BALANCER-SOURCE-IP.
    Case {
        want: Want {
            sets: &[
                ("KUBE-LOAD-BALANCER-SOURCE-IP", &["1.2.3.4,tcp:80,1.2.3.4"]),
                (
                    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                    &["1.2.3.4,tcp:80,10.0.0.0/8", "1.2.3.4,tcp:80,100.101.0.0/16"],
                ),
            ],
            jumps: &[(
                "filter",
                "KUBE-SOURCE-RANGES-FIREWALL",
                &[
                    ("RETURN", "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
                    ("RETURN", "KUBE-LOAD-BALANCER-SOURCE-IP"),
                    ("DROP", ""),
                ],
            )],
            rules: &[("filter", "KUBE-IPVS-OUT-FILTER", &[])],
            ..NONE
        },
        ..case(
            "TestLoadBalancerSourceRanges: a range covers the node IP",
            &[Svc {
                source_ranges: &["10.0.0.0/8", "100.101.0.0/16"],
                ..SOURCE_RANGES
            }],
            NODE_IP,
        )
    },
    Case {
        want: Want {
            jumps: &[(
                "nat",
                "KUBE-SERVICES",
                &[
                    ("KUBE-LOAD-BALANCER", "KUBE-LOAD-BALANCER"),
                    ("KUBE-MARK-MASQ", "KUBE-CLUSTER-IP"),
                    ("KUBE-MARK-MASQ", "KUBE-EXTERNAL-IP"),
                    ("ACCEPT", "KUBE-EXTERNAL-IP"),
                    ("ACCEPT", "KUBE-EXTERNAL-IP"),
                    ("KUBE-NODE-PORT", ""),
                    ("ACCEPT", "KUBE-CLUSTER-IP"),
                    ("ACCEPT", "KUBE-LOAD-BALANCER"),
                ],
            )],
            ..NONE
        },
        ..case(
            "TestAcceptIPVSTraffic",
            &[
                Svc {
                    external_ips: &["5.6.7.8"],
                    ..svc("ns1", "svc1", "p80", TCP, "10.20.30.40", 80)
                },
                Svc {
                    node_port: Some(80),
                    lb: &["1.2.3.4"],
                    ..svc("ns1", "svc2", "p80", TCP, "10.20.30.41", 80)
                },
                Svc {
                    node_port: Some(80),
                    ..svc("ns1", "svc3", "p80", TCP, "10.20.30.42", 80)
                },
            ],
            NODE_IP,
        )
    },
    Case {
        want: Want {
            vs: Some(&[
                ("1.2.3.4:80/TCP", &["10.180.0.1:80"]),
                ("10.20.30.41:80/TCP", &["10.180.0.1:80", "10.180.1.1:80"]),
                ("100.101.102.103:3001/TCP", &["10.180.0.1:80"]),
            ]),
            sets: &[
                ("KUBE-LOAD-BALANCER", &["1.2.3.4,tcp:80"]),
                ("KUBE-LOAD-BALANCER-LOCAL", &["1.2.3.4,tcp:80"]),
                ("KUBE-NODE-PORT-LOCAL-TCP", &["3001"]),
            ],
            jumps: &[
                (
                    "nat",
                    "KUBE-LOAD-BALANCER",
                    &[
                        ("RETURN", "KUBE-LOAD-BALANCER-LOCAL"),
                        ("KUBE-MARK-MASQ", ""),
                    ],
                ),
                (
                    "nat",
                    "KUBE-NODE-PORT",
                    &[
                        ("RETURN", "KUBE-NODE-PORT-LOCAL-TCP"),
                        ("KUBE-MARK-MASQ", "KUBE-NODE-PORT-TCP"),
                    ],
                ),
            ],
            ..NONE
        },
        ..case(
            "TestOnlyLocalLoadBalancing",
            &[Svc {
                lb: &["1.2.3.4"],
                etp_local: true,
                ..np3001(
                    TCP,
                    "10.20.30.41",
                    &[
                        ep("10.180.0.1", 80, Some(HOST)),
                        ep("10.180.1.1", 80, Some("other-hostname")),
                    ],
                )
            }],
            NODE_IP,
        )
    },
    // LoadBalancer ingress with ipMode: Proxy is not programmed (KEP-1860).
    Case {
        want: Want {
            vs_present: &["5.6.7.8:80/TCP"],
            vs_absent: &["1.2.3.4:80/TCP"],
            sets: &[("KUBE-LOAD-BALANCER", &["5.6.7.8,tcp:80"])],
            unbound: &["1.2.3.4"],
            ..NONE
        },
        ..case(
            "KEP-1860 LoadBalancer ipMode Proxy",
            &[Svc {
                lb_proxy: &["1.2.3.4"],
                lb: &["5.6.7.8"],
                ..svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80)
            }],
            NODE_IP,
        )
    },
    // Only ready local endpoints count, one per IP across ports.
    Case {
        want: Want {
            sets: &[("KUBE-HEALTH-CHECK-NODE-PORT", &["30000"])],
            health: Some(&[("ns1/svc1", 30000, 2)]),
            ..NONE
        },
        ..case(
            "TestHealthCheckNodePortWhenTerminating: ready local endpoints",
            &[
                Svc {
                    eps: Some(&[
                        ep("10.0.1.1", 80, Some(HOST)),
                        ep("10.0.1.2", 80, Some(HOST)),
                        ep("10.0.1.3", 80, None),
                        cond(ep("10.0.1.4", 80, Some(HOST)), false, false, false),
                    ]),
                    ..HEALTH_CHECKED
                },
                Svc {
                    port_name: "p443",
                    port: 443,
                    node_port: Some(30002),
                    eps: Some(&[ep("10.0.1.1", 443, Some(HOST))]),
                    ..HEALTH_CHECKED
                },
            ],
            NODE_IP,
        )
    },
    // Only terminating local endpoints: the health check reports none while IPVS still uses them
    // (serving-terminating fallback).
    Case {
        want: Want {
            health: Some(&[("ns1/svc1", 30000, 0)]),
            vs_some: &[("1.2.3.4:80/TCP", &["10.0.1.1:80", "10.0.1.2:80"])],
            ..NONE
        },
        ..case(
            "TestHealthCheckNodePortWhenTerminating: only terminating local endpoints",
            &[Svc {
                eps: Some(&[
                    cond(ep("10.0.1.1", 80, Some(HOST)), false, true, true),
                    cond(ep("10.0.1.2", 80, Some(HOST)), false, true, true),
                ]),
                ..HEALTH_CHECKED
            }],
            NODE_IP,
        )
    },
    // A NodePort service on a node with no NodePort address: upstream skips the rest of that port,
    // health-check set entry included (but keeps the health check server).
    Case {
        want: Want {
            vs_count: Some(1),
            sets: &[
                ("KUBE-NODE-PORT-TCP", &[]),
                ("KUBE-HEALTH-CHECK-NODE-PORT", &[]),
            ],
            health: Some(&[("ns1/svc1", 30000, 0)]),
            ..NONE
        },
        ..case(
            "syncProxyRules: node port without node IPs skips the rest of the port",
            &[Svc {
                node_port: Some(30001),
                etp_local: true,
                health_check_node_port: Some(30000),
                ..svc("ns1", "svc1", "p80", TCP, "172.20.1.1", 80)
            }],
            &[],
        )
    },
    // ClientIP affinity = persistence with the timeout on every virtual server.
    Case {
        want: Want {
            vs_attrs: Some(&[(FLAG_PERSISTENT, 10800, "rr"); 3]),
            ..NONE
        },
        ..case(
            "TestSessionAffinity",
            &[Svc {
                external_ips: &["50.60.70.81"],
                node_port: Some(3001),
                affinity: Some(10800),
                ..svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80)
            }],
            NODE_IP,
        )
    },
    // Scheduler mh sets the mh-port flag (source hash with port), alongside persistence.
    Case {
        config: |c| c.scheduler = kube_proxy_rs::scheduler::Scheduler::Mh,
        want: Want {
            vs_attrs: Some(&[
                (FLAG_MH_PORT, 0, "mh"),
                (FLAG_MH_PORT | FLAG_PERSISTENT, 60, "mh"),
            ]),
            ..NONE
        },
        ..case(
            "syncService: mh scheduler flag",
            &[
                svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80),
                Svc {
                    affinity: Some(60),
                    ..svc("ns1", "svc2", "p80", TCP, "10.20.30.42", 80)
                },
            ],
            &[],
        )
    },
    // TestTestInternalTrafficPolicyE2E. No usable local endpoint with ITP Local counts as "internal"
    // even without a fallback.
    itp_case!(
        "TestTestInternalTrafficPolicyE2E: ITP Cluster, local endpoint",
        false,
        ONE_LOCAL_OF_THREE,
        1,
        THREE,
        0
    ),
    itp_case!(
        "TestTestInternalTrafficPolicyE2E: ITP Cluster, no local endpoint",
        false,
        NONE_LOCAL_OF_THREE,
        0,
        THREE,
        0
    ),
    itp_case!(
        "TestTestInternalTrafficPolicyE2E: ITP Local, local endpoint",
        true,
        ONE_LOCAL_OF_THREE,
        1,
        &["10.0.1.1:80"],
        0
    ),
    itp_case!(
        "TestTestInternalTrafficPolicyE2E: ITP Local, no local endpoint",
        true,
        NONE_LOCAL_OF_THREE,
        0,
        &[],
        1
    ),
    // TestNoEndpointsMetric's cases. ITP Local on an externally reachable service falls back to
    // cluster endpoints for its ClusterIP (kubernetes#97081) and counts it; so does ETP Local.
    policy_case!(
        "no-local metric: itp local, local endpoint",
        true,
        false,
        LOCAL_EPS,
        (0, 0),
        LOCAL,
        ALL
    ),
    policy_case!(
        "no-local metric: etp local, local endpoint",
        false,
        true,
        LOCAL_EPS,
        (0, 0),
        ALL,
        LOCAL
    ),
    policy_case!(
        "no-local metric: both local, local endpoint",
        true,
        true,
        LOCAL_EPS,
        (0, 0),
        LOCAL,
        LOCAL
    ),
    policy_case!(
        "no-local metric: itp local, no local endpoint",
        true,
        false,
        REMOTE_EPS,
        (1, 0),
        ALL,
        ALL
    ),
    policy_case!(
        "no-local metric: etp local, no local endpoint",
        false,
        true,
        REMOTE_EPS,
        (0, 1),
        ALL,
        ALL
    ),
    policy_case!(
        "no-local metric: both local, no local endpoint",
        true,
        true,
        REMOTE_EPS,
        (1, 1),
        ALL,
        ALL
    ),
    policy_case!(
        "no-local metric: both local, no endpoint",
        true,
        true,
        &[],
        (0, 0),
        &[],
        &[]
    ),
    // Test_EndpointSliceReadyAndTerminatingCluster / ...Local; with only terminating endpoints the
    // serving ones are used (cluster-wide and local independently).
    terminating_case!(
        "Test_EndpointSliceReadyAndTerminatingCluster",
        false,
        READY_AND_TERMINATING,
        &[("KUBE-LOOP-BACK", READY_AND_TERMINATING_LOOP_BACK)],
        READY_125,
        READY_125
    ),
    terminating_case!(
        "Test_EndpointSliceReadyAndTerminatingLocal",
        true,
        READY_AND_TERMINATING,
        &[("KUBE-LOOP-BACK", READY_AND_TERMINATING_LOOP_BACK)],
        READY_125,
        READY_12
    ),
    terminating_case!(
        "Test_EndpointSliceOnlyTerminatingCluster",
        false,
        ONLY_TERMINATING,
        &[],
        SERVING_124,
        SERVING_124
    ),
    terminating_case!(
        "Test_EndpointSliceOnlyTerminatingLocal",
        true,
        ONLY_TERMINATING,
        &[],
        SERVING_124,
        READY_12
    ),
    // Topology hints through the whole plan (upstream TestTopologyHints in the ipvs proxier).
    topology_case!(
        "TestTopologyHints: every endpoint hinted, some for this zone",
        Some("zone-a"),
        ALL_HINTED,
        &["10.1.2.3:80", "10.1.2.6:80"]
    ),
    topology_case!(
        "TestTopologyHints: no zone label on the node, hints ignored",
        None,
        ALL_HINTED,
        &["10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"]
    ),
    topology_case!(
        "TestTopologyHints: one endpoint without hints, hints ignored",
        Some("zone-a"),
        &[zoned("10.1.2.3", &["zone-a"]), ep("10.1.2.4", 80, None)],
        &["10.1.2.3:80", "10.1.2.4:80"]
    ),
    // Node hints win when every ready endpoint has one and one names this node.
    topology_case!(
        "TestTopologyHints: node hints",
        Some("zone-a"),
        &[
            Ep {
                hints_for_nodes: Some(&[HOST]),
                ..zoned("10.1.2.3", &["zone-a"])
            },
            Ep {
                hints_for_nodes: Some(&["other"]),
                ..zoned("10.1.2.4", &["zone-a"])
            },
        ],
        &["10.1.2.3:80"]
    ),
    // masqueradeAll and each LocalDetector mode on the ClusterIP masquerade rule.
    masq_case!(
        "ClusterIP masquerade without detector",
        |_| {},
        "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ"
    ),
    masq_case!(
        "ClusterIP masquerade with a CIDR detector",
        |c| c.local_detector = LocalDetector::Cidrs(vec!["10.0.0.0/24".parse().unwrap()]),
        "-A KUBE-SERVICES ! -s 10.0.0.0/24 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
    ),
    masq_case!(
        "ClusterIP masquerade with a bridge detector",
        |c| c.local_detector = LocalDetector::BridgeInterface("cbr0".into()),
        "-A KUBE-SERVICES ! -i cbr0 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
    ),
    masq_case!(
        "ClusterIP masquerade with an interface-prefix detector",
        |c| c.local_detector = LocalDetector::InterfaceNamePrefix("veth".into()),
        "-A KUBE-SERVICES ! -i veth+ -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
    ),
    masq_case!(
        "ClusterIP masquerade with masqueradeAll",
        |c| {
            c.masquerade_all = true;
            c.local_detector = LocalDetector::Cidrs(vec!["10.0.0.0/24".parse().unwrap()]);
        },
        "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"
    ),
    // The masquerade mark follows masqueradeBit.
    Case {
        config: |c| c.masquerade_bit = 0,
        want: Want {
            rules: &[(
                "nat",
                "KUBE-MARK-MASQ",
                &["-A KUBE-MARK-MASQ -j MARK --set-xmark 0x1/0x1"],
            )],
            check: Some(|d| {
                assert!(
                    chain(d, "filter", "KUBE-FORWARD")[0]
                        .contains("-m mark --mark 0x1/0x1 -j ACCEPT")
                )
            }),
            ..NONE
        },
        ..case("writeIptablesRules: masqueradeBit", &[], &[])
    },
    // IPv6: KUBE-6- names (truncated to 31 characters), /128 netmask, ::1/128, icmp6 REJECT, IPv6 entries.
    Case {
        family: V6,
        config: |c| {
            c.local_detector = LocalDetector::Cidrs(vec![
                "10.244.0.0/16".parse().unwrap(),
                "fd00:244::/64".parse().unwrap(),
            ])
        },
        want: IPV6_EVERYTHING,
        ..case(
            "IPv6 everything",
            &[Svc {
                node_port: Some(30080),
                etp_local: true,
                external_ips: &["2001:db8:e::1", "203.0.113.1"],
                lb: &["2001:db8:1b::1", "198.51.100.1"],
                source_ranges: &["2001:db8:5::/48", "2001:db8:6::7/128", "10.0.0.0/8"],
                eps: Some(&[
                    ep("fd00:244::5", 8080, Some(HOST)),
                    ep("10.244.0.5", 8080, Some(HOST)),
                ]),
                ..svc("ns1", "svc1", "p80", SCTP, "fd00:96::10", 80)
            }],
            &["2001:db8:a::10", "10.0.0.10"],
        )
    },
    // excludeCIDRs only protect foreign virtual servers from deletion: planned services stay planned.
    Case {
        config: |c| c.exclude_cidrs = vec!["10.20.0.0/16".parse().unwrap()],
        want: Want {
            vs_present: &["10.20.30.41:80/TCP"],
            ..NONE
        },
        ..case(
            "excludeCIDRs do not filter planned services",
            ONE_SERVICE,
            &[],
        )
    },
    // The built-in chain jumps, in upstream's iptablesJumpChain order.
    Case {
        want: Want {
            check: Some(jumps_in_upstream_order),
            ..NONE
        },
        ..case("iptablesJumpChain order", &[], &[])
    },
];

const TWO_FAMILY_SERVICES: &[Svc] = &[
    Svc {
        eps: Some(ONE_EP),
        ..svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80)
    },
    Svc {
        eps: Some(&[ep("1009:ab8::5:6", 8080, None)]),
        ..svc("ns2", "svc2", "p8080", TCP, "1002:ab8::2:1", 8080)
    },
];

/// The KUBE-POSTROUTING masquerade rule.
fn masquerade(d: &DesiredState) -> String {
    chain(d, "nat", "KUBE-POSTROUTING")
        .into_iter()
        .find(|l| l.contains("-j MASQUERADE"))
        .unwrap()
}

const EXTERNAL_IPS: Svc = Svc {
    external_ips: &["50.60.70.81", "2012::51", "127.0.0.1"],
    eps: Some(&[
        ep("10.180.0.1", 80, Some(HOST)),
        ep("10.180.1.1", 80, Some("other")),
    ]),
    ..svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80)
};

const SOURCE_RANGES: Svc = Svc {
    lb: &["1.2.3.4"],
    source_ranges: &["10.0.0.0/8"],
    eps: Some(ONE_EP),
    ..svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80)
};

const HEALTH_CHECKED: Svc = Svc {
    node_port: Some(30001),
    lb: &["1.2.3.4"],
    etp_local: true,
    health_check_node_port: Some(30000),
    ..svc("ns1", "svc1", "p80", TCP, "172.20.1.1", 80)
};

/// ns1/svc1 (unnamed port) with internalTrafficPolicy Local or not.
const fn itp(local: bool, eps: &'static [Ep]) -> Svc {
    Svc {
        itp_local: local,
        eps: Some(eps),
        ..svc("ns1", "svc1", "", TCP, "172.20.1.1", 80)
    }
}

const ONE_LOCAL_OF_THREE: &[Ep] = &[
    ep("10.0.1.1", 80, Some(HOST)),
    ep("10.0.1.2", 80, Some("host1")),
    ep("10.0.1.3", 80, Some("host2")),
];
const NONE_LOCAL_OF_THREE: &[Ep] = &[
    ep("10.0.1.1", 80, Some("host0")),
    ep("10.0.1.2", 80, Some("host1")),
    ep("10.0.1.3", 80, Some("host2")),
];

const LOCAL_EPS: &[Ep] = &[
    ep("10.0.1.1", 80, Some("host1")),
    ep("10.0.1.2", 80, Some(HOST)),
];
const REMOTE_EPS: &[Ep] = &[
    ep("10.0.1.1", 80, Some("host1")),
    ep("10.0.1.2", 80, Some("host2")),
];
const ALL: &[&str] = &["10.0.1.1:80", "10.0.1.2:80"];
const THREE: &[&str] = &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"];
const READY_12: &[&str] = &["10.0.1.1:80", "10.0.1.2:80"];
const READY_125: &[&str] = &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"];
const SERVING_124: &[&str] = &["10.0.1.1:80", "10.0.1.2:80", "10.0.1.4:80"];
const LOCAL: &[&str] = &["10.0.1.2:80"];

/// ns1/svc1 (unnamed port) with ExternalIP 1.2.3.4 and externalTrafficPolicy Local or not.
const fn external(etp_local: bool, eps: &'static [Ep]) -> Svc {
    Svc {
        external_ips: &["1.2.3.4"],
        etp_local,
        eps: Some(eps),
        ..svc("ns1", "svc1", "", TCP, "172.20.1.1", 80)
    }
}

const READY_AND_TERMINATING: &[Ep] = &[
    ep("10.0.1.1", 80, Some(HOST)),
    ep("10.0.1.2", 80, Some(HOST)),
    cond(ep("10.0.1.3", 80, Some(HOST)), false, true, true),
    cond(ep("10.0.1.4", 80, Some(HOST)), false, false, true),
    ep("10.0.1.5", 80, Some("another-host")),
];
const READY_AND_TERMINATING_LOOP_BACK: &[&str] = &[
    "10.0.1.1,tcp:80,10.0.1.1",
    "10.0.1.2,tcp:80,10.0.1.2",
    "10.0.1.3,tcp:80,10.0.1.3",
    "10.0.1.4,tcp:80,10.0.1.4",
];
const ONLY_TERMINATING: &[Ep] = &[
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

/// ns1/svc1 (unnamed port) with hinted endpoints.
const fn hinted(eps: &'static [Ep]) -> Svc {
    Svc {
        eps: Some(eps),
        ..svc("ns1", "svc1", "", TCP, "10.20.30.41", 80)
    }
}

const ALL_HINTED: &[Ep] = &[
    zoned("10.1.2.3", &["zone-a"]),
    zoned("10.1.2.4", &["zone-b"]),
    zoned("10.1.2.5", &["zone-c"]),
    zoned("10.1.2.6", &["zone-a"]),
];

/// ns1/svc1:p80 without endpoints.
const ONE_SERVICE: &[Svc] = &[svc("ns1", "svc1", "p80", TCP, "10.20.30.41", 80)];

const IPV6_EVERYTHING: Want = Want {
    vs: Some(&[
        ("[2001:db8:1b::1]:80/SCTP", &["[fd00:244::5]:8080"]),
        ("[2001:db8:a::10]:30080/SCTP", &["[fd00:244::5]:8080"]),
        ("[2001:db8:e::1]:80/SCTP", &["[fd00:244::5]:8080"]),
        ("[fd00:96::10]:80/SCTP", &["[fd00:244::5]:8080"]),
    ]),
    netmask: Some(128),
    non_empty_sets: Some(&[
        ("KUBE-6-CLUSTER-IP", &["fd00:96::10,sctp:80"]),
        ("KUBE-6-EXTERNAL-IP-LOCAL", &["2001:db8:e::1,sctp:80"]),
        (
            "KUBE-6-IPVS-IPS",
            &["2001:db8:1b::1", "2001:db8:e::1", "fd00:96::10"],
        ),
        ("KUBE-6-LOAD-BALANCER", &["2001:db8:1b::1,sctp:80"]),
        ("KUBE-6-LOAD-BALANCER-FW", &["2001:db8:1b::1,sctp:80"]),
        ("KUBE-6-LOAD-BALANCER-LOCAL", &["2001:db8:1b::1,sctp:80"]),
        (
            "KUBE-6-LOAD-BALANCER-SOURCE-CID",
            &[
                "2001:db8:1b::1,sctp:80,2001:db8:5::/48",
                "2001:db8:1b::1,sctp:80,2001:db8:6::7",
            ],
        ),
        ("KUBE-6-LOOP-BACK", &["fd00:244::5,sctp:8080,fd00:244::5"]),
        (
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS",
            &["2001:db8:a::10,sctp:30080"],
        ),
        ("KUBE-6-NODE-PORT-SCTP-HASH", &["2001:db8:a::10,sctp:30080"]),
    ]),
    payload_has: &[
        "-A KUBE-SERVICES -s ::1/128 -j RETURN\n",
        "--match-set KUBE-6-IPVS-IPS dst -j REJECT --reject-with icmp6-port-unreachable\n",
        "-A KUBE-SERVICES ! -s fd00:244::/64 -m comment",
        "-A KUBE-IPVS-OUT-FILTER -s 2001:db8:1b::1/128 -m ipvs --vproto 132 --vaddr 2001:db8:1b::1 --vport 80 -j DROP\n",
        "--match-set KUBE-6-LOAD-BALANCER-SOURCE-CID dst,dst,src -j RETURN\n",
        "--match-set KUBE-6-NODE-PORT-LOCAL-SCTP-HAS dst,dst -j RETURN\n",
    ],
    payload_lacks: &["KUBE-LOAD-BALANCER-SOURCE-CIDR", "127.0.0.0/8"],
    check: Some(|d| {
        for set in d.ipsets.values() {
            assert!(set.spec.name.starts_with("KUBE-6-") && set.spec.name.len() <= 31);
            assert_eq!(set.spec.family, IpFamily::V6);
        }
    }),
    ..NONE
};

fn jumps_in_upstream_order(d: &DesiredState) {
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
