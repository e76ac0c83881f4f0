//! Elements: a typed entry to a netlink element, and a listed element back to the text `ipset save`
//! prints for its set type, for our types and foreign ones.

use super::codec::{Elem, FLAG_PHYSDEV};
use super::entry::IpSetEntry;
use crate::net::Protocol;
use std::net::IpAddr;

/// Protocol numbers of the names `ipset` prints.
const PROTOCOLS: &[(u8, &str)] = &[
    (1, "icmp"),
    (6, "tcp"),
    (17, "udp"),
    (58, "icmpv6"),
    (132, "sctp"),
    (136, "udplite"),
];

/// The IP protocol number of one of ours.
fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

fn proto_name(p: u8) -> Option<&'static str> {
    PROTOCOLS.iter().find(|(n, _)| *n == p).map(|(_, s)| *s)
}

/// The netlink element of `entry`.
pub fn elem_of(entry: &IpSetEntry) -> Elem {
    let mut e = Elem::default();
    match *entry {
        IpSetEntry::Port(port) => e.port = Some(port),
        IpSetEntry::Ip(ip) => e.ip = Some(ip),
        IpSetEntry::IpPort(ip, proto, port) => {
            (e.ip, e.proto, e.port) = (Some(ip), Some(proto_number(proto)), Some(port));
        }
        IpSetEntry::IpPortIp(ip, proto, port, ip2) => {
            (e.ip, e.proto, e.port) = (Some(ip), Some(proto_number(proto)), Some(port));
            e.ip2 = Some(ip2);
        }
        IpSetEntry::IpPortNet(ip, proto, port, net) => {
            (e.ip, e.proto, e.port) = (Some(ip), Some(proto_number(proto)), Some(port));
            (e.ip2, e.cidr2) = (Some(net.addr()), Some(net.prefix_len()));
        }
    }
    e
}

/// The text `ipset save` prints for element `e` of a set of type `type_name` (e.g. `hash:ip,port,net`);
/// None when the element lacks a part its type needs. Options (comment, nomatch, timeout) are left out,
/// as the save parser drops them too.
pub fn render(type_name: &str, e: &Elem) -> Option<String> {
    let (method, dims) = type_name.split_once(':')?;
    if method == "list" {
        return e.name.clone();
    }
    let mut out = Vec::new();
    let mut ips_seen = 0;
    for dim in dims.split(',') {
        let text = match dim {
            "ip" | "net" => {
                let (ip, cidr) = if ips_seen == 0 {
                    (e.ip?, e.cidr)
                } else {
                    (e.ip2?, e.cidr2)
                };
                ips_seen += 1;
                address(ip, cidr, dim == "net" || method == "bitmap")
            }
            "port" => port_text(e)?,
            "mark" => format!("0x{:08x}", e.mark?),
            "mac" => e
                .ether?
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(":"),
            "iface" => {
                let name = e.iface.clone()?;
                if e.cadt_flags & FLAG_PHYSDEV != 0 {
                    format!("physdev:{name}")
                } else {
                    name
                }
            }
            _ => return None,
        };
        out.push(text);
    }
    Some(out.join(","))
}

/// An address, with `/len` when a prefix is given and shorter than a host's.
fn address(ip: IpAddr, cidr: Option<u8>, with_prefix: bool) -> String {
    let max = if ip.is_ipv4() { 32 } else { 128 };
    match cidr {
        Some(len) if with_prefix && len < max => format!("{ip}/{len}"),
        _ => ip.to_string(),
    }
}

fn port_text(e: &Elem) -> Option<String> {
    let port = e.port?;
    Some(match e.proto {
        None => port.to_string(),
        Some(p @ (1 | 58)) => {
            format!(
                "{}:{}/{}",
                proto_name(p).unwrap_or("icmp"),
                port >> 8,
                port & 0xff
            )
        }
        Some(p) => match proto_name(p) {
            Some(name) => format!("{name}:{port}"),
            None => format!("{p}:{port}"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ipset::IpSetType;
    use crate::net::IpFamily;

    #[test]
    fn canonical_text_round_trips_through_elements() {
        let cases: &[(IpSetType, IpFamily, &str, &str)] = &[
            (IpSetType::HashIp, IpFamily::V4, "hash:ip", "10.96.0.1"),
            (IpSetType::HashIp, IpFamily::V6, "hash:ip", "fd00::1"),
            (
                IpSetType::HashIpPort,
                IpFamily::V4,
                "hash:ip,port",
                "10.96.0.1,tcp:443",
            ),
            (
                IpSetType::HashIpPort,
                IpFamily::V6,
                "hash:ip,port",
                "fd00::1,sctp:0",
            ),
            (
                IpSetType::HashIpPortIp,
                IpFamily::V4,
                "hash:ip,port,ip",
                "10.244.0.12,udp:8080,10.244.0.12",
            ),
            (
                IpSetType::HashIpPortNet,
                IpFamily::V4,
                "hash:ip,port,net",
                "1.2.3.4,udp:53,10.0.0.0/8",
            ),
            (
                IpSetType::HashIpPortNet,
                IpFamily::V4,
                "hash:ip,port,net",
                "1.2.3.4,udp:53,10.1.2.3",
            ),
            (
                IpSetType::HashIpPortNet,
                IpFamily::V6,
                "hash:ip,port,net",
                "fd00::1,tcp:80,fd00:1::/64",
            ),
            (IpSetType::BitmapPort, IpFamily::V4, "bitmap:port", "30080"),
        ];
        for (t, f, name, text) in cases {
            let entry = IpSetEntry::parse(*t, *f, text).unwrap();
            assert_eq!(&entry.to_string(), text);
            let e = elem_of(&entry);
            assert_eq!(render(name, &e).as_deref(), Some(*text), "{e:?}");
        }
    }

    #[test]
    fn foreign_types_render_like_ipset() {
        let e = Elem {
            ip: Some("198.51.100.0".parse().unwrap()),
            cidr: Some(24),
            ..Elem::default()
        };
        assert_eq!(render("hash:net", &e).as_deref(), Some("198.51.100.0/24"));
        let host = Elem {
            cidr: Some(32),
            ..e.clone()
        };
        assert_eq!(render("hash:net", &host).as_deref(), Some("198.51.100.0"));
        let mac = Elem {
            ether: Some([0xde, 0xad, 0xbe, 0xef, 0, 1]),
            ..Elem::default()
        };
        assert_eq!(
            render("hash:mac", &mac).as_deref(),
            Some("DE:AD:BE:EF:00:01")
        );
        let icmp = Elem {
            ip: Some("10.0.0.1".parse().unwrap()),
            proto: Some(1),
            port: Some(8 << 8),
            ..Elem::default()
        };
        assert_eq!(
            render("hash:ip,port", &icmp).as_deref(),
            Some("10.0.0.1,icmp:8/0")
        );
        assert_eq!(render("hash:ip,port", &Elem::default()), None);
        assert_eq!(render("nonsense", &Elem::default()), None);
    }
}
