//! ipsets, through the `ipset` tool in batch mode.

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

/// Definition of one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSetSpec {
    /// Kernel name (IPv6 ones prefixed `KUBE-6-` and cut to 31 characters).
    pub name: String,
    pub set_type: IpSetType,
    pub family: IpFamily,
    /// Comment carried by the iptables rules that match this set.
    pub comment: String,
}

impl IpSetSpec {
    /// The `create` line as `ipset save` prints it (no `-exist`).
    pub fn create_line(&self) -> String {
        match self.set_type {
            IpSetType::BitmapPort => format!("create {} bitmap:port range 0-65535", self.name),
            t => format!(
                "create {} {} family {} hashsize 1024 maxelem 65536",
                self.name,
                t.as_str(),
                if self.family == IpFamily::V4 {
                    "inet"
                } else {
                    "inet6"
                }
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
    /// Creates every set in `specs` if missing; the default creates them one by one, the real backend in
    /// one `ipset restore -exist` process. On error, some of the sets may exist.
    fn create_all(&mut self, specs: &[IpSetSpec]) -> KernelResult<()> {
        specs.iter().try_for_each(|spec| self.create(spec))
    }
    /// Every set with its members, as `ipset save` shows them (one process).
    fn save_all(&mut self) -> KernelResult<BTreeMap<String, BTreeSet<String>>>;
    /// Applies all ops with one `ipset restore -exist`; invalid entries are skipped and reported.
    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport>;
    /// Destroys one set.
    fn destroy(&mut self, name: &str) -> KernelResult<()>;
}

pub mod cli;
pub mod entry;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod save;
