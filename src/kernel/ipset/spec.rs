//! The vocabulary of ipsets: set types, sizes, a set's definition and one change to one set.

use crate::net::IpFamily;

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
