//! The iptables backend against a real kernel (UML, legacy iptables): upstream-shaped `--noflush` payloads
//! restored twice, jumps ensured twice, foreign rules kept, broken payloads rejected with their line,
//! `-m ipvs` / `-m set`, ip6tables, deletes, backend detection; and the fake replaying the same calls ends
//! with the same chains and rules as the kernel.
mod common {
    pub mod uml;
}

use common::uml::sh;
use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::kernel::ipset::IpSetType;
use kube_proxy_rs::kernel::ipset::fake::FakeIpSets;
use kube_proxy_rs::kernel::iptables::Iptables;
use kube_proxy_rs::kernel::iptables::cli::{Backend, IptablesCli, detect_backend};
use kube_proxy_rs::kernel::iptables::fake::FakeIptables;
use kube_proxy_rs::kernel::iptables::{fingerprint, xt_decode};
use std::collections::{BTreeMap, BTreeSet};

/// `iptables-save` of upstream v1.36.2 for the small scenario (tests/../reference/small-scenario).
const REF_V4: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
COMMIT
"#;
const REF_V6: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-6-IPVS-IPS dst -j REJECT --reject-with icmp6-port-unreachable
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -s ::1/128 -j RETURN
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
COMMIT
"#;

/// Extra rule using `-m ipvs` (KUBE-IPVS-OUT-FILTER, as upstream writes for loadBalancerSourceRanges).
const IPVS_RULE_V4: &str = "-A KUBE-IPVS-OUT-FILTER -s 10.0.0.50/32 -m ipvs --vaddr 10.0.0.50/32 --vproto 6 --vport 80 -j DROP";
const IPVS_RULE_V6: &str = "-A KUBE-IPVS-OUT-FILTER -s fd00::50/128 -m ipvs --vaddr fd00::50/128 --vproto 6 --vport 80 -j DROP";

/// The same rules as `iptables-save` prints them.
const IPVS_SAVED_V4: &str = "-A KUBE-IPVS-OUT-FILTER -s 10.0.0.50/32 -m ipvs --vproto 6 --vaddr 10.0.0.50 --vport 80 -j DROP";
const IPVS_SAVED_V6: &str = "-A KUBE-IPVS-OUT-FILTER -s fd00::50/128 -m ipvs --vproto 6 --vaddr fd00::50 --vport 80 -j DROP";

/// The foreign chain as `iptables-save` prints it.
const FOREIGN_SAVED: &[&str] = &[
    "-A FOREIGN -j ACCEPT",
    "-A FOREIGN -p tcp -m tcp --dport 22 -m comment --comment foreign_ssh -j ACCEPT",
    "-A FOREIGN -m comment --comment \"two words\" -j RETURN",
];

const BUILTINS: &[&str] = &["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"];

/// Foreign state set up before kube-proxy runs: must survive everything.
const FOREIGN_V4: &str = "*filter\n:FOREIGN - [0:0]\n-A FOREIGN -j ACCEPT\n-A FOREIGN -p tcp --dport 22 -m comment --comment foreign_ssh -j ACCEPT\n-A FOREIGN -m comment --comment \"two words\" -j RETURN\n-A INPUT -s 192.0.2.1/32 -j FOREIGN\nCOMMIT\n*nat\n-A POSTROUTING -o eth9 -j MASQUERADE\nCOMMIT\n";
const FOREIGN_V6: &str = "*filter\n:FOREIGN - [0:0]\n-A FOREIGN -j ACCEPT\n-A FOREIGN -p tcp --dport 22 -m comment --comment foreign_ssh -j ACCEPT\n-A FOREIGN -m comment --comment \"two words\" -j RETURN\n-A INPUT -s 2001:db8::1/128 -j FOREIGN\nCOMMIT\n";

/// The restore payload: the reference minus built-in chains and their jumps, plus the `-m ipvs` rule.
fn payload(reference: &str, ipvs_rule: &str) -> String {
    let mut out = String::new();
    for line in reference.lines() {
        let builtin_decl = BUILTINS.iter().any(|b| line.starts_with(&format!(":{b} ")));
        let builtin_rule = BUILTINS
            .iter()
            .any(|b| line.starts_with(&format!("-A {b} ")));
        if builtin_decl || builtin_rule {
            continue;
        }
        if line == "COMMIT" && out.contains("*filter") && !out.contains("KUBE-IPVS-OUT-FILTER -s") {
            out.push_str(ipvs_rule);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// (table, chain, target, comment) of the built-in jumps in the reference, in reference order.
fn jumps(reference: &str) -> Vec<(String, String, Vec<String>)> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in reference.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        }
        for b in BUILTINS {
            if let Some(rest) = line.strip_prefix(&format!("-A {b} ")) {
                // -m comment --comment "<c>" -j <target>
                let (pre, target) = rest.rsplit_once(" -j ").unwrap();
                let comment = pre
                    .strip_prefix("-m comment --comment \"")
                    .and_then(|c| c.strip_suffix('"'))
                    .unwrap();
                let args = ["-m", "comment", "--comment", comment, "-j", target]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                out.push((table.clone(), b.to_string(), args));
            }
        }
    }
    out
}

/// Chain -> rule lines (`-A` lines) per table of `*-save` text; declared chains present even if empty.
fn chains(save: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut table = String::new();
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            let name = decl.split_whitespace().next().unwrap().to_string();
            out.entry((table.clone(), name)).or_default();
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let chain = rule.split_whitespace().next().unwrap().to_string();
            out.entry((table.clone(), chain))
                .or_default()
                .push(line.to_string());
        }
    }
    out
}

fn real_state(tool: &str) -> BTreeMap<(String, String), Vec<String>> {
    chains(&sh(&format!("{tool}-save -t filter; {tool}-save -t nat")))
}

fn fake_state(
    fake: &mut FakeIptables,
    family: IpFamily,
) -> BTreeMap<(String, String), Vec<String>> {
    let text = fake.save(family, "filter").unwrap() + &fake.save(family, "nat").unwrap();
    chains(&text)
}

/// Runs the kube-proxy sequence for one family on a backend: payload twice, jumps twice.
fn program(
    ipt: &mut dyn Iptables,
    family: IpFamily,
    payload: &str,
    jumps: &[(String, String, Vec<String>)],
) {
    ipt.restore(family, payload).unwrap();
    ipt.restore(family, payload).unwrap();
    for round in 0..2 {
        // Insert in reverse so the first jump of each chain ends up on top, as in the reference.
        for (table, chain, args) in jumps.iter().rev() {
            let inserted = ipt.ensure_rule_first(family, table, chain, args).unwrap();
            assert_eq!(
                inserted,
                round == 0,
                "{table} {chain} {args:?} round {round}"
            );
        }
    }
}

/// What one family's check needs.
struct Case {
    family: IpFamily,
    /// `iptables` or `ip6tables` (for the independent `*-save` reads).
    tool: &'static str,
    reference: &'static str,
    ipvs_rule: &'static str,
    ipvs_saved: &'static str,
    foreign: &'static str,
    foreign_input: &'static str,
}

fn check_family(ipt: &mut dyn Iptables, case: Case) {
    let Case {
        family,
        tool,
        reference,
        ipvs_rule,
        ipvs_saved,
        foreign,
        foreign_input,
    } = case;
    sh(&format!(
        "printf '%s' '{foreign}' | {tool}-restore --noflush"
    ));
    let payload = payload(reference, ipvs_rule);
    let jumps = jumps(reference);
    program(ipt, family, &payload, &jumps);

    // Exactly the reference chains and rules, foreign rules after our jumps, foreign chain kept.
    let real = real_state(tool);
    let mut want = chains(reference);
    want.get_mut(&("filter".to_string(), "KUBE-IPVS-OUT-FILTER".to_string()))
        .unwrap()
        .push(ipvs_saved.to_string());
    want.get_mut(&("filter".to_string(), "INPUT".to_string()))
        .unwrap()
        .push(foreign_input.to_string());
    want.insert(
        ("filter".to_string(), "FOREIGN".to_string()),
        FOREIGN_SAVED
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>(),
    );
    if family == IpFamily::V4 {
        want.get_mut(&("nat".to_string(), "POSTROUTING".to_string()))
            .unwrap()
            .push("-A POSTROUTING -o eth9 -j MASQUERADE".to_string());
    }
    assert_eq!(real, want, "{tool}-save after programming");

    // The fake, replaying the same calls, ends in the same state.
    let mut fake = FakeIptables::new();
    let fake_sets = FakeIpSets::new();
    for line in sh("ipset list -n").lines() {
        let (t, f) = match sh(&format!("ipset list -t {line}")) {
            h if h.contains("bitmap:port") => (IpSetType::BitmapPort, family),
            h if h.contains("family inet6") => (IpSetType::HashIpPort, IpFamily::V6),
            _ => (IpSetType::HashIpPort, IpFamily::V4),
        };
        fake_sets.insert_set(line, t, f, Vec::<String>::new());
    }
    fake.link_ipsets(&fake_sets);
    fake.restore(family, foreign).unwrap();
    program(&mut fake, family, &payload, &jumps);
    assert_eq!(
        fake_state(&mut fake, family),
        real,
        "fake vs kernel ({tool})"
    );

    // A broken payload: error names the line and shows it; the previous rules stay.
    for bad in [
        "-A KUBE-SERVICES -j KUBE-NOT-A-CHAIN",
        "-A KUBE-FORWARD -m set --match-set KUBE-NO-SUCH-SET dst -j ACCEPT",
    ] {
        let mut broken = String::new();
        let mut bad_line = 0;
        let mut in_table = "";
        for (i, line) in payload.lines().enumerate() {
            if let Some(t) = line.strip_prefix('*') {
                in_table = if t == "nat" { "nat" } else { "filter" };
            }
            broken.push_str(line);
            broken.push('\n');
            let wanted_table = if bad.contains("KUBE-SERVICES") {
                "nat"
            } else {
                "filter"
            };
            if bad_line == 0 && in_table == wanted_table && line.starts_with("-A ") {
                broken.push_str(bad);
                broken.push('\n');
                bad_line = i + 2;
            }
        }
        let err = ipt.restore(family, &broken).unwrap_err().to_string();
        println!("restore error ({tool}): {err}");
        assert!(
            err.contains(&bad_line.to_string()),
            "line {bad_line} not named: {err}"
        );
        assert!(err.contains(bad), "line text not shown: {err}");
        assert_eq!(real_state(tool), real, "state changed by a failed restore");
        let fake_err = fake.restore(family, &broken).unwrap_err().to_string();
        assert!(fake_err.contains(bad), "{fake_err}");
    }

    // Deletes: a jump, then the chain it pointed to; referenced chains cannot go; foreign stays.
    let (t, c, args) = jumps
        .iter()
        .find(|(_, c, a)| c == "OUTPUT" && a.last().is_some_and(|t| t == "KUBE-IPVS-OUT-FILTER"))
        .unwrap()
        .clone();
    assert!(ipt.delete_rule(family, &t, &c, &args).unwrap());
    assert!(!ipt.delete_rule(family, &t, &c, &args).unwrap());
    assert!(
        ipt.delete_chain(family, "filter", "KUBE-IPVS-OUT-FILTER")
            .unwrap()
    );
    assert!(
        !ipt.delete_chain(family, "filter", "KUBE-IPVS-OUT-FILTER")
            .unwrap()
    );
    assert!(ipt.delete_chain(family, "nat", "KUBE-SERVICES").is_err());
    assert!(ipt.delete_chain(family, "filter", "INPUT").is_err());
    ipt.ensure_chain(family, "nat", "KUBE-EXTRA").unwrap();
    ipt.ensure_chain(family, "nat", "KUBE-EXTRA").unwrap();
    let after = real_state(tool);
    assert!(!after.contains_key(&("filter".to_string(), "KUBE-IPVS-OUT-FILTER".to_string())));
    assert_eq!(
        after[&("nat".to_string(), "KUBE-EXTRA".to_string())],
        Vec::<String>::new()
    );
    assert_eq!(
        after[&("filter".to_string(), "FOREIGN".to_string())],
        FOREIGN_SAVED
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        after[&("filter".to_string(), "INPUT".to_string())].contains(&foreign_input.to_string())
    );
    // The refused delete left KUBE-SERVICES as it was.
    assert_eq!(
        after[&("nat".to_string(), "KUBE-SERVICES".to_string())],
        real[&("nat".to_string(), "KUBE-SERVICES".to_string())]
    );
}

/// The sets the reference rules match on.
fn create_reference_sets() {
    for s in [
        "KUBE-LOAD-BALANCER hash:ip,port",
        "KUBE-CLUSTER-IP hash:ip,port",
        "KUBE-EXTERNAL-IP hash:ip,port",
        "KUBE-EXTERNAL-IP-LOCAL hash:ip,port",
        "KUBE-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535",
        "KUBE-IPVS-IPS hash:ip",
        "KUBE-NODE-PORT-TCP bitmap:port range 0-65535",
        "KUBE-LOOP-BACK hash:ip,port,ip",
        "KUBE-6-LOAD-BALANCER hash:ip,port family inet6",
        "KUBE-6-CLUSTER-IP hash:ip,port family inet6",
        "KUBE-6-EXTERNAL-IP hash:ip,port family inet6",
        "KUBE-6-EXTERNAL-IP-LOCAL hash:ip,port family inet6",
        "KUBE-6-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535",
        "KUBE-6-IPVS-IPS hash:ip family inet6",
    ] {
        sh(&format!("ipset create {s}"));
    }
}

uml_test!(iptables_backend_on_real_kernel, {
    create_reference_sets();

    // IPv4 through the tools on PATH (legacy in the guest).
    let mut v4 = IptablesCli::new();
    assert!(v4.supports_random_fully());
    check_family(
        &mut v4,
        Case {
            family: IpFamily::V4,
            tool: "iptables",
            reference: REF_V4,
            ipvs_rule: IPVS_RULE_V4,
            ipvs_saved: IPVS_SAVED_V4,
            foreign: FOREIGN_V4,
            foreign_input: "-A INPUT -s 192.0.2.1/32 -j FOREIGN",
        },
    );
    // IPv6 through an explicitly chosen backend.
    let mut v6 = IptablesCli::with_backend(Backend::Legacy);
    check_family(
        &mut v6,
        Case {
            family: IpFamily::V6,
            tool: "ip6tables",
            reference: REF_V6,
            ipvs_rule: IPVS_RULE_V6,
            ipvs_saved: IPVS_SAVED_V6,
            foreign: FOREIGN_V6,
            foreign_input: "-A INPUT -s 2001:db8::1/128 -j FOREIGN",
        },
    );

    // The node's rules are in the legacy backend.
    let d = detect_backend();
    assert_eq!(d.backend, Backend::Legacy, "{d:?}");
    assert!(d.legacy_rules.unwrap_or(0) > 20, "{d:?}");
});

uml_test!(iptables_fingerprint_tracks_rules_not_counters, {
    // The legacy backend's fingerprint (two getsockopt calls per table): equal while the rules are the
    // same whatever their counters, different after any rule change, even one of the same size.
    let mut ipt = IptablesCli::with_backend(Backend::Legacy);
    let v4 = IpFamily::V4;
    // Fresh tables have the size a first read guesses (so it needs one getsockopt call, not two).
    for family in [v4, IpFamily::V6] {
        for table in ["filter", "nat", "mangle"] {
            let size = fingerprint::table_size(family, table);
            assert!(size.is_some(), "{family:?} {table}");
            assert_eq!(
                size,
                fingerprint::fresh_table_size(family, table),
                "{family:?} {table}"
            );
        }
    }
    sh(
        "iptables-legacy -t nat -N KUBE-FP && iptables-legacy -t nat -A KUBE-FP -s 10.0.0.1 -j RETURN",
    );
    sh("iptables-legacy -t filter -N KUBE-FP && iptables-legacy -t filter -A KUBE-FP -j ACCEPT");
    let fp = |ipt: &mut IptablesCli| {
        ipt.fingerprint(v4, &["filter", "nat"])
            .expect("legacy fingerprint")
    };
    let first = fp(&mut ipt);
    assert_eq!(fp(&mut ipt), first, "stable across reads");
    sh("iptables-legacy -t nat -R KUBE-FP 1 -s 10.0.0.1 -j RETURN -c 7 700");
    assert!(
        sh("iptables-legacy -t nat -S KUBE-FP -v").contains("-c 7 700"),
        "counters set"
    );
    assert_eq!(fp(&mut ipt), first, "counters are not rules");
    sh("iptables-legacy -t nat -R KUBE-FP 1 -s 10.0.0.2 -j RETURN");
    let replaced = fp(&mut ipt);
    assert_ne!(replaced, first, "a same-size rule replaced");
    sh("iptables-legacy -t filter -A KUBE-FP -j DROP");
    assert_ne!(fp(&mut ipt), replaced, "a rule added in another table");
    // Order of the tables asked for matters, an unknown table has no fingerprint.
    assert_ne!(
        ipt.fingerprint(v4, &["nat", "filter"]),
        ipt.fingerprint(v4, &["filter", "nat"])
    );
    assert_eq!(ipt.fingerprint(v4, &["nosuchtable"]), None);
    // ip6tables too, counters excluded there as well.
    sh(
        "ip6tables-legacy -t filter -N KUBE-FP6 && ip6tables-legacy -t filter -A KUBE-FP6 -j ACCEPT",
    );
    let v6 = ipt
        .fingerprint(IpFamily::V6, &["filter"])
        .expect("ip6tables legacy fingerprint");
    sh("ip6tables-legacy -t filter -R KUBE-FP6 1 -j ACCEPT -c 9 900");
    assert!(sh("ip6tables-legacy -t filter -S KUBE-FP6 -v").contains("-c 9 900"));
    assert_eq!(ipt.fingerprint(IpFamily::V6, &["filter"]), Some(v6));
    sh("ip6tables-legacy -t filter -A KUBE-FP6 -j DROP");
    assert_ne!(ipt.fingerprint(IpFamily::V6, &["filter"]), Some(v6));
    // The nft backend has none (the UML kernel has no nf_tables to test one against).
    let mut nft = IptablesCli::with_backend(Backend::Nft);
    assert_eq!(nft.fingerprint(v4, &["filter"]), None);
    // Tools of unknown backend have none.
    assert_eq!(IptablesCli::new().fingerprint(v4, &["filter"]), None);
    // The same read names each table's user-defined chains, as iptables-save declares them.
    sh(
        "iptables-legacy -t nat -N KUBE-SERVICES && iptables-legacy -t nat -A PREROUTING -j KUBE-SERVICES",
    );
    sh("iptables-legacy -t filter -N A-CHAIN-NAMED-WITH-28-CHARS1");
    for (family, tool) in [
        (v4, "iptables-legacy-save"),
        (IpFamily::V6, "ip6tables-legacy-save"),
    ] {
        let tables = ["filter", "nat", "mangle"];
        let view = ipt.inspect(family, &tables).expect("legacy tables read");
        assert_eq!(view.fingerprint, ipt.fingerprint(family, &tables).unwrap());
        let saved: BTreeMap<String, BTreeSet<String>> = tables
            .iter()
            .map(|t| (t.to_string(), user_chains(&sh(&format!("{tool} -t {t}")))))
            .collect();
        assert_eq!(view.chains, saved, "{tool}");
        assert!(view.chains["mangle"].is_empty(), "a fresh table: {view:?}");
    }
    assert!(
        ipt.inspect(v4, &["filter"]).unwrap().chains["filter"]
            .contains("A-CHAIN-NAMED-WITH-28-CHARS1")
    );
    sh(
        "iptables-legacy -t nat -D PREROUTING -j KUBE-SERVICES && iptables-legacy -t nat -X KUBE-SERVICES",
    );
    sh("iptables-legacy -t filter -X A-CHAIN-NAMED-WITH-28-CHARS1");
    sh("iptables-legacy -t nat -F KUBE-FP && iptables-legacy -t nat -X KUBE-FP");
    sh("iptables-legacy -t filter -F KUBE-FP && iptables-legacy -t filter -X KUBE-FP");
    sh("ip6tables-legacy -t filter -F KUBE-FP6 && ip6tables-legacy -t filter -X KUBE-FP6");
});

/// The user-defined chains an `*-save` text declares (built-in ones have a policy, ours `-`).
fn user_chains(saved: &str) -> BTreeSet<String> {
    saved
        .lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|d| {
            let mut w = d.split_whitespace();
            let name = w.next()?;
            (w.next() == Some("-")).then(|| name.to_string())
        })
        .collect()
}

/// Rules beyond the reference that the blob decoder reads (every form the planner writes, with and
/// without `!`, and the entry's own conditions), and one it does not (`-m tcp`, in KUBE-EXTRA).
const DECODER_EXTRA_V4: &str = "*filter
:KUBE-EXTRA - [0:0]
-A KUBE-EXTRA -i eth0 -o veth+ -j ACCEPT
-A KUBE-EXTRA ! -i lo ! -o eth1 -j ACCEPT
-A KUBE-EXTRA ! -d 10.1.0.0/16 ! -p udp -j RETURN
-A KUBE-EXTRA -s 10.2.0.0/24
-A KUBE-EXTRA -p sctp -g KUBE-NODE-PORT
-A KUBE-EXTRA -p icmp -m set ! --match-set KUBE-LOOP-BACK dst,dst,src -j ACCEPT
-A KUBE-EXTRA -m set --match-set KUBE-CLUSTER-IP src,dst -j DROP
-A KUBE-EXTRA -m addrtype --src-type LOCAL,BROADCAST ! --dst-type LOCAL -j DROP
-A KUBE-EXTRA -m mark --mark 0x1 -m mark ! --mark 0x10/0xf0 -j ACCEPT
-A KUBE-EXTRA -m conntrack ! --ctstate INVALID,NEW,UNTRACKED -j ACCEPT
-A KUBE-EXTRA -m ipvs --ipvs -j ACCEPT
-A KUBE-EXTRA -m ipvs ! --vaddr 10.0.0.0/8 ! --vport 53 -j ACCEPT
-A KUBE-EXTRA -m physdev --physdev-is-in -j REJECT --reject-with icmp-port-unreachable
-A KUBE-EXTRA -p tcp --dport 22 -j ACCEPT
-A INPUT -m comment --comment \"foreign with a \\\"quote\\\"\" -j ACCEPT
COMMIT
*nat
:KUBE-X - [0:0]
-A KUBE-X -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT
-A KUBE-X -j MARK --set-xmark 0x4000/0xffffffff
-A KUBE-X -j MASQUERADE
-A KUBE-X -o eth9 -j MASQUERADE --random-fully
COMMIT
";

const DECODER_EXTRA_V6: &str = "*filter
:KUBE-EXTRA - [0:0]
-A KUBE-EXTRA -s 2001:db8::/32 ! -d fd00::1/128 -p tcp -j REJECT --reject-with icmp6-port-unreachable
-A KUBE-EXTRA -m set --match-set KUBE-6-CLUSTER-IP dst,dst -m conntrack --ctstate NEW -j RETURN
-A KUBE-EXTRA -m ipvs --vproto 17 --vaddr fd00::50 --vport 53 -j DROP
-A KUBE-EXTRA -p tcp --dport 22 -j ACCEPT
COMMIT
*nat
:KUBE-X - [0:0]
-A KUBE-X -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-X -j MASQUERADE --random-fully
COMMIT
";

/// (table, chain) → policy of each chain an `*-save` text declares.
fn declared(save: &str) -> BTreeMap<(String, String), String> {
    let mut table = String::new();
    let mut out = BTreeMap::new();
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            let mut w = decl.split_whitespace();
            let name = w.next().unwrap().to_string();
            out.insert((table.clone(), name), w.next().unwrap().to_string());
        }
    }
    out
}

uml_test!(blob_decoder_prints_what_iptables_save_prints, {
    create_reference_sets();
    let cases = [
        (
            IpFamily::V4,
            "iptables-legacy",
            REF_V4,
            IPVS_RULE_V4,
            DECODER_EXTRA_V4,
        ),
        (
            IpFamily::V6,
            "ip6tables-legacy",
            REF_V6,
            IPVS_RULE_V6,
            DECODER_EXTRA_V6,
        ),
    ];
    let mut ipt = IptablesCli::with_backend(Backend::Legacy);
    for (family, tool, reference, ipvs_rule, extra) in cases {
        ipt.restore(family, reference).unwrap();
        ipt.restore(family, &payload(reference, ipvs_rule)).unwrap();
        ipt.restore(family, extra).unwrap();
        sh(&format!("{tool} -P FORWARD DROP"));
        let tables = ["filter", "nat", "mangle"];
        let view = ipt.inspect(family, &tables).expect("legacy tables read");
        let decoded = view.decoded.expect("every table's layout understood");
        for table in tables {
            let saved = sh(&format!("{tool}-save -t {table}"));
            let d = &decoded[table];
            // Every chain with its policy, every rule as iptables-save prints it, except the one the
            // decoder does not know, which keeps its place and names its chain.
            assert_eq!(declared(&d.text), declared(&saved), "{tool} {table}");
            let (ours, theirs) = (chains(&d.text), chains(&saved));
            assert_eq!(ours.len(), theirs.len());
            for (key, rules) in &theirs {
                let got = &ours[key];
                assert_eq!(got.len(), rules.len(), "{key:?}: {got:#?}");
                for (g, want) in got.iter().zip(rules) {
                    if want.contains(" -m tcp ") {
                        assert!(g.ends_with(xt_decode::UNDECODED_RULE), "{g}");
                    } else {
                        assert_eq!(g, want, "{tool} {key:?}");
                    }
                }
            }
            let undecoded: BTreeSet<String> = match table {
                "filter" => BTreeSet::from(["KUBE-EXTRA".to_string()]),
                _ => BTreeSet::new(),
            };
            assert_eq!(d.undecoded, undecoded, "{tool} {table}");
        }
        // The fingerprint of the same read is the cheap read's.
        assert_eq!(Some(view.fingerprint), ipt.fingerprint(family, &tables));
    }
});
