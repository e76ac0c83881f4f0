//! Notices that the node's links or addresses changed (rtnetlink multicast), so the local addresses read
//! by every event-driven sync can come from a cache that is refreshed only when something changed.

use crate::kernel::io_counts::{self, Backend, Call};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

const RTNLGRP_LINK: u32 = 1;
const RTNLGRP_IPV4_IFADDR: u32 = 5;
const RTNLGRP_IPV6_IFADDR: u32 = 9;
pub(super) const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
pub(super) const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
/// Notifications drained per check; beyond this the subscription is renewed (and the cache refreshed).
const MAX_DRAIN: usize = 256;

/// A subscription to link and address notifications.
pub struct ChangeWatch {
    sock: Socket,
    buf: Vec<u8>,
}

impl std::fmt::Debug for ChangeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeWatch").finish_non_exhaustive()
    }
}

impl ChangeWatch {
    /// Subscribes to link, IPv4 and IPv6 address notifications (non-blocking socket).
    pub fn new() -> std::io::Result<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind(&SocketAddr::new(0, 0))?;
        for group in [RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR] {
            sock.add_membership(group)?;
        }
        sock.set_non_blocking(true)?;
        Ok(ChangeWatch {
            sock,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Reads the pending notifications; true when one concerns a link other than `ignore` (a link index,
    /// e.g. kube-ipvs0's, whose addresses the caller tracks itself), or when notifications were lost or
    /// too many were pending (the subscription is then renewed).
    pub fn changed(&mut self, ignore: Option<u32>) -> bool {
        let mut relevant = false;
        for _ in 0..MAX_DRAIN {
            let mut chunk = &mut self.buf[..];
            let got = self.sock.recv(&mut chunk, 0);
            let n = got.as_ref().map_or(0, |n| (*n).min(self.buf.len()));
            io_counts::call(Backend::Link, Call::Recv, 0, n);
            match got {
                Ok(_) => {
                    relevant |= concerns_other_links(&self.buf[..n], ignore);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return relevant,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // ENOBUFS: notifications were dropped; anything may have changed.
                Err(_) => return self.renew(),
            }
        }
        self.renew()
    }

    /// Replaces the socket (dropping the backlog); always reports a change.
    fn renew(&mut self) -> bool {
        if let Ok(fresh) = ChangeWatch::new() {
            *self = fresh;
        }
        true
    }
}

/// Whether a datagram of rtnetlink notifications names a link other than `ignore`. Unknown or
/// malformed messages count as changes.
pub fn concerns_other_links(mut data: &[u8], ignore: Option<u32>) -> bool {
    while data.len() >= 16 {
        let len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        if len < 16 || len > data.len() {
            return true;
        }
        let payload = &data[16..len];
        let index = match kind {
            RTM_NEWADDR | RTM_DELADDR | RTM_NEWLINK | RTM_DELLINK if payload.len() >= 8 => {
                u32::from_ne_bytes([payload[4], payload[5], payload[6], payload[7]])
            }
            _ => return true,
        };
        if Some(index) != ignore {
            return true;
        }
        // The last message's padding may be missing (the fuzzer found the panic this was).
        data = data.get((len + 3) & !3..).unwrap_or_default();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, index: u32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&24u32.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[2, 32, 0, 0]);
        m.extend_from_slice(&index.to_ne_bytes());
        m
    }

    #[test]
    fn only_other_links_count() {
        let mine = [message(RTM_NEWADDR, 7), message(RTM_DELADDR, 7)].concat();
        assert!(!concerns_other_links(&mine, Some(7)));
        assert!(concerns_other_links(&mine, Some(8)));
        assert!(concerns_other_links(&mine, None));
        let mixed = [message(RTM_NEWADDR, 7), message(RTM_NEWLINK, 3)].concat();
        assert!(concerns_other_links(&mixed, Some(7)));
        assert!(!concerns_other_links(&[], Some(7)));
        // Unknown kinds and truncated messages are changes.
        assert!(concerns_other_links(&message(99, 7), Some(7)));
        assert!(concerns_other_links(
            &message(RTM_NEWADDR, 7)[..20],
            Some(7)
        ));
    }
}
