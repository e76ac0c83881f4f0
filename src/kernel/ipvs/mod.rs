//! IPVS virtual and real servers.
//!
//! `netlink::NetlinkIpvs` is the real backend (generic netlink family "IPVS", see `codec`), `fake::FakeIpvs`
//! the in-memory one. The netlink transport is the shared `crate::kernel::netlink::NlSocket`.

pub mod codec;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod netlink;
pub mod procfs;

use crate::kernel::KernelResult;
use crate::net::Protocol;
use std::net::IpAddr;

/// Persistent (session affinity) service flag.
pub const FLAG_PERSISTENT: u32 = 0x1;
/// Hashed entry flag (set by the kernel on every service).
pub const FLAG_HASHED: u32 = 0x2;
/// Maglev-hash scheduler: include the source port (upstream sets it with `mh`).
pub const FLAG_MH_PORT: u32 = 0x10;

/// Identity of an IPVS virtual server (the family follows from the address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpvsServiceKey {
    pub addr: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

impl std::fmt::Display for IpvsServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{}:{}/{}", a, self.port, self.protocol.as_upper()),
            IpAddr::V6(a) => write!(f, "[{}]:{}/{}", a, self.port, self.protocol.as_upper()),
        }
    }
}

/// An IPVS virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsService {
    pub key: IpvsServiceKey,
    pub scheduler: String,
    /// Service flags (FLAG_*), compared without FLAG_HASHED.
    pub flags: u32,
    /// Persistence timeout in seconds (0 when not persistent).
    pub timeout: u32,
    /// Netmask: 0xffffffff for IPv4, 128 for IPv6.
    pub netmask: u32,
}

/// Traffic counters of one virtual server since it was created (IPVS service statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpvsStats {
    /// Connections scheduled.
    pub conns: u64,
    /// Packets from clients.
    pub inpkts: u64,
    /// Packets to clients.
    pub outpkts: u64,
    /// Bytes from clients.
    pub inbytes: u64,
    /// Bytes to clients.
    pub outbytes: u64,
}

impl std::ops::AddAssign for IpvsStats {
    fn add_assign(&mut self, o: IpvsStats) {
        self.conns = self.conns.saturating_add(o.conns);
        self.inpkts = self.inpkts.saturating_add(o.inpkts);
        self.outpkts = self.outpkts.saturating_add(o.outpkts);
        self.inbytes = self.inbytes.saturating_add(o.inbytes);
        self.outbytes = self.outbytes.saturating_add(o.outbytes);
    }
}

/// Forwarding method of a real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardMethod {
    #[default]
    Masq,
    Local,
    Tunnel,
    Route,
}

/// An IPVS real server of one virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsDestination {
    pub addr: IpAddr,
    pub port: u16,
    pub weight: u32,
    pub forward: ForwardMethod,
    pub upper_threshold: u32,
    pub lower_threshold: u32,
    /// Active connections (read back only).
    pub active_conns: u32,
    /// Inactive connections (read back only).
    pub inactive_conns: u32,
}

impl IpvsDestination {
    /// A masquerading real server with the given weight and no thresholds.
    pub fn masq(addr: IpAddr, port: u16, weight: u32) -> Self {
        IpvsDestination {
            addr,
            port,
            weight,
            forward: ForwardMethod::Masq,
            upper_threshold: 0,
            lower_threshold: 0,
            active_conns: 0,
            inactive_conns: 0,
        }
    }
}

/// IPVS connection timeouts in seconds (0 leaves a value unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpvsTimeouts {
    pub tcp: u32,
    pub tcp_fin: u32,
    pub udp: u32,
}

/// The IPVS table of the kernel.
pub trait Ipvs: Send {
    /// IPVS version string reported by the kernel (e.g. `1.2.1`).
    fn version(&mut self) -> KernelResult<String>;
    /// All virtual servers (one dump).
    fn services(&mut self) -> KernelResult<Vec<IpvsService>>;
    /// One virtual server, looked up by its key (one GET, not a dump); `Ok(None)` when the kernel has
    /// none at `key`.
    fn service(&mut self, key: &IpvsServiceKey) -> KernelResult<Option<IpvsService>>;
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
