//! IPVS virtual servers and their real servers, as upstream's `syncService` / `syncEndpoint` build them.

use crate::cluster::model::{Endpoint, Protocol, ServicePort};
use crate::kernel::ipvs::{FLAG_PERSISTENT, IpvsDestination, IpvsService, IpvsServiceKey};
use crate::net::IpFamily;
use crate::scheduler::{SCHED_FLAGS_MASK, Scheduler};
use std::net::IpAddr;

pub use crate::proxier::desired::Destinations;

/// Netmask IPVS reports for a virtual server of `family`.
pub fn netmask(family: IpFamily) -> u32 {
    match family {
        IpFamily::V4 => 0xffff_ffff,
        IpFamily::V6 => 128,
    }
}

/// Flags and timeout shared by every virtual server of one service port.
#[derive(Debug, Clone, Copy)]
pub struct VsTemplate<'a> {
    pub scheduler: &'a str,
    pub flags: u32,
    pub timeout: u32,
    pub netmask: u32,
    pub protocol: Protocol,
}

impl<'a> VsTemplate<'a> {
    /// Template for `svc` with `scheduler`: persistence for ClientIP affinity and the scheduler's
    /// default flags (mh-port for `mh`, as upstream).
    pub fn new(svc: &ServicePort, scheduler: Scheduler, family: IpFamily) -> Self {
        let mut flags = 0;
        let mut timeout = 0;
        if let Some(t) = svc.session_affinity_timeout {
            flags |= FLAG_PERSISTENT;
            timeout = t;
        }
        flags |= scheduler.default_flags();
        VsTemplate {
            scheduler: scheduler.name(),
            flags,
            timeout,
            netmask: netmask(family),
            protocol: svc.protocol,
        }
    }

    /// This template with scheduler `flags` added (a Service's annotated flags).
    pub fn with_scheduler_flags(mut self, flags: u32) -> Self {
        self.flags |= flags & SCHED_FLAGS_MASK;
        self
    }

    /// The virtual server at `addr:port`.
    pub fn at(&self, addr: IpAddr, port: u16) -> IpvsService {
        IpvsService {
            key: IpvsServiceKey {
                addr,
                port,
                protocol: self.protocol,
            },
            scheduler: self.scheduler.to_string(),
            flags: self.flags,
            timeout: self.timeout,
            netmask: self.netmask,
        }
    }
}

/// Masquerading weight-1 real servers for `endpoints` (duplicates collapse).
pub fn destinations(endpoints: &[&Endpoint]) -> Destinations {
    endpoints
        .iter()
        .map(|e| ((e.ip, e.port), IpvsDestination::masq(e.ip, e.port, 1)))
        .collect()
}
