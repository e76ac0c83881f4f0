//! Ground-floor network vocabulary shared by the cluster model and the kernel backends; depends on nothing
//! else in the crate.

use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};

/// Transport protocol of a service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Lower-case name as ipset and iptables print it (`tcp`, `udp`, `sctp`).
    pub fn as_lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// Upper-case name as the Kubernetes API spells it (`TCP`, `UDP`, `SCTP`).
    pub fn as_upper(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// Parses the API spelling; `None` for anything else.
    pub fn from_api(s: &str) -> Option<Protocol> {
        match s {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

/// IP family of an address or of a proxier instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// Family of an address.
    pub fn of(ip: &IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }

    /// Family of a network.
    pub fn of_net(net: &IpNet) -> IpFamily {
        IpFamily::of(&net.addr())
    }

    /// Name used in metrics labels and healthz JSON (`IPv4`, `IPv6`).
    pub fn label(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }
}

/// The two ends of the connection a request came on (the HTTP servers put it in every request's
/// extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The client's address.
    pub remote: SocketAddr,
    /// The address the client connected to.
    pub local: SocketAddr,
}
