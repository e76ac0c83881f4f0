//! Kernel parameters under /proc/sys.

use crate::kernel::KernelResult;

/// Reads and writes sysctls by slash path (e.g. `net/ipv4/vs/conntrack`).
pub trait Sysctl: Send {
    fn get(&mut self, path: &str) -> KernelResult<i64>;
    fn set(&mut self, path: &str, value: i64) -> KernelResult<()>;
}
