//! Per-Service options: what a Service asks of kube-proxy-rs through annotations, parsed once when the
//! Service is converted (the tracker boundary) into one typed value its ports share.
//!
//! Each option is one parser over the annotation keys it reads ([`OPTIONS`]). A value that is refused,
//! or an annotation this proxy does not support, never rejects the Service: it becomes an
//! [`AnnotationError`] in [`ServiceOptions::problems`]. The planner copies the options into the Service's
//! decision record, and the daemon reports every problem from there (a warning, a Warning Event on the
//! Service and `kubeproxy_rs_service_annotation_errors_total{annotation}`). Adding an annotation is one
//! parser here and one use in the planner.

mod kube_router;
mod scheduler;

pub use kube_router::{
    KUBE_ROUTER_DSR, KUBE_ROUTER_HAIRPIN, KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS, KUBE_ROUTER_LOCAL,
    KUBE_ROUTER_SKIP_LB_IPS,
};
pub use scheduler::{
    KUBE_ROUTER_SCHEDULER, KUBE_ROUTER_SCHEDULER_FLAGS, SCHEDULER, SCHEDULER_FLAGS,
    SchedulerRequest, scheduler_request,
};

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Every Service annotation kube-proxy-rs reads (the decoder keeps these and drops the rest). A unit
/// test checks that it lists exactly the keys of [`OPTIONS`].
pub const SERVICE_ANNOTATIONS: &[&str] = &[
    SCHEDULER,
    SCHEDULER_FLAGS,
    KUBE_ROUTER_SCHEDULER,
    KUBE_ROUTER_SCHEDULER_FLAGS,
    KUBE_ROUTER_LOCAL,
    KUBE_ROUTER_DSR,
    KUBE_ROUTER_SKIP_LB_IPS,
    KUBE_ROUTER_HAIRPIN,
    KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS,
];

/// What the Service's annotations ask for. `Default` is a Service without any of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceOptions {
    /// The IPVS scheduler of every virtual server of the Service, if a valid one is asked for.
    pub scheduler: Option<SchedulerRequest>,
    /// The annotation that sets externalTrafficPolicy Local and internalTrafficPolicy Cluster
    /// (kube-router's `service.local: "true"`), if set.
    pub local_override: Option<&'static str>,
    /// Values refused and annotations not supported: reported, never applied.
    pub problems: Vec<AnnotationError>,
}

/// Whether an annotation's value was refused or the annotation is not supported at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// A value this proxy cannot use (the Service keeps the default behaviour).
    Invalid,
    /// An annotation of another proxy that this one does not implement.
    Unsupported,
}

impl ProblemKind {
    /// Reason of the Warning Event on the Service.
    pub fn event_reason(self) -> &'static str {
        match self {
            ProblemKind::Invalid => "InvalidAnnotation",
            ProblemKind::Unsupported => "UnsupportedAnnotation",
        }
    }
}

/// A Service annotation that is not applied, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AnnotationError {
    /// The annotation's key.
    pub annotation: &'static str,
    /// Its value as given, cut to [`MAX_QUOTED_VALUE`](crate::truncate::MAX_QUOTED_VALUE) bytes: a
    /// 256 KiB value costs no more than a short one in memory, notes and logs.
    pub value: String,
    /// Why it is not applied, and what happens instead.
    pub reason: String,
    pub kind: ProblemKind,
}

impl AnnotationError {
    /// A problem with `annotation`'s `value` (only its start is kept).
    pub fn new(annotation: &'static str, value: &str, reason: String, kind: ProblemKind) -> Self {
        AnnotationError {
            annotation,
            value: crate::truncate::quoted_value(value),
            reason,
            kind,
        }
    }
}

impl fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.kind {
            ProblemKind::Invalid => "ignored",
            ProblemKind::Unsupported => "not supported",
        };
        write!(
            f,
            "annotation {}={:?} {verb}: {}",
            self.annotation, self.value, self.reason
        )
    }
}

/// A Service's annotations, as the option parsers read them.
#[derive(Debug, Clone, Copy)]
pub struct Annotations<'a>(&'a BTreeMap<String, String>);

impl<'a> Annotations<'a> {
    /// The value of `key` with blanks around it removed, unless absent or blank.
    pub fn value(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// The value of `key` as given, if the annotation is present (even empty).
    pub fn raw(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).map(String::as_str)
    }
}

/// One per-Service option: the annotation keys it reads and the parser that sets it.
pub struct OptionParser {
    pub keys: &'static [&'static str],
    pub parse: fn(Annotations<'_>, &mut ServiceOptions),
}

/// Every option, in the order they are parsed.
pub const OPTIONS: &[OptionParser] = &[
    scheduler::OPTION,
    kube_router::LOCAL,
    kube_router::UNSUPPORTED,
];

impl ServiceOptions {
    /// The options `annotations` ask for; `None` when they ask for nothing (no annotation of ours).
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Arc<ServiceOptions>> {
        let map = annotations?;
        if !SERVICE_ANNOTATIONS.iter().any(|k| map.contains_key(*k)) {
            return None;
        }
        let mut options = ServiceOptions::default();
        for option in OPTIONS {
            (option.parse)(Annotations(map), &mut options);
        }
        (options != ServiceOptions::default()).then(|| Arc::new(options))
    }

    /// Records that `annotation`'s `value` is refused because of `reason`.
    pub fn refuse(&mut self, annotation: &'static str, value: &str, reason: String) {
        let e = AnnotationError::new(annotation, value, reason, ProblemKind::Invalid);
        self.problems.push(e);
    }

    /// Records that `annotation` is not supported; `instead` says what happens.
    pub fn unsupported(&mut self, annotation: &'static str, value: &str, instead: String) {
        let e = AnnotationError::new(annotation, value, instead, ProblemKind::Unsupported);
        self.problems.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_decoder_keeps_exactly_the_keys_the_parsers_read() {
        let read: BTreeSet<&str> = OPTIONS
            .iter()
            .flat_map(|o| o.keys.iter().copied())
            .collect();
        let kept: BTreeSet<&str> = SERVICE_ANNOTATIONS.iter().copied().collect();
        assert_eq!(read, kept);
        assert_eq!(
            kept.len(),
            SERVICE_ANNOTATIONS.len(),
            "a key is listed twice"
        );
    }

    #[test]
    fn no_annotation_of_ours_is_no_options() {
        assert_eq!(ServiceOptions::from_annotations(None), None);
        let map = BTreeMap::from([("other".to_string(), "x".to_string())]);
        assert_eq!(ServiceOptions::from_annotations(Some(&map)), None);
        // Blank values count as unset.
        let map = BTreeMap::from([(SCHEDULER.to_string(), " ".to_string())]);
        assert_eq!(ServiceOptions::from_annotations(Some(&map)), None);
    }

    #[test]
    fn long_values_are_shortened_at_a_character_boundary() {
        let long = "é".repeat(200);
        let e = AnnotationError::new(SCHEDULER, &long, "bad".into(), ProblemKind::Invalid);
        assert!(
            e.value.len() <= crate::truncate::MAX_QUOTED_VALUE,
            "{}",
            e.value.len()
        );
        assert!(e.value.ends_with("…(400 bytes)"), "{}", e.value);
        let short = AnnotationError::new(SCHEDULER, "rr", "bad".into(), ProblemKind::Invalid);
        assert_eq!(short.value, "rr");
    }
}
