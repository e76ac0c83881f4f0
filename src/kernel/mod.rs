//! Narrow backends to the kernel: each a trait with a real implementation and an in-memory fake.

pub mod conntrack;
pub mod io_counts;
pub mod ipset;
pub mod iptables;
pub mod ipvs;
pub mod link;
pub mod modules;
pub mod netlink;
pub mod nftables;
pub mod nlattr;
pub mod sysctl;

use thiserror::Error;

/// An error from a kernel backend, typed where callers act on the kind.
#[derive(Debug, Error)]
pub enum KernelError {
    /// The object already exists (EEXIST).
    #[error("already exists: {0}")]
    Exists(String),
    /// The object does not exist (ENOENT / ESRCH).
    #[error("not found: {0}")]
    NotFound(String),
    /// The kernel does not support what was asked (missing module, address family, ...).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An IPVS service write named a scheduler the kernel does not have (ENOENT: module missing).
    #[error("IPVS scheduler {scheduler:?} not found: {detail}")]
    SchedulerNotFound { scheduler: String, detail: String },
    /// Any other errno from netlink, with the operation and the kernel's message.
    #[error("{op}: errno {errno}: {message}")]
    Errno {
        op: String,
        errno: i32,
        message: String,
    },
    /// An external command (ipset, iptables-restore) failed.
    #[error("{command} exited with {status}: {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    /// Malformed input or kernel answer.
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Malformed input or kernel answer, with the backend's typed error as the cause.
    #[error("invalid: {0}")]
    InvalidWith(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Result of a kernel backend call.
pub type KernelResult<T> = Result<T, KernelError>;
