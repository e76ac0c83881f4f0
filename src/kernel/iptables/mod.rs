//! iptables through `iptables-save` / `iptables-restore` (and the ip6tables ones).

use crate::kernel::KernelResult;
use crate::net::IpFamily;

/// The iptables (or ip6tables) tables of the kernel.
pub trait Iptables: Send {
    /// `iptables-save -t <table>` output.
    fn save(&mut self, family: IpFamily, table: &str) -> KernelResult<String>;
    /// `iptables-save` output of several tables, by table name (one process where the tool allows it;
    /// by default one [`Iptables::save`] per table).
    fn save_tables(
        &mut self,
        family: IpFamily,
        tables: &[&str],
    ) -> KernelResult<std::collections::BTreeMap<String, String>> {
        save_each(self, family, tables)
    }
    /// `tables` as the kernel holds them, read without starting a process: their fingerprint, their
    /// user-defined chains and, where the backend can decode them, their rules ([`TablesView`]). None
    /// where the backend cannot (the default, and the nft backend): callers then read the tables with a
    /// save.
    fn inspect(&mut self, _family: IpFamily, _tables: &[&str]) -> Option<TablesView> {
        None
    }
    /// The fingerprint of [`Iptables::inspect`] alone (no rules decoded, so possibly fewer kernel calls);
    /// equal values mean unchanged tables.
    fn fingerprint(&mut self, family: IpFamily, tables: &[&str]) -> Option<u64> {
        self.inspect(family, tables).map(|v| v.fingerprint)
    }
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
    ) -> KernelResult<bool> {
        self.ensure_rule_at(family, table, chain, 1, args)
    }
    /// Inserts `-I <chain> <position> <args>` (1-based) unless an identical rule exists (`-C`); true if
    /// inserted.
    fn ensure_rule_at(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        position: usize,
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

/// Some tables as one cheap read shows them ([`Iptables::inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesView {
    /// A hash of the tables' rules and their order (not their counters): equal values mean unchanged
    /// tables.
    pub fingerprint: u64,
    /// Table → the names of its user-defined chains (built-in chains are not listed).
    pub chains: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Table → its rules decoded from the same read, as `iptables-save` prints them, when asked for
    /// ([`Iptables::inspect`]) and every table's layout was understood.
    pub decoded: Option<std::collections::BTreeMap<String, xt_decode::Decoded>>,
}

/// One [`Iptables::save`] per table, by table name.
fn save_each<I: Iptables + ?Sized>(
    ipt: &mut I,
    family: IpFamily,
    tables: &[&str],
) -> KernelResult<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for table in tables {
        out.insert(table.to_string(), ipt.save(family, table)?);
    }
    Ok(out)
}

pub mod cli;
pub mod exec;
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod fingerprint;
pub mod rules;
pub mod xt_decode;
pub mod xt_matches;

/// The payload line an `iptables-restore` error names (`Error occurred at line: N`, `line N failed`,
/// `COMMIT expected at line N`), 1-based.
pub fn failing_line(stderr: &str) -> Option<usize> {
    for marker in ["Error occurred at line: ", "line ", "at line "] {
        for (i, _) in stderr.match_indices(marker) {
            let digits: String = stderr[i + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse::<usize>() {
                return Some(n);
            }
        }
    }
    None
}

/// Appends the text of the payload line that `stderr` names, so the error shows the failing rule.
pub fn annotate_restore_error(stderr: &str, payload: &str) -> String {
    let stderr = stderr.trim_end();
    match failing_line(stderr) {
        Some(n) => match payload.lines().nth(n.wrapping_sub(1)) {
            Some(text) => format!("{stderr}\n(payload line {n}: {text})"),
            None => format!("{stderr}\n(payload line {n}: <end of payload>)"),
        },
        None => stderr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_failing_line() {
        assert_eq!(failing_line("iptables-restore: line 7 failed"), Some(7));
        assert_eq!(
            failing_line(
                "iptables-restore v1.8.9 (legacy): Couldn't load target `X'\nError occurred at line: 3\nTry"
            ),
            Some(3)
        );
        assert_eq!(
            failing_line("iptables-restore: COMMIT expected at line 9"),
            Some(9)
        );
        assert_eq!(failing_line("nothing"), None);
        let a = annotate_restore_error(
            "iptables-restore: line 2 failed\n",
            "*nat\n-A X -j Y\nCOMMIT\n",
        );
        assert!(a.ends_with("(payload line 2: -A X -j Y)"), "{a}");
    }
}
