//! Kernel parameters under /proc/sys.

use crate::kernel::KernelResult;

/// Reads and writes sysctls by slash path (e.g. `net/ipv4/vs/conntrack`).
pub trait Sysctl: Send {
    fn get(&mut self, path: &str) -> KernelResult<i64>;
    fn set(&mut self, path: &str, value: i64) -> KernelResult<()>;
    /// Writes `value` only when the current value differs; true if it wrote.
    fn ensure(&mut self, path: &str, value: i64) -> KernelResult<bool> {
        if self.get(path)? == value {
            return Ok(false);
        }
        self.set(path, value)?;
        Ok(true)
    }
}

#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod procfs;
pub mod version;

pub use version::{KernelVersion, wants_conn_reuse_mode_zero};
