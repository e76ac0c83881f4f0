//! The nf_tables netlink protocol (nfnetlink subsystem `NFNL_SUBSYS_NFTABLES`), the part this project
//! speaks: get one table, delete one table by handle inside a batch. Constants follow
//! `include/uapi/linux/netfilter/nf_tables.h` and `nfnetlink.h`; table comments are libnftnl's user data.

use crate::kernel::nlattr::{Attrs, NFGENMSG_LEN, Nlas, be64, c_string};
use crate::net::IpFamily;
use netlink_packet_core::{NetlinkDeserializable, NetlinkHeader, NetlinkSerializable};

/// nfnetlink subsystem id of nf_tables.
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// Batch markers (`NFNL_MSG_BATCH_BEGIN`/`END`, right after the reserved netlink types).
pub const NFNL_MSG_BATCH_BEGIN: u16 = 16;
pub const NFNL_MSG_BATCH_END: u16 = 17;

/// Messages (`enum nf_tables_msg_types`).
pub mod msg {
    pub const NEWTABLE: u8 = 0;
    pub const GETTABLE: u8 = 1;
    pub const DELTABLE: u8 = 2;
}

/// Table attributes (`enum nft_table_attributes`).
pub mod attr {
    pub const NAME: u16 = 1;
    pub const HANDLE: u16 = 4;
    pub const USERDATA: u16 = 6;
}

/// libnftnl's user-data record type of a table comment (`NFTNL_UDATA_TABLE_COMMENT`).
const UDATA_TABLE_COMMENT: u8 = 0;
/// `NFPROTO_*` of the tables we look at.
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// `NFPROTO_*` of `family`.
pub fn nfproto(family: IpFamily) -> u8 {
    match family {
        IpFamily::V4 => NFPROTO_IPV4,
        IpFamily::V6 => NFPROTO_IPV6,
    }
}

/// A request to the nf_tables subsystem, or a batch marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    BatchBegin,
    BatchEnd,
    /// The table `name` of `family`.
    GetTable {
        family: IpFamily,
        name: String,
    },
    /// Deletes the table with `handle`. Never without a handle: a delete naming no table flushes the
    /// whole family's ruleset.
    DelTable {
        family: IpFamily,
        handle: u64,
    },
}

impl Request {
    fn nfgenmsg(&self) -> [u8; NFGENMSG_LEN] {
        match self {
            // The markers name the subsystem the batch is for, in the resource id (big endian).
            Request::BatchBegin | Request::BatchEnd => {
                let [hi, lo] = NFNL_SUBSYS_NFTABLES.to_be_bytes();
                [libc::AF_UNSPEC as u8, 0, hi, lo]
            }
            Request::GetTable { family, .. } | Request::DelTable { family, .. } => {
                [nfproto(*family), 0, 0, 0]
            }
        }
    }

    fn attrs(&self) -> Attrs {
        let mut a = Attrs::default();
        match self {
            Request::BatchBegin | Request::BatchEnd => {}
            Request::GetTable { name, .. } => {
                a.string(attr::NAME, name);
            }
            Request::DelTable { handle, .. } => {
                a.be64(attr::HANDLE, *handle);
            }
        }
        a
    }
}

impl NetlinkSerializable for Request {
    fn message_type(&self) -> u16 {
        let cmd = |m: u8| (NFNL_SUBSYS_NFTABLES << 8) | u16::from(m);
        match self {
            Request::BatchBegin => NFNL_MSG_BATCH_BEGIN,
            Request::BatchEnd => NFNL_MSG_BATCH_END,
            Request::GetTable { .. } => cmd(msg::GETTABLE),
            Request::DelTable { .. } => cmd(msg::DELTABLE),
        }
    }

    fn buffer_len(&self) -> usize {
        NFGENMSG_LEN + self.attrs().0.len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        let attrs = self.attrs();
        buffer[..NFGENMSG_LEN].copy_from_slice(&self.nfgenmsg());
        buffer[NFGENMSG_LEN..NFGENMSG_LEN + attrs.0.len()].copy_from_slice(&attrs.0);
    }
}

/// A table as the kernel describes it (a NEWTABLE message), before its family is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableMsg {
    /// `NFPROTO_*` of the nfgenmsg.
    pub nfproto: u8,
    pub name: String,
    pub handle: Option<u64>,
    pub comment: Option<String>,
}

/// A decoded answer of the nf_tables subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Table(TableMsg),
    /// Anything else (ignored).
    Other,
}

impl NetlinkDeserializable for Reply {
    type Error = std::convert::Infallible;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Ok(decode_reply(header.message_type, payload))
    }
}

/// Decodes one message of the nf_tables subsystem; never panics, whatever the bytes.
pub fn decode_reply(message_type: u16, payload: &[u8]) -> Reply {
    let newtable = (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg::NEWTABLE);
    let (Some(&nfproto), Some(attrs)) = (payload.first(), payload.get(NFGENMSG_LEN..)) else {
        return Reply::Other;
    };
    if message_type != newtable {
        return Reply::Other;
    }
    let mut t = TableMsg {
        nfproto,
        ..TableMsg::default()
    };
    for (kind, v) in Nlas::new(attrs) {
        match kind {
            attr::NAME => t.name = c_string(v),
            attr::HANDLE => t.handle = be64(v),
            attr::USERDATA => t.comment = udata_comment(v),
            _ => {}
        }
    }
    Reply::Table(t)
}

/// The comment record of libnftnl user data: records of (type u8, length u8, value).
fn udata_comment(mut v: &[u8]) -> Option<String> {
    while let [kind, len, rest @ ..] = v {
        let value = rest.get(..usize::from(*len))?;
        if *kind == UDATA_TABLE_COMMENT {
            return Some(c_string(value));
        }
        v = &rest[usize::from(*len)..];
    }
    None
}

/// User data holding `comment` as libnftnl writes it (tests build kernel answers with it).
pub fn comment_udata(comment: &str) -> Vec<u8> {
    let mut v = vec![UDATA_TABLE_COMMENT, 0];
    v.extend_from_slice(comment.as_bytes());
    v.push(0);
    v[1] = u8::try_from(v.len() - 2).unwrap_or(u8::MAX);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::nlattr::{NLA_F_NET_BYTEORDER, Nlas};

    fn encode(r: &Request) -> Vec<u8> {
        let mut buf = vec![0u8; r.buffer_len()];
        r.serialize(&mut buf);
        buf
    }

    /// A NEWTABLE answer as the kernel builds it.
    fn table_message(nfproto: u8, name: &str, handle: u64, comment: Option<&str>) -> Vec<u8> {
        let mut a = Attrs::default();
        a.string(attr::NAME, name).be32(2, 0).be32(3, 7);
        a.be64(attr::HANDLE, handle);
        if let Some(c) = comment {
            a.put(attr::USERDATA, &comment_udata(c));
        }
        let mut payload = vec![nfproto, 0, 0, 3];
        payload.extend_from_slice(&a.0);
        payload
    }

    #[test]
    fn requests_layout() {
        let begin = encode(&Request::BatchBegin);
        assert_eq!(Request::BatchBegin.message_type(), 16);
        assert_eq!(begin, vec![0, 0, 0, 10]);
        assert_eq!(Request::BatchEnd.message_type(), 17);

        let get = Request::GetTable {
            family: IpFamily::V6,
            name: "kube-proxy".into(),
        };
        assert_eq!(get.message_type(), 0x0a01);
        let buf = encode(&get);
        assert_eq!(&buf[..4], &[NFPROTO_IPV6, 0, 0, 0]);
        let attrs: Vec<(u16, Vec<u8>)> =
            Nlas::new(&buf[4..]).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(attrs, vec![(attr::NAME, b"kube-proxy\0".to_vec())]);

        let del = Request::DelTable {
            family: IpFamily::V4,
            handle: 0x1234,
        };
        assert_eq!(del.message_type(), 0x0a02);
        let buf = encode(&del);
        assert_eq!(&buf[..4], &[NFPROTO_IPV4, 0, 0, 0]);
        // The handle is always there (a delete without one would flush every table of the family).
        let kind = u16::from_ne_bytes([buf[6], buf[7]]);
        assert_eq!(kind, attr::HANDLE | NLA_F_NET_BYTEORDER);
        assert_eq!(&buf[8..16], &0x1234u64.to_be_bytes());
    }

    #[test]
    fn decodes_a_table_with_its_comment() {
        let ty = (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg::NEWTABLE);
        let m = table_message(NFPROTO_IPV4, "kube-proxy", 42, Some("rules for kube-proxy"));
        assert_eq!(
            decode_reply(ty, &m),
            Reply::Table(TableMsg {
                nfproto: NFPROTO_IPV4,
                name: "kube-proxy".into(),
                handle: Some(42),
                comment: Some("rules for kube-proxy".into()),
            })
        );
        let m = table_message(NFPROTO_IPV6, "filter", 7, None);
        match decode_reply(ty, &m) {
            Reply::Table(t) => assert_eq!((t.comment, t.handle), (None, Some(7))),
            other => panic!("{other:?}"),
        }
        // Other record types before the comment are skipped.
        let mut ud = vec![5, 2, 0xaa, 0xbb];
        ud.extend(comment_udata("x"));
        assert_eq!(udata_comment(&ud).as_deref(), Some("x"));
        assert_eq!(udata_comment(&[0, 9, b'a']), None);
        assert_eq!(decode_reply(0x0a03, &m), Reply::Other);
    }

    #[test]
    fn garbage_never_panics() {
        let ty = (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg::NEWTABLE);
        let m = table_message(NFPROTO_IPV4, "kube-proxy", 42, Some("rules for kube-proxy"));
        for cut in 0..m.len() {
            let _ = decode_reply(ty, &m[..cut]);
        }
        let mut x: u32 = 0x9e37_79b9;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..2000 {
            let mut flipped = m.clone();
            let i = rnd() as usize % flipped.len();
            flipped[i] ^= rnd() as u8;
            let _ = decode_reply(ty, &flipped);
            let _ = udata_comment(&flipped);
        }
    }
}
