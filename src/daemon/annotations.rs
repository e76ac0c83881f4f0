//! Reports the Service annotations that are not applied, as the planner's decision records state them:
//! a warning, a Warning Event on the Service and `kubeproxy_rs_service_annotation_errors_total`. Each
//! problem is reported once per change of its Service, and once when it appears without one (a
//! scheduler found unavailable on this node).

use super::events::Events;
use crate::cluster::model::ServiceName;
use crate::cluster::service_options::AnnotationError;
use crate::explain::index::DecisionIndex;
use crate::metrics::Metrics;
use std::collections::{BTreeMap, BTreeSet};

/// The problems of the Services in `names` that have any (at the first sync `names` is every Service).
pub fn problems_of(
    index: &DecisionIndex,
    names: &BTreeSet<ServiceName>,
) -> BTreeMap<ServiceName, Vec<AnnotationError>> {
    names
        .iter()
        .filter_map(|n| {
            let p = index.get(n).map(|d| d.problems()).unwrap_or_default();
            (!p.is_empty()).then(|| (n.clone(), p))
        })
        .collect()
}

/// What to report after a sync: for each Service whose records changed, every problem when the
/// Service itself was `updated`, else only the problems it did not have `before` (the same annotation,
/// value and kind; a reworded reason is not news).
pub fn to_report(
    before: &BTreeMap<ServiceName, Vec<AnnotationError>>,
    after: BTreeMap<ServiceName, Vec<AnnotationError>>,
    updated: &BTreeSet<ServiceName>,
) -> Vec<(ServiceName, AnnotationError)> {
    let mut out = Vec::new();
    for (name, problems) in after {
        let old = before.get(&name);
        for p in problems {
            let known = old.is_some_and(|o| o.iter().any(|q| same(q, &p)));
            if updated.contains(&name) || !known {
                out.push((name.clone(), p));
            }
        }
    }
    out
}

fn same(a: &AnnotationError, b: &AnnotationError) -> bool {
    (a.annotation, &a.value, a.kind) == (b.annotation, &b.value, b.kind)
}

/// Reports one problem: a warning, the metric and a Warning Event on the Service.
pub fn report(service: &ServiceName, p: &AnnotationError, events: &Events, metrics: &Metrics) {
    tracing::warn!(service = %service, "{p}");
    metrics.inc_annotation_error(p.annotation);
    events.service_warning(service, p.kind.event_reason(), "Sync", p.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::{ServiceMap, ServicePort, ServicePortName};
    use crate::cluster::service_options::{KUBE_ROUTER_SCHEDULER, SCHEDULER, ServiceOptions};
    use crate::daemon::scheduler_modules::wanted;
    use crate::net::{IpFamily, Protocol};
    use crate::proxier::plan::decision::Unavailable;
    use crate::proxier::plan::{NodeFacts, PlanConfig, plan};
    use crate::scheduler::Scheduler;
    use std::sync::Arc;

    fn name(n: &str) -> ServiceName {
        ServiceName {
            namespace: "ns".into(),
            name: n.into(),
        }
    }

    /// Two ports per Service, each with the options its annotations give.
    fn map(entries: &[(&str, &[(&str, &str)])]) -> ServiceMap {
        let mut out = ServiceMap::new();
        for (n, annotations) in entries {
            let a: BTreeMap<String, String> = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let options = ServiceOptions::from_annotations(Some(&a));
            for port in ["a", "b"] {
                let spn = ServicePortName {
                    namespace: "ns".into(),
                    name: (*n).into(),
                    port_name: port.into(),
                    protocol: Protocol::Tcp,
                };
                let sp = ServicePort {
                    options: options.clone(),
                    ..ServicePort::new(spn.clone(), vec!["10.0.0.1".parse().unwrap()], 80)
                };
                out.insert(spn, Arc::new(sp));
            }
        }
        out
    }

    /// The index after one plan with `node` and `unavailable`, and what it reports against `before`.
    fn sync(
        index: &mut DecisionIndex,
        sm: &ServiceMap,
        node: Scheduler,
        unavailable: &[(Scheduler, &str)],
        updated: &BTreeSet<ServiceName>,
    ) -> Vec<(ServiceName, AnnotationError)> {
        let cfg = PlanConfig {
            scheduler: node,
            unavailable_schedulers: unavailable
                .iter()
                .map(|(s, why)| (*s, Unavailable::ModuleNotLoaded((*why).into())))
                .collect(),
            ..PlanConfig::new(IpFamily::V4)
        };
        let d = plan(sm, &Default::default(), &NodeFacts::new("n1", vec![]), &cfg);
        let all: BTreeSet<ServiceName> = index
            .iter()
            .map(|(n, _)| n.clone())
            .chain(d.decisions.keys().cloned())
            .collect();
        let before = problems_of(index, &all);
        let touched = index.apply(IpFamily::V4, d.decision_changes());
        to_report(&before, problems_of(index, &touched), updated)
    }

    #[test]
    fn ignored_annotations_are_reported_once_per_change() {
        let sm = map(&[
            ("bad", &[(SCHEDULER, "fancy")]),
            ("twos", &[(KUBE_ROUTER_SCHEDULER, "twos")]),
            ("sh", &[(SCHEDULER, "sh")]),
            ("plain", &[]),
        ]);
        let all: BTreeSet<ServiceName> = ["bad", "twos", "sh", "plain"].map(name).into();
        assert_eq!(
            wanted(&sm, &all),
            BTreeSet::from([Scheduler::Sh, Scheduler::Twos])
        );
        let twos = [(Scheduler::Twos, "modprobe ip_vs_twos failed")];
        let mut index = DecisionIndex::new();
        // First sync: everything updated, twos found unavailable.
        let got = sync(&mut index, &sm, Scheduler::Rr, &twos, &all);
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|(s, p)| (s.name.as_str(), p.annotation))
            .collect();
        assert_eq!(names, [("bad", SCHEDULER), ("twos", KUBE_ROUTER_SCHEDULER)]);
        let note = got[0].1.to_string();
        assert!(
            note.contains("\"fancy\"") && note.contains("\"rr\""),
            "{note}"
        );
        let note = got[1].1.to_string();
        assert!(
            note.contains("kube-router.io/service.scheduler=\"twos\""),
            "{note}"
        );
        assert!(note.contains("modprobe ip_vs_twos failed"), "{note}");
        // Nothing changed: nothing reported again.
        let nothing = BTreeSet::new();
        assert!(sync(&mut index, &sm, Scheduler::Rr, &twos, &nothing).is_empty());
        // Only "plain" updated: the others are not reported again.
        let plain = BTreeSet::from([name("plain")]);
        assert!(sync(&mut index, &sm, Scheduler::Rr, &twos, &plain).is_empty());
        // sh becomes unavailable later: its (not updated) Service is reported.
        let both = [(Scheduler::Twos, "x"), (Scheduler::Sh, "y")];
        let got = sync(&mut index, &sm, Scheduler::Mh, &both, &nothing);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, name("sh"));
        assert!(got[0].1.to_string().contains("\"mh\""), "{}", got[0].1);
    }
}
