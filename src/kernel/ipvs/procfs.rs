//! The kernel's text view of the IPVS table, `/proc/net/ip_vs`: every virtual server with its real servers
//! in one file. Reading it costs one `read` per page of text, where the generic netlink interface needs one
//! dump (a request and two answers) per virtual server; it lacks the real servers' thresholds.
//!
//! Format (`net/netfilter/ipvs/ip_vs_ctl.c`, `ip_vs_info_seq_show`): three header lines, then per virtual
//! server a line `TCP  0A600001:0050 rr [ops] [persistent 10800 FFFFFFFF]` (IPv6: `[addr]:port`, fwmark
//! services `FWM  00000001 rr`) followed by one line per real server,
//! `  -> 0A800001:1F90      Masq    1      0          0` (forwarding method, weight, active and inactive
//! connections).

use super::types::{ForwardMethod, IpvsDestination, IpvsServiceKey};
use crate::kernel::io_counts::{Backend, Call};
use crate::net::Protocol;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Real servers per virtual server, as the text view shows them (thresholds read as 0: not shown).
pub type DestinationView = BTreeMap<IpvsServiceKey, Vec<IpvsDestination>>;

/// Part of the text view: the virtual servers one [`ProcView::read_slice`] showed, in the kernel's
/// order, continuing where the previous slice stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewSlice {
    /// The real servers of every virtual server this slice showed.
    pub shown: DestinationView,
    /// The slice started at the top of the table.
    pub from_start: bool,
    /// The slice reached the end of the table: the next one starts at the top.
    pub at_end: bool,
}

impl ViewSlice {
    /// The whole table as one slice.
    pub fn whole(shown: DestinationView) -> ViewSlice {
        ViewSlice {
            shown,
            from_start: true,
            at_end: true,
        }
    }

    /// Whether this slice is the whole table (every virtual server it lacks is absent from the kernel).
    pub fn is_whole(&self) -> bool {
        self.from_start && self.at_end
    }

    /// Whether the slice tells about `key`: it showed it, or it is the whole table.
    pub fn covers(&self, key: &IpvsServiceKey) -> bool {
        self.is_whole() || self.shown.contains_key(key)
    }
}

/// The text view of one network namespace: the file is opened once (in the namespace of the thread that
/// opens it, like the netlink socket next to it). [`ProcView::read`] reads it whole from the start;
/// [`ProcView::read_slice`] reads the next part, continuing where the last one stopped.
#[derive(Debug)]
pub struct ProcView {
    file: std::fs::File,
    /// The next slice starts at the top (the last read reached the end, or nothing was read yet).
    rewind: bool,
}

/// Bytes of the file read at a time: at 10k virtual servers × 10 real servers the text is ~7 MB, which is
/// parsed as it is read instead of being held whole.
const READ_CHUNK: usize = 64 * 1024;

impl ProcView {
    /// Opens the calling thread's `/proc/.../net/ip_vs`; None when it does not exist (no IPVS module).
    pub fn open() -> Option<ProcView> {
        let file = std::fs::File::open("/proc/thread-self/net/ip_vs")
            .or_else(|_| std::fs::File::open("/proc/net/ip_vs"))
            .ok()?;
        Some(ProcView { file, rewind: true })
    }

    /// Reads and parses the whole table, line by line as it is read.
    pub fn read(&mut self) -> Result<DestinationView, ProcViewError> {
        let io = ProcViewError::Read;
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut reader = BufReader::with_capacity(READ_CHUNK, Counted(&mut self.file));
        let mut parser = Parser::default();
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
                break;
            }
            let text = std::str::from_utf8(&line).map_err(ProcViewError::Utf8)?;
            parser.line(text.trim_end_matches(['\n', '\r']))?;
        }
        self.rewind = true;
        Ok(parser.finish())
    }

    /// Reads the next part of the table: at least `max_services` virtual servers (all of them in small
    /// tables), continuing where the previous slice stopped, or from the top after one that reached the
    /// end. The kernel hands the file out one buffer of whole virtual servers (with their real servers)
    /// per `read`, starting each `read` at the position the last one left, so a slice that stops at
    /// the end of a `read` leaves nothing half read: the next slice reads the kernel's state of then. The
    /// table may change between slices (positions shift when virtual servers come or go): a virtual
    /// server can be shown twice or not at all in one pass over the table, which callers that need
    /// every one of them seen make up for.
    pub fn read_slice(&mut self, max_services: usize) -> Result<ViewSlice, ProcViewError> {
        let io = ProcViewError::Read;
        let from_start = std::mem::take(&mut self.rewind);
        if from_start {
            self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        }
        let mut buf = vec![0u8; READ_CHUNK];
        let mut carry: Vec<u8> = Vec::new();
        let mut parser = Parser::default();
        let at_end = loop {
            let n = Counted(&mut self.file).read(&mut buf).map_err(io)?;
            if n == 0 {
                break true;
            }
            carry.extend_from_slice(&buf[..n]);
            let whole_lines = carry.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            for line in carry[..whole_lines].split(|b| *b == b'\n') {
                let text = std::str::from_utf8(line).map_err(ProcViewError::Utf8)?;
                if !text.is_empty() {
                    parser.line(text.trim_end_matches('\r'))?;
                }
            }
            carry.drain(..whole_lines);
            // A `read` that did not fill the buffer and ended a line ended a kernel buffer of whole
            // virtual servers: a slice may stop there.
            if n < buf.len() && carry.is_empty() && parser.out.len() >= max_services {
                break false;
            }
        };
        self.rewind = at_end;
        Ok(ViewSlice {
            shown: parser.finish(),
            from_start,
            at_end,
        })
    }
}

/// Why `/proc/net/ip_vs` could not be read: the cause kept, its text in the message as before.
#[derive(Debug, thiserror::Error)]
pub enum ProcViewError {
    /// Reading the file failed.
    #[error("read /proc/net/ip_vs: {0}")]
    Read(#[source] std::io::Error),
    /// A line is not UTF-8.
    #[error("/proc/net/ip_vs: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    /// A line does not have the shape of a virtual or real server.
    #[error("/proc/net/ip_vs line {line}: cannot parse {text:?}")]
    Line {
        /// Its number, from 1.
        line: usize,
        text: String,
    },
}

/// The file, with each `read` counted ([`io_counts`](crate::kernel::io_counts)).
struct Counted<'a>(&'a mut std::fs::File);

impl std::io::Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        crate::kernel::io_counts::call(Backend::Ipvs, Call::Read, 0, n);
        Ok(n)
    }
}

/// Parses the text view. Fwmark virtual servers (and their real servers) are skipped: they have no
/// address key. A line that does not parse is an error naming it.
pub fn parse(text: &str) -> Result<DestinationView, ProcViewError> {
    let mut parser = Parser::default();
    for line in text.lines() {
        parser.line(line)?;
    }
    Ok(parser.finish())
}

/// The text view parsed one line at a time.
#[derive(Debug, Default)]
struct Parser {
    out: DestinationView,
    /// Lines seen.
    n: usize,
    /// None while inside a virtual server we skip (fwmark) or before the first one.
    current: Option<IpvsServiceKey>,
    /// The real servers of `current` so far (moved into `out`, exactly sized, at its end).
    dests: Vec<IpvsDestination>,
}

impl Parser {
    fn line(&mut self, line: &str) -> Result<(), ProcViewError> {
        self.n += 1;
        let n = self.n;
        let bad = || ProcViewError::Line {
            line: n,
            text: line.to_string(),
        };
        if let Some(rest) = line.strip_prefix("  -> ") {
            if rest.starts_with("RemoteAddress") || self.current.is_none() {
                return Ok(());
            }
            self.dests.push(parse_dest(rest).ok_or_else(bad)?);
            return Ok(());
        }
        let mut words = line.split_whitespace();
        let (Some(proto), Some(addr)) = (words.next(), words.next()) else {
            return Ok(());
        };
        let protocol = match proto {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            "FWM" => {
                self.end_service();
                return Ok(());
            }
            // The header lines ("IP Virtual Server version ...", "Prot LocalAddress:Port ...").
            _ if self.out.is_empty() && self.current.is_none() => return Ok(()),
            _ => return Err(bad()),
        };
        let (addr, port) = parse_addr_port(addr).ok_or_else(bad)?;
        self.end_service();
        let key = IpvsServiceKey {
            addr,
            port,
            protocol,
        };
        self.out.entry(key).or_default();
        self.current = Some(key);
        Ok(())
    }

    /// Moves the real servers gathered for the current virtual server into the view.
    fn end_service(&mut self) {
        if let Some(key) = self.current.take() {
            let slot = self.out.entry(key).or_default();
            slot.append(&mut self.dests);
            slot.shrink_to_fit();
        }
    }

    fn finish(mut self) -> DestinationView {
        self.end_service();
        self.out
    }
}

/// `0A800001:1F90      Masq    1      0          0`.
fn parse_dest(rest: &str) -> Option<IpvsDestination> {
    let mut w = rest.split_whitespace();
    let (addr, port) = parse_addr_port(w.next()?)?;
    let forward = match w.next()? {
        "Masq" => ForwardMethod::Masq,
        "Local" => ForwardMethod::Local,
        "Tunnel" => ForwardMethod::Tunnel,
        "Route" => ForwardMethod::Route,
        _ => return None,
    };
    let mut num = || w.next()?.parse::<i64>().ok();
    let (weight, active, inactive) = (num()?, num()?, num()?);
    let mut d = IpvsDestination::masq(addr, port, u32::try_from(weight).ok()?);
    d.forward = forward;
    // Counters are atomics printed signed; a negative one (never seen) reads as 0.
    d.active_conns = u32::try_from(active.max(0)).unwrap_or(u32::MAX);
    d.inactive_conns = u32::try_from(inactive.max(0)).unwrap_or(u32::MAX);
    Some(d)
}

/// `0A600001:0050` (IPv4, hex) or `[2001:0db8:...:0001]:0050` (IPv6); the port is hex.
fn parse_addr_port(s: &str) -> Option<(IpAddr, u16)> {
    let (addr, port) = s.rsplit_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let addr = match addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
        Some(v6) => IpAddr::V6(v6.parse::<Ipv6Addr>().ok()?),
        None if addr.len() == 8 => IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(addr, 16).ok()?)),
        None => return None,
    };
    Some((addr, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = concat!(
        "IP Virtual Server version 1.2.1 (size=4096)\n",
        "Prot LocalAddress:Port Scheduler Flags\n",
        "  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n",
        "TCP  0A600001:0050 rr \n",
        "  -> 0A800001:1F90      Masq    1      0          0         \n",
        "  -> 0A800002:1F90      Masq    0      3          7         \n",
        "UDP  0A600002:0035 sh persistent 10800 FFFFFFFF\n",
        "FWM  00000001 rr \n",
        "  -> 0A800009:0050      Route   1      0          0         \n",
        "TCP  [2001:0db8:0000:0000:0000:0000:0000:0001]:01BB rr ops \n",
        "  -> [2001:0db8:0000:0000:0000:0000:0000:0002]:1F90      Tunnel  5      0          0         \n",
    );

    #[test]
    fn parses_services_and_real_servers() {
        let v = parse(SAMPLE).unwrap();
        let k = |a: &str, port, protocol| IpvsServiceKey {
            addr: a.parse().unwrap(),
            port,
            protocol,
        };
        assert_eq!(v.len(), 3, "{v:?}");
        let tcp = &v[&k("10.96.0.1", 80, Protocol::Tcp)];
        assert_eq!(tcp.len(), 2);
        assert_eq!(
            tcp[0],
            IpvsDestination::masq("10.128.0.1".parse().unwrap(), 8080, 1)
        );
        assert_eq!(
            (tcp[1].weight, tcp[1].active_conns, tcp[1].inactive_conns),
            (0, 3, 7)
        );
        assert!(v[&k("10.96.0.2", 53, Protocol::Udp)].is_empty());
        let v6 = &v[&k("2001:db8::1", 443, Protocol::Tcp)];
        assert_eq!(v6[0].addr, "2001:db8::2".parse::<IpAddr>().unwrap());
        assert_eq!((v6[0].forward, v6[0].weight), (ForwardMethod::Tunnel, 5));
    }

    #[test]
    fn header_only_is_empty_and_garbage_is_an_error() {
        assert!(
            parse(&SAMPLE[..SAMPLE.find("TCP").unwrap()])
                .unwrap()
                .is_empty()
        );
        let bad = format!("{SAMPLE}  -> 0A800001:1F90      Bogus   1      0          0\n");
        let e = parse(&bad).unwrap_err();
        assert!(matches!(e, ProcViewError::Line { line: 12, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("/proc/net/ip_vs line 12: cannot parse \"  -> 0A800001"),
            "{e}"
        );
        let bad = format!("{SAMPLE}XYZ  0A600001:0050 rr\n");
        assert!(parse(&bad).is_err());
        assert!(parse_addr_port("0A6000:0050").is_none());
        assert!(parse_addr_port("[::1]:ZZZZ").is_none());
    }

    /// A read failure keeps the I/O error as its source (a log line shows the chain) and its text in the
    /// message, as before; the kernel error says `invalid:` as before.
    #[test]
    fn errors_keep_their_cause() {
        let io = std::io::Error::other("EIO");
        let e = ProcViewError::Read(io);
        assert_eq!(e.to_string(), "read /proc/net/ip_vs: EIO");
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("EIO"));
        let k = crate::kernel::KernelError::InvalidWith(Box::new(e));
        assert_eq!(k.to_string(), "invalid: read /proc/net/ip_vs: EIO");
        assert!(std::error::Error::source(&k).is_some());
    }
}
