//! Answers the explanation requests: the published decision records of one Service (or all), merged
//! with the kernel's IPVS state read at request time on a socket of its own. Blocking: run it on the
//! explanation's own threads ([`super::workers`]).
//!
//! What it needs from the published state (the records, the drift marks, the drain queue) is copied out
//! under each lock in turn, so nothing the sync loop takes is held while the kernel is read or the
//! answer rendered. One Service costs a GET of each of its virtual servers; the listing costs one dump
//! of the whole table, and both are shared by the requests that arrive while they are made and reused
//! for [`REUSE`].

use super::answer::Answer;
use super::kernel::{KernelSource, KernelView};
use super::metrics::ExplainMetrics;
use super::report::{Context, NodeExplanation, ServiceExplanation};
use super::request::{ExplainRequest, Form, Target};
use super::reuse::Reuse;
use super::{DriftMarks, FamilyDecisions, Published, text};
use crate::cluster::model::ServiceName;
use crate::kernel::ipvs::{Ipvs, IpvsServiceKey};
use crate::proxier::graceful::DrainQueue;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

/// How long a kernel dump and a rendered listing are reused.
pub const REUSE: Duration = Duration::from_secs(1);

/// What the explanation endpoints read.
pub struct Explainer {
    published: Published,
    node: String,
    kernel: KernelSource,
    /// The rendered listing, JSON and text.
    listing: [Reuse<Answer>; 2],
}

/// The published state of some Services, copied out of its locks.
struct Copied {
    services: Vec<(ServiceName, FamilyDecisions)>,
    drains: DrainQueue,
    drift: DriftMarks,
}

fn keys<'a>(d: impl Iterator<Item = &'a FamilyDecisions>) -> BTreeSet<IpvsServiceKey> {
    d.flat_map(FamilyDecisions::iter)
        .flat_map(|r| r.ports.iter())
        .flat_map(|p| p.virtual_servers.iter().map(|v| v.key))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Explainer {
    /// An explainer of node `node` over `published`, reading the
    /// kernel through `ipvs` (`None`: it could not be opened) and counting its reads in `metrics`.
    pub fn new(
        published: Published,
        node: &str,
        ipvs: Option<Box<dyn Ipvs>>,
        metrics: ExplainMetrics,
    ) -> Self {
        Explainer {
            published,
            node: node.to_string(),
            kernel: KernelSource::new(ipvs, REUSE, metrics),
            listing: [Reuse::new(REUSE), Reuse::new(REUSE)],
        }
    }

    /// One Service's published state (its records, its drift marks, the drains of its virtual servers).
    fn copy_one(&self, name: &ServiceName) -> Option<Copied> {
        let index = self.published.index.read();
        let decisions = index
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()?;
        let keys = keys(std::iter::once(&decisions));
        let drains = lock(&self.published.drains)
            .iter()
            .filter(|(k, _)| keys.contains(*k))
            .map(|(k, d)| (*k, d.clone()))
            .collect();
        let drift = {
            let d = lock(&self.published.drift);
            DriftMarks {
                at: d.at,
                services: d
                    .services
                    .get_key_value(name)
                    .map(|(n, k)| (n.clone(), k.clone()))
                    .into_iter()
                    .collect(),
                counts: Default::default(),
            }
        };
        Some(Copied {
            services: vec![(name.clone(), decisions)],
            drains,
            drift,
        })
    }

    /// Every Service's published state.
    fn copy_all(&self) -> Copied {
        let services = {
            let index = self.published.index.read();
            let index = index.unwrap_or_else(|p| p.into_inner());
            index.iter().map(|(n, d)| (n.clone(), d.clone())).collect()
        };
        Copied {
            services,
            drains: lock(&self.published.drains).clone(),
            drift: lock(&self.published.drift).clone(),
        }
    }

    fn context<'a>(&'a self, c: &'a Copied, kernel: &'a KernelView) -> Context<'a> {
        Context {
            node: &self.node,
            kernel,
            drains: &c.drains,
            drift: &c.drift,
        }
    }

    /// The explanation of Service `name`, if the node programs it (its virtual servers read one by one).
    pub fn service(&self, name: &ServiceName) -> Option<ServiceExplanation> {
        let c = self.copy_one(name)?;
        let (name, decisions) = c.services.first()?;
        let (view, error) = match self.kernel.keys(&keys(std::iter::once(decisions))) {
            Ok(v) => (v, None),
            Err(e) => (KernelView::new(), Some(e.to_string())),
        };
        let mut out = self.context(&c, &view).service(name, decisions);
        out.kernel_error = error;
        Some(out)
    }

    /// The explanation of every Service the node programs, in name order (from the shared dump).
    pub fn all(&self) -> NodeExplanation {
        let c = self.copy_all();
        let (view, error) = match self.kernel.full() {
            Ok(v) => (v, None),
            Err(e) => (Default::default(), Some(e.to_string())),
        };
        let cx = self.context(&c, &view);
        NodeExplanation {
            node: self.node.clone(),
            kernel_error: error,
            services: c.services.iter().map(|(n, d)| cx.service(n, d)).collect(),
        }
    }

    /// The rendered answer to `req`.
    pub fn answer(&self, req: &ExplainRequest) -> Answer {
        match &req.target {
            Target::All => {
                let slot = match req.form {
                    Form::Json => &self.listing[0],
                    Form::Text => &self.listing[1],
                };
                slot.get(|| Answer::render(&self.all(), req.form, text::node))
            }
            Target::One(name) => match self.service(name) {
                Some(s) => Answer::render(&s, req.form, text::service),
                None => Answer::text(
                    404,
                    format!(
                        "Service {}/{} is not programmed on this node (unknown, headless, \
                         ExternalName, or without a ClusterIP of a family this node serves)",
                        name.namespace, name.name
                    ),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::{
        Endpoint, EndpointsMap, IpFamily, Protocol, ServiceMap, ServicePort, ServicePortName,
    };
    use crate::kernel::KernelResult;
    use crate::kernel::ipvs::fake::FakeIpvs;
    use crate::kernel::ipvs::{IpvsDestination, IpvsService, IpvsTimeouts};
    use crate::proxier::plan::{NodeFacts, PlanConfig, plan};
    use std::net::IpAddr;
    use std::sync::Arc;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn name(i: usize) -> ServiceName {
        ServiceName {
            namespace: "default".into(),
            name: format!("svc-{i}").as_str().into(),
        }
    }

    /// `n` ClusterIP Services `svc-<i>` with two endpoints each, planned on node n1 and programmed into
    /// `ipvs`: the published state after that sync.
    fn programmed(n: usize, ipvs: &FakeIpvs) -> Published {
        let (mut services, mut endpoints) = (ServiceMap::new(), EndpointsMap::new());
        for i in 0..n {
            let sn = name(i);
            let port = ServicePortName {
                namespace: sn.namespace.clone(),
                name: sn.name.clone(),
                port_name: "p".into(),
                protocol: Protocol::Tcp,
            };
            let vip = IpAddr::from([10, 96, (i / 250) as u8, (i % 250 + 1) as u8]);
            let sp = ServicePort::new(port.clone(), vec![vip], 80);
            services.insert(port.clone(), Arc::new(sp));
            let eps = ["10.244.0.11", "10.244.0.12"].map(|a| Endpoint::new(ip(a), 8080));
            endpoints.insert(port, Arc::new(eps.to_vec()));
        }
        let node = NodeFacts::new("n1", vec![ip("192.168.0.10")]);
        let d = plan(&services, &endpoints, &node, &PlanConfig::new(IpFamily::V4));
        let mut fake = ipvs.clone();
        for vs in d.virtual_servers.values() {
            fake.add_service(&vs.service).unwrap();
            for dst in vs.destinations.values() {
                fake.add_destination(&vs.service.key, &dst).unwrap();
            }
        }
        let published = Published::default();
        let mut index = published.index.write().unwrap();
        index.apply(IpFamily::V4, d.decision_changes());
        drop(index);
        published
    }

    fn explainer(published: &Published, ipvs: Box<dyn Ipvs>) -> (Explainer, ExplainMetrics) {
        let m = ExplainMetrics::unregistered().unwrap();
        let x = Explainer::new(published.clone(), "n1", Some(ipvs), m.clone());
        (x, m)
    }

    fn one(i: usize, form: Form) -> ExplainRequest {
        ExplainRequest {
            target: Target::One(name(i)),
            form,
        }
    }

    #[test]
    fn one_service_reads_only_its_virtual_servers() {
        let ipvs = FakeIpvs::new();
        let published = programmed(200, &ipvs);
        let (x, m) = explainer(&published, Box::new(ipvs.clone()));
        let a = x.answer(&one(7, Form::Json));
        let body = String::from_utf8_lossy(&a.body);
        assert_eq!(a.status, 200, "{body}");
        assert!(body.contains("\"address\": \"10.244.0.12\""), "{body}");
        assert!(body.contains("\"programmed\": true"), "{body}");
        assert_eq!(ipvs.reads("services"), 0, "no dump");
        assert_eq!(ipvs.reads("destination_view"), 0);
        assert_eq!((ipvs.reads("service"), ipvs.reads("destinations")), (1, 1));
        assert_eq!((m.reads("get"), m.reads("dump")), (1, 0));
        let a = x.answer(&one(999, Form::Text));
        assert_eq!(a.status, 404);
        assert_eq!(ipvs.reads("service"), 1, "an unknown Service reads nothing");
    }

    #[test]
    fn concurrent_listings_share_one_dump() {
        let ipvs = FakeIpvs::new();
        let published = programmed(200, &ipvs);
        let (x, m) = explainer(&published, Box::new(ipvs.clone()));
        let x = Arc::new(x);
        let answers: Vec<Answer> = (0..8)
            .map(|i| {
                let x = x.clone();
                let form = if i % 2 == 0 { Form::Json } else { Form::Text };
                std::thread::spawn(move || {
                    x.answer(&ExplainRequest {
                        target: Target::All,
                        form,
                    })
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(answers.iter().all(|a| a.status == 200));
        let text = String::from_utf8_lossy(&answers[1].body);
        assert!(
            text.starts_with("Node n1: 200 Services programmed"),
            "{text}"
        );
        assert_eq!(ipvs.reads("services"), 1, "one dump for JSON and text");
        assert_eq!(m.reads("dump"), 1);
        // The rendered listing itself is shared: the same bytes.
        assert!(answers.iter().step_by(2).all(|a| a.body == answers[0].body));
    }

    /// An IPVS handle that, when read, checks that every lock the sync loop takes is free.
    struct Probe {
        inner: FakeIpvs,
        published: Published,
        held: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Probe {
        fn check(&self) {
            let mut held = self.held.lock().unwrap();
            if self.published.index.try_write().is_err() {
                held.push("index");
            }
            if self.published.drift.try_lock().is_err() {
                held.push("drift");
            }
            if self.published.drains.try_lock().is_err() {
                held.push("drains");
            }
        }
    }

    impl Ipvs for Probe {
        fn version(&mut self) -> KernelResult<String> {
            self.inner.version()
        }
        fn services(&mut self) -> KernelResult<Vec<IpvsService>> {
            self.check();
            self.inner.services()
        }
        fn service(&mut self, key: &IpvsServiceKey) -> KernelResult<Option<IpvsService>> {
            self.check();
            self.inner.service(key)
        }
        fn add_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
            self.inner.add_service(svc)
        }
        fn update_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
            self.inner.update_service(svc)
        }
        fn delete_service(&mut self, key: &IpvsServiceKey) -> KernelResult<()> {
            self.inner.delete_service(key)
        }
        fn destinations(&mut self, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>> {
            self.check();
            self.inner.destinations(key)
        }
        fn add_destination(&mut self, k: &IpvsServiceKey, d: &IpvsDestination) -> KernelResult<()> {
            self.inner.add_destination(k, d)
        }
        fn update_destination(
            &mut self,
            k: &IpvsServiceKey,
            d: &IpvsDestination,
        ) -> KernelResult<()> {
            self.inner.update_destination(k, d)
        }
        fn delete_destination(
            &mut self,
            k: &IpvsServiceKey,
            a: IpAddr,
            p: u16,
        ) -> KernelResult<()> {
            self.inner.delete_destination(k, a, p)
        }
        fn flush(&mut self) -> KernelResult<()> {
            self.inner.flush()
        }
        fn set_timeouts(&mut self, t: IpvsTimeouts) -> KernelResult<()> {
            self.inner.set_timeouts(t)
        }
    }

    #[test]
    fn no_lock_of_the_sync_loop_is_held_while_the_kernel_is_read() {
        let ipvs = FakeIpvs::new();
        let published = programmed(20, &ipvs);
        let held = Arc::new(Mutex::new(Vec::new()));
        let probe = Probe {
            inner: ipvs.clone(),
            published: published.clone(),
            held: held.clone(),
        };
        let (x, _) = explainer(&published, Box::new(probe));
        assert_eq!(x.answer(&one(3, Form::Text)).status, 200);
        let all = ExplainRequest {
            target: Target::All,
            form: Form::Json,
        };
        assert_eq!(x.answer(&all).status, 200);
        assert!(ipvs.reads("services") == 1 && ipvs.reads("service") == 1);
        assert_eq!(*held.lock().unwrap(), Vec::<&str>::new());
    }
}
