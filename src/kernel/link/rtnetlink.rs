//! The real link backend: rtnetlink over a blocking `netlink_sys` socket (NETLINK_ROUTE).
//!
//! Requests are built with netlink-packet-route's message types; answers are decoded by a small tolerant
//! reader that only takes what we need (ifindex, name, address), so a link attribute the crate does not
//! know can never fail a dump. No async runtime is involved: the backend is safe to call from any thread,
//! including one that runs inside a tokio runtime (it blocks that thread for the duration of the call).

use super::Links;
use super::changes::{ChangeWatch, RTM_NEWADDR, RTM_NEWLINK};
use crate::kernel::io_counts::Backend;
use crate::kernel::netlink::{NlError, NlSocket, NoPayload};
use crate::kernel::{KernelError, KernelResult};
use netlink_packet_core::{
    NLM_F_CREATE, NLM_F_EXCL, NetlinkDeserializable, NetlinkHeader, NlasIterator,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const IFLA_IFNAME: u16 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
/// `RT_SCOPE_HOST`: an address used only on this host.
const RT_SCOPE_HOST: u8 = 254;

/// Links and addresses through rtnetlink.
#[derive(Debug)]
pub struct RtnetlinkLinks {
    sock: NlSocket,
    /// The kernel honours dump filters (`NETLINK_GET_STRICT_CHK`).
    strict: bool,
    /// Link and address notifications: tell when [`Self::cache`] is stale (None: not available).
    changes: Option<ChangeWatch>,
    /// The last `local_addresses_except` answer.
    cache: Option<LocalCache>,
}

/// Local addresses of every link except one, as last read.
#[derive(Debug)]
struct LocalCache {
    except: String,
    /// Index of the excepted link when read (its notifications do not stale the cache).
    except_index: Option<u32>,
    addrs: Vec<(String, IpAddr)>,
}

/// A decoded rtnetlink answer: only the fields the backend uses (public for the decoder's fuzz tests).
#[derive(Debug)]
pub enum Answer {
    Link {
        index: u32,
        name: String,
    },
    /// An address; `host`: bound with scope host.
    Addr {
        index: u32,
        addr: IpAddr,
        host: bool,
    },
    Other,
}

impl NetlinkDeserializable for Answer {
    type Error = std::convert::Infallible;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Ok(match header.message_type {
            RTM_NEWLINK => parse_link(payload).unwrap_or(Answer::Other),
            RTM_NEWADDR => parse_addr(payload).unwrap_or(Answer::Other),
            _ => Answer::Other,
        })
    }
}

fn parse_link(p: &[u8]) -> Option<Answer> {
    let index = u32::from_ne_bytes(p.get(4..8)?.try_into().ok()?);
    for nla in NlasIterator::new(p.get(IFINFOMSG_LEN..)?) {
        let nla = nla.ok()?;
        if nla.kind() == IFLA_IFNAME {
            let v = nla.value();
            let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
            return Some(Answer::Link {
                index,
                name: String::from_utf8_lossy(&v[..end]).into_owned(),
            });
        }
    }
    None
}

fn parse_addr(p: &[u8]) -> Option<Answer> {
    let family = *p.first()?;
    // struct ifaddrmsg: family, prefix length, flags, scope, index.
    let host = *p.get(3)? == RT_SCOPE_HOST;
    let index = u32::from_ne_bytes(p.get(4..8)?.try_into().ok()?);
    let (mut local, mut address) = (None, None);
    for nla in NlasIterator::new(p.get(IFADDRMSG_LEN..)?) {
        let Ok(nla) = nla else { break };
        let v = nla.value();
        let ip = match (i32::from(family), v.len()) {
            (libc::AF_INET, 4) => IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3])),
            (libc::AF_INET6, 16) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?)),
            _ => continue,
        };
        match nla.kind() {
            IFA_LOCAL => local = Some(ip),
            IFA_ADDRESS => address = Some(ip),
            _ => {}
        }
    }
    // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer on point-to-point links).
    local
        .or(address)
        .map(|addr| Answer::Addr { index, addr, host })
}

fn kernel_error(what: &str, e: NlError) -> KernelError {
    e.into_kernel(what, |errno, detail| match errno {
        libc::EEXIST => Some(KernelError::Exists(detail)),
        libc::ENODEV | libc::ENOENT => Some(KernelError::NotFound(detail)),
        libc::EOPNOTSUPP => Some(KernelError::Unsupported(detail)),
        _ => None,
    })
}

/// (link index, address) pairs with the link's name (`if<index>` for a link that vanished meanwhile).
fn named(names: &HashMap<u32, String>, addrs: Vec<(u32, IpAddr)>) -> Vec<(String, IpAddr)> {
    addrs
        .into_iter()
        .map(|(i, a)| {
            let name = names.get(&i).cloned().unwrap_or_else(|| format!("if{i}"));
            (name, a)
        })
        .collect()
}

/// A copy of a link lookup error, for each address of a batch that could not be sent.
fn same_error(e: &KernelError) -> KernelError {
    match e {
        KernelError::NotFound(m) => KernelError::NotFound(m.clone()),
        other => KernelError::Io(std::io::Error::other(other.to_string())),
    }
}

fn link_by_name(name: &str) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    m
}

/// `ip` on link `index` as a /32 or /128, with scope host when `host` (else global).
fn address_message(index: u32, ip: IpAddr, host: bool) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.index = index;
    if host {
        m.header.scope = AddressScope::Host;
    }
    match ip {
        IpAddr::V4(_) => {
            m.header.family = AddressFamily::Inet;
            m.header.prefix_len = 32;
            m.attributes.push(AddressAttribute::Local(ip));
            m.attributes.push(AddressAttribute::Address(ip));
        }
        IpAddr::V6(_) => {
            m.header.family = AddressFamily::Inet6;
            m.header.prefix_len = 128;
            m.attributes.push(AddressAttribute::Address(ip));
        }
    }
    m
}

impl RtnetlinkLinks {
    /// Opens the rtnetlink socket.
    pub fn new() -> KernelResult<Self> {
        let mut sock = NlSocket::new(NETLINK_ROUTE, Backend::Link)
            .map_err(|e| kernel_error("open rtnetlink", e))?;
        let strict = sock.enable_strict_dumps();
        // Subscribed before anything is read, so no change can slip between a read and the subscription.
        let changes = ChangeWatch::new()
            .map_err(|e| tracing::debug!(error = %e, "No rtnetlink notifications; local addresses are read every time"))
            .ok();
        Ok(RtnetlinkLinks {
            sock,
            strict,
            changes,
            cache: None,
        })
    }

    /// Index of link `name`; NotFound if missing.
    pub fn link_index(&mut self, name: &str) -> KernelResult<u32> {
        let answers: Vec<Answer> = self
            .sock
            .request(RouteNetlinkMessage::GetLink(link_by_name(name)))
            .map_err(|e| kernel_error(&format!("get link {name}"), e))?;
        answers
            .iter()
            .find_map(|a| match a {
                Answer::Link { index, .. } => Some(*index),
                _ => None,
            })
            .ok_or_else(|| KernelError::NotFound(format!("link {name}")))
    }

    fn dump_addresses(&mut self) -> KernelResult<Vec<(u32, IpAddr)>> {
        self.dump_addresses_of(0)
    }

    /// Addresses of link `index` (0: every link).
    fn dump_addresses_of(&mut self, index: u32) -> KernelResult<Vec<(u32, IpAddr)>> {
        Ok(self
            .dump_scoped_of(index)?
            .into_iter()
            .map(|(i, a, _)| (i, a))
            .collect())
    }

    /// Addresses of link `index` (0: every link) with whether their scope is host. With strict dumps the
    /// kernel sends only that link's; the answers are filtered here as well, for kernels that ignore the
    /// filter.
    fn dump_scoped_of(&mut self, index: u32) -> KernelResult<Vec<(u32, IpAddr, bool)>> {
        let mut request = AddressMessage::default();
        if self.strict {
            request.header.index = index;
        }
        let answers: Vec<Answer> = self
            .sock
            .dump(RouteNetlinkMessage::GetAddress(request))
            .map_err(|e| kernel_error("dump addresses", e))?;
        Ok(answers
            .into_iter()
            .filter_map(|a| match a {
                Answer::Addr { index, addr, host } => Some((index, addr, host)),
                _ => None,
            })
            .filter(|(i, _, _)| index == 0 || *i == index)
            .collect())
    }

    /// Adds (`add`, with scope host when `host`) or deletes many addresses of link `name` with pipelined
    /// requests.
    fn address_batch(
        &mut self,
        name: &str,
        ips: &[IpAddr],
        add: bool,
        host: bool,
    ) -> Vec<KernelResult<bool>> {
        if ips.is_empty() {
            return Vec::new();
        }
        let index = match self.link_index(name) {
            Ok(i) => i,
            Err(e) => return ips.iter().map(|_| Err(same_error(&e))).collect(),
        };
        // Encoded one datagram at a time by `batch`, never all at once.
        let messages = ips.iter().map(|ip| {
            let m = address_message(index, *ip, host);
            if add {
                RouteNetlinkMessage::NewAddress(m)
            } else {
                RouteNetlinkMessage::DelAddress(m)
            }
        });
        // Without NLM_F_EXCL/NLM_F_REPLACE a present address answers EEXIST (both families create
        // without NLM_F_CREATE), which is what add_address reports as Ok(false).
        let chunk = self.sock.max_batch();
        let (verb, absent) = if add {
            ("add", libc::EEXIST)
        } else {
            ("delete", libc::EADDRNOTAVAIL)
        };
        let what = |ip: &IpAddr| format!("{verb} address {ip} on {name}");
        match self.sock.batch(messages, chunk) {
            Ok(results) => ips
                .iter()
                .zip(results)
                .map(|(ip, r)| match r {
                    Ok(()) => Ok(true),
                    Err(e) if e.errno() == Some(absent) => Ok(false),
                    Err(e) => Err(kernel_error(&what(ip), e)),
                })
                .collect(),
            Err(e) => ips
                .iter()
                .map(|ip| Err(kernel_error(&what(ip), e.clone())))
                .collect(),
        }
    }

    fn link_names(&mut self) -> KernelResult<HashMap<u32, String>> {
        let links: Vec<Answer> = self
            .sock
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            .map_err(|e| kernel_error("dump links", e))?;
        Ok(links
            .into_iter()
            .filter_map(|a| match a {
                Answer::Link { index, name } => Some((index, name)),
                _ => None,
            })
            .collect())
    }
}

impl Links for RtnetlinkLinks {
    fn ensure_dummy(&mut self, name: &str) -> KernelResult<bool> {
        let mut m = link_by_name(name);
        m.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Dummy,
            )]));
        match self.sock.request_flags::<_, NoPayload>(
            RouteNetlinkMessage::NewLink(m),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(kernel_error(&format!("create dummy link {name}"), e)),
        }
    }

    fn addresses(&mut self, name: &str) -> KernelResult<Vec<IpAddr>> {
        let index = self.link_index(name)?;
        Ok(self
            .dump_addresses_of(index)?
            .into_iter()
            .map(|(_, a)| a)
            .collect())
    }

    fn add_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        let index = self.link_index(name)?;
        match self.sock.request_flags::<_, NoPayload>(
            RouteNetlinkMessage::NewAddress(address_message(index, ip, false)),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(kernel_error(&format!("add address {ip} to {name}"), e)),
        }
    }

    fn del_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        let index = self.link_index(name)?;
        match self
            .sock
            .request::<_, NoPayload>(RouteNetlinkMessage::DelAddress(address_message(
                index, ip, false,
            ))) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(libc::EADDRNOTAVAIL) => Ok(false),
            Err(e) => Err(kernel_error(&format!("delete address {ip} from {name}"), e)),
        }
    }

    fn add_addresses(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        self.address_batch(name, ips, true, false)
    }

    fn del_addresses(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        self.address_batch(name, ips, false, false)
    }

    fn host_scoped(&mut self, name: &str) -> KernelResult<BTreeSet<IpAddr>> {
        let index = self.link_index(name)?;
        Ok(self
            .dump_scoped_of(index)?
            .into_iter()
            .filter(|(_, _, host)| *host)
            .map(|(_, a, _)| a)
            .collect())
    }

    fn add_host_scoped(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        self.address_batch(name, ips, true, true)
    }

    fn local_addresses_except(&mut self, except: &str) -> KernelResult<Vec<(String, IpAddr)>> {
        if let (Some(watch), Some(cache)) = (self.changes.as_mut(), self.cache.as_ref())
            && cache.except == except
            && !watch.changed(cache.except_index)
        {
            return Ok(cache.addrs.clone());
        }
        // Stale or first read: drop the pending notifications (this read sees their changes), then read.
        if let Some(watch) = self.changes.as_mut() {
            watch.changed(None);
        }
        let names = self.link_names()?;
        let except_index = names.iter().find(|(_, n)| *n == except).map(|(i, _)| *i);
        let out = if self.strict {
            let mut links: Vec<u32> = names
                .iter()
                .filter(|(_, n)| *n != except)
                .map(|(i, _)| *i)
                .collect();
            links.sort_unstable();
            let mut out = Vec::new();
            for index in links {
                let addrs = self.dump_addresses_of(index)?;
                out.extend(named(&names, addrs));
            }
            out
        } else {
            let mut all = self.dump_addresses()?;
            all.retain(|(index, _)| Some(*index) != except_index);
            named(&names, all)
        };
        self.cache = Some(LocalCache {
            except: except.to_string(),
            except_index,
            addrs: out.clone(),
        });
        Ok(out)
    }

    fn local_addresses(&mut self) -> KernelResult<Vec<(String, IpAddr)>> {
        let names = self.link_names()?;
        let all = self.dump_addresses()?;
        Ok(named(&names, all))
    }

    fn delete_link(&mut self, name: &str) -> KernelResult<bool> {
        match self
            .sock
            .request::<_, NoPayload>(RouteNetlinkMessage::DelLink(link_by_name(name)))
        {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.errno(), Some(libc::ENODEV) | Some(libc::ENOENT)) => Ok(false),
            Err(e) => Err(kernel_error(&format!("delete link {name}"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    #[test]
    fn decodes_link_and_address_answers_tolerantly() {
        let mut link = LinkMessage::default();
        link.header.index = 7;
        link.attributes
            .push(LinkAttribute::IfName("kube-ipvs0".into()));
        let mut buf = vec![0u8; link.buffer_len()];
        link.emit(&mut buf);
        match parse_link(&buf) {
            Some(Answer::Link { index, name }) => {
                assert_eq!((index, name.as_str()), (7, "kube-ipvs0"))
            }
            other => panic!("{other:?}"),
        }
        let addr = address_message(7, "10.96.0.1".parse().unwrap(), false);
        let mut buf = vec![0u8; addr.buffer_len()];
        addr.emit(&mut buf);
        match parse_addr(&buf) {
            Some(Answer::Addr { index, addr, host }) => {
                assert_eq!(
                    (index, addr, host),
                    (7, "10.96.0.1".parse().unwrap(), false)
                )
            }
            other => panic!("{other:?}"),
        }
        let addr6 = address_message(3, "fd00::1".parse().unwrap(), true);
        let mut buf = vec![0u8; addr6.buffer_len()];
        addr6.emit(&mut buf);
        assert!(matches!(
            parse_addr(&buf),
            Some(Answer::Addr {
                index: 3,
                host: true,
                ..
            })
        ));
        // truncated answers decode to nothing instead of panicking
        for cut in 0..buf.len() {
            let _ = parse_addr(&buf[..cut]);
            let _ = parse_link(&buf[..cut]);
        }
    }
}
