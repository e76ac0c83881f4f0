//! The IPVS mode's leftovers: everything IPVS-mode kube-proxy creates (upstream's
//! `ipvs.CleanupLeftovers`).
//!
//! The only place that flushes the IPVS table. Order: IPVS flush, kube-ipvs0, built-in-chain jumps, our
//! chains (flushed and deleted, referrers first), then our ipsets (they can only go once no rule uses them).

use super::report::{CleanupError, CleanupReport, declared_chains, delete_jump};
use crate::kernel::KernelError;
use crate::kernel::ipset::IpSets;
use crate::kernel::iptables::Iptables;
use crate::kernel::ipvs::Ipvs;
use crate::kernel::link::{DUMMY_DEVICE, Links};
use crate::net::IpFamily;
use crate::proxier::plan::ipsets::staging_name;
use crate::proxier::reconcile::ownership::{SET_BASES, set_name};
use std::collections::BTreeSet;

/// (table, built-in chain, our chain, comment) of every jump kube-proxy inserts.
pub const JUMPS: &[(&str, &str, &str, &str)] = &[
    (
        "nat",
        "OUTPUT",
        "KUBE-SERVICES",
        "kubernetes service portals",
    ),
    (
        "nat",
        "PREROUTING",
        "KUBE-SERVICES",
        "kubernetes service portals",
    ),
    (
        "nat",
        "POSTROUTING",
        "KUBE-POSTROUTING",
        "kubernetes postrouting rules",
    ),
    (
        "filter",
        "FORWARD",
        "KUBE-FORWARD",
        "kubernetes forwarding rules",
    ),
    (
        "filter",
        "INPUT",
        "KUBE-NODE-PORT",
        "kubernetes health check rules",
    ),
    (
        "filter",
        "INPUT",
        "KUBE-PROXY-FIREWALL",
        "kube-proxy firewall rules",
    ),
    (
        "filter",
        "FORWARD",
        "KUBE-PROXY-FIREWALL",
        "kube-proxy firewall rules",
    ),
    (
        "filter",
        "INPUT",
        "KUBE-IPVS-FILTER",
        "kubernetes ipvs access filter",
    ),
    (
        "filter",
        "OUTPUT",
        "KUBE-IPVS-OUT-FILTER",
        "kubernetes ipvs access filter",
    ),
];

/// Our chains per table, chains that jump to others first.
pub const CHAINS: &[(&str, &[&str])] = &[
    (
        "nat",
        &[
            "KUBE-SERVICES",
            "KUBE-NODE-PORT",
            "KUBE-LOAD-BALANCER",
            "KUBE-POSTROUTING",
            "KUBE-MARK-MASQ",
        ],
    ),
    (
        "filter",
        &[
            "KUBE-PROXY-FIREWALL",
            "KUBE-SOURCE-RANGES-FIREWALL",
            "KUBE-FORWARD",
            "KUBE-NODE-PORT",
            "KUBE-IPVS-FILTER",
            "KUBE-IPVS-OUT-FILTER",
        ],
    ),
];

/// Removes the IPVS mode's kernel state alone. `families` are the iptables families to clean (IPv4 and,
/// where ip6tables exists, IPv6); ipsets of both families are always destroyed.
pub fn cleanup_leftovers(
    ipvs: &mut dyn Ipvs,
    links: &mut dyn Links,
    iptables: &mut dyn Iptables,
    ipsets: &mut dyn IpSets,
    families: &[IpFamily],
) -> Result<CleanupReport, CleanupError> {
    let mut r = CleanupReport::default();
    cleanup(Some(ipvs), links, iptables, ipsets, families, &mut r);
    r.into_result()
}

/// [`cleanup_leftovers`] into an existing report; `ipvs` is None where the kernel has no IPVS (nothing
/// to flush there).
pub(super) fn cleanup(
    ipvs: Option<&mut dyn Ipvs>,
    links: &mut dyn Links,
    iptables: &mut dyn Iptables,
    ipsets: &mut dyn IpSets,
    families: &[IpFamily],
    r: &mut CleanupReport,
) {
    if let Some(ipvs) = ipvs {
        r.record("IPVS table flush".into(), ipvs.flush().map(|()| true));
    }
    r.record(
        format!("link {DUMMY_DEVICE}"),
        links.delete_link(DUMMY_DEVICE),
    );
    for &family in families {
        cleanup_iptables(iptables, family, r);
    }
    for family in [IpFamily::V4, IpFamily::V6] {
        for base in SET_BASES {
            let name = set_name(family, base);
            // The staging set of a grow a stopped process left unfinished, if any.
            for name in [staging_name(&name), name] {
                r.record(
                    format!("ipset {name}"),
                    ipsets.destroy(&name).map(|()| true),
                );
            }
        }
    }
}

/// Our jumps from built-in chains, then our chains, of one family's tables.
fn cleanup_iptables(iptables: &mut dyn Iptables, family: IpFamily, r: &mut CleanupReport) {
    let fam = family.label();
    // Chains present per table: a jump to a missing chain cannot even be named (iptables exits 2).
    let mut present: Vec<(&str, BTreeSet<String>)> = Vec::new();
    for (table, _) in CHAINS {
        match iptables.save(family, table) {
            Ok(text) => present.push((table, declared_chains(&text))),
            Err(e) => r.failures.push(format!("{fam} {table}: {e}")),
        }
    }
    let exists = |table: &str, chain: &str| {
        present
            .iter()
            .any(|(t, chains)| *t == table && chains.contains(chain))
    };
    for (table, chain, target, comment) in JUMPS {
        if !exists(table, target) {
            continue;
        }
        let args = ["-m", "comment", "--comment", comment, "-j", target];
        delete_jump(iptables, family, table, chain, &args, r);
    }
    for (table, chains) in CHAINS {
        let mut left: Vec<&str> = chains
            .iter()
            .copied()
            .filter(|c| exists(table, c))
            .collect();
        // Two passes: a chain still referenced by one deleted later succeeds the second time.
        for pass in 0..2 {
            let mut again = Vec::new();
            for chain in left {
                match iptables.delete_chain(family, table, chain) {
                    Ok(true) => r.removed.push(format!("{fam} {table} chain {chain}")),
                    Ok(false) | Err(KernelError::NotFound(_)) => {}
                    Err(e) if pass == 0 => {
                        tracing::debug!(chain, error = %e, "Chain delete failed, retrying");
                        again.push(chain);
                    }
                    Err(e) => r.failures.push(format!("{fam} {table} chain {chain}: {e}")),
                }
            }
            left = again;
        }
    }
}
