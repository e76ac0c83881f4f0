//! What a Service's annotations ask for, as the option parsers ([`super::OPTIONS`]) fill it in: the
//! options, the problems found, and the parsers' shape.

use crate::scheduler::Scheduler;
use std::collections::BTreeMap;
use std::fmt;

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
pub struct Annotations<'a>(pub(super) &'a BTreeMap<String, String>);

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

/// A valid per-Service scheduler: this scheduler, with these scheduler flags on top of its default ones
/// (`mh-port` for `mh`), from scheduler annotation `source` (ours or its alias).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchedulerRequest {
    pub scheduler: Scheduler,
    pub flags: u32,
    pub source: &'static str,
}

impl ServiceOptions {
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
