//! iptables and ip6tables through their command-line tools.
//!
//! By default the `iptables`, `iptables-save` and `iptables-restore` found on PATH are used (legacy or
//! nft, whichever the system or image provides, as upstream does); [`IptablesCli::with_backend`] forces
//! one, and [`detect_backend`] tells which one the node already uses.

use super::exec::{self, Output};
use super::{Iptables, annotate_restore_error};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use std::collections::BTreeMap;
use std::fmt;

/// Seconds to wait for the xtables lock (`-w`).
pub const WAIT_SECONDS: &str = "5";

/// An iptables backend with its own binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Legacy,
    Nft,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Legacy => "legacy",
            Backend::Nft => "nft",
        })
    }
}

/// The three tools of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub cmd: String,
    pub save: String,
    pub restore: String,
}

impl Binaries {
    /// `iptables`, `iptables-save`, `iptables-restore` (or ip6tables) from PATH.
    pub fn default_for(family: IpFamily) -> Binaries {
        Self::named(base(family), "")
    }

    /// The binaries of a backend: `iptables-legacy`, `iptables-legacy-save`, ... or the `-nft` ones.
    pub fn for_backend(family: IpFamily, backend: Backend) -> Binaries {
        Self::named(base(family), &format!("-{backend}"))
    }

    fn named(base: &str, suffix: &str) -> Binaries {
        Binaries {
            cmd: format!("{base}{suffix}"),
            save: format!("{base}{suffix}-save"),
            restore: format!("{base}{suffix}-restore"),
        }
    }
}

fn base(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables",
        IpFamily::V6 => "ip6tables",
    }
}

/// An iptables version `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IptablesVersion(pub u32, pub u32, pub u32);

impl IptablesVersion {
    /// First version whose MASQUERADE has `--random-fully` and whose iptables-restore takes `-w`.
    pub const RANDOM_FULLY: IptablesVersion = IptablesVersion(1, 6, 2);

    /// Parses `iptables v1.8.9 (legacy)` / `iptables v1.6.1`.
    pub fn parse(text: &str) -> Option<IptablesVersion> {
        let word = text.split_whitespace().find(|w| w.starts_with('v'))?;
        let mut parts = word[1..].split('.').map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u32>()
                .ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(IptablesVersion(major, minor, patch))
    }
}

/// [`Iptables`] driving the iptables tools.
#[derive(Debug, Clone)]
pub struct IptablesCli {
    v4: Binaries,
    v6: Binaries,
    version: Option<Option<IptablesVersion>>,
    /// Blob size of each table last read (legacy only).
    hints: super::fingerprint::SizeHints,
}

impl Default for IptablesCli {
    fn default() -> Self {
        Self::new()
    }
}

impl IptablesCli {
    /// The tools on PATH (whichever backend they are).
    pub fn new() -> Self {
        Self::with_binaries(
            Binaries::default_for(IpFamily::V4),
            Binaries::default_for(IpFamily::V6),
        )
    }

    /// A forced backend (`iptables-legacy*` or `iptables-nft*`).
    pub fn with_backend(backend: Backend) -> Self {
        Self::with_binaries(
            Binaries::for_backend(IpFamily::V4, backend),
            Binaries::for_backend(IpFamily::V6, backend),
        )
    }

    /// Explicit binaries per family.
    pub fn with_binaries(v4: Binaries, v6: Binaries) -> Self {
        IptablesCli {
            v4,
            v6,
            version: None,
            hints: Default::default(),
        }
    }

    /// The binaries used for a family.
    pub fn binaries(&self, family: IpFamily) -> &Binaries {
        match family {
            IpFamily::V4 => &self.v4,
            IpFamily::V6 => &self.v6,
        }
    }

    /// `iptables --version`, cached; None if it cannot be run or parsed.
    pub fn version(&mut self) -> Option<IptablesVersion> {
        if let Some(v) = self.version {
            return v;
        }
        let v = exec::run(&self.v4.cmd, &["--version"], None)
            .ok()
            .filter(Output::success)
            .and_then(|o| IptablesVersion::parse(&o.stdout));
        self.version = Some(v);
        v
    }

    /// The legacy tables' blobs ([`super::fingerprint::read`]); None for other tools.
    fn read_blobs(
        &mut self,
        family: IpFamily,
        tables: &[&str],
        decode: bool,
    ) -> Option<super::TablesView> {
        if !self.binaries(family).save.contains("-legacy") {
            return None;
        }
        super::fingerprint::read(family, tables, &mut self.hints, decode)
    }

    fn run_cmd(
        &mut self,
        family: IpFamily,
        table: &str,
        op: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<Output> {
        if matches!(op, "-N" | "-I" | "-A" | "-D" | "-F" | "-X") {
            self.hints.written(family);
        }
        let mut all: Vec<&str> = vec!["-w", WAIT_SECONDS, "-t", table, op, chain];
        all.extend(args.iter().map(String::as_str));
        exec::run(&self.binaries(family).cmd, &all, None)
    }
}

/// A missing chain or rule (exit status 1 of `-C`, `-D`, `-F`, `-X`).
fn is_missing(out: &Output) -> bool {
    out.code == Some(1)
        && (out.stderr.contains("No chain/target/match")
            || out.stderr.contains("does a matching rule exist")
            || out.stderr.contains("does not exist")
            || out.stderr.trim().is_empty())
}

impl Iptables for IptablesCli {
    fn save(&mut self, family: IpFamily, table: &str) -> KernelResult<String> {
        let save = self.binaries(family).save.clone();
        exec::run(&save, &["-t", table], None)?.ok()
    }

    fn save_tables(
        &mut self,
        family: IpFamily,
        tables: &[&str],
    ) -> KernelResult<BTreeMap<String, String>> {
        if tables.len() < 2 {
            return super::save_each(self, family, tables);
        }
        // One `iptables-save` prints every table the kernel has loaded; a table not in it is read alone
        // (which loads it, as `-t` does).
        let save = self.binaries(family).save.clone();
        let all = exec::run(&save, &[], None)?.ok()?;
        let mut out = super::rules::split_tables(&all);
        out.retain(|name, _| tables.contains(&name.as_str()));
        for table in tables {
            if !out.contains_key(*table) {
                out.insert(table.to_string(), self.save(family, table)?);
            }
        }
        Ok(out)
    }

    fn restore(&mut self, family: IpFamily, payload: &str) -> KernelResult<()> {
        let restore = self.binaries(family).restore.clone();
        let mut args = vec!["--noflush", "--counters"];
        if self
            .version()
            .is_none_or(|v| v >= IptablesVersion::RANDOM_FULLY)
        {
            args.extend(["-w", WAIT_SECONDS]);
        }
        self.hints.written(family);
        let out = exec::run(&restore, &args, Some(payload))?;
        if out.success() {
            return Ok(());
        }
        Err(out.error_with(annotate_restore_error(&out.stderr, payload)))
    }

    fn ensure_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<()> {
        let out = self.run_cmd(family, table, "-N", chain, &[])?;
        if out.success() || out.stderr.contains("already exists") {
            return Ok(());
        }
        Err(out.error())
    }

    fn ensure_rule_at(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        position: usize,
        args: &[String],
    ) -> KernelResult<bool> {
        let check = self.run_cmd(family, table, "-C", chain, args)?;
        if check.success() {
            return Ok(false);
        }
        if check.code != Some(1) {
            return Err(check.error());
        }
        let mut at = vec![position.max(1).to_string()];
        at.extend_from_slice(args);
        self.run_cmd(family, table, "-I", chain, &at)?.ok()?;
        Ok(true)
    }

    fn delete_rule(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<bool> {
        let out = self.run_cmd(family, table, "-D", chain, args)?;
        if out.success() {
            return Ok(true);
        }
        if is_missing(&out) {
            return Ok(false);
        }
        Err(out.error())
    }

    fn delete_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<bool> {
        if super::rules::builtin_chains(table).is_some_and(|b| b.contains(&chain)) {
            return Err(KernelError::Invalid(format!(
                "refusing to delete built-in chain {chain} of table {table}"
            )));
        }
        // Refuse before flushing when other rules still jump to the chain, so a failed delete does
        // not leave it emptied.
        let saved = self.save(family, table)?;
        if !saved.lines().any(|l| {
            l.strip_prefix(':')
                .and_then(|d| d.split_whitespace().next())
                == Some(chain)
        }) {
            return Ok(false);
        }
        let referrers = referrers(&saved, chain);
        if !referrers.is_empty() {
            return Err(KernelError::Command {
                command: format!("{} -w -t {table} -X {chain}", self.binaries(family).cmd),
                status: "not run".into(),
                stderr: format!(
                    "chain {chain} is still referenced by: {}",
                    referrers.join("; ")
                ),
            });
        }
        let flush = self.run_cmd(family, table, "-F", chain, &[])?;
        if !flush.success() {
            if is_missing(&flush) {
                return Ok(false);
            }
            return Err(flush.error());
        }
        self.run_cmd(family, table, "-X", chain, &[])?.ok()?;
        Ok(true)
    }

    /// Legacy tools only: their tables are the kernel's x_tables, readable with `getsockopt` (nft tools
    /// and tools of unknown backend have none).
    fn inspect(&mut self, family: IpFamily, tables: &[&str]) -> Option<super::TablesView> {
        self.read_blobs(family, tables, true)
    }

    fn fingerprint(&mut self, family: IpFamily, tables: &[&str]) -> Option<u64> {
        self.read_blobs(family, tables, false)
            .map(|v| v.fingerprint)
    }

    fn supports_random_fully(&mut self) -> bool {
        self.version()
            .is_some_and(|v| v >= IptablesVersion::RANDOM_FULLY)
    }
}

/// Rules (as saved) in other chains of a `*-save` text that jump or go to `chain`.
pub fn referrers(saved: &str, chain: &str) -> Vec<String> {
    saved
        .lines()
        .filter(|l| {
            let Some(rest) = l.strip_prefix("-A ") else {
                return false;
            };
            if rest.split_whitespace().next() == Some(chain) {
                return false;
            }
            super::rules::tokenize(rest)
                .ok()
                .is_some_and(|w| super::rules::target(&w) == Some(chain))
        })
        .map(str::to_string)
        .collect()
}

/// Which backend a node uses and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendDetection {
    pub backend: Backend,
    /// Rules (`-A` lines) in `iptables-legacy-save` + `ip6tables-legacy-save`; None if they failed.
    pub legacy_rules: Option<usize>,
    /// Same for the nft tools.
    pub nft_rules: Option<usize>,
    /// Human-readable reason, for the log.
    pub reason: String,
}

/// Rules (and Kubernetes chains) in one backend's save output for both families.
fn backend_state(backend: Backend) -> (Option<usize>, bool) {
    let mut rules = None;
    let mut hint = false;
    for family in [IpFamily::V4, IpFamily::V6] {
        let save = Binaries::for_backend(family, backend).save;
        if let Ok(out) = exec::run(&save, &[], None)
            && out.success()
        {
            let n = out.stdout.lines().filter(|l| l.starts_with("-A ")).count();
            *rules.get_or_insert(0) += n;
            hint |= out.stdout.lines().any(|l| {
                l.starts_with(":KUBE-IPTABLES-HINT") || l.starts_with(":KUBE-KUBELET-CANARY")
            });
        }
    }
    (rules, hint)
}

/// Decides between the legacy and nft backends from what each already holds (like upstream's
/// iptables-wrapper): a Kubernetes hint chain (`KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY`) in only
/// one backend wins; otherwise the backend with more rules; nft when neither has any. Logs the choice.
pub fn detect_backend() -> BackendDetection {
    let (legacy_rules, legacy_hint) = backend_state(Backend::Legacy);
    let (nft_rules, nft_hint) = backend_state(Backend::Nft);
    let d = decide_backend(legacy_rules, legacy_hint, nft_rules, nft_hint);
    tracing::info!(backend = %d.backend, legacyRules = ?legacy_rules, nftRules = ?nft_rules, reason = %d.reason, "Detected iptables backend");
    d
}

/// The decision of [`detect_backend`] from the counts (pure).
pub fn decide_backend(
    legacy_rules: Option<usize>,
    legacy_hint: bool,
    nft_rules: Option<usize>,
    nft_hint: bool,
) -> BackendDetection {
    let (backend, reason) = match (legacy_rules, nft_rules) {
        _ if legacy_hint && !nft_hint => {
            (Backend::Legacy, "kubelet hint chain in legacy".to_string())
        }
        _ if nft_hint && !legacy_hint => (Backend::Nft, "kubelet hint chain in nft".to_string()),
        (Some(_), None) => (Backend::Legacy, "only the legacy tools work".to_string()),
        (None, Some(_)) => (Backend::Nft, "only the nft tools work".to_string()),
        (Some(l), Some(n)) if l > n => (
            Backend::Legacy,
            format!("legacy has more rules ({l} > {n})"),
        ),
        (Some(l), Some(n)) if n > 0 => (
            Backend::Nft,
            format!("nft has at least as many rules ({n} >= {l})"),
        ),
        _ => (
            Backend::Nft,
            "no rules in either backend; defaulting to nft".to_string(),
        ),
    };
    BackendDetection {
        backend,
        legacy_rules,
        nft_rules,
        reason,
    }
}

impl From<BackendDetection> for IptablesCli {
    fn from(d: BackendDetection) -> Self {
        IptablesCli::with_backend(d.backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(
            IptablesVersion::parse("iptables v1.8.9 (legacy)\n"),
            Some(IptablesVersion(1, 8, 9))
        );
        assert_eq!(
            IptablesVersion::parse("iptables v1.6.1"),
            Some(IptablesVersion(1, 6, 1))
        );
        assert!(IptablesVersion::parse("iptables v1.6.1").unwrap() < IptablesVersion::RANDOM_FULLY);
        assert!(
            IptablesVersion::parse("iptables v1.6.2").unwrap() >= IptablesVersion::RANDOM_FULLY
        );
        assert_eq!(IptablesVersion::parse("garbage"), None);
    }

    #[test]
    fn binaries_per_backend() {
        let b = Binaries::for_backend(IpFamily::V6, Backend::Legacy);
        assert_eq!(b.cmd, "ip6tables-legacy");
        assert_eq!(b.save, "ip6tables-legacy-save");
        assert_eq!(b.restore, "ip6tables-legacy-restore");
        assert_eq!(
            Binaries::for_backend(IpFamily::V4, Backend::Nft).restore,
            "iptables-nft-restore"
        );
        assert_eq!(Binaries::default_for(IpFamily::V4).save, "iptables-save");
    }

    #[test]
    fn finds_referrers() {
        let saved = "*nat\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-NODE-PORT - [0:0]\n\
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT\n\
-A KUBE-SERVICES -j KUBE-SERVICES-X\nCOMMIT\n";
        assert_eq!(
            referrers(saved, "KUBE-SERVICES"),
            vec!["-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"]
        );
        assert_eq!(referrers(saved, "KUBE-NODE-PORT").len(), 1);
        assert!(referrers(saved, "KUBE-MARK-MASQ").is_empty());
    }

    #[test]
    fn backend_decision() {
        assert_eq!(
            decide_backend(Some(30), false, Some(2), false).backend,
            Backend::Legacy
        );
        assert_eq!(
            decide_backend(Some(3), false, Some(20), false).backend,
            Backend::Nft
        );
        assert_eq!(
            decide_backend(Some(0), false, Some(0), false).backend,
            Backend::Nft
        );
        assert_eq!(
            decide_backend(Some(0), false, None, false).backend,
            Backend::Legacy
        );
        assert_eq!(
            decide_backend(Some(1), true, Some(50), false).backend,
            Backend::Legacy
        );
        assert_eq!(
            decide_backend(None, false, None, false).backend,
            Backend::Nft
        );
    }
}
