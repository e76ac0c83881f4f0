//! Change trackers: accumulate Service and EndpointSlice changes between syncs, then apply them to the
//! [`ServiceMap`] / [`EndpointsMap`] in O(changes), reporting what changed (upstream's
//! `ServiceChangeTracker` / `EndpointsChangeTracker`).

use super::convert::{self, ConvertError, ConvertWarning, SliceInfo};
use super::model::{
    Endpoint, EndpointsMap, Name, Protocol, ServiceMap, ServiceName, ServicePort, ServicePortName,
    Topology,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

/// What recording one object change produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackOutcome {
    /// Whether a change for this object is now pending (false when it was a no-op or cancelled out).
    pub pending: bool,
    /// Entries dropped from an otherwise valid object.
    pub warnings: Vec<ConvertWarning>,
    /// The object was malformed: it is treated as absent (contributes nothing) until fixed.
    pub error: Option<ConvertError>,
}

/// Ports of one service, sorted by port name (names are unique within a service).
type Ports = Vec<Arc<ServicePort>>;

#[derive(Debug)]
struct ServiceChange {
    previous: Ports,
    current: Ports,
}

/// Accumulates Service changes between syncs.
///
/// The tracker remembers the ports it last applied per service, so the `previous` object of an update is
/// not needed: the watch cache only has to keep each Service's namespace/name.
#[derive(Debug, Default)]
pub struct ServiceChangeTracker {
    /// Ports of every service as of the last [`apply`](Self::apply); the `Arc`s are shared with the map.
    applied: HashMap<ServiceName, Box<[Arc<ServicePort>]>>,
    items: HashMap<ServiceName, ServiceChange>,
    namespaces: Namespaces,
    total: u64,
}

/// What [`ServiceChangeTracker::apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceUpdateResult {
    /// Services with added, updated or removed ports.
    pub updated_services: BTreeSet<ServiceName>,
    /// Service ports added, updated or removed.
    pub changed_ports: BTreeSet<ServicePortName>,
    /// ClusterIPs of removed UDP service ports (their conntrack entries are stale).
    pub deleted_udp_cluster_ips: BTreeSet<IpAddr>,
}

/// Shares one string per namespace between the services or slices of that namespace.
#[derive(Debug, Default)]
struct Namespaces(HashSet<Name>);

impl Namespaces {
    fn share(&mut self, namespace: &mut Name) {
        match self.0.get(namespace) {
            Some(shared) => *namespace = shared.clone(),
            None => {
                self.0.insert(namespace.clone());
            }
        }
    }

    /// Forgets namespaces nothing else uses any more.
    fn purge(&mut self) {
        self.0.retain(|n| !n.is_unique());
    }
}

fn convert_service(
    svc: Option<&Service>,
    namespaces: &mut Namespaces,
    outcome: &mut TrackOutcome,
) -> Ports {
    let Some(svc) = svc else {
        return Ports::new();
    };
    match convert::service_ports(svc) {
        Ok(c) => {
            outcome.warnings = c.warnings;
            // Not `collect()`: that would reuse the larger `Vec<ServicePort>` buffer for the Arcs.
            let mut ports: Ports = Vec::with_capacity(c.ports.len());
            ports.extend(c.ports.into_iter().map(|mut p| {
                namespaces.share(&mut p.name.namespace);
                Arc::new(p)
            }));
            ports.sort_by(|a, b| a.name.cmp(&b.name));
            ports
        }
        Err(e) => {
            outcome.error = Some(e);
            Ports::new()
        }
    }
}

fn find<'a>(ports: &'a [Arc<ServicePort>], name: &ServicePortName) -> Option<&'a Arc<ServicePort>> {
    ports
        .binary_search_by(|p| p.name.cmp(name))
        .ok()
        .map(|i| &ports[i])
}

fn service_key(svc: &Service) -> ServiceName {
    ServiceName {
        namespace: svc.metadata.namespace.as_deref().unwrap_or_default().into(),
        name: svc.metadata.name.as_deref().unwrap_or_default().into(),
    }
}

impl ServiceChangeTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a change of one Service: `(None, Some)` add, `(Some, Some)` update, `(Some, None)` delete.
    /// Changes that cancel out since the last [`apply`](Self::apply) vanish.
    ///
    /// Only the namespace/name of `previous` is used (to key a deletion): the previous state is the one
    /// the tracker last applied for that service.
    pub fn update(
        &mut self,
        previous: Option<&Service>,
        current: Option<&Service>,
    ) -> TrackOutcome {
        let mut outcome = TrackOutcome::default();
        let Some(key) = current.or(previous).map(service_key) else {
            return outcome;
        };
        self.total += 1;
        let current = convert_service(current, &mut self.namespaces, &mut outcome);
        let change = match self.items.get_mut(&key) {
            Some(change) => change,
            None => {
                let previous = self
                    .applied
                    .get(&key)
                    .map(|p| p.to_vec())
                    .unwrap_or_default();
                if previous == current {
                    return outcome;
                }
                self.items.entry(key.clone()).or_insert(ServiceChange {
                    previous,
                    current: Ports::new(),
                })
            }
        };
        change.current = current;
        if change.previous == change.current {
            self.items.remove(&key);
        } else {
            outcome.pending = true;
        }
        outcome
    }

    /// Number of services with pending changes.
    pub fn pending(&self) -> usize {
        self.items.len()
    }

    /// Number of updates recorded since creation (for the `_total` metric).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Applies the pending changes to `map` (touching only the changed services) and reports them.
    pub fn apply(&mut self, map: &mut ServiceMap) -> ServiceUpdateResult {
        let mut result = ServiceUpdateResult::default();
        // take the table (not drain it): a large initial sync must not leave its capacity behind
        for (name, change) in std::mem::take(&mut self.items) {
            let ServiceChange {
                previous,
                mut current,
            } = change;
            for old in &previous {
                if find(&current, &old.name).is_some() {
                    continue;
                }
                if let Some(removed) = map.remove(&old.name)
                    && removed.protocol == Protocol::Udp
                {
                    result
                        .deleted_udp_cluster_ips
                        .extend(removed.cluster_ips.iter().copied());
                }
                result.changed_ports.insert(old.name.clone());
            }
            for port in &mut current {
                match find(&previous, &port.name) {
                    // unchanged: keep sharing the Arc already in the map
                    Some(old) if old == port => *port = old.clone(),
                    _ => {
                        result.changed_ports.insert(port.name.clone());
                    }
                }
                map.insert(port.name.clone(), port.clone());
            }
            match current.first() {
                None => {
                    self.applied.remove(&name);
                }
                // keyed by the ports' own name strings (shared), not the update's copy
                Some(first) => {
                    self.applied
                        .insert(first.name.service(), current.into_boxed_slice());
                }
            }
            result.updated_services.insert(name);
        }
        self.namespaces.purge();
        result
    }
}

/// A UDP endpoint that was removed or stopped being ready: its conntrack entries are stale.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StaleUdpEndpoint {
    pub port_name: ServicePortName,
    pub ip: IpAddr,
    pub port: u16,
}

/// What [`EndpointsChangeTracker::apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointsUpdateResult {
    /// Services whose endpoints changed.
    pub updated_services: BTreeSet<ServiceName>,
    /// Service ports whose endpoint lists changed.
    pub changed_ports: BTreeSet<ServicePortName>,
    /// Ready UDP endpoints that disappeared or stopped being ready.
    pub deleted_udp_endpoints: Vec<StaleUdpEndpoint>,
    /// UDP service ports that went from zero to some ready endpoints.
    pub newly_active_udp_services: Vec<ServicePortName>,
    /// `last-change-trigger-time` values of the applied changes, per service.
    pub trigger_times: BTreeMap<ServiceName, Vec<SystemTime>>,
}

/// The slices of one service: applied, and pending changes (both few, usually one: kept in sorted vectors).
#[derive(Debug, Default)]
struct SliceTracker {
    /// Applied slices, sorted by slice name.
    applied: Vec<Arc<SliceInfo>>,
    /// Pending changes, sorted by slice name; `None` = slice removal pending.
    pending: Vec<(Name, Option<Arc<SliceInfo>>)>,
}

impl SliceTracker {
    fn applied_index(&self, slice: &str) -> Result<usize, usize> {
        self.applied
            .binary_search_by(|s| s.slice_name.as_str().cmp(slice))
    }

    fn applied(&self, slice: &str) -> Option<&Arc<SliceInfo>> {
        self.applied_index(slice).ok().map(|i| &self.applied[i])
    }

    fn pending_index(&self, slice: &str) -> Result<usize, usize> {
        self.pending.binary_search_by(|(s, _)| (**s).cmp(slice))
    }

    /// Moves the pending changes into the applied slices.
    fn commit(&mut self) {
        for (slice, value) in std::mem::take(&mut self.pending) {
            match (self.applied_index(&slice), value) {
                (Ok(i), Some(info)) => self.applied[i] = info,
                (Err(i), Some(info)) => self.applied.insert(i, info),
                (Ok(i), None) => {
                    self.applied.remove(i);
                }
                (Err(_), None) => {}
            }
        }
        self.applied.shrink_to_fit();
    }
}

/// Shares equal endpoint topologies (node, zone, hints) between endpoints, and equal names and hint
/// lists between topologies: there are far fewer distinct values than endpoints.
#[derive(Debug, Default)]
struct Interner {
    topologies: HashSet<Arc<Topology>>,
    names: HashSet<Arc<str>>,
    lists: HashSet<Arc<[Arc<str>]>>,
}

impl Interner {
    fn name(&mut self, s: &mut Arc<str>) {
        match self.names.get(s) {
            Some(shared) => *s = shared.clone(),
            None => {
                self.names.insert(s.clone());
            }
        }
    }

    fn list(&mut self, l: &mut Arc<[Arc<str>]>) {
        match self.lists.get(l) {
            Some(shared) => *l = shared.clone(),
            None => {
                let mut owned: Vec<Arc<str>> = l.to_vec();
                owned.iter_mut().for_each(|n| self.name(n));
                *l = owned.into();
                self.lists.insert(l.clone());
            }
        }
    }

    fn endpoint(&mut self, ep: &mut Endpoint) {
        let Some(topology) = ep.topology() else {
            return;
        };
        if let Some(shared) = self.topologies.get(topology) {
            ep.set_topology(shared.clone());
            return;
        }
        let mut owned = Topology::clone(topology);
        for n in [owned.node_name.as_mut(), owned.zone.as_mut()]
            .into_iter()
            .flatten()
        {
            self.name(n);
        }
        for l in [
            owned.hints_for_nodes.as_mut(),
            owned.hints_for_zones.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            self.list(l);
        }
        let shared = Arc::new(owned);
        self.topologies.insert(shared.clone());
        ep.set_topology(shared);
    }

    /// Forgets values no endpoint uses any more (topologies first: they hold the lists and names).
    fn purge(&mut self) {
        self.topologies.retain(|t| Arc::strong_count(t) > 1);
        self.lists.retain(|l| Arc::strong_count(l) > 1);
        self.names.retain(|n| Arc::strong_count(n) > 1);
    }
}

fn same(a: Option<&Arc<SliceInfo>>, b: Option<&Arc<SliceInfo>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.same_content(b),
        _ => false,
    }
}

/// Accumulates EndpointSlice changes between syncs; slices of one service are merged.
#[derive(Debug)]
pub struct EndpointsChangeTracker {
    hostname: String,
    start_time: SystemTime,
    by_service: HashMap<ServiceName, SliceTracker>,
    /// namespace/slice → the service it currently counts for.
    owners: HashMap<(Name, Name), ServiceName>,
    pending_services: HashSet<ServiceName>,
    trigger_times: HashMap<ServiceName, Vec<SystemTime>>,
    interner: Interner,
    namespaces: Namespaces,
    total: u64,
}

type EndpointsOf = BTreeMap<ServicePortName, Arc<Vec<Endpoint>>>;

impl EndpointsChangeTracker {
    /// A tracker for node `hostname` (local endpoints win deduplication); trigger times before now are ignored.
    pub fn new(hostname: &str) -> Self {
        Self::new_at(hostname, SystemTime::now())
    }

    /// Like [`new`](Self::new) with an explicit start time for trigger-time filtering.
    pub fn new_at(hostname: &str, start_time: SystemTime) -> Self {
        Self {
            hostname: hostname.to_string(),
            start_time,
            by_service: HashMap::new(),
            owners: HashMap::new(),
            pending_services: HashSet::new(),
            trigger_times: HashMap::new(),
            interner: Interner::default(),
            namespaces: Namespaces::default(),
            total: 0,
        }
    }

    /// Records an added/updated (`removed == false`) or deleted EndpointSlice.
    pub fn update(&mut self, slice: &EndpointSlice, removed: bool) -> TrackOutcome {
        let mut outcome = TrackOutcome::default();
        self.total += 1;
        let info = if removed {
            None
        } else {
            match convert::slice_info(slice) {
                Ok(info) => info,
                Err(e) => {
                    outcome.error = Some(e);
                    None
                }
            }
        };
        match info {
            None => {
                let (namespace, slice_name, _) = convert::slice_keys(slice);
                let key = (Name::from(namespace), Name::from(slice_name));
                if let Some(owner) = self.owners.remove(&key) {
                    let slice_name = key.1;
                    outcome.pending = self.set_pending(&owner, &slice_name, None);
                    if outcome.pending {
                        self.trigger_times.remove(&owner);
                    }
                }
            }
            Some(mut info) => {
                outcome.warnings = std::mem::take(&mut info.warnings);
                self.namespaces.share(&mut info.service.namespace);
                Arc::make_mut(&mut info.endpoints)
                    .iter_mut()
                    .for_each(|ep| self.interner.endpoint(ep));
                let service = info.service.clone();
                let slice_name = info.slice_name.clone();
                let key = (service.namespace.clone(), slice_name.clone());
                if let Some(old) = self.owners.insert(key, service.clone())
                    && old != service
                {
                    outcome.pending |= self.set_pending(&old, &slice_name, None);
                }
                let trigger = info.trigger_time;
                let changed = self.set_pending(&service, &slice_name, Some(Arc::new(info)));
                if changed
                    && let Some(t) = trigger
                    && t > self.start_time
                {
                    self.trigger_times.entry(service).or_default().push(t);
                }
                outcome.pending |= changed;
            }
        }
        outcome
    }

    fn set_pending(
        &mut self,
        service: &ServiceName,
        slice: &Name,
        value: Option<Arc<SliceInfo>>,
    ) -> bool {
        let tracker = self.by_service.entry(service.clone()).or_default();
        let applied = tracker.applied(slice);
        let pending = tracker.pending_index(slice);
        let effective = match pending {
            Ok(i) => tracker.pending[i].1.as_ref(),
            Err(_) => applied,
        };
        if same(effective, value.as_ref()) {
            if tracker.applied.is_empty() && tracker.pending.is_empty() {
                self.by_service.remove(service);
            }
            return false;
        }
        if same(applied, value.as_ref()) {
            if let Ok(i) = pending {
                tracker.pending.remove(i);
            }
            if tracker.pending.is_empty() {
                self.pending_services.remove(service);
                if tracker.applied.is_empty() {
                    self.by_service.remove(service);
                }
            }
        } else {
            match pending {
                Ok(i) => tracker.pending[i].1 = value,
                Err(i) => tracker.pending.insert(i, (slice.clone(), value)),
            }
            self.pending_services.insert(service.clone());
        }
        true
    }

    /// Number of pending slice changes (for the `endpoint_changes_pending` metric).
    pub fn pending(&self) -> usize {
        self.pending_services
            .iter()
            .filter_map(|s| self.by_service.get(s))
            .map(|t| t.pending.len())
            .sum()
    }

    /// Number of slice updates recorded since creation (for the `_total` metric).
    pub fn total(&self) -> u64 {
        self.total
    }

    fn endpoints_of(&self, slices: &[Arc<SliceInfo>]) -> EndpointsOf {
        // The common case, one slice with one port and distinct addresses: nothing to merge or
        // deduplicate, its endpoint list (ports already set) is the service port's list, shared.
        if let [info] = slices
            && let [port] = info.ports.as_slice()
            && !info.endpoints.is_empty()
            && info.endpoints.windows(2).all(|w| w[0].ip < w[1].ip)
        {
            return BTreeMap::from([(info.port_name(port), info.endpoints.clone())]);
        }
        let mut by_port: BTreeMap<ServicePortName, BTreeMap<(IpAddr, u16), Endpoint>> =
            BTreeMap::new();
        for info in slices {
            for port in &info.ports {
                let set = by_port.entry(info.port_name(port)).or_default();
                for ep in info.endpoints_for(port) {
                    let local = !self.hostname.is_empty() && ep.is_local(&self.hostname);
                    match set.get(&(ep.ip, ep.port)) {
                        Some(existing) if !local || existing.is_local(&self.hostname) => {}
                        _ => {
                            set.insert((ep.ip, ep.port), ep);
                        }
                    }
                }
            }
        }
        by_port
            .into_iter()
            .filter(|(_, set)| !set.is_empty())
            .map(|(name, set)| (name, Arc::new(set.into_values().collect())))
            .collect()
    }

    /// Applies the pending changes to `map` (touching only the changed services) and reports them.
    pub fn apply(&mut self, map: &mut EndpointsMap) -> EndpointsUpdateResult {
        let mut result = EndpointsUpdateResult::default();
        let services: Vec<ServiceName> = std::mem::take(&mut self.pending_services)
            .into_iter()
            .collect();
        for service in services {
            let Some(mut tracker) = self.by_service.remove(&service) else {
                continue;
            };
            let previous = self.endpoints_of(&tracker.applied);
            tracker.commit();
            let current = self.endpoints_of(&tracker.applied);
            if !tracker.applied.is_empty() {
                self.by_service.insert(service.clone(), tracker);
            }
            let mut changed = false;
            for name in previous.keys() {
                if !current.contains_key(name) {
                    map.remove(name);
                    result.changed_ports.insert(name.clone());
                    changed = true;
                }
            }
            for (name, eps) in &current {
                if previous.get(name) != Some(eps) {
                    map.insert(name.clone(), eps.clone());
                    result.changed_ports.insert(name.clone());
                    changed = true;
                }
            }
            detect_stale_udp(&previous, &current, &mut result);
            if changed {
                result.updated_services.insert(service);
            }
        }
        result
            .trigger_times
            .extend(std::mem::take(&mut self.trigger_times));
        self.interner.purge();
        self.namespaces.purge();
        result
    }
}

fn detect_stale_udp(
    previous: &EndpointsOf,
    current: &EndpointsOf,
    out: &mut EndpointsUpdateResult,
) {
    for (name, old) in previous {
        if name.protocol != Protocol::Udp {
            continue;
        }
        let new = current.get(name);
        for ep in old.iter().filter(|e| e.ready) {
            let kept = new.is_some_and(|n| {
                n.iter()
                    .any(|e| e.ip == ep.ip && e.port == ep.port && e.ready)
            });
            if !kept {
                out.deleted_udp_endpoints.push(StaleUdpEndpoint {
                    port_name: name.clone(),
                    ip: ep.ip,
                    port: ep.port,
                });
            }
        }
    }
    for (name, new) in current {
        if name.protocol != Protocol::Udp || !new.iter().any(|e| e.ready) {
            continue;
        }
        let was_active = previous
            .get(name)
            .is_some_and(|old| old.iter().any(|e| e.ready));
        if !was_active {
            out.newly_active_udp_services.push(name.clone());
        }
    }
}
