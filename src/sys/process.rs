//! Facts of this process and its threads: host name, resource usage, thread id and priority, system
//! constants.

use std::io;

/// The machine's host name as `gethostname(2)` gives it (up to 255 bytes, not decoded).
pub fn hostname() -> io::Result<Vec<u8>> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its full length; gethostname NUL-terminates or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(buf[..end].to_vec())
}

/// `getrusage(who)`: the process's (`RUSAGE_SELF`) or its waited-for children's usage (all zero if the
/// call fails).
pub fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a valid out pointer.
    unsafe { libc::getrusage(who, &mut u) };
    u
}

/// The calling thread's kernel id.
pub fn thread_id() -> libc::pid_t {
    // SAFETY: gettid(2) has no preconditions.
    unsafe { libc::gettid() }
}

/// Sets the calling thread's nice value to `nice`.
pub fn set_thread_nice(nice: libc::c_int) -> io::Result<()> {
    let tid = thread_id() as libc::id_t;
    // SAFETY: setpriority(2) on the calling thread's own id; no memory is passed.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's nice value.
pub fn thread_nice() -> libc::c_int {
    let tid = thread_id() as libc::id_t;
    // SAFETY: reads the calling thread's own priority; no memory is passed.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
}

/// Clock ticks per second (`_SC_CLK_TCK`, the unit of `/proc/<pid>/stat` times), if known.
pub fn clock_ticks() -> Option<u64> {
    // SAFETY: sysconf only reads a system constant.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()
}

/// The memory page size in bytes (`_SC_PAGESIZE`), if known.
pub fn page_size() -> Option<usize> {
    // SAFETY: sysconf only reads a system constant.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()
}
