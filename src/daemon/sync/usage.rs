//! The process's CPU time and page faults so far (`getrusage`), for the cold-start breakdown in the log
//! (and the sync-loop bench).

/// A snapshot of this process's resource usage.
pub struct ProcessUsage(libc::rusage);

impl ProcessUsage {
    /// The usage now.
    pub fn now() -> Self {
        ProcessUsage(rusage(libc::RUSAGE_SELF))
    }

    /// User plus system CPU seconds.
    pub fn cpu_seconds(&self) -> f64 {
        secs(self.0.ru_utime) + secs(self.0.ru_stime)
    }

    /// Minor page faults.
    pub fn minor_faults(&self) -> i64 {
        self.0.ru_minflt
    }
}

impl std::fmt::Display for ProcessUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // CPU seconds of waited-for children: the iptables processes.
        let children = rusage(libc::RUSAGE_CHILDREN);
        write!(
            f,
            "user {:.3} s, sys {:.3} s, minor faults {}, children {:.3} s",
            secs(self.0.ru_utime),
            secs(self.0.ru_stime),
            self.0.ru_minflt,
            secs(children.ru_utime) + secs(children.ru_stime),
        )
    }
}

/// `getrusage(who)`: the process's (`RUSAGE_SELF`) or its waited-for children's usage.
fn rusage(who: libc::c_int) -> libc::rusage {
    crate::sys::process::rusage(who)
}

fn secs(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}
