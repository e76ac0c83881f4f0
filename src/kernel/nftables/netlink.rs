//! The real nf_tables backend: the nf_tables netlink protocol (what `nft` itself speaks) over a blocking
//! NETLINK_NETFILTER socket. A lookup is one GETTABLE request; a delete is one DELTABLE by handle inside a
//! batch, which the kernel commits as a transaction.

use super::codec::{Reply, Request, nfproto};
use super::{NfTables, NftTable};
use crate::kernel::io_counts::Backend;
use crate::kernel::netlink::{NlError, NlSocket};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use netlink_sys::protocols::NETLINK_NETFILTER;

/// nf_tables through netlink. The socket opens on first use, so that a kernel without nfnetlink shows
/// as an Unsupported answer like a kernel without nf_tables.
#[derive(Debug, Default)]
pub struct NetlinkNfTables {
    sock: Option<NlSocket>,
}

/// A failed request of operation `what`: ENOENT is NotFound; a kernel without nf_tables (the subsystem,
/// the family or the protocol missing) is Unsupported. (A lookup sent to a kernel without nf_tables
/// gets EINVAL, see [`NetlinkNfTables::table`].)
fn kernel_error(what: &str, e: NlError) -> KernelError {
    e.into_kernel(what, |errno, detail| match errno {
        libc::ENOENT => Some(KernelError::NotFound(detail)),
        libc::EOPNOTSUPP | libc::EPROTONOSUPPORT | libc::EAFNOSUPPORT => {
            Some(KernelError::Unsupported(detail))
        }
        _ => None,
    })
}

impl NetlinkNfTables {
    /// A backend whose socket is not open yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The netfilter netlink socket, opened now if it is not yet (Unsupported without nfnetlink).
    fn sock(&mut self) -> KernelResult<&mut NlSocket> {
        if self.sock.is_none() {
            // Only a kernel without nfnetlink refuses this socket (EPROTONOSUPPORT).
            let sock = NlSocket::new(NETLINK_NETFILTER, Backend::Nftables)
                .map_err(|e| KernelError::Unsupported(format!("open netfilter netlink: {e}")))?;
            self.sock = Some(sock);
        }
        self.sock
            .as_mut()
            .ok_or_else(|| KernelError::Invalid("netfilter netlink socket".into()))
    }
}

impl NfTables for NetlinkNfTables {
    fn table(&mut self, family: IpFamily, name: &str) -> KernelResult<Option<NftTable>> {
        let what = format!(
            "get nftables table {} {name}",
            super::family_keyword(family)
        );
        let req = Request::GetTable {
            family,
            name: name.to_string(),
        };
        let answers: Vec<Reply> = match self.sock()?.request(req) {
            Ok(a) => a,
            // nfnetlink answers EINVAL to a request for a subsystem it does not have (nf_tables not
            // built or not loadable); the request itself is well formed (see the codec's tests).
            Err(e) if e.errno() == Some(libc::EINVAL) => {
                return Err(KernelError::Unsupported(format!(
                    "{what}: {e}: no nf_tables"
                )));
            }
            Err(e) => {
                return match kernel_error(&what, e) {
                    KernelError::NotFound(_) => Ok(None),
                    other => Err(other),
                };
            }
        };
        let found = answers.into_iter().find_map(|r| match r {
            Reply::Table(t) if t.name == name && t.nfproto == nfproto(family) => Some(t),
            _ => None,
        });
        let Some(t) = found else {
            return Err(KernelError::Invalid(format!(
                "{what}: no table in the answer"
            )));
        };
        let handle = t
            .handle
            .ok_or_else(|| KernelError::Invalid(format!("{what}: the answer has no handle")))?;
        Ok(Some(NftTable {
            family,
            name: t.name,
            handle,
            comment: t.comment,
        }))
    }

    fn delete_table(&mut self, family: IpFamily, handle: u64) -> KernelResult<bool> {
        let what = format!(
            "delete nftables table {} handle {handle}",
            super::family_keyword(family)
        );
        let del = Request::DelTable { family, handle };
        let results = self
            .sock()?
            .transaction(Request::BatchBegin, vec![del], Request::BatchEnd)
            .map_err(|e| kernel_error(&what, e))?;
        match results.into_iter().next() {
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => match kernel_error(&what, e) {
                KernelError::NotFound(_) => Ok(false),
                other => Err(other),
            },
            None => Err(KernelError::Invalid(format!("{what}: no answer"))),
        }
    }
}
