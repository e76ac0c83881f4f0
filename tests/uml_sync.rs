//! The reconciler with the real backends in a real kernel (UML), against upstream's small reference scenario
//! (/work/shared/reference/small-scenario): same IPVS table, ipsets, iptables/ip6tables rules and kube-ipvs0
//! addresses; a second sync changes nothing; foreign objects survive; `--cleanup` leaves nothing of ours.
mod common;

use common::netns::{Pod, python_http_pod};
use common::uml::sh;
use kube_proxy_rs::cluster::model::{IpFamily, Protocol};
use kube_proxy_rs::kernel::conntrack::netlink::NetlinkConntrack;
use kube_proxy_rs::kernel::conntrack::{Conntrack, ConntrackFlow};
use kube_proxy_rs::kernel::ipset::netlink::NetlinkIpSets;
use kube_proxy_rs::kernel::ipset::{IpSetSpec, IpSetType};
use kube_proxy_rs::kernel::iptables::cli::{Backend, IptablesCli};
use kube_proxy_rs::kernel::iptables::fingerprint;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{IpvsDestination, IpvsService, IpvsServiceKey};
use kube_proxy_rs::kernel::link::DUMMY_DEVICE;
use kube_proxy_rs::kernel::link::rtnetlink::RtnetlinkLinks;
use kube_proxy_rs::proxier::cleanup::{JUMPS, cleanup_leftovers};
use kube_proxy_rs::proxier::desired::{DesiredIpSet, DesiredState, DesiredVirtualServer, JumpRule};
use kube_proxy_rs::proxier::plan::PlanConfig;
use kube_proxy_rs::proxier::testkit::{Applier, Log, Rec};
use kube_proxy_rs::proxier::{
    Backends, ConntrackHints, FailureKind, FamilyInput, FamilySnapshot, Proxier, SyncInput,
    SyncReport,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The committed copy of ../shared/reference/small-scenario (identical files).
const REF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/planner_data/small-scenario"
);
const NODE: &str = "10.0.0.10";

fn reference(file: &str) -> String {
    std::fs::read_to_string(format!("{REF}/{file}")).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn backends(log: &Arc<Mutex<Log>>) -> Backends {
    let rec = |inner| Rec {
        inner,
        log: log.clone(),
    };
    Backends {
        ipvs: Box::new(Rec {
            inner: NetlinkIpvs::new().unwrap(),
            log: log.clone(),
        }),
        ipsets: Box::new(Rec {
            inner: NetlinkIpSets::new().unwrap(),
            log: log.clone(),
        }),
        iptables: Box::new(Rec {
            // The guest's iptables is legacy (tests/common/uml.rs); named so, the backend fingerprints.
            inner: IptablesCli::with_backend(Backend::Legacy),
            log: log.clone(),
        }),
        links: Box::new(Rec {
            inner: RtnetlinkLinks::new().unwrap(),
            log: log.clone(),
        }),
        conntrack: Box::new(rec(NetlinkConntrack::new().unwrap())),
    }
}

/// The restore payload upstream's rules amount to: the reference dump without built-in chains and jumps.
fn payload_from(save: &str) -> String {
    const BUILTIN: &[&str] = &["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"];
    save.lines()
        .filter(|l| {
            let chain = l
                .strip_prefix(':')
                .or_else(|| l.strip_prefix("-A "))
                .and_then(|r| r.split_whitespace().next());
            !chain.is_some_and(|c| BUILTIN.contains(&c))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Sets and members of one family from the reference `ipset save`.
fn ipsets_from(save: &str, family: IpFamily) -> BTreeMap<String, DesiredIpSet> {
    let mut sets: BTreeMap<String, DesiredIpSet> = BTreeMap::new();
    for l in save.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let v6 = w.get(1).is_some_and(|n| n.starts_with("KUBE-6-"));
        if v6 != (family == IpFamily::V6) {
            continue;
        }
        match w.as_slice() {
            ["create", name, t, ..] => {
                let set_type = match *t {
                    "hash:ip" => IpSetType::HashIp,
                    "hash:ip,port" => IpSetType::HashIpPort,
                    "hash:ip,port,ip" => IpSetType::HashIpPortIp,
                    "hash:ip,port,net" => IpSetType::HashIpPortNet,
                    "bitmap:port" => IpSetType::BitmapPort,
                    other => panic!("type {other}"),
                };
                sets.insert(
                    name.to_string(),
                    DesiredIpSet::new(IpSetSpec::new(*name, set_type, family), BTreeSet::new()),
                );
            }
            ["add", name, entry] => {
                sets.get_mut(*name)
                    .unwrap()
                    .entries
                    .insert(entry.to_string());
            }
            _ => {}
        }
    }
    sets
}

fn vs(addr: &str, port: u16, eps: &[(&str, u16)]) -> (IpvsServiceKey, Arc<DesiredVirtualServer>) {
    let key = IpvsServiceKey {
        addr: ip(addr),
        port,
        protocol: Protocol::Tcp,
    };
    let service = IpvsService {
        key,
        scheduler: "rr".into(),
        flags: 0,
        timeout: 0,
        netmask: 0xffff_ffff,
    };
    let destinations = eps
        .iter()
        .map(|(a, p)| ((ip(a), *p), IpvsDestination::masq(ip(a), *p, 1)))
        .collect();
    (
        key,
        Arc::new(DesiredVirtualServer {
            service,
            destinations,
        }),
    )
}

fn jumps() -> Vec<JumpRule> {
    JUMPS
        .iter()
        .map(|(table, chain, target, comment)| JumpRule {
            table,
            chain,
            target,
            comment,
        })
        .collect()
}

/// Hand-built plan of the reference scenario (the planner's output for objects.yaml).
fn desired(family: IpFamily) -> DesiredState {
    let (virtual_servers, bound, save) = match family {
        IpFamily::V4 => {
            let eps = [("10.244.0.11", 8080), ("10.244.0.12", 8080)];
            let alt = [("10.244.0.11", 8081), ("10.244.0.12", 8081)];
            (
                BTreeMap::from([
                    vs(NODE, 30080, &eps),
                    vs("10.96.0.1", 443, &[(NODE, 6443)]),
                    vs("10.96.100.10", 80, &eps),
                    vs("10.96.100.10", 81, &alt),
                    vs("10.96.100.20", 80, &eps),
                ]),
                ["10.96.0.1", "10.96.100.10", "10.96.100.20"].map(ip).into(),
                reference("iptables-save.txt"),
            )
        }
        IpFamily::V6 => (
            BTreeMap::new(),
            BTreeSet::new(),
            reference("ip6tables-save.txt"),
        ),
    };
    DesiredState {
        family,
        decisions: Default::default(),
        shared: Default::default(),
        virtual_servers,
        ipsets: ipsets_from(&reference("ipset-save.txt"), family),
        iptables_payload: payload_from(&save),
        jumps: jumps(),
        bound_addresses: bound,
        arp_quiet: BTreeSet::new(),
        health_checks: vec![],
        no_local_endpoints: BTreeMap::new(),
    }
}

fn config(family: IpFamily) -> PlanConfig {
    PlanConfig {
        scheduler: kube_proxy_rs::scheduler::Scheduler::Rr,
        ..PlanConfig::new(family)
    }
}

/// objects.yaml (plus the apiserver's default/kubernetes service) as the trackers would hand it over.
fn scenario_input(full: bool) -> SyncInput {
    use common::planner::{small_scenario, small_scenario_cfg, small_scenario_node};
    let (services, endpoints) = small_scenario();
    let node = small_scenario_node();
    let family = |family| {
        let config = small_scenario_cfg(family);
        FamilySnapshot {
            services: services.clone().into(),
            endpoints: endpoints.clone().into(),
            node: node.clone(),
            config,
        }
    };
    SyncInput {
        families: vec![family(IpFamily::V4), family(IpFamily::V6)],
        full,
        conntrack: ConntrackHints::default(),
        changed: None,
        dummy_addresses: None,
    }
}

/// A reconciler that applies hand-built plans (no planner).
fn direct_proxier(log: &Arc<Mutex<Log>>) -> Applier {
    Applier::new(backends(log))
}

/// Applies a v4 plan (event-driven, no NodePort IPs) and asserts the sync had no failure.
fn apply(p: &mut Applier, d: &DesiredState) -> SyncReport {
    let c4 = config(IpFamily::V4);
    let r = p.apply(
        &[FamilyInput {
            desired: d,
            delta: None,
            config: &c4,
            node_port_ips: &[],
        }],
        false,
        &ConntrackHints::default(),
    );
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    r
}

fn sync(p: &mut Applier, v4: &DesiredState, v6: &DesiredState, full: bool) -> SyncReport {
    let (c4, c6) = (config(IpFamily::V4), config(IpFamily::V6));
    let nips = [ip(NODE)];
    let r = p.apply(
        &[
            FamilyInput {
                desired: v4,
                delta: None,
                config: &c4,
                node_port_ips: &nips,
            },
            FamilyInput {
                desired: v6,
                delta: None,
                config: &c6,
                node_port_ips: &[],
            },
        ],
        full,
        &ConntrackHints::default(),
    );
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    r
}

fn sorted(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn ipset_save() -> Vec<String> {
    let text = sh("ipset save");
    let cleaned: String = text
        .lines()
        .map(|l| {
            let mut words: Vec<&str> = Vec::new();
            let mut it = l.split_whitespace();
            while let Some(w) = it.next() {
                if w == "bucketsize" || w == "initval" {
                    it.next();
                } else {
                    words.push(w);
                }
            }
            words.join(" ") + "\n"
        })
        .collect();
    sorted(&cleaned)
}

/// Rules per table (`*filter` ... `COMMIT`): the order of tables in `iptables-save` follows module load
/// order, which differs between the reference machine and the guest.
fn by_table(lines: impl Iterator<Item = String>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut table = String::new();
    for l in lines {
        if let Some(t) = l.strip_prefix('*') {
            table = t.to_string();
        }
        out.entry(table.clone()).or_default().push(l);
    }
    out
}

fn rules_save(tool: &str) -> BTreeMap<String, Vec<String>> {
    by_table(
        sh(&format!("{tool}-save"))
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                // Blank packet counters as the reference does.
                match l.rfind(" [") {
                    Some(i) if l.starts_with(':') => format!("{} [0:0]", &l[..i]),
                    _ => l.to_string(),
                }
            }),
    )
}

fn reference_rules(file: &str) -> BTreeMap<String, Vec<String>> {
    by_table(
        reference(file)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from),
    )
}

fn dummy_addrs() -> Vec<String> {
    let out = sh(&format!("ip -o addr show dev {DUMMY_DEVICE}"));
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|t| *t == "inet" || *t == "inet6")?;
            w.next().map(String::from)
        })
        .collect();
    v.sort();
    v
}

/// Everything the reference compares, as text.
type Rules = BTreeMap<String, Vec<String>>;

fn kernel_state() -> (Vec<String>, Vec<String>, Rules, Rules, Vec<String>) {
    (
        sorted(&sh("ipvsadm -Sn")),
        ipset_save(),
        rules_save("iptables"),
        rules_save("ip6tables"),
        dummy_addrs(),
    )
}

fn calls(log: &Arc<Mutex<Log>>) -> Vec<String> {
    log.lock().unwrap().calls.clone()
}

uml_test!(small_scenario_matches_upstream_and_is_stable, {
    // The whole pipeline: cluster snapshot -> planner -> reconciler -> real kernel.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = Proxier::new(backends(&log));

    // First sync: the reference state, rules in place before the first virtual server.
    let r = p.sync_proxy_rules(scenario_input(false));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert!(r.full);
    assert_eq!(r.ipvs_services.added, 5);
    let c = calls(&log);
    let first = |p: &str| c.iter().position(|l| l.starts_with(p)).unwrap();
    assert!(first("W iptables.restore") < first("W ipvs.add_service"));
    // The jumps went in with the payload: one restore per family, no -C / -I process per jump.
    assert!(
        !c.iter().any(|l| l.starts_with("W iptables.insert_rule")),
        "{c:#?}"
    );
    assert_eq!(r.iptables_restores, 2, "{r:#?}");
    assert_eq!(
        r.jumps_inserted,
        2 * desired(IpFamily::V4).jumps.len(),
        "{r:#?}"
    );
    // A fresh node: the tables' blobs show none of our chains, so no iptables-save ran (the kernel is
    // the reference all the same, below).
    assert!(!c.iter().any(|l| l.contains("iptables.save")), "{c:#?}");

    let (ipvs, sets, ipt, ip6t, addrs) = kernel_state();
    assert_eq!(ipvs, sorted(&reference("ipvsadm-Sn.txt")));
    assert_eq!(sets, sorted(&reference("ipset-save.txt")));
    assert_eq!(ipt, reference_rules("iptables-save.txt"));
    assert_eq!(ip6t, reference_rules("ip6tables-save.txt"));
    assert_eq!(addrs, sorted(&reference("kube-ipvs0-addresses.txt")));

    // Twice more (event-driven, then periodic): nothing changes. The periodic one reads the tables
    // back from the real iptables-save and, finding the payload and jumps in place, writes nothing.
    let r = p.sync_proxy_rules(scenario_input(false));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert_eq!(r.writes(), 0, "{r:#?}");
    let r = p.sync_proxy_rules(scenario_input(true));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert_eq!(r.writes(), 0, "nothing to repair: {r:#?}");
    let programmed = (ipvs, sets, ipt, ip6t, addrs);
    assert_eq!(kernel_state(), programmed);
    // That save found the tables holding the rules: while their fingerprint stays, the next periodic
    // sync starts no iptables-save and dumps no virtual server (the real servers' quick view matches).
    let before = calls(&log).len();
    let r = p.sync_proxy_rules(scenario_input(true));
    assert_eq!(r.writes(), 0, "{r:#?}");
    let c = calls(&log)[before..].to_vec();
    assert!(!c.iter().any(|l| l.contains("iptables.save")), "{c:#?}");
    assert!(!c.iter().any(|l| l.contains("ipvs.destinations")), "{c:#?}");
    assert!(
        c.iter().any(|l| l.contains("ipvs.destination_view")),
        "{c:#?}"
    );

    // Drift in v4 only: a jump deleted and a foreign rule in one of our chains. The next periodic sync
    // restores that family once (with the jump), and the kernel is the reference again.
    sh(
        "iptables -t nat -D OUTPUT -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
    );
    sh("iptables -t nat -A KUBE-SERVICES -s 10.9.9.9/32 -j RETURN");
    let r = p.sync_proxy_rules(scenario_input(true));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert_eq!(r.iptables_restores, 1, "{r:#?}");
    assert_eq!(r.jumps_inserted, 1, "{r:#?}");
    assert_eq!(kernel_state(), programmed);

    // The hand-built plan of the same scenario (used by the other tests) is what the planner produced.
    assert_eq!(
        p.desired(IpFamily::V4).unwrap().virtual_servers,
        desired(IpFamily::V4).virtual_servers
    );
});

/// `iptables -S <chain>` of the filter table, one rule a line.
fn filter_rules(chain: &str) -> Vec<String> {
    sh(&format!("iptables -S {chain}"))
        .lines()
        .map(String::from)
        .collect()
}

/// `iptables -D` of our jump from `chain` to `target` (its comment as in [`JUMPS`]).
fn delete_jump(chain: &str, target: &str) {
    let (_, _, _, comment) = JUMPS
        .iter()
        .find(|(t, c, to, _)| *t == "filter" && *c == chain && *to == target)
        .unwrap();
    sh(&format!(
        "iptables -D {chain} -m comment --comment '{comment}' -j {target}"
    ));
}

uml_test!(deleted_jumps_come_back_in_their_place, {
    // A foreign rule below our jumps (there before us) and one above them (inserted after us).
    sh("iptables -A INPUT -s 10.9.9.1/32 -j ACCEPT");
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = direct_proxier(&log);
    let (v4, v6) = (desired(IpFamily::V4), desired(IpFamily::V6));
    sync(&mut p, &v4, &v6, false);
    sh("iptables -I INPUT 1 -s 10.9.9.2/32 -j ACCEPT");
    let (input, forward) = (filter_rules("INPUT"), filter_rules("FORWARD"));
    // A fresh start: our three INPUT jumps in a row below the later foreign rule, above the older one.
    let ours = |r: &[String]| -> Vec<String> {
        r.iter()
            .filter_map(|l| Some(l.rsplit_once(" -j ")?.1.to_string()))
            .collect()
    };
    assert_eq!(
        ours(&input),
        [
            "ACCEPT",
            "KUBE-IPVS-FILTER",
            "KUBE-PROXY-FIREWALL",
            "KUBE-NODE-PORT",
            "ACCEPT"
        ],
        "{input:#?}"
    );
    assert_eq!(
        ours(&forward),
        ["KUBE-PROXY-FIREWALL", "KUBE-FORWARD"],
        "{forward:#?}"
    );

    // The middle INPUT jump and the top FORWARD one deleted. This proxier restored them before, so
    // `-C` decides and `-I <position>` puts each back where it was.
    delete_jump("INPUT", "KUBE-PROXY-FIREWALL");
    delete_jump("FORWARD", "KUBE-PROXY-FIREWALL");
    let r = sync(&mut p, &v4, &v6, true);
    assert_eq!((r.jumps_inserted, r.iptables_restores), (2, 0), "{r:#?}");
    let inserts = |log: &Arc<Mutex<Log>>| {
        calls(log)
            .iter()
            .filter(|l| l.starts_with("W iptables.insert_rule"))
            .count()
    };
    assert_eq!(inserts(&log), 2, "{:#?}", calls(&log));
    assert_eq!(filter_rules("INPUT"), input);
    assert_eq!(filter_rules("FORWARD"), forward);

    // After a restart (nothing restored yet by this process) the missing jumps go in with the payload's
    // restore, as `-I <chain> <position>` lines: the top and bottom INPUT jumps and the bottom FORWARD one.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = direct_proxier(&log);
    sync(&mut p, &v4, &v6, false);
    delete_jump("INPUT", "KUBE-IPVS-FILTER");
    delete_jump("INPUT", "KUBE-NODE-PORT");
    delete_jump("FORWARD", "KUBE-FORWARD");
    let r = sync(&mut p, &v4, &v6, true);
    assert_eq!((r.jumps_inserted, r.iptables_restores), (3, 1), "{r:#?}");
    assert_eq!(inserts(&log), 0, "{:#?}", calls(&log));
    assert_eq!(filter_rules("INPUT"), input);
    assert_eq!(filter_rules("FORWARD"), forward);
    let r = sync(&mut p, &v4, &v6, true);
    assert_eq!(r.writes(), 0, "{r:#?}");
});

uml_test!(foreign_objects_survive_and_cleanup_removes_ours, {
    let log = Arc::new(Mutex::new(Log::default()));
    // Another tool's objects: keepalived-style VIP and virtual server, a set, a chain with a jump.
    sh("ip link add foreign0 type dummy && ip addr add 192.168.1.100/32 dev foreign0");
    sh("ipvsadm -A -t 192.168.1.100:80 -s wlc && ipvsadm -a -t 192.168.1.100:80 -r 10.1.1.1:80 -m");
    sh(&format!("ipvsadm -A -t {NODE}:8443 -s rr"));
    sh("ipset create foreign-set hash:ip && ipset add foreign-set 1.2.3.4");
    sh("iptables -N FOREIGN && iptables -A FOREIGN -j RETURN && iptables -I INPUT -j FOREIGN");
    let mut p = direct_proxier(&log);
    let (v4, v6) = (desired(IpFamily::V4), desired(IpFamily::V6));
    sync(&mut p, &v4, &v6, false);
    // web-np goes away: its ClusterIP and NodePort services, address and set members go with it.
    let mut fewer = v4.clone();
    fewer
        .virtual_servers
        .retain(|k, _| k.addr != ip("10.96.100.20") && k.port != 30080);
    fewer.bound_addresses.remove(&ip("10.96.100.20"));
    for set in fewer.ipsets.values_mut() {
        set.entries
            .retain(|e| !e.starts_with("10.96.100.20") && e != "30080");
    }
    let r = sync(&mut p, &fewer, &v6, false);
    assert_eq!(r.ipvs_services.deleted, 2, "{r:#?}");
    let r = sync(&mut p, &fewer, &v6, true);
    assert_eq!(r.ipvs_services.deleted, 0, "{r:#?}");

    let ipvs = sh("ipvsadm -Sn");
    assert!(ipvs.contains("-A -t 192.168.1.100:80 -s wlc"), "{ipvs}");
    assert!(
        ipvs.contains("-a -t 192.168.1.100:80 -r 10.1.1.1:80 -m -w 1"),
        "{ipvs}"
    );
    assert!(ipvs.contains(&format!("-A -t {NODE}:8443 -s rr")), "{ipvs}");
    assert!(!ipvs.contains("10.96.100.20"), "{ipvs}");
    assert!(!ipvs.contains(":30080"), "{ipvs}");
    assert!(sh("ip -o addr show dev foreign0").contains("192.168.1.100/32"));
    assert!(!dummy_addrs().contains(&"10.96.100.20/32".to_string()));
    assert!(sh("ipset list -n").contains("foreign-set"));
    assert!(sh("iptables -S INPUT").contains("-A INPUT -j FOREIGN"));

    let mut b = backends(&log);
    let report = cleanup_leftovers(
        b.ipvs.as_mut(),
        b.links.as_mut(),
        b.iptables.as_mut(),
        b.ipsets.as_mut(),
        &[IpFamily::V4, IpFamily::V6],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!report.removed.is_empty());
    for tool in ["iptables-save", "ip6tables-save", "ipset save"] {
        let out = sh(tool);
        assert!(!out.contains("KUBE-"), "{tool}:\n{out}");
    }
    assert!(
        sh("ip -o link show")
            .lines()
            .all(|l| !l.contains(DUMMY_DEVICE))
    );
    assert!(sh("ipset list -n").contains("foreign-set"));
    assert!(sh("iptables -S").contains("-A FOREIGN -j RETURN"));
    // Cleanup, like upstream's, flushes the whole IPVS table.
    assert_eq!(sh("ipvsadm -Sn").trim(), "");
    // A second cleanup finds nothing and does not fail.
    let again = cleanup_leftovers(
        b.ipvs.as_mut(),
        b.links.as_mut(),
        b.iptables.as_mut(),
        b.ipsets.as_mut(),
        &[IpFamily::V4, IpFamily::V6],
    );
    assert!(again.is_ok(), "{:?}", again.err());
});

/// `ipset save` without the foreign set `name`'s lines.
fn ipset_save_without(name: &str) -> Vec<String> {
    let mut lines = ipset_save();
    lines.retain(|l| l.split_whitespace().nth(1) != Some(name));
    lines
}

uml_test!(full_sync_recreates_our_sets_of_the_wrong_type, {
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = direct_proxier(&log);
    let (v4, v6) = (desired(IpFamily::V4), desired(IpFamily::V6));
    sync(&mut p, &v4, &v6, false);
    let reference_sets = ipset_save();
    assert_eq!(reference_sets, sorted(&reference("ipset-save.txt")));
    // Another tool re-creates two of our unreferenced sets with another type / family, and has a set of
    // its own whose type none of ours has.
    sh("ipset create foreign-ports bitmap:port range 0-1000 && ipset add foreign-ports 80");
    sh("ipset destroy KUBE-NODE-PORT-LOCAL-SCTP-HASH \
        && ipset create KUBE-NODE-PORT-LOCAL-SCTP-HASH bitmap:port range 0-65535 \
        && ipset add KUBE-NODE-PORT-LOCAL-SCTP-HASH 99");
    sh("ipset destroy KUBE-6-LOAD-BALANCER-FW \
        && ipset create KUBE-6-LOAD-BALANCER-FW hash:ip,port family inet");
    let foreign = sh("ipset save foreign-ports");
    let r = sync(&mut p, &v4, &v6, false);
    assert_eq!(r.writes(), 0, "event-driven syncs do not look: {r:#?}");
    let r = sync(&mut p, &v4, &v6, true);
    assert_eq!(r.ipsets_created, 2, "{r:#?}");
    let terse = sh("ipset list -t KUBE-NODE-PORT-LOCAL-SCTP-HASH");
    assert!(terse.contains("Type: hash:ip,port"), "{terse}");
    let terse = sh("ipset list -t KUBE-6-LOAD-BALANCER-FW");
    assert!(terse.contains("family inet6"), "{terse}");
    assert_eq!(ipset_save_without("foreign-ports"), reference_sets);
    assert_eq!(sh("ipset save foreign-ports"), foreign);
    let r = sync(&mut p, &v4, &v6, true);
    assert_eq!(r.writes(), 0, "repaired: {r:#?}");

    // A wrong-type set in use (a foreign rule matches it) cannot be destroyed: counted, left as is, and
    // repaired by a later sync once it is free.
    sh("ipset destroy KUBE-6-NODE-PORT-LOCAL-UDP \
        && ipset create KUBE-6-NODE-PORT-LOCAL-UDP hash:ip family inet6 \
        && ip6tables -N FOREIGN6 \
        && ip6tables -A FOREIGN6 -m set --match-set KUBE-6-NODE-PORT-LOCAL-UDP src -j RETURN");
    let (c4, c6) = (config(IpFamily::V4), config(IpFamily::V6));
    let inputs = [
        FamilyInput {
            desired: &v4,
            delta: None,
            config: &c4,
            node_port_ips: &[],
        },
        FamilyInput {
            desired: &v6,
            delta: None,
            config: &c6,
            node_port_ips: &[],
        },
    ];
    let r = p.apply(&inputs, true, &ConntrackHints::default());
    assert_eq!(r.failures_of(FailureKind::Ipset), 1, "{r:#?}");
    assert!(r.retry_needed, "{r:#?}");
    let terse = sh("ipset list -t KUBE-6-NODE-PORT-LOCAL-UDP");
    assert!(terse.contains("Type: hash:ip"), "{terse}");
    sh("ip6tables -F FOREIGN6 && ip6tables -X FOREIGN6");
    let r = sync(&mut p, &v4, &v6, false);
    assert!(r.full, "the sync after a failure is full: {r:#?}");
    assert_eq!(r.ipsets_created, 1, "{r:#?}");
    assert_eq!(ipset_save_without("foreign-ports"), reference_sets);
});

/// A minimal plan: TCP 10.96.0.20:80 and UDP 10.96.0.53:53 with the given real servers.
fn graceful_plan(tcp_eps: &[(&str, u16)], udp_eps: &[(&str, u16)]) -> DesiredState {
    let (tk, mut tvs) = vs("10.96.0.20", 80, tcp_eps);
    Arc::make_mut(&mut tvs).service.key = tk;
    let (mut uk, mut uvs) = vs("10.96.0.53", 53, udp_eps);
    uk.protocol = Protocol::Udp;
    Arc::make_mut(&mut uvs).service.key = uk;
    let mut sets = BTreeMap::new();
    sets.insert(
        "KUBE-IPVS-IPS".to_string(),
        DesiredIpSet::new(
            IpSetSpec::new("KUBE-IPVS-IPS", IpSetType::HashIp, IpFamily::V4),
            ["10.96.0.20".to_string(), "10.96.0.53".to_string()].into(),
        ),
    );
    DesiredState {
        family: IpFamily::V4,
        decisions: Default::default(),
        shared: Default::default(),
        virtual_servers: BTreeMap::from([(tk, tvs), (uk, uvs)]),
        ipsets: sets,
        iptables_payload: "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n".into(),
        jumps: vec![],
        bound_addresses: [ip("10.96.0.20"), ip("10.96.0.53")].into(),
        arp_quiet: BTreeSet::new(),
        health_checks: vec![],
        no_local_endpoints: BTreeMap::new(),
    }
}

fn weight_and_conns(listing: &str, rs: &str) -> Option<(u32, u32)> {
    // -> RemoteAddress:Port Forward Weight ActiveConn InActConn
    let row: Vec<&str> = listing
        .lines()
        .find(|l| l.contains(rs))?
        .split_whitespace()
        .collect();
    Some((row[3].parse().ok()?, row[4].parse().ok()?))
}

uml_test!(graceful_termination_with_real_connections, {
    let _pods = [
        python_http_pod("pod1", "10.244.1.2", "10.244.1.1"),
        python_http_pod("pod2", "10.244.2.2", "10.244.2.1"),
    ];
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = direct_proxier(&log);
    // pod3 never answers and gets no connection: it joins after the connections are made.
    let all = [
        ("10.244.1.2", 8080),
        ("10.244.2.2", 8080),
        ("10.244.3.3", 8080),
    ];
    let udp_all = [("10.244.1.2", 53), ("10.244.2.2", 53)];
    apply(&mut p, &graceful_plan(&all[..2], &udp_all));
    // Round robin over two: one held connection each.
    let held: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect("10.96.0.20:80").unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let l = sh("ipvsadm -Ln");
    assert_eq!(weight_and_conns(&l, "10.244.1.2:8080"), Some((1, 1)), "{l}");
    assert_eq!(weight_and_conns(&l, "10.244.2.2:8080"), Some((1, 1)), "{l}");
    apply(&mut p, &graceful_plan(&all, &udp_all));
    assert_eq!(
        weight_and_conns(&sh("ipvsadm -Ln"), "10.244.3.3:8080"),
        Some((1, 0))
    );

    // pod2 and pod3 leave: pod2 (connected) drains at weight 0, pod3 (no connections) and the UDP real
    // server go at once.
    let fewer = graceful_plan(&[("10.244.1.2", 8080)], &[("10.244.1.2", 53)]);
    let r = apply(&mut p, &fewer);
    assert_eq!(r.graceful_queued, 1, "{r:#?}");
    assert_eq!(r.ipvs_destinations.deleted, 2, "{r:#?}");
    let l = sh("ipvsadm -Ln");
    assert_eq!(weight_and_conns(&l, "10.244.2.2:8080"), Some((0, 1)), "{l}");
    assert!(weight_and_conns(&l, "10.244.3.3:8080").is_none(), "{l}");
    assert!(!l.contains("10.244.2.2:53"), "{l}");
    // Still connected: the periodic check keeps it.
    let c = p.check_graceful();
    assert_eq!((c.deleted, c.pending, c.failures), (0, 1, 0));
    assert!(sh("ipvsadm -Ln").contains("10.244.2.2:8080"));
    // New connections avoid the draining server.
    for _ in 0..4 {
        let out = sh("curl -s -m 5 -o /dev/null -w '%{http_code}' http://10.96.0.20:80/");
        assert_eq!(out.trim(), "200");
    }
    let l = sh("ipvsadm -Ln");
    assert_eq!(weight_and_conns(&l, "10.244.2.2:8080"), Some((0, 1)), "{l}");

    // pod2 comes back: weight 1 again, out of the queue.
    let r = apply(&mut p, &graceful_plan(&all[..2], &udp_all));
    assert_eq!(r.graceful_restored, 1, "{r:#?}");
    let l = sh("ipvsadm -Ln");
    assert_eq!(weight_and_conns(&l, "10.244.2.2:8080"), Some((1, 1)), "{l}");
    assert!(p.reconciler().graceful().is_empty());

    // After a restart, a leftover weight-0 real server with connections is adopted into the queue.
    apply(&mut p, &fewer);
    drop(p);
    let mut p2 = direct_proxier(&log);
    let r = apply(&mut p2, &fewer);
    assert!(r.full);
    assert_eq!(r.graceful_queued, 1, "{r:#?}");
    assert_eq!(
        r.writes(),
        0,
        "the rules a previous run wrote are taken over: {r:#?}"
    );
    assert!(p2.reconciler().graceful().contains(
        &IpvsServiceKey {
            addr: ip("10.96.0.20"),
            port: 80,
            protocol: Protocol::Tcp
        },
        ip("10.244.2.2"),
        8080
    ));
    drop(held);
});

/// Pod `name` at `ip` (gateway `gateway`) echoing UDP datagrams on 5353.
fn udp_echo_pod(name: &str, ip: &str, gateway: &str) -> Pod {
    let pod = Pod::create(name, ip, gateway).unwrap_or_else(|e| panic!("pod {name}: {e:#}"));
    pod.serve_udp_echo(5353)
        .unwrap_or_else(|e| panic!("UDP echo in {name}: {e:#}"));
    pod
}

/// Sends one datagram through 10.96.0.53:53 from a new socket until it is answered; returns the socket.
fn udp_exchange() -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 16];
    for _ in 0..50 {
        s.send_to(b"ping", "10.96.0.53:53").unwrap();
        if s.recv_from(&mut buf).is_ok() {
            return s;
        }
    }
    panic!("no UDP answer: {}", sh("ipvsadm -Ln"));
}

uml_test!(stale_udp_conntrack_flows_are_deleted, {
    // IPVS keeps conntrack entries (as prepare_node sets); a conntrack match makes the kernel track.
    sh("sysctl -qw net.ipv4.vs.conntrack=1
        iptables -A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT");
    let _pods = [
        udp_echo_pod("upod1", "10.244.1.2", "10.244.1.1"),
        udp_echo_pod("upod2", "10.244.2.2", "10.244.2.1"),
    ];
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = direct_proxier(&log);
    let both = [("10.244.1.2", 5353), ("10.244.2.2", 5353)];
    apply(&mut p, &graceful_plan(&[], &both));
    // Round robin: one flow to each pod.
    let a = udp_exchange();
    let b = udp_exchange();
    let ports = [
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    ];
    let mut ct = NetlinkConntrack::new().unwrap();
    let ours = |ct: &mut NetlinkConntrack| -> Vec<ConntrackFlow> {
        ct.udp_flows(IpFamily::V4)
            .unwrap()
            .into_iter()
            .filter(|f| f.orig_dport == 53 && ports.contains(&f.orig_sport))
            .collect()
    };
    let before = ours(&mut ct);
    assert_eq!(before.len(), 2, "{before:?}");
    let replies: BTreeSet<IpAddr> = before.iter().map(|f| f.reply_src).collect();
    assert_eq!(replies, [ip("10.244.1.2"), ip("10.244.2.2")].into());

    // upod2 leaves: its real server goes at once (UDP) and so does its flow; upod1's flow stays.
    let r = apply(&mut p, &graceful_plan(&[], &both[..1]));
    assert_eq!(r.conntrack_deleted, 1, "{r:#?}");
    let after = ours(&mut ct);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].reply_src, ip("10.244.1.2"));
    // The service goes: its remaining flow goes too.
    let mut gone = graceful_plan(&[], &[]);
    gone.virtual_servers
        .retain(|k, _| k.protocol == Protocol::Tcp);
    let r = apply(&mut p, &gone);
    assert_eq!(r.conntrack_deleted, 1, "{r:#?}");
    assert!(ours(&mut ct).is_empty());
});

/// The families whose tables a sync read with `iptables-save` (from the call log since `from`).
fn saved_families(log: &Arc<Mutex<Log>>, from: usize) -> BTreeSet<String> {
    calls(log)[from..]
        .iter()
        .filter_map(|l| l.strip_prefix("R iptables.save "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

uml_test!(iptables_save_runs_only_for_rules_the_blobs_do_not_show, {
    // One chain of ours in v4 only (a previous kube-proxy's leftover, or upstream's): the v4 tables'
    // blobs are decoded (no iptables-save), the fresh v6 ones show none of our chains, and the result is
    // the reference all the same.
    sh("iptables -t nat -N KUBE-MARK-MASQ && iptables -t nat -A KUBE-MARK-MASQ -j RETURN");
    sh("iptables -t filter -N FOREIGN && iptables -t filter -A INPUT -s 192.0.2.1/32 -j FOREIGN");
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = Proxier::new(backends(&log));
    let r = p.sync_proxy_rules(scenario_input(false));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert_eq!(r.iptables_restores, 2, "{r:#?}");
    assert_eq!(saved_families(&log, 0), BTreeSet::new());
    let (_, _, mut ipt, ip6t, _) = kernel_state();
    assert_eq!(ip6t, reference_rules("ip6tables-save.txt"));
    // The foreign chain and its jump stay, below our jumps; without them v4 is the reference.
    let filter = ipt.get_mut("filter").unwrap();
    assert!(
        filter.contains(&":FOREIGN - [0:0]".to_string()),
        "{filter:#?}"
    );
    let foreign_jump = "-A INPUT -s 192.0.2.1/32 -j FOREIGN".to_string();
    let ours_last = filter
        .iter()
        .rposition(|l| l.starts_with("-A INPUT -m comment"));
    assert!(
        filter.iter().position(|l| *l == foreign_jump) > ours_last,
        "{filter:#?}"
    );
    filter.retain(|l| *l != foreign_jump && l != ":FOREIGN - [0:0]");
    assert_eq!(ipt, reference_rules("iptables-save.txt"));

    // A restart over the rules it wrote: both families are decoded from their blobs, nothing is written.
    let programmed = kernel_state();
    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = Proxier::new(backends(&log));
    let r = p.sync_proxy_rules(scenario_input(false));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert_eq!((r.iptables_restores, r.jumps_inserted), (0, 0), "{r:#?}");
    assert_eq!(saved_families(&log, 0), BTreeSet::new());
    assert_eq!(kernel_state(), programmed);

    // A rule the decoder does not know (`-m tcp`) in a chain of ours: that family is read with
    // iptables-save, the drift repaired; the next full sync decodes the blobs again.
    sh("iptables -t nat -A KUBE-SERVICES -p tcp --dport 9 -j RETURN");
    let from = calls(&log).len();
    let r = p.sync_proxy_rules(scenario_input(true));
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    assert_eq!(r.iptables_restores, 1, "{r:#?}");
    assert_eq!(
        saved_families(&log, from),
        BTreeSet::from(["V4".to_string()])
    );
    assert_eq!(kernel_state(), programmed);
    let from = calls(&log).len();
    let r = p.sync_proxy_rules(scenario_input(true));
    assert_eq!(r.writes(), 0, "{r:#?}");
    assert_eq!(saved_families(&log, from), BTreeSet::new());
});

/// The kernel's module requests, counted: `/proc/sys/kernel/modprobe` points at a wrapper (in the
/// guest's tmpfs) that logs each one and runs the real modprobe, which fails (the guest's modules are
/// outside `/lib/modules`, as in a harness that loads them with `modprobe -d`). Restored when dropped.
struct ModuleRequests {
    log: std::path::PathBuf,
}

impl ModuleRequests {
    const SYSCTL: &str = "/proc/sys/kernel/modprobe";

    fn install() -> ModuleRequests {
        let dir = std::path::Path::new("/run/kprs-module-requests");
        std::fs::create_dir_all(dir).unwrap();
        let (wrapper, log) = (dir.join("modprobe"), dir.join("log"));
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\nexec /sbin/modprobe \"$@\"\n",
                log.display()
            ),
        )
        .unwrap();
        sh(&format!("chmod 755 {}", wrapper.display()));
        std::fs::write(&log, "").unwrap();
        std::fs::write(Self::SYSCTL, wrapper.display().to_string()).unwrap();
        ModuleRequests { log }
    }

    /// Requests so far (each a `-q -- <module>` line).
    fn all(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap();
        text.lines().map(String::from).collect()
    }

    /// The requests made while `f` ran.
    fn during<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<String>) {
        let before = self.all().len();
        let out = f();
        (out, self.all()[before..].to_vec())
    }
}

impl Drop for ModuleRequests {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::SYSCTL, "/sbin/modprobe");
    }
}

uml_test!(no_op_full_syncs_make_one_module_request_per_ipv4_table, {
    // The condition (issue 23): on this kernel (CONFIG_BPFILTER_UMH=m, bpfilter not loaded) every IPv4
    // x_tables call first makes the kernel run `modprobe bpfilter`, which fails; an IPv6 one does not.
    let req = ModuleRequests::install();
    let (size, asked) = req.during(|| fingerprint::table_size(IpFamily::V4, "filter"));
    assert!(size.is_some());
    assert_eq!(
        asked,
        ["-q -- bpfilter"],
        "an IPv4 x_tables call must make the kernel ask for bpfilter here, or the counts below prove nothing"
    );
    let (_, asked) = req.during(|| fingerprint::table_size(IpFamily::V6, "filter"));
    assert!(asked.is_empty(), "{asked:?}");

    let log = Arc::new(Mutex::new(Log::default()));
    let mut p = Proxier::new(backends(&log));
    let r = p.sync_proxy_rules(scenario_input(false));
    assert_eq!((r.failure_count(), r.iptables_restores), (0, 2), "{r:#?}");
    let programmed = kernel_state();
    // The first periodic full sync after the restores reads each IPv4 table's size and entries (two
    // calls per table), decodes the rules from them and starts no iptables-save.
    let full = |p: &mut Proxier| {
        let from = calls(&log).len();
        let (r, asked) = req.during(|| p.sync_proxy_rules(scenario_input(true)));
        assert_eq!(r.failure_count(), 0, "{r:#?}");
        assert_eq!(saved_families(&log, from), BTreeSet::new());
        (r, asked)
    };
    let (r, asked) = full(&mut p);
    assert_eq!(r.writes(), 0, "{r:#?}");
    assert_eq!(asked.len(), 4, "{asked:?}");
    // Then every no-op full sync: one call (one module request) per IPv4 table, nothing else.
    for _ in 0..3 {
        let (r, asked) = full(&mut p);
        assert_eq!(r.writes(), 0, "{r:#?}");
        assert_eq!(asked, ["-q -- bpfilter"; 2], "{r:#?}");
    }
    // Drift (a jump deleted) is still seen, from the decoded blobs, and the jump put back (`-C`, `-I`:
    // this proxier restored it before).
    sh(
        "iptables -t nat -D OUTPUT -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
    );
    let (r, _) = full(&mut p);
    assert_eq!((r.iptables_restores, r.jumps_inserted), (0, 1), "{r:#?}");
    assert_eq!(kernel_state(), programmed);
    let (r, asked) = full(&mut p);
    assert_eq!((r.writes(), asked.len()), (0, 4), "{r:#?}");
    let (r, asked) = full(&mut p);
    assert_eq!((r.writes(), asked.len()), (0, 2), "{r:#?}");
});

/// A full sync of an IPv4 plan (no NodePort IPs); asserts it had no failure.
fn full_v4(p: &mut Applier, d: &DesiredState) -> SyncReport {
    let c4 = config(IpFamily::V4);
    let input = FamilyInput {
        desired: d,
        delta: None,
        config: &c4,
        node_port_ips: &[],
    };
    let r = p.apply(&[input], true, &ConntrackHints::default());
    assert_eq!(r.failure_count(), 0, "{r:#?}");
    r
}

/// `ipvsadm` address of a virtual server key.
fn vs_arg(k: &IpvsServiceKey) -> String {
    format!("-t {}:{}", k.addr, k.port)
}

uml_test!(
    full_syncs_verify_real_servers_one_slice_of_the_view_at_a_time,
    {
        use kube_proxy_rs::proxier::reconcile::drift::DriftKind;
        // 300 virtual servers of two real servers each: /proc/net/ip_vs takes many reads (one page of whole
        // virtual servers each), so with a slice of one virtual server each full sync reads one of them.
        let log = Arc::new(Mutex::new(Log::default()));
        let mut p = direct_proxier(&log);
        let mut d = desired(IpFamily::V4);
        let eps = [("10.244.1.1", 8080), ("10.244.1.2", 8080)];
        let extra: Vec<IpvsServiceKey> = (0..300)
            .map(|i| {
                let (k, v) = vs(&format!("10.97.{}.{}", i / 200, 1 + i % 200), 80, &eps);
                d.virtual_servers.insert(k, v);
                k
            })
            .collect();
        apply(&mut p, &d);
        assert_eq!(
            full_v4(&mut p, &d).writes(),
            0,
            "the first full sync reads the whole view"
        );
        p.reconciler.set_view_slice(1);
        // Virtual servers themselves are read whole by every full sync (one getsockopt for IPv4): one
        // deleted and one with another scheduler come back in the next full sync.
        sh(&format!("ipvsadm -D {}", vs_arg(&extra[7])));
        sh(&format!("ipvsadm -E {} -s wlc", vs_arg(&extra[8])));
        let r = full_v4(&mut p, &d);
        assert_eq!(
            r.drift.counts.get(&DriftKind::VirtualServer),
            Some(&1),
            "{r:#?}"
        );
        assert_eq!(
            r.drift.counts.get(&DriftKind::Scheduler),
            Some(&1),
            "{r:#?}"
        );
        // Real servers behind our back: every 10th virtual server loses one, gains a stranger or has
        // one reweighted. Each is repaired by the full sync whose slice shows it, all within one pass.
        let mut tampered =
            BTreeMap::from([(DriftKind::RealServer, 0u64), (DriftKind::Weight, 0u64)]);
        for (n, k) in extra.iter().step_by(10).enumerate() {
            let (cmd, kind) = match n % 3 {
                0 => ("-d {vs} -r 10.244.1.1:8080", DriftKind::RealServer),
                1 => ("-a {vs} -r 10.244.9.9:8080 -m -w 1", DriftKind::RealServer),
                _ => ("-e {vs} -r 10.244.1.2:8080 -m -w 5", DriftKind::Weight),
            };
            sh(&format!("ipvsadm {}", cmd.replace("{vs}", &vs_arg(k))));
            *tampered.get_mut(&kind).unwrap() += 1;
        }
        let mut found = BTreeMap::new();
        let mut per_sync = Vec::new();
        while found != tampered {
            assert!(
                per_sync.len() < 60,
                "not repaired within 60 full syncs: {found:?} of {tampered:?}"
            );
            let r = full_v4(&mut p, &d);
            let n: u64 = tampered
                .keys()
                .map(|k| r.drift.counts.get(k).copied().unwrap_or(0))
                .sum();
            for k in tampered.keys() {
                *found.entry(*k).or_insert(0) += r.drift.counts.get(k).copied().unwrap_or(0);
            }
            per_sync.push(n);
        }
        assert!(
            per_sync.iter().filter(|n| **n > 0).count() > 1,
            "every repair came in one full sync: not sliced ({per_sync:?})"
        );
        let want: BTreeSet<String> = extra
            .iter()
            .flat_map(|k| eps.map(|(a, port)| format!("-a {} -r {a}:{port} -m -w 1", vs_arg(k))))
            .collect();
        let have: BTreeSet<String> = sh("ipvsadm -Sn")
            .lines()
            .filter(|l| l.starts_with("-a -t 10.97."))
            .map(str::to_string)
            .collect();
        assert_eq!(have, want);
        // Nothing differs any more: a whole pass of full syncs writes nothing.
        for _ in 0..per_sync.len() {
            assert_eq!(full_v4(&mut p, &d).writes(), 0);
        }
    }
);

/// `desired(V4)` with `n` more members in KUBE-CLUSTER-IP: `10.200.0.0 + i`, UDP port 9.
fn with_cluster_ips(n: u32) -> DesiredState {
    let mut d = desired(IpFamily::V4);
    let set = d.ipsets.get_mut("KUBE-CLUSTER-IP").expect("planned set");
    let base = u32::from(std::net::Ipv4Addr::new(10, 200, 0, 0));
    set.entries
        .extend((0..n).map(|i| format!("{},udp:9", std::net::Ipv4Addr::from(base + i))));
    set.refresh_size();
    d
}

/// Packets through the probe chain's rules: (matched KUBE-CLUSTER-IP, matched nothing).
fn probe_counts() -> (u64, u64) {
    let text = sh("iptables -t mangle -L KPRS-PROBE -n -v -x");
    let pkts: Vec<u64> = text
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(pkts.len(), 2, "{text}");
    (pkts[0], pkts[1])
}

/// The `Header:` and `Number of entries:` lines of `ipset list -t name`.
fn set_header(name: &str) -> (String, usize) {
    let terse = sh(&format!("ipset list -t {name}"));
    let field = |k: &str| {
        terse
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k} in {terse}"))
            .trim()
            .to_string()
    };
    let entries = field("Number of entries:").parse().expect("a count");
    (field("Header:"), entries)
}

uml_test!(
    a_set_past_65536_members_is_grown_and_swapped_in_while_it_matches,
    {
        let log = Arc::new(Mutex::new(Log::default()));
        let mut p = direct_proxier(&log);
        let v6 = desired(IpFamily::V6);
        let reference_members = desired(IpFamily::V4).ipsets["KUBE-CLUSTER-IP"]
            .entries
            .len();
        // 60,000 members: upstream's size, as upstream creates it.
        let small = with_cluster_ips(60_000);
        sync(&mut p, &small, &v6, false);
        let (header, entries) = set_header("KUBE-CLUSTER-IP");
        assert!(header.contains("maxelem 65536"), "{header}");
        assert_eq!(entries, 60_000 + reference_members);
        // A probe sends UDP to a sample of those members all along (through a dummy device, which drops
        // them); a chain of the test's own counts the packets that match KUBE-CLUSTER-IP and those that do
        // not. Rules referring to the set also keep it from being destroyed: only a swap can grow it.
        sh("ip link add probe0 type dummy && ip link set probe0 up \
        && ip route add 10.200.0.0/15 dev probe0 \
        && iptables -t mangle -N KPRS-PROBE \
        && iptables -t mangle -A KPRS-PROBE -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN \
        && iptables -t mangle -A KPRS-PROBE -j RETURN \
        && iptables -t mangle -A OUTPUT -p udp -d 10.200.0.0/15 -j KPRS-PROBE");
        let probe = r#"
import os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
targets = ["10.200.%d.%d" % (i >> 8, i & 255) for i in range(0, 60000, 997)]
while not os.path.exists("/tmp/probe-stop"):
    for t in targets:
        try:
            s.sendto(b"x", (t, 9))
        except OSError:
            pass
"#;
        std::fs::write("/tmp/probe.py", probe).unwrap();
        sh("(/usr/bin/python3 /tmp/probe.py >/tmp/probe.log 2>&1 &)");
        let started = Instant::now();
        while probe_counts().0 < 1000 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the probe sends nothing"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // 75,000 members, event-driven: KUBE-CLUSTER-IP is rebuilt larger beside the old one and swapped in.
        let before = probe_counts();
        let big = with_cluster_ips(75_000);
        let r = sync(&mut p, &big, &v6, false);
        let after = probe_counts();
        sh("touch /tmp/probe-stop");
        assert_eq!(r.ipsets_grown, 1, "{r:#?}");
        let (header, entries) = set_header("KUBE-CLUSTER-IP");
        // Created with hashsize 2048; the kernel shows the buckets as they are now (it doubles them).
        assert!(header.contains("maxelem 131072"), "{header}");
        assert_eq!(entries, 75_000 + reference_members);
        let names = sh("ipset list -n");
        assert!(!names.contains("KUBE-CLUSTER-IP-G"), "{names}");
        let calls = calls(&log);
        assert!(
            calls
                .iter()
                .any(|c| c.contains("ipset.swap KUBE-CLUSTER-IP KUBE-CLUSTER-IP-G")),
            "{calls:#?}"
        );
        // Every probe packet, before, during and after the swap, matched the set.
        assert_eq!(after.1, 0, "probe packets that matched no set: {after:?}");
        assert!(
            after.0 > before.0 + 100,
            "the probe ran during the grow: {before:?} {after:?}"
        );
        for member in [
            "10.200.0.0,udp:9",
            "10.201.36.247,udp:9",
            "10.96.100.20,tcp:80",
        ] {
            sh(&format!("ipset test KUBE-CLUSTER-IP {member}"));
        }
        // A full sync reads the grown set back and changes nothing; so does the plan shrinking back (sets
        // never shrink).
        let r = sync(&mut p, &big, &v6, true);
        assert_eq!(r.writes(), 0, "{r:#?}");
        let r = sync(&mut p, &small, &v6, true);
        assert_eq!(r.ipsets_grown, 0, "{r:#?}");
        assert!(set_header("KUBE-CLUSTER-IP").0.contains("maxelem 131072"));
        assert_eq!(sync(&mut p, &small, &v6, true).writes(), 0);
    }
);

/// The IPVS reads among `calls` (`ipvs.services` for the netlink dump, `ipvs.services ipv4` for the
/// one-call IPv4 read).
fn services_reads(calls: &[String]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|c| c.strip_prefix("R "))
        .filter(|c| c.starts_with("ipvs.services"))
        .map(|c| c.trim_end().to_string())
        .collect()
}

uml_test!(
    dual_stack_full_sync_reads_ipv4_in_one_call_until_ipv6_matters,
    {
        use kube_proxy_rs::proxier::reconcile::drift::ForeignKind;
        let log = Arc::new(Mutex::new(Log::default()));
        let mut p = direct_proxier(&log);
        let (v4, v6) = (desired(IpFamily::V4), desired(IpFamily::V6));
        let full = |p: &mut Applier| {
            let from = calls(&log).len();
            let r = sync(p, &v4, &v6, true);
            (r, services_reads(&calls(&log)[from..]))
        };
        let dump = vec!["ipvs.services".to_string()];
        let ipv4 = vec!["ipvs.services ipv4".to_string()];
        assert_eq!(
            full(&mut p).1,
            dump,
            "the first full sync dumps every family"
        );
        let (r, reads) = full(&mut p);
        assert_eq!((reads, r.writes()), (ipv4.clone(), 0), "{r:#?}");
        let foreign = |r: &SyncReport| {
            r.foreign
                .as_ref()
                .and_then(|f| f.get(&ForeignKind::VirtualServer))
                .copied()
        };

        // Behind our back: one of our IPv4 virtual servers goes, a foreign IPv6 one comes. The real-server
        // view (one slice here) shows the IPv6 one, so this full sync dumps: it repairs ours, counts the
        // foreign one and leaves it.
        sh("ipvsadm -D -t 10.96.100.20:80 && ipvsadm -A -t [fd00::99]:80 -s rr");
        let (r, reads) = full(&mut p);
        assert_eq!(reads, dump);
        assert_eq!(r.ipvs_services.added, 1, "{r:#?}");
        assert_eq!(foreign(&r), Some(1), "{r:#?}");
        let table = sh("ipvsadm -Sn");
        assert!(table.contains("-A -t 10.96.100.20:80 -s rr"), "{table}");
        assert!(table.contains("-A -t [fd00::99]:80 -s rr"), "{table}");

        // It goes too: the next full sync's view shows no IPv6 virtual server, so it reads IPv4 alone and
        // reports no foreign one; an IPv4 deletion is still repaired from the one-call read.
        sh("ipvsadm -D -t [fd00::99]:80 && ipvsadm -D -t 10.96.100.20:80");
        let (r, reads) = full(&mut p);
        assert_eq!(reads, ipv4);
        assert_eq!(r.ipvs_services.added, 1, "{r:#?}");
        assert_eq!(foreign(&r), Some(0), "{r:#?}");
        let (r, reads) = full(&mut p);
        assert_eq!((reads, r.writes()), (ipv4, 0), "{r:#?}");
    }
);
