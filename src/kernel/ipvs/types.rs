//! The values the IPVS backends read and write: virtual servers, real servers, their counters and the
//! connection timeouts.

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
