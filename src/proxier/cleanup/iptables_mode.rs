//! The iptables mode's leftovers, as upstream's `iptables.CleanupLeftovers` removes them: the jumps it
//! inserts into built-in chains, then, in one `iptables-restore` per table, its top-level chains and its
//! per-Service and per-endpoint chains (`KUBE-SVC-*`, `KUBE-SVL-*`, `KUBE-EXT-*`, `KUBE-FW-*`,
//! `KUBE-SEP-*`), flushed and deleted together.
//!
//! Like upstream it leaves `KUBE-MARK-MASQ` and the filter table's `KUBE-PROXY-FIREWALL` to the IPVS
//! mode's cleanup (both modes create them), and `KUBE-FIREWALL` and the `KUBE-PROXY-CANARY` chains alone.
//! Unlike upstream's single restore, which fails whole when a foreign rule still jumps to one of these
//! chains, a chain some other rule still uses is kept (with the chains it jumps to) and reported as a
//! failure, while the rest goes.

use super::report::{CleanupReport, declared_chains, delete_jump};
use crate::kernel::iptables::Iptables;
use crate::kernel::iptables::rules::{target, tokenize};
use crate::net::IpFamily;
use std::collections::{BTreeMap, BTreeSet};

/// Jump comments of the iptables mode.
const SERVICE_PORTALS: &str = "kubernetes service portals";
const EXTERNAL_PORTALS: &str = "kubernetes externally-visible service portals";
const LB_FIREWALL: &str = "kubernetes load balancer firewall";
/// Matches the iptables mode puts before the comment of some jumps.
const NEW_ONLY: &[&str] = &["-m", "conntrack", "--ctstate", "NEW"];

/// One jump the iptables mode inserts into a built-in chain.
#[derive(Debug, Clone, Copy)]
pub struct Jump {
    pub table: &'static str,
    /// The built-in chain.
    pub from: &'static str,
    /// The iptables mode's chain.
    pub to: &'static str,
    pub comment: &'static str,
    /// Matches before the comment.
    pub before: &'static [&'static str],
}

const fn jump(
    table: &'static str,
    from: &'static str,
    to: &'static str,
    comment: &'static str,
    before: &'static [&'static str],
) -> Jump {
    Jump {
        table,
        from,
        to,
        comment,
        before,
    }
}

const HEALTH_CHECKS: &str = "kubernetes health check service ports";
const FORWARDING: &str = "kubernetes forwarding rules";
const POSTROUTING: &str = "kubernetes postrouting rules";

/// Every jump the iptables mode inserts (upstream's `iptablesJumpChains`).
pub const JUMPS: &[Jump] = &[
    jump(
        "filter",
        "INPUT",
        "KUBE-EXTERNAL-SERVICES",
        EXTERNAL_PORTALS,
        NEW_ONLY,
    ),
    jump(
        "filter",
        "FORWARD",
        "KUBE-EXTERNAL-SERVICES",
        EXTERNAL_PORTALS,
        NEW_ONLY,
    ),
    jump("filter", "INPUT", "KUBE-NODEPORTS", HEALTH_CHECKS, &[]),
    jump(
        "filter",
        "FORWARD",
        "KUBE-SERVICES",
        SERVICE_PORTALS,
        NEW_ONLY,
    ),
    jump(
        "filter",
        "OUTPUT",
        "KUBE-SERVICES",
        SERVICE_PORTALS,
        NEW_ONLY,
    ),
    jump("filter", "FORWARD", "KUBE-FORWARD", FORWARDING, &[]),
    jump(
        "filter",
        "INPUT",
        "KUBE-PROXY-FIREWALL",
        LB_FIREWALL,
        NEW_ONLY,
    ),
    jump(
        "filter",
        "OUTPUT",
        "KUBE-PROXY-FIREWALL",
        LB_FIREWALL,
        NEW_ONLY,
    ),
    jump(
        "filter",
        "FORWARD",
        "KUBE-PROXY-FIREWALL",
        LB_FIREWALL,
        NEW_ONLY,
    ),
    jump("nat", "OUTPUT", "KUBE-SERVICES", SERVICE_PORTALS, &[]),
    jump("nat", "PREROUTING", "KUBE-SERVICES", SERVICE_PORTALS, &[]),
    jump("nat", "POSTROUTING", "KUBE-POSTROUTING", POSTROUTING, &[]),
];

/// The top-level chains removed per table.
pub const CHAINS: &[(&str, &[&str])] = &[
    (
        "nat",
        &["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING"],
    ),
    (
        "filter",
        &[
            "KUBE-SERVICES",
            "KUBE-EXTERNAL-SERVICES",
            "KUBE-FORWARD",
            "KUBE-NODEPORTS",
        ],
    ),
];

/// Prefixes of the per-Service and per-endpoint chains (nat table).
pub const SERVICE_CHAIN_PREFIXES: &[&str] = &[
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
];

/// Whether `chain` of `table` is one the iptables mode creates and its cleanup removes.
pub fn is_iptables_mode_chain(table: &str, chain: &str) -> bool {
    let top_level = CHAINS
        .iter()
        .any(|(t, chains)| *t == table && chains.contains(&chain));
    top_level || (table == "nat" && SERVICE_CHAIN_PREFIXES.iter().any(|p| chain.starts_with(p)))
}

/// Removes one family's iptables-mode jumps and chains.
pub fn cleanup(iptables: &mut dyn Iptables, family: IpFamily, r: &mut CleanupReport) {
    for (table, _) in CHAINS {
        let declared = match iptables.save(family, table) {
            Ok(text) => declared_chains(&text),
            Err(e) => {
                r.failures.push(format!("{} {table}: {e}", family.label()));
                continue;
            }
        };
        // A jump to a missing chain cannot even be named (iptables exits 2).
        for j in JUMPS.iter().filter(|j| j.table == *table) {
            if declared.contains(j.to) {
                let mut args = j.before.to_vec();
                args.extend(["-m", "comment", "--comment", j.comment, "-j", j.to]);
                delete_jump(iptables, family, table, j.from, &args, r);
            }
        }
        delete_chains(iptables, family, table, r);
    }
}

/// Flushes and deletes the table's iptables-mode chains in one restore, but those still in use by a
/// rule of another chain (and the chains those jump to).
fn delete_chains(
    iptables: &mut dyn Iptables,
    family: IpFamily,
    table: &str,
    r: &mut CleanupReport,
) {
    let fam = family.label();
    let saved = match iptables.save(family, table) {
        Ok(text) => text,
        Err(e) => {
            r.failures.push(format!("{fam} {table}: {e}"));
            return;
        }
    };
    let ours: BTreeSet<String> = declared_chains(&saved)
        .into_iter()
        .filter(|c| is_iptables_mode_chain(table, c))
        .collect();
    if ours.is_empty() {
        return;
    }
    let jumps = jumps_of(&saved);
    let (deletable, in_use) = split_in_use(&ours, &jumps);
    for (chain, rule) in &in_use {
        r.failures.push(format!(
            "{fam} {table} chain {chain}: still used by the rule \"{rule}\"; kept, with the chains it jumps to"
        ));
    }
    if deletable.is_empty() {
        return;
    }
    let mut payload = format!("*{table}\n");
    for c in &deletable {
        payload.push_str(&format!(":{c} - [0:0]\n"));
    }
    for c in &deletable {
        payload.push_str(&format!("-X {c}\n"));
    }
    payload.push_str("COMMIT\n");
    match iptables.restore(family, &payload) {
        Ok(()) => r
            .removed
            .extend(deletable.iter().map(|c| format!("{fam} {table} chain {c}"))),
        Err(e) => r
            .failures
            .push(format!("{fam} {table} iptables-mode chains: {e}")),
    }
}

/// (chain, target, rule) of every rule of a saved table that jumps (or goes) to a chain.
fn jumps_of(saved: &str) -> Vec<(String, String, String)> {
    saved
        .lines()
        .filter_map(|l| {
            let words = tokenize(l.strip_prefix("-A ")?).ok()?;
            let to = target(&words)?.to_string();
            Some((words.first()?.clone(), to, l.to_string()))
        })
        .collect()
}

/// `ours` split into the chains that can go and those a rule outside them still uses (chain → one such
/// rule). A kept chain keeps the chains it jumps to.
fn split_in_use(
    ours: &BTreeSet<String>,
    jumps: &[(String, String, String)],
) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut in_use = BTreeMap::new();
    for (from, to, rule) in jumps {
        if ours.contains(to) && !ours.contains(from) {
            in_use.entry(to.clone()).or_insert_with(|| rule.clone());
        }
    }
    let mut kept: BTreeSet<String> = in_use.keys().cloned().collect();
    loop {
        let more: Vec<String> = jumps
            .iter()
            .filter(|(from, to, _)| kept.contains(from) && ours.contains(to) && !kept.contains(to))
            .map(|(_, to, _)| to.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        kept.extend(more);
    }
    (ours.difference(&kept).cloned().collect(), in_use)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::iptables::fake::FakeIptables;

    /// Upstream's iptables-mode tables, as the UML and host-kernel tests load them.
    const LEFTOVERS: &str = include_str!("../../../tests/cleanup_data/iptables-mode-v4.rules");

    fn fake_with_leftovers() -> FakeIptables {
        let ipt = FakeIptables::new();
        ipt.clone()
            .restore(IpFamily::V4, LEFTOVERS)
            .expect("the fake takes upstream's rules");
        ipt
    }

    fn kube_chains(ipt: &FakeIptables, table: &str) -> Vec<String> {
        ipt.chains(IpFamily::V4, table)
            .into_iter()
            .filter(|c| c.starts_with("KUBE-"))
            .collect()
    }

    #[test]
    fn removes_the_iptables_mode_chains_and_jumps() {
        let ipt = fake_with_leftovers();
        let mut r = CleanupReport::default();
        cleanup(&mut ipt.clone(), IpFamily::V4, &mut r);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        // Left to the IPVS mode's cleanup (KUBE-MARK-MASQ, KUBE-PROXY-FIREWALL) or never removed.
        assert_eq!(
            kube_chains(&ipt, "nat"),
            vec!["KUBE-MARK-MASQ", "KUBE-PROXY-CANARY"]
        );
        assert_eq!(
            kube_chains(&ipt, "filter"),
            vec!["KUBE-FIREWALL", "KUBE-PROXY-CANARY", "KUBE-PROXY-FIREWALL"]
        );
        for (table, chain) in [
            ("filter", "INPUT"),
            ("filter", "FORWARD"),
            ("filter", "OUTPUT"),
        ] {
            let rules = ipt.rules(IpFamily::V4, table, chain).unwrap_or_default();
            assert!(
                rules
                    .iter()
                    .all(|r| !r.contains("KUBE-") || r.contains("KUBE-FIREWALL")),
                "{chain}: {rules:?}"
            );
        }
        for chain in ["PREROUTING", "OUTPUT", "POSTROUTING"] {
            assert_eq!(
                ipt.rules(IpFamily::V4, "nat", chain).unwrap_or_default(),
                Vec::<String>::new()
            );
        }
        assert_eq!(
            r.removed.iter().filter(|x| x.contains(" -j ")).count(),
            12,
            "{:?}",
            r.removed
        );
        // One restore per table for the chains.
        assert!(
            r.removed
                .contains(&"IPv4 nat chain KUBE-SEP-SXIVWICOYRO3J4NJ".to_string()),
            "{:?}",
            r.removed
        );
    }

    #[test]
    fn a_foreign_rule_keeps_the_chain_it_uses_and_what_that_jumps_to() {
        let ipt = fake_with_leftovers();
        ipt.clone()
            .restore(
                IpFamily::V4,
                "*nat\n:FOREIGN - [0:0]\n-A FOREIGN -j KUBE-SVC-XPGD46QRK7WJZT7O\nCOMMIT\n",
            )
            .unwrap();
        let mut r = CleanupReport::default();
        cleanup(&mut ipt.clone(), IpFamily::V4, &mut r);
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert!(
            r.failures[0].contains("chain KUBE-SVC-XPGD46QRK7WJZT7O"),
            "{:?}",
            r.failures
        );
        assert_eq!(
            kube_chains(&ipt, "nat"),
            vec![
                "KUBE-MARK-MASQ",
                "KUBE-PROXY-CANARY",
                "KUBE-SEP-SXIVWICOYRO3J4NJ",
                "KUBE-SVC-XPGD46QRK7WJZT7O"
            ]
        );
    }

    #[test]
    fn recognises_the_iptables_mode_chains() {
        assert!(is_iptables_mode_chain("nat", "KUBE-SVC-XPGD46QRK7WJZT7O"));
        assert!(is_iptables_mode_chain("nat", "KUBE-SEP-SXIVWICOYRO3J4NJ"));
        assert!(is_iptables_mode_chain("nat", "KUBE-NODEPORTS"));
        assert!(is_iptables_mode_chain("filter", "KUBE-EXTERNAL-SERVICES"));
        // Shared with the IPVS mode and left to its cleanup, or not kube-proxy's to remove.
        for (t, c) in [
            ("nat", "KUBE-MARK-MASQ"),
            ("filter", "KUBE-PROXY-FIREWALL"),
            ("filter", "KUBE-FIREWALL"),
            ("nat", "KUBE-PROXY-CANARY"),
            ("filter", "KUBE-SVC-XPGD46QRK7WJZT7O"),
            ("nat", "KUBE-NODE-PORT"),
            ("nat", "KUBE-SERVICESX"),
        ] {
            assert!(!is_iptables_mode_chain(t, c), "{t} {c}");
        }
    }

    #[test]
    fn a_chain_in_use_is_kept_with_what_it_jumps_to() {
        let saved = "*nat\n\
            :KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-A - [0:0]\n:KUBE-SVC-B - [0:0]\n:FOREIGN - [0:0]\n\
            -A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-SVC-A\n-A KUBE-SERVICES -d 10.0.0.2/32 -j KUBE-SVC-B\n\
            -A KUBE-SVC-A -j KUBE-SEP-A\n-A FOREIGN -m comment --comment \"x y\" -j KUBE-SVC-A\nCOMMIT\n";
        let ours: BTreeSet<String> = declared_chains(saved)
            .into_iter()
            .filter(|c| is_iptables_mode_chain("nat", c))
            .collect();
        let (deletable, in_use) = split_in_use(&ours, &jumps_of(saved));
        let names = |s: &[&str]| s.iter().map(|c| c.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(deletable, names(&["KUBE-SERVICES", "KUBE-SVC-B"]));
        assert_eq!(
            in_use.get("KUBE-SVC-A").map(String::as_str),
            Some("-A FOREIGN -m comment --comment \"x y\" -j KUBE-SVC-A")
        );
        assert_eq!(in_use.len(), 1);
    }
}
