//! The real conntrack backend: ctnetlink (NETLINK_NETFILTER) messages of netlink-packet-netfilter over a
//! blocking socket. Dumps one family's table and keeps UDP flows; deletes a flow by its original tuple.

use super::{Conntrack, ConntrackFlow};
use crate::kernel::io_counts::Backend;
use crate::kernel::netlink::{NlError, NlSocket, NoPayload};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use netlink_packet_core::{NetlinkDeserializable, NetlinkHeader};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol as CtProto, Tuple,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::protocols::NETLINK_NETFILTER;
use std::net::IpAddr;

/// nfnetlink protocol version.
const NFNETLINK_V0: u8 = 0;

/// Conntrack through ctnetlink.
#[derive(Debug)]
pub struct NetlinkConntrack {
    sock: NlSocket,
}

/// A dump answer; messages the crate cannot decode are skipped rather than failing the whole dump
/// (public for the decoder's fuzz tests).
#[derive(Debug)]
pub struct Answer(pub Option<NetfilterMessage>);

impl NetlinkDeserializable for Answer {
    type Error = std::convert::Infallible;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Ok(Answer(NetfilterMessage::deserialize(header, payload).ok()))
    }
}

fn nf_family(f: IpFamily) -> NetfilterProtoFamily {
    match f {
        IpFamily::V4 => NetfilterProtoFamily::IPv4,
        IpFamily::V6 => NetfilterProtoFamily::IPv6,
    }
}

fn kernel_error(what: &str, e: NlError) -> KernelError {
    e.into_kernel(what, |errno, detail| match errno {
        libc::ENOENT => Some(KernelError::NotFound(detail)),
        libc::EOPNOTSUPP | libc::EPROTONOSUPPORT => Some(KernelError::Unsupported(detail)),
        _ => None,
    })
}

/// (src, dst, proto, sport, dport) of one tuple nest.
type TupleParts = (
    Option<IpAddr>,
    Option<IpAddr>,
    Option<CtProto>,
    Option<u16>,
    Option<u16>,
);

fn tuple_parts(t: &[Tuple]) -> TupleParts {
    let mut p: TupleParts = (None, None, None, None, None);
    for part in t {
        match part {
            Tuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => p.0 = Some(*a),
                        IPTuple::DestinationAddress(a) => p.1 = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(ps) => {
                for x in ps {
                    match x {
                        ProtoTuple::Protocol(n) => p.2 = Some(*n),
                        ProtoTuple::SourcePort(v) => p.3 = Some(*v),
                        ProtoTuple::DestinationPort(v) => p.4 = Some(*v),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    p
}

/// The UDP flow of one conntrack entry, or None for other protocols or incomplete entries.
pub fn udp_flow(attrs: &[ConntrackAttribute]) -> Option<ConntrackFlow> {
    let mut orig = None;
    let mut reply = None;
    for a in attrs {
        match a {
            ConntrackAttribute::CtaTupleOrig(t) => orig = Some(tuple_parts(t)),
            ConntrackAttribute::CtaTupleReply(t) => reply = Some(tuple_parts(t)),
            _ => {}
        }
    }
    let (os, od, op, osp, odp) = orig?;
    let (rs, _, _, rsp, _) = reply?;
    if op? != CtProto::Udp {
        return None;
    }
    Some(ConntrackFlow {
        orig_src: os?,
        orig_sport: osp?,
        orig_dst: od?,
        orig_dport: odp?,
        reply_src: rs?,
        reply_sport: rsp?,
    })
}

/// The original-direction tuple of a flow as ctnetlink expects it.
fn orig_tuple(flow: &ConntrackFlow) -> ConntrackAttribute {
    ConntrackAttribute::CtaTupleOrig(vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(flow.orig_src),
            IPTuple::DestinationAddress(flow.orig_dst),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(CtProto::Udp),
            ProtoTuple::SourcePort(flow.orig_sport),
            ProtoTuple::DestinationPort(flow.orig_dport),
        ]),
    ])
}

impl NetlinkConntrack {
    /// Opens the netfilter netlink socket.
    pub fn new() -> KernelResult<Self> {
        let sock = NlSocket::new(NETLINK_NETFILTER, Backend::Conntrack)
            .map_err(|e| kernel_error("open ctnetlink", e))?;
        Ok(NetlinkConntrack { sock })
    }
}

impl Conntrack for NetlinkConntrack {
    fn udp_flows(&mut self, family: IpFamily) -> KernelResult<Vec<ConntrackFlow>> {
        let req = NetfilterMessage::new(
            NetfilterHeader::new(nf_family(family), NFNETLINK_V0, 0),
            ConntrackMessage::Get(vec![]),
        );
        let answers: Vec<Answer> = self
            .sock
            .dump(req)
            .map_err(|e| kernel_error("dump conntrack", e))?;
        Ok(answers
            .into_iter()
            .filter_map(|a| match a.0?.inner {
                NetfilterMessageInner::Conntrack(ConntrackMessage::New(attrs)) => udp_flow(&attrs),
                _ => None,
            })
            .filter(|f| IpFamily::of(&f.orig_src) == family)
            .collect())
    }

    fn delete(&mut self, flow: &ConntrackFlow) -> KernelResult<bool> {
        let family = IpFamily::of(&flow.orig_src);
        let req = NetfilterMessage::new(
            NetfilterHeader::new(nf_family(family), NFNETLINK_V0, 0),
            ConntrackMessage::Delete(vec![orig_tuple(flow)]),
        );
        match self.sock.request::<_, NoPayload>(req) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(kernel_error(
                &format!(
                    "delete conntrack flow {}:{} -> {}:{}",
                    flow.orig_src, flow.orig_sport, flow.orig_dst, flow.orig_dport
                ),
                e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};

    fn flow() -> ConntrackFlow {
        ConntrackFlow {
            orig_src: "10.0.0.5".parse().unwrap(),
            orig_sport: 40000,
            orig_dst: "10.96.0.10".parse().unwrap(),
            orig_dport: 53,
            reply_src: "10.244.1.7".parse().unwrap(),
            reply_sport: 5353,
        }
    }

    #[test]
    fn dump_entry_round_trip() {
        let f = flow();
        let reply = ConntrackAttribute::CtaTupleReply(vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(f.reply_src),
                IPTuple::DestinationAddress(f.orig_src),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(CtProto::Udp),
                ProtoTuple::SourcePort(f.reply_sport),
                ProtoTuple::DestinationPort(f.orig_sport),
            ]),
        ]);
        let entry = NetfilterMessage::new(
            NetfilterHeader::new(NetfilterProtoFamily::IPv4, 0, 0),
            ConntrackMessage::New(vec![orig_tuple(&f), reply, ConntrackAttribute::CtaMark(0)]),
        );
        let mut nl = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(entry),
        );
        nl.finalize();
        let mut buf = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut buf);
        // ports travel big-endian: 40000 = 0x9c40
        assert!(buf.windows(2).any(|w| w == [0x9c, 0x40]));
        let back = NetlinkMessage::<Answer>::deserialize(&buf).unwrap();
        let NetlinkPayload::InnerMessage(Answer(Some(m))) = back.payload else {
            panic!()
        };
        let NetfilterMessageInner::Conntrack(ConntrackMessage::New(attrs)) = m.inner else {
            panic!()
        };
        assert_eq!(udp_flow(&attrs), Some(f));
        // a TCP entry is not a UDP flow
        let tcp = vec![ConntrackAttribute::CtaTupleOrig(vec![Tuple::Proto(vec![
            ProtoTuple::Protocol(CtProto::Tcp),
        ])])];
        assert_eq!(udp_flow(&tcp), None);
    }
}
