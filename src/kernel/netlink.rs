//! A synchronous netlink request/response socket shared by the IPVS, link and conntrack backends.
//!
//! One blocking `netlink_sys::Socket` per backend, sequence numbers per request, ACK and multipart-dump
//! handling, extended-ACK messages, and batches (several requests in one `send`, then their ACKs).
//! Messages of any family are handled through netlink-packet-core's (de)serialization traits.

use crate::kernel::io_counts::{self, Backend, Call, Direction};
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_DUMP, NLM_F_REQUEST, NetlinkBuffer, NetlinkDeserializable,
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NlasIterator,
};
use netlink_sys::{Socket, SocketAddr};
use std::fmt::Debug;

/// Receive buffer size: large enough for one dump datagram (the kernel caps them at 32 KiB by default).
const RECV_BUF: usize = 256 * 1024;
/// Kernel socket receive buffer: ACKs of a whole batch queue there before we read them.
const SO_RCVBUF: usize = 4 * 1024 * 1024;
/// Conservative kernel memory charged per queued ACK (skb truesize), to size batches to the receive buffer.
const ACK_TRUESIZE: usize = 1024;
/// A kernel that does not answer within this time fails the call instead of hanging the reconciler.
const RECV_TIMEOUT_SECS: libc::time_t = 30;
/// Upper bound of requests per datagram (IPVS requests are ~100-150 bytes).
const MAX_BATCH: usize = 512;
/// Extended ACK attribute carrying a human-readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// A failed netlink exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlError {
    /// The kernel answered with a negative errno (positive here) and maybe an extended-ACK message.
    Errno { errno: i32, message: Option<String> },
    /// The socket failed.
    Io(String),
    /// The kernel's answer could not be decoded.
    Decode(String),
}

impl NlError {
    /// Converts to a [`KernelError`] for operation `what`: `classify` maps an errno and the detail text
    /// (the kernel's extended-ACK message, if any) to a typed error; `None` gives the generic `Errno`.
    pub fn into_kernel(
        self,
        what: &str,
        classify: impl FnOnce(i32, String) -> Option<crate::kernel::KernelError>,
    ) -> crate::kernel::KernelError {
        use crate::kernel::KernelError;
        match self {
            NlError::Errno { errno, message } => {
                let detail = message
                    .map(|m| format!("{what}: {m}"))
                    .unwrap_or_else(|| what.to_string());
                classify(errno, detail).unwrap_or_else(|| KernelError::Errno {
                    op: what.to_string(),
                    errno,
                    message: std::io::Error::from_raw_os_error(errno).to_string(),
                })
            }
            NlError::Io(m) => KernelError::Io(std::io::Error::other(format!("{what}: {m}"))),
            NlError::Decode(m) => KernelError::Invalid(format!("{what}: {m}")),
        }
    }
}

impl NlError {
    /// The errno, if the kernel returned one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NlError::Errno { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

impl std::fmt::Display for NlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NlError::Errno { errno, message } => {
                let text = std::io::Error::from_raw_os_error(*errno);
                match message {
                    Some(m) => write!(f, "{text} ({m})"),
                    None => write!(f, "{text}"),
                }
            }
            NlError::Io(e) => write!(f, "netlink socket: {e}"),
            NlError::Decode(e) => write!(f, "netlink decode: {e}"),
        }
    }
}

impl From<std::io::Error> for NlError {
    fn from(e: std::io::Error) -> Self {
        NlError::Io(e.to_string())
    }
}

/// A blocking netlink socket bound to the kernel.
pub struct NlSocket {
    sock: Socket,
    seq: u32,
    rx: Vec<u8>,
    tx: Vec<u8>,
    /// How many ACKs fit in the kernel receive buffer at once.
    ack_capacity: usize,
    /// Messages in `tx`.
    tx_messages: usize,
    /// Where this socket's calls are counted.
    backend: Backend,
}

impl std::fmt::Debug for NlSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NlSocket").field("seq", &self.seq).finish()
    }
}

impl NlSocket {
    /// Opens a socket of `protocol` (e.g. `NETLINK_GENERIC`) connected to the kernel; its calls are
    /// counted under `backend` ([`io_counts`]).
    pub fn new(protocol: isize, backend: Backend) -> Result<Self, NlError> {
        let mut sock = Socket::new(protocol)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Best effort: older kernels lack these options; answers still parse without them.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        force_rcvbuf(&sock, SO_RCVBUF);
        set_recv_timeout(&sock, RECV_TIMEOUT_SECS);
        let rcvbuf = sock.get_rx_buf_sz().unwrap_or(212_992);
        Ok(NlSocket {
            ack_capacity: (rcvbuf / ACK_TRUESIZE).max(16),
            sock,
            seq: std::process::id().wrapping_mul(7919),
            rx: Vec::with_capacity(RECV_BUF),
            tx: Vec::with_capacity(4096),
            tx_messages: 0,
            backend,
        })
    }

    /// Asks the kernel to check dump requests strictly and honour their filters (`NETLINK_GET_STRICT_CHK`,
    /// rtnetlink, Linux ≥ 4.20); false when the kernel does not support it.
    pub fn enable_strict_dumps(&mut self) -> bool {
        self.sock.set_netlink_get_strict_chk(true).is_ok()
    }

    /// Largest number of requests [`NlSocket::batch`] puts in one datagram: bounded by the ACKs the
    /// receive buffer can hold and by the datagram size the kernel accepts comfortably (~64 KiB).
    pub fn max_batch(&self) -> usize {
        self.ack_capacity.min(MAX_BATCH)
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.seq = 1;
        }
        self.seq
    }

    /// Appends one serialized request to the transmit buffer; returns its sequence number.
    fn push<T>(&mut self, payload: T, flags: u16) -> u32
    where
        T: NetlinkSerializable + Debug,
    {
        let seq = self.next_seq();
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = seq;
        let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
        msg.finalize();
        let start = self.tx.len();
        self.tx.resize(start + msg.buffer_len(), 0);
        msg.serialize(&mut self.tx[start..]);
        self.tx_messages += 1;
        seq
    }

    fn flush_tx(&mut self) -> Result<(), NlError> {
        let sent = self.sock.send(&self.tx, 0);
        let len = self.tx.len();
        io_counts::call(self.backend, Call::Send, len, 0);
        io_counts::messages(self.backend, Direction::Out, self.tx_messages);
        self.tx.clear();
        self.tx_messages = 0;
        let sent = sent?;
        if sent != len {
            return Err(NlError::Io(format!("short send: {sent} of {len} bytes")));
        }
        Ok(())
    }

    /// Sends one request (with ACK) and returns the messages answered before the ACK.
    pub fn request<T, R>(&mut self, payload: T) -> Result<Vec<R>, NlError>
    where
        T: NetlinkSerializable + Debug,
        R: NetlinkDeserializable + Debug,
    {
        self.exchange(payload, NLM_F_REQUEST | NLM_F_ACK)
    }

    /// Sends one dump request and returns every message of the multipart answer.
    pub fn dump<T, R>(&mut self, payload: T) -> Result<Vec<R>, NlError>
    where
        T: NetlinkSerializable + Debug,
        R: NetlinkDeserializable + Debug,
    {
        self.exchange(payload, NLM_F_REQUEST | NLM_F_DUMP)
    }

    /// Sends one dump request and hands each message of the answer to `each` as it arrives: its header
    /// and its payload (the bytes after the 16-byte header), undecoded and not kept, so a dump of any
    /// size costs one receive buffer. An error from `each` stops the dump (the rest of the answer is
    /// read and dropped, so the socket stays usable).
    pub fn dump_each<T>(
        &mut self,
        payload: T,
        mut each: impl FnMut(&NlHeader, &[u8]) -> Result<(), NlError>,
    ) -> Result<(), NlError>
    where
        T: NetlinkSerializable + Debug,
    {
        self.clear_tx();
        let seq = self.push(payload, NLM_F_REQUEST | NLM_F_DUMP);
        self.flush_tx()?;
        let mut result: Option<Result<(), NlError>> = None;
        let mut failed: Option<NlError> = None;
        while result.is_none() {
            self.recv()?;
            let rx = std::mem::take(&mut self.rx);
            let walked = walk_frames(&rx, |h, body| {
                if h.seq != seq || result.is_some() {
                    return Ok(());
                }
                match h.kind {
                    NLMSG_DONE | NLMSG_ERROR => result = Some(end_of_answer(h, body)),
                    // Other control messages (NOOP, OVERRUN) carry nothing for the caller.
                    kind if kind < NLMSG_MIN_TYPE => {}
                    _ if failed.is_none() => failed = each(h, body).err(),
                    _ => {}
                }
                Ok(())
            });
            self.rx = rx;
            walked?;
        }
        match failed {
            Some(e) => Err(e),
            None => result.unwrap_or(Ok(())),
        }
    }

    /// Sends one request with extra header flags (e.g. `NLM_F_CREATE | NLM_F_EXCL`) and waits for its ACK.
    pub fn request_flags<T, R>(&mut self, payload: T, extra: u16) -> Result<Vec<R>, NlError>
    where
        T: NetlinkSerializable + Debug,
        R: NetlinkDeserializable + Debug,
    {
        self.exchange(payload, NLM_F_REQUEST | NLM_F_ACK | extra)
    }

    fn exchange<T, R>(&mut self, payload: T, flags: u16) -> Result<Vec<R>, NlError>
    where
        T: NetlinkSerializable + Debug,
        R: NetlinkDeserializable + Debug,
    {
        self.clear_tx();
        let seq = self.push(payload, flags);
        self.flush_tx()?;
        let mut out = Vec::new();
        let mut result: Option<Result<(), NlError>> = None;
        while result.is_none() {
            self.recv()?;
            let rx = std::mem::take(&mut self.rx);
            let parsed = for_each_message::<R>(&rx, |msg_seq, item| {
                if msg_seq != seq || result.is_some() {
                    return; // a late answer to an earlier, abandoned request
                }
                match item {
                    Item::Message(m) => out.push(m),
                    Item::Done(r) | Item::Ack(r) => result = Some(r),
                }
            });
            self.rx = rx;
            parsed?;
        }
        result.unwrap_or(Ok(())).map(|()| out)
    }

    /// Sends many ACKed requests in as few datagrams as possible and returns one result per request,
    /// in order. The kernel processes every message of a datagram even when one fails.
    pub fn batch<T>(
        &mut self,
        payloads: impl IntoIterator<Item = T>,
        chunk: usize,
    ) -> Result<Vec<Result<(), NlError>>, NlError>
    where
        T: NetlinkSerializable + Debug,
    {
        // The kernel answers a whole datagram before we read: ACKs beyond the receive buffer are lost.
        let chunk = chunk.clamp(1, self.max_batch());
        // Requests are taken one datagram at a time: only a datagram's worth is ever encoded at once.
        let mut iter = payloads.into_iter().peekable();
        let mut results: Vec<Result<(), NlError>> = Vec::with_capacity(iter.size_hint().0);
        while iter.peek().is_some() {
            self.clear_tx();
            let mut seqs = Vec::with_capacity(chunk);
            for p in iter.by_ref().take(chunk) {
                seqs.push(self.push(p, NLM_F_REQUEST | NLM_F_ACK));
            }
            let first = seqs[0];
            if results.is_empty() {
                crate::malloc::mark("netlink batch: first datagram");
            }
            self.flush_tx()?;
            let base = results.len();
            results.extend(seqs.iter().map(|_| Err(NlError::Io("no answer".into()))));
            let mut pending = seqs.len();
            while pending > 0 {
                self.recv()?;
                let rx = std::mem::take(&mut self.rx);
                let parsed = for_each_message::<NoPayload>(&rx, |msg_seq, item| {
                    let idx = msg_seq.wrapping_sub(first) as usize;
                    if idx >= seqs.len() {
                        return;
                    }
                    if let Item::Ack(r) | Item::Done(r) = item {
                        results[base + idx] = r;
                        pending = pending.saturating_sub(1);
                    }
                });
                self.rx = rx;
                parsed?;
            }
        }
        Ok(results)
    }

    /// Sends `payloads` as one nfnetlink batch, between the markers `begin` and `end`, in one datagram:
    /// the kernel applies all of them or none (nf_tables' transactions). Returns one result per payload;
    /// a batch the kernel refused as a whole (its subsystem missing, the commit failed) is the error.
    pub fn transaction<T>(
        &mut self,
        begin: T,
        payloads: Vec<T>,
        end: T,
    ) -> Result<Vec<Result<(), NlError>>, NlError>
    where
        T: NetlinkSerializable + Debug,
    {
        self.clear_tx();
        // The markers carry no ACK flag (kernels before 6.10 never acknowledge them); the kernel still
        // answers the begin marker when it refuses the whole batch.
        let begin_seq = self.push(begin, NLM_F_REQUEST);
        let seqs: Vec<u32> = payloads
            .into_iter()
            .map(|p| self.push(p, NLM_F_REQUEST | NLM_F_ACK))
            .collect();
        self.push(end, NLM_F_REQUEST);
        self.flush_tx()?;
        let mut results: Vec<Result<(), NlError>> = seqs
            .iter()
            .map(|_| Err(NlError::Io("no answer".into())))
            .collect();
        let (mut pending, mut refused) = (seqs.len(), None);
        while pending > 0 && refused.is_none() {
            self.recv()?;
            let rx = std::mem::take(&mut self.rx);
            let parsed = for_each_message::<NoPayload>(&rx, |msg_seq, item| {
                let (Item::Ack(r) | Item::Done(r)) = item else {
                    return;
                };
                if msg_seq == begin_seq {
                    refused = r.err();
                } else if let Some(i) = seqs.iter().position(|s| *s == msg_seq) {
                    results[i] = r;
                    pending = pending.saturating_sub(1);
                }
            });
            self.rx = rx;
            parsed?;
        }
        match refused {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }

    fn clear_tx(&mut self) {
        self.tx.clear();
        self.tx_messages = 0;
    }

    fn recv(&mut self) -> Result<(), NlError> {
        self.rx.clear();
        loop {
            match self.sock.recv(&mut self.rx, 0) {
                Ok(_) => {
                    io_counts::call(self.backend, Call::Recv, 0, self.rx.len());
                    io_counts::messages(self.backend, Direction::In, message_count(&self.rx));
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// `NLMSG_ERROR`: an acknowledgement or an error.
const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
const NLMSG_DONE: u16 = 3;
/// The first message type that is not a netlink control message.
const NLMSG_MIN_TYPE: u16 = 0x10;

/// The fields of a netlink message header that callers of [`NlSocket::dump_each`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NlHeader {
    /// The message type (the family's command space, or `NLMSG_*`).
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
}

/// Splits one datagram into messages (header, payload) without decoding them; a length that does not
/// fit is an error.
fn walk_frames(
    buf: &[u8],
    mut f: impl FnMut(&NlHeader, &[u8]) -> Result<(), NlError>,
) -> Result<(), NlError> {
    let mut off = 0usize;
    while let Some(h) = buf.get(off..off + 16) {
        let word = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let len = word(0) as usize;
        let Some(body) = buf
            .get(off + 16..off.saturating_add(len))
            .filter(|_| len >= 16)
        else {
            return Err(NlError::Decode(format!("bad message length {len}")));
        };
        let header = NlHeader {
            kind: u16::from_ne_bytes([h[4], h[5]]),
            flags: u16::from_ne_bytes([h[6], h[7]]),
            seq: word(8),
        };
        f(&header, body)?;
        off += (len + 3) & !3;
    }
    Ok(())
}

/// The outcome carried by the `NLMSG_DONE` or `NLMSG_ERROR` that ends an answer.
fn end_of_answer(h: &NlHeader, body: &[u8]) -> Result<(), NlError> {
    let code = body
        .get(..4)
        .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    if code >= 0 {
        return Ok(());
    }
    let message = match h.kind {
        NLMSG_ERROR => body
            .get(4..)
            .and_then(|rest| ext_ack_message(rest, h.flags)),
        _ => None,
    };
    Err(NlError::Errno {
        errno: code.saturating_abs(),
        message,
    })
}

/// The netlink messages in one datagram (by their headers' lengths).
fn message_count(buf: &[u8]) -> usize {
    let (mut off, mut n) = (0usize, 0usize);
    while let Some(h) = buf.get(off..off + 4) {
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len < 16 {
            break;
        }
        n += 1;
        off += (len + 3) & !3;
    }
    n
}

/// Raises the kernel receive buffer: SO_RCVBUFFORCE (root) beyond rmem_max, else SO_RCVBUF up to it.
fn force_rcvbuf(sock: &Socket, size: usize) {
    let v = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    if crate::sys::socket::set_int_opt(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v).is_err() {
        let _ = sock.set_rx_buf_sz(size);
    }
}

/// Sets SO_RCVTIMEO (best effort).
fn set_recv_timeout(sock: &Socket, secs: libc::time_t) {
    let _ = crate::sys::socket::set_recv_timeout(sock, secs);
}

/// A payload type that accepts any inner message without decoding it (for ACK-only batches).
#[derive(Debug)]
pub struct NoPayload;

impl NetlinkDeserializable for NoPayload {
    type Error = std::convert::Infallible;
    fn deserialize(_: &NetlinkHeader, _: &[u8]) -> Result<Self, Self::Error> {
        Ok(NoPayload)
    }
}

/// One decoded element of an answer.
pub enum Item<R> {
    Message(R),
    /// NLMSG_DONE of a dump (with its error, if any).
    Done(Result<(), NlError>),
    /// NLMSG_ERROR: ACK (Ok) or NACK.
    Ack(Result<(), NlError>),
}

/// Splits one datagram into netlink messages and hands each (with its sequence number) to `f`.
pub fn for_each_message<R>(buf: &[u8], mut f: impl FnMut(u32, Item<R>)) -> Result<(), NlError>
where
    R: NetlinkDeserializable + Debug,
{
    let mut off = 0usize;
    while off + 16 <= buf.len() {
        let nl =
            NetlinkBuffer::new_checked(&buf[off..]).map_err(|e| NlError::Decode(e.to_string()))?;
        let len = nl.length() as usize;
        if len < 16 || off + len > buf.len() {
            return Err(NlError::Decode(format!("bad message length {len}")));
        }
        let seq = nl.sequence_number();
        let hdr_flags = nl.flags();
        let frame = &buf[off..off + len];
        let msg =
            NetlinkMessage::<R>::deserialize(frame).map_err(|e| NlError::Decode(e.to_string()))?;
        match msg.payload {
            NetlinkPayload::InnerMessage(m) => f(seq, Item::Message(m)),
            NetlinkPayload::Done(d) => {
                let r = if d.code < 0 {
                    Err(NlError::Errno {
                        // saturating: -i32::MIN overflows (a panic in debug builds).
                        errno: d.code.saturating_abs(),
                        message: None,
                    })
                } else {
                    Ok(())
                };
                f(seq, Item::Done(r))
            }
            NetlinkPayload::Error(e) => {
                let code = e.raw_code();
                let r = if code == 0 {
                    Ok(())
                } else {
                    Err(NlError::Errno {
                        errno: code.saturating_abs(),
                        message: ext_ack_message(&e.header, hdr_flags),
                    })
                };
                f(seq, Item::Ack(r))
            }
            _ => {}
        }
        off += (len + 3) & !3;
    }
    Ok(())
}

/// The extended-ACK message of an NLMSG_ERROR payload (after the errno), if the kernel sent one.
fn ext_ack_message(after_errno: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || after_errno.len() < 16 {
        return None;
    }
    // The echoed request: only its header when capped, else all of it.
    let echoed = if flags & netlink_packet_core::NLM_F_CAPPED != 0 {
        16
    } else {
        u32::from_ne_bytes(after_errno[0..4].try_into().ok()?) as usize
    };
    let tlvs = after_errno.get((echoed + 3) & !3..)?;
    for nla in NlasIterator::new(tlvs) {
        let nla = nla.ok()?;
        if nla.kind() == NLMSGERR_ATTR_MSG {
            let v = nla.value();
            let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
            return Some(String::from_utf8_lossy(&v[..end]).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_frame(seq: u32, code: i32, msg: Option<&str>) -> Vec<u8> {
        let mut payload = code.to_ne_bytes().to_vec();
        // echoed (capped) request header
        let mut echoed = vec![0u8; 16];
        echoed[0..4].copy_from_slice(&16u32.to_ne_bytes());
        payload.extend(echoed);
        let mut flags = netlink_packet_core::NLM_F_CAPPED;
        if let Some(m) = msg {
            flags |= NLM_F_ACK_TLVS;
            let mut v = m.as_bytes().to_vec();
            v.push(0);
            let l = 4 + v.len();
            payload.extend((l as u16).to_ne_bytes());
            payload.extend(NLMSGERR_ATTR_MSG.to_ne_bytes());
            payload.extend(v);
            while !payload.len().is_multiple_of(4) {
                payload.push(0);
            }
        }
        let mut frame = ((16 + payload.len()) as u32).to_ne_bytes().to_vec();
        frame.extend(2u16.to_ne_bytes()); // NLMSG_ERROR
        frame.extend(flags.to_ne_bytes());
        frame.extend(seq.to_ne_bytes());
        frame.extend(0u32.to_ne_bytes());
        frame.extend(payload);
        frame
    }

    #[test]
    fn acks_and_nacks_with_extended_message() {
        let mut buf = error_frame(7, 0, None);
        buf.extend(error_frame(8, -17, Some("File exists here")));
        let mut got = Vec::new();
        for_each_message::<NoPayload>(&buf, |seq, item| {
            if let Item::Ack(r) = item {
                got.push((seq, r));
            }
        })
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (7, Ok(())));
        assert_eq!(
            got[1],
            (
                8,
                Err(NlError::Errno {
                    errno: 17,
                    message: Some("File exists here".into())
                })
            )
        );
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let buf = error_frame(7, 0, None);
        for cut in 17..buf.len() {
            let _ = for_each_message::<NoPayload>(&buf[..cut], |_, _| {});
        }
        let mut bad = buf.clone();
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(for_each_message::<NoPayload>(&bad, |_, _| {}).is_err());
    }
}
