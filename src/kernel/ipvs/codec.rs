//! IPVS generic netlink messages (linux/ip_vs.h): commands, attributes, encoding and decoding.
//!
//! `IpvsMessage` implements `GenlFamily` so it travels inside `GenlMessage` / `NetlinkMessage`.
//! Decoding never panics: unknown attributes are kept as raw bytes, short values are errors.

use super::{ForwardMethod, IpvsDestination, IpvsService, IpvsServiceKey, IpvsStats};
use crate::net::Protocol;
use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NLA_F_NESTED, NLA_TYPE_MASK, Nla, NlasIterator,
    ParseableParametrized,
};
use netlink_packet_generic::{GenlFamily, GenlHeader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Generic netlink family name of IPVS.
pub const FAMILY_NAME: &str = "IPVS";
/// Protocol version of the IPVS family.
pub const FAMILY_VERSION: u8 = 1;

/// IPVS generic netlink commands.
pub mod cmd {
    pub const NEW_SERVICE: u8 = 1;
    pub const SET_SERVICE: u8 = 2;
    pub const DEL_SERVICE: u8 = 3;
    pub const GET_SERVICE: u8 = 4;
    pub const NEW_DEST: u8 = 5;
    pub const SET_DEST: u8 = 6;
    pub const DEL_DEST: u8 = 7;
    pub const GET_DEST: u8 = 8;
    pub const SET_CONFIG: u8 = 12;
    pub const GET_CONFIG: u8 = 13;
    pub const SET_INFO: u8 = 14;
    pub const GET_INFO: u8 = 15;
    pub const FLUSH: u8 = 17;
}

/// Top-level attributes (IPVS_CMD_ATTR_*).
mod cmd_attr {
    pub const SERVICE: u16 = 1;
    pub const DEST: u16 = 2;
    pub const TIMEOUT_TCP: u16 = 4;
    pub const TIMEOUT_TCP_FIN: u16 = 5;
    pub const TIMEOUT_UDP: u16 = 6;
}

/// Attributes of GET_INFO answers (IPVS_INFO_ATTR_*).
mod info_attr {
    pub const VERSION: u16 = 1;
    pub const CONN_TAB_SIZE: u16 = 2;
}

/// Service attributes (IPVS_SVC_ATTR_*).
mod svc_attr {
    pub const AF: u16 = 1;
    pub const PROTOCOL: u16 = 2;
    pub const ADDR: u16 = 3;
    pub const PORT: u16 = 4;
    pub const FWMARK: u16 = 5;
    pub const SCHED_NAME: u16 = 6;
    pub const FLAGS: u16 = 7;
    pub const TIMEOUT: u16 = 8;
    pub const NETMASK: u16 = 9;
    pub const PE_NAME: u16 = 11;
    /// Nested counters with 32-bit connection and packet counts (IPVS_SVC_ATTR_STATS).
    pub const STATS: u16 = 10;
    /// Nested 64-bit counters (IPVS_SVC_ATTR_STATS64, kernels since 4.1).
    pub const STATS64: u16 = 12;
}

/// Counter attributes inside a stats nest (IPVS_STATS_ATTR_*); rates follow and are not modelled.
mod stats_attr {
    pub const CONNS: u16 = 1;
    pub const INPKTS: u16 = 2;
    pub const OUTPKTS: u16 = 3;
    pub const INBYTES: u16 = 4;
    pub const OUTBYTES: u16 = 5;
}

/// Destination attributes (IPVS_DEST_ATTR_*).
mod dest_attr {
    pub const ADDR: u16 = 1;
    pub const PORT: u16 = 2;
    pub const FWD_METHOD: u16 = 3;
    pub const WEIGHT: u16 = 4;
    pub const U_THRESH: u16 = 5;
    pub const L_THRESH: u16 = 6;
    pub const ACTIVE_CONNS: u16 = 7;
    pub const INACT_CONNS: u16 = 8;
    pub const PERSIST_CONNS: u16 = 9;
    pub const ADDR_FAMILY: u16 = 11;
}

const AF_INET: u16 = libc::AF_INET as u16;
const AF_INET6: u16 = libc::AF_INET6 as u16;
const IPPROTO_TCP: u16 = libc::IPPROTO_TCP as u16;
const IPPROTO_UDP: u16 = libc::IPPROTO_UDP as u16;
const IPPROTO_SCTP: u16 = libc::IPPROTO_SCTP as u16;
/// Mask of the forwarding method in IPVS_DEST_ATTR_FWD_METHOD.
const FWD_MASK: u32 = 0x7;

/// Attributes of a virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SvcAttr {
    Af(u16),
    Protocol(u16),
    /// 16 bytes; an IPv4 address uses the first 4.
    Addr([u8; 16]),
    /// Host order here, network order on the wire.
    Port(u16),
    Fwmark(u32),
    SchedName(String),
    Flags {
        flags: u32,
        mask: u32,
    },
    Timeout(u32),
    Netmask(u32),
    PeName(String),
    /// IPVS_SVC_ATTR_STATS: conns and packets as u32, bytes as u64.
    Stats(IpvsStats),
    /// IPVS_SVC_ATTR_STATS64: every counter as u64.
    Stats64(IpvsStats),
    Other(DefaultNla),
}

/// Attributes of a real server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestAttr {
    Addr([u8; 16]),
    Port(u16),
    FwdMethod(u32),
    Weight(u32),
    UThresh(u32),
    LThresh(u32),
    ActiveConns(u32),
    InactConns(u32),
    PersistConns(u32),
    AddrFamily(u16),
    Other(DefaultNla),
}

/// Top-level attributes of an IPVS message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpvsAttr {
    Service(Vec<SvcAttr>),
    Dest(Vec<DestAttr>),
    TimeoutTcp(u32),
    TimeoutTcpFin(u32),
    TimeoutUdp(u32),
    /// GET_INFO answer: version as (major << 16 | minor << 8 | patch).
    InfoVersion(u32),
    InfoConnTabSize(u32),
    Other(DefaultNla),
}

/// An IPVS generic netlink message: a command and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsMessage {
    pub cmd: u8,
    pub attrs: Vec<IpvsAttr>,
}

impl GenlFamily for IpvsMessage {
    fn family_name() -> &'static str {
        FAMILY_NAME
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        FAMILY_VERSION
    }
}

impl Emitable for IpvsMessage {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for IpvsMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let info = header.cmd == cmd::SET_INFO;
        let mut attrs = Vec::new();
        for nla in NlasIterator::new(buf) {
            let nla = nla?;
            let kind = nla.kind() & NLA_TYPE_MASK;
            let v = nla.value();
            attrs.push(match (info, kind) {
                (true, info_attr::VERSION) => IpvsAttr::InfoVersion(u32_of(v)?),
                (true, info_attr::CONN_TAB_SIZE) => IpvsAttr::InfoConnTabSize(u32_of(v)?),
                (false, cmd_attr::SERVICE) => IpvsAttr::Service(parse_svc(v)?),
                (false, cmd_attr::DEST) => IpvsAttr::Dest(parse_dest(v)?),
                (false, cmd_attr::TIMEOUT_TCP) => IpvsAttr::TimeoutTcp(u32_of(v)?),
                (false, cmd_attr::TIMEOUT_TCP_FIN) => IpvsAttr::TimeoutTcpFin(u32_of(v)?),
                (false, cmd_attr::TIMEOUT_UDP) => IpvsAttr::TimeoutUdp(u32_of(v)?),
                _ => IpvsAttr::Other(DefaultNla::new(nla.kind(), v.to_vec())),
            });
        }
        Ok(IpvsMessage {
            cmd: header.cmd,
            attrs,
        })
    }
}

fn u16_of(v: &[u8]) -> Result<u16, DecodeError> {
    v.get(..2)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_ne_bytes)
        .ok_or_else(|| DecodeError::from(format!("u16 attribute of {} bytes", v.len())))
}

fn u32_of(v: &[u8]) -> Result<u32, DecodeError> {
    v.get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes)
        .ok_or_else(|| DecodeError::from(format!("u32 attribute of {} bytes", v.len())))
}

fn be16_of(v: &[u8]) -> Result<u16, DecodeError> {
    u16_of(v).map(u16::from_be)
}

fn addr_of(v: &[u8]) -> Result<[u8; 16], DecodeError> {
    // The kernel always sends the 16-byte union; accept a bare IPv4 address too.
    let mut a = [0u8; 16];
    match v.len() {
        4 => a[..4].copy_from_slice(v),
        n if n >= 16 => a.copy_from_slice(&v[..16]),
        n => return Err(DecodeError::from(format!("address attribute of {n} bytes"))),
    }
    Ok(a)
}

fn string_of(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

fn parse_svc(buf: &[u8]) -> Result<Vec<SvcAttr>, DecodeError> {
    let mut out = Vec::new();
    for nla in NlasIterator::new(buf) {
        let nla = nla?;
        let v = nla.value();
        out.push(match nla.kind() & NLA_TYPE_MASK {
            svc_attr::AF => SvcAttr::Af(u16_of(v)?),
            svc_attr::PROTOCOL => SvcAttr::Protocol(u16_of(v)?),
            svc_attr::ADDR => SvcAttr::Addr(addr_of(v)?),
            svc_attr::PORT => SvcAttr::Port(be16_of(v)?),
            svc_attr::FWMARK => SvcAttr::Fwmark(u32_of(v)?),
            svc_attr::SCHED_NAME => SvcAttr::SchedName(string_of(v)),
            svc_attr::FLAGS => SvcAttr::Flags {
                flags: u32_of(v)?,
                mask: u32_of(v.get(4..).unwrap_or_default())?,
            },
            svc_attr::TIMEOUT => SvcAttr::Timeout(u32_of(v)?),
            svc_attr::NETMASK => SvcAttr::Netmask(u32_of(v)?),
            svc_attr::PE_NAME => SvcAttr::PeName(string_of(v)),
            svc_attr::STATS => SvcAttr::Stats(parse_stats(v)?),
            svc_attr::STATS64 => SvcAttr::Stats64(parse_stats(v)?),
            _ => SvcAttr::Other(DefaultNla::new(nla.kind(), v.to_vec())),
        });
    }
    Ok(out)
}

/// A counter of either width (the 32-bit nest mixes u32 and u64 values).
fn counter_of(v: &[u8]) -> Result<u64, DecodeError> {
    match v.len() {
        4 => u32_of(v).map(u64::from),
        n if n >= 8 => v
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
            .ok_or_else(|| DecodeError::from("counter attribute")),
        n => Err(DecodeError::from(format!("counter attribute of {n} bytes"))),
    }
}

fn parse_stats(buf: &[u8]) -> Result<IpvsStats, DecodeError> {
    let mut st = IpvsStats::default();
    for nla in NlasIterator::new(buf) {
        let nla = nla?;
        let field = match nla.kind() & NLA_TYPE_MASK {
            stats_attr::CONNS => &mut st.conns,
            stats_attr::INPKTS => &mut st.inpkts,
            stats_attr::OUTPKTS => &mut st.outpkts,
            stats_attr::INBYTES => &mut st.inbytes,
            stats_attr::OUTBYTES => &mut st.outbytes,
            _ => continue,
        };
        *field = counter_of(nla.value())?;
    }
    Ok(st)
}

/// One counter attribute of a stats nest, `wide` selecting a u64 value.
fn emit_counter(b: &mut [u8], kind: u16, value: u64, wide: bool) -> usize {
    let len: u16 = if wide { 12 } else { 8 };
    b[..2].copy_from_slice(&len.to_ne_bytes());
    b[2..4].copy_from_slice(&kind.to_ne_bytes());
    if wide {
        b[4..12].copy_from_slice(&value.to_ne_bytes());
    } else {
        let v = u32::try_from(value).unwrap_or(u32::MAX);
        b[4..8].copy_from_slice(&v.to_ne_bytes());
    }
    usize::from(len)
}

/// Emits a stats nest's counters; `all_wide` for STATS64, else only the byte counters are u64.
fn emit_stats(b: &mut [u8], st: &IpvsStats, all_wide: bool) {
    let fields = [
        (stats_attr::CONNS, st.conns, all_wide),
        (stats_attr::INPKTS, st.inpkts, all_wide),
        (stats_attr::OUTPKTS, st.outpkts, all_wide),
        (stats_attr::INBYTES, st.inbytes, true),
        (stats_attr::OUTBYTES, st.outbytes, true),
    ];
    let mut at = 0;
    for (kind, value, wide) in fields {
        at += emit_counter(&mut b[at..], kind, value, wide);
    }
}

/// Encoded length of a stats nest's value (see [`emit_stats`]).
const STATS_LEN: usize = 3 * 8 + 2 * 12;
const STATS64_LEN: usize = 5 * 12;

fn parse_dest(buf: &[u8]) -> Result<Vec<DestAttr>, DecodeError> {
    let mut out = Vec::new();
    for nla in NlasIterator::new(buf) {
        let nla = nla?;
        let v = nla.value();
        out.push(match nla.kind() & NLA_TYPE_MASK {
            dest_attr::ADDR => DestAttr::Addr(addr_of(v)?),
            dest_attr::PORT => DestAttr::Port(be16_of(v)?),
            dest_attr::FWD_METHOD => DestAttr::FwdMethod(u32_of(v)?),
            dest_attr::WEIGHT => DestAttr::Weight(u32_of(v)?),
            dest_attr::U_THRESH => DestAttr::UThresh(u32_of(v)?),
            dest_attr::L_THRESH => DestAttr::LThresh(u32_of(v)?),
            dest_attr::ACTIVE_CONNS => DestAttr::ActiveConns(u32_of(v)?),
            dest_attr::INACT_CONNS => DestAttr::InactConns(u32_of(v)?),
            dest_attr::PERSIST_CONNS => DestAttr::PersistConns(u32_of(v)?),
            dest_attr::ADDR_FAMILY => DestAttr::AddrFamily(u16_of(v)?),
            _ => DestAttr::Other(DefaultNla::new(nla.kind(), v.to_vec())),
        });
    }
    Ok(out)
}

impl Nla for SvcAttr {
    fn value_len(&self) -> usize {
        match self {
            SvcAttr::Af(_) | SvcAttr::Protocol(_) | SvcAttr::Port(_) => 2,
            SvcAttr::Addr(_) => 16,
            SvcAttr::Fwmark(_) | SvcAttr::Timeout(_) | SvcAttr::Netmask(_) => 4,
            SvcAttr::Flags { .. } => 8,
            SvcAttr::SchedName(s) | SvcAttr::PeName(s) => s.len() + 1,
            SvcAttr::Stats(_) => STATS_LEN,
            SvcAttr::Stats64(_) => STATS64_LEN,
            SvcAttr::Other(n) => n.value_len(),
        }
    }
    fn kind(&self) -> u16 {
        match self {
            SvcAttr::Af(_) => svc_attr::AF,
            SvcAttr::Protocol(_) => svc_attr::PROTOCOL,
            SvcAttr::Addr(_) => svc_attr::ADDR,
            SvcAttr::Port(_) => svc_attr::PORT,
            SvcAttr::Fwmark(_) => svc_attr::FWMARK,
            SvcAttr::SchedName(_) => svc_attr::SCHED_NAME,
            SvcAttr::Flags { .. } => svc_attr::FLAGS,
            SvcAttr::Timeout(_) => svc_attr::TIMEOUT,
            SvcAttr::Netmask(_) => svc_attr::NETMASK,
            SvcAttr::PeName(_) => svc_attr::PE_NAME,
            SvcAttr::Stats(_) => svc_attr::STATS,
            SvcAttr::Stats64(_) => svc_attr::STATS64,
            SvcAttr::Other(n) => n.kind(),
        }
    }
    fn emit_value(&self, b: &mut [u8]) {
        match self {
            SvcAttr::Af(v) | SvcAttr::Protocol(v) => b[..2].copy_from_slice(&v.to_ne_bytes()),
            SvcAttr::Port(v) => b[..2].copy_from_slice(&v.to_be_bytes()),
            SvcAttr::Addr(a) => b[..16].copy_from_slice(a),
            SvcAttr::Fwmark(v) | SvcAttr::Timeout(v) | SvcAttr::Netmask(v) => {
                b[..4].copy_from_slice(&v.to_ne_bytes())
            }
            SvcAttr::Flags { flags, mask } => {
                b[..4].copy_from_slice(&flags.to_ne_bytes());
                b[4..8].copy_from_slice(&mask.to_ne_bytes());
            }
            SvcAttr::SchedName(s) | SvcAttr::PeName(s) => {
                b[..s.len()].copy_from_slice(s.as_bytes());
                b[s.len()] = 0;
            }
            SvcAttr::Stats(st) => emit_stats(b, st, false),
            SvcAttr::Stats64(st) => emit_stats(b, st, true),
            SvcAttr::Other(n) => n.emit_value(b),
        }
    }
}

impl Nla for DestAttr {
    fn value_len(&self) -> usize {
        match self {
            DestAttr::Addr(_) => 16,
            DestAttr::Port(_) | DestAttr::AddrFamily(_) => 2,
            DestAttr::Other(n) => n.value_len(),
            _ => 4,
        }
    }
    fn kind(&self) -> u16 {
        match self {
            DestAttr::Addr(_) => dest_attr::ADDR,
            DestAttr::Port(_) => dest_attr::PORT,
            DestAttr::FwdMethod(_) => dest_attr::FWD_METHOD,
            DestAttr::Weight(_) => dest_attr::WEIGHT,
            DestAttr::UThresh(_) => dest_attr::U_THRESH,
            DestAttr::LThresh(_) => dest_attr::L_THRESH,
            DestAttr::ActiveConns(_) => dest_attr::ACTIVE_CONNS,
            DestAttr::InactConns(_) => dest_attr::INACT_CONNS,
            DestAttr::PersistConns(_) => dest_attr::PERSIST_CONNS,
            DestAttr::AddrFamily(_) => dest_attr::ADDR_FAMILY,
            DestAttr::Other(n) => n.kind(),
        }
    }
    fn emit_value(&self, b: &mut [u8]) {
        match self {
            DestAttr::Addr(a) => b[..16].copy_from_slice(a),
            DestAttr::Port(v) => b[..2].copy_from_slice(&v.to_be_bytes()),
            DestAttr::AddrFamily(v) => b[..2].copy_from_slice(&v.to_ne_bytes()),
            DestAttr::FwdMethod(v)
            | DestAttr::Weight(v)
            | DestAttr::UThresh(v)
            | DestAttr::LThresh(v)
            | DestAttr::ActiveConns(v)
            | DestAttr::InactConns(v)
            | DestAttr::PersistConns(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
            DestAttr::Other(n) => n.emit_value(b),
        }
    }
}

impl Nla for IpvsAttr {
    fn value_len(&self) -> usize {
        match self {
            IpvsAttr::Service(v) => v.as_slice().buffer_len(),
            IpvsAttr::Dest(v) => v.as_slice().buffer_len(),
            IpvsAttr::Other(n) => n.value_len(),
            _ => 4,
        }
    }
    fn kind(&self) -> u16 {
        match self {
            IpvsAttr::Service(_) => cmd_attr::SERVICE | NLA_F_NESTED,
            IpvsAttr::Dest(_) => cmd_attr::DEST | NLA_F_NESTED,
            IpvsAttr::TimeoutTcp(_) => cmd_attr::TIMEOUT_TCP,
            IpvsAttr::TimeoutTcpFin(_) => cmd_attr::TIMEOUT_TCP_FIN,
            IpvsAttr::TimeoutUdp(_) => cmd_attr::TIMEOUT_UDP,
            IpvsAttr::InfoVersion(_) => info_attr::VERSION,
            IpvsAttr::InfoConnTabSize(_) => info_attr::CONN_TAB_SIZE,
            IpvsAttr::Other(n) => n.kind(),
        }
    }
    fn emit_value(&self, b: &mut [u8]) {
        match self {
            IpvsAttr::Service(v) => v.as_slice().emit(b),
            IpvsAttr::Dest(v) => v.as_slice().emit(b),
            IpvsAttr::TimeoutTcp(v)
            | IpvsAttr::TimeoutTcpFin(v)
            | IpvsAttr::TimeoutUdp(v)
            | IpvsAttr::InfoVersion(v)
            | IpvsAttr::InfoConnTabSize(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
            IpvsAttr::Other(n) => n.emit_value(b),
        }
    }
}

// ---- conversions between the model and attributes ----

fn af_of(ip: &IpAddr) -> u16 {
    if ip.is_ipv4() { AF_INET } else { AF_INET6 }
}

fn addr_bytes(ip: &IpAddr) -> [u8; 16] {
    let mut a = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => a[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => a = v6.octets(),
    }
    a
}

fn ip_of(af: u16, a: &[u8; 16]) -> Result<IpAddr, DecodeError> {
    match af {
        AF_INET => Ok(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
        AF_INET6 => Ok(IpAddr::V6(Ipv6Addr::from(*a))),
        other => Err(DecodeError::from(format!("address family {other}"))),
    }
}

/// IP protocol number of a protocol.
pub fn proto_num(p: Protocol) -> u16 {
    match p {
        Protocol::Tcp => IPPROTO_TCP,
        Protocol::Udp => IPPROTO_UDP,
        Protocol::Sctp => IPPROTO_SCTP,
    }
}

fn proto_of(n: u16) -> Option<Protocol> {
    match n {
        IPPROTO_TCP => Some(Protocol::Tcp),
        IPPROTO_UDP => Some(Protocol::Udp),
        IPPROTO_SCTP => Some(Protocol::Sctp),
        _ => None,
    }
}

fn fwd_num(f: ForwardMethod) -> u32 {
    match f {
        ForwardMethod::Masq => 0,
        ForwardMethod::Local => 1,
        ForwardMethod::Tunnel => 2,
        ForwardMethod::Route => 3,
    }
}

fn fwd_of(n: u32) -> ForwardMethod {
    match n & FWD_MASK {
        1 => ForwardMethod::Local,
        2 => ForwardMethod::Tunnel,
        3 => ForwardMethod::Route,
        _ => ForwardMethod::Masq,
    }
}

/// Attributes identifying a virtual server (for DEL_SERVICE, destinations and dumps).
pub fn svc_key_attrs(key: &IpvsServiceKey) -> Vec<SvcAttr> {
    vec![
        SvcAttr::Af(af_of(&key.addr)),
        SvcAttr::Protocol(proto_num(key.protocol)),
        SvcAttr::Addr(addr_bytes(&key.addr)),
        SvcAttr::Port(key.port),
    ]
}

/// Full attributes of a virtual server (for NEW_SERVICE / SET_SERVICE).
pub fn svc_attrs(svc: &IpvsService) -> Vec<SvcAttr> {
    let mut v = svc_key_attrs(&svc.key);
    v.push(SvcAttr::SchedName(svc.scheduler.clone()));
    v.push(SvcAttr::Flags {
        flags: svc.flags & !super::FLAG_HASHED,
        mask: u32::MAX,
    });
    v.push(SvcAttr::Timeout(svc.timeout));
    v.push(SvcAttr::Netmask(svc.netmask));
    v
}

/// The virtual server described by dump attributes; `Ok(None)` for fwmark or non-TCP/UDP/SCTP services
/// (which we never create and skip).
pub fn svc_from_attrs(attrs: &[SvcAttr]) -> Result<Option<IpvsService>, DecodeError> {
    let mut f = SvcFields::default();
    for a in attrs {
        match a {
            SvcAttr::Af(v) => f.af = Some(*v),
            SvcAttr::Protocol(v) => f.proto = Some(*v),
            SvcAttr::Addr(v) => f.addr = Some(*v),
            SvcAttr::Port(v) => f.port = Some(*v),
            SvcAttr::Fwmark(v) => f.fwmark = *v,
            SvcAttr::SchedName(v) => f.sched = Some(v.clone()),
            SvcAttr::Flags { flags, .. } => f.flags = *flags,
            SvcAttr::Timeout(v) => f.timeout = *v,
            SvcAttr::Netmask(v) => f.netmask = *v,
            _ => {}
        }
    }
    f.finish()
}

/// The fields of a service a dump answer carries, gathered attribute by attribute.
#[derive(Default)]
struct SvcFields {
    af: Option<u16>,
    proto: Option<u16>,
    addr: Option<[u8; 16]>,
    port: Option<u16>,
    fwmark: u32,
    sched: Option<String>,
    flags: u32,
    timeout: u32,
    netmask: u32,
}

impl SvcFields {
    /// The service (None: a fwmark service or an unknown protocol, which have no address key).
    fn finish(self) -> Result<Option<IpvsService>, DecodeError> {
        if self.fwmark != 0 {
            return Ok(None);
        }
        let af = self
            .af
            .ok_or_else(|| DecodeError::from("service without address family"))?;
        let Some(protocol) = self.proto.and_then(proto_of) else {
            return Ok(None);
        };
        let addr = self
            .addr
            .ok_or_else(|| DecodeError::from("service without address"))?;
        Ok(Some(IpvsService {
            key: IpvsServiceKey {
                addr: ip_of(af, &addr)?,
                port: self.port.unwrap_or(0),
                protocol,
            },
            scheduler: self.sched.unwrap_or_default(),
            flags: self.flags,
            timeout: self.timeout,
            netmask: self.netmask,
        }))
    }
}

/// The service of one GET_SERVICE dump answer (the generic netlink payload: its 4-byte header, then
/// the attributes), read straight from the bytes: nothing but the scheduler's name is allocated, and the
/// traffic counters are skipped. None for an answer without a service, a fwmark service or an unknown
/// protocol.
pub fn service_of_answer(payload: &[u8]) -> Result<Option<IpvsService>, DecodeError> {
    let attrs = payload
        .get(GENL_HEADER_LEN..)
        .ok_or_else(|| DecodeError::from("generic netlink answer without its header"))?;
    for nla in NlasIterator::new(attrs) {
        let nla = nla?;
        if nla.kind() & NLA_TYPE_MASK != cmd_attr::SERVICE {
            continue;
        }
        let mut f = SvcFields::default();
        for inner in NlasIterator::new(nla.value()) {
            let inner = inner?;
            let v = inner.value();
            match inner.kind() & NLA_TYPE_MASK {
                svc_attr::AF => f.af = Some(u16_of(v)?),
                svc_attr::PROTOCOL => f.proto = Some(u16_of(v)?),
                svc_attr::ADDR => f.addr = Some(addr_of(v)?),
                svc_attr::PORT => f.port = Some(be16_of(v)?),
                svc_attr::FWMARK => f.fwmark = u32_of(v)?,
                svc_attr::SCHED_NAME => f.sched = Some(string_of(v)),
                svc_attr::FLAGS => f.flags = u32_of(v)?,
                svc_attr::TIMEOUT => f.timeout = u32_of(v)?,
                svc_attr::NETMASK => f.netmask = u32_of(v)?,
                _ => {}
            }
        }
        return f.finish();
    }
    Ok(None)
}

/// Bytes of the generic netlink header (command, version, reserved) before the attributes.
const GENL_HEADER_LEN: usize = 4;

/// The traffic counters of dump attributes: the 64-bit nest when present, else the 32-bit one, else
/// `None` (a kernel that sends neither).
pub fn svc_stats_from_attrs(attrs: &[SvcAttr]) -> Option<IpvsStats> {
    let wide = attrs.iter().find_map(|a| match a {
        SvcAttr::Stats64(s) => Some(*s),
        _ => None,
    });
    wide.or_else(|| {
        attrs.iter().find_map(|a| match a {
            SvcAttr::Stats(s) => Some(*s),
            _ => None,
        })
    })
}

/// Attributes identifying a real server (for DEL_DEST).
pub fn dest_key_attrs(addr: IpAddr, port: u16) -> Vec<DestAttr> {
    vec![
        DestAttr::Addr(addr_bytes(&addr)),
        DestAttr::Port(port),
        DestAttr::AddrFamily(af_of(&addr)),
    ]
}

/// Full attributes of a real server (for NEW_DEST / SET_DEST).
pub fn dest_attrs(d: &IpvsDestination) -> Vec<DestAttr> {
    let mut v = dest_key_attrs(d.addr, d.port);
    v.push(DestAttr::FwdMethod(fwd_num(d.forward)));
    v.push(DestAttr::Weight(d.weight));
    v.push(DestAttr::UThresh(d.upper_threshold));
    v.push(DestAttr::LThresh(d.lower_threshold));
    v
}

/// The real server described by dump attributes; `svc_af` is used when the kernel omits the family.
pub fn dest_from_attrs(attrs: &[DestAttr], svc_af: u16) -> Result<IpvsDestination, DecodeError> {
    let mut af = svc_af;
    let mut addr = None;
    let mut d = IpvsDestination::masq(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0, 0);
    for a in attrs {
        match a {
            DestAttr::Addr(v) => addr = Some(*v),
            DestAttr::Port(v) => d.port = *v,
            DestAttr::FwdMethod(v) => d.forward = fwd_of(*v),
            DestAttr::Weight(v) => d.weight = *v,
            DestAttr::UThresh(v) => d.upper_threshold = *v,
            DestAttr::LThresh(v) => d.lower_threshold = *v,
            DestAttr::ActiveConns(v) => d.active_conns = *v,
            DestAttr::InactConns(v) => d.inactive_conns = *v,
            DestAttr::AddrFamily(v) => af = *v,
            _ => {}
        }
    }
    let addr = addr.ok_or_else(|| DecodeError::from("destination without address"))?;
    d.addr = ip_of(af, &addr)?;
    Ok(d)
}

/// Address family number of a service key.
pub fn key_af(key: &IpvsServiceKey) -> u16 {
    af_of(&key.addr)
}

/// Formats the GET_INFO version number as `major.minor.patch`.
pub fn version_string(v: u32) -> String {
    format!("{}.{}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ipvs::{FLAG_HASHED, FLAG_PERSISTENT};
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use netlink_packet_generic::GenlMessage;

    fn frame(m: IpvsMessage, family: u16, seq: u32) -> Vec<u8> {
        let mut g = GenlMessage::from_payload(m);
        g.set_resolved_family_id(family);
        let mut h = NetlinkHeader::default();
        h.sequence_number = seq;
        let mut nl = NetlinkMessage::new(h, NetlinkPayload::InnerMessage(g));
        nl.finalize();
        let mut buf = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut buf);
        buf
    }

    fn decode(buf: &[u8]) -> IpvsMessage {
        let nl = NetlinkMessage::<GenlMessage<IpvsMessage>>::deserialize(buf).unwrap();
        match nl.payload {
            NetlinkPayload::InnerMessage(g) => g.payload,
            other => panic!("{other:?}"),
        }
    }

    fn svc6() -> IpvsService {
        IpvsService {
            key: IpvsServiceKey {
                addr: "fd00:96::a".parse().unwrap(),
                port: 443,
                protocol: Protocol::Sctp,
            },
            scheduler: "mh".into(),
            flags: FLAG_PERSISTENT | 0x10,
            timeout: 10800,
            netmask: 128,
        }
    }

    #[test]
    fn service_round_trip_and_wire_layout() {
        let s = svc6();
        let m = IpvsMessage {
            cmd: cmd::NEW_SERVICE,
            attrs: vec![IpvsAttr::Service(svc_attrs(&s))],
        };
        let buf = frame(m.clone(), 0x1d, 5);
        // genl header: cmd, version
        assert_eq!(buf[16], cmd::NEW_SERVICE);
        assert_eq!(buf[17], FAMILY_VERSION);
        // port is big-endian on the wire: find the PORT attribute (len 6, type 4) inside the nest
        let needle = [6u8, 0, 4, 0, 0x01, 0xbb];
        assert!(buf.windows(6).any(|w| w == needle), "{buf:?}");
        let back = decode(&buf);
        assert_eq!(back, m);
        let IpvsAttr::Service(attrs) = &back.attrs[0] else {
            panic!()
        };
        assert_eq!(svc_from_attrs(attrs).unwrap(), Some(s));
    }

    #[test]
    fn destination_round_trip() {
        let d = IpvsDestination {
            addr: "10.244.1.7".parse().unwrap(),
            port: 8080,
            weight: 3,
            forward: ForwardMethod::Masq,
            upper_threshold: 0,
            lower_threshold: 0,
            active_conns: 0,
            inactive_conns: 0,
        };
        let m = IpvsMessage {
            cmd: cmd::NEW_DEST,
            attrs: vec![
                IpvsAttr::Service(svc_key_attrs(&svc6().key)),
                IpvsAttr::Dest(dest_attrs(&d)),
            ],
        };
        let back = decode(&frame(m.clone(), 0x1d, 1));
        assert_eq!(back, m);
        let IpvsAttr::Dest(attrs) = &back.attrs[1] else {
            panic!()
        };
        assert_eq!(dest_from_attrs(attrs, AF_INET6).unwrap(), d);
    }

    /// A dump answer as the kernel builds it: several NEW_SERVICE messages in one datagram, each with
    /// stats nests we do not model, the HASHED flag set, and a trailing NLMSG_DONE.
    #[test]
    fn parses_a_captured_style_dump_buffer() {
        let v4 = IpvsService {
            key: IpvsServiceKey {
                addr: "10.96.0.1".parse().unwrap(),
                port: 443,
                protocol: Protocol::Tcp,
            },
            scheduler: "rr".into(),
            flags: FLAG_HASHED,
            timeout: 0,
            netmask: 0xffff_ffff,
        };
        let mut attrs4 = svc_attrs(&v4);
        attrs4[5] = SvcAttr::Flags {
            flags: FLAG_HASHED,
            mask: u32::MAX,
        };
        attrs4.push(SvcAttr::Other(DefaultNla::new(
            10 | NLA_F_NESTED,
            vec![8, 0, 1, 0, 42, 0, 0, 0],
        )));
        let mut fwmark = svc_key_attrs(&v4.key);
        fwmark.push(SvcAttr::Fwmark(7));
        let mut buf = Vec::new();
        for attrs in [attrs4, svc_attrs(&svc6()), fwmark] {
            buf.extend(frame(
                IpvsMessage {
                    cmd: cmd::NEW_SERVICE,
                    attrs: vec![IpvsAttr::Service(attrs)],
                },
                0x1d,
                9,
            ));
        }
        // NLMSG_DONE with code 0
        let mut done = 20u32.to_ne_bytes().to_vec();
        done.extend(3u16.to_ne_bytes());
        done.extend(2u16.to_ne_bytes());
        done.extend(9u32.to_ne_bytes());
        done.extend(0u32.to_ne_bytes());
        done.extend(0i32.to_ne_bytes());
        buf.extend(done);

        let mut got = Vec::new();
        let mut finished = false;
        crate::kernel::netlink::for_each_message::<GenlMessage<IpvsMessage>>(&buf, |seq, item| {
            assert_eq!(seq, 9);
            match item {
                crate::kernel::netlink::Item::Message(g) => {
                    for a in g.payload.attrs {
                        if let IpvsAttr::Service(s) = a {
                            got.push(svc_from_attrs(&s).unwrap());
                        }
                    }
                }
                crate::kernel::netlink::Item::Done(r) => {
                    r.unwrap();
                    finished = true;
                }
                _ => panic!(),
            }
        })
        .unwrap();
        assert!(finished);
        assert_eq!(got, vec![Some(v4), Some(svc6()), None]);
    }

    /// Stats nests as the kernel sends them: STATS64 wins over STATS; STATS alone (older kernels) is
    /// read with its mixed widths; neither gives `None`; a short counter is an error.
    #[test]
    fn service_stats_nests() {
        let st = |c| IpvsStats {
            conns: c,
            inpkts: 7,
            outpkts: 5,
            inbytes: 5_000_000_000,
            outbytes: 300,
        };
        let mut attrs = svc_attrs(&svc6());
        attrs.push(SvcAttr::Stats(st(3)));
        attrs.push(SvcAttr::Stats64(st(1 << 40)));
        let m = IpvsMessage {
            cmd: cmd::NEW_SERVICE,
            attrs: vec![IpvsAttr::Service(attrs.clone())],
        };
        let buf = frame(m.clone(), 0x1d, 2);
        // STATS64 nest header: length 4 + 60, type 12; CONNS inside as a u64.
        assert!(buf.windows(4).any(|w| w == [64, 0, 12, 0]), "{buf:?}");
        let back = decode(&buf);
        assert_eq!(back, m);
        let IpvsAttr::Service(got) = &back.attrs[0] else {
            panic!()
        };
        assert_eq!(svc_stats_from_attrs(got), Some(st(1 << 40)));
        attrs.pop();
        assert_eq!(svc_stats_from_attrs(&attrs), Some(st(3)));
        attrs.pop();
        assert_eq!(svc_stats_from_attrs(&attrs), None);
        // A 2-byte CONNS inside a nest.
        let bad = [12u8, 0, 10, 0, 6, 0, 1, 0, 9, 9, 0, 0];
        assert!(parse_svc(&bad).is_err());
    }

    #[test]
    fn info_answer_and_garbage() {
        let m = IpvsMessage {
            cmd: cmd::SET_INFO,
            attrs: vec![
                IpvsAttr::InfoVersion(0x010201),
                IpvsAttr::InfoConnTabSize(4096),
            ],
        };
        let back = decode(&frame(m.clone(), 0x1d, 1));
        assert_eq!(back, m);
        assert_eq!(version_string(0x010201), "1.2.1");
        // short attribute values are decode errors, never panics
        for bad in [&[5u8, 0, 4, 0, 1][..], &[6, 0, 1, 0, 5, 0, 3, 0]] {
            let _ = parse_svc(bad);
            let _ = parse_dest(bad);
        }
        assert!(parse_svc(&[6, 0, 4, 0, 1, 0, 0, 0]).is_ok());
        assert!(parse_svc(&[5, 0, 4, 0, 1, 0, 0, 0]).is_err());
    }
}
