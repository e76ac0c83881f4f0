//! Binding TCP listeners the way Go's `net.Listen` does for kube-proxy's servers.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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
    // SAFETY: l is a listening stream socket; listen(2) again only changes its backlog.
    check(unsafe { libc::listen(l.as_raw_fd(), BACKLOG) })?;
    l.set_nonblocking(true)?;
    Ok(l)
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn set_int_opt(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: fd is a valid open socket; the option value is a c_int of the given size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
}

fn bind_dual_stack(port: u16) -> io::Result<TcpListener> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe {
        libc::socket(
            libc::AF_INET6,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    check(raw)?;
    // SAFETY: raw is a freshly created descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int_opt(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    set_int_opt(&fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    // SAFETY: an all-zero sockaddr_in6 is valid (the :: address); family and port are set below.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    sa.sin6_port = port.to_be();
    // SAFETY: sa is a properly initialised sockaddr_in6 and the length matches it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        )
    })?;
    // SAFETY: fd is a bound stream socket.
    check(unsafe { libc::listen(fd.as_raw_fd(), BACKLOG) })?;
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
