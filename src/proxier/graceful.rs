//! Graceful termination of IPVS real servers.
//!
//! A TCP real server that leaves the plan while it still has connections is set to weight 0 (no new
//! connections) and queued; [`GracefulTermination::check`] deletes it once its active and inactive connection
//! counters are both zero, or, with a maximum drain time set (`--ipvs-max-drain-time`; off by default, as
//! upstream), once it has drained that long. UDP and SCTP real servers, and TCP ones without connections,
//! are deleted at once. An endpoint that comes back while queued is taken out of the queue (the
//! reconciler restores its weight).

use crate::cluster::model::Protocol;
use crate::kernel::ipvs::{Ipvs, IpvsDestination, IpvsServiceKey};
use crate::kernel::{KernelError, KernelResult};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How often production calls [`GracefulTermination::check`].
pub const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// What should happen to a real server that left the plan (see [`GracefulTermination::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Delete it now.
    Delete,
    /// Set its weight to 0 and queue it.
    Drain,
    /// Already weight 0: queue it without a write.
    Queue,
}

/// Result of one periodic check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GracefulCheck {
    /// Real servers deleted because their connections drained.
    pub deleted: usize,
    /// Real servers still queued.
    pub pending: usize,
    /// Kernel operations that failed (retried on the next check).
    pub failures: usize,
    /// Of `deleted`, real servers removed with connections left, having drained the maximum time.
    pub forced: usize,
}

/// Draining real servers: virtual server → (address, port) → when draining started.
pub type DrainQueue = BTreeMap<IpvsServiceKey, BTreeMap<(IpAddr, u16), Instant>>;

/// The queue of draining real servers.
#[derive(Debug, Default)]
pub struct GracefulTermination {
    queue: DrainQueue,
    /// Longest a real server drains before it is removed anyway (`None`: until its connections end).
    max_drain: Option<Duration>,
}

fn delete_dest(
    ipvs: &mut dyn Ipvs,
    vs: &IpvsServiceKey,
    addr: IpAddr,
    port: u16,
) -> KernelResult<()> {
    match ipvs.delete_destination(vs, addr, port) {
        Ok(()) | Err(KernelError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

impl GracefulTermination {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes real servers that drained `max` even with connections left (`None`: never).
    pub fn set_max_drain(&mut self, max: Option<Duration>) {
        self.max_drain = max;
    }

    /// Every draining real server with the time its drain started.
    pub fn queue(&self) -> &DrainQueue {
        &self.queue
    }

    /// Number of queued real servers.
    pub fn len(&self) -> usize {
        self.queue.values().map(BTreeMap::len).sum()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether this real server is draining.
    pub fn contains(&self, vs: &IpvsServiceKey, addr: IpAddr, port: u16) -> bool {
        self.queue
            .get(vs)
            .is_some_and(|m| m.contains_key(&(addr, port)))
    }

    /// Decides what to do with a real server `dst` (as dumped, with its counters) that is no longer planned.
    pub fn decide(vs: &IpvsServiceKey, dst: &IpvsDestination) -> Removal {
        if vs.protocol != Protocol::Tcp || dst.active_conns + dst.inactive_conns == 0 {
            Removal::Delete
        } else if dst.weight == 0 {
            Removal::Queue
        } else {
            Removal::Drain
        }
    }

    /// Queues a draining real server (after its weight was set to 0).
    pub fn enqueue(&mut self, vs: &IpvsServiceKey, addr: IpAddr, port: u16) {
        self.queue
            .entry(*vs)
            .or_default()
            .entry((addr, port))
            .or_insert_with(Instant::now);
    }

    /// Takes a real server out of the queue (its endpoint came back); true if it was queued.
    pub fn dequeue(&mut self, vs: &IpvsServiceKey, addr: IpAddr, port: u16) -> bool {
        let Some(m) = self.queue.get_mut(vs) else {
            return false;
        };
        let found = m.remove(&(addr, port)).is_some();
        if m.is_empty() {
            self.queue.remove(vs);
        }
        found
    }

    /// Forgets every queued real server of a virtual server that was deleted.
    pub fn forget_service(&mut self, vs: &IpvsServiceKey) {
        self.queue.remove(vs);
    }

    /// Deletes queued real servers whose connections drained, or that drained the maximum time (one
    /// destination dump per virtual server).
    pub fn check(&mut self, ipvs: &mut dyn Ipvs) -> GracefulCheck {
        let mut out = GracefulCheck::default();
        let services: Vec<IpvsServiceKey> = self.queue.keys().copied().collect();
        for vs in services {
            let dests = match ipvs.destinations(&vs) {
                Ok(d) => d,
                Err(KernelError::NotFound(_)) => {
                    self.queue.remove(&vs);
                    continue;
                }
                Err(e) => {
                    tracing::error!(virtualServer = %vs, error = %e, "Failed to list real servers for graceful termination");
                    out.failures += 1;
                    continue;
                }
            };
            let Some(queued) = self.queue.get_mut(&vs) else {
                continue;
            };
            let max = self.max_drain;
            queued.retain(|&(addr, port), since| {
                let Some(d) = dests.iter().find(|d| d.addr == addr && d.port == port) else {
                    return false;
                };
                if d.weight != 0 {
                    return false;
                }
                let busy = d.active_conns + d.inactive_conns > 0;
                let expired = max.is_some_and(|m| since.elapsed() >= m);
                if busy && !expired {
                    return true;
                }
                match delete_dest(ipvs, &vs, addr, port) {
                    Ok(()) => {
                        out.deleted += 1;
                        out.forced += usize::from(busy);
                        if busy {
                            tracing::info!(service = %vs, %addr, port, drained = ?since.elapsed(),
                                "removed a draining real server at the maximum drain time");
                        }
                        false
                    }
                    Err(e) => {
                        tracing::error!(virtualServer = %vs, %addr, port, error = %e, "Failed to delete real server");
                        out.failures += 1;
                        true
                    }
                }
            });
            if queued.is_empty() {
                self.queue.remove(&vs);
            }
        }
        out.pending = self.len();
        out
    }
}
