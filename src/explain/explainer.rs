//! Answers the explanation requests: the published decision records of one Service (or all), merged
//! with the kernel's IPVS state read at request time on a socket of its own. Blocking.

use super::kernel::{self, KernelView};
use super::report::{Context, NodeExplanation, ServiceExplanation};
use super::{DecisionIndex, FamilyDecisions, Published};
use crate::cluster::model::ServiceName;
use crate::kernel::ipvs::{Ipvs, IpvsServiceKey};
use crate::scheduler::Scheduler;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// What the explanation endpoints read.
pub struct Explainer {
    published: Published,
    node: String,
    node_scheduler: Scheduler,
    /// Its own IPVS handle (`None`: IPVS could not be opened; the kernel's side is then missing).
    ipvs: Option<Mutex<Box<dyn Ipvs>>>,
}

fn keys<'a>(d: impl Iterator<Item = &'a FamilyDecisions>) -> BTreeSet<IpvsServiceKey> {
    d.flat_map(FamilyDecisions::iter)
        .flat_map(|r| r.ports.iter())
        .flat_map(|p| p.virtual_servers.iter().map(|v| v.key))
        .collect()
}

impl Explainer {
    /// An explainer of node `node` (whose scheduler is `node_scheduler`) over `published`.
    pub fn new(
        published: Published,
        node: &str,
        node_scheduler: Scheduler,
        ipvs: Option<Box<dyn Ipvs>>,
    ) -> Self {
        Explainer {
            published,
            node: node.to_string(),
            node_scheduler,
            ipvs: ipvs.map(Mutex::new),
        }
    }

    /// The kernel's side of `keys`, or why it could not be read.
    fn kernel(&self, keys: &BTreeSet<IpvsServiceKey>) -> Result<KernelView, String> {
        let Some(ipvs) = &self.ipvs else {
            return Err("IPVS could not be opened".into());
        };
        let mut ipvs = ipvs.lock().unwrap_or_else(|p| p.into_inner());
        kernel::read(ipvs.as_mut(), keys).map_err(|e| format!("reading IPVS: {e}"))
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, DecisionIndex> {
        self.published
            .index
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Builds explanations with `f`, given the kernel's view (or its error) and the published state.
    fn with_context<T>(
        &self,
        keys: &BTreeSet<IpvsServiceKey>,
        f: impl FnOnce(&Context<'_>) -> T,
    ) -> (T, Option<String>) {
        let (view, error) = match self.kernel(keys) {
            Ok(v) => (v, None),
            Err(e) => (KernelView::new(), Some(e)),
        };
        let drains = self
            .published
            .drains
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let drift = self
            .published
            .drift
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let cx = Context {
            node: &self.node,
            node_scheduler: self.node_scheduler,
            kernel: &view,
            drains: &drains,
            drift: &drift,
        };
        (f(&cx), error)
    }

    /// The explanation of Service `name`, if the node programs it.
    pub fn service(&self, name: &ServiceName) -> Option<ServiceExplanation> {
        let decisions = self.index().get(name).cloned()?;
        let keys = keys(std::iter::once(&decisions));
        let (mut out, error) = self.with_context(&keys, |cx| cx.service(name, &decisions));
        out.kernel_error = error;
        Some(out)
    }

    /// The explanation of every Service the node programs, in name order.
    pub fn all(&self) -> NodeExplanation {
        let all: Vec<(ServiceName, FamilyDecisions)> = self
            .index()
            .iter()
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect();
        let keys = keys(all.iter().map(|(_, d)| d));
        let (services, error) = self.with_context(&keys, |cx| {
            all.iter().map(|(n, d)| cx.service(n, d)).collect()
        });
        NodeExplanation {
            node: self.node.clone(),
            kernel_error: error,
            services,
        }
    }
}
