//! ipsets through the `ipset` tool: `create -exist`, one `ipset save`, one `ipset restore -exist` per
//! batch, `destroy`, `swap`.
//!
//! Entries are validated against their set's type and family before anything is written; invalid ones
//! are reported in [`ApplyReport::rejected`]. When `ipset restore` stops at a line (a set vanished, a
//! set is full), the kernel has applied none of the batch (ipset batches lines into netlink messages);
//! that line (and, for a vanished set, every line of that set; for a full set, the following adds to
//! it) is reported as rejected with ipset's message and the batch is sent again without them, so one
//! bad line cannot block the rest.

use super::save::{SavedSets, parse_list_terse, parse_save};
use super::types::SetTypes;
use super::{ApplyReport, IpSetOp, IpSetSpec, IpSets};
use crate::kernel::iptables::exec;
use crate::kernel::{KernelError, KernelResult};

/// How many times one batch is re-sent without a failing line before giving up.
pub const MAX_RESTORE_RETRIES: usize = 16;

/// [`IpSets`] driving the `ipset` binary.
#[derive(Debug, Clone)]
pub struct IpsetCli {
    binary: String,
    /// Sets seen (created, saved or listed).
    types: SetTypes,
}

impl Default for IpsetCli {
    fn default() -> Self {
        Self::new()
    }
}

/// The line number in `Error in line N:` of an `ipset restore` error.
pub fn restore_error_line(stderr: &str) -> Option<usize> {
    let marker = "Error in line ";
    let i = stderr.find(marker)?;
    stderr[i + marker.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

impl IpsetCli {
    /// Uses `ipset` from PATH.
    pub fn new() -> Self {
        Self::with_binary("ipset")
    }

    /// Uses the given `ipset` binary.
    pub fn with_binary(binary: impl Into<String>) -> Self {
        IpsetCli {
            binary: binary.into(),
            types: SetTypes::default(),
        }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> KernelResult<exec::Output> {
        exec::run(&self.binary, args, stdin)
    }

    /// Learns the types of every existing set (`ipset list -t`).
    fn refresh_types(&mut self) -> KernelResult<()> {
        let text = self.run(&["list", "-t"], None)?.ok()?;
        for (name, h) in parse_list_terse(&text) {
            self.types.learn(&name, &h.type_name, h.family);
        }
        Ok(())
    }

    /// The restore script for ops, and which op each line carries.
    fn validate(&self, ops: &[IpSetOp], report: &mut ApplyReport) -> Vec<(String, IpSetOp)> {
        let mut lines = Vec::with_capacity(ops.len());
        for op in ops {
            let (verb, set) = match op {
                IpSetOp::Add { set, .. } => ("add", set),
                IpSetOp::Del { set, .. } => ("del", set),
            };
            match self.types.check(op) {
                Ok(entry) => lines.push((format!("{verb} {set} {entry}"), op.clone())),
                Err(why) => report.rejected.push((op.clone(), why.to_string())),
            }
        }
        lines
    }
}

impl IpSets for IpsetCli {
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()> {
        let line = spec.create_line();
        let mut args: Vec<&str> = line.split_whitespace().collect();
        args.push("-exist");
        self.run(&args, None)?.ok()?;
        self.types.learn_spec(spec);
        Ok(())
    }

    fn create_all(&mut self, specs: &[IpSetSpec]) -> KernelResult<()> {
        if specs.is_empty() {
            return Ok(());
        }
        let mut script = String::new();
        for spec in specs {
            script.push_str(&spec.create_line());
            script.push('\n');
        }
        self.run(&["restore", "-exist"], Some(&script))?.ok()?;
        for spec in specs {
            self.types.learn_spec(spec);
        }
        Ok(())
    }

    fn dump(&mut self) -> KernelResult<SavedSets> {
        let text = self.run(&["save"], None)?.ok()?;
        let saved = parse_save(&text);
        for (name, h) in &saved.headers {
            self.types.learn(name, &h.type_name, h.family);
        }
        Ok(saved)
    }

    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport> {
        let mut report = ApplyReport::default();
        if self.types.any_unknown(ops) {
            self.refresh_types()?;
        }
        let mut lines = self.validate(ops, &mut report);
        let mut retries = 0;
        while !lines.is_empty() {
            let mut script = String::with_capacity(lines.len() * 40);
            for (l, _) in &lines {
                script.push_str(l);
                script.push('\n');
            }
            let out = self.run(&["restore", "-exist"], Some(&script))?;
            if out.success() {
                report.applied += lines.len();
                break;
            }
            let stderr = out.stderr.trim().to_string();
            let bad = restore_error_line(&stderr)
                .filter(|n| *n >= 1 && *n <= lines.len() && retries < MAX_RESTORE_RETRIES);
            let Some(n) = bad else {
                return Err(out.error_with(format!(
                    "{stderr}{}",
                    restore_error_line(&stderr)
                        .and_then(|n| lines.get(n.wrapping_sub(1)))
                        .map(|(l, _)| format!("\n(restore line: {l})"))
                        .unwrap_or_default()
                )));
            };
            let (line, op) = lines.remove(n - 1);
            tracing::warn!(line = %line, error = %stderr, "ipset restore refused a line; retrying without it");
            let (IpSetOp::Add { set, .. } | IpSetOp::Del { set, .. }) = &op;
            let set = set.clone();
            if stderr.contains("does not exist") {
                // The set vanished: every line for it would fail the same way.
                self.types.forget(&set);
                let (gone, keep): (Vec<_>, Vec<_>) = lines.into_iter().partition(|(_, o)| {
                    matches!(o, IpSetOp::Add { set: s, .. } | IpSetOp::Del { set: s, .. } if *s == set)
                });
                lines = keep;
                report
                    .rejected
                    .extend(gone.into_iter().map(|(_, o)| (o, stderr.clone())));
            } else if stderr.contains("is full") {
                // No more room: the following adds to that set fail the same way.
                let mut i = 0;
                let mut full = Vec::new();
                lines.retain(|(_, o)| {
                    let drop = i >= n - 1 && matches!(o, IpSetOp::Add { set: s, .. } if *s == set);
                    i += 1;
                    if drop {
                        full.push(o.clone());
                    }
                    !drop
                });
                report
                    .rejected
                    .extend(full.into_iter().map(|o| (o, stderr.clone())));
            }
            report.rejected.push((op, stderr));
            retries += 1;
        }
        Ok(report)
    }

    fn destroy(&mut self, name: &str) -> KernelResult<()> {
        let out = self.run(&["destroy", name], None)?;
        if out.success() {
            self.types.forget(name);
            return Ok(());
        }
        if out.stderr.contains("does not exist") {
            self.types.forget(name);
            return Err(KernelError::NotFound(format!("ipset {name}")));
        }
        Err(out.error())
    }

    fn swap(&mut self, a: &str, b: &str) -> KernelResult<()> {
        self.run(&["swap", a, b], None)?.ok()?;
        self.types.swap(a, b);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_error_line_parses() {
        assert_eq!(
            restore_error_line(
                "ipset v7.17: Error in line 3: The set with the given name does not exist"
            ),
            Some(3)
        );
        assert_eq!(restore_error_line("ipset v7.17: oops"), None);
    }

    #[test]
    fn validate_rejects_unknown_and_bad_entries() {
        let mut cli = IpsetCli::new();
        cli.types.learn(
            "KUBE-CLUSTER-IP",
            "hash:ip,port",
            Some(crate::net::IpFamily::V4),
        );
        cli.types.learn("KUBE-NODE-PORT-TCP", "bitmap:port", None);
        cli.types.learn("F", "hash:net", None);
        let ops = vec![
            IpSetOp::Add {
                set: "KUBE-CLUSTER-IP".into(),
                entry: "10.96.0.1,tcp:443".into(),
            },
            IpSetOp::Add {
                set: "KUBE-CLUSTER-IP".into(),
                entry: "10.96.0.1".into(),
            },
            IpSetOp::Del {
                set: "KUBE-NODE-PORT-TCP".into(),
                entry: "30080".into(),
            },
            IpSetOp::Add {
                set: "F".into(),
                entry: "10.0.0.0/8".into(),
            },
            IpSetOp::Add {
                set: "NOPE".into(),
                entry: "1.1.1.1".into(),
            },
        ];
        let mut report = ApplyReport::default();
        let lines = cli.validate(&ops, &mut report);
        let text: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            text,
            vec![
                "add KUBE-CLUSTER-IP 10.96.0.1,tcp:443",
                "del KUBE-NODE-PORT-TCP 30080"
            ]
        );
        assert_eq!(report.rejected.len(), 3);
    }
}
