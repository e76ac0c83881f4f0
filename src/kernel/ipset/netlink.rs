//! ipsets through the kernel's ipset netlink protocol (what the `ipset` tool itself speaks), without
//! starting a process: one dump reads every set with its entries, adds and deletes go out as one message
//! per entry, hundreds per datagram, each acknowledged on its own.
//!
//! Entries are validated against their set's type and family before anything is written (the same check
//! as the CLI path). Every request carries `NLM_F_ACK` and no `NLM_F_EXCL`, which is the `-exist` of the
//! tool: adding a present entry or deleting an absent one succeeds. The kernel processes every message of
//! a datagram even when one fails, so a refused entry (its set vanished, the set is full) is reported in
//! [`ApplyReport::rejected`] with the kernel's reason while the rest applies; no retry is needed.

use super::codec::{
    FLAG_LIST_HEADER, ListPart, NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_UNSPEC, Reply, Request, attr,
    cmd, data,
};
use super::save::{SavedSets, SetHeader, parse_type};
use super::text::{elem_of, render};
use super::types::{CheckError, SetTypes, op_set};
use super::{ApplyReport, IpSetOp, IpSetSize, IpSetSpec, IpSetType, IpSets};
use crate::kernel::io_counts::Backend;
use crate::kernel::netlink::{NlError, NlSocket, NoPayload};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use netlink_packet_core::NLM_F_EXCL;
use netlink_sys::protocols::NETLINK_NETFILTER;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// `IPSET_ERR_*` codes (negative errnos from the ipset subsystem).
mod err {
    pub const PROTOCOL: i32 = 4097;
    pub const FIND_TYPE: i32 = 4098;
    pub const MAX_SETS: i32 = 4099;
    pub const BUSY: i32 = 4100;
    pub const EXIST_SETNAME2: i32 = 4101;
    pub const TYPE_MISMATCH: i32 = 4102;
    pub const EXIST: i32 = 4103;
    pub const INVALID_CIDR: i32 = 4104;
    pub const INVALID_FAMILY: i32 = 4106;
    pub const REFERENCED: i32 = 4108;
    pub const IPADDR_IPV4: i32 = 4109;
    pub const IPADDR_IPV6: i32 = 4110;
    /// First type-specific code: a full hash, or an element outside a bitmap's range.
    pub const TYPE_SPECIFIC: i32 = 4352;
    pub const HASH_ELEM: i32 = 4353;
    pub const INVALID_PROTO: i32 = 4354;
    pub const MISSING_PROTO: i32 = 4355;
}

/// What the kernel's answer `errno` means, in the `ipset` tool's words where it has them.
pub fn error_text(errno: i32, set_type: Option<IpSetType>) -> String {
    let text = match errno {
        libc::ENOENT => "The set with the given name does not exist",
        libc::EEXIST => "Set cannot be created: set with the same name already exists",
        err::PROTOCOL => "Kernel error received: ipset protocol error",
        err::FIND_TYPE => "Kernel error received: set type not supported",
        err::MAX_SETS => "Kernel error received: maximal number of sets reached",
        err::BUSY => "Set is busy: it is being listed or swapped",
        err::EXIST_SETNAME2 => "Set with the second name already exists",
        err::TYPE_MISMATCH => "The sets cannot be swapped: their type does not match",
        err::EXIST => "Element cannot be added to the set: it's already added",
        err::INVALID_CIDR => "The value of the CIDR parameter of the IP address is invalid",
        err::INVALID_FAMILY => "Protocol family not supported by the set type",
        err::REFERENCED => "Set cannot be destroyed: it is in use by a kernel component",
        err::IPADDR_IPV4 => "An IPv4 address is expected",
        err::IPADDR_IPV6 => "An IPv6 address is expected",
        err::TYPE_SPECIFIC if set_type == Some(IpSetType::BitmapPort) => {
            "Element is out of the range of the set"
        }
        err::TYPE_SPECIFIC => "Hash is full, cannot add more elements",
        err::HASH_ELEM => "Null-valued element, cannot be stored in a hash type of set",
        err::INVALID_PROTO => "Invalid protocol specified",
        err::MISSING_PROTO => "Protocol missing, but must be specified",
        e => return std::io::Error::from_raw_os_error(e).to_string(),
    };
    text.to_string()
}

/// The reason text of a failed request (the kernel's extended-ACK message appended when it sent one).
fn reason(e: &NlError, set_type: Option<IpSetType>) -> String {
    match e {
        NlError::Errno {
            errno,
            message: Some(m),
        } => format!("{} ({m})", error_text(*errno, set_type)),
        NlError::Errno { errno, .. } => error_text(*errno, set_type),
        other => other.to_string(),
    }
}

/// A failed request of operation `what` as a [`KernelError`].
fn to_kernel(what: &str, e: NlError, set_type: Option<IpSetType>) -> KernelError {
    let detail = format!("{what}: {}", reason(&e, set_type));
    match e {
        NlError::Errno { errno, .. } => match errno {
            libc::ENOENT => KernelError::NotFound(detail),
            libc::EEXIST => KernelError::Exists(detail),
            libc::EOPNOTSUPP | libc::EPROTONOSUPPORT | err::PROTOCOL | err::FIND_TYPE => {
                KernelError::Unsupported(detail)
            }
            _ => KernelError::Errno {
                op: what.to_string(),
                errno,
                message: reason(&e, set_type),
            },
        },
        NlError::Io(_) => KernelError::Io(std::io::Error::other(detail)),
        NlError::Decode(_) => KernelError::Invalid(detail),
    }
}

/// `NFPROTO_*` of a set created from `spec` (bitmap sets have none).
fn nfproto(spec: &IpSetSpec) -> u8 {
    match (spec.set_type, spec.family) {
        (IpSetType::BitmapPort, _) => NFPROTO_UNSPEC,
        (_, IpFamily::V4) => NFPROTO_IPV4,
        (_, IpFamily::V6) => NFPROTO_IPV6,
    }
}

fn family_of(nfproto: Option<u8>) -> Option<IpFamily> {
    match nfproto? {
        NFPROTO_IPV4 => Some(IpFamily::V4),
        NFPROTO_IPV6 => Some(IpFamily::V6),
        _ => None,
    }
}

/// [`IpSets`] over the ipset netlink protocol.
#[derive(Debug)]
pub struct NetlinkIpSets {
    sock: NlSocket,
    types: SetTypes,
    /// Highest revision the kernel supports, per (type, NFPROTO family): what a create asks for.
    revisions: HashMap<(IpSetType, u8), u8>,
}

impl NetlinkIpSets {
    /// Opens a netfilter netlink socket and checks that the kernel speaks ipset protocol 6 or 7 (every
    /// kernel since 2.6.39 with `CONFIG_IP_SET`); Unsupported otherwise.
    pub fn new() -> KernelResult<Self> {
        let mut sock = NlSocket::new(NETLINK_NETFILTER, Backend::Ipset)
            .map_err(|e| to_kernel("open netfilter netlink", e, None))?;
        let answers: Vec<Reply> = sock
            .request(Request::new(cmd::PROTOCOL, None))
            .map_err(|e| to_kernel("ipset protocol", e, None))?;
        let (max, min) = answers
            .iter()
            .find_map(|a| match a {
                Reply::Protocol { max, min } => Some((*max, *min)),
                _ => None,
            })
            .ok_or_else(|| KernelError::Invalid("ipset protocol: no answer".into()))?;
        if !(min..=max).contains(&super::codec::PROTOCOL) {
            return Err(KernelError::Unsupported(format!(
                "kernel speaks ipset protocol {min}..{max}, this backend {}",
                super::codec::PROTOCOL
            )));
        }
        Ok(NetlinkIpSets {
            sock,
            types: SetTypes::default(),
            revisions: HashMap::new(),
        })
    }

    /// The revision to create sets of `spec`'s type with: the kernel's highest (as the tool does).
    fn revision(&mut self, spec: &IpSetSpec) -> KernelResult<u8> {
        let key = (spec.set_type, nfproto(spec));
        if let Some(r) = self.revisions.get(&key) {
            return Ok(*r);
        }
        let mut req = Request::new(cmd::TYPE, None);
        req.attrs
            .string(attr::TYPENAME, spec.set_type.as_str())
            .u8(attr::FAMILY, key.1);
        let what = format!("ipset type {}", spec.set_type.as_str());
        let answers: Vec<Reply> = self
            .sock
            .request(req)
            .map_err(|e| to_kernel(&what, e, None))?;
        let rev = answers
            .iter()
            .find_map(|a| match a {
                Reply::Type { revision, .. } => Some(*revision),
                _ => None,
            })
            .ok_or_else(|| KernelError::Invalid(format!("{what}: no answer")))?;
        self.revisions.insert(key, rev);
        Ok(rev)
    }

    fn create_request(&mut self, spec: &IpSetSpec) -> KernelResult<Request> {
        let revision = self.revision(spec)?;
        let mut req = Request::new(cmd::CREATE, Some(&spec.name));
        req.attrs
            .string(attr::TYPENAME, spec.set_type.as_str())
            .u8(attr::REVISION, revision)
            .u8(attr::FAMILY, nfproto(spec))
            .nested(attr::DATA, |d| match spec.set_type {
                IpSetType::BitmapPort => {
                    d.be16(data::PORT, 0).be16(data::PORT_TO, 65535);
                }
                _ => {
                    d.be32(data::HASHSIZE, spec.size.hashsize)
                        .be32(data::MAXELEM, spec.size.maxelem);
                }
            });
        Ok(req)
    }

    /// Every set's header and (unless `headers_only`) entries, in the kernel's order, each part handed
    /// to `each` as it is decoded (the dump is never held whole).
    fn list_each(
        &mut self,
        headers_only: bool,
        mut each: impl FnMut(ListPart),
    ) -> KernelResult<()> {
        let mut req = Request::new(cmd::LIST, None);
        if headers_only {
            req.attrs.be32(attr::FLAGS, FLAG_LIST_HEADER);
        }
        self.sock
            .dump_each(req, |h, payload| {
                if let Reply::List(p) = super::codec::decode_reply(h.kind, payload)
                    && !p.set.is_empty()
                {
                    each(p);
                }
                Ok(())
            })
            .map_err(|e| to_kernel("ipset list", e, None))
    }

    /// Every set's header and (unless `headers_only`) entries, in the kernel's order.
    fn list(&mut self, headers_only: bool) -> KernelResult<Vec<ListPart>> {
        let mut out = Vec::new();
        self.list_each(headers_only, |p| out.push(p))?;
        Ok(out)
    }

    /// Learns the types of every existing set (headers only).
    fn refresh_types(&mut self) -> KernelResult<()> {
        for part in self.list(true)? {
            if let Some(t) = &part.type_name {
                self.types.learn(&part.set, t, family_of(part.family));
            }
        }
        Ok(())
    }

    /// Removes every entry of set `name`.
    pub fn flush(&mut self, name: &str) -> KernelResult<()> {
        self.simple(
            Request::new(cmd::FLUSH, Some(name)),
            &format!("flush ipset {name}"),
        )
    }

    fn simple(&mut self, req: Request, what: &str) -> KernelResult<()> {
        self.sock
            .request::<_, NoPayload>(req)
            .map(|_| ())
            .map_err(|e| to_kernel(what, e, None))
    }
}

/// One ADD/DEL request per valid op, made as the iterator advances: the ops that became a request go to
/// `carried` (in order), the invalid ones to `report`.
fn requests<'a, 'b>(
    types: &'b SetTypes,
    ops: &'a [IpSetOp],
    carried: &'b mut Vec<&'a IpSetOp>,
    report: &'b mut ApplyReport,
) -> impl Iterator<Item = Request> + 'b
where
    'a: 'b,
{
    ops.iter().filter_map(|op| match request(types, op) {
        Ok(req) => {
            carried.push(op);
            Some(req)
        }
        Err(why) => {
            report.rejected.push((op.clone(), why.to_string()));
            None
        }
    })
}

/// The ADD/DEL request of one op, or why the op is invalid.
fn request(types: &SetTypes, op: &IpSetOp) -> Result<Request, CheckError> {
    let elem = elem_of(&types.check(op)?);
    let c = if matches!(op, IpSetOp::Add { .. }) {
        cmd::ADD
    } else {
        cmd::DEL
    };
    let mut req = Request::new(c, Some(op_set(op)));
    req.attrs.nested(attr::DATA, |d| elem.encode(d));
    Ok(req)
}

/// One set of a list dump: its header as `ipset save` shows it and its rendered entries.
#[derive(Debug, Default)]
struct Listed {
    type_name: String,
    family: Option<IpFamily>,
    size: Option<IpSetSize>,
    entries: BTreeSet<String>,
}

/// Groups list parts into set → header and rendered entries.
type Listing = BTreeMap<String, Listed>;

/// Adds one list part to `out`: its set's type, family and size, and its entries rendered.
fn add_part(out: &mut Listing, part: ListPart) {
    let slot = out.entry(part.set.clone()).or_default();
    if let Some(t) = part.type_name {
        slot.type_name = t;
        slot.family = family_of(part.family);
        slot.size = part.maxelem.map(|maxelem| IpSetSize {
            hashsize: part.hashsize.unwrap_or(IpSetSize::UPSTREAM.hashsize),
            maxelem,
        });
    }
    for e in &part.elems {
        match render(&slot.type_name, e) {
            Some(text) => {
                slot.entries.insert(text);
            }
            None => tracing::debug!(set = %part.set, elem = ?e, "Ipset entry not rendered"),
        }
    }
}

impl IpSets for NetlinkIpSets {
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()> {
        let req = self.create_request(spec)?;
        self.simple(req, &format!("create ipset {}", spec.name))?;
        self.types.learn_spec(spec);
        Ok(())
    }

    fn create_all(&mut self, specs: &[IpSetSpec]) -> KernelResult<()> {
        let requests = specs
            .iter()
            .map(|s| self.create_request(s))
            .collect::<KernelResult<Vec<_>>>()?;
        let chunk = self.sock.max_batch();
        let results = self
            .sock
            .batch(requests, chunk)
            .map_err(|e| to_kernel("create ipsets", e, None))?;
        let mut first_error = None;
        for (spec, r) in specs.iter().zip(results) {
            match r {
                Ok(()) => self.types.learn_spec(spec),
                Err(e) => {
                    let what = format!("create ipset {}", spec.name);
                    first_error.get_or_insert(to_kernel(&what, e, None));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn dump(&mut self) -> KernelResult<SavedSets> {
        let mut listing = Listing::new();
        self.list_each(false, |part| add_part(&mut listing, part))?;
        let mut out = SavedSets::default();
        for (name, set) in listing {
            self.types.learn(&name, &set.type_name, set.family);
            let header = SetHeader {
                set_type: parse_type(&set.type_name),
                type_name: set.type_name,
                family: set.family,
                size: set.size,
            };
            out.headers.insert(name.clone(), header);
            out.members.insert(name, set.entries);
        }
        Ok(out)
    }

    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport> {
        let mut report = ApplyReport::default();
        if self.types.any_unknown(ops) {
            self.refresh_types()?;
        }
        // Requests are encoded one datagram at a time, as `batch` takes them.
        let mut carried: Vec<&IpSetOp> = Vec::with_capacity(ops.len());
        let requests = requests(&self.types, ops, &mut carried, &mut report);
        let chunk = self.sock.max_batch();
        let results = self
            .sock
            .batch(requests, chunk)
            .map_err(|e| to_kernel("ipset add/del", e, None))?;
        for (op, r) in carried.into_iter().zip(results) {
            let Err(e) = r else {
                report.applied += 1;
                continue;
            };
            let set = op_set(op);
            let why = reason(&e, self.types.known.get(set).map(|k| k.0));
            tracing::error!(?op, error = %why, "The kernel refused an ipset entry");
            if e.errno() == Some(libc::ENOENT) {
                self.types.forget(set);
            }
            report.rejected.push((op.clone(), why));
        }
        Ok(report)
    }

    fn destroy(&mut self, name: &str) -> KernelResult<()> {
        // NLM_F_EXCL: without it (the tool's -exist) newer kernels answer success for a missing set.
        let r = self
            .sock
            .request_flags::<_, NoPayload>(Request::new(cmd::DESTROY, Some(name)), NLM_F_EXCL)
            .map(|_| ())
            .map_err(|e| to_kernel(&format!("ipset {name}"), e, None));
        if matches!(r, Ok(()) | Err(KernelError::NotFound(_))) {
            self.types.forget(name);
        }
        r
    }

    fn swap(&mut self, a: &str, b: &str) -> KernelResult<()> {
        let mut req = Request::new(cmd::SWAP, Some(a));
        req.attrs.string(attr::SETNAME2, b);
        self.simple(req, &format!("swap ipsets {a} {b}"))?;
        self.types.swap(a, b);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> super::super::entry::IpSetEntry {
        let t = IpSetType::HashIpPort;
        super::super::entry::IpSetEntry::parse(t, crate::net::IpFamily::V4, text).unwrap()
    }

    #[test]
    fn error_texts_name_the_cause() {
        assert!(error_text(libc::ENOENT, None).contains("does not exist"));
        assert!(error_text(4352, Some(IpSetType::HashIp)).contains("is full"));
        assert!(error_text(4352, Some(IpSetType::BitmapPort)).contains("range"));
        assert!(error_text(4108, None).contains("in use"));
        assert!(matches!(
            to_kernel(
                "x",
                NlError::Errno {
                    errno: libc::ENOENT,
                    message: None
                },
                None
            ),
            KernelError::NotFound(_)
        ));
        let e = to_kernel(
            "add",
            NlError::Errno {
                errno: 4352,
                message: Some("extra".into()),
            },
            Some(IpSetType::HashIp),
        );
        assert!(
            e.to_string()
                .contains("Hash is full, cannot add more elements (extra)"),
            "{e}"
        );
    }

    #[test]
    fn list_parts_of_one_set_across_messages_are_rendered_together() {
        use super::super::codec::Elem;
        let head = ListPart {
            set: "S".into(),
            type_name: Some("hash:ip,port".into()),
            family: Some(NFPROTO_IPV4),
            revision: Some(5),
            maxelem: Some(131072),
            hashsize: Some(4096),
            elems: vec![elem_of(&entry("10.0.0.1,tcp:80"))],
        };
        let more = ListPart {
            set: "S".into(),
            elems: vec![elem_of(&entry("10.0.0.2,udp:53")), Elem::default()],
            ..ListPart::default()
        };
        let empty = ListPart {
            set: "E".into(),
            type_name: Some("bitmap:port".into()),
            ..ListPart::default()
        };
        let mut l = Listing::new();
        for part in [head, more, empty] {
            add_part(&mut l, part);
        }
        assert_eq!(l["S"].type_name, "hash:ip,port");
        assert_eq!(l["S"].family, Some(IpFamily::V4));
        let size = IpSetSize {
            hashsize: 4096,
            maxelem: 131072,
        };
        assert_eq!(l["S"].size, Some(size));
        assert_eq!(
            l["S"].entries.iter().collect::<Vec<_>>(),
            vec!["10.0.0.1,tcp:80", "10.0.0.2,udp:53"]
        );
        assert!(l["E"].entries.is_empty());
        assert_eq!(l["E"].size, None);
    }

    #[test]
    fn invalid_ops_are_rejected_before_encoding() {
        // The check itself is shared with the CLI (types.rs); here: only valid ops become requests.
        let mut types = SetTypes::default();
        types.learn("C", "hash:ip,port", Some(IpFamily::V4));
        types.learn("F", "hash:net", Some(IpFamily::V4));
        let ops = vec![
            IpSetOp::Add {
                set: "C".into(),
                entry: "10.0.0.1,tcp:80".into(),
            },
            IpSetOp::Add {
                set: "C".into(),
                entry: "fd00::1,tcp:80".into(),
            },
            IpSetOp::Del {
                set: "F".into(),
                entry: "10.0.0.0/8".into(),
            },
        ];
        let mut report = ApplyReport::default();
        let mut carried = Vec::new();
        let reqs: Vec<Request> = requests(&types, &ops, &mut carried, &mut report).collect();
        assert_eq!(carried, vec![&ops[0]]);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].cmd, cmd::ADD);
        let mut want = Request::new(cmd::ADD, Some("C"));
        let elem = elem_of(&entry("10.0.0.1,tcp:80"));
        want.attrs.nested(attr::DATA, |d| elem.encode(d));
        assert_eq!(reqs[0], want);
        let rejected: Vec<&IpSetOp> = report.rejected.iter().map(|(o, _)| o).collect();
        assert_eq!(rejected, vec![&ops[1], &ops[2]]);
    }
}
