//! The iptables side of the plan: the `iptables-restore --noflush` payload (upstream's
//! `createAndLinkKubeChain` + `writeIptablesRules`) and the jumps from built-in chains.

use super::LocalDetector;
use super::ipsets::{PerSet, SetKind};
use crate::cluster::model::Protocol;
use crate::net::IpFamily;
use crate::proxier::desired::JumpRule;
use ipnet::IpNet;
use std::fmt::Write;
use std::net::IpAddr;

/// nat chain holding the service portal rules.
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
/// nat chain doing SNAT.
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
/// nat/filter chain for node ports.
pub const KUBE_NODE_PORT: &str = "KUBE-NODE-PORT";
/// nat chain for load balancer traffic.
pub const KUBE_LOAD_BALANCER: &str = "KUBE-LOAD-BALANCER";
/// nat chain setting the masquerade mark.
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// filter chain accepting marked forwarded traffic.
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
/// filter chain for LB source ranges.
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// filter sub-chain for LB source ranges.
pub const KUBE_SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
/// filter chain blocking host ports through VIPs.
pub const KUBE_IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
/// filter chain blocking LB access from the node when source ranges exclude it.
pub const KUBE_IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";

/// Our nat chains, in declaration order.
pub const NAT_CHAINS: [&str; 5] = [
    KUBE_SERVICES,
    KUBE_POSTROUTING,
    KUBE_NODE_PORT,
    KUBE_LOAD_BALANCER,
    KUBE_MARK_MASQ,
];

/// Our filter chains, in declaration order.
pub const FILTER_CHAINS: [&str; 6] = [
    KUBE_FORWARD,
    KUBE_NODE_PORT,
    KUBE_PROXY_FIREWALL,
    KUBE_SOURCE_RANGES_FIREWALL,
    KUBE_IPVS_FILTER,
    KUBE_IPVS_OUT_FILTER,
];

/// Jumps from built-in chains to ours, in upstream's order (each is inserted at the top of its chain).
pub fn jumps() -> Vec<JumpRule> {
    let j = |table, chain, target, comment| JumpRule {
        table,
        chain,
        target,
        comment,
    };
    vec![
        j("nat", "OUTPUT", KUBE_SERVICES, "kubernetes service portals"),
        j(
            "nat",
            "PREROUTING",
            KUBE_SERVICES,
            "kubernetes service portals",
        ),
        j(
            "nat",
            "POSTROUTING",
            KUBE_POSTROUTING,
            "kubernetes postrouting rules",
        ),
        j(
            "filter",
            "FORWARD",
            KUBE_FORWARD,
            "kubernetes forwarding rules",
        ),
        j(
            "filter",
            "INPUT",
            KUBE_NODE_PORT,
            "kubernetes health check rules",
        ),
        j(
            "filter",
            "INPUT",
            KUBE_PROXY_FIREWALL,
            "kube-proxy firewall rules",
        ),
        j(
            "filter",
            "FORWARD",
            KUBE_PROXY_FIREWALL,
            "kube-proxy firewall rules",
        ),
        j(
            "filter",
            "INPUT",
            KUBE_IPVS_FILTER,
            "kubernetes ipvs access filter",
        ),
        j(
            "filter",
            "OUTPUT",
            KUBE_IPVS_OUT_FILTER,
            "kubernetes ipvs access filter",
        ),
    ]
}

/// Whether a set rule lives in nat or filter.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    Nat,
    Filter,
}

/// One row of upstream's `ipsetWithIptablesChain`: a rule matching a set, written when the set is non-empty.
struct SetRule {
    set: SetKind,
    table: Table,
    chain: &'static str,
    target: &'static str,
    match_type: &'static str,
    proto: Option<Protocol>,
}

/// Upstream's `ipsetWithIptablesChain`, in order.
const SET_RULES: [SetRule; 12] = [
    SetRule {
        set: SetKind::LoopBack,
        table: Table::Nat,
        chain: KUBE_POSTROUTING,
        target: "MASQUERADE",
        match_type: "dst,dst,src",
        proto: None,
    },
    SetRule {
        set: SetKind::LoadBalancer,
        table: Table::Nat,
        chain: KUBE_SERVICES,
        target: KUBE_LOAD_BALANCER,
        match_type: "dst,dst",
        proto: None,
    },
    SetRule {
        set: SetKind::LoadBalancerLocal,
        table: Table::Nat,
        chain: KUBE_LOAD_BALANCER,
        target: "RETURN",
        match_type: "dst,dst",
        proto: None,
    },
    SetRule {
        set: SetKind::NodePortLocalTcp,
        table: Table::Nat,
        chain: KUBE_NODE_PORT,
        target: "RETURN",
        match_type: "dst",
        proto: Some(Protocol::Tcp),
    },
    SetRule {
        set: SetKind::NodePortTcp,
        table: Table::Nat,
        chain: KUBE_NODE_PORT,
        target: KUBE_MARK_MASQ,
        match_type: "dst",
        proto: Some(Protocol::Tcp),
    },
    SetRule {
        set: SetKind::NodePortLocalUdp,
        table: Table::Nat,
        chain: KUBE_NODE_PORT,
        target: "RETURN",
        match_type: "dst",
        proto: Some(Protocol::Udp),
    },
    SetRule {
        set: SetKind::NodePortUdp,
        table: Table::Nat,
        chain: KUBE_NODE_PORT,
        target: KUBE_MARK_MASQ,
        match_type: "dst",
        proto: Some(Protocol::Udp),
    },
    SetRule {
        set: SetKind::NodePortLocalSctp,
        table: Table::Nat,
        chain: KUBE_NODE_PORT,
        target: "RETURN",
        match_type: "dst,dst",
        proto: Some(Protocol::Sctp),
    },
    SetRule {
        set: SetKind::NodePortSctp,
        table: Table::Nat,
        chain: KUBE_NODE_PORT,
        target: KUBE_MARK_MASQ,
        match_type: "dst,dst",
        proto: Some(Protocol::Sctp),
    },
    SetRule {
        set: SetKind::LoadBalancerFw,
        table: Table::Filter,
        chain: KUBE_PROXY_FIREWALL,
        target: KUBE_SOURCE_RANGES_FIREWALL,
        match_type: "dst,dst",
        proto: None,
    },
    SetRule {
        set: SetKind::LoadBalancerSourceCidr,
        table: Table::Filter,
        chain: KUBE_SOURCE_RANGES_FIREWALL,
        target: "RETURN",
        match_type: "dst,dst,src",
        proto: None,
    },
    SetRule {
        set: SetKind::LoadBalancerSourceIp,
        table: Table::Filter,
        chain: KUBE_SOURCE_RANGES_FIREWALL,
        target: "RETURN",
        match_type: "dst,dst,src",
        proto: None,
    },
];

/// What the rules depend on.
pub struct RulesInput<'a> {
    pub family: IpFamily,
    /// Kernel set names.
    pub set_names: &'a PerSet<String>,
    /// Whether each set has members.
    pub set_non_empty: PerSet<bool>,
    pub masquerade_all: bool,
    pub local_detector: &'a LocalDetector,
    /// Masquerade mark value (1 << bit).
    pub mark: u32,
    pub random_fully: bool,
    /// The node's own access to LB addresses with source ranges: OUT-FILTER rules.
    pub lb_node_access: &'a [LbNodeAccess],
    /// `--ipvs-etp-local-node-masquerade`: masquerade the node's own connections to the LB and external
    /// IPs of `externalTrafficPolicy: Local` Services.
    pub etp_local_node_masquerade: bool,
}

impl RulesInput<'_> {
    fn name(&self, k: SetKind) -> &str {
        &self.set_names[k]
    }
    fn has(&self, k: SetKind) -> bool {
        self.set_non_empty[k]
    }
}

/// IANA protocol number, as iptables-save prints `--vproto`.
fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

/// `! -s <cidr>` / `! -i <iface>` for the local detector, in the position iptables-save prints it
/// (right after the chain); `None` when no detector applies to this family.
fn if_not_local(detector: &LocalDetector, family: IpFamily) -> Option<String> {
    match detector {
        LocalDetector::None => None,
        LocalDetector::Cidrs(cidrs) => cidrs
            .iter()
            .find(|c| IpFamily::of_net(c) == family)
            .map(|c| format!("! -s {}", c.trunc())),
        LocalDetector::BridgeInterface(i) if !i.is_empty() => Some(format!("! -i {i}")),
        LocalDetector::InterfaceNamePrefix(p) if !p.is_empty() => Some(format!("! -i {p}+")),
        _ => None,
    }
}

/// The full restore payload (nat table then filter table, as upstream writes it).
pub fn payload(inp: &RulesInput<'_>) -> String {
    let mut nat = String::with_capacity(4096);
    let mut filter = String::with_capacity(4096);
    let mark = format!("{:#x}", inp.mark);

    declare("nat", &NAT_CHAINS, &mut nat);
    declare("filter", &FILTER_CHAINS, &mut filter);
    let lo = match inp.family {
        IpFamily::V4 => "127.0.0.0/8",
        IpFamily::V6 => "::1/128",
    };
    let _ = writeln!(nat, "-A {KUBE_SERVICES} -s {lo} -j RETURN");
    if inp.etp_local_node_masquerade && inp.has(SetKind::LoadBalancerLocal) {
        // Ahead of the chain's RETURN for the LB-local set (written by set_rules).
        let _ = writeln!(
            nat,
            "-A {KUBE_LOAD_BALANCER} -m addrtype --src-type LOCAL -j {KUBE_MARK_MASQ}"
        );
    }
    set_rules(inp, &mut nat, &mut filter);
    cluster_ip_masquerade(inp, &mut nat);
    external_ip_rules(inp, &mut nat);

    let _ = writeln!(
        nat,
        "-A {KUBE_SERVICES} -m addrtype --dst-type LOCAL -j {KUBE_NODE_PORT}"
    );
    let _ = writeln!(nat, "-A {KUBE_LOAD_BALANCER} -j {KUBE_MARK_MASQ}");
    let _ = writeln!(filter, "-A {KUBE_SOURCE_RANGES_FIREWALL} -j DROP");
    out_filter(inp.lb_node_access, &mut filter);
    for kind in [SetKind::ClusterIp, SetKind::LoadBalancer] {
        if inp.has(kind) {
            let _ = writeln!(
                nat,
                "-A {KUBE_SERVICES} -m set --match-set {} dst,dst -j ACCEPT",
                inp.name(kind)
            );
        }
    }
    filter_rules(inp, &mark, &mut filter);
    masquerade_rules(&mark, inp.random_fully, &mut nat);

    nat.push_str("COMMIT\n");
    filter.push_str("COMMIT\n");
    nat.push_str(&filter);
    nat
}

/// `*table` and the declaration of each of our chains in it.
fn declare(table: &str, chains: &[&str], out: &mut String) {
    let _ = writeln!(out, "*{table}");
    for c in chains {
        let _ = writeln!(out, ":{c} - [0:0]");
    }
}

/// The rules of [`SET_RULES`] whose set has members, each into its table.
fn set_rules(inp: &RulesInput<'_>, nat: &mut String, filter: &mut String) {
    for SetRule {
        set: kind,
        table,
        chain,
        target,
        match_type,
        proto,
    } in SET_RULES
    {
        if !inp.has(kind) {
            continue;
        }
        let out = if table == Table::Nat {
            &mut *nat
        } else {
            &mut *filter
        };
        let _ = write!(out, "-A {chain} ");
        if let Some(p) = proto {
            let _ = write!(out, "-p {} ", p.as_lower());
        }
        let _ = writeln!(
            out,
            "-m comment --comment \"{}\" -m set --match-set {} {match_type} -j {target}",
            kind.comment(),
            inp.name(kind)
        );
    }
}

/// The ClusterIP masquerade rule: every packet with masqueradeAll, else those from outside the local
/// detector's range, else (no detector) by `src,dst` match.
fn cluster_ip_masquerade(inp: &RulesInput<'_>, nat: &mut String) {
    if !inp.has(SetKind::ClusterIp) {
        return;
    }
    let set = inp.name(SetKind::ClusterIp);
    let comment = SetKind::ClusterIp.comment();
    let detector = if inp.masquerade_all {
        None
    } else {
        if_not_local(inp.local_detector, inp.family)
    };
    if inp.masquerade_all {
        let _ = writeln!(
            nat,
            "-A {KUBE_SERVICES} -m comment --comment \"{comment}\" -m set --match-set {set} dst,dst -j {KUBE_MARK_MASQ}"
        );
    } else if let Some(not_local) = detector {
        let _ = writeln!(
            nat,
            "-A {KUBE_SERVICES} {not_local} -m comment --comment \"{comment}\" -m set --match-set {set} dst,dst -j {KUBE_MARK_MASQ}"
        );
    } else {
        let _ = writeln!(
            nat,
            "-A {KUBE_SERVICES} -m comment --comment \"{comment}\" -m set --match-set {set} src,dst -j {KUBE_MARK_MASQ}"
        );
    }
}

/// ExternalIP rules: masquerade (cluster policy only), then accept traffic not from a local bridge and
/// traffic to a local address.
fn external_ip_rules(inp: &RulesInput<'_>, nat: &mut String) {
    for (kind, masq) in [
        (SetKind::ExternalIp, true),
        (SetKind::ExternalIpLocal, false),
    ] {
        if !inp.has(kind) {
            continue;
        }
        let prefix = format!(
            "-A {KUBE_SERVICES} -m comment --comment \"{}\" -m set --match-set {} dst,dst",
            kind.comment(),
            inp.name(kind)
        );
        if masq {
            let _ = writeln!(nat, "{prefix} -j {KUBE_MARK_MASQ}");
        } else if inp.etp_local_node_masquerade {
            let _ = writeln!(
                nat,
                "{prefix} -m addrtype --src-type LOCAL -j {KUBE_MARK_MASQ}"
            );
        }
        let _ = writeln!(
            nat,
            "{prefix} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT"
        );
        let _ = writeln!(nat, "{prefix} -m addrtype --dst-type LOCAL -j ACCEPT");
    }
}

/// The node's own traffic to one LB address and port whose Service has `loadBalancerSourceRanges`
/// (KUBE-IPVS-OUT-FILTER: locally generated connections, matched after IPVS chose a real server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbNodeAccess {
    pub lb: IpAddr,
    pub proto: Protocol,
    pub port: u16,
    /// A range covers the node IP: connections the node makes from the LB address may pass.
    pub node_allowed: bool,
    /// With `--ipvs-lb-source-ranges-for-node`: the ranges every other connection of the node is checked
    /// against. Empty: upstream's rule only, a drop of the LB-sourced ones (when `node_allowed` is false).
    pub ranges: Box<[IpNet]>,
}

/// The OUT-FILTER rules of the node's own access to LB addresses.
///
/// Upstream writes `-s <ip> -m ipvs --vaddr <ip> --vproto <name> --vport <port> -j DROP` when no range
/// covers the node; the rules are written here the way iptables-save prints them back (host prefix on
/// -s, numeric protocol first). With ranges (our option), the LB-sourced connections are decided first
/// (as upstream decides them), then a connection from any source in a range returns, and the rest drop.
fn out_filter(access: &[LbNodeAccess], filter: &mut String) {
    for a in access {
        let host = if a.lb.is_ipv4() { 32 } else { 128 };
        let vs = format!(
            "-m ipvs --vproto {} --vaddr {} --vport {}",
            proto_number(a.proto),
            a.lb,
            a.port
        );
        let own = if a.node_allowed { "RETURN" } else { "DROP" };
        let _ = writeln!(
            filter,
            "-A {KUBE_IPVS_OUT_FILTER} -s {}/{host} {vs} -j {own}",
            a.lb
        );
        if a.ranges.is_empty() {
            continue;
        }
        for r in a.ranges.iter() {
            let _ = writeln!(filter, "-A {KUBE_IPVS_OUT_FILTER} -s {r} {vs} -j RETURN");
        }
        let _ = writeln!(filter, "-A {KUBE_IPVS_OUT_FILTER} {vs} -j DROP");
    }
}

/// Forwarding accepts, the health-check node port accept, and the IPVS access filter.
fn filter_rules(inp: &RulesInput<'_>, mark: &str, filter: &mut String) {
    let _ = writeln!(
        filter,
        "-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT"
    );
    let _ = writeln!(
        filter,
        "-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    );
    let _ = writeln!(
        filter,
        "-A {KUBE_NODE_PORT} -m comment --comment \"{}\" -m set --match-set {} dst -j ACCEPT",
        SetKind::HealthCheckNodePort.comment(),
        inp.name(SetKind::HealthCheckNodePort)
    );
    for (kind, match_type) in [
        (SetKind::LoadBalancer, "dst,dst"),
        (SetKind::ClusterIp, "dst,dst"),
        (SetKind::ExternalIp, "dst,dst"),
        (SetKind::ExternalIpLocal, "dst,dst"),
        (SetKind::HealthCheckNodePort, "dst"),
    ] {
        let _ = writeln!(
            filter,
            "-A {KUBE_IPVS_FILTER} -m set --match-set {} {match_type} -j RETURN",
            inp.name(kind)
        );
    }
    let reject = match inp.family {
        IpFamily::V4 => "icmp-port-unreachable",
        IpFamily::V6 => "icmp6-port-unreachable",
    };
    let _ = writeln!(
        filter,
        "-A {KUBE_IPVS_FILTER} -m conntrack --ctstate NEW -m set --match-set {} dst -j REJECT --reject-with {reject}",
        inp.name(SetKind::IpvsIps)
    );
}

/// KUBE-POSTROUTING (masquerade marked packets, clearing the mark) and KUBE-MARK-MASQ.
fn masquerade_rules(mark: &str, random_fully: bool, nat: &mut String) {
    let _ = writeln!(
        nat,
        "-A {KUBE_POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN"
    );
    let _ = writeln!(nat, "-A {KUBE_POSTROUTING} -j MARK --xor-mark {mark}");
    let _ = write!(
        nat,
        "-A {KUBE_POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE"
    );
    nat.push_str(if random_fully {
        " --random-fully\n"
    } else {
        "\n"
    });
    let _ = writeln!(nat, "-A {KUBE_MARK_MASQ} -j MARK --or-mark {mark}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::IpNet;

    fn names(family: IpFamily) -> PerSet<String> {
        PerSet::from_fn(|k| k.name(family))
    }

    fn input<'a>(names: &'a PerSet<String>, det: &'a LocalDetector) -> RulesInput<'a> {
        let mut non_empty = PerSet::default();
        non_empty[SetKind::ClusterIp] = true;
        RulesInput {
            family: IpFamily::V4,
            set_names: names,
            set_non_empty: non_empty,
            masquerade_all: false,
            local_detector: det,
            mark: 1 << 14,
            random_fully: false,
            lb_node_access: &[],
            etp_local_node_masquerade: false,
        }
    }

    fn masq_rule(p: &str) -> &str {
        p.lines()
            .find(|l| l.contains("KUBE-CLUSTER-IP") && l.ends_with("-j KUBE-MARK-MASQ"))
            .unwrap()
    }

    #[test]
    fn local_detector_variants() {
        let n = names(IpFamily::V4);
        let none = LocalDetector::None;
        assert!(masq_rule(&payload(&input(&n, &none))).contains(" src,dst -j"));
        let cidr = LocalDetector::Cidrs(vec![
            "fd00::/64".parse::<IpNet>().unwrap(),
            "10.244.0.0/16".parse().unwrap(),
        ]);
        assert!(
            masq_rule(&payload(&input(&n, &cidr)))
                .starts_with("-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment")
        );
        let br = LocalDetector::BridgeInterface("cbr0".into());
        assert!(masq_rule(&payload(&input(&n, &br))).starts_with("-A KUBE-SERVICES ! -i cbr0 -m"));
        let pre = LocalDetector::InterfaceNamePrefix("veth".into());
        assert!(
            masq_rule(&payload(&input(&n, &pre))).starts_with("-A KUBE-SERVICES ! -i veth+ -m")
        );
        let mut all = input(&n, &cidr);
        all.masquerade_all = true;
        let p = payload(&all);
        let r = masq_rule(&p);
        assert!(r.starts_with("-A KUBE-SERVICES -m comment") && r.contains(" dst,dst -j"));
    }

    #[test]
    fn mark_and_random_fully() {
        let n = names(IpFamily::V4);
        let d = LocalDetector::None;
        let mut i = input(&n, &d);
        i.mark = 1 << 3;
        i.random_fully = true;
        let p = payload(&i);
        assert!(p.contains("-A KUBE-MARK-MASQ -j MARK --or-mark 0x8\n"));
        assert!(p.contains("-A KUBE-POSTROUTING -m mark ! --mark 0x8/0x8 -j RETURN\n"));
        assert!(p.contains("-j MASQUERADE --random-fully\n"));
        i.random_fully = false;
        assert!(!payload(&i).contains("random-fully"));
    }
}
