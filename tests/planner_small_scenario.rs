//! Golden test: the plan for the small reference scenario (tests/planner_data/small-scenario, captured from
//! upstream kube-proxy v1.36.2 in IPVS mode) must reproduce what upstream programmed, rule for rule.
mod common {
    pub mod planner;
}

use common::planner::*;
use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::kernel::ipvs::ForwardMethod;
use kube_proxy_rs::proxier::desired::{DesiredState, TrafficPolicy};
use kube_proxy_rs::proxier::plan::plan;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/planner_data/small-scenario"
);

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}/{name}")).unwrap()
}

fn plans() -> (DesiredState, DesiredState) {
    let (s, e) = small_scenario();
    let node = small_scenario_node();
    (
        plan(&s, &e, &node, &small_scenario_cfg(IpFamily::V4)),
        plan(&s, &e, &node, &small_scenario_cfg(IpFamily::V6)),
    )
}

/// `ipvsadm -Sn` → virtual server → (scheduler, sorted real servers).
fn parse_ipvsadm(text: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let proto = match w.get(1) {
            Some(&"-t") => "TCP",
            Some(&"-u") => "UDP",
            Some(&"--sctp-service") => "SCTP",
            _ => continue,
        };
        let vip = format!("{}/{proto}", w[2]);
        match w[0] {
            "-A" => {
                let sched = w[w.iter().position(|x| *x == "-s").unwrap() + 1].to_string();
                out.entry(vip).or_default().0 = sched;
            }
            "-a" => {
                let rs = w[w.iter().position(|x| *x == "-r").unwrap() + 1].to_string();
                assert!(w.contains(&"-m"), "masquerading real server: {line}");
                assert_eq!(w[w.iter().position(|x| *x == "-w").unwrap() + 1], "1");
                out.entry(vip).or_default().1.push(rs);
            }
            _ => {}
        }
    }
    for v in out.values_mut() {
        v.1.sort();
    }
    out
}

#[test]
fn ipvs_matches_ipvsadm_dump() {
    let (v4, v6) = plans();
    let want = parse_ipvsadm(&read("ipvsadm-Sn.txt"));
    let got: BTreeMap<String, (String, Vec<String>)> = vs_summary(&v4)
        .into_iter()
        .map(|(k, d)| {
            let vs = v4
                .virtual_servers
                .values()
                .find(|x| x.service.key.to_string() == k)
                .unwrap();
            assert_eq!(vs.service.flags, 0);
            assert_eq!(vs.service.timeout, 0);
            assert_eq!(vs.service.netmask, 0xffff_ffff);
            assert!(
                vs.destinations
                    .values()
                    .all(|d| d.forward == ForwardMethod::Masq)
            );
            (k, (vs.service.scheduler.clone(), d))
        })
        .collect();
    assert_eq!(got, want);
    assert!(v6.virtual_servers.is_empty());
}

/// `ipset save` → set name → (create line, members).
fn parse_ipset_save(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("create ") {
            let name = rest.split(' ').next().unwrap().to_string();
            out.entry(name).or_default().0 = line.to_string();
        } else if let Some(rest) = line.strip_prefix("add ") {
            let (name, member) = rest.split_once(' ').unwrap();
            out.entry(name.to_string())
                .or_default()
                .1
                .insert(member.to_string());
        }
    }
    out
}

#[test]
fn ipsets_match_ipset_save() {
    let (v4, v6) = plans();
    let want = parse_ipset_save(&read("ipset-save.txt"));
    let mut got = BTreeMap::new();
    for d in [&v4, &v6] {
        for (name, set) in &d.ipsets {
            assert_eq!(&set.spec.name, name);
            got.insert(name.clone(), (set.spec.create_line(), set.entries.clone()));
        }
    }
    assert_eq!(got, want);
    assert_eq!(v4.ipsets.len(), 17);
    assert_eq!(v6.ipsets.len(), 17);
}

fn check_iptables(d: &DesiredState, dump: &str) {
    let payload = parse_tables(&d.iptables_payload);
    let want = parse_tables(dump);
    assert_eq!(payload.order, vec!["nat", "filter"]);
    assert!(d.iptables_payload.ends_with("COMMIT\n"));
    assert_eq!(d.iptables_payload.matches("COMMIT\n").count(), 2);
    // Declared chains: ours, and the built-in ones iptables-save adds.
    for (table, chains) in &payload.chains {
        let ours: BTreeSet<&String> = chains.iter().collect();
        let theirs: BTreeSet<&String> = want.chains[table]
            .iter()
            .filter(|c| c.starts_with("KUBE-"))
            .collect();
        assert_eq!(ours, theirs, "chains of {table}");
    }
    // Every rule of our chains, in order.
    let ours: BTreeMap<_, _> = payload.rules.clone();
    let theirs: BTreeMap<_, _> = want
        .rules
        .iter()
        .filter(|((_, c), _)| c.starts_with("KUBE-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(ours, theirs);
    // Built-in chains: jumps inserted at the top in upstream's order, so the dump lists them reversed.
    let mut jumps: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for j in &d.jumps {
        jumps
            .entry((j.table.to_string(), j.chain.to_string()))
            .or_default()
            .insert(
                0,
                format!("-A {} {}", j.chain, quote_comment(&j.args()).join(" ")),
            );
    }
    let builtin: BTreeMap<_, _> = want
        .rules
        .iter()
        .filter(|((_, c), _)| !c.starts_with("KUBE-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(jumps, builtin);
}

fn quote_comment(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| {
            if a.contains(' ') {
                format!("\"{a}\"")
            } else {
                a.clone()
            }
        })
        .collect()
}

#[test]
fn iptables_matches_iptables_save() {
    let (v4, _) = plans();
    check_iptables(&v4, &read("iptables-save.txt"));
}

#[test]
fn ip6tables_matches_ip6tables_save() {
    let (_, v6) = plans();
    check_iptables(&v6, &read("ip6tables-save.txt"));
}

#[test]
fn bound_addresses_match_kube_ipvs0() {
    let (v4, v6) = plans();
    let want: BTreeSet<IpAddr> = read("kube-ipvs0-addresses.txt")
        .lines()
        .map(|l| l.split('/').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(v4.bound_addresses, want);
    assert!(v6.bound_addresses.is_empty());
    assert!(v4.health_checks.is_empty());
    assert_eq!(v4.no_local_endpoints[&TrafficPolicy::Internal], 0);
    assert_eq!(v4.no_local_endpoints[&TrafficPolicy::External], 0);
}

#[test]
fn plan_is_deterministic() {
    let (a, _) = plans();
    let (b, _) = plans();
    assert_eq!(a, b);
}
