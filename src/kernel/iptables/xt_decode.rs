//! A legacy (x_tables) table's rule blob decoded into the text `iptables-save -t <table>` prints, so a
//! sync that has read the blob (one `getsockopt` per table, see `fingerprint.rs`) need not start an
//! `iptables-save` process: on a kernel built with `CONFIG_BPFILTER_UMH`, each IPv4 x_tables call of that
//! process first makes the kernel try to load the bpfilter module (a `modprobe` run, about a dozen per
//! save), and the fingerprint and the rules then come from the same bytes.
//!
//! The layout is read strictly: the built-in chains where the table's hook offsets say, each ending in
//! its policy; user-defined chains as an `ERROR` entry naming the chain, its rules and an unconditional
//! `RETURN`; the end marker last. Anything else gives None. A rule whose match or target is not among
//! the forms the planner writes (see `xt_matches.rs` and [`target`]) is printed as [`UNDECODED_RULE`]
//! and its chain listed in [`Decoded::undecoded`]: the caller reads such chains with `iptables-save`.

use super::xt_matches::{self, Match, SetNames, c_string, prefix_len, u16_at, u32_at};
use crate::net::IpFamily;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a rule the decoder does not know is printed as (no rule of the planner's ever looks like it).
pub const UNDECODED_RULE: &str = "-m kprs-undecoded";

/// A table's hook offsets (`IPT_SO_GET_INFO`'s `valid_hooks`, `hook_entry`, `underflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hooks {
    pub valid: u32,
    pub entry: [u32; 5],
    pub underflow: [u32; 5],
}

/// One decoded table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// `*table`, chain declarations, `-A` rules and `COMMIT`, as `iptables-save` prints them (counters
    /// zero).
    pub text: String,
    /// Chains holding a rule printed as [`UNDECODED_RULE`].
    pub undecoded: BTreeSet<String>,
}

/// Field offsets of `struct ipt_entry` / `struct ip6t_entry` that decoding needs.
struct Layout {
    /// Size of the address part (`ipt_ip` / `ip6t_ip6`, padded).
    ip_len: usize,
    /// Address length in bytes.
    addr: usize,
    /// Offset of the interface names (in, out, in mask, out mask; 16 bytes each).
    ifaces: usize,
    proto: usize,
    flags: usize,
    invflags: usize,
    target_at: usize,
    next_at: usize,
    header: usize,
    /// The `-g` bit in `flags`; the bit saying a protocol is given (IPv6 only).
    goto_flag: u8,
    proto_flag: u8,
}

const V4: Layout = Layout {
    ip_len: 84,
    addr: 4,
    ifaces: 16,
    proto: 80,
    flags: 82,
    invflags: 83,
    target_at: 88,
    next_at: 90,
    header: 112,
    goto_flag: 0x02,
    proto_flag: 0,
};

const V6: Layout = Layout {
    ip_len: 136,
    addr: 16,
    ifaces: 64,
    proto: 128,
    flags: 131,
    invflags: 132,
    target_at: 140,
    next_at: 142,
    header: 168,
    goto_flag: 0x04,
    proto_flag: 0x01,
};

fn layout(family: IpFamily) -> &'static Layout {
    match family {
        IpFamily::V4 => &V4,
        IpFamily::V6 => &V6,
    }
}

/// The netfilter hook number of a built-in chain.
fn hook(chain: &str) -> Option<usize> {
    ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]
        .iter()
        .position(|c| *c == chain)
}

/// Standard verdicts (`-NF_<verdict> - 1`).
const DROP: i32 = -1;
const ACCEPT: i32 = -2;
const RETURN: i32 = -5;

/// One entry of the blob.
struct Entry<'a> {
    off: usize,
    bytes: &'a [u8],
}

/// A chain and the indexes of its rules.
struct Chain {
    name: String,
    /// The built-in chain's policy; None for a user-defined chain.
    policy: Option<&'static str>,
    rules: std::ops::Range<usize>,
}

/// Decodes one table's blob (`table` names it; its built-in chains come from
/// [`super::rules::builtin_chains`]). None when the layout is not the one described in the module doc.
pub fn decode(
    table: &str,
    family: IpFamily,
    blob: &[u8],
    hooks: &Hooks,
    sets: &mut dyn SetNames,
) -> Option<Decoded> {
    let l = layout(family);
    let entries = split(blob, l)?;
    let mut chains = builtins(table, &entries, hooks, l)?;
    let first_user = chains.last().map_or(0, |c| c.rules.end + 1);
    let (user, starts) = user_chains(&entries, first_user, l)?;
    chains.extend(user);
    let mut text = format!("*{table}\n");
    for c in &chains {
        text.push_str(&format!(":{} {} [0:0]\n", c.name, c.policy.unwrap_or("-")));
    }
    let mut undecoded = BTreeSet::new();
    for c in &chains {
        for e in &entries[c.rules.clone()] {
            let words = rule(e, family, &starts, sets);
            let words = words.map(|w| super::rules::render(&w));
            if words.is_none() {
                undecoded.insert(c.name.clone());
            }
            let words = words.unwrap_or_else(|| UNDECODED_RULE.to_string());
            let sep = if words.is_empty() { "" } else { " " };
            text.push_str(&format!("-A {}{sep}{words}\n", c.name));
        }
    }
    text.push_str("COMMIT\n");
    Some(Decoded { text, undecoded })
}

/// The entries of a blob, walked by `next_offset`; None if the walk does not end at the blob's end.
fn split<'a>(blob: &'a [u8], l: &Layout) -> Option<Vec<Entry<'a>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < blob.len() {
        let next = usize::from(u16_at(blob, off + l.next_at)?);
        if next < l.header || next > blob.len() - off {
            return None;
        }
        out.push(Entry {
            off,
            bytes: &blob[off..off + next],
        });
        off += next;
    }
    Some(out)
}

/// Index of the entry at byte offset `off`.
fn index_at(entries: &[Entry<'_>], off: u32) -> Option<usize> {
    let off = usize::try_from(off).ok()?;
    entries.binary_search_by_key(&off, |e| e.off).ok()
}

/// The built-in chains: for each, in hook order, the rules from its hook entry up to its policy (the
/// underflow entry), one chain right after the other from the blob's start.
fn builtins(table: &str, entries: &[Entry<'_>], hooks: &Hooks, l: &Layout) -> Option<Vec<Chain>> {
    let names = super::rules::builtin_chains(table)?;
    let mut valid = 0u32;
    let mut next = 0;
    let mut out = Vec::new();
    for name in names {
        let h = hook(name)?;
        valid |= 1 << h;
        let start = index_at(entries, hooks.entry[h])?;
        let end = index_at(entries, hooks.underflow[h])?;
        if start != next || end < start {
            return None;
        }
        let policy = match unconditional_verdict(&entries[end], l)? {
            ACCEPT => "ACCEPT",
            DROP => "DROP",
            _ => return None,
        };
        out.push(Chain {
            name: name.to_string(),
            policy: Some(policy),
            rules: start..end,
        });
        next = end + 1;
    }
    (valid == hooks.valid).then_some(out)
}

/// The user-defined chains from entry `from` on, and the offset of each one's first entry (what a jump
/// to it holds) → its name. The last entry must be the end marker.
type UserChains = (Vec<Chain>, BTreeMap<usize, String>);

fn user_chains(entries: &[Entry<'_>], from: usize, l: &Layout) -> Option<UserChains> {
    let mut chains = Vec::new();
    let mut starts = BTreeMap::new();
    let mut i = from;
    loop {
        let name = error_name(entries.get(i)?, l)?;
        if i + 1 == entries.len() {
            return (name == "ERROR").then_some((chains, starts));
        }
        let body = i + 1;
        let tail = (body..entries.len()).find(|&j| error_name(&entries[j], l).is_some())? - 1;
        if tail < body || unconditional_verdict(&entries[tail], l)? != RETURN {
            return None;
        }
        starts.insert(entries[body].off, name.clone());
        chains.push(Chain {
            name,
            policy: None,
            rules: body..tail,
        });
        i = tail + 1;
    }
}

/// The target of an entry: (name, revision, data after the 32-byte header).
fn target<'a>(e: &Entry<'a>, l: &Layout) -> Option<(String, u8, &'a [u8])> {
    let at = usize::from(u16_at(e.bytes, l.target_at)?);
    let t = e.bytes.get(at..)?;
    let size = usize::from(u16_at(t, 0)?);
    let t = t.get(..size)?;
    Some((c_string(t.get(2..31)?)?, *t.get(31)?, t.get(32..)?))
}

/// The chain name an `ERROR` entry carries, or None for any other entry.
fn error_name(e: &Entry<'_>, l: &Layout) -> Option<String> {
    let (name, _, data) = target(e, l)?;
    if name != "ERROR" {
        return None;
    }
    c_string(data.get(..30)?)
}

/// The verdict of an entry with no condition (empty address part, no match) and the standard target.
fn unconditional_verdict(e: &Entry<'_>, l: &Layout) -> Option<i32> {
    let plain = e.bytes.get(..l.ip_len)?.iter().all(|&b| b == 0)
        && usize::from(u16_at(e.bytes, l.target_at)?) == l.header;
    let (name, rev, data) = target(e, l)?;
    if !plain || !name.is_empty() || rev != 0 || data.len() != 8 {
        return None;
    }
    Some(i32::from_ne_bytes(data.get(..4)?.try_into().ok()?))
}

/// The words `iptables-save` prints after `-A <chain>` for one rule; None for a form not known here.
fn rule(
    e: &Entry<'_>,
    family: IpFamily,
    starts: &BTreeMap<usize, String>,
    sets: &mut dyn SetNames,
) -> Option<Vec<String>> {
    let l = layout(family);
    let mut words = basic(e.bytes, family)?;
    let target_at = usize::from(u16_at(e.bytes, l.target_at)?);
    let mut at = l.header;
    while at < target_at {
        let size = usize::from(u16_at(e.bytes, at)?);
        let m = e.bytes.get(at..at + size).filter(|_| size >= 32)?;
        let name = c_string(m.get(2..31)?)?;
        let one = Match {
            name: &name,
            revision: m[31],
            data: &m[32..],
        };
        words.extend(xt_matches::words(&one, family, sets)?);
        at += size;
    }
    if at != target_at {
        return None;
    }
    let goto = e.bytes.get(l.flags)? & l.goto_flag != 0;
    words.extend(target_words(e, l, family, goto, starts)?);
    Some(words)
}

/// The `-j` / `-g` part of a rule.
fn target_words(
    e: &Entry<'_>,
    l: &Layout,
    family: IpFamily,
    goto: bool,
    starts: &BTreeMap<usize, String>,
) -> Option<Vec<String>> {
    let (name, rev, data) = target(e, l)?;
    let j = |rest: &[&str]| -> Option<Vec<String>> {
        (!goto).then(|| rest.iter().map(|s| s.to_string()).collect())
    };
    let flags = u32_at(data, 0);
    match (name.as_str(), rev, data.len(), family) {
        ("", 0, 8, _) => {
            let verdict = i32::from_ne_bytes(data.get(..4)?.try_into().ok()?);
            match verdict {
                DROP => j(&["-j", "DROP"]),
                ACCEPT => j(&["-j", "ACCEPT"]),
                RETURN => j(&["-j", "RETURN"]),
                v if usize::try_from(v).ok()? == e.off + e.bytes.len() => j(&[]),
                v => {
                    let chain = starts.get(&usize::try_from(v).ok()?)?;
                    Some(vec![if goto { "-g" } else { "-j" }.into(), chain.clone()])
                }
            }
        }
        ("REJECT", 0, 8, IpFamily::V4) if flags == Some(3) => {
            j(&["-j", "REJECT", "--reject-with", "icmp-port-unreachable"])
        }
        ("REJECT", 0, 8, IpFamily::V6) if flags == Some(4) => {
            j(&["-j", "REJECT", "--reject-with", "icmp6-port-unreachable"])
        }
        ("MARK", 2, 8, _) => {
            let value = format!("0x{:x}/0x{:x}", flags?, u32_at(data, 4)?);
            j(&["-j", "MARK", "--set-xmark", &value])
        }
        ("MASQUERADE", 0, 24, IpFamily::V4) if flags == Some(1) => {
            masquerade(u32_at(data, 4)?, goto)
        }
        ("MASQUERADE", 0, 40, IpFamily::V6) => masquerade(flags?, goto),
        _ => None,
    }
}

/// MASQUERADE with no option or `--random-fully` (`NF_NAT_RANGE_PROTO_RANDOM_FULLY`).
fn masquerade(flags: u32, goto: bool) -> Option<Vec<String>> {
    const RANDOM_FULLY: u32 = 1 << 4;
    let mut w = vec!["-j".to_string(), "MASQUERADE".to_string()];
    match flags {
        0 => {}
        RANDOM_FULLY => w.push("--random-fully".into()),
        _ => return None,
    }
    (!goto).then_some(w)
}

/// Inversion bits of `invflags` (same values for both families).
const INV_VIA_IN: u8 = 0x01;
const INV_VIA_OUT: u8 = 0x02;
const INV_SRCIP: u8 = 0x08;
const INV_DSTIP: u8 = 0x10;
const INV_PROTO: u8 = 0x40;

/// `-s -d -i -o -p` (each maybe with `!`) of an entry's address part; None for fragments, TOS, a
/// non-contiguous mask or an unknown protocol.
fn basic(e: &[u8], family: IpFamily) -> Option<Vec<String>> {
    let l = layout(family);
    let (flags, inv) = (*e.get(l.flags)?, *e.get(l.invflags)?);
    let known_inv = INV_VIA_IN | INV_VIA_OUT | INV_SRCIP | INV_DSTIP | INV_PROTO;
    if flags & !(l.goto_flag | l.proto_flag) != 0 || inv & !known_inv != 0 {
        return None;
    }
    let mut w = Vec::new();
    for (i, flag, bit) in [(0, "-s", INV_SRCIP), (1, "-d", INV_DSTIP)] {
        let addr = e.get(i * l.addr..(i + 1) * l.addr)?;
        let mask = e.get((i + 2) * l.addr..(i + 3) * l.addr)?;
        w.extend(address(addr, mask, inv & bit != 0, flag)?);
    }
    for (i, flag, bit) in [(0, "-i", INV_VIA_IN), (1, "-o", INV_VIA_OUT)] {
        let name = e.get(l.ifaces + 16 * i..l.ifaces + 16 * (i + 1))?;
        let mask = e.get(l.ifaces + 16 * (i + 2)..l.ifaces + 16 * (i + 3))?;
        w.extend(interface(name, mask, inv & bit != 0, flag)?);
    }
    let proto = u16_at(e, l.proto)?;
    let given = proto != 0 && (family == IpFamily::V4 || flags & l.proto_flag != 0);
    if family == IpFamily::V6 && (proto != 0) != (flags & l.proto_flag != 0) {
        return None;
    }
    if given {
        if inv & INV_PROTO != 0 {
            w.push("!".into());
        }
        let name = match proto {
            6 => "tcp",
            17 => "udp",
            132 => "sctp",
            1 if family == IpFamily::V4 => "icmp",
            _ => return None,
        };
        w.extend(["-p".to_string(), name.to_string()]);
    } else if inv & INV_PROTO != 0 {
        return None;
    }
    Some(w)
}

/// `[!] -s net/len` (or `-d`), nothing for an empty mask.
fn address(addr: &[u8], mask: &[u8], inverted: bool, flag: &str) -> Option<Vec<String>> {
    let len = prefix_len(mask)?;
    if len == 0 {
        return (!inverted && addr.iter().all(|&b| b == 0)).then(Vec::new);
    }
    let masked: Vec<u8> = addr.iter().zip(mask).map(|(a, m)| a & m).collect();
    let ip = match masked.len() {
        4 => IpAddr::from(Ipv4Addr::from(<[u8; 4]>::try_from(masked).ok()?)),
        _ => IpAddr::from(Ipv6Addr::from(<[u8; 16]>::try_from(masked).ok()?)),
    };
    let mut w: Vec<String> = inverted.then(|| "!".to_string()).into_iter().collect();
    w.extend([flag.to_string(), format!("{ip}/{len}")]);
    Some(w)
}

/// `[!] -i name` (or `-o`): the mask covers the name and its NUL, or the name without its trailing `+`.
fn interface(name: &[u8], mask: &[u8], inverted: bool, flag: &str) -> Option<Vec<String>> {
    let text = c_string(name)?;
    let n = text.len();
    let covered = if text.ends_with('+') { n - 1 } else { n + 1 };
    let mask_ok = mask
        .iter()
        .enumerate()
        .all(|(i, &b)| b == if i < covered { 0xff } else { 0 });
    if n == 0 {
        return (!inverted && mask.iter().all(|&b| b == 0)).then(Vec::new);
    }
    if !mask_ok {
        return None;
    }
    let mut w: Vec<String> = inverted.then(|| "!".to_string()).into_iter().collect();
    w.extend([flag.to_string(), text]);
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Names;
    impl SetNames for Names {
        fn name(&mut self, index: u16) -> Option<String> {
            Some(format!("SET{index}"))
        }
    }

    /// A blob builder for one family: entries with matches and targets, offsets tracked.
    struct Blob {
        l: &'static Layout,
        bytes: Vec<u8>,
    }

    impl Blob {
        fn new(family: IpFamily) -> Blob {
            Blob {
                l: layout(family),
                bytes: Vec::new(),
            }
        }

        /// Appends an entry: address part `ip` (patched into a zeroed header), matches, target.
        fn entry(&mut self, ip: &[(usize, &[u8])], matches: &[Vec<u8>], target: Vec<u8>) -> u32 {
            let off = self.bytes.len();
            let mut e = vec![0u8; self.l.header];
            for (at, b) in ip {
                e[*at..*at + b.len()].copy_from_slice(b);
            }
            for m in matches {
                e.extend(m);
            }
            let target_at = e.len() as u16;
            e.extend(target);
            let next = e.len() as u16;
            e[self.l.target_at..self.l.target_at + 2].copy_from_slice(&target_at.to_ne_bytes());
            e[self.l.next_at..self.l.next_at + 2].copy_from_slice(&next.to_ne_bytes());
            self.bytes.extend(e);
            off as u32
        }
    }

    fn ext(name: &str, rev: u8, data: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 32];
        v[..2].copy_from_slice(&((32 + data.len()) as u16).to_ne_bytes());
        v[2..2 + name.len()].copy_from_slice(name.as_bytes());
        v[31] = rev;
        v.extend(data);
        v
    }

    fn verdict(v: i32) -> Vec<u8> {
        let mut d = v.to_ne_bytes().to_vec();
        d.extend([0; 4]);
        ext("", 0, &d)
    }

    fn error(name: &str) -> Vec<u8> {
        let mut d = vec![0u8; 32];
        d[..name.len()].copy_from_slice(name.as_bytes());
        ext("ERROR", 0, &d)
    }

    /// filter: INPUT with a jump to KUBE-X and a foreign `-p tcp` rule, FORWARD and OUTPUT empty, chain
    /// KUBE-X with `! -s 10.0.0.0/8 -m comment --comment "c d" -j DROP`, then a rule with an unknown match.
    fn filter_v4() -> (Vec<u8>, Hooks) {
        let mut b = Blob::new(IpFamily::V4);
        let mut comment = vec![0u8; 256];
        comment[..3].copy_from_slice(b"c d");
        let cm = ext("comment", 0, &comment);
        // INPUT: the jump's verdict is patched once KUBE-X's first rule offset is known.
        let jump = b.entry(&[], std::slice::from_ref(&cm), verdict(0));
        b.entry(&[(80, &6u16.to_ne_bytes())], &[], verdict(ACCEPT));
        let input_policy = b.entry(&[], &[], verdict(ACCEPT));
        let forward = b.entry(&[], &[], verdict(DROP));
        let output = b.entry(&[], &[], verdict(ACCEPT));
        b.entry(&[], &[], error("KUBE-X"));
        let ip: [(usize, &[u8]); 3] = [
            (0, &[10, 0, 0, 0]),
            (8, &[255, 0, 0, 0]),
            (83, &[INV_SRCIP]),
        ];
        let first = b.entry(&ip, &[cm], verdict(DROP));
        b.entry(&[], &[ext("tcp", 0, &[0; 16])], verdict(ACCEPT));
        b.entry(&[], &[], verdict(RETURN));
        b.entry(&[], &[], error("ERROR"));
        let at = jump as usize + 112 + 288 + 32;
        b.bytes[at..at + 4].copy_from_slice(&(first as i32).to_ne_bytes());
        let hooks = Hooks {
            valid: 0b1110,
            entry: [0, 0, forward, output, 0],
            underflow: [0, input_policy, forward, output, 0],
        };
        (b.bytes, hooks)
    }

    #[test]
    fn decodes_chains_rules_and_policies() {
        let (blob, hooks) = filter_v4();
        let d = decode("filter", IpFamily::V4, &blob, &hooks, &mut Names).expect("decodes");
        assert_eq!(
            d.text,
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-X - [0:0]\n\
             -A INPUT -m comment --comment \"c d\" -j KUBE-X\n-A INPUT -p tcp -j ACCEPT\n\
             -A KUBE-X ! -s 10.0.0.0/8 -m comment --comment \"c d\" -j DROP\n-A KUBE-X -m kprs-undecoded\nCOMMIT\n"
        );
        assert_eq!(d.undecoded, BTreeSet::from(["KUBE-X".to_string()]));
    }

    #[test]
    fn refuses_layouts_it_does_not_know() {
        let (blob, hooks) = filter_v4();
        let dec = |b: &[u8], h: &Hooks| decode("filter", IpFamily::V4, b, h, &mut Names);
        // Hooks not on entries, not contiguous, or a wrong set of valid hooks.
        let mut h = hooks;
        h.underflow[1] += 4;
        assert!(dec(&blob, &h).is_none());
        let mut h = hooks;
        h.entry[2] = 0;
        assert!(dec(&blob, &h).is_none());
        let mut h = hooks;
        h.valid = 0b11110;
        assert!(dec(&blob, &h).is_none());
        // Truncated, or without the end marker.
        assert!(dec(&blob[..blob.len() - 8], &hooks).is_none());
        let cut = blob.len() - (112 + 64);
        assert!(dec(&blob[..cut], &hooks).is_none());
        // A table the decoder has no built-in chains for.
        assert!(decode("odd", IpFamily::V4, &blob, &hooks, &mut Names).is_none());
    }

    #[test]
    fn decodes_ipv6_addresses_and_targets() {
        let mut b = Blob::new(IpFamily::V6);
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let mut mask = [0u8; 16];
        mask[..8].fill(0xff);
        let ip: [(usize, &[u8]); 4] = [
            (0, &src),
            (32, &mask),
            (128, &6u16.to_ne_bytes()),
            (131, &[1]),
        ];
        let mut reject = 4u32.to_ne_bytes().to_vec();
        reject.extend([0; 4]);
        b.entry(&ip, &[], ext("REJECT", 0, &reject));
        let mut masq = (1u32 << 4).to_ne_bytes().to_vec();
        masq.extend([0; 36]);
        b.entry(&[], &[], ext("MASQUERADE", 0, &masq));
        let policies: Vec<u32> = (0..4).map(|_| b.entry(&[], &[], verdict(ACCEPT))).collect();
        b.entry(&[], &[], error("ERROR"));
        let hooks = Hooks {
            valid: 0b11011,
            entry: [0, policies[1], 0, policies[2], policies[3]],
            underflow: [policies[0], policies[1], 0, policies[2], policies[3]],
        };
        let d = decode("nat", IpFamily::V6, &b.bytes, &hooks, &mut Names).expect("decodes");
        assert!(d.text.contains(
            "-A PREROUTING -s 2001:db8::/64 -p tcp -j REJECT --reject-with icmp6-port-unreachable\n\
             -A PREROUTING -j MASQUERADE --random-fully\n"
        ), "{}", d.text);
        assert!(d.undecoded.is_empty());
    }

    #[test]
    fn interfaces_and_addresses() {
        let mut name = [0u8; 16];
        name[..4].copy_from_slice(b"eth+");
        let mut mask = [0u8; 16];
        mask[..3].fill(0xff);
        assert_eq!(
            interface(&name, &mask, true, "-i"),
            Some(vec!["!".into(), "-i".into(), "eth+".into()])
        );
        mask[3] = 0xff;
        assert_eq!(interface(&name, &mask, false, "-i"), None);
        assert_eq!(interface(&[0; 16], &[0; 16], false, "-o"), Some(vec![]));
        assert_eq!(interface(&[0; 16], &[0; 16], true, "-o"), None);
        assert_eq!(
            address(&[10, 1, 2, 3], &[255, 255, 0, 0], false, "-d"),
            Some(vec!["-d".into(), "10.1.0.0/16".into()])
        );
        assert_eq!(address(&[0; 4], &[0; 4], true, "-s"), None);
        assert_eq!(address(&[1, 0, 0, 0], &[255, 0, 255, 0], false, "-s"), None);
    }
}
