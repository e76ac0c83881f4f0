//! IPVS virtual and real servers.
//!
//! `netlink::NetlinkIpvs` is the real backend (generic netlink family "IPVS", see `codec`), `fake::FakeIpvs`
//! the in-memory one. The netlink transport is the shared `crate::kernel::netlink::NlSocket`.

pub mod codec;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod netlink;
pub mod procfs;
pub mod sockopt;
mod types;

pub use types::{
    FLAG_HASHED, FLAG_MH_PORT, FLAG_PERSISTENT, ForwardMethod, IpvsDestination, IpvsService,
    IpvsServiceKey, IpvsStats, IpvsTimeouts,
};

use crate::kernel::KernelResult;
use std::net::IpAddr;

/// The IPVS table of the kernel.
pub trait Ipvs: Send {
    /// IPVS version string reported by the kernel (e.g. `1.2.1`).
    fn version(&mut self) -> KernelResult<String>;
    /// All virtual servers (one dump).
    fn services(&mut self) -> KernelResult<Vec<IpvsService>>;
    /// One virtual server, looked up by its key (one GET, not a dump); `Ok(None)` when the kernel has
    /// none at `key`.
    fn service(&mut self, key: &IpvsServiceKey) -> KernelResult<Option<IpvsService>>;
    /// The IPv4 virtual servers, where the backend has a cheaper read of them than [`Ipvs::services`]
    /// (the real one: one `getsockopt` for the whole table). `Ok(None)`: no such read (the default).
    fn ipv4_services(&mut self) -> KernelResult<Option<Vec<IpvsService>>> {
        Ok(None)
    }
    fn add_service(&mut self, svc: &IpvsService) -> KernelResult<()>;
    fn update_service(&mut self, svc: &IpvsService) -> KernelResult<()>;
    fn delete_service(&mut self, key: &IpvsServiceKey) -> KernelResult<()>;
    /// All real servers of one virtual server (one dump).
    fn destinations(&mut self, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>>;
    fn add_destination(&mut self, key: &IpvsServiceKey, dst: &IpvsDestination) -> KernelResult<()>;
    fn update_destination(
        &mut self,
        key: &IpvsServiceKey,
        dst: &IpvsDestination,
    ) -> KernelResult<()>;
    fn delete_destination(
        &mut self,
        key: &IpvsServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> KernelResult<()>;
    /// Removes every virtual server (only `--cleanup` calls this).
    fn flush(&mut self) -> KernelResult<()>;
    fn set_timeouts(&mut self, t: IpvsTimeouts) -> KernelResult<()>;

    /// Every virtual server's real servers in one read, without their thresholds (they read as 0): a
    /// quick view a full sync compares first, dumping only the virtual servers that differ from the plan.
    /// `Ok(None)`: this backend has no such view (the default).
    fn destination_view(&mut self) -> KernelResult<Option<procfs::DestinationView>> {
        Ok(None)
    }

    /// The next part of the quick view ([`procfs::ProcView::read_slice`]): at least `max_services`
    /// virtual servers, continuing where the last slice stopped, from the top after one that reached
    /// the end. By default the whole view as one slice. `Ok(None)`: this backend has no view.
    fn destination_slice(
        &mut self,
        max_services: usize,
    ) -> KernelResult<Option<procfs::ViewSlice>> {
        let _ = max_services;
        Ok(self.destination_view()?.map(procfs::ViewSlice::whole))
    }

    /// Every virtual server with its traffic counters (one dump). Backends without counters answer
    /// Unsupported.
    fn services_with_stats(&mut self) -> KernelResult<Vec<(IpvsServiceKey, IpvsStats)>> {
        Err(crate::kernel::KernelError::Unsupported(
            "IPVS statistics are not available from this backend".into(),
        ))
    }

    /// Applies many changes and returns one result per change, in order; a failed change does not stop
    /// the others. The outer error means the transport itself failed. The netlink backend sends several
    /// changes per datagram; this default applies them one by one.
    fn apply(&mut self, ops: &[IpvsOp]) -> KernelResult<Vec<KernelResult<()>>> {
        Ok(ops
            .iter()
            .map(|op| match op {
                IpvsOp::AddService(s) => self.add_service(s),
                IpvsOp::UpdateService(s) => self.update_service(s),
                IpvsOp::DeleteService(k) => self.delete_service(k),
                IpvsOp::AddDestination(k, d) => self.add_destination(k, d),
                IpvsOp::UpdateDestination(k, d) => self.update_destination(k, d),
                IpvsOp::DeleteDestination(k, a, p) => self.delete_destination(k, *a, *p),
            })
            .collect())
    }
}

/// One change to the IPVS table, for [`Ipvs::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpvsOp {
    AddService(IpvsService),
    UpdateService(IpvsService),
    DeleteService(IpvsServiceKey),
    AddDestination(IpvsServiceKey, IpvsDestination),
    UpdateDestination(IpvsServiceKey, IpvsDestination),
    DeleteDestination(IpvsServiceKey, IpAddr, u16),
}

impl std::fmt::Display for IpvsOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpvsOp::AddService(s) => write!(f, "add IPVS service {}", s.key),
            IpvsOp::UpdateService(s) => write!(f, "update IPVS service {}", s.key),
            IpvsOp::DeleteService(k) => write!(f, "delete IPVS service {k}"),
            IpvsOp::AddDestination(k, d) => {
                write!(f, "add destination {}:{} to {k}", d.addr, d.port)
            }
            IpvsOp::UpdateDestination(k, d) => {
                write!(f, "update destination {}:{} of {k}", d.addr, d.port)
            }
            IpvsOp::DeleteDestination(k, a, p) => write!(f, "delete destination {a}:{p} of {k}"),
        }
    }
}
