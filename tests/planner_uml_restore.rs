//! The plan's ipsets and iptables payload, loaded into a real kernel (UML): `ipset restore` and
//! `iptables-restore --noflush` accept them, and `ipset save` / `iptables-save` print back exactly the
//! planned members and rules (mark syntax aside).
mod common {
    pub mod planner;
    pub mod uml;
}

use common::planner::*;
use kube_proxy_rs::cluster::model::{IpFamily, Protocol};
use kube_proxy_rs::proxier::desired::DesiredState;
use kube_proxy_rs::proxier::plan::{LocalDetector, plan};
use std::collections::{BTreeMap, BTreeSet};

/// Every feature that shows up in ipsets or rules, for one family.
fn rich_plan(family: IpFamily) -> DesiredState {
    let v6 = family == IpFamily::V6;
    let a = |v4: &'static str, v6a: &'static str| if v6 { v6a } else { v4 };
    let mut web = svc(
        "ns1",
        "web",
        "http",
        Protocol::Tcp,
        a("10.96.0.10", "fd00:96::10"),
        80,
    );
    web.node_port = Some(30080);
    web.load_balancer_ingress = lb(&[a("1.2.3.4", "2001:db8:1b::4")]);
    web.load_balancer_source_ranges = vec![
        a("172.16.0.0/12", "2001:db8:5::/48").parse().unwrap(),
        a("192.0.2.7/32", "2001:db8:6::7/128").parse().unwrap(),
    ];
    web.external_policy_local = true;
    web.health_check_node_port = Some(30999);
    let mut open = svc(
        "ns1",
        "open",
        "http",
        Protocol::Tcp,
        a("10.96.0.11", "fd00:96::11"),
        80,
    );
    open.load_balancer_ingress = lb(&[a("1.2.3.5", "2001:db8:1b::5")]);
    // Covers the node IP: the node may reach this LB through KUBE-LOAD-BALANCER-SOURCE-IP.
    open.load_balancer_source_ranges = vec![a("10.0.0.0/24", "2001:db8:a::/64").parse().unwrap()];
    let mut dns = svc(
        "ns1",
        "dns",
        "dns",
        Protocol::Udp,
        a("10.96.0.12", "fd00:96::12"),
        53,
    );
    dns.node_port = Some(30053);
    dns.external_ips = vec![a("203.0.113.9", "2001:db8:e::9").parse().unwrap()];
    let mut dns_local = svc(
        "ns1",
        "dns-local",
        "dns",
        Protocol::Udp,
        a("10.96.0.14", "fd00:96::14"),
        53,
    );
    dns_local.node_port = Some(30054);
    dns_local.external_policy_local = true;
    let mut sctp = svc(
        "ns1",
        "sctp",
        "s",
        Protocol::Sctp,
        a("10.96.0.13", "fd00:96::13"),
        9,
    );
    sctp.node_port = Some(30009);
    sctp.external_policy_local = true;
    sctp.external_ips = vec![a("203.0.113.10", "2001:db8:e::10").parse().unwrap()];
    let pod = a("10.244.0.5", "fd00:244::5");
    let eps = |port| vec![ep(pod, port, Some(HOST))];
    let (sm, em) = maps(
        vec![
            web.clone(),
            open.clone(),
            dns.clone(),
            dns_local.clone(),
            sctp.clone(),
        ],
        vec![
            (web.name.clone(), eps(8080)),
            (open.name.clone(), eps(8080)),
            (dns.name.clone(), eps(53)),
            (dns_local.name.clone(), eps(53)),
            (sctp.name.clone(), eps(9)),
        ],
    );
    let n = node(&[a("10.0.0.10", "2001:db8:a::10")]);
    let mut c = cfg(family);
    c.local_detector =
        LocalDetector::Cidrs(vec![a("10.244.0.0/16", "fd00:244::/64").parse().unwrap()]);
    plan(&sm, &em, &n, &c)
}

fn guest_file(name: &str, body: &str) -> String {
    let dir = common::uml::guest_run_dir().unwrap();
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

fn load_and_compare(d: &DesiredState) {
    let (ipt, v) = match d.family {
        IpFamily::V4 => ("iptables", "4"),
        IpFamily::V6 => ("ip6tables", "6"),
    };
    // ipsets first: the rules reference them.
    let mut restore = String::new();
    for set in d.ipsets.values() {
        restore.push_str(&format!("{}\n", set.spec.create_line()));
        for e in &set.entries {
            restore.push_str(&format!("add {} {e}\n", set.spec.name));
        }
    }
    let f = guest_file(&format!("ipset-{v}.txt"), &restore);
    common::uml::sh(&format!("ipset restore -exist -f {f}"));
    let f = guest_file(&format!("payload-{v}.txt"), &d.iptables_payload);
    common::uml::sh(&format!("{ipt}-restore --noflush < {f}"));
    for j in &d.jumps {
        common::uml::sh(&format!(
            "{ipt} -t {} -C {c} -m comment --comment '{m}' -j {t} 2>/dev/null || {ipt} -t {} -I {c} -m comment --comment '{m}' -j {t}",
            j.table,
            j.table,
            c = j.chain,
            m = j.comment,
            t = j.target
        ));
    }
    // Restoring a second time (as every sync does) gives the same result.
    common::uml::sh(&format!("{ipt}-restore --noflush < {f}"));

    let saved = parse_tables(&common::uml::sh(&format!(
        "{ipt}-save -t nat; {ipt}-save -t filter"
    )));
    let planned = parse_tables(&d.iptables_payload);
    let ours: BTreeMap<_, _> = saved
        .rules
        .iter()
        .filter(|((_, c), _)| c.starts_with("KUBE-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(ours, planned.rules, "{ipt}-save differs from the payload");
    for j in &d.jumps {
        let rules = &saved.rules[&(j.table.to_string(), j.chain.to_string())];
        let want = format!(
            "-A {} -m comment --comment \"{}\" -j {}",
            j.chain, j.comment, j.target
        );
        assert_eq!(rules.iter().filter(|r| **r == want).count(), 1, "{want}");
    }

    let saved_sets = common::uml::sh("ipset save");
    let mut members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in saved_sets.lines() {
        if let Some(rest) = line.strip_prefix("add ") {
            let (n, m) = rest.split_once(' ').unwrap();
            members.entry(n.into()).or_default().insert(m.into());
        } else if let Some(rest) = line.strip_prefix("create ") {
            members
                .entry(rest.split(' ').next().unwrap().into())
                .or_default();
        }
    }
    for (name, set) in &d.ipsets {
        assert_eq!(members.get(name), Some(&set.entries), "ipset {name}");
        assert!(
            saved_sets.contains(&set.spec.create_line()),
            "{}",
            set.spec.create_line()
        );
    }
}

uml_test!(plan_loads_into_kernel_and_saves_back_identically, {
    let v4 = rich_plan(IpFamily::V4);
    let v6 = rich_plan(IpFamily::V6);
    // The scenario covers what it claims.
    for (d, out_filter) in [(&v4, "-s 1.2.3.4"), (&v6, "-s 2001:db8:1b::4")] {
        assert!(d.iptables_payload.contains(out_filter));
        assert_eq!(
            d.ipsets.values().filter(|s| s.entries.is_empty()).count(),
            0,
            "every set used"
        );
    }
    load_and_compare(&v4);
    load_and_compare(&v6);
});
