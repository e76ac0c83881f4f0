//! The fuzz targets: how each generates an input and what it checks.
//!
//! Every check runs the parser on the input and must return: a panic fails the case (the loop catches
//! it), and so does an error whose text is empty (errors must name what was wrong) or a broken round
//! trip where the parser promises one.

use super::api_targets;
use super::corpus::Corpus;
use super::explain_targets;
use super::mutate::{mutate_bytes, mutate_json, mutate_protobuf, mutate_text, random_bytes};
use clap::CommandFactory;
use fastrand::Rng;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_proxy_rs::cluster::convert;
use kube_proxy_rs::cluster::decode::{Decoded, Lenient};
use kube_proxy_rs::cluster::listwatch::Encoding;
use kube_proxy_rs::cluster::listwatch::frames::{Framer, Framing};
use kube_proxy_rs::cluster::listwatch::request::{decode_event, decode_page};
use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::cluster::proto::Protobuf;
use kube_proxy_rs::config::{defaults, file, flags, options, validate};
use kube_proxy_rs::gotime::GoDuration;
use kube_proxy_rs::kernel::conntrack::netlink as ct;
use kube_proxy_rs::kernel::ipset::{cli as ipset_cli, entry, save};
use kube_proxy_rs::kernel::iptables::{self, cli::IptablesVersion, cli::referrers, rules};
use kube_proxy_rs::kernel::ipvs::codec::{self, IpvsAttr, IpvsMessage};
use kube_proxy_rs::kernel::ipvs::{FLAG_HASHED, IpvsService};
use kube_proxy_rs::kernel::link::{changes, rtnetlink as rtnl};
use kube_proxy_rs::kernel::netlink::{Item, NlError, for_each_message};
use netlink_packet_core::NetlinkDeserializable;
use netlink_packet_generic::GenlMessage;
use netlink_packet_netfilter::NetfilterMessageInner;
use netlink_packet_netfilter::conntrack::ConntrackMessage;
use prost::Message;
use std::fmt::Display;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// Builds the input of one case.
    pub generate: fn(&mut Rng, &Corpus) -> Vec<u8>,
    /// Runs the parser on it; `Err` names a broken property (panics are caught by the caller).
    pub check: fn(&[u8]) -> Result<(), String>,
    /// The most one case may allocate at once.
    pub memory: Memory,
}

/// A memory bound: `fixed` bytes plus `per_byte` per input byte.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub fixed: usize,
    pub per_byte: usize,
}

impl Memory {
    /// The bound for an input of `len` bytes.
    pub fn bound(self, len: usize) -> usize {
        self.fixed.saturating_add(self.per_byte.saturating_mul(len))
    }
}

/// The bound of the older targets: catches a blow-up, not a constant factor.
const LOOSE: Memory = Memory {
    fixed: 64 << 20,
    per_byte: 1024,
};

/// All targets, in the order the bench prints them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "ipvs_genl",
        generate: gen_ipvs,
        check: check_ipvs,
        memory: LOOSE,
    },
    Target {
        name: "rtnetlink",
        generate: gen_rtnl,
        check: check_rtnl,
        memory: LOOSE,
    },
    Target {
        name: "conntrack",
        generate: gen_conntrack,
        check: check_conntrack,
        memory: LOOSE,
    },
    Target {
        name: "iptables_save",
        generate: gen_iptables,
        check: check_iptables,
        memory: LOOSE,
    },
    Target {
        name: "ipset_save",
        generate: gen_ipset,
        check: check_ipset,
        memory: LOOSE,
    },
    Target {
        name: "config_file",
        generate: gen_config,
        check: check_config,
        memory: LOOSE,
    },
    Target {
        name: "config_flags",
        generate: gen_flags,
        check: check_flags,
        memory: LOOSE,
    },
    Target {
        name: "service_convert",
        generate: gen_service,
        check: check_service,
        memory: LOOSE,
    },
    Target {
        name: "endpointslice_convert",
        generate: gen_slice,
        check: check_slice,
        memory: LOOSE,
    },
    Target {
        name: "service_protobuf",
        generate: gen_pb_service,
        check: check_pb_service,
        memory: LOOSE,
    },
    Target {
        name: "endpointslice_protobuf",
        generate: gen_pb_slice,
        check: check_pb_slice,
        memory: LOOSE,
    },
    Target {
        name: "watch_protobuf",
        generate: gen_pb_stream,
        check: check_pb_stream,
        memory: LOOSE,
    },
    Target {
        name: "watch_json",
        generate: api_targets::gen_watch_json,
        check: api_targets::check_watch_json,
        memory: api_targets::WATCH_MEMORY,
    },
    Target {
        name: "list_json",
        generate: api_targets::gen_list_json,
        check: api_targets::check_list_json,
        memory: api_targets::LIST_MEMORY,
    },
    Target {
        name: "list_protobuf",
        generate: api_targets::gen_list_protobuf,
        check: api_targets::check_list_protobuf,
        memory: api_targets::LIST_MEMORY,
    },
    Target {
        name: "gzip_body",
        generate: api_targets::gen_gzip,
        check: api_targets::check_gzip,
        memory: api_targets::GZIP_MEMORY,
    },
    Target {
        name: "explain_request",
        generate: explain_targets::gen_request,
        check: explain_targets::check_request,
        memory: explain_targets::REQUEST_MEMORY,
    },
    Target {
        name: "explain_cli_answer",
        generate: explain_targets::gen_answer,
        check: explain_targets::check_answer,
        memory: explain_targets::ANSWER_MEMORY,
    },
];

pub(super) fn named<E: Display>(what: &str, e: E) -> Result<(), String> {
    let text = e.to_string();
    if text.trim().is_empty() {
        Err(format!("{what}: error without a message"))
    } else {
        Ok(())
    }
}

pub(super) fn choose<'a, T>(rng: &mut Rng, v: &'a [T]) -> &'a T {
    &v[rng.usize(..v.len())]
}

/// Mutated sample (most cases), the sample itself, or random bytes.
fn gen_binary(rng: &mut Rng, samples: &[Vec<u8>]) -> Vec<u8> {
    let sample = choose(rng, samples).clone();
    match rng.u8(0..20) {
        0 => sample,
        1 => random_bytes(rng, 256),
        _ => {
            let other = choose(rng, samples);
            mutate_bytes(rng, sample, other, 6)
        }
    }
}

fn gen_text(rng: &mut Rng, samples: &[String], dict: &[&str]) -> Vec<u8> {
    let sample = choose(rng, samples);
    match rng.u8(0..20) {
        0 => sample.clone().into_bytes(),
        1 => random_bytes(rng, 256),
        _ => mutate_text(rng, sample, dict, 6),
    }
}

fn nl_result<R: NetlinkDeserializable + std::fmt::Debug>(
    buf: &[u8],
    mut f: impl FnMut(R) -> Result<(), String>,
) -> Result<(), String> {
    let mut out = Ok(());
    let mut item_err = |e: &NlError| {
        if e.to_string().trim().is_empty() {
            out = Err("netlink error without a message".to_string());
        }
    };
    let mut messages = Vec::new();
    let r = for_each_message::<R>(buf, |_seq, item| match item {
        Item::Message(m) => messages.push(m),
        Item::Done(Err(e)) | Item::Ack(Err(e)) => item_err(&e),
        _ => {}
    });
    if let Err(e) = r {
        named("netlink framing", e)?;
    }
    out?;
    messages.into_iter().try_for_each(&mut f)
}

fn gen_ipvs(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_binary(rng, &c.ipvs)
}

fn check_ipvs_attrs(attrs: &[IpvsAttr]) -> Result<(), String> {
    for a in attrs {
        match a {
            IpvsAttr::Service(s) => match codec::svc_from_attrs(s) {
                Ok(Some(svc)) => {
                    // What we decode, we encode to the same attributes and decode again to itself.
                    // (FLAG_HASHED is the kernel's own and never encoded.)
                    let again = codec::svc_from_attrs(&codec::svc_attrs(&svc));
                    let want = IpvsService {
                        flags: svc.flags & !FLAG_HASHED,
                        ..svc.clone()
                    };
                    if again.as_ref().ok().and_then(Option::as_ref) != Some(&want) {
                        return Err(format!("service round trip: {svc:?} became {again:?}"));
                    }
                }
                Ok(None) => {}
                Err(e) => named("svc_from_attrs", e)?,
            },
            IpvsAttr::Dest(d) => {
                for af in [libc::AF_INET as u16, libc::AF_INET6 as u16, 0, 7] {
                    if let Err(e) = codec::dest_from_attrs(d, af) {
                        named("dest_from_attrs", e)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_ipvs(buf: &[u8]) -> Result<(), String> {
    nl_result::<GenlMessage<IpvsMessage>>(buf, |m| check_ipvs_attrs(&m.payload.attrs))?;
    let _ = codec::version_string(buf.len() as u32);
    Ok(())
}

fn gen_rtnl(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_binary(rng, &c.rtnl)
}

fn check_rtnl(buf: &[u8]) -> Result<(), String> {
    nl_result::<rtnl::Answer>(buf, |_| Ok(()))?;
    for ignore in [None, Some(1), Some(3)] {
        let _ = changes::concerns_other_links(buf, ignore);
    }
    Ok(())
}

fn gen_conntrack(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_binary(rng, &c.conntrack)
}

fn check_conntrack(buf: &[u8]) -> Result<(), String> {
    nl_result::<ct::Answer>(buf, |a| {
        if let Some(m) = a.0
            && let NetfilterMessageInner::Conntrack(ConntrackMessage::New(attrs)) = m.inner
        {
            let _ = ct::udp_flow(&attrs);
        }
        Ok(())
    })
}

const IPTABLES_WORDS: &[&str] = &[
    "-A",
    "-I",
    "-N",
    "-X",
    "-F",
    "-j",
    "-g",
    "-m",
    "!",
    "-s",
    "-d",
    "-i",
    "-o",
    "-p",
    "--dport",
    "--match-set",
    "src",
    "dst",
    "src,dst",
    "KUBE-SERVICES",
    "KUBE-MARK-MASQ",
    "MARK",
    "--set-xmark",
    "--or-mark",
    "0x4000/0x4000",
    "--mark",
    "REJECT",
    "--reject-with",
    "ACCEPT",
    "RETURN",
    "DROP",
    "comment",
    "--comment",
    "\"",
    "\"a b\"",
    "\\",
    "\"\\\"",
    "10.0.0.0/8",
    "10.0.0.1/33",
    "::/0",
    "fd00::/129",
    "1.2.3.4/255.0.0.0",
    "0/0",
    "*nat",
    "*filter",
    "COMMIT",
    ":KUBE-X - [0:0]",
    ":INPUT ACCEPT [0:0]",
    "set",
    "addrtype",
    "--dst-type",
    "LOCAL",
    "tcp",
    "udp",
    "65536",
    "",
    "--to-ports",
    "--random-fully",
    "MASQUERADE",
    "-",
    "--",
    "--src-range",
];

fn gen_iptables(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_text(rng, &c.iptables, IPTABLES_WORDS)
}

fn check_rule_line(line: &str) -> Result<(), String> {
    let words = match rules::tokenize(line) {
        Ok(w) => w,
        Err(e) => return named("tokenize", e),
    };
    let again = rules::tokenize(&rules::render(&words));
    if again.as_ref() != Ok(&words) {
        return Err(format!(
            "render/tokenize round trip: {words:?} became {again:?}"
        ));
    }
    let _ = rules::target(&words);
    let _ = rules::match_sets(&words).count();
    for family in [IpFamily::V4, IpFamily::V6] {
        match rules::normalize(words.get(2..).unwrap_or_default(), family) {
            // Normalized is the form iptables-save prints: normalizing it again changes nothing.
            Ok(n) => {
                let again = rules::normalize(&n, family);
                if again.as_ref() != Ok(&n) {
                    return Err(format!("normalize not idempotent: {n:?} became {again:?}"));
                }
            }
            Err(e) => named("normalize", e)?,
        }
    }
    Ok(())
}

fn check_iptables(buf: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(buf);
    for (table, body) in rules::split_tables(&text) {
        let _ = rules::builtin_chains(&table);
        for line in body.lines() {
            check_rule_line(line)?;
        }
    }
    let _ = referrers(&text, "KUBE-SERVICES");
    let _ = IptablesVersion::parse(&text);
    let _ = iptables::failing_line(&text);
    let _ = iptables::annotate_restore_error(&text, &text);
    Ok(())
}

const IPSET_WORDS: &[&str] = &[
    "create",
    "add",
    "del",
    "flush",
    "KUBE-CLUSTER-IP",
    "KUBE-NODE-PORT-TCP",
    "hash:ip",
    "hash:ip,port",
    "hash:ip,port,ip",
    "hash:ip,port,net",
    "bitmap:port",
    "family",
    "inet",
    "inet6",
    "range",
    "0-65535",
    "hashsize",
    "1024",
    "maxelem",
    "65536",
    "timeout",
    "comment",
    "\"x\"",
    "10.96.0.1,tcp:80",
    "10.0.0.1,udp:65536",
    "1.2.3.4,sctp:1,10.0.0.0/33",
    "fd00::1,tcp:443",
    "[fd00::1],tcp:1",
    "10.0.0.1,tcp:80,fd00::1",
    "1.2.3.4,icmp:0",
    "30080",
    "0",
    "-1",
    "99999",
    "10.0.0.1,tcp:",
    ",",
    "::ffff:1.2.3.4,tcp:1",
    "Name:",
    "Type:",
    "Header:",
    "Error in line 3:",
];

fn gen_ipset(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_text(rng, &c.ipset, IPSET_WORDS)
}

fn check_entry(set: save::SetHeader, member: &str) -> Result<(), String> {
    let types = set.set_type.map(|t| vec![t]).unwrap_or_default();
    let families = set
        .family
        .map(|f| vec![f])
        .unwrap_or(vec![IpFamily::V4, IpFamily::V6]);
    for t in types {
        for &f in &families {
            match entry::canonical_entry(t, f, member) {
                Ok(canon) => {
                    let again = entry::canonical_entry(t, f, &canon);
                    if again.as_ref() != Ok(&canon) {
                        return Err(format!(
                            "canonical form of {member:?} is {canon:?}, then {again:?}"
                        ));
                    }
                }
                Err(e) => named("canonical_entry", e)?,
            }
        }
    }
    Ok(())
}

fn check_ipset(buf: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(buf);
    let saved = save::parse_save(&text);
    for (name, members) in &saved.members {
        let Some(header) = saved.headers.get(name) else {
            continue;
        };
        for m in members {
            check_entry(header.clone(), m)?;
        }
    }
    let _ = save::parse_list_terse(&text);
    let _ = ipset_cli::restore_error_line(&text);
    Ok(())
}

const CONFIG_WORDS: &[&str] = &[
    "mode: ipvs",
    "mode: iptables",
    "mode:",
    "ipvs:",
    "  syncPeriod: 30s",
    "  syncPeriod: -1s",
    "  minSyncPeriod: 1h99999999999h",
    "  scheduler: wrr",
    "  strictARP: yes",
    "  excludeCIDRs: [1.2.3.0/33]",
    "clusterCIDR: 10.0.0.0/8,fd00::/129",
    "bindAddress: 0.0.0.0",
    "healthzBindAddress: :99999",
    "metricsBindAddress: [::]:10249",
    "nodePortAddresses: [primary, 10.0.0.0/8]",
    "conntrack:",
    "  maxPerCore: -5",
    "  min: null",
    "featureGates: {A: true, B: maybe}",
    "oomScoreAdj: 1001",
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1",
    "kind: KubeProxyConfiguration",
    "kind: Other",
    "&a [*a, *a]",
    "*a",
    "!!binary AAAA",
    "!!str",
    "? complex",
    "- list",
    "{",
    "}",
    "[",
    "]",
    "'",
    "\"",
    "null",
    "~",
    "0x10",
    "1e400",
    ".inf",
    "-.nan",
    "<<: *a",
    "%YAML 1.2",
    "---",
    "...",
    "\t",
    "detectLocalMode: BridgeInterface",
    "detectLocal: {bridgeInterface: ''}",
    "portRange: 1-0",
];

fn gen_config(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_text(rng, &c.config, CONFIG_WORDS)
}

fn check_config(buf: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(buf);
    match file::decode(&text) {
        Ok(mut d) => {
            defaults::apply_defaults(&mut d.config);
            if let Err(e) = validate::validate(&d.config) {
                named("validate", e)?;
            }
            if let Err(e) = file::encode(&d.config) {
                named("encode", e)?;
            }
            Ok(())
        }
        Err(e) => named("decode", e),
    }
}

/// A value of the kind a flag's value name asks for.
fn flag_value(rng: &mut Rng, value_name: &str) -> String {
    let pool: &[&str] = match value_name {
        "BOOL" | "true|false|raw" => &["true", "false", "raw", "1", "0", "T", "F", "yes", ""],
        "duration" => &[
            "30s",
            "1m30s",
            "-1s",
            "0",
            "1.5h",
            "9999999999h",
            "1us",
            "1µs",
            "s",
            "1",
            ".5s",
        ],
        "int32" | "Level" => &["0", "1", "-1", "2147483648", "99999", "0x10", "1e3", ""],
        "float32" => &["5", "0.5", "-1", "NaN", "inf", "1e40", ""],
        "IP" => &["0.0.0.0", "::", "10.0.0.1", "300.0.0.1", "fd00::1%eth0", ""],
        "ipport" => &[
            "0.0.0.0:10256",
            ":10249",
            "[::]:1",
            "[::1]",
            "1.2.3.4:99999",
            "host:port",
            "",
        ],
        "CIDRS" | "strings" => &[
            "10.0.0.0/8",
            "10.0.0.0/8,fd00::/64",
            "primary",
            "1.2.3.4/33",
            ",",
            "",
        ],
        "mapStringBool" => &["A=true", "A=true,B=false", "A", "=true", "A=maybe", ",", ""],
        "pattern=N,..." => &["foo=2", "foo=", "=3", "a*=1,b=x", ""],
        "ProxyMode" => &["ipvs", "iptables", "nftables", "kernelspace", ""],
        "LocalMode" => &[
            "ClusterCIDR",
            "NodeCIDR",
            "BridgeInterface",
            "InterfaceNamePrefix",
            "x",
        ],
        "quantity" => &["1Mi", "1", "-1", "1.5Gi", "x"],
        "port-range" => &["1-2", "2-1", "30000+100", "x"],
        _ => &["x", "", "node-1", "json", "text", "rr", "0"],
    };
    choose(rng, pool).to_string()
}

/// Every long flag with its value name, from the command definition.
fn flag_names() -> &'static [(String, String)] {
    static NAMES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        flags::Flags::command()
            .get_arguments()
            .filter_map(|a| {
                let value = a
                    .get_value_names()
                    .and_then(|v| v.first())
                    .map(|s| s.to_string());
                Some((a.get_long()?.to_string(), value.unwrap_or_default()))
            })
            .collect()
    })
}

/// Arguments joined by NUL: well-formed `--flag=value` pairs for random flags, then mutated.
fn gen_flags(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let args = flag_names();
    let mut out: Vec<String> = Vec::new();
    for _ in 0..rng.usize(0..6) {
        let (long, value_name) = choose(rng, args);
        let value = flag_value(rng, value_name);
        out.push(match rng.u8(0..4) {
            0 => format!("--{long}"),
            1 => format!("-{long}={value}"),
            _ => format!("--{long}={value}"),
        });
    }
    if rng.u8(0..6) == 0 {
        out.push(format!(
            "--config={}/config/{}",
            env!("CARGO_MANIFEST_DIR"),
            "minimal-ipvs.yaml"
        ));
    }
    let joined = out.join("\0");
    let _ = c;
    if rng.bool() {
        mutate_bytes(rng, joined.into_bytes(), b"--=\0", 3)
    } else {
        joined.into_bytes()
    }
}

/// Whether an argument could make the parser read or write a file other than the repository's samples.
fn touches_files(arg: &str) -> bool {
    let bare = arg.trim_start_matches('-');
    (bare.starts_with("config") || bare.starts_with("write-config"))
        && !arg.starts_with(&format!("--config={}/config/", env!("CARGO_MANIFEST_DIR")))
}

fn check_flags(buf: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(buf);
    let args: Vec<&str> = text.split('\0').filter(|a| !touches_files(a)).collect();
    for a in &args {
        let value = a.split_once('=').map_or(*a, |(_, v)| v);
        if let Err(e) = GoDuration::parse(value) {
            named("duration", e)?;
        }
        if let Err(e) = flags::parse_go_bool(value) {
            named("bool", e)?;
        }
        if let Err(e) = flags::parse_feature_gates(value) {
            named("feature gates", e)?;
        }
        if let Err(e) = flags::parse_vmodule(value) {
            named("vmodule", e)?;
        }
        let _ = defaults::split_host_port(value);
        let _ = validate::parse_cidr(value);
    }
    let argv = std::iter::once("kube-proxy").chain(args.iter().copied());
    match options::parse_args(argv) {
        Ok(_) => Ok(()),
        Err(e) => named("parse_args", e),
    }
}

fn gen_service(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let sample = choose(rng, &c.services);
    if rng.u8(0..20) == 0 {
        random_bytes(rng, 128)
    } else {
        mutate_json(rng, sample, 5)
    }
}

/// The watcher's decode of one object: lenient, per object. Whatever the strict typed decode accepts,
/// the lenient one accepts too; what it rejects is reported with a reason.
fn lenient<K: Lenient + Clone>(kind: &str, buf: &[u8]) -> Result<Option<K>, String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(buf) else {
        return Ok(None);
    };
    let strict_ok = serde_json::from_value::<K>(value.clone()).is_ok();
    match Decoded::<K>::from_value(value) {
        Decoded::Object(k) => Ok(Some(k)),
        Decoded::Unreadable(u) if strict_ok => Err(format!(
            "{kind}: strict decode accepts what the lenient one rejects: {}",
            u.error
        )),
        Decoded::Unreadable(u) => named(kind, &u.error).map(|()| None),
    }
}

fn check_service(buf: &[u8]) -> Result<(), String> {
    let Some(svc) = lenient::<Service>("Service", buf)? else {
        return Ok(());
    };
    match convert::service_ports(&svc) {
        Ok(s) => s
            .warnings
            .iter()
            .try_for_each(|w| named("service warning", w)),
        Err(e) => named("service_ports", e),
    }
}

fn gen_slice(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let sample = choose(rng, &c.slices);
    if rng.u8(0..20) == 0 {
        random_bytes(rng, 128)
    } else {
        mutate_json(rng, sample, 5)
    }
}

fn check_slice(buf: &[u8]) -> Result<(), String> {
    let Some(slice) = lenient::<EndpointSlice>("EndpointSlice", buf)? else {
        return Ok(());
    };
    let _ = convert::slice_keys(&slice);
    let _ = convert::trigger_time(&slice);
    match convert::slice_info(&slice) {
        Ok(Some(info)) => {
            for p in &info.ports {
                let _ = info.port_name(p);
                let _ = info.endpoints_for(p).count();
            }
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => named("slice_info", e),
    }
}

fn gen_pb(rng: &mut Rng, samples: &[Vec<u8>]) -> Vec<u8> {
    let sample = choose(rng, samples);
    if rng.u8(0..20) == 0 {
        random_bytes(rng, 128)
    } else {
        mutate_protobuf(rng, sample, 3)
    }
}

fn gen_pb_service(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_pb(rng, &c.pb_services)
}

fn gen_pb_slice(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    gen_pb(rng, &c.pb_slices)
}

fn gen_pb_stream(rng: &mut Rng, c: &Corpus) -> Vec<u8> {
    let sample = choose(rng, &c.pb_streams);
    mutate_bytes(rng, sample.clone(), sample, 4)
}

/// The watcher's protobuf decode of one object: pruned, per object. Whatever the strict decode of
/// the whole `k8s-pb` message accepts, the lenient one reads too; what it rejects has a reason.
fn lenient_pb<K: Protobuf>(kind: &str, buf: &[u8]) -> Result<Option<K>, String> {
    let strict_ok = K::Message::decode(buf).is_ok();
    match Decoded::<K>::from_protobuf(buf) {
        Decoded::Object(k) => Ok(Some(k)),
        Decoded::Unreadable(u) if strict_ok => Err(format!(
            "{kind}: the strict protobuf decode accepts what the lenient one rejects: {}",
            u.error
        )),
        Decoded::Unreadable(u) => named(kind, &u.error).map(|()| None),
    }
}

fn check_pb_service(buf: &[u8]) -> Result<(), String> {
    let Some(svc) = lenient_pb::<Service>("Service", buf)? else {
        return Ok(());
    };
    match convert::service_ports(&svc) {
        Ok(s) => s
            .warnings
            .iter()
            .try_for_each(|w| named("service warning", w)),
        Err(e) => named("service_ports", e),
    }
}

fn check_pb_slice(buf: &[u8]) -> Result<(), String> {
    let Some(slice) = lenient_pb::<EndpointSlice>("EndpointSlice", buf)? else {
        return Ok(());
    };
    match convert::slice_info(&slice) {
        Ok(Some(info)) => {
            for p in &info.ports {
                let _ = info.endpoints_for(p).count();
            }
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => named("slice_info", e),
    }
}

/// A protobuf list body (it starts with the magic) or a watch stream, fed to the framer in small
/// chunks: no panic, every error has a message.
fn check_pb_stream(buf: &[u8]) -> Result<(), String> {
    if buf.starts_with(&kube_proxy_rs::cluster::proto::MAGIC) {
        return match decode_page::<Service>(Encoding::Protobuf, buf) {
            Ok(page) => page.items.iter().try_for_each(|d| match d {
                Decoded::Unreadable(u) => named("list item", &u.error),
                Decoded::Object(_) => Ok(()),
            }),
            Err(e) => named("list", e),
        };
    }
    let mut framer = Framer::new(Framing::LengthPrefixed);
    for chunk in buf.chunks(7) {
        framer.push(chunk);
        while let Some(frame) = framer.next_frame() {
            match frame {
                Ok(f) => match decode_event::<EndpointSlice>(Encoding::Protobuf, &f) {
                    Ok(_) => {}
                    Err(e) => named("watch event", e)?,
                },
                Err(e) => return named("framing", e),
            }
        }
    }
    Ok(())
}
