//! A cheap "has this table changed?" check for the legacy (x_tables) backend: the kernel hands out a
//! table's rule blob with two `getsockopt` calls (`IPT_SO_GET_INFO`, `IPT_SO_GET_ENTRIES`; the same the
//! `iptables-legacy-save` process does), which is hashed with every rule's packet and byte counters
//! zeroed. Equal fingerprints mean the same rules in the same order, so a periodic sync that verified the
//! tables once (with `iptables-save`) can skip starting the save process while nothing changed. The same
//! walk names each table's user-defined chains (an entry whose target is `ERROR` heads a chain and
//! carries its name), so a sync can tell that none of its chains exist without a save. Anything
//! unexpected (no such table, a blob that does not walk) gives None and the caller saves as before.

use super::TablesView;
use super::xt_decode;
use super::xt_matches::SetNames;
use crate::kernel::io_counts::{Backend, Call};
use crate::net::IpFamily;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::fd::OwnedFd;

/// `IPT_SO_GET_INFO` / `IP6T_SO_GET_INFO` (same value for both families).
const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` / `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: libc::c_int = 65;
/// `struct ipt_getinfo`: name[32], valid_hooks, hook_entry[5], underflow[5], num_entries, size.
const INFO_LEN: usize = 84;
/// `struct ipt_get_entries` header: name[32], size, padding to the 8-byte aligned entry table.
const ENTRIES_HEADER: usize = 40;
/// `struct xt_entry_target` header: target_size (u16), name[29], revision (u8); its data follows.
const TARGET_HEADER: usize = 32;
/// Length of a target's name field (`XT_EXTENSION_MAXNAMELEN`), at offset 2 of the target.
const TARGET_NAME_LEN: usize = 29;
/// Length of the chain name an `ERROR` target carries (`XT_FUNCTION_MAXNAMELEN`).
const CHAIN_NAME_LEN: usize = 30;
/// The target heading a user-defined chain (and ending the table).
const ERROR_TARGET: &[u8] = b"ERROR";

/// Where the fields of one entry sit (`struct ipt_entry` / `struct ip6t_entry`).
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// `target_offset` (u16).
    target_at: usize,
    /// `next_offset` (u16).
    next_at: usize,
    /// The 16 bytes of packet and byte counters.
    counters_at: usize,
    /// Size of the entry header (where matches start).
    header: usize,
}

const V4: Layout = Layout {
    target_at: 88,
    next_at: 90,
    counters_at: 96,
    header: 112,
};
const V6: Layout = Layout {
    target_at: 140,
    next_at: 142,
    counters_at: 152,
    header: 168,
};

/// Per family: the socket's address family and level, and the entry layout.
fn family_layout(family: IpFamily) -> (libc::c_int, libc::c_int, Layout) {
    match family {
        IpFamily::V4 => (libc::AF_INET, libc::SOL_IP, V4),
        IpFamily::V6 => (libc::AF_INET6, libc::SOL_IPV6, V6),
    }
}

/// What the reader knows of each table's blob size, so that a table is read with one call
/// (`IPT_SO_GET_ENTRIES` needs the exact size) instead of two (`IPT_SO_GET_INFO` first). On kernels with
/// `CONFIG_BPFILTER_UMH`, every IPv4 call first makes the kernel try to load the bpfilter helper module,
/// which costs a `modprobe` run.
#[derive(Debug, Clone, Default)]
pub struct SizeHints {
    /// The size each table had when last read.
    sizes: BTreeMap<(IpFamily, String), usize>,
    /// Families whose tables were written since they were last read: their sizes are unknown.
    written: BTreeSet<IpFamily>,
}

impl SizeHints {
    /// Forgets the sizes of a family's tables (a write changed them): the next read asks their size
    /// first instead of trying a stale one.
    pub fn written(&mut self, family: IpFamily) {
        self.sizes.retain(|(f, _), _| *f != family);
        self.written.insert(family);
    }

    fn record(&mut self, family: IpFamily, table: &str, size: usize) {
        self.sizes.insert((family, table.to_string()), size);
    }

    fn recorded(&self, family: IpFamily, table: &str) -> Option<usize> {
        self.sizes.get(&(family, table.to_string())).copied()
    }

    /// A table never read nor written is most likely as the kernel creates it.
    fn pristine_guess(&self, family: IpFamily, table: &str, l: Layout) -> Option<usize> {
        if self.written.contains(&family) || self.recorded(family, table).is_some() {
            return None;
        }
        pristine_size(table, l)
    }
}

/// The fingerprint of `tables` (in order) of one family and their user-defined chains; with `decode`,
/// also their rules as `iptables-save` prints them, decoded from the same blobs (see `xt_decode.rs`;
/// None there when a table's layout is not understood). None when any table cannot be read this way.
///
/// Calls per table: one while `hints` knows its size (and, when decoding, only for a table as the kernel
/// creates it); otherwise two (its size and hook offsets, then its entries).
pub fn read(
    family: IpFamily,
    tables: &[&str],
    hints: &mut SizeHints,
    decode: bool,
) -> Option<TablesView> {
    let (af, level, layout) = family_layout(family);
    let fd = raw_socket(af)?;
    let mut h = DefaultHasher::new();
    let mut chains = BTreeMap::new();
    let mut decoded = decode.then(BTreeMap::new);
    let mut sets = KernelSetNames::default();
    for table in tables {
        let (mut blob, hooks) = read_table(&fd, level, (family, table), layout, hints, decode)?;
        if let Some(d) = decoded.as_mut() {
            let one = hooks.and_then(|hk| xt_decode::decode(table, family, &blob, &hk, &mut sets));
            match one {
                Some(one) => {
                    d.insert(table.to_string(), one);
                }
                None => decoded = None,
            }
        }
        chains.insert(table.to_string(), walk(&mut blob, layout)?);
        table.hash(&mut h);
        blob.hash(&mut h);
    }
    Some(TablesView {
        fingerprint: h.finish(),
        chains,
        decoded,
    })
}

/// One table's blob, with its hook offsets when they were read (or, for a table as the kernel creates
/// it, known). With `decode`, the hook offsets are always there.
fn read_table(
    fd: &OwnedFd,
    level: libc::c_int,
    (family, table): (IpFamily, &str),
    l: Layout,
    hints: &mut SizeHints,
    decode: bool,
) -> Option<(Vec<u8>, Option<xt_decode::Hooks>)> {
    let guess = match decode {
        true => hints.pristine_guess(family, table, l),
        false => hints
            .recorded(family, table)
            .or_else(|| hints.pristine_guess(family, table, l)),
    };
    if let Some(blob) = guess.and_then(|n| entries(fd, level, table, n)) {
        hints.record(family, table, blob.len());
        let hooks = pristine_hooks(table, &blob, l);
        if !decode || hooks.is_some() {
            return Some((blob, hooks));
        }
    }
    let info = table_info(fd, level, table)?;
    let blob = entries(fd, level, table, info.size)?;
    hints.record(family, table, blob.len());
    Some((blob, Some(info.hooks)))
}

/// The hook offsets of a table holding only its built-in chains' policies and the end marker (one
/// entry each, in hook order), or None for any other blob.
fn pristine_hooks(table: &str, blob: &[u8], l: Layout) -> Option<xt_decode::Hooks> {
    if Some(blob.len()) != pristine_size(table, l) {
        return None;
    }
    let mut hooks = xt_decode::Hooks {
        valid: 0,
        entry: [0; 5],
        underflow: [0; 5],
    };
    for (i, chain) in super::rules::builtin_chains(table)?.iter().enumerate() {
        let h = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]
            .iter()
            .position(|c| c == chain)?;
        let off = u32::try_from(i * (l.header + STANDARD_TARGET_SIZE)).ok()?;
        hooks.valid |= 1 << h;
        hooks.entry[h] = off;
        hooks.underflow[h] = off;
    }
    Some(hooks)
}

/// `struct xt_standard_target` (header and verdict), aligned: a built-in chain's policy entry's target.
const STANDARD_TARGET_SIZE: usize = 40;
/// `struct xt_error_target` (header and chain name), aligned: the table's end marker's target.
const ERROR_TARGET_SIZE: usize = 64;

/// The blob size of a table holding nothing but its built-in chains' policies and the end marker (as the
/// kernel creates it), for the tables whose built-in chains are known.
fn pristine_size(table: &str, l: Layout) -> Option<usize> {
    let builtins = super::rules::builtin_chains(table)?.len();
    Some(builtins * (l.header + STANDARD_TARGET_SIZE) + l.header + ERROR_TARGET_SIZE)
}

/// [`pristine_size`] of one family's table.
pub fn fresh_table_size(family: IpFamily, table: &str) -> Option<usize> {
    pristine_size(table, family_layout(family).2)
}

/// The blob size of a table as the kernel reports it now (`IPT_SO_GET_INFO`), or None.
pub fn table_size(family: IpFamily, table: &str) -> Option<usize> {
    let (af, level, _) = family_layout(family);
    let fd = raw_socket(af)?;
    table_info(&fd, level, table).map(|i| i.size)
}

/// A raw socket of address family `af`, the handle the x_tables `getsockopt`s go through; None if it
/// cannot be opened.
fn raw_socket(af: libc::c_int) -> Option<OwnedFd> {
    crate::sys::socket::socket(af, libc::SOCK_RAW, libc::IPPROTO_RAW).ok()
}

/// What `IPT_SO_GET_INFO` tells of a table: the size of its entries and its hook offsets.
struct TableInfo {
    size: usize,
    hooks: xt_decode::Hooks,
}

/// `IPT_SO_GET_INFO` of one table, or None.
fn table_info(fd: &OwnedFd, level: libc::c_int, table: &str) -> Option<TableInfo> {
    if table.len() >= 32 {
        return None;
    }
    let mut info = [0u8; INFO_LEN];
    info[..table.len()].copy_from_slice(table.as_bytes());
    getsockopt(fd, level, SO_GET_INFO, &mut info)?;
    let word = |i: usize| u32::from_ne_bytes([info[i], info[i + 1], info[i + 2], info[i + 3]]);
    let hooks = xt_decode::Hooks {
        valid: word(32),
        entry: std::array::from_fn(|h| word(36 + 4 * h)),
        underflow: std::array::from_fn(|h| word(56 + 4 * h)),
    };
    Some(TableInfo {
        size: word(80) as usize,
        hooks,
    })
}

/// The entries of a table of exactly `size` bytes (the kernel refuses any other size), or None.
fn entries(fd: &OwnedFd, level: libc::c_int, table: &str, size: usize) -> Option<Vec<u8>> {
    if table.len() >= 32 {
        return None;
    }
    let mut buf = vec![0u8; ENTRIES_HEADER + size];
    buf[..table.len()].copy_from_slice(table.as_bytes());
    buf[32..36].copy_from_slice(&u32::try_from(size).ok()?.to_ne_bytes());
    getsockopt(fd, level, SO_GET_ENTRIES, &mut buf)?;
    buf.drain(..ENTRIES_HEADER);
    Some(buf)
}

/// Set names by index from the kernel's ipset sockopt (`SO_IP_SET`, `IP_SET_OP_GET_BYINDEX`), as
/// `iptables-save` reads them; on an IPv4 socket but outside the x_tables calls (no bpfilter load).
#[derive(Default)]
struct KernelSetNames {
    fd: Option<OwnedFd>,
    known: BTreeMap<u16, Option<String>>,
}

impl SetNames for KernelSetNames {
    fn name(&mut self, index: u16) -> Option<String> {
        if let Some(n) = self.known.get(&index) {
            return n.clone();
        }
        if self.fd.is_none() {
            self.fd = raw_socket(libc::AF_INET);
        }
        let name = self.fd.as_ref().and_then(|fd| set_name(fd, index));
        self.known.insert(index, name.clone());
        name
    }
}

/// `struct ip_set_req_get_set`: op, version, then the name (in) or index (out) union of 32 bytes.
fn set_name(fd: &OwnedFd, index: u16) -> Option<String> {
    const SO_IP_SET: libc::c_int = 83;
    const GET_BYINDEX: u32 = 7;
    const PROTOCOL: u32 = 7;
    let mut req = [0u8; 40];
    req[0..4].copy_from_slice(&GET_BYINDEX.to_ne_bytes());
    req[4..8].copy_from_slice(&PROTOCOL.to_ne_bytes());
    req[8..10].copy_from_slice(&index.to_ne_bytes());
    getsockopt(fd, libc::SOL_IP, SO_IP_SET, &mut req)?;
    let name = c_str(&req[8..])?;
    (!name.is_empty()).then(|| String::from_utf8(name.to_vec()).ok())?
}

fn getsockopt(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, buf: &mut [u8]) -> Option<()> {
    crate::kernel::io_counts::call(Backend::Iptables, Call::Getsockopt, 0, buf.len());
    let len = crate::sys::socket::getsockopt(fd, level, opt, buf).ok()?;
    (len == buf.len()).then_some(())
}

fn u16_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(usize::from(u16::from_ne_bytes([b[0], b[1]])))
}

/// The bytes of a NUL-terminated string filling at most `field`; None without a NUL.
fn c_str(field: &[u8]) -> Option<&[u8]> {
    field.iter().position(|&b| b == 0).map(|n| &field[..n])
}

/// Walks a table blob entry by entry (`next_offset`): zeroes every entry's counters and returns the
/// names of the user-defined chains. None if the walk does not end exactly at the end of the blob, an
/// entry or its target does not fit, a chain name is not a string, or the last entry is not the
/// table's end marker (an `ERROR` entry, which is no chain).
fn walk(blob: &mut [u8], l: Layout) -> Option<BTreeSet<String>> {
    let mut chains = BTreeSet::new();
    // The chain the previous entry heads: added once an entry follows it (the last one ends the table).
    let mut heading: Option<String> = None;
    let mut off = 0;
    while off < blob.len() {
        let next = u16_at(blob, off.checked_add(l.next_at)?)?;
        if next < l.header || next > blob.len() - off {
            return None;
        }
        let entry = &mut blob[off..off + next];
        entry[l.counters_at..l.counters_at + 16].fill(0);
        if let Some(prev) = heading.take() {
            chains.insert(prev);
        }
        heading = chain_heading(entry, l)?;
        off += next;
    }
    heading.map(|_| chains)
}

/// The chain name an entry carries when its target is `ERROR`: Some(None) for any other target, None
/// when the target does not fit in the entry.
fn chain_heading(entry: &[u8], l: Layout) -> Option<Option<String>> {
    let at = u16_at(entry, l.target_at)?;
    if at < l.header {
        return None;
    }
    let target = entry.get(at..)?;
    let size = u16_at(target, 0)?;
    let target = target.get(..size)?;
    let name = c_str(target.get(2..2 + TARGET_NAME_LEN)?)?;
    if name != ERROR_TARGET {
        return Some(None);
    }
    let chain = c_str(target.get(TARGET_HEADER..TARGET_HEADER + CHAIN_NAME_LEN)?)?;
    Some(Some(String::from_utf8(chain.to_vec()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One entry of layout `l`: counters 0xab, a standard target (`None`) or an `ERROR` target with
    /// `Some(chain name)`.
    fn entry(l: Layout, error: Option<&str>) -> Vec<u8> {
        let size = if error.is_some() { 64 } else { 40 };
        let mut e = vec![0u8; l.header + size];
        let len = e.len() as u16;
        e[l.target_at..l.target_at + 2].copy_from_slice(&(l.header as u16).to_ne_bytes());
        e[l.next_at..l.next_at + 2].copy_from_slice(&len.to_ne_bytes());
        e[l.counters_at..l.counters_at + 16].fill(0xab);
        let t = &mut e[l.header..];
        t[..2].copy_from_slice(&(size as u16).to_ne_bytes());
        if let Some(chain) = error {
            t[2..7].copy_from_slice(ERROR_TARGET);
            t[TARGET_HEADER..TARGET_HEADER + chain.len()].copy_from_slice(chain.as_bytes());
        }
        e
    }

    /// A table blob: built-in rules, the chains `chains` (each a head and one rule), the end marker.
    fn blob(l: Layout, chains: &[&str]) -> Vec<u8> {
        let mut b = entry(l, None);
        b.extend(entry(l, None));
        for c in chains {
            b.extend(entry(l, Some(c)));
            b.extend(entry(l, None));
        }
        b.extend(entry(l, Some("ERROR")));
        b
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn walk_zeroes_counters_and_names_chains() {
        for l in [V4, V6] {
            let mut b = blob(l, &["KUBE-SERVICES", "FOREIGN"]);
            let chains = walk(&mut b, l).expect("walks");
            assert_eq!(chains, names(&["FOREIGN", "KUBE-SERVICES"]));
            let step = l.header + 40;
            assert!(b[l.counters_at..l.counters_at + 16].iter().all(|&x| x == 0));
            assert!(
                b[step + l.counters_at..step + l.counters_at + 16]
                    .iter()
                    .all(|&x| x == 0)
            );
            // A fresh table: built-in chains only.
            let mut b = blob(l, &[]);
            assert_eq!(walk(&mut b, l), Some(BTreeSet::new()));
            // The same rules with other counters hash the same once walked.
            let (mut a, mut c) = (blob(l, &["X"]), blob(l, &["X"]));
            c[l.counters_at] = 7;
            walk(&mut a, l);
            walk(&mut c, l);
            assert_eq!(a, c);
        }
    }

    #[test]
    fn pristine_tables_walk_with_their_built_in_chains_only() {
        for l in [V4, V6] {
            for (table, builtins) in [("filter", 3), ("nat", 4), ("mangle", 5)] {
                let mut b: Vec<u8> = (0..builtins).flat_map(|_| entry(l, None)).collect();
                b.extend(entry(l, Some("ERROR")));
                assert_eq!(pristine_size(table, l), Some(b.len()), "{table}");
                assert_eq!(walk(&mut b, l), Some(BTreeSet::new()));
            }
        }
        assert_eq!(pristine_size("nosuchtable", V4), None);
        // The figures the kernel gives (tests/uml_iptables.rs checks them against it).
        assert_eq!(pristine_size("filter", V4), Some(632));
        assert_eq!(pristine_size("nat", V6), Some(1064));
    }

    #[test]
    fn odd_blobs_are_refused_without_panic() {
        let l = V4;
        let good = blob(l, &["KUBE-SERVICES"]);
        // Truncated anywhere (mid-entry, mid-field), or empty: no walk.
        for cut in [1, 50, 91, 111, 112, 151, good.len() - 1] {
            assert_eq!(walk(&mut good[..cut].to_vec(), l), None, "cut at {cut}");
        }
        assert_eq!(walk(&mut [], l), None, "no end marker");
        // next_offset past the end, too short for the header, or zero.
        for next in [9999u16, 8, 0] {
            let mut b = good.clone();
            b[l.next_at..l.next_at + 2].copy_from_slice(&next.to_ne_bytes());
            assert_eq!(walk(&mut b, l), None, "next_offset {next}");
        }
        // A target offset inside the header or past the entry, a target size past the entry.
        for at in [0u16, 100, 500] {
            let mut b = good.clone();
            b[l.target_at..l.target_at + 2].copy_from_slice(&at.to_ne_bytes());
            assert_eq!(walk(&mut b, l), None, "target_offset {at}");
        }
        let mut b = good.clone();
        b[l.header..l.header + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(walk(&mut b, l), None, "target size");
        // A chain name without its NUL, or not UTF-8.
        let head = 2 * (l.header + 40);
        let name_at = head + l.header + TARGET_HEADER;
        let mut b = good.clone();
        b[name_at..name_at + CHAIN_NAME_LEN].fill(b'A');
        assert_eq!(walk(&mut b, l), None, "unterminated name");
        let mut b = good.clone();
        b[name_at] = 0xff;
        assert_eq!(walk(&mut b, l), None, "not UTF-8");
        // The last entry not an end marker.
        let mut b = good.clone();
        b.extend(entry(l, None));
        assert_eq!(walk(&mut b, l), None, "no end marker");
        // Random bytes never panic.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            let len = (x % 700) as usize;
            let mut b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = walk(&mut b, V4);
            let _ = walk(&mut b, V6);
        }
    }
}
