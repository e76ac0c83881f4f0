//! IPVS's socket-option interface (`IP_VS_SO_GET_INFO`, `IP_VS_SO_GET_SERVICES`, linux/ip_vs.h): every
//! IPv4 virtual server in one `getsockopt`, where the generic netlink dump takes a datagram per ~90 of
//! them and the kernel restarts its walk of the table for each. IPv4 only (the interface predates IPv6
//! virtual servers and skips them); fwmark services are skipped as in the netlink backend.

use super::{IpvsService, IpvsServiceKey};
use crate::kernel::io_counts::{self, Backend, Call};
use crate::net::Protocol;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::OwnedFd;

/// `IP_VS_BASE_CTL`: 64 + 1024 + 64.
const BASE_CTL: libc::c_int = 64 + 1024 + 64;
const GET_INFO: libc::c_int = BASE_CTL + 1;
const GET_SERVICES: libc::c_int = BASE_CTL + 2;
/// `struct ip_vs_getinfo`: version, connection table size, number of virtual servers.
const INFO_LEN: usize = 12;
/// `struct ip_vs_get_services` before its table: the count, padded to the entries' 8-byte alignment.
const HEAD_LEN: usize = 8;
/// `struct ip_vs_service_entry`: protocol (u16), addr (be32 at 4), port (be16 at 8), fwmark (at 12),
/// sched_name[16] (at 16), flags (32), timeout (36), netmask (40), num_dests (44), then the statistics
/// with 64-bit byte counters (aligned to 8): 104 bytes.
const ENTRY_LEN: usize = 104;
/// Attempts when virtual servers come or go between the count and the table.
const ATTEMPTS: usize = 3;

/// Reads the IPv4 virtual servers through a raw socket of its own.
#[derive(Debug)]
pub struct SockoptServices {
    fd: OwnedFd,
    /// The table as last read: kept, so that a table of the same size costs no new memory.
    buf: Vec<u8>,
}

impl SockoptServices {
    /// Opens the socket (in the calling thread's network namespace); None if it cannot be opened.
    pub fn open() -> Option<SockoptServices> {
        let fd =
            crate::sys::socket::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW).ok()?;
        Some(SockoptServices {
            fd,
            buf: Vec::new(),
        })
    }

    /// Every IPv4 virtual server: the count, then the table of exactly that many (the kernel refuses
    /// another size, as when the count changed meanwhile: then asked again).
    pub fn read(&mut self) -> std::io::Result<Vec<IpvsService>> {
        for _ in 0..ATTEMPTS {
            let mut info = [0u8; INFO_LEN];
            get(&self.fd, GET_INFO, &mut info)?;
            let n = u32::from_ne_bytes([info[8], info[9], info[10], info[11]]);
            let len = HEAD_LEN + ENTRY_LEN * n as usize;
            self.buf.clear();
            self.buf.resize(len, 0);
            self.buf[..4].copy_from_slice(&n.to_ne_bytes());
            match get(&self.fd, GET_SERVICES, &mut self.buf) {
                Ok(()) => return Ok(parse(&self.buf[HEAD_LEN..], n as usize)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "IPVS virtual servers kept changing while read",
        ))
    }
}

/// One `getsockopt` of IPVS's that fills `buf` (its exact size is part of the request).
fn get(fd: &OwnedFd, opt: libc::c_int, buf: &mut [u8]) -> std::io::Result<()> {
    io_counts::call(Backend::Ipvs, Call::Getsockopt, 0, buf.len());
    crate::sys::socket::getsockopt(fd, libc::IPPROTO_IP, opt, buf)?;
    Ok(())
}

/// The virtual servers of `n` table entries (fwmark services and unknown protocols skipped).
pub fn parse(table: &[u8], n: usize) -> Vec<IpvsService> {
    table
        .chunks_exact(ENTRY_LEN)
        .take(n)
        .filter_map(service)
        .collect()
}

/// One `struct ip_vs_service_entry`.
fn service(e: &[u8]) -> Option<IpvsService> {
    let word = |i: usize| u32::from_ne_bytes([e[i], e[i + 1], e[i + 2], e[i + 3]]);
    if word(12) != 0 {
        return None;
    }
    let protocol = match u16::from_ne_bytes([e[0], e[1]]) {
        6 => Protocol::Tcp,
        17 => Protocol::Udp,
        132 => Protocol::Sctp,
        _ => return None,
    };
    let addr = Ipv4Addr::new(e[4], e[5], e[6], e[7]);
    let name = &e[16..32];
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    Some(IpvsService {
        key: IpvsServiceKey {
            addr: IpAddr::V4(addr),
            port: u16::from_be_bytes([e[8], e[9]]),
            protocol,
        },
        scheduler: String::from_utf8_lossy(&name[..end]).into_owned(),
        flags: word(32),
        timeout: word(36),
        netmask: word(40),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        proto: u16,
        addr: [u8; 4],
        port: u16,
        fwmark: u32,
        sched: &str,
        flags: u32,
    ) -> Vec<u8> {
        let mut e = vec![0u8; ENTRY_LEN];
        e[0..2].copy_from_slice(&proto.to_ne_bytes());
        e[4..8].copy_from_slice(&addr);
        e[8..10].copy_from_slice(&port.to_be_bytes());
        e[12..16].copy_from_slice(&fwmark.to_ne_bytes());
        e[16..16 + sched.len()].copy_from_slice(sched.as_bytes());
        e[32..36].copy_from_slice(&flags.to_ne_bytes());
        e[36..40].copy_from_slice(&10800u32.to_ne_bytes());
        e[40..44].copy_from_slice(&u32::MAX.to_ne_bytes());
        e[44..48].copy_from_slice(&3u32.to_ne_bytes());
        e
    }

    #[test]
    fn entries_become_services_fwmark_and_unknown_protocols_skipped() {
        let mut table = entry(6, [10, 96, 0, 1], 443, 0, "rr", 0x3);
        table.extend(entry(17, [10, 96, 0, 10], 53, 0, "mh", 0x12));
        table.extend(entry(6, [0, 0, 0, 0], 0, 7, "rr", 0));
        table.extend(entry(47, [10, 96, 0, 2], 1, 0, "rr", 0));
        let got = parse(&table, 4);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].key.addr, IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1)));
        assert_eq!((got[0].key.port, got[0].key.protocol), (443, Protocol::Tcp));
        assert_eq!((got[0].scheduler.as_str(), got[0].flags), ("rr", 0x3));
        assert_eq!((got[0].timeout, got[0].netmask), (10800, u32::MAX));
        assert_eq!(
            (got[1].scheduler.as_str(), got[1].key.protocol),
            ("mh", Protocol::Udp)
        );
        // A short table yields what it holds.
        assert_eq!(parse(&table[..ENTRY_LEN + 10], 4).len(), 1);
    }
}
