//! Removing kube-proxy's kernel state, as upstream's `platformCleanup` does: with `--cleanup`, every
//! mode's leftovers ([`cleanup_every_mode`]); at the start of the IPVS proxier (and of `--init-only`),
//! only what the IPVS mode cannot be using, the nftables mode's tables ([`nftables_mode::cleanup`]).
//!
//! One module per mode, each removing exactly what that mode of upstream creates and no more: nothing
//! that is not kube-proxy's is touched.

pub mod iptables_mode;
pub mod ipvs_mode;
pub mod nftables_mode;
mod report;

pub use ipvs_mode::{CHAINS, JUMPS, cleanup_leftovers};
pub use report::{CleanupError, CleanupReport};

use crate::kernel::ipset::IpSets;
use crate::kernel::iptables::Iptables;
use crate::kernel::ipvs::Ipvs;
use crate::kernel::link::Links;
use crate::kernel::nftables::NfTables;
use crate::net::IpFamily;

/// The kernel backends `--cleanup` works through.
pub struct LeftoverBackends<'a> {
    /// None where the kernel has no IPVS: no virtual server can exist there.
    pub ipvs: Option<&'a mut dyn Ipvs>,
    pub links: &'a mut dyn Links,
    pub iptables: &'a mut dyn Iptables,
    pub ipsets: &'a mut dyn IpSets,
    pub nftables: &'a mut dyn NfTables,
}

/// `--cleanup`: the iptables mode's chains and jumps, then the IPVS mode's state, then the nftables mode's
/// tables (upstream's order: the IPVS mode's `KUBE-MARK-MASQ` can only go once the iptables mode's
/// service chains that jump to it are gone). `families` are the iptables families to clean.
pub fn cleanup_every_mode(
    b: LeftoverBackends<'_>,
    families: &[IpFamily],
) -> Result<CleanupReport, CleanupError> {
    let mut r = CleanupReport::default();
    for &family in families {
        iptables_mode::cleanup(b.iptables, family, &mut r);
    }
    ipvs_mode::cleanup(b.ipvs, b.links, b.iptables, b.ipsets, families, &mut r);
    nftables_mode::cleanup(b.nftables, &mut r);
    r.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ipset::fake::FakeIpSets;
    use crate::kernel::iptables::fake::FakeIptables;
    use crate::kernel::ipvs::fake::FakeIpvs;
    use crate::kernel::link::fake::FakeLinks;
    use crate::kernel::nftables::fake::FakeNfTables;

    const IPTABLES_MODE: &str = include_str!("../../../tests/cleanup_data/iptables-mode-v4.rules");

    #[test]
    fn every_mode_in_upstreams_order() {
        let ipt = FakeIptables::new();
        ipt.clone().restore(IpFamily::V4, IPTABLES_MODE).unwrap();
        let nft = FakeNfTables::new();
        nft.add(
            IpFamily::V4,
            nftables_mode::TABLE,
            Some(nftables_mode::TABLE_COMMENT),
        );
        nft.add(IpFamily::V4, "filter", None);
        let report = cleanup_every_mode(
            LeftoverBackends {
                ipvs: Some(&mut FakeIpvs::new()),
                links: &mut FakeLinks::new(),
                iptables: &mut ipt.clone(),
                ipsets: &mut FakeIpSets::new(),
                nftables: &mut nft.clone(),
            },
            &[IpFamily::V4],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // KUBE-MARK-MASQ (the IPVS mode's cleanup) goes only because the iptables mode's service chains
        // jumping to it went first.
        for table in ["nat", "filter"] {
            let left: Vec<String> = ipt
                .chains(IpFamily::V4, table)
                .into_iter()
                .filter(|c| c.starts_with("KUBE-"))
                .collect();
            let expected: &[&str] = match table {
                "nat" => &["KUBE-PROXY-CANARY"],
                _ => &["KUBE-FIREWALL", "KUBE-PROXY-CANARY"],
            };
            assert_eq!(left, expected, "{table}");
        }
        assert!(
            report
                .removed
                .contains(&"nftables table ip kube-proxy".to_string())
        );
        assert_eq!(nft.names(), vec![(IpFamily::V4, "filter".to_string())]);
    }

    #[test]
    fn without_ipvs_the_rest_is_still_cleaned() {
        let nft = FakeNfTables::new();
        nft.add(
            IpFamily::V6,
            nftables_mode::TABLE,
            Some(nftables_mode::TABLE_COMMENT),
        );
        let report = cleanup_every_mode(
            LeftoverBackends {
                ipvs: None,
                links: &mut FakeLinks::new(),
                iptables: &mut FakeIptables::new(),
                ipsets: &mut FakeIpSets::new(),
                nftables: &mut nft.clone(),
            },
            &[IpFamily::V4],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            report.removed,
            vec!["nftables table ip6 kube-proxy".to_string()]
        );
    }
}
