//! The kernel's ipset netlink protocol (nfnetlink subsystem `NFNL_SUBSYS_IPSET`): request encoding and a
//! tolerant decoder of the kernel's answers. Constants follow `include/uapi/linux/netfilter/ipset/ip_set.h`.
//!
//! Entries travel as parsed elements ([`Elem`]); their text forms live in [`super::text`].

use netlink_packet_core::{NetlinkDeserializable, NetlinkHeader, NetlinkSerializable};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use crate::kernel::nlattr::{Attrs, Nlas};
use crate::kernel::nlattr::{NFGENMSG_LEN, NLA_F_NET_BYTEORDER, be16, be32, c_string};

/// nfnetlink subsystem id of ipset.
pub const NFNL_SUBSYS_IPSET: u16 = 6;
/// Protocol version sent with every request (accepted by every kernel since 3.x; 7 is a superset).
pub const PROTOCOL: u8 = 6;

/// Commands (`enum ipset_cmd`).
pub mod cmd {
    pub const PROTOCOL: u8 = 1;
    pub const CREATE: u8 = 2;
    pub const DESTROY: u8 = 3;
    pub const FLUSH: u8 = 4;
    pub const SWAP: u8 = 6;
    pub const LIST: u8 = 7;
    pub const ADD: u8 = 9;
    pub const DEL: u8 = 10;
    pub const TYPE: u8 = 13;
}

/// Attributes at command level.
pub mod attr {
    pub const PROTOCOL: u16 = 1;
    pub const SETNAME: u16 = 2;
    pub const TYPENAME: u16 = 3;
    pub const SETNAME2: u16 = 3;
    pub const REVISION: u16 = 4;
    pub const FAMILY: u16 = 5;
    pub const FLAGS: u16 = 6;
    pub const DATA: u16 = 7;
    pub const ADT: u16 = 8;
    pub const PROTOCOL_MIN: u16 = 10;
}

/// Attributes inside `DATA` (create/add/del/test and list).
pub mod data {
    pub const IP: u16 = 1;
    pub const CIDR: u16 = 3;
    pub const PORT: u16 = 4;
    pub const PORT_TO: u16 = 5;
    pub const PROTO: u16 = 7;
    pub const CADT_FLAGS: u16 = 8;
    pub const MARK: u16 = 10;
    pub const HASHSIZE: u16 = 18;
    pub const MAXELEM: u16 = 19;
    pub const ETHER: u16 = 17;
    pub const NAME: u16 = 18;
    pub const IP2: u16 = 20;
    pub const CIDR2: u16 = 21;
    pub const IFACE: u16 = 23;
    pub const COMMENT: u16 = 26;
    /// Inside a nested IP attribute.
    pub const IPADDR_IPV4: u16 = 1;
    pub const IPADDR_IPV6: u16 = 2;
}

/// `IPSET_FLAG_LIST_HEADER`: list set headers only.
pub const FLAG_LIST_HEADER: u32 = 1 << 2;
/// `IPSET_FLAG_NOMATCH` (CADT flags of an element).
pub const FLAG_NOMATCH: u32 = 1 << 2;
/// `IPSET_FLAG_PHYSDEV` (CADT flags of an interface element).
pub const FLAG_PHYSDEV: u32 = 1 << 1;
/// `NFPROTO_*` families.
pub const NFPROTO_UNSPEC: u8 = 0;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

impl Attrs {
    /// An address as the kernel wants it: nested, IPv4 in network order.
    pub fn ip(&mut self, kind: u16, ip: IpAddr) -> &mut Self {
        self.nested(kind, |a| {
            match ip {
                IpAddr::V4(v4) => a.put(data::IPADDR_IPV4 | NLA_F_NET_BYTEORDER, &v4.octets()),
                IpAddr::V6(v6) => a.put(data::IPADDR_IPV6 | NLA_F_NET_BYTEORDER, &v6.octets()),
            };
        })
    }
}

/// One ipset request: command, nfgenmsg family and attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub cmd: u8,
    pub attrs: Attrs,
}

impl Request {
    /// A request of `cmd` carrying the protocol version and, if given, the set name.
    pub fn new(cmd: u8, set: Option<&str>) -> Self {
        let mut attrs = Attrs::default();
        attrs.u8(attr::PROTOCOL, PROTOCOL);
        if let Some(name) = set {
            attrs.string(attr::SETNAME, name);
        }
        Request { cmd, attrs }
    }
}

impl NetlinkSerializable for Request {
    fn message_type(&self) -> u16 {
        (NFNL_SUBSYS_IPSET << 8) | u16::from(self.cmd)
    }

    fn buffer_len(&self) -> usize {
        NFGENMSG_LEN + self.attrs.0.len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        // nfgenmsg: AF_INET like the ipset tool (the kernel ignores it), version 0, resource id 0.
        buffer[..NFGENMSG_LEN].copy_from_slice(&[libc::AF_INET as u8, 0, 0, 0]);
        buffer[NFGENMSG_LEN..NFGENMSG_LEN + self.attrs.0.len()].copy_from_slice(&self.attrs.0);
    }
}

/// One element (entry) of a set, as the kernel lists it or as we add it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Elem {
    pub ip: Option<IpAddr>,
    pub cidr: Option<u8>,
    pub port: Option<u16>,
    pub proto: Option<u8>,
    pub ip2: Option<IpAddr>,
    pub cidr2: Option<u8>,
    pub mark: Option<u32>,
    pub ether: Option<[u8; 6]>,
    pub iface: Option<String>,
    /// Member set of a `list:set`.
    pub name: Option<String>,
    pub cadt_flags: u32,
    pub comment: Option<String>,
}

impl Elem {
    /// Writes the element's attributes (inside `DATA`).
    pub fn encode(&self, a: &mut Attrs) {
        if let Some(ip) = self.ip {
            a.ip(data::IP, ip);
        }
        if let Some(c) = self.cidr {
            a.u8(data::CIDR, c);
        }
        if let Some(p) = self.port {
            a.be16(data::PORT, p);
        }
        if let Some(p) = self.proto {
            a.u8(data::PROTO, p);
        }
        if let Some(ip) = self.ip2 {
            a.ip(data::IP2, ip);
        }
        if let Some(c) = self.cidr2 {
            a.u8(data::CIDR2, c);
        }
        if let Some(c) = &self.comment {
            a.string(data::COMMENT, c);
        }
    }

    fn decode(buf: &[u8]) -> Elem {
        let mut e = Elem::default();
        for (kind, v) in Nlas::new(buf) {
            match kind {
                data::IP => e.ip = decode_ip(v),
                data::IP2 => e.ip2 = decode_ip(v),
                data::CIDR => e.cidr = v.first().copied(),
                data::CIDR2 => e.cidr2 = v.first().copied(),
                data::PORT => e.port = be16(v),
                data::PROTO => e.proto = v.first().copied(),
                data::MARK => e.mark = be32(v),
                data::CADT_FLAGS => e.cadt_flags = be32(v).unwrap_or(0),
                data::ETHER => e.ether = v.get(..6).and_then(|b| b.try_into().ok()),
                data::IFACE => e.iface = Some(c_string(v)),
                data::NAME => e.name = Some(c_string(v)),
                data::COMMENT => e.comment = Some(c_string(v)),
                _ => {}
            }
        }
        e
    }
}

fn decode_ip(nested: &[u8]) -> Option<IpAddr> {
    Nlas::new(nested).find_map(|(kind, v)| match kind {
        data::IPADDR_IPV4 => Some(IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(v.get(..4)?).ok()?,
        ))),
        data::IPADDR_IPV6 => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(v.get(..16)?).ok()?,
        ))),
        _ => None,
    })
}

/// One message of a list dump: a set's header (first message of that set) and/or some of its elements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPart {
    pub set: String,
    /// Type name, present in the set's first message.
    pub type_name: Option<String>,
    /// `NFPROTO_*` family, present with the type name.
    pub family: Option<u8>,
    pub revision: Option<u8>,
    /// `maxelem` of a hash set, present with the type name.
    pub maxelem: Option<u32>,
    /// `hashsize` of a hash set as it is now (the kernel doubles it as the set fills).
    pub hashsize: Option<u32>,
    pub elems: Vec<Elem>,
}

/// A decoded answer of the kernel's ipset subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A part of a list dump.
    List(ListPart),
    /// The answer to a TYPE request: the highest and lowest revision the kernel supports.
    Type { revision: u8, revision_min: u8 },
    /// The answer to a PROTOCOL request.
    Protocol { max: u8, min: u8 },
    /// Anything else (ignored).
    Other,
}

impl NetlinkDeserializable for Reply {
    type Error = std::convert::Infallible;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Ok(decode_reply(header.message_type, payload))
    }
}

/// Decodes one message of the ipset subsystem; never panics, whatever the bytes.
pub fn decode_reply(message_type: u16, payload: &[u8]) -> Reply {
    if message_type >> 8 != NFNL_SUBSYS_IPSET {
        return Reply::Other;
    }
    let Some(attrs) = payload.get(NFGENMSG_LEN..) else {
        return Reply::Other;
    };
    let u8_of = |k: u16| {
        Nlas::new(attrs)
            .find(|(kind, _)| *kind == k)?
            .1
            .first()
            .copied()
    };
    match (message_type & 0xff) as u8 {
        cmd::LIST => Reply::List(decode_list(attrs)),
        cmd::TYPE => Reply::Type {
            revision: u8_of(attr::REVISION).unwrap_or(0),
            revision_min: u8_of(attr::PROTOCOL_MIN).unwrap_or(0),
        },
        cmd::PROTOCOL => {
            let max = u8_of(attr::PROTOCOL).unwrap_or(0);
            Reply::Protocol {
                max,
                min: u8_of(attr::PROTOCOL_MIN).unwrap_or(max),
            }
        }
        _ => Reply::Other,
    }
}

fn decode_list(attrs: &[u8]) -> ListPart {
    let mut part = ListPart::default();
    for (kind, v) in Nlas::new(attrs) {
        match kind {
            attr::SETNAME => part.set = c_string(v),
            attr::TYPENAME => part.type_name = Some(c_string(v)),
            attr::FAMILY => part.family = v.first().copied(),
            attr::REVISION => part.revision = v.first().copied(),
            attr::DATA => {
                for (k, d) in Nlas::new(v) {
                    match k {
                        data::HASHSIZE => part.hashsize = be32(d),
                        data::MAXELEM => part.maxelem = be32(d),
                        _ => {}
                    }
                }
            }
            attr::ADT => {
                part.elems.extend(
                    Nlas::new(v)
                        .filter(|(k, _)| *k == attr::DATA)
                        .map(|(_, d)| Elem::decode(d)),
                );
            }
            _ => {}
        }
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::nlattr::NLA_F_NESTED;

    /// A list message as the kernel builds it, from our own encoder.
    fn list_message(set: &str, type_name: Option<&str>, elems: &[Elem]) -> Vec<u8> {
        let mut a = Attrs::default();
        a.u8(attr::PROTOCOL, PROTOCOL).string(attr::SETNAME, set);
        if let Some(t) = type_name {
            a.string(attr::TYPENAME, t)
                .u8(attr::FAMILY, NFPROTO_IPV6)
                .u8(attr::REVISION, 5)
                .nested(attr::DATA, |d| {
                    d.be32(data::HASHSIZE, 2048).be32(data::MAXELEM, 131072);
                });
        }
        a.nested(attr::ADT, |adt| {
            for e in elems {
                adt.nested(attr::DATA, |d| e.encode(d));
            }
        });
        let mut payload = vec![10, 0, 0, 0];
        payload.extend_from_slice(&a.0);
        payload
    }

    fn sample_elems() -> Vec<Elem> {
        vec![
            Elem {
                ip: Some("fd00::1".parse().unwrap()),
                port: Some(443),
                proto: Some(6),
                ip2: Some("fd00:1::".parse().unwrap()),
                cidr2: Some(64),
                ..Elem::default()
            },
            Elem {
                ip: Some("10.0.0.1".parse().unwrap()),
                cidr: Some(24),
                comment: Some("hello world".into()),
                ..Elem::default()
            },
            Elem {
                port: Some(30080),
                ..Elem::default()
            },
        ]
    }

    #[test]
    fn list_round_trip() {
        let elems = sample_elems();
        let msg = list_message("KUBE-6-X", Some("hash:ip,port,net"), &elems);
        let ty = (NFNL_SUBSYS_IPSET << 8) | u16::from(cmd::LIST);
        match decode_reply(ty, &msg) {
            Reply::List(p) => {
                assert_eq!(p.set, "KUBE-6-X");
                assert_eq!(p.type_name.as_deref(), Some("hash:ip,port,net"));
                assert_eq!(p.family, Some(NFPROTO_IPV6));
                assert_eq!(p.revision, Some(5));
                assert_eq!((p.hashsize, p.maxelem), (Some(2048), Some(131072)));
                assert_eq!(p.elems, elems);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn request_layout() {
        let mut r = Request::new(cmd::ADD, Some("S"));
        r.attrs.nested(attr::DATA, |d| {
            d.be16(data::PORT, 0x1234);
        });
        let mut buf = vec![0u8; r.buffer_len()];
        r.serialize(&mut buf);
        assert_eq!(r.message_type(), 0x0609);
        // nfgenmsg, then PROTOCOL (len 5, padded), SETNAME "S\0" (len 6, padded), DATA nested.
        assert_eq!(&buf[..4], &[2, 0, 0, 0]);
        assert_eq!(&buf[4..9], &[5, 0, 1, 0, PROTOCOL]);
        assert_eq!(&buf[12..18], &[6, 0, 2, 0, b'S', 0]);
        let data_kind = u16::from_ne_bytes([buf[22], buf[23]]);
        assert_eq!(data_kind, attr::DATA | NLA_F_NESTED);
        let port_kind = u16::from_ne_bytes([buf[26], buf[27]]);
        assert_eq!(port_kind, data::PORT | NLA_F_NET_BYTEORDER);
        assert_eq!(&buf[28..30], &[0x12, 0x34]);
    }

    #[test]
    fn garbage_never_panics() {
        let msg = list_message("S", Some("hash:ip,port,net"), &sample_elems());
        let ty = (NFNL_SUBSYS_IPSET << 8) | u16::from(cmd::LIST);
        for cut in 0..msg.len() {
            let _ = decode_reply(ty, &msg[..cut]);
        }
        // Deterministic pseudo-random bytes and bit flips of a valid message.
        let mut x: u32 = 0x1234_5678;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..2000 {
            let len = (rnd() % 200) as usize;
            let buf: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            for t in [cmd::LIST, cmd::TYPE, cmd::PROTOCOL] {
                let _ = decode_reply((NFNL_SUBSYS_IPSET << 8) | u16::from(t), &buf);
            }
            let mut flipped = msg.clone();
            let i = rnd() as usize % flipped.len();
            flipped[i] ^= rnd() as u8;
            let _ = decode_reply(ty, &flipped);
        }
        assert_eq!(decode_reply(0x0107, &msg), Reply::Other);
    }
}
