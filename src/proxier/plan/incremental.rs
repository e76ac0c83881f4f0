//! Incremental planning: replan only the services that changed and report what changed in the desired
//! state. Every service's contribution comes from the same per-service-port code as the full [`plan`];
//! contributions are kept per service and aggregated with reference counts, because two services may
//! contribute the same set entry, address or virtual server (shared ExternalIPs, NodePort bitmap ports).
//!
//! [`plan`]: super::plan

use super::decision::{DecisionChanges, ServiceDecision};
use super::ipsets::{PerSet, SetKind};
use super::iptables::LbNodeAccess;
use super::owners::Owners;
use super::{
    Context, Contribution, EXTERNAL_SETS, NodeFacts, PlanConfig, arp_quiet, health_check, iptables,
    no_local_counts, rules_payload, set_names,
};
use crate::cluster::model::{
    EndpointsMap, IpFamily, ServiceMap, ServiceName, ServicePortName, ports_of,
};
use crate::kernel::ipset::entry::IpSetEntry;
use crate::kernel::ipvs::IpvsServiceKey;
use crate::proxier::desired::{
    DesiredIpSet, DesiredState, DesiredVirtualServer, HealthCheckService, JumpRule, TrafficPolicy,
};
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// What changed in the desired state between two plans. Applying it to the previous state with
/// [`DesiredDelta::apply`] gives the new state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredDelta {
    /// Everything was replanned (first update, or node facts / configuration changed): consumers should
    /// reconcile everything rather than trust the delta alone. After the first update the other fields
    /// are left empty; after later full replans they hold the difference from the previous state.
    pub full: bool,
    /// Virtual servers that appeared, with their real servers.
    pub vs_added: BTreeMap<IpvsServiceKey, Arc<DesiredVirtualServer>>,
    /// Virtual servers whose attributes or real servers changed (new value).
    pub vs_changed: BTreeMap<IpvsServiceKey, Arc<DesiredVirtualServer>>,
    /// Virtual servers that went away.
    pub vs_removed: BTreeSet<IpvsServiceKey>,
    /// Virtual servers whose claimants changed while several Services plan them (see
    /// [`DesiredState::shared`]): the new claimants, or `None` when one or none is left.
    pub shared: BTreeMap<IpvsServiceKey, Option<Owners>>,
    /// Entries to add, by set name.
    pub set_adds: BTreeMap<String, BTreeSet<String>>,
    /// Entries to delete, by set name.
    pub set_dels: BTreeMap<String, BTreeSet<String>>,
    /// Addresses to bind to kube-ipvs0.
    pub addresses_added: BTreeSet<IpAddr>,
    /// Addresses to unbind from kube-ipvs0.
    pub addresses_removed: BTreeSet<IpAddr>,
    /// The new set of bound addresses with scope host (`--ipvs-arp-per-address`), when it changed.
    pub arp_quiet: Option<BTreeSet<IpAddr>>,
    /// The new iptables payload, when it changed.
    pub iptables_payload: Option<String>,
    /// The new jump rules, when they changed.
    pub jumps: Option<Vec<JumpRule>>,
    /// The new health-check listeners, when they changed.
    pub health_checks: Option<Vec<HealthCheckService>>,
    /// The new no-local-endpoints counts, when they changed.
    pub no_local_endpoints: Option<BTreeMap<TrafficPolicy, u64>>,
    /// Decision records that changed: the new record, or `None` when the service has none any more.
    pub decisions: BTreeMap<ServiceName, Option<Arc<ServiceDecision>>>,
}

impl DesiredDelta {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.vs_added.is_empty()
            && self.vs_changed.is_empty()
            && self.vs_removed.is_empty()
            && self.shared.is_empty()
            && self.set_adds.values().all(BTreeSet::is_empty)
            && self.set_dels.values().all(BTreeSet::is_empty)
            && self.addresses_added.is_empty()
            && self.addresses_removed.is_empty()
            && self.arp_quiet.is_none()
            && self.iptables_payload.is_none()
            && self.jumps.is_none()
            && self.health_checks.is_none()
            && self.no_local_endpoints.is_none()
            && self.decisions.is_empty()
    }

    /// Takes the changes to the records and to the claimants of shared virtual servers, for readers.
    pub fn take_decision_changes(&mut self) -> DecisionChanges {
        DecisionChanges::Changed {
            records: std::mem::take(&mut self.decisions),
            shared: std::mem::take(&mut self.shared),
        }
    }

    /// Number of virtual server, set entry and address changes (for logs and metrics).
    pub fn len(&self) -> usize {
        self.vs_added.len()
            + self.vs_changed.len()
            + self.vs_removed.len()
            + self.set_adds.values().map(BTreeSet::len).sum::<usize>()
            + self.set_dels.values().map(BTreeSet::len).sum::<usize>()
            + self.addresses_added.len()
            + self.addresses_removed.len()
    }

    /// Every difference from `old` to `new` (`None`, or another family: from an empty state). O(state).
    pub fn between(old: Option<&DesiredState>, new: &DesiredState) -> DesiredDelta {
        let empty;
        let old = match old {
            Some(o) if o.family == new.family => o,
            _ => {
                empty = empty_state(new.family);
                &empty
            }
        };
        let mut d = DesiredDelta::default();
        for (k, v) in &new.virtual_servers {
            match old.virtual_servers.get(k) {
                None => {
                    d.vs_added.insert(*k, v.clone());
                }
                Some(o) if o != v => {
                    d.vs_changed.insert(*k, v.clone());
                }
                Some(_) => {}
            }
        }
        for k in old.virtual_servers.keys() {
            if !new.virtual_servers.contains_key(k) {
                d.vs_removed.insert(*k);
            }
        }
        d.shared = shared_between(&old.shared, &new.shared);
        for (name, set) in &new.ipsets {
            let before = old.ipsets.get(name).map(|s| &s.entries);
            let adds: BTreeSet<String> = set
                .entries
                .iter()
                .filter(|e| !before.is_some_and(|b| b.contains(*e)))
                .cloned()
                .collect();
            let dels: BTreeSet<String> = before
                .map(|b| b.difference(&set.entries).cloned().collect())
                .unwrap_or_default();
            if !adds.is_empty() {
                d.set_adds.insert(name.clone(), adds);
            }
            if !dels.is_empty() {
                d.set_dels.insert(name.clone(), dels);
            }
        }
        d.addresses_added = new
            .bound_addresses
            .difference(&old.bound_addresses)
            .copied()
            .collect();
        d.addresses_removed = old
            .bound_addresses
            .difference(&new.bound_addresses)
            .copied()
            .collect();
        if old.arp_quiet != new.arp_quiet {
            d.arp_quiet = Some(new.arp_quiet.clone());
        }
        if old.iptables_payload != new.iptables_payload {
            d.iptables_payload = Some(new.iptables_payload.clone());
        }
        if old.jumps != new.jumps {
            d.jumps = Some(new.jumps.clone());
        }
        if old.health_checks != new.health_checks {
            d.health_checks = Some(new.health_checks.clone());
        }
        if old.no_local_endpoints != new.no_local_endpoints {
            d.no_local_endpoints = Some(new.no_local_endpoints.clone());
        }
        d.decisions = decisions_between(&old.decisions, &new.decisions);
        d
    }

    /// Applies this delta to `state` (the state it was computed from).
    pub fn apply(&self, state: &mut DesiredState) {
        for k in &self.vs_removed {
            state.virtual_servers.remove(k);
        }
        for (k, v) in self.vs_added.iter().chain(&self.vs_changed) {
            state.virtual_servers.insert(*k, v.clone());
        }
        for (k, o) in &self.shared {
            match o {
                Some(o) => state.shared.insert(*k, o.clone()),
                None => state.shared.remove(k),
            };
        }
        for (name, dels) in &self.set_dels {
            if let Some(s) = state.ipsets.get_mut(name) {
                for e in dels {
                    s.entries.remove(e);
                }
                s.refresh_size();
            }
        }
        for (name, adds) in &self.set_adds {
            if let Some(s) = state.ipsets.get_mut(name) {
                s.entries.extend(adds.iter().cloned());
                s.refresh_size();
            }
        }
        for a in &self.addresses_removed {
            state.bound_addresses.remove(a);
        }
        state
            .bound_addresses
            .extend(self.addresses_added.iter().copied());
        if let Some(q) = &self.arp_quiet {
            state.arp_quiet.clone_from(q);
        }
        if let Some(p) = &self.iptables_payload {
            state.iptables_payload.clone_from(p);
        }
        if let Some(j) = &self.jumps {
            state.jumps.clone_from(j);
        }
        if let Some(h) = &self.health_checks {
            state.health_checks.clone_from(h);
        }
        if let Some(n) = &self.no_local_endpoints {
            state.no_local_endpoints.clone_from(n);
        }
        for (name, d) in &self.decisions {
            match d {
                Some(d) => state.decisions.insert(name.clone(), d.clone()),
                None => state.decisions.remove(name),
            };
        }
    }
}

/// The decision records that differ from `old` to `new`.
fn decisions_between(
    old: &BTreeMap<ServiceName, Arc<ServiceDecision>>,
    new: &BTreeMap<ServiceName, Arc<ServiceDecision>>,
) -> BTreeMap<ServiceName, Option<Arc<ServiceDecision>>> {
    let mut out = BTreeMap::new();
    for (name, d) in new {
        if old.get(name) != Some(d) {
            out.insert(name.clone(), Some(d.clone()));
        }
    }
    for name in old.keys() {
        if !new.contains_key(name) {
            out.insert(name.clone(), None);
        }
    }
    out
}

/// The claimants of shared virtual servers that differ from `old` to `new`.
fn shared_between(
    old: &BTreeMap<IpvsServiceKey, Owners>,
    new: &BTreeMap<IpvsServiceKey, Owners>,
) -> BTreeMap<IpvsServiceKey, Option<Owners>> {
    let mut out = BTreeMap::new();
    for (k, o) in new {
        if old.get(k) != Some(o) {
            out.insert(*k, Some(o.clone()));
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(*k, None);
        }
    }
    out
}

/// A state with every set of `family` created but empty, nothing else (no payload, no jumps).
pub fn empty_state(family: IpFamily) -> DesiredState {
    DesiredState {
        family,
        decisions: BTreeMap::new(),
        virtual_servers: BTreeMap::new(),
        shared: BTreeMap::new(),
        ipsets: SetKind::ALL
            .iter()
            .map(|k| {
                let spec = k.spec(family);
                (spec.name.clone(), DesiredIpSet::new(spec, BTreeSet::new()))
            })
            .collect(),
        iptables_payload: String::new(),
        jumps: Vec::new(),
        bound_addresses: BTreeSet::new(),
        arp_quiet: BTreeSet::new(),
        health_checks: Vec::new(),
        no_local_endpoints: no_local_counts(0, 0),
    }
}

/// What one service contributes, kept between updates (virtual server values live in the state).
#[derive(Debug, Default)]
struct Stored {
    /// Boxed slices, not `Vec`s: 24 bytes less per Service in the map that holds them all.
    vs_keys: Box<[IpvsServiceKey]>,
    /// Addresses to bind, sorted.
    bound: Box<[IpAddr]>,
    no_local_internal: bool,
    no_local_external: bool,
}

/// One service's freshly computed contribution, split for aggregation.
struct Fresh {
    stored: Stored,
    virtual_servers: BTreeMap<IpvsServiceKey, Arc<DesiredVirtualServer>>,
    lb_node_access: Vec<LbNodeAccess>,
    health: Option<HealthCheckService>,
    decision: Option<Arc<ServiceDecision>>,
}

impl Fresh {
    fn from(name: &ServiceName, mut c: Contribution) -> Fresh {
        let health = c
            .health
            .remove(name)
            .map(|hc| health_check(name.clone(), &hc));
        let ports = std::mem::take(&mut c.decisions);
        let decision = (!ports.is_empty()).then(|| {
            Arc::new(ServiceDecision {
                ports: ports.into(),
            })
        });
        Fresh {
            decision,
            stored: Stored {
                vs_keys: c.virtual_servers.keys().copied().collect(),
                bound: c.bound.into_iter().collect(),
                no_local_internal: c.no_local.internal.contains(name),
                no_local_external: c.no_local.external.contains(name),
            },
            virtual_servers: c.virtual_servers,
            lb_node_access: c.lb_node_access,
            health,
        }
    }
}

/// A set entry as the planner keeps it in its reference counts (the desired state holds its text).
type Entry = IpSetEntry;

/// The set entries of a Service's record (its ports'), sorted, each once: what the Service contributes
/// to the sets.
fn entries_of(d: Option<&ServiceDecision>) -> Vec<(SetKind, Entry)> {
    let mut v: Vec<(SetKind, Entry)> = d
        .iter()
        .flat_map(|d| d.ports.iter())
        .flat_map(|p| p.sets.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Keys, entries and addresses touched by one update, resolved against the reference counts at the end.
#[derive(Default)]
struct Touched {
    /// Services whose decision record changed, with the new record.
    decisions: BTreeMap<ServiceName, Option<Arc<ServiceDecision>>>,
    vs: BTreeSet<IpvsServiceKey>,
    entries: Vec<(SetKind, Entry)>,
    bound: Vec<IpAddr>,
    lb_rules: bool,
    health: bool,
    no_local: bool,
}

/// Keeps each service's contribution to the plan so that an update costs O(changed services).
#[derive(Debug, Default)]
pub struct IncrementalPlanner {
    inner: Option<Planned>,
}

/// The aggregated contributions for one set of node facts and configuration, and the resulting state.
#[derive(Debug)]
struct Planned {
    node: NodeFacts,
    cfg: PlanConfig,
    ctx: Context,
    set_names: PerSet<String>,
    services: HashMap<ServiceName, Stored>,
    /// Services contributing each virtual server, sorted: the greatest name wins, as in the full plan.
    vs_owners: HashMap<IpvsServiceKey, Owners>,
    set_refs: PerSet<HashMap<Entry, u32>>,
    bound_refs: HashMap<IpAddr, u32>,
    lb_rules: BTreeMap<ServiceName, Vec<LbNodeAccess>>,
    no_local_internal: usize,
    no_local_external: usize,
    health: BTreeMap<ServiceName, HealthCheckService>,
    non_empty: PerSet<bool>,
    state: DesiredState,
}

pub(super) fn same_service(p: &ServicePortName, s: &ServiceName) -> bool {
    p.namespace == s.namespace && p.name == s.name
}

impl IncrementalPlanner {
    /// A planner with no state: the first update plans everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current desired state, if any update ran.
    pub fn state(&self) -> Option<&DesiredState> {
        self.inner.as_ref().map(|p| &p.state)
    }

    /// Whether the current plan was made for exactly these node facts and this configuration. With no
    /// Service or EndpointSlice changed since, it is the plan a fresh update would give (the planner is
    /// pure): [`crate::proxier::Proxier`] then reuses it without calling [`update`](Self::update).
    pub fn plans_for(&self, node: &NodeFacts, cfg: &PlanConfig) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|p| p.node == *node && p.cfg == *cfg)
    }

    /// Forgets everything: the next update plans from scratch.
    pub fn reset(&mut self) {
        self.inner = None;
    }

    /// Brings the desired state up to date and returns it with what changed. Only the services in
    /// `changed` are replanned; `None`, the first call, or node facts / configuration different from the
    /// previous call replan everything (the delta is then flagged `full`; see [`DesiredDelta::full`]).
    pub fn update(
        &mut self,
        services: &ServiceMap,
        endpoints: &EndpointsMap,
        node: &NodeFacts,
        cfg: &PlanConfig,
        changed: Option<&BTreeSet<ServiceName>>,
    ) -> (&DesiredState, DesiredDelta) {
        let (planned, delta) = match (self.inner.take(), changed) {
            (Some(mut p), Some(changed)) if p.node == *node && p.cfg == *cfg => {
                let mut fresh = HashMap::with_capacity(changed.len());
                for name in changed {
                    fresh.insert(name.clone(), p.compute(services, endpoints, name));
                }
                let d = p.absorb(services, endpoints, fresh, false);
                (p, d)
            }
            (old, _) => {
                // Only the old state is needed from here on: its indexes go before the replan.
                let old = old.map(|o| o.state);
                let mut p = Planned::new(node, cfg);
                p.plan_all(services, endpoints);
                if let Some(o) = &old {
                    // Unchanged virtual servers keep their old (shared) values.
                    for (k, v) in p.state.virtual_servers.iter_mut() {
                        if let Some(ov) = o.virtual_servers.get(k)
                            && ov == v
                        {
                            *v = ov.clone();
                        }
                    }
                    for (k, v) in p.state.decisions.iter_mut() {
                        if let Some(ov) = o.decisions.get(k)
                            && ov == v
                        {
                            *v = ov.clone();
                        }
                    }
                }
                // Diffing against nothing would copy the whole state: the first delta only says `full`.
                let mut d = match &old {
                    Some(o) => DesiredDelta::between(Some(o), &p.state),
                    None => DesiredDelta::default(),
                };
                d.full = true;
                (p, d)
            }
        };
        let p = self.inner.insert(planned);
        (&p.state, delta)
    }
}

impl Planned {
    fn new(node: &NodeFacts, cfg: &PlanConfig) -> Self {
        Planned {
            node: node.clone(),
            cfg: cfg.clone(),
            ctx: Context::new(node, cfg),
            set_names: set_names(cfg.family),
            services: HashMap::new(),
            vs_owners: HashMap::new(),
            set_refs: Default::default(),
            bound_refs: HashMap::new(),
            lb_rules: BTreeMap::new(),
            no_local_internal: 0,
            no_local_external: 0,
            health: BTreeMap::new(),
            non_empty: PerSet::default(),
            state: empty_state(cfg.family),
        }
    }

    /// Plans every port of `name` with the shared per-service-port code.
    fn compute(
        &self,
        services: &ServiceMap,
        endpoints: &EndpointsMap,
        name: &ServiceName,
    ) -> Fresh {
        let ctx = &self.ctx;
        let mut c = Contribution::for_one_service();
        for (port, svc) in ports_of(services, name) {
            ctx.service_port(&mut c, svc, endpoints.get(port));
        }
        Fresh::from(name, c)
    }

    /// Plans every service into this (new, empty) plan, walking both maps once. Each service's
    /// contribution is absorbed as soon as it is computed: no map of every service's contribution is
    /// held at once (that was most of the first sync's transient heap).
    fn plan_all(&mut self, services: &ServiceMap, endpoints: &EndpointsMap) {
        let ctx = Context::new(&self.node, &self.cfg);
        let mut t = Touched::default();
        // Records come in name order: collected first, the map is built packed (inserted one by one
        // in order, a B-tree leaves its nodes about half full: ~0.35 MiB more at 10k).
        let mut records = Vec::new();
        let mut eps_iter = endpoints.iter().peekable();
        let mut current: Option<(ServiceName, Contribution)> = None;
        for (port, svc) in services {
            if !current.as_ref().is_some_and(|(n, _)| same_service(port, n)) {
                if let Some((n, c)) = current.take() {
                    self.absorb_planned(n, c, &mut t, &mut records);
                }
                current = Some((port.service(), Contribution::for_one_service()));
            }
            while eps_iter.next_if(|(k, _)| *k < port).is_some() {}
            let eps = eps_iter.next_if(|(k, _)| *k == port).map(|(_, e)| e);
            if let Some((_, c)) = current.as_mut() {
                ctx.service_port(c, svc, eps);
            }
        }
        if let Some((n, c)) = current.take() {
            self.absorb_planned(n, c, &mut t, &mut records);
        }
        self.state.decisions = records.into_iter().collect();
        self.state.shared = self
            .vs_owners
            .iter()
            .filter(|(_, o)| o.is_shared())
            .map(|(k, o)| (*k, o.clone()))
            .collect();
        // A full replan records nothing: its caller diffs the states.
        let mut d = DesiredDelta::default();
        self.resolve_sets(t.entries, t.bound, false, &mut d);
        self.resolve_rest(t.lb_rules, t.health, t.no_local, true, &mut d);
    }

    /// Full replan: stores one service's contribution and puts its virtual servers into the state where
    /// it is the greatest owner so far (services come in name order, so the greatest name wins, as
    /// [`resolve_vs`](Self::resolve_vs) decides).
    fn absorb_planned(
        &mut self,
        name: ServiceName,
        c: Contribution,
        t: &mut Touched,
        records: &mut Vec<(ServiceName, Arc<ServiceDecision>)>,
    ) {
        let mut f = Fresh::from(&name, c);
        let stored = std::mem::take(&mut f.stored);
        let entries = entries_of(f.decision.as_deref());
        if let Some(d) = f.decision.take() {
            records.push((name.clone(), d));
        }
        self.replace(&name, stored, entries, f.lb_node_access, f.health, t);
        // Not needed: every winner is placed here.
        t.vs.clear();
        for (k, v) in f.virtual_servers {
            if self.vs_owners.get(&k).and_then(|o| o.last()) == Some(&name) {
                self.state.virtual_servers.insert(k, v);
            }
        }
    }

    /// Replaces the stored contributions of the services in `fresh` and updates the state in place.
    fn absorb(
        &mut self,
        services: &ServiceMap,
        endpoints: &EndpointsMap,
        mut fresh: HashMap<ServiceName, Fresh>,
        full: bool,
    ) -> DesiredDelta {
        // A full replan starts from an empty state and records nothing: its caller diffs the states.
        let mut d = DesiredDelta::default();
        let record = !full;
        let mut t = Touched::default();
        for (name, f) in fresh.iter_mut() {
            let new = std::mem::take(&mut f.stored);
            let lb = std::mem::take(&mut f.lb_node_access);
            let health = f.health.take();
            // Before the record is replaced: the old entries are read from it.
            self.replace(
                name,
                new,
                entries_of(f.decision.as_deref()),
                lb,
                health,
                &mut t,
            );
            self.replace_decision(name, f.decision.take(), &mut t);
        }
        if record {
            d.decisions = std::mem::take(&mut t.decisions);
        }

        self.resolve_vs(services, endpoints, &mut fresh, t.vs, record, &mut d);
        self.resolve_sets(t.entries, t.bound, record, &mut d);
        self.resolve_rest(t.lb_rules, t.health, t.no_local, full, &mut d);
        d
    }

    /// Puts one service's new decision record into the state, noting it when it changed.
    fn replace_decision(
        &mut self,
        name: &ServiceName,
        new: Option<Arc<ServiceDecision>>,
        t: &mut Touched,
    ) {
        let old = match &new {
            Some(d) => self.state.decisions.insert(name.clone(), d.clone()),
            None => self.state.decisions.remove(name),
        };
        if old != new {
            t.decisions.insert(name.clone(), new);
        }
    }

    /// Swaps one service's stored contribution for `new` and its set entries (those of its current
    /// record) for `entries`, adjusting reference counts.
    fn replace(
        &mut self,
        name: &ServiceName,
        new: Stored,
        entries: Vec<(SetKind, Entry)>,
        lb: Vec<LbNodeAccess>,
        health: Option<HealthCheckService>,
        t: &mut Touched,
    ) {
        let old = self.services.remove(name).unwrap_or_default();
        self.replace_owner(name, &old.vs_keys, &new.vs_keys, t);
        let old_entries = entries_of(self.state.decisions.get(name).map(|d| &**d));
        self.count_entries(old_entries, &entries, t);
        self.count_bound(old.bound, &new.bound, t);
        if old.no_local_internal != new.no_local_internal
            || old.no_local_external != new.no_local_external
        {
            t.no_local = true;
            self.no_local_internal = self.no_local_internal + usize::from(new.no_local_internal)
                - usize::from(old.no_local_internal);
            self.no_local_external = self.no_local_external + usize::from(new.no_local_external)
                - usize::from(old.no_local_external);
        }
        self.replace_rules(name, lb, health, t);
        let empty = new.vs_keys.is_empty()
            && entries.is_empty()
            && new.bound.is_empty()
            && !new.no_local_internal
            && !new.no_local_external;
        if !empty {
            self.services.insert(name.clone(), new);
        }
    }

    /// Moves `name` from the owners of its old virtual servers to those of its new ones.
    fn replace_owner(
        &mut self,
        name: &ServiceName,
        old: &[IpvsServiceKey],
        new: &[IpvsServiceKey],
        t: &mut Touched,
    ) {
        for k in old {
            if let Some(owners) = self.vs_owners.get_mut(k)
                && !owners.remove(name)
            {
                self.vs_owners.remove(k);
            }
            t.vs.insert(*k);
        }
        for k in new {
            match self.vs_owners.entry(*k) {
                MapEntry::Occupied(mut o) => o.get_mut().insert(name),
                MapEntry::Vacant(v) => {
                    v.insert(Owners::One(name.clone()));
                }
            }
            t.vs.insert(*k);
        }
    }

    /// Entries in both old and new keep their counts; only the differences are counted and touched.
    fn count_entries(
        &mut self,
        old: Vec<(SetKind, Entry)>,
        new: &[(SetKind, Entry)],
        t: &mut Touched,
    ) {
        let (gone, came) = sorted_difference(old.into_boxed_slice(), new);
        for (kind, e) in gone {
            let refs = &mut self.set_refs[kind];
            if let Some(n) = refs.get_mut(&e) {
                *n -= 1;
                if *n == 0 {
                    refs.remove(&e);
                }
            }
            t.entries.push((kind, e));
        }
        for (kind, e) in came {
            *self.set_refs[kind].entry(e).or_insert(0) += 1;
            t.entries.push((kind, e));
        }
    }

    /// The same for bound addresses.
    fn count_bound(&mut self, old: Box<[IpAddr]>, new: &[IpAddr], t: &mut Touched) {
        let (gone, came) = sorted_difference(old, new);
        for a in gone {
            if let Some(n) = self.bound_refs.get_mut(&a) {
                *n -= 1;
                if *n == 0 {
                    self.bound_refs.remove(&a);
                }
            }
            t.bound.push(a);
        }
        for a in came {
            *self.bound_refs.entry(a).or_insert(0) += 1;
            t.bound.push(a);
        }
    }

    /// Replaces the service's LB out-filter rules and health check, marking what changed.
    fn replace_rules(
        &mut self,
        name: &ServiceName,
        lb: Vec<LbNodeAccess>,
        health: Option<HealthCheckService>,
        t: &mut Touched,
    ) {
        let old_lb = self.lb_rules.get(name).map(Vec::as_slice).unwrap_or(&[]);
        if old_lb != lb.as_slice() {
            t.lb_rules = true;
            if lb.is_empty() {
                self.lb_rules.remove(name);
            } else {
                self.lb_rules.insert(name.clone(), lb);
            }
        }
        if self.health.get(name) != health.as_ref() {
            t.health = true;
            match health {
                Some(h) => self.health.insert(name.clone(), h),
                None => self.health.remove(name),
            };
        }
    }

    /// Sets each touched virtual server to its winning contribution (or removes it).
    fn resolve_vs(
        &mut self,
        services: &ServiceMap,
        endpoints: &EndpointsMap,
        fresh: &mut HashMap<ServiceName, Fresh>,
        touched: BTreeSet<IpvsServiceKey>,
        record: bool,
        d: &mut DesiredDelta,
    ) {
        for k in &touched {
            self.publish_shared(k, record, d);
            let winner = self.vs_owners.get(k).and_then(|o| o.last()).cloned();
            let Some(winner) = winner else {
                if self.state.virtual_servers.remove(k).is_some() && record {
                    d.vs_removed.insert(*k);
                }
                continue;
            };
            if !fresh.contains_key(&winner) {
                // An unchanged service now wins this key: its contribution is recomputed (same inputs).
                let f = self.compute(services, endpoints, &winner);
                fresh.insert(winner.clone(), f);
            }
            let Some(v) = fresh
                .get_mut(&winner)
                .and_then(|f| f.virtual_servers.remove(k))
            else {
                continue;
            };
            match self.state.virtual_servers.get_mut(k) {
                None => {
                    if record {
                        d.vs_added.insert(*k, v.clone());
                    }
                    self.state.virtual_servers.insert(*k, v);
                }
                Some(cur) if *cur != v => {
                    if record {
                        d.vs_changed.insert(*k, v.clone());
                    }
                    *cur = v;
                }
                Some(_) => {}
            }
        }
    }

    /// Publishes the claimants of `k` in the state when several Services plan it (else none).
    fn publish_shared(&mut self, k: &IpvsServiceKey, record: bool, d: &mut DesiredDelta) {
        let now = self.vs_owners.get(k).filter(|o| o.is_shared());
        if self.state.shared.get(k) == now {
            return;
        }
        match now {
            Some(o) => self.state.shared.insert(*k, o.clone()),
            None => self.state.shared.remove(k),
        };
        if record {
            d.shared.insert(*k, now.cloned());
        }
    }

    /// Adds or deletes each touched set entry and address according to its reference count.
    fn resolve_sets(
        &mut self,
        entries: Vec<(SetKind, Entry)>,
        bound: Vec<IpAddr>,
        record: bool,
        d: &mut DesiredDelta,
    ) {
        let quiet_touched =
            !bound.is_empty() || entries.iter().any(|(k, _)| EXTERNAL_SETS.contains(k));
        self.resolve_entries(entries, bound, record, d);
        if self.cfg.arp_per_address && quiet_touched {
            let s = &mut self.state;
            let external = EXTERNAL_SETS.iter().flat_map(|k| self.set_refs[*k].keys());
            let quiet = arp_quiet(&s.bound_addresses, external);
            if record && quiet != s.arp_quiet {
                d.arp_quiet = Some(quiet.clone());
            }
            s.arp_quiet = quiet;
        }
    }

    /// Set entries and bound addresses: in bulk for a full replan, else each toggled and recorded.
    fn resolve_entries(
        &mut self,
        entries: Vec<(SetKind, Entry)>,
        bound: Vec<IpAddr>,
        record: bool,
        d: &mut DesiredDelta,
    ) {
        if !record {
            self.fill_sets(entries);
            return;
        }
        for (kind, e) in entries {
            let want = self.set_refs[kind].contains_key(&e);
            toggle(
                &mut self.state,
                &self.set_names[kind],
                e.to_string(),
                want,
                d,
            );
        }
        for a in &bound {
            let want = self.bound_refs.contains_key(a);
            let had = self.state.bound_addresses.contains(a);
            if want == had {
                continue;
            }
            if want {
                self.state.bound_addresses.insert(*a);
                d.addresses_added.insert(*a);
            } else {
                self.state.bound_addresses.remove(a);
                d.addresses_removed.insert(*a);
            }
            let name = &self.set_names[SetKind::IpvsIps];
            toggle(&mut self.state, name, a.to_string(), want, d);
        }
    }

    /// Fills the (empty) sets and addresses of a full replan in bulk: every touched entry is wanted.
    fn fill_sets(&mut self, mut entries: Vec<(SetKind, Entry)>) {
        entries.sort_unstable();
        entries.dedup();
        let mut per_kind: PerSet<Vec<String>> = PerSet::default();
        for (kind, e) in entries {
            per_kind[kind].push(e.to_string());
        }
        for kind in SetKind::ALL {
            // Sorted input: each set is built in linear time.
            per_kind[kind].sort_unstable();
        }
        self.state.bound_addresses = self.bound_refs.keys().copied().collect();
        per_kind[SetKind::IpvsIps] = self
            .state
            .bound_addresses
            .iter()
            .map(|a| a.to_string())
            .collect();
        for (kind, list) in per_kind {
            if let Some(set) = self.state.ipsets.get_mut(&self.set_names[kind]) {
                // Sorted input: the set is built in linear time.
                set.entries = list.into_iter().collect();
                set.refresh_size();
            }
        }
    }

    /// Payload (only when set emptiness or LB out-filter rules changed), health checks, no-local counts.
    fn resolve_rest(
        &mut self,
        lb_rules: bool,
        health: bool,
        no_local: bool,
        force_payload: bool,
        d: &mut DesiredDelta,
    ) {
        let state = &mut self.state;
        let names = &self.set_names;
        let cfg = &self.cfg;
        let non_empty = names.map(|name| {
            state
                .ipsets
                .get(name)
                .is_some_and(|s| !s.entries.is_empty())
        });
        if force_payload || lb_rules || non_empty != self.non_empty {
            self.non_empty = non_empty;
            let lb: Vec<LbNodeAccess> = self.lb_rules.values().flatten().cloned().collect();
            let payload = rules_payload(cfg, names, non_empty, &lb);
            if payload != state.iptables_payload {
                d.iptables_payload = Some(payload.clone());
                state.iptables_payload = payload;
            }
        }
        if force_payload {
            let jumps = iptables::jumps();
            if jumps != state.jumps {
                d.jumps = Some(jumps.clone());
                state.jumps = jumps;
            }
        }
        if health {
            let hc: Vec<HealthCheckService> = self.health.values().cloned().collect();
            if hc != state.health_checks {
                d.health_checks = Some(hc.clone());
                state.health_checks = hc;
            }
        }
        if no_local {
            let n = no_local_counts(self.no_local_internal, self.no_local_external);
            if n != state.no_local_endpoints {
                d.no_local_endpoints = Some(n.clone());
                state.no_local_endpoints = n;
            }
        }
    }
}

/// Puts `e` into (or takes it out of) set `name` of `state`, recording the change in `d`.
fn toggle(state: &mut DesiredState, name: &str, e: String, want: bool, d: &mut DesiredDelta) {
    let Some(set) = state.ipsets.get_mut(name) else {
        return;
    };
    if want && !set.entries.contains(&e) {
        d.set_adds
            .entry(name.to_string())
            .or_default()
            .insert(e.clone());
        set.entries.insert(e);
    } else if !want && set.entries.remove(&e) {
        d.set_dels.entry(name.to_string()).or_default().insert(e);
    }
    set.refresh_size();
}

/// Items of sorted, deduplicated `old` missing from `new`, and items of `new` missing from `old`.
fn sorted_difference<T: Ord + Clone>(old: Box<[T]>, new: &[T]) -> (Vec<T>, Vec<T>) {
    let mut gone = Vec::new();
    let mut came = Vec::new();
    let mut j = 0;
    for o in old.into_vec() {
        while j < new.len() && new[j] < o {
            came.push(new[j].clone());
            j += 1;
        }
        if j < new.len() && new[j] == o {
            j += 1;
        } else {
            gone.push(o);
        }
    }
    came.extend(new[j..].iter().cloned());
    (gone, came)
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
