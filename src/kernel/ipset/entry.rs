//! Validation and canonical text of ipset entries, per set type and family.
//!
//! The canonical form is what `ipset save` prints: `10.96.0.1`, `10.96.0.1,tcp:443`,
//! `10.244.0.12,tcp:8080,10.244.0.12`, `1.2.3.4,tcp:80,10.0.0.0/8`, `30080`; IPv6 addresses compressed.

use super::IpSetType;
use crate::net::IpFamily;
use std::net::IpAddr;

/// Checks `entry` against a set of type `set_type` and `family` and returns its canonical text, or why
/// the kernel would refuse it.
pub fn canonical_entry(
    set_type: IpSetType,
    family: IpFamily,
    entry: &str,
) -> Result<String, String> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Err("empty entry".into());
    }
    if entry.chars().any(|c| c.is_whitespace()) {
        return Err(format!("entry {entry:?} contains whitespace"));
    }
    match set_type {
        IpSetType::BitmapPort => parse_port(entry).map(|p| p.to_string()),
        IpSetType::HashIp => parse_ip(entry, family).map(|ip| ip.to_string()),
        IpSetType::HashIpPort => {
            let parts = split3(entry, 2)?;
            let ip = parse_ip(parts[0], family)?;
            let (proto, port) = parse_proto_port(parts[1])?;
            Ok(format!("{ip},{proto}:{port}"))
        }
        IpSetType::HashIpPortIp => {
            let parts = split3(entry, 3)?;
            let ip = parse_ip(parts[0], family)?;
            let (proto, port) = parse_proto_port(parts[1])?;
            let ip2 = parse_ip(parts[2], family)?;
            Ok(format!("{ip},{proto}:{port},{ip2}"))
        }
        IpSetType::HashIpPortNet => {
            let parts = split3(entry, 3)?;
            let ip = parse_ip(parts[0], family)?;
            let (proto, port) = parse_proto_port(parts[1])?;
            let net = parse_net(parts[2], family)?;
            Ok(format!("{ip},{proto}:{port},{net}"))
        }
    }
}

fn split3(entry: &str, n: usize) -> Result<Vec<&str>, String> {
    let parts: Vec<&str> = entry.split(',').collect();
    if parts.len() != n {
        return Err(format!(
            "entry {entry:?} has {} comma-separated parts, the set type needs {n}",
            parts.len()
        ));
    }
    Ok(parts)
}

fn parse_ip(s: &str, family: IpFamily) -> Result<IpAddr, String> {
    let ip: IpAddr = s
        .parse()
        .map_err(|_| format!("{s:?} is not an IP address"))?;
    if IpFamily::of(&ip) != family {
        return Err(format!(
            "{s} is not an {} address",
            if family == IpFamily::V4 {
                "IPv4"
            } else {
                "IPv6"
            }
        ));
    }
    Ok(ip)
}

fn parse_port(s: &str) -> Result<u16, String> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a port number"));
    }
    s.parse::<u16>()
        .map_err(|_| format!("port {s} out of range 0-65535"))
}

fn parse_proto_port(s: &str) -> Result<(&'static str, u16), String> {
    let (proto, port) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not proto:port"))?;
    let proto = match proto {
        "tcp" => "tcp",
        "udp" => "udp",
        "sctp" => "sctp",
        other => return Err(format!("unsupported protocol {other:?}")),
    };
    Ok((proto, parse_port(port)?))
}

/// A network `ip/prefix` (host bits masked like the kernel does); a host prefix prints without `/len`.
fn parse_net(s: &str, family: IpFamily) -> Result<String, String> {
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
                return Err(format!("{s:?}: bad prefix length"));
            }
            l.parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{s:?}: prefix length out of range"))?
        }
    };
    if len == 0 {
        return Err(format!("{s:?}: ipset does not accept a /0 network"));
    }
    let net = ipnet::IpNet::new(ip, len).map_err(|e| format!("{s:?}: {e}"))?;
    let base = net.network();
    if len == max {
        Ok(base.to_string())
    } else {
        Ok(format!("{base}/{len}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpFamily::{V4, V6};
    use IpSetType::*;

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
