//! Per-Service IPVS schedulers on this node: the kernel module of each scheduler a Service asks for is
//! loaded on first use; a scheduler whose module cannot be loaded, or that the kernel refuses, is
//! unavailable. That is a fact about the node the planner is given ([`PlanConfig::unavailable_schedulers`]):
//! the planner keeps those Services on the node's scheduler and records why in their decision records,
//! from which the daemon reports them.
//!
//! [`PlanConfig::unavailable_schedulers`]: crate::proxier::plan::PlanConfig::unavailable_schedulers

use crate::cluster::model::{ServiceMap, ServiceName, ports_of};
use crate::kernel::modules::Modules;
use crate::proxier::plan::decision::Unavailable;
use crate::scheduler::Scheduler;
use std::collections::{BTreeMap, BTreeSet};

/// The scheduler modules tried so far, and how each went.
pub struct SchedulerModules {
    modules: Box<dyn Modules>,
    /// The node's scheduler (loaded by whoever set up the node, as upstream expects): never tried.
    node: Scheduler,
    /// Every scheduler tried: `None` loaded, `Some(error)` could not be loaded.
    tried: BTreeMap<Scheduler, Option<String>>,
    /// Schedulers the kernel refused in a virtual-server write although loaded (never retried).
    refused: BTreeMap<Scheduler, String>,
}

impl SchedulerModules {
    /// Nothing tried yet; `node` is the node's scheduler.
    pub fn new(modules: Box<dyn Modules>, node: Scheduler) -> Self {
        SchedulerModules {
            modules,
            node,
            tried: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    /// Loads the module of each scheduler in `wanted` not tried yet and, with `retry`, tries again the
    /// ones that failed (a module installed since). Blocking (runs `modprobe`).
    pub fn load(&mut self, wanted: &BTreeSet<Scheduler>, retry: bool) {
        let failed = self.tried.iter().filter(|(_, e)| e.is_some());
        let again: Vec<Scheduler> = if retry {
            failed.map(|(s, _)| *s).collect()
        } else {
            Vec::new()
        };
        let new = wanted
            .iter()
            .filter(|s| **s != self.node && !self.tried.contains_key(*s));
        for s in new.copied().collect::<Vec<_>>().into_iter().chain(again) {
            let module = format!("ip_vs_{}", s.name());
            let result = self.modules.ensure_loaded(&module);
            let error = result.err().map(|e| e.to_string());
            let before = self.tried.insert(s, error.clone());
            match error {
                None => tracing::info!(scheduler = %s, module, "IPVS scheduler module loaded"),
                // A retry failing as before is not news.
                Some(e) if before == Some(Some(e.clone())) => {
                    tracing::debug!(scheduler = %s, module, error = %e, "IPVS scheduler still unavailable")
                }
                Some(e) => {
                    tracing::warn!(scheduler = %s, module, error = %e, "IPVS scheduler unavailable")
                }
            }
        }
    }

    /// Records the schedulers (by name) the kernel refused in virtual-server writes: unavailable
    /// from now on (the node's scheduler and unknown names aside: nothing to fall back from).
    pub fn refused_by_kernel(&mut self, names: &BTreeSet<String>) {
        for s in names.iter().filter_map(|n| n.parse::<Scheduler>().ok()) {
            if s != self.node && !self.refused.contains_key(&s) {
                tracing::warn!(scheduler = %s, "the kernel has no such IPVS scheduler");
                let why = format!("the kernel refused scheduler {:?}", s.name());
                self.refused.insert(s, why);
            }
        }
    }

    /// The schedulers that could not be loaded or that the kernel refused, with why.
    pub fn unavailable(&self) -> BTreeMap<Scheduler, Unavailable> {
        let failed = self.tried.iter().filter_map(|(s, e)| {
            let e = e.as_deref()?;
            Some((*s, Unavailable::ModuleNotLoaded(e.into())))
        });
        let mut out: BTreeMap<Scheduler, Unavailable> = failed.collect();
        for (s, why) in &self.refused {
            out.insert(*s, Unavailable::RefusedByKernel(why.as_str().into()));
        }
        out
    }
}

/// The valid annotated schedulers of `services`' ports.
pub fn wanted<'a>(
    map: &ServiceMap,
    services: impl IntoIterator<Item = &'a ServiceName>,
) -> BTreeSet<Scheduler> {
    services
        .into_iter()
        .filter_map(|svc| requested(map, svc))
        .collect()
}

/// The scheduler the options of `svc` ask for (the same on every port), if valid.
fn requested(map: &ServiceMap, svc: &ServiceName) -> Option<Scheduler> {
    ports_of(map, svc)
        .find_map(|(_, p)| p.options.as_deref())
        .and_then(|o| o.scheduler)
        .map(|r| r.scheduler)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::modules::FakeModules;
    use std::sync::{Arc, Mutex};

    /// A loader sharing its record with the test.
    struct Shared(Arc<Mutex<FakeModules>>);

    impl Modules for Shared {
        fn ensure_loaded(&mut self, name: &str) -> crate::kernel::KernelResult<()> {
            self.0.lock().unwrap().ensure_loaded(name)
        }
    }

    fn why(u: &Unavailable) -> &str {
        match u {
            Unavailable::ModuleNotLoaded(e) | Unavailable::RefusedByKernel(e) => e,
        }
    }

    #[test]
    fn modules_load_once_on_first_use_and_failures_are_retried_on_request() {
        let fake = Arc::new(Mutex::new(FakeModules::new(&["ip_vs_sh", "ip_vs_mh"])));
        let mut m = SchedulerModules::new(Box::new(Shared(fake.clone())), Scheduler::Rr);
        m.load(&BTreeSet::new(), false);
        assert!(fake.lock().unwrap().attempts.is_empty());
        let wanted = BTreeSet::from([Scheduler::Rr, Scheduler::Sh, Scheduler::Twos]);
        m.load(&wanted, false);
        assert_eq!(fake.lock().unwrap().attempts, ["ip_vs_sh", "ip_vs_twos"]);
        let un = m.unavailable();
        assert_eq!(un.keys().copied().collect::<Vec<_>>(), [Scheduler::Twos]);
        assert!(why(&un[&Scheduler::Twos]).contains("ip_vs_twos"), "{un:?}");
        // Tried ones are not tried again; a retry only retries the failures.
        m.load(&wanted, false);
        assert_eq!(fake.lock().unwrap().attempts.len(), 2);
        fake.lock().unwrap().available.insert("ip_vs_twos".into());
        m.load(&BTreeSet::new(), true);
        assert_eq!(fake.lock().unwrap().attempts.len(), 3);
        assert!(m.unavailable().is_empty());
        // Loaded, but the kernel refuses it: unavailable for good; the node's scheduler never is.
        let names = BTreeSet::from(["sh".to_string(), "rr".to_string(), "bogus".to_string()]);
        m.refused_by_kernel(&names);
        let un = m.unavailable();
        assert_eq!(un.keys().copied().collect::<Vec<_>>(), [Scheduler::Sh]);
        assert!(why(&un[&Scheduler::Sh]).contains("refused"), "{un:?}");
        m.load(&BTreeSet::from([Scheduler::Sh]), true);
        assert!(m.unavailable().contains_key(&Scheduler::Sh));
    }
}
