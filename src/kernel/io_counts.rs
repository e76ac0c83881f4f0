//! Counts of the daemon's kernel I/O: per backend, the system calls by kind (netlink `send` and `recv`, the
//! `read`s of `/proc/net/ip_vs`, the x_tables `getsockopt`s), the bytes each way and the netlink messages
//! each way; and the processes started, by program. Each count is a relaxed atomic add beside a system
//! call that costs far more; nothing is summed until someone reads them (`/metrics`, or
//! [`IoCounts::now`] around a sync). These counts do not depend on the machine's load, so a benchmark can
//! compare them where timings are noise.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The kernel interface a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backend {
    /// IPVS: generic netlink and `/proc/net/ip_vs`.
    Ipvs,
    /// ipset over netfilter netlink.
    Ipset,
    /// rtnetlink: kube-ipvs0 and the node's addresses.
    Link,
    /// ctnetlink: conntrack cleanup.
    Conntrack,
    /// nf_tables over netfilter netlink (other modes' leftovers).
    Nftables,
    /// x_tables `getsockopt` (the legacy tables read without `iptables-save`).
    Iptables,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 6] = [
        Backend::Ipvs,
        Backend::Ipset,
        Backend::Link,
        Backend::Conntrack,
        Backend::Nftables,
        Backend::Iptables,
    ];

    /// The metrics' `backend` label.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Ipvs => "ipvs",
            Backend::Ipset => "ipset",
            Backend::Link => "link",
            Backend::Conntrack => "conntrack",
            Backend::Nftables => "nftables",
            Backend::Iptables => "iptables",
        }
    }
}

/// A kind of system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Call {
    /// A netlink datagram sent.
    Send,
    /// A netlink datagram received.
    Recv,
    /// A `read` of a kernel text file.
    Read,
    /// A `getsockopt` that reads kernel state.
    Getsockopt,
}

impl Call {
    /// Every kind.
    pub const ALL: [Call; 4] = [Call::Send, Call::Recv, Call::Read, Call::Getsockopt];

    /// The metrics' `call` label.
    pub fn label(self) -> &'static str {
        match self {
            Call::Send => "send",
            Call::Recv => "recv",
            Call::Read => "read",
            Call::Getsockopt => "getsockopt",
        }
    }
}

/// Which way bytes or messages went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// From the daemon to the kernel.
    Out,
    /// From the kernel to the daemon.
    In,
}

impl Direction {
    /// Both directions.
    pub const ALL: [Direction; 2] = [Direction::Out, Direction::In];

    /// The metrics' `direction` label.
    pub fn label(self) -> &'static str {
        match self {
            Direction::Out => "out",
            Direction::In => "in",
        }
    }
}

/// The programs whose starts are counted by name (the `-legacy` / `-nft` variants count as the plain
/// name); any other counts as `other`.
pub const PROGRAMS: [&str; 9] = [
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
    "ipset",
    "modprobe",
    "other",
];

const BACKENDS: usize = Backend::ALL.len();
const CALLS: usize = Call::ALL.len();

/// One backend's counters.
struct Cells {
    calls: [AtomicU64; CALLS],
    bytes: [AtomicU64; 2],
    messages: [AtomicU64; 2],
}

impl Cells {
    const fn new() -> Cells {
        Cells {
            calls: [const { AtomicU64::new(0) }; CALLS],
            bytes: [const { AtomicU64::new(0) }; 2],
            messages: [const { AtomicU64::new(0) }; 2],
        }
    }
}

static CELLS: [Cells; BACKENDS] = [const { Cells::new() }; BACKENDS];
static PROCESSES: [AtomicU64; PROGRAMS.len()] = [const { AtomicU64::new(0) }; PROGRAMS.len()];

fn add(cell: &AtomicU64, n: usize) {
    cell.fetch_add(n as u64, Relaxed);
}

/// Counts one system call of `backend` and the bytes it moved each way.
pub fn call(backend: Backend, call: Call, bytes_out: usize, bytes_in: usize) {
    let c = &CELLS[backend as usize];
    add(&c.calls[call as usize], 1);
    add(&c.bytes[Direction::Out as usize], bytes_out);
    add(&c.bytes[Direction::In as usize], bytes_in);
}

/// Counts `n` netlink messages of `backend` going `direction`.
pub fn messages(backend: Backend, direction: Direction, n: usize) {
    add(&CELLS[backend as usize].messages[direction as usize], n);
}

/// The [`PROGRAMS`] index `program` (a name or a path) counts under.
fn program_index(program: &str) -> usize {
    let name = program.rsplit('/').next().unwrap_or(program);
    let plain = name.replacen("-legacy", "", 1).replacen("-nft", "", 1);
    let other = PROGRAMS.len() - 1;
    PROGRAMS[..other]
        .iter()
        .position(|p| *p == plain)
        .unwrap_or(other)
}

/// Counts one process started.
pub fn process(program: &str) {
    add(&PROCESSES[program_index(program)], 1);
}

/// The counts at one moment (or, from [`IoCounts::since`], between two).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoCounts {
    calls: [[u64; CALLS]; BACKENDS],
    bytes: [[u64; 2]; BACKENDS],
    messages: [[u64; 2]; BACKENDS],
    processes: [u64; PROGRAMS.len()],
}

impl IoCounts {
    /// The counts since the process started.
    pub fn now() -> IoCounts {
        let mut out = IoCounts::default();
        for (b, c) in CELLS.iter().enumerate() {
            out.calls[b] = c.calls.each_ref().map(|a| a.load(Relaxed));
            out.bytes[b] = c.bytes.each_ref().map(|a| a.load(Relaxed));
            out.messages[b] = c.messages.each_ref().map(|a| a.load(Relaxed));
        }
        out.processes = PROCESSES.each_ref().map(|a| a.load(Relaxed));
        out
    }

    /// What was counted between `earlier` and these counts.
    pub fn since(&self, earlier: &IoCounts) -> IoCounts {
        let sub = |a: u64, b: u64| a.saturating_sub(b);
        let mut out = self.clone();
        for b in 0..BACKENDS {
            for c in 0..CALLS {
                out.calls[b][c] = sub(self.calls[b][c], earlier.calls[b][c]);
            }
            for d in 0..2 {
                out.bytes[b][d] = sub(self.bytes[b][d], earlier.bytes[b][d]);
                out.messages[b][d] = sub(self.messages[b][d], earlier.messages[b][d]);
            }
        }
        for (p, e) in out.processes.iter_mut().zip(earlier.processes) {
            *p = p.saturating_sub(e);
        }
        out
    }

    /// System calls of one kind to one backend.
    pub fn calls(&self, backend: Backend, call: Call) -> u64 {
        self.calls[backend as usize][call as usize]
    }

    /// Bytes moved one way through one backend.
    pub fn bytes(&self, backend: Backend, direction: Direction) -> u64 {
        self.bytes[backend as usize][direction as usize]
    }

    /// Netlink messages of one backend going one way.
    pub fn messages(&self, backend: Backend, direction: Direction) -> u64 {
        self.messages[backend as usize][direction as usize]
    }

    /// Processes started of one of [`PROGRAMS`].
    pub fn processes(&self, program: &str) -> u64 {
        PROGRAMS
            .iter()
            .position(|p| *p == program)
            .map_or(0, |i| self.processes[i])
    }
}

/// `key=value` pairs separated by spaces, only the non-zero ones (`ipvs.recv=41 ipvs.bytes_in=2712345
/// ... proc.iptables-restore=1`), or `none`: one token per count, for logs that benchmarks parse.
impl std::fmt::Display for IoCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        let mut put = |f: &mut std::fmt::Formatter<'_>, key: std::fmt::Arguments<'_>, v: u64| {
            if v == 0 {
                return Ok(());
            }
            let sep = if first { "" } else { " " };
            first = false;
            write!(f, "{sep}{key}={v}")
        };
        for b in Backend::ALL {
            let l = b.label();
            for c in Call::ALL {
                put(f, format_args!("{l}.{}", c.label()), self.calls(b, c))?;
            }
            for d in Direction::ALL {
                let dl = d.label();
                put(f, format_args!("{l}.msgs_{dl}"), self.messages(b, d))?;
                put(f, format_args!("{l}.bytes_{dl}"), self.bytes(b, d))?;
            }
        }
        for (p, n) in PROGRAMS.iter().zip(self.processes) {
            put(f, format_args!("proc.{p}"), n)?;
        }
        if first {
            write!(f, "none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_backend_call_direction_and_program() {
        // Other tests in this process count too: compare deltas of what this test adds.
        let before = IoCounts::now();
        call(Backend::Nftables, Call::Send, 100, 0);
        call(Backend::Nftables, Call::Recv, 0, 300);
        messages(Backend::Nftables, Direction::Out, 2);
        process("/usr/sbin/ip6tables-legacy-save");
        process("no-such-tool");
        let d = IoCounts::now().since(&before);
        assert!(d.calls(Backend::Nftables, Call::Send) >= 1);
        assert!(d.calls(Backend::Nftables, Call::Recv) >= 1);
        assert!(d.bytes(Backend::Nftables, Direction::Out) >= 100);
        assert!(d.bytes(Backend::Nftables, Direction::In) >= 300);
        assert!(d.messages(Backend::Nftables, Direction::Out) >= 2);
        assert!(d.processes("ip6tables-save") >= 1);
        assert!(d.processes("other") >= 1);
        assert_eq!(program_index("iptables-nft-restore"), 2);
        assert_eq!(program_index("modprobe"), 7);
        let text = d.to_string();
        assert!(text.contains("nftables.send="), "{text}");
        assert!(text.contains("proc.ip6tables-save="), "{text}");
        assert_eq!(IoCounts::default().to_string(), "none");
        assert_eq!(d.since(&d), IoCounts::default());
    }
}
