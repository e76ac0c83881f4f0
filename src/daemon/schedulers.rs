//! Per-Service IPVS schedulers on this node: the kernel module of each scheduler a Service asks for
//! is loaded on first use; a scheduler whose module cannot be loaded is unavailable (the planner
//! keeps those Services on the node's scheduler); every Service whose scheduler annotation is ignored
//! (bad value, or unavailable scheduler) is reported with a Warning Event on it and a metric.

use super::events::Events;
use crate::cluster::model::{SchedulerChoice, ServiceMap, ServiceName, ports_of};
use crate::kernel::modules::Modules;
use crate::metrics::Metrics;
use crate::scheduler::Scheduler;
use std::collections::{BTreeMap, BTreeSet};

/// Reason of the Warning Event on a Service whose annotation is ignored.
pub const EVENT_REASON: &str = "InvalidAnnotation";

/// Schedulers whose module could not be loaded, with the error.
pub type Unavailable = BTreeMap<Scheduler, String>;

/// The scheduler modules tried so far, and how each went.
pub struct SchedulerModules {
    modules: Box<dyn Modules>,
    /// The node's scheduler (loaded by whoever set up the node, as upstream expects): never tried.
    node: Scheduler,
    /// Every scheduler tried: `None` loaded, `Some(error)` could not be loaded.
    tried: BTreeMap<Scheduler, Option<String>>,
    /// Schedulers the kernel refused in a virtual-server write although loaded (never retried).
    refused: Unavailable,
}

impl SchedulerModules {
    /// Nothing tried yet; `node` is the node's scheduler.
    pub fn new(modules: Box<dyn Modules>, node: Scheduler) -> Self {
        SchedulerModules {
            modules,
            node,
            tried: BTreeMap::new(),
            refused: Unavailable::new(),
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
    pub fn unavailable(&self) -> Unavailable {
        let failed = self
            .tried
            .iter()
            .filter_map(|(s, e)| e.clone().map(|e| (*s, e)));
        let mut out: Unavailable = failed.collect();
        out.extend(self.refused.iter().map(|(s, e)| (*s, e.clone())));
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
        .filter_map(|svc| choice(map, svc))
        .filter_map(|c| c.valid().map(|(s, _)| s))
        .collect()
}

/// The scheduler annotation of `svc` (the same on every port).
fn choice<'a>(map: &'a ServiceMap, svc: &'a ServiceName) -> Option<&'a SchedulerChoice> {
    ports_of(map, svc).find_map(|(_, p)| p.scheduler.as_ref())
}

/// Why the scheduler annotation of `svc` is ignored, as (annotation, note); `None` when it is not.
/// With `invalid_too` false only an unavailable scheduler counts.
fn ignored(
    choice: &SchedulerChoice,
    unavailable: &Unavailable,
    node: Scheduler,
    invalid_too: bool,
) -> Option<(&'static str, String)> {
    match choice {
        SchedulerChoice::Invalid(e) if invalid_too => Some((
            e.annotation,
            format!(
                "{e}; the Service uses the node's scheduler {:?}",
                node.name()
            ),
        )),
        SchedulerChoice::Set {
            scheduler, source, ..
        } => unavailable.get(scheduler).map(|why| {
            let note = format!(
                "annotation {source}={:?} ignored: the kernel cannot use scheduler {:?} ({why}); \
                 the Service uses the node's scheduler {:?}",
                scheduler.name(),
                scheduler.name(),
                node.name()
            );
            (*source, note)
        }),
        SchedulerChoice::Invalid(_) => None,
    }
}

/// A Service whose scheduler annotation is ignored: the annotation and the Event's note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    pub service: ServiceName,
    pub annotation: &'static str,
    pub note: String,
}

/// The Services to report, each once per change: the `updated` Services whose annotation is ignored
/// (bad value or unavailable scheduler), and every Service asking for a scheduler that became
/// unavailable since `before`.
pub fn ignored_annotations(
    services: &ServiceMap,
    updated: &BTreeSet<ServiceName>,
    before: &Unavailable,
    now: &Unavailable,
    node: Scheduler,
) -> Vec<Ignored> {
    let newly: Unavailable = now
        .iter()
        .filter(|(s, _)| !before.contains_key(*s))
        .map(|(s, e)| (*s, e.clone()))
        .collect();
    let mut candidates: BTreeMap<ServiceName, bool> =
        updated.iter().map(|s| (s.clone(), true)).collect();
    if !newly.is_empty() {
        // Rare (a scheduler found unavailable): one scan of every Service.
        for k in services.keys() {
            candidates.entry(k.service()).or_insert(false);
        }
    }
    let mut out = Vec::new();
    for (service, was_updated) in candidates {
        let Some(c) = choice(services, &service) else {
            continue;
        };
        let unavailable = if was_updated { now } else { &newly };
        if let Some((annotation, note)) = ignored(c, unavailable, node, was_updated) {
            out.push(Ignored {
                service,
                annotation,
                note,
            });
        }
    }
    out
}

/// Reports one ignored annotation: a warning, the metric and a Warning Event on the Service.
pub fn report(i: &Ignored, events: &Events, metrics: &Metrics) {
    tracing::warn!(service = %i.service, "{}", i.note);
    metrics.inc_annotation_error(i.annotation);
    events.service_warning(&i.service, EVENT_REASON, "Sync", i.note.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::annotations::{KUBE_ROUTER_SCHEDULER, SCHEDULER};
    use crate::cluster::model::{AnnotationError, ServicePort, ServicePortName};
    use crate::kernel::modules::FakeModules;
    use std::sync::{Arc, Mutex};

    /// A loader sharing its record with the test.
    struct Shared(Arc<Mutex<FakeModules>>);

    impl Modules for Shared {
        fn ensure_loaded(&mut self, name: &str) -> crate::kernel::KernelResult<()> {
            self.0.lock().unwrap().ensure_loaded(name)
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
        assert!(un[&Scheduler::Twos].contains("ip_vs_twos"), "{un:?}");
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
        assert!(un[&Scheduler::Sh].contains("refused"), "{un:?}");
        m.load(&BTreeSet::from([Scheduler::Sh]), true);
        assert!(m.unavailable().contains_key(&Scheduler::Sh));
    }

    fn name(n: &str) -> ServiceName {
        ServiceName {
            namespace: "ns".into(),
            name: n.into(),
        }
    }

    fn map(entries: &[(&str, Option<SchedulerChoice>)]) -> ServiceMap {
        let mut out = ServiceMap::new();
        for (n, choice) in entries {
            for port in ["a", "b"] {
                let spn = ServicePortName {
                    namespace: "ns".into(),
                    name: (*n).into(),
                    port_name: port.into(),
                    protocol: crate::net::Protocol::Tcp,
                };
                let sp = ServicePort {
                    scheduler: choice.clone(),
                    ..ServicePort::new(spn.clone(), vec!["10.0.0.1".parse().unwrap()], 80)
                };
                out.insert(spn, Arc::new(sp));
            }
        }
        out
    }

    fn set(s: Scheduler, source: &'static str) -> Option<SchedulerChoice> {
        Some(SchedulerChoice::Set {
            scheduler: s,
            flags: 0,
            source,
        })
    }

    #[test]
    fn ignored_annotations_are_reported_once_per_change() {
        let bad = Some(SchedulerChoice::Invalid(Arc::new(AnnotationError {
            annotation: SCHEDULER,
            value: "fancy".into(),
            reason: "unknown IPVS scheduler \"fancy\"".into(),
        })));
        let sm = map(&[
            ("bad", bad),
            ("twos", set(Scheduler::Twos, KUBE_ROUTER_SCHEDULER)),
            ("sh", set(Scheduler::Sh, SCHEDULER)),
            ("plain", None),
        ]);
        let all: BTreeSet<ServiceName> = ["bad", "twos", "sh", "plain"].map(name).into();
        assert_eq!(
            wanted(&sm, &all),
            BTreeSet::from([Scheduler::Sh, Scheduler::Twos])
        );
        let none = Unavailable::new();
        let twos = Unavailable::from([(Scheduler::Twos, "modprobe ip_vs_twos failed".into())]);
        // First sync: everything updated, twos found unavailable.
        let got = ignored_annotations(&sm, &all, &none, &twos, Scheduler::Rr);
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|i| (i.service.name.as_str(), i.annotation))
            .collect();
        assert_eq!(names, [("bad", SCHEDULER), ("twos", KUBE_ROUTER_SCHEDULER)]);
        assert!(got[0].note.contains("\"fancy\"") && got[0].note.contains("\"rr\""));
        let note = &got[1].note;
        assert!(
            note.contains("kube-router.io/service.scheduler=\"twos\""),
            "{note}"
        );
        assert!(note.contains("modprobe ip_vs_twos failed"), "{note}");
        // Nothing changed: nothing reported again.
        let nothing = BTreeSet::new();
        assert!(ignored_annotations(&sm, &nothing, &twos, &twos, Scheduler::Rr).is_empty());
        // Only "plain" updated: the others are not reported again.
        let plain = BTreeSet::from([name("plain")]);
        assert!(ignored_annotations(&sm, &plain, &twos, &twos, Scheduler::Rr).is_empty());
        // sh becomes unavailable later: its (not updated) Service is found by the scan.
        let both = Unavailable::from([(Scheduler::Twos, "x".into()), (Scheduler::Sh, "y".into())]);
        let got = ignored_annotations(&sm, &nothing, &twos, &both, Scheduler::Mh);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].service, name("sh"));
        assert!(got[0].note.contains("\"mh\""), "{}", got[0].note);
    }
}
