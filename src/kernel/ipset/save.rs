//! Parsing of `ipset save` (and `ipset list -t`) output.

use super::{IpSetSize, IpSetType};
use crate::net::IpFamily;
use std::collections::{BTreeMap, BTreeSet};

/// Header of one set as `ipset save` declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetHeader {
    /// Type as ipset names it (`hash:ip,port`), kept even when it is not one of ours.
    pub type_name: String,
    /// The type when it is one kube-proxy uses.
    pub set_type: Option<IpSetType>,
    /// `family` option (bitmap sets have none).
    pub family: Option<IpFamily>,
    /// `hashsize` (as it is now: the kernel doubles it as the set fills) and `maxelem` of a hash set;
    /// None for bitmap sets, or where the header does not show them.
    pub size: Option<IpSetSize>,
}

/// Parsed `ipset save` output: set headers and members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedSets {
    pub headers: BTreeMap<String, SetHeader>,
    pub members: BTreeMap<String, BTreeSet<String>>,
}

/// The set type named `s`, if kube-proxy uses it.
pub fn parse_type(s: &str) -> Option<IpSetType> {
    Some(match s {
        "hash:ip" => IpSetType::HashIp,
        "hash:ip,port" => IpSetType::HashIpPort,
        "hash:ip,port,ip" => IpSetType::HashIpPortIp,
        "hash:ip,port,net" => IpSetType::HashIpPortNet,
        "bitmap:port" => IpSetType::BitmapPort,
        _ => return None,
    })
}

/// The value after option `name` in a header's options.
fn option<'a>(opts: &[&'a str], name: &str) -> Option<&'a str> {
    let i = opts.iter().position(|o| *o == name)?;
    opts.get(i + 1).copied()
}

fn parse_family(opts: &[&str]) -> Option<IpFamily> {
    match option(opts, "family") {
        Some("inet") => Some(IpFamily::V4),
        Some("inet6") => Some(IpFamily::V6),
        _ => None,
    }
}

/// `hashsize` and `maxelem` of a header; None unless `maxelem` is there (hashsize defaults as ipset's).
fn parse_size(opts: &[&str]) -> Option<IpSetSize> {
    let maxelem = option(opts, "maxelem")?.parse().ok()?;
    let hashsize = option(opts, "hashsize")
        .and_then(|v| v.parse().ok())
        .unwrap_or(IpSetSize::UPSTREAM.hashsize);
    Some(IpSetSize { hashsize, maxelem })
}

/// Parses `ipset save` output. Comment lines, blank lines, unknown commands and any options after the
/// entry (timeout, comment "...", counters, skbinfo) are ignored; a member of an undeclared set still
/// creates that set's entry in `members`.
pub fn parse_save(text: &str) -> SavedSets {
    let mut out = SavedSets::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["create", name, type_name, opts @ ..] => {
                out.headers.insert(
                    name.to_string(),
                    SetHeader {
                        type_name: type_name.to_string(),
                        set_type: parse_type(type_name),
                        family: parse_family(opts),
                        size: parse_size(opts),
                    },
                );
                out.members.entry(name.to_string()).or_default();
            }
            ["add", name, entry, ..] => {
                out.members
                    .entry(name.to_string())
                    .or_default()
                    .insert(entry.to_string());
            }
            _ => {}
        }
    }
    out
}

/// Parses `ipset list -t` (terse) output into headers.
pub fn parse_list_terse(text: &str) -> BTreeMap<String, SetHeader> {
    let mut out = BTreeMap::new();
    let mut name: Option<String> = None;
    let mut type_name: Option<String> = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Name:") {
            name = Some(v.trim().to_string());
            type_name = None;
        } else if let Some(v) = line.strip_prefix("Type:") {
            type_name = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("Header:")
            && let (Some(n), Some(t)) = (name.take(), type_name.take())
        {
            let opts: Vec<&str> = v.split_whitespace().collect();
            out.insert(
                n,
                SetHeader {
                    set_type: parse_type(&t),
                    type_name: t,
                    family: parse_family(&opts),
                    size: parse_size(&opts),
                },
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_save_with_comments_options_and_v6() {
        let text = "# a comment\n\
create FOREIGN hash:net family inet hashsize 1024 maxelem 65536 comment\n\
add FOREIGN 10.0.0.0/8 comment \"hello world\"\n\
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\n\
add KUBE-NODE-PORT-TCP 30080\n\
create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1234\n\
add KUBE-6-CLUSTER-IP fd00::1,tcp:443 timeout 0\n\
\n\
create EMPTY hash:ip family inet hashsize 1024 maxelem 65536\n";
        let s = parse_save(text);
        assert_eq!(s.members.len(), 4);
        assert!(s.members["EMPTY"].is_empty());
        assert_eq!(
            s.members["KUBE-6-CLUSTER-IP"].iter().collect::<Vec<_>>(),
            vec!["fd00::1,tcp:443"]
        );
        assert_eq!(s.members["FOREIGN"].len(), 1);
        let h = &s.headers["KUBE-6-CLUSTER-IP"];
        assert_eq!(h.set_type, Some(IpSetType::HashIpPort));
        assert_eq!(h.family, Some(IpFamily::V6));
        assert_eq!(s.headers["FOREIGN"].set_type, None);
        assert_eq!(s.headers["KUBE-NODE-PORT-TCP"].family, None);
        assert_eq!(h.size, Some(IpSetSize::UPSTREAM));
        assert_eq!(s.headers["KUBE-NODE-PORT-TCP"].size, None);
    }

    #[test]
    fn parses_terse_list() {
        let text = "Name: A\nType: hash:ip,port,net\nRevision: 7\nHeader: family inet6 hashsize 4096 maxelem 262144\nSize in memory: 1\nReferences: 0\nNumber of entries: 0\nName: B\nType: bitmap:port\nRevision: 3\nHeader: range 0-65535\n";
        let h = parse_list_terse(text);
        assert_eq!(h["A"].set_type, Some(IpSetType::HashIpPortNet));
        assert_eq!(h["A"].family, Some(IpFamily::V6));
        let size = IpSetSize {
            hashsize: 4096,
            maxelem: 262144,
        };
        assert_eq!(h["A"].size, Some(size));
        assert_eq!(h["B"].set_type, Some(IpSetType::BitmapPort));
    }
}
