//! How a full sync reads the virtual servers: the IPv4 table with the backend's one-call read where it
//! has one, and the netlink dump only when an IPv6 virtual server can matter. The dump lists every
//! family and makes the kernel walk its table from the start for each answer it sends, so it costs
//! more than linear time (about 0.3 s at 10,000 virtual servers, about a minute at 100,000): a
//! dual-stack node that plans no IPv6 virtual server should not pay it on every full sync.

use crate::kernel::KernelResult;
use crate::kernel::ipvs::procfs::ViewSlice;
use crate::kernel::ipvs::{Ipvs, IpvsService};

/// What the reconciler keeps between full syncs about IPv6 virtual servers it did not read.
#[derive(Debug, Default)]
pub(super) struct Ipv6Watch {
    /// Foreign IPv6 virtual servers the last read counted, reported while reads are skipped.
    pub foreign: u64,
    /// A slice of the real-server view showed an IPv6 virtual server since the last read: this or the
    /// next full sync reads them (so one that appears behind our back is read within one pass of the
    /// view).
    seen: bool,
    /// A slice of the current pass over the view showed an IPv6 virtual server.
    seen_in_pass: bool,
}

impl Ipv6Watch {
    /// Notes whether this full sync's slice of the real-server view showed an IPv6 virtual server; a
    /// pass that showed none ends with no foreign IPv6 virtual server to report.
    pub fn observe(&mut self, view: &ViewSlice) {
        if view.from_start {
            self.seen_in_pass = false;
        }
        let shown = view.shown.keys().any(|k| k.addr.is_ipv6());
        self.seen |= shown;
        self.seen_in_pass |= shown;
        if view.at_end && !self.seen_in_pass {
            self.foreign = 0;
        }
    }

    /// Whether this full sync must read the IPv6 virtual servers: the node syncs IPv6 and either no
    /// full sync has read them yet, the family plans or has applied a virtual server, or the view
    /// showed one.
    pub fn needed(&self, i: &Ipv6Inputs) -> bool {
        i.synced && (self.seen || !i.read_before || i.planned || i.applied)
    }

    /// Notes a read of the virtual servers: one that included IPv6 answers what the view showed.
    pub fn read(&mut self, ipv6_read: bool) {
        self.seen &= !ipv6_read;
    }
}

/// The virtual servers a full sync read, and whether the IPv6 ones are among them.
pub(super) struct ServicesRead {
    pub services: Vec<IpvsService>,
    pub ipv6_read: bool,
}

/// What decides whether a full sync reads the IPv6 virtual servers.
pub(super) struct Ipv6Inputs {
    /// The node syncs IPv6.
    pub synced: bool,
    /// A full sync has read and applied IPv6 before.
    pub read_before: bool,
    /// The IPv6 plan has a virtual server.
    pub planned: bool,
    /// An IPv6 virtual server was applied.
    pub applied: bool,
}

/// Every virtual server the sync needs: the dump when `ipv6` is needed (or the node syncs no IPv4),
/// else the backend's IPv4 read (the dump if it has none or it fails).
pub(super) fn read_services(
    ipvs: &mut dyn Ipvs,
    has_v4: bool,
    ipv6: bool,
) -> KernelResult<ServicesRead> {
    if has_v4 && !ipv6 {
        match ipvs.ipv4_services() {
            Ok(Some(services)) => {
                return Ok(ServicesRead {
                    services,
                    ipv6_read: false,
                });
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "IPv4 virtual servers not read in one call; dumping")
            }
        }
    }
    Ok(ServicesRead {
        services: ipvs.services()?,
        ipv6_read: true,
    })
}
