//! iptables through `iptables-save` / `iptables-restore` (and the ip6tables ones).

use crate::cluster::model::IpFamily;
use crate::kernel::KernelResult;

/// The iptables (or ip6tables) tables of the kernel.
pub trait Iptables: Send {
    /// `iptables-save -t <table>` output.
    fn save(&mut self, family: IpFamily, table: &str) -> KernelResult<String>;
    /// `iptables-restore --noflush --counters -w` of a payload (all tables in it).
    fn restore(&mut self, family: IpFamily, payload: &str) -> KernelResult<()>;
    /// Creates a chain if it does not exist.
    fn ensure_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<()>;
    /// Inserts `-I <chain> <args>` at the top unless an identical rule exists (`-C`); true if inserted.
    fn ensure_rule_first(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<bool>;
    /// Deletes one rule (`-D`); Ok(false) if it was not there.
    fn delete_rule(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<bool>;
    /// Flushes and deletes a chain; Ok(false) if it was not there.
    fn delete_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<bool>;
    /// Whether MASQUERADE supports `--random-fully`.
    fn supports_random_fully(&mut self) -> bool;
}
