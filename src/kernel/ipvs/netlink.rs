//! The real IPVS backend: generic netlink family "IPVS" over one blocking socket.
//!
//! The family id is resolved once (CTRL_CMD_GETFAMILY) when the client is created; every call reuses the
//! same socket. [`NetlinkIpvs::apply`] sends many changes per datagram and reads their ACKs afterwards.

use super::codec::{self, IpvsAttr, IpvsMessage, cmd};
use super::procfs::{DestinationView, ProcView, ViewSlice};
use super::sockopt::SockoptServices;
use super::{Ipvs, IpvsDestination, IpvsOp, IpvsService, IpvsServiceKey, IpvsStats, IpvsTimeouts};
use crate::kernel::io_counts::Backend;
use crate::kernel::netlink::{NlError, NlSocket};
use crate::kernel::{KernelError, KernelResult};
use netlink_packet_generic::GenlMessage;
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_sys::protocols::NETLINK_GENERIC;
use std::net::IpAddr;

/// Requests per datagram in [`NetlinkIpvs::apply`].
pub const DEFAULT_BATCH: usize = 64;

/// IPVS through generic netlink.
#[derive(Debug)]
pub struct NetlinkIpvs {
    sock: NlSocket,
    family: u16,
    batch: usize,
    /// `/proc/net/ip_vs` of the socket's namespace (None when it cannot be opened).
    proc_view: Option<ProcView>,
    /// IPVS's socket options: the IPv4 virtual servers in one call (None: the socket did not open).
    sockopt: Option<SockoptServices>,
}

/// What a request does, for errno → [`KernelError`] mapping.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    ServiceWrite,
    Other,
}

fn kernel_error(kind: Kind, what: &str, sched: Option<&str>, e: NlError) -> KernelError {
    e.into_kernel(what, |errno, detail| match errno {
        libc::EEXIST => Some(KernelError::Exists(detail)),
        // NEW/SET_SERVICE answer ENOENT only when the scheduler (or PE) module is missing.
        libc::ENOENT if kind == Kind::ServiceWrite => Some(KernelError::SchedulerNotFound {
            scheduler: sched.unwrap_or("").to_string(),
            detail,
        }),
        libc::ENOENT | libc::ESRCH => Some(KernelError::NotFound(detail)),
        libc::EOPNOTSUPP | libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT => {
            Some(KernelError::Unsupported(detail))
        }
        _ => None,
    })
}

impl NetlinkIpvs {
    /// Opens the socket and resolves the IPVS family; Unsupported when the ip_vs module is not loaded.
    pub fn new() -> KernelResult<Self> {
        let mut sock = NlSocket::new(NETLINK_GENERIC, Backend::Ipvs)
            .map_err(|e| kernel_error(Kind::Other, "open generic netlink socket", None, e))?;
        let family = resolve_family(&mut sock, codec::FAMILY_NAME)?;
        Ok(NetlinkIpvs {
            sock,
            family,
            batch: DEFAULT_BATCH,
            // Opened now, on the thread that opened the socket: the same network namespace.
            proc_view: ProcView::open(),
            sockopt: SockoptServices::open(),
        })
    }

    /// Sets how many requests [`NetlinkIpvs::apply`] sends per datagram (1 disables batching).
    #[cfg(any(test, feature = "testkit"))]
    pub fn set_batch(&mut self, n: usize) {
        self.batch = n.max(1);
    }

    /// Requests per datagram [`NetlinkIpvs::apply`] really uses (the setting, capped by the socket).
    #[cfg(any(test, feature = "testkit"))]
    pub fn effective_batch(&self) -> usize {
        self.batch.min(self.sock.max_batch())
    }

    fn msg(&self, cmd: u8, attrs: Vec<IpvsAttr>) -> GenlMessage<IpvsMessage> {
        message(self.family, cmd, attrs)
    }

    fn call(
        &mut self,
        kind: Kind,
        what: impl FnOnce() -> String,
        sched: Option<&str>,
        cmd: u8,
        attrs: Vec<IpvsAttr>,
    ) -> KernelResult<Vec<IpvsMessage>> {
        let m = self.msg(cmd, attrs);
        match self.sock.request::<_, GenlMessage<IpvsMessage>>(m) {
            Ok(v) => Ok(v.into_iter().map(|g| g.payload).collect()),
            Err(e) => Err(kernel_error(kind, &what(), sched, e)),
        }
    }

    fn dump(
        &mut self,
        what: impl FnOnce() -> String,
        cmd: u8,
        attrs: Vec<IpvsAttr>,
    ) -> KernelResult<Vec<IpvsMessage>> {
        let m = self.msg(cmd, attrs);
        match self.sock.dump::<_, GenlMessage<IpvsMessage>>(m) {
            Ok(v) => Ok(v.into_iter().map(|g| g.payload).collect()),
            Err(e) => Err(kernel_error(Kind::Other, &what(), None, e)),
        }
    }

    /// Applies many changes, several per datagram; one result per change, in order. The kernel handles
    /// each request independently, so a failed change does not stop the following ones.
    pub fn apply(&mut self, ops: &[IpvsOp]) -> KernelResult<Vec<KernelResult<()>>> {
        // Encoded one datagram at a time by `batch`, never all at once.
        let family = self.family;
        let msgs = ops.iter().map(|o| {
            let (c, attrs) = op_request(o);
            message(family, c, attrs)
        });
        let results = self
            .sock
            .batch(msgs, self.batch)
            .map_err(|e| kernel_error(Kind::Other, "IPVS batch", None, e))?;
        Ok(results
            .into_iter()
            .zip(ops)
            .map(|(r, op)| {
                r.map_err(|e| {
                    let (kind, sched) = match op {
                        IpvsOp::AddService(s) | IpvsOp::UpdateService(s) => {
                            (Kind::ServiceWrite, Some(s.scheduler.as_str()))
                        }
                        _ => (Kind::Other, None),
                    };
                    kernel_error(kind, &op.to_string(), sched, e)
                })
            })
            .collect())
    }
}

/// One IPVS request of generic netlink family `family`.
fn message(family: u16, cmd: u8, attrs: Vec<IpvsAttr>) -> GenlMessage<IpvsMessage> {
    let mut m = GenlMessage::from_payload(IpvsMessage { cmd, attrs });
    m.set_resolved_family_id(family);
    m
}

/// The command and attributes of one change.
fn op_request(op: &IpvsOp) -> (u8, Vec<IpvsAttr>) {
    match op {
        IpvsOp::AddService(s) => (
            cmd::NEW_SERVICE,
            vec![IpvsAttr::Service(codec::svc_attrs(s))],
        ),
        IpvsOp::UpdateService(s) => (
            cmd::SET_SERVICE,
            vec![IpvsAttr::Service(codec::svc_attrs(s))],
        ),
        IpvsOp::DeleteService(k) => (
            cmd::DEL_SERVICE,
            vec![IpvsAttr::Service(codec::svc_key_attrs(k))],
        ),
        IpvsOp::AddDestination(k, d) => (
            cmd::NEW_DEST,
            vec![
                IpvsAttr::Service(codec::svc_key_attrs(k)),
                IpvsAttr::Dest(codec::dest_attrs(d)),
            ],
        ),
        IpvsOp::UpdateDestination(k, d) => (
            cmd::SET_DEST,
            vec![
                IpvsAttr::Service(codec::svc_key_attrs(k)),
                IpvsAttr::Dest(codec::dest_attrs(d)),
            ],
        ),
        IpvsOp::DeleteDestination(k, addr, port) => (
            cmd::DEL_DEST,
            vec![
                IpvsAttr::Service(codec::svc_key_attrs(k)),
                IpvsAttr::Dest(codec::dest_key_attrs(*addr, *port)),
            ],
        ),
    }
}

/// Resolves a generic netlink family name to its id through the controller.
pub fn resolve_family(sock: &mut NlSocket, name: &str) -> KernelResult<u16> {
    let req = GenlMessage::from_payload(GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(name.to_string())],
    });
    let answers = sock
        .request::<_, GenlMessage<GenlCtrl>>(req)
        .map_err(|e| match e.errno() {
            Some(libc::ENOENT) => KernelError::Unsupported(format!(
                "generic netlink family {name} not found (is the kernel module loaded?)"
            )),
            _ => kernel_error(Kind::Other, &format!("resolve family {name}"), None, e),
        })?;
    answers
        .iter()
        .flat_map(|g| g.payload.nlas.iter())
        .find_map(|a| match a {
            GenlCtrlAttrs::FamilyId(id) => Some(*id),
            _ => None,
        })
        .ok_or_else(|| KernelError::Invalid(format!("no id in the answer for family {name}")))
}

impl Ipvs for NetlinkIpvs {
    fn version(&mut self) -> KernelResult<String> {
        let answers = self.call(
            Kind::Other,
            || "IPVS get info".into(),
            None,
            cmd::GET_INFO,
            vec![],
        )?;
        answers
            .iter()
            .flat_map(|m| m.attrs.iter())
            .find_map(|a| match a {
                IpvsAttr::InfoVersion(v) => Some(codec::version_string(*v)),
                _ => None,
            })
            .ok_or_else(|| KernelError::Invalid("IPVS info without version".into()))
    }

    fn services(&mut self) -> KernelResult<Vec<IpvsService>> {
        // Each answer is read straight from the receive buffer: no message or attribute list is kept.
        let mut out = Vec::new();
        let m = self.msg(cmd::GET_SERVICE, vec![]);
        self.sock
            .dump_each(m, |_, payload| {
                match codec::service_of_answer(payload) {
                    Ok(Some(s)) => out.push(s),
                    Ok(None) => {}
                    Err(e) => return Err(NlError::Decode(format!("IPVS service answer: {e}"))),
                }
                Ok(())
            })
            .map_err(|e| kernel_error(Kind::Other, "IPVS list services", None, e))?;
        Ok(out)
    }

    fn service(&mut self, key: &IpvsServiceKey) -> KernelResult<Option<IpvsService>> {
        let answers = self.call(
            Kind::Other,
            || format!("get IPVS service {key}"),
            None,
            cmd::GET_SERVICE,
            vec![IpvsAttr::Service(codec::svc_key_attrs(key))],
        );
        let answers = match answers {
            Ok(a) => a,
            // The kernel answers ESRCH for a virtual server it does not have.
            Err(KernelError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        for attrs in answers.iter().flat_map(|m| &m.attrs) {
            if let IpvsAttr::Service(attrs) = attrs {
                return codec::svc_from_attrs(attrs)
                    .map(|s| s.filter(|s| s.key == *key))
                    .map_err(|e| KernelError::Invalid(format!("IPVS service answer: {e}")));
            }
        }
        Ok(None)
    }

    fn add_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        self.call(
            Kind::ServiceWrite,
            || format!("add IPVS service {}", svc.key),
            Some(&svc.scheduler),
            cmd::NEW_SERVICE,
            vec![IpvsAttr::Service(codec::svc_attrs(svc))],
        )
        .map(drop)
    }

    fn update_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        self.call(
            Kind::ServiceWrite,
            || format!("update IPVS service {}", svc.key),
            Some(&svc.scheduler),
            cmd::SET_SERVICE,
            vec![IpvsAttr::Service(codec::svc_attrs(svc))],
        )
        .map(drop)
    }

    fn delete_service(&mut self, key: &IpvsServiceKey) -> KernelResult<()> {
        self.call(
            Kind::Other,
            || format!("delete IPVS service {key}"),
            None,
            cmd::DEL_SERVICE,
            vec![IpvsAttr::Service(codec::svc_key_attrs(key))],
        )
        .map(drop)
    }

    fn destinations(&mut self, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>> {
        let answers = self.dump(
            || format!("list destinations of {key}"),
            cmd::GET_DEST,
            vec![IpvsAttr::Service(codec::svc_key_attrs(key))],
        )?;
        let af = codec::key_af(key);
        let mut out = Vec::with_capacity(answers.len());
        for m in &answers {
            for a in &m.attrs {
                if let IpvsAttr::Dest(attrs) = a {
                    out.push(codec::dest_from_attrs(attrs, af).map_err(|e| {
                        KernelError::Invalid(format!("IPVS destination answer: {e}"))
                    })?);
                }
            }
        }
        Ok(out)
    }

    fn add_destination(&mut self, key: &IpvsServiceKey, dst: &IpvsDestination) -> KernelResult<()> {
        let (c, attrs) = op_request(&IpvsOp::AddDestination(*key, dst.clone()));
        self.call(
            Kind::Other,
            || format!("add destination {}:{} to {key}", dst.addr, dst.port),
            None,
            c,
            attrs,
        )
        .map(drop)
    }

    fn update_destination(
        &mut self,
        key: &IpvsServiceKey,
        dst: &IpvsDestination,
    ) -> KernelResult<()> {
        let (c, attrs) = op_request(&IpvsOp::UpdateDestination(*key, dst.clone()));
        self.call(
            Kind::Other,
            || format!("update destination {}:{} of {key}", dst.addr, dst.port),
            None,
            c,
            attrs,
        )
        .map(drop)
    }

    fn delete_destination(
        &mut self,
        key: &IpvsServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> KernelResult<()> {
        let (c, attrs) = op_request(&IpvsOp::DeleteDestination(*key, addr, port));
        self.call(
            Kind::Other,
            || format!("delete destination {addr}:{port} of {key}"),
            None,
            c,
            attrs,
        )
        .map(drop)
    }

    fn flush(&mut self) -> KernelResult<()> {
        self.call(
            Kind::Other,
            || "IPVS flush".into(),
            None,
            cmd::FLUSH,
            vec![],
        )
        .map(drop)
    }

    fn set_timeouts(&mut self, t: IpvsTimeouts) -> KernelResult<()> {
        let mut attrs = Vec::new();
        if t.tcp != 0 {
            attrs.push(IpvsAttr::TimeoutTcp(t.tcp));
        }
        if t.tcp_fin != 0 {
            attrs.push(IpvsAttr::TimeoutTcpFin(t.tcp_fin));
        }
        if t.udp != 0 {
            attrs.push(IpvsAttr::TimeoutUdp(t.udp));
        }
        if attrs.is_empty() {
            return Ok(());
        }
        self.call(
            Kind::Other,
            || "IPVS set timeouts".into(),
            None,
            cmd::SET_CONFIG,
            attrs,
        )
        .map(drop)
    }

    fn apply(&mut self, ops: &[IpvsOp]) -> KernelResult<Vec<KernelResult<()>>> {
        NetlinkIpvs::apply(self, ops)
    }

    /// `/proc/net/ip_vs`: a few hundred `read`s for the whole table instead of one dump per virtual server.
    fn destination_view(&mut self) -> KernelResult<Option<DestinationView>> {
        match self.proc_view.as_mut() {
            Some(v) => v
                .read()
                .map(Some)
                .map_err(|e| KernelError::InvalidWith(Box::new(e))),
            None => Ok(None),
        }
    }

    fn ipv4_services(&mut self) -> KernelResult<Option<Vec<IpvsService>>> {
        match self.sockopt.as_mut() {
            Some(s) => s.read().map(Some).map_err(KernelError::Io),
            None => Ok(None),
        }
    }

    fn destination_slice(&mut self, max_services: usize) -> KernelResult<Option<ViewSlice>> {
        match self.proc_view.as_mut() {
            Some(v) => v
                .read_slice(max_services)
                .map(Some)
                .map_err(|e| KernelError::InvalidWith(Box::new(e))),
            None => Ok(None),
        }
    }

    fn services_with_stats(&mut self) -> KernelResult<Vec<(IpvsServiceKey, IpvsStats)>> {
        let answers = self.dump(
            || "IPVS list service stats".into(),
            cmd::GET_SERVICE,
            vec![],
        )?;
        let mut out = Vec::with_capacity(answers.len());
        for attrs in answers.iter().flat_map(|m| &m.attrs) {
            let IpvsAttr::Service(attrs) = attrs else {
                continue;
            };
            let svc = codec::svc_from_attrs(attrs)
                .map_err(|e| KernelError::Invalid(format!("IPVS service answer: {e}")))?;
            if let Some(svc) = svc {
                out.push((
                    svc.key,
                    codec::svc_stats_from_attrs(attrs).unwrap_or_default(),
                ));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        let e = |errno| NlError::Errno {
            errno,
            message: None,
        };
        assert!(matches!(
            kernel_error(Kind::Other, "x", None, e(libc::EEXIST)),
            KernelError::Exists(_)
        ));
        assert!(matches!(
            kernel_error(Kind::Other, "x", None, e(libc::ESRCH)),
            KernelError::NotFound(_)
        ));
        assert!(matches!(
            kernel_error(Kind::Other, "x", None, e(libc::ENOENT)),
            KernelError::NotFound(_)
        ));
        match kernel_error(Kind::ServiceWrite, "x", Some("bogus"), e(libc::ENOENT)) {
            KernelError::SchedulerNotFound { scheduler, detail } => {
                assert_eq!(scheduler, "bogus");
                assert!(detail.contains('x'), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            kernel_error(Kind::Other, "x", None, e(libc::EINVAL)),
            KernelError::Errno { errno: 22, .. }
        ));
    }
}
