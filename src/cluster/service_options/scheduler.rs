//! The per-Service IPVS scheduler and its flags, with kube-router's annotations as aliases (ours win when
//! both are set).

use super::types::{
    AnnotationError, Annotations, OptionParser, ProblemKind, SchedulerRequest, ServiceOptions,
};
use crate::scheduler::Scheduler;

/// The IPVS scheduler of every virtual server of the Service (`rr`, `sh`, `mh`, ...).
pub const SCHEDULER: &str = "ipvs.kube-proxy-rs.io/scheduler";
/// Comma-separated scheduler flags as `ipvsadm -b` names them (`sh-port,sh-fallback`, `flag-1`, ...).
pub const SCHEDULER_FLAGS: &str = "ipvs.kube-proxy-rs.io/scheduler-flags";
/// kube-router's scheduler annotation (alias of [`SCHEDULER`]).
pub const KUBE_ROUTER_SCHEDULER: &str = "kube-router.io/service.scheduler";
/// kube-router's scheduler flags annotation (alias of [`SCHEDULER_FLAGS`]; `flag-1,flag-2,flag-3`).
pub const KUBE_ROUTER_SCHEDULER_FLAGS: &str = "kube-router.io/service.schedflags";

/// The (scheduler, flags) annotation pairs, in precedence order.
const PAIRS: [(&str, &str); 2] = [
    (SCHEDULER, SCHEDULER_FLAGS),
    (KUBE_ROUTER_SCHEDULER, KUBE_ROUTER_SCHEDULER_FLAGS),
];

/// The scheduler option.
pub(super) const OPTION: OptionParser = OptionParser {
    keys: &[
        SCHEDULER,
        SCHEDULER_FLAGS,
        KUBE_ROUTER_SCHEDULER,
        KUBE_ROUTER_SCHEDULER_FLAGS,
    ],
    parse,
};

fn parse(a: Annotations<'_>, options: &mut ServiceOptions) {
    match scheduler_request(a) {
        Ok(request) => options.scheduler = request,
        Err(e) => options.problems.push(e),
    }
}

fn invalid(annotation: &'static str, value: &str, reason: String) -> AnnotationError {
    AnnotationError::new(annotation, value, reason, ProblemKind::Invalid)
}

/// The scheduler the annotations ask for: our pair if our scheduler annotation is set, else
/// kube-router's. A flags annotation only counts with the scheduler annotation of its own pair; set
/// alone it is refused. `Ok(None)` when no scheduler annotation is set (blank values count as unset).
pub fn scheduler_request(a: Annotations<'_>) -> Result<Option<SchedulerRequest>, AnnotationError> {
    for (sched_key, flags_key) in PAIRS {
        let Some(name) = a.value(sched_key) else {
            continue;
        };
        let scheduler = name
            .parse::<Scheduler>()
            .map_err(|e| invalid(sched_key, name, e.to_string()))?;
        let flags = match a.value(flags_key) {
            None => 0,
            Some(raw) => scheduler
                .parse_flags(raw)
                .map_err(|e| invalid(flags_key, raw, e.to_string()))?,
        };
        return Ok(Some(SchedulerRequest {
            scheduler,
            flags,
            source: sched_key,
        }));
    }
    for (sched_key, flags_key) in PAIRS {
        if let Some(raw) = a.value(flags_key) {
            let reason = format!("scheduler flags need the {sched_key} annotation");
            return Err(invalid(flags_key, raw, reason));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    type Choice = Result<Option<SchedulerRequest>, AnnotationError>;

    fn choice(pairs: &[(&str, &str)]) -> Choice {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        scheduler_request(Annotations(&map))
    }

    fn set(scheduler: Scheduler, flags: u32) -> Choice {
        from(SCHEDULER, scheduler, flags)
    }

    fn from(source: &'static str, scheduler: Scheduler, flags: u32) -> Choice {
        Ok(Some(SchedulerRequest {
            scheduler,
            flags,
            source,
        }))
    }

    fn error(c: Choice) -> AnnotationError {
        match c {
            Err(e) => e,
            other => panic!("expected an invalid value, got {other:?}"),
        }
    }

    /// The scheduler every port of a converted Service gets, or the error it carries.
    fn port_choice(p: &crate::cluster::model::ServicePort) -> Choice {
        let Some(o) = p.options.as_deref() else {
            return Ok(None);
        };
        match o.problems.first() {
            Some(e) => Err(e.clone()),
            None => Ok(o.scheduler),
        }
    }

    #[test]
    fn names_and_flags() {
        assert_eq!(
            crate::cluster::service_options::ServiceOptions::from_annotations(None),
            None
        );
        assert_eq!(choice(&[]), Ok(None));
        assert_eq!(choice(&[("other", "sh")]), Ok(None));
        assert_eq!(choice(&[(SCHEDULER, "sh")]), set(Scheduler::Sh, 0));
        assert_eq!(choice(&[(SCHEDULER, " lc ")]), set(Scheduler::Lc, 0));
        assert_eq!(
            choice(&[(SCHEDULER, "sh"), (SCHEDULER_FLAGS, "sh-port, sh-fallback")]),
            set(Scheduler::Sh, 0x18)
        );
        assert_eq!(
            choice(&[(SCHEDULER, "mh"), (SCHEDULER_FLAGS, "mh-fallback")]),
            set(Scheduler::Mh, 0x8)
        );
        assert_eq!(
            choice(&[(SCHEDULER, "wrr"), (SCHEDULER_FLAGS, "flag-3")]),
            set(Scheduler::Wrr, 0x20)
        );
        // Blank values are unset.
        assert_eq!(choice(&[(SCHEDULER, " "), (SCHEDULER_FLAGS, "")]), Ok(None));
        assert_eq!(
            choice(&[(SCHEDULER, "rr"), (SCHEDULER_FLAGS, "")]),
            set(Scheduler::Rr, 0)
        );
    }

    #[test]
    fn kube_router_aliases_and_precedence() {
        assert_eq!(
            choice(&[(KUBE_ROUTER_SCHEDULER, "mh")]),
            from(KUBE_ROUTER_SCHEDULER, Scheduler::Mh, 0)
        );
        assert_eq!(
            choice(&[
                (KUBE_ROUTER_SCHEDULER, "mh"),
                (KUBE_ROUTER_SCHEDULER_FLAGS, "flag-1,flag-2")
            ]),
            from(KUBE_ROUTER_SCHEDULER, Scheduler::Mh, 0x18)
        );
        // Ours wins, with its own flags; kube-router's flags go with kube-router's scheduler only.
        assert_eq!(
            choice(&[
                (SCHEDULER, "sh"),
                (KUBE_ROUTER_SCHEDULER, "mh"),
                (KUBE_ROUTER_SCHEDULER_FLAGS, "flag-1")
            ]),
            set(Scheduler::Sh, 0)
        );
        assert_eq!(
            choice(&[
                (SCHEDULER, "lc"),
                (SCHEDULER_FLAGS, "flag-2"),
                (KUBE_ROUTER_SCHEDULER, "bogus"),
            ]),
            set(Scheduler::Lc, 0x10)
        );
        // A bad value of ours is not replaced by a good kube-router one.
        let e = error(choice(&[
            (SCHEDULER, "fancy"),
            (KUBE_ROUTER_SCHEDULER, "sh"),
        ]));
        assert_eq!((e.annotation, e.value.as_str()), (SCHEDULER, "fancy"));
    }

    /// A Service as the watcher decodes it from the API server's JSON, converted.
    fn converted(annotations: serde_json::Value) -> crate::cluster::convert::ConvertedService {
        use crate::cluster::decode::Decoded;
        use k8s_openapi::api::core::v1::Service;
        let v = serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "annotations": annotations},
            "spec": {"type": "NodePort", "clusterIP": "10.0.0.1",
                     "ports": [{"name": "x", "port": 80, "nodePort": 30080}, {"name": "y", "port": 81}]},
        });
        let svc = Decoded::<Service>::from_value(v).object().cloned().unwrap();
        crate::cluster::convert::service_ports(&svc).unwrap()
    }

    #[test]
    fn conversion_puts_the_choice_on_every_port_and_never_rejects_the_service() {
        let c = converted(serde_json::json!({
            SCHEDULER: "sh", SCHEDULER_FLAGS: "sh-port", "unrelated": "mh", KUBE_ROUTER_SCHEDULER: "lc"
        }));
        assert_eq!(c.ports.len(), 2);
        for p in &c.ports {
            assert_eq!(port_choice(p), set(Scheduler::Sh, 0x10), "{}", p.name);
        }
        let c = converted(serde_json::json!({KUBE_ROUTER_SCHEDULER: "mh"}));
        let want = from(KUBE_ROUTER_SCHEDULER, Scheduler::Mh, 0);
        assert!(c.ports.iter().all(|p| port_choice(p) == want));
        // A bad value keeps the Service and its ports; the error travels with them.
        let c = converted(serde_json::json!({SCHEDULER: "nope"}));
        assert_eq!(c.ports.len(), 2);
        for p in &c.ports {
            let e = error(port_choice(p));
            assert_eq!((e.annotation, e.value.as_str()), (SCHEDULER, "nope"));
        }
        assert!(
            c.ports
                .iter()
                .all(|p| p.node_port.is_some() == (p.port == 80))
        );
        let c = converted(serde_json::json!({"unrelated": "sh"}));
        assert!(c.ports.iter().all(|p| p.options.is_none()));
        // The annotation is part of the port's value: a change is a change of the service.
        assert_ne!(
            converted(serde_json::json!({SCHEDULER: "sh"})),
            converted(serde_json::json!({SCHEDULER: "rr"}))
        );
    }

    #[test]
    fn huge_values_are_kept_and_quoted_cut() {
        let huge = format!("bogus{}", "x".repeat(256 * 1024));
        for pairs in [
            vec![(SCHEDULER, huge.as_str())],
            vec![(SCHEDULER, "rr"), (SCHEDULER_FLAGS, huge.as_str())],
        ] {
            let e = error(choice(&pairs));
            assert!(
                e.value.len() <= 128 && e.value.starts_with("bogus"),
                "{}",
                e.value
            );
            let text = e.to_string();
            assert!(text.len() < 1024, "{} bytes", text.len());
            assert!(text.contains("262149 bytes"), "{text}");
        }
    }

    #[test]
    fn bad_values_name_the_annotation_and_the_value() {
        let e = error(choice(&[(SCHEDULER, "RR")]));
        assert_eq!((e.annotation, e.value.as_str()), (SCHEDULER, "RR"));
        assert!(e.reason.contains("unknown IPVS scheduler"), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(SCHEDULER) && text.contains("\"RR\""),
            "{text}"
        );

        let e = error(choice(&[
            (SCHEDULER, "sh"),
            (SCHEDULER_FLAGS, "sh-port,bogus"),
        ]));
        assert_eq!(
            (e.annotation, e.value.as_str()),
            (SCHEDULER_FLAGS, "sh-port,bogus")
        );
        assert!(e.reason.contains("\"bogus\""), "{e}");

        let e = error(choice(&[(SCHEDULER, "rr"), (SCHEDULER_FLAGS, "mh-port")]));
        assert!(e.reason.contains("does not apply"), "{e}");

        let e = error(choice(&[(KUBE_ROUTER_SCHEDULER, "maglev")]));
        assert_eq!(e.annotation, KUBE_ROUTER_SCHEDULER);

        let e = error(choice(&[(SCHEDULER_FLAGS, "sh-port")]));
        assert_eq!(e.annotation, SCHEDULER_FLAGS);
        assert!(e.reason.contains(SCHEDULER), "{e}");
        let e = error(choice(&[(KUBE_ROUTER_SCHEDULER_FLAGS, "flag-1")]));
        assert_eq!(e.annotation, KUBE_ROUTER_SCHEDULER_FLAGS);
    }
}
