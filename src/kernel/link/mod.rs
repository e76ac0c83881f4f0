//! The kube-ipvs0 dummy link, its addresses and the node's local addresses (rtnetlink).

pub mod changes;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod rtnetlink;

use crate::kernel::KernelResult;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Name of the dummy device that holds service addresses.
pub const DUMMY_DEVICE: &str = "kube-ipvs0";

/// Links and addresses of the kernel.
pub trait Links: Send {
    /// Creates the dummy link `name` if missing (left down); true if created.
    fn ensure_dummy(&mut self, name: &str) -> KernelResult<bool>;
    /// Addresses on one link; NotFound if the link does not exist.
    fn addresses(&mut self, name: &str) -> KernelResult<Vec<IpAddr>>;
    /// Binds `ip` as /32 or /128 to `name`; Ok(false) if it was already bound.
    fn add_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool>;
    /// Unbinds `ip` from `name`; Ok(false) if it was not bound.
    fn del_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool>;
    /// Binds many addresses to `name`: one result per address, in order (Ok(false): already bound). The
    /// real backend pipelines the requests (hundreds per datagram, acknowledgements read in batches, each
    /// error attributed to its address by sequence number); the default binds them one by one.
    fn add_addresses(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        ips.iter().map(|ip| self.add_address(name, *ip)).collect()
    }
    /// Unbinds many addresses from `name`, like [`Links::add_addresses`] (Ok(false): was not bound).
    fn del_addresses(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        ips.iter().map(|ip| self.del_address(name, *ip)).collect()
    }
    /// The addresses of link `name` bound with scope host (the others have scope global); NotFound if the
    /// link does not exist.
    fn host_scoped(&mut self, name: &str) -> KernelResult<BTreeSet<IpAddr>>;
    /// Binds many addresses to `name` with scope host, like [`Links::add_addresses`] (Ok(false): already
    /// bound, whatever its scope). With `arp_ignore` 3 the node answers no ARP request for them.
    fn add_host_scoped(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>>;
    /// Every address of every link with the link's name, in one dump.
    fn local_addresses(&mut self) -> KernelResult<Vec<(String, IpAddr)>>;
    /// Like [`Links::local_addresses`] without the addresses of link `except`: what an event-driven sync
    /// reads, so its cost does not grow with the service addresses bound to kube-ipvs0.
    fn local_addresses_except(&mut self, except: &str) -> KernelResult<Vec<(String, IpAddr)>> {
        let mut all = self.local_addresses()?;
        all.retain(|(name, _)| name != except);
        Ok(all)
    }
    /// Deletes a link; Ok(false) if it did not exist.
    fn delete_link(&mut self, name: &str) -> KernelResult<bool>;
}
