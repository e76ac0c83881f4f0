//! Valid samples the fuzz targets start from: real files of the repository and netlink messages built
//! with the crate's own encoders.

use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::codec::{self, IpvsAttr, IpvsMessage, cmd};
use kube_proxy_rs::kernel::ipvs::{ForwardMethod, IpvsDestination, IpvsService, IpvsServiceKey};
use netlink_packet_core::{
    NLM_F_MULTIPART, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
};
use netlink_packet_generic::GenlMessage;
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol as CtProto, Tuple,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use serde_json::Value;
use std::net::IpAddr;
use std::path::Path;

/// Valid samples per input kind.
#[derive(Debug, Default)]
pub struct Corpus {
    /// IPVS generic-netlink dump datagrams (services, destinations, info, errors).
    pub ipvs: Vec<Vec<u8>>,
    /// rtnetlink link and address dump datagrams.
    pub rtnl: Vec<Vec<u8>>,
    /// ctnetlink conntrack dump datagrams.
    pub conntrack: Vec<Vec<u8>>,
    /// `iptables-save` / `ip6tables-save` texts.
    pub iptables: Vec<String>,
    /// `ipset save` texts.
    pub ipset: Vec<String>,
    /// `KubeProxyConfiguration` files.
    pub config: Vec<String>,
    /// Services as JSON.
    pub services: Vec<Value>,
    /// EndpointSlices as JSON.
    pub slices: Vec<Value>,
    /// The Services in protobuf (the message, as inside its envelope).
    pub pb_services: Vec<Vec<u8>>,
    /// The EndpointSlices in protobuf.
    pub pb_slices: Vec<Vec<u8>>,
    /// Protobuf response bodies: enveloped lists and length-prefixed watch streams.
    pub pb_streams: Vec<Vec<u8>>,
}

/// The protobuf samples of the JSON ones: messages, a list body per kind, a watch stream per kind.
fn protobuf_samples(services: &[Value], slices: &[Value]) -> [Vec<Vec<u8>>; 3] {
    use super::proto;
    use super::store::Kind;
    let encode = |kind, objs: &[Value]| -> Vec<Vec<u8>> {
        objs.iter()
            .map(|v| proto::message(kind, v).unwrap_or_else(|e| panic!("sample: {e}")))
            .collect()
    };
    let mut streams = Vec::new();
    for (kind, objs) in [(Kind::Service, services), (Kind::EndpointSlice, slices)] {
        let items: Vec<&Value> = objs.iter().collect();
        let meta = k8s_pb::apimachinery::pkg::apis::meta::v1::ListMeta {
            resource_version: Some("7".into()),
            r#continue: Some("next".into()),
            ..Default::default()
        };
        streams.push(proto::list(kind, meta, &items).expect("list sample"));
        let mut watch = Vec::new();
        for (i, v) in objs.iter().enumerate() {
            let t = ["ADDED", "MODIFIED", "DELETED"][i % 3];
            watch.extend(proto::watch_frame(
                t,
                proto::object(kind, v).expect("object"),
            ));
        }
        watch.extend(proto::watch_frame(
            "BOOKMARK",
            proto::bookmark(kind, 9, false),
        ));
        watch.extend(proto::watch_frame(
            "ERROR",
            proto::status(410, "Expired", "too old"),
        ));
        streams.push(watch);
    }
    [
        encode(Kind::Service, services),
        encode(Kind::EndpointSlice, slices),
        streams,
    ]
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn frame<T: NetlinkSerializable + std::fmt::Debug>(payload: T, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.sequence_number = seq;
    header.flags = NLM_F_MULTIPART;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
    m.finalize();
    let mut buf = vec![0u8; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// A datagram of `frames` followed by NLMSG_DONE.
fn datagram(frames: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out: Vec<u8> = frames.concat();
    let mut done = NetlinkMessage::<GenlMessage<IpvsMessage>>::new(
        NetlinkHeader::default(),
        NetlinkPayload::Done(Default::default()),
    );
    done.finalize();
    let mut buf = vec![0u8; done.buffer_len()];
    done.serialize(&mut buf);
    out.extend(buf);
    out
}

fn ipvs_msg(cmd: u8, attrs: Vec<IpvsAttr>) -> GenlMessage<IpvsMessage> {
    let mut m = GenlMessage::from_payload(IpvsMessage { cmd, attrs });
    m.set_resolved_family_id(0x22);
    m
}

fn ipvs_samples() -> Vec<Vec<u8>> {
    let services = [
        ("10.96.0.1", 443, Protocol::Tcp, "rr", 0),
        ("10.96.0.10", 53, Protocol::Udp, "lc", 10800),
        ("fd00:10:96::a", 80, Protocol::Sctp, "sh", 0),
    ];
    let mut frames = Vec::new();
    let mut dests = Vec::new();
    for (i, (ip, port, protocol, sched, timeout)) in services.into_iter().enumerate() {
        let addr: IpAddr = ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let svc = IpvsService {
            key: IpvsServiceKey {
                addr,
                port,
                protocol,
            },
            scheduler: sched.into(),
            flags: if timeout > 0 { 1 } else { 0 },
            timeout,
            netmask: if addr.is_ipv4() { u32::MAX } else { 128 },
        };
        frames.push(frame(
            ipvs_msg(
                cmd::NEW_SERVICE,
                vec![IpvsAttr::Service(codec::svc_attrs(&svc))],
            ),
            i as u32,
        ));
        let mut d = IpvsDestination::masq(addr, 8080 + i as u16, 1);
        d.forward = [
            ForwardMethod::Masq,
            ForwardMethod::Local,
            ForwardMethod::Route,
        ][i];
        d.active_conns = 3;
        dests.push(frame(
            ipvs_msg(cmd::NEW_DEST, vec![IpvsAttr::Dest(codec::dest_attrs(&d))]),
            i as u32,
        ));
    }
    let info = frame(
        ipvs_msg(
            cmd::SET_INFO,
            vec![
                IpvsAttr::InfoVersion(0x010203),
                IpvsAttr::InfoConnTabSize(4096),
            ],
        ),
        9,
    );
    let timeouts = frame(
        ipvs_msg(
            cmd::SET_CONFIG,
            vec![
                IpvsAttr::TimeoutTcp(900),
                IpvsAttr::TimeoutTcpFin(120),
                IpvsAttr::TimeoutUdp(300),
            ],
        ),
        10,
    );
    vec![
        datagram(frames.clone()),
        datagram(dests.clone()),
        datagram(vec![info]),
        datagram(vec![timeouts]),
        [frames, dests].concat().concat(),
        error_frame(-17),
        error_frame(0),
    ]
}

/// An NLMSG_ERROR frame with `code` and an echoed header, as the kernel sends.
fn error_frame(code: i32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&36u32.to_ne_bytes());
    b.extend_from_slice(&2u16.to_ne_bytes());
    b.extend_from_slice(&0x100u16.to_ne_bytes()); // NLM_F_CAPPED
    b.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&code.to_ne_bytes());
    b.extend_from_slice(&[16, 0, 0, 0, 0x22, 0, 5, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
    b
}

fn rtnl_samples() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for (i, name) in ["lo", "eth0", "kube-ipvs0"].into_iter().enumerate() {
        let mut link = LinkMessage::default();
        link.header.index = i as u32 + 1;
        link.attributes.push(LinkAttribute::IfName(name.into()));
        link.attributes.push(LinkAttribute::Mtu(1500));
        frames.push(frame(RouteNetlinkMessage::NewLink(link), 1));
    }
    let mut addrs = Vec::new();
    for (i, ip) in ["127.0.0.1", "10.0.0.5", "fd00::5", "10.96.0.1"]
        .into_iter()
        .enumerate()
    {
        let ip: IpAddr = ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut m = AddressMessage::default();
        m.header.index = i as u32 + 1;
        m.header.family = if ip.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        m.header.prefix_len = if ip.is_ipv4() { 32 } else { 128 };
        m.attributes.push(AddressAttribute::Address(ip));
        m.attributes.push(AddressAttribute::Local(ip));
        addrs.push(frame(RouteNetlinkMessage::NewAddress(m), 2));
    }
    vec![
        datagram(frames.clone()),
        datagram(addrs.clone()),
        [frames, addrs].concat().concat(),
    ]
}

fn ct_tuple(src: IpAddr, dst: IpAddr, proto: CtProto, sport: u16, dport: u16) -> Vec<Tuple> {
    vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(src),
            IPTuple::DestinationAddress(dst),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(proto),
            ProtoTuple::SourcePort(sport),
            ProtoTuple::DestinationPort(dport),
        ]),
    ]
}

fn conntrack_samples() -> Vec<Vec<u8>> {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let mut frames = Vec::new();
    for (proto, family, a, b) in [
        (
            CtProto::Udp,
            NetfilterProtoFamily::IPv4,
            ip("10.0.0.5"),
            ip("10.96.0.10"),
        ),
        (
            CtProto::Tcp,
            NetfilterProtoFamily::IPv4,
            ip("10.0.0.6"),
            ip("10.96.0.1"),
        ),
        (
            CtProto::Udp,
            NetfilterProtoFamily::IPv6,
            ip("fd00::5"),
            ip("fd00:96::a"),
        ),
    ] {
        let entry = NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            ConntrackMessage::New(vec![
                ConntrackAttribute::CtaTupleOrig(ct_tuple(a, b, proto, 40000, 53)),
                ConntrackAttribute::CtaTupleReply(ct_tuple(b, a, proto, 5353, 40000)),
                ConntrackAttribute::CtaMark(0),
            ]),
        );
        frames.push(frame(entry, 3));
    }
    vec![datagram(frames.clone()), frames.concat()]
}

/// The YAML documents of `rel` as JSON values.
fn yaml_docs(rel: &str) -> Vec<Value> {
    read(rel)
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

impl Corpus {
    /// Loads every sample; panics if a repository file is missing (the targets need them).
    pub fn load() -> Corpus {
        let data = "tests/planner_data/small-scenario";
        let mut services = Vec::new();
        let mut slices = Vec::new();
        for rel in [
            format!("{data}/objects.yaml"),
            "config/demo-cluster.yaml".into(),
        ] {
            for v in yaml_docs(&rel) {
                match v.get("kind").and_then(Value::as_str) {
                    Some("Service") => services.push(v),
                    Some("EndpointSlice") => slices.push(v),
                    _ => {}
                }
            }
        }
        let mut config = Vec::new();
        for entry in std::fs::read_dir(root().join("config"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".yaml") && name != "demo-cluster.yaml" {
                config.push(read(&format!("config/{name}")));
            }
        }
        config.sort();
        assert!(!services.is_empty() && !slices.is_empty() && !config.is_empty());
        let [pb_services, pb_slices, pb_streams] = protobuf_samples(&services, &slices);
        Corpus {
            ipvs: ipvs_samples(),
            rtnl: rtnl_samples(),
            conntrack: conntrack_samples(),
            iptables: vec![
                read(&format!("{data}/iptables-save.txt")),
                read(&format!("{data}/ip6tables-save.txt")),
            ],
            ipset: vec![read(&format!("{data}/ipset-save.txt"))],
            config,
            services,
            slices,
            pb_services,
            pb_slices,
            pb_streams,
        }
    }
}
