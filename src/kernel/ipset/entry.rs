//! One ipset member as a typed value, parsed and printed here only, per set type and family.
//!
//! The printed form is what `ipset save` prints: `10.96.0.1`, `10.96.0.1,tcp:443`,
//! `10.244.0.12,tcp:8080,10.244.0.12`, `1.2.3.4,tcp:80,10.0.0.0/8`, `30080`; IPv6 addresses compressed.

use super::IpSetType;
use crate::net::{IpFamily, Protocol};
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// Why text is not a member of a set of a given type and family, as the kernel would refuse it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// Nothing but whitespace.
    #[error("empty entry")]
    Empty,
    /// Whitespace inside the member.
    #[error("entry {0:?} contains whitespace")]
    Whitespace(String),
    /// Another number of comma-separated parts than the set type has.
    #[error("entry {entry:?} has {found} comma-separated parts, the set type needs {needed}")]
    Parts {
        entry: String,
        found: usize,
        needed: usize,
    },
    /// Not an IP address.
    #[error("{text:?} is not an IP address")]
    Address {
        text: String,
        #[source]
        source: std::net::AddrParseError,
    },
    /// An address of the other family.
    #[error("{text} is not an {} address", family_name(*.family))]
    Family { text: String, family: IpFamily },
    /// Not digits.
    #[error("{0:?} is not a port number")]
    Port(String),
    /// Digits past 65535.
    #[error("port {text} out of range 0-65535")]
    PortRange {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    /// No `:` between protocol and port.
    #[error("{0:?} is not proto:port")]
    ProtoPort(String),
    /// Not tcp, udp or sctp.
    #[error("unsupported protocol {0:?}")]
    Protocol(String),
    /// A prefix length that is not digits.
    #[error("{0:?}: bad prefix length")]
    Prefix(String),
    /// A prefix length longer than the family's addresses.
    #[error("{0:?}: prefix length out of range")]
    PrefixRange(String),
    /// A `/0` network.
    #[error("{0:?}: ipset does not accept a /0 network")]
    ZeroPrefix(String),
    /// A network `ipnet` refuses.
    #[error("{text:?}: {source}")]
    Network {
        text: String,
        #[source]
        source: ipnet::PrefixLenError,
    },
}

fn family_name(family: IpFamily) -> &'static str {
    if family == IpFamily::V4 {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// A member of one of the set types kube-proxy uses (the variant is the set type). Networks are kept
/// masked, as the kernel keeps them, so two spellings of one member compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpSetEntry {
    /// `bitmap:port`: a port.
    Port(u16),
    /// `hash:ip`: an address.
    Ip(IpAddr),
    /// `hash:ip,port`: address, protocol and port.
    IpPort(IpAddr, Protocol, u16),
    /// `hash:ip,port,ip`: address, protocol, port and a second address (hairpin: the same endpoint; a
    /// load balancer's own address).
    IpPortIp(IpAddr, Protocol, u16, IpAddr),
    /// `hash:ip,port,net`: address, protocol, port and a source network.
    IpPortNet(IpAddr, Protocol, u16, IpNet),
}

impl IpSetEntry {
    /// A `hash:ip,port,net` member, its network masked.
    pub fn ip_port_net(ip: IpAddr, proto: Protocol, port: u16, net: IpNet) -> Self {
        IpSetEntry::IpPortNet(ip, proto, port, net.trunc())
    }

    /// The set type this member belongs in.
    pub fn set_type(&self) -> IpSetType {
        match self {
            IpSetEntry::Port(_) => IpSetType::BitmapPort,
            IpSetEntry::Ip(_) => IpSetType::HashIp,
            IpSetEntry::IpPort(..) => IpSetType::HashIpPort,
            IpSetEntry::IpPortIp(..) => IpSetType::HashIpPortIp,
            IpSetEntry::IpPortNet(..) => IpSetType::HashIpPortNet,
        }
    }

    /// The first address, protocol and port (`None` for a bitmap port or a bare address).
    pub fn target(&self) -> Option<(IpAddr, Protocol, u16)> {
        match *self {
            IpSetEntry::IpPort(ip, proto, port)
            | IpSetEntry::IpPortIp(ip, proto, port, _)
            | IpSetEntry::IpPortNet(ip, proto, port, _) => Some((ip, proto, port)),
            IpSetEntry::Port(_) | IpSetEntry::Ip(_) => None,
        }
    }

    /// The first address, if the member has one.
    pub fn addr(&self) -> Option<IpAddr> {
        match *self {
            IpSetEntry::Ip(ip) => Some(ip),
            _ => self.target().map(|(ip, _, _)| ip),
        }
    }

    /// Parses `text` as a member of a set of type `set_type` and `family`, or says why the kernel would
    /// refuse it.
    pub fn parse(set_type: IpSetType, family: IpFamily, text: &str) -> Result<Self, EntryError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(EntryError::Empty);
        }
        if text.chars().any(|c| c.is_whitespace()) {
            return Err(EntryError::Whitespace(text.to_string()));
        }
        let parts = |n| split_n(text, n);
        Ok(match set_type {
            IpSetType::BitmapPort => IpSetEntry::Port(parse_port(text)?),
            IpSetType::HashIp => IpSetEntry::Ip(parse_ip(text, family)?),
            IpSetType::HashIpPort => {
                let p = parts(2)?;
                let (proto, port) = parse_proto_port(p[1])?;
                IpSetEntry::IpPort(parse_ip(p[0], family)?, proto, port)
            }
            IpSetType::HashIpPortIp => {
                let p = parts(3)?;
                let (proto, port) = parse_proto_port(p[1])?;
                let ip2 = parse_ip(p[2], family)?;
                IpSetEntry::IpPortIp(parse_ip(p[0], family)?, proto, port, ip2)
            }
            IpSetType::HashIpPortNet => {
                let p = parts(3)?;
                let (proto, port) = parse_proto_port(p[1])?;
                let net = parse_net(p[2], family)?;
                IpSetEntry::IpPortNet(parse_ip(p[0], family)?, proto, port, net)
            }
        })
    }
}

/// As `ipset save` prints the member: a host network bare, any other with its prefix length.
impl fmt::Display for IpSetEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IpSetEntry::Port(port) => write!(f, "{port}"),
            IpSetEntry::Ip(ip) => write!(f, "{ip}"),
            IpSetEntry::IpPort(ip, proto, port) => write!(f, "{ip},{}:{port}", proto.as_lower()),
            IpSetEntry::IpPortIp(ip, proto, port, ip2) => {
                write!(f, "{ip},{}:{port},{ip2}", proto.as_lower())
            }
            IpSetEntry::IpPortNet(ip, proto, port, net) => {
                write!(f, "{ip},{}:{port},{}", proto.as_lower(), net.addr())?;
                if net.prefix_len() != net.max_prefix_len() {
                    write!(f, "/{}", net.prefix_len())?;
                }
                Ok(())
            }
        }
    }
}

/// Checks `entry` against a set of type `set_type` and `family` and returns its canonical text, or why
/// the kernel would refuse it.
pub fn canonical_entry(
    set_type: IpSetType,
    family: IpFamily,
    entry: &str,
) -> Result<String, EntryError> {
    IpSetEntry::parse(set_type, family, entry).map(|e| e.to_string())
}

fn split_n(entry: &str, n: usize) -> Result<Vec<&str>, EntryError> {
    let parts: Vec<&str> = entry.split(',').collect();
    if parts.len() != n {
        return Err(EntryError::Parts {
            entry: entry.to_string(),
            found: parts.len(),
            needed: n,
        });
    }
    Ok(parts)
}

fn parse_ip(s: &str, family: IpFamily) -> Result<IpAddr, EntryError> {
    let ip: IpAddr = s.parse().map_err(|source| EntryError::Address {
        text: s.to_string(),
        source,
    })?;
    if IpFamily::of(&ip) != family {
        return Err(EntryError::Family {
            text: s.to_string(),
            family,
        });
    }
    Ok(ip)
}

fn parse_port(s: &str) -> Result<u16, EntryError> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EntryError::Port(s.to_string()));
    }
    s.parse::<u16>().map_err(|source| EntryError::PortRange {
        text: s.to_string(),
        source,
    })
}

fn parse_proto_port(s: &str) -> Result<(Protocol, u16), EntryError> {
    let (proto, port) = s
        .split_once(':')
        .ok_or_else(|| EntryError::ProtoPort(s.to_string()))?;
    let proto = match proto {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        other => return Err(EntryError::Protocol(other.to_string())),
    };
    Ok((proto, parse_port(port)?))
}

/// A network `ip/prefix` (host bits masked like the kernel does; no prefix: a host).
fn parse_net(s: &str, family: IpFamily) -> Result<IpNet, EntryError> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let ip = parse_ip(ip, family)?;
    let max = if family == IpFamily::V4 { 32 } else { 128 };
    let len: u8 = match len {
        None => max,
        Some(l) => {
            if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
                return Err(EntryError::Prefix(s.to_string()));
            }
            l.parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| EntryError::PrefixRange(s.to_string()))?
        }
    };
    if len == 0 {
        return Err(EntryError::ZeroPrefix(s.to_string()));
    }
    let net = IpNet::new(ip, len).map_err(|source| EntryError::Network {
        text: s.to_string(),
        source,
    })?;
    Ok(net.trunc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpFamily::{V4, V6};
    use IpSetType::*;

    #[test]
    fn entry_errors_keep_their_cause() {
        use std::error::Error;
        let e = IpSetEntry::parse(HashIpPort, V4, "10.0.0.x,tcp:80").unwrap_err();
        assert_eq!(e.to_string(), "\"10.0.0.x\" is not an IP address");
        assert!(
            e.source()
                .is_some_and(|c| c.is::<std::net::AddrParseError>())
        );
        let e = IpSetEntry::parse(BitmapPort, V4, "70000").unwrap_err();
        assert_eq!(e.to_string(), "port 70000 out of range 0-65535");
        assert!(
            e.source()
                .is_some_and(|c| c.is::<std::num::ParseIntError>())
        );
        let e = IpSetEntry::parse(HashIp, V4, "fd00::1").unwrap_err();
        assert_eq!(e.to_string(), "fd00::1 is not an IPv4 address");
        assert!(e.source().is_none());
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(
            canonical_entry(HashIp, V4, "10.96.0.1").unwrap(),
            "10.96.0.1"
        );
        assert_eq!(
            canonical_entry(HashIp, V6, "fd00:0:0:0::0001").unwrap(),
            "fd00::1"
        );
        assert_eq!(
            canonical_entry(HashIpPort, V4, "10.96.0.1,tcp:443").unwrap(),
            "10.96.0.1,tcp:443"
        );
        assert_eq!(
            canonical_entry(HashIpPort, V6, "2001:db8:0::5,sctp:0").unwrap(),
            "2001:db8::5,sctp:0"
        );
        assert_eq!(
            canonical_entry(HashIpPortIp, V4, "10.244.0.12,tcp:8080,10.244.0.12").unwrap(),
            "10.244.0.12,tcp:8080,10.244.0.12"
        );
        assert_eq!(
            canonical_entry(HashIpPortNet, V4, "1.2.3.4,udp:53,10.1.2.3/8").unwrap(),
            "1.2.3.4,udp:53,10.0.0.0/8"
        );
        assert_eq!(
            canonical_entry(HashIpPortNet, V4, "1.2.3.4,udp:53,10.1.2.3/32").unwrap(),
            "1.2.3.4,udp:53,10.1.2.3"
        );
        assert_eq!(
            canonical_entry(HashIpPortNet, V6, "fd00::1,tcp:80,fd00:1::/64").unwrap(),
            "fd00::1,tcp:80,fd00:1::/64"
        );
        assert_eq!(canonical_entry(BitmapPort, V4, "30080").unwrap(), "30080");
        assert_eq!(canonical_entry(BitmapPort, V6, "65535").unwrap(), "65535");
    }

    /// Every member of upstream's captured `ipset save` (the small scenario) parses for its set's type
    /// and family and prints back byte for byte; so do members of every set type upstream uses in both
    /// families, and spellings the kernel normalises print as it does.
    #[test]
    fn upstream_members_round_trip() {
        let saved = super::super::save::parse_save(include_str!(
            "../../../tests/planner_data/small-scenario/ipset-save.txt"
        ));
        let mut seen = std::collections::BTreeSet::new();
        for (set, members) in &saved.members {
            let h = &saved.headers[set];
            let t = h.set_type.expect("one of our set types");
            for m in members {
                let e = IpSetEntry::parse(t, h.family.unwrap_or(V4), m).unwrap();
                assert_eq!(e.to_string(), *m, "{set}");
                assert_eq!(e.set_type(), t);
                seen.insert(t);
            }
        }
        assert_eq!(seen, [HashIp, HashIpPort, HashIpPortIp, BitmapPort].into());
        let more: &[(IpSetType, IpFamily, &str)] = &[
            (HashIp, V6, "fd00::a"),
            (HashIpPort, V4, "10.0.0.1,sctp:30090"),
            (HashIpPort, V6, "fd00::1,udp:53"),
            (HashIpPortIp, V6, "fd00::5,tcp:80,fd00::5"),
            (HashIpPortNet, V4, "1.2.3.4,tcp:80,10.0.0.0/8"),
            (HashIpPortNet, V4, "1.2.3.4,tcp:80,192.0.2.7"),
            (HashIpPortNet, V6, "fd00::1,tcp:80,fd00:1::/64"),
            (HashIpPortNet, V6, "fd00::1,tcp:80,fd00:1::1"),
            (BitmapPort, V6, "30080"),
        ];
        for (t, f, text) in more {
            let e = IpSetEntry::parse(*t, *f, text).unwrap();
            assert_eq!((e.to_string().as_str(), e.set_type()), (*text, *t));
        }
        let net = IpSetEntry::ip_port_net(
            "1.2.3.4".parse().unwrap(),
            Protocol::Udp,
            53,
            "10.1.2.3/8".parse().unwrap(),
        );
        assert_eq!(net.to_string(), "1.2.3.4,udp:53,10.0.0.0/8");
        assert_eq!(
            IpSetEntry::parse(HashIpPortNet, V4, "1.2.3.4,udp:53,10.1.2.3/8"),
            Ok(net)
        );
    }

    #[test]
    fn rejections() {
        let bad: &[(IpSetType, IpFamily, &str)] = &[
            (HashIp, V4, "fd00::1"),
            (HashIp, V6, "10.0.0.1"),
            (HashIp, V4, "10.0.0.256"),
            (HashIp, V4, ""),
            (HashIp, V4, "10.0.0.1 10.0.0.2"),
            (HashIpPort, V4, "10.0.0.1"),
            (HashIpPort, V4, "10.0.0.1,tcp:65536"),
            (HashIpPort, V4, "10.0.0.1,icmp:80"),
            (HashIpPort, V4, "10.0.0.1,80"),
            (HashIpPort, V4, "10.0.0.1,tcp:-1"),
            (HashIpPortIp, V4, "10.0.0.1,tcp:80"),
            (HashIpPortIp, V4, "10.0.0.1,tcp:80,fd00::1"),
            (HashIpPortNet, V4, "10.0.0.1,tcp:80,10.0.0.0/33"),
            (HashIpPortNet, V4, "10.0.0.1,tcp:80,0.0.0.0/0"),
            (HashIpPortNet, V6, "fd00::1,tcp:80,10.0.0.0/8"),
            (BitmapPort, V4, "65536"),
            (BitmapPort, V4, "http"),
            (BitmapPort, V4, "+80"),
        ];
        for (t, f, e) in bad {
            assert!(
                canonical_entry(*t, *f, e).is_err(),
                "{t:?} {f:?} {e:?} accepted"
            );
        }
    }
}
