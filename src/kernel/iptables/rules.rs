//! Tokenizing, normalizing and printing iptables rules the way `iptables-save` does (for the fake and for
//! comparing rules).

use crate::net::IpFamily;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Tables and their built-in chains, in `iptables-save` order.
pub fn builtin_chains(table: &str) -> Option<&'static [&'static str]> {
    Some(match table {
        "filter" => &["INPUT", "FORWARD", "OUTPUT"],
        "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        "mangle" => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
        "raw" => &["PREROUTING", "OUTPUT"],
        "security" => &["INPUT", "FORWARD", "OUTPUT"],
        _ => return None,
    })
}

/// Targets that are not chains.
pub const STANDARD_TARGETS: &[&str] = &[
    "ACCEPT",
    "DROP",
    "RETURN",
    "QUEUE",
    "NFQUEUE",
    "REJECT",
    "MASQUERADE",
    "MARK",
    "CONNMARK",
    "SNAT",
    "DNAT",
    "REDIRECT",
    "LOG",
    "NFLOG",
    "CT",
    "NOTRACK",
    "TPROXY",
    "TCPMSS",
    "TRACE",
    "CHECKSUM",
];

/// Splits a rule line into words: whitespace separated, `"..."` quoting with `\"` and `\\` escapes.
pub fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' => quoted = false,
                '\\' => match chars.next() {
                    Some(n) => cur.push(n),
                    None => return Err("dangling backslash".into()),
                },
                _ => cur.push(c),
            }
        } else if c == '"' {
            quoted = true;
            in_word = true;
        } else if c.is_whitespace() {
            if in_word {
                out.push(std::mem::take(&mut cur));
                in_word = false;
            }
        } else {
            cur.push(c);
            in_word = true;
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Prints one word the way `iptables-save` quotes strings (comments): bare when it only has letters,
/// digits, `_` and `-`, otherwise double-quoted with `"`, `\` and `'` escaped.
pub fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return word.to_string();
    }
    let mut s = String::from("\"");
    for c in word.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

/// Prints rule words as `iptables-save` does: comments quoted when needed, other words as they are
/// (quoted only if they hold whitespace).
pub fn render(words: &[String]) -> String {
    let mut out = Vec::with_capacity(words.len());
    let mut prev = "";
    for w in words {
        if prev == "--comment" || w.is_empty() || w.chars().any(char::is_whitespace) {
            out.push(quote(w));
        } else {
            out.push(w.clone());
        }
        prev = w;
    }
    out.join(" ")
}

/// Splits an `iptables-save` text of several tables into one text per table (`*name` … `COMMIT`).
pub fn split_tables(saved: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in saved.lines() {
        if let Some(name) = line.strip_prefix('*') {
            current = Some((name.trim().to_string(), format!("{line}\n")));
            continue;
        }
        if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
            if line == "COMMIT"
                && let Some((name, text)) = current.take()
            {
                out.insert(name, text);
            }
        }
    }
    out
}

fn address(value: &str, family: IpFamily) -> Result<String, String> {
    let (ip, len) = match value.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (value, None),
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("host/network `{value}' not found"))?;
    if IpFamily::of(&ip) != family {
        return Err(format!("host/network `{value}' not found"));
    }
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("invalid mask `{l}' specified"))?,
    };
    let net = ipnet::IpNet::new(ip, len).map_err(|e| e.to_string())?;
    Ok(format!("{}/{}", net.network(), len))
}

/// The basic matches `-s -d -i -o -p` (in that order), each with its negation and normalized value.
type BasicMatches = [Option<(bool, String)>; 5];

/// Normalizes rule words (everything after `-A <chain>`) to the form `iptables-save` prints: basic
/// matches (`-s -d -i -o -p`, with `!`) first in that order, addresses as masked `net/len`, long option
/// names shortened, MARK shorthands as `--set-xmark`, REJECT with its default `--reject-with`.
pub fn normalize(words: &[String], family: IpFamily) -> Result<Vec<String>, String> {
    let (basic, rest) = split_basic(words, family)?;
    let mut rest = normalize_ipvs(rest, family)?;
    implicit_protocol_match(&basic, &mut rest);
    let is_reject = rest.windows(2).any(|p| p[0] == "-j" && p[1] == "REJECT");
    if is_reject && !rest.iter().any(|w| w == "--reject-with") {
        rest.push("--reject-with".into());
        rest.push(match family {
            IpFamily::V4 => "icmp-port-unreachable".into(),
            IpFamily::V6 => "icmp6-port-unreachable".into(),
        });
    }
    let flags = ["-s", "-d", "-i", "-o", "-p"];
    let mut out = Vec::with_capacity(words.len() + 2);
    for (slot, flag) in basic.into_iter().zip(flags) {
        if let Some((neg, value)) = slot {
            if neg {
                out.push("!".to_string());
            }
            out.push(flag.to_string());
            out.push(value);
        }
    }
    out.extend(rest);
    Ok(out)
}

/// Separates the basic matches from the other words; shortens long option names and MARK shorthands.
fn split_basic(words: &[String], family: IpFamily) -> Result<(BasicMatches, Vec<String>), String> {
    let mut basic: BasicMatches = Default::default();
    let mut rest: Vec<String> = Vec::new();
    let mut i = 0;
    let mut negate = false;
    let arg = |i: usize, w: &str| {
        words
            .get(i + 1)
            .ok_or_else(|| format!("option \"{w}\" requires an argument"))
    };
    while i < words.len() {
        let w = words[i].as_str();
        if w == "!" {
            negate = true;
            i += 1;
            continue;
        }
        if let Some(slot) = basic_slot(w) {
            let value = arg(i, w)?;
            let value = match slot {
                0 | 1 => address(value, family)?,
                4 => value.to_ascii_lowercase(),
                _ => value.clone(),
            };
            if basic[slot].is_some() {
                return Err(format!("multiple {w} flags not allowed"));
            }
            basic[slot] = Some((negate, value));
            negate = false;
            i += 2;
            continue;
        }
        if negate {
            rest.push("!".into());
            negate = false;
        }
        let w = match w {
            "--jump" => "-j",
            "--goto" => "-g",
            "--match" => "-m",
            other => other,
        };
        if let Some(mark) = set_xmark(w, arg(i, w).ok()) {
            rest.push("--set-xmark".into());
            rest.push(mark?);
            i += 2;
            continue;
        }
        rest.push(w.to_string());
        i += 1;
    }
    if negate {
        return Err("dangling `!'".into());
    }
    Ok((basic, rest))
}

/// Index of a basic match option in [`BasicMatches`].
fn basic_slot(w: &str) -> Option<usize> {
    match w {
        "-s" | "--source" | "--src" => Some(0),
        "-d" | "--destination" | "--dst" => Some(1),
        "-i" | "--in-interface" => Some(2),
        "-o" | "--out-interface" => Some(3),
        "-p" | "--protocol" => Some(4),
        _ => None,
    }
}

/// The `--set-xmark` value of a MARK shorthand option `w` with argument `v`; None if `w` is not one.
fn set_xmark(w: &str, v: Option<&String>) -> Option<Result<String, String>> {
    if !matches!(w, "--or-mark" | "--xor-mark" | "--set-mark") {
        return None;
    }
    let Some(v) = v else {
        return Some(Err(format!("option \"{w}\" requires an argument")));
    };
    Some(Ok(match w {
        "--or-mark" => format!("{v}/{v}"),
        "--xor-mark" => format!("{v}/0x0"),
        _ if v.contains('/') => v.clone(),
        _ => format!("{v}/0xffffffff"),
    }))
}

/// `-p tcp --dport 22` loads the protocol's match implicitly; iptables-save prints `-m tcp`.
fn implicit_protocol_match(basic: &BasicMatches, rest: &mut Vec<String>) {
    if let Some((false, proto)) = &basic[4]
        && matches!(proto.as_str(), "tcp" | "udp" | "sctp")
        && !rest.windows(2).any(|p| p[0] == "-m" && p[1] == *proto)
        && let Some(mut at) = rest.iter().position(|w| {
            matches!(
                w.as_str(),
                "--dport"
                    | "--sport"
                    | "--destination-port"
                    | "--source-port"
                    | "--tcp-flags"
                    | "--syn"
            )
        })
    {
        if at > 0 && rest[at - 1] == "!" {
            at -= 1;
        }
        rest.splice(at..at, ["-m".to_string(), proto.clone()]);
    }
}

/// Orders `-m ipvs` options as xt_ipvs prints them (`--ipvs --vproto --vaddr --vport --vdir --vmethod
/// --vportctl`) and prints a host `--vaddr` without its prefix length.
fn normalize_ipvs(words: Vec<String>, family: IpFamily) -> Result<Vec<String>, String> {
    const ORDER: &[&str] = &[
        "--ipvs",
        "--vproto",
        "--vaddr",
        "--vport",
        "--vdir",
        "--vmethod",
        "--vportctl",
    ];
    let Some(start) = words
        .windows(2)
        .position(|p| p[0] == "-m" && p[1] == "ipvs")
    else {
        return Ok(words);
    };
    let body_start = start + 2;
    let body_end = words[body_start..]
        .iter()
        .position(|w| matches!(w.as_str(), "-m" | "-j" | "-g"))
        .map_or(words.len(), |i| body_start + i);
    // (option, negated, value) groups.
    let mut groups: Vec<(usize, Vec<String>)> = Vec::new();
    let mut i = body_start;
    while i < body_end {
        let mut group = Vec::new();
        if words[i] == "!" {
            group.push("!".to_string());
            i += 1;
        }
        let Some(opt) = words.get(i).filter(|_| i < body_end) else {
            return Err("dangling `!' in ipvs match".into());
        };
        let rank = ORDER
            .iter()
            .position(|o| o == opt)
            .ok_or_else(|| format!("ipvs: unknown option \"{opt}\""))?;
        group.push(opt.clone());
        i += 1;
        let takes_value = !matches!(opt.as_str(), "--ipvs");
        if takes_value {
            let value = words
                .get(i)
                .filter(|_| i < body_end)
                .ok_or_else(|| format!("ipvs: option \"{opt}\" requires an argument"))?;
            let value = if opt == "--vaddr" {
                let full = address(value, family)?;
                let host = if family == IpFamily::V4 {
                    "/32"
                } else {
                    "/128"
                };
                full.strip_suffix(host).map(str::to_string).unwrap_or(full)
            } else {
                value.clone()
            };
            group.push(value);
            i += 1;
        }
        groups.push((rank, group));
    }
    groups.sort_by_key(|(rank, _)| *rank);
    let mut out: Vec<String> = words[..body_start].to_vec();
    out.extend(groups.into_iter().flat_map(|(_, g)| g));
    out.extend(words[body_end..].iter().cloned());
    Ok(out)
}

/// The jump (`-j`) or goto (`-g`) target of normalized words.
pub fn target(words: &[String]) -> Option<&str> {
    words
        .windows(2)
        .find(|p| p[0] == "-j" || p[0] == "-g")
        .map(|p| p[1].as_str())
}

/// Sets named by `--match-set` in normalized words (for the fake, which checks set references).
#[cfg(any(test, feature = "testkit"))]
pub fn match_sets(words: &[String]) -> impl Iterator<Item = &str> {
    words
        .windows(2)
        .filter(|p| p[0] == "--match-set")
        .map(|p| p[1].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_save_of_several_tables() {
        let saved = "# Generated by iptables-save\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j KUBE-X\nCOMMIT\n\
                     # Completed\n*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n";
        let t = split_tables(saved);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t["filter"],
            "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j KUBE-X\nCOMMIT\n"
        );
        assert_eq!(t["nat"], "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n");
        assert!(split_tables("*nat\n:PREROUTING ACCEPT [0:0]\n").is_empty());
    }

    fn w(s: &str) -> Vec<String> {
        tokenize(s).unwrap()
    }

    #[test]
    fn tokenize_and_render_roundtrip() {
        let words = w(r#"-m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#);
        assert_eq!(words[3], "kubernetes service portals");
        assert_eq!(
            render(&words),
            r#"-m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#
        );
        assert_eq!(
            render(&w("-m comment --comment abc-1 -j X")),
            "-m comment --comment abc-1 -j X"
        );
        assert_eq!(render(&w(r#"--comment "a\"b""#)), r#"--comment "a\"b""#);
        assert!(tokenize("\"abc").is_err());
    }

    #[test]
    fn normalize_like_save() {
        let n = normalize(
            &w(r#"-m comment --comment "x y" -m set --match-set S dst,dst ! -s 10.244.1.0/16 -j KUBE-MARK-MASQ"#),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(
            render(&n),
            r#"! -s 10.244.0.0/16 -m comment --comment "x y" -m set --match-set S dst,dst -j KUBE-MARK-MASQ"#
        );
        let n = normalize(&w("-j MARK --or-mark 0x4000"), IpFamily::V4).unwrap();
        assert_eq!(render(&n), "-j MARK --set-xmark 0x4000/0x4000");
        let n = normalize(&w("-j MARK --xor-mark 0x4000"), IpFamily::V4).unwrap();
        assert_eq!(render(&n), "-j MARK --set-xmark 0x4000/0x0");
        let n = normalize(&w("-s ::1 -j REJECT"), IpFamily::V6).unwrap();
        assert_eq!(
            render(&n),
            "-s ::1/128 -j REJECT --reject-with icmp6-port-unreachable"
        );
        assert!(normalize(&w("-s 10.0.0.1 -j DROP"), IpFamily::V6).is_err());
        assert_eq!(target(&n), Some("REJECT"));
        let n = normalize(
            &w("-m set --match-set A dst -m set ! --match-set B src -j X"),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(match_sets(&n).collect::<Vec<_>>(), vec!["A", "B"]);
        let n = normalize(&w("-p tcp ! --dport 22 -j ACCEPT"), IpFamily::V4).unwrap();
        assert_eq!(render(&n), "-p tcp -m tcp ! --dport 22 -j ACCEPT");
        let n = normalize(&w("-p udp -m udp --dport 53 -j ACCEPT"), IpFamily::V4).unwrap();
        assert_eq!(render(&n), "-p udp -m udp --dport 53 -j ACCEPT");
        let n = normalize(
            &w("-s 10.0.0.50 -m ipvs --vaddr 10.0.0.50/32 --vproto 6 --vport 80 -j DROP"),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(
            render(&n),
            "-s 10.0.0.50/32 -m ipvs --vproto 6 --vaddr 10.0.0.50 --vport 80 -j DROP"
        );
        let n = normalize(
            &w("-m ipvs --vaddr 10.0.0.0/8 ! --vproto 17 -j DROP"),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(
            render(&n),
            "-m ipvs ! --vproto 17 --vaddr 10.0.0.0/8 -j DROP"
        );
    }
}
