//! The process's CPU time and page faults so far (`getrusage`), for the cold-start breakdown in the log
//! (and the sync-loop bench); and what one sync cost its thread, with the kernel I/O counted meanwhile.

use crate::kernel::io_counts::IoCounts;

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

/// What one sync cost the thread that ran it (CPU time, minor page faults) and the kernel I/O counted
/// meanwhile (by any thread: in practice the sync's, since nothing else talks to the kernel then).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncCost {
    /// User plus system CPU of the sync's thread, in microseconds.
    pub cpu_us: i64,
    /// Minor page faults of the sync's thread.
    pub minor_faults: i64,
    /// System calls, bytes, netlink messages and processes.
    pub io: IoCounts,
}

/// Started on a sync's thread before it works; [`CostMeter::stop`] on the same thread gives the cost.
pub struct CostMeter {
    usage: libc::rusage,
    io: IoCounts,
}

impl CostMeter {
    /// Starts measuring on the calling thread.
    pub fn start() -> CostMeter {
        CostMeter {
            usage: rusage(libc::RUSAGE_THREAD),
            io: IoCounts::now(),
        }
    }

    /// The cost since [`CostMeter::start`] (call on the same thread).
    pub fn stop(self) -> SyncCost {
        let now = rusage(libc::RUSAGE_THREAD);
        let us = |u: &libc::rusage| micros(u.ru_utime) + micros(u.ru_stime);
        SyncCost {
            cpu_us: us(&now) - us(&self.usage),
            minor_faults: now.ru_minflt - self.usage.ru_minflt,
            io: IoCounts::now().since(&self.io),
        }
    }
}

/// `cpu_us=.. minflt=..` and the I/O's `key=value` pairs ([`IoCounts`]' format), for the sync report line
/// the benchmarks read.
impl std::fmt::Display for SyncCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cpu_us={} minflt={} {}",
            self.cpu_us, self.minor_faults, self.io
        )
    }
}

fn micros(t: libc::timeval) -> i64 {
    t.tv_sec * 1_000_000 + t.tv_usec
}

/// `getrusage(who)`: the process's (`RUSAGE_SELF`), the calling thread's (`RUSAGE_THREAD`) or the
/// waited-for children's usage.
fn rusage(who: libc::c_int) -> libc::rusage {
    crate::sys::process::rusage(who)
}

fn secs(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}
