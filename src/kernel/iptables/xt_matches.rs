//! The matches of an x_tables rule as `iptables-save` prints them (`-m <name>` and its options), for the
//! matches and options the planner writes: `comment`, `set`, `mark`, `conntrack --ctstate`, `addrtype`,
//! `physdev --physdev-is-in` and `ipvs --vproto/--vaddr/--vport`. Any other match, revision, size or
//! option gives None: the caller then treats the rule as one it cannot read.
//!
//! Layouts are the kernel's uapi structures (`linux/netfilter/xt_*.h`), in host byte order unless noted.

use crate::net::IpFamily;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Reads set names by index (`ip_set_id_t`), as `iptables-save` does.
pub trait SetNames {
    /// The name of the set with this index, or None.
    fn name(&mut self, index: u16) -> Option<String>;
}

/// One match's header fields and data.
pub struct Match<'a> {
    pub name: &'a str,
    pub revision: u8,
    /// The data after the 32-byte header (its length is the aligned size of the match's struct).
    pub data: &'a [u8],
}

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A NUL-terminated UTF-8 string filling at most `b`.
pub(super) fn c_string(b: &[u8]) -> Option<String> {
    let n = b.iter().position(|&c| c == 0)?;
    String::from_utf8(b[..n].to_vec()).ok()
}

/// `!` when `inverted`, for the word list.
fn bang(inverted: bool) -> Option<String> {
    inverted.then(|| "!".to_string())
}

/// The words `iptables-save` prints for one match, `-m <name>` included; None for anything else than
/// the forms listed in the module doc.
pub fn words(m: &Match<'_>, family: IpFamily, sets: &mut dyn SetNames) -> Option<Vec<String>> {
    let options = match (m.name, m.revision, m.data.len()) {
        ("comment", 0, 256) => vec!["--comment".to_string(), c_string(m.data)?],
        ("set", 4, 48) => set(m.data, sets)?,
        ("mark", 1, 16) => mark(m.data)?,
        ("conntrack", 3, 168) => conntrack(m.data)?,
        ("addrtype", 1, 8) => addrtype(m.data)?,
        ("physdev", 0, 72) => physdev(m.data)?,
        ("ipvs", 0, 40) => ipvs(m.data, family)?,
        _ => return None,
    };
    let mut out = vec!["-m".to_string(), m.name.to_string()];
    out.extend(options);
    Some(out)
}

/// `xt_set_info_match_v4`: set index, dimension and direction flags; no counter conditions or flags.
fn set(d: &[u8], sets: &mut dyn SetNames) -> Option<Vec<String>> {
    const INVERT: u8 = 1;
    let index = u16_at(d, 0)?;
    let (dim, flags) = (*d.get(2)?, *d.get(3)?);
    let (packets_op, bytes_op, match_flags) = (*d.get(16)?, *d.get(32)?, u32_at(d, 40)?);
    if !(1..=6).contains(&dim) || packets_op != 0 || bytes_op != 0 || match_flags != 0 {
        return None;
    }
    let dims = (1..=dim)
        .map(|i| if flags & (1 << i) != 0 { "src" } else { "dst" })
        .collect::<Vec<_>>()
        .join(",");
    let known = INVERT | (((1u16 << (dim + 1)) - 2) as u8);
    if flags & !known != 0 {
        return None;
    }
    let mut w: Vec<String> = bang(flags & INVERT != 0).into_iter().collect();
    w.extend(["--match-set".to_string(), sets.name(index)?, dims]);
    Some(w)
}

/// `xt_mark_mtinfo1`: mark, mask, invert.
fn mark(d: &[u8]) -> Option<Vec<String>> {
    let (mark, mask, invert) = (u32_at(d, 0)?, u32_at(d, 4)?, *d.get(8)?);
    if invert > 1 {
        return None;
    }
    let value = if mask == u32::MAX {
        format!("0x{mark:x}")
    } else {
        format!("0x{mark:x}/0x{mask:x}")
    };
    let mut w: Vec<String> = bang(invert == 1).into_iter().collect();
    w.extend(["--mark".to_string(), value]);
    Some(w)
}

/// `xt_conntrack_mtinfo3` with only the state condition (`--ctstate`).
fn conntrack(d: &[u8]) -> Option<Vec<String>> {
    const STATE: u16 = 1;
    // In the order iptables prints them; bit = the state's bit in `state_mask`.
    const STATES: [(u16, &str); 7] = [
        (1 << 0, "INVALID"),
        (1 << 3, "NEW"),
        (1 << 2, "RELATED"),
        (1 << 1, "ESTABLISHED"),
        (1 << 8, "UNTRACKED"),
        (1 << 6, "SNAT"),
        (1 << 7, "DNAT"),
    ];
    let (flags, invert, mask) = (u16_at(d, 146)?, u16_at(d, 148)?, u16_at(d, 150)?);
    let all = STATES.iter().fold(0, |a, (b, _)| a | b);
    if flags != STATE || invert & !STATE != 0 || mask == 0 || mask & !all != 0 {
        return None;
    }
    let names: Vec<&str> = STATES
        .iter()
        .filter(|(b, _)| mask & b != 0)
        .map(|(_, n)| *n)
        .collect();
    let mut w: Vec<String> = bang(invert != 0).into_iter().collect();
    w.extend(["--ctstate".to_string(), names.join(",")]);
    Some(w)
}

/// `xt_addrtype_info_v1`: source and destination types, each maybe inverted.
fn addrtype(d: &[u8]) -> Option<Vec<String>> {
    const TYPES: [&str; 12] = [
        "UNSPEC",
        "UNICAST",
        "LOCAL",
        "BROADCAST",
        "ANYCAST",
        "MULTICAST",
        "BLACKHOLE",
        "UNREACHABLE",
        "PROHIBIT",
        "THROW",
        "NAT",
        "XRESOLVE",
    ];
    let (source, dest, flags) = (u16_at(d, 0)?, u16_at(d, 2)?, u32_at(d, 4)?);
    let types = |bits: u16| -> Option<String> {
        if bits >> TYPES.len() != 0 {
            return None;
        }
        let names: Vec<&str> = (0..TYPES.len())
            .filter(|i| bits & (1 << i) != 0)
            .map(|i| TYPES[i])
            .collect();
        Some(names.join(","))
    };
    // Only the inversion flags, each with its type given.
    if flags & !3 != 0 || (flags & 1 != 0 && source == 0) || (flags & 2 != 0 && dest == 0) {
        return None;
    }
    let mut w = Vec::new();
    for (bits, inverted, option) in [
        (source, flags & 1 != 0, "--src-type"),
        (dest, flags & 2 != 0, "--dst-type"),
    ] {
        if bits != 0 {
            w.extend(bang(inverted));
            w.extend([option.to_string(), types(bits)?]);
        }
    }
    (!w.is_empty()).then_some(w)
}

/// `xt_physdev_info` with only `--physdev-is-in`.
fn physdev(d: &[u8]) -> Option<Vec<String>> {
    const IS_IN: u8 = 0x08;
    let (invert, bitmask) = (*d.get(64)?, *d.get(65)?);
    if bitmask != IS_IN || invert & !IS_IN != 0 {
        return None;
    }
    let mut w: Vec<String> = bang(invert != 0).into_iter().collect();
    w.push("--physdev-is-in".to_string());
    Some(w)
}

/// `xt_ipvs_mtinfo` with the protocol, virtual address and virtual port conditions (any of them).
fn ipvs(d: &[u8], family: IpFamily) -> Option<Vec<String>> {
    const PROPERTY: u8 = 1;
    const PROTO: u8 = 2;
    const VADDR: u8 = 4;
    const VPORT: u8 = 8;
    let (proto, invert, bitmask) = (*d.get(34)?, *d.get(38)?, *d.get(39)?);
    let known = PROPERTY | PROTO | VADDR | VPORT;
    if bitmask & !known != 0 || bitmask & PROPERTY == 0 || invert & !bitmask != 0 {
        return None;
    }
    let mut w = Vec::new();
    if bitmask == PROPERTY {
        w.extend(bang(invert & PROPERTY != 0));
        w.push("--ipvs".to_string());
    }
    if bitmask & PROTO != 0 {
        w.extend(bang(invert & PROTO != 0));
        w.extend(["--vproto".to_string(), proto.to_string()]);
    }
    if bitmask & VADDR != 0 {
        w.extend(bang(invert & VADDR != 0));
        w.extend(["--vaddr".to_string(), vaddr(d, family)?]);
    }
    if bitmask & VPORT != 0 {
        let port = u16::from_be_bytes(d.get(32..34)?.try_into().ok()?);
        w.extend(bang(invert & VPORT != 0));
        w.extend(["--vport".to_string(), port.to_string()]);
    }
    Some(w)
}

/// The `--vaddr` of an ipvs match: the address, with `/len` unless it is a host mask.
fn vaddr(d: &[u8], family: IpFamily) -> Option<String> {
    let (addr, mask) = match family {
        IpFamily::V4 => {
            let a: [u8; 4] = d.get(0..4)?.try_into().ok()?;
            let m: [u8; 4] = d.get(16..20)?.try_into().ok()?;
            (IpAddr::from(Ipv4Addr::from(a)), m.to_vec())
        }
        IpFamily::V6 => {
            let a: [u8; 16] = d.get(0..16)?.try_into().ok()?;
            (IpAddr::from(Ipv6Addr::from(a)), d.get(16..32)?.to_vec())
        }
    };
    let len = prefix_len(&mask)?;
    if usize::from(len) == mask.len() * 8 {
        Some(addr.to_string())
    } else {
        Some(format!("{addr}/{len}"))
    }
}

/// The prefix length of a contiguous network mask (big-endian bytes), or None.
pub(super) fn prefix_len(mask: &[u8]) -> Option<u8> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let full = (ones / 8) as usize;
    let ok = mask.iter().enumerate().all(|(i, &b)| {
        if i < full {
            b == 0xff
        } else if i == full {
            b == (0xffu16 << (8 - ones % 8)) as u8
        } else {
            b == 0
        }
    });
    ok.then(|| u8::try_from(ones).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Names;
    impl SetNames for Names {
        fn name(&mut self, index: u16) -> Option<String> {
            (index == 3).then(|| "KUBE-CLUSTER-IP".to_string())
        }
    }

    fn m<'a>(name: &'a str, revision: u8, data: &'a [u8]) -> Match<'a> {
        Match {
            name,
            revision,
            data,
        }
    }

    fn w(v: Option<Vec<String>>) -> String {
        v.map(|v| v.join(" ")).unwrap_or_else(|| "NONE".into())
    }

    #[test]
    fn decodes_the_planner_forms_and_refuses_others() {
        let v4 = IpFamily::V4;
        let mut comment = [0u8; 256];
        comment[..5].copy_from_slice(b"a b c");
        assert_eq!(
            w(words(&m("comment", 0, &comment), v4, &mut Names)),
            "-m comment --comment a b c"
        );
        // set: index 3, two dimensions, the second one src, inverted.
        let mut set = [0u8; 48];
        set[0..2].copy_from_slice(&3u16.to_ne_bytes());
        set[2] = 2;
        set[3] = 1 | (1 << 2);
        assert_eq!(
            w(words(&m("set", 4, &set), v4, &mut Names)),
            "-m set ! --match-set KUBE-CLUSTER-IP dst,src"
        );
        set[16] = 1; // a packet counter condition
        assert_eq!(w(words(&m("set", 4, &set), v4, &mut Names)), "NONE");
        set[16] = 0;
        set[0] = 4; // unknown index
        assert_eq!(w(words(&m("set", 4, &set), v4, &mut Names)), "NONE");
        let mut mark = [0u8; 16];
        mark[0..4].copy_from_slice(&0x4000u32.to_ne_bytes());
        mark[4..8].copy_from_slice(&0x4000u32.to_ne_bytes());
        mark[8] = 1;
        assert_eq!(
            w(words(&m("mark", 1, &mark), v4, &mut Names)),
            "-m mark ! --mark 0x4000/0x4000"
        );
        let mut ct = [0u8; 168];
        ct[146..148].copy_from_slice(&1u16.to_ne_bytes());
        ct[150..152].copy_from_slice(&(2u16 | 4).to_ne_bytes());
        assert_eq!(
            w(words(&m("conntrack", 3, &ct), v4, &mut Names)),
            "-m conntrack --ctstate RELATED,ESTABLISHED"
        );
        ct[146] = 3; // a protocol condition too
        assert_eq!(w(words(&m("conntrack", 3, &ct), v4, &mut Names)), "NONE");
        let mut at = [0u8; 8];
        at[0..2].copy_from_slice(&4u16.to_ne_bytes());
        at[4] = 1;
        assert_eq!(
            w(words(&m("addrtype", 1, &at), v4, &mut Names)),
            "-m addrtype ! --src-type LOCAL"
        );
        let mut pd = [0u8; 72];
        pd[64] = 8;
        pd[65] = 8;
        assert_eq!(
            w(words(&m("physdev", 0, &pd), v4, &mut Names)),
            "-m physdev ! --physdev-is-in"
        );
        let mut ipvs = [0u8; 40];
        ipvs[0..4].copy_from_slice(&[10, 96, 0, 1]);
        ipvs[16..20].copy_from_slice(&[255; 4]);
        ipvs[32..34].copy_from_slice(&80u16.to_be_bytes());
        ipvs[34] = 6;
        ipvs[39] = 1 | 2 | 4 | 8;
        assert_eq!(
            w(words(&m("ipvs", 0, &ipvs), v4, &mut Names)),
            "-m ipvs --vproto 6 --vaddr 10.96.0.1 --vport 80"
        );
        // Unknown matches, revisions or sizes.
        assert_eq!(w(words(&m("comment", 1, &comment), v4, &mut Names)), "NONE");
        assert_eq!(w(words(&m("tcp", 0, &[0; 16]), v4, &mut Names)), "NONE");
        assert_eq!(w(words(&m("mark", 1, &[0; 8]), v4, &mut Names)), "NONE");
    }

    #[test]
    fn prefix_lengths() {
        assert_eq!(prefix_len(&[255, 255, 255, 0]), Some(24));
        assert_eq!(prefix_len(&[255, 240, 0, 0]), Some(12));
        assert_eq!(prefix_len(&[0; 16]), Some(0));
        assert_eq!(prefix_len(&[255; 16]), Some(128));
        assert_eq!(prefix_len(&[255, 0, 255, 0]), None);
        assert_eq!(prefix_len(&[254, 1, 0, 0]), None);
    }
}
