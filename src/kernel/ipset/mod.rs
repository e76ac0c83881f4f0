//! ipsets: the backend trait, entry validation, and two real backends: the kernel's ipset netlink
//! protocol (what the daemon uses) and the `ipset` tool (fallback).

mod backend;
mod spec;

pub use backend::{ApplyReport, IpSets};
pub use spec::{IpSetOp, IpSetSize, IpSetSpec, IpSetType};

pub mod cli;
pub mod codec;
pub mod entry;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod netlink;
pub mod save;
pub mod text;
pub mod types;

/// The real backend for this node: netlink; the `ipset` tool when the kernel's ipset protocol is one
/// the netlink codec does not speak (it speaks 6 and 7: every kernel since 2.6.39; the tool follows the
/// distribution's kernel, so it can keep working if a future kernel drops protocol 6).
pub fn real_ipsets() -> Box<dyn IpSets> {
    match netlink::NetlinkIpSets::new() {
        Ok(n) => Box::new(n),
        Err(e) => {
            tracing::warn!(error = %e, "ipset netlink unavailable, falling back to the ipset tool");
            Box::new(cli::IpsetCli::new())
        }
    }
}
