//! Where a missing jump goes back into its built-in chain.
//!
//! A fresh start inserts each jump at the top of its chain in the planner's order (upstream's
//! `EnsureRule(Prepend, …)` in `iptablesJumpChain` order), so per chain our jumps end up in the reverse of
//! that order, above every foreign rule. Upstream re-inserts a missing jump at the top, which can reorder
//! our jumps (e.g. `KUBE-PROXY-FIREWALL` above `KUBE-IPVS-FILTER` in filter INPUT). Here a missing jump is
//! inserted right below the nearest of our jumps that a fresh start puts above it (else right above the
//! nearest one it puts below it, else at the top): our jumps keep the fresh relative order and foreign
//! rules keep their places.

use crate::kernel::iptables::rules;
use crate::net::IpFamily;
use crate::proxier::desired::JumpRule;
use std::collections::BTreeMap;

/// The built-in chains as read from the kernel (normalized rules), updated as jumps are placed.
pub(super) struct JumpPlacer<'a> {
    family: IpFamily,
    /// Every planned jump, in the planner's order.
    planned: &'a [JumpRule],
    /// (table, chain) → rules, top to bottom.
    chains: BTreeMap<(&'a str, &'a str), Vec<Vec<String>>>,
}

impl<'a> JumpPlacer<'a> {
    /// A placer over the kernel's rules of the built-in chains the planned jumps start from.
    /// `chain_rules(table, chain)` gives a chain's normalized rules (None: not read).
    pub(super) fn new(
        family: IpFamily,
        planned: &'a [JumpRule],
        chain_rules: impl Fn(&str, &str) -> Option<Vec<Vec<String>>>,
    ) -> Self {
        let mut chains = BTreeMap::new();
        for j in planned {
            chains
                .entry((j.table, j.chain))
                .or_insert_with(|| chain_rules(j.table, j.chain).unwrap_or_default());
        }
        JumpPlacer {
            family,
            planned,
            chains,
        }
    }

    /// Our jumps of `jump`'s chain in the order a fresh start leaves them, top to bottom.
    fn fresh_order(&self, jump: &JumpRule) -> Vec<&'a JumpRule> {
        let same = |j: &&JumpRule| j.table == jump.table && j.chain == jump.chain;
        self.planned.iter().rev().filter(same).collect()
    }

    fn rule(&self, jump: &JumpRule) -> Vec<String> {
        rules::normalize(&jump.args(), self.family).unwrap_or_default()
    }

    /// `jumps` sorted as they must be placed: per chain, top to bottom in the fresh order (so each one
    /// finds the jumps placed before it).
    pub(super) fn placing_order<'j>(&self, jumps: &[&'j JumpRule]) -> Vec<&'j JumpRule> {
        let mut v = jumps.to_vec();
        let rank = |j: &JumpRule| {
            self.fresh_order(j)
                .iter()
                .position(|o| *o == j)
                .unwrap_or(usize::MAX)
        };
        v.sort_by_key(|j| (j.table, j.chain, rank(j)));
        v
    }

    /// The 1-based position at which `jump` goes into its chain as the placer sees it now.
    pub(super) fn position(&self, jump: &JumpRule) -> usize {
        let order = self.fresh_order(jump);
        let me = order.iter().position(|o| *o == jump).unwrap_or(0);
        let Some(chain) = self.chains.get(&(jump.table, jump.chain)) else {
            return 1;
        };
        let index_of = |j: &&JumpRule| {
            let r = self.rule(j);
            chain.iter().position(|c| *c == r)
        };
        let above = order[..me].iter().rev().find_map(index_of).map(|i| i + 1);
        let below = || order[me + 1..].iter().find_map(index_of);
        above.or_else(below).unwrap_or(0) + 1
    }

    /// Counts `jump` as inserted at the 1-based `position` of its chain.
    pub(super) fn record(&mut self, jump: &JumpRule, position: usize) {
        let rule = self.rule(jump);
        if let Some(chain) = self.chains.get_mut(&(jump.table, jump.chain)) {
            let at = position.saturating_sub(1).min(chain.len());
            chain.insert(at, rule);
        }
    }

    /// [`JumpPlacer::position`], then [`JumpPlacer::record`]: where `jump` goes when it will be inserted.
    pub(super) fn place(&mut self, jump: &JumpRule) -> usize {
        let at = self.position(jump);
        self.record(jump, at);
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jump(chain: &'static str, target: &'static str) -> JumpRule {
        JumpRule {
            table: "filter",
            chain,
            target,
            comment: "c",
        }
    }

    fn norm(j: &JumpRule) -> Vec<String> {
        rules::normalize(&j.args(), IpFamily::V4).unwrap_or_default()
    }

    #[test]
    fn missing_jumps_go_back_between_their_neighbours() {
        // Planner order A, B, C in INPUT: a fresh start leaves C, B, A on top.
        let planned = vec![jump("INPUT", "A"), jump("INPUT", "B"), jump("INPUT", "C")];
        let foreign = vec!["-j".to_string(), "ACCEPT".to_string()];
        let kernel = vec![norm(&planned[2]), foreign.clone(), norm(&planned[0])];
        let mut p = JumpPlacer::new(IpFamily::V4, &planned, |_, c| {
            (c == "INPUT").then(|| kernel.clone())
        });
        // B goes right below C (its upper neighbour), above the foreign rule.
        assert_eq!(p.place(&planned[1]), 2);
        // With nothing of ours above, a jump goes right above its lower neighbour.
        let kernel2 = vec![foreign.clone(), norm(&planned[1]), norm(&planned[0])];
        let mut p = JumpPlacer::new(IpFamily::V4, &planned, |_, _| Some(kernel2.clone()));
        assert_eq!(p.place(&planned[2]), 2);
        // All missing: top to bottom, each below the one placed before it.
        let empty = vec![foreign];
        let mut p = JumpPlacer::new(IpFamily::V4, &planned, |_, _| Some(empty.clone()));
        let all: Vec<&JumpRule> = planned.iter().collect();
        let order = p.placing_order(&all);
        assert_eq!(order, vec![&planned[2], &planned[1], &planned[0]]);
        let at: Vec<usize> = order.iter().map(|j| p.place(j)).collect();
        assert_eq!(at, vec![1, 2, 3]);
    }
}
