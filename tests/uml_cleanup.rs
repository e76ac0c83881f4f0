//! Cleanup of every mode's leftovers against a real kernel (UML, legacy iptables): the iptables mode's
//! chains and jumps as upstream writes them (tests/cleanup_data), next to the IPVS mode's state and to
//! foreign rules. A chain a foreign rule still jumps to is kept with what it jumps to, and named; the rest
//! goes. (The nftables mode's tables need nf_tables' `ip` family, which this kernel lacks: see
//! tests/hostns_leftovers.rs.)
mod common {
    pub mod uml;
}

use common::uml::sh;
use kube_proxy_rs::kernel::ipset::netlink::NetlinkIpSets;
use kube_proxy_rs::kernel::iptables::cli::{Backend, IptablesCli};
use kube_proxy_rs::kernel::ipvs::Ipvs;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::link::rtnetlink::RtnetlinkLinks;
use kube_proxy_rs::kernel::nftables::netlink::NetlinkNfTables;
use kube_proxy_rs::net::IpFamily;
use kube_proxy_rs::proxier::cleanup::{
    CleanupError, CleanupReport, LeftoverBackends, cleanup_every_mode,
};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cleanup_data");

/// Matches the iptables mode's rules use beyond what every guest loads.
fn load_match_modules() {
    sh("modprobe -d /run/m -a xt_recent xt_statistic");
}

fn restore(tool: &str, file: &str) {
    sh(&format!("{tool} --noflush < {DATA}/{file}"));
}

/// `--cleanup` as the binary runs it, with this guest's kernel backends.
fn cleanup() -> Result<CleanupReport, CleanupError> {
    let mut ipvs = NetlinkIpvs::new().unwrap();
    let mut links = RtnetlinkLinks::new().unwrap();
    let mut iptables = IptablesCli::with_backend(Backend::Legacy);
    let mut ipsets = NetlinkIpSets::new().unwrap();
    let mut nftables = NetlinkNfTables::new();
    cleanup_every_mode(
        LeftoverBackends {
            ipvs: Some(&mut ipvs as &mut dyn Ipvs),
            links: &mut links,
            iptables: &mut iptables,
            ipsets: &mut ipsets,
            nftables: &mut nftables,
        },
        &[IpFamily::V4, IpFamily::V6],
    )
}

/// The `KUBE-` lines of a save (counters dropped).
fn kube_lines(tool: &str) -> Vec<String> {
    sh(tool)
        .lines()
        .filter(|l| l.contains("KUBE-"))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect()
}

/// What upstream's cleanup leaves of the iptables mode too: kubelet's KUBE-FIREWALL (and its jumps) and
/// the monitor's KUBE-PROXY-CANARY chains.
fn is_left_by_upstream(line: &str) -> bool {
    line.contains("KUBE-FIREWALL") || line.contains("KUBE-PROXY-CANARY")
}

uml_test!(iptables_mode_leftovers_go_foreign_rules_stay, {
    load_match_modules();
    restore("iptables-restore", "iptables-mode-v4.rules");
    restore("ip6tables-restore", "iptables-mode-v6.rules");
    restore("iptables-restore", "foreign-v4.rules");
    // The IPVS mode's state of the same node: its own chains, an ipset, a virtual server.
    sh("ipset create KUBE-CLUSTER-IP hash:ip,port");
    sh(
        "iptables -t nat -N KUBE-LOAD-BALANCER && iptables -t nat -A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ",
    );
    sh("ipvsadm -A -t 10.96.0.1:443 -s rr");
    let foreign_before: Vec<String> = sh("iptables-save")
        .lines()
        .filter(|l| !l.contains("KUBE-") && !l.starts_with('#') && !l.starts_with(':'))
        .map(str::to_string)
        .collect();

    let report = cleanup().unwrap_or_else(|e| panic!("{e}\n{:#?}", e.0));
    for chain in [
        "KUBE-SVC-XPGD46QRK7WJZT7O",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-MARK-MASQ",
    ] {
        assert!(
            report
                .removed
                .iter()
                .any(|r| r.ends_with(&format!("chain {chain}"))),
            "{chain} not reported removed: {:#?}",
            report.removed
        );
    }
    let v4: Vec<String> = kube_lines("iptables-save")
        .into_iter()
        .filter(|l| !is_left_by_upstream(l))
        .collect();
    assert!(v4.is_empty(), "{v4:#?}");
    assert!(
        kube_lines("ip6tables-save").is_empty(),
        "{:#?}",
        kube_lines("ip6tables-save")
    );
    assert!(!sh("ipset list -n").contains("KUBE-"));
    assert_eq!(sh("ipvsadm -Sn").trim(), "");
    let foreign_after: Vec<String> = sh("iptables-save")
        .lines()
        .filter(|l| !l.contains("KUBE-") && !l.starts_with('#') && !l.starts_with(':'))
        .map(str::to_string)
        .collect();
    assert_eq!(foreign_after, foreign_before);
    assert!(
        foreign_after
            .iter()
            .any(|l| l == "-A FOREIGN-NAT -j RETURN")
    );

    // A second run finds nothing (the IPVS flush is always done, and always reported).
    let again = cleanup().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.removed, vec!["IPVS table flush".to_string()]);
});

uml_test!(a_chain_a_foreign_rule_uses_is_kept_and_named, {
    load_match_modules();
    restore("iptables-restore", "iptables-mode-v4.rules");
    sh(
        "iptables -t nat -N FOREIGN-USER && iptables -t nat -A FOREIGN-USER -d 10.1.0.0/16 -j KUBE-SVC-XPGD46QRK7WJZT7O",
    );

    let e = cleanup().expect_err("a chain still in use must fail the cleanup");
    let failures = &e.0.failures;
    assert!(
        failures
            .iter()
            .any(|f| f.contains("chain KUBE-SVC-XPGD46QRK7WJZT7O")
                && f.contains("-A FOREIGN-USER -d 10.1.0.0/16 -j KUBE-SVC-XPGD46QRK7WJZT7O")),
        "{failures:#?}"
    );
    // The kept service chain still jumps to its endpoint chain, which jumps to KUBE-MARK-MASQ.
    assert!(
        failures
            .iter()
            .all(|f| f.contains("KUBE-SVC-XPGD46QRK7WJZT7O") || f.contains("KUBE-MARK-MASQ")),
        "{failures:#?}"
    );
    let nat = kube_lines("iptables-save -t nat");
    let chains: Vec<&str> = nat
        .iter()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        chains,
        vec![
            "KUBE-MARK-MASQ",
            "KUBE-PROXY-CANARY",
            "KUBE-SEP-SXIVWICOYRO3J4NJ",
            "KUBE-SVC-XPGD46QRK7WJZT7O"
        ],
        "{nat:#?}"
    );
    assert!(
        sh("iptables -t nat -S KUBE-SVC-XPGD46QRK7WJZT7O").contains("-j KUBE-SEP-SXIVWICOYRO3J4NJ")
    );
    assert!(!sh("iptables -t nat -S PREROUTING").contains("KUBE-"));

    // Once the foreign rule is gone, the rest goes too.
    sh("iptables -t nat -F FOREIGN-USER");
    cleanup().unwrap_or_else(|e| panic!("{e}"));
    let nat = kube_lines("iptables-save -t nat");
    assert!(nat.iter().all(|l| is_left_by_upstream(l)), "{nat:#?}");
});
