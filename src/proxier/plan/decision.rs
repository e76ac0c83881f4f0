//! The planner's decisions as data: for each Service, per port and IP family, the virtual servers it
//! programs (which address, which scheduler and why) and, for every endpoint it considered, whether it
//! was selected or why not. The planner writes these records while it plans (the same code paths that
//! choose the real servers), they travel in the desired state, and everything downstream reads them:
//! annotation reports, the traffic metrics' index, the explanation served on `/debug/services`.

use crate::cluster::model::ServiceName;
use crate::cluster::model::{Endpoint, ServicePort, SharedEndpoints};
pub use crate::cluster::select::{Pick, Verdict};
use crate::cluster::service_options::{AnnotationError, ProblemKind, ServiceOptions};
use crate::kernel::ipset::entry::IpSetEntry;
use crate::kernel::ipvs::IpvsServiceKey;
use crate::net::IpFamily;
use crate::proxier::plan::ipsets::SetKind;
use crate::proxier::plan::owners::Owners;
use crate::scheduler::Scheduler;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which address of a Service port a virtual server listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressKind {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl AddressKind {
    /// Value of the traffic metrics' `address_kind` label.
    pub fn label(self) -> &'static str {
        match self {
            AddressKind::ClusterIp => "cluster_ip",
            AddressKind::NodePort => "node_port",
            AddressKind::ExternalIp => "external_ip",
            AddressKind::LoadBalancer => "load_balancer",
        }
    }

    /// The name the explanation uses (`clusterIP`, `nodePort`, `externalIP`, `loadBalancer`).
    pub fn name(self) -> &'static str {
        match self {
            AddressKind::ClusterIp => "clusterIP",
            AddressKind::NodePort => "nodePort",
            AddressKind::ExternalIp => "externalIP",
            AddressKind::LoadBalancer => "loadBalancer",
        }
    }
}

/// Why a scheduler is not available on this node (the daemon finds out; the planner falls back).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unavailable {
    /// Its kernel module could not be loaded.
    ModuleNotLoaded(Arc<str>),
    /// The kernel refused it in a virtual-server write although the module was loaded.
    RefusedByKernel(Arc<str>),
}

/// Where the scheduler of a Service port's virtual servers came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedulerSource {
    /// The node's scheduler (`ipvs.scheduler`): no annotation asks for another.
    Node,
    /// The Service's annotation (its key).
    Annotation(&'static str),
    /// The annotation's value was refused (the problem is among the options' problems).
    AnnotationRejected(&'static str),
    /// The annotation asks for a scheduler this node cannot use; the node's scheduler is used (boxed:
    /// rare, and it would double the size of every port's record).
    Unavailable(Box<Refused>),
}

/// An annotated scheduler this node cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The annotation that asks for it.
    pub annotation: &'static str,
    pub scheduler: Scheduler,
    pub why: Unavailable,
}

impl SchedulerSource {
    /// Short name for the explanation (`node`, `annotation`, `annotationRejected`, `moduleUnavailable`,
    /// `refusedByKernel`).
    pub fn name(&self) -> &'static str {
        match self {
            SchedulerSource::Node => "node",
            SchedulerSource::Annotation(_) => "annotation",
            SchedulerSource::AnnotationRejected(_) => "annotationRejected",
            SchedulerSource::Unavailable(r) => match r.why {
                Unavailable::ModuleNotLoaded(_) => "moduleUnavailable",
                Unavailable::RefusedByKernel(_) => "refusedByKernel",
            },
        }
    }

    /// The problem to report when the annotated scheduler cannot be used on this node.
    pub fn problem(&self, node: Scheduler) -> Option<AnnotationError> {
        let SchedulerSource::Unavailable(r) = self else {
            return None;
        };
        let Refused {
            annotation,
            scheduler,
            why,
        } = &**r;
        let why = match why {
            Unavailable::ModuleNotLoaded(e) | Unavailable::RefusedByKernel(e) => e,
        };
        let reason = format!(
            "the kernel cannot use scheduler {:?} ({why}); the Service uses the node's scheduler {:?}",
            scheduler.name(),
            node.name()
        );
        Some(AnnotationError::new(
            annotation,
            scheduler.name(),
            reason,
            ProblemKind::Invalid,
        ))
    }
}

/// The scheduler a Service port's virtual servers get, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerDecision {
    pub scheduler: Scheduler,
    /// Scheduler flags set on the virtual servers (the scheduler's defaults included).
    pub flags: u32,
    pub source: SchedulerSource,
}

/// Which endpoints a virtual server's real servers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EndpointSet {
    /// Cluster-wide endpoints (Cluster traffic policy).
    Cluster,
    /// Endpoints on this node (Local traffic policy).
    Local,
    /// Local traffic policy, but no endpoint on this node: the cluster endpoints, as upstream does
    /// (kubernetes#97081: traffic from this node and its pods still works; external clients' replies are
    /// dropped, since their traffic is not masqueraded).
    ClusterNoLocal,
}

impl EndpointSet {
    /// `v`'s pick in this set.
    pub fn pick(self, v: Verdict) -> Pick {
        match self {
            EndpointSet::Cluster | EndpointSet::ClusterNoLocal => v.cluster,
            EndpointSet::Local => v.local,
        }
    }
}

/// One virtual server the planner programs for a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VsDecision {
    pub kind: AddressKind,
    pub key: IpvsServiceKey,
    pub endpoints: EndpointSet,
}

/// The verdicts of a port's endpoints, one per endpoint; stored once when they are all the same (the
/// common case: every endpoint selected), which saves an allocation per port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdicts {
    /// Every endpoint has this verdict.
    Uniform(Verdict),
    /// One per endpoint.
    Each(Box<[Verdict]>),
}

impl Verdicts {
    /// One verdict per endpoint, in order (`Uniform` repeats without end: zip it with the endpoints).
    pub fn iter(&self) -> impl Iterator<Item = Verdict> + '_ {
        let (each, uniform): (&[Verdict], Option<Verdict>) = match self {
            Verdicts::Uniform(v) => (&[], Some(*v)),
            Verdicts::Each(e) => (e, None),
        };
        each.iter()
            .copied()
            .chain(std::iter::repeat(uniform).map_while(|v| v))
    }
}

impl From<Vec<Verdict>> for Verdicts {
    fn from(v: Vec<Verdict>) -> Self {
        match v.split_first() {
            None => Verdicts::Uniform(Verdict::default()),
            Some((first, rest)) if rest.iter().all(|x| x == first) => Verdicts::Uniform(*first),
            _ => Verdicts::Each(v.into_boxed_slice()),
        }
    }
}

/// A list that is usually one item long, kept inline then (most ports have one virtual server, the
/// ClusterIP, and most Services one port): no allocation for the common case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OneOrMany<T> {
    One(T),
    Many(Box<[T]>),
}

impl<T> std::ops::Deref for OneOrMany<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            OneOrMany::One(v) => std::slice::from_ref(v),
            OneOrMany::Many(m) => m,
        }
    }
}

impl<T> From<Vec<T>> for OneOrMany<T> {
    fn from(mut v: Vec<T>) -> Self {
        if v.len() == 1
            && let Some(one) = v.pop()
        {
            return OneOrMany::One(one);
        }
        OneOrMany::Many(v.into_boxed_slice())
    }
}

/// Health check of an externalTrafficPolicy=Local port: its node port and ready local endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCheckDecision {
    pub node_port: u16,
    pub local_endpoints: u32,
}

/// What the planner decided for one Service port in one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortDecision {
    pub family: IpFamily,
    /// The port as planned (shared with the service map).
    pub port: Arc<ServicePort>,
    /// Its endpoints as planned (shared with the endpoints map); `None`: it had none.
    pub endpoints: Option<SharedEndpoints>,
    /// One per endpoint, in the same order.
    pub verdicts: Verdicts,
    pub virtual_servers: OneOrMany<VsDecision>,
    pub scheduler: SchedulerDecision,
    pub health_check: Option<HealthCheckDecision>,
    /// The set members this port planned, by set, sorted and each once (`KUBE-IPVS-IPS` aside: it
    /// follows the bound addresses). The planner counts a Service's members from here, and drift is
    /// attributed by them.
    pub sets: Box<[(SetKind, IpSetEntry)]>,
}

impl PortDecision {
    /// Each endpoint with its verdict.
    pub fn endpoints(&self) -> impl Iterator<Item = (&Endpoint, Verdict)> {
        let eps = self.endpoints.as_deref().map_or(&[][..], Vec::as_slice);
        eps.iter().zip(self.verdicts.iter())
    }

    /// Whether any virtual server of the port uses `v`'s endpoint; if none does, the reason of the set
    /// that matters most (the node-local set's when every virtual server uses it).
    pub fn selection(&self, v: Verdict) -> Result<(), Pick> {
        let mut reason = None;
        for vs in self.virtual_servers.iter() {
            match vs.endpoints.pick(v) {
                Pick::Selected => return Ok(()),
                p => {
                    reason.get_or_insert(p);
                }
            }
        }
        Err(reason.unwrap_or(if v.cluster == Pick::Unused {
            v.local
        } else {
            v.cluster
        }))
    }
}

/// What the planner decided for one Service in one family: a record per port, in port order, and the
/// Service's options (their problems are reported from here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceDecision {
    pub ports: OneOrMany<PortDecision>,
}

impl ServiceDecision {
    /// The Service's options (the same on every port).
    pub fn options(&self) -> Option<&ServiceOptions> {
        self.ports.first().and_then(|p| p.port.options.as_deref())
    }

    /// Every annotation problem to report: refused or unsupported values, and an annotated scheduler
    /// this node cannot use (naming the node's scheduler, which the record says the Service got instead).
    pub fn problems(&self) -> Vec<AnnotationError> {
        let rejected = self.ports.iter().find_map(|p| match p.scheduler.source {
            SchedulerSource::AnnotationRejected(key) => Some((key, p.scheduler.scheduler)),
            _ => None,
        });
        let mut out: Vec<AnnotationError> = Vec::new();
        for e in self.options().map_or(&[][..], |o| o.problems.as_slice()) {
            let mut e = e.clone();
            if let Some((key, node)) = rejected
                && key == e.annotation
            {
                let used = format!("; the Service uses the node's scheduler {:?}", node.name());
                e.reason.push_str(&used);
            }
            out.push(e);
        }
        for p in self.ports.iter() {
            if let Some(e) = p.scheduler.source.problem(p.scheduler.scheduler)
                && !out.contains(&e)
            {
                out.push(e);
            }
        }
        out
    }
}

/// What one family's sync changed in the records and in the claimants of shared virtual servers
/// ([`DesiredState::shared`](crate::proxier::desired::DesiredState::shared)).
#[derive(Debug, Clone)]
pub enum DecisionChanges {
    /// Every record and shared virtual server of the family (the first plan of the family).
    All {
        records: BTreeMap<ServiceName, Arc<ServiceDecision>>,
        shared: BTreeMap<IpvsServiceKey, Owners>,
    },
    /// What changed: the new record or claimants, or `None` when there are none any more.
    Changed {
        records: BTreeMap<ServiceName, Option<Arc<ServiceDecision>>>,
        shared: BTreeMap<IpvsServiceKey, Option<Owners>>,
    },
}

impl DecisionChanges {
    /// The Services these changes name.
    pub fn names(&self) -> Vec<ServiceName> {
        match self {
            DecisionChanges::All { records, .. } => records.keys().cloned().collect(),
            DecisionChanges::Changed { records, .. } => records.keys().cloned().collect(),
        }
    }
}
