//! Socket calls the standard library and the netlink crates do not offer: a listen backlog, integer and
//! timeout options, a dual-stack listener's bind, raw sockets and `getsockopt` into a buffer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A new socket (`socket(2)`), owned.
pub fn socket(domain: libc::c_int, ty: libc::c_int, protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes only integers; the result is checked before use.
    let raw = unsafe { libc::socket(domain, ty, protocol) };
    check(raw)?;
    // SAFETY: raw is a freshly created descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `listen(2)` with `backlog` (again on a listening socket: only changes its backlog).
pub fn listen(fd: &impl AsRawFd, backlog: libc::c_int) -> io::Result<()> {
    // SAFETY: listen(2) on a descriptor the caller holds open; no memory is passed.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) })
}

/// Sets an integer socket option.
pub fn set_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: fd is held open by the caller; the option value is a c_int of the given size.
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

/// Sets `SO_RCVTIMEO` to `secs` seconds.
pub fn set_recv_timeout(fd: &impl AsRawFd, secs: libc::time_t) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: secs,
        tv_usec: 0,
    };
    // SAFETY: fd is held open by the caller; a pointer to a timeval and its exact length.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })
}

/// Binds an `AF_INET6` socket to `[::]:port`.
pub fn bind_in6_any(fd: &OwnedFd, port: u16) -> io::Result<()> {
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
    })
}

/// `getsockopt(2)` into `buf` (which also carries the request in); the length the kernel wrote.
pub fn getsockopt(
    fd: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: buf is valid for len bytes; the kernel writes at most len bytes and updates len.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok(len as usize)
}
