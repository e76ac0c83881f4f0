//! A cheap "has this table changed?" check for the legacy (x_tables) backend: the kernel hands out a
//! table's rule blob with two `getsockopt` calls (`IPT_SO_GET_INFO`, `IPT_SO_GET_ENTRIES`; the same the
//! `iptables-legacy-save` process does), which is hashed with every rule's packet and byte counters
//! zeroed. Equal fingerprints mean the same rules in the same order, so a periodic sync that verified the
//! tables once (with `iptables-save`) can skip starting the save process while nothing changed. Anything
//! unexpected (no such table, a blob that does not walk) gives None and the caller saves as before.

use crate::net::IpFamily;
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `IPT_SO_GET_INFO` / `IP6T_SO_GET_INFO` (same value for both families).
const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` / `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: libc::c_int = 65;
/// `struct ipt_getinfo`: name[32], valid_hooks, hook_entry[5], underflow[5], num_entries, size.
const INFO_LEN: usize = 84;
/// `struct ipt_get_entries` header: name[32], size, padding to the 8-byte aligned entry table.
const ENTRIES_HEADER: usize = 40;

/// Per family: the socket level, where `next_offset` sits in an entry and where its counters sit
/// (`struct ipt_entry` / `struct ip6t_entry`).
fn layout(family: IpFamily) -> (libc::c_int, libc::c_int, usize, usize) {
    match family {
        IpFamily::V4 => (libc::AF_INET, libc::SOL_IP, 90, 96),
        IpFamily::V6 => (libc::AF_INET6, libc::SOL_IPV6, 142, 152),
    }
}

/// The fingerprint of `tables` (in order) of one family; None when any cannot be read this way.
/// `sizes` remembers each table's blob size: a table whose size is unchanged is read with one call
/// instead of two (on kernels with `CONFIG_BPFILTER_UMH` every IPv4 call first tries to load the
/// bpfilter helper module, which costs a process start).
pub fn tables(
    family: IpFamily,
    tables: &[&str],
    sizes: &mut BTreeMap<(IpFamily, String), usize>,
) -> Option<u64> {
    let (af, level, next_at, counters_at) = layout(family);
    // SAFETY: socket(2) with constant arguments; the fd is owned right away.
    let fd = unsafe { libc::socket(af, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut h = DefaultHasher::new();
    for table in tables {
        let key = (family, table.to_string());
        let hinted = sizes.get(&key).and_then(|&n| entries(&fd, level, table, n));
        let mut blob = match hinted {
            Some(b) => b,
            None => {
                let b = table_blob(&fd, level, table)?;
                sizes.insert(key, b.len());
                b
            }
        };
        zero_counters(&mut blob, next_at, counters_at)?;
        table.hash(&mut h);
        blob.hash(&mut h);
    }
    Some(h.finish())
}

/// The rule blob of one table (`size` bytes of entries), or None.
fn table_blob(fd: &OwnedFd, level: libc::c_int, table: &str) -> Option<Vec<u8>> {
    if table.len() >= 32 {
        return None;
    }
    let mut info = [0u8; INFO_LEN];
    info[..table.len()].copy_from_slice(table.as_bytes());
    getsockopt(fd, level, SO_GET_INFO, &mut info)?;
    let size = u32::from_ne_bytes(info[80..84].try_into().ok()?) as usize;
    entries(fd, level, table, size)
}

/// The entries of a table of exactly `size` bytes (the kernel refuses any other size), or None.
fn entries(fd: &OwnedFd, level: libc::c_int, table: &str, size: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; ENTRIES_HEADER + size];
    buf[..table.len()].copy_from_slice(table.as_bytes());
    buf[32..36].copy_from_slice(&(size as u32).to_ne_bytes());
    getsockopt(fd, level, SO_GET_ENTRIES, &mut buf)?;
    buf.drain(..ENTRIES_HEADER);
    Some(buf)
}

fn getsockopt(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, buf: &mut [u8]) -> Option<()> {
    let mut len = libc::socklen_t::try_from(buf.len()).ok()?;
    // SAFETY: buf is valid for len bytes; the kernel writes at most len bytes and updates len.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize == buf.len()).then_some(())
}

/// Zeroes the 16 counter bytes of every entry, walking `next_offset`; None if the walk does not end
/// exactly at the end of the blob.
fn zero_counters(blob: &mut [u8], next_at: usize, counters_at: usize) -> Option<()> {
    let mut off = 0;
    while off < blob.len() {
        let next = u16::from_ne_bytes(
            blob.get(off + next_at..off + next_at + 2)?
                .try_into()
                .ok()?,
        );
        let next = usize::from(next);
        if next < counters_at + 16 || off + next > blob.len() {
            return None;
        }
        blob[off + counters_at..off + counters_at + 16].fill(0);
        off += next;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_zeroed_and_bad_walks_rejected() {
        // Two v4 entries of 112 bytes with counters and next_offset set.
        let mut blob = vec![0u8; 224];
        for e in 0..2 {
            blob[e * 112 + 90..e * 112 + 92].copy_from_slice(&112u16.to_ne_bytes());
            blob[e * 112 + 96..e * 112 + 112].fill(0xab);
            blob[e * 112] = e as u8 + 1;
        }
        let mut a = blob.clone();
        zero_counters(&mut a, 90, 96).unwrap();
        assert!(a[96..112].iter().all(|&b| b == 0) && a[208..224].iter().all(|&b| b == 0));
        assert_eq!((a[0], a[112]), (1, 2));
        // A next_offset running past the end, or too short to hold the counters, is refused.
        blob[112 + 90..112 + 92].copy_from_slice(&200u16.to_ne_bytes());
        assert!(zero_counters(&mut blob.clone(), 90, 96).is_none());
        blob[112 + 90..112 + 92].copy_from_slice(&8u16.to_ne_bytes());
        assert!(zero_counters(&mut blob, 90, 96).is_none());
    }
}
