//! Binding TCP listeners the way Go's `net.Listen` does for kube-proxy's servers.

use crate::sys::socket;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};

/// Listen backlog: connections the kernel completes before we accept them. std's default (128)
/// overflows under a burst of connections (clients then hang on handshakes the server dropped); Go
/// uses `somaxconn` (4096 on current kernels; the kernel caps the value at it).
const BACKLOG: libc::c_int = 4096;

/// Binds a listening socket on `addr`, non-blocking, with `SO_REUSEADDR` and a [`BACKLOG`]-deep queue.
///
/// As Go does for a wildcard address, `0.0.0.0:port` listens on both families when the kernel has IPv6
/// (an `AF_INET6` socket with `IPV6_V6ONLY` off), and falls back to IPv4 only when it has not.
pub fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    if addr.ip() == IpAddr::from([0, 0, 0, 0]) {
        match bind_dual_stack(addr.port()) {
            Ok(l) => return Ok(l),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
                ) => {}
            Err(e) => return Err(e),
        }
    }
    let l = TcpListener::bind(addr)?;
    socket::listen(&l, BACKLOG)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

fn bind_dual_stack(port: u16) -> io::Result<TcpListener> {
    let fd = socket::socket(
        libc::AF_INET6,
        libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        0,
    )?;
    socket::set_int_opt(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    socket::set_int_opt(&fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    socket::bind_in6_any(&fd, port)?;
    socket::listen(&fd, BACKLOG)?;
    Ok(TcpListener::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_accepts_ipv4_and_reports_in_use() {
        let l = bind_tcp("0.0.0.0:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        let again = bind_tcp(SocketAddr::from(([0, 0, 0, 0], port))).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
    }
}
