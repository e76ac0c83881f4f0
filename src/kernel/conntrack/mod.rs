//! UDP conntrack cleanup over netlink.

#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod netlink;

use crate::kernel::KernelResult;
use crate::net::IpFamily;
use std::net::IpAddr;

/// One conntrack flow, reduced to what stale-entry cleanup needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConntrackFlow {
    pub orig_src: IpAddr,
    pub orig_sport: u16,
    pub orig_dst: IpAddr,
    pub orig_dport: u16,
    pub reply_src: IpAddr,
    pub reply_sport: u16,
}

/// The kernel's conntrack table (UDP flows only).
pub trait Conntrack: Send {
    /// All UDP flows of a family (one dump).
    fn udp_flows(&mut self, family: IpFamily) -> KernelResult<Vec<ConntrackFlow>>;
    /// Deletes one flow; Ok(false) if it was already gone.
    fn delete(&mut self, flow: &ConntrackFlow) -> KernelResult<bool>;
}
