//! The iptables payload and the jumps from built-in chains.

use super::drift::DriftKind;
use super::iptables_jumps::JumpPlacer;
use super::{Backends, FamilyInput, Reconciler};
use crate::kernel::iptables::{TablesView, rules};
use crate::net::IpFamily;
use crate::proxier::desired::JumpRule;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

impl Reconciler {
    /// Brings this family's chains to the payload and ensures the jumps from built-in chains. Returns
    /// whether IPVS services of this family may be programmed: false only when no payload was ever in place.
    ///
    /// When the payload changed, on a full sync, or while a jump is missing, the tables are read with one
    /// `iptables-save` (none when the backend's cheap read shows that none of our chains exist); when
    /// they already hold the payload and every jump (a no-op periodic sync, or a restart over rules a
    /// previous run wrote) nothing is written, and the backend's fingerprint of the tables is kept: later
    /// full syncs skip the save while the fingerprint is unchanged. Otherwise one `iptables-restore`
    /// writes the payload plus `-I` lines for the missing jumps: one process however many jumps are
    /// missing.
    pub(super) fn sync_iptables(
        &mut self,
        k: &mut Backends,
        f: &FamilyInput<'_>,
        full: bool,
        report: &mut SyncReport,
    ) -> bool {
        let start = Instant::now();
        let family = f.desired.family;
        let restore_failures = report.failures_of(FailureKind::IptablesRestore);
        let synced_before = self.baseline.contains(&family);
        let applied = self.applied.entry(family).or_default();
        let payload = &f.desired.iptables_payload;
        let changed = applied.iptables_payload.as_deref() != Some(payload.as_str());
        // A full sync with nothing new to write skips the save while the tables read as verified.
        let unchanged = full && !changed && applied.jumps_ok && still_verified(k, f, applied);
        if (full && !unchanged) || changed || !applied.jumps_ok {
            applied.tables_verified = None;
            // The payload parsed once: its tables, and its chains with their rules.
            let wanted = KernelTables::parse(&rules::split_tables(payload), family);
            let tables = tables_of(&wanted, f);
            let (before, read, one_read) = read_tables(k, f, &tables, &wanted);
            match read {
                Ok(kernel) => {
                    let (recheck, missing): (Vec<&JumpRule>, Vec<&JumpRule>) = f
                        .desired
                        .jumps
                        .iter()
                        .filter(|j| !kernel.has_jump(j, family))
                        .partition(|j| applied.jumps_restored.contains(*j));
                    let mut placer = JumpPlacer::new(family, &f.desired.jumps, |t, c| {
                        kernel.chains(t)?.get(c).cloned()
                    });
                    // Jumps we restored before that read as missing again: `-C` decides (then `-I`).
                    let recheck = placer.placing_order(&recheck);
                    let inserted = report.jumps_inserted;
                    // Rules written since the read: the tables it showed are not the ones to keep.
                    let one_read = one_read && recheck.is_empty();
                    let rechecked_ok = ensure_jumps(k, family, recheck, Some(&mut placer), report);
                    let reinserted = (report.jumps_inserted - inserted) as u64;
                    let missing: Vec<(&JumpRule, usize)> = placer
                        .placing_order(&missing)
                        .into_iter()
                        .map(|j| (j, placer.place(j)))
                        .collect();
                    if full && !changed && synced_before {
                        // Our payload was in place: whatever differs now was changed behind our back.
                        let rules = u64::from(!kernel.holds(&wanted));
                        let jumps = missing.len() as u64 + reinserted;
                        report.drift.add(DriftKind::IptablesRule, rules + jumps);
                    }
                    if missing.is_empty() && plain_payload(payload) && kernel.holds(&wanted) {
                        applied.iptables_payload = Some(payload.clone());
                        applied.jumps_ok = rechecked_ok;
                        applied.tables_verified = verified(k, f, &tables, before, one_read);
                    } else {
                        let text = with_jumps(payload, &missing, &wanted, &kernel);
                        let written = Restore {
                            payload,
                            missing: &missing,
                            rechecked_ok,
                        };
                        written.run(k, family, &text, applied, report);
                    }
                }
                Err(e) => {
                    tracing::error!(ipFamily = family.label(), error = %e,
                        "Failed to execute iptables-save; restoring without reading the tables");
                    report.fail(FailureKind::KernelDump);
                    restore_blind(k, f, applied, report);
                }
            }
        }
        let serve = applied.iptables_payload.is_some();
        report.family_mut(family).iptables_restore_failures +=
            report.failures_of(FailureKind::IptablesRestore) - restore_failures;
        report.add_family_step(SyncStep::Iptables, family, start.elapsed());
        serve
    }
}

/// One `iptables-restore` of a family's payload plus the jumps it inserts, and what it means for the
/// applied state.
struct Restore<'a, 'j> {
    payload: &'a str,
    missing: &'a [(&'j JumpRule, usize)],
    /// Whether the jumps rechecked with `-C` before this restore are all in place.
    rechecked_ok: bool,
}

impl Restore<'_, '_> {
    /// Writes `text`; on failure the kernel keeps the rules it had (nothing is flushed) and the failure
    /// is counted.
    fn run(
        &self,
        k: &mut Backends,
        family: IpFamily,
        text: &str,
        applied: &mut super::Applied,
        report: &mut SyncReport,
    ) {
        match k.iptables.restore(family, text) {
            Ok(()) => {
                report.iptables_restores += 1;
                report.jumps_inserted += self.missing.len();
                applied.iptables_payload = Some(self.payload.to_string());
                applied.jumps_ok = self.rechecked_ok;
                applied
                    .jumps_restored
                    .extend(self.missing.iter().map(|(j, _)| (*j).clone()));
            }
            Err(e) => {
                tracing::error!(ipFamily = family.label(), error = %e, "Failed to execute iptables-restore");
                report.fail(FailureKind::IptablesRestore);
                applied.jumps_ok = false;
            }
        }
    }
}

/// The fingerprint of `tables` (when the backend has one), the tables as the kernel holds them, and
/// whether both come from one read (the backend's cheap one). The tables are read with `iptables-save`
/// unless that read shows none of our chains in them (a fresh node), which is all a save would have
/// told, or decoded every chain we declare.
fn read_tables(
    k: &mut Backends,
    f: &FamilyInput<'_>,
    tables: &[&str],
    wanted: &KernelTables,
) -> (Option<u64>, crate::kernel::KernelResult<KernelTables>, bool) {
    let family = f.desired.family;
    let view = k.iptables.inspect(family, tables);
    let before = view.as_ref().map(|v| v.fingerprint);
    if let Some(v) = &view {
        if none_of_ours(v, tables, wanted, &f.desired.jumps) {
            tracing::trace!(
                ipFamily = family.label(),
                ?tables,
                "no chain of ours in the tables: iptables-save skipped"
            );
            return (before, Ok(KernelTables::without_user_chains(tables)), true);
        }
        if let Some(kernel) = decoded_tables(v, tables, wanted, family) {
            tracing::trace!(
                ipFamily = family.label(),
                ?tables,
                "tables decoded from their blobs: iptables-save skipped"
            );
            return (before, Ok(kernel), true);
        }
    }
    let saved = k.iptables.save_tables(family, tables);
    (
        before,
        saved.map(|s| KernelTables::parse(&s, family)),
        false,
    )
}

/// The tables as the backend's read decoded them, when it decoded every one of `tables` and every rule
/// of each chain the payload declares (a chain holding a rule it could not decode is read with
/// `iptables-save`, so a form the decoder lacks never reads as drift).
fn decoded_tables(
    view: &TablesView,
    tables: &[&str],
    wanted: &KernelTables,
    family: IpFamily,
) -> Option<KernelTables> {
    let decoded = view.decoded.as_ref()?;
    let mut texts = BTreeMap::new();
    for t in tables {
        let d = decoded.get(*t)?;
        if wanted
            .chains(t)
            .is_some_and(|w| w.keys().any(|c| d.undecoded.contains(c)))
        {
            return None;
        }
        texts.insert(t.to_string(), d.text.clone());
    }
    Some(KernelTables::parse(&texts, family))
}

/// Whether `view` shows every one of `tables` (all with known built-in chains) holding no chain the
/// payload declares and no jump target, for a payload that declares no built-in chain. Then no jump of
/// ours can exist either (its target would), and the kernel's built-in chains hold only foreign rules,
/// which neither the comparison with the payload nor the placing of jumps looks at: the tables read as
/// [`KernelTables::without_user_chains`] would.
fn none_of_ours(
    view: &TablesView,
    tables: &[&str],
    wanted: &KernelTables,
    jumps: &[JumpRule],
) -> bool {
    let builtin_declared = wanted.tables.iter().any(|(t, chains)| {
        rules::builtin_chains(t).is_none_or(|b| chains.keys().any(|c| b.contains(&c.as_str())))
    });
    !builtin_declared
        && tables.iter().all(|t| {
            let Some(present) = view.chains.get(*t) else {
                return false;
            };
            let declared = wanted
                .chains(t)
                .is_some_and(|w| w.keys().any(|c| present.contains(c)));
            let targeted = jumps
                .iter()
                .any(|j| j.table == *t && present.contains(j.target));
            rules::builtin_chains(t).is_some() && !declared && !targeted
        })
}

/// The tables a family's payload and jumps live in, in order.
fn tables_of<'a>(wanted: &'a KernelTables, f: &FamilyInput<'a>) -> Vec<&'a str> {
    let mut tables: BTreeSet<&str> = wanted.tables.keys().map(String::as_str).collect();
    tables.extend(f.desired.jumps.iter().map(|j| j.table));
    tables.into_iter().collect()
}

/// Whether the tables still have the fingerprint they had when a save last showed that they hold this
/// payload and these jumps (then a periodic sync need not read them again).
fn still_verified(k: &mut Backends, f: &FamilyInput<'_>, applied: &super::Applied) -> bool {
    let Some(v) = &applied.tables_verified else {
        return false;
    };
    let tables: Vec<&str> = v.tables.iter().map(String::as_str).collect();
    let now = k.iptables.fingerprint(f.desired.family, &tables);
    tracing::trace!(
        ipFamily = f.desired.family.label(),
        ?tables,
        recorded = v.fingerprint,
        ?now,
        "iptables fingerprint check"
    );
    v.jumps == f.desired.jumps && now == Some(v.fingerprint)
}

/// The evidence to keep after a read showed the tables holding the payload: when the tables came from
/// the read that gave `before` (`one_read`), that fingerprint; after a save, only when the fingerprint
/// read before the save is still the one after it (nothing changed in between).
fn verified(
    k: &mut Backends,
    f: &FamilyInput<'_>,
    tables: &[&str],
    before: Option<u64>,
    one_read: bool,
) -> Option<super::TablesVerified> {
    let after = match one_read {
        true => before,
        false => k.iptables.fingerprint(f.desired.family, tables),
    };
    tracing::trace!(
        ipFamily = f.desired.family.label(),
        ?tables,
        ?before,
        ?after,
        "iptables tables verified"
    );
    let after = after?;
    (before == Some(after)).then(|| super::TablesVerified {
        tables: tables.iter().map(|t| t.to_string()).collect(),
        jumps: f.desired.jumps.clone(),
        fingerprint: after,
    })
}

/// The fallback when the tables cannot be read: restore the payload, then check and insert each jump
/// with its own `-C` / `-I` (so a jump is never duplicated).
fn restore_blind(
    k: &mut Backends,
    f: &FamilyInput<'_>,
    applied: &mut super::Applied,
    report: &mut SyncReport,
) {
    let family = f.desired.family;
    let payload = &f.desired.iptables_payload;
    match k.iptables.restore(family, payload) {
        Ok(()) => {
            report.iptables_restores += 1;
            applied.iptables_payload = Some(payload.clone());
        }
        Err(e) => {
            tracing::error!(ipFamily = family.label(), error = %e, "Failed to execute iptables-restore");
            report.fail(FailureKind::IptablesRestore);
        }
    }
    applied.jumps_ok = ensure_jumps(k, family, &f.desired.jumps, None, report);
}

/// [`ensure_jump`] for each of `jumps`, counting insertions and failures; true if none failed. With a
/// placer, each goes where [`JumpPlacer`] puts it; without (the chains could not be read), at the top.
fn ensure_jumps<'a>(
    k: &mut Backends,
    family: IpFamily,
    jumps: impl IntoIterator<Item = &'a JumpRule>,
    mut placer: Option<&mut JumpPlacer<'_>>,
    report: &mut SyncReport,
) -> bool {
    let mut ok = true;
    for jump in jumps {
        let at = placer.as_ref().map_or(1, |p| p.position(jump));
        match ensure_jump(k, family, jump, at) {
            Ok(true) => {
                report.jumps_inserted += 1;
                if let Some(p) = placer.as_deref_mut() {
                    p.record(jump, at);
                }
            }
            Ok(false) => {}
            Err(()) => {
                report.fail(FailureKind::IptablesJump);
                ok = false;
            }
        }
    }
    ok
}

/// `iptables -N <target>` if needed, then `-C` and, when missing, `-I` of one jump at the 1-based
/// `position`; true if inserted. Failures are logged.
fn ensure_jump(
    k: &mut Backends,
    family: IpFamily,
    jump: &JumpRule,
    position: usize,
) -> Result<bool, ()> {
    k.iptables
        .ensure_chain(family, jump.table, jump.target)
        .and_then(|()| {
            k.iptables
                .ensure_rule_at(family, jump.table, jump.chain, position, &jump.args())
        })
        .map_err(|e| {
            tracing::error!(ipFamily = family.label(), chain = jump.chain, target = jump.target,
                error = %e, "Failed to ensure chain jumps");
        })
}

/// Whether the payload is only table sections (`*table` … `COMMIT`) of chain declarations and `-A <chain>`
/// rules, as the planner writes it: only such a payload is compared with the kernel rule by rule (any
/// other is simply restored).
fn plain_payload(payload: &str) -> bool {
    let mut in_table = false;
    for line in payload.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('*') {
            if in_table {
                return false;
            }
            in_table = true;
        } else if line == "COMMIT" {
            if !in_table {
                return false;
            }
            in_table = false;
        } else {
            let rule = line.starts_with("-A ") && line.split_whitespace().nth(1).is_some();
            if !(in_table && (line.starts_with(':') || rule)) {
                return false;
            }
        }
    }
    !in_table
}

/// The payload with `-I <chain> <position> …` lines for `missing` jumps at the end of their table (a
/// table the payload lacks gets its own section). Lines run in the given order, each position counted
/// after the lines before it ([`JumpPlacer`]). A jump target neither declared by the payload nor in the
/// kernel is declared (created empty), as `iptables -N` would.
fn with_jumps(
    payload: &str,
    missing: &[(&JumpRule, usize)],
    wanted: &KernelTables,
    kernel: &KernelTables,
) -> String {
    if missing.is_empty() {
        return payload.to_string();
    }
    let has_chain = |tables: &KernelTables, t: &str, c: &str| {
        tables.chains(t).is_some_and(|m| m.contains_key(c))
    };
    let section = |t: &str| -> String {
        let mut text = String::new();
        let mut created = BTreeSet::new();
        for (j, _) in missing.iter().filter(|(j, _)| j.table == t) {
            let exists = has_chain(wanted, t, j.target) || has_chain(kernel, t, j.target);
            if !exists && created.insert(j.target) {
                text.push_str(&format!(":{} - [0:0]\n", j.target));
            }
        }
        for (j, at) in missing.iter().filter(|(j, _)| j.table == t) {
            text.push_str(&format!(
                "-I {} {at} {}\n",
                j.chain,
                rules::render(&j.args())
            ));
        }
        text
    };
    let mut out = String::with_capacity(payload.len() + 128 * missing.len());
    let mut table: Option<&str> = None;
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for l in payload.lines() {
        if let Some(name) = l.strip_prefix('*') {
            table = Some(name.trim());
        }
        if l == "COMMIT"
            && let Some(t) = table
        {
            out.push_str(&section(t));
            done.insert(t);
        }
        out.push_str(l);
        out.push('\n');
    }
    let rest: BTreeSet<&str> = missing
        .iter()
        .map(|(j, _)| j.table)
        .filter(|t| !done.contains(t))
        .collect();
    for t in rest {
        out.push_str(&format!("*{t}\n{}COMMIT\n", section(t)));
    }
    out
}

/// Chains and rules of some tables as the kernel holds them (rules normalized, per chain in order).
#[derive(Debug, Default)]
struct KernelTables {
    /// table → chain → rules.
    tables: BTreeMap<String, BTreeMap<String, Vec<Vec<String>>>>,
}

impl KernelTables {
    fn parse(saved: &BTreeMap<String, String>, family: IpFamily) -> Self {
        let tables = saved
            .iter()
            .map(|(name, text)| (name.clone(), parse_chains(text, family)))
            .collect();
        KernelTables { tables }
    }

    /// `tables` holding their built-in chains, empty, and nothing else.
    fn without_user_chains(tables: &[&str]) -> Self {
        let tables = tables
            .iter()
            .map(|t| {
                let builtin = rules::builtin_chains(t).unwrap_or_default();
                let chains = builtin
                    .iter()
                    .map(|c| (c.to_string(), Vec::new()))
                    .collect();
                (t.to_string(), chains)
            })
            .collect();
        KernelTables { tables }
    }

    fn chains(&self, table: &str) -> Option<&BTreeMap<String, Vec<Vec<String>>>> {
        self.tables.get(table)
    }

    /// Whether the jump rule is in its built-in chain and its target chain exists (`iptables -C`).
    fn has_jump(&self, jump: &JumpRule, family: IpFamily) -> bool {
        let Some(chains) = self.chains(jump.table) else {
            return false;
        };
        let Ok(want) = rules::normalize(&jump.args(), family) else {
            return false;
        };
        chains.contains_key(jump.target)
            && chains
                .get(jump.chain)
                .is_some_and(|rules| rules.contains(&want))
    }

    /// Whether every chain of `wanted` (the payload, parsed) exists here holding exactly its rules, in
    /// order (rules the payload adds to built-in chains need only be present).
    fn holds(&self, wanted: &KernelTables) -> bool {
        wanted.tables.iter().all(|(t, chains)| {
            chains.iter().all(|(chain, rules_wanted)| {
                let Some(have) = self.chains(t).and_then(|c| c.get(chain)) else {
                    return false;
                };
                let builtin = rules::builtin_chains(t).is_some_and(|b| b.contains(&chain.as_str()));
                if builtin {
                    rules_wanted.iter().all(|r| have.contains(r))
                } else {
                    have == rules_wanted
                }
            })
        })
    }
}

/// Chains of one saved table (or payload section) with their rules, normalized. A rule that cannot be
/// parsed is kept as a marker that never equals another rule.
fn parse_chains(text: &str, family: IpFamily) -> BTreeMap<String, Vec<Vec<String>>> {
    let mut chains: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            if let Some(name) = decl.split_whitespace().next() {
                chains.entry(name.to_string()).or_default();
            }
        } else if line.starts_with("-A ") {
            let Some(chain) = line.split_whitespace().nth(1) else {
                continue;
            };
            let rule = rules::tokenize(line)
                .ok()
                .and_then(|words| rules::normalize(words.get(2..)?, family).ok())
                .unwrap_or_else(|| vec![format!("\u{0}unparsed {line}")]);
            chains.entry(chain.to_string()).or_default().push(rule);
        }
    }
    chains
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(tables: &[(&str, &[&str])]) -> TablesView {
        TablesView {
            decoded: None,
            fingerprint: 1,
            chains: tables
                .iter()
                .map(|(t, c)| (t.to_string(), c.iter().map(|c| c.to_string()).collect()))
                .collect(),
        }
    }

    #[test]
    fn the_save_is_skipped_only_without_any_chain_of_ours() {
        let payload = "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n";
        let wanted = KernelTables::parse(&rules::split_tables(payload), IpFamily::V4);
        let jumps = [JumpRule {
            table: "filter",
            chain: "INPUT",
            target: "KUBE-FIREWALL",
            comment: "c",
        }];
        let tables = ["filter", "nat"];
        let skip = |v: &TablesView| none_of_ours(v, &tables, &wanted, &jumps);
        assert!(skip(&view(&[("filter", &[]), ("nat", &[])])));
        assert!(skip(&view(&[
            ("filter", &["FOREIGN"]),
            ("nat", &["KUBE-OTHER"])
        ])));
        // A declared chain, or a jump target, in its table.
        assert!(!skip(&view(&[
            ("filter", &[]),
            ("nat", &["KUBE-SERVICES"])
        ])));
        assert!(!skip(&view(&[
            ("filter", &["KUBE-FIREWALL"]),
            ("nat", &[])
        ])));
        // The same names in another table are not ours.
        assert!(skip(&view(&[
            ("filter", &["KUBE-SERVICES"]),
            ("nat", &["KUBE-FIREWALL"])
        ])));
        // A table not read.
        assert!(!skip(&view(&[("nat", &[])])));
        // A payload declaring a built-in chain, or using an unknown table.
        for payload in [
            "*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n",
            "*odd\n:KUBE-X - [0:0]\nCOMMIT\n",
        ] {
            let wanted = KernelTables::parse(&rules::split_tables(payload), IpFamily::V4);
            let fresh = view(&[("filter", &[]), ("nat", &[]), ("odd", &[])]);
            assert!(!none_of_ours(&fresh, &tables, &wanted, &jumps), "{payload}");
        }
        let fresh = KernelTables::without_user_chains(&tables);
        assert_eq!(fresh.chains("nat").map(|c| c.len()), Some(4));
        assert!(
            fresh
                .chains("filter")
                .is_some_and(|c| c["INPUT"].is_empty())
        );
    }

    #[test]
    fn only_plain_payloads_are_compared_with_the_kernel() {
        assert!(plain_payload(
            "*nat\n:KUBE-X - [0:0]\n-A KUBE-X -j RETURN\nCOMMIT\n# done\n*filter\nCOMMIT\n"
        ));
        assert!(!plain_payload("*nat\n-I PREROUTING 1 -j KUBE-X\nCOMMIT\n"));
        assert!(!plain_payload("-A KUBE-X -j RETURN\n*nat\nCOMMIT\n"));
        assert!(!plain_payload("*nat\n:KUBE-X - [0:0]\n"));
        assert!(!plain_payload("*nat\n-A \nCOMMIT\n"));
        assert!(!plain_payload("*nat\n*filter\nCOMMIT\n"));
    }
}
