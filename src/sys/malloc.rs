//! glibc malloc's statistics and controls (Linux with glibc only; `crate::malloc` gives the portable API).

/// The allocator's bookkeeping (`mallinfo2(3)`: all arenas).
pub fn mallinfo2() -> libc::mallinfo2 {
    // SAFETY: mallinfo2 takes no arguments, only reads the allocator's own bookkeeping under its locks
    // and returns a plain struct by value.
    unsafe { libc::mallinfo2() }
}

/// `malloc_trim(0)`: gives free memory of every arena back to the kernel; true when some was released.
pub fn trim() -> bool {
    // SAFETY: malloc_trim only releases pages of free chunks under the arenas' locks; no pointer crosses
    // the call.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// `mallopt(param, value)`: sets one allocator parameter; false when the allocator refused it.
pub fn mallopt(param: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: mallopt only sets an allocator parameter from two integers; glibc checks the value.
    unsafe { libc::mallopt(param, value) == 1 }
}
