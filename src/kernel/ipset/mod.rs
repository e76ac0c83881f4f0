//! ipsets: the backend trait, entry validation, and two real backends: the kernel's ipset netlink
//! protocol (what the daemon uses) and the `ipset` tool (fallback).

use crate::kernel::KernelResult;
use crate::net::IpFamily;
use std::collections::{BTreeMap, BTreeSet};

/// The set types kube-proxy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpSetType {
    HashIp,
    HashIpPort,
    HashIpPortIp,
    HashIpPortNet,
    BitmapPort,
}

impl IpSetType {
    /// Type name as `ipset` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpSetType::HashIp => "hash:ip",
            IpSetType::HashIpPort => "hash:ip,port",
            IpSetType::HashIpPortIp => "hash:ip,port,ip",
            IpSetType::HashIpPortNet => "hash:ip,port,net",
            IpSetType::BitmapPort => "bitmap:port",
        }
    }
}

/// Size limits of a hash set: `hashsize`, the buckets it starts with (the kernel doubles them as the set
/// fills), and `maxelem`, the most members it accepts. Bitmap sets have neither (their range bounds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpSetSize {
    pub hashsize: u32,
    pub maxelem: u32,
}

impl IpSetSize {
    /// What upstream creates every hash set with: `hashsize 1024 maxelem 65536`.
    pub const UPSTREAM: IpSetSize = IpSetSize {
        hashsize: 1024,
        maxelem: 65536,
    };
}

/// Definition of one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSetSpec {
    /// Kernel name (IPv6 ones prefixed `KUBE-6-` and cut to 31 characters).
    pub name: String,
    pub set_type: IpSetType,
    pub family: IpFamily,
    /// Comment carried by the iptables rules that match this set.
    pub comment: String,
    /// Size a hash set is created with (ignored for bitmap sets).
    pub size: IpSetSize,
}

impl IpSetSpec {
    /// A set of upstream's size, without comment.
    pub fn new(name: impl Into<String>, set_type: IpSetType, family: IpFamily) -> Self {
        IpSetSpec {
            name: name.into(),
            set_type,
            family,
            comment: String::new(),
            size: IpSetSize::UPSTREAM,
        }
    }

    /// The `create` line as `ipset save` prints it (no `-exist`).
    pub fn create_line(&self) -> String {
        match self.set_type {
            IpSetType::BitmapPort => format!("create {} bitmap:port range 0-65535", self.name),
            t => format!(
                "create {} {} family {} hashsize {} maxelem {}",
                self.name,
                t.as_str(),
                if self.family == IpFamily::V4 {
                    "inet"
                } else {
                    "inet6"
                },
                self.size.hashsize,
                self.size.maxelem
            ),
        }
    }
}

/// One change to one set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum IpSetOp {
    Add { set: String, entry: String },
    Del { set: String, entry: String },
}

/// What an apply did: entries rejected before writing are reported, the rest applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub applied: usize,
    /// (op, reason) for every op skipped as invalid.
    pub rejected: Vec<(IpSetOp, String)>,
}

/// The kernel's ipsets.
pub trait IpSets: Send {
    /// Creates the set if missing (`-exist`).
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()>;
    /// Creates every set in `specs` if missing; the default creates them one by one, the real backends in
    /// one batch (one datagram, or one `ipset restore -exist`). On error, some of the sets may exist.
    fn create_all(&mut self, specs: &[IpSetSpec]) -> KernelResult<()> {
        specs.iter().try_for_each(|spec| self.create(spec))
    }
    /// Every set's header (type and family) and members, as `ipset save` shows them (one dump).
    fn dump(&mut self) -> KernelResult<save::SavedSets>;
    /// Every set with its members, as `ipset save` shows them (one dump).
    fn save_all(&mut self) -> KernelResult<BTreeMap<String, BTreeSet<String>>> {
        Ok(self.dump()?.members)
    }
    /// Applies all ops in one batch with `-exist` semantics; invalid or refused entries are reported, the
    /// rest applied.
    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport>;
    /// Destroys one set.
    fn destroy(&mut self, name: &str) -> KernelResult<()>;
    /// Exchanges the names of sets `a` and `b` in one kernel step (`ipset swap`): rules that match `a`
    /// match the other set from then on, with no moment where they match neither. Both sets must have the
    /// same type and family; their sizes may differ.
    fn swap(&mut self, a: &str, b: &str) -> KernelResult<()>;
}

pub mod cli;
pub mod codec;
pub mod entry;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod netlink;
pub mod save;
pub mod text;
pub mod types;

/// The real backend for this node: netlink; the `ipset` tool when the kernel's ipset protocol is one
/// the netlink codec does not speak (it speaks 6 and 7: every kernel since 2.6.39; the tool follows the
/// distribution's kernel, so it can keep working if a future kernel drops protocol 6).
pub fn real_ipsets() -> Box<dyn IpSets> {
    match netlink::NetlinkIpSets::new() {
        Ok(n) => Box::new(n),
        Err(e) => {
            tracing::warn!(error = %e, "ipset netlink unavailable, falling back to the ipset tool");
            Box::new(cli::IpsetCli::new())
        }
    }
}
