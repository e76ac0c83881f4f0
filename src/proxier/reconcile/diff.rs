//! The one diff every reconcile step uses: desired state, observed state and a scope in; add / update /
//! keep / delete lists of keys out.
//!
//! The observed state is the kernel dump on a full sync and what the reconciler last applied otherwise.
//! The scope is every key (full syncs, or event-driven syncs without a delta) or only the keys a
//! [`DesiredDelta`](crate::proxier::plan::incremental::DesiredDelta) names, so an event-driven sync costs
//! O(changes) whatever the number of objects.

use std::collections::{BTreeMap, BTreeSet};

/// A keyed collection a step can look into: a map (its values) or a set (its members).
pub trait View<K> {
    /// What one key holds.
    type Item: ?Sized;
    /// The item under `key`.
    fn get(&self, key: &K) -> Option<&Self::Item>;
    /// Every key, in order.
    fn keys_in_order<'a>(&'a self) -> impl Iterator<Item = &'a K>
    where
        K: 'a;
}

impl<K: Ord, V> View<K> for BTreeMap<K, V> {
    type Item = V;
    fn get(&self, key: &K) -> Option<&V> {
        BTreeMap::get(self, key)
    }
    fn keys_in_order<'a>(&'a self) -> impl Iterator<Item = &'a K>
    where
        K: 'a,
    {
        self.keys()
    }
}

impl<K: Ord> View<K> for BTreeSet<K> {
    type Item = K;
    fn get(&self, key: &K) -> Option<&K> {
        BTreeSet::get(self, key)
    }
    fn keys_in_order<'a>(&'a self) -> impl Iterator<Item = &'a K>
    where
        K: 'a,
    {
        self.iter()
    }
}

/// Which keys a step compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope<K> {
    /// Every key of the desired and the observed state.
    All,
    /// Only these keys (what a delta names); the others are assumed in place.
    Keys(BTreeSet<K>),
}

impl<K: Ord + Clone> Scope<K> {
    /// `Keys` from the keys a delta names, or `All` when there is no delta to trust.
    pub fn of<'a, D: 'a, I>(delta: Option<&'a D>, keys: impl FnOnce(&'a D) -> I) -> Self
    where
        I: IntoIterator<Item = &'a K>,
        K: 'a,
    {
        match delta {
            Some(d) => Scope::Keys(keys(d).into_iter().cloned().collect()),
            None => Scope::All,
        }
    }

    /// Whether every key is compared.
    pub fn is_all(&self) -> bool {
        matches!(self, Scope::All)
    }

    /// After a step: drops from `applied` the keys in scope that are no longer desired, except `kept`
    /// (deletions that failed, so the next sync retries them).
    pub fn forget_removed<V>(
        &self,
        applied: &mut BTreeMap<K, V>,
        desired: &impl View<K>,
        kept: &BTreeSet<K>,
    ) {
        let stays = |key: &K| desired.get(key).is_some() || kept.contains(key);
        match self {
            Scope::All => applied.retain(|key, _| stays(key)),
            Scope::Keys(keys) => {
                for key in keys.iter().filter(|k| !stays(k)) {
                    applied.remove(key);
                }
            }
        }
    }
}

/// What a step must do: keys to add, to update, already right, and to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff<K> {
    /// Desired, not observed.
    pub add: Vec<K>,
    /// Desired and observed, but different.
    pub update: Vec<K>,
    /// Desired and observed alike (a step may still look inside, e.g. at real servers).
    pub keep: Vec<K>,
    /// Observed, not desired (a step filters these by ownership before deleting).
    pub delete: Vec<K>,
}

impl<K> Default for Diff<K> {
    fn default() -> Self {
        Diff {
            add: Vec::new(),
            update: Vec::new(),
            keep: Vec::new(),
            delete: Vec::new(),
        }
    }
}

/// How a desired key compares with the observed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Add,
    Update,
    Keep,
}

impl<K: Ord> Diff<K> {
    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }

    /// The desired keys (added, updated, kept) in key order, each with how it compares.
    pub fn desired_in_order(&self) -> Vec<(&K, Change)> {
        let mut all: Vec<(&K, Change)> = (self.add.iter().map(|k| (k, Change::Add)))
            .chain(self.update.iter().map(|k| (k, Change::Update)))
            .chain(self.keep.iter().map(|k| (k, Change::Keep)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all
    }
}

/// One reconcile step's input: the desired state, the observed state and the scope to compare.
pub struct StepInput<'a, K, D: ?Sized, O: ?Sized> {
    pub desired: &'a D,
    pub observed: &'a O,
    pub scope: &'a Scope<K>,
}

impl<K, D, O> StepInput<'_, K, D, O>
where
    K: Ord + Clone,
    D: View<K> + ?Sized,
    O: View<K> + ?Sized,
{
    /// Compares desired with observed over the scope; `same` says whether an observed item already
    /// matches the desired one.
    pub fn diff(&self, same: impl Fn(&D::Item, &O::Item) -> bool) -> Diff<K> {
        self.compare(same, true)
    }

    /// Like [`StepInput::diff`] without the keys already alike (`keep` stays empty): for steps that
    /// only write, so that comparing a large set copies none of its unchanged keys.
    pub fn changes(&self, same: impl Fn(&D::Item, &O::Item) -> bool) -> Diff<K> {
        self.compare(same, false)
    }

    fn compare(&self, same: impl Fn(&D::Item, &O::Item) -> bool, keep: bool) -> Diff<K> {
        let mut d = Diff::default();
        let mut one = |key: &K| match (self.desired.get(key), self.observed.get(key)) {
            (Some(_), None) => d.add.push(key.clone()),
            (Some(want), Some(have)) if same(want, have) => {
                if keep {
                    d.keep.push(key.clone());
                }
            }
            (Some(_), Some(_)) => d.update.push(key.clone()),
            (None, Some(_)) => d.delete.push(key.clone()),
            (None, None) => {}
        };
        match self.scope {
            Scope::Keys(keys) => keys.iter().for_each(&mut one),
            Scope::All => {
                self.desired.keys_in_order().for_each(&mut one);
                self.observed
                    .keys_in_order()
                    .filter(|k| self.desired.get(k).is_none())
                    .for_each(&mut one);
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(items: &[(u8, u8)]) -> BTreeMap<u8, u8> {
        items.iter().copied().collect()
    }

    #[test]
    fn all_compares_every_key_of_both_sides() {
        let desired = map(&[(1, 1), (2, 2), (3, 3)]);
        let observed = map(&[(2, 2), (3, 9), (4, 4)]);
        let d = StepInput {
            desired: &desired,
            observed: &observed,
            scope: &Scope::All,
        }
        .diff(|a, b| a == b);
        assert_eq!(d.add, vec![1]);
        assert_eq!(d.keep, vec![2]);
        assert_eq!(d.update, vec![3]);
        assert_eq!(d.delete, vec![4]);
        assert!(!d.is_empty());
        let c = StepInput {
            desired: &desired,
            observed: &observed,
            scope: &Scope::All,
        }
        .changes(|a, b| a == b);
        assert_eq!(
            (c.add, c.update, c.delete),
            (d.add.clone(), d.update.clone(), d.delete.clone())
        );
        assert!(c.keep.is_empty());
        assert_eq!(
            d.desired_in_order(),
            vec![(&1, Change::Add), (&2, Change::Keep), (&3, Change::Update)]
        );
    }

    #[test]
    fn keys_compare_only_the_named_keys() {
        let desired = BTreeSet::from([1u8, 2, 3]);
        let observed = BTreeSet::from([3u8, 4, 5]);
        let scope = Scope::Keys(BTreeSet::from([1u8, 4, 6]));
        let d = StepInput {
            desired: &desired,
            observed: &observed,
            scope: &scope,
        }
        .diff(|_, _| true);
        assert_eq!(d.add, vec![1]);
        assert_eq!(d.delete, vec![4]);
        assert!(d.update.is_empty() && d.keep.is_empty());
    }

    #[test]
    fn forget_removed_keeps_failed_deletions() {
        let desired = BTreeSet::from([1u8]);
        let kept = BTreeSet::from([3u8]);
        let mut applied = map(&[(1, 1), (2, 2), (3, 3), (4, 4)]);
        Scope::Keys(BTreeSet::from([2u8, 3])).forget_removed(&mut applied, &desired, &kept);
        assert_eq!(applied.keys().copied().collect::<Vec<_>>(), vec![1, 3, 4]);
        Scope::All.forget_removed(&mut applied, &desired, &kept);
        assert_eq!(applied.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(
            Scope::of(Some(&vec![7u8]), |v| v.iter()),
            Scope::Keys(BTreeSet::from([7]))
        );
        assert!(Scope::<u8>::of(None::<&Vec<u8>>, |v| v.iter()).is_all());
    }
}
