//! nf_tables tables, as far as cleaning up after nftables-mode kube-proxy needs: look one table up by name
//! (its handle and comment tell whose it is) and delete it whole, chains, sets, maps and rules with it.

pub mod codec;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod netlink;

use crate::kernel::KernelResult;
use crate::net::IpFamily;

/// One nf_tables table of the `ip` (IPv4) or `ip6` (IPv6) family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftTable {
    pub family: IpFamily,
    pub name: String,
    /// The kernel's handle: deleting by handle deletes this table and no other of the same name.
    pub handle: u64,
    /// The table's comment (`comment "..."` in `nft list`), if it has one.
    pub comment: Option<String>,
}

/// The nf_tables tables of the kernel.
pub trait NfTables: Send {
    /// The table `name` of `family`, or None if there is none.
    fn table(&mut self, family: IpFamily, name: &str) -> KernelResult<Option<NftTable>>;
    /// Deletes the table of `family` with `handle` and everything in it; Ok(false) if it was gone.
    fn delete_table(&mut self, family: IpFamily, handle: u64) -> KernelResult<bool>;
}

/// The nftables family keyword of `family` (`ip`, `ip6`), as `nft` writes it.
pub fn family_keyword(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}
